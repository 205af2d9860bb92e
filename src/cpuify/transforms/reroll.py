"""Re-rolling of nvcc's unrolled counted loops: the grid-stride loop whose stride is computed
before the loop.

    int s = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += s) y[i] = a * x[i] + y[i];

Because `s` is loop-invariant nvcc computes the trip count `T = (n - i - 1) / s + 1` and splits
the loop in two: a remainder loop that runs `T % U` iterations (counting down), then a main
loop unrolled U times (U = 4) that runs while `i < n`.  The main loop's index starts where the
remainder loop stopped, a different place in each thread, so the threads of one iteration of
the main loop are no longer one stride apart: interchanged with the thread loop it gathers
and scatters (3.4x slower than `i += blockDim.x * gridDim.x` written inline, which nvcc does
not unroll).

(For integer sums, whose additions it may reorder, nvcc puts the unrolled loop first,
counting `T - c` down by U, and the remainder loop after it; inside an outer loop it peels
the remainder into U - 1 copies behind `if`s.  All three arrangements are recognised.)

This pass proves that the two loops together run the remainder loop's body T times, one
iteration after another, and puts the simple loop

    if (i < n) do { body(i); i += s; } while (i < n);

in their place, which interchange-thread-strided-loops turns into one vector loop per
iteration.  The proof (analysis/evolution.py evaluates both bodies over the iteration number):

  * the trip count: the division computes `(n - i0 - 1) /u s`, the remainder count is
    `(q + 1) & (U - 1)`, the remainder loop counts it down to 0 and the main loop runs only
    when `q >= U - 1`, so together they run `q + 1` iterations;
  * the main loop's body is U copies of the remainder loop's body: its side effects (loads,
    stores, atomics, in program order) are those of iterations m, m+1, ..., m+U-1, and what it
    carries to its next iteration (indices, pointers, sums) is what U iterations carry;
  * what both loops leave to the code after them is the same.

The proof's one assumption about ranges (no index value wraps, so sign extensions of
`i0 + j*s` distribute) and the simple loop's `i < n` exit test hold when `0 < s`,
`n <= INT_MAX - s` and `i0 < n`: the rewritten code tests exactly that at run time and runs the
original loops otherwise (marked `reroll_fallback`; the interchange leaves them in the thread
loop).  Refused, leaving the code as it is: bodies of more than one block, copies that differ,
effects in another order than copy by copy (a store that a later copy's load reads is
one), a stride that changes in the loop, a block-uniform index (a loop the interchange would
not take)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cpuify.analysis.cfg import incoming_values
from cpuify.analysis.loop_entry import start_below_bound
from cpuify.analysis.loop_order import loop_order
from cpuify.analysis.manager import AnalysisManager, cached
from cpuify.analysis.uniformity import uniform_values
from cpuify.analysis.unrolled_loops import FALLBACK, UnrolledLoop, match_unrolled_loop
from cpuify.ir.core import Block, BlockArgument, Operation, OpResult, Region, Value, predecessors
from cpuify.ir.structure import block_body
from cpuify.ir.structured_shapes import nested_ops, single_block_loop
from cpuify.transforms.pass_manager import lower_for_cfg_rewrite, register, structured_now
from cpuify.transforms.sum_split import splits

#: attribute on the back edge of a re-rolled loop with step 1 (for `cpuify explain`)
REROLLED = "rerolled"


@register("reroll-loops",
          "unrolled counted loops (nvcc's remainder + main loop: a stride computed before "
          "the loop, or a thread's own step-1 loop over contiguous memory) replaced by the "
          "simple loop, guarded where the proof needs it")
@dataclass(frozen=True)
class RerollLoops:
    """Pass: replace nvcc's remainder loop + U-times unrolled main loop of a thread-strided
    loop, or of a per-thread step-1 loop whose accesses are contiguous within the thread, by
    one simple loop, where the two provably run its body T times in order."""
    name: str = "reroll-loops"
    #: structured input is read for nvcc's arrangement (may_reroll) and lowered only where
    #: it may be there: the proof and the rewrite are the CFG's
    form: ClassVar[str] = "any"
    #: also the step-1 loops each thread runs over its own contiguous memory
    per_thread: bool = True

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of loop pairs re-rolled."""
        if structured_now(kernel, analyses):
            if not may_reroll(kernel):
                return 0
            lower_for_cfg_rewrite(kernel, analyses)
        region = block_body(kernel)
        done = 0
        known: list[set[Value]] = []
        flows: list[dict[BlockArgument, list[Value]]] = []

        def uniform() -> set[Value]:
            # (computed only when a loop has the shape: most kernels have none)
            if not known:
                known.append(cached(analyses, uniform_values, region))
            return known[0]

        def incoming() -> dict[BlockArgument, list[Value]]:
            if not flows:
                flows.append(incoming_values(region))
            return flows[0]

        def contiguous_within_thread(main: Block) -> bool:
            # a thread's own loop over its own contiguous memory (a row per thread) stays
            # in the thread, vectorized along it, or is split by split-in-order-sums: nvcc's
            # four copies and the remainder loop are in the vectorizer's way (strided groups
            # of 4, two loops); a loop interchanged with the thread loop keeps them
            return loop_order(main, {main}, uniform(), incoming()).contiguous_within_thread()

        def stays_in_thread(body: Block) -> bool:
            # A float sum must stay in order: no vectorizer takes the thread's own loop, and
            # re-rolled it is too small for interchange-uniform-loops (its threads as lanes
            # would pay a pass over the block per iteration): it would stay in each thread,
            # 3x slower.  So only a loop whose sums split-in-order-sums splits off.
            return loop_order(body, {body}, uniform(), incoming()).reorderable() or \
                splits(body, uniform(), incoming())

        preds = predecessors(region)
        for block in list(region.blocks):
            if block not in block.successors or block.parent is not region:
                continue                    # (only single-block loops are candidates)
            found = match_unrolled_loop(region, block, uniform, preds,
                                        contiguous_within_thread if self.per_thread else None)
            if found is not None and found.stride is None and \
                    not stays_in_thread(found.remainder):
                continue
            if found is not None and _rewrite(region, found):
                preds = predecessors(region)
                known.clear()
                flows.clear()
                analyses = None         # (the IR changed: no cached analysis of it)
                done += 1
        return done


