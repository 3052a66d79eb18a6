"""The modern recurrences against independent PyTorch implementations of the equations in MODERN.md.

Each reference below is written from the paper's form, not rnnlab's: minLSTM as the log-space (Heinsen) scan of the
official code, the LRU in complex arithmetic, S6 in ``selective_scan_ref``'s einsum form, RG-LRU with a = σ(−Λ)^(c r),
sLSTM and mLSTM unstabilised (i = exp ĩ), the delta rule in the paper's d_v × d_k orientation. The forward must agree
to 1e-12 and every gradient (parameters, inputs, initial state) to 1e-9 against torch.autograd, in float64, from a
non-zero initial state. check-cell (``tests/test_cell_zoo.py``) covers finite differences, masks and truncation.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import rnnlab

torch = pytest.importorskip("torch", reason="the PyTorch references need torch (pip install torch==2.13.0)")

T, B, I, H = 7, 3, 3, 4


def _t(a, grad=True):
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def _split(a, widths):
    out, start = [], 0
    for w in widths:
        out.append(a[..., start:start + w])
        start += w
    return out


# -- the references (torch, float64) --------------------------------------------------------------------------

def ref_minlstm(p, x, h0):
    """Log space, as minRNNs' parallel path: log f′ = −softplus(s), log i′ = −softplus(−s), s = sp(−f̃) − sp(−ĩ)."""
    xw = x @ p["W_x"] + p["b"]
    h_raw, f_t, i_t = _split(xw, (H, H, H))
    s = torch.nn.functional.softplus(-f_t) - torch.nn.functional.softplus(-i_t)
    log_f, log_i = -torch.nn.functional.softplus(s), -torch.nn.functional.softplus(-s)
    log_g = torch.where(h_raw >= 0, torch.log(torch.relu(h_raw) + 0.5), -torch.nn.functional.softplus(-h_raw))
    a_star = torch.cumsum(log_f, dim=0)
    log_values = torch.cat([torch.log(h0)[None], log_i + log_g], dim=0)
    a_star = torch.cat([torch.zeros_like(a_star[:1]), a_star], dim=0)
    log_h = a_star + torch.logcumsumexp(log_values - a_star, dim=0)
    return torch.exp(log_h[1:])


def ref_diag_linear(p, x, h0, signed):
    xw = x @ p["W_x"] + p["b"]
    h, out = h0, []
    for t in range(T):
        a_pre, b = _split(xw[t], (H, H))
        a = torch.tanh(a_pre / 2) if signed else torch.sigmoid(a_pre)       # 2σ(z) − 1 = tanh(z/2)
        h = a * h + b
        out.append(h)
    return torch.stack(out)


def ref_rglru(p, x, h0):
    xw = x @ p["W_x"] + p["b"]
    h, out = h0, []
    base = torch.sigmoid(-p["Lambda"])
    for t in range(T):
        u, r_t, i_t = _split(xw[t], (H, H, H))
        a = base ** (8.0 * torch.sigmoid(r_t))
        h = a * h + torch.sqrt(1 - a ** 2) * (torch.sigmoid(i_t) * u)
        out.append(h)
    return torch.stack(out)


def ref_s6(p, x, S0, N, signed):
    xw = x @ p["W_x"] + p["b"]
    u, dt, Bm, Cm = _split(xw, (H, H, N, N))
    delta = torch.nn.functional.softplus(dt)
    A = -torch.exp(p["A_log"])
    S, ys = S0, []
    for t in range(T):
        deltaA = torch.exp(torch.einsum("bd,dn->bdn", delta[t], A))
        if signed:
            deltaA = 2 * deltaA - 1
        S = deltaA * S + torch.einsum("bd,bn,bd->bdn", delta[t], Bm[t], u[t])
        ys.append(torch.einsum("bdn,bn->bd", S, Cm[t]) + p["D"] * u[t])
    return torch.stack(ys)


def ref_lru(p, x, s0, N):
    xw = x @ p["W_x"] + p["b"]
    bu = torch.complex(xw[..., :N], xw[..., N:2 * N])
    lam = torch.exp(torch.complex(-torch.exp(p["nu_log"]), torch.exp(p["theta_log"])))
    C = torch.complex(p["C_re"], p["C_im"])
    s, ys = s0, []
    for t in range(T):
        s = lam * s + torch.exp(p["gamma_log"]) * bu[t]
        ys.append((s @ C).real + xw[t, :, 2 * N:])
    return torch.stack(ys)


