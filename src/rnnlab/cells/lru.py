"""The linear recurrent unit (Orvieto et al., ICML 2023), in real arithmetic on (Re, Im) pairs.

    λ = exp(−exp(ν_log) + i exp(θ_log))                     (N,), |λ| < 1 for every ν_log
    s' = λ ⊙ s + exp(γ_log) ⊙ (B x)                          s complex (B, N), B x = x W_re + i x W_im
    y  = Re(C s') + x W_D                                    (B, hidden)

Written out on pairs (s = r + i m, λ = λ_r + i λ_i, C = C_re + i C_im stored (N, hidden) for row vectors):

    r' = λ_r r − λ_i m + γ ⊙ (x W_re),   m' = λ_i r + λ_r m + γ ⊙ (x W_im)
    y  = r' C_re − m' C_im + x W_D

Backward, with dy the error at y and (dr', dm') the errors reaching s' from later steps:

    G_r = dr' + dy C_reᵀ,   G_m = dm' − dy C_imᵀ                      (everything reaching s')
    dr = λ_r G_r + λ_i G_m,   dm = −λ_i G_r + λ_r G_m                 (the conjugate rotation: δ ⊙ conj(λ))
    ∂λ_r = G_r r + G_m m,   ∂λ_i = −G_r m + G_m r
    ∂ν_log = −e^{ν_log} |λ| (∂λ_r cos θ + ∂λ_i sin θ),  ∂θ_log = θ |λ| (−∂λ_r sin θ + ∂λ_i cos θ)
    ∂γ_log = γ ⊙ (G_r (x W_re) + G_m (x W_im)),   ∂(x W_re) = γ G_r,  ∂(x W_im) = γ G_m
    ∂C_re = Σ r'ᵀ dy,   ∂C_im = −Σ m'ᵀ dy

These are MODERN.md §1.3's complex formulas with ∂z := ∂L/∂Re z + i ∂L/∂Im z, taken apart; pairs sidestep the two
conventions JAX and PyTorch use for complex cotangents.
"""

from __future__ import annotations

import numpy as np

from rnnlab.cells.base import Cell, Option
from rnnlab.cells.registry import register_cell


def _lambda(p, xp):
    modulus = xp.exp(-xp.exp(p["nu_log"]))
    theta = xp.exp(p["theta_log"])
    return modulus, theta, modulus * xp.cos(theta), modulus * xp.sin(theta)


def lru_step(p, xw, state, n, skip=True, xp=np):
    _, r, m = state
    _, _, lam_r, lam_i = _lambda(p, xp)
    gamma = xp.exp(p["gamma_log"])
    u_r, u_i = xw[..., :n], xw[..., n:2 * n]
    r_new = lam_r * r - lam_i * m + gamma * u_r
    m_new = lam_i * r + lam_r * m + gamma * u_i
    y = r_new @ p["C_re"] - m_new @ p["C_im"]
    if skip:
        y = y + xw[..., 2 * n:]
    return (y, r_new, m_new), {"u_r": u_r, "u_i": u_i, "r": r_new, "m": m_new}


def lru_step_backward(p, dstate, cache, prev, n, skip=True, xp=np):
    dy, dr_new, dm_new = dstate
    _, r, m = prev
    modulus, theta, lam_r, lam_i = _lambda(p, xp)
    gamma = xp.exp(p["gamma_log"])
    u_r, u_i = cache["u_r"], cache["u_i"]
    G_r = dr_new + dy @ p["C_re"].T
    G_m = dm_new - dy @ p["C_im"].T
    d_lam_r = G_r * r + G_m * m
    d_lam_i = -G_r * m + G_m * r
    cos, sin = xp.cos(theta), xp.sin(theta)
    d_nu = -xp.exp(p["nu_log"]) * modulus * (d_lam_r * cos + d_lam_i * sin)
    d_theta = theta * modulus * (-d_lam_r * sin + d_lam_i * cos)
    d_gamma = gamma * (G_r * u_r + G_m * u_i)
    parts = [gamma * G_r, gamma * G_m] + ([dy] if skip else [])
    dxw = xp.concatenate(parts, axis=-1)
    dhw = xp.concatenate([dy, d_nu, d_theta, d_gamma], axis=-1)
    return (0.0 * dy, lam_r * G_r + lam_i * G_m, -lam_i * G_r + lam_r * G_m), dxw, dhw


