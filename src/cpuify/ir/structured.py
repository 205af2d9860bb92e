"""Lowering structured control flow (`upir.if`, `upir.while`, `upir.for`) back to the CFG.

raise-structured-cf (transforms/structured_cf.py) nests the block body's reducible control
flow into these ops; code generation, the reference interpreter and every pass that works
on the CFG call :func:`lower_structured_control_flow` first.  The lowering is the inverse of
the raise: the regions' blocks move back into the enclosing region, `upir.yield` and
`upir.condition` become `cf.br`/`cf.cond_br` with the attributes (PTX line) of the branches
they replaced, and a negation the raise inserted to turn an exit test into a continue test
is folded back into the branch's order.  An op followed only by `cf.br ^next(...)` branches
to `^next` directly, a region that only yields is no block at all and a block that held
only a loop is the loop's header again, so that a raised and lowered CFG has the blocks and
edges it had before the raise.  (Block arguments of an arm's entry, which has one
predecessor, are not restored: the raise replaced them by the values passed.)  A while
with several exits (EXIT_FLAGS, transforms/structured_exits.py) is followed by its
dispatch: each `upir.condition` branches straight to the target the flag constants it
passes name, with the values of that target's slots; the dispatch, the constants and the
`upir.undef` values the raise made, and its blocks for branch edges, go.

Iterative (a work stack of blocks), linear in the number of ops moved."""

from __future__ import annotations

from typing import Any, Callable, Iterator

from cpuify.errors import IRError
from cpuify.ir.core import Block, Operation, OpResult, Region, Value, replace_all_uses
from cpuify.ir.dialects import STRUCTURED_OPS
from cpuify.ir.loop_guard import DO_WHILE

#: attribute of the `ptx.not` the raise puts in front of a `upir.condition` whose loop left
#: on the true side of its branch (the lowering branches on the original predicate instead)
NEGATED_EXIT = "structured_negation"


#: attribute of a `upir.yield` the raise made alone in a block for an edge of a branch (an
#: empty arm of an if, a conditional branch's edge out of a region): no block once lowered
RAISED_EDGE = "edge"

#: attribute of a loop op the raise put in a new block in its header's place (the header was
#: entered from a conditional branch or from several blocks): lowered, a branch that only
#: goes on to the header is no block (the edge into it goes to the header)
HEADER_PLACE = "header_place"

#: attribute of a `upir.while` raised from a loop with several exits (or one exit the plain
#: while cannot take: not on every iteration, an unconditional branch): how many of its first
#: results are i1 flags naming the exit taken; the op is followed by its dispatch, a `cf.br`
#: to the one exit target or a chain of `cf.cond_br` on the flags marked EXIT_DISPATCH
EXIT_FLAGS = "exit_flags"
EXIT_DISPATCH = "exit_dispatch"

#: attribute of a soft `upir.barrier`: indices of its block's arguments that hold the same
#: value in every thread resuming there (interchange-thread-strided-loops)
LOCKSTEP = "lockstep"


class UseEdits:
    """Removals from `Value.uses` made at the end, value by value: `list.remove` on the uses
    of a constant used all over the kernel is linear in its uses, once per removal, which
    made raising and lowering quadratic in kernel size.  Read a value's uses through
    :meth:`uses` while removals are pending; :meth:`flush` before handing the IR on."""
    __slots__ = ("pending", "placed", "gone")

    def __init__(self) -> None:
        self.pending: dict[Value, dict[Operation, int]] = {}
        #: blocks that only branch to a loop's header and were no block of the CFG
        self.placed: list[Block] = []
        #: dispatch blocks of multi-exit loops, emptied by the lowering (no block of the CFG)
        self.gone: set[Block] = set()

    def unuse(self, v: Value, user: Operation) -> None:
        d = self.pending.setdefault(v, {})
        d[user] = d.get(user, 0) + 1

    def drop(self, op: Operation) -> None:
        """What `op.drop_uses()` does."""
        for v in op.operands:
            self.unuse(v, op)
        for args in op.successor_args:
            for v in args:
                self.unuse(v, op)

    def replace_operand(self, user: Operation, old: Value, new: Value) -> None:
        """`user`'s uses of `old` (operands and branch arguments) take `new`."""
        n = 0
        for i, v in enumerate(user.operands):
            if v is old:
                user.operands[i] = new
                n += 1
        for args in user.successor_args:
            for i, v in enumerate(args):
                if v is old:
                    args[i] = new
                    n += 1
        for _ in range(n):
            self.unuse(old, user)
            new.uses.append(user)

    def uses(self, v: Value) -> list[Operation]:
        self._flush(v)
        return v.uses

    def replace_all(self, old: Value, new: Value) -> None:
        self._flush(old)
        replace_all_uses(old, new)

    def _flush(self, v: Value) -> None:
        d = self.pending.pop(v, None)
        if not d:
            return
        keep: list[Operation] = []
        for u in v.uses:
            n = d.get(u)
            if n:
                d[u] = n - 1
            else:
                keep.append(u)
        v.uses[:] = keep

    def flush(self) -> None:
        for v in list(self.pending):
            self._flush(v)


