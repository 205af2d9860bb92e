"""select-if-phis on the structured form: a value merged after an if-then (`computed = false;
if (c) { ...; computed = true; }`) becomes a select on the if's condition, as
transforms/ifconvert.py `select_if_phis` does on the CFG, read from the `upir.if` ops and
the branches left in the regions, with no lowering.

The decision is the CFG pass's, made on what the lowering (ir/structured.py) would make of
the regions: a `upir.if` one of whose arms only yields (its edge goes straight to the join)
and whose other arm is one block of no structured op ending in a yield (the CFG's `then`
block) merges its results in a join of two predecessors (the continuation block whose
arguments are the results; or the block the branch after the if goes to, when that branch
alone uses the results and is the only edge into it).  A value is available before the if
where the lowered branch block would see it: defined in the if's block before it, or in a
block that dominates the block of an enclosing op.  A branch triangle left as CFG in a
region (the raise could not nest it) is matched as on the CFG.  Lowered, the IR is the
one the CFG pass makes of the lowered kernel."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from cpuify.ir.core import (
    Block, BlockArgument, Operation, OpResult, Region, Value, defining_block, dominates,
    dominators, predecessors, remove_block_arg, replace_all_uses,
)
from cpuify.ir.dialects import STRUCTURED_OPS
from cpuify.ir.structured import EXIT_FLAGS, RAISED_EDGE, nested_blocks


def copied_from(v: Value, then: Block) -> Value:
    """The value `v` copies, through the movs of block `then` that are copies: one operand
    and one result of its type (not an unpacking mov, whose results are parts of its
    operand, fz_4243_69)."""
    while isinstance(v, OpResult) and v.op.name == "ptx.mov" and len(v.op.operands) == 1 \
            and len(v.op.results) == 1 and v.op.operands[0].type == v.type \
            and v.op.parent is then:
        v = v.op.operands[0]
    return v


def structured_select_if_phis(region: Region) -> int:
    """Replace the values an if-then merges by selects on its condition, in the block body
    `region` in structured form at any depth; returns the number of values replaced."""
    replaced = 0
    doms = _Dominance()
    regions = [region]
    for block in list(nested_blocks(region)):
        for op in [o for o in block.ops if o.name in STRUCTURED_OPS]:
            regions.extend(op.regions)
            if op.name == "upir.if":
                replaced += _select_if_results(block, op, doms)
    for r in regions:
        if len(r.blocks) > 1:
            replaced += _select_triangles(r, doms)
    return replaced


class _Dominance:
    """Dominators of each region's blocks, computed on first use."""
    __slots__ = ("idoms",)

    def __init__(self) -> None:
        self.idoms: dict[int, dict[Block, Block | None]] = {}

    def dominates(self, region: Region, a: Block, b: Block) -> bool:
        idom = self.idoms.get(id(region))
        if idom is None:
            idom = self.idoms[id(region)] = dominators(region)
        return dominates(idom, a, b)


def _visible(v: Value, block: Block, before: Operation, doms: _Dominance) -> bool:
    """Whether the lowered branch that `before` (an op of `block`) becomes sees `v`: defined
    before it in its block, or in a block dominating that of an enclosing structured op,
    in the block body (a value from outside the block body is no block's of its CFG)."""
    owner = defining_block(v)
    if owner is None:
        return False
    node_block, node_op = block, before
    while True:
        if owner is node_block:
            return isinstance(v, BlockArgument) or \
                node_block.ops.index(v.op) < node_block.ops.index(node_op)  # type: ignore[attr-defined]
        region = node_block.parent
        if region is None:
            return False
        if owner.parent is region:
            return doms.dominates(region, owner, node_block)
        parent = region.parent
        if parent is None or parent.name not in STRUCTURED_OPS or parent.parent is None:
            return False
        if parent.name == "upir.while" and region is parent.regions[1] and \
                owner.parent is parent.regions[0] and len(parent.regions[0].blocks) == 1:
            return True         # (the before region's one block: the loop's header)
        node_block, node_op = parent.parent, parent


