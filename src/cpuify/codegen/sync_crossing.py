"""Sync points in a segment being emitted: what a thread leaves where it stops (the values
kept across the sync point, its contribution to a collective, its state), what the resumed
thread restores, the results of static shuffles read from the source lanes, and, after a
run of all threads, the copies and states the next segment and the scheduler read (the
layer of SegmentEmitter above SegmentValues)."""

from __future__ import annotations

from llvmlite import ir

from cpuify.analysis.sync_points import SyncPoint
from cpuify.codegen.helpers import shuffle_source
from cpuify.codegen.kernel_abi import ctx_index
from cpuify.codegen.layout import STATE_UNKNOWN, STATE_WAIT
from cpuify.codegen.lowering import HANDLERS, I1, I32, I64, IR_LLVM, PTX_HANDLERS, _width
from cpuify.codegen.segment_values import SegmentValues
from cpuify.ir.core import Block, Operation, Value


class SyncCrossing(SegmentValues):
    """Stopping at and resuming from sync points (SegmentEmitter sets the attributes below)."""

    ctx: ir.Value
    xarr: dict[str, ir.Value]
    nthreads: ir.Value
    linear_tid: ir.Value
    latch: ir.Block
    last_state: ir.AllocaInstr | None
    masked_loop: bool
    prefix_run: bool
    next_sync: SyncPoint | None
    convergent: bool
    uniform_stops: dict[int, dict[Value, None]]
    lockstep_entry: dict[Value, ir.Value]
    lockstep_reached: set[Value]
    _live_end: ir.Value | None

    def emit_ops(self, blk: Block, start: int) -> None:
        for op in blk.ops[start:]:
            if op in self.kc.sync_of_op:
                self.leave_at_sync(self.kc.sync_of_op[op])
                return
            handler = HANDLERS.get(op.name)
            if handler is None:
                handler = PTX_HANDLERS.get(op.name)
            if handler is None:
                self.kc.error(f"no code generation for '{op.name}'", op)
            handler(self, op)   # type: ignore[misc]
            if self.b.block.is_terminated:
                return

    def leave_at_sync(self, sp: SyncPoint) -> None:
        b = self.b
        op = sp.op
        # contributions of this thread to the collective
        tid = self.linear_tid64
        if op.operands:
            kind = op.attributes.get("kind")
            vals = list(op.operands)
            names: list[str]
            if op.name == "upir.barrier":
                names = ["xval"]
            elif kind == "shfl" and sp.index in self.kc.static_shuffles and not self.masked_loop \
                    and self.next_sync is sp:
                # every thread stops here and the next segment reads the source lanes from
                # the shuffle's own buffer: nothing else is needed
                names = []
            elif kind == "shfl":
                names = ["xval", "xb", "xc", "xmask"]
            elif kind in ("vote", "match", "redux"):
                names = ["xval", "xmask"]
            elif kind in ("syncwarp", "activemask"):
                names = ["xmask"]
            elif kind == "named_barrier":
                names = ["xb", "xc"]         # the barrier's id and thread count
            else:
                names = []
            for name, v in zip(names, vals):
                lv = self.get(v)
                if isinstance(lv.type, ir.PointerType):
                    lv = b.ptrtoint(lv, I64)
                if name == "xval":
                    if not isinstance(lv.type, ir.IntType):
                        lv = b.bitcast(lv, ir.IntType(_width(lv.type)))
                    lv = self.int_resize(lv, I64, False)
                    arr = b.bitcast(self.xarr[name], I64.as_pointer())
                else:
                    if not isinstance(lv.type, ir.IntType):
                        lv = b.bitcast(lv, ir.IntType(_width(lv.type)))
                    lv = self.int_resize(lv, I32, False)
                    arr = b.bitcast(self.xarr[name], I32.as_pointer())
                b.store(lv, b.gep(arr, [tid]))
            static = self.kc.static_shuffles.get(sp.index)
            if static is not None:
                # the value also goes to the shuffle's buffer, which a run of all threads
                # after it reads (read_static_shuffle)
                lv = self.get(vals[0])
                if isinstance(lv.type, ir.PointerType):
                    lv = b.ptrtoint(lv, I64)
                if not isinstance(lv.type, ir.IntType):
                    lv = b.bitcast(lv, ir.IntType(_width(lv.type)))
                b.store(self.int_resize(lv, I32, False), b.gep(self.static_buffer(static[3]), [tid]))
        for v in sp.live:
            if v in self.kc.lockstep and not self.speculating:
                # an interchanged loop's iteration counter: stored once, after the thread
                # loop (store_lockstep_counters), not by every thread
                self.lockstep_reached.add(v)
                continue
            value = self.coerce_bits(self.get(v), IR_LLVM[v.type])
            if v in self.kc.uniform:
                # the same value in every thread that stops here: each stores it to its own
                # element of the slot's array (a contiguous vector store; one address
                # written by every thread would keep the loop scalar); the next segment
                # reads element 0, which the thread loop's exit fills from a thread that
                # stopped here unless thread 0 certainly did (see gather_uniform_slots)
                b.store(value, b.gep(self.slot_address(v), [self.linear_tid64]))
                if self.masked_loop or not self.convergent:
                    self.uniform_stops.setdefault(sp.index, {})[v] = None
            else:
                b.store(value, self.slot_address(v))
        if self.last_state is not None:
            b.store(I32(STATE_WAIT | sp.index), self.last_state)
        elif self.masked_loop or self.next_sync is None:
            b.store(I32(STATE_WAIT | sp.index), self.state_ptr())
        b.branch(self.latch)

    def restore(self, sp: SyncPoint, advance: int = 0) -> None:
        """The values live at `sp`, as the resumed thread sees them; with `advance`, as it
        will `advance` iterations later: of the interchanged loops at a soft barrier, else
        of the loops whose counters cross `sp` (prefetch_ahead)."""
        b = self.b
        for v in sp.live:
            if v in self.kc.uniform:
                # read once before the thread loop: threads of this segment may already
                # write the next value of the same slot
                e = self.entry_builder
                lv = e.load(self.slot_address(v, e))
                if v in self.kc.lockstep:
                    if advance:
                        lv = e.add(lv, ir.Constant(lv.type, advance))
                    else:
                        self.lockstep_entry[v] = lv
                elif advance and v in sp.steps:
                    lv = e.add(lv, ir.Constant(lv.type, advance * sp.steps[v]))
            else:
                lv = b.load(self.slot_address(v))
            self.define(v, lv)
        for v in sp.remat:
            self.rematerialize(v)
        for v, expr in sp.derived.items():
            self.rematerialize(expr)
            self.define(v, self.vals[expr])
        op = sp.op
        static = self.kc.static_shuffles.get(sp.index)
        if op.results and static is not None and not self.masked_loop:
            out, pred = self.read_static_shuffle(*static)
            self.define_collective_results(op, out, pred)
        elif op.results:
            tid = self.linear_tid64
            out = b.load(b.gep(b.bitcast(self.xarr["xout"], I64.as_pointer()), [tid]))
            pred = b.load(b.gep(b.bitcast(self.xarr["xpred"], I32.as_pointer()), [tid]))
            self.define_collective_results(op, out, pred)

    def define_collective_results(self, op: Operation, out: ir.Value, pred: ir.Value) -> None:
        """The results of a collective from its 64-bit value and its 32-bit predicate."""
        b = self.b
        first = op.results[0]
        if first.type == "i1" and op.name == "upir.barrier" or (first.type == "i1" and op.attributes.get("kind") == "vote"):
            self.define(first, b.icmp_unsigned("!=", out, I64(0)))
        else:
            self.define(first, self.coerce_bits(self.int_resize(out, ir.IntType(_width(IR_LLVM[first.type])), False), IR_LLVM[first.type]))
        if len(op.results) > 1:
            self.define(op.results[1], b.icmp_unsigned("!=", pred, I32(0)))

    def static_buffer(self, which: int, b: ir.IRBuilder | None = None) -> ir.Value:
        """Buffer 1 or 2 of static shuffles (KernelCodegen.plan_static_shuffles), as i32*:
        `shfl` moves 32-bit values (the exchange's xval holds 64 for votes and matches; the
        shuffles' own buffers with 64-bit elements took a zero extension per store and a
        truncation per load, and twice the bytes)."""
        b = b or self.b
        stride = self.kc.static_buffer_stride(b, self.nthreads64)
        base = b.gep(self.xarr["xval"], [b.mul(stride, I64(which))])
        return b.bitcast(base, I32.as_pointer())

    def read_static_shuffle(self, mode: str, lane_operand: int, clamp_word: int, which: int
                            ) -> tuple[ir.Value, ir.Value]:
        """(value, predicate) of a static shuffle (KernelCodegen.static_shuffle) for this
        thread, read from the buffer the block's threads stored: in a run of all threads
        every lane of every warp wrote its value.  The source lane is the thread's own lane
        plus, minus or xor a constant: a contiguous load, masked where the source is no
        lane of the warp (the thread's own value then)."""
        b = self.b
        t = self.linear_tid64
        xval = self.static_buffer(which)
        if self.speculating:
            # (another thread's values computed outside the thread loop, speculation():
            # no branches here; the shuffle's result is not what they are after)
            return b.zext(b.load(b.gep(xval, [t])), I64), I32(0)
        base, j, pred = shuffle_source(b, t, mode, I32(lane_operand & 31),
                                       I32(clamp_word & 0xFFFFFFFF))
        # the source thread's index (when `inside`), written so that LLVM sees it affine in
        # t for up and down: a contiguous (masked) load
        src = (b.add(t, I64(lane_operand & 31)) if mode == "down" else
               b.sub(t, I64(lane_operand & 31)) if mode == "up" else b.add(base, b.sext(j, I64)))
        inside = b.and_(pred, b.and_(b.icmp_unsigned("<", j, I32(32)),
                                     b.icmp_unsigned("<", src, self.nthreads64)))
        mine = b.load(b.gep(xval, [t]))
        # a source lane past the block's last thread (a partial last warp) gives 0, as on an
        # H100; one outside the segment, the lane's own value
        mine = b.select(pred, I32(0), mine)
        if mode in ("up", "down"):
            # t -+ 31 at most: inside the guard zones around xval (XVAL_GUARD), so the load
            # needs no condition and stays one contiguous vector load
            other = b.load(b.gep(xval, [src]))
            return b.zext(b.select(inside, other, mine), I64), b.zext(pred, I32)
        read = self.fn.append_basic_block("shfl.read")
        done = self.fn.append_basic_block("shfl.done")
        before = b.block
        b.cbranch(inside, read, done)
        b.position_at_end(read)
        other = b.load(b.gep(xval, [src]))
        b.branch(done)
        b.position_at_end(done)
        got = b.phi(I32)
        got.add_incoming(mine, before)
        got.add_incoming(other, read)
        return b.zext(got, I64), b.zext(pred, I32)

    def store_lockstep_counters(self, b: ir.IRBuilder) -> None:
        """The next value of each interchanged loop's iteration counter that a thread of
        this segment may have stopped with at the loop's header, written once to the copy
        the next segment reads: the counter restored at the segment's start plus one (the
        segment from the header runs one iteration), or 0 in a segment that reaches the
        header from outside the loop (every thread that comes back to the header has done
        the same iterations; one that leaves the loop never comes back, so writing it when
        none stopped there is harmless).  Written per thread, it was one more store in
        every iteration of the thread loop."""
        for v in sorted(self.lockstep_reached, key=lambda x: self.kc.value_order.get(x, 0)):
            restored = self.lockstep_entry.get(v)
            nxt = I32(0) if restored is None else b.add(self.coerce_bits(restored, I32), I32(1))
            b.store(nxt, b.bitcast(self.slot_address(v, b), I32.as_pointer()))

    def gather_uniform_slots(self, b: ir.IRBuilder, stops: dict[int, dict[Value, None]],
                             common: ir.Value | None = None) -> None:
        """Element 0 of a block-uniform value's slot array is the copy the next segment
        reads: for each sync point where threads stopped with uniform values, copy the
        elements of the last thread waiting there.  `common`: the state every thread is
        in, when the segment has found one (then that thread is the last of the block);
        else a vectorizable max over the states finds it."""
        states = b.bitcast(self.state, I32.as_pointer())
        for index, values in sorted(stops.items()):
            at = I32(STATE_WAIT | index)
            pre = b.block
            scan = self.fn.append_basic_block(f"gather{index}.scan")
            found = self.fn.append_basic_block(f"gather{index}.found")
            copy = self.fn.append_basic_block(f"gather{index}.copy")
            done = self.fn.append_basic_block(f"gather{index}.done")
            all_here = ir.Constant(I1, 0) if common is None else b.icmp_signed("==", common, at)
            b.cbranch(all_here, found, scan)
            b.position_at_end(scan)

            def body(b: ir.IRBuilder, t: ir.Value, acc: list[ir.Value], at: ir.Value = at
                     ) -> list[ir.Value]:
                here = b.icmp_signed("==", b.load(b.gep(states, [t])), at)
                last = b.select(here, b.trunc(t, I32), I32(-1))
                return [b.select(b.icmp_signed(">", last, acc[0]), last, acc[0])]
            last_scanned, = self.kc.counted_loop(b, self.nthreads64, [I32(-1)], body, f"gather{index}")
            scanned = b.block
            b.branch(found)
            b.position_at_end(found)
            last = b.phi(I32)
            last.add_incoming(I32(0), pre)      # every thread is here: element 0 is written
            last.add_incoming(last_scanned, scanned)
            b.cbranch(b.icmp_signed(">", last, I32(0)), copy, done)
            b.position_at_end(copy)
            for v in values:
                arr = self.slot_address(v, b)
                b.store(b.load(b.gep(arr, [b.zext(last, I64)])), arr)
            b.branch(done)
            b.position_at_end(done)

    def live_end(self) -> ir.Value:
        """ctx.live_end, loaded once in the entry block: where the block function found the
        threads after the last live one (0: none exited).  The masked and prefix runs stop
        there."""
        if self._live_end is None:
            e = self.entry_builder
            self._live_end = e.load(e.gep(self.ctx, [I32(0), I32(ctx_index("live_end"))]),
                                    name="live_end")
        return self._live_end

    def common_state(self, b: ir.IRBuilder) -> ir.Value:
        """The state all threads stopped in, or STATE_UNKNOWN: a vectorizable scan, cheaper
        here than in the scheduler."""
        states = b.bitcast(self.state, I32.as_pointer())
        first = b.load(states)
        n = b.zext(self.live_end(), I64) if self.prefix_run else self.nthreads64

        def body(b: ir.IRBuilder, t: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            return [b.or_(acc[0], b.xor(b.load(b.gep(states, [t])), first))]
        diff, = self.kc.counted_loop(b, n, [I32(0)], body, "scan")
        return b.select(b.icmp_unsigned("==", diff, I32(0)), first, I32(STATE_UNKNOWN))
