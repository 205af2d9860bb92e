"""If-conversions before the barrier planner: conditional swaps (if_convert_swaps, below)
and flags set in an `if` (select_if_phis, at the end).

Conditional swaps: the compare-exchange of sorting networks.

    a = s[p]; b = s[q];
    if ((a > b) == ascending) { s[p] = b; s[q] = a; }

takes its branch at random on unsorted keys.  In a thread loop the branch keeps LLVM from
vectorizing the loop where the partner index is not affine (it stays scalar, a mispredicted
branch per pair), and where it is, the stores become masked.  Rewritten as

    s[p] = c ? b : a; s[q] = c ? a : b;

the loop is straight-line code: whole-vector stores, or branch-free scalar code.

Why writing back an unchanged value is invisible: the thread read `s[p]` earlier in the same
barrier interval, and nothing of its own ordered memory between that read and the write.
Another thread writing `s[p]` in that interval would race with that read (undefined in
CUDA), so no other write can be lost; a thread reading `s[p]` sees the value it would have
seen anyway.  The rewrite is limited to *swaps*: every store goes to a location the thread
just read and stores a value read from one of the locations it stores to.  A racy-by-design
update such as `if (v < m[k]) m[k] = v` (several threads lowering one minimum) stores a value
read elsewhere, so it keeps its branch: writing the old value back there could undo another
thread's update.  Only plain (weak) scalar loads and stores of shared or global memory qualify."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cpuify.ir.core import (
    Block, Operation, OpResult, Region, Value, dominators, predecessors,
)
from cpuify.ir.dialects import STRUCTURED_OPS, info
from cpuify.ir.modifiers import ORDERED as _ORDERED, mods, ty
from cpuify.ir.structure import block_body
from cpuify.ir.structured import RAISED_EDGE, nested_blocks
from cpuify.ir.structured_values import has_nested_structure
from cpuify.analysis.manager import AnalysisManager
from cpuify.transforms.pass_manager import register
from cpuify.transforms.structured_selects import (
    copied_from, select_triangle_phis, structured_select_if_phis,
)

_SPACES = ("shared", "global")


@register("if-convert-swaps", "conditional swaps made branch-free (compare-exchange: stores of selects)")
@dataclass(frozen=True)
class IfConvertSwaps:
    """Pass: branch-free conditional swaps.  It works on structured control flow: a swap is
    a `upir.if` whose one arm only stores (structured_if_convert_swaps)."""
    name: str = "if-convert-swaps"
    form: ClassVar[str] = "structured"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of `if`s converted."""
        return structured_if_convert_swaps(block_body(kernel))


