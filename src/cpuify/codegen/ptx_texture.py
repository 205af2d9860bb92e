"""LLVM lowering of the texture and surface instructions (`ptx.tex`, `ptx.tld4`, `ptx.txq`,
`ptx.suld`, `ptx.sust`): calls into the native runtime (runtime/cpuify_tex.c), which
samples through the descriptor a texture or surface object handle points to.

The calls return the four 32-bit results (or up to 16 bytes of a surface load) as an LLVM
`{i64, i64}`, which x86-64 and AArch64 return in two registers like the C struct of two
uint64_t the runtime declares: no memory round trip.  The `info` word packs the geometry,
coordinate and result types (cpuify_tex.h)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.codegen.lowering import F32, I32, I64, VOID, handles
from cpuify.ir.core import Operation
from cpuify.ir.modifiers import has, mods, types

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter

PAIR = ir.LiteralStructType([I64, I64])
GEOMETRY = {"1d": 1, "2d": 2, "3d": 3, "a1d": 4, "a2d": 5}
RESULT = {"f32": 0, "s32": 1, "u32": 2}
GATHER = {"r": 1, "g": 2, "b": 3, "a": 4}
BOUNDARY = {"trap": 0, "clamp": 1, "zero": 2}
TXQ = ("width", "height", "depth", "channel_data_type", "channel_order", "normalized_coords",
       "filter_mode", "addr_mode_0", "addr_mode_1", "addr_mode_2", "array_size",
       "num_mipmap_levels", "num_samples")


def geometry(op: Operation) -> int:
    return next(GEOMETRY[m] for m in mods(op) if m in GEOMETRY)


def _handle(e: SegmentEmitter, op: Operation) -> ir.Value:
    return e.operand(op.operands[0], "b64")


def _coords(e: SegmentEmitter, op: Operation, coord_type: str) -> list[ir.Value]:
    """The four coordinates as i32 bits (the layer of a layered geometry is an integer)."""
    out = []
    layered = geometry(op) >= 4
    for k, v in enumerate(op.operands[1:5]):
        t = "s32" if (layered and k == 0) or coord_type != "f32" else "f32"
        lv = e.operand(v, t)
        out.append(e.b.bitcast(lv, I32) if lv.type == F32 else lv)
    return out


def _words(e: SegmentEmitter, pair: ir.Value) -> list[ir.Value]:
    b = e.b
    lo, hi = b.extract_value(pair, 0), b.extract_value(pair, 1)
    return [b.trunc(lo, I32), b.trunc(b.lshr(lo, I64(32)), I32),
            b.trunc(hi, I32), b.trunc(b.lshr(hi, I64(32)), I32)]


@handles("ptx.tex", "ptx.tld4")
def _tex(e: SegmentEmitter, op: Operation) -> None:
    result_type, coord_type = types(op)[0], types(op)[1]
    info = geometry(op) | (0x10 if coord_type == "s32" else 0) | RESULT[result_type] << 5
    if op.name == "ptx.tld4":
        info |= next(GATHER[m] for m in mods(op) if m in GATHER) << 8
    fn = e.mod.intrinsic("cpuify_tex", PAIR, [I64, I32, I32, I32, I32, I32])
    pair = e.b.call(fn, [_handle(e, op), I32(info), *_coords(e, op, coord_type)])
    for k, w in enumerate(_words(e, pair)[:len(op.results)]):
        e.result(op, e.b.bitcast(w, F32) if result_type == "f32" else w, result_type, k)


@handles("ptx.txq")
def _txq(e: SegmentEmitter, op: Operation) -> None:
    query = next(TXQ.index(m) for m in mods(op) if m in TXQ)
    fn = e.mod.intrinsic("cpuify_txq", I32, [I64, I32])
    e.result(op, e.b.call(fn, [_handle(e, op), I32(query)]), "b32")


def _surface_info(op: Operation) -> tuple[int, int, int]:
    """(info word, element bits, elements) of a surface access."""
    bits = int(types(op)[-1][1:])
    n = 4 if has(op, "v4") else 2 if has(op, "v2") else 1
    mode = next((BOUNDARY[m] for m in mods(op) if m in BOUNDARY), 0)
    return geometry(op) | (bits * n // 8) << 4 | mode << 12, bits, n


@handles("ptx.suld")
def _suld(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    info, bits, n = _surface_info(op)
    fn = e.mod.intrinsic("cpuify_suld", PAIR, [I64, I32, I32, I32, I32, I32])
    pair = b.call(fn, [_handle(e, op), I32(info), *_coords(e, op, "s32")])
    wide = b.or_(b.zext(b.extract_value(pair, 0), ir.IntType(128)),
                 b.shl(b.zext(b.extract_value(pair, 1), ir.IntType(128)), ir.IntType(128)(64)))
    et = ir.IntType(bits)
    for k in range(min(n, len(op.results))):
        v = b.trunc(b.lshr(wide, ir.IntType(128)(k * bits)), et) if k else b.trunc(wide, et)
        e.result(op, v, f"b{bits}", k)


@handles("ptx.sust")
def _sust(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    info, bits, n = _surface_info(op)
    wide: ir.Value = ir.IntType(128)(0)
    for k, v in enumerate(op.operands[5:5 + n]):
        lv = e.operand(v, f"b{bits}")
        part = b.shl(b.zext(lv, ir.IntType(128)), ir.IntType(128)(k * bits)) if k else \
            b.zext(lv, ir.IntType(128))
        wide = b.or_(wide, part)
    lo = b.trunc(wide, I64)
    hi = b.trunc(b.lshr(wide, ir.IntType(128)(64)), I64)
    fn = e.mod.intrinsic("cpuify_sust", VOID, [I64, I32, I32, I32, I32, I32, I64, I64])
    b.call(fn, [_handle(e, op), I32(info), *_coords(e, op, "s32"), lo, hi])