def _block_diagonal_R(R, NH):
    """R (NH, d, 4d) → the full (H, 4H) map in xw's gate-major layout."""
    d = R.shape[1]
    rows = []
    for head in range(NH):
        blocks = [torch.zeros(d, H, dtype=R.dtype) for _ in range(4)]
        for g in range(4):
            blocks[g] = torch.cat([torch.zeros(d, head * d, dtype=R.dtype), R[head, :, g * d:(g + 1) * d],
                                   torch.zeros(d, H - (head + 1) * d, dtype=R.dtype)], dim=1)
        rows.append(torch.cat(blocks, dim=1))
    return torch.cat(rows, dim=0)


def ref_slstm(p, x, state0, NH, exp_forget):
    """Unstabilised: i = exp(ĩ), f = σ(f̃) (or exp f̃); the stored (c, n) scaled by exp(m) are the true ones."""
    h, c, n, m = state0
    c, n = c * torch.exp(m), n * torch.exp(m)
    R = _block_diagonal_R(p["R"], NH)
    out = []
    for t in range(T):
        i_t, f_t, z_t, o_t = _split(x[t] @ p["W_x"] + p["b"] + h @ R, (H, H, H, H))
        f = torch.exp(f_t) if exp_forget else torch.sigmoid(f_t)
        c = f * c + torch.exp(i_t) * torch.tanh(z_t)
        n = f * n + torch.exp(i_t)
        h = torch.sigmoid(o_t) * c / n
        out.append(h)
    return torch.stack(out)


def ref_mlstm(p, x, state0, NH):
    """Unstabilised, C in the paper's d_v × d_k orientation; m still runs (the 1e-6 of the stabilised
    denominator makes the output depend on it: h̃ = C q / (max(|nᵀq|, 1) + 1e-6 exp(m)))."""
    _, C, n, m = state0
    d = H // NH
    C = C.transpose(-1, -2) * torch.exp(m)[..., None, None]
    n = n * torch.exp(m)[..., None]
    xw = x @ p["W_x"] + p["b"]
    out = []
    for t in range(T):
        q, k, v, i_t, f_t, o_t = _split(xw[t], (H, H, H, NH, NH, H))
        q, k, v = (a.reshape(B, NH, d) for a in (q, k, v))
        k = k / d ** 0.5
        f = torch.sigmoid(f_t)
        m = torch.maximum(torch.log(f) + m, i_t)
        C = f[..., None, None] * C + torch.exp(i_t)[..., None, None] * v[..., :, None] * k[..., None, :]
        n = f[..., None] * n + torch.exp(i_t)[..., None] * k
        qn = (n * q).sum(-1)
        h_tilde = (C @ q[..., None])[..., 0] / (torch.maximum(qn.abs(), torch.ones_like(qn)) + 1e-6 * torch.exp(m))[
            ..., None]
        out.append(torch.sigmoid(o_t) * h_tilde.reshape(B, H))
    return torch.stack(out)


def ref_delta(p, x, S0, NH, gated, signed):
    """S (d_v × d_k): S ← α S (I − β k kᵀ) + β v kᵀ, o = S q; q and k L2-normalised, q scaled by d^−½."""
    d = H // NH
    S = S0.transpose(-1, -2)
    xw = x @ p["W_x"] + p["b"]
    eye = torch.eye(d, dtype=torch.float64)
    out = []
    for t in range(T):
        q, k, v, beta_t, *alpha_t = _split(xw[t], (H, H, H, NH) + ((NH,) if gated else ()))
        q, k, v = (a.reshape(B, NH, d) for a in (q, k, v))
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) / d ** 0.5
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        beta = torch.sigmoid(beta_t) * (2 if signed else 1)
        if gated:
            alpha = torch.exp(-torch.exp(p["A_log"]) * torch.nn.functional.softplus(alpha_t[0] + p["dt_bias"]))
            S = alpha[..., None, None] * S
        S = S @ (eye - beta[..., None, None] * k[..., :, None] * k[..., None, :]) \
            + beta[..., None, None] * v[..., :, None] * k[..., None, :]
        out.append((S @ q[..., None])[..., 0].reshape(B, H))
    return torch.stack(out)


# -- the cases ---------------------------------------------------------------------------------------------

def _case(name, options, reference, state_to_torch, positive_state=False):
    return pytest.param(name, options, reference, state_to_torch, positive_state,
                        id=name + "".join(f"-{v}" for v in options.values()))