@register("select-if-phis", "values merged after an if turned into selects (recomputable across barriers)")
@dataclass(frozen=True)
class SelectIfPhis:
    """Pass: flags set in an `if` become selects on the branch condition, on either form
    (structured: the results of `upir.if` ops, transforms/structured_selects.py)."""
    name: str = "select-if-phis"
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of merged values (block arguments, if results) replaced."""
        region = block_body(kernel)
        if has_nested_structure(region):
            return structured_select_if_phis(region)
        return select_if_phis(region)


def structured_if_convert_swaps(region: Region) -> int:
    """Conditional swaps of a block body in structured form, at any depth of nesting: a
    `upir.if` with no results whose one arm is one block of stores (ending in the yield of
    the branch it was raised from) and whose other arm only yields, followed only by the
    branch or yield to its join, the stores a swap of values loaded before the `if` in its
    block (_swap_loads).  The stores move in front of
    the `if`, each of a select on its condition, and the `if` goes: its block goes on to
    the join as before (the CFG's branch, the `if`'s line).  Branches left as CFG in any
    region (the raise could not nest them) are matched as on the CFG (if_convert_swaps).
    Returns the number of `if`s converted."""
    converted = 0
    regions = [region]
    for block in list(nested_blocks(region)):
        for op in [o for o in block.ops if o.name in STRUCTURED_OPS]:
            regions.extend(op.regions)      # (an if converted below has only stores inside)
            if op.name == "upir.if" and _convert_swap_if(block, op):
                converted += 1
    for r in regions:
        if r.parent is not None and (r.parent.parent is not None or r is region):
            converted += if_convert_swaps(r)
    return converted


def _swap_arm(op: Operation) -> tuple[Block, bool] | None:
    """(the arm's block, whether it is the then arm) of a `upir.if` with no results, one arm
    a single block with no nested ops that ends in a yield of nothing, the other arm only a
    yield of an edge (the CFG's triangle: the branch's other way goes straight to the
    join)."""
    if op.results or len(op.regions) != 2:
        return None
    for k in (0, 1):
        arm, other = op.regions[k], op.regions[1 - k]
        if len(arm.blocks) != 1 or len(other.blocks) != 1:
            continue
        block, edge = arm.entry, other.entry
        if len(edge.ops) != 1 or edge.ops[0].name != "upir.yield" or edge.ops[0].operands or \
                RAISED_EDGE not in edge.ops[0].attributes:
            continue
        last = block.ops[-1] if block.ops else None
        if last is None or last.name != "upir.yield" or last.operands or \
                RAISED_EDGE in last.attributes:
            continue
        return block, k == 0
    return None


def _convert_swap_if(block: Block, op: Operation) -> bool:
    """Rewrite the swap `op` (a `upir.if` in `block`) as stores of selects; False (nothing
    changed) when it is no swap."""
    found = _swap_arm(op)
    at = block.ops.index(op)
    after = block.ops[at + 1:]
    # the if goes on to its join: by the branch the raise put after it, or by the yield it
    # became where the join is also the enclosing arm's or loop body's end (a swap nested
    # in an if that shares its join: the CFG's triangle all the same)
    if found is None or len(after) != 1 or after[0].name not in ("cf.br", "upir.yield"):
        return False
    arm, then_first = found
    stores = _swap_loads(block.ops[:at], arm.ops[:-1])
    if stores is None:
        return False
    _stores_of_selects(block, at, stores, op.operands[0], then_first)
    block.ops.remove(op)
    op.drop_uses()
    arm.ops[-1].drop_uses()
    arm.ops.clear()
    for region in op.regions:
        region.blocks.clear()
    op.parent = None
    # (the branch or yield that goes on to the join: the if's line, as the CFG's conversion
    # leaves the branch that replaced the conditional one; a yield keeps what else it
    # carries, a loop's back edge marks)
    after[0].attributes = {**(after[0].attributes if after[0].name == "upir.yield" else {}),
                           "line": op.attr("line", 0)}
    return True


def if_convert_swaps(region: Region) -> int:
    """Conditional swaps of a region in CFG form (a `cf.cond_br` whose one way is a block of
    stores that branches on to the other way)."""
    converted = 0
    preds = predecessors(region)
    for block in list(region.blocks):
        term = block.terminator
        if term is None or term.name != "cf.cond_br" or any(term.successor_args):
            continue
        for then_first, then in ((True, term.successors[0]), (False, term.successors[1])):
            join = term.successors[1] if then_first else term.successors[0]
            stores = _swap_stores(block, then, join, preds)
            if stores is None:
                continue
            _convert(block, then, join, stores, then_first)
            preds = predecessors(region)
            converted += 1
            break
    return converted


def _key(op: Operation) -> tuple[Value, int, str, str] | None:
    """(address, offset, space, type) of a plain scalar load or store, else None."""
    m = mods(op)
    if _ORDERED & set(m) or any(x.startswith("v") and x[1:].isdigit() for x in m):
        return None
    space = next((s for s in _SPACES if s in m), None)
    if space is None:
        return None
    if op.name == "ptx.ld" and len(op.results) != 1 or op.name == "ptx.st" and len(op.operands) != 2:
        return None
    return op.operands[0], op.attr("offset", 0), space, ty(op)


def _swap_stores(block: Block, then: Block, join: Block, preds: dict[Block, list[Block]]
                 ) -> list[tuple[Operation, Value]] | None:
    """The stores of `then`, each with the value its location held, when `then` is a swap of
    values `block` read; else None."""
    if then is join or then is block or preds[then] != [block]:
        return None
    *stores, last = then.ops
    if last.name != "cf.br" or last.successors != [join] or any(last.successor_args):
        return None
    return _swap_loads(block.ops[:-1], stores)


def _swap_loads(before: list[Operation], stores: list[Operation]
                ) -> list[tuple[Operation, Value]] | None:
    """`stores`, each with the value its location held, when they are a swap of values the
    ops `before` them (in the branch's block) loaded after their last other memory access
    or side effect; else None."""
    if not stores or any(op.name != "ptx.st" for op in stores):
        return None
    # the loads after this block's last other memory access or side effect
    loaded: dict[tuple[Value, int, str, str], OpResult] = {}
    for op in reversed(before):
        if op.name == "ptx.ld" and (k := _key(op)) is not None:
            loaded.setdefault(k, op.results[0])
        elif not info(op).pure:
            break
    pairs = []
    for st in stores:
        k = _key(st)
        if k is None or k not in loaded:
            return None
        pairs.append((st, loaded[k]))
    # a swap: the values stored are the values the stored-to locations held
    olds = {old for _, old in pairs}
    if any(st.operands[1] not in olds for st, _ in pairs):
        return None
    return pairs


def _stores_of_selects(block: Block, at: int, stores: list[tuple[Operation, Value]],
                       cond: Value, then_first: bool) -> None:
    """Move the swap's stores into `block` at `at`, each storing `cond ? new : old` (the
    value the arm stored when the arm runs, the location's old value otherwise)."""
    for st, old in stores:
        new = st.operands[1]
        pick = [new, old] if then_first else [old, new]
        sel = Operation("ptx.selp", [*pick, cond], [new.type],
                        {"mods": [ty(st)], "line": st.attr("line", 0)})
        sel.parent = block
        block.ops.insert(at, sel)
        st.set_operand(1, sel.results[0])
        st.parent = block
        block.ops.insert(at + 1, st)
        at += 2


def _convert(block: Block, then: Block, join: Block, stores: list[tuple[Operation, Value]],
             then_first: bool) -> None:
    term = block.terminator
    _stores_of_selects(block, len(block.ops) - 1, stores, term.operands[0], then_first)
    term.drop_uses()
    br = Operation("cf.br", successors=[join], successor_args=[[]],
                   attributes={"line": term.attr("line", 0)})
    br.parent = block
    block.ops[-1] = br
    then.ops[-1].drop_uses()
    then.ops.clear()
    then.parent.blocks.remove(then)


# --- flags set in an `if`: phis of an if-then that become selects -----------------------------

def select_if_phis(region: Region) -> int:
    """Replace a block argument that an if-then merges (`computed = false; if (c) { ...;
    computed = true; }`) by a select on the branch condition, computed before the branch,
    when both incoming values are available there (constants, or values the branch's block
    sees).  A phi is a value the barrier planner cannot recompute, so such a flag was kept
    per thread across the barriers after it (stored, and loaded again); a select of
    constants on a condition of thread indices and uniform values is recomputed like any
    pure arithmetic (pathfinder's `computed`).  Returns the number of arguments replaced."""
    idom = dominators(region)
    return select_triangle_phis(
        region, lambda via, branch, term, then: _available(via, branch, then, idom))


def _available(v: Value, branch: Block, then: Block, idom) -> Value | None:  # type: ignore[no-untyped-def]
    """v itself when the branch's block sees it, a fresh constant for a constant made (or
    moved) in `then`, else None."""
    from cpuify.ir.core import BlockArgument, dominates
    src = copied_from(v, then)
    owner = src.block if isinstance(src, BlockArgument) else src.op.parent
    if owner is None:
        return None
    if owner is not then and dominates(idom, owner, branch):
        return src
    if isinstance(src, OpResult) and src.op.name == "upir.const":
        c = Operation("upir.const", [], [src.type], dict(src.op.attributes))
        c.parent = branch
        branch.ops.insert(len(branch.ops) - 1, c)
        return c.results[0]
    return None
