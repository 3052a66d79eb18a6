"""Elementwise math for the Numba kernels, written so that LLVM vectorises the gate loops.

``math.tanh`` and ``math.exp`` compile to calls of the C library, one element at a time (~15–20 ns
each here, more than the recurrent matmul's share of a step at hidden ≤ 256), and a division in a
loop compiled with Numba's default error model checks for zero and may raise, which also stops
vectorisation. So the kernels use ``kernel`` (``rnnlab.compile``'s policy: x/0 gives inf or nan, as in
NumPy) and ``kernel_exp``, ``kernel_tanh`` and ``kernel_sigmoid`` below: Cody–Waite range reduction
and a Taylor polynomial, all plain arithmetic (~1.3 ns per element, vectorised). In float64, exp is
within 2.3e-16 relative error over ``EXP_CLAMP64`` = [−708, 709]; float32 kernels compute in float32
(``EXP_CLAMP32`` = [−87, 88]) within 4 float32 epsilons (over a grid of 4·10⁶ points: exp 0.83, tanh 1.5,
sigmoid 0.75). A float literal in a kernel is float64 and would widen a float32 loop (half the vector
width, conversions both ways: the LSTM's float32 forward was 1.4× slower so), hence ``one_of`` and
``zero_of``.
Inputs beyond the clamp are clamped: near the ends of the float range 2^k is not one normal float,
and applying it as two factors measured ~20% slower per gate element, for no change in tanh and
sigmoid, which saturate long before (both within 4 epsilons absolute error for every input).
"""

from __future__ import annotations

import platform

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload
from numba.np.numpy_support import as_dtype

from rnnlab.compile import inline, kernel

__all__ = ["constant_in_dtype", "flush_subnormals", "flushed", "inline", "kernel", "kernel_exp", "kernel_sigmoid",
           "kernel_log1p_unit", "kernel_softplus", "kernel_tanh", "one_of", "restore_float_control",
           "smallest_normal_of", "zero_of"]

LOG2_E = 1.4426950408889634
LN2_HI = 6.93147180369123816490e-01   # ln 2 split in two so that k·LN2_HI is exact for |k| < 2^11
LN2_LO = 1.90821492927058770002e-10
EXP_CLAMP64 = (-708.0, 709.0)      # where 2^k, k = round(x / ln 2), is a normal float64
EXP_CLAMP32 = (-87.0, 88.0)        # the same for float32
_LO64, _HI64 = EXP_CLAMP64


def kernel_tanh(x):
    """tanh x = 1 − 2 / (e^{2x} + 1): saturates to ±1 exactly, absolute error ≤ 4e-16 in float64."""
    raise TypeError("kernel_tanh runs only inside Numba kernels")


def kernel_sigmoid(x):
    """σ(x) = 1 / (1 + e^{−x})."""
    raise TypeError("kernel_sigmoid runs only inside Numba kernels")


def constant_in_dtype(value: float, name: str, why: str):
    """A kernel helper returning ``value`` in the dtype of the array it is given."""
    def constant_of(array):
        raise TypeError(f"{name} runs only inside Numba kernels")

    @overload(constant_of, inline="always")
    def _constant_of_array(array):
        constant = as_dtype(array.dtype).type(value)
        return lambda array: constant

    constant_of.__name__ = constant_of.__qualname__ = name
    constant_of.__doc__ = f"{value:g} in the array's dtype: {why}"
    return constant_of


one_of = constant_in_dtype(1.0, "one_of", "``1.0 - x`` on a float32 x would be float64.")
zero_of = constant_in_dtype(0.0, "zero_of", "``x if c else 0.0`` on a float32 x is float64 under Numba 0.59.")


def smallest_normal_of(array):
    """The smallest positive normal number of the array's dtype (``np.finfo(dtype).tiny``), in that dtype."""
    raise TypeError("smallest_normal_of runs only inside Numba kernels")


@overload(smallest_normal_of, inline="always")
def _smallest_normal_of(array):
    tiny = np.finfo(as_dtype(array.dtype)).tiny
    return lambda array: tiny


@inline
def flushed(x, tiny, zero):
    """x, or zero where x is subnormal (0 < |x| < tiny); NaN stays NaN."""
    return zero if abs(x) < tiny else x


