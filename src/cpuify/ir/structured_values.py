"""Values merged by structured control flow: what flows into each block argument and each
structured op's result, read from the regions (ir/structured.py `forwarded_values`) as
analysis/cfg.py `incoming_values` reads a CFG's branches.  Analyses that follow values
through merges (invariance, address-only values) work on either form with it."""

from __future__ import annotations

from cpuify.ir.core import Region, Value
from cpuify.ir.dialects import STRUCTURED_OPS
from cpuify.ir.structured import forwarded_values, nested_blocks


def merged_values(region: Region) -> dict[Value, list[Value]]:
    """Block arguments and structured ops' results (of `region` at any depth) -> the values
    passed into them; a for's induction variable -> its lower bound and step (the header's
    incoming values once lowered are the lower bound and `iv + step`)."""
    incoming: dict[Value, list[Value]] = {}
    for b in nested_blocks(region):
        for op in b.ops:
            for v, a in forwarded_values(op) or ():
                incoming.setdefault(a, []).append(v)
            if op.name == "upir.for" and op.regions[0].blocks:
                incoming.setdefault(op.regions[0].entry.args[0], []).extend(
                    [op.operands[0], op.operands[2]])
    return incoming


def has_nested_structure(region: Region) -> bool:
    """Whether `region`'s blocks hold a structured op (the block body is in structured form)."""
    return any(op.name in STRUCTURED_OPS for b in region.blocks for op in b.ops)