def nested_blocks(region: Region) -> Iterator[Block]:
    """The blocks of `region` and of the structured ops nested in it, at any depth (a block
    before those of the ops it holds; iterative)."""
    stack = [region]
    while stack:
        r = stack.pop()
        for b in r.blocks:
            yield b
            for o in b.ops:
                if o.name in STRUCTURED_OPS:
                    stack.extend(reversed(o.regions))


def forwarded_values(op: Operation) -> list[tuple[Value, Value]] | None:
    """(value, what it becomes) for each value `op` passes on unchanged, as a branch passes
    its successor arguments to the successor's block arguments (MLIR's region branch
    interface): the initial values of a `upir.while` (its before region's arguments) and of
    a `upir.for` (its body's arguments after the induction variable); a `upir.yield`'s
    values (an if's results; a while's next iteration; a for's next iteration and its
    results); a `upir.condition`'s forwarded values (the while's results and its after
    region's arguments).  None for an op that passes nothing on (or a yield that ends a
    region of no structured op); the operands not listed are read by the op itself (a
    branch's or an if's condition, a for's bounds and step, a condition's test)."""
    name = op.name
    if name in ("cf.br", "cf.cond_br"):
        return [(v, a) for s, args in zip(op.successors, op.successor_args)
                for v, a in zip(args, s.args)]
    if name == "upir.while":
        return list(zip(op.operands, op.regions[0].entry.args))
    if name == "upir.for":
        return list(zip(op.operands[3:], op.regions[0].entry.args[1:]))
    if name == "upir.if":
        return []
    if name not in ("upir.yield", "upir.condition"):
        return None
    region = op.parent.parent if op.parent is not None else None
    owner = region.parent if region is not None else None
    if owner is None or owner.name not in STRUCTURED_OPS:
        return None
    if name == "upir.condition":
        vals = op.operands[1:]
        out = list(zip(vals, owner.results))
        after = owner.regions[1]
        if after.blocks and len(after.entry.args) == len(vals):
            out += list(zip(vals, after.entry.args))
        return out
    if owner.name == "upir.if":
        return list(zip(op.operands, owner.results))
    if owner.name == "upir.while":        # (the after region's yield: the next iteration)
        return list(zip(op.operands, owner.regions[0].entry.args))
    return list(zip(op.operands, owner.regions[0].entry.args[1:])) + \
        list(zip(op.operands, owner.results))


