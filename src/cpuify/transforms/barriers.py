"""Barrier elimination by memory effects (Polygeist paper, IV-A).

A `__syncthreads()` orders memory between the threads of a block: it is needed only where a
thread, after it, may touch a location another thread touched before it (at least one of
the two writing).  With M_before the accesses from the previous barrier (or the kernel's
start) up to barrier B and M_after those from B up to the next barrier (or the kernel's
end; both walked along every path, around loops), B can go when

    conflicts(M_before, M_after) is empty:

removing B merges its two barrier intervals, and only their accesses lose an order; every
other pair stays ordered by the barriers around them.  The barriers are removed one at a
time, each test walking the IR as the removals before it left it (the next barrier's
M_before then reaches back past B), so the rule composes.  This is weaker than the paper's
(`adjacent_intervals=false`: M_before compared with all accesses up to the kernel's end, or
all accesses from the start with M_after), which keeps, e.g., Fig. 9's barrier between its
load of `hidden[index]` and the multiplication once store-forwarding has removed the
shared-memory round trip between them: the load may touch the element another thread
writes at the kernel's end (`index` is injective in the thread only when hid >= 15), an
order that the four barriers of the reduction tree provide anyway.

where two accesses conflict when they may touch the same location from *different* threads
and one writes: reads never conflict with reads; local and parameter memory are per thread;
distinct `__shared__` variables never overlap; `ld.global.nc` data is never written; two
accesses at the same address that is an injective function of the thread index
(`s[ty][tx]`, with the block shape known) are the same thread's; and accesses based on two
different pointer parameters, one of them in the kernel's `noalias_params` (the launch-time
specialization's fact), never overlap.  The paper's Fig. 9 (Rodinia's backprop layer) loses
its first barrier this way (with barrier-motion, below), and its last one (between
`hidden[index] = ...` and the `output` store) with `noalias_params` naming `hidden`.  Where
only such a fact is missing, the passes record the parameters it would have to name in the
kernel's `noalias_candidates` (the cheap check that decides whether a launch-time variant is
worth compiling).

Barriers whose result is used (`__syncthreads_count`), soft barriers and warp collectives
are kept.  So is a barrier that separates code only some threads run (`if (tx == 0)
node[ty] = ...;`) from code all threads run: in cpuify's execution model each barrier
interval is one loop over the block's threads, and the interval of the few threads runs
only them, while merged into the next one it puts a branch on the thread index into that
loop, which then no longer vectorizes (the paper's Fig. 9 kernel ran 4x slower without its
first barrier).  The barrier-motion pass (below) recovers the first.  The other way round is
fine: a barrier followed only by `if`s on one thread index up to the next barrier or the
exit may go, as code generation runs such `if`s after the interval's thread loop.  The thread-index argument needs the block shape, known in code specialized for
one (the kernel's `block_dims` attribute); without it only the other rules apply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cpuify.analysis.access import (
    Access,
    Symbols,
    accesses,
    may_conflict,
    may_conflict_in_thread,
)
from cpuify.analysis.cfg import cyclic_blocks, immediate_post_dominators
from cpuify.analysis.manager import AnalysisManager, cached
from cpuify.analysis.pointers import shared_variables
from cpuify.analysis.thread_index import thread_index_condition
from cpuify.analysis.uniformity import uniform_values
from cpuify.ir.core import (
    Block,
    Operation,
    Region,
    defining_block,
    dominates,
    dominators,
    predecessors,
)
from cpuify.ir.dialects import info, is_sync
from cpuify.ir.modifiers import mods
from cpuify.ir.structure import block_body
from cpuify.ir.structured_shapes import nested_ops
from cpuify.transforms.pass_manager import lower_for_cfg_rewrite, register, structured_now
from cpuify.ir.modifiers import ORDERED as _ORDERED

#: more memory ops than this on one side of a barrier: not analysed (pairs are compared)
MAX_ACCESSES = 2000


@register("barrier-elimination", "barriers removed: no conflicting accesses across them "
                                 "from different threads")
@dataclass(frozen=True)
class BarrierElimination:
    """Pass: remove `upir.barrier` ops whose ordering no memory access needs."""
    name: str = "barrier-elimination"
    #: on the CFG; structured input is lowered only where a block barrier is
    form: ClassVar[str] = "any"
    # keep a barrier that separates code only some threads run from code all threads run
    keep_divergent_splits: bool = True
    # a barrier goes when its two barrier intervals do not conflict (false: the paper's
    # rule, one side compared with everything to the kernel's start or end)
    adjacent_intervals: bool = True

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        if not _lowered_where_barriers(kernel, analyses):
            return 0
        dims = kernel.attributes.get("block_dims")
        candidates: set[int] = set()
        removed = eliminate_barriers(block_body(kernel), tuple(dims) if dims else None,  # type: ignore[arg-type]
                                     keep_divergent_splits=self.keep_divergent_splits,
                                     adjacent_intervals=self.adjacent_intervals,
                                     analyses=analyses, noalias=noalias_params(kernel),
                                     candidates=candidates)
        record_noalias_candidates(kernel, candidates)
        return removed


def _lowered_where_barriers(kernel: Operation, analyses: AnalysisManager | None) -> bool:
    """Whether the kernel has a block barrier (eliminate_barriers finds nothing to do
    without one); structured input that has one is lowered for the CFG passes."""
    if not structured_now(kernel, analyses):
        return True
    if not any(_is_block_barrier(op) for op in nested_ops(kernel)):
        return False
    lower_for_cfg_rewrite(kernel, analyses)
    return True


def noalias_params(kernel: Operation) -> frozenset[int]:
    """The kernel's `noalias_params` attribute: byte offsets of the pointer parameters known
    to point into memory that no other pointer parameter reaches (set by the launch-time
    specialization, compiler.compile_specialized(noalias=...))."""
    return frozenset(int(x) for x in kernel.attributes.get("noalias_params", ()))  # type: ignore[union-attr]


def record_noalias_candidates(kernel: Operation, candidates: set[int]) -> None:
    """Adds to the kernel's `noalias_candidates` attribute: the pointer parameters whose
    non-overlap with the other pointer parameters would let a barrier pass remove a barrier
    it keeps now (the cheap check behind the launch-time specialization: a variant compiled
    with `noalias_params` is worth building only when this is not empty)."""
    if candidates:
        known = {int(x) for x in kernel.attributes.get("noalias_candidates", ())}  # type: ignore[union-attr]
        kernel.attributes["noalias_candidates"] = sorted(known | candidates)


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


@register("barrier-motion", "barriers moved down onto the next one: the code after them "
                            "hoisted above the thread-index `if` before them (IV-A)")
@dataclass(frozen=True)
class BarrierMotion:
    """Pass: the barrier motion of the Polygeist paper (IV-A) for the barriers that
    barrier-elimination keeps because they end an `if` only some threads run (`if (tx == 0)
    node[ty] = ...; __syncthreads(); w[ty][tx] = ...; __syncthreads();`, the paper's Fig. 9):
    when no access needs the barrier, it moves down past the code after it (up to the next
    barrier, straight-line) onto that next barrier, and the code moves up above the `if`.
    The `if` then ends its barrier interval, where code generation runs it after the
    interval's vectorized thread loop as a loop over the threads it selects
    (ThreadLoopPlans.deferred_regions) instead of putting a branch on the thread index into
    the loop.  Needs the block shape (the `if` must be on one thread index) and code the
    `if` and the moved code touch through different memory (a distinct `__shared__`
    variable or space, or reads only): their order in the thread is swapped."""
    name: str = "barrier-motion"
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        dims = kernel.attributes.get("block_dims")
        if not dims or not _lowered_where_barriers(kernel, analyses):
            return 0
        candidates: set[int] = set()
        moved = eliminate_barriers(block_body(kernel), tuple(dims),  # type: ignore[arg-type]
                                   motion=True, analyses=analyses,
                                   noalias=noalias_params(kernel), candidates=candidates)
        record_noalias_candidates(kernel, candidates)
        return moved


def _plain_access(op: Operation) -> bool:
    """A ld/st without memory-model qualifiers, or a pure op: free to reorder within a
    thread against accesses of other memory."""
    if info(op).pure:
        return True
    return op.name in ("ptx.ld", "ptx.st") and not (_ORDERED & set(mods(op)))


def _hoist_past_if(barrier: Operation, block_dims: tuple[int, int, int],
                   uniform: set, ipdom: dict, idom: dict,  # type: ignore[type-arg]
                   preds: dict[Block, list[Block]], shared_var: dict,  # type: ignore[type-arg]
                   symbols: Symbols, memo: dict,  # type: ignore[type-arg]
                   noalias: frozenset[int] = frozenset()) -> bool:
    """Moves the code after `barrier` (up to the next barrier of its block) above the
    thread-index `if` that ends at the barrier's block; True when done (the barrier is then
    the caller's to remove).  Nothing changes when any condition of BarrierMotion fails."""
    join = barrier.parent
    assert join is not None
    branch_block = idom.get(join)
    if branch_block is None or join.args:
        return False
    branch = branch_block.terminator
    if branch is None or branch.name != "cf.cond_br" or branch.operands[0] in uniform or \
            ipdom.get(branch_block) is not join or \
            thread_index_condition(branch.operands[0], block_dims) is None:
        return False
    # the `if`: the blocks between the branch and the join; every way out of it joins
    inside: set[Block] = set()
    stack = [s for s in branch.successors if s is not join]
    while stack:
        b = stack.pop()
        if b is join or b in inside:
            continue
        if b is branch_block:
            return False
        inside.add(b)
        stack.extend(b.successors)
    if any(p not in inside and p is not branch_block for p in preds.get(join, [])):
        return False
    if_ops = [op for b in inside for op in b.ops]
    if any(not _plain_access(op) and op.name not in ("cf.br", "cf.cond_br") for op in if_ops):
        return False            # an exit, a call, an atomic, a volatile access: stays ordered
    pos = join.ops.index(barrier)
    end = next((k for k in range(pos + 1, len(join.ops)) if _is_block_barrier(join.ops[k])),
               None)
    if end is None or not all(info(op).pure for op in join.ops[:pos]):
        return False
    moved = join.ops[:pos] + join.ops[pos + 1:end]
    if not any(not info(op).pure for op in moved[pos:]) or \
            not all(_plain_access(op) for op in moved):
        return False
    defined = {r for op in moved for r in op.results}
    for op in moved:
        for o in op.operands:
            if o in defined:
                continue
            owner = defining_block(o)
            if owner is None or owner is join or not dominates(idom, owner, branch_block):
                return False
    # the moved code and the `if` trade places in each thread: they must touch different
    # memory (a thread's own accesses of one location stay in order)
    if_access = [a for op in if_ops for a in accesses(op, symbols, memo)]
    for op in moved:
        for a in accesses(op, symbols, memo):
            if any(may_conflict_in_thread(a, b, shared_var, noalias) for b in if_access):
                return False
    term = branch_block.ops.index(branch)
    for op in moved:
        join.ops.remove(op)
    branch_block.ops[term:term] = moved
    for op in moved:
        op.parent = branch_block
    return True


def _parameter_cover(pairs: set[tuple[int, int]]) -> set[int]:
    """A small set of parameters that has one of each pair (greedy vertex cover): each
    pointer parameter in `noalias_params` is apart from all the others, so one of a pair
    suffices, and the fewer the launch must check, the more launches qualify."""
    left = set(pairs)
    cover: set[int] = set()
    while left:
        counts: dict[int, int] = {}
        for a, b in left:
            counts[a] = counts.get(a, 0) + 1
            counts[b] = counts.get(b, 0) + 1
        best = min(counts, key=lambda p: (-counts[p], p))
        cover.add(best)
        left = {pair for pair in left if best not in pair}
    return cover


def _ends_in_thread_index_ifs(barrier: Operation, block_dims: tuple[int, int, int] | None,
                              ipdom: dict) -> bool:  # type: ignore[type-arg]
    """Whether, after `barrier`, only pure code and `if`s on one thread index (`if (tx ==
    0)`, each on its own) run up to the next block barrier or the thread's exit: the `if`s
    that end a barrier interval, which code generation runs after the interval's thread loop
    (ThreadLoopPlans.deferred_regions)."""
    if block_dims is None:
        return False
    blk = barrier.parent
    assert blk is not None
    ops = blk.ops[blk.ops.index(barrier) + 1:]
    seen: set[Block] = set()
    while True:
        for op in ops:
            if _is_block_barrier(op) or op.name == "upir.exit":
                return True
            if op.name == "cf.br" and not op.successor_args[0]:
                nxt = op.successors[0]
                break
            if op.name == "cf.cond_br":
                if thread_index_condition(op.operands[0], block_dims) is None or \
                        any(op.successor_args) or op.parent is None:
                    return False
                nxt = ipdom.get(op.parent)
                break
            if op.successors or not info(op).pure:
                return False
        else:
            return False
        if nxt is None or nxt in seen or nxt.args:
            return False
        seen.add(nxt)
        ops = nxt.ops


def eliminate_barriers(region: Region, block_dims: tuple[int, int, int] | None = None, *,
                       keep_divergent_splits: bool = True, motion: bool = False,
                       adjacent_intervals: bool = False,
                       analyses: AnalysisManager | None = None,
                       noalias: frozenset[int] = frozenset(),
                       candidates: set[int] | None = None) -> int:
    """Removes the block barriers no access needs (the module's docstring) and returns how
    many.  `motion`: instead, only the barriers kept because they end a divergent `if`, each
    removed after the code after it moved above the `if` (BarrierMotion).  `noalias`: the
    pointer parameters known not to overlap the others (accesses based on them conflict with
    no access based on another parameter); `candidates` (filled in when given): the pointer
    parameters whose non-overlap would remove a barrier kept now."""
    removed = 0
    if not any(_is_block_barrier(op) for b in region.blocks for op in b.ops):
        return 0
    uniform = cached(analyses, uniform_values, region)
    symbols = Symbols(uniform, cached(analyses, cyclic_blocks, region))
    ipdom = cached(analyses, immediate_post_dominators, region)
    idom = dominators(region)
    divergent = divergent_blocks(region, uniform, ipdom)

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
        return any(may_conflict(x, y, block_dims, shared_var, noalias) for x in xs for y in ys)

    def alias_only(xs: list[Access] | None, ys: list[Access] | None
                   ) -> set[tuple[int, int]] | None:
        """The pairs of pointer parameters of the conflicts between xs and ys when every
        conflict is between accesses based on two different parameters (None: some other
        conflict)."""
        if xs is None or ys is None:
            return None
        pairs: set[tuple[int, int]] = set()
        for x in xs:
            for y in ys:
                if not may_conflict(x, y, block_dims, shared_var, noalias):
                    continue
                if x.base is None or y.base is None or x.base == y.base:
                    return None
                pairs.add((min(x.base, y.base), max(x.base, y.base)))
        return pairs

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
                before_side = only_some_threads(near_before_ops)
                after_side = only_some_threads(near_after_ops)
                splits = {before_side, after_side} == {True, False}
                if splits and before_side is False and \
                        _ends_in_thread_index_ifs(op, block_dims, ipdom):
                    # code all threads run, then only `if`s on one thread index up to the
                    # next barrier or the exit: code generation runs those `if`s after the
                    # interval's thread loop (deferred), so merging costs no vectorization
                    if motion:
                        continue
                    splits = False
                if splits and keep_divergent_splits and not motion or motion and not splits:
                    continue            # it isolates code only some threads run
                before_near = effects(near_before_ops)
                if adjacent_intervals:
                    # the barrier orders only its two intervals' accesses: the others stay
                    # ordered by the barriers around them (each removal re-walks the IR)
                    after_near = effects(near_after_ops)
                    if conflict(before_near, after_near):
                        if candidates is not None:
                            got = alias_only(before_near, after_near)
                            if got:
                                candidates.update(_parameter_cover(got))
                        continue
                else:
                    after_all = effects(_walk(region, op, True, False, preds))
                    if conflict(before_near, after_all):
                        before_all = effects(_walk(region, op, False, False, preds))
                        after_near = effects(near_after_ops)
                        if conflict(before_all, after_near):
                            if candidates is not None:
                                got = [g for g in (alias_only(before_near, after_all),
                                                   alias_only(before_all, after_near)) if g]
                                if got:
                                    candidates.update(_parameter_cover(min(got, key=len)))
                            continue
                if motion:
                    assert block_dims is not None
                    if not _hoist_past_if(op, block_dims, uniform, ipdom, idom, preds,
                                          shared_var, symbols, memo, noalias):
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
    #: on the CFG; structured input is lowered only where a sync point is
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        from cpuify.analysis.sync_points import kept_bytes, plan_sync_points
        from cpuify.ir.structure import lockstep_counters
        if structured_now(kernel, analyses):
            if not any(is_sync(op) for op in nested_ops(kernel)):
                return 0
            lower_for_cfg_rewrite(kernel, analyses)
        region = block_body(kernel)
        if not any(is_sync(op) for b in region.blocks for op in b.ops):
            return 0
        kernel.attributes["fission"] = "min-cut"
        lockstep = lockstep_counters(region)
        uniform = cached(analyses, uniform_values, region) | lockstep
        points = plan_sync_points(region, lockstep, min_cut=True)
        return max(kept_bytes(points, uniform, before_cut=True) - kept_bytes(points, uniform), 0)
