"""Structure and guards for tiles-in-place (transforms/tiles_in_place.py): the block body as
a chain of blocks, the bound guards a tile may be staged under, and copies of the body.

A guarded staging store is the usual form in real code:

    if (row < n && col < n) tile[ty][tx] = a[row * n + col]; else tile[ty][tx] = 0.0f;

Read in place, `tile[k][tx]` is `a[...]` only where its storing thread's guard held.  The
version reading in place runs for blocks whose every thread passes the guard (the interior
of the matrix); blocks at the edge take the body as it was.  The check is cheap and exact
when the guard is convex in the thread index: a conjunction of comparisons of expressions
affine in it (`row < n` with row = row0 + ty) holds on a set of threads that is convex, so
it holds for every thread of the block when it holds at the block's corners (2, 4 or 8
threads, evaluated at the block's start).  Disjunctions (`row < n || col < n`), `!=`, and
unsigned comparisons whose thread-dependent side is the larger one hold on sets with holes
and are not taken."""

from __future__ import annotations

from typing import Callable

from cpuify.ir.core import Block, BlockArgument, OpResult, Operation, Region, Value, replace_all_uses
from cpuify.ir.modifiers import mods

#: the comparison a negated `setp` makes (integers: no unordered results)
_NEGATED = {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le", "eq": "ne", "ne": "eq"}
_INT_TYPES = ("s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "b16", "b32", "b64")


def body_chain(region: Region) -> list[Block] | None:
    """The region's blocks when they run one after the other (each but the last ends in an
    unconditional `cf.br` to the next; the last in `upir.exit`), in that order; None for any
    other shape."""
    if not region.blocks or region.blocks[0].args:
        return None
    chain = [region.blocks[0]]
    while True:
        block = chain[-1]
        term = block.terminator
        if term is None:
            return None
        if term.name == "upir.exit":
            return chain if len(chain) == len(region.blocks) else None
        if term.name != "cf.br" or len(term.successors) != 1:
            return None
        follow = term.successors[0]
        if follow in chain:
            return None
        chain.append(follow)


def convex_guard(v: Value, positive: bool, linear: Callable[[Value], bool],
                 depends: Callable[[Value], bool]) -> bool:
    """Whether the threads where predicate v is `positive` form a convex set of thread
    indices: a conjunction (after pushing negations inward) of integer comparisons of
    expressions `linear` in the thread index, each one holding on a half-space, a
    hyperplane or (unsigned `x < b`, b thread-independent: 0 <= x < b) an interval.
    Thread-independent predicates, pure, hold for all threads of a block or none."""
    if not isinstance(v, OpResult):
        return not depends(v)
    op = v.op
    if not depends(v):
        return linear(v)
    m = mods(op)
    if op.name == "ptx.not" and len(op.operands) == 1:
        return convex_guard(op.operands[0], not positive, linear, depends)
    if op.name in ("ptx.and", "ptx.or") and len(op.operands) == 2:
        if (op.name == "ptx.and") != positive:
            return False                    # a disjunction: a set with holes
        return all(convex_guard(o, positive, linear, depends) for o in op.operands)
    if op.name != "ptx.setp" or len(op.operands) != 2 or len(m) != 2 or m[1] not in _INT_TYPES:
        return False
    cmp = m[0] if positive else _NEGATED.get(m[0], "")
    left, right = op.operands
    if not (linear(left) and linear(right)):
        return False
    if m[1].startswith("u"):
        # x <u b with b thread-independent holds for 0 <= x < b (32-bit index arithmetic not
        # wrapping): an interval of x; b <u x (x > b) holds on two pieces
        if cmp in ("lt", "le"):
            return not depends(right)
        if cmp in ("gt", "ge"):
            return not depends(left)
        return cmp == "eq"
    return cmp in ("lt", "le", "gt", "ge", "eq")


def corners(dims: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    """The corner threads of a block of shape dims (each extent's first and last index)."""
    out = [(0, 0, 0)]
    for d in range(3):
        if dims[d] > 1:
            out = out + [tuple(dims[d] - 1 if e == d else t[e] for e in range(3))  # type: ignore[misc]
                         for t in out]
    return out


def clone_blocks(blocks: list[Block], vmap: dict[Value, Value],
                 opmap: dict[Operation, Operation]) -> list[Block]:
    """Copies of `blocks` (nested regions included), branches between them retargeted;
    vmap and opmap receive original -> copy for values and ops."""
    copies = _clone_blocks(blocks, vmap, opmap)
    for block in copies:                    # uses that preceded their definition
        for top in block.ops:
            for op in top.walk():
                for i, o in enumerate(op.operands):
                    if vmap.get(o, o) is not o:
                        op.set_operand(i, vmap[o])
    return copies


def _clone_blocks(blocks: list[Block], vmap: dict[Value, Value],
                  opmap: dict[Operation, Operation]) -> list[Block]:
    copies = []
    bmap: dict[Block, Block] = {}
    for b in blocks:
        nb = Block([a.type for a in b.args])
        for a, na in zip(b.args, nb.args):
            vmap[a] = na
        bmap[b] = nb
        copies.append(nb)
    for b, nb in zip(blocks, copies):
        for op in b.ops:
            regions = [Region(_clone_blocks(r.blocks, vmap, opmap)) for r in op.regions]
            new = Operation(op.name, [vmap.get(o, o) for o in op.operands], [r.type for r in op.results],
                            {k: (list(x) if isinstance(x, list) else x) for k, x in op.attributes.items()},
                            regions=regions, successors=[bmap.get(s, s) for s in op.successors],
                            successor_args=[[vmap.get(x, x) for x in args] for args in op.successor_args])
            for r, n in zip(op.results, new.results):
                n.hint = r.hint
                vmap[r] = n
            opmap[op] = new
            nb.append(new)
    return copies


def incoming(v: Value, chain: list[Block]) -> Value:
    """What a block argument of a chain block is passed from the block before it (else v)."""
    if isinstance(v, BlockArgument) and v.block in chain[1:]:
        term = chain[chain.index(v.block) - 1].terminator
        assert term is not None
        return term.successor_args[0][v.index]
    return v


def yielded(if_op: Operation, arm: int, index: int) -> Value | None:
    """The value arm `arm` of a `upir.if` yields as its result `index` (one yield in the arm)."""
    yields = [op for b in if_op.regions[arm].blocks for op in b.ops if op.name == "upir.yield"]
    return yields[0].operands[index] if len(yields) == 1 and len(yields[0].operands) > index else None


def guards_of_work(blocks: list[Block], convex: Callable[[Value, bool], bool]) -> list[tuple[Operation, int]]:
    """The `upir.if`s among `blocks`' ops (not nested) that guard work with a bound test
    (`if (row < n && col < n) a[..] -= sum;`): one arm only yields, the other is one block,
    and the threads taking that arm form a convex set (`convex(condition, arm == 0)`), so
    the arm is taken by every thread of a block when it is at the block's corners.  Each
    with the arm that works."""
    picks = []
    for block in blocks:
        for op in block.ops:
            if op.name != "upir.if" or len(op.regions) != 2:
                continue
            empty = [all(o.name in ("upir.yield", "cf.br") for b in r.blocks for o in b.ops) for r in op.regions]
            if empty.count(True) != 1:
                continue
            arm = empty.index(False)
            region = op.regions[arm]
            if len(region.blocks) == 1 and region.blocks[0].ops[-1].name == "upir.yield" and \
                    convex(op.operands[0], arm == 0):
                picks.append((op, arm))
    return picks


def unguarded_inside(fast: list[Block], dims: tuple[int, int, int], line: int,
                     convex: Callable[[Value, bool], bool],
                     at_thread: Callable[[Value, tuple[int, int, int]], Value],
                     op: Callable[[str, list[Value], str, list[str]], Value]) -> list[Block]:
    """`fast` (blocks ending in a yield) with its bound guards on work (guards_of_work)
    dropped in a copy that runs when each guard holds at every corner of the block (the
    check made with `at_thread` and `op` at the block's start), else `fast` as it is.  LLVM
    sinks what only a guarded store uses under the guard and then masks it: a load the same
    for a row of threads (`left[ty][k]`) becomes a 16-lane gather."""
    picks = guards_of_work(fast, convex)
    if not picks:
        return fast
    inside: Value | None = None
    for if_op, arm in picks:
        for corner in corners(dims):
            held = at_thread(if_op.operands[0], corner)
            if arm:
                held = op("ptx.not", [held], "i1", ["pred"])
            inside = held if inside is None else op("ptx.and", [inside, held], "i1", ["pred"])
    assert inside is not None
    copied: dict[Operation, Operation] = {}
    unguarded = clone_blocks(fast, {}, copied)
    inline_arms([(copied[o], arm) for o, arm in picks])
    block = Block()
    block.append(Operation("upir.if", [inside], [], {"line": line},
                           regions=[Region(unguarded), Region(fast)]))
    block.append(Operation("upir.yield", [], [], {"line": line}))
    return [block]


def inline_arms(picks: list[tuple[Operation, int]]) -> None:
    """Each `upir.if` of `picks` replaced by the ops of its arm (what the arm yields in place
    of its results)."""
    for if_op, arm in picks:
        (block,) = if_op.regions[arm].blocks
        term = block.ops[-1]
        moved = block.ops[:-1]
        block.ops = [term]
        splice_before(if_op, moved)
        for result, value in zip(if_op.results, term.operands):
            replace_all_uses(result, value)
        remove_op(if_op)


def remove_op(op: Operation) -> None:
    """Take `op` (and what its regions hold) out of its block, its operands' uses dropped."""
    for inner in op.walk():
        inner.drop_uses()
    block = op.parent
    assert block is not None
    block.ops.remove(op)
    op.parent = None


def splice_before(op: Operation, new_ops: list[Operation]) -> None:
    """Put `new_ops` in `op`'s block just before it."""
    block = op.parent
    assert block is not None
    at = block.ops.index(op)
    for n in new_ops:
        n.parent = block
    block.ops[at:at] = new_ops


def nested_in(ops: list[Operation]) -> set[Operation]:
    """The ops nested in the regions of `ops` (not those ops themselves)."""
    return {inner for op in ops for region in op.regions for b in region.blocks
            for top in b.ops for inner in top.walk()}


def defined_in(v: Value, ops: set[Operation]) -> bool:
    """Whether v is a result of one of `ops`."""
    return isinstance(v, OpResult) and v.op in ops


__all__ = ["body_chain", "clone_blocks", "convex_guard", "corners", "defined_in", "guards_of_work",
           "incoming", "inline_arms", "nested_in", "remove_op", "splice_before", "unguarded_inside",
           "yielded"]
