"""Translate one PTX instruction into IR ops inside the SSA lifter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cpuify.errors import PTXError
from cpuify.frontend.ptx_ast import Addr, CallArgs, Imm, Instruction, Operand, Pair, Reg, Vec
from cpuify.ir.core import Operation, OpResult, Value
from cpuify.ir.ptx_table import TABLE
from cpuify.lifting.halves import deferred, deferred_result_type, expand, needs_expansion
from cpuify.lifting.semantics import (
    RESERVED_SMEM, RESERVED_SMEM_SIZE, SPECIAL_REGS, instr_types, operand_type,
)
from cpuify.lifting.tensor_cores import MatrixOp, parse_ldmatrix, parse_matrix_op, shape_dims

if TYPE_CHECKING:
    from cpuify.lifting.lift import _Lifter, _PBlock

# ops with no destination operand
NO_DEST = {"st", "red", "bar", "barrier", "membar", "fence", "nanosleep", "prefetch", "prefetchu",
           "pmevent", "discard", "free", "trap", "ret", "exit", "bra"}

TEXTURE_OPS = {"tex", "tld4", "txq", "suld", "sust"}
_LAYERED = {"a1d", "a2d"}
WARP_OPS = {"shfl", "vote", "activemask", "match", "redux"}
CARRY = "%__carry"

_IR_TYPE_OF_PTX = {
    "pred": "i1", "b8": "i8", "u8": "i8", "s8": "i8", "b16": "i16", "u16": "i16", "s16": "i16",
    "f16": "i16", "bf16": "i16", "b32": "i32", "u32": "i32", "s32": "i32", "f32": "f32",
    "b64": "i64", "u64": "i64", "s64": "i64", "f64": "f64", "f16x2": "i32", "bf16x2": "i32",
}


def source_types(instr: Instruction, n: int, n_results: int | None = None) -> list[str]:
    """PTX types of the `n` source operands (used to type immediates): as the instruction
    table's semantics read them (ir/ptx_table.py), else by the rules below."""
    entry = TABLE.get(instr.opcode)
    form = entry.form_for(instr.modifiers, n, n_results) if entry is not None else None
    if form is not None and not form.hand:
        read = form.source_types(instr.modifiers)
        if all(i in read for i in range(n)):
            return [read[i] for i in range(n)]
    op = instr.opcode
    t = operand_type(instr)
    types = instr_types(instr)
    if op == "cvt" and len(types) >= 2:
        return [types[1]] * n
    if op in ("shl", "shr"):
        return [t, "u32"][:n] + ["u32"] * max(0, n - 2)
    if op == "selp":
        return [t, t, "pred"][:n]
    if op in ("setp", "set"):
        src = types[-1]
        return ([src, src] + ["pred"] * n)[:n]
    if op == "slct":
        return [types[0], types[0], types[-1]][:n]
    if op in ("mul", "mad") and "wide" in instr.modifiers:
        half = {"s32": "s16", "u32": "u16", "s64": "s32", "u64": "u32", "s16": "s8", "u16": "u8"}
        ht = half.get(t, t) if False else t   # the type modifier already names the source type
        return [ht, ht, _wide(ht)][:n]
    if op == "shfl":
        return ["b32", "u32", "u32", "u32"][:n]
    if op == "vote":
        return (["pred" if "ballot" in instr.modifiers or "all" in instr.modifiers or "any" in instr.modifiers or "uni" in instr.modifiers else t, "u32"])[:n]
    if op == "match":
        return [t, "u32"][:n]
    if op in ("dp4a", "dp2a"):
        return [types[0], types[1] if len(types) > 1 else types[0], "b32"][:n]
    if op == "testp":
        return [t] * n
    if op in ("bar", "barrier"):
        return ["u32", "u32", "pred"][:n] if "red" not in instr.modifiers else ["u32", "pred"][:n]
    if op == "nanosleep":
        return ["u32"] * n
    if op == "mbarrier":
        # [address], then the count (init, arrive, expect_tx, complete_tx), the state of an
        # arrive (test_wait, pending_count) or the phase parity (.parity), a time-out hint
        m = instr.modifiers
        if "pending_count" in m:
            return ["b64"] * n
        second = "b64" if ("test_wait" in m or "try_wait" in m) and "parity" not in m else "u32"
        return (["b64", second] + ["u32"] * n)[:n]
    return [t] * n


