"""Subnormal f32 flushing (`.ftz`) done by the CPU instead of by code.

Code compiled with `-ftz=true` (CuPy appends it to every compile; `--use_fast_math` implies
it) carries `.ftz` on every f32 instruction: subnormal inputs and results are flushed to a
zero of the same sign.  Flushing in code costs a compare and a select per operand and result
(ptx_ops.ftz), which measured 8x slower on matmul and nbody.  x86's MXCSR has the same two
switches: DAZ (subnormal inputs read as signed zeros) and FTZ (subnormal results written as
signed zeros).  They act on every SSE/AVX operation, f64 included, so a kernel runs with them
set (the block function sets them on entry and restores them on return,
KernelCodegen.wrap_flush_to_zero) only when that is exact for every floating-point operation
it does:

* every f32 instruction that has a `.ftz` form carries it (one without it keeps subnormals);
* no f64 or bf16 arithmetic (f64 and bf16 keep subnormals on the GPU): only moves, loads,
  stores and conversions from integers or from f32;
* no `testp` (it classifies subnormals).

f16 arithmetic is computed in f32, where an f16 subnormal is a normal number: unaffected.
Otherwise the code flushes as before.  x86 only (elsewhere: in code)."""

from __future__ import annotations

import math
import platform

from cpuify.ir.core import Operation, OpResult, Value
from cpuify.ir.modifiers import mods, types

# f32 instructions with a .ftz form (without it they keep subnormals)
_FTZ_FORMS = {"add", "sub", "mul", "mad", "fma", "div", "abs", "neg", "min", "max", "rcp",
              "sqrt", "rsqrt", "sin", "cos", "lg2", "ex2", "tanh", "setp", "set", "cvt", "slct"}
# instructions that move floating-point bits without arithmetic
_MOVES = {"ld", "ldu", "st", "mov", "selp", "shfl", "prmt", "red", "atom", "tex", "suld",
          "sust", "tld4", "stmatrix", "ldmatrix"}
_KEEPS_SUBNORMALS = {"f64", "bf16", "bf16x2"}


def is_x86(triple: str) -> bool:
    return (triple or platform.machine()).lower().startswith(("x86_64", "amd64", "i386", "i686"))


def hardware_flush(kernel_op: Operation) -> bool:
    """Whether MXCSR's DAZ+FTZ give exactly the kernel's semantics (see the module doc):
    some f32 instruction flushes and nothing may keep a subnormal."""
    flushes = False
    for op in kernel_op.walk():
        if op.name == "upir.in_order_sum":     # a run of adds (its mods are the add's)
            if op.results[0].type != "f32" or "ftz" not in mods(op):
                return False
            flushes = True
            continue
        if not op.name.startswith("ptx."):
            continue
        name = op.name[4:]
        ts = types(op)
        if not any(t.startswith(("f", "bf", "tf")) for t in ts):
            continue
        if name == "testp":
            return False
        if name in ("atom", "red") and any(t in _KEEPS_SUBNORMALS for t in ts):
            return False        # an f64/bf16 atomic add keeps subnormals
        if name in _MOVES:
            continue
        if name == "cvt" and ts[0] in _KEEPS_SUBNORMALS and not any(
                t in _KEEPS_SUBNORMALS for t in ts[1:]):
            continue            # into f64/bf16 from an integer or a flushed f32: exact
        if any(t in _KEEPS_SUBNORMALS for t in ts):
            return False
        if "f32" in ts and name in _FTZ_FORMS:
            if "ftz" not in mods(op):
                return False
            flushes = True
    return flushes


# f32 ops whose `.ftz` result the code generator flushes in code (ptx_ops.fdone), whatever
# the kernel's mode; add/sub/mul/fma may leave it to the CPU's FTZ (ptx_ops._HW_RESULTS)
_FLUSHED_IN_CODE = {"ptx.div", "ptx.neg", "ptx.abs", "ptx.min", "ptx.max", "ptx.sqrt",
                    "ptx.rsqrt", "ptx.rcp", "ptx.sin", "ptx.cos", "ptx.ex2", "ptx.lg2",
                    "ptx.tanh", "ptx.cvt"}
_FLUSHED_BY_FTZ = {"ptx.add", "ptx.sub", "ptx.mul", "ptx.fma"}
_SMALLEST_NORMAL = 2.0 ** -126


