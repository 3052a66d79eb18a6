"""The three recurrent cells and the stack that layers them."""

from rnnlab.cells.base import Cache, Cell, ParamView
from rnnlab.cells.gru import GRU
from rnnlab.cells.lstm import LSTM
from rnnlab.cells.rnn import RNN
from rnnlab.cells.stack import Stack

__all__ = ["Cache", "Cell", "ParamView", "GRU", "LSTM", "RNN", "Stack"]