def _wide(t: str) -> str:
    return {"s16": "s32", "u16": "u32", "s32": "s64", "u32": "u64"}.get(t, t)


def translate(lf: "_Lifter", pb: "_PBlock", instr: Instruction) -> None:
    op = instr.opcode
    line = instr.line
    operands = list(instr.operands)

    if op == "param_copy":
        dst, src = operands[0].name, operands[1].name  # type: ignore[union-attr]
        in_memory = dst in lf.k.memory_params
        base = symbol_address(lf, pb, dst, 0, line) if in_memory else None
        for off, t in sorted(lf.param_slots.get(src, ())):
            v = lf.read_var(f"{src}+{off}", pb, line)
            if base is not None:
                # the callee takes the parameter's address: the argument lives in memory
                emit(lf, pb, Operation("ptx.st", [base, v], [], {"mods": ["local", t],
                                                                 "offset": off, "line": line}))
            else:
                lf.write_var(f"{dst}+{off}", pb, v)
        return

    if op in ("launch_buffer", "launch_device"):
        # a kernel launched from device code (dynamic parallelism): its parameter buffer
        # (the kernel, grid and block dimensions, dynamic shared bytes), then its launch
        rets = operands[0].names  # type: ignore[union-attr]
        args = operands[1].names  # type: ignore[union-attr]
        if op == "launch_buffer":
            vals = [lf.read_var(f"{args[0]}+0", pb, line)]
            vals += [lf.read_var(f"{a}+{4 * j}", pb, line) for a in args[1:3] for j in range(3)]
            vals.append(lf.read_var(f"{args[3]}+0", pb, line))
            kernels = lf.module.kernel_addresses()
            res = emit(lf, pb, Operation("upir.launch_buffer", vals, ["i64", "i32"], {
                "line": line, "kernels": list(kernels), "addresses": list(kernels.values())}))
            lf.write_var(operands[2].name, pb, res.results[1])  # type: ignore[union-attr]
        else:
            vals = [lf.read_var(f"{a}+0", pb, line) for a in args]
            res = emit(lf, pb, Operation("upir.launch_device", vals, ["i32"], {"line": line}))
        for r in rets:
            slot = f"{r}+0"
            if slot not in lf.var_types:
                lf.var_types[slot] = res.results[0].type
            lf.write_var(slot, pb, res.results[0])
        return

    if op == "call_stack":
        # the thread's call stack for recursive device functions: base address and size
        res = emit(lf, pb, Operation("upir.call_stack", [], ["i64", "i64"], {"line": line}))
        for dst, v in zip(operands, res.results):
            lf.write_var(dst.name, pb, v)  # type: ignore[union-attr]
        return

    if op in ("printf", "malloc", "free", "assertfail"):
        rets = operands[0].names if isinstance(operands[0], CallArgs) else ()  # type: ignore[union-attr]
        args = operands[1].names if isinstance(operands[1], CallArgs) else ()  # type: ignore[union-attr]
        vals = [lf.read_var(f"{a}+0", pb, line) for a in args]
        if op == "assertfail":
            emit(lf, pb, Operation("upir.printf", vals[:1] + [lf.const(0, "i64")], [],
                                   {"line": line, "assert": True}))
            return
        if op == "printf":
            res = emit(lf, pb, Operation("upir.printf", vals, ["i32"], {"line": line}))
        else:
            res = emit(lf, pb, Operation(f"upir.{op}", vals, ["i64"] if op == "malloc" else [],
                                         {"line": line}))
        for r in rets:
            slot = f"{r}+0"
            if slot not in lf.var_types:
                lf.var_types[slot] = res.results[0].type if res.results else "i32"
            if res.results:
                lf.write_var(slot, pb, res.results[0])
        return

    if op in TEXTURE_OPS:
        _texture(lf, pb, instr)
        return

    if op in ("wmma", "mma", "ldmatrix", "stmatrix", "movmatrix"):
        _matrix(lf, pb, instr)
        return
    if op == "cp":
        _cp_async(lf, pb, instr)
        return

    # --- ld/st on parameters ---
    if op in ("ld", "st") and "param" in instr.modifiers and _param_address_in_register(lf, instr):
        # `mov.b64 %rd1, k_param_0; ... ld.param.u32 %r, [%rd9]`: a dynamic index into a
        # by-value struct parameter, a real load from the kernel's parameter buffer
        if op == "st":
            lf.error("stores to kernel parameters are not supported", line)
    elif op in ("ld", "st") and "param" in instr.modifiers:
        addr_i = 1 if op == "ld" else 0
        addr = operands[addr_i]
        if not isinstance(addr, Addr) or addr.base is None:
            lf.error("parameter access needs a named parameter", line, PTXError)
        assert isinstance(addr, Addr) and addr.base is not None
        ptype = operand_type(instr)
        kparam = lf.param_by_name.get(addr.base)
        if op == "ld":
            dests = _dest_names(operands[0])
            size = _IR_SIZE[_IR_TYPE_OF_PTX[ptype]]
            for k, d in enumerate(dests):
                if d is None:
                    continue
                off = addr.offset + k * size
                if kparam is not None:
                    v = emit(lf, pb, Operation("upir.param", [], [_IR_TYPE_OF_PTX[ptype]],
                                               {"offset": kparam.offset + off, "type": ptype,
                                                "line": line})).results[0]
                else:
                    v = lf.read_var(f"{addr.base}+{off}", pb, line)
                lf.write_var(d, pb, _retype(lf, pb, v, lf.var_type(d, line), ptype, line))
            return
        if kparam is not None:
            lf.error("stores to kernel parameters are not supported", line)
        srcs = operands[1].items if isinstance(operands[1], Vec) else (operands[1],)
        size = _IR_SIZE[_IR_TYPE_OF_PTX[ptype]]
        for k, s in enumerate(srcs):
            v = value_of(lf, pb, s, ptype, line)
            slot = f"{addr.base}+{addr.offset + k * size}"
            if slot not in lf.var_types:
                lf.var_types[slot] = _IR_TYPE_OF_PTX[ptype]
            lf.write_var(slot, pb, _retype(lf, pb, v, lf.var_types[slot], ptype, line))
        return

    dest_ops: list[Operand] = []
    no_dest = op in NO_DEST or op == "mbarrier" and bool(
        {"init", "inval", "expect_tx", "complete_tx"} & set(instr.modifiers)) and \
        "arrive" not in instr.modifiers
    if not no_dest or (op in ("bar", "barrier") and "red" in instr.modifiers):
        dest_ops = [operands.pop(0)]
    dest_names: list[str | None] = []
    for d in dest_ops:
        dest_names += _dest_names(d)

    # --- sources ---
    attrs: dict[str, object] = {"mods": list(instr.modifiers), "line": line}
    values: list[Value] = []
    src_types = source_types(instr, sum(len(o.items) if isinstance(o, Vec) else 1 for o in operands),
                             len(dest_names))
    ti = 0
    for o in operands:
        if isinstance(o, Addr):
            base, offset = address_of(lf, pb, o, line)
            values.append(base)
            attrs["offset"] = offset
            ti += 1
        elif isinstance(o, Vec):
            for item in o.items:
                values.append(value_of(lf, pb, item, src_types[min(ti, len(src_types) - 1)], line))
                ti += 1
        else:
            values.append(value_of(lf, pb, o, src_types[min(ti, len(src_types) - 1)] if src_types else "b32", line))
            ti += 1

    # the carry flag of add.cc/addc/mad.cc/madc is an implicit register
    if op in ("addc", "subc", "madc"):
        lf.var_types.setdefault(CARRY, "i32")
        values.append(lf.read_var(CARRY, pb, line))
    if op in ("add", "sub", "mad", "addc", "subc", "madc") and "cc" in instr.modifiers:
        lf.var_types.setdefault(CARRY, "i32")
        dest_names.append(CARRY)
    result_types = [lf.var_type(d, line) if d is not None else _sink_type(instr) for d in dest_names]
    if deferred(instr):
        # an unrounded add/sub/mul on packed halves or bf16: whole until contraction
        # (ptxas fuses its products), expanded after it (lifting/halves.py)
        new = emit(lf, pb, Operation(f"ptx.{op}", values, [deferred_result_type(instr)], attrs))
        lf.write_var(dest_names[0], pb, _retype(lf, pb, new.results[0], result_types[0],
                                                 operand_type(instr), line))
        return
    if needs_expansion(instr):
        # packed half arithmetic per half, bf16 through f32 (lifting/halves.py)
        outs = expand(instr, values, src_types[:len(values)], result_types,
                      lambda o: emit(lf, pb, o), lf.const,
                      lambda msg: lf.error(msg, line))
        for d, r, want in zip(dest_names, outs, result_types):
            if d is not None:
                lf.write_var(d, pb, _retype(lf, pb, r, want, operand_type(instr), line))
        return
    if op in ("bar", "barrier"):
        if instr.has("warp"):
            new = Operation("upir.warp_collective", values, [], {"kind": "syncwarp", **attrs})
        elif instr.has("red"):
            kind = "popc" if instr.has("popc") else "and" if instr.has("and") else "or"
            new = Operation("upir.barrier", values[1:], result_types, {"reduce": kind, **attrs})
        elif instr.has("arrive") or len(values) > 1 or not _is_constant(values[0]):
            # a named barrier: only the threads that name it meet there, `count` of them
            # (0: every thread of the block); bar.arrive counts without waiting
            count = values[1] if len(values) > 1 else lf.const(0, "i32")
            new = Operation("upir.warp_collective", [values[0], count], [],
                            {"kind": "named_barrier", "arrive": instr.has("arrive"), **attrs})
        else:
            new = Operation("upir.barrier", [], [], attrs)
    elif op in WARP_OPS:
        new = Operation("upir.warp_collective", values, result_types, {"kind": op, **attrs})
    elif op in ("membar", "fence"):
        new = Operation("upir.fence", [], [], attrs)
    elif op == "nanosleep":
        new = Operation("upir.nanosleep", values, [], attrs)
    elif op in ("prefetch", "prefetchu", "pmevent", "discard"):
        return
    else:
        entry = TABLE.get(op)
        if entry is not None and entry.forms and \
                entry.form_for(instr.modifiers, len(values), len(result_types)) is None:
            lf.error(f"'{instr.full_opcode}': this form of {op} is not supported by cpuify", line)
        new = Operation(f"ptx.{op}", values, result_types, attrs)
    emit(lf, pb, new)
    for d, r in zip(dest_names, new.results):
        if d is not None:
            lf.write_var(d, pb, r)


