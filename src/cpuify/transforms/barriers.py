"""Barrier elimination by memory effects (Polygeist paper, IV-A).

A `__syncthreads()` orders memory between the threads of a block: it is needed only where a
thread, after it, may touch a location another thread touched before it (at least one of
the two writing).  With M_before the accesses from the previous barrier (or the kernel's
start) up to barrier B, M_after all accesses after B (to the kernel's end, around loops),
and the all-the-way / up-to-the-next-barrier versions the other way round, B can go when

    conflicts(M_before up to the previous barrier, M_after to the end) is empty
        (B's ordering is provided by the previous barrier), or
    conflicts(M_before from the start, M_after up to the next barrier) is empty
        (the next barrier provides it),

where two accesses conflict when they may touch the same location from *different* threads
and one writes: reads never conflict with reads; local and parameter memory are per thread;
distinct `__shared__` variables never overlap; `ld.global.nc` data is never written; and two
accesses at the same address that is an injective function of the thread index
(`s[ty][tx]`, with the block shape known) are the same thread's.  The paper's Fig. 9
(Rodinia's backprop layer) loses its first barrier this way.

Barriers whose result is used (`__syncthreads_count`), soft barriers and warp collectives
are kept.  So is a barrier that separates code only some threads run (`if (tx == 0)
node[ty] = ...;`) from code all threads run: in cpuify's execution model each barrier
interval is one loop over the block's threads, and the interval of the few threads runs
only them, while merged into the next one it puts a branch on the thread index into that
loop, which then no longer vectorizes (the paper's Fig. 9 kernel ran 4x slower without its
first barrier).  Barrier motion or a loop split at such an `if` would recover both.  The thread-index argument needs the block shape, known in code specialized for
one (the kernel's `block_dims` attribute); without it only the other rules apply."""

from __future__ import annotations

from dataclasses import dataclass

from cpuify.analysis.access import Access, Symbols, accesses, may_conflict
from cpuify.analysis.cfg import cyclic_blocks, immediate_post_dominators
from cpuify.analysis.pointers import shared_variables
from cpuify.analysis.uniformity import uniform_values
from cpuify.ir.core import Block, Operation, Region, predecessors
from cpuify.ir.dialects import is_sync
from cpuify.ir.structure import block_body
from cpuify.analysis.manager import AnalysisManager, cached
from cpuify.transforms.pass_manager import register

#: more memory ops than this on one side of a barrier: not analysed (pairs are compared)
MAX_ACCESSES = 2000


@register("barrier-elimination", "barriers removed: no conflicting accesses across them "
                                 "from different threads")
@dataclass(frozen=True)
class BarrierElimination:
    """Pass: remove `upir.barrier` ops whose ordering no memory access needs."""
    name: str = "barrier-elimination"
    # keep a barrier that separates code only some threads run from code all threads run
    keep_divergent_splits: bool = True

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        dims = kernel.attributes.get("block_dims")
        return eliminate_barriers(block_body(kernel), tuple(dims) if dims else None,  # type: ignore[arg-type]
                                  keep_divergent_splits=self.keep_divergent_splits,
                                  analyses=analyses)


def _is_block_barrier(op: Operation) -> bool:
    return op.name == "upir.barrier" and not op.attributes.get("soft") and not op.results


def _walk(region: Region, barrier: Operation, forward: bool, stop_at_barriers: bool,
          preds: dict[Block, list[Block]]) -> list[Operation] | None:
    """The ops that can run after (forward) or before `barrier` in a thread, up to the next
    block barrier (or without stopping).  None when there are too many to compare."""
    out: list[Operation] = []
    blk = barrier.parent
    assert blk is not None
    pos = blk.ops.index(barrier)
    seq = blk.ops[pos + 1:] if forward else list(reversed(blk.ops[:pos]))
    visited: set[Block] = set()

    def scan(ops: list[Operation]) -> bool:
        """Adds ops until a barrier; True when the walk goes on past them."""
        for op in ops:
            if op is barrier:
                return False            # around a loop back to the barrier itself
            if stop_at_barriers and _is_block_barrier(op):
                return False
            out.append(op)
        return True

    work: list[Block] = []
    if scan(seq):
        work.extend(blk.successors if forward else preds.get(blk, []))
    while work:
        b = work.pop()
        if b in visited:
            continue
        visited.add(b)
        if b is blk:
            # the barrier's own block, reached around a loop: up to (or back from) the
            # barrier, where the walk ends
            scan(blk.ops[:pos] if forward else list(reversed(blk.ops[pos + 1:])))
            continue
        if scan(b.ops if forward else list(reversed(b.ops))):
            work.extend(b.successors if forward else preds.get(b, []))
        if len(out) > 20 * MAX_ACCESSES:
            return None
    return out


