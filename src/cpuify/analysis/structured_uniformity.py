"""Divergence analysis on structured control flow: which values are the same in every thread
of a block, read from `upir.if`/`upir.while`/`upir.for` regions (and from what stayed CFG
inside them) without lowering them.

The same rules as the CFG analysis (analysis/uniformity.py `uniform_values`), stated for
regions:

  * an op result is uniform when the op may be (pure, no per-thread state) and its
    operands are;
  * a value passed on (ir/structured.py `forwarded_values`: an initial value, a yield, a
    condition's values, a branch argument) keeps the merged value uniform only when it is;
    a `upir.for`'s induction variable is uniform when its lower bound and step are;
  * divergence: a `upir.if` whose condition is not uniform (and not marked
    `uniform_condition`) makes its results non-uniform (the threads meet where it ends, the
    CFG's post-dominator); a loop whose exit test is not uniform (a while's
    `upir.condition`, a for's bounds or step) makes its carried values and results
    non-uniform (threads leave at different iterations: the CFG's loop header merging); a
    branch left as CFG in a region divides its blocks as on the CFG and, when its ways leave
    the region by different terminators, the merges of the op that owns the region.

Loops inside one arm of a divergent `if`, with uniform exits, stay uniform inside (they run
alike in the threads that run them), as on the CFG."""

from __future__ import annotations

from cpuify.analysis.cfg import immediate_post_dominators
from cpuify.analysis.uniformity import (
    UNIFORM_CONDITION, _divergent_arms, _dividing_branch, _loop_around, _op_may_be_uniform,
)
from cpuify.ir.core import Operation, Region, Value, dominators
from cpuify.ir.dialects import STRUCTURED_OPS
from cpuify.ir.structured import forwarded_values, nested_blocks


def structured_uniform_values(region: Region) -> set[Value]:
    """Values equal in every thread of a block, for a block body in structured form (or a
    CFG, or both mixed): the greatest set the rules of the module doc allow."""
    uniform: set[Value] = set()
    op_users: dict[Value, list[Operation]] = {}
    merged_into: dict[Value, list[Value]] = {}
    structured: list[Operation] = []
    regions: list[Region] = [region]
    for b in nested_blocks(region):
        uniform.update(b.args)
        for op in b.ops:
            if op.name in STRUCTURED_OPS:
                structured.append(op)
                regions.extend(op.regions)
                uniform.update(op.results)
                if op.name == "upir.for":
                    iv = op.regions[0].entry.args[0]
                    for bound in (op.operands[0], op.operands[2]):
                        merged_into.setdefault(bound, []).append(iv)
            elif _op_may_be_uniform(op) or op.name == "upir.undef":
                # (the raise's placeholders for the values an exit of a multi-exit while
                # does not pass on: no value at all on the CFG, any one value here)
                uniform.update(op.results)
            if op.results and op.name not in STRUCTURED_OPS:
                for o in op.operands:
                    op_users.setdefault(o, []).append(op)
            for v, to in forwarded_values(op) or ():
                merged_into.setdefault(v, []).append(to)
    work: list[Value] = []

    def kill(v: Value) -> None:
        if v in uniform:
            uniform.discard(v)
            work.append(v)

    for v, tos in merged_into.items():
        if v not in uniform:
            for to in tos:
                kill(to)
    for b in nested_blocks(region):
        for op in b.ops:
            if op.name not in STRUCTURED_OPS and op.results and op.results[0] in uniform and \
                    not all(o in uniform for o in op.operands):
                for r in op.results:
                    kill(r)

    def propagate() -> None:
        while work:
            v = work.pop()
            for to in merged_into.get(v, ()):
                kill(to)
            for op in op_users.get(v, ()):
                if op.results[0] in uniform:
                    for r in op.results:
                        kill(r)

    propagate()
    divergent: set[Operation] = set()
    while True:
        before = len(divergent)
        for op in structured:
            if op not in divergent and exits_apart(op, uniform):
                divergent.add(op)
        for r in regions:
            _divide_cfg(r, uniform, divergent, kill)
        for op in divergent:
            for v in _merges(op):
                kill(v)
        if not work and len(divergent) == before:
            return uniform
        propagate()


def exits_apart(op: Operation, uniform: set[Value]) -> bool:
    """Whether the threads may leave the structured op `op` apart: an if on a condition that
    is not uniform, a loop whose exit test is not."""
    if op.name == "upir.if":
        return op.operands[0] not in uniform and not op.attributes.get(UNIFORM_CONDITION)
    if op.name == "upir.for":
        return any(v not in uniform for v in op.operands[:3])
    return any(b.ops and b.ops[-1].name == "upir.condition" and
               b.ops[-1].operands[0] not in uniform for b in op.regions[0].blocks)


def _merges(op: Operation) -> list[Value]:
    """The values where the threads' ways through `op` meet: its results, and a loop's
    carried values (its regions' entry arguments)."""
    out = list(op.results)
    if op.name != "upir.if":
        for r in op.regions:
            if r.blocks:
                out.extend(r.entry.args)
    return out


def _divide_cfg(region: Region, uniform: set[Value], divergent: set[Operation],
                kill) -> None:  # type: ignore[no-untyped-def]
    """The CFG rule on the branches left in `region`: block arguments where a dividing
    branch's ways meet (its post-dominator in the region, blocks both reach, the headers of
    loops around it) are not uniform; ways that leave the region by different terminators
    meet in the merges of the op owning it."""
    if not any(b.ops and b.ops[-1].name == "cf.cond_br" for b in region.blocks):
        return
    ipdom = immediate_post_dominators(region)
    idom = None
    for b in region.blocks:
        term = _dividing_branch(b, uniform)
        if term is None:
            continue
        join = ipdom.get(b)
        arms = _divergent_arms(term, join)
        if idom is None:
            idom = dominators(region)
        for x, ks in arms.items():
            if x is join or len(ks) > 1 or _loop_around(x, b, idom):
                for a in x.args:
                    kill(a)
        owner = region.parent
        if join is None and owner is not None and owner.name in STRUCTURED_OPS:
            ends = {x for x in arms if not x.successors}
            if len(ends) > 1:
                divergent.add(owner)
