"""Small functions that the kernel's planning and the segments' emission share: what an IR
value is computed from (pure over given values, its direction as the thread indices grow,
an integer constant, threadIdx.x), the geometry of the threads a plan selects, and the
source lane of a shuffle as the runtime's warp exchange computes it."""

from __future__ import annotations

import struct

from llvmlite import ir

from cpuify.codegen.lowering import I32, I64
from cpuify.frontend.ptx_ast import type_size
from cpuify.ir.core import Block, Operation, OpResult, Value
from cpuify.ir.dialects import info
from cpuify.ir.modifiers import ty as operand_type


#: special registers with the same value in every thread of a block
ENTRY_SPECIALS = ("%ctaid", "%nctaid", "%ntid")


def shuffle_source(b: ir.IRBuilder, t: ir.Value, mode: str, bval: ir.Value, cword: ir.Value
                   ) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(first thread of the warp, source lane, whether it is within the segment) of shfl.sync
    `mode` for thread t (i64) with lane operand `bval` (< 32) and clamp word `cword` (PTX
    `c`: clamp value in bits 0-4, segment mask in bits 8-12), as the runtime's warp_exchange
    computes them."""
    lane = b.trunc(b.and_(t, I64(31)), I32)
    base = b.and_(t, I64(~31 & (2**64 - 1)))
    cval = b.and_(cword, I32(31))
    segmask = b.and_(b.lshr(cword, I32(8)), I32(31))
    notseg = b.xor(segmask, I32(-1))
    maxlane = b.or_(b.and_(lane, segmask), b.and_(cval, notseg))
    if mode == "up":
        j = b.sub(lane, bval)
        return base, j, b.icmp_signed(">=", j, maxlane)
    j = (b.add(lane, bval) if mode == "down" else b.xor(lane, bval) if mode == "bfly"
         else b.or_(b.and_(lane, segmask), b.and_(bval, notseg)))
    return base, j, b.icmp_signed("<=", j, maxlane)


def access_size(op: Operation) -> int:
    """Bytes one thread's ld/st `op` accesses (all its vector elements)."""
    n = len(op.results) if op.name == "ptx.ld" else len(op.operands) - 1
    return max(1, type_size(operand_type(op))) * max(1, n)