def for_as_while(op: Operation) -> Operation | None:
    """Rewrite the `upir.for` `op` in place of it as the `upir.while` the raise makes of the
    same loop with ops in its header (a soft barrier there: the place an interchange with
    the thread loop needs): the before region tests `iv <predicate> ub` and passes the
    induction variable and the carried values on, the after region is the body with
    `iv + step` added in front of each yield.  Lowered, both are the same CFG where the
    lowering folds what follows the op into its exits (a branch, or nothing, using its
    results); where the ops after it start a continuation block, the while's induction
    variable is one more argument of that block (transforms/interchange_structured.py
    moves those ops to a block of their own first).  Returns the
    while, or None (nothing changed) for a for lowered as a do-while or whose body keeps its
    arguments for a soft barrier's lockstep counters."""
    if DO_WHILE in op.attributes or op.parent is None:
        return None
    body = op.regions[0]
    if any(o.name == "upir.barrier" and o.attributes.get(LOCKSTEP) for o in body.entry.ops):
        return None
    lb, ub, step = op.operands[:3]
    inits = list(op.operands[3:])
    attrs = {k: v for k, v in op.attributes.items()
             if k not in ("predicate", "increment", "predicate_line", "increment_line")}
    header = Block([lb.type] + [v.type for v in inits])
    test_attrs: dict[str, Any] = {"mods": list(op.attributes["predicate"])}
    if "predicate_line" in op.attributes:
        test_attrs["line"] = op.attributes["predicate_line"]
    test = header.append(Operation("ptx.setp", [header.args[0], ub], ["i1"], test_attrs))
    header.append(Operation("upir.condition", [test.results[0], *header.args], attributes=dict(attrs)))
    add_attrs: dict[str, Any] = {"mods": list(op.attributes["increment"])}
    if "increment_line" in op.attributes:
        add_attrs["line"] = op.attributes["increment_line"]
    body_iv = body.entry.args[0]
    for b in body.blocks:
        y = b.ops[-1] if b.ops else None
        if y is None or y.name != "upir.yield":
            continue
        nxt = Operation("ptx.add", [body_iv, step], [body_iv.type], dict(add_attrs))
        nxt.parent = b
        b.ops.insert(len(b.ops) - 1, nxt)
        vals = list(y.operands)
        y.drop_uses()
        y.operands = [nxt.results[0], *vals]
        for v in y.operands:
            v.uses.append(y)
    op.drop_uses()
    op.regions = []
    loop = Operation("upir.while", [lb, *inits], [lb.type] + [r.type for r in op.results], attrs,
                     [Region([header]), body])
    for r, new in zip(op.results, loop.results[1:]):
        replace_all_uses(r, new)
    block = op.parent
    loop.parent = block
    block.ops[block.ops.index(op)] = loop
    op.parent = None
    return loop


def continues(condition: Operation) -> bool:
    """Whether a while's `upir.condition` may go on to the next iteration: all but the
    exits of a multi-exit while that the raise made always leave (a constant false test)."""
    return _const_test(condition.operands[0]) != 0


def always_goes_on(condition: Operation) -> bool:
    """Whether a while's `upir.condition` never leaves (a back edge of a multi-exit while
    the raise made a condition with a constant true test)."""
    return _const_test(condition.operands[0]) == 1


def has_structured_ops(op: Operation) -> bool:
    """Whether `op` holds a structured control-flow op anywhere (iterative, stops at the
    first: the pass manager asks around every pass)."""
    if op.name in STRUCTURED_OPS:
        return True
    stack = [op]
    while stack:
        for region in stack.pop().regions:
            for block in region.blocks:
                for o in block.ops:
                    if o.name in STRUCTURED_OPS:
                        return True
                    if o.regions:
                        stack.append(o)
    return False


def lower_structured_control_flow(kernel: Operation) -> int:
    """Lower every structured op nested in `kernel` (any op with regions) to branches in
    the region that holds it, in place; returns how many ops were lowered (0: unchanged).
    Repeated until none is left: an op nested in one lowered in the same round can be left
    behind in the outer region (fz_2701_15: an `if` in a `while`, 'no code generation for
    upir.if')."""
    total = 0
    while (n := _lower_round(kernel)):
        total += n
    return total


def _lower_round(kernel: Operation) -> int:
    regions: list[Region] = []
    seen: set[int] = set()
    for o in kernel.walk():
        if o.name in STRUCTURED_OPS and o.parent is not None and o.parent.parent is not None:
            region = o.parent.parent
            # (a structured op nested in another is moved out with its region's blocks)
            if not _inside_structured(region) and id(region) not in seen:
                seen.add(id(region))
                regions.append(region)
    edits = UseEdits()
    count = sum(_lower_region(r, edits) for r in regions)
    edits.flush()
    return count


def _inside_structured(region: Region) -> bool:
    node = region.parent
    while node is not None:
        if node.name in STRUCTURED_OPS:
            return True
        blk = node.parent
        node = blk.parent.parent if blk is not None and blk.parent is not None else None
    return False


def _edge_counts(region: Region) -> dict[Block, int]:
    """How many branches lead to each block of `region` and of the structured ops in it
    (the blocks the lowered region will hold)."""
    counts: dict[Block, int] = {}
    stack = [region]
    while stack:
        r = stack.pop()
        for b in r.blocks:
            for o in b.ops:
                for s in o.successors:
                    counts[s] = counts.get(s, 0) + 1
                if o.name in STRUCTURED_OPS:
                    stack.extend(o.regions)
    return counts


