"""LLVM lowering of `upir.in_order_sum` (a thread's in-order float sum of a strided run of
global memory: split-in-order-sums' read-back of a row's stored terms).

The op becomes a call of a scalar function (the sum's loop, one thread) that carries LLVM's
`vector-function-abi-variant` attribute naming vector variants of 4, 8 and 16 lanes (f64:
2, 4 and 8), plain and masked.  The op stands alone between soft barriers, so its thread
loop has no inner loop and LLVM's loop vectorizer vectorizes it across the threads, calling
the variant for as many threads as its vector has lanes.  Each lane still adds its own
terms one after another, in order, so the sums are bit for bit those of the scalar loop;
only their memory access changes:

    fast path (every lane as many terms, contiguous, `step` = the element's size): per
        chunk of N columns, N contiguous vector loads (one row of N terms per thread) and an
        N x N transpose in registers (log2 N rounds of two-input shuffles), then N vector
        adds, column after column; the last count % N columns by gathers;
    same count, strided terms: a gather per column;
    otherwise (counts differ, or the masked variant with lanes off): the scalar function
        per active lane.

Instead of a gather per column (two 8-lane gathers with 64-bit indices recomputed each
column, the thread's sum through its slot) the row softmax's read-back loads each row's
terms once as vectors.  The variant's address arguments are integers, not pointers: LLVM's
access analysis takes a call with a vector variant and pointer arguments for one that may
touch anything, and would not vectorize the loop; the scalar function reads memory and is
declared to (LLVM infers `memory(read)`), `noinline` so that it stays a call until the
vectorizer has seen it, and `linkonce_odr` so that the optimizer does not change its
signature (a constant `init` folded in: the variant would no longer match)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.codegen.lowering import I1, I32, I64, handles, ptx_llvm_type
from cpuify.ir.core import Operation
from cpuify.ir.modifiers import has

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter

#: the vector widths of the variants, by element type (those LLVM may choose on AVX2 and
#: AVX-512 machines)
LANES = {"f32": (4, 8, 16), "f64": (2, 4, 8)}
_SMALLEST_NORMAL = {"f32": 1.1754943508222875e-38, "f64": 2.2250738585072014e-308}


@handles("upir.in_order_sum")
def _in_order_sum(e: SegmentEmitter, op: Operation) -> None:
    t = op.results[0].type
    # .ftz flushes an f32 add's operands and result: the CPU does it where the kernel runs
    # with MXCSR's DAZ/FTZ (codegen/denormals.py), else the function's code
    flush = t == "f32" and has(op, "ftz") and not e.kc.hardware_flush
    fn = in_order_sum_function(e.mod.module, t, int(op.attributes["step"]), flush)
    offset = I64(op.attributes.get("offset", 0))
    start, end = (e.b.add(e.operand(v, "u64"), offset) for v in op.operands[:2])
    call = e.b.call(fn, [start, end, e.operand(op.operands[2], t)])
    set.add(call.attributes, f'"vector-function-abi-variant"="{_variant_mappings(fn, t)}"')
    e.result(op, call, t)


def _name(t: str, step: int, flush: bool) -> str:
    return f"cpuify_in_order_sum_{t}_s{step}" + ("_ftz" if flush else "")


def _variant_mappings(fn: ir.Function, t: str) -> str:
    """The attribute's value: LLVM's vector ABI names (`_ZGV_LLVM_<mask><lanes>vvv_<scalar>
    (<variant>)`, comma-separated)."""
    return ",".join(f"_ZGV_LLVM_{m}{n}vvv_{fn.name}({fn.name}_{m.lower()}{n})"
                    for n in LANES[t] for m in ("N", "M"))


def in_order_sum_function(module: ir.Module, t: str, step: int, flush: bool) -> ir.Function:
    """The scalar function (i64 start, i64 end, init) -> sum for this element type, step
    and flushing, with its vector variants, defined once per module."""
    name = _name(t, step, flush)
    existing = module.globals.get(name)
    if existing is not None:
        return existing  # type: ignore[return-value]
    ft = ptx_llvm_type(t)
    fn = ir.Function(module, ir.FunctionType(ft, [I64, I64, ft]), name=name)
    _scalar_body(fn, t, step, flush)
    variants = []
    for n in LANES[t]:
        plain = _vector_function(module, fn, t, step, flush, n, masked=False)
        variants += [plain, _vector_function(module, fn, t, step, flush, n, masked=True, plain=plain)]
    # (the variants are called only once the vectorizer has used them: kept until then)
    used = module.globals.get("llvm.compiler.used")
    if used is None:
        used = ir.GlobalVariable(module, ir.ArrayType(ir.PointerType(), 0), "llvm.compiler.used")
        used.linkage = "appending"
        used.section = "llvm.metadata"
        used.initializer = ir.Constant(used.value_type, [])
    elements = list(used.initializer.constant) + variants  # type: ignore[union-attr]
    used.value_type = ir.ArrayType(ir.PointerType(), len(elements))
    used.type = used.value_type.as_pointer()
    used.initializer = ir.Constant(used.value_type, elements)
    return fn


def _flushed(b: ir.IRBuilder, module: ir.Module, v: ir.Value, t: str, on: bool) -> ir.Value:
    """A subnormal (every lane of a vector) replaced by a zero of its sign (PTX .ftz)."""
    if not on:
        return v
    suffix = t if not isinstance(v.type, ir.VectorType) else f"v{v.type.count}{t}"
    fabs = _intrinsic(module, f"llvm.fabs.{suffix}", v.type, [v.type])
    copysign = _intrinsic(module, f"llvm.copysign.{suffix}", v.type, [v.type, v.type])
    tiny = b.fcmp_ordered("<", b.call(fabs, [v]), _splat_constant(v.type, _SMALLEST_NORMAL[t]))
    return b.select(tiny, b.call(copysign, [_splat_constant(v.type, 0.0), v]), v)


def _intrinsic(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    found = module.globals.get(name)
    return found if found is not None else ir.Function(module, ir.FunctionType(ret, args), name)  # type: ignore[return-value]


def _splat_constant(ty: ir.Type, value: float) -> ir.Constant:
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [value] * ty.count)
    return ir.Constant(ty, value)


def _scalar_body(fn: ir.Function, t: str, step: int, flush: bool) -> None:
    fn.linkage = "linkonce_odr"
    fn.attributes.add("noinline")
    fn.attributes.add("nounwind")
    start, end, init = fn.args
    ft = fn.function_type.return_type
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    first = _flushed(b, fn.module, init, t, flush)
    b.cbranch(b.icmp_signed("<", start, end), loop, done)
    b.position_at_end(loop)
    p = b.phi(I64)
    total = b.phi(ft)
    value = b.load(b.inttoptr(p, ft.as_pointer()))
    value.align = 4 if t == "f32" else 8
    added = _flushed(b, fn.module, b.fadd(total, _flushed(b, fn.module, value, t, flush)), t, flush)
    after = b.add(p, I64(step))
    p.add_incoming(start, entry)
    p.add_incoming(after, loop)
    total.add_incoming(first, entry)
    total.add_incoming(added, loop)
    b.cbranch(b.icmp_signed("<", after, end), loop, done)
    b.position_at_end(done)
    out = b.phi(ft)
    out.add_incoming(first, entry)
    out.add_incoming(added, loop)
    b.ret(out)


def _vector_function(module: ir.Module, scalar: ir.Function, t: str, step: int, flush: bool,
                     n: int, *, masked: bool, plain: ir.Function | None = None) -> ir.Function:
    ft = scalar.function_type.return_type
    vf, vi, vb = ir.VectorType(ft, n), ir.VectorType(I64, n), ir.VectorType(I1, n)
    args = [vi, vi, vf] + ([vb] if masked else [])
    fn = ir.Function(module, ir.FunctionType(vf, args), f"{scalar.name}_{'m' if masked else 'n'}{n}")
    fn.linkage = "linkonce_odr"
    fn.attributes.add("nounwind")
    start, end, init = fn.args[:3]
    entry, per_lane = fn.append_basic_block("entry"), fn.append_basic_block("per_lane")
    b = ir.IRBuilder(entry)
    if masked:
        assert plain is not None
        whole = fn.append_basic_block("whole")
        b.cbranch(_all(b, module, fn.args[3], n), whole, per_lane)
        b.position_at_end(whole)
        b.ret(b.call(plain, [start, end, init]))
        _per_lane(fn, per_lane, scalar, n, fn.args[3])
        return fn
    size = 4 if t == "f32" else 8
    # terms per lane: ceil((end - start) / step), 0 where end <= start
    span = b.sub(end, start)
    count = b.sdiv(b.add(span, _splat_constant(vi, step - 1)), _splat_constant(vi, step))
    count = b.select(b.icmp_signed(">", span, _splat_constant(vi, 0)), count, _splat_constant(vi, 0))
    c0 = b.extract_element(count, I32(0))
    same = _all(b, module, b.icmp_signed("==", count, _splat(b, c0, vi)), n)
    uniform = fn.append_basic_block("uniform")
    b.cbranch(same, uniform, per_lane)
    _per_lane(fn, per_lane, scalar, n, None)
    b.position_at_end(uniform)
    total = _flushed(b, module, init, t, flush)
    k0 = I64(0)
    if step == size:
        total, k0 = _transposed_chunks(fn, b, start, c0, total, t, flush, n)
    # the remaining columns (all of them for strided terms): a gather each
    ptrs_type = ir.VectorType(ir.PointerType(), n)
    gather = _intrinsic(module, f"llvm.masked.gather.v{n}{t}.v{n}p0", vf, [ptrs_type, I32, vb, vf])

    def gathered(b: ir.IRBuilder, k: ir.Value, acc: ir.Value) -> ir.Value:
        ptrs = b.inttoptr(b.add(start, _splat(b, b.mul(k, I64(step)), vi)), ptrs_type)
        got = b.call(gather, [ptrs, I32(size), ir.Constant(vb, [1] * n), ir.Constant(vf, ir.Undefined)])
        return _flushed(b, module, b.fadd(acc, _flushed(b, module, got, t, flush)), t, flush)

    b.ret(_counted_loop(fn, b, k0, c0, total, gathered))
    return fn


def _transposed_chunks(fn: ir.Function, b: ir.IRBuilder, start: ir.Value, count: ir.Value,
                       total: ir.Value, t: str, flush: bool, n: int) -> tuple[ir.Value, ir.Value]:
    """The loop over the count // n whole chunks of n columns: each lane's n terms loaded as
    one vector, the n x n block transposed, its columns added in order.  Returns the sums
    after it and the first column left."""
    module = fn.module
    vf = total.type
    size = 4 if t == "f32" else 8
    chunks = b.sdiv(count, I64(n))

    def chunk(b: ir.IRBuilder, j: ir.Value, acc: ir.Value) -> ir.Value:
        column = b.mul(j, I64(n * size))
        rows = []
        for lane in range(n):
            row = b.load(b.inttoptr(b.add(b.extract_element(start, I32(lane)), column),
                                    vf.as_pointer()))
            row.align = size
            rows.append(row)
        for c in transpose(b, rows):
            acc = _flushed(b, module, b.fadd(acc, _flushed(b, module, c, t, flush)), t, flush)
        return acc

    return _counted_loop(fn, b, I64(0), chunks, total, chunk), b.mul(chunks, I64(n))


def _counted_loop(fn: ir.Function, b: ir.IRBuilder, first: ir.Value, stop: ir.Value,
                  total: ir.Value, body: Callable[[ir.IRBuilder, ir.Value, ir.Value], ir.Value]
                  ) -> ir.Value:
    """`for (k = first; k < stop; k++) total = body(k, total)` (i64 k), from b's block; b
    is left after the loop.  Returns the total after it."""
    here = b.block
    loop, done = fn.append_basic_block("loop"), fn.append_basic_block("loop_done")
    b.cbranch(b.icmp_signed("<", first, stop), loop, done)
    b.position_at_end(loop)
    k = b.phi(I64)
    acc = b.phi(total.type)
    added = body(b, k, acc)
    k1 = b.add(k, I64(1))
    k.add_incoming(first, here)
    k.add_incoming(k1, b.block)
    acc.add_incoming(total, here)
    acc.add_incoming(added, b.block)
    b.cbranch(b.icmp_signed("<", k1, stop), loop, done)
    latch = b.block
    b.position_at_end(done)
    out = b.phi(total.type)
    out.add_incoming(total, here)
    out.add_incoming(added, latch)
    return out


def transpose(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The columns of the n x n matrix whose rows are the n vectors `rows` (n a power of
    two): log2 n rounds, each swapping the off-diagonal b x b blocks of every 2b x 2b block
    (b = n/2, n/4, ..., 1) with one two-input shuffle per row."""
    n = len(rows)
    rows = list(rows)
    half = n // 2
    while half >= 1:
        out = list(rows)
        for i in range(n):
            if i & half:
                continue
            j = i | half
            low = [lane if not lane & half else n + lane - half for lane in range(n)]
            high = [lane + half if not lane & half else n + lane for lane in range(n)]
            out[i] = b.shuffle_vector(rows[i], rows[j], ir.Constant(ir.VectorType(I32, n), low))
            out[j] = b.shuffle_vector(rows[i], rows[j], ir.Constant(ir.VectorType(I32, n), high))
        rows = out
        half //= 2
    return rows


