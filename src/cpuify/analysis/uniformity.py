"""Divergence analysis: which values are the same in every thread of a block."""

from __future__ import annotations

from cpuify.analysis.cfg import cyclic_blocks, immediate_post_dominators
from cpuify.ir.core import (
    Block, Operation, OpResult, Region, Value, defining_block, dominates, dominators,
)
from cpuify.ir.dialects import info, is_sync

_UNIFORM_SPECIALS = ("%ntid", "%nctaid", "%ctaid", "%nwarpid", "%warpsize", "%dynamic_smem_size",
                     "%total_smem_size", "%aggr_smem_size", "%smid", "%nsmid", "%gridid")


#: attribute of a `cf.cond_br` whose condition is block-uniform by a pass's proof
UNIFORM_CONDITION = "uniform_condition"


def uses_special(v: Value, prefix: str, depth: int) -> bool:
    """Whether v is computed (within `depth` operations) from a special register whose name
    starts with `prefix` (`%nctaid`: a grid-stride step; `%ctaid`: an index of the block)."""
    if not isinstance(v, OpResult) or depth < 0:
        return False
    if v.op.name == "upir.special":
        return str(v.op.attributes.get("reg", "")).startswith(prefix)
    return any(uses_special(o, prefix, depth - 1) for o in v.op.operands)


def _op_may_be_uniform(op: Operation) -> bool:
    if op.name in ("upir.const", "upir.param", "upir.addressof"):
        return True
    if op.name == "upir.envreg":
        return True         # set by the launch (a cooperative launch's grid workspace)
    if op.name == "upir.special":
        return op.attributes.get("reg", "").split(".")[0] in _UNIFORM_SPECIALS
    if op.name == "ptx.cvta":
        return "local" not in op.attributes.get("mods", ())
    return op.name.startswith("ptx.") and info(op).pure


def _exits_at_once(block: Block) -> bool:
    """A block that only ends the thread (`if (i >= n) return;`): the threads that branch
    there are gone, so the branch leaves the others all on one path."""
    return not block.successors and all(op.name in ("upir.exit", "upir.trap") or
                                        (info(op).pure and not op.results)
                                        for op in block.ops) and not block.args


def uniform_values(region: Region) -> set[Value]:
    """Values equal in every thread of a block (same value in each dynamic instance).

    Conservative divergence analysis: an op result is uniform if the op is pure, reads no
    per-thread state and has uniform operands; a block argument is uniform if its incoming
    values are and its block is not where the two ways of a branch whose condition is not
    uniform meet: the branch's immediate post-dominator (where the threads meet again), a
    block both ways reach before it, or the header of a loop around the branch (the
    temporal divergence of loops with thread-dependent exits).  A block argument inside one
    way only (a loop with uniform exits inside `if (i < n)`) merges alike in the threads that
    run it.  A branch to a block that only exits (`if (i >= n) return;`) divides no live
    threads."""
    ipdom = immediate_post_dominators(region)
    # who depends on each value: the ops using it, the block arguments it flows into
    op_users: dict[Value, list[Operation]] = {}
    arg_users: dict[Value, list[Value]] = {}
    uniform: set[Value] = set()
    for b in region.blocks:
        uniform.update(b.args)
        for op in b.ops:
            if _op_may_be_uniform(op):
                uniform.update(op.results)
            if op.results:
                for o in op.operands:
                    op_users.setdefault(o, []).append(op)
            for s, args in zip(op.successors, op.successor_args):
                for a, v in zip(s.args, args):
                    arg_users.setdefault(v, []).append(a)
    # optimistic start (loop-carried values), then remove what is not uniform, with a
    # worklist (a pure op with uniform operands is uniform wherever it runs; only the merges
    # of block arguments depend on the path taken).  When more blocks are tainted, the
    # greatest solution can only shrink: the removal goes on from the previous one.
    work: list[Value] = []

    def kill(v: Value) -> None:
        uniform.discard(v)
        work.append(v)

    for b in region.blocks:
        for op in b.ops:
            for s, args in zip(op.successors, op.successor_args):
                for a, v in zip(s.args, args):
                    if v not in uniform and a in uniform:
                        kill(a)
            if op.results and op.results[0] in uniform and \
                    not all(o in uniform for o in op.operands):
                for r in op.results:
                    if r in uniform:
                        kill(r)

    def propagate() -> None:
        while work:
            v = work.pop()
            for a in arg_users.get(v, ()):
                if a in uniform:
                    kill(a)
            for op in op_users.get(v, ()):
                if op.results[0] in uniform:
                    for r in op.results:
                        if r in uniform:
                            kill(r)

    propagate()
    idom = None
    tainted: set[Block] = set()
    merging: set[Block] = set()
    while True:
        new_tainted: set[Block] = set()
        for b in region.blocks:
            term = _dividing_branch(b, uniform)
            if term is not None:
                # threads part here and meet again at the immediate post-dominator: the
                # blocks on the way see divergence, and merges where the two ways meet
                join = ipdom.get(b)
                arms = _divergent_arms(term, join)
                new_tainted.update(arms)
                if idom is None:
                    idom = dominators(region)
                for x, ks in arms.items():
                    # the meeting block, blocks both ways reach, and the headers of loops
                    # the branch is in (threads leave them at different iterations); a
                    # loop inside one way, with exits of its own, runs alike in its threads
                    if x is join or len(ks) > 1 or _loop_around(x, b, idom):
                        merging.add(x)
        if new_tainted <= tainted:
            return uniform
        for x in merging:
            for a in x.args:
                if a in uniform:
                    kill(a)
        tainted |= new_tainted
        propagate()