def row_probes(width: int, size: int) -> list[int]:
    """The x thread indices whose addresses cover every 64-byte line of a row of `width`
    threads accessing `size` contiguous bytes each: one per line and the row's last."""
    step = max(1, 64 // size)
    return sorted(set(range(0, width, step)) | {width - 1})


def depends_on(v: Value, leaf: Value, max_depth: int, depth: int = 0) -> bool:
    """Whether v is computed from `leaf` (through at most max_depth operations)."""
    if v is leaf:
        return True
    if depth > max_depth or not isinstance(v, OpResult):
        return False
    return any(depends_on(o, leaf, max_depth, depth + 1) for o in v.op.operands)


def thread_ranges_along(dims: tuple[int, int, int], dim: int, along: tuple[int, int, int]
                        ) -> tuple[tuple[int, int, int], ...]:
    """(start, stop, step) for the x, y and z thread loops over the block `dims`: `along` for
    dimension `dim`, every thread for the others."""
    ranges = [(0, d, 1) for d in dims]
    ranges[dim] = along
    return tuple(ranges)


def pure_over(v: Value, leaves: set[Value], specials: tuple[str, ...] | None,
              max_depth: int, depth: int = 0) -> bool:
    """Whether v is pure computation over `leaves`, constants, parameters, variable
    addresses and special registers (only those whose name starts with one of `specials`,
    when given)."""
    if v in leaves:
        return True
    if depth > max_depth or not isinstance(v, OpResult) or not info(v.op).pure:
        return False
    op = v.op
    if op.name in ("upir.const", "upir.param", "upir.addressof"):
        return True
    if op.name == "upir.special":
        return specials is None or str(op.attributes.get("reg", "")).startswith(specials)
    if op.successors or not op.operands:
        return False
    return all(pure_over(o, leaves, specials, max_depth, depth + 1) for o in op.operands)


_MONOTONE_OPS = ("ptx.add", "ptx.sub", "ptx.mul", "ptx.mad", "ptx.shl", "ptx.mov", "ptx.cvt",
                 "ptx.min", "ptx.max")


def tid_direction(v: Value, depth: int) -> int | None:
    """How integer v moves as the thread indices grow: 1 never down, -1 never up, 0 the
    same for all threads (no thread index in it), None unknown.  Exact arithmetic: the
    caller checks the values at the ends against wrap-around."""
    if not isinstance(v, OpResult) or depth < 0:
        return None
    op = v.op
    if op.name == "upir.special":
        return 1 if str(op.attributes.get("reg", "")).startswith("%tid") else 0
    if op.name in ("upir.const", "upir.param", "upir.addressof"):
        return 0
    if op.name not in _MONOTONE_OPS:
        return None
    if op.name == "ptx.cvt" and any(m.startswith("f") for m in op.attributes.get("mods", [])):
        return None

    def combine(x: int | None, y: int | None) -> int | None:
        if x is None or y is None:
            return None
        if x == 0 or y == 0 or x == y:
            return x or y
        return None

    ds = [tid_direction(o, depth - 1) for o in op.operands]
    if op.name in ("ptx.mov", "ptx.cvt"):
        return ds[0]
    if op.name in ("ptx.add", "ptx.min", "ptx.max"):
        return combine(ds[0], ds[1])
    if op.name == "ptx.sub":
        return combine(ds[0], None if ds[1] is None else -ds[1])
    if op.name == "ptx.shl":
        return ds[0] if ds[1] == 0 else None
    # mul / mad: a thread-dependent factor times a constant of known sign
    if ds[0] == 0 and ds[1] == 0:
        prod = 0
    else:
        k = next((signed_const(o) for o, d in zip(op.operands[:2], ds) if d == 0), None)
        var = ds[0] if ds[1] == 0 else ds[1] if ds[0] == 0 else None
        if k is None or var is None:
            return None
        prod = 0 if k == 0 else var if k > 0 else -var
    return prod if op.name == "ptx.mul" else combine(prod, ds[2])


def signed_const(v: Value) -> int | None:
    """An integer constant read as a signed number of its type's width."""
    k = const_int(v)
    if k is None or v.type not in ("i8", "i16", "i32", "i64"):
        return k
    bits = int(v.type[1:])
    k &= (1 << bits) - 1
    return k - (1 << bits) if k >> (bits - 1) else k


def const_int(v: Value) -> int | None:
    """The value of an integer constant (through moves), else None."""
    while isinstance(v, OpResult) and v.op.name == "ptx.mov" and len(v.op.operands) == 1:
        v = v.op.operands[0]
    if isinstance(v, OpResult) and v.op.name == "upir.const" and isinstance(v.op.attributes["value"], int):
        return int(v.op.attributes["value"])
    return None


def forwards_to(block: Block, join: Block) -> bool:
    """Whether `block` is `join`, or leads to it through blocks that only jump there (an
    argument-less cf.br and nothing else)."""
    for _ in range(8):
        if block is join:
            return True
        if len(block.ops) != 1 or block.ops[0].name != "cf.br" or block.ops[0].successor_args[0]:
            return False
        block = block.ops[0].successors[0]
    return False


def is_thread_x(v: Value) -> bool:
    """Whether v is threadIdx.x (through moves and same-width conversions)."""
    while isinstance(v, OpResult) and v.op.name in ("ptx.mov", "ptx.cvt") and len(v.op.operands) == 1:
        v = v.op.operands[0]
    return isinstance(v, OpResult) and v.op.name == "upir.special" and \
        v.op.attributes.get("reg") == "%tid.x"


def float_from_bits(bits: int, t: str) -> float:
    if t == "f32":
        return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
    if t == "f64":
        return struct.unpack("<d", struct.pack("<Q", bits & (2**64 - 1)))[0]
    return float(bits)


#: a value as seen by thread_linear_form: ({thread dimension: coefficient or None (not a
#: constant)}, constant part, whether a block-uniform non-constant part is added)
ThreadForm = tuple[dict[int, "int | None"], int, bool]


def thread_linear_form(v: Value, ntid: "tuple[int, int, int] | None", depth: int = 0,
                       memo: "dict[Value, ThreadForm | None] | None" = None) -> ThreadForm | None:
    """v as `sum(c_d * tid.d) + const + (block-uniform part)`, or None when it is not such a
    sum (a product of two thread-dependent values, a load, a phi, ...).  `ntid` is the block
    shape in code specialized for it (`%ntid` are constants then), else None."""
    memo = {} if memo is None else memo
    if v in memo:
        return memo[v]
    memo[v] = None                          # (a cycle through a phi is not followed)
    r: ThreadForm | None = None
    c = const_int(v) if isinstance(v, OpResult) and v.op.name == "upir.const" else None
    if c is not None:
        width = int(v.type[1:]) if v.type.startswith("i") and v.type[1:].isdigit() else 64
        r = ({}, c - (1 << width) if width > 1 and c >= 1 << (width - 1) else c, False)
    elif isinstance(v, OpResult) and v.op.name == "upir.special":
        reg = str(v.op.attributes.get("reg", ""))
        dim = {"x": 0, "y": 1, "z": 2}.get(reg[-1:], 0)
        if reg.startswith("%tid."):
            r = ({dim: 1}, 0, False)
        elif reg.startswith("%ntid.") and ntid is not None:
            r = ({}, ntid[dim], False)
        elif reg.startswith(ENTRY_SPECIALS):
            r = ({}, 0, True)
    elif isinstance(v, OpResult) and v.op.name in ("upir.param", "upir.addressof"):
        r = ({}, 0, True)
    elif isinstance(v, OpResult) and depth < 24 and v.op.name.startswith("ptx.") and not v.op.regions:
        r = _thread_linear_op(v.op, ntid, depth, memo)
    memo[v] = r
    return r


def _thread_linear_op(op: Operation, ntid: "tuple[int, int, int] | None", depth: int,
                      memo: "dict[Value, ThreadForm | None]") -> ThreadForm | None:
    m = op.attributes.get("mods", ())
    if {"hi", "wide", "sat", "cc", "f32", "f64", "f16"} & set(m):
        return None
    forms = [thread_linear_form(x, ntid, depth + 1, memo) for x in op.operands]
    if any(f is None for f in forms):
        return None
    if op.name in ("ptx.mov", "ptx.cvt") and len(forms) == 1:
        return forms[0]
    if op.name in ("ptx.add", "ptx.sub") and len(forms) == 2:
        return _lin_add(forms[0], forms[1], 1 if op.name == "ptx.add" else -1)  # type: ignore[arg-type]
    if op.name == "ptx.shl" and len(forms) == 2 and not forms[1][0] and not forms[1][2] \
            and 0 <= forms[1][1] < 32:     # type: ignore[index]
        return _lin_scale(forms[0], ({}, 1 << forms[1][1], False))  # type: ignore[arg-type,index]
    if op.name in ("ptx.mul", "ptx.mad") and "lo" in m and len(forms) >= 2:
        a, b = forms[0], forms[1]
        prod = _lin_scale(a, b) if not b[0] else _lin_scale(b, a) if not a[0] else None  # type: ignore[index,arg-type]
        if prod is None or op.name == "ptx.mul":
            return prod
        return _lin_add(prod, forms[2], 1) if len(forms) == 3 else None  # type: ignore[arg-type]
    return None


def _lin_add(a: ThreadForm, b: ThreadForm, sign: int) -> ThreadForm:
    coefs = dict(a[0])
    for d, k in b[0].items():
        old = coefs.get(d, 0)
        coefs[d] = None if old is None or k is None else old + sign * k
    return coefs, a[1] + sign * b[1], a[2] or b[2]


def _lin_scale(a: ThreadForm, k: ThreadForm) -> ThreadForm:
    """a times the block-uniform k."""
    if not k[2]:
        return ({d: None if c is None else c * k[1] for d, c in a[0].items()}, a[1] * k[1], a[2])
    return ({d: None for d in a[0]}, 0, a[2] or a[1] != 0 or bool(a[0]) or k[1] != 0)


def masks_shifted_thread_index(v: Value, modulus: int, ntid: "tuple[int, int, int] | None",
                               low: int = 1) -> bool:
    """Whether `v mod modulus` (modulus a power of two: `v & (modulus - 1)`) may be the
    wrapping thread index of LLVM's loop-vectorizer miscompile (codegen/jit.py, "masked
    indices"): v is linear in the thread indices (thread_linear_form) with a part that is not
    a multiple of the modulus in tid.x, and an offset that need not be one: a constant like
    the 1 of `(tid + 1) & 31`, a block-uniform term, or tid.y/tid.z terms (uniform in a row of
    the thread loop) with such coefficients; or tid.x's coefficient is not the mask's unit
    (`(3 * tid) & 63`).  `tid.x & 31` and `(tid.x + 32 * tid.y) & 31` are not.  `low` is the mask's lowest bit (`& 248`: 8): LLVM sees a recurrence in the masked
    bits only when tid.x's coefficient is a multiple of it (`(8 * t + 8) & 248`; not the bit
    test `i & 1024` of bitonic sort)."""
    if modulus < 2 or modulus & (modulus - 1):
        return False
    form = thread_linear_form(v, ntid)
    if form is None:
        return False
    coefs, const, sym = form
    x = coefs.get(0, 0)
    if x is not None and (x % modulus == 0 or x % low != 0):
        return False
    other = any(k is None or k % modulus for d, k in coefs.items() if d != 0)
    # a coefficient other than the mask's unit wraps too: `(3 * tid) % 64` in code for
    # 64-thread blocks became an interleaved load of sh[3 * tid] (the fuzzer's fz_2621_1231)
    return sym or other or const % modulus != 0 or x != low


def uniform_constant(v: Value, ntid: "tuple[int, int, int] | None") -> int | None:
    """The value of v where it is a constant in this code (`blockDim.x * blockDim.y` in code
    specialized for the block shape)."""
    form = thread_linear_form(v, ntid)
    return form[1] if form is not None and not form[0] and not form[2] else None
