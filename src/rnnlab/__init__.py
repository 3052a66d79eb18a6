"""rnnlab: vanilla RNN, GRU, LSTM and any cell you bring, from scratch in NumPy, with exact BPTT.

>>> import numpy as np, rnnlab
>>> cell = rnnlab.GRU(3, 5, variant="cho", seed=0)
>>> hs, cache = cell.forward(np.ones((4, 2, 3)))
>>> grads, dx, dh0 = cell.backward(np.ones_like(hs), cache, back_steps=2)
>>> sorted(grads) == sorted(cell.params)
True
"""

import os

# Before NumPy loads OpenBLAS: its idle threads sleep after 2^16 cycles instead of spinning for 2^28
# (~0.1 s), which on a 2-core machine took the second core from the loss and updates that follow each
# matrix product (PTB's step at 2 cores: 60 → 51 ms; engines/threads.py). No effect once NumPy is loaded.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "16")

from rnnlab.budget import count_params, hidden_for_budget
from rnnlab.cells import (
    CELLS,
    GRU,
    LSTM,
    RNN,
    Cache,
    Cell,
    Option,
    Stack,
    cell_class,
    load_cell_file,
    make_cell,
    register_cell,
)
from rnnlab.checks import check_cell
from rnnlab.engines import DEFAULT_TRAINING_ENGINE, ENGINES
from rnnlab.gradcheck import GradcheckResult, gradcheck, numerical_gradient
from rnnlab.layers import Embedding, Linear, select_last, select_last_backward
from rnnlab.losses import sigmoid_binary_cross_entropy, softmax_cross_entropy, squared_error
from rnnlab.version import __version__ as __version__

__all__ = [
    "CELLS", "GRU", "LSTM", "RNN", "Cache", "Cell", "Option", "Stack", "cell_class", "load_cell_file",
    "register_cell", "check_cell", "DEFAULT_TRAINING_ENGINE", "ENGINES", "Embedding", "Linear",
    "GradcheckResult",
    "count_params", "gradcheck", "hidden_for_budget", "make_cell", "numerical_gradient",
    "select_last", "select_last_backward", "sigmoid_binary_cross_entropy", "softmax_cross_entropy",
    "squared_error",
]