#: %reserved_smem_offset_*: offsets into the kernel's reserved shared variable (lift.py),
#: whose two halves are the regions _0 and _1 (cooperative groups uses _1)
_RESERVED_SMEM_AT = {"_begin": 0, "_0": 0, "_1": 512, "_end": 1024}


def _reserved_smem(lf: "_Lifter", pb: "_PBlock", reg: str, line: int) -> Value:
    suffix = reg[len("%reserved_smem_offset"):]
    if suffix == "_cap":
        return lf.const(RESERVED_SMEM_SIZE, "i32")
    if suffix not in _RESERVED_SMEM_AT:
        lf.error(f"unknown special register '{reg}'", line, PTXError)
    at = symbol_address(lf, pb, RESERVED_SMEM, 0, line)
    off = emit(lf, pb, Operation("ptx.cvt", [at], ["i32"], {"mods": ["u32", "u64"], "line": line}))
    if not _RESERVED_SMEM_AT[suffix]:
        return off.results[0]
    return emit(lf, pb, Operation("ptx.add", [off.results[0], lf.const(_RESERVED_SMEM_AT[suffix], "i32")],
                                  ["i32"], {"mods": ["u32"], "line": line})).results[0]


def _is_constant(v: Value) -> bool:
    return isinstance(v, OpResult) and v.op.name == "upir.const"


