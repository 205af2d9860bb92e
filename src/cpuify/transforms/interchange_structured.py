"""The loop interchanges (transforms/interchange.py) on structured loops: the same
decisions read from `upir.for`/`upir.while` ops, the same rewrite made on their regions, so
that a kernel in the structured form is interchanged without lowering it.

The interchange is Polygeist's (section III-B2, Fig. 8: a serial loop around a barrier is
moved out of the parallel loop, the parallel loop into the serial loop's body): here a
*soft* barrier at the top of the loop's header, the point the thread loop is split at.
Where the CFG pass puts it, the loop op puts it where its lowering (ir/structured.py) puts
the header:

  * a `upir.while`: the first op of its before region;
  * a `upir.for` lowered as a do-while (`do_while`): the first op of its body;
  * a `upir.for` tested at the top: it has no op in its header until lowered, so it is
    rewritten as the `upir.while` of the same loop first (ir/structured.py `for_as_while`).

The thread-strided interchange's iteration counter is one more carried value of the loop
op: an initial value 0, `k + 1` added before every yield or condition that goes back to the
header (the CFG pass's back edges), passed on through a while's condition to its after
region; the soft barrier's `lockstep` names it among the header's arguments.  The soft
barriers where threads leaving the loop stop go where its exits lead: after the loop op,
or at the start of the block its one `cf.br` (or a multi-exit while's dispatch) goes to.

Lowered, the result is the CFG the CFG pass makes of the lowered input (tests/
test_interchange_structured.py compares both).  A kernel with a cycle of blocks left in a
region (an irreducible loop the raise kept as CFG) is lowered and takes the CFG pass."""

from __future__ import annotations

from typing import Callable

from cpuify.analysis.cfg import immediate_post_dominators
from cpuify.analysis.induction import increment_terms
from cpuify.analysis.loop_order import LoopOrder
from cpuify.analysis.manager import AnalysisManager, cached
from cpuify.analysis.structured_loops import (
    LOOP_OPS, LoopView, loop_view, only_yields, structured_loop_order,
)
from cpuify.analysis.structured_uniformity import exits_apart, structured_uniform_values
from cpuify.analysis.uniformity import uses_special
from cpuify.analysis.unrolled_loops import FALLBACK as REROLL_FALLBACK
from cpuify.ir.core import (
    Block, BlockArgument, Operation, OpResult, Region, Value, defining_block, predecessors,
    replace_all_uses,
)
from cpuify.ir.dialects import STRUCTURED_OPS, info, is_sync
from cpuify.ir.loop_guard import DO_WHILE
from cpuify.ir.structured import (
    EXIT_DISPATCH, EXIT_FLAGS, always_goes_on, continues, for_as_while, nested_blocks,
)
from cpuify.ir.structured_shapes import lowered_size, nested_ops
from cpuify.transforms.sum_split import RELOAD, SUM_SPLIT

SOFT = "soft"
#: attribute on a block-uniform loop's back edges: the loop order chosen for it
LOOP_ORDER = "loop_order"
#: ... and the accesses it was chosen from (LoopOrder.describe)
LOOP_ACCESSES = "loop_accesses"
PER_THREAD = "per-thread"           # each thread runs the loop: its own loop is innermost
INTERCHANGED = "interchanged"       # a soft barrier per iteration: the thread loop is innermost


def loops_in(region: Region) -> list[Operation]:
    """The loop ops nested in `region`, in program order."""
    return [o for b in region.blocks for top in b.ops for o in nested_ops(top) if o.name in LOOP_OPS]


def enclosing_loop(op: Operation) -> Operation | None:
    """The loop op around `op`, if any."""
    node = op
    while node.parent is not None and node.parent.parent is not None:
        owner = node.parent.parent.parent
        if owner is None or owner.name not in STRUCTURED_OPS:
            return None
        if owner.name in LOOP_OPS:
            return owner
        node = owner
    return None


def has_soft_barrier(region: Region) -> bool:
    """Whether a loop of the region was interchanged already (split-in-order-sums' soft
    barriers around a sum's read-back do not count)."""
    return any(o.name == "upir.barrier" and o.attributes.get(SOFT) and SUM_SPLIT not in o.attributes
               for b in nested_blocks(region) for o in b.ops)


def runs_recursions(region: Region) -> bool:
    return any(o.name == "upir.call_stack" for b in nested_blocks(region) for o in b.ops)


