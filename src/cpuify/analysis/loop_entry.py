"""What the branches on the way to a block prove about 32-bit values: `start < bound`
(signed) on every path into a loop.

nvcc guards every counted loop it unrolls with the loop's own first test, taken before the
trip count is computed:

    setp.lt.s32 %p2, %n, 1;   @%p2 bra skip;        // for (c = 0; c < n; c++)
    setp.le.s32 %p2, %n, %c0; @%p2 bra skip;        // for (c = c0; c < n; c++)

so the code that computes `n - c0 - 1` is reached only with `c0 < n`.  `start_below_bound`
finds such a branch among the dominators of a block: an edge `d -> s` whose target `s` has
`d` as its only predecessor and dominates the block is taken on every path to it, and the
condition of `d`'s branch holds there (its operands are SSA values: they cannot change on
the way).  Conditions are `setp.{lt,le,gt,ge}.s32`, negated (`not.pred`), or several of them
joined by `and.pred` on the taken edge or `or.pred` on the edge not taken."""

from __future__ import annotations

from cpuify.analysis.evolution import Syms
from cpuify.ir.core import Block, OpResult, Region, Value, dominators, predecessors

#: how deep the conditions of one branch are followed through and/or/not
_DEPTH = 8


def start_below_bound(region: Region, block: Block, start: Value, bound: Value) -> bool:
    """Whether `start < bound` (signed 32-bit) holds on every path from the region's entry to
    `block`, by a branch whose edge every such path takes."""
    idom = dominators(region)
    preds = predecessors(region)
    syms = Syms()
    want_start = syms.outside(start, set())
    want_bound = syms.outside(bound, set())
    child = block
    while True:
        parent = idom.get(child)
        if parent is None or parent is child:
            return False
        term = parent.terminator
        if term is not None and term.name == "cf.cond_br" and \
                term.successors.count(child) == 1 and preds.get(child) == [parent]:
            taken = term.successors.index(child) == 0
            for low, high, strict in _facts(term.operands[0], taken, 0):
                if _proves(syms, low, high, strict, want_start, want_bound):
                    return True
        child = parent


def _facts(cond: Value, taken: bool, depth: int) -> list[tuple[Value, Value, bool]]:
    """(low, high, strict): `low < high` (strict) or `low <= high`, signed 32-bit, known where
    `cond` is `taken`."""
    if not isinstance(cond, OpResult) or depth > _DEPTH:
        return []
    op = cond.op
    mods = op.attributes.get("mods", ())
    if op.name == "ptx.setp" and len(op.operands) == 2 and len(mods) == 2 and "s32" in mods:
        a, b = op.operands
        # cmp -> (low, high, strict) when the comparison is true, and when it is false
        table = {"lt": ((a, b, True), (b, a, False)), "le": ((a, b, False), (b, a, True)),
                 "gt": ((b, a, True), (a, b, False)), "ge": ((b, a, False), (a, b, True))}
        cmp = next((m for m in mods if m in table), None)
        return [table[cmp][0 if taken else 1]] if cmp is not None else []
    if mods != ["pred"]:
        return []
    if op.name == "ptx.not" and len(op.operands) == 1:
        return _facts(op.operands[0], not taken, depth + 1)
    if (op.name == "ptx.and" and taken) or (op.name == "ptx.or" and not taken):
        return [f for o in op.operands for f in _facts(o, taken, depth + 1)]
    return []


def _proves(syms: Syms, low: Value, high: Value, strict: bool, start: int, bound: int) -> bool:
    """Whether `low < high` (or `<=`) implies `start < bound`: the same two values, or a
    constant start below a constant low by one (`1 <= n` proves `0 < n`)."""
    if syms.outside(high, set()) != bound:
        return False
    low_sym = syms.outside(low, set())
    if strict:
        return low_sym == start
    a, b = syms.const_of(low_sym), syms.const_of(start)
    return a is not None and b is not None and _signed(a) == _signed(b) + 1


def _signed(c: int) -> int:
    return c - (1 << 32) if c >> 31 else c
