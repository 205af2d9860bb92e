"""Values a segment computes for other threads than its thread loop's, or before the loop:
what its range branch and clamped shared-memory loads need at the ends of the block or of
an interval of threads, block-wide idle clamps and prefetches for later iterations (the
layer of SegmentEmitter above SyncCrossing)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.analysis.pointers import memory_space
from cpuify.analysis.uniformity import uses_special
from cpuify.codegen.helpers import ENTRY_SPECIALS, access_size, const_int, pure_over, tid_direction
from cpuify.codegen.kernel_abi import BUFFER_GUARD
from cpuify.codegen.lowering import HANDLERS, I1, I32, I64, IR_LLVM, PTR, PTX_HANDLERS, _width, freeze
from cpuify.codegen.sync_crossing import SyncCrossing
from cpuify.ir.core import Operation, OpResult, Value

if TYPE_CHECKING:
    from cpuify.codegen.kernel_plan import KernelPlan
    from cpuify.codegen.thread_loop_plan import RangeBranch


class SpeculativeValues(SyncCrossing):
    """Values computed outside the thread loop or for other threads (SegmentEmitter sets the
    attributes below)."""

    resume: int
    dyn_shared: ir.Value
    ntid: list[ir.Value]
    loop_ntid: list[ir.Value]
    tid: list[ir.Value]
    lane_group: tuple[ir.Value, ir.Value] | None
    interval_idle: dict[Operation, ir.Value]
    idle_sides: dict[Operation, int]
    idle_flag: ir.Value | None

    @contextmanager
    def speculation(self, b: ir.IRBuilder) -> Iterator[None]:
        """Emits with `b` values computed for other threads than the thread loop's (at
        fixed thread indices, see as_thread) or outside it; restores the builder, the
        values and the thread indices afterwards."""
        saved = (self.builder, self.vals, getattr(self, "tid", None),
                 getattr(self, "linear_tid", None), getattr(self, "linear_tid64", None),
                 getattr(self, "local_base", None), self.speculating, self.lane_group)
        self.builder = b
        self.speculating = True
        # (the thread loop's lane group is its loop variables: a thread index of another
        # thread is no lane of it; CUB's warp scan after a lane-grouped segment referenced
        # them from the next-block prefetch, outside their loop)
        self.lane_group = None
        try:
            yield
        finally:
            (self.builder, self.vals, self.tid, self.linear_tid, self.linear_tid64,
             self.local_base, self.speculating, self.lane_group) = saved

    def as_thread(self, tid: list[ir.Value], linear: int | ir.Value) -> None:
        """Within speculation(): compute values from here on as thread `tid` (x, y, z)
        whose linear index is `linear`, from scratch."""
        self.vals = {}
        self.tid = tid
        if isinstance(linear, int):
            self.linear_tid, self.linear_tid64 = I32(linear), I64(linear)
        else:
            self.linear_tid, self.linear_tid64 = linear, self.b.zext(linear, I64)
        self.local_base = self.thread_local_base(self.b)    # (a cvta of a local address)

    def restored_from_slots(self) -> frozenset[Value]:
        """The values the segment reads from their slots at its resume point (kept per
        thread or once per block across the sync point) and the induction variables it
        derives there: their defining ops do not run in the segment, so an address built on
        one is not taken apart below it (`base + (selp(-1, 0, gx > 0) << 2)` kept across a
        time-step loop's barrier: the neighbour was chosen by a condition the segment never
        computed, and edge cells of a stencil came out wrong)."""
        if not self.resume:
            return frozenset()
        sp = self.kc.syncs[self.resume - 1]
        return frozenset(sp.live) | frozenset(sp.derived)

    def _entry_computable(self, v: Value) -> bool:
        """Whether v is pure arithmetic on constants, parameters and block indices (the
        same for every thread, computable before the thread loop)."""
        return pure_over(v, set(), ENTRY_SPECIALS, 12)

    def _in_entry(self, v: Value) -> ir.Value:
        """v (entry-computable) emitted in the segment's entry block."""
        with self.speculation(self.entry_builder):
            self.vals = {}
            self.rematerialize(v)
            return self.vals[v]

    def _with_substitution(self, v: Value, chain: set[Value], replaced: Value,
                           replacement: ir.Value, *, no_wrap: bool = False,
                           entry: bool = False) -> ir.Value:
        """v computed again with `replaced` standing for `replacement` (the ops on `chain`
        re-emitted; their results are not kept).  `no_wrap`: the index arithmetic
        re-emitted is known not to wrap (flags nsw on the ops analysis.no_signed_wrap
        marks, `kc.nsw`: values used only as addresses; not on a value the kernel also
        stores or compares, whose sum may wrap in well-defined source: the fuzzer's
        fz_2807_2538, `s[lt * 5 + u % 5]` with u a wrapping unsigned sum over the select,
        made the load's address poison and LLVM dropped the path).  `entry`: emitted in the
        entry block, where the other operands are computed afresh (see _entry_computable)."""
        with self.speculation(self.b):
            self.vals = dict(self.vals)

            def emit(x: Value) -> ir.Value:
                if x is replaced:
                    return replacement
                if x not in chain:
                    return self._in_entry(x) if entry else self.get(x)
                assert isinstance(x, OpResult)
                for o in x.op.operands:
                    self.vals[o] = emit(o)
                no_wrap_here = no_wrap and x in self.kc.nsw
                amount = const_int(x.op.operands[1]) if x.op.name == "ptx.shl" else None
                if no_wrap_here and amount is not None and 0 <= amount < _width(IR_LLVM[x.type]):
                    # (the handler guards the shift amount with a select that hides the flag)
                    got = self.b.shl(self.coerce_bits(self.vals[x.op.operands[0]], IR_LLVM[x.type]),
                                     ir.Constant(IR_LLVM[x.type], amount), flags=["nsw"])
                    self.vals[x] = got
                    return got
                handler = HANDLERS.get(x.op.name) or PTX_HANDLERS[x.op.name]
                handler(self, x.op)
                got = self.vals[x]
                if no_wrap_here and isinstance(got, ir.Instruction) and \
                        got.opname in ("add", "sub", "mul", "shl") and "nsw" not in got.flags:
                    got.flags.append("nsw")
                return got
            return emit(v)

    @contextmanager
    def at_range_branch(self, b: ir.IRBuilder, rb: RangeBranch
                        ) -> Iterator[Callable[[Value, bool], ir.Value]]:
        """Within: values computed with `b` as thread 0 sees them at the range branch
        (restored at the resume point, then set along the edges to it); yields
        wide(v, unsigned), the 32-bit v there extended to 64 bits."""
        with self.speculation(b):
            self.as_thread([I32(0), I32(0), I32(0)], 0)
            if self.resume:
                self.restore(self.kc.syncs[self.resume - 1])

            def value(v: Value) -> ir.Value:
                if isinstance(v, OpResult):
                    self.rematerialize(v)
                return self.vals[v]

            for edge in rb.edges:
                got = [value(v) for _, v in edge]      # a parallel copy
                for (arg, _), lv in zip(edge, got):
                    self.vals[arg] = lv
            self._after_edges(rb, value)

            def wide(v: Value, unsigned: bool) -> ir.Value:
                lv = self.coerce_bits(value(v), I32)
                return b.zext(lv, I64) if unsigned else b.sext(lv, I64)
            yield wide

    def _after_edges(self, rb: RangeBranch, value: Callable[[Value], ir.Value]) -> None:
        """After the edges to the range branch set their block arguments: the values
        computed from the old ones are dropped, and the induction variables derived at the
        resume point that are arguments of a block entered on the way (a loop header, when
        the way crosses the back edge) are derived again from the new counters.  (Without
        this, a segment resuming at the barrier that ends an iteration checked the next
        iteration's `ka < K`, ka a strength-reduced induction variable, with the previous
        iteration's ka: a tiled matrix multiply's last partial tile took the copy.)"""
        moved: set[Value] = {arg for edge in rb.edges for arg, _ in edge}
        if not moved:
            return
        entered = {getattr(a, "block", None) for a in moved}
        derived = self.kc.syncs[self.resume - 1].derived if self.resume else {}
        again = {v: e for v, e in derived.items() if getattr(v, "block", None) in entered}
        moved |= set(again)
        memo: dict[Value, bool] = {}

        def stale(v: Value, depth: int) -> bool:
            if v in moved:
                return True
            if not isinstance(v, OpResult) or depth > 32:
                return False
            if v not in memo:
                memo[v] = any(stale(o, depth + 1) for o in v.op.operands)
            return memo[v]

        for v in [v for v in self.vals if isinstance(v, OpResult) and stale(v, 0)]:
            del self.vals[v]
        for v in again:
            self.vals.pop(v, None)
        got = {v: value(e) for v, e in again.items()}      # (from the new counters)
        self.vals.update(got)

    def no_wrap(self, b: ir.IRBuilder, first: ir.Value, unsigned: bool) -> ir.Value:
        """Whether tx + u, `first` (64 bits) in thread 0, stays within 32 bits up to the
        block's last thread."""
        top = I64(0xFFFFFFFF if unsigned else 0x7FFFFFFF)
        return b.icmp_signed("<=", b.add(first, I64(self.kc.block_dims[0] - 1)), top)

    def interval_clamps(self, b: ir.IRBuilder, rb: RangeBranch) -> dict[Operation, ir.Value]:
        """With `b` (before a thread loop): for the shared loads through a clamped index
        (clamped_shared_load) that only threads inside the range branch's interval run,
        with the index's thread-dependent side tx + u, whether the clamp changes nothing
        for any thread of the interval, computed at its ends.  Pathfinder's neighbours
        `prev[max(tx - 1, validXmin)]` are read only by the threads computing a cell,
        `tx > i >= 0`: in interior blocks the clamps never act for them, and the loads
        need neither the bound's value (a load before the loop that waited for the last
        phase's masked stores) nor a blend."""
        kc = self.kc
        inside = rb.branch.successors[0 if rb.inside else 1]
        outside = rb.branch.successors[1 if rb.inside else 0]
        outside_ops = set(kc.ops_from(outside, 0))
        # (in program order: the checks emitted, and so the code, must not depend on where
        # the ops sit in memory)
        only_inside = [op for op in dict.fromkeys(kc.ops_from(inside, 0)) if op not in outside_ops]
        leaves, derived = kc.uniform_at(self.resume)
        found: list[tuple[Operation, Operation, Value, Value]] = []
        for op in only_inside:
            if op.name != "ptx.ld" or memory_space(op) != "shared":
                continue
            sides = self.clamp_sides(op)
            if sides is None:
                continue
            _, clamp, x, u = sides
            if clamp.results[0].type != "i32" or not kc._tx_affine(x, leaves, derived, 0):
                continue
            found.append((op, clamp, x, u))
        if not found:
            return {}
        n = kc.block_dims[0]
        out: dict[Operation, ir.Value] = {}
        with self.at_range_branch(b, rb) as wide:
            # the interval [lo, hi] of thread indices, in 64 bits; tx + u must not wrap
            ok: ir.Value = ir.Constant(I1, 1)
            lo: ir.Value = I64(0)
            hi: ir.Value = I64(n - 1)
            for v, c, cmp, unsigned in rb.terms:
                v0 = wide(v, unsigned)
                bound = b.sub(wide(c, unsigned), v0)
                ok = b.and_(ok, self.no_wrap(b, v0, unsigned))
                if cmp in ("gt", "ge"):
                    t = b.add(bound, I64(1)) if cmp == "gt" else bound
                    lo = b.select(b.icmp_signed(">", t, lo), t, lo)
                else:
                    t = b.sub(bound, I64(1)) if cmp == "lt" else bound
                    hi = b.select(b.icmp_signed("<", t, hi), t, hi)
            for op, clamp, x, u in found:
                signed = any(m.startswith("s") for m in clamp.attributes.get("mods", []))
                x0, bound = wide(x, not signed), wide(u, not signed)
                flag = b.and_(ok, self.no_wrap(b, x0, not signed))
                if clamp.name == "ptx.max":     # max(x, u) is x when x(lo) >= u
                    flag = b.and_(flag, b.icmp_signed(">=", b.add(x0, lo), bound))
                else:                           # min(x, u) is x when x(hi) <= u
                    flag = b.and_(flag, b.icmp_signed("<=", b.add(x0, hi), bound))
                out[op] = flag
        return out

    def clamped_shared_load(self, op: Operation, lt: ir.Type, size: int) -> ir.Value | None:
        """A shared-memory load through an index clamped to a bound computed from block
        indices and parameters only (`s[max(tx - 1, lo)]`, pathfinder's and stencils'
        neighbours), as `tx - 1 >= lo ? s[tx - 1] : s[lo]`: the first a load only the
        lanes that take it do (a masked contiguous vector load when the index is affine in
        the thread index), the second one load before the thread loop, its index clamped
        into the shared buffer (its value is used only by lanes whose index was it).  A
        gather otherwise.  None when the address has no such min/max."""
        if self.masked_loop or self.lane_group is not None:
            return None
        sides = self.clamp_sides(op)
        if sides is None:
            return None
        chain, clamp, x, u = sides
        leaves = [o for c in chain if isinstance(c, OpResult) for o in c.op.operands
                  if o not in chain and o is not clamp.results[0]]
        if not all(self._entry_computable(o) or o is x for o in leaves):
            return None
        b = self.b
        xv = self.get(x)
        # the index with x standing for the clamp (shared-memory offsets do not wrap: with
        # `nsw` LLVM sees it as affine in the thread index)
        ix = self.shared_index(b, op, self._with_substitution(
            op.operands[0], chain, clamp.results[0], xv, no_wrap=True))
        idle = self.interval_idle.get(op)
        if idle is None:
            return self._clamped_load(op, lt, size, chain, clamp, xv, u, ix, self.entry_builder)
        # the clamp changes nothing for the threads that run this load in this block: a
        # plain load then; else the clamped load, in a block of its own (its load of the
        # bound's side then happens only where needed: LLVM unswitches the thread loop on
        # `idle` and hoists it out of the other copy)
        plain_bb = self.fn.append_basic_block("clamp.idle")
        clamped_bb = self.fn.append_basic_block("clamp.acts")
        join = self.fn.append_basic_block("clamp.join")
        b.cbranch(idle, plain_bb, clamped_bb)
        b.position_at_end(plain_bb)
        plain = self.shared_load_at(b, op, ix, lt, size)
        b.branch(join)
        b.position_at_end(clamped_bb)
        vals = dict(self.vals)
        clamped = self._clamped_load(op, lt, size, chain, clamp, xv, u, ix, b)
        clamped_end = b.block
        self.vals = vals
        b.branch(join)
        b.position_at_end(join)
        got = b.phi(lt)
        got.add_incoming(plain, plain_bb)
        got.add_incoming(clamped, clamped_end)
        return got

    def selected_shared_load(self, op: Operation, lt: ir.Type, size: int) -> ir.Value | None:
        """A shared-memory load whose address goes through one `selp` (a neighbour chosen
        per thread: `s[ty][gx > 0 ? tx - 1 : tx]`, or nvcc's `base + (selp(-1, 0, p) << 2)`)
        as `p ? s[..a..] : s[..b..]`.  Sides at most the runtime's guard zone apart are both
        loaded (plain contiguous vector loads where the index is affine in the thread
        index) and selected; others each in a branch only the lanes that take it run (a
        masked vector load, a gather where not affine, as the load through the select would
        be).  None when the address has no such select, or all threads take one side."""
        if self.masked_loop or self.lane_group is not None:
            return None
        chain, sel = self._select_in_address(op)
        if sel is None:
            return None
        on_true, on_false, cond = sel.operands
        if cond in self.kc.uniform or self._entry_computable(cond):
            return None         # all threads take one side (ping-pong buffers): no gather
        b = self.b
        take = self.operand(cond, "pred")
        it = IR_LLVM[sel.results[0].type]

        def side_load(value: Value) -> ir.Instruction:
            side = self.coerce_bits(self.get(value), it)
            ix = self.shared_index(b, op, self._with_substitution(
                op.operands[0], chain, sel.results[0], side, no_wrap=True))
            return self.shared_load_at(b, op, ix, lt, size)

        delta = self._select_distance(op.operands[0], chain, sel)
        if delta is not None and abs(delta) <= BUFFER_GUARD - size:
            # one side is in the buffer, the other within its guard zone
            return b.select(take, side_load(on_true), side_load(on_false))
        sides = [self.fn.append_basic_block("select.true"), self.fn.append_basic_block("select.false")]
        done = self.fn.append_basic_block("select.done")
        b.cbranch(take, sides[0], sides[1])
        got = []
        for bb, value in zip(sides, (on_true, on_false)):
            b.position_at_end(bb)
            vals = dict(self.vals)
            load: ir.Value = side_load(value)
            if bb is sides[1]:
                # (a freeze, free in machine code, keeps LLVM from merging the two loads
                # into one load of a selected address: a gather)
                load = freeze(b, load)
            got.append((load, b.block))
            self.vals = vals
            b.branch(done)
        b.position_at_end(done)
        phi = b.phi(lt)
        for v, bb in got:
            phi.add_incoming(v, bb)
        return phi

    @staticmethod
    def _select_distance(addr: Value, chain: set[Value], sel: Operation) -> int | None:
        """The byte distance between the addresses `addr` takes with the select's two
        sides, when both are constants and the way from the select to addr is linear
        (adds of other values, subtractions, shifts and products by constants, widening
        conversions); else None.  The sides count as signed unless a widening on the way
        zero-extends them (`mul.wide.u16`, `cvt.u64.u32`)."""
        sides = [const_int(v) for v in sel.operands[:2]]
        if sides[0] is None or sides[1] is None:
            return None
        unsigned = []

        def type_mod(op: Operation) -> str:
            return next((m for m in op.attributes.get("mods", [])
                         if m[:1] in "sub" and m[1:].isdigit()), "")

        def slope(v: Value, depth: int) -> int | None:
            if v is sel.results[0]:
                return 1
            if v not in chain or not isinstance(v, OpResult) or depth > 8:
                return 0
            op = v.op
            ins = [o for o in op.operands if o is sel.results[0] or o in chain]
            if len(ins) != 1:
                return None
            inner = slope(ins[0], depth + 1)
            if inner is None:
                return None
            k = op.operands.index(ins[0])
            mods = op.attributes.get("mods", [])
            if op.name == "ptx.cvt":
                types = [m for m in mods if m[:1] in "subf" and m[1:].isdigit()]
                if len(types) != 2 or types[0][0] == "f" or types[1][0] == "f":
                    return None
                if types[1][0] == "u" and int(types[0][1:]) > int(types[1][1:]):
                    unsigned.append(op)
                return inner
            if op.name in ("ptx.mul", "ptx.mad") and "wide" in mods and type_mod(op).startswith("u"):
                unsigned.append(op)
            if op.name in ("ptx.mov", "ptx.add"):
                return inner
            if op.name == "ptx.sub":
                return inner if k == 0 else -inner
            if op.name == "ptx.shl" and k == 0:
                amount = const_int(op.operands[1])
                return inner << amount if amount is not None and 0 <= amount < 32 else None
            if op.name in ("ptx.mul", "ptx.mad") and k < 2:
                factor = const_int(op.operands[1 - k])
                return inner * factor if factor is not None else None
            if op.name == "ptx.mad" and k == 2:
                return inner
            return None

        s = slope(addr, 0)
        if s is None:
            return None
        bits = {"i16": 16, "i32": 32, "i64": 64}[sel.results[0].type]
        if not unsigned:        # (-1 selected, then added: the address moves back)
            sides = [x - (1 << bits) if x >= 1 << (bits - 1) else x for x in sides]
        return s * (sides[0] - sides[1])

    def _select_in_address(self, op: Operation) -> tuple[set[Value], Operation | None]:
        """(the values on the way from the address of `op` down to a `selp` of integers, that
        selp) when the address is integer arithmetic over exactly one such selp whose
        values the segment has at hand where `op` is: the sides are computed again from
        the select's operands and the other operands on the way, and a value of another
        block is there only where its block stored it for a use elsewhere (the fuzzer's
        fz_2807_2538: a selp and the sum over it computed in the `else` arm of an `if`, the
        load after the join; the operands' slots were never written, and LLVM took the
        load's path as unreachable)."""
        chain, sel = _one_in_address(op.operands[0], lambda o: o.name == "ptx.selp" and len(o.operands) == 3
                                     and o.results[0].type in ("i16", "i32", "i64"),
                                     self.restored_from_slots())
        if sel is None:
            return chain, None
        read = [o for v in chain if isinstance(v, OpResult) for o in v.op.operands
                if o not in chain and o is not sel.results[0]] + list(sel.operands)
        for v in read:
            if isinstance(v, OpResult) and v.op.parent is not op.parent \
                    and v.op.name != "upir.const" and not self.used_elsewhere(v):
                return chain, None
        return chain, sel

    def clamp_sides(self, op: Operation) -> tuple[set[Value], Operation, Value, Value] | None:
        """For a load whose address goes through one min/max: (the values between the
        address and the min/max, the min/max, its thread-dependent side x, its side u
        computable before the thread loop), or None."""
        chain, clamp = self._clamp_in_address(op.operands[0])
        if clamp is None:
            return None
        x, u = clamp.operands
        if self._entry_computable(x):
            x, u = u, x
        if self._entry_computable(x) or not self._entry_computable(u):
            return None
        return chain, clamp, x, u

    def _clamp_in_address(self, addr: Value) -> tuple[set[Value], Operation | None]:
        """(the values on the way from `addr` down to a min/max, that min/max) when addr is
        integer arithmetic (add, shift, multiply) over exactly one ptx.min/ptx.max."""
        return _one_in_address(addr, lambda op: op.name in ("ptx.min", "ptx.max")
                               and len(op.operands) == 2 and op.results[0].type in ("i32", "i64"),
                               self.restored_from_slots())

    def _clamped_load(self, op: Operation, lt: ir.Type, size: int, chain: set[Value],
                      clamp: Operation, xv: ir.Value, u: Value, ix: ir.Value,
                      eb: ir.IRBuilder) -> ir.Value:
        """clamped_shared_load's select between the load at `ix` (x's side, for the lanes
        whose index x is) and the bound's side, loaded with `eb` (the entry block, or where
        the clamp may act)."""
        # the bound's side, once per segment
        saved_builder = self.builder
        self.builder = eb
        try:
            u_entry = self._in_entry(u)
            iu = self.shared_index(eb, op, self._with_substitution(
                op.operands[0], chain, clamp.results[0], u_entry, entry=True))
            limit = eb.sub(eb.add(I64(self.kc.shared.dynamic_offset), eb.zext(self.dyn_shared, I64)),
                           I64(size))
            iu = eb.select(eb.icmp_signed("<", iu, I64(0)), I64(0), iu)
            iu = eb.select(eb.icmp_signed(">", iu, limit), limit, iu)
            vu = eb.load(eb.bitcast(eb.gep(self.shared, [iu]), lt.as_pointer()))
            vu.align = size
        finally:
            self.builder = saved_builder
        b = self.b
        signed = any(m.startswith("s") for m in clamp.attributes.get("mods", []))
        cmp = b.icmp_signed if signed else b.icmp_unsigned
        take_x = cmp(">=" if clamp.name == "ptx.max" else "<=", xv, self.coerce_bits(u_entry, xv.type))
        read = self.fn.append_basic_block("clamp.read")
        done = self.fn.append_basic_block("clamp.done")
        before = b.block
        b.cbranch(take_x, read, done)
        b.position_at_end(read)
        vx = self.shared_load_at(b, op, ix, lt, size)
        b.branch(done)
        b.position_at_end(done)
        got = b.phi(lt)
        got.add_incoming(vx, read)
        got.add_incoming(ir.Constant(lt, ir.Undefined), before)
        return b.select(take_x, got, vu)

    def idle_clamp(self, op: Operation) -> tuple[int, ir.Value] | None:
        """Block-wide idle clamps, in code specialized for a block shape: for an integer
        `min(a, u)` / `max(a, u)` (a clamp like `min(x, nx - 1)`) where `a` is monotone in
        the thread indices and built from the block index, and `u` is the same for the
        whole block: (the index of `a`, an i1 computed before the thread loop that holds
        when no clamp of the segment changes anything for any thread of the block); the
        caller then selects `a` under the flag.  Monotone, `a` takes its extremes at the
        block's first and last thread, so evaluating it there decides; each check also
        requires the two values in the order the structure says (an index that wraps
        around fails it).  One flag for the segment: LLVM unswitches the thread loop once
        into a copy without the clamps (a stencil's interior blocks: contiguous loads
        instead of gathers), not once per clamp.  None when `op` is no such clamp.

        (Guards like `if (i < n)` were tried the same way: they cost reduction 15%, as the
        compares at the corners let LLVM rewrite the loop's index arithmetic.)"""
        if self.speculating:
            return None
        if self.idle_flag is None:
            self.idle_flag = self._idle_clamps_flag()
        side = self.idle_sides.get(op)
        return None if side is None else (side, self.idle_flag)

    def _idle_clamps_flag(self) -> ir.Value:
        flag: ir.Value = ir.Constant(I1, 1)
        checked, _ = idle_clamps(self.kc, self.resume)
        for op, (side, direction) in checked.items():
            self.idle_sides[op] = side
            flag = self.entry_builder.and_(flag, self._idle_flag(op, side, direction))
        return flag

    def _idle_flag(self, op: Operation, side: int, direction: int) -> ir.Value:
        """Whether clamp `op` changes nothing for any thread of the block (idle_clamp)."""
        dims = self.kc.block_dims
        assert dims is not None
        a, u = op.operands[side], op.operands[1 - side]
        b = self.entry_builder
        with self.speculation(b):
            ends = []
            for corner in ((0, 0, 0), (dims[0] - 1, dims[1] - 1, dims[2] - 1)):
                self.as_thread([I32(c) for c in corner],
                               corner[0] + dims[0] * (corner[1] + dims[1] * corner[2]))
                if isinstance(a, OpResult):
                    self.rematerialize(a)
                ends.append(self.get(a))
            bound = self._in_entry(u) if isinstance(u, OpResult) else self.get(u)
            t = next((m for m in op.attributes.get("mods", [])
                      if m[:1] in "sub" and m[1:].isdigit()), "b32")
            cmp = b.icmp_signed if t.startswith("s") else b.icmp_unsigned
            lo, hi = ends if direction == 1 else ends[::-1]
            flag = cmp("<=", lo, hi)
            for end in (lo, hi):
                flag = b.and_(flag, cmp("<=" if op.name == "ptx.min" else ">=", end, bound))
            return flag

    def aligned_split(self, b: ir.IRBuilder, store: Operation, tx0: int) -> ir.Value:
        """With `b` (before the thread loops): how many threads of the first row after
        thread tx0 come before the first whose address of `store` starts a 64-byte cache
        line (0 to 15; 0 when the addresses of threads tx0 and tx0 + 1 are not a power of
        two up to 16 bytes apart, ascending, or the address is no multiple of that).  NumPy
        puts a large array 16 bytes after a page start, so every 64-byte vector store of a
        row starting at it straddles two cache lines, at several times the cost of an
        aligned one on Intel cores (a transpose's rows: 2x)."""
        addrs = []
        zero = I32(0)
        with self.speculation(b):
            for tx in (tx0, tx0 + 1):
                self.as_thread([I32(tx), zero, zero], tx)
                if self.resume:
                    self.restore(self.kc.syncs[self.resume - 1])
                self.rematerialize(store.operands[0])
                addrs.append(b.ptrtoint(self.address(store, memory_space(store)), I64))
        stride = b.sub(addrs[1], addrs[0])
        ok = b.and_(b.and_(b.icmp_unsigned("<=", b.sub(stride, I64(1)), I64(15)),
                           b.icmp_unsigned("==", b.and_(stride, b.sub(stride, I64(1))), I64(0))),
                    b.icmp_unsigned("==", b.and_(addrs[0], b.sub(stride, I64(1))), I64(0)))
        cttz = self.mod.intrinsic("llvm.cttz.i64", I64, [I64, I1])
        log2 = b.call(cttz, [b.select(ok, stride, I64(1)), ir.Constant(I1, 1)])
        ahead = b.lshr(b.and_(b.sub(I64(0), addrs[0]), I64(63)), log2)
        return b.trunc(b.select(ok, ahead, I64(0)), I32)

    def prefetch_ahead(self, b: ir.IRBuilder) -> None:
        """After the thread loop of an interchanged loop's iteration, or of a segment of a
        loop with barriers (`b` there): prefetch the lines that the accesses
        KernelCodegen.iteration_prefetches chose will touch some iterations later
        (prefetch_advance; prefetchw for stores).  Their addresses are computed as at the
        resume point, for the probe threads, with the loop counter advanced; past the loop's
        end they are harmless, as a prefetch never faults.

        After the loop, not before it: computed in the entry block, the same address
        arithmetic as the thread loop's (without no-wrap flags) was merged with the loop's
        by GVN, and the vectorizer then turned the loop's contiguous loads into gathers
        (warp reduction 1.9 -> 2.6 ms instead of 1.65)."""
        dims = self.kc.block_dims
        ops = self.kc.prefetches.get(self.resume)
        if not ops or dims is None or self.resume == 0:
            return
        sp = self.kc.syncs[self.resume - 1]
        advance = self.kc.prefetch_advance(self.resume)
        # (stream-prefetch-distance's mark: the lines of this iteration in a later block)
        blocks = int(sp.op.attributes.get("prefetch_next_block", 0) or 0)
        ctaid = self.ctaid
        if blocks:
            self.ctaid = [b.add(ctaid[0], I32(blocks))] + list(ctaid[1:])
        try:
            with self.speculation(b):
                self._prefetch_probes(b, ops, lambda: self.restore(sp, advance=advance),
                                      self.STREAM_NEXT_BLOCK_LOCALITY if blocks
                                      else self.kc.prefetch_locality(self.resume))
        finally:
            self.ctaid = ctaid

    #: llvm.prefetch's locality of a streaming loop's lines for the next block: 2, into L2.
    #: Pathfinder (100000 x 100, one thread, CPU time, one tree compiled each way in
    #: alternating processes, 2026-11-28, AMD EPYC VM at load 5-10): 5 iterations ahead into
    #: L1 5.5-6.1 ms; the next block's into L2 4.1-4.8 ms, into L1 5.3-5.7 ms; two blocks
    #: ahead into L2 4.1-4.3 ms
    STREAM_NEXT_BLOCK_LOCALITY = 2

    def _prefetch_probes(self, b: ir.IRBuilder, ops: list[tuple[Operation, list[tuple[int, int, int]], bool]],
                         at_thread: Callable[[], None], locality: int) -> None:
        """Within speculation(): the prefetches of `ops` ((access, probe threads, writes)),
        one address per row of probes computed as that row's first probe thread (after
        `at_thread()`, which sets up what that thread's values start from), the row's other
        lines at constant offsets from it (the probes assume contiguous accesses of
        access_size bytes, see row_probes): computed per probe, each was an add and a sign
        extension of 32-bit index arithmetic LLVM could not fold into a displacement.
        `locality`: llvm.prefetch's (3: prefetcht0, into L1; 2: prefetcht1, into L2)."""
        dims = self.kc.block_dims
        assert dims is not None
        fn = self.mod.intrinsic("llvm.prefetch.p0", ir.VoidType(), [PTR, I32, I32, I32])
        for op, probes, writes in ops:
            rows: dict[tuple[int, int], tuple[int, ir.Value]] = {}
            size = access_size(op)
            for x, y, z in probes:
                if (y, z) not in rows:
                    self.as_thread([I32(x), I32(y), I32(z)], x + dims[0] * (y + dims[1] * z))
                    at_thread()
                    if isinstance(op.operands[0], OpResult):
                        self.rematerialize(op.operands[0])
                    rows[(y, z)] = (x, self.address(op, "global"))
                x0, base = rows[(y, z)]
                addr = base if x == x0 else b.gep(base, [I64((x - x0) * size)])
                b.call(fn, [addr, I32(int(writes)), I32(locality), I32(1)])

    #: llvm.prefetch's locality of the next block's lines: 3, into L1.  Into L2 (2) was
    #: tried, 2026-11-28 on the AMD EPYC VM, one thread, CPU time, processes of the two
    #: settings alternating: tile scan 25.4-26.1 -> 24.0-24.3 ms, but backprop's layer
    #: 3.8-4.2 -> 4.5-5.3 ms (its blocks are short: their lines are read soon, from L1),
    #: the hotspot stencil within noise.  (Compiling both settings in one process and
    #: alternating their launches hid backprop's loss: measure such changes in processes.)
    NEXT_BLOCK_LOCALITY = 3

    def prefetch_next_block(self, b: ir.IRBuilder) -> None:
        """After the entry segment's thread loop (`b` there): prefetch the lines that the
        accesses KernelCodegen.block_prefetches chose will touch in block blockIdx.x + 1,
        which the worker usually runs next (prefetchw for stores), computed for the probe
        threads with blockIdx.x advanced.  Past the grid's end, or where another worker runs
        that block, they are wasted, never wrong: a prefetch never faults."""
        dims = self.kc.block_dims
        ops = self.kc.block_prefetches
        if not ops or dims is None:
            return
        ctaid = self.ctaid
        self.ctaid = [b.add(ctaid[0], I32(1))] + list(ctaid[1:])
        try:
            with self.speculation(b):
                self._prefetch_probes(b, ops, lambda: None, self.NEXT_BLOCK_LOCALITY)
        finally:
            self.ctaid = ctaid

    def prefetch_row(self, b: ir.IRBuilder, tz: ir.Value, ty: ir.Value) -> None:
        """At the latch of the row loop (`b` there, rows tz, ty): the lines of the row of
        threads that just ran that the accesses KernelCodegen.row_prefetches chose will
        touch prefetch_advance iterations later, computed as at the resume point for the
        row's probe threads with the loop counter advanced (as prefetch_ahead does for a
        whole pass after the thread loop)."""
        dims = self.kc.block_dims
        assert dims is not None
        sp = self.kc.syncs[self.resume - 1]
        advance = self.kc.prefetch_advance(self.resume)
        fn = self.mod.intrinsic("llvm.prefetch.p0", ir.VoidType(), [PTR, I32, I32, I32])
        with self.speculation(b):
            for op, probes, writes in self.kc.row_prefetches[self.resume]:
                # (the same probes in every row: see split_row_prefetches)
                xs = [x for x, y, z in probes if (y, z) == probes[0][1:]]
                size = access_size(op)
                x0 = xs[0]
                row = b.add(b.mul(tz, I32(dims[1])), ty)
                self.as_thread([I32(x0), ty, tz], b.add(b.mul(row, I32(dims[0])), I32(x0)))
                self.restore(sp, advance=advance)
                if isinstance(op.operands[0], OpResult):
                    self.rematerialize(op.operands[0])
                base = self.address(op, "global")
                for x in xs:
                    addr = base if x == x0 else b.gep(base, [I64((x - x0) * size)])
                    b.call(fn, [addr, I32(int(writes)), I32(3), I32(1)])


