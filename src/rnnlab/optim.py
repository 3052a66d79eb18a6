"""Optimizers, gradient clipping and learning-rate schedules.

Optimizers update a mapping of parameter arrays *in place* (so a model's live parameter views
see the change) and follow PyTorch's textbook updates, with g = grad + weight_decay · p:

- SGD:      v ← μ v + g;  p ← p − lr v                     (μ = 0: plain SGD)
- RMSProp:  s ← α s + (1 − α) g²;  p ← p − lr g / (√s + ε)
- Adam:     m ← β₁ m + (1 − β₁) g;  v ← β₂ v + (1 − β₂) g²;
            p ← p − lr (m / (1 − β₁ᵗ)) / (√(v / (1 − β₂ᵗ)) + ε)
- Adagrad:  s ← s + g²;  p ← p − lr g / (√s + ε)

Every optimizer and schedule has ``state_dict()`` / ``load_state_dict()`` made of plain arrays
and numbers, so checkpoints need no pickle.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np

from rnnlab.common import RowGradient
from rnnlab.compile import kernel, threaded_kernel
from rnnlab.engines.threads import split_rows

Params = MutableMapping[str, np.ndarray]
Grads = Mapping[str, np.ndarray]


class Optimizer:
    slots: tuple[str, ...] = ()

    def __init__(self, params: Params, lr: float, weight_decay: float = 0.0) -> None:
        if not lr > 0:
            raise ValueError(f"lr: expected a positive learning rate, got {lr!r}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay: expected >= 0, got {weight_decay!r}")
        self.params = params
        self.lr = float(lr)
        self.weight_decay = float(weight_decay)
        self.steps = 0
        self.state = {slot: {name: np.zeros_like(p) for name, p in params.items()} for slot in self.slots}

    def step(self, grads: Grads, grad_scale: float = 1.0) -> bool:
        """Update the live arrays in place with the gradients times ``grad_scale`` (global-norm
        clipping's factor): one compiled pass per parameter (``fused``) where the optimizer has one,
        else ``apply`` written back; both give the same bits. Returns whether every parameter is
        finite after the update (the fused pass finds out on the way)."""
        self.steps += 1
        fused = getattr(self, "fused", None)
        finite = True
        for name, p in self.params.items():
            if isinstance(grads[name], RowGradient):
                if self.takes_rows and p.flags.c_contiguous:
                    g = grads[name]
                    finite = _sgd_rows_kernel(p, g.rows, g.values.astype(p.dtype, copy=False), p.dtype.type(grad_scale),
                                              p.dtype.type(self.lr)) == 0 and finite
                    continue
                grads = {**grads, name: grads[name].dense()}
            if fused is not None and p.flags.c_contiguous and p.dtype in (np.float32, np.float64):
                g = np.ascontiguousarray(grads[name], dtype=p.dtype)
                finite = self._fused_pass(fused, name, p, g, grad_scale) == 0 and finite
            else:
                finite = self._apply_one(name, p, grads, grad_scale) and finite
        return finite

    def _fused_pass(self, fused, name: str, p: np.ndarray, g: np.ndarray, grad_scale: float) -> int:
        """The compiled update of one parameter, in blocks over the threads granted for it (the same
        bits: each entry's update is independent); → the count of entries that are not finite."""
        flat, g, scale = p.reshape(-1), g.reshape(-1), p.dtype.type(grad_scale)
        slots = [self.state[s][name].reshape(-1) for s in self.slots]
        return sum(split_rows(flat.size, lambda a, b: fused(flat[a:b], g[a:b], [s[a:b] for s in slots], self.steps,
                                                             self.lr, scale)))

    @property
    def takes_rows(self) -> bool:
        """Whether a step with a ``RowGradient`` may update only its rows: true where the rows the
        gradient leaves at zero would not move (plain SGD); every other rule gets the dense gradient."""
        return False

    def _apply_one(self, name: str, p: np.ndarray, grads: Grads, grad_scale: float = 1.0) -> bool:
        g = grads[name] if grad_scale == 1.0 else grads[name] * np.asarray(grad_scale).astype(grads[name].dtype)
        params, state = self.apply({name: p}, {name: g},
                                   {slot: {name: self.state[slot][name]} for slot in self.slots}, self.steps, self.lr)
        p[...] = params[name]
        for slot in self.slots:
            self.state[slot][name][...] = state[slot][name]
        return bool(np.isfinite(p).all())

    def apply(self, params: Mapping, grads: Grads, state: Mapping, t, lr, xp=np) -> tuple[dict, dict]:
        """Pure: one update of every parameter, weight decay included (g = grad + weight_decay · p)
        → (new parameters, new slot arrays ``{slot: {name: array}}``). ``step`` writes its result
        into the live arrays; the compiled replica trainer calls it under ``jax.numpy``."""
        new_params: dict = {}
        new_state: dict = {slot: {} for slot in self.slots}
        for name, p in params.items():
            g = grads[name]
            if self.weight_decay:
                g = g + self.weight_decay * p
            slots = {slot: state[slot][name] for slot in self.slots}
            delta, updated = self.update(g, slots, t, lr, xp)
            new_params[name] = p - delta.astype(p.dtype)
            for slot in self.slots:
                new_state[slot][name] = updated.get(slot, slots[slot])
        return new_params, new_state

    def update(self, g, slots: dict, t, lr, xp=np) -> tuple:
        """The rule as a pure function: gradient, slot arrays, step number t (from 1) and rate →
        (the amount to subtract from the parameter, the new slot arrays). ``xp`` is the array
        namespace, so the compiled replica trainer runs the same rule under ``jax.numpy``."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, np.ndarray]:
        out = {f"{slot}/{name}": a for slot, arrays in self.state.items() for name, a in arrays.items()}
        out["steps"] = np.array(self.steps)
        out["lr"] = np.array(self.lr)
        return out

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        for slot, arrays in self.state.items():
            for name in arrays:
                arrays[name][...] = state[f"{slot}/{name}"]
        self.steps = int(state["steps"])
        self.lr = float(state["lr"])


class SGD(Optimizer):
    """SGD, with heavy-ball momentum ``v ← μ v + g; p ← p − lr v`` or, with ``nesterov``, Nesterov's
    ``p ← p − lr (g + μ v)`` (Sutskever et al. 2013 in PyTorch's form). ``momentum_scales_lr`` multiplies the
    rate by (1 − μ), as PyLSTM's NesterovStep does by default (Greff et al. 2017): the searched rate and momentum
    then move the step's size apart."""

    slots = ("velocity",)

    def __init__(self, params: Params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False, momentum_scales_lr: bool = False) -> None:
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum: expected a value in [0, 1), got {momentum!r}")
        if nesterov and not momentum:
            raise ValueError("nesterov: needs a momentum above 0")
        self.momentum, self.nesterov = momentum, nesterov
        self.rate_factor = 1.0 - momentum if momentum_scales_lr else 1.0
        super().__init__(params, lr, weight_decay)

    def update(self, g, slots, t, lr, xp=np):
        lr = lr * self.rate_factor
        if not self.momentum:
            return lr * g, {}
        v = self.momentum * slots["velocity"] + g
        return lr * (g + self.momentum * v if self.nesterov else v), {"velocity": v}

    @property
    def takes_rows(self) -> bool:
        return not self.momentum and not self.weight_decay

    def fused(self, p, g, slots, t, lr, scale):
        dt = p.dtype.type
        return _sgd_kernel(p, g, slots[0], scale, dt(lr * self.rate_factor), dt(self.momentum),
                           dt(self.weight_decay), self.momentum > 0, self.weight_decay > 0, self.nesterov)


class RMSProp(Optimizer):
    slots = ("square_avg",)

    def __init__(self, params: Params, lr: float, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        self.alpha, self.eps = alpha, eps
        super().__init__(params, lr, weight_decay)

    def update(self, g, slots, t, lr, xp=np):
        s = self.alpha * slots["square_avg"] + (1 - self.alpha) * g * g
        return lr * g / (xp.sqrt(s) + self.eps), {"square_avg": s}

    def fused(self, p, g, slots, t, lr, scale):
        dt = p.dtype.type
        return _rmsprop_kernel(p, g, slots[0], scale, dt(lr), dt(self.alpha), dt(1 - self.alpha), dt(self.eps),
                               dt(self.weight_decay), self.weight_decay > 0)


class Adam(Optimizer):
    slots = ("m", "v")

    def __init__(self, params: Params, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        self.betas, self.eps = betas, eps
        super().__init__(params, lr, weight_decay)

    def update(self, g, slots, t, lr, xp=np):
        b1, b2 = self.betas
        m = b1 * slots["m"] + (1 - b1) * g
        v = b2 * slots["v"] + (1 - b2) * g * g
        m_hat = m / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        return lr * m_hat / (xp.sqrt(v_hat) + self.eps), {"m": m, "v": v}

    def fused(self, p, g, slots, t, lr, scale):
        dt = p.dtype.type
        b1, b2 = self.betas
        return _adam_kernel(p, g, slots[0], slots[1], scale, dt(lr), dt(b1), dt(1 - b1), dt(b2), dt(1 - b2),
                            dt(1 - b1**t), dt(1 - b2**t), dt(self.eps), dt(self.weight_decay), self.weight_decay > 0)


class Adagrad(Optimizer):
    slots = ("sum",)

    def __init__(self, params: Params, lr: float, eps: float = 1e-10, weight_decay: float = 0.0) -> None:
        self.eps = eps
        super().__init__(params, lr, weight_decay)

    def update(self, g, slots, t, lr, xp=np):
        s = slots["sum"] + g * g
        return lr * g / (xp.sqrt(s) + self.eps), {"sum": s}

    def fused(self, p, g, slots, t, lr, scale):
        dt = p.dtype.type
        return _adagrad_kernel(p, g, slots[0], scale, dt(lr), dt(self.eps), dt(self.weight_decay),
                               self.weight_decay > 0)


# -- the rules above as in-place loops (``Optimizer.fused``) ----------------------------------------
# One pass over a parameter, its gradient and its slots, with the operations of ``update`` in the same
# order and precision (scalars come in the arrays' dtype), so the bits equal ``apply``'s; NumPy's
# expression makes a temporary and a pass for each operator. Not fastmath: the order is the contract.
# Each also counts the parameters that came out non-finite (an integer sum, which still vectorises).

@threaded_kernel
def _sgd_kernel(p, g, velocity, scale, lr, momentum, weight_decay, use_momentum, decay, nesterov):
    bad = 0
    for i in range(p.size):
        gi = g[i] * scale
        if decay:
            gi = gi + weight_decay * p[i]
        if use_momentum:
            vi = momentum * velocity[i] + gi
            velocity[i] = vi
            gi = gi + momentum * vi if nesterov else vi
        p[i] = p[i] - lr * gi
        bad += (p[i] - p[i]) != 0.0          # x − x is 0 exactly when x is finite
    return bad


@kernel
def _sgd_rows_kernel(p, rows, values, scale, lr):   # plain SGD on the rows a RowGradient holds
    bad = 0
    for i in range(rows.shape[0]):
        row = p[rows[i]]
        for j in range(values.shape[1]):
            row[j] = row[j] - lr * (values[i, j] * scale)
            bad += (row[j] - row[j]) != 0.0
    return bad


@threaded_kernel
def _rmsprop_kernel(p, g, square_avg, scale, lr, alpha, one_minus_alpha, eps, weight_decay, decay):
    bad = 0
    for i in range(p.size):
        gi = g[i] * scale
        if decay:
            gi = gi + weight_decay * p[i]
        s = alpha * square_avg[i] + one_minus_alpha * gi * gi
        square_avg[i] = s
        p[i] = p[i] - lr * gi / (np.sqrt(s) + eps)
        bad += (p[i] - p[i]) != 0.0          # x − x is 0 exactly when x is finite
    return bad


@threaded_kernel
def _adam_kernel(p, g, m, v, scale, lr, b1, one_minus_b1, b2, one_minus_b2, correction1, correction2, eps,
                 weight_decay, decay):
    bad = 0
    for i in range(p.size):
        gi = g[i] * scale
        if decay:
            gi = gi + weight_decay * p[i]
        mi = b1 * m[i] + one_minus_b1 * gi
        vi = b2 * v[i] + one_minus_b2 * gi * gi
        m[i], v[i] = mi, vi
        p[i] = p[i] - lr * (mi / correction1) / (np.sqrt(vi / correction2) + eps)
        bad += (p[i] - p[i]) != 0.0          # x − x is 0 exactly when x is finite
    return bad


@threaded_kernel
def _adagrad_kernel(p, g, total, scale, lr, eps, weight_decay, decay):
    bad = 0
    for i in range(p.size):
        gi = g[i] * scale
        if decay:
            gi = gi + weight_decay * p[i]
        s = total[i] + gi * gi
        total[i] = s
        p[i] = p[i] - lr * gi / (np.sqrt(s) + eps)
        bad += (p[i] - p[i]) != 0.0          # x − x is 0 exactly when x is finite
    return bad


OPTIMIZERS = {"sgd": SGD, "rmsprop": RMSProp, "adam": Adam, "adagrad": Adagrad}


def make_optimizer(name: str, params: Params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0,
                   nesterov: bool = False, momentum_scales_lr: bool = False):
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer: unknown optimizer {name!r}; expected one of {tuple(OPTIMIZERS)}")
    if name == "sgd":
        return SGD(params, lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov,
                   momentum_scales_lr=momentum_scales_lr)
    if nesterov or momentum_scales_lr:
        raise ValueError(f"nesterov, momentum_scales_lr: settings of optimizer sgd, not {name}")
    return OPTIMIZERS[name](params, lr, weight_decay=weight_decay)


# -- clipping ---------------------------------------------------------------------------------


def global_norm(grads: Grads, xp=np):
    """The joint L2 norm of all gradients, accumulated in float64 (a ``RowGradient`` by its rows)."""
    values = (g.values if isinstance(g, RowGradient) else g for g in grads.values())
    return xp.sqrt(sum(xp.vdot(v, v).astype(xp.float64) for v in values))


def clip_global_norm(grads: Grads, max_norm: float, xp=np) -> tuple[dict, Any]:
    """Scale all gradients together so their joint L2 norm is at most ``max_norm``; returns the
    clipped gradients and the norm before clipping."""
    norm = global_norm(grads, xp)
    if xp is np and not norm > max_norm:  # nothing to scale: no copies
        return dict(grads), norm
    scale = xp.where(norm > max_norm, max_norm / norm, 1.0)
    return {k: g * scale.astype(g.dtype) for k, g in grads.items()}, norm


def clip_value(grads: Grads, limit: float, xp=np) -> dict:
    """Clip every gradient coefficient to [−limit, limit]."""
    return {k: xp.clip(g, -limit, limit) for k, g in grads.items()}


def clip_gradients(grads: Grads, value: float | None, norm: float | None, xp=np) -> dict:
    """Both clipping rules in the order training applies them: per coefficient, then the joint norm."""
    if value is not None:
        grads = clip_value(grads, value, xp)
    if norm is not None:
        grads, _ = clip_global_norm(grads, norm, xp)
    return dict(grads)


# -- schedules --------------------------------------------------------------------------------


class Schedule:
    """Sets the learning rate for each epoch. ``lr_for(epoch)`` is called before an epoch
    (epochs count from 0); ``observe(train_loss, dev_loss)`` after it, for the adaptive ones."""

    def __init__(self, lr0: float) -> None:
        self.lr0 = float(lr0)
        self.lr = float(lr0)

    def lr_for(self, epoch: int) -> float:
        return self.lr

    def observe(self, train_loss: float, dev_loss: float | None) -> None:
        pass

    def state_dict(self) -> dict[str, float]:
        return {k: v for k, v in vars(self).items() if isinstance(v, (int, float)) or v is None}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        """Set the numbers ``state_dict`` names, and only those: a stored key that is not one of this schedule's
        numbers (a method's name, from a damaged or hostile checkpoint) is refused."""
        unknown = sorted(set(state) - set(self.state_dict()))
        if unknown:
            raise ValueError(f"{type(self).__name__} keeps no {', '.join(map(str, unknown))}")
        for k, v in state.items():
            setattr(self, k, v)


class Constant(Schedule):
    pass


class StepDecay(Schedule):
    """lr0 · gamma^(number of milestones passed): S5 halves at epoch 20 (milestones=(20,))."""

    def __init__(self, lr0: float, milestones: tuple[int, ...] = (20,), gamma: float = 0.5) -> None:
        super().__init__(lr0)
        self.milestones, self.gamma = tuple(milestones), gamma

    def lr_for(self, epoch):
        self.lr = self.lr0 * self.gamma ** sum(epoch >= m for m in self.milestones)
        return self.lr


class Anneal(Schedule):
    """The coursework's lr0 · a / (a + epoch) (S4); a = 0 keeps lr0."""

    def __init__(self, lr0: float, a: float = 0.0) -> None:
        super().__init__(lr0)
        self.a = a

    def lr_for(self, epoch):
        self.lr = self.lr0 if self.a == 0 else self.lr0 * self.a / (self.a + epoch)
        return self.lr


class ExponentialAfter(Schedule):
    """lr0 · gamma^max(0, epoch − start + 1): Zaremba's ×0.5 per epoch after epoch 4 is
    gamma=0.5, start=4 (epochs counted from 0)."""

    def __init__(self, lr0: float, gamma: float = 0.5, start: int = 4) -> None:
        super().__init__(lr0)
        self.gamma, self.start = gamma, start

    def lr_for(self, epoch):
        self.lr = self.lr0 * self.gamma ** max(0, epoch - self.start + 1)
        return self.lr


class HalveOnRise(Schedule):
    """Halve the rate when an epoch's mean training loss is higher than the previous one (S2)."""

    def __init__(self, lr0: float) -> None:
        super().__init__(lr0)
        self.previous: float | None = None

    def observe(self, train_loss, dev_loss):
        if self.previous is not None and train_loss > self.previous:
            self.lr *= 0.5
        self.previous = train_loss


class ReduceOnPlateau(Schedule):
    """Multiply the rate by ``factor`` after ``patience`` epochs without a dev-loss improvement
    of at least ``min_delta`` (the training loss when there is no dev set)."""

    def __init__(self, lr0: float, factor: float = 0.5, patience: int = 2, min_delta: float = 1e-4) -> None:
        super().__init__(lr0)
        self.factor, self.patience, self.min_delta = factor, patience, min_delta
        self.best: float | None = None
        self.bad_epochs = 0

    def observe(self, train_loss, dev_loss):
        value = train_loss if dev_loss is None else dev_loss
        if self.best is None or value < self.best - self.min_delta:
            self.best, self.bad_epochs = value, 0
        else:
            self.bad_epochs += 1
            if self.bad_epochs >= self.patience:
                self.lr *= self.factor
                self.bad_epochs = 0


SCHEDULES = {"constant": Constant, "step": StepDecay, "anneal": Anneal, "exponential": ExponentialAfter,
             "halve-on-rise": HalveOnRise, "plateau": ReduceOnPlateau}


def make_schedule(name: str, lr0: float, **kwargs) -> Schedule:
    if name not in SCHEDULES:
        raise ValueError(f"schedule: unknown schedule {name!r}; expected one of {tuple(SCHEDULES)}")
    return SCHEDULES[name](lr0, **kwargs)
