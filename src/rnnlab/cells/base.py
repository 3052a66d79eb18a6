"""What every recurrent cell shares: parameters, input checks, and the parameter gradients.

A cell supplies two pure functions, ``step`` (one time step of the equations) and ``step_backward``
(its adjoint), the formula for its recurrent-weight gradients, and (for the Numba engine) a pair of
fused kernels beside its equations. The time loops that run them are the engines
(``rnnlab.engines``); ``Cell.forward``/``Cell.backward`` check their inputs and hand them to the
cell's engine, looked up by name in ``ENGINES``, which the engines fill when ``rnnlab`` is imported:
a cell never imports an engine.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
import traceback
from collections.abc import Callable, ItemsView, Iterator, MutableMapping, ValuesView
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnlab.cells.cache import Cache, State
from rnnlab.cells.kernel_blas import projection_matmul
from rnnlab.common import check_back_steps, check_dtype, check_positive_int, scatter_add
from rnnlab.init import check_scheme, init_bias, init_weight

Array = np.ndarray
# engine name -> a function returning the engine module (``forward`` and ``backward``); see rnnlab.engines
ENGINES: dict[str, Callable[[], Any]] = {}


def check_mask(mask: Any, T: int, B: int, dtype) -> Array | None:
    """Mask (T, B) of 0/1 → (T, B, 1) in the cell's dtype, or None."""
    if mask is None:
        return None
    m = np.asarray(mask)
    if m.shape != (T, B):
        raise ValueError(f"mask: expected shape (T, B) = ({T}, {B}), got {m.shape}")
    if not np.all((m == 0) | (m == 1)):
        raise ValueError("mask: expected only 0/1 (or False/True) entries")
    return m.astype(dtype)[:, :, None]


def recurrent_preactivation(p: dict, xw, h):
    """xw + h W_h (+ b_h): the pre-activation of every block, for the cells whose blocks all read h."""
    a = xw + h @ p["W_h"]
    return a + p["b_h"] if "b_h" in p else a


class ParamView(MutableMapping):
    """A live view of several modules' parameters under the names ``"{prefix}.{name}"``.

    Reading or writing ``view["0.W_h"]`` reads or writes ``children["0"].params["W_h"]``, so a
    composite (a Stack, a model) exposes one flat dict without copying anything.
    """

    def __init__(self, children: dict) -> None:
        self._children = children

    def _split(self, key: str):
        prefix, _, name = key.partition(".")
        child = self._children.get(prefix)
        if child is not None and name in child.params:
            return child.params, name
        for prefix, child in self._children.items():      # a prefix with a dot in it
            if key.startswith(prefix + ".") and key[len(prefix) + 1:] in child.params:
                return child.params, key[len(prefix) + 1:]
        raise KeyError(key)

    def __getitem__(self, key: str) -> Array:
        params, name = self._split(key)
        return params[name]

    def __setitem__(self, key: str, value: Array) -> None:
        params, name = self._split(key)
        params[name] = value

    def __delitem__(self, key: str) -> None:
        raise TypeError("parameters cannot be removed from a module")

    def __iter__(self) -> Iterator[str]:
        for prefix, child in self._children.items():
            for name in child.params:
                yield f"{prefix}.{name}"

    def __len__(self) -> int:
        return sum(len(child.params) for child in self._children.values())

    # every training step walks the parameters (the update, the norm, weight noise): straight through
    # the children rather than Mapping's default of looking each name up again
    def items(self) -> ItemsView:
        return _ParamItems(self)

    def values(self) -> ValuesView:
        return _ParamValues(self)


class _ParamItems(ItemsView):
    def __iter__(self):
        for prefix, child in self._mapping._children.items():
            for name, value in child.params.items():
                yield f"{prefix}.{name}", value


class _ParamValues(ValuesView):
    def __iter__(self):
        for child in self._mapping._children.values():
            yield from child.params.values()


@dataclass(frozen=True)
class Option:
    """A constructor option that changes a cell's equations (an activation, a variant, an ablation).

    Declared on the cell class (``options = (Option(...), ...)``), so that the command line, TOML
    files, studies and sweeps can set it by name (``--activation relu``) without knowing the cell.
    """

    name: str
    default: Any
    convert: Callable[[Any], Any]
    help: str
    choices: tuple | None = None

    def check(self, value: Any, cell: str) -> Any:
        try:
            value = self.convert(value)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{cell}: invalid value {value!r} for option {self.name} ({err})") from None
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{cell}: invalid value {value!r} for option {self.name}; expected one of {self.choices}")
        return value


