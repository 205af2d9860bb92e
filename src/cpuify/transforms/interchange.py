"""Interchange of thread-strided loops with the thread loop.

A grid-stride loop

    for (i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        c[i] = a[i] + b[i];

run as `for thread: for i: ...` touches one element per thread per iteration, far apart in
memory, and cannot be vectorized.  Interchanged (`for i-iteration: for thread: ...`) one
iteration of all threads of a block reads consecutive elements: a vector loop.

The interchange reuses the barrier machinery (Polygeist's "interchange of loops with the
thread loop"): a *soft* barrier at the top of the loop header makes every thread stop there
once per iteration.  Unlike `__syncthreads`, threads may stop at different soft barriers or
leave the loop; the scheduler simply runs each group (`block_sched.c`).

Applied only to loops with no barrier or warp collective inside, outside any other loop
(or inside other loops when every way into it comes straight from a block barrier: a
grid-stride loop in each step of a time loop with `grid.sync()`/`__syncthreads()` between
steps), with a thread-strided induction variable: initial value different per thread, step
the same for all threads (a loop whose counter is the same for every thread is handled by
interchange_uniform_loops below).  Barriers elsewhere in the kernel are fine: all live
threads enter the loop together, from the kernel's start or from the same barrier.

Both passes take either form.  On structured control flow they decide and rewrite on the
`upir.for`/`upir.while` ops themselves (transforms/interchange_structured.py: the same
decisions, the soft barrier and counter where the lowering puts the loop's header), with no
lowering; a kernel that keeps a cycle of blocks in a region (what the raise could not nest)
is lowered and takes the CFG functions below."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cpuify.analysis.cfg import cyclic_blocks, immediate_post_dominators, incoming_values as _incoming
from cpuify.analysis.induction import increment_terms
from cpuify.analysis.loop_order import loop_order
from cpuify.analysis.uniformity import uniform_values, uses_special
from cpuify.analysis.unrolled_loops import FALLBACK as REROLL_FALLBACK
from cpuify.ir.core import (
    Block, BlockArgument, OpResult, Operation, Region, Value, defining_block, dominates,
    dominators,
)
from cpuify.ir.dialects import info, is_sync
from cpuify.ir.structure import block_body
from cpuify.ir.structured_shapes import has_loop, regions_branching_back
from cpuify.analysis.manager import AnalysisManager, cached
from cpuify.transforms.interchange_structured import (  # noqa: F401 (LOOP_*: cli/main.py)
    INTERCHANGED, LOOP_ACCESSES, LOOP_ORDER, PER_THREAD, interchange_thread_strided, interchange_uniform,
    strided_across_threads,
)
from cpuify.transforms.pass_manager import lower_for_cfg_rewrite, register, structured_now
from cpuify.transforms.sum_split import RELOAD, SUM_SPLIT


@register("interchange-thread-strided-loops",
          "grid-stride loops interchanged with the thread loop (soft barrier per iteration)")
@dataclass(frozen=True)
class InterchangeThreadStridedLoops:
    """Pass: insert soft barriers at the headers of thread-strided loops.  The iteration
    counter it adds is recorded on the header's soft barrier (`lockstep`: indices of the
    header's arguments that are the same in every thread resuming there)."""
    name: str = "interchange-thread-strided-loops"
    #: structured loops rewritten in place (transforms/interchange_structured.py); a kernel
    #: with a cycle of blocks left as CFG is lowered
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of loops interchanged."""
        counters: list[BlockArgument] | None = None
        if _on_regions(kernel, analyses):
            if not has_loop(kernel):
                return 0
            counters = interchange_thread_strided(block_body(kernel), analyses)
            if counters is None:        # (a loop shape the structured rewrite does not take)
                lower_for_cfg_rewrite(kernel, analyses)
        elif structured_now(kernel, analyses):
            lower_for_cfg_rewrite(kernel, analyses)
        if counters is None:
            counters = interchange_thread_strided_loops(block_body(kernel), analyses)
        for arg in counters:
            soft = next(op for op in arg.block.ops if op.name == "upir.barrier" and op.attr("soft"))
            soft.attributes["lockstep"] = sorted(set(soft.attr("lockstep", [])) | {arg.index})
        return len(counters)


@register("interchange-uniform-loops",
          "block-uniform loops interchanged with the thread loop (soft barrier per iteration)")
@dataclass(frozen=True)
class InterchangeUniformLoops:
    """Pass: soft barriers at the headers of block-uniform loops that carry per-thread
    floating-point values (n-body's inner loop)."""
    name: str = "interchange-uniform-loops"
    min_ops: int = 24               # MIN_UNIFORM_LOOP_OPS: smaller loops stay as they are
    #: leave a loop in each thread when its accesses are contiguous within a thread and
    #: strided across threads and it carries only min/max reductions (analysis/loop_order.py)
    by_access: bool = True
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of loops interchanged."""
        if _on_regions(kernel, analyses):
            if not has_loop(kernel):
                return 0
            return len(interchange_uniform(block_body(kernel), self.min_ops, self.by_access,
                                           analyses))
        if structured_now(kernel, analyses):
            lower_for_cfg_rewrite(kernel, analyses)
        return len(interchange_uniform_loops(block_body(kernel), min_ops=self.min_ops,
                                             analyses=analyses, by_access=self.by_access))


def _on_regions(kernel: Operation, analyses: AnalysisManager | None) -> bool:
    """Whether the interchange runs on the structured form (transforms/
    interchange_structured.py): the kernel holds structured ops and no cycle of blocks was
    left as CFG in a region (the CFG pass takes those, the kernel lowered)."""
    return structured_now(kernel, analyses) and \
        not any(cyclic_blocks(r) for r in regions_branching_back(kernel))


def interchange_thread_strided_loops(region: Region, analyses: AnalysisManager | None = None
                                     ) -> list[BlockArgument]:
    """Interchange the kernel's thread-strided loop, if it has exactly one that no other
    loop contains.  Returns the iteration counters added (one per interchanged loop).

    The counter `k` (0 on entry, +1 per iteration) is the same in every thread waiting at
    the loop's soft barrier: threads start the loop together (nothing synchronizes before
    it) and each resumption advances every waiting thread by one iteration; a thread that
    leaves an outermost loop never comes back.  So `k` is kept once per block, and the
    thread-strided induction variable is recomputed from it (init + k * step): affine in the
    thread index, which is what makes the interchanged loop vectorize."""
    if _runs_recursions(region):
        return []
    idom = cached(analyses, dominators, region)
    uniform = cached(analyses, uniform_values, region)
    incoming = _incoming(region)
    loops = _loops(region, idom)
    outermost = [h for h in loops if not any(h in body for other, body in loops.items() if other is not h)]
    # (the original loops that reroll-loops keeps for the runs its guard sends there are
    # taken by no thread that reaches the simple loop: they stay in the thread loop)
    loops = {h: body for h, body in loops.items() if not _reroll_fallback(h, body)}
    # (a loop each thread runs over its own contiguous memory, `&x[row * cols + c]` from a
    # start that differs between threads, is thread-strided by its pointer but is not a
    # grid-stride loop: interchanged, each vector access would be a gather; its own loop is
    # the one to vectorize, as interchange-uniform-loops decides for it)
    def grid_stride(h: Block) -> bool:
        return _thread_strided(h, loops[h], idom, incoming, uniform) and \
            not loop_order(h, loops[h], uniform, incoming).contiguous_within_thread()

    strided = [h for h in outermost if h in loops and grid_stride(h)]
    if not strided:
        # a thread-strided loop inside other loops (a grid-stride loop in each iteration of a
        # loop of time steps with grid.sync() or __syncthreads() between them): as good as
        # outermost when every thread enters it right after a block barrier, so that all
        # threads that wait at its header in one iteration entered it in the same pass
        strided = [h for h in loops if h not in outermost and grid_stride(h) and
                   _entered_after_barrier(h, loops[h])]
    if len(strided) > 1:
        # Only one loop may be interchanged (threads leaving it at different iterations
        # would reach a second one out of step).  With several, as in a histogram that
        # zeroes its shared bins with `for (b = tid; b < BINS; b += blockDim.x)` around a
        # grid-stride loop, the grid-stride one is the long loop worth interchanging.
        strided = [h for h in strided
                   if any(_depends_on_grid(s) for s in _steps(h, idom, incoming))]
    if len(strided) > 1:
        # nvcc splits a grid-stride loop whose trip count it can compute into a remainder
        # loop and a main loop unrolled k times: interchange the one with the most work
        # (the other runs inside the thread loop, where any code may run)
        strided = [max(strided, key=lambda h: sum(len(b.ops) for b in loops[h]))]
    if len(strided) != 1:
        return []
    (header,) = strided
    body = loops[header]
    if any(is_sync(op) for b in body for op in b.ops):
        return []           # threads of one iteration must not wait for each other
    counter = header.add_arg("i32", "%__iteration")
    zero = Operation("upir.const", [], ["i32"], {"value": 0})
    one = Operation("upir.const", [], ["i32"], {"value": 1})
    entry = region.entry
    for c in (zero, one):
        c.parent = entry
        entry.ops.insert(0, c)
    for p in region.blocks:
        term = p.terminator
        if term is None:
            continue
        for k, succ in enumerate(term.successors):
            if succ is not header:
                continue
            if p in body:      # back edge: k + 1, computed in the latch
                inc = Operation("ptx.add", [counter, one.results[0]], ["i32"], {"mods": ["s32"]})
                inc.parent = p
                p.ops.insert(len(p.ops) - 1, inc)
                value = inc.results[0]
            else:
                value = zero.results[0]
            term.successor_args[k].append(value)
            value.uses.append(term)
    _insert_soft_barrier(header)
    # Threads that leave the loop stop right after it when code with effects follows: else
    # that code (up to the next sync point, a warp shuffle's operands and the values kept
    # across it, or the thread's final stores) would sit in every iteration's thread loop,
    # its stores crowding out the loads that keep memory busy, although it runs once per
    # thread (warp-shuffle reduction 3.8 -> 2.4 ms).
    for exit_block in _exits(body):
        if _does_work(exit_block):
            _insert_soft_barrier(exit_block)
    return [counter]


def _sum_split_kind(header: Block, body: set[Block]) -> str | None:
    """The loop's role in a split by split-in-order-sums (on its back edges), if any."""
    for b in body:
        if b.terminator is not None and header in b.successors:
            kind = b.terminator.attributes.get(SUM_SPLIT)
            if kind is not None:
                return str(kind)
    return None


