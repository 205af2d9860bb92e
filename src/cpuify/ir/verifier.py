"""IR verifier: structure, terminators, successor arity/types and SSA dominance."""

from __future__ import annotations

from cpuify.errors import IRError
from cpuify.ir.core import Block, BlockArgument, OpResult, Operation, Region, dominates, dominators
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
    idom = dominators(region)
    position: dict[Operation, int] = {}
    for block in region.blocks:
        for i, op in enumerate(block.ops):
            position[op] = i
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
                if succ.parent is not region:
                    raise IRError(f"{_where(op)} branches out of its region")
                if len(args) != len(succ.args):
                    raise IRError(f"{_where(op)} passes {len(args)} value(s) to a block with "
                                  f"{len(succ.args)} argument(s)")
                for a, b in zip(args, succ.args):
                    if a.type != b.type:
                        raise IRError(f"{_where(op)} passes {a.type} to a {b.type} block argument")
            if block not in idom:
                continue   # unreachable: dominance is vacuous
            for v in list(op.operands) + [a for args in op.successor_args for a in args]:
                _check_dominance(v, op, block, i, idom, position)
            _verify_op(op)


def _check_dominance(v: object, op: Operation, block: Block, index: int,
                     idom: dict[Block, Block | None], position: dict[Operation, int]) -> None:
    if isinstance(v, OpResult):
        def_op = v.op
        def_block = def_op.parent
        if def_block is block:
            if position.get(def_op, index) >= index:
                raise IRError(f"{_where(op)} uses a value before its definition")
            return
        if def_block is None:
            raise IRError(f"{_where(op)} uses a value of a detached op")
        # a value defined in an enclosing region dominates everything nested
        if def_block.parent is not block.parent:
            return
        if def_block not in idom or not dominates(idom, def_block, block):
            raise IRError(f"{_where(op)} uses %{def_op.name} result that does not dominate it")
    elif isinstance(v, BlockArgument):
        if v.block.parent is block.parent and v.block is not block:
            if v.block not in idom or not dominates(idom, v.block, block):
                raise IRError(f"{_where(op)} uses a block argument that does not dominate it")