class Cell:
    """Base class of every recurrent cell; see RNN, GRU and LSTM for the equations and parameter names.

    A cell declares, as class attributes, the facts the framework needs without running it:

    - ``gates``: how many (B, hidden) blocks the input projection ``x W_x + b`` has (G);
    - ``state_size``: state components (2 for an LSTM's (h, c));
    - ``state_shapes()``: each component's shape after the batch axis, ``(hidden,)`` each unless the cell
      declares others (a matrix memory (heads, d, d), a per-channel state (hidden, N)); the first component is
      always the output h, (B, hidden), the one errors are injected into;
    - ``options``: its math-changing constructor options (``Option``); their values form ``config``,
      one frozen value that keys every compiled program;
    - ``param_shapes()``: every parameter's shape, computed from the configuration without
      allocating anything (budgets are matched from it);
    - ``recurrent_grads()``: what the recurrent parameters' gradients read.

    The parameters most cells share: ``W_x`` (input_size, G*hidden), ``W_h`` (hidden, G*hidden),
    ``b`` (G*hidden,) when ``bias``; ``b_h`` (G*hidden,) when ``recurrent_bias`` (a second bias
    on the recurrent side, as PyTorch's ``bias_hh``; redundant for the math but it changes
    parameter counts, e.g. the 13,314 of S5). The gates are fused in one matrix in PyTorch's order.

    ``engine``: ``"numpy"`` (the reference), ``"numba"`` (the cell's fused kernels), ``"jax"``, ``"scan"``
    (a cell linear in its state: the recurrence solved over all steps at once), ``"chunked"`` (a matrix state
    solved chunk by chunk: DeltaNet's, mLSTM's), or ``"auto"``: the chunked form where it measured faster, else
    Numba when the cell has fused kernels for its configuration, else the scan for a cell linear in its state, else
    JAX when it is installed, else NumPy (``engine_reason`` says why).

    ``linear_state``: the state components the step updates as s' = a(x) ⊙ s + b(x) (empty: the step is not
    linear in its state); with ``complex_state`` the two components are the real and imaginary parts of one
    complex diagonal state. Components not listed must be readouts the step never reads (``rnnlab.engines.scan``).
    """

    name: str = ""                 # the registry name (``register_cell``)
    title: str = ""                # how reports name the cell ("vanilla", "GRU"); default: its class name
    gates: int = 1
    state_size: int = 1
    options: tuple[Option, ...] = ()
    linear_state: tuple[int, ...] = ()
    complex_state: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__signature__ = _signature(cls)

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        bias: bool = True,
        recurrent_bias: bool = False,
        init: str = "uniform",
        init_scale: float | None = None,
        recurrent_init: str | None = None,
        seed: int | None = None,
        dtype: Any = np.float64,
        engine: str = "numpy",
        **options: Any,
    ) -> None:
        self._configure(input_size, hidden_size, bias, recurrent_bias, init, init_scale, recurrent_init, dtype, options)
        self.engine, self.engine_reason = self._choose_engine(engine)
        rng = np.random.default_rng(seed)
        self.params: dict[str, Array] = {name: self.init_param(name, shape, rng)
                                         for name, shape in self.param_shapes().items()}
        self.initialize(rng)

    def _configure(self, input_size, hidden_size, bias, recurrent_bias, init, init_scale, recurrent_init, dtype,
                   options: dict) -> None:
        """Everything but the parameter values: enough for ``param_shapes``."""
        cell = type(self).__name__
        self.input_size = check_positive_int(input_size, "input_size")
        self.hidden_size = check_positive_int(hidden_size, "hidden_size")
        if not isinstance(bias, (bool, np.bool_)):
            raise ValueError(f"bias: expected True or False, got {bias!r}")
        if not isinstance(recurrent_bias, (bool, np.bool_)):
            raise ValueError(f"recurrent_bias: expected True or False, got {recurrent_bias!r}")
        self.bias = bool(bias)
        self.recurrent_bias = bool(recurrent_bias) and self.bias
        self.init = check_scheme(init, "init")
        self.recurrent_init = check_scheme(recurrent_init or init, "recurrent_init")
        self.init_scale = init_scale
        self.dtype = check_dtype(dtype)
        declared = {o.name: o for o in self.options}
        unknown = sorted(set(options) - set(declared))
        if unknown:
            raise TypeError(f"{cell}: unknown option(s) {unknown}; its options are {sorted(declared) or 'none'}")
        for option in self.options:
            setattr(self, option.name, option.check(options.get(option.name, option.default), cell))
        self.config = (type(self),) + tuple((o.name, getattr(self, o.name)) for o in self.options)

    @classmethod
    def shapes_for(cls, input_size: int, hidden_size: int, *, bias: bool = True, recurrent_bias: bool = False,
                   **options: Any) -> dict[str, tuple[int, ...]]:
        """The parameter shapes of a cell built with these arguments, without allocating it."""
        return cls._unallocated(input_size, hidden_size, bias, recurrent_bias, options).param_shapes()

    @classmethod
    def _unallocated(cls, input_size: int, hidden_size: int, bias: bool, recurrent_bias: bool, options: dict) -> Cell:
        """A cell configured (sizes, biases, options) but with no parameters: its declared facts only."""
        cell = cls.__new__(cls)
        cell._configure(input_size, hidden_size, bias, recurrent_bias, "uniform", None, None, np.float64, options)
        return cell

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every parameter's shape, in the order they are initialised (and drawn from the seed)."""
        I, H, G = self.input_size, self.hidden_size, self.gates
        shapes = {"W_x": (I, G * H), "W_h": (H, G * H)}
        if self.bias:
            shapes["b"] = (G * H,)
            if self.recurrent_bias:
                shapes["b_h"] = (G * H,)
        return shapes

    def init_param(self, name: str, shape: tuple[int, ...], rng: np.random.Generator) -> Array:
        """A parameter's initial value: weight matrices gate block by gate block under ``init``
        (``recurrent_init`` for ``W_h``), vectors as biases (``rnnlab.init``)."""
        H = self.hidden_size
        if len(shape) == 1:
            return init_bias(rng, H, shape[0], self.init, self.init_scale, self.dtype)
        scheme = self.recurrent_init if name == "W_h" else self.init
        if len(shape) == 2 and shape[1] % H == 0:
            return init_weight(rng, shape[0], H, shape[1] // H, scheme, self.init_scale, self.dtype)
        # a width that is not whole gate blocks (S6's B and C of d_state columns), or a stack of matrices (heads):
        # blocks of hidden columns drawn under the same scheme, the last one cut to the width
        fan_in, width = int(np.prod(shape[:-1])), shape[-1]
        blocks = init_weight(rng, fan_in, H, -(-width // H), scheme, self.init_scale, self.dtype)
        return np.ascontiguousarray(blocks[:, :width]).reshape(shape)

    def initialize(self, rng: np.random.Generator) -> None:
        """Changes a cell makes to the drawn parameters (a forget bias, an identity matrix)."""

    def has_kernels(self) -> bool:
        """Whether the Numba engine has fused kernels for this cell in this configuration."""
        return hasattr(self, "fused_forward")

    def fused_adds_bias(self) -> bool:
        """Whether the cell's fused forward adds ``b`` inside its loop (then the Numba engine does not add it to
        the projected inputs first: one pass over (T, B, G·hidden) saved)."""
        return False

    def has_chunked_form(self) -> bool:
        """Whether the chunked engine can run this cell (a matrix state solved chunk by chunk)."""
        return hasattr(self, "chunked_forward")

    def chunked_pays(self) -> bool:
        """Whether ``auto`` runs this cell's chunked form rather than its fused loop (a measured rule, per cell)."""
        return False

    @classmethod
    def choose_engine(cls, engine: str, *, hidden_size: int, bias: bool = True, recurrent_bias: bool = False,
                      **options: Any) -> tuple[str, str]:
        """(the engine a cell built with these arguments runs on, why): ``auto`` resolved. The hidden size counts:
        the chunked forms' rule reads the head size."""
        return cls._unallocated(2, hidden_size, bias, recurrent_bias, options)._choose_engine(engine)

    def _choose_engine(self, engine: str) -> tuple[str, str]:
        cell = type(self).__name__
        if engine == "auto":
            if self.has_chunked_form() and self.chunked_pays() and "chunked" in ENGINES:
                return "chunked", (f"auto: chunked ({cell}'s chunked form measured faster than its fused loop at "
                                   "this head size)")
            if self.has_kernels() and "numba" in ENGINES:
                return "numba", f"auto: numba ({cell} has fused kernels)"
            if self.linear_state and "scan" in ENGINES:
                return "scan", (f"auto: scan ({cell} is linear in its state: solved at once where that measured "
                                "faster, its step loop elsewhere)")
            if importlib.util.find_spec("jax") is not None and "jax" in ENGINES:
                return "jax", f"auto: jax ({cell} has no fused kernels; JAX compiles its step)"
            return "numpy", f"auto: numpy ({cell} has no fused kernels and JAX is not installed)"
        if engine not in ENGINES:
            raise ValueError(f"engine: unknown engine {engine!r}; expected one of {('auto',) + tuple(ENGINES)}")
        if engine == "jax" and importlib.util.find_spec("jax") is None:
            raise ValueError("engine jax: needs JAX, which is not installed; pip install 'rnnlab[jax]', or choose "
                             "--engine numpy (the reference) or auto")
        if engine == "scan" and not self.linear_state:
            raise ValueError(f"engine scan: {cell}'s step is not linear in its state (it declares no linear_state); "
                             "use engine='auto', 'jax' or 'numpy'")
        if engine == "chunked" and not self.has_chunked_form():
            raise ValueError(f"engine chunked: {cell} has no chunked form (DeltaNet, Gated DeltaNet and mLSTM have "
                             "one); use engine='auto', 'numba', 'jax' or 'numpy'")
        if engine == "numba" and not self.has_kernels():
            raise ValueError(f"engine: {cell} has no fused Numba kernels in this configuration; use engine='auto', "
                             "'jax' or 'numpy'")
        return engine, engine

    # -- the cell's math, supplied by subclasses ---------------------------------------------
    def step(self, p: dict[str, Array], xw: Array, state: State, xp=np) -> tuple[State, dict[str, Array]]:
        """One step: xw (B, G*H) is the projected input x_t W_x + b; returns (new state, cache).
        ``xp`` is the array namespace (NumPy, or jax.numpy for the compiled engine)."""
        raise NotImplementedError

    def step_backward(
        self, p: dict[str, Array], dstate: State, cache: dict[str, Array], prev: State, xp=np
    ) -> tuple[State, Array, Array]:
        """Adjoint of ``step``; leading axes of dstate broadcast (they carry BPTT ages).

        Returns (dstate_prev, dxw, dhw): dxw is the gradient of the input pre-activation
        ``x W_x + b`` and dhw that of the recurrent pre-activation ``h W_h + b_h``.
        """
        raise NotImplementedError

    def recurrent_grads(self, p: dict[str, Array], prev_h: Array, steps: dict[str, Array], dhw: Array,
                        xp=np) -> dict:
        """Gradients of the recurrent parameters from dhw (T*B, G*H) and prev_h (T*B, H)."""
        grads = {"W_h": projection_matmul(prev_h.T, dhw)} if "W_h" in p else {}
        if "b_h" in p:
            grads["b_h"] = dhw.sum(axis=0)
        return grads

    def state_shapes(self) -> tuple[tuple[int, ...], ...]:
        """Each state component's shape after the batch axis; the first is the output h, ``(hidden,)``."""
        return ((self.hidden_size,),) * self.state_size

    def random_state(self, rng: np.random.Generator, B: int) -> State:
        """A state drawn for the checks (``check_cell``): N(0, 0.5²) in every component unless the cell's
        equations need a component in a range (a normaliser kept positive)."""
        return tuple(rng.normal(scale=0.5, size=(B,) + shape) for shape in self.state_shapes())

    # -- the public interface -----------------------------------------------------------------
    def num_params(self) -> int:
        return int(sum(v.size for v in self.params.values()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.input_size}, {self.hidden_size}, params={self.num_params()})"

    def _initial_state(self, h0: Any, B: int) -> State:
        shapes = [(B,) + shape for shape in self.state_shapes()]
        if h0 is None:
            return tuple(np.zeros(shape, self.dtype) for shape in shapes)
        parts = (h0,) if self.state_size == 1 else tuple(h0)
        if len(parts) != self.state_size:
            vectors = all(shape == (B, self.hidden_size) for shape in shapes)
            what = "an (h, c) pair" if self.state_size == 2 and vectors else \
                f"{self.state_size} arrays of shapes {', '.join(map(str, shapes))}"
            raise ValueError(f"h0: expected {what} for {type(self).__name__}, got {len(parts)} arrays")
        out = []
        for i, (part, shape) in enumerate(zip(parts, shapes)):
            a = np.asarray(part, dtype=self.dtype)
            if a.shape != shape:
                if shape == (B, self.hidden_size):
                    raise ValueError(f"h0: expected shape (B, hidden_size) = {shape}, got {a.shape}")
                raise ValueError(f"h0[{i}]: expected shape {shape} (B first), got {a.shape}")
            out.append(a)
        return tuple(out)

    def _check_input(self, x: Any) -> Array:
        x = np.asarray(x)
        if x.ndim == 2 and np.issubdtype(x.dtype, np.integer):   # token ids: one-hot rows, read by row lookups
            if x.shape[0] < 1 or x.min() < 0 or x.max() >= self.input_size:
                raise ValueError(f"x: expected token ids (T, B) in [0, {self.input_size}) with T >= 1, got shape "
                                 f"{x.shape} and ids in [{x.min()}, {x.max()}]")
            return x
        if x.ndim != 3 or x.shape[2] != self.input_size or x.shape[0] < 1:
            raise ValueError(
                f"x: expected shape (T, B, input_size={self.input_size}) with T >= 1, got {x.shape}"
            )
        return x.astype(self.dtype, copy=False)

    def forward(self, x: Any, h0: Any = None, mask: Any = None) -> tuple[Array, Cache]:
        """Run the cell over a sequence.

        x: (T, B, input_size), or (T, B) integer token ids standing for one-hot rows (the input
        projection is then a row lookup of W_x, its gradient a scatter-add of rows, and no gradient
        with respect to the ids is computed); h0: (B, hidden) or, for LSTM, an (h, c) pair; None
        means zeros; mask: (T, B) of 0/1 or None. Returns hs (T, B, hidden) and the cache for
        ``backward``.
        """
        x = self._check_input(x)
        T, B = x.shape[:2]
        state = self._initial_state(h0, B)
        m = check_mask(mask, T, B, self.dtype)
        with _user_code_named(self):
            if not getattr(self, "_step_checked", False):
                self._check_step(x, state)
            return ENGINES[self.engine]().forward(self, x, state, m)

    def _check_step(self, x: Array, state: State) -> None:
        """Run ``step`` and ``step_backward`` once, in NumPy, on the first step of the first input this
        cell sees, and check the shapes they return against the declared ones: a cell (a user's above
        all) that returns the wrong shape is named with its step and the shapes, instead of failing later
        inside a loop or a compiled scan."""
        B, H = x.shape[1], self.hidden_size
        p = self.params
        xw = (p["W_x"][x[0]] if x.ndim == 2 else x[0] @ p["W_x"]) + (p["b"] if "b" in p else 0)
        who = f"cell {getattr(type(self), 'name', '') or type(self).__name__}"

        shapes = [(B,) + shape for shape in self.state_shapes()]

        def check(what: str, parts: tuple, expected: list) -> None:
            got = [np.shape(a) for a in parts]
            if len(parts) != len(expected) or any(g != e for g, e in zip(got, expected)):
                shapes_text = f"shape {expected[0]}" if len(set(expected)) == 1 else \
                    "shapes " + ", ".join(map(str, expected))
                raise ValueError(f"{who}: {what} has shape(s) {got}; expected {len(expected)} array(s) of "
                                 f"{shapes_text} (B = {B}, hidden = {H})")

        new, cache = self.step(p, xw, state)
        new = tuple(new) if isinstance(new, (tuple, list)) else (new,)
        check("step's returned state", new, shapes)
        dprev, dxw, _ = self.step_backward(p, tuple(np.ones_like(s) for s in new), cache, state)
        dprev = tuple(dprev) if isinstance(dprev, (tuple, list)) else (dprev,)
        check("step_backward's state gradient", dprev, shapes)
        check("step_backward's input gradient dxw", (dxw,), [xw.shape])
        self._step_checked = True

    def backward(self, dhs: Any, cache: Cache, back_steps: int | None = None, dh_out: Array | None = None,
                 need_dx: bool = True):
        """Backpropagation through time.

        dhs: (T, B, hidden), the error injected at each step (dL/dh_t from outside the cell).
        back_steps: None for full BPTT; k >= 0 truncates (see ``rnnlab.engines.loops``).
        dh_out: optional (T, B, hidden) array that receives the total error reaching each h_t
        (its injection plus everything flowing back from later steps): the gradient-flow analyses
        read ‖∂L/∂h_t‖ from it.
        Returns (grads keyed like ``params``, dx (T, B, input_size), dh0), with dh0 shaped like h0;
        dx is None where the inputs were token ids or ``need_dx`` is False (nothing upstream of the
        inputs learns: its matrix product is skipped).
        """
        k = check_back_steps(back_steps)
        T, B = cache.x.shape[:2]
        H = self.hidden_size
        dhs = np.asarray(dhs, dtype=self.dtype)
        if dhs.shape != (T, B, H):
            raise ValueError(f"dhs: expected shape (T, B, hidden) = ({T}, {B}, {H}), got {dhs.shape}")
        with _user_code_named(self):
            return ENGINES[self.engine]().backward(self, dhs, cache, k, dh_out, need_dx)

    def param_grads(self, p, x, prev_h, steps, dxw, dhw, xp=np) -> dict[str, Array]:
        """All parameter gradients as matmuls over the T*B rows, from the pre-activation gradients."""
        T, B = x.shape[:2]
        rows = T * B
        # dhw may come summed over rows already (one row: S6's kernel sums A_log's and D's gradients as it goes)
        dxw2, dhw2 = dxw.reshape(rows, -1), dhw.reshape(-1, dhw.shape[-1])
        if x.ndim == 2:      # token ids: the rows of W_x they looked up receive their pre-activation gradients
            grads = {"W_x": scatter_add(xp.zeros_like(p["W_x"]), x.reshape(-1), dxw2, xp)}
        else:
            grads = {"W_x": projection_matmul(x.reshape(rows, -1).T, dxw2)}
        flat = {name: v.reshape((rows,) + v.shape[2:]) for name, v in steps.items()}
        grads.update(self.recurrent_grads(p, prev_h.reshape(rows, -1), flat, dhw2, xp))
        if "b" in p:
            grads["b"] = dxw2.sum(axis=0)
        missing = sorted(set(p) - set(grads))
        if missing:
            raise ValueError(f"{type(self).__name__}.recurrent_grads returned no gradient for {missing} "
                             f"(the parameters are {sorted(p)})")
        return {name: grads[name] for name in p}


USER_MODULE_PREFIX = "rnnlab_user_cell_"     # the modules ``registry.load_cell_file`` imports a cell file into


@contextmanager
def _user_code_named(cell: Cell) -> Iterator[None]:
    """An exception raised inside a cell file's own code (its ``step``, ``step_backward`` or a helper) becomes one
    line naming the cell, the file, the function and its line, instead of a traceback through rnnlab's loops. An
    error raised in rnnlab's own code passes unchanged."""
    try:
        yield
    except Exception as err:
        module = sys.modules.get(type(cell).__module__)
        source = getattr(module, "__file__", None) if type(cell).__module__.startswith(USER_MODULE_PREFIX) else None
        frames = [f for f in traceback.extract_tb(err.__traceback__)
                  if source and os.path.realpath(f.filename) == os.path.realpath(source)]
        if not frames:
            raise
        where = frames[-1]
        raise ValueError(f"cell {type(cell).__name__} ({source}): {where.name} raised {type(err).__name__}: {err} "
                         f"(line {where.lineno}: {where.line})") from None


def _signature(cls: type) -> inspect.Signature:
    """The constructor's signature as a user reads it: the base keywords and the cell's declared
    options as explicit keyword arguments (``help(rnnlab.RNN)`` shows ``activation='tanh'``)."""
    base = inspect.signature(Cell.__init__)
    params = [p for p in base.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD][1:]  # no self
    params += [inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default) for o in cls.options]
    return base.replace(parameters=params)


class InputDrivenCell(Cell):
    """A cell whose gates and candidate read only x (minGRU, minLSTM, the diagonal linear RNNs): no ``W_h`` and no
    ``b_h``, so no recurrent-weight gradients unless the cell adds parameters of its own (RG-LRU's Λ)."""

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes = super().param_shapes()
        del shapes["W_h"]
        shapes.pop("b_h", None)
        return shapes

    def recurrent_grads(self, p, prev_h, steps, dhw, xp=np) -> dict:
        return {}