def _runs_recursions(region: Region) -> bool:
    """Whether the kernel runs recursive device functions (lifting/inline.py): their threads
    share the worker's call stack, so a thread must finish its recursion before the next
    starts, and a soft barrier inside the recursion's loop would interleave them."""
    return any(op.name == "upir.call_stack" for b in region.blocks for op in b.ops)


def _reroll_fallback(header: Block, body: set[Block]) -> bool:
    """Whether a back edge of the loop is marked as reroll-loops' fallback."""
    return any(b.terminator is not None and header in b.successors and
               b.terminator.attributes.get(REROLL_FALLBACK) for b in body)


def _entered_after_barrier(header: Block, body: set[Block]) -> bool:
    """Whether every path into the loop (`header`, `body`) from outside comes from a block
    barrier (or the kernel's start) through no other sync point and no block of the loop:
    the threads that reach the header together left the same barrier together, and one
    that leaves the loop comes back only through a barrier every thread waits at."""
    region = header.parent
    assert region is not None
    preds: dict[Block, list[Block]] = {}
    for b in region.blocks:
        for succ in b.successors:
            preds.setdefault(succ, []).append(b)
    work = [p for p in preds.get(header, []) if p not in body]
    seen: set[Block] = set()
    while work:
        b = work.pop()
        if b in seen:
            continue
        seen.add(b)
        if b in body:
            return False
        for op in reversed(b.ops):
            if op.name == "upir.barrier" and not op.attributes.get("soft"):
                break                       # this way starts at a barrier
            if is_sync(op):
                return False
        else:
            if b is region.entry:
                continue                    # ... or at the kernel's start
            ins = preds.get(b, [])
            if not ins:
                return False
            work.extend(ins)
    return True


