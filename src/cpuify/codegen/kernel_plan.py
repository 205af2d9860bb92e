"""A kernel's code-generation plan: its sync points, the values kept across them and their
slots, which segments are convergent, the thread-loop plans of each segment, the static
shuffles and the alias scopes of shared variables, all computed when KernelCodegen is made."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.analysis.cfg import immediate_post_dominators, incoming_values
from cpuify.analysis.pointers import (
    infer_pointers,
    memory_space,
    no_signed_wrap,
    pointer_parameter,
    shared_variables,
)
from cpuify.analysis.sync_points import SyncPoint, plan_sync_points
from cpuify.analysis.uniformity import (
    uniform_across_warp_syncs,
    uniform_across_yields,
    uniform_values,
)
from cpuify.codegen.denormals import hardware_flush, is_x86
from cpuify.codegen.helpers import const_int
from cpuify.codegen.kernel_abi import BUFFER_GUARD, XVAL_GUARD
from cpuify.codegen.layout import align_up
from cpuify.codegen.lowering import I64
from cpuify.codegen.thread_loop_plan import ThreadLoopPlans
from cpuify.errors import IRError
from cpuify.ir.core import BlockArgument, Operation, Region, Value, predecessors
from cpuify.ir.modifiers import mods
from cpuify.ir.structure import ROW_STREAM, block_body, block_parallel, lockstep_counters
from cpuify.ir.structured import lower_structured_control_flow
from cpuify.lifting.lift import LiftedKernel

if TYPE_CHECKING:
    from cpuify.codegen.llvm_gen import ModuleCodegen


class KernelPlan(ThreadLoopPlans):
    """Everything code generation decides about a kernel before emitting it."""

    def __init__(self, mod: ModuleCodegen, kernel: LiftedKernel,
                 block_dims: tuple[int, int, int] | None = None, *,
                 body: Region | None = None) -> None:
        """`block_dims`: compile for this block shape only (launch-config specialization:
        constant thread-loop bounds let LLVM drop remainder loops and runtime checks).
        `kernel.op` is the kernel's IR after the pass pipeline (cpuify.transforms);
        `body`: the region to emit instead of the kernel's block body (its launch prologue)."""
        self.mod = mod
        self.kernel = kernel
        self.name = kernel.name
        guard = int(kernel.op.attributes.get("shared_guard", 0) or 0)
        if guard > BUFFER_GUARD:
            # (speculate-selected-loads read this far outside the shared segment; the
            # runtime keeps only BUFFER_GUARD bytes mapped around it)
            raise IRError(f"kernel '{kernel.name}': its speculated shared loads need a guard "
                          f"band of {guard} bytes around shared memory; the runtime keeps "
                          f"{BUFFER_GUARD} (run speculate-selected-loads with "
                          f"guard={BUFFER_GUARD} or less)")
        # the block shape of the launch (`%ntid` in specialized code) and the shape the
        # thread loops run: the launch's with the duplicate_dims (below) set to 1
        self.launch_dims = block_dims
        self.block_dims = block_dims
        # runs of blocks fused into one (fuse-block-runs): the thread loops run the fused
        # shape, the block function's name says the run
        run = kernel.op.attributes.get("block_run") if body is None else None
        self.block_run: tuple[int, int] = (int(run[0]), int(run[1])) if run else (1, 1)
        if block_dims is not None and run:
            block_dims = (block_dims[0] * self.block_run[0], block_dims[1] * self.block_run[1],
                          block_dims[2])
            self.block_dims = block_dims
        # raise-structured-cf's if/while/for back to the CFG this plan reads, in every region
        # of the kernel (the launch prologue parallel-licm hoisted too: fz_2701_15, 'no code
        # generation for upir.if' where the plan was made for the prologue alone)
        lower_structured_control_flow(kernel.op)
        self.region = block_body(kernel.op) if body is None else body
        # .ftz done by the CPU's MXCSR around the block function (codegen/denormals.py)
        self.hardware_flush = is_x86(mod.module.triple) and hardware_flush(kernel.op)
        # thread-index dimensions whose threads are duplicates (merge-duplicate-threads):
        # their thread loops run once
        self.duplicate_dims: frozenset[int] = frozenset() if body is not None else frozenset(
            block_parallel(kernel.op).attributes.get("duplicate_thread_dims", ()))
        if block_dims is not None and self.duplicate_dims:
            self.block_dims = tuple(1 if k in self.duplicate_dims else d     # type: ignore[assignment]
                                    for k, d in enumerate(block_dims))
        # iteration counters of interchanged loops: the same in all threads that run together
        self.lockstep = lockstep_counters(self.region)
        # resume point -> ops its segment runs, counted up to MAX_VECTORIZED_OPS + 1
        self.segment_sizes: dict[int, int] = {}
        self.syncs: list[SyncPoint] = plan_sync_points(
            self.region, self.lockstep,
            min_cut=kernel.op.attributes.get("fission") == "min-cut" and body is None)
        self.sync_of_op = {sp.op: sp for sp in self.syncs}
        self.pointers = infer_pointers(self.region)
        self.nsw = no_signed_wrap(self.region)
        for sp in self.syncs:
            for v, expr in sp.derived.items():
                if v in self.pointers:
                    self.pointers.add(expr)
        # values kept across sync points that are the same in every thread get one slot
        self.uniform = (uniform_values(self.region) | self.lockstep) if self.syncs else set()
        if any(sp.op.attributes.get("kind") == "named_barrier" for sp in self.syncs):
            # threads meet at named barriers in groups that run out of step (producer and
            # consumer warps): threads stopped at one sync point may be in different
            # iterations, so no value is shared among them; the counters of interchanged
            # loops stay (their threads resume together)
            self.uniform = set(self.lockstep)
        elif any(sp.op.name == "upir.spin_wait" for sp in self.syncs):
            # threads at spin-wait yield points (issue #18's forward progress) wait there in
            # different rounds of their loops, but never past the next block barrier: the
            # values of loops with a barrier in every iteration stay shared (a grid-sync
            # solver's time loop), those of loops without one do not (a block-scope
            # cuda::pipeline of 2+ stages deadlocked on stale parities)
            self.uniform = uniform_across_yields(self.region, self.uniform) | self.lockstep
        if self.uniform:
            # warps that wait at a __syncwarp or shuffle in a divergent branch or loop (or
            # threads at a spin-wait's yield point) let the others run on into the next
            # iteration of a loop: its values are kept per thread (uniform_across_warp_syncs;
            # fz_2615_743)
            self.uniform = uniform_across_warp_syncs(self.region, self.uniform) | self.lockstep
        self.ipdom = immediate_post_dominators(self.region)
        self.preds = predecessors(self.region)
        self.convergent = self.convergent_segments()
        self.masked_runs = self.plan_masked_runs()
        self.thread_range = {r: k for r in range(len(self.syncs) + 1)
                             if (k := self.thread_ranges(r)) is not None}
        self.deferred = {r: d for r in range(len(self.syncs) + 1)
                         if (d := self.deferred_regions(r))}
        self.lane_groups = {r for r in range(len(self.syncs) + 1) if self.wants_lane_groups(r)}
        self.range_branches = {r: k for r in range(len(self.syncs) + 1)
                               if (k := self.range_branch(r)) is not None}
        self.prefix_runs = self.plan_prefix_runs()
        # segments whose thread loops split each row at the first cache line of a store
        self.aligned_rows = {r: st for r in range(len(self.syncs) + 1)
                             if (st := self.aligning_store(r)) is not None}
        # lane groups whose lanes' loop is unrolled (unrolled_lanes)
        self.unrolled_lane_groups = {r for r in self.lane_groups if self.unrolled_lanes(r)}
        self.unsigned_indices = self.unsigned_index_segments()
        self.static_shuffles = self.plan_static_shuffles()
        self.prefetches = {r: ops for r in range(1, len(self.syncs) + 1)
                           if (ops := self.iteration_prefetches(r))}
        # ... of those, the ones each row of threads issues after it ran (the rest after
        # the thread loop)
        self.row_prefetches: dict[int, list[tuple[Operation, list[tuple[int, int, int]], bool]]] = {}
        for r in list(self.prefetches):
            by_row, after = self.split_row_prefetches(r, self.prefetches[r])
            if by_row:
                self.row_prefetches[r] = by_row
                if after:
                    self.prefetches[r] = after
                else:
                    del self.prefetches[r]
        # segments whose thread loops are one loop over the linear thread index (generic
        # code whose loops LLVM would not vectorize: wants_flat_loop)
        self.flat_loops = {r for r in range(len(self.syncs) + 1)
                           if r not in self.thread_range and r not in self.deferred and
                           r not in self.lane_groups and r not in self.row_prefetches and
                           r not in self.aligned_rows and r not in self.range_branches and
                           self.wants_flat_loop(r)}
        # the next block's lines the entry segment prefetches (or the last of the passes
        # split-row-streams made of it, after the block's last rows are loaded)
        self.block_prefetches = self.next_block_prefetches()
        self.next_block_resume = 0
        while self.next_block_resume < len(self.syncs) and \
                self.syncs[self.next_block_resume].op.attributes.get(ROW_STREAM):
            self.next_block_resume += 1
        self.shared = mod.shared_layout(kernel)
        self.shared_alias_tags = self.shared_variable_scopes()
        # pointer parameters known not to overlap the others (launch-time specialization)
        self.noalias: tuple[int, ...] = () if body is not None else tuple(
            sorted(int(x) for x in kernel.op.attributes.get("noalias_params", ())))
        self.param_alias_tags = self.parameter_scopes()
        self.in_place_scope = self.tiles_in_place_scope()
        # local memory (per thread): kernel .local depots
        self.local_offsets: dict[str, int] = {}
        off = 0
        for v in kernel.local_vars:
            off = align_up(off, max(v.alignment, 1))
            self.local_offsets[v.name] = off
            off += v.size
        self.local_size = align_up(off, 16)
        self._incoming: dict[BlockArgument, list[Value]] | None = None
        # a local (shared) address converted to a generic one: generic accesses may reach
        # local (shared) memory, also through a pointer that was stored and loaded again
        escaping = {space for o in kernel.op.walk() if o.name == "ptx.cvta" and "to" not in mods(o)
                    for space in ("local", "shared") if space in mods(o)}
        self.local_escapes = bool(self.local_size) and "local" in escaping
        self.shared_escapes = "shared" in escaping
        # slots for values kept per thread across sync points (sorted by size: aligned)
        kept: dict[Value, None] = {}
        for sp in self.syncs:
            for v in sp.live:
                kept[v] = None
        sizes = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "f32": 4, "i64": 8, "f64": 8, "f16": 2}
        leader = self.coalesce_slots(kept)
        ordered = sorted((v for v in kept if leader[v] is v), key=lambda v: -sizes[v.type])
        self.slot_offset: dict[Value, int] = {}
        off = 0
        for v in ordered:
            self.slot_offset[v] = off
            off += sizes[v.type]
        for v in kept:
            self.slot_offset[v] = self.slot_offset[leader[v]]
        self.slot_bytes = align_up(off, 8)
        # what `cpuify explain` reports: the bytes of the slots holding values kept per
        # thread and of those holding uniform values.  Both are arrays of one element per
        # thread (each thread stores its own: a vector store; the next segment reads one
        # copy), so both count per thread
        per_thread = {leader[v] for v in kept if v not in self.uniform}
        self.kept_slot_bytes = sum(sizes[v.type] for v in ordered if v in per_thread)
        self.uniform_slot_bytes = sum(sizes[v.type] for v in ordered if v not in per_thread)
        self.value_order: dict[Value, int] = {}
        for b in self.region.blocks:
            for a in b.args:
                self.value_order[a] = len(self.value_order)
            for op in b.ops:
                for r in op.results:
                    self.value_order[r] = len(self.value_order)

    def incoming_values(self) -> dict[BlockArgument, list[Value]]:
        """Block argument of the segments' region -> the values its predecessors pass
        (computed once)."""
        if self._incoming is None:
            self._incoming = incoming_values(self.region)
        return self._incoming

    def coalesce_slots(self, kept: dict[Value, None]) -> dict[Value, Value]:
        """Kept value -> the value whose slot it shares.  A loop-carried value and the value
        it takes on the back edge (a matmul's running sum: the sum entering an iteration and
        the sum after it) share one slot when no sync point keeps both: then a segment that
        restores one and stores the other writes back what it read, a store LLVM removes.
        A slot holds one value at a time: a thread reads its element at the start of a
        segment and writes it only where it stops, so values never live across the same
        sync point can share it."""
        leader: dict[Value, Value] = {v: v for v in kept}
        members: dict[Value, set[Value]] = {v: {v} for v in kept}
        lives = [set(sp.live) for sp in self.syncs]

        def find(v: Value) -> Value:
            while leader[v] is not v:
                v = leader[v]
            return v

        for b in self.region.blocks:
            term = b.terminator
            if term is None:
                continue
            for succ, args in zip(term.successors, term.successor_args):
                for arg, value in zip(succ.args, args):
                    if arg not in kept or value not in kept or arg.type != value.type:
                        continue
                    if (arg in self.uniform) != (value in self.uniform):
                        # a uniform value's copy (element 0, gather_uniform_slots) would
                        # overwrite thread 0's element of the other where threads stop at
                        # different sync points
                        continue
                    x, y = find(arg), find(value)
                    if x is y or any(members[x] & live and members[y] & live for live in lives):
                        continue
                    leader[y] = x
                    members[x] |= members.pop(y)
        return {v: find(v) for v in kept}

    def plan_static_shuffles(self) -> dict[int, tuple[str, int, int, int]]:
        """Sync index -> (mode, lane operand, clamp word, buffer 1 or 2) of the static
        shuffles.  Each has a buffer of its own kind (not `xval`, which the exchange paths
        read): the segment after one reads its buffer while its threads, one after another,
        store the values of the next shuffles; a thread must not overwrite a value a later
        thread still reads, so consecutive static shuffles alternate between the two, and a
        shuffle a segment reaches with the buffer that segment reads is left to the
        exchange."""
        found = {sp.index: k for sp in self.syncs if (k := self.static_shuffle(sp)) is not None}
        buffers = {idx: 1 + n % 2 for n, idx in enumerate(sorted(found))}
        changed = True
        while changed:
            changed = False
            for idx in sorted(buffers):
                if idx not in buffers:
                    continue
                for op in self.ops_from(*self.resume_point(idx)):
                    sp = self.sync_of_op.get(op)
                    if sp is not None and sp.index in buffers and \
                            buffers[sp.index] == buffers[idx]:
                        del buffers[sp.index]
                        changed = True
        return {idx: (*found[idx], buffers[idx]) for idx in sorted(buffers)}

    def static_shuffle(self, sp: SyncPoint) -> tuple[str, int, int] | None:
        """(mode, lane operand, clamp word) of a shuffle whose lane operand, clamp and
        member mask are constants and whose mask is the full warp
        (`__shfl_down_sync(0xffffffff, v, 16)`).  When every thread of the block waits at
        such a shuffle, the next segment reads the source lane's value directly
        (SegmentEmitter.read_static_shuffle): no exchange pass."""
        op = sp.op
        if op.name != "upir.warp_collective" or op.attributes.get("kind") != "shfl":
            return None
        consts = [const_int(o) for o in op.operands[1:4]]
        if len(consts) != 3 or any(c is None for c in consts) or \
                consts[2] & 0xFFFFFFFF != 0xFFFFFFFF:
            return None
        mode = next(m for m in op.attributes.get("mods", []) if m in ("up", "down", "bfly", "idx"))
        return mode, consts[0], consts[1]

    @staticmethod
    def static_buffer_stride(b: ir.IRBuilder, n64: ir.Value) -> ir.Value:
        """Bytes from `xval` to the first buffer of static shuffles, and from it to the
        second: n 8-byte values and two guard zones, 64-byte aligned."""
        size = b.add(b.mul(n64, I64(8)), I64(2 * XVAL_GUARD))
        return b.and_(b.add(size, I64(63)), I64(~63 & (2**64 - 1)))

    def parameter_scopes(self) -> dict[Value, tuple[ir.Value, ir.Value]]:
        """Global/generic address -> (alias.scope, noalias) metadata from the kernel's
        `noalias_params`: an access based on such a parameter gets a scope of its own and is
        declared independent of the accesses based on any other parameter (these share one
        scope, as they may overlap each other); accesses based on no known parameter (a
        loaded pointer) get no metadata.  LLVM's noalias for the launch-time variant: the
        vectorizer then needs no run-time overlap checks between those arrays."""
        if not self.noalias:
            return {}
        m = self.mod.module
        domain = m.add_metadata([ir.MetaDataString(m, f"cpuify.params.{self.name}")])
        scope = {p: m.add_metadata([ir.MetaDataString(m, f"cpuify.param.{self.name}.{p}"), domain])
                 for p in self.noalias}
        other = m.add_metadata([ir.MetaDataString(m, f"cpuify.param.{self.name}.other"), domain])
        tags: dict[int | None, tuple[ir.Value, ir.Value]] = {
            p: (m.add_metadata([scope[p]]),
                m.add_metadata([scope[q] for q in self.noalias if q != p] + [other]))
            for p in self.noalias}
        tags[None] = (m.add_metadata([other]), m.add_metadata([scope[p] for p in self.noalias]))
        out: dict[Value, tuple[ir.Value, ir.Value]] = {}
        memo: dict = {}  # type: ignore[type-arg]
        for blk in self.region.blocks:
            for op in blk.ops:
                if op.name not in ("ptx.ld", "ptx.st") or memory_space(op) not in ("global", "generic"):
                    continue
                address = op.operands[0]
                if address in out:
                    continue
                base = pointer_parameter(address, None, memo)
                if base is not None:
                    out[address] = tags[base if base in scope else None]
        return out

    def tiles_in_place_scope(self) -> ir.Value | None:
        """The alias scope of the loads tiles-in-place made read a tile's global data in
        place (`in_place`), when the kernel has any: they run only where the pass's check at
        the block's start showed that no global store of the block writes what they read,
        so every store is declared independent of them (LLVM may then keep them in
        registers across the stores)."""
        if not any(op.attributes.get("in_place") for blk in self.region.blocks for op in blk.ops):
            return None
        m = self.mod.module
        domain = m.add_metadata([ir.MetaDataString(m, f"cpuify.in_place.{self.name}")])
        return m.add_metadata([ir.MetaDataString(m, f"cpuify.in_place.{self.name}.loads"), domain])

    def shared_variable_scopes(self) -> dict[Value, tuple[ir.Value, ir.Value]]:
        """Shared-memory address -> (alias.scope, noalias) metadata of the `__shared__`
        variable it points into: LLVM then knows that accesses to different variables are
        independent even where it cannot bound their indices (a clamped neighbour index),
        which would otherwise keep it from vectorizing the thread loop."""
        variables = shared_variables(self.region)
        groups = sorted({self.shared.offsets[sym] for sym in variables.values()
                         if sym in self.shared.offsets})
        if len(groups) < 2:
            return {}
        m = self.mod.module
        domain = m.add_metadata([ir.MetaDataString(m, f"cpuify.shared.{self.name}")])
        scopes = {g: m.add_metadata([ir.MetaDataString(m, f"cpuify.shared.{self.name}.{g}"), domain])
                  for g in groups}
        tags = {g: (m.add_metadata([scopes[g]]), m.add_metadata([scopes[h] for h in groups if h != g]))
                for g in groups}
        return {v: tags[self.shared.offsets[sym]] for v, sym in variables.items()
                if sym in self.shared.offsets}