def back_edge_attr(view: LoopView, key: str) -> object:
    """The attribute `key` of a back edge of the loop (set by reroll-loops,
    split-in-order-sums), if any."""
    for t in view.back_edges:
        if key in t.attributes:
            return t.attributes[key]
    return None


def holds_sync(loop: Operation) -> bool:
    return any(is_sync(o) for o in nested_ops(loop))


# --- which loops ---------------------------------------------------------------------------

def induction(view: LoopView, arg: BlockArgument) -> tuple[list[Value], list[Value]]:
    """(initial values, steps) of a header argument, as transforms/interchange.py
    `_induction` reads them on the CFG."""
    inits: list[Value] = []
    steps: list[Value] = list(view.increments.get(arg, ()))
    for v in view.incoming.get(arg, []):
        v = view.same.get(v, v)
        terms = increment_terms(arg, v, view.same) if isinstance(v, OpResult) and \
            defining_block(v) in view.body else None
        if terms is not None:
            steps.extend(terms)
        else:
            inits.append(v)
    return inits, steps


def thread_strided(view: LoopView, uniform: set[Value]) -> bool:
    """transforms/interchange.py `_thread_strided` on a loop op."""
    return strided_across_threads(view.args, lambda a: induction(view, a),
                                  lambda v: defining_block(v) not in view.body, uniform)


def strided_across_threads(args: list[BlockArgument],
                           induction_of: Callable[[BlockArgument], tuple[list[Value], list[Value]]],
                           outside: Callable[[Value], bool], uniform: set[Value]) -> bool:
    """Whether a loop (its header's arguments, their initial values and steps, and which
    values are defined outside it) has a thread-strided induction variable: one that starts
    at a different value in each thread and steps by the same amount in all threads, and
    no index that moves by a stride of its own in each thread."""
    found = False
    for arg in args:
        if arg.type not in ("i32", "i64"):
            continue
        inits, steps = induction_of(arg)
        if any(s not in uniform and outside(s) for s in steps):
            # an index that moves by a fixed stride of its own in each thread: the threads of
            # one iteration are not one stride apart (nvcc's countdown of the remainder
            # iterations alone does not make such a loop thread-strided; a sum, whose
            # increment is computed in the loop, is no index)
            return False
        # (an initial value computed inside the loop: the header is entered again with a
        # value that is no step of the counter, as a recursion's call stack does)
        if inits and steps and any(i not in uniform for i in inits) and \
                all(outside(i) for i in inits):
            found = True
    return found


def steps_of(view: LoopView) -> list[Value]:
    return [s for a in view.args if a.type in ("i32", "i64") for s in induction(view, a)[1]]


# --- where the threads come from and go to --------------------------------------------------

def _ends(region: Region, name: str) -> list[tuple[Block, int]]:
    return [(b, len(b.ops) - 1) for b in region.blocks if b.ops and b.ops[-1].name == name]


def _before(op: Operation) -> tuple[Block, int]:
    block = op.parent
    assert block is not None
    return block, block.ops.index(op)


def _entry_preds(region: Region) -> list[tuple[Block, int]] | None:
    """The points control reaches a region's entry from (None: the block body's start)."""
    owner = region.parent
    if owner is None or owner.name not in STRUCTURED_OPS:
        return None
    if owner.name == "upir.if":
        return [_before(owner)]
    if owner.name == "upir.for":
        return [_before(owner)] + _ends(region, "upir.yield")
    before, after = owner.regions
    if region is before:
        return [_before(owner)] + _ends(after, "upir.yield")
    return [(b, k) for b, k in _ends(before, "upir.condition") if continues(b.ops[-1])]


def _op_ends(op: Operation) -> list[tuple[Block, int]]:
    """The points control leaves a structured op from (walking back into it)."""
    if op.name == "upir.if":
        return [p for r in op.regions for p in _ends(r, "upir.yield")]
    if op.name == "upir.while":
        return [(b, k) for b, k in _ends(op.regions[0], "upir.condition")
                if not always_goes_on(b.ops[-1])]
    if DO_WHILE in op.attributes:
        return _ends(op.regions[0], "upir.yield")
    body = op.regions[0]
    return [_before(op)] + _ends(body, "upir.yield")       # (its header: before its body)