def _dividing_branch(b: Block, uniform: set[Value]) -> Operation | None:
    """`b`'s terminator when it is a branch that parts the live threads: a `cf.cond_br` whose
    condition is not block-uniform and none of whose ways only exits.  A branch marked
    `uniform_condition` (a pass proved its condition the same in every thread although it
    is computed from per-thread values: split-in-order-sums' guard) parts no threads."""
    term = b.terminator
    if term is not None and term.name == "cf.cond_br" and term.operands[0] not in uniform \
            and not term.attributes.get(UNIFORM_CONDITION) \
            and not any(_exits_at_once(s) for s in term.successors):
        return term
    return None


def _divergent_arms(term: Operation, join: Block | None) -> dict[Block, set[int]]:
    """The blocks reached from the ways of the branch `term` up to (and with) its
    immediate post-dominator `join`: block -> the indices of the ways that reach it."""
    arms: dict[Block, set[int]] = {}
    for k, succ in enumerate(term.successors):
        stack = [succ]
        while stack:
            x = stack.pop()
            got = arms.setdefault(x, set())
            if k not in got:
                got.add(k)
                if x is not join:
                    stack.extend(x.successors)
    return arms


def divergent_blocks(region: Region, uniform: set[Value]) -> set[Block]:
    """Blocks that some threads of a block may run while others are elsewhere: those
    between a branch whose condition is not block-uniform and its immediate post-dominator
    (not that block itself, where the threads meet again), the body of a loop with a
    thread-dependent exit among them.  A branch to a block that only exits divides no live
    threads."""
    ipdom = immediate_post_dominators(region)
    out: set[Block] = set()
    for b in region.blocks:
        term = _dividing_branch(b, uniform)
        if term is not None:
            join = ipdom.get(b)
            out.update(x for x in _divergent_arms(term, join) if x is not join)
    return out


