"""Lift a PTX kernel to the parallel IR.

    upir.kernel @name {
      upir.grid_parallel {            // blocks of the grid: independent, run on all cores
        upir.block_parallel {         // threads of one block: barriers live here
          ^bb0: ... ptx.* ops in SSA form, cf.br / cf.cond_br, upir.barrier, upir.exit
        }
      }
    }

Steps: inline device functions (inline.py), split the statement list into basic blocks
(guarded non-branch instructions get a block of their own), then build SSA with Braun et
al.'s on-the-fly algorithm ("Simple and Efficient Construction of SSA Form", CC 2013):
PTX registers and call-site `.param` slots are the variables, block arguments are phis."""

from __future__ import annotations

import struct


from cpuify.errors import PTXError, UnsupportedError
from cpuify.frontend.ptx_ast import (
    Addr, CallArgs, Function, Imm, Instruction, Label, Module, Pair, Param, Reg, VarDecl, Vec,
    type_size,
)
from cpuify.ir.core import Block, BlockArgument, Operation, Region, Value, postorder, remove_block_arg
from cpuify.ir.structure import KernelParam, KernelView, describe_kernel
from cpuify.lifting.contract import fuse_unrounded_products
from cpuify.lifting.halves import expand_deferred, fold_half_packing
from cpuify.lifting.inline import InlinedKernel, inline_calls
from cpuify.lifting.semantics import (
    RESERVED_SMEM, RESERVED_SMEM_SIZE, SPECIAL_REGS, check_instruction, operand_type,
)
from cpuify.lifting.translate import translate

REG_TYPE = {
    "pred": "i1", "b8": "i8", "u8": "i8", "s8": "i8", "b16": "i16", "u16": "i16", "s16": "i16",
    "f16": "i16", "bf16": "i16", "b32": "i32", "u32": "i32", "s32": "i32", "f32": "f32",
    "f16x2": "i32", "bf16x2": "i32", "b64": "i64", "u64": "i64", "s64": "i64", "f64": "f64",
    "b128": "i64",
}



# what a lifted kernel is: a view of its `upir.kernel` op, which records everything
# (parameters, variables, directives); see cpuify.ir.structure
LiftedKernel = KernelView


def _layout_params(params: list[Param]) -> tuple[list[KernelParam], int]:
    out: list[KernelParam] = []
    offset = 0
    for p in params:
        align = max(p.alignment, 1)
        offset = (offset + align - 1) // align * align
        out.append(KernelParam(p.name, p.type, offset, p.size, align, p.dims))
        offset += p.size
    return out, offset


class _PBlock:
    """A basic block of PTX statements before SSA construction."""
    __slots__ = ("label", "instrs", "term", "succ", "ir", "sealed", "filled", "defs",
                 "incomplete", "preds")

    def __init__(self, label: str | None) -> None:
        self.label = label
        self.instrs: list[Instruction] = []
        self.term: Instruction | None = None      # bra / ret / exit / trap, or None (fallthrough)
        self.succ: list[_PBlock] = []
        self.ir = Block()
        self.sealed = False
        self.filled = False
        self.defs: dict[str, Value] = {}
        self.incomplete: dict[str, BlockArgument] = {}
        self.preds: list[_PBlock] = []


def _reads_reserved_smem(kernel: InlinedKernel) -> bool:
    for stmt in kernel.body:
        if isinstance(stmt, Instruction):
            for o in stmt.operands:
                if isinstance(o, Reg) and o.name.startswith("%reserved_smem_offset"):
                    return True
    return False