def _cp_async(lf: "_Lifter", pb: "_PBlock", instr: Instruction) -> None:
    """cp.async copies at issue: `ptx.cp_async` (dst, src, src-size) writes cp-size bytes
    to shared memory, the first min(src-size, cp-size) from global memory and zeros after
    them.  A program may not read the destination before its cp.async.wait_group/wait_all
    (nor write the source), so a copy done early cannot be told apart from one done then:
    commit and wait have nothing left to do."""
    m, line = instr.modifiers, instr.line
    if "commit_group" in m or "wait_group" in m or "wait_all" in m:
        return
    if "mbarrier" in m:
        # the arrive-on the mbarrier that happens once this thread's copies are complete,
        # which they are: without .noinc the pending count goes up by one and down by one
        # (no change); with .noinc it is an ordinary arrive
        if "noinc" in m:
            translate(lf, pb, Instruction("mbarrier", ("arrive", "shared", "b64"),
                                          (Reg("_"), instr.operands[0]), line, instr.text))
        return
    ops = list(instr.operands)
    dst, src, size = ops[0], ops[1], ops[2]
    assert isinstance(dst, Addr) and isinstance(src, Addr) and isinstance(size, Imm)
    n = int(size.value)
    extra = ops[3:]
    if "L2::cache_hint" in m and extra:
        extra = extra[:-1]                    # the cache policy: a hint
    src_size: Value
    if not extra:
        src_size = lf.const(n, "i32")
    elif isinstance(extra[0], Reg) and lf.var_types.get(extra[0].name) == "i1":
        # ignore-src: a true predicate reads nothing and writes zeros
        ignore = value_of(lf, pb, extra[0], "pred", line)
        src_size = emit(lf, pb, Operation("ptx.selp", [lf.const(0, "i32"), lf.const(n, "i32"),
                                                        ignore], ["i32"],
                                          {"mods": ["b32"], "line": line})).results[0]
    else:
        src_size = value_of(lf, pb, extra[0], "u32", line)
    dst_base, dst_off = address_of(lf, pb, dst, line)
    src_base, src_off = address_of(lf, pb, src, line)
    emit(lf, pb, Operation("ptx.cp_async", [dst_base, src_base, src_size], [],
                           {"mods": ["shared", "global"], "size": n, "offset": dst_off,
                            "src_offset": src_off, "line": line}))


