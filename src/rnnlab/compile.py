"""The one compile policy of every Numba function in rnnlab: the options, and the decorators that apply them.

``KERNEL_OPTIONS`` hold for every compiled function: NumPy's error model (x/0 gives inf or nan, as NumPy
does, instead of a zero check that may raise and that stops LLVM vectorising a loop) and no fast-math flag.
Not even "contract" (a·b + c as one FMA, rounded once): it made the float32 sigmoid 0.45 → 0.33 ns per
element and the LSTM's forward kernel 11–13% faster at hidden 18–50 (AMD EPYC), about 1% of a study model's
step, but it moves the last bits of every run, and in `rnnlab compare` one of 20 vanilla-RNN seeds then
learned embedded Reber: H&S 1997's claim went from reproduced (6 of 20 against 0 of 20) to not significant
(6 against 1, p = 0.049). Published runs and verdicts stay reproducible bit for bit instead.

The one exception is named: ``REDUCTION_OPTIONS``, for the losses' row reductions (the max and Σ e^x of a
softmax, the Σ softplus of the sigmoid loss), which LLVM vectorises only when it may reorder a sum. Measured
on PTB's 400 × 10,000 logits, 1 thread, AMD EPYC: 5.4 ms against 22.8 ms (float32) and 6.1 against 41.9
(float64). The sums are reordered (the loss, and the normaliser Σ e^x that scales each gradient row), and
the exponential may contract into FMAs: against the same code compiled under ``KERNEL_OPTIONS``, logits of
spread 3 gave gradients within 2 float32 epsilons (40 float64 epsilons) and losses within 7e-10 (2e-16)
relative. A run stays reproducible on one machine; its last bits may differ between vector widths (AVX2 and
AVX-512), which is the price of the 4–7×.

Kernels are cached on disk, and Numba checks a cached kernel against its own file only: a kernel that inlines
a helper from another file (the gates of ``cells/kernel_math.py``, the product of ``cells/kernel_blas.py``) would
load stale machine code after that helper changed, wrong numbers or a call to a symbol no longer registered.
So every rnnlab kernel's cache is stamped with ``kernel_sources_digest``, the sha256 of every rnnlab module
whose text names Numba or this module: any change to compiled code or what it inlines recompiles them all.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from numba import njit
from numba.core import caching

KERNEL_OPTIONS = {"error_model": "numpy"}
REDUCTION_OPTIONS = {**KERNEL_OPTIONS, "fastmath": {"nsz", "arcp", "contract", "afn", "reassoc"}}


def kernel(fn):
    """A compiled function under the policy (``KERNEL_OPTIONS``), cached on disk."""
    return njit(cache=True, **KERNEL_OPTIONS)(fn)


def threaded_kernel(fn):
    """``kernel`` that releases the GIL, for the row blocks ``common.split_rows`` runs in threads."""
    return njit(cache=True, nogil=True, **KERNEL_OPTIONS)(fn)


def reduction_kernel(fn):
    """``threaded_kernel`` under the named exception ``REDUCTION_OPTIONS`` (the losses' row reductions)."""
    return njit(cache=True, nogil=True, **REDUCTION_OPTIONS)(fn)


def inline(fn):
    """A helper inlined into the kernels that call it, compiled with their options."""
    return njit(inline="always", **KERNEL_OPTIONS)(fn)


PACKAGE = Path(__file__).resolve().parent


@cache
def kernel_sources_digest(package: Path = PACKAGE) -> str:
    """sha256 over the path and text of every module under ``package`` that names Numba or ``rnnlab.compile``
    (the modules whose compiled code, or what it inlines, a cached kernel holds)."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        text = path.read_bytes()
        if b"numba" in text or b"rnnlab.compile" in text:
            digest.update(path.relative_to(package).as_posix().encode() + b"\0" + text)
    return digest.hexdigest()


def _stamped_by_the_package(locator: type) -> type:
    """Numba's ``locator`` for rnnlab's own functions (None for any other file, which the next locator takes),
    with the package's kernel sources as the stamp a cached kernel must match."""
    class PackageLocator(locator):
        @classmethod
        def from_function(cls, py_func, py_file):
            if PACKAGE not in Path(py_file).resolve().parents:
                return None
            return super().from_function(py_func, py_file)

        def get_source_stamp(self):
            return kernel_sources_digest()

    PackageLocator.__name__ = PackageLocator.__qualname__ = f"Rnnlab{locator.__name__}"
    return PackageLocator


# the same cache folders as Numba's own locators, in Numba's order ($NUMBA_CACHE_DIR, __pycache__, user-wide)
def _numba_locator(name: str) -> type:
    """Numba's locator class ``name`` (older Numba, 0.59 among them, spells it with a leading underscore)."""
    return getattr(caching, name, None) or getattr(caching, f"_{name}")


_IMPLEMENTATION = getattr(caching, "CacheImpl", None) or caching._CacheImpl
_IMPLEMENTATION._locator_classes[:0] = [_stamped_by_the_package(_numba_locator(name)) for name in (
    "UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator")]