def _insert_soft_barrier(block: Block) -> None:
    soft = Operation("upir.barrier", [], [], {"soft": True, "line": _first_line(block)})
    soft.parent = block
    block.ops.insert(0, soft)


def _exits(body: set[Block]) -> list[Block]:
    """The blocks outside a loop that its blocks branch to, in a deterministic order."""
    out: dict[Block, None] = {}
    for b in sorted(body, key=lambda b: b.parent.blocks.index(b) if b.parent else 0):
        for s in b.successors:
            if s not in body:
                out[s] = None
    return list(out)


def _does_work(start: Block) -> bool:
    """Whether a thread going on from `start` may reach an operation other than pure
    computation, branches and its exit."""
    seen = {start}
    work = [start]
    while work:
        b = work.pop()
        if any(not (info(op).pure or op.successors or op.name == "upir.exit") for op in b.ops):
            return True
        for s in b.successors:
            if s not in seen:
                seen.add(s)
                work.append(s)
    return False


def _loops(region: Region, idom) -> dict[Block, set[Block]]:  # type: ignore[no-untyped-def]
    """Loop header -> the blocks of its natural loop (all back edges to it together)."""
    loops: dict[Block, set[Block]] = {}
    for p in region.blocks:
        if p not in idom:
            continue
        for h in p.successors:
            if dominates(idom, h, p):
                loops.setdefault(h, {h}).update(_natural_loop(h, p))
    return loops