def _available(v: Value, block: Block, before: Operation, then: Block,
               doms: _Dominance) -> Value | None:
    """v itself when the branch sees it, a fresh constant (before `before`) for a constant
    made or moved in `then`, else None (ifconvert._available on the CFG)."""
    src = copied_from(v, then)
    owner = defining_block(src)
    if owner is None:
        return None
    if owner is not then and _visible(src, block, before, doms):
        return src
    if isinstance(src, OpResult) and src.op.name == "upir.const":
        c = Operation("upir.const", [], [src.type], dict(src.op.attributes))
        c.parent = block
        block.ops.insert(block.ops.index(before), c)
        return c.results[0]
    return None


def select_before(block: Block, before: Operation, pick: list[Value], cond: Value, type_: str,
                  line: object) -> Value:
    """A `selp` of `pick` on `cond` inserted in `block` before `before`."""
    sel = Operation("ptx.selp", [*pick, cond], [type_],
                    {"mods": [f"b{int(type_[1:])}" if type_ != "i1" else "pred"], "line": line})
    sel.parent = block
    block.ops.insert(block.ops.index(before), sel)
    return sel.results[0]


def _then_arm(op: Operation) -> tuple[int, Block] | None:
    """(the index of the arm that only yields, the other arm's one block) of an if-then: the
    other arm one block of no structured op and no arguments, ending in a yield."""
    if len(op.regions) != 2:
        return None
    for k in (0, 1):
        edge, arm = op.regions[k], op.regions[1 - k]
        if len(edge.blocks) != 1 or len(arm.blocks) != 1:
            continue
        e = edge.entry
        if len(e.ops) != 1 or e.args or e.ops[0].name != "upir.yield" or \
                RAISED_EDGE not in e.ops[0].attributes:
            continue
        then = arm.entry
        if then.args or not then.ops or then.ops[-1].name != "upir.yield" or \
                any(o.name in STRUCTURED_OPS for o in then.ops) or \
                (len(then.ops) == 1 and RAISED_EDGE in then.ops[0].attributes):
            continue
        return k, then
    return None


def _select_if_results(block: Block, op: Operation, doms: _Dominance) -> int:
    found = _then_arm(op)
    if found is None or not op.results:
        return 0
    k_join, then = found
    direct_yield = op.regions[k_join].entry.ops[0]
    via_yield = then.ops[-1]
    rest = block.ops[block.ops.index(op) + 1:]
    if len(rest) == 1 and rest[0].name in ("cf.br", "upir.yield") and \
            all(u is rest[0] for r in op.results for u in r.uses):
        # lowered, the if branches to where the branch or yield after it goes, directly
        # (the lowering turns an enclosing op's yield into that branch first): the join
        # when this br is the only edge into it; a yield's target (an enclosing if's join,
        # a loop's header) has another way in besides the if's two
        if rest[0].name == "upir.yield":
            return 0
        return _select_at_target(block, op, rest[0], direct_yield, via_yield, k_join, then, doms)
    replaced = 0
    cond = op.operands[0]
    for r in list(op.results):
        j = r.index
        direct, via = direct_yield.operands[j], via_yield.operands[j]
        value = _available(via, block, op, then, doms)
        if value is None:
            continue
        pick = [direct, value] if k_join == 0 else [value, direct]
        sel = select_before(block, op, pick, cond, r.type, op.attr("line", 0))
        replace_all_uses(r, sel)
        _drop_result(op, j, (direct_yield, via_yield))
        replaced += 1
    return replaced