def divergent_blocks(region: Region, uniform: set, ipdom: dict | None = None  # type: ignore[type-arg]
                     ) -> set[Block]:
    """Blocks only some threads of a block may run: reached from a branch on a
    thread-dependent condition before the branch's immediate post-dominator."""
    ipdom = immediate_post_dominators(region) if ipdom is None else ipdom
    out: set[Block] = set()
    for b in region.blocks:
        term = b.terminator
        if term is None or term.name != "cf.cond_br" or term.operands[0] in uniform:
            continue
        join = ipdom.get(b)
        stack = [s for s in term.successors if s is not join]
        while stack:
            x = stack.pop()
            if x in out or x is join:
                continue
            out.add(x)
            stack.extend(x.successors)
    return out


def eliminate_barriers(region: Region, block_dims: tuple[int, int, int] | None = None, *,
                       keep_divergent_splits: bool = True,
                       analyses: AnalysisManager | None = None) -> int:
    removed = 0
    if not any(_is_block_barrier(op) for b in region.blocks for op in b.ops):
        return 0
    uniform = cached(analyses, uniform_values, region)
    symbols = Symbols(uniform, cached(analyses, cyclic_blocks, region))
    divergent = divergent_blocks(region, uniform, cached(analyses, immediate_post_dominators, region))

    def only_some_threads(ops: list[Operation] | None) -> bool | None:
        """Whether all memory accesses of ops run in divergent code (None: no accesses)."""
        effectful = [op for op in ops or [] if accesses_of(op)]
        if not effectful:
            return None
        return all(op.parent in divergent for op in effectful)
    shared_var = cached(analyses, shared_variables, region)
    memo: dict = {}  # type: ignore[type-arg]
    access_cache: dict[Operation, list[Access]] = {}

    def accesses_of(op: Operation) -> list[Access]:
        got = access_cache.get(op)
        if got is None:
            got = access_cache[op] = accesses(op, symbols, memo)
        return got

    def effects(ops: list[Operation] | None) -> list[Access] | None:
        if ops is None:
            return None
        out: list[Access] = []
        for op in ops:
            out.extend(accesses_of(op))
            if len(out) > MAX_ACCESSES:
                return None
        return out

    def conflict(xs: list[Access] | None, ys: list[Access] | None) -> bool:
        if xs is None or ys is None:
            return True
        return any(may_conflict(x, y, block_dims, shared_var) for x in xs for y in ys)

    if any(_is_block_barrier(op) for b in divergent for op in b.ops):
        # a barrier only some threads reach is an error, reported at run time when the
        # others wait at another barrier: the barriers are left as they are
        return 0
    changed = True
    while changed:
        changed = False
        preds = predecessors(region)
        for b in region.blocks:
            for op in list(b.ops):
                if not _is_block_barrier(op):
                    continue
                near_before_ops = _walk(region, op, False, True, preds)
                near_after_ops = _walk(region, op, True, True, preds)
                sides = {only_some_threads(near_before_ops), only_some_threads(near_after_ops)}
                if sides == {True, False} and keep_divergent_splits:
                    continue            # it isolates code only some threads run
                before_near = effects(near_before_ops)
                after_all = effects(_walk(region, op, True, False, preds))
                if conflict(before_near, after_all):
                    before_all = effects(_walk(region, op, False, False, preds))
                    after_near = effects(near_after_ops)
                    if conflict(before_all, after_near):
                        continue
                b.ops.remove(op)
                op.drop_uses()
                removed += 1
                changed = True
    return removed


@register("min-cut-fission", "bytes per thread fewer kept across barriers: values recomputed "
                             "after the barrier from a cheaper set of kept ones (min-cut)")
@dataclass(frozen=True)
class MinCutFission:
    """Pass: choose the fission strategy of the kernel's barriers: with this pass, the
    values that cross a barrier are chosen by a minimum cut (the Polygeist paper, III-B1:
    keep the least bytes per thread from which everything used after the barrier can be
    recomputed) instead of keeping every value used after it that is not trivially
    recomputable.  Recorded as the kernel attribute `fission = "min-cut"`, which code
    generation's sync-point planner reads.  Returns the bytes per thread saved."""
    name: str = "min-cut-fission"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        from cpuify.analysis.sync_points import kept_bytes, plan_sync_points
        from cpuify.ir.structure import lockstep_counters
        region = block_body(kernel)
        if not any(is_sync(op) for b in region.blocks for op in b.ops):
            return 0
        kernel.attributes["fission"] = "min-cut"
        lockstep = lockstep_counters(region)
        uniform = cached(analyses, uniform_values, region) | lockstep
        points = plan_sync_points(region, lockstep, min_cut=True)
        return max(kept_bytes(points, uniform, before_cut=True) - kept_bytes(points, uniform), 0)
