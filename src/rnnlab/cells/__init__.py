"""The three recurrent cells and the stack that layers them."""

from rnnlab.cells.base import Cache, Cell
from rnnlab.cells.gru import GRU
from rnnlab.cells.lstm import LSTM
from rnnlab.cells.rnn import RNN
from rnnlab.cells.stack import Stack

__all__ = ["Cache", "Cell", "GRU", "LSTM", "RNN", "Stack"]