def _select_at_target(block: Block, op: Operation, br: Operation, direct_yield: Operation,
                      via_yield: Operation, k_join: int, then: Block, doms: _Dominance) -> int:
    join = br.successors[0]
    region = block.parent
    if region is None or join.parent is not region or join is region.entry or \
            sum(s is join for b in region.blocks for s in b.successors) != 1:
        return 0
    index = {r: j for j, r in enumerate(op.results)}
    replaced = 0
    cond = op.operands[0]
    for arg in list(join.args):
        a = br.successor_args[0][arg.index]
        j = index.get(a)
        direct = direct_yield.operands[j] if j is not None else a
        via = via_yield.operands[j] if j is not None else a
        value = _available(via, block, op, then, doms)
        if value is None:
            continue
        pick = [direct, value] if k_join == 0 else [value, direct]
        sel = select_before(block, op, pick, cond, arg.type, op.attr("line", 0))
        remove_block_arg(join, arg, sel, [(br, 0)])
        replaced += 1
    # (results no branch passes on any more go, with what the arms yield for them)
    for r in reversed(list(op.results)):
        if not r.uses:
            _drop_result(op, r.index, (direct_yield, via_yield))
    return replaced


def _drop_result(op: Operation, j: int, yields: tuple[Operation, ...]) -> None:
    """Remove the if's result j and the values its arms yield for it."""
    for y in yields:
        removed = y.operands.pop(j)
        removed.uses.remove(y)
    op.results.pop(j)
    for i, r in enumerate(op.results):
        r.index = i


def if_then_triangles(region: Region) -> Iterator[tuple[Block, Block, Block, Operation]]:
    """(join, branch, then, the branch's cond_br) for each if-then left as CFG in `region`:
    `branch` goes to `then` and to `join` (which has block arguments and no other
    predecessor), `then` is entered only from `branch`, holds no structured op and goes
    on to `join`; at most one per join.  Not where the branch follows a while with exit
    flags: nothing may go between them (ir/dialects.py; fz_4244_642)."""
    preds = predecessors(region)
    for join in list(region.blocks):
        if len(join.args) == 0 or len(preds.get(join, [])) != 2:
            continue
        for branch, then in (preds[join], preds[join][::-1]):
            term = branch.terminator
            if term is None or term.name != "cf.cond_br" or then is branch or \
                    preds.get(then) != [branch] or then.terminator is None or \
                    then.terminator.name != "cf.br" or then.terminator.successors != [join] or \
                    any(o.name in STRUCTURED_OPS for o in then.ops):
                continue
            if sorted(map(id, term.successors)) != sorted(map(id, (join, then))):
                continue
            if len(branch.ops) >= 2 and EXIT_FLAGS in branch.ops[-2].attributes:
                continue
            yield join, branch, then, term
            break


def _select_triangles(region: Region, doms: _Dominance) -> int:
    """ifconvert.select_if_phis on a region's branches left as CFG: `then` a block of no
    structured op (lowered, still one block), the branch's own block ending in it."""
    return select_triangle_phis(
        region, lambda via, branch, term, then: _available(via, branch, term, then, doms))


def select_triangle_phis(region: Region,
                         available: Callable[[Value, Block, Operation, Block], Value | None]
                         ) -> int:
    """Each argument of an if-then triangle's join (if_then_triangles) whose value through
    `then` is `available(via, branch, term, then)` before the branch's terminator `term`
    replaced by a select on the branch condition; the number replaced.  The CFG pass and
    the structured one's triangles differ only in what they find available."""
    replaced = 0
    for join, branch, then, term in if_then_triangles(region):
        k_join = term.successors.index(join)
        for arg in list(join.args):
            direct = term.successor_args[k_join][arg.index]
            via = then.terminator.successor_args[0][arg.index]
            # (the value on the direct edge is one `branch` sees; the one through `then`
            # may need a constant of its own, made only when the rewrite happens)
            value = available(via, branch, term, then)
            if value is None:
                continue
            # the condition sends threads to `join` directly when true if join is the
            # first successor
            pick = [direct, value] if k_join == 0 else [value, direct]
            sel = select_before(branch, term, pick, term.operands[0], arg.type,
                                term.attr("line", 0))
            remove_block_arg(join, arg, sel, [(term, k_join), (then.terminator, 0)])
            replaced += 1
    return replaced
