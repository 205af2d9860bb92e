"""Semantics of the `ptx.*` ops for the reference interpreter: one function per opcode,
registered in `PTX_OPS` (op name -> handler(thread, op)).  The instructions whose semantics
the instruction table spells out (ir/ptx_table.py) are evaluated from it by spec_eval.py;
this file holds the hand-written rest (cp.async, mbarrier; the hand-written forms of
table instructions, registered with `@hand_evaluation`) and the memory accesses behind the
table's memory functions (at_address, load_value, store_value, atomic_update: spec_eval.py
calls them).

Each handler mirrors the matching handler of `cpuify.codegen.ptx_*` (same modifiers, same
operand typing) but computes the PTX ISA result directly: integers as Python ints wrapped
at the register width, floats with NumPy scalars in the instruction's precision, directed
rounding from exact rationals.  Where the compiled path approximates (documented in
codegen/ptx_*.py) this file computes the exact PTX result; tests compare the two."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Callable

import numpy as np


from cpuify.interp.memory import load, store
from cpuify.interp.values import (
    F16, F32, bf16_from_bits, bf16_to_bits, exact, f16_from_bits, f16_to_bits,
    float_min_max, ftz, ir_type_of, is_float,
    is_signed, isfinite, mask, round_fraction, saturate, signbit, to_signed, width_of, zero_sum,
)
from cpuify.ir.core import Operation
from cpuify.ir.modifiers import has, mods

if TYPE_CHECKING:
    from cpuify.interp.thread import Thread

Handler = Callable[["Thread", Operation], None]
PTX_OPS: dict[str, Handler] = {}


def handles(*names: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        for n in names:
            PTX_OPS[n] = fn
        return fn
    return deco


#: the hand-written evaluation of the `hand=True` forms of a table entry whose other forms
#: are spec-driven (ir/ptx_table.py): spec_eval.py registers the entry's evaluator in
#: PTX_OPS, which calls this for the hand-written forms
HAND_EVALUATIONS: dict[str, Handler] = {}


def hand_evaluation(*names: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        for n in names:
            HAND_EVALUATIONS[n] = fn
        return fn
    return deco


# --- modifier helpers (same meaning as in codegen/ptx_ops.py) ------------------------------



def width(t: str) -> int:
    return width_of(ir_type_of(t))


def signed_value(x: int, t: str) -> int:
    """The integer an operand of PTX type t denotes (two's complement for .s types)."""
    return to_signed(x, width(t)) if is_signed(t) else x


# --- floats: f16 values travel as i16 bits ------------------------------------------------

def as_float(x: object, t: str) -> object:
    if t == "bf16":
        return bf16_from_bits(x)  # type: ignore[arg-type]
    return f16_from_bits(x) if t == "f16" else x  # type: ignore[arg-type]


def from_float(x: object, t: str) -> object:
    """The register value of a result already rounded to type t."""
    if t == "bf16":
        return bf16_to_bits(x)
    return f16_to_bits(F16(x)) if t == "f16" else x


def fsrc(th: "Thread", op: Operation, i: int, t: str) -> object:
    """Float source i as a NumPy scalar of type t, flushed when the op has .ftz."""
    return ftz(as_float(th.src(op, i, t), t), has(op, "ftz"))


def fdone(th: "Thread", op: Operation, v: object, t: str) -> None:
    v = ftz(v, has(op, "ftz"))
    if has(op, "sat"):
        v = saturate(v)
    th.set(op, from_float(v, t), t)


# --- memory ----------------------------------------------------------------------------------------

_SPACES = ("global", "shared", "local", "const", "param")


def memory_space(op: Operation) -> str:
    """The state space a memory op names (`ld.shared` -> shared); generic without one."""
    return next((s for s in _SPACES if s in mods(op)), "generic")


@handles("ptx.cp_async")
def _cp_async(th: "Thread", op: Operation) -> None:
    """cp.async at issue: cp-size bytes to shared memory, the first min(src-size, cp-size)
    of them from global memory, zeros after them (PTX ISA: "the remaining bytes are
    zero-filled"); nothing is read when src-size is 0."""
    size = int(op.attributes["size"])
    dst = th.address(op, "shared", size)
    if dst % size:
        th.fail(f"cp.async: shared address not aligned to {size} bytes", op)
    n = min(th.src(op, 2, "u32"), size)
    data = b""
    if n:
        src = (th.src(op, 1, "u64") + int(op.attributes.get("src_offset", 0))) & mask(64)
        if src < 1 << 16 or src % size:
            th.fail(f"cp.async: global address {src:#x} is null or not aligned to {size} bytes", op)
        data = ctypes.string_at(src, n)
    ctypes.memmove(dst, data + bytes(size - n), size)


# --- the memory functions of the instruction table's expressions (spec_eval.py) ----------
# An address of a state space is an int: the offset in the shared or local window, else
# the process address.  `at` checks the whole access (all elements) once.

def at_address(th: "Thread", op: Operation, a: int, space: str, nbytes: int) -> int:
    """The address a plus the op's offset, in a's space, after checking that the access of
    `nbytes` bytes there lies in its window (shared, local) or past the null page."""
    real = th.address(op, space, nbytes)
    if space in ("shared", "local"):
        # (the window offset of the address checked: a speculated load outside the window
        # reads elsewhere, Thread.address)
        return (real - th.window_base(space)) & mask(64)
    return (a + op.attributes.get("offset", 0)) & mask(64)


def real_address(th: "Thread", p: int, space: str) -> int:
    return (th.window_base(space) + p) & mask(64) if space in ("shared", "local") else p


def load_value(th: "Thread", p: int, space: str, t: str) -> tuple[object, str]:
    """The value of type t at address p (halves: their bits, as b16)."""
    v = load(real_address(th, p, space), t)
    return (v, "b16") if t in ("f16", "bf16") else (v, t)


def store_value(th: "Thread", p: int, space: str, v: object, t: str) -> None:
    store(real_address(th, p, space), t, from_float(v, t) if t in ("f16", "bf16") else v)


def atomic_update(th: "Thread", op: Operation, p: int, space: str, kind: str, t: str,
                  val: object, new: object = None) -> object:
    """Read-modify-write at p; the value before (halves: their bits, as `val`).  Threads interleave only at sync points,
    so this is atomic.  Float add/min/max keep subnormals (as the compiled path; the PTX
    ISA's flush of atom.add.f32 on .global is a property of old hardware that neither
    models)."""
    addr = real_address(th, p, space)
    old = load(addr, t)
    w = width(t)
    if t in ("f16", "bf16", "f16x2", "bf16x2"):            # atom.add.noftz on halves
        lane = t[:-2] if t.endswith("x2") else t
        out = 0
        for k in range(w // 16):
            x = as_float((old >> (16 * k)) & 0xFFFF, lane)   # type: ignore[operator]
            y = as_float((val >> (16 * k)) & 0xFFFF, lane)   # type: ignore[operator]
            if lane == "f16":
                s = x + y                                  # NumPy: rounded once
            elif isfinite(x) and isfinite(y):
                s = round_fraction(exact(x) + exact(y), "bf16", "rn")
                if s == 0:
                    s = zero_sum(signbit(x), signbit(y), x == 0 and y == 0, "rn", F32)
            else:
                s = F32(x) + F32(y)                        # inf, NaN
            out |= from_float(s, lane) << (16 * k)        # type: ignore[operator]
        store(addr, t, out)
        return old
    if kind == "cas":
        if is_float(t):
            th.unsupported("atom.cas on floating-point types is not supported", op)
        updated = new if old == val else old
    elif kind == "exch":
        updated = val
    elif is_float(t):
        if kind == "add":
            updated = old + val                         # type: ignore[operator]
        elif kind in ("min", "max"):
            updated = float_min_max(old, val, kind == "min", False)
        else:
            th.unsupported(f"atom.{kind}.{t} is not supported", op)
    elif kind == "add":
        updated = (old + val) & mask(w)                 # type: ignore[operator]
    elif kind in ("and", "or", "xor"):
        updated = {"and": old & val, "or": old | val, "xor": old ^ val}[kind]  # type: ignore[operator]
    elif kind in ("min", "max"):
        x, y = signed_value(old, t), signed_value(val, t)  # type: ignore[arg-type]
        updated = (min(x, y) if kind == "min" else max(x, y)) & mask(w)
    elif kind == "inc":
        updated = 0 if old >= val else (old + 1) & mask(w)  # type: ignore[operator]
    else:  # dec
        updated = val if old == 0 or old > val else old - 1  # type: ignore[operator]
    store(addr, t, updated)
    return old


# The interpreter's own layout of an mbarrier object (64 bits; PTX leaves it open): bit 0
# the phase parity, bits 1-21 the arrivals pending, 22-42 the arrivals each phase expects,
# 43-63 the pending transaction count.  The state an arrive returns: the object before it.
_MB_FIELD = (1 << 21) - 1


def _mb_unpack(v: int) -> tuple[int, int, int, int]:
    return v & 1, (v >> 1) & _MB_FIELD, (v >> 22) & _MB_FIELD, (v >> 43) & _MB_FIELD


def _mb_pack(phase: int, pending: int, expected: int, tx: int) -> int:
    return (phase & 1) | (pending & _MB_FIELD) << 1 | (expected & _MB_FIELD) << 22 | \
        (tx & _MB_FIELD) << 43


@handles("ptx.mbarrier")
def _mbarrier(th: "Thread", op: Operation) -> None:
    """mbarrier.init/inval/arrive/arrive_drop/expect_tx/complete_tx/test_wait/try_wait/
    pending_count.  Threads interleave only at sync points: each is atomic."""
    m = set(mods(op))
    if "pending_count" in m:
        th.set(op, _mb_unpack(th.src(op, 0, "b64"))[1], "u32")
        return
    space = "shared" if any(x.startswith("shared") for x in m) else memory_space(op)
    addr = th.address(op, space, 8)
    if "init" in m:
        n = th.src(op, 1, "u32") & _MB_FIELD
        store(addr, "b64", _mb_pack(0, n, n, 0))
        return
    if "inval" in m:
        store(addr, "b64", 0)
        return
    old = load(addr, "b64")
    phase, pending, expected, tx = _mb_unpack(old)
    if "test_wait" in m or "try_wait" in m:
        want = th.src(op, 1, "u32") & 1 if "parity" in m else _mb_unpack(th.src(op, 1, "b64"))[0]
        th.set(op, int(phase != want), "pred")
        return
    arg = th.src(op, 1, "u32") if len(op.operands) > 1 else 1
    count = 1
    if "expect_tx" in m:
        tx += arg
    elif "complete_tx" in m:
        tx -= arg
    else:
        count = arg
    arrives = "arrive" in m or "arrive_drop" in m
    if arrives:
        pending -= count
        if "arrive_drop" in m:
            expected -= count
    if "noComplete" not in m and (arrives or "complete_tx" in m) and \
            pending & _MB_FIELD == 0 and tx & _MB_FIELD == 0:
        pending, phase = expected, phase ^ 1
    store(addr, "b64", _mb_pack(phase, pending, expected, tx))
    if op.results:
        th.set(op, old, "b64")


def in_order_sum(th: "Thread", op: Operation) -> None:
    """`upir.in_order_sum`: init, then the values at start + offset, start + step + offset,
    ... below end + offset added one after another (the add's rounding to nearest, `.ftz`
    flushing its operands and results as PTX's add.ftz.f32 does)."""
    t = "f64" if op.results[0].type == "f64" else "f32"
    on = has(op, "ftz") and t == "f32"
    step = int(op.attributes["step"])
    start, end = (to_signed(th.src(op, i, "u64"), 64) for i in (0, 1))
    total = ftz(as_float(th.src(op, 2, t), t), on)
    offset = int(op.attributes.get("offset", 0))
    with np.errstate(all="ignore"):
        for k in range(max(0, -(-(end - start) // step))):
            addr = (start + k * step + offset) & mask(64)
            if addr < 1 << 16:
                th.fail(f"global memory access at address {addr:#x} (null pointer?)", op)
            value = load(addr, t)
            total = ftz(total + ftz(value, on), on)    # type: ignore[operator]
    th.set(op, total, t)