def _lower_region(region: Region, edits: UseEdits) -> int:
    out: list[Block] = []
    work = list(reversed(region.blocks))
    count = 0
    edges = _edge_counts(region)
    while work:
        block = work.pop()
        out.append(block)
        at = next((i for i, o in enumerate(block.ops) if o.name in STRUCTURED_OPS), None)
        if at is None:
            continue
        count += 1
        follow = _lower_op(block, at, edges, edits)
        work.extend(reversed(follow))
    if edits.gone:
        out = [b for b in out if b not in edits.gone]
    if edits.placed:
        out = _skip_placed(out, edits)
    for b in out:
        b.parent = region
    region.blocks = out
    return count


def _skip_placed(blocks: list[Block], edits: UseEdits) -> list[Block]:
    """Blocks the raise made in a loop header's place that now only branch to the header,
    entered by one edge that passes nothing, are no block: that edge goes to the header."""
    placed = {b for b in edits.placed if len(b.ops) == 1 and b.ops[0].name == "cf.br"}
    edits.placed.clear()
    into: dict[Block, list[tuple[Operation, int]]] = {b: [] for b in placed}
    for b in blocks:
        term = b.ops[-1] if b.ops else None
        for k, s in enumerate(term.successors if term is not None else ()):
            if s in into:
                into[s].append((term, k))  # type: ignore[arg-type]
    gone: set[Block] = set()
    for b, edges in into.items():
        if len(edges) != 1 or edges[0][0].successor_args[edges[0][1]]:
            continue
        term, k = edges[0]
        br = b.ops[0]
        term.successors[k] = br.successors[0]
        term.successor_args[k] = list(br.successor_args[0])
        for v in term.successor_args[k]:
            v.uses.append(term)
        edits.drop(br)
        b.ops = []
        gone.add(b)
    return [b for b in blocks if b not in gone] if gone else blocks


def _erase(op: Operation, edits: UseEdits) -> None:
    edits.drop(op)
    if op.parent is not None:
        op.parent.ops.remove(op)
        op.parent = None


def _exits(op: Operation) -> int:
    """How many branches leave `op` once lowered."""
    if op.name == "upir.for":
        return 1
    name = "upir.condition" if op.name == "upir.while" else "upir.yield"
    regions = op.regions[:1] if op.name == "upir.while" else op.regions
    return sum(1 for r in regions for b in r.blocks if b.ops and b.ops[-1].name == name)


def _exit(block: Block, at: int, edges: dict[Block, int], edits: UseEdits
          ) -> tuple[Block, Callable[[list[Value]], list[Value]], list[Block], bool]:
    """Where control goes after the structured op `block.ops[at]`, as (target, the target's
    arguments given the op's result values, new blocks, whether the results' other uses
    take the values of the op's one exit).  The ops after it move to a new continuation
    block whose arguments are the results, unless they are one `cf.br`: then the exits
    branch to its target directly, where the br alone uses the results or where the op's
    one exit will be the only way into the target (it dominates the uses: the loop's exit
    block of a raised loop)."""
    op = block.ops[at]
    rest = block.ops[at + 1:]
    if len(rest) == 1 and rest[0].name == "cf.br":
        br = rest[0]
        target = br.successors[0]
        direct = all(u is br for r in op.results for u in edits.uses(r))
        single = not direct and edges.get(target) == 1 and _exits(op) == 1 and \
            target.parent is not None and target is not target.parent.entry
        if direct or single:
            args = list(br.successor_args[0])
            index = {r: k for k, r in enumerate(op.results)}
            _erase(br, edits)
            edges[target] = edges.get(target, 0) - 1 + _exits(op)
            return (target, (lambda vals: [vals[index[a]] if a in index else a for a in args]),
                    [], single)
    cont = Block([r.type for r in op.results])
    for r, a in zip(op.results, cont.args):
        edits.replace_all(r, a)
    del block.ops[at + 1:]
    for o in rest:
        cont.append(o)
    return cont, (lambda vals: list(vals)), [cont], False


def _terminate(block: Block, name: str, attrs: dict, operands: list[Value],  # type: ignore[type-arg]
               successors: list[Block], args: list[list[Value]]) -> None:
    block.append(Operation(name, operands, attributes=attrs, successors=successors,
                           successor_args=args))