class _Lifter:
    def __init__(self, module: Module, kernel: InlinedKernel) -> None:
        self.module = module
        self.k = kernel
        self.entry: Function = kernel.entry
        self.params, self.param_size = _layout_params(self.entry.params)
        self.param_by_name = {p.name: p for p in self.params}
        self.var_types: dict[str, str] = {r: REG_TYPE[t] for r, t in kernel.regs.items()}
        self.module_vars = {v.name: v for v in module.variables}
        if _reads_reserved_smem(kernel) and not any(v.name == RESERVED_SMEM for v in kernel.locals):
            # the reserved shared memory cooperative groups keeps its multi-warp tile
            # barriers in (%reserved_smem_offset_*): a shared variable of the kernel
            kernel.locals.append(VarDecl("shared", "b8", RESERVED_SMEM, 0, 16,
                                         (RESERVED_SMEM_SIZE,)))
        self.local_vars = {v.name: v for v in kernel.locals}
        self.param_slots: dict[str, set[tuple[int, str]]] = {}
        self.arg_owner: dict[BlockArgument, _PBlock] = {}
        self.const_cache: dict[tuple[str, object], Value] = {}
        self.const_ops: list[Operation] = []

    def error(self, msg: str, line: int, cls: type[PTXError] = UnsupportedError) -> None:
        raise cls(msg, line=line, kernel=self.entry.name, source_line=self.module.source_line(line))

    # -- basic blocks --
    def build_blocks(self) -> list[_PBlock]:
        blocks: list[_PBlock] = [_PBlock(None)]
        by_label: dict[str, _PBlock] = {}
        cur = blocks[0]
        pending_edges: list[tuple[_PBlock, str, Instruction]] = []

        def new_block(label: str | None = None) -> _PBlock:
            b = _PBlock(label)
            blocks.append(b)
            return b

        for stmt in self.k.body:
            if isinstance(stmt, Label):
                nxt = new_block(stmt.name)
                if cur.term is None:
                    cur.succ.append(nxt)
                by_label[stmt.name] = nxt
                cur = nxt
                continue
            if cur.term is not None:          # unreachable code after an unconditional jump
                cur = new_block()
            check_instruction(stmt, self)
            op = stmt.opcode
            if op == "bra":
                target = stmt.operands[0]
                if not isinstance(target, Reg):
                    self.error("branch target must be a label", stmt.line)
                cur.term = stmt
                pending_edges.append((cur, target.name, stmt))  # type: ignore[union-attr]
                if stmt.guard is not None:
                    fall = new_block()
                    cur.succ.append(fall)   # successor 0 = fallthrough (filled below at index 1)
                    cur = fall
                continue
            if op in ("ret", "exit", "trap", "assertfail") and stmt.guard is None:
                cur.instrs.append(stmt) if op == "assertfail" else None
                cur.term = stmt
                continue
            if stmt.guard is not None:
                # guarded instruction: its own block, entered when the predicate holds
                then = new_block()
                cont = new_block()
                cur.term = Instruction("guard", (), (), stmt.line, stmt.text, stmt.guard)
                cur.succ += [then, cont]
                unguarded = Instruction(stmt.opcode, stmt.modifiers, stmt.operands, stmt.line, stmt.text)
                if op in ("ret", "exit", "trap", "assertfail"):
                    if op == "assertfail":
                        then.instrs.append(unguarded)
                    then.term = unguarded
                else:
                    then.instrs.append(unguarded)
                    then.succ.append(cont)
                cur = cont
                continue
            cur.instrs.append(stmt)
        if cur.term is None:
            cur.term = Instruction("ret", (), (), self.entry.end_line or self.entry.line, "ret")
        for block, label, stmt in pending_edges:
            target_block = by_label.get(label)
            if target_block is None:
                self.error(f"branch to undefined label '{label}'", stmt.line, PTXError)
            assert target_block is not None
            if stmt.guard is not None:
                block.succ.insert(0, target_block)     # [taken, fallthrough]
            else:
                block.succ = [target_block]
        # blocks that fall through off the end of a function body without a terminator
        for b in blocks:
            if b.term is None and not b.succ:
                b.term = Instruction("ret", (), (), self.entry.end_line, "ret")
        for b in blocks:
            for s in b.succ:
                s.preds.append(b)
        return blocks

    # -- SSA construction (Braun et al.) --
    def write_var(self, name: str, block: _PBlock, value: Value) -> None:
        block.defs[name] = value

    def read_var(self, name: str, block: _PBlock, line: int) -> Value:
        v = block.defs.get(name)
        if v is not None:
            return v
        return self.read_var_recursive(name, block, line)

    def read_var_recursive(self, name: str, block: _PBlock, line: int) -> Value:
        """Braun et al.'s readVariableRecursive, run with an explicit stack (the recursion
        follows predecessor chains, whose length grows with the kernel): identical values,
        block arguments and argument order as the recursive formulation.

        Continuations on the stack: `_PBlock` = "record the value found as `name`'s
        definition in that block" (the single-predecessor case); a list [block, arg, i] =
        "the value found is the incoming value of `arg` from block.preds[i]; then read the
        next predecessor" (a phi's operands, in predecessor order)."""
        vtype = self.var_type(name, line)
        stack: list = []
        blk = block
        while True:
            # descend: read `name` in blk
            while True:
                val = blk.defs.get(name)
                if val is not None:
                    break
                if not blk.sealed:
                    arg = blk.ir.add_arg(vtype, name)
                    self.arg_owner[arg] = blk
                    blk.incomplete[name] = arg
                    val = arg
                    blk.defs[name] = val
                    break
                preds = blk.preds
                if not preds:
                    val = self.undef(vtype)
                    blk.defs[name] = val
                    break
                if len(preds) == 1:
                    stack.append(blk)
                    blk = preds[0]
                    continue
                arg = blk.ir.add_arg(vtype, name)
                self.arg_owner[arg] = blk
                blk.defs[name] = arg
                stack.append([blk, arg, 0])
                blk = preds[0]
            # ascend: hand the value to the continuations until one needs another read
            while stack:
                top = stack[-1]
                if isinstance(top, _PBlock):
                    top.defs[name] = val
                    stack.pop()
                    continue
                phi_block, arg, i = top
                _append_phi_operand(phi_block.preds[i], phi_block, arg, val)
                i += 1
                if i < len(phi_block.preds):
                    top[2] = i
                    blk = phi_block.preds[i]
                    break
                stack.pop()
                val = arg
                phi_block.defs[name] = arg
            else:
                return val

    def add_phi_operands(self, name: str, arg: BlockArgument, block: _PBlock, line: int) -> None:
        for pred in block.preds:
            _append_phi_operand(pred, block, arg, self.read_var(name, pred, line))

    def seal(self, block: _PBlock) -> None:
        for name, arg in block.incomplete.items():
            self.add_phi_operands(name, arg, block, 0)
        block.incomplete = {}
        block.sealed = True

    def var_type(self, name: str, line: int) -> str:
        t = self.var_types.get(name)
        if t is None:
            self.error(f"use of undeclared register '{name}'", line, PTXError)
        return t  # type: ignore[return-value]

    def undef(self, vtype: str) -> Value:
        return self.const(0.0 if vtype.startswith("f") else 0, vtype)

    def const(self, value: int | float, vtype: str) -> Value:
        # floats by their bits: -0.0 == 0.0 in Python, and one constant must not stand
        # for the other
        key = (vtype, struct.pack("<d", value) if isinstance(value, float) else value)
        v = self.const_cache.get(key)
        if v is None:
            op = Operation("upir.const", (), [vtype], {"value": value})
            # placed at the top of the entry block once it is filled (run)
            self.const_ops.append(op)
            op.parent = self.entry_block.ir
            v = op.result
            self.const_cache[key] = v
        return v

    # -- driver --
    def run(self) -> LiftedKernel:
        self.prescan_params()
        blocks = self.build_blocks()
        self.entry_block = blocks[0]
        region = Region()
        for b in blocks:
            region.add_block(b.ir)
        order = _rpo(blocks)
        reachable = set(order)
        for b in blocks:
            if not b.preds and b is not blocks[0]:
                b.sealed = True
        blocks[0].sealed = True
        for b in order:
            self.fill(b)
            for s in b.succ:
                if not s.sealed and all(p.filled for p in s.preds if p in reachable):
                    s.preds = [p for p in s.preds if p in reachable]
                    self.seal(s)
        entry_ops = self.entry_block.ir.ops
        entry_ops[:0] = self.const_ops
        self.const_ops = []
        region.blocks = [b.ir for b in blocks if b in reachable]
        _remove_trivial_args(region)
        fuse_unrounded_products(region)
        if expand_deferred(region, self.const, lambda msg: self.error(msg, 0)):
            entry_ops[:0] = self.const_ops          # (constants the expansion made)
            self.const_ops = []
        fold_half_packing(region)
        block_par = Operation("upir.block_parallel", regions=[region])
        grid_region = Region([Block()])
        grid_region.entry.append(block_par)
        grid_region.entry.append(Operation("upir.yield"))
        grid_par = Operation("upir.grid_parallel", regions=[Region()])
        grid_par.regions[0].add_block(Block())
        grid_par.regions[0].blocks[0].append(block_par)
        grid_par.regions[0].blocks[0].append(Operation("upir.yield"))
        kernel_region = Region([Block()])
        kernel_region.entry.append(grid_par)
        kernel_region.entry.append(Operation("upir.yield"))
        kernel = Operation("upir.kernel", regions=[kernel_region],
                           attributes={"sym_name": self.entry.name,
                                       "param_size": self.param_size})
        own = [v for v in self.k.locals if v.space in ("shared", "local")]
        describe_kernel(kernel, self.params, own, dict(self.entry.directives))
        return KernelView.from_op(kernel)

    def prescan_params(self) -> None:
        for stmt in self.k.body:
            if isinstance(stmt, Instruction) and stmt.opcode == "st" and stmt.has("param"):
                addr = stmt.operands[0]
                if isinstance(addr, Addr) and addr.base is not None:
                    t = operand_type(stmt)
                    self.param_slots.setdefault(addr.base, set()).add((addr.offset, t))
        # param_copy: callee params get the slots of what the caller stored
        changed = True
        while changed:
            changed = False
            for stmt in self.k.body:
                if isinstance(stmt, Instruction) and stmt.opcode == "param_copy":
                    dst, src = stmt.operands[0].name, stmt.operands[1].name  # type: ignore[union-attr]
                    have = self.param_slots.setdefault(dst, set())
                    new = self.param_slots.get(src, set()) - have
                    if new:
                        have |= new
                        changed = True
        for name, slots in self.param_slots.items():
            for off, t in slots:
                self.var_types[f"{name}+{off}"] = REG_TYPE[t]

    def fill(self, pb: _PBlock) -> None:
        for instr in pb.instrs:
            translate(self, pb, instr)
        self.terminate(pb)
        pb.filled = True

    def terminate(self, pb: _PBlock) -> None:
        t = pb.term
        blk = pb.ir
        line = t.line if t is not None else 0
        if t is None:
            op = Operation("cf.br", successors=[pb.succ[0].ir])
        elif t.opcode in ("bra", "guard"):
            if t.guard is None:
                op = Operation("cf.br", successors=[pb.succ[0].ir])
            else:
                cond = self.read_var(t.guard.name, pb, t.line)
                succs = [pb.succ[0].ir, pb.succ[1].ir]
                if t.guard.negated:
                    succs.reverse()
                op = Operation("cf.cond_br", [cond], successors=succs)
        elif t.opcode in ("ret", "exit"):
            op = Operation("upir.exit")
        else:  # trap / assertfail
            op = Operation("upir.trap", attributes={"assert": t.opcode == "assertfail"})
            if "stack_overflow" in t.modifiers:
                op.attributes["stack_overflow"] = True
        op.attributes["line"] = line
        blk.append(op)


