"""The recurrent cells (the three classics and the zoo the literature compares), their registry,
and the stack that layers them."""

from rnnlab.cells.antisymmetric import AntisymmetricRNN, GatedAntisymmetricRNN
from rnnlab.cells.base import Cache, Cell, Option, ParamView
from rnnlab.cells.deltanet import DeltaNet, GatedDeltaNet
from rnnlab.cells.diagonal import RGLRU, S6, DiagonalLinear, MinLSTM
from rnnlab.cells.gru import GRU
from rnnlab.cells.indrnn import IndRNN
from rnnlab.cells.janet import JANET
from rnnlab.cells.lru import LRU
from rnnlab.cells.lstm import LSTM
from rnnlab.cells.mingru import MinGRU
from rnnlab.cells.registry import CELLS, cell_class, cell_options, load_cell_file, make_cell, register_cell
from rnnlab.cells.rnn import IRNN, RNN
from rnnlab.cells.stack import Stack
from rnnlab.cells.ugrnn import UGRNN
from rnnlab.cells.xlstm import MLSTM, SLSTM

__all__ = ["Cache", "Cell", "Option", "ParamView", "CELLS", "cell_class", "cell_options", "load_cell_file",
           "make_cell", "register_cell", "RNN", "IRNN", "GRU", "LSTM", "AntisymmetricRNN", "GatedAntisymmetricRNN",
           "IndRNN", "JANET", "MinGRU", "UGRNN", "Stack", "MinLSTM", "DiagonalLinear", "RGLRU", "S6", "LRU", "SLSTM",
           "MLSTM", "DeltaNet", "GatedDeltaNet"]
