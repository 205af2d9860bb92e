"""IR verifier: structure, terminators, successor arity/types and SSA dominance."""

from __future__ import annotations

from cpuify.errors import IRError
from cpuify.ir.core import (
    Block, BlockArgument, OpResult, Operation, Region, Value, ancestor_in, dominates, dominators,
)
from cpuify.ir.dialects import info, verify_op


def _where(op: Operation) -> str:
    line = op.attributes.get("line")
    return f"'{op.name}'" + (f" (PTX line {line})" if line is not None else "")


def verify(top: Operation) -> None:
    """Raise :class:`IRError` when `top` (and everything nested) is not well formed."""
    _verify_op(top)


def _verify_op(op: Operation) -> None:
    try:
        verify_op(op)
    except IRError as exc:
        raise IRError(f"{_where(op)}: {exc}") from None
    for region in op.regions:
        _verify_region(region)


def _verify_region(region: Region) -> None:
    if not region.blocks:
        raise IRError(f"empty region in '{region.parent.name if region.parent else '?'}'")
    for block in region.blocks:
        term = block.terminator
        for succ in term.successors if term is not None else []:
            if succ.parent is not region:
                raise IRError(f"{_where(term)} branches out of its region")  # type: ignore[arg-type]
    idom = dominators(region)
    cache = _Cache()
    for block in region.blocks:
        if not block.ops:
            raise IRError("block without a terminator")
        for i, op in enumerate(block.ops):
            is_last = i == len(block.ops) - 1
            term = info(op).terminator
            if term and not is_last:
                raise IRError(f"terminator {_where(op)} is not at the end of its block")
            if is_last and not term and region.parent is not None and \
                    region.parent.name not in ("upir.module",):
                raise IRError(f"block ends with non-terminator {_where(op)}")
            if op.parent is not block:
                raise IRError(f"{_where(op)} has a wrong parent link")
            for succ, args in zip(op.successors, op.successor_args):
                if len(args) != len(succ.args):
                    raise IRError(f"{_where(op)} passes {len(args)} value(s) to a block with "
                                  f"{len(succ.args)} argument(s)")
                for a, b in zip(args, succ.args):
                    if a.type != b.type:
                        raise IRError(f"{_where(op)} passes {a.type} to a {b.type} block argument")
            _verify_op(op)
    # dominance of every use nested anywhere below this region's ops
    for block in region.blocks:
        if block not in idom:
            continue   # unreachable: dominance is vacuous
        for i, op in enumerate(block.ops):
            for v in list(op.operands) + [a for args in op.successor_args for a in args]:
                _check_dominance(v, op, block, i, idom, cache)


def _defining_block(v: Value) -> Block | None:
    if isinstance(v, OpResult):
        return v.op.parent
    if isinstance(v, BlockArgument):
        return v.block
    return None


class _Cache:
    """Op positions within blocks and dominator trees of regions, computed once per
    verification (looking them up per use made verification quadratic in block size)."""
    __slots__ = ("positions", "doms")

    def __init__(self) -> None:
        self.positions: dict[Block, dict[Operation, int]] = {}
        self.doms: dict[Region, dict[Block, Block | None]] = {}

    def position(self, op: Operation, block: Block) -> int:
        got = self.positions.get(block)
        if got is None:
            got = self.positions[block] = {o: i for i, o in enumerate(block.ops)}
        return got[op]

    def dominators(self, region: Region) -> dict[Block, Block | None]:
        got = self.doms.get(region)
        if got is None:
            got = self.doms[region] = dominators(region)
        return got


def _check_dominance(v: Value, user: Operation, block: Block, index: int,
                     idom: dict[Block, Block | None], cache: _Cache) -> None:
    def_block = _defining_block(v)
    if def_block is None:
        raise IRError(f"{_where(user)} uses a value of a detached op")
    region = def_block.parent
    if region is None:
        raise IRError(f"{_where(user)} uses a value of a detached block")
    anchor = ancestor_in(user, region)
    if anchor is None:
        raise IRError(f"{_where(user)} uses a value defined in a region that does not enclose it")
    anchor_block = anchor.parent
    assert anchor_block is not None
    if region is not block.parent:
        # the use is nested: check against the enclosing op in the defining region
        local_idom = cache.dominators(region)
        if anchor_block not in local_idom:
            return
        idom_here = local_idom
    else:
        idom_here = idom
    if isinstance(v, OpResult):
        if def_block is anchor_block:
            if cache.position(v.op, anchor_block) >= cache.position(anchor, anchor_block):
                raise IRError(f"{_where(user)} uses a value before its definition")
            return
    elif def_block is anchor_block:
        return
    if def_block not in idom_here or not dominates(idom_here, def_block, anchor_block):
        raise IRError(f"{_where(user)} uses a value that does not dominate it")