def _bare_yield(block: Block) -> Operation | None:
    """The block's yield when the block is nothing but a yield the raise made for an edge
    (marked RAISED_EDGE; a branch of the program's own is a yield with its attributes)."""
    if len(block.ops) == 1 and not block.args and block.ops[0].name == "upir.yield" and \
            RAISED_EDGE in block.ops[0].attributes:
        return block.ops[0]
    return None


def _only_yields(region: Region) -> Operation | None:
    """The region's yield when the region is nothing but it (no block needed)."""
    return _bare_yield(region.entry) if len(region.blocks) == 1 else None


def _forward_bare_yields(region: Region, target: Block,
                         target_args: Callable[[list[Value]], list[Value]], edits: UseEdits) -> None:
    """Branches to a block of `region` (not its entry) that only yields go to `target`
    directly, and the block goes: the raise made it for a conditional branch's edge out."""
    bare = {b: y for b in region.blocks[1:] if (y := _bare_yield(b)) is not None}
    if not bare:
        return
    for b in region.blocks:
        term = b.ops[-1] if b.ops else None
        if term is None or b in bare:
            continue
        for k, s in enumerate(term.successors):
            y = bare.get(s)
            if y is None:
                continue
            for v in term.successor_args[k]:
                edits.unuse(v, term)
            term.successors[k] = target
            term.successor_args[k] = target_args(list(y.operands))
            for v in term.successor_args[k]:
                v.uses.append(term)
    for y in bare.values():
        edits.drop(y)
    region.blocks = [b for b in region.blocks if b not in bare]


def _lower_op(block: Block, at: int, edges: dict[Block, int], edits: UseEdits) -> list[Block]:
    """Lower `block.ops[at]`; returns the blocks that now follow `block` (its regions'
    blocks, then the continuation)."""
    op = block.ops[at]
    if op.name == "upir.while" and EXIT_FLAGS in op.attributes:
        route = _exit_dispatch(block, at, edges, edits)
        cont: list[Block] = []
    else:
        target, target_args, cont, single = _exit(block, at, edges, edits)
        if single:
            # the results' uses past the target take the values of the one exit
            target_args = _taking_exit_values(op, target_args, edits)
        route = _to(target, target_args)
    # the op leaves its block: what it used is used by the branches that replace it
    del block.ops[at]
    edits.drop(op)
    attrs = {k: v for k, v in op.attributes.items()
             if k not in ("predicate", "increment", "predicate_line", "increment_line", DO_WHILE,
                          HEADER_PLACE, EXIT_FLAGS)}
    if HEADER_PLACE in op.attributes and not block.ops:
        edits.placed.append(block)
    if op.name == "upir.while":
        return _lower_while(block, op, attrs, route, edits) + cont
    target, target_args = route(None)
    if op.name == "upir.if":
        return _lower_if(block, op, attrs, target, target_args, edits) + cont
    if DO_WHILE in op.attributes:
        return _lower_do_while_for(block, op, attrs, target, target_args, edits) + cont
    return _lower_for(block, op, attrs, target, target_args, edits) + cont


#: where a loop's exit goes, given the values its `upir.condition` passes (None: the target
#: and the function from the op's result values to the target's arguments)
Route = Callable[[list[Value] | None], tuple[Block, Any]]


def _to(target: Block, target_args: Callable[[list[Value]], list[Value]]) -> Route:
    def route(vals: list[Value] | None) -> tuple[Block, Any]:
        return (target, target_args) if vals is None else (target, target_args(vals))
    return route


def _raised_value(v: Value, name: str) -> bool:
    """Whether `v` is a `name` op the raise made for a multi-exit loop's edge."""
    return isinstance(v, OpResult) and v.op.name == name and RAISED_EDGE in v.op.attributes


