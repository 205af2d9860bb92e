"""The values of a segment being emitted: IR values to LLVM values within an LLVM block,
through allocas across blocks, their LLVM types and conversions, the blocks of the
segment's control flow, slots of values kept across sync points, and memory addresses
(the first layer of SegmentEmitter)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.analysis.pointers import memory_space
from cpuify.codegen.helpers import float_from_bits
from cpuify.codegen.lowering import (
    HANDLERS, I32, I64, IR_LLVM, PTR, PTX_HANDLERS, _width, is_signed, ptx_llvm_type,
)
from cpuify.codegen.thread_order import same_thread_dependences
from cpuify.ir.core import Block, BlockArgument, Operation, OpResult, Value

if TYPE_CHECKING:
    from cpuify.codegen.block_function import KernelCodegen
    from cpuify.codegen.llvm_gen import ModuleCodegen


class SegmentValues:
    """IR values, slots, blocks and addresses of one segment (SegmentEmitter sets the
    attributes below)."""

    kc: KernelCodegen
    mod: ModuleCodegen
    fn: ir.Function
    builder: ir.IRBuilder
    entry_builder: ir.IRBuilder
    vals: dict[Value, ir.Value]
    slots: dict[Value, ir.AllocaInstr]
    block_map: dict[Block, ir.Block]
    pending: list[Block]
    serial_accesses: set[ir.Instruction]
    private_accesses: list[ir.Instruction]
    uses_call_stack: bool
    speculating: bool
    known: dict[Value, ir.Value]
    known_affine: dict[Value, tuple[ir.Value, bool]]
    tid: list[ir.Value]
    state: ir.Value
    shared: ir.Value
    params: ir.Value
    slots_base: ir.Value
    local_base: ir.Value
    local_alloca: ir.Value | None
    nthreads64: ir.Value
    linear_tid64: ir.Value

    # ---- helpers
    @property
    def b(self) -> ir.IRBuilder:
        return self.builder

    def state_ptr(self) -> ir.Value:
        b = self.b
        sp = b.bitcast(self.state, I32.as_pointer())
        return b.gep(sp, [self.linear_tid64])

    def reset_block(self) -> None:
        self.vals = {}

    def slot_of(self, v: Value) -> ir.AllocaInstr:
        s = self.slots.get(v)
        if s is None:
            s = self.entry_builder.alloca(self.llvm_type(v), name="v")
            self.slots[v] = s
        return s

    def llvm_type(self, v: Value) -> ir.Type:
        if v in self.kc.pointers:
            return PTR
        return IR_LLVM[v.type]

    def get(self, v: Value) -> ir.Value:
        got = self.vals.get(v)
        if got is not None:
            return got
        if isinstance(v, OpResult) and v.op.name == "upir.const":
            c = self.constant(v)
            self.vals[v] = c
            return c
        # defined in another LLVM block: through its alloca
        got = self.b.load(self.slot_of(v))
        self.vals[v] = got
        return got

    def constant(self, v: OpResult) -> ir.Value:
        val = v.op.attributes["value"]
        t = IR_LLVM[v.type]
        if v.type.startswith("f"):
            if isinstance(val, int):
                return ir.Constant(t, float_from_bits(val, v.type))
            return ir.Constant(t, float(val))
        c = ir.Constant(t, int(val) & ((1 << t.width) - 1))
        if v in self.kc.pointers:
            return c.inttoptr(PTR)
        return c

    def define(self, v: Value, lv: ir.Value) -> None:
        lv = self.known.get(v, lv)
        if v in self.known_affine:
            # tx + u, proved not to wrap for any thread of the block: v0 + tx with the
            # no-wrap flag, so that LLVM sees the address zext(v) * 4 as affine in tx
            first, unsigned = self.known_affine[v]
            lv = self.b.add(first, self.tid[0], flags=["nuw" if unsigned else "nsw"])
        want = self.llvm_type(v)
        lv = self.coerce_bits(lv, want)
        self.vals[v] = lv
        if self.used_elsewhere(v) and not self.speculating:
            self.b.store(lv, self.slot_of(v))

    def used_elsewhere(self, v: Value) -> bool:
        if isinstance(v, BlockArgument):
            return True
        blk = v.op.parent if isinstance(v, OpResult) else None
        for u in v.uses:
            if u.parent is not blk:
                return True
        # also if a sync point in the same block separates def and use
        return bool(self.kc.syncs)

    def coerce_bits(self, lv: ir.Value, want: ir.Type) -> ir.Value:
        b = self.b
        have = lv.type
        if have == want:
            return lv
        if isinstance(want, ir.PointerType):
            if isinstance(have, ir.PointerType):
                return b.bitcast(lv, want)
            if isinstance(have, ir.IntType):
                return b.inttoptr(self.int_resize(lv, I64, False), want)
            return b.inttoptr(b.bitcast(lv, I64), want)
        if isinstance(have, ir.PointerType):
            lv = b.ptrtoint(lv, I64)
            have = I64
        if isinstance(want, ir.IntType) and isinstance(have, ir.IntType):
            return self.int_resize(lv, want, False)
        hw = _width(have)
        ww = _width(want)
        if hw == ww:
            return b.bitcast(lv, want)
        # float <-> int of another width: go through an int of the source width
        as_int = b.bitcast(lv, ir.IntType(hw)) if not isinstance(have, ir.IntType) else lv
        resized = self.int_resize(as_int, ir.IntType(ww), False)
        return b.bitcast(resized, want) if not isinstance(want, ir.IntType) else resized

    def opaque_int(self, t: ir.IntType, value: int) -> ir.Value:
        """The constant `value` as LLVM cannot see it (an empty inline asm in the entry block,
        no instruction in the machine code): for the masks of codegen.ptx_ops.
        masked_thread_index, which LLVM's loop vectorizer must not analyse."""
        cache = self.__dict__.setdefault("_opaque_ints", {})
        key = (t.width, value)
        if key not in cache:
            asm = ir.InlineAsm(ir.FunctionType(t, [t]), "", "=r,0")
            cache[key] = self.entry_builder.call(asm, [t(value)], name="opaque")
        return cache[key]

    def int_resize(self, lv: ir.Value, want: ir.IntType, signed: bool) -> ir.Value:
        have = lv.type
        if have.width == want.width:
            return lv
        if have.width > want.width:
            return self.b.trunc(lv, want)
        return self.b.sext(lv, want) if signed else self.b.zext(lv, want)

    def operand(self, v: Value, t: str) -> ir.Value:
        """`v` read as PTX type `t` (register wider/narrower than the type is cut/extended)."""
        lv = self.get(v)
        want = ptx_llvm_type(t)
        if lv.type == want:
            return lv
        if isinstance(lv.type, ir.PointerType):
            lv = self.b.ptrtoint(lv, I64)
        if isinstance(want, ir.IntType) and isinstance(lv.type, ir.IntType):
            return self.int_resize(lv, want, is_signed(t))
        return self.coerce_bits(lv, want)

    def result(self, op: Operation, lv: ir.Value, t: str, index: int = 0) -> None:
        """Store `lv` (of PTX type t) into result `index`, extending like PTX does for wide
        destination registers (sign-extend for .s types)."""
        r = op.results[index]
        want = self.llvm_type(r)
        if isinstance(lv.type, ir.IntType):
            # a register used as an address is a pointer here, but it is still a 64-bit
            # register: `ld.global.s32 %rd9, [..]` sign-extends before it becomes one (a
            # -1 index must stay -1, not 2^32 - 1, and fail its own `setp.lt.s64` guard)
            wide = want if isinstance(want, ir.IntType) else I64 if isinstance(want, ir.PointerType) else None
            if wide is not None and wide.width > lv.type.width:
                lv = self.int_resize(lv, wide, is_signed(t))
        self.define(r, lv)

    def slot_address(self, v: Value, b: ir.IRBuilder | None = None) -> ir.Value:
        b = b or self.b
        off = self.kc.slot_offset[v]
        base = b.gep(self.slots_base, [b.mul(self.nthreads64, I64(off))])
        arr = b.bitcast(base, IR_LLVM[v.type].as_pointer())
        if v in self.kc.uniform:
            return arr          # one copy for the whole block
        return b.gep(arr, [self.linear_tid64])

    def rematerialize(self, v: Value) -> None:
        if v in self.vals:
            return
        assert isinstance(v, OpResult)
        op = v.op
        for o in op.operands:
            if isinstance(o, OpResult) and o.op.name != "upir.const":
                self.rematerialize(o)
        handler = HANDLERS.get(op.name) or PTX_HANDLERS[op.name]
        handler(self, op)

    # ---- control flow within the segment
    def block_for(self, blk: Block) -> ir.Block:
        bb = self.block_map.get(blk)
        if bb is None:
            bb = self.fn.append_basic_block("bb")
            self.block_map[blk] = bb
            self.pending.append(blk)
        return bb

    def jump(self, succ: Block, args: list[Value]) -> ir.Block:
        b = self.b
        vals = [self.get(a) for a in args]
        for arg, v in zip(succ.args, vals):
            b.store(self.coerce_bits(v, self.llvm_type(arg)), self.slot_of(arg))
        return self.block_for(succ)

    # --- address computation
    def tag_parallel_accesses(self) -> None:
        """Puts the segment's loads and stores in the module's access group (see
        ModuleCodegen.parallel_loop_id), except volatile ones and `self.serial_accesses`."""
        if self.local_alloca is not None or self.uses_call_stack:
            return      # one local-memory buffer (call stack) serves every iteration: not parallel
        # A thread that writes its local memory and accesses it again in the same segment
        # (an array indexed at run time) depends on itself within one iteration of the
        # thread loop.  The access group says only that iterations are independent, but
        # LLVM's vectorizer then takes these accesses as free of any dependence and forms
        # interleaved groups across them (a group's stores sink below a load of the same
        # array: the fuzzer's fz_2800_4153 read stale local memory).  Such a segment's
        # thread loop is left to LLVM's own dependence analysis.
        private = self.private_accesses
        serial = self.serial_accesses
        if len(private) > 1 and any(isinstance(i, ir.StoreInstr) for i in private):
            serial = serial | set(private)
        tagged = []
        for bb in self.fn.blocks:
            for instr in bb.instructions:
                if not isinstance(instr, (ir.LoadInstr, ir.StoreInstr)):
                    continue
                pointer = instr.operands[0 if isinstance(instr, ir.LoadInstr) else 1]
                # the segment's own allocas (values between its LLVM blocks) become
                # registers before vectorization; they are no thread's memory
                if isinstance(pointer, ir.AllocaInstr) or getattr(instr, "volatile", False) \
                        or instr in serial:
                    continue
                tagged.append(instr)
        # The same holds for shared and global memory that a thread writes and then reads
        # or writes again before the next sync point (`s[t*4 + k]` after `s[t*4]`): those
        # accesses stay out of the group (the fuzzer's same-thread reuse mode found the
        # interleaved store groups sunk below such loads).
        reused = same_thread_dependences(self.fn, tagged, self.shared, self.params, self.fn.args[2:])
        group = self.mod.access_group
        for instr in tagged:
            if instr not in reused:
                instr.set_metadata("llvm.access.group", group)

    def tag_shared_access(self, op: Operation, instr: ir.Instruction) -> None:
        """Marks a shared-memory load/store with the scope of the variable it accesses, a
        global one with the scope of its pointer parameter (KernelPlan.parameter_scopes)."""
        address = op.operands[0]
        tags = (self.kc.shared_alias_tags if memory_space(op) == "shared"
                else self.kc.param_alias_tags).get(address)
        in_place = self.kc.in_place_scope
        if in_place is not None and memory_space(op) != "shared":
            # tiles-in-place's loads and the stores its check showed never to write them
            m = self.kc.mod.module
            scope, noalias = ([*tags[0].operands], [*tags[1].operands]) if tags else ([], [])
            if op.name == "ptx.ld" and op.attributes.get("in_place"):
                scope.append(in_place)
            elif op.name == "ptx.st":
                noalias.append(in_place)
            tags = (m.add_metadata(scope) if scope else None, m.add_metadata(noalias) if noalias else None)
        if tags is not None:
            if tags[0] is not None:
                instr.set_metadata("alias.scope", tags[0])
            if tags[1] is not None:
                instr.set_metadata("noalias", tags[1])

    def address(self, op: Operation, space: str) -> ir.Value:
        """Pointer for memory op `op` (address operand 0 plus its `offset` attribute)."""
        b = self.b
        base = op.operands[0]
        offset = op.attributes.get("offset", 0)
        lv = self.get(base)
        if space == "shared" or space == "local":
            root = self.shared if space == "shared" else self.local_base
            return b.gep(root, [self.shared_index(b, op, lv)])
        if space == "param":
            if isinstance(lv.type, ir.PointerType):
                p = lv
            else:
                p = b.inttoptr(self.int_resize(lv, I64, False), PTR)
            return b.gep(p, [I64(offset)]) if offset else p
        if not isinstance(lv.type, ir.PointerType):
            lv = b.inttoptr(self.int_resize(lv, I64, False), PTR)
        if offset:
            lv = b.gep(lv, [I64(offset)])
        return lv

    def shared_index(self, b: ir.IRBuilder, op: Operation, lv: ir.Value) -> ir.Value:
        """The 64-bit byte offset into shared (or local) memory of access `op` at address
        `lv`: sign-extended, as offsets are < 2^31 and, with `nsw` index arithmetic, LLVM
        then sees them as affine in the thread index."""
        if isinstance(lv.type, ir.PointerType):
            lv = b.ptrtoint(lv, I64)
        ix = lv if lv.type == I64 else b.sext(lv, I64)
        offset = op.attributes.get("offset", 0)
        return b.add(ix, I64(offset)) if offset else ix

    def shared_load_at(self, b: ir.IRBuilder, op: Operation, ix: ir.Value, lt: ir.Type,
                       size: int) -> ir.Instruction:
        """Load `op`'s value from shared-memory byte offset `ix`, tagged as its access."""
        got = b.load(b.bitcast(b.gep(self.shared, [ix]), lt.as_pointer()))
        got.align = size
        self.tag_shared_access(op, got)
        return got
