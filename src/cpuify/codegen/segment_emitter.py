"""Emission of one segment: the thread loops that run the kernel from one resume point
until each thread reaches a sync point or exits (all threads, the threads waiting there,
or the first live ones), with the copies and loops its plan asks for (KernelPlan)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.analysis.sync_points import SyncPoint
from cpuify.codegen import in_order_sums, ptx_ops, ptx_spec, ptx_tensor, ptx_texture, upir_ops  # noqa: F401  (registers the ops' lowerings)
from cpuify.codegen.helpers import const_int
from cpuify.codegen.kernel_abi import CTX_TYPE, DIMS_TYPE, SEGMENT_AREAS, ctx_index
from cpuify.codegen.layout import STATE_EXITED, STATE_UNKNOWN, STATE_WAIT
from cpuify.codegen.lowering import I1, I8, I32, I64, PTR
from cpuify.codegen.speculation import SpeculativeValues
from cpuify.ir.core import Block, Operation, OpResult, Value

if TYPE_CHECKING:
    from cpuify.codegen.block_function import KernelCodegen
    from cpuify.codegen.thread_loop_plan import DeferredRegion, RangeBranch


class SegmentEmitter(SpeculativeValues):
    """Emits the thread loop of one segment (resume point r)."""

    def __init__(self, kc: KernelCodegen, fn: ir.Function, resume: int) -> None:
        self.kc = kc
        self.mod = kc.mod
        self.fn = fn
        self.resume = resume
        self.vals: dict[Value, ir.Value] = {}           # per LLVM block (reset at block start)
        self.slots: dict[Value, ir.AllocaInstr] = {}     # cross-block values
        self.block_map: dict[Block, ir.Block] = {}
        self.pending: list[Block] = []
        self.param_cache: dict[tuple[int, str, bool], ir.Value] = {}
        # accesses through which threads of one segment communicate (shared atomics)
        self.serial_accesses: set[ir.Instruction] = set()
        # loads and stores of the thread's own local memory (and generic ones that may
        # reach it): see tag_parallel_accesses
        self.private_accesses: list[ir.Instruction] = []
        # the segment runs recursions on the worker's call stack, which every thread uses
        self.uses_call_stack = False
        # values computed for another thread than the loop's (speculation()): not stored
        self.speculating = False
        # cf.cond_br -> its join: `if`s the thread loop steps over (run after it, deferred)
        self.skip_regions: dict[Operation, Block] = {}
        # (first thread of the group, lane) when the thread loop runs in lane groups
        self.lane_group: tuple[ir.Value, ir.Value] | None = None
        # the thread loop being emitted runs only the threads waiting at its resume point
        self.masked_loop = False
        # interchanged loops' iteration counters: the copies restored before the thread loop,
        # and those some thread may stop with (store_lockstep_counters)
        self.lockstep_entry: dict[Value, ir.Value] = {}
        self.lockstep_reached: set[Value] = set()
        # block-wide idle clamps (idle_clamp): min/max op -> its thread-dependent operand,
        # and the flag that all of them are idle
        self.idle_sides: dict[Operation, int] = {}
        self.idle_flag: ir.Value | None = None
        # values decided for every thread of the thread loop being emitted (a range
        # branch's condition in the copy where all threads agree, see emit_thread_loops)
        self.known: dict[Value, ir.Value] = {}
        # ... and the values tx + u those comparisons are on: v -> (v in thread 0, 32 bits;
        # unsigned), for which all_inside proved that tx + u does not wrap in any thread
        # (range_firsts: the same, as all_inside found them)
        self.known_affine: dict[Value, tuple[ir.Value, bool]] = {}
        self.range_firsts: dict[Value, tuple[ir.Value, bool]] = {}
        # clamped shared loads on the inside of the segment's range branch -> an i1, computed
        # before the thread loop being emitted: the clamp changes nothing for the threads
        # inside the branch's interval (interval_clamps)
        self.interval_idle: dict[Operation, ir.Value] = {}
        # the thread loop being emitted runs the first ctx.live_end threads, all waiting at
        # `resume` (the others exited; KernelCodegen.plan_prefix_runs)
        self.prefix_run = False
        self._live_end: ir.Value | None = None      # live_end()
        # how the threads of the thread loop being emitted stop: all at this sync point, all
        # exiting, all the same way (KernelCodegen.convergent_segments)
        self.next_sync: SyncPoint | None = kc.only_next.get(resume)
        self.all_exit = resume in kc.only_exit
        self.convergent = resume in kc.convergent

    def emit(self) -> None:
        fn = self.fn
        ctx_raw, masked = fn.args[:2]
        areas = dict(zip(SEGMENT_AREAS, fn.args[2:]))
        entry = fn.append_basic_block("entry")
        self.builder = ir.IRBuilder(entry)
        b = self.builder
        ctx = b.bitcast(ctx_raw, CTX_TYPE.as_pointer())
        self.ctx = ctx

        def field(name: str) -> ir.Value:
            return b.load(b.gep(ctx, [I32(0), I32(ctx_index(name))]), name=name)

        self.params = areas["params"]
        dims = b.bitcast(field("dims"), DIMS_TYPE.as_pointer())
        if self.kc.launch_dims is not None:
            self.ntid = [I32(d) for d in self.kc.launch_dims]
            self.loop_ntid = [I32(d) for d in self.kc.block_dims]
        else:
            self.ntid = [b.load(b.gep(dims, [I32(0), I32(1), I32(k)]), name=f"ntid{k}") for k in range(3)]
            # the extents of the thread loops: duplicate dimensions run once
            self.loop_ntid = [I32(1) if k in self.kc.duplicate_dims else self.ntid[k] for k in range(3)]
        self.nctaid = [b.load(b.gep(dims, [I32(0), I32(0), I32(k)]), name=f"nctaid{k}") for k in range(3)]
        self.ctaid = [field(n) for n in ("bx", "by", "bz")]
        self.shared = areas["shared"]
        self.state = areas["state"]
        self.xarr = {n: areas[n] if n in areas else field(n)
                     for n in ("xval", "xb", "xc", "xmask", "xout", "xpred")}
        self.slots_base = areas["slots"]
        self.local_base_all = areas["local"]
        shape = self.kc.block_dims
        # in code specialized for a block shape the thread count is a constant: slot arrays
        # then sit at constant offsets from each other, and LLVM sees that they are apart
        self.nthreads = field("nthreads") if shape is None else I32(shape[0] * shape[1] * shape[2])
        self.dyn_shared = field("dyn_shared")
        self.nthreads64 = b.zext(self.nthreads, I64)
        if self.kc.local_size and not self.kc.syncs:
            # no sync points: a thread's local memory never outlives its loop iteration
            arr = b.alloca(ir.ArrayType(I8, self.kc.local_size), name="localmem")
            arr.align = 16
            self.local_alloca: ir.Value | None = b.bitcast(arr, PTR)
        else:
            self.local_alloca = None
        exit_bb = fn.append_basic_block("done")
        # Only threads waiting at a sync point are ever resumed alone (the scheduler's
        # masked runs, block_sched.c): the kernel's entry segment always runs every
        # thread, and a copy of its thread loop for some threads could never run
        # (LLVM optimized and vectorized it all the same: 9% of a fuzzer batch's LLVM time).
        masked_runs = self.kc.masked_runs and self.resume > 0
        exit_some_bb = fn.append_basic_block("done_some") if masked_runs else None
        unmasked_bb = fn.append_basic_block("all_threads")
        prefix = self.kc.prefix_runs and self.resume > 0
        if prefix:
            masked_bb = fn.append_basic_block("some_threads")
            prefix_bb = fn.append_basic_block("first_threads")
            sw = b.switch(masked, unmasked_bb)
            sw.add_case(I32(1), masked_bb)
            sw.add_case(I32(2), prefix_bb)
        elif masked_runs:
            masked_bb = fn.append_basic_block("some_threads")
            b.cbranch(b.icmp_signed("!=", masked, I32(0)), masked_bb, unmasked_bb)
        else:
            b.branch(unmasked_bb)
        # allocas and parameter loads go to the entry block, before its terminator
        self.entry_builder = ir.IRBuilder(entry)
        self.entry_builder.position_before(entry.terminator)
        # sync point -> block-uniform values threads of the current thread loop may leave
        # there (stored per thread; element 0 filled after the loop)
        self.uniform_stops: dict[int, dict[Value, None]] = {}
        # two copies of the thread loop: all threads (vectorizable), or only those at `resume`
        self.emit_thread_loops(unmasked_bb, exit_bb, masked=False)
        unmasked_stops, self.uniform_stops = self.uniform_stops, {}
        unmasked_last_state = self.last_state
        if exit_some_bb is not None:
            self.emit_thread_loops(masked_bb, exit_some_bb, masked=True)
        # (the prefix copy below starts its own: the masked run's are gathered at its exit)
        masked_stops = self.uniform_stops
        if prefix:
            exit_prefix_bb = fn.append_basic_block("done_first")
            self.uniform_stops = {}
            self.prefix_run = True
            try:
                self.emit_thread_loops(prefix_bb, exit_prefix_bb, masked=False)
                b.position_at_end(exit_prefix_bb)
                self.finish_run(b, self.uniform_stops, self.last_state)
            finally:
                self.prefix_run = False
        b.position_at_end(exit_bb)
        self.finish_run(b, unmasked_stops, unmasked_last_state)
        if exit_some_bb is not None:
            b.position_at_end(exit_some_bb)
            self.store_lockstep_counters(b)
            self.gather_uniform_slots(b, masked_stops)
            b.ret(I32(STATE_UNKNOWN))

    def finish_run(self, b: ir.IRBuilder, stops: dict[int, dict[Value, None]],
                   last_state: ir.AllocaInstr | None) -> None:
        """After a run of all threads (`b` there): the lockstep counters, the prefetches,
        and the state every thread is in, when known (the segment's return value)."""
        self.store_lockstep_counters(b)
        self.prefetch_ahead(b)
        if self.resume == self.kc.next_block_resume:
            self.prefetch_next_block(b)
        if self.all_exit:
            # all threads ran this segment to their exit (their states were not stored)
            b.ret(I32(STATE_EXITED))
        elif self.next_sync is not None:
            # every thread stopped at the one sync point this segment reaches: their states
            # were not stored (the block function or the scheduler fills them when needed)
            b.ret(I32(STATE_WAIT | self.next_sync.index))
        elif self.convergent and last_state is not None:
            # every thread took the same path: the last thread's state is everyone's
            self.gather_uniform_slots(b, stops)
            b.ret(b.load(last_state))
        elif self.kc.syncs:
            common = self.common_state(b)
            self.gather_uniform_slots(b, stops, common)
            b.ret(common)
        else:
            b.ret(I32(STATE_UNKNOWN))

    def emit_thread_loops(self, start: ir.Block, exit_bb: ir.Block, *, masked: bool) -> None:
        """for tz, ty, tx (tx innermost): run the segment for one CUDA thread; then, in a
        run of all threads, the segment's deferred `if`s (KernelCodegen.deferred_regions),
        each as a loop over the threads it selects."""
        whole = not masked and not self.prefix_run      # every thread of the block runs
        deferred = self.kc.deferred.get(self.resume, []) if whole else []
        rb = self.kc.range_branches.get(self.resume) if whole else None
        if rb is not None:
            start = self.emit_agreeing_copy(start, rb)
        if not deferred:
            self.emit_one_thread_loop(start, exit_bb, masked=masked)
            return
        after = self.fn.append_basic_block("deferred")
        self.skip_regions = {r.branch: r.join for r in deferred}
        self.emit_one_thread_loop(start, after, masked=False)
        self.skip_regions = {}
        last_state = self.last_state
        for k, region in enumerate(deferred):
            nxt = exit_bb if k == len(deferred) - 1 else self.fn.append_basic_block("deferred")
            self.emit_one_thread_loop(after, nxt, masked=False, region=region)
            after = nxt
        self.last_state = last_state

    def emit_agreeing_copy(self, start: ir.Block, rb: RangeBranch) -> ir.Block:
        """At `start`: whether every thread is inside the range branch's interval (its
        comparisons hold for the first and the last thread, and tx + u does not wrap in
        between); if so, a copy of the thread loop with the branch decided, which returns
        on its own (finish_run); if not, the block returned, where the usual loop goes.
        The `if (i < n)` of all blocks but the last runs without masks, and a grid-stride
        loop's passes but the last know that every thread goes on (no state per thread)."""
        b = self.builder
        fast = self.fn.append_basic_block("all_agree")
        some = self.fn.append_basic_block("some_differ")
        done = self.fn.append_basic_block("all_agree.done")
        b.position_at_end(start)
        b.cbranch(self.all_inside(b, rb), fast, some)
        saved = (self.next_sync, self.all_exit, self.convergent, self.uniform_stops)
        if rb.decided_convergent:
            self.next_sync, self.all_exit, self.convergent = \
                rb.decided_next, rb.decided_exit, True
        self.uniform_stops = {}
        self.known = {br.operands[0]: ir.Constant(I1, int(inside))
                      for br, _, inside in rb.decided()}
        self.known_affine = self.range_firsts
        try:
            self.emit_one_thread_loop(fast, done, masked=False)
            b.position_at_end(done)
            self.finish_run(b, self.uniform_stops, self.last_state)
        finally:
            self.known, self.known_affine = {}, {}
            self.next_sync, self.all_exit, self.convergent, self.uniform_stops = saved
        return some

    def all_inside(self, b: ir.IRBuilder, rb: RangeBranch) -> ir.Value:
        """With `b` (before the thread loops): whether every comparison of the range branch
        (and of the further branches it decides) holds for every thread.  u is the value of
        tx + u in thread 0, the comparisons are made in 64 bits for threads 0 and
        blockDim.x - 1, and tx + u must not wrap.  Keeps each tx + u of the further
        branches in thread 0 (range_firsts) for the copy, which computes tx + u from it
        (known_affine)."""
        last = self.kc.block_dims[0] - 1
        ok: ir.Value = ir.Constant(I1, 1)
        self.range_firsts = {}
        # (only for the further branches' values and those of the first branch that add a
        # constant to the index: the first branch's `blockIdx.x * blockDim.x + tx` is the
        # loop's own index arithmetic, which LLVM already reads as affine (`or disjoint` of
        # the block's base and tx); made opaque, saxpy's loop got a run-time overflow check.
        # `i + 256` after a soft barrier of split-row-streams became `(i << 2) | 1024`, a
        # gather, like a further branch's)
        first_terms = {v for v, _, _, _ in rb.terms if not _adds_constant(v)}
        with self.at_range_branch(b, rb) as wide:
            for v, c, cmp, unsigned in (t for _, terms, _ in rb.decided() for t in terms):
                first, bound = wide(v, unsigned), wide(c, unsigned)
                if v not in self.range_firsts and v not in first_terms:
                    # (through an empty asm, which LLVM cannot see into: knowing the bits of
                    # u (`blockIdx.x * 512 + 256`) and that tx < 256, it turned v + tx into
                    # an `or` and then lost the flag that makes that `or` an addition, so
                    # the address zext(v) * 4 was no longer affine and the load a gather)
                    opaque = b.asm(ir.FunctionType(I32, [I32]), "", "=r,0",
                                   [b.trunc(first, I32)], side_effect=False)
                    self.range_firsts[v] = (opaque, unsigned)
                end = b.add(first, I64(last))
                op = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}[cmp]
                for x in (self.no_wrap(b, first, unsigned), b.icmp_signed(op, first, bound),
                          b.icmp_signed(op, end, bound)):
                    ok = b.and_(ok, x)
        return ok

    def thread_local_base(self, b: ir.IRBuilder) -> ir.Value:
        """The local memory of thread `linear_tid64` (null without local memory)."""
        if not self.kc.local_size:
            return ir.Constant(PTR, None)
        if self.local_alloca is not None:
            return self.local_alloca
        return b.gep(self.local_base_all, [b.mul(self.linear_tid64, I64(self.kc.local_size))], name="local")

    def emit_one_thread_loop(self, start: ir.Block, exit_bb: ir.Block, *, masked: bool,
                             region: DeferredRegion | None = None) -> None:
        """The thread loops tz, ty, tx from `start` to `exit_bb`.  In a run of all threads
        whose segment has an aligning store (KernelCodegen.aligning_store), two of them: tx
        up to the first thread whose store starts a cache line (aligned_split, at most 15
        threads), then the rest, whose vectors store whole lines.  Threads do not
        communicate between sync points, so the order they run in is free."""
        whole = not masked and not self.prefix_run
        store = self.kc.aligned_rows.get(self.resume) if whole and region is None else None
        if store is None:
            self._emit_thread_loop(start, exit_bb, masked=masked, region=region)
            return
        self.block_map = {}
        self.pending = []
        b = self.builder
        b.position_at_end(start)
        split = self.aligned_split(b, store, 0)
        split = (split, b.zext(split, I64))
        rest = self.fn.append_basic_block("aligned_rows")
        self._emit_thread_loop(start, rest, masked=False, x_to=split)
        self._emit_thread_loop(rest, exit_bb, masked=False, x_from=split)

    def _emit_thread_loop(self, start: ir.Block, exit_bb: ir.Block, *, masked: bool,
                          region: DeferredRegion | None = None,
                          x_from: tuple[ir.Value, ir.Value] | None = None,
                          x_to: tuple[ir.Value, ir.Value] | None = None) -> None:
        """One nest of thread loops (see emit_one_thread_loop); `x_from`, `x_to`: the tx
        loop runs from, or up to, this thread instead (its index in 32 and in 64 bits,
        computed at `start`)."""
        fn = self.fn
        b = self.builder
        self.block_map = {}
        self.pending = []
        names = ("tz", "ty", "tx")
        whole = not masked and not self.prefix_run      # every thread of the block runs
        if region is not None:
            ranges = region.ranges
        else:
            ranges = self.kc.thread_range.get(self.resume) if whole else None
        if ranges is None:
            starts, bounds, steps = (0, 0, 0), (self.loop_ntid[2], self.loop_ntid[1], self.loop_ntid[0]), (1, 1, 1)
        else:       # z, y, x: only the threads that do something (thread_ranges)
            starts, stops, steps = zip(*reversed(ranges))
            bounds = tuple(I32(v) for v in stops)
        if self.prefix_run:     # the first live_end threads of a one-dimensional block
            bounds = (bounds[0], bounds[1], self.live_end())
        grouped = whole and region is None and ranges is None and \
            self.resume in self.kc.lane_groups
        if region is None and ranges is None and x_from is None and x_to is None and \
                not self.prefix_run and self.resume in self.kc.flat_loops:
            body, latch = self._flat_thread_loop(start, exit_bb)
            self._run_threads(body, latch, exit_bb, masked=masked, region=region)
            return
        if grouped:     # the x loop steps over groups of LANES threads (see below)
            steps = (steps[0], steps[1], self.kc.LANES)
        headers = [fn.append_basic_block(f"{n}.head") for n in names]
        bodies = [fn.append_basic_block(f"{n}.body") for n in names]
        latches = [fn.append_basic_block(f"{n}.latch") for n in names]
        phis = []
        b.position_at_end(start)
        rb = self.kc.range_branches.get(self.resume)
        self.interval_idle = {} if not whole or region is not None or rb is None else \
            self.interval_clamps(b, rb)
        b.branch(headers[0])
        for k in range(3):
            bound = bounds[k]
            b.position_at_end(headers[k])
            # The x loop counts in 64 bits, tx is its truncation (nuw nsw: < 1024).  With a
            # 32-bit counter, LLVM widens it to 64 bits for the addresses and every compare
            # on the thread index with it: AVX-512 masks built from two 8-lane 64-bit
            # compares each (pathfinder's phase 2.7 -> 2.3 ms).  Not for rows of fewer than
            # 32 threads (a 16 x 16 tile's row is one vector: matmul -6%), lane groups,
            # interchanged grid-stride loops, or segments that index memory with unsigned
            # 32-bit arithmetic on the thread index (`mul.wide.u32`: the zero extension of a
            # sum that may wrap stays in the address, which then is no longer affine), which
            # all measured slower with it.
            wide = k == 2 and not grouped and not self.kc.lockstep and \
                self.resume not in self.kc.unsigned_indices and \
                (self.kc.block_dims is None or self.kc.block_dims[0] >= 32)
            ity = I64 if wide else I32
            phi = b.phi(ity, name=names[k])
            first = ir.Constant(ity, starts[k]) if k < 2 or x_from is None else x_from[int(wide)]
            phi.add_incoming(first, start if k == 0 else bodies[k - 1])
            if k == 2 and x_to is not None:
                end = x_to[int(wide)]
            else:
                end = b.zext(bound, I64) if wide else bound
            b.cbranch(b.icmp_unsigned("<", phi, end), bodies[k], exit_bb if k == 0 else latches[k - 1])
            if k < 2:
                b.position_at_end(bodies[k])
                b.branch(headers[k + 1])
                phis.append(phi)
            else:
                b.position_at_end(bodies[k])
                if wide:
                    t32 = b.trunc(phi, I32, name="tx32")
                    t32.opname = "trunc nuw nsw"
                    phis.append(t32)
                else:
                    phis.append(phi)
            b.position_at_end(latches[k])
            if k == 1 and whole and region is None and self.resume in self.kc.row_prefetches:
                # the row of threads that just ran: its lines of a later pass
                self.prefetch_row(b, phis[0], phi)
            nxt = b.add(phi, ir.Constant(ity, steps[k]), flags=["nuw"])
            back = b.branch(headers[k])
            if k == 2:
                dims = self.kc.block_dims
                # in lane groups, the group loop is a plain parallel loop (the lanes' loop
                # inside it is the one to vectorize)
                rows = dims is not None and dims[1] * dims[2] > 1
                unrolled = grouped and self.resume in self.kc.unrolled_lane_groups
                # the copy where all threads agree on a range branch stays a loop: without
                # its masks LLVM unrolled it fully, and the reduction's loads ran 15% slower
                # (scan's 7% faster; saxpy 5% slower)
                back.set_metadata("llvm.loop", self.mod.parallel_loop_id(
                    keep_loop=rows or grouped or bool(self.known),
                    no_vectorize=unrolled or self.kc.too_large_to_vectorize(self.resume)))
            phi.add_incoming(nxt, latches[k])
        self.lane_group = None
        if grouped:
            # the x loop runs over groups of LANES threads (its step), an inner loop over
            # the lanes of a group: the vectorizer takes the inner one, one vector
            lanes = self.kc.LANES
            group = phis[2]
            b.position_at_end(bodies[2])
            l_head = fn.append_basic_block("lane.head")
            l_body = fn.append_basic_block("lane.body")
            l_latch = fn.append_basic_block("lane.latch")
            b.branch(l_head)
            b.position_at_end(l_head)
            lane = b.phi(I32, name="lane")
            lane.add_incoming(I32(0), bodies[2])
            b.cbranch(b.icmp_unsigned("<", lane, I32(lanes)), l_body, latches[2])
            b.position_at_end(l_latch)
            lane_next = b.add(lane, I32(1), flags=["nuw"])
            lane.add_incoming(lane_next, l_latch)
            back = b.branch(l_head)
            unrolled = self.resume in self.kc.unrolled_lane_groups
            back.set_metadata("llvm.loop", self.mod.parallel_loop_id(
                keep_loop=not unrolled, unroll_full=unrolled,
                no_vectorize=unrolled or self.kc.too_large_to_vectorize(self.resume)))
            b.position_at_end(l_body)
            phis[2] = b.add(group, lane, name="tx", flags=["nuw", "nsw"])
            bodies[2] = l_body
            latches[2] = l_latch
            self.lane_group = (group, lane)
        self.tid = [phis[2], phis[1], phis[0]]       # x, y, z
        b.position_at_end(bodies[2])
        # < 1024: never wraps (the flags let LLVM see slot indices as affine)
        nw = ["nuw", "nsw"]
        self.linear_tid = b.add(b.mul(b.add(b.mul(phis[0], self.loop_ntid[1], flags=nw), phis[1], flags=nw),
                                      self.loop_ntid[0], flags=nw), phis[2], name="ltid", flags=nw)
        self._run_threads(bodies[2], latches[2], exit_bb, masked=masked, region=region)

    def _flat_thread_loop(self, start: ir.Block, exit_bb: ir.Block) -> tuple[ir.Block, ir.Block]:
        """One loop from `start` over the linear thread index t < ntid.x * ntid.y * ntid.z
        (of the thread loops' extents), to `exit_bb` when done; tx, ty, tz counted along with
        it (tx wraps to 0 at ntid.x and carries into ty, ty into tz): the order of the z/y/x
        nest, t its linear index.  Sets self.tid and self.linear_tid; returns the loop's body
        (the builder there) and latch (KernelPlan.flat_loops: segments LLVM would not
        vectorize, where the nest's three loops only cost LLVM time)."""
        fn = self.fn
        b = self.builder
        nx, ny, nz = self.loop_ntid
        head = fn.append_basic_block("t.head")
        body = fn.append_basic_block("t.body")
        latch = fn.append_basic_block("t.latch")
        b.position_at_end(start)
        nw = ["nuw", "nsw"]
        count = b.mul(b.mul(nx, ny, flags=nw), nz, name="nthreads_loop", flags=nw)
        b.branch(head)
        b.position_at_end(head)
        t = b.phi(I32, name="ltid")
        tx, ty, tz = (b.phi(I32, name=n) for n in ("tx", "ty", "tz"))
        for phi in (t, tx, ty, tz):
            phi.add_incoming(I32(0), start)
        b.cbranch(b.icmp_unsigned("<", t, count), body, exit_bb)
        b.position_at_end(latch)
        one = b.add(tx, I32(1), flags=nw)
        wrap_x = b.icmp_unsigned("==", one, nx)
        ty_one = b.add(ty, b.zext(wrap_x, I32), flags=nw)
        wrap_y = b.icmp_unsigned("==", ty_one, ny)
        t.add_incoming(b.add(t, I32(1), flags=nw), latch)
        tx.add_incoming(b.select(wrap_x, I32(0), one), latch)
        ty.add_incoming(b.select(wrap_y, I32(0), ty_one), latch)
        tz.add_incoming(b.add(tz, b.zext(wrap_y, I32), flags=nw), latch)
        back = b.branch(head)
        # (not vectorized, not unrolled: a runtime-unrolled copy only doubles LLVM's work)
        back.set_metadata("llvm.loop", self.mod.parallel_loop_id(keep_loop=True, no_vectorize=True))
        self.lane_group = None
        self.interval_idle = {}     # (no range branch: KernelPlan.flat_loops)
        self.tid = [tx, ty, tz]
        self.linear_tid = t
        b.position_at_end(body)
        return body, latch

    def _run_threads(self, body: ir.Block, latch: ir.Block, exit_bb: ir.Block, *, masked: bool,
                     region: DeferredRegion | None) -> None:
        """The body of a thread loop (at `body`, the builder there; `latch`: on to the next
        thread) for the thread self.tid, self.linear_tid: the segment's operations."""
        fn = self.fn
        b = self.builder
        self.linear_tid64 = b.zext(self.linear_tid, I64)
        self.latch = latch
        self.masked_loop = masked
        # A run of all threads of a convergent segment (every thread takes the same path):
        # each thread's stop is everyone's, so it goes to a variable, not to state[], and
        # the segment returns the last thread's (LLVM keeps it in a register)
        self.last_state: ir.AllocaInstr | None = None
        if not masked and region is None and self.convergent and \
                self.next_sync is None and not self.all_exit:
            self.last_state = self.entry_builder.alloca(I32, name="last_state")
            self.entry_builder.store(I32(STATE_UNKNOWN), self.last_state)
        self.local_base = self.thread_local_base(b)
        if masked:
            # threads from live_end on have all exited (the block function found the last
            # live one): the run stops there
            live_end = self.live_end()
            limit = self.entry_builder.select(
                self.entry_builder.icmp_unsigned("==", live_end, I32(0)), self.nthreads, live_end)
            check = fn.append_basic_block("in_range")
            b.cbranch(b.icmp_unsigned("<", self.linear_tid, limit), check, exit_bb)
            b.position_at_end(check)
            run = fn.append_basic_block("run")
            st = b.load(self.state_ptr())
            b.cbranch(b.icmp_signed("==", st, I32(self.resume)), run, self.latch)
            b.position_at_end(run)
        self.reset_block()
        if self.resume == 0:
            start_block, start_pos = self.kc.region.entry, 0
        else:
            sp = self.kc.syncs[self.resume - 1]
            start_block, start_pos = sp.block, sp.position + 1
            self.restore(sp)
        if region is None:
            self.emit_ops(start_block, start_pos)
        else:
            # a deferred `if`: recompute what it uses, run it, and go on with the next thread
            for v in region.external:
                if isinstance(v, OpResult) and v.op.name != "upir.const":
                    self.rematerialize(v)
                    self.define(v, self.vals[v])
            self.block_map[region.join] = self.latch
            b.branch(self.block_for(region.entry))
        while self.pending:
            blk = self.pending.pop()
            b.position_at_end(self.block_map[blk])
            self.reset_block()
            for a in blk.args:
                self.vals[a] = b.load(self.slot_of(a))
            self.emit_ops(blk, 0)

    def lane_bitwise(self, op: Operation) -> ir.Value | None:
        """`tid.x & m` or `tid.x ^ m` in a thread loop run in lane groups (tid.x = g + l, g
        a multiple of LANES, l < LANES): when m's low bits are all ones (and) or all zeros
        (xor), the result is `(g & m) + l` or `(g ^ m) + l`, affine in the lane; when m's
        low bits are all zeros (and), `g & m`, the same for the group.  A select on these
        block-uniform facts that LLVM unswitches: an index like bitonic's
        `2t - (t & (j - 1))` then reads and writes whole vectors for j >= LANES."""
        m = self.kc.lane_operands(op)
        if m is None or self.lane_group is None:
            return None
        b = self.b
        group, lane = self.lane_group
        c = const_int(m)
        lowc = self.kc.LANES - 1
        if c is not None and (c & lowc) not in (0, lowc):
            # the group's part and the lane's part of the bits are disjoint (lane < LANES)
            if op.name == "ptx.and":
                return b.add(b.and_(group, I32(c & ~lowc & 0xFFFFFFFF)), b.and_(lane, I32(c & lowc)))
            return b.add(b.xor(group, I32(c & ~lowc & 0xFFFFFFFF)), b.xor(lane, I32(c & lowc)))
        mv = self.operand(m, "b32")
        t = self.tid[0]
        low = I32(self.kc.LANES - 1)
        low_bits = b.and_(mv, low)
        if op.name == "ptx.and":
            on_group = b.and_(group, mv)
            plain = b.and_(t, mv)
            v = b.select(b.icmp_unsigned("==", low_bits, low), b.add(on_group, lane, flags=["nuw"]),
                         b.select(b.icmp_unsigned("==", low_bits, I32(0)), on_group, plain))
        else:
            v = b.select(b.icmp_unsigned("==", low_bits, I32(0)),
                         b.add(b.xor(group, mv), lane), b.xor(t, mv))
        return v


def _adds_constant(v: Value) -> bool:
    """Whether `v` is an integer add of a nonzero constant (through moves)."""
    while isinstance(v, OpResult) and v.op.name == "ptx.mov" and len(v.op.operands) == 1:
        v = v.op.operands[0]
    if not (isinstance(v, OpResult) and v.op.name == "ptx.add" and len(v.op.operands) == 2):
        return False
    return any(c is not None and c != 0 for c in (const_int(o) for o in v.op.operands))