def _exit_dispatch(block: Block, at: int, edges: dict[Block, int], edits: UseEdits) -> Route:
    """For a multi-exit while (EXIT_FLAGS): remove the branch after it (its dispatch, and
    the dispatch's blocks), give the results' other uses the one value the exits pass for
    them, and return where each `upir.condition` leaves to: the target its flags name."""
    op = block.ops[at]
    rest = block.ops[at + 1:]
    if len(rest) != 1 or rest[0].name not in ("cf.br", "cf.cond_br"):
        raise IRError("a 'upir.while' with 'exit_flags' must be followed by the branch to "
                      "its exit targets")
    first = rest[0]
    del block.ops[at + 1:]
    dispatch: dict[Block, Operation] = {}
    # (the chain's blocks branch on this op's flags: a target may be another loop's)
    flags = {id(r) for r in op.results[:int(op.attributes[EXIT_FLAGS])]}
    stack = [first]
    while stack:
        t = stack.pop()
        edits.drop(t)
        t.parent = None
        for s in t.successors:
            if len(s.ops) == 1 and EXIT_DISPATCH in s.ops[0].attributes and \
                    s.ops[0].name == "cf.cond_br" and id(s.ops[0].operands[0]) in flags:
                dispatch[s] = s.ops[0]
                stack.append(s.ops[0])
                s.ops = []
                edits.gone.add(s)
            else:
                edges[s] = edges.get(s, 0) - 1
    index = {r: k for k, r in enumerate(op.results)}
    leaving = [c for b in op.regions[0].blocks if b.ops and (c := b.ops[-1]).name == "upir.condition"
               and not _const_test(c.operands[0]) == 1]
    for k, r in enumerate(op.results):
        if not edits.uses(r):
            continue
        vals = {c.operands[k + 1] for c in leaving if not _raised_value(c.operands[k + 1], "upir.undef")}
        if len(vals) != 1:
            raise IRError("a result of a multi-exit 'upir.while' used past its dispatch must be "
                          "passed one value by every exit that defines it")
        edits.replace_all(r, vals.pop())

    def route(vals: list[Value] | None) -> tuple[Block, Any]:
        assert vals is not None
        t = first
        while True:
            k = 0
            if t.name == "cf.cond_br":
                flag = _const_test(vals[index[t.operands[0]]])
                if flag is None:
                    raise IRError("a multi-exit 'upir.while' exits with a flag that is no "
                                  "constant")
                k = 1 - flag
            s, args = t.successors[k], t.successor_args[k]
            if s in dispatch:
                t = dispatch[s]
                continue
            edges[s] = edges.get(s, 0) + 1
            return s, [vals[index[a]] if a in index else a for a in args]
    return route


def _const_test(v: Value) -> int | None:
    """The value of a constant the raise made (a branch that always continues or always
    leaves), else None."""
    if _raised_value(v, "upir.const"):
        return int(v.op.attributes["value"])  # type: ignore[attr-defined]
    return None


def _taking_exit_values(op: Operation, target_args: Callable[[list[Value]], list[Value]],
                        edits: UseEdits) -> Callable[[list[Value]], list[Value]]:
    def args(vals: list[Value]) -> list[Value]:
        for r, v in zip(op.results, vals):
            edits.replace_all(r, v)
        return target_args(vals)
    return args


def _yields_to(region: Region, name: str, rewrite: Callable[[Block, Operation], None],
               edits: UseEdits) -> None:
    for b in region.blocks:
        if b.ops and b.ops[-1].name == name:
            term = b.ops.pop()
            edits.drop(term)
            term.parent = None
            rewrite(b, term)


def _lower_if(block: Block, op: Operation, attrs: dict, target: Block,  # type: ignore[type-arg]
              target_args: Callable[[list[Value]], list[Value]], edits: UseEdits) -> list[Block]:
    succs: list[Block] = []
    succ_args: list[list[Value]] = []
    moved: list[Block] = []
    for region in op.regions:
        only = _only_yields(region)
        if only is not None:
            succs.append(target)
            succ_args.append(target_args(list(only.operands)))
            edits.drop(only)
            continue
        succs.append(region.entry)
        succ_args.append([])
        _forward_bare_yields(region, target, target_args, edits)
        _yields_to(region, "upir.yield", lambda b, y: _terminate(
            b, "cf.br", dict(y.attributes), [], [target], [target_args(list(y.operands))]), edits)
        moved.extend(region.blocks)
    _terminate(block, "cf.cond_br", attrs, [op.operands[0]], succs, succ_args)
    return moved