@intrinsic
def _float_from_bits(typingctx, bits):
    """The float64 whose IEEE-754 bit pattern is the int64 ``bits`` (a register move, vectorisable)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@intrinsic
def _bits_of_float(typingctx, value):
    """The int64 bit pattern of the float64 ``value`` (a register move, vectorisable)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def _float32_from_bits(typingctx, bits):
    """The float32 whose IEEE-754 bit pattern is the int32 ``bits``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


# k as an integer without a float → int64 conversion, which AVX2 has no vector instruction for (so the loop around an
# exp stayed scalar there, 4.3 ns per element on an AMD EPYC): for an integral |k| < 2^51, k + 1.5·2^52 is exact and
# its bit pattern is that of 1.5·2^52 plus k. The same k, so the same bits as the conversion gave.
ROUNDING_SHIFT = 6755399441055744.0
_ROUNDING_BITS = int(np.float64(ROUNDING_SHIFT).view(np.int64))


@inline
def _exp64(x):
    """e^x = 2^k · e^r with k = round(x / ln 2), |r| ≤ ln 2 / 2; e^r by its Taylor series to r^13/13!
    (remainder < 4e-18). Inputs are clamped to [−708, 709], where 2^k is a normal float64."""
    x = min(max(x, _LO64), _HI64)
    k = np.floor(x * LOG2_E + 0.5)
    r = (x - k * LN2_HI) - k * LN2_LO
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    return p * _float_from_bits((_bits_of_float(k + ROUNDING_SHIFT) - _ROUNDING_BITS + 1023) << 52)


F32 = {name: np.float32(v) for name, v in {
    "lo": EXP_CLAMP32[0], "hi": EXP_CLAMP32[1], "log2_e": LOG2_E, "half": 0.5, "one": 1.0, "two": 2.0,
    "ln2_hi": 0.693359375, "ln2_lo": -2.12194440e-4,   # Cephes' split: k·ln2_hi exact in float32
    "c7": 1 / 5040, "c6": 1 / 720, "c5": 1 / 120, "c4": 1 / 24, "c3": 1 / 6}.items()}
_LO, _HI, _LOG2E, _HALF, _ONE, _TWO = (F32[n] for n in ("lo", "hi", "log2_e", "half", "one", "two"))
_LN2_HI, _LN2_LO, _C7, _C6, _C5, _C4, _C3 = (F32[n] for n in ("ln2_hi", "ln2_lo", "c7", "c6", "c5", "c4", "c3"))


@inline
def _exp32(x):
    """The float32 twin of ``_exp64``: the same reduction, Taylor to r^7/7! (remainder < 6e-9), so a
    float32 kernel's gates run at the float32 vector width."""
    x = min(max(x, _LO), _HI)
    k = np.floor(x * _LOG2E + _HALF)             # float32: math.floor's int would make r float64
    r = (x - k * _LN2_HI) - k * _LN2_LO
    p = _C7
    p = p * r + _C6
    p = p * r + _C5
    p = p * r + _C4
    p = p * r + _C3
    p = p * r + _HALF
    p = p * r + _ONE
    p = p * r + _ONE
    return p * _float32_from_bits((np.int32(k) + np.int32(127)) << np.int32(23))


def kernel_exp(x):
    """e^x in a kernel, in the precision of x (see ``_exp64`` and ``_exp32``)."""
    raise TypeError("kernel_exp runs only inside Numba kernels")


@overload(kernel_exp, inline="always")
def _kernel_exp(x):
    return (lambda x: _exp32(x)) if x == types.float32 else (lambda x: _exp64(x))


@overload(kernel_tanh, inline="always")
def _kernel_tanh(x):
    if x == types.float32:
        return lambda x: _ONE - _TWO / (kernel_exp(_TWO * x) + _ONE)
    return lambda x: 1.0 - 2.0 / (kernel_exp(2.0 * x) + 1.0)


@overload(kernel_sigmoid, inline="always")
def _kernel_sigmoid(x):
    if x == types.float32:
        return lambda x: _ONE / (_ONE + kernel_exp(-x))
    return lambda x: 1.0 / (1.0 + kernel_exp(-x))


def kernel_softplus(x):
    """log(1 + e^x) in a kernel, in the precision of x (see ``_log1p_unit64``)."""
    raise TypeError("kernel_softplus runs only inside Numba kernels")


@inline
def _log1p_unit64(u):
    """log(1 + u) for 0 ≤ u ≤ 1, as 2 atanh(s) with s = u / (2 + u) ≤ 1/3, by atanh's series to s^33/33 (the
    remainder below 2e-18 relative). NumPy's log1p is a C library call, one element at a time (16 ns here, as long as
    the rest of an sLSTM gate); this is arithmetic, vectorised with the loop around it."""
    s = u / (2.0 + u)
    s2 = s * s
    p = 1.0 / 33.0
    p = p * s2 + 1.0 / 31.0
    p = p * s2 + 1.0 / 29.0
    p = p * s2 + 1.0 / 27.0
    p = p * s2 + 1.0 / 25.0
    p = p * s2 + 1.0 / 23.0
    p = p * s2 + 1.0 / 21.0
    p = p * s2 + 1.0 / 19.0
    p = p * s2 + 1.0 / 17.0
    p = p * s2 + 1.0 / 15.0
    p = p * s2 + 1.0 / 13.0
    p = p * s2 + 1.0 / 11.0
    p = p * s2 + 1.0 / 9.0
    p = p * s2 + 1.0 / 7.0
    p = p * s2 + 1.0 / 5.0
    p = p * s2 + 1.0 / 3.0
    p = p * s2 + 1.0
    return 2.0 * s * p