def _append_phi_operand(pred: _PBlock, block: _PBlock, arg: BlockArgument, v: Value) -> None:
    """`v` flows from `pred` into `arg` (on each edge pred -> block still missing it)."""
    term = pred.ir.terminator
    assert term is not None
    for k, s in enumerate(term.successors):
        if s is block.ir and len(term.successor_args[k]) == arg.index:
            term.successor_args[k].append(v)
            v.uses.append(term)


def _rpo(blocks: list[_PBlock]) -> list[_PBlock]:
    order = postorder([blocks[0]], lambda b: b.succ)
    order.reverse()
    return order


def _remove_trivial_args(region: Region) -> None:
    """Drop block arguments whose incoming values are all one value (or the arg itself).

    A worklist: removing an argument can only make the arguments it flows into trivial,
    so those are looked at again (linear in the number of arguments and edges, rather than
    a rescan of the region after each removal)."""
    incoming: dict[Block, list[tuple[Operation, int]]] = {b: [] for b in region.blocks}
    for b in region.blocks:
        term = b.terminator
        if term is None:
            continue
        for k, s in enumerate(term.successors):
            incoming[s].append((term, k))
    # popped from the end: the first block's first argument is looked at first
    work: list[BlockArgument] = [a for b in reversed(region.blocks) for a in reversed(b.args)]
    removed: set[BlockArgument] = set()
    while work:
        arg = work.pop()
        if arg in removed:
            continue
        b = arg.block
        index = arg.index
        same: Value | None = None
        trivial = False
        for term, k in incoming[b]:
            v = term.successor_args[k][index]
            if v is arg or v is same:
                continue
            if same is None:
                same = v
                trivial = True
            else:
                trivial = False
                break
        if not trivial:
            continue
        assert same is not None
        # the arguments `arg` flows into may become trivial once it is replaced
        fed: list[BlockArgument] = []
        for user in arg.uses:
            for k, sargs in enumerate(user.successor_args):
                for j, v in enumerate(sargs):
                    if v is arg:
                        fed.append(user.successors[k].args[j])
        remove_block_arg(b, arg, same, incoming[b])
        removed.add(arg)
        fed.reverse()
        work.extend(fed)


def lift_kernel(module: Module, entry: Function) -> LiftedKernel:
    """Lift one `.entry` of `module` to a `upir.kernel` op."""
    inlined = inline_calls(module, entry)
    return _Lifter(module, inlined).run()


__all__ = ["lift_kernel", "LiftedKernel", "KernelParam", "REG_TYPE", "SPECIAL_REGS",
           "CallArgs", "Imm", "Pair", "Vec", "type_size"]