def _lower_while(block: Block, op: Operation, attrs: dict,  # type: ignore[type-arg]
                 route: Route, edits: UseEdits) -> list[Block]:
    before, after = op.regions
    header = before.entry
    if not block.ops and op.operands == block.args and block.parent is not None and \
            block is not block.parent.entry:
        # the op alone in a block whose arguments it takes (the raise put a loop entered
        # from several places there): that block is the loop's header again
        for a, b in zip(header.args, block.args):
            edits.replace_all(a, b)
        for o in header.ops:
            block.append(o)
        header.ops = []
        before.blocks[0] = header = block
    else:
        _terminate(block, "cf.br", attrs, [], [header], [list(op.operands)])
    # an after region that only passes values back (a do-while: all in the before region)
    only = after.entry.ops[0] if len(after.blocks) == 1 and len(after.entry.ops) == 1 and \
        after.entry.ops[0].name == "upir.yield" else None
    after_args = after.entry.args

    def condition(b: Block, cond: Operation) -> None:
        test, vals = cond.operands[0], list(cond.operands[1:])
        if only is not None:
            sub = dict(zip(after_args, vals))
            go, go_args = header, [sub.get(v, v) for v in only.operands]
        else:
            go, go_args = after.entry, (vals if after.entry.args else [])
        const = _const_test(test)
        if const is not None:
            # (an edge the raise made a condition: a branch that always goes one way)
            to, to_args = (go, go_args) if const else route(vals)
            _terminate(b, "cf.br", dict(cond.attributes), [], [to], [to_args])
            return
        leave, leave_args = route(vals)
        negation = test.op if isinstance(test, OpResult) else None
        if negation is not None and negation.name == "ptx.not" and \
                negation.attributes.get(NEGATED_EXIT) and not edits.uses(test):
            test = negation.operands[0]
            _erase(negation, edits)
            _terminate(b, "cf.cond_br", dict(cond.attributes), [test], [leave, go],
                       [leave_args, go_args])
        else:
            _terminate(b, "cf.cond_br", dict(cond.attributes), [test], [go, leave],
                       [go_args, leave_args])

    conditions = [b.ops[-1] for b in before.blocks if b.ops and b.ops[-1].name == "upir.condition"]
    if only is None and len(conditions) == 1:
        # the one condition's block is the after region's only way in: its values are the
        # after region's (the raise made these arguments; the CFG had none)
        for a, v in zip(after.entry.args, conditions[0].operands[1:]):
            edits.replace_all(a, v)
        after.entry.args = []
    _yields_to(before, "upir.condition", condition, edits)
    if EXIT_FLAGS in op.attributes:
        _drop_raised_values(before, edits)
        _forward_edge_branches(before, edits)
    moved = [b for b in before.blocks if b is not block]
    if only is not None:
        edits.drop(only)
    else:
        _forward_bare_yields(after, header, list, edits)
        _yields_to(after, "upir.yield", lambda b, y: _terminate(
            b, "cf.br", dict(y.attributes), [], [header], [list(y.operands)]), edits)
        moved.extend(after.blocks)
    return moved


def _drop_raised_values(region: Region, edits: UseEdits) -> None:
    """The constants and undefined values the raise made for edges, now unused, go."""
    for b in region.blocks:
        dead = [o for o in b.ops if o.name in ("upir.const", "upir.undef") and
                RAISED_EDGE in o.attributes and not edits.uses(o.results[0])]
        for o in dead:
            _erase(o, edits)


def _forward_edge_branches(region: Region, edits: UseEdits) -> None:
    """Blocks the raise made for a conditional branch's edge out of a multi-exit loop (now
    only a `cf.br` marked RAISED_EDGE) are no block: that edge goes to their target."""
    bare = {b: b.ops[0] for b in region.blocks[1:] if len(b.ops) == 1 and not b.args and
            b.ops[0].name == "cf.br" and RAISED_EDGE in b.ops[0].attributes}
    if not bare:
        return
    for b in region.blocks:
        term = b.ops[-1] if b.ops else None
        if term is None or b in bare:
            continue
        for k, s in enumerate(term.successors):
            br = bare.get(s)
            if br is None:
                continue
            term.successors[k] = br.successors[0]
            term.successor_args[k] = list(br.successor_args[0])
            for v in term.successor_args[k]:
                v.uses.append(term)
    for br in bare.values():
        edits.drop(br)
    region.blocks = [b for b in region.blocks if b not in bare]