def uniform_across_warp_syncs(region: Region, uniform: set[Value]) -> set[Value]:
    """The values of `uniform` that threads stopped at warp-level sync points or yield
    points still share.

    Threads that all stop at the same sync points stay in step: each value they keep is
    the one instance of it they all computed.  A warp that waits at a `__syncwarp`, shuffle
    or vote in a divergent branch or loop (a block of divergent_blocks), or a thread at a
    spin-wait's yield point, lets the other threads run on past warp-level sync points up
    to the next block barrier: through the rest of a loop and into its next iteration
    (fz_2615_743: two warps, an inner loop of `warp + 1` rounds with a `__syncwarp()`, a
    shuffle after it, in an outer loop; warp 0 reached the shuffle of its second outer
    iteration while warp 1 was in the first).  A uniform value defined in a loop (a block
    on a cycle of the CFG, with or without a block barrier on it) that a thread can reach
    from such a stop before it reaches a block barrier may then be of different
    iterations in the threads that hold it, and one copy per block is wrong: it is left
    out.  Values computed outside all loops (once per thread, the same in all) stay
    shared, and so do those of loops the threads cannot get round before the waiting
    threads catch up (a time loop whose grid.sync() waits between two block barriers, a
    shuffle in `if (warp == 0)` fenced by two __syncthreads())."""
    divergent = divergent_blocks(region, uniform)
    waits = {op for b in region.blocks for op in b.ops
             if is_sync(op) and (info(op).yield_sync or info(op).warp_sync and b in divergent)}
    if not waits:
        return set(uniform)
    cyclic = cyclic_blocks(region)
    # A stretch between block barriers (from the kernel's start or right after a barrier:
    # the ops reached from there before a barrier) holding a waiting point: its threads
    # may stop at any of its warp-level sync points and yield points apart, and a thread
    # that goes on from one of them runs what it reaches before the next barrier while
    # the others still hold the values they stopped with.  (A value a thread computes
    # before its first stop in the stretch is computed alike by all of them.)
    starts: list[tuple[Block, int]] = [(region.blocks[0], 0)]
    for b in region.blocks:
        starts.extend((b, i + 1) for i, op in enumerate(b.ops) if _block_barrier(op))
    stops: dict[Operation, int] = {}
    for block, index in starts:
        ops, _ = _reached_before_barriers(block, index)
        if ops & waits:
            for b in region.blocks:
                for i, op in enumerate(b.ops):
                    if op in ops and is_sync(op) and not _block_barrier(op):
                        stops[op] = i
    unsafe_ops: set[Operation] = set()
    unsafe_entries: set[Block] = set()
    for op, i in stops.items():
        ops, entered = _reached_before_barriers(op.parent, i + 1)  # type: ignore[arg-type]
        unsafe_ops |= ops
        unsafe_entries |= entered

    def shared(v: Value) -> bool:
        home = defining_block(v)
        if home not in cyclic:
            return True
        if isinstance(v, OpResult):
            return v.op not in unsafe_ops
        return home not in unsafe_entries
    return {v for v in uniform if shared(v)}


def _block_barrier(op: Operation) -> bool:
    """`__syncthreads()`: every thread of the block waits there for all the others."""
    return op.name == "upir.barrier" and not op.attributes.get("soft")


def _reached_before_barriers(block: Block, index: int) -> tuple[set[Operation], set[Block]]:
    """The ops a thread can run from op `index` of `block` on before it reaches a block
    barrier (the barrier ops with them), and the blocks it can enter on the way."""
    ops: set[Operation] = set()
    entered: set[Block] = set()
    work = [(block, index)]
    while work:
        b, i = work.pop()
        if i == 0:
            if b in entered:
                continue
            entered.add(b)
        stopped = False
        for op in b.ops[i:]:
            ops.add(op)
            if _block_barrier(op):
                stopped = True
                break
        if not stopped:
            work.extend((s, 0) for s in b.successors)
    return ops, entered


def _loop_around(header: Block, b: Block, idom) -> bool:  # type: ignore[no-untyped-def]
    """Whether `header` heads a loop that contains `b`: it dominates `b` and `b` reaches it
    again through blocks it dominates."""
    if header is b:
        return True
    if not dominates(idom, header, b):
        return False
    seen = {b}
    stack = list(b.successors)
    while stack:
        x = stack.pop()
        if x is header:
            return True
        if x not in seen and dominates(idom, header, x):
            seen.add(x)
            stack.extend(x.successors)
    return False


def uniform_across_yields(region: Region, uniform: set[Value]) -> set[Value]:
    """The values of `uniform` that threads parked at spin-wait yield points still share.

    A thread that waits at a yield point lets the others run ahead, but no further than
    the next block barrier (`__syncthreads()`), where they wait for it: all threads of the
    block are between the same two barriers.  A uniform value defined where every cycle
    of the CFG passes a block barrier (outside all loops, or in a loop with a
    `__syncthreads()` or `grid.sync()` in each iteration: a solver's time loop) has then
    been computed in the same iteration by every thread that holds it, so one copy per
    block serves them all.  One defined in a loop that can go round without a barrier (the
    spin-wait loop itself, a pipeline's stage loop) may be from different iterations in
    different threads and must be kept per thread."""
    hard = {b for b in region.blocks
            if any(op.name == "upir.barrier" and not op.attributes.get("soft") for op in b.ops)}
    free_cycles = cyclic_blocks(region, hard)
    return {v for v in uniform if defining_block(v) not in free_cycles}