def entered_after_barrier(loop: Operation) -> bool:
    """transforms/interchange.py `_entered_after_barrier` on a loop op: every way into it
    comes from a block barrier (or the kernel's start) through no other sync point and not
    through the loop itself."""
    preds: dict[Region, dict[Block, list[Block]]] = {}
    work = [_before(loop)]
    seen: set[tuple[int, int]] = set()
    while work:
        block, at = work.pop()
        if (id(block), at) in seen:
            continue
        seen.add((id(block), at))
        for op in reversed(block.ops[:at]):
            if op is loop:
                return False
            if op.name == "upir.barrier" and not op.attributes.get(SOFT):
                break
            if op.name in STRUCTURED_OPS:
                work.extend(_op_ends(op))
                break
            if is_sync(op):
                return False
        else:
            region = block.parent
            assert region is not None
            if region not in preds:
                preds[region] = predecessors(region)
            work.extend((b, len(b.ops)) for b in preds[region].get(block, []))
            if block is region.entry:
                into = _entry_preds(region)
                if into is not None:
                    work.extend(into)
    return True


def _does_work(ops: list[Operation]) -> bool:
    return any(not (info(o).pure or o.successors or o.name == "upir.exit" or o.name in STRUCTURED_OPS)
               for o in ops)


def does_work_from(block: Block, at: int) -> bool:
    """transforms/interchange.py `_does_work` from the point before `block.ops[at]`: whether
    a thread going on from there may reach an op other than computation and branches."""
    work = [(block, at)]
    seen: set[tuple[int, int]] = set()
    while work:
        b, k = work.pop()
        if (id(b), k) in seen:
            continue
        seen.add((id(b), k))
        for op in b.ops[k:]:
            if op.name in STRUCTURED_OPS:
                if _does_work(nested_ops(op)):
                    return True
                continue
            if _does_work([op]):
                return True
            work.extend((s, 0) for s in op.successors)
            if op.name in ("upir.yield", "upir.condition"):
                owner = b.parent.parent if b.parent is not None else None
                if owner is None or owner.name not in STRUCTURED_OPS:
                    continue
                if owner.name in LOOP_OPS and _does_work(nested_ops(owner)):
                    return True
                hb, hk = _before(owner)
                work.append((hb, hk + 1))
    return False


def exit_points(loop: Operation) -> list[tuple[Block, int]]:
    """Where the threads leaving `loop` go on, as the lowered loop's exit blocks: after the
    op, or the start of the block its one `cf.br` after it (or its exit dispatch) goes to,
    where the lowering branches there directly."""
    block, at = _before(loop)
    rest = block.ops[at + 1:]
    if EXIT_FLAGS in loop.attributes:
        targets: list[Block] = []
        stack = [rest[-1]]
        while stack:
            t = stack.pop()
            for s in t.successors:
                if len(s.ops) == 1 and EXIT_DISPATCH in s.ops[0].attributes and \
                        s.ops[0].name == "cf.cond_br" and s.ops[0].operands[0] in loop.results:
                    stack.append(s.ops[0])
                elif s not in targets:
                    targets.append(s)
        return [(t, 0) for t in targets]
    folded = folded_exit(loop)
    return [folded] if folded is not None else [(block, at + 1)]


def folded_exit(op: Operation) -> tuple[Block, int] | None:
    """Where the lowered structured op `op` (no multi-exit while) branches to when it
    leaves, where the lowering folds the terminator after it into its exits
    (ir/structured.py `_exit`): the one `cf.br` after it when that branch alone uses its
    results or its one exit is the only way into the target; a yield after it that alone
    uses them, which the lowering makes a branch to where its if goes on (or to the header
    of the while whose after region it ends).  None: the ops after it start a block of
    their own (its continuation)."""
    block, at = _before(op)
    rest = block.ops[at + 1:]
    if len(rest) != 1:
        return None
    term = rest[0]
    direct = all(u is term for r in op.results for u in r.uses)
    region = block.parent
    assert region is not None
    if term.name == "cf.br":
        target = term.successors[0]
        exits = 1 if op.name == "upir.for" else len(_ends(op.regions[0], "upir.condition"))
        if op.name == "upir.if":
            exits = len(_ends(op.regions[0], "upir.yield")) + len(_ends(op.regions[1], "upir.yield"))
        into = sum(s is target for b in region.blocks for s in b.successors)
        if direct or (into == 1 and exits == 1 and target is not region.entry):
            return target, 0
        return None
    owner = region.parent
    if term.name != "upir.yield" or not direct or owner is None:
        return None
    if owner.name == "upir.if":
        folded = folded_exit(owner)
        if folded is not None:
            return folded
        holder, k = _before(owner)
        return holder, k + 1
    if owner.name == "upir.while" and region is owner.regions[1]:
        return owner.regions[0].entry, 0
    return None