def _texture(lf: "_Lifter", pb: "_PBlock", instr: Instruction) -> None:
    """tex/tld4/suld/sust/txq: `ptx.<op>` with the handle as operand 0, then (not for txq)
    exactly four coordinates in PTX order (layered: the layer first; missing ones are 0),
    then sust's data values."""
    op, line = instr.opcode, instr.line
    operands = list(instr.operands)
    attrs: dict[str, object] = {"mods": list(instr.modifiers), "line": line}
    if op == "txq":
        addr = operands[1]
        if not isinstance(addr, Addr) or addr.base is None or addr.offset:
            lf.error("txq: the texture must be a handle in a register", line, PTXError)
        assert isinstance(addr, Addr)
        dests = _dest_names(operands[0])
        handle = value_of(lf, pb, Reg(addr.base or ""), "b64", line)
        new = emit(lf, pb, Operation("ptx.txq", [handle], [lf.var_type(d, line) if d else "i32"
                                                          for d in dests], attrs))
        for d, r in zip(dests, new.results):
            if d is not None:
                lf.write_var(d, pb, r)
        return
    if op == "sust":
        target, rest = operands[0], operands[1:]
        dests: list[str | None] = []
    else:
        if isinstance(operands[0], Pair):
            lf.error(f"'{instr.full_opcode}': the residency predicate of a fetch is not supported",
                     line)
        dests, target, rest = _dest_names(operands[0]), operands[1], operands[2:]
    if not (isinstance(target, Vec) and len(target.items) == 2 and isinstance(target.items[0], Reg)
            and isinstance(target.items[1], Vec)):
        lf.error(f"'{instr.full_opcode}': expected [handle, {{coordinates}}] with the texture or "
                 "surface object handle in a register (texture references are compiled as "
                 "objects by cpuify's compatibility header)", line)
    assert isinstance(target, Vec) and isinstance(target.items[1], Vec)
    handle = value_of(lf, pb, target.items[0], "b64", line)
    types = instr_types(instr)
    coord_type = types[1] if op in ("tex", "tld4") else "s32"
    coords: list[Value] = []
    for k, c in enumerate(target.items[1].items[:4]):
        layer = k == 0 and any(m in _LAYERED for m in instr.modifiers)
        coords.append(value_of(lf, pb, c, "s32" if layer else coord_type, line))
    while len(coords) < 4:
        coords.append(lf.const(0, "i32"))
    values = [handle] + coords
    if op == "sust":
        data = rest[0] if rest else None
        items = data.items if isinstance(data, Vec) else (data,) if data is not None else ()
        values += [value_of(lf, pb, v, types[-1], line) for v in items]
    # tex.level's level and tex.grad's gradients select a mipmap level: cpuify's textures
    # have one level, so they are not read
    sink = _IR_TYPE_OF_PTX[types[0]] if op in ("tex", "tld4") else _sink_type(instr)
    result_types = [lf.var_type(d, line) if d is not None else sink for d in dests]
    new = emit(lf, pb, Operation(f"ptx.{op}", values, result_types, attrs))
    for d, r in zip(dests, new.results):
        if d is not None:
            lf.write_var(d, pb, r)


