"""Wall time of the (l,k)-discrepancy grid of S2: l = 1..50, k = 1..20, 2000 draws, N(0, 1),
sigmoid RNN and Cho GRU (the issue's target: well under a minute on a 2-core CPU).

    python benchmarks/bench_discrepancy.py [--draws 2000]
"""

from __future__ import annotations

import argparse
import os
import time

import _shared  # the script's folder is on sys.path
from rnnlab.analysis.discrepancy import discrepancy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=2000)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    for cells in (("rnn",), ("gru",), ("rnn", "gru")):
        start = time.perf_counter()
        records = discrepancy(cells, ("normal",), range(1, 21), 50, args.draws)
        seconds = time.perf_counter() - start
        print(_shared.machine_line())
        print(f"{'+'.join(cells):8} {len(records):6d} (l,k) points, {args.draws} draws: "
              f"{seconds:6.2f} s ({cores} cores)")


if __name__ == "__main__":
    main()