#: nvcc's `q <u U-1` bounds: U a power of two, 2 <= U <= 64 (analysis/unrolled_loops.py)
_MASKS = frozenset((1 << k) - 1 for k in range(1, 7))


def may_reroll(kernel: Operation) -> bool:
    """Whether the kernel, in any form, may hold nvcc's unrolled arrangement: a loop that is
    one block once lowered (its unrolled main loop), and the `q <u U-1` test each of the
    three arrangements skips that loop by (a `setp.lt.u32` whose bound may be U - 1,
    _may_be_mask; or a for whose test it became).  Where not, match_unrolled_loop finds nothing
    on the lowered CFG either."""
    loop = test = False
    for op in nested_ops(kernel):
        if single_block_loop(op):
            loop = True
        if op.name == "ptx.setp" and len(op.operands) == 2:
            mods = op.attributes.get("mods", ())
            if len(mods) == 2 and set(mods) == {"lt", "u32"}:
                test = test or _may_be_mask(op.operands[1])
        elif op.name == "upir.for" and {"lt", "u32"} <= set(op.attributes.get("predicate", ())):
            test = True
        if loop and test:
            return True
    return False


def _may_be_mask(bound: Value) -> bool:
    """Whether `bound` may be U - 1 as the proof evaluates it (a constant, or computed by
    arithmetic it folds): not a value no arithmetic made (a parameter, a special register,
    a load, a block argument; `ptx.mov`s looked through), nor another constant."""
    for _ in range(8):
        if not (isinstance(bound, OpResult) and bound.op.name == "ptx.mov" and
                len(bound.op.operands) == 1):
            break
        bound = bound.op.operands[0]
    if not isinstance(bound, OpResult):
        return False
    name = bound.op.name
    if name == "upir.const":
        return bound.op.attributes.get("value") in _MASKS
    return name not in ("upir.param", "upir.special", "ptx.ld", "ptx.ldu")


def _rewrite(region: Region, found: UnrolledLoop) -> bool:
    """Re-roll a matched pair (False: left as it is, a value of nvcc's loops is read after
    them other than through the exit's arguments)."""
    loops = _loop_blocks(found)
    if any(u.parent not in loops for b in loops
           for v in [*b.args, *(r for op in b.ops for r in op.results)] for u in v.uses):
        return False
    # a step-1 loop: no stride to check, and `i0 < n` is nvcc's own test before its loops
    proven = found.stride is None and start_below_bound(region, found.split, found.start,
                                                       found.bound)
    _reroll(region, found, proven)
    if proven:          # nvcc's loops are unreachable: no fallback to keep
        for b in loops:
            for op in b.ops:
                op.drop_uses()
            b.parent = None
        region.blocks[:] = [b for b in region.blocks if b not in loops]
    return True


def _loop_blocks(found: UnrolledLoop) -> set[Block]:
    """The blocks of nvcc's arrangement: reached from the split's branch before the exit."""
    seen: set[Block] = set()
    work = list(found.split.successors)
    while work:
        b = work.pop()
        if b in seen or b is found.exit or b is found.split:
            continue
        seen.add(b)
        work.extend(b.successors)
    return seen


def _const(block: Block, value: int, line: object) -> Value:
    op = Operation("upir.const", [], ["i32"], {"value": value})
    block.append(op)
    return op.results[0]


