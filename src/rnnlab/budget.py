"""Parameter counts, and the hidden size that matches a parameter budget (the studies compare
cells at equal budgets: e.g. vanilla-18 vs GRU-10 on embedded Reber, ~20K parameters in S3)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rnnlab.blocks import block_param_count
from rnnlab.cells.registry import cell_class
from rnnlab.common import check_positive_int


def _layer_count(cell: str, input_size: int, hidden: int, bias: bool, recurrent_bias: bool, options: dict) -> int:
    shapes = cell_class(cell).shapes_for(input_size, hidden, bias=bias, recurrent_bias=recurrent_bias, **options)
    return int(sum(np.prod(shape, dtype=np.int64) for shape in shapes.values()))


def count_params(
    model: Any = None,
    /,
    *,
    input_size: int | None = None,
    hidden_size: int | None = None,
    output_size: int = 0,
    num_layers: int = 1,
    bias: bool = True,
    recurrent_bias: bool = False,
    block: str = "none",
    block_norm: str = "rms",
    block_expansion: int | None = None,
    project_input: bool = True,
    **options: Any,
) -> int:
    """Number of parameters.

    ``count_params(obj)`` counts an object with ``num_params()`` or ``params``, or a dict of arrays.
    ``count_params("gru", input_size=7, hidden_size=10, output_size=7)`` computes it for a cell
    name without building anything: ``num_layers`` stacked layers plus, if ``output_size``, a
    linear readout with bias; ``options`` are the cell's (``variant="cho"``, ``ablate="cifg"``). With a
    ``block`` (``rnnlab.blocks``) every layer's cell is hidden → hidden, and the block's norms, feed-forward
    parts and input map (``project_input``) are counted too, so matched budgets stay matched.
    The count comes from the cell's declared parameter shapes, so any registered cell (or
    ``"file.py:Class"``) can be counted.
    """
    if not isinstance(model, str):
        if hasattr(model, "num_params"):
            return int(model.num_params())
        params = getattr(model, "params", model)
        if not hasattr(params, "values"):
            raise ValueError(f"model: expected a cell name, a module or a dict of arrays, got {type(model).__name__}")
        return int(sum(v.size for v in params.values()))
    if input_size is None or hidden_size is None:
        raise ValueError("input_size and hidden_size: both are required when counting by cell name")
    input_size = check_positive_int(input_size, "input_size")
    hidden_size = check_positive_int(hidden_size, "hidden_size")
    num_layers = check_positive_int(num_layers, "num_layers")
    blocked = block != "none"
    total = sum(
        _layer_count(model, input_size if i == 0 and not blocked else hidden_size, hidden_size, bias, recurrent_bias,
                     options)
        for i in range(num_layers)
    )
    if blocked:
        total += block_param_count(block, hidden_size, input_size, block_expansion, block_norm, bias, project_input,
                                   num_layers)
    if output_size:
        total += hidden_size * output_size + output_size
    return total


def hidden_for_budget(cell: str, budget: int, input_size: int, output_size: int = 0, **kwargs: Any) -> int:
    """The hidden size whose parameter count (``count_params``) is closest to ``budget``.

    Ties go to the smaller network. kwargs: num_layers, bias, recurrent_bias and the cell's options.
    """
    budget = check_positive_int(budget, "budget")
    return closest_size(lambda h: count_params(cell, input_size=input_size, hidden_size=h, output_size=output_size,
                                               **kwargs), budget)


def closest_size(count: Callable[[int], int], target: int) -> int:
    """The size h ≥ 1 whose ``count(h)`` is closest to ``target``, ties to the smaller, for a count that grows with
    h: the one budget matcher (of a cell's declared shapes, or of a built model's parameters). Doubling, then
    bisection: O(log h) counts."""
    low, high = 1, 2
    while count(high) <= target:
        low, high = high, 2 * high
    while high - low > 1:              # count(low) ≤ target < count(high), or low = 1
        mid = (low + high) // 2
        low, high = (mid, high) if count(mid) <= target else (low, mid)
    return low if abs(count(low) - target) <= abs(count(high) - target) else high
