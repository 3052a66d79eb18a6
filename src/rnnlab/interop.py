"""Moving weights between rnnlab and PyTorch's ``nn.RNN`` / ``nn.GRU`` / ``nn.LSTM``.

PyTorch stores ``weight_ih_l{k}`` as (G*H, input) and computes x Wᵀ; rnnlab stores
``W_x`` = weight_ihᵀ and computes x W_x. Gate orders are the same (GRU r, z, n; LSTM i, f, g, o),
so the mapping is a transpose: W_x ↔ weight_ih, W_h ↔ weight_hh, b ↔ bias_ih, b_h ↔ bias_hh.
``from_torch`` builds cells with ``recurrent_bias=True`` so every torch parameter has its own
rnnlab parameter (and gradient). PyTorch's GRU is rnnlab's ``GRU(variant="cudnn")``.

torch is imported lazily: it is a test and interop dependency, not a runtime one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnlab.cells import GRU, LSTM, RNN, Cell, Stack

_TORCH_NAMES = {"W_x": "weight_ih", "W_h": "weight_hh", "b": "bias_ih", "b_h": "bias_hh"}


def _kind(module: Any) -> str:
    import torch.nn as nn

    for kind, cls in (("lstm", nn.LSTM), ("gru", nn.GRU), ("rnn", nn.RNN)):
        if isinstance(module, cls):
            return kind
    raise ValueError(f"module: expected torch.nn.RNN, GRU or LSTM, got {type(module).__name__}")


def params_from_torch(module: Any, grad: bool = False) -> dict[str, np.ndarray]:
    """The module's parameters (or, with ``grad=True``, their ``.grad``) under rnnlab's names:
    ``"W_x"``... for one layer, ``"{layer}.W_x"``... for several."""
    _kind(module)
    out = {}
    for layer in range(module.num_layers):
        prefix = f"{layer}." if module.num_layers > 1 else ""
        for ours, theirs in _TORCH_NAMES.items():
            tensor = getattr(module, f"{theirs}_l{layer}", None)
            if tensor is None:
                continue
            value = tensor.grad if grad else tensor
            if value is None:
                raise ValueError(f"module: {theirs}_l{layer} has no gradient; call backward() first")
            array = value.detach().cpu().numpy()
            out[prefix + ours] = array.T.copy() if array.ndim == 2 else array.copy()
    return out


def from_torch(module: Any, engine: str = "numpy") -> Cell | Stack:
    """A cell (num_layers = 1) or a Stack with the same weights and dtype as the torch module,
    computed by ``engine`` ("numpy", "numba" or "jax")."""
    kind = _kind(module)
    if module.bidirectional:
        raise ValueError("module: bidirectional modules are not supported")
    if getattr(module, "proj_size", 0):
        raise ValueError("module: LSTM with proj_size is not supported")
    dtype = module.weight_ih_l0.dtype
    np_dtype = {"torch.float32": np.float32, "torch.float64": np.float64}.get(str(dtype))
    if np_dtype is None:
        raise ValueError(f"module: expected float32 or float64 weights, got {dtype}")
    H = module.hidden_size
    kwargs: dict[str, Any] = {"bias": module.bias, "recurrent_bias": module.bias, "dtype": np_dtype,
                              "engine": engine}
    if kind == "rnn":
        kwargs["activation"] = module.nonlinearity
    if kind == "lstm":
        kwargs["forget_bias"] = None
    layers = []
    weights = params_from_torch(module)
    for layer in range(module.num_layers):
        prefix = f"{layer}." if module.num_layers > 1 else ""
        cell = {"rnn": RNN, "gru": GRU, "lstm": LSTM}[kind](module.input_size if layer == 0 else H, H, **kwargs)
        for name in cell.params:
            cell.params[name] = weights[prefix + name].astype(np_dtype)
        layers.append(cell)
    return layers[0] if len(layers) == 1 else Stack(layers)


def to_torch(model: Cell | Stack) -> Any:
    """A torch module (``batch_first=False``) with the same weights, for RNN (tanh or relu),
    GRU (cudnn variant) and LSTM cells or a Stack of one kind."""
    import torch
    import torch.nn as nn

    layers = model.layers if isinstance(model, Stack) else [model]
    first = layers[0]
    if any(type(layer) is not type(first) for layer in layers):
        raise ValueError("model: every layer must be the same kind of cell to convert to torch")
    if isinstance(first, RNN) and first.activation == "sigmoid":
        raise ValueError("model: torch.nn.RNN has no sigmoid nonlinearity (expected tanh or relu)")
    if isinstance(first, GRU) and first.variant != "cudnn":
        raise ValueError("model: torch.nn.GRU computes variant='cudnn'; a 'cho' GRU has no torch equivalent")
    if any(layer.bias != first.bias for layer in layers):
        raise ValueError("model: every layer must agree on bias to convert to torch")
    cls = {RNN: nn.RNN, GRU: nn.GRU, LSTM: nn.LSTM}[type(first)]
    kwargs = {"nonlinearity": first.activation} if isinstance(first, RNN) else {}
    module = cls(first.input_size, first.hidden_size, num_layers=len(layers), bias=first.bias, **kwargs)
    torch_dtype = torch.float64 if first.dtype == np.float64 else torch.float32
    module = module.to(torch_dtype)
    with torch.no_grad():
        for i, layer in enumerate(layers):
            p, H = layer.params, layer.hidden_size
            getattr(module, f"weight_ih_l{i}").copy_(torch.from_numpy(p["W_x"].T.copy()))
            getattr(module, f"weight_hh_l{i}").copy_(torch.from_numpy(p["W_h"].T.copy()))
            if layer.bias:
                getattr(module, f"bias_ih_l{i}").copy_(torch.from_numpy(p["b"].copy()))
                b_h = np.zeros(layer.gates * H, layer.dtype)
                if "b_h" in p:
                    b_h = p["b_h"]
                elif "b_hn" in p:
                    b_h[2 * H:] = p["b_hn"]
                getattr(module, f"bias_hh_l{i}").copy_(torch.from_numpy(b_h.copy()))
    return module