CASES = [
    _case("minlstm", {}, lambda p, x, s, c: ref_minlstm(p, x, s[0]), None, positive_state=True),
    *(_case("diag-linear", {"eigenvalues": e}, lambda p, x, s, c: ref_diag_linear(p, x, s[0], c.eigenvalues ==
                                                                                   "signed"), None)
      for e in ("nonnegative", "signed")),
    _case("rglru", {}, lambda p, x, s, c: ref_rglru(p, x, s[0]), None),
    *(_case("s6", {"d_state": 3, "eigenvalues": e},
            lambda p, x, s, c: ref_s6(p, x, s[1], c.d_state, c.eigenvalues == "signed"), None)
      for e in ("nonnegative", "signed")),
    _case("lru", {"state_dim": 5}, lambda p, x, s, c: ref_lru(p, x, torch.complex(s[1], s[2]), c.n), None),
    *(_case("slstm", {"heads": heads, "forget_gate": f},
            lambda p, x, s, c: ref_slstm(p, x, s, c.heads, c.forget_gate == "exp"), None)
      for heads, f in ((1, "sigmoid"), (2, "sigmoid"), (2, "exp"))),
    *(_case("mlstm", {"heads": heads}, lambda p, x, s, c: ref_mlstm(p, x, s, c.heads), None) for heads in (1, 2)),
    *(_case(name, {"heads": heads, "eigenvalues": e},
            lambda p, x, s, c: ref_delta(p, x, s[1], c.heads, c.gated, c.eigenvalues == "signed"), None)
      for name in ("deltanet", "gated-deltanet") for heads, e in ((1, "nonnegative"), (2, "signed"))),
]


@pytest.mark.parametrize("name, options, reference, state_to_torch, positive_state", CASES)
def test_each_modern_cell_equals_its_pytorch_reference_forward_and_backward(name, options, reference, state_to_torch,
                                                                            positive_state):
    rng = np.random.default_rng(11)
    cell = rnnlab.make_cell(name, I, H, seed=3, init="gaussian", init_scale=0.5, **options)
    if name == "slstm":          # xLSTM's zero init of R would leave the recurrent path untested
        cell.params["R"] = rng.normal(scale=0.5, size=cell.params["R"].shape)
    x = rng.normal(size=(T, B, I))
    state0 = cell.random_state(rng, B)
    if positive_state:           # the log-space scan needs h0 > 0 (as minLSTM's g keeps every h)
        state0 = tuple(np.abs(s) + 0.1 for s in state0)
    dhs = rng.normal(size=(T, B, H))
    hs, cache = cell.forward(x, state0[0] if cell.state_size == 1 else state0)
    grads, dx, dh0 = cell.backward(dhs, cache)
    dh0 = (dh0,) if cell.state_size == 1 else tuple(dh0)

    p = {n: _t(v) for n, v in cell.params.items()}
    xt, st = _t(x), tuple(_t(s) for s in state0)
    out = reference(p, xt, st, cell)
    np.testing.assert_allclose(out.detach().numpy(), hs, rtol=1e-12, atol=1e-12)
    (out * _t(dhs, grad=False)).sum().backward()
    for n, v in p.items():
        np.testing.assert_allclose(grads[n], v.grad.numpy(), rtol=1e-9, atol=1e-11, err_msg=f"{name}: gradient of {n}")
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-9, atol=1e-11, err_msg=f"{name}: gradient of x")
    for i, s in enumerate(st):
        expected = np.zeros_like(state0[i]) if s.grad is None else s.grad.numpy()
        np.testing.assert_allclose(dh0[i], expected, rtol=1e-9, atol=1e-11, err_msg=f"{name}: gradient of h0[{i}]")


# -- the state protocol, options and the command line ---------------------------------------------------------

def test_a_state_that_is_not_b_by_hidden_is_checked_and_named():
    cell = rnnlab.make_cell("s6", 3, 4, d_state=2)
    assert cell.state_shapes() == ((4,), (4, 2))
    x = np.zeros((5, 2, 3))
    with pytest.raises(ValueError, match=r"h0\[1\]: expected shape \(2, 4, 2\) \(B first\), got \(2, 4\)"):
        cell.forward(x, (np.zeros((2, 4)), np.zeros((2, 4))))
    with pytest.raises(ValueError, match=r"h0: expected 2 arrays of shapes \(2, 4\), \(2, 4, 2\) for S6, got 1"):
        cell.forward(x, (np.zeros((2, 4)),))
    hs, cache = cell.forward(x)
    assert [s.shape for s in cache.states] == [(5, 2, 4), (5, 2, 4, 2)]
    assert [np.shape(s) for s in cache.final_state] == [(2, 4), (2, 4, 2)]