@register_cell("lru")
class LRU(Cell):
    """The LRU: a complex diagonal, input-independent recurrence with the exponential parametrisation, ring
    initialisation and γ normalisation (Orvieto et al. 2023; minimal-LRU's ``lru/model.py``); equations above.

    State (y, Re s, Im s): y (B, hidden), the output, carried so that a padded step repeats it; Re s, Im s (B, N) with
    N = ``state_dim`` (0: hidden). Parameters: ``W_x`` (input_size, 2N + hidden) in block order B_re, B_im, D;
    ``b`` likewise when ``bias`` (the paper has none: pass bias=False); ``nu_log``, ``theta_log``, ``gamma_log`` (N,);
    ``C_re``, ``C_im`` (N, hidden). Initialised as minimal-LRU: λ uniform on the ring r_min ≤ |λ| ≤ r_max with phase
    in [0, max_phase], γ = √(1 − |λ|²); under the
    default ``init`` ("uniform") B ~ N(0, 1/(2·input_size)) per part and C ~ N(0, 1/N) per part, as the paper
    has them (another scheme draws these matrices as it draws any cell's).

    One named difference: the skip D ⊙ u of the paper needs input and output of one width; here it is a full map
    x W_D ~ N(0, 1/input_size) (``skip=False`` drops it, as a residual block makes it redundant). At input = hidden
    that is n² parameters where the paper has n: 4Nn + 3N + n² with bias=False.
    """

    title = "LRU"
    linear_state, complex_state = (1, 2), True       # λ on (Re, Im); y is the readout
    gates = 1
    state_size = 3
    options = (Option("state_dim", 0, int, "complex state size N of the LRU (0: the hidden size)"),
               Option("skip", True, bool, "the LRU's input skip D u, as a full input map"),
               Option("r_min", 0.0, float, "smallest |lambda| of the LRU's ring initialisation"),
               Option("r_max", 1.0, float, "largest |lambda| of the LRU's ring initialisation"),
               Option("max_phase", 6.28, float, "largest phase of lambda at initialisation (PathX: pi/10)"))

    def _configure(self, *args, **kwargs):
        super()._configure(*args, **kwargs)
        if self.state_dim < 0:
            raise ValueError(f"LRU: state_dim must be 0 (the hidden size) or positive, got {self.state_dim}")
        if not 0.0 <= self.r_min < self.r_max <= 1.0:
            raise ValueError(f"LRU: expected 0 <= r_min < r_max <= 1, got r_min={self.r_min}, r_max={self.r_max}")
        if not self.max_phase > 0:
            raise ValueError(f"LRU: max_phase must be positive, got {self.max_phase}")
        self.n = self.state_dim or self.hidden_size

    def state_shapes(self):
        return ((self.hidden_size,), (self.n,), (self.n,))

    def _width(self) -> int:
        return 2 * self.n + (self.hidden_size if self.skip else 0)

    def param_shapes(self):
        I, H, N = self.input_size, self.hidden_size, self.n
        shapes = {"W_x": (I, self._width())}
        if self.bias:
            shapes["b"] = (self._width(),)
        shapes.update({"nu_log": (N,), "theta_log": (N,), "gamma_log": (N,), "C_re": (N, H), "C_im": (N, H)})
        return shapes

    def initialize(self, rng):
        I, H, N, p = self.input_size, self.hidden_size, self.n, self.params
        u1, u2 = rng.uniform(size=N), rng.uniform(size=N)
        radius_sq = u1 * (self.r_max ** 2 - self.r_min ** 2) + self.r_min ** 2
        nu_log = np.log(-0.5 * np.log(np.maximum(radius_sq, 1e-300)))
        theta_log = np.log(self.max_phase * np.maximum(u2, 1e-12))
        modulus = np.exp(-np.exp(nu_log))
        p["nu_log"], p["theta_log"] = nu_log.astype(self.dtype), theta_log.astype(self.dtype)
        p["gamma_log"] = np.log(np.sqrt(1.0 - modulus ** 2)).astype(self.dtype)
        if self.init == "uniform":          # the default scheme is the paper's; another one draws the matrices
            W = rng.normal(0.0, np.sqrt(1.0 / (2 * I)), size=(I, 2 * N))
            if self.skip:
                W = np.concatenate([W, rng.normal(0.0, np.sqrt(1.0 / I), size=(I, H))], axis=1)
            p["W_x"] = W.astype(self.dtype)
            p["C_re"] = rng.normal(0.0, np.sqrt(1.0 / N), size=(N, H)).astype(self.dtype)
            p["C_im"] = rng.normal(0.0, np.sqrt(1.0 / N), size=(N, H)).astype(self.dtype)
            if "b" in p:
                p["b"] = np.zeros_like(p["b"])

    def step(self, p, xw, state, xp=np):
        return lru_step(p, xw, state, self.n, self.skip, xp)

    def step_backward(self, p, dstate, cache, prev, xp=np):
        return lru_step_backward(p, dstate, cache, prev, self.n, self.skip, xp)

    def recurrent_grads(self, p, prev_h, steps, dhw, xp=np):
        H, N = self.hidden_size, self.n
        dy = dhw[:, :H]
        total = dhw[:, H:].sum(axis=0)
        return {"nu_log": total[:N], "theta_log": total[N:2 * N], "gamma_log": total[2 * N:],
                "C_re": steps["r"].T @ dy, "C_im": -(steps["m"].T @ dy)}