def _matrix(lf: "_Lifter", pb: "_PBlock", instr: Instruction) -> None:
    """wmma.load/store: `ptx.wmma_load` (address, stride -> the fragment's registers) and
    `ptx.wmma_store` (address, stride, registers), per thread.  wmma.mma and mma.sync:
    `upir.warp_collective` of kind "mma" (the a, b and c registers -> d), ldmatrix: of kind
    "ldmatrix" (the row address -> the registers), stmatrix (the row address and the
    registers), movmatrix (a register -> the transposed one's): all take every lane of the
    warp."""
    op, line = instr.opcode, instr.line
    operands = list(instr.operands)
    attrs: dict[str, object] = {"mods": list(instr.modifiers), "line": line}

    def regs(o: Operand, ptx_type: str) -> list[Value]:
        items = o.items if isinstance(o, Vec) else (o,)
        return [value_of(lf, pb, item, ptx_type, line) for item in items]

    def address(o: Operand) -> Value:
        if not isinstance(o, Addr):
            lf.error(f"'{instr.full_opcode}': expected an address operand", line, PTXError)
        assert isinstance(o, Addr)
        base, off = address_of(lf, pb, o, line)
        if off:
            c = lf.const(off, base.type)
            base = emit(lf, pb, Operation("ptx.add", [base, c], [base.type],
                                          {"mods": ["s64"], "line": line})).results[0]
        return base

    def dests(o: Operand, count: int) -> list[str | None]:
        names = _dest_names(o)
        if len(names) != count:
            lf.error(f"'{instr.full_opcode}': expected {count} registers, got {len(names)}", line,
                     PTXError)
        return names

    def define(names: list[str | None], new: Operation) -> None:
        emit(lf, pb, new)
        for d, r in zip(names, new.results):
            if d is not None:
                lf.write_var(d, pb, r)

    if op in ("ldmatrix", "stmatrix", "movmatrix"):
        spec = parse_ldmatrix(instr.modifiers, op)
        assert not isinstance(spec, str)
        if op == "stmatrix":
            values = regs(operands[1], "b32")
            if len(values) != spec.count:
                lf.error(f"'{instr.full_opcode}': expected {spec.count} registers", line, PTXError)
            emit(lf, pb, Operation("upir.warp_collective", [address(operands[0])] + values, [],
                                   {"kind": op, **attrs}))
            return
        names = dests(operands[0], spec.count)
        source = [address(operands[1])] if op == "ldmatrix" else regs(operands[1], "b32")
        define(names, Operation("upir.warp_collective", source,
                                [lf.var_type(d, line) if d else "i32" for d in names],
                                {"kind": op, **attrs}))
        return
    mop = parse_matrix_op(op, instr.modifiers)
    assert not isinstance(mop, str)
    reg_type = {"f16": "b32", "bf16": "b32", "s8": "b32", "u8": "b32", "tf32": "b32",
                "f32": "f32", "s32": "s32", "f64": "f64"}
    if mop.action == "load":
        m = mop.matrix
        names = dests(operands[0], mop.registers(m))
        stride = value_of(lf, pb, operands[2], "u32", line) if len(operands) > 2 else \
            lf.const(_leading_dimension(mop), "i32")
        define(names, Operation("ptx.wmma_load", [address(operands[1]), stride],
                                [lf.var_type(d, line) if d else "i32" for d in names], attrs))
        return
    if mop.action == "store":
        values = regs(operands[1], reg_type[mop.types["d"]])
        if len(values) != mop.registers("d"):
            lf.error(f"'{instr.full_opcode}': expected {mop.registers('d')} registers", line,
                     PTXError)
        stride = value_of(lf, pb, operands[2], "u32", line) if len(operands) > 2 else \
            lf.const(_leading_dimension(mop), "i32")
        emit(lf, pb, Operation("ptx.wmma_store", [address(operands[0]), stride] + values, [],
                               attrs))
        return
    names = dests(operands[0], mop.registers("d"))
    values: list[Value] = []
    for m, o in zip("abc", operands[1:4]):
        got = regs(o, reg_type[mop.types[m]])
        if len(got) != mop.registers(m):
            lf.error(f"'{instr.full_opcode}': expected {mop.registers(m)} {m} registers, got "
                     f"{len(got)}", line, PTXError)
        values += got
    define(names, Operation("upir.warp_collective", values,
                            [lf.var_type(d, line) if d else "i32" for d in names],
                            {"kind": "mma", "family": op, **attrs}))