_L15, _L13, _L11, _L9, _L7, _L5, _L3 = (np.float32(1 / k) for k in (15, 13, 11, 9, 7, 5, 3))


@inline
def _log1p_unit32(u):
    """The float32 twin of ``_log1p_unit64``, the series to s^15/15 (remainder below 2e-9 relative)."""
    s = u / (_TWO + u)
    s2 = s * s
    p = _L15
    p = p * s2 + _L13
    p = p * s2 + _L11
    p = p * s2 + _L9
    p = p * s2 + _L7
    p = p * s2 + _L5
    p = p * s2 + _L3
    p = p * s2 + _ONE
    return _TWO * s * p


def kernel_log1p_unit(u):
    """log(1 + u) for 0 ≤ u ≤ 1 in a kernel, in the precision of u (``_log1p_unit64``)."""
    raise TypeError("kernel_log1p_unit runs only inside Numba kernels")


@overload(kernel_log1p_unit, inline="always")
def _kernel_log1p_unit(u):
    return (lambda u: _log1p_unit32(u)) if u == types.float32 else (lambda u: _log1p_unit64(u))


@overload(kernel_softplus, inline="always")
def _kernel_softplus(x):
    """max(x, 0) + log1p(e^−|x|): no overflow, and exact to a few epsilons at both ends."""
    zero = np.float32(0.0) if x == types.float32 else 0.0
    return lambda x: max(x, zero) + kernel_log1p_unit(kernel_exp(-abs(x)))


# -- subnormal numbers on x86-64 ----------------------------------------------------------------
# An arithmetic operation with a subnormal operand or result (below the dtype's smallest normal number, float32
# 1.2e-38) runs in microcode on x86 processors, ~100× slower: a product over such operands took 1,642 ms against 17
# on the Intel Xeon (2026-11-29), and BPTT through a vanishing gradient makes them (``engines/numba.py``). The
# control word's FTZ bit (15) flushes such results to zero and its DAZ bit (6) reads such operands as zero.
FTZ_DAZ = 0x8040
X86_64 = platform.machine().lower() in ("x86_64", "amd64")
_BYTES = ir.IntType(8).as_pointer()      # the intrinsics' operand: i8* under LLVM 14 (Numba 0.59), ptr later


@intrinsic
def _read_mxcsr(typingctx):
    """The calling thread's SSE control and status word (``stmxcsr``)."""
    def codegen(context, builder, signature, args):
        slot = builder.alloca(ir.IntType(32))
        read = builder.module.declare_intrinsic("llvm.x86.sse.stmxcsr", fnty=ir.FunctionType(ir.VoidType(), [_BYTES]))
        builder.call(read, [builder.bitcast(slot, _BYTES)])
        return builder.load(slot)
    return types.uint32(), codegen


@intrinsic
def _write_mxcsr(typingctx, word):
    """Load ``word`` into the calling thread's SSE control and status word (``ldmxcsr``)."""
    def codegen(context, builder, signature, args):
        slot = builder.alloca(ir.IntType(32))
        builder.store(args[0], slot)
        write = builder.module.declare_intrinsic("llvm.x86.sse.ldmxcsr", fnty=ir.FunctionType(ir.VoidType(), [_BYTES]))
        builder.call(write, [builder.bitcast(slot, _BYTES)])
        return context.get_dummy_value()
    return types.none(types.uint32), codegen


if X86_64:
    @kernel
    def flush_subnormals():
        """Set FTZ and DAZ on the calling thread; returns its previous control word, for ``restore_float_control``."""
        word = _read_mxcsr()
        _write_mxcsr(word | np.uint32(FTZ_DAZ))
        return word

    @kernel
    def restore_float_control(word):
        """Put FTZ and DAZ back as they were in the control word ``flush_subnormals`` returned (the status flags
        raised since stay raised, as without the flush)."""
        bits = np.uint32(FTZ_DAZ)
        _write_mxcsr((_read_mxcsr() & ~bits) | (np.uint32(word) & bits))
else:       # elsewhere the control register differs, and nothing is set (not measured there)
    def flush_subnormals() -> int:
        """Nothing to set off x86-64."""
        return 0

    def restore_float_control(word: int) -> None:
        """Nothing to put back off x86-64."""
