"""LLVM lowering of the `upir.*` and `cf.*` ops (constants, parameters, special registers,
variable addresses, branches, exit, trap, fences, printf, malloc/free), one handler per op,
registered in the lowering table (cpuify.codegen.lowering) like the PTX instructions'
(ptx_spec.py, ptx_ops.py, ptx_tensor.py, ptx_texture.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.codegen.kernel_abi import ctx_index
from cpuify.codegen.layout import (
    ERR_ASSERT, ERR_STACK_OVERFLOW, ERR_TRAP, STATE_EXITED, STATE_UNKNOWN,
)
from cpuify.codegen.lowering import I32, I64, PTR, VOID, handles, ptx_llvm_type
from cpuify.frontend.ptx_ast import type_size
from cpuify.ir.core import Operation

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter


@handles("upir.const")
def _const(e: SegmentEmitter, op: Operation) -> None:
    e.vals[op.results[0]] = e.constant(op.results[0])


@handles("upir.param")
def _param(e: SegmentEmitter, op: Operation) -> None:
    # parameters never change during a launch: load once, before the thread loops, so
    # that stores through other pointers cannot force a reload per thread
    t = op.attributes["type"]
    is_ptr = op.results[0] in e.kc.pointers
    key = (op.attributes["offset"], t, is_ptr)
    v = e.param_cache.get(key)
    if v is None:
        b = e.entry_builder
        p = b.gep(e.params, [I64(op.attributes["offset"])])
        lt = PTR if is_ptr else ptx_llvm_type(t)
        v = b.load(b.bitcast(p, lt.as_pointer()))
        v.align = 1 if type_size(t) == 1 else min(type_size(t), 4)
        e.param_cache[key] = v
    if is_ptr:
        e.define(op.results[0], v)
    else:
        e.result(op, v, t)


@handles("upir.launch_store")
def _launch_store(e: SegmentEmitter, op: Operation) -> None:
    # a value the launch prologue hands to the grid, read there as a parameter
    v = op.operands[0]
    lv = e.get(v)
    p = e.b.gep(e.params, [I64(op.attributes["offset"])])
    e.b.store(lv, e.b.bitcast(p, lv.type.as_pointer()))


@handles("upir.special")
def _special(e: SegmentEmitter, op: Operation) -> None:
    reg: str = op.attributes["reg"]
    base, _, comp = reg.partition(".")
    k = "xyz".index(comp) if comp in ("x", "y", "z") else 0
    b = e.b
    if base == "%tid":
        v = e.tid[k]
    elif base == "%ntid":
        v = e.ntid[k]
    elif base == "%ctaid":
        v = e.ctaid[k]
    elif base == "%nctaid":
        v = e.nctaid[k]
    elif base == "%laneid":
        v = b.and_(e.linear_tid, I32(31))
    elif base == "%warpid":
        v = b.lshr(e.linear_tid, I32(5))
    elif base == "%nwarpid":
        v = b.lshr(b.add(e.nthreads, I32(31)), I32(5))
    elif base == "%warpsize":
        v = I32(32)
    elif base.startswith("%lanemask"):
        lane = b.and_(e.linear_tid, I32(31))
        one = b.shl(I32(1), lane)
        kind = base[len("%lanemask_"):]
        if kind == "eq":
            v = one
        elif kind == "lt":
            v = b.sub(one, I32(1))
        elif kind == "le":
            v = b.or_(one, b.sub(one, I32(1)))
        elif kind == "gt":
            v = b.not_(b.or_(one, b.sub(one, I32(1))))
        else:  # ge
            v = b.not_(b.sub(one, I32(1)))
    elif base in ("%smid", "%gridid"):
        v = I32(0)
    elif base == "%nsmid":
        v = I32(1)
    elif base == "%dynamic_smem_size":
        v = e.dyn_shared
    elif base in ("%total_smem_size", "%aggr_smem_size"):
        v = b.add(e.dyn_shared, I32(e.kc.shared.dynamic_offset))
    else:
        e.kc.error(f"special register '{reg}' is not supported", op)
        return
    e.result(op, v, "u32")


@handles("upir.clock")
def _clock(e: SegmentEmitter, op: Operation) -> None:
    fn = e.mod.intrinsic("llvm.readcyclecounter", I64, [])
    v = e.b.call(fn, [])
    e.result(op, v if op.results[0].type == "i64" else e.b.trunc(v, I32), "u64")


@handles("upir.envreg")
def _envreg(e: SegmentEmitter, op: Operation) -> None:
    # the runtime's value for the running launch (the grid workspace of a cooperative one)
    reg = str(op.attributes.get("reg", "%envreg0"))
    index = int(reg[len("%envreg"):] or 0)
    fn = e.mod.intrinsic("cpuify_envreg", I32, [I32])
    e.result(op, e.b.call(fn, [I32(index)]), "u32")


@handles("upir.addressof")
def _addressof(e: SegmentEmitter, op: Operation) -> None:
    sym = op.attributes["symbol"]
    space = op.attributes["space"]
    b = e.b
    if space == "shared":
        off = e.kc.shared.offsets.get(sym)
        if off is None:
            e.kc.error(f"unknown shared variable '{sym}'", op)
        e.result(op, I64(off), "u64")
    elif space == "local":
        off = e.kc.local_offsets.get(sym)
        if off is None:
            e.kc.error(f"local variable '{sym}' is not declared in this kernel", op)
        e.result(op, I64(off), "u64")
    elif space == "param":
        p = next((p for p in e.kc.kernel.params if p.name == sym), None)
        if p is None:
            e.kc.error(f"unknown parameter '{sym}'", op)
        assert p is not None
        e.define(op.results[0], b.gep(e.params, [I64(p.offset)]))
    else:
        g = e.mod.globals.get(sym)
        if g is None:
            e.kc.error(f"unknown global variable '{sym}'", op)
        e.define(op.results[0], b.bitcast(g, PTR))


@handles("cf.br")
def _br(e: SegmentEmitter, op: Operation) -> None:
    target = e.jump(op.successors[0], op.successor_args[0])
    e.b.branch(target)


@handles("cf.cond_br")
def _cond_br(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    join = e.skip_regions.get(op)
    if join is not None:        # a deferred `if`: runs after the thread loop
        b.branch(e.jump(join, []))
        return
    cond = e.get(op.operands[0])
    # evaluate both edges' arguments before storing any (parallel copy)
    t_bb = e.fn.append_basic_block("edge.t")
    f_bb = e.fn.append_basic_block("edge.f")
    b.cbranch(cond, t_bb, f_bb)
    saved = dict(e.vals)
    for bb, succ, args in ((t_bb, op.successors[0], op.successor_args[0]),
                           (f_bb, op.successors[1], op.successor_args[1])):
        b.position_at_end(bb)
        e.vals = dict(saved)
        target = e.jump(succ, args)
        b.branch(target)


@handles("upir.exit")
def _exit(e: SegmentEmitter, op: Operation) -> None:
    if e.last_state is not None:
        e.b.store(I32(STATE_EXITED), e.last_state)
    elif e.kc.syncs and (e.masked_loop or not e.all_exit):
        e.b.store(I32(STATE_EXITED), e.state_ptr())
    e.b.branch(e.latch)


@handles("upir.trap")
def _trap(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    code = ERR_ASSERT if op.attributes.get("assert") else \
        ERR_STACK_OVERFLOW if op.attributes.get("stack_overflow") else ERR_TRAP
    b.store(I32(code), b.gep(e.ctx, [I32(0), I32(ctx_index("error"))]))
    b.ret(I32(STATE_UNKNOWN))


@handles("upir.fence", "upir.nanosleep")
def _fence(e: SegmentEmitter, op: Operation) -> None:
    if op.name == "upir.fence":
        e.b.fence("seq_cst")


@handles("upir.printf")
def _printf(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    fmt = e.get(op.operands[0])
    args = e.get(op.operands[1]) if len(op.operands) > 1 else I64(0)
    fmt_p = fmt if isinstance(fmt.type, ir.PointerType) else b.inttoptr(fmt, PTR)
    args_p = args if isinstance(args.type, ir.PointerType) else b.inttoptr(args, PTR)
    if op.attributes.get("assert"):
        fn = e.mod.intrinsic("cpuify_assert_message", VOID, [PTR])
        b.call(fn, [fmt_p])
        return
    fn = e.mod.intrinsic("cpuify_vprintf", I32, [PTR, PTR])
    r = b.call(fn, [fmt_p, args_p])
    if op.results:
        e.result(op, r, "s32")


@handles("upir.malloc")
def _malloc(e: SegmentEmitter, op: Operation) -> None:
    # the runtime's malloc: one a cancelled launch cannot leave holding the heap's lock
    fn = e.mod.intrinsic("cpuify_device_malloc", PTR, [I64])
    r = e.b.call(fn, [e.operand(op.operands[0], "u64")])
    e.define(op.results[0], r)


@handles("upir.call_stack")
def _call_stack(e: SegmentEmitter, op: Operation) -> None:
    # this worker's call stack (a recursion never spans a sync point, so the threads a
    # worker runs one after another share it), then its size: the stack size limit
    e.uses_call_stack = True
    base = e.b.call(e.mod.intrinsic("cpuify_call_stack", PTR, []), [])
    size = e.b.call(e.mod.intrinsic("cpuify_call_stack_size", I64, []), [])
    e.define(op.results[0], e.b.ptrtoint(base, I64))
    e.define(op.results[1], size)


@handles("upir.launch_buffer")
def _launch_buffer(e: SegmentEmitter, op: Operation) -> None:
    # a kernel launched from device code: the descriptor of the kernel whose address the
    # parent passed (null for none of this module's), then the runtime's parameter buffer
    b = e.b
    func = e.operand(op.operands[0], "u64")
    desc: ir.Value = ir.Constant(PTR, None)
    for name, address in zip(op.attributes["kernels"], op.attributes["addresses"]):  # type: ignore[call-overload]
        g = b.bitcast(e.mod.child_descriptor(str(name)), PTR)
        desc = b.select(b.icmp_unsigned("==", func, I64(int(address))), g, desc)
    fn = e.mod.intrinsic("cpuify_device_launch_buffer", PTR, [PTR] + [I32] * 7)
    buf = b.call(fn, [desc] + [e.operand(v, "u32") for v in op.operands[1:]])
    status = b.call(e.mod.intrinsic("cpuify_device_launch_status", I32, []), [])
    e.define(op.results[0], b.ptrtoint(buf, I64))
    e.define(op.results[1], status)


@handles("upir.launch_device")
def _launch_device(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    fn = e.mod.intrinsic("cpuify_device_launch", I32, [PTR, I64])
    buf = b.inttoptr(e.operand(op.operands[0], "u64"), PTR)
    e.define(op.results[0], b.call(fn, [buf, e.operand(op.operands[1], "u64")]))


@handles("upir.free")
def _free(e: SegmentEmitter, op: Operation) -> None:
    fn = e.mod.intrinsic("cpuify_device_free", VOID, [PTR])
    p = e.get(op.operands[0])
    e.b.call(fn, [p if isinstance(p.type, ir.PointerType) else e.b.inttoptr(p, PTR)])