def _leading_dimension(mop: "MatrixOp") -> int:
    rows, cols, k = shape_dims(mop.shape)
    r, c = {"a": (rows, k), "b": (k, cols)}.get(mop.matrix, (rows, cols))
    return c if mop.layouts[0] == "row" else r


_IR_SIZE = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "f32": 4, "f64": 8}


def _sink_type(instr: Instruction) -> str:
    return _IR_TYPE_OF_PTX.get(operand_type(instr), "i32")


def _dest_names(d: Operand) -> list[str | None]:
    if isinstance(d, Reg):
        return [None if d.name == "_" else d.name]
    if isinstance(d, Pair):
        return _dest_names(d.first) + _dest_names(d.second)
    if isinstance(d, Vec):
        out: list[str | None] = []
        for item in d.items:
            out += _dest_names(item)
        return out
    raise PTXError(f"bad destination operand {d!r}")


def emit(lf: "_Lifter", pb: "_PBlock", op: Operation) -> Operation:
    pb.ir.append(op)
    return op


def _retype(lf: "_Lifter", pb: "_PBlock", v: Value, want: str, ptx_type: str, line: int) -> Value:
    if v.type == want:
        return v
    return emit(lf, pb, Operation("ptx.mov", [v], [want], {"mods": [ptx_type], "line": line})).results[0]