def _continue_in_a_block(loop: Operation) -> None:
    """The ops after `loop` moved to a new block that takes its results, the loop followed
    by a branch there: what the lowering makes of a for (its exits branch to the
    continuation with the carried values), kept by the while `for_as_while` makes of it,
    whose results also hold the induction variable."""
    block, at = _before(loop)
    region = block.parent
    assert region is not None
    cont = Block([r.type for r in loop.results])
    for r, a in zip(loop.results, cont.args):
        replace_all_uses(r, a)
    for o in block.ops[at + 1:]:
        cont.append(o)
    del block.ops[at + 1:]
    cont.parent = region
    region.blocks.insert(region.blocks.index(block) + 1, cont)
    block.append(Operation("cf.br", [], attributes={}, successors=[cont],
                           successor_args=[list(loop.results)]))


# --- the rewrite ---------------------------------------------------------------------------

def insert_soft_barrier(block: Block, at: int = 0) -> Operation:
    line = next((o.attributes["line"] for o in block.ops[at:] if o.attributes.get("line")), None)
    soft = Operation("upir.barrier", [], [], {SOFT: True, "line": line})
    soft.parent = block
    block.ops.insert(at, soft)
    return soft


def header_of(loop: Operation) -> tuple[Operation, Block]:
    """The loop op whose header block holds ops (a top-tested for made a while) and that
    block."""
    if loop.name == "upir.for" and DO_WHILE not in loop.attributes:
        if folded_exit(loop) is None:
            _continue_in_a_block(loop)
        made = for_as_while(loop)
        if made is not None:
            loop = made
    return loop, loop.regions[0].entry


def _append_operand(op: Operation, v: Value) -> None:
    op.operands.append(v)
    v.uses.append(op)


def _add_result(op: Operation, type_: str) -> None:
    op.results.append(OpResult(type_, op, len(op.results)))


def _add_before_terminator(block: Block, op: Operation) -> Operation:
    op.parent = block
    block.ops.insert(len(block.ops) - 1, op)
    return op


def add_iteration_counter(loop: Operation, zero: Value, one: Value) -> BlockArgument:
    """A counter carried by `loop` (0 on entry, +1 on every back edge); returns it as the
    header's argument."""
    view_back = loop_view(loop).back_edges
    holder, at = _before(loop)
    init = zero
    if loop.name == "upir.while" and at == 0 and holder.args and loop.operands == holder.args \
            and holder.parent is not None and holder is not holder.parent.entry:
        # (the while alone in a block taking its arguments is that block once lowered: the
        # block takes the counter, 0 from every branch into it)
        init = holder.add_arg("i32", "%__iteration")
        for b in holder.parent.blocks:
            t = b.terminator
            for k, s in enumerate(t.successors if t is not None else ()):
                if s is holder:
                    t.successor_args[k].append(zero)
                    zero.uses.append(t)
    _append_operand(loop, init)
    _add_result(loop, "i32")
    header = loop.regions[0].entry
    counter = header.add_arg("i32", "%__iteration")

    def bump(term: Operation, of: Value) -> Value:
        inc = Operation("ptx.add", [of, one], ["i32"], {"mods": ["s32"]})
        _add_before_terminator(term.parent, inc)  # type: ignore[arg-type]
        return inc.results[0]

    if loop.name == "upir.for":
        for y in view_back:
            _append_operand(y, bump(y, counter))
        if DO_WHILE in loop.attributes:
            k, a, c = (int(x) for x in loop.attributes[DO_WHILE])
            loop.attributes[DO_WHILE] = [k, a + 1, c + 1]
        return counter
    before, after = loop.regions
    conditions = [b.ops[-1] for b in before.blocks if b.ops and b.ops[-1].name == "upir.condition"]
    passed = after.entry.add_arg("i32", "%__iteration")
    if only_yields(after.blocks):
        # (a condition that goes on is a back edge: it passes k + 1 on, the after region
        # back; one that only leaves passes the counter, read by nothing)
        for c in conditions:
            _append_operand(c, bump(c, counter) if c in view_back else counter)
        _append_operand(after.entry.ops[-1], passed)
    else:
        for c in conditions:
            _append_operand(c, counter)
        for y in view_back:
            _append_operand(y, bump(y, passed))
    return counter


def can_rewrite(loop: Operation) -> bool:
    """Whether the rewrite takes the loop's shape (a while with an after region of its own
    entered from several conditions is left to the CFG pass)."""
    if loop.name != "upir.while":
        return True
    before, after = loop.regions
    conds = _ends(before, "upir.condition")
    only = len(after.blocks) == 1 and len(after.entry.ops) == 1
    return only or len(conds) == 1