def _setp_op(block: Block, a: Value, b: Value, cmp: str, line: object) -> Value:
    op = Operation("ptx.setp", [a, b], ["i1"], {"mods": [cmp, "s32"], "line": line})
    block.append(op)
    return op.results[0]


def _clone(op: Operation, vmap: dict[Value, Value]) -> Operation:
    new = Operation(op.name, [vmap.get(o, o) for o in op.operands], [r.type for r in op.results],
                    {k: (list(v) if isinstance(v, list) else v) for k, v in op.attributes.items()})
    for r, n in zip(op.results, new.results):
        n.hint = r.hint
        vmap[r] = n
    return new


def _reroll(region: Region, found: UnrolledLoop, proven: bool = False) -> None:
    """Guard the original loops with the proof's range conditions and put the simple loop
    on the other side of the guard (`proven`: no guard, the split goes on to the simple
    loop; the original loops are left unreachable)."""
    line = found.test_line
    split = found.split
    original = split.ops.pop()              # the split's branch moves to its own block
    keep = Block()
    keep.append(original)
    # guards: 0 < s, n <= INT_MAX - s (a step of 1: i <= n <= INT_MAX, no index wraps),
    # i0 < n (unless proven before the loops); else the original loops run
    checks: list[Block] = []
    block = split

    def check(condition: Value) -> None:
        nonlocal block
        follow = Block()
        block.append(Operation("cf.cond_br", [condition], [], {"line": line},
                               successors=[follow, keep], successor_args=[[], []]))
        checks.append(follow)
        block = follow

    stride = found.stride
    if stride is not None:
        zero = _const(block, 0, line)
        check(_setp_op(block, stride, zero, "gt", line))
        largest = _const(block, 0x7FFFFFFF, line)
        room = Operation("ptx.sub", [largest, stride], ["i32"], {"mods": ["s32"], "line": line})
        block.append(room)
        check(_setp_op(block, found.bound, room.results[0], "le", line))
    if not proven:
        check(_setp_op(block, found.start, found.bound, "lt", line))
    pre, header, leave = block, Block(), Block()
    if stride is None:
        stride = _const(pre, 1, line)
    # the simple loop: the remainder loop without its countdown, leaving when i >= n
    vmap: dict[Value, Value] = dict(found.init_map)
    for op in found.remainder_pre.ops[:-1]:
        pre.append(_clone(op, vmap))
    r_init = found.remainder_pre.ops[-1].successor_args[0]
    rargs = found.remainder.args
    r_term = found.remainder.ops[-1]
    r_back = r_term.successor_args[0]
    kept = [k for k in range(len(rargs)) if k != found.count_arg] if found.body_ops is None \
        else []
    for k in kept:
        vmap[rargs[k]] = header.add_arg(rargs[k].type, rargs[k].hint)
    inits = [vmap.get(r_init[k], r_init[k]) for k in kept]
    index = header.add_arg("i32", "%i") if found.index_arg is None else None
    if index is not None:
        inits.append(found.start)
        if found.index_alias is not None:
            vmap[found.index_alias] = index
    pre.append(Operation("cf.br", [], [], {"line": line}, successors=[header],
                         successor_args=[inits]))
    if found.body_ops is not None:
        body = found.body_ops
    else:
        decrement = r_back[found.count_arg]
        assert isinstance(decrement, OpResult)
        skip = {decrement.op, r_term.operands[0].op}  # type: ignore[attr-defined]
        body = [op for op in found.remainder.ops[:-1] if op not in skip]
    for op in body:
        header.append(_clone(op, vmap))
    nexts = [vmap.get(r_back[k], r_back[k]) for k in kept]
    if index is None:
        index_next = vmap.get(r_back[found.index_arg], r_back[found.index_arg])  # type: ignore[index]
    else:
        step = Operation("ptx.add", [index, stride], ["i32"], {"mods": ["s32"], "line": line})
        header.append(step)
        index_next = step.results[0]
        nexts.append(index_next)
    stay = _setp_op(header, index_next, found.bound, "lt", line)
    back = Operation("cf.cond_br", [stay], [], {"line": line},
                     successors=[header, leave], successor_args=[nexts, []])
    if found.stride is None:
        back.attributes[REROLLED] = "per-thread"
    header.append(back)
    leave.append(Operation("cf.br", [], [], {"line": line}, successors=[found.exit],
                           successor_args=[[vmap.get(v, v) for v in found.exit_values]]))
    at = region.blocks.index(split) + 1
    for b in (*checks, header, leave) + (() if proven else (keep,)):
        b.parent = region
        region.blocks.insert(at, b)
        at += 1
    if proven:
        original.drop_uses()
        return
    # the original loops run only where the guard fails: not the loops to interchange
    for term in found.fallback:
        term.attributes[FALLBACK] = True