def _natural_loop(header: Block, latch: Block) -> set[Block]:
    body = {header, latch}
    preds: dict[Block, list[Block]] = {}
    region = header.parent
    assert region is not None
    for b in region.blocks:
        for s in b.successors:
            preds.setdefault(s, []).append(b)
    work = [latch]
    while work:
        b = work.pop()
        if b is header:
            continue
        for p in preds.get(b, []):
            if p not in body:
                body.add(p)
                work.append(p)
    return body


def _induction(header: Block, arg: BlockArgument, idom, incoming  # type: ignore[no-untyped-def]
               ) -> tuple[list[Value], list[Value]]:
    """(initial values, steps) of a header argument: steps from `arg + step` on back edges."""
    inits: list[Value] = []
    steps: list[Value] = []
    for v in incoming.get(arg, []):
        op = v.op if isinstance(v, OpResult) else None
        terms = increment_terms(arg, v) if op is not None and op.parent is not None and \
            dominates(idom, header, op.parent) else None
        if terms is not None:
            steps.extend(terms)         # arg + t1 + ... (an unrolled loop adds its step k times)
        else:
            inits.append(v)
    return inits, steps


def _thread_strided(header: Block, body: set[Block], idom, incoming, uniform  # type: ignore[no-untyped-def]
                    ) -> bool:
    return strided_across_threads(header.args, lambda a: _induction(header, a, idom, incoming),
                                  lambda v: defining_block(v) not in body, uniform)


def _steps(header: Block, idom, incoming) -> list[Value]:  # type: ignore[no-untyped-def]
    return [s for arg in header.args if arg.type in ("i32", "i64")
            for s in _induction(header, arg, idom, incoming)[1]]


def _depends_on_grid(v: Value) -> bool:
    """Whether v is computed from gridDim (%nctaid): a grid-stride loop's step."""
    return uses_special(v, "%nctaid", 7)


def _first_line(block: Block) -> int | None:
    for op in block.ops:
        line = op.attributes.get("line")
        if line:
            return line
    return None


# --- block-uniform loops that carry a per-thread floating-point value ------------------------

#: Fewer ops than this in the loop body: the per-iteration cost of a soft barrier (a pass
#: over the block's threads, the carried values through memory) would not pay off.
MIN_UNIFORM_LOOP_OPS = 24