def _splat(b: ir.IRBuilder, x: ir.Value, vty: ir.VectorType) -> ir.Value:
    v = b.insert_element(ir.Constant(vty, ir.Undefined), x, I32(0))
    return b.shuffle_vector(v, ir.Constant(vty, ir.Undefined), ir.Constant(ir.VectorType(I32, vty.count), [0] * vty.count))


def _all(b: ir.IRBuilder, module: ir.Module, v: ir.Value, n: int) -> ir.Value:
    reduce_and = _intrinsic(module, f"llvm.vector.reduce.and.v{n}i1", I1, [v.type])
    return b.call(reduce_and, [v])


def _per_lane(fn: ir.Function, block: ir.Block, scalar: ir.Function, n: int,
              mask: ir.Value | None) -> None:
    """The scalar function for each lane (each lane the mask has on), in `block`."""
    b = ir.IRBuilder(block)
    start, end, init = fn.args[:3]
    out: ir.Value = init
    for lane in range(n):
        args = [b.extract_element(v, I32(lane)) for v in (start, end, init)]
        if mask is None:
            out = b.insert_element(out, b.call(scalar, args), I32(lane))
            continue
        on = b.extract_element(mask, I32(lane))
        here = b.block
        run, join = fn.append_basic_block(f"lane{lane}"), fn.append_basic_block(f"lane{lane}_done")
        b.cbranch(on, run, join)
        b.position_at_end(run)
        got = b.insert_element(out, b.call(scalar, args), I32(lane))
        b.branch(join)
        b.position_at_end(join)
        merged = b.phi(out.type)
        merged.add_incoming(out, here)
        merged.add_incoming(got, run)
        out = merged
    b.ret(out)