def _lower_for(block: Block, op: Operation, attrs: dict, target: Block,  # type: ignore[type-arg]
               target_args: Callable[[list[Value]], list[Value]], edits: UseEdits) -> list[Block]:
    lb, ub, step = op.operands[:3]
    inits = list(op.operands[3:])
    body = op.regions[0]
    header = Block([lb.type] + [v.type for v in inits])
    _terminate(block, "cf.br", attrs, [], [header], [[lb] + inits])
    iv = header.args[0]
    test_attrs: dict = {"mods": list(op.attributes["predicate"])}  # type: ignore[type-arg]
    if "predicate_line" in op.attributes:
        test_attrs["line"] = op.attributes["predicate_line"]
    test = Operation("ptx.setp", [iv, ub], ["i1"], test_attrs)
    header.append(test)
    iters = list(header.args[1:])
    _terminate(header, "cf.cond_br", dict(attrs), [test.results[0]], [body.entry, target],
               [[iv] + iters, target_args(iters)])
    add_attrs: dict = {"mods": list(op.attributes["increment"])}  # type: ignore[type-arg]
    if "increment_line" in op.attributes:
        add_attrs["line"] = op.attributes["increment_line"]
    body_iv = body.entry.args[0]

    def back(b: Block, y: Operation) -> None:
        nxt = Operation("ptx.add", [body_iv, step], [iv.type], dict(add_attrs))
        b.append(nxt)
        _terminate(b, "cf.br", dict(y.attributes), [], [header], [[nxt.results[0]] + list(y.operands)])

    _yields_to(body, "upir.yield", back, edits)
    if any(o.name == "upir.barrier" and o.attributes.get(LOCKSTEP) for o in body.entry.ops):
        # a soft barrier's lockstep counters index the body's arguments: the body keeps them
        return [header] + list(body.blocks)
    # the header is the body's only way in: its arguments are the body's
    for a, v in zip(body.entry.args, header.args):
        edits.replace_all(a, v)
    body.entry.args = []
    term = header.ops[-1]
    for v in term.successor_args[0]:
        edits.unuse(v, term)
    term.successor_args[0] = []
    return [header] + list(body.blocks)


def _lower_do_while_for(block: Block, op: Operation, attrs: dict,  # type: ignore[type-arg]
                        target: Block, target_args: Callable[[list[Value]], list[Value]],
                        edits: UseEdits) -> list[Block]:
    """A for raised from nvcc's guarded do-while (its `do_while` attribute: the guard around
    it is its first test, the verifier checked) back to that loop: the body's entry is the
    header again, its arguments in their order, and the block that yields adds the step and
    compares where the raise found the two instructions, then branches back or out."""
    lb, ub, step = op.operands[:3]
    inits = list(op.operands[3:])
    body = op.regions[0]
    header = body.entry
    k, add_at, test_at = (int(x) for x in op.attributes[DO_WHILE])
    iv = header.args.pop(0)
    header.args.insert(k, iv)
    for i, a in enumerate(header.args):
        a.index = i
    for o in header.ops:
        if o.name == "upir.barrier" and o.attributes.get(LOCKSTEP):
            o.attributes[LOCKSTEP] = sorted(k if j == 0 else j - 1 if j <= k else j
                                            for j in o.attributes[LOCKSTEP])
    _terminate(block, "cf.br", attrs, [], [header], [inits[:k] + [lb] + inits[k:]])
    yields = [b for b in body.blocks if b.ops and b.ops[-1].name == "upir.yield"]
    assert len(yields) == 1, "a do-while for has one yield"
    tail = yields[0]
    y = tail.ops.pop()
    edits.drop(y)
    y.parent = None
    add_attrs: dict = {"mods": list(op.attributes["increment"])}  # type: ignore[type-arg]
    if "increment_line" in op.attributes:
        add_attrs["line"] = op.attributes["increment_line"]
    test_attrs: dict = {"mods": list(op.attributes["predicate"])}  # type: ignore[type-arg]
    if "predicate_line" in op.attributes:
        test_attrs["line"] = op.attributes["predicate_line"]
    nxt = Operation("ptx.add", [iv, step], [iv.type], add_attrs)
    test = Operation("ptx.setp", [nxt.results[0], ub], ["i1"], test_attrs)
    n = len(tail.ops) + 2
    for o, at in ((nxt, n - add_at), (test, n - test_at)):
        o.parent = tail
        tail.ops.insert(max(0, min(at, len(tail.ops))), o)
    if tail.ops.index(test) < tail.ops.index(nxt):      # (the block changed: in order)
        tail.ops.remove(test)
        tail.ops.insert(tail.ops.index(nxt) + 1, test)
    vals = list(y.operands)
    _terminate(tail, "cf.cond_br", dict(y.attributes), [test.results[0]], [header, target],
               [vals[:k] + [nxt.results[0]] + vals[k:], target_args(vals)])
    return list(body.blocks)