def known_flushed(v: Value, depth: int = 8) -> bool:
    """Whether the f32 value `v` is never a subnormal, so that flushing it again (an
    operand of another `.ftz` op) changes nothing: a zero, normal, infinite or NaN
    constant; the result of an f32 op with `.ftz` (flushed in code, or by the CPU's FTZ;
    one LLVM may fold away, `x * 1.0` to `x`, flushed in code: folds_to_operand); a move
    or select of such values.  Not a min/max whose
    flush is left to its readers (transforms/flush.py)."""
    if not isinstance(v, OpResult) or v.type != "f32" or depth == 0:
        return False
    o = v.op
    if o.name == "upir.const":
        value = o.attributes.get("value")
        return isinstance(value, float) and (
            value == 0.0 or math.isnan(value) or abs(value) >= _SMALLEST_NORMAL)
    m = mods(o)
    if o.name == "ptx.mov":
        return m == ["f32"] and known_flushed(o.operands[0], depth - 1)
    if o.name == "ptx.selp":
        return all(known_flushed(x, depth - 1) for x in o.operands[:2])
    if "ftz" not in m or types(o)[:1] != ["f32"]:
        return False
    if o.name in ("ptx.min", "ptx.max"):
        return not o.attributes.get("flush_at_uses")
    if o.name == "ptx.cvt":
        return types(o) == ["f32", "f32"]
    # add/sub/mul/fma: by the CPU's FTZ, or in code where LLVM may fold the op away
    # (folds_to_operand)
    return o.name in _FLUSHED_IN_CODE or o.name in _FLUSHED_BY_FTZ


# f32 ops LLVM folds when all their operands are constants (a constant operand built from
# other constants may be an identity once folded)
_FOLDABLE = {"ptx.mov", "ptx.cvt", "ptx.add", "ptx.sub", "ptx.mul", "ptx.fma", "ptx.mad",
             "ptx.div", "ptx.neg", "ptx.abs", "ptx.min", "ptx.max", "ptx.selp", "ptx.rcp",
             "ptx.sqrt", "ptx.copysign"}
_UNKNOWN = "unknown"    # a constant whose value this module does not compute: any identity


def _constant(v: Value, depth: int = 6) -> float | str | None:
    """The value of a constant operand (through f32 moves), _UNKNOWN for a value LLVM
    folds to a constant this module does not compute, None for a non-constant."""
    if not isinstance(v, OpResult) or depth == 0:
        return None
    o = v.op
    if o.name == "upir.const":
        value = o.attributes.get("value")
        return value if isinstance(value, float) else _UNKNOWN
    if o.name == "ptx.mov" and len(o.operands) == 1 and mods(o) in (["f32"], ["b32"]):
        return _constant(o.operands[0], depth - 1)
    if o.name in _FOLDABLE and o.operands and all(
            _constant(x, depth - 1) is not None for x in o.operands):
        return _UNKNOWN
    return None


def _is(value: float | str | None, identities: tuple[float, ...]) -> bool:
    return value == _UNKNOWN or value in identities


def folds_to_operand(op: Operation) -> bool:
    """Whether LLVM may fold the f32 add/sub/mul/fma/mad `op` to one of its operands or its
    negation (x * 1, x * -1, x + -0, x - 0, -0 - x, fma(x, 1, -0); x + 0 too, folded where
    LLVM proves x is not -0), which may be a subnormal: no arithmetic instruction is left
    for the CPU's DAZ/FTZ to flush it, so the code must.  False where that operand is never
    a subnormal (known_flushed)."""
    ops = op.operands
    values = [_constant(x) for x in ops]
    # (operand the op may become, whether it does) for each way it folds
    cases: list[tuple[Value, bool]] = []
    if op.name == "ptx.mul" and len(ops) == 2:
        cases = [(ops[0], _is(values[1], (1.0, -1.0))), (ops[1], _is(values[0], (1.0, -1.0)))]
    elif op.name in ("ptx.add", "ptx.sub") and len(ops) == 2:
        cases = [(ops[0], _is(values[1], (0.0,))), (ops[1], _is(values[0], (0.0,)))]
    elif op.name in ("ptx.fma", "ptx.mad") and len(ops) == 3:
        zero_addend = _is(values[2], (0.0,))
        cases = [(ops[0], zero_addend and _is(values[1], (1.0, -1.0))),
                 (ops[1], zero_addend and _is(values[0], (1.0, -1.0))),
                 # a constant product: k + c, folded to c when k is a zero
                 (ops[2], values[0] is not None and values[1] is not None and (
                     _is(values[0], (0.0,)) or _is(values[1], (0.0,))))]
    return any(folds and not known_flushed(x) for x, folds in cases)