def test_a_padded_step_keeps_a_matrix_state_and_passes_its_error_through():
    cell = rnnlab.make_cell("deltanet", 3, 4, heads=2, seed=0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 2, 3))
    mask = np.ones((4, 2))
    mask[2:, 1] = 0.0
    hs, cache = cell.forward(x, mask=mask)
    np.testing.assert_array_equal(cache.states[1][3, 1], cache.states[1][1, 1])
    np.testing.assert_array_equal(hs[3, 1], hs[1, 1])
    full, _ = cell.forward(x[:2, 1:])
    np.testing.assert_allclose(hs[:2, 1:], full, rtol=0, atol=1e-15)


@pytest.mark.parametrize("name", ["slstm", "mlstm", "deltanet", "gated-deltanet"])
def test_heads_must_divide_the_hidden_size(name):
    with pytest.raises(ValueError, match="heads must divide hidden_size \\(6\\), got 4"):
        rnnlab.make_cell(name, 3, 6, heads=4)


def test_lru_options_are_range_checked():
    with pytest.raises(ValueError, match="expected 0 <= r_min < r_max <= 1"):
        rnnlab.make_cell("lru", 3, 4, r_min=0.9, r_max=0.5)
    cell = rnnlab.make_cell("lru", 3, 4, r_min=0.9, r_max=0.99, max_phase=0.314, seed=0)
    modulus = np.exp(-np.exp(cell.params["nu_log"]))
    assert np.all((modulus >= 0.9 - 1e-12) & (modulus <= 0.99 + 1e-12))
    assert np.all(np.exp(cell.params["theta_log"]) <= 0.314)
    np.testing.assert_allclose(np.exp(cell.params["gamma_log"]), np.sqrt(1 - modulus ** 2))


def test_the_published_initialisations():
    s6 = rnnlab.make_cell("s6", 3, 4, d_state=5, seed=0)
    np.testing.assert_allclose(np.exp(s6.params["A_log"]), np.tile(np.arange(1, 6), (4, 1)))
    dt = np.logaddexp(0, s6.params["b"][4:8])
    assert np.all((dt >= 1e-3 - 1e-12) & (dt <= 0.1 + 1e-12)) and np.all(s6.params["D"] == 1)
    rglru = rnnlab.make_cell("rglru", 3, 50, seed=0)
    a = 1 / (1 + np.exp(rglru.params["Lambda"]))              # σ(−Λ)
    assert np.all((a ** 2 >= 0.81 - 1e-12) & (a ** 2 <= 0.998 + 1e-12))
    slstm = rnnlab.make_cell("slstm", 3, 8, heads=2, seed=0)
    assert np.all(slstm.params["R"] == 0)
    forget = slstm.params["b"][8:16]
    np.testing.assert_allclose(forget[[0, 3, 4, 7]], [5.0, -7.0, 5.0, -7.0])
    mlstm = rnnlab.make_cell("mlstm", 3, 8, heads=2, seed=0)
    np.testing.assert_allclose(mlstm.params["b"][8 * 3 + 2:8 * 3 + 4], [3.0, 6.0])
    assert np.all(mlstm.params["W_x"][:, 24:28] == 0)


@pytest.mark.parametrize("name", ["s6", "mlstm"])
def test_a_modern_cell_trains_stacked_from_the_command_line(tmp_path, name):
    from rnnlab.cli import main
    out = tmp_path / name
    assert main(["train", "--task", "adding", "--cell", name, "--hidden", "4", "--layers", "2", "--epochs", "1",
                 "--engine", "numpy", "--quiet", "--out", str(out)]) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["run"]["settings"]["cell"] == name and result["run"]["settings"]["layers"] == 2
    assert np.isfinite(result["test_loss"])


@pytest.mark.slow          # four cells trained end to end: about 100 s on 2 cores
def test_modern_cells_run_in_the_cell_benchmark_at_matched_budgets(tmp_path, capsys):
    """``rnnlab bench-cells NAME …``: the modern cells ranked beside a classic one, each at the task's parameter
    budget, every run on the engine auto picks for it (the fused kernels; the LRU's scan)."""
    from rnnlab.cli import main
    out = tmp_path / "bench"
    assert main(["bench-cells", "lstm", "minlstm", "lru", "deltanet", "--tasks", "adding-50", "--quick",
                 "--workers", "1", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert [r["cell"] for r in results["rows"]] == ["lstm", "minlstm", "lru", "deltanet"]
    assert all(r["runs"] == 2 and r["failed"] == 0 for r in results["rows"])
    assert all(np.isfinite(v) for r in results["rows"] for v in r["values"])
