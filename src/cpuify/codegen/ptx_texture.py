"""LLVM lowering of the texture and surface instructions (`ptx.tex`, `ptx.tld4`, `ptx.txq`,
`ptx.suld`, `ptx.sust`): calls into the native runtime (runtime/cpuify_tex.c), which
samples through the descriptor a texture or surface object handle points to; `tex1Dfetch`
of 32-bit channels from linear memory (the common lookup table) is read inline.

The calls return the four 32-bit results (or up to 16 bytes of a surface load) as an LLVM
`{i64, i64}`, which x86-64 and AArch64 return in two registers like the C struct of two
uint64_t the runtime declares: no memory round trip.  The `info` word packs the geometry,
coordinate and result types (cpuify_tex.h)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

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
    handle, coords = _handle(e, op), _coords(e, op, coord_type)
    fn = e.mod.intrinsic("cpuify_tex", PAIR, [I64, I32, I32, I32, I32, I32])
    if op.name == "ptx.tex" and geometry(op) == 1 and coord_type == "s32":
        words = _fetch_inline(e, handle, coords[0], result_type == "f32",
                              lambda: _words(e, e.b.call(fn, [handle, I32(info), *coords])))
    else:
        words = _words(e, e.b.call(fn, [handle, I32(info), *coords]))
    for k, w in enumerate(words[:len(op.results)]):
        e.result(op, e.b.bitcast(w, F32) if result_type == "f32" else w, result_type, k)


# fields of cpuify_texdesc (runtime/cpuify_tex.h) that tex1Dfetch's inline path reads
_MAGIC, _CHANNELS, _BITS, _KIND, _LINEAR, _WIDTH, _DATA = 0, 4, 8, 12, 24, 56, 104
_TEX_MAGIC = 0x31584554


def _fetch_inline(e: SegmentEmitter, handle: ir.Value, index: ir.Value, want_float: bool,
                  call_runtime: Callable[[], list[ir.Value]]) -> list[ir.Value]:
    """tex1Dfetch: an element of 32-bit channels (float for f32 results, integers for s32/u32)
    of a linear resource is read inline (zeros out of range, as the runtime does); any other
    format goes to the runtime.  The runtime's call costs several times the load."""
    b = e.b
    check = e.fn.append_basic_block("tex1dfetch.check")
    fast = e.fn.append_basic_block("tex1dfetch.inline")
    slow = e.fn.append_basic_block("tex1dfetch.runtime")
    done = e.fn.append_basic_block("tex1dfetch.done")
    # a null handle goes to the runtime, which reports it (the kernel traps)
    b.cbranch(b.icmp_unsigned("!=", handle, I64(0)), check, slow)
    b.position_at_end(check)
    desc = b.inttoptr(handle, ir.IntType(8).as_pointer())

    def field(offset: int, t: ir.Type) -> ir.Value:
        v = b.load(b.bitcast(b.gep(desc, [I64(offset)]), t.as_pointer()))
        v.align = t.width // 8 if isinstance(t, ir.IntType) else 4
        return v
    channels, width = field(_CHANNELS, I32), field(_WIDTH, I64)
    kind_ok = b.icmp_unsigned("==" if want_float else "!=", field(_KIND, I32), I32(2))
    is_texture = b.icmp_unsigned("==", field(_MAGIC, I32), I32(_TEX_MAGIC))
    ok = b.and_(b.and_(b.icmp_unsigned("==", field(_LINEAR, I32), I32(1)),
                       b.icmp_unsigned("==", field(_BITS, I32), I32(32))),
                b.and_(b.and_(kind_ok, is_texture), b.icmp_unsigned("!=", width, I64(0))))
    b.cbranch(ok, fast, slow)
    b.position_at_end(fast)
    i64 = b.sext(index, I64)
    inside = b.icmp_unsigned("<", i64, width)
    # out of range: read element 0 (it exists: width > 0) and return zeros
    elem = b.mul(b.select(inside, i64, I64(0)), b.zext(channels, I64))
    base = b.bitcast(b.inttoptr(field(_DATA, I64), ir.IntType(8).as_pointer()), I32.as_pointer())
    fast_words = []
    for c in range(4):
        has = b.icmp_unsigned(">", channels, I32(c))
        idx = b.select(has, b.add(elem, I64(c)), elem)
        v = b.load(b.gep(base, [idx]))
        v.align = 4
        fast_words.append(b.select(b.and_(inside, has), v, I32(0)))
    fast_end = b.block
    b.branch(done)
    b.position_at_end(slow)
    slow_words = call_runtime()
    slow_end = b.block
    b.branch(done)
    b.position_at_end(done)
    out = []
    for fw, sw in zip(fast_words, slow_words):
        phi = b.phi(I32)
        phi.add_incoming(fw, fast_end)
        phi.add_incoming(sw, slow_end)
        out.append(phi)
    return out


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