_INDEX_ARITHMETIC = ("ptx.add", "ptx.sub", "ptx.shl", "ptx.mul", "ptx.mad", "ptx.mov", "ptx.cvt")


def _one_in_address(addr: Value, is_target: Callable[[Operation], bool],
                    opaque: set[Value] | frozenset[Value] = frozenset()
                    ) -> tuple[set[Value], Operation | None]:
    """(the values on the way from `addr` down to an op `is_target` accepts, that op) when
    addr is integer arithmetic over exactly one such op; else (..., None).  The walk stops
    at the values in `opaque`: those a segment reads from their slots, whose operands (a
    select's condition, a clamp's bound) it never computed."""
    chain: set[Value] = set()
    found: list[Operation] = []

    def walk(v: Value, depth: int) -> bool:
        if not isinstance(v, OpResult) or depth > 8 or v in opaque:
            return False
        op = v.op
        if is_target(op):
            found.append(op)
            chain.add(v)
            return True
        if op.name not in _INDEX_ARITHMETIC:
            return False
        hits = [walk(o, depth + 1) for o in op.operands]
        if any(hits):
            chain.add(v)
            return True
        return False

    walk(addr, 0)
    if len(found) != 1:
        return chain, None
    return chain - {found[0].results[0]}, found[0]


_CLAMP_SPECIALS = ("%tid", "%ctaid", "%nctaid", "%ntid")


