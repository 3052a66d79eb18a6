"""Every task and dataset of the studies, through one registry.

Synthetic: ``reber_strings``, ``is_reber`` (and ``rnnlab.data.reber`` for legal next symbols and the
"solved" criterion), mean-sign, (l,k) word pairs, the adding and copy tasks. Real data, found
locally or downloaded with checksums: NLU+ wiki sentences, Linzen agreement, PTB, SST, polyphonic
music (``load_polyphonic``). ``get_task(name)`` builds a training task from any of them.
"""

from rnnlab.data.containers import Batch, SequenceData, StreamData, pad
from rnnlab.data.polyphonic import load_polyphonic
from rnnlab.data.reber import is_reber, legal_next, reber_strings, solved_stats
from rnnlab.data.registry import DATASETS, DataError, DataMissing, fetch, find_file, verify
from rnnlab.data.synthetic import adding_data, copy_data, lk_words, mean_sign_data
from rnnlab.data.tasks import TASKS, Task, build_model, get_task

__all__ = [
    "Batch", "DATASETS", "DataError", "DataMissing", "SequenceData", "StreamData", "TASKS", "Task", "adding_data",
    "build_model", "copy_data", "fetch", "find_file", "get_task", "is_reber", "legal_next", "lk_words",
    "load_polyphonic", "mean_sign_data", "pad", "reber_strings", "solved_stats", "verify",
]