def interchange_thread_strided(region: Region, analyses: AnalysisManager | None = None
                               ) -> list[BlockArgument] | None:
    """transforms/interchange.py `interchange_thread_strided_loops` on structured loops:
    the iteration counters added, or None when the loop it picks has a shape the rewrite
    does not take (nothing changed: the caller lowers and takes the CFG pass)."""
    if runs_recursions(region):
        return []
    uniform = cached(analyses, structured_uniform_values, region)
    loops = loops_in(region)
    views = {id(o): loop_view(o) for o in loops}
    outermost = [o for o in loops if enclosing_loop(o) is None]
    candidates = [o for o in loops if back_edge_attr(views[id(o)], REROLL_FALLBACK) is None]
    orders: dict[int, LoopOrder] = {}

    def grid_stride(o: Operation) -> bool:
        if not thread_strided(views[id(o)], uniform):
            return False
        if id(o) not in orders:
            orders[id(o)] = structured_loop_order(o, uniform)
        return not orders[id(o)].contiguous_within_thread()

    strided = [o for o in outermost if o in candidates and grid_stride(o)]
    if not strided:
        strided = [o for o in candidates if o not in outermost and grid_stride(o) and
                   entered_after_barrier(o)]
    if len(strided) > 1:
        # (a grid-stride loop's step is computed from gridDim)
        strided = [o for o in strided
                   if any(uses_special(s, "%nctaid", 7) for s in steps_of(views[id(o)]))]
    if len(strided) > 1:
        strided = [max(strided, key=lowered_size)]
    if len(strided) != 1:
        return []
    (loop,) = strided
    if holds_sync(loop):
        return []
    if not can_rewrite(loop):
        return None
    zero = Operation("upir.const", [], ["i32"], {"value": 0})
    one = Operation("upir.const", [], ["i32"], {"value": 1})
    for c in (zero, one):
        c.parent = region.entry
        region.entry.ops.insert(0, c)
    loop, header = header_of(loop)
    exits = exit_points(loop)
    counter = add_iteration_counter(loop, zero.results[0], one.results[0])
    insert_soft_barrier(header)
    for block, at in reversed(exits):
        if does_work_from(block, at):
            insert_soft_barrier(block, at)
    return [counter]


def threads_leave_apart(loop: Operation, uniform: set[Value]) -> bool:
    """Whether threads may take different iterations of `loop`: its exit test is not
    uniform, or a branch left as CFG in its own regions on a value that is not uniform has
    ways that meet only past the iteration (the CFG pass: a thread-dependent branch whose
    post-dominator is the header or outside the loop)."""
    if exits_apart(loop, uniform):
        return True
    for r in loop.regions:
        branches = [b for b in r.blocks if b.ops and b.ops[-1].name == "cf.cond_br" and
                    b.ops[-1].operands[0] not in uniform]
        if branches:
            ipdom = immediate_post_dominators(r)
            if any(ipdom.get(b) is None for b in branches):
                return True
    return False


def interchange_uniform(region: Region, min_ops: int, by_access: bool,
                        analyses: AnalysisManager | None = None) -> list[Block]:
    """transforms/interchange.py `interchange_uniform_loops` on structured loops: the
    headers of the loops interchanged (a before region's or a do-while body's entry)."""
    if has_soft_barrier(region) or runs_recursions(region):
        return []
    uniform = cached(analyses, structured_uniform_values, region)
    done: list[Block] = []
    for loop in loops_in(region):
        if any(o is not loop and o.name in LOOP_OPS for o in nested_ops(loop)):
            continue        # not innermost
        if holds_sync(loop) or threads_leave_apart(loop, uniform):
            continue
        view = loop_view(loop)
        split = back_edge_attr(view, SUM_SPLIT)
        carries_float = any(a.type in ("f32", "f64") and a not in uniform for a in view.args)
        if not carries_float and not by_access:
            continue
        if split != RELOAD and lowered_size(loop) < min_ops:
            continue
        order = structured_loop_order(loop, uniform)
        if not carries_float and not order.contiguous_across_threads():
            continue
        keep = by_access and order.contiguous_within_thread() and order.reorderable()
        for t in view.back_edges:
            t.attributes[LOOP_ORDER] = PER_THREAD if keep else INTERCHANGED
            t.attributes[LOOP_ACCESSES] = order.describe()
        if keep:
            continue
        loop, header = header_of(loop)
        insert_soft_barrier(header)
        done.append(header)
    return done
