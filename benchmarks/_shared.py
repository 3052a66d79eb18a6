"""What the benchmark scripts share: their thread pools pinned before NumPy loads, a median timer and the
machine's matmul rate. Import it first (``import _shared``), before NumPy or rnnlab: pinning after them is
too late. It imports nothing heavy at the top for that reason."""

from __future__ import annotations

import os
import statistics
import time

POOLS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def pin_one_thread() -> None:
    """Every thread pool (OpenBLAS, OpenMP, MKL, Numba) at one thread: the primary, CPU-time figures."""
    for name in POOLS:
        os.environ[name] = "1"


def stolen_seconds() -> float:
    """CPU seconds the hypervisor has taken from this machine's processors since boot, all together
    (``/proc/stat``'s steal column); 0 where the system does not say. Wall-time figures on a virtual machine move
    with it, CPU-time figures do not."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK") if fields[0] == "cpu" and len(fields) > 8 else 0.0
    except (OSError, ValueError):
        return 0.0


def median_time(fn, repeats: int, warmups: int = 2, clock=time.perf_counter) -> float:
    """The median of ``repeats`` timed calls after ``warmups`` untimed ones (which also compile)."""
    for _ in range(warmups):
        fn()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times)


def interleaved(steps: dict, repeats: int, warmups: int = 2) -> dict[str, float]:
    """1-thread figures: the contenders called in turn, ``repeats`` rounds after ``warmups`` untimed calls each (which
    compile and load kernels), so a noisy neighbour slows them alike; the median CPU time of each."""
    for step in steps.values():
        for _ in range(warmups):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.process_time()
            step()
            times[name].append(time.process_time() - start)
    return {name: statistics.median(v) for name, v in times.items()}


def in_blocks(steps: dict, repeats: int, pause: float = 1.0) -> dict[str, float]:
    """All-core figures: each contender's repeats in one block (median wall time), pauses between, at the thread
    count a step names (``step.threads``, as fit would choose) or every core."""
    from rnnlab.engines.threads import blas_threads

    out = {}
    for name, step in steps.items():
        with blas_threads(getattr(step, "threads", os.cpu_count() or 1)):
            step()
            step()
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                step()
                times.append(time.perf_counter() - start)
        out[name] = statistics.median(times)
        time.sleep(pause)
    return out


def gemm_rate(dtype: str = "float32", size: int = 1024, repeats: int = 5, cpu_time: bool = True) -> float:
    """FLOP/s of a size × size matmul, the best of ``repeats``: the machine's practical peak for ``dtype``, in CPU
    time (1 thread) or wall time (all cores)."""
    import numpy as np

    a = np.random.default_rng(0).normal(size=(size, size)).astype(dtype)
    a @ a
    clock = time.process_time if cpu_time else time.perf_counter
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        a @ a
        best = min(best, clock() - start)
    return 2 * size ** 3 / best


DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "benchmarks")


class PrintedToDocs:
    """Everything the script prints, also kept as ``docs/benchmarks/NAME.md`` under a line giving the date, the
    command and the processor: the manual's speed tables are what a benchmark printed, never retyped.

    Use as ``with PrintedToDocs("bench_models-1-thread", enabled=args.docs): ...``; with ``enabled`` false it only
    prints. ``fenced`` keeps fixed-width output (not a Markdown table) as a code block."""

    def __init__(self, name: str, enabled: bool, fenced: bool = False) -> None:
        self.name, self.enabled, self.fenced, self.lines = name, enabled, fenced, []

    def __enter__(self) -> PrintedToDocs:
        import sys

        if self.enabled:
            self.stdout, sys.stdout = sys.stdout, self
        return self

    def write(self, text: str) -> int:
        self.lines.append(text)
        return self.stdout.write(text)

    def flush(self) -> None:
        self.stdout.flush()

    def __exit__(self, *exc) -> None:
        import datetime
        import sys

        if not self.enabled:
            return
        sys.stdout = self.stdout
        if exc[0] is not None:
            return
        printed = "".join(self.lines).strip("\n")
        body = f"```text\n{printed}\n```" if self.fenced else printed
        command = " ".join(["python", os.path.relpath(sys.argv[0]), *sys.argv[1:]])
        header = (f"# {self.name}\n\nPrinted by `{command}` on {datetime.date.today().isoformat()} "
                  f"({processor()}); written by the script, not edited.\n\n")
        os.makedirs(DOCS, exist_ok=True)
        path = os.path.join(DOCS, f"{self.name}.md")
        with open(path, "w") as f:
            f.write(header + body + "\n")
        print(f"written: {path}")


def argument_parser(doc: str, all_cores: bool = False):
    """A benchmark's command line with the options its tables share: ``--docs`` and, for a table that also has an
    all-core form, ``--all-cores`` (which the script reads from ``sys.argv`` before NumPy loads, to pin or not)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if all_cores:
        parser.add_argument("--all-cores", action="store_true", help="default thread pools, wall time, in blocks")
    parser.add_argument("--docs", action="store_true", help="also write the printout to docs/benchmarks/")
    return parser


def docs_name(script: str, all_cores: bool) -> str:
    """``models-amd-1-thread``: what a table measured, on which vendor's processor, at which thread count, and
    (``-openblas``, ``-mkl``) the BLAS provider when ``$RNNLAB_BLAS`` forced one rather than the default's choice."""
    from rnnlab.cells.blas_provider import requested_mode

    name = processor().lower()
    vendor = "intel" if "intel" in name else "amd" if "amd" in name else "cpu"
    forced = "" if requested_mode() == "auto" else f"-{requested_mode()}"
    return f"{script}-{vendor}-{'all-cores' if all_cores else '1-thread'}{forced}"


def machine_line() -> str:
    """Every benchmark's header: the processor and the BLAS at work (library, version, the kernel family it runs,
    an ``OPENBLAS_CORETYPE`` pin and a warning where that pin is below the processor)."""
    from rnnlab.cells.kernel_blas import blas_description

    return f"{processor()}; {blas_description()}"


def processor() -> str:
    """``lscpu``'s model name (the vendor decides which BLAS kernels run, so every table names it)."""
    from rnnlab.machine import processor_name

    return processor_name()