def interchange_uniform_loops(region: Region, min_ops: int | None = None,
                              analyses: AnalysisManager | None = None,
                              by_access: bool = True) -> list[Block]:
    """Interchange innermost loops that every thread of the block runs the same way with the
    thread loop.  Returns their headers.

    A loop like n-body's `for (k = 0; k < blockDim.x; k++) acc += f(my, sh[k])` runs inside
    the thread loop as a chain of dependent floating-point additions per thread: LLVM cannot
    vectorize it (reassociating the sum would change the result) and the thread loop around
    it is not innermost.  With a soft barrier at its header (Polygeist's interchange of a
    serial loop with the thread loop) each iteration is one pass over the block's threads:
    a thread loop that vectorizes, the carried values kept per thread between passes.

    Only loops whose exits are block-uniform and whose thread-dependent branches rejoin
    within the iteration (all threads take each iteration together, so the soft barrier
    never separates them), that hold no sync point, carry a per-thread f32/f64 value or
    (with `by_access`) walk a column per thread (every access consecutive across threads
    or uniform, none contiguous within a thread: `a[i * n + tid]`, PolyBench gramschmidt's
    update; in each thread every iteration touches a cache line of its own, interchanged
    one iteration of the block is a vector access), and are large enough
    (MIN_UNIFORM_LOOP_OPS).

    With `by_access`, the loop order is read from the loop's accesses (loop_order): a loop
    whose every access is contiguous within a thread and strided across threads (a row per
    thread, `x[row * cols + c]`) and whose per-thread floating-point values are all min/max
    reductions stays in each thread, where its own loop vectorizes with contiguous loads
    (interchanged, each vector access would be a gather).  A loop carrying a float sum is
    interchanged whatever its accesses: its additions must stay in order, which leaves the
    threads as the only lanes to vectorize over.  The decision and the accesses behind it
    are recorded on the loop's back edges (LOOP_ORDER, LOOP_ACCESSES) for `cpuify explain`."""
    if any(op.name == "upir.barrier" and op.attributes.get("soft") and SUM_SPLIT not in op.attributes
           for b in region.blocks for op in b.ops):
        return []           # already interchanged (a thread-strided loop; split-in-order-sums'
        #                     soft barriers around a sum's read-back leave the other loops)
    if _runs_recursions(region):
        return []
    idom = cached(analyses, dominators, region)
    ipdom = cached(analyses, immediate_post_dominators, region)
    uniform = cached(analyses, uniform_values, region)
    loops = _loops(region, idom)
    done: list[Block] = []
    incoming = None
    for header, body in loops.items():
        if any(other is not header and other in body for other in loops):
            continue        # not innermost
        if any(is_sync(op) for b in body for op in b.ops):
            continue
        # thread-dependent branches only as `if`s that rejoin inside the same iteration
        if any(b.terminator is not None and b.terminator.name == "cf.cond_br"
               and b.terminator.operands[0] not in uniform
               and (ipdom.get(b) not in body or ipdom.get(b) is header) for b in body):
            continue
        split = _sum_split_kind(header, body)
        carries_float = any(a.type in ("f32", "f64") and a not in uniform for a in header.args)
        if not carries_float and not by_access:
            continue
        if split != RELOAD and \
                sum(len(b.ops) for b in body) < (MIN_UNIFORM_LOOP_OPS if min_ops is None else min_ops):
            continue        # (a sum split out of its loop's work is small by construction)
        if incoming is None:
            incoming = _incoming(region)
        order = loop_order(header, body, uniform, incoming)
        if not carries_float and not order.contiguous_across_threads():
            continue        # nothing to gain: no in-order sum, no column walked per thread
        keep = by_access and order.contiguous_within_thread() and order.reorderable()
        for b in body:
            if b.terminator is not None and header in b.successors:
                b.terminator.attributes[LOOP_ORDER] = PER_THREAD if keep else INTERCHANGED
                b.terminator.attributes[LOOP_ACCESSES] = order.describe()
        if keep:
            continue
        _insert_soft_barrier(header)
        done.append(header)
    return done