def value_of(lf: "_Lifter", pb: "_PBlock", o: Operand, ptx_type: str, line: int) -> Value:
    if isinstance(o, Imm):
        t = _IR_TYPE_OF_PTX.get(ptx_type, "i32")
        if t.startswith("f"):
            if o.bits is not None and o.width == int(t[1:]):
                return lf.const(o.value, t)
            return lf.const(float(o.value), t)
        if t == "i16" and ptx_type in ("f16", "bf16"):
            return lf.const(int(o.bits if o.bits is not None else o.value), t)
        if o.is_float:
            # a float literal for an integer-typed operand (e.g. mov.b32 %r, 0f3F800000)
            return lf.const(int(o.bits) if o.bits is not None else int(o.value), t)
        width = int(t[1:]) if t != "i1" else 1
        val = int(o.value) & ((1 << width) - 1)
        return lf.const(val, t)
    if isinstance(o, Reg):
        name = o.name
        if name in lf.var_types:
            v = lf.read_var(name, pb, line)
            if o.negated:
                v = emit(lf, pb, Operation("ptx.not", [v], ["i1"], {"mods": ["pred"], "line": line})).results[0]
            return v
        base = name.split(".")[0]
        if base.startswith("%reserved_smem_offset"):
            return _reserved_smem(lf, pb, base, line)
        if base in SPECIAL_REGS:
            if base.startswith("%clock") or base.startswith("%globaltimer"):
                t = "i64" if name.endswith("64") or name == "%globaltimer" else "i32"
                return emit(lf, pb, Operation("upir.clock", [], [t], {"reg": name, "line": line})).results[0]
            t = "i32"
            return emit(lf, pb, Operation("upir.special", [], [t], {"reg": name, "line": line})).results[0]
        if name.startswith("%envreg"):
            return emit(lf, pb, Operation("upir.envreg", [], ["i32"], {"reg": name, "line": line})).results[0]
        if name == "WARP_SZ":           # PTX's constant for warpSize (`mov.u32 %r, WARP_SZ`)
            return lf.const(32, _IR_TYPE_OF_PTX.get(ptx_type, "i32"))
        return symbol_address(lf, pb, name, 0, line)
    if isinstance(o, Addr):  # sym+off used as a value
        base, off = address_of(lf, pb, o, line)
        if off:
            c = lf.const(off, base.type)
            return emit(lf, pb, Operation("ptx.add", [base, c], [base.type], {"mods": ["s64" if base.type == "i64" else "s32"], "line": line})).results[0]
        return base
    if isinstance(o, Vec):
        raise PTXError("vector operand where a scalar is expected", line=line)
    raise PTXError(f"unsupported operand {o!r}", line=line)


def symbol_address(lf: "_Lifter", pb: "_PBlock", name: str, offset: int, line: int) -> Value:
    space = None
    var = lf.local_vars.get(name) or lf.module_vars.get(name)
    if var is not None:
        space = var.space
    elif name in lf.param_by_name:
        space = "param"
    elif name in lf.module.functions and lf.module.functions[name].kind == "entry":
        # a kernel's address: the number a device launch finds it by
        return lf.const(lf.module.kernel_addresses()[name] + offset, "i64")
    elif name in lf.module.functions:
        # a device function's address: the number its indirect calls dispatch on
        return lf.const(lf.module.function_addresses()[name] + offset, "i64")
    else:
        lf.error(f"unknown symbol '{name}'", line, PTXError)
    t = "i64"
    return emit(lf, pb, Operation("upir.addressof", [], [t],
                                  {"symbol": name, "space": space, "line": line})).results[0]


def address_of(lf: "_Lifter", pb: "_PBlock", a: Addr, line: int) -> tuple[Value, int]:
    if a.base is None:
        return lf.const(0, "i64"), a.offset
    if a.base in lf.var_types:
        return lf.read_var(a.base, pb, line), a.offset
    return symbol_address(lf, pb, a.base, 0, line), a.offset


def _param_address_in_register(lf: "_Lifter", instr: Instruction) -> bool:
    """Whether `ld.param`/`st.param` addresses memory through a register holding a kernel
    parameter's address (taken with `mov.b64 %rd, k_param_0`) rather than by name."""
    addr = instr.operands[1 if instr.opcode == "ld" else 0]
    return isinstance(addr, Addr) and addr.base is not None and addr.base.startswith("%") \
        and addr.base in lf.var_types