def idle_clamps(kc: "KernelPlan", resume: int
                ) -> tuple[dict[Operation, tuple[int, int]], list[Operation]]:
    """The block-wide idle clamps of the segment from `resume` (SpeculativeValues
    .idle_clamp), in code specialized for a block shape: {min/max op: (the index of its
    operand `a` that is monotone in the thread indices and built from the block index,
    its direction)} that the segment's flag checks; and the clamps of that form left out
    of the flag because `a` follows threadIdx.y/z only (in a block wider than one thread
    along x): such a clamp has one value per row of the thread loop, whose loads stay
    contiguous either way, while in the flag it sent whole blocks to the slow copy (the
    suite's thermal_pyramid: the blocks of the first and last block rows gathered all
    their tile loads, about a quarter of the tile-load segment's time at 1024^2)."""
    checked: dict[Operation, tuple[int, int]] = {}
    per_row: list[Operation] = []
    dims = kc.block_dims
    if dims is None:
        return checked, per_row
    for op in kc.ops_from(*kc.resume_point(resume)):
        if op.name not in ("ptx.min", "ptx.max") or op.results[0].type not in ("i32", "i64"):
            continue
        for side in (0, 1):
            a, u = op.operands[side], op.operands[1 - side]
            direction = tid_direction(a, 12)
            # (a clamp of the block's own thread indices alone, `max(tx - 1, 0)`, acts
            # in every block: never idle, and one such clamp would keep the whole
            # segment in its slow copy)
            if direction in (1, -1) and pure_over(u, set(), ENTRY_SPECIALS, 12) and \
                    pure_over(a, set(), _CLAMP_SPECIALS, 12) and uses_special(a, "%ctaid", 12):
                if dims[0] > 1 and not uses_special(a, "%tid.x", 12):
                    per_row.append(op)
                else:
                    checked[op] = (side, direction)
                break
    return checked, per_row
