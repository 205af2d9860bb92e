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

from cpuify.ir.core import (
    Block, Operation, OpResult, Region, Value, dominators, predecessors, remove_block_arg,
)
from cpuify.ir.dialects import info
from cpuify.ir.modifiers import mods, ty
from cpuify.ir.structure import block_body
from cpuify.analysis.manager import AnalysisManager
from cpuify.transforms.pass_manager import register

#: modifiers that order an access or make it observable: never moved or duplicated
_ORDERED = frozenset(("volatile", "relaxed", "acquire", "release", "mmio"))
_SPACES = ("shared", "global")


@register("if-convert-swaps", "conditional swaps made branch-free (compare-exchange: stores of selects)")
@dataclass(frozen=True)
class IfConvertSwaps:
    """Pass: branch-free conditional swaps."""
    name: str = "if-convert-swaps"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of `if`s converted."""
        return if_convert_swaps(block_body(kernel))


@register("select-if-phis", "values merged after an if turned into selects (recomputable across barriers)")
@dataclass(frozen=True)
class SelectIfPhis:
    """Pass: flags set in an `if` become selects on the branch condition."""
    name: str = "select-if-phis"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of block arguments replaced."""
        return select_if_phis(block_body(kernel))


def if_convert_swaps(region: Region) -> int:
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
    if not stores or any(op.name != "ptx.st" for op in stores):
        return None
    # the loads after this block's last other memory access or side effect
    loaded: dict[tuple[Value, int, str, str], OpResult] = {}
    for op in reversed(block.ops[:-1]):
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
    replaced = 0
    preds = predecessors(region)
    idom = dominators(region)
    for join in list(region.blocks):
        if len(join.args) == 0 or len(preds.get(join, [])) != 2:
            continue
        for branch, then in (preds[join], preds[join][::-1]):
            term = branch.terminator
            if term is None or term.name != "cf.cond_br" or then is branch or \
                    preds.get(then) != [branch] or then.terminator is None or \
                    then.terminator.name != "cf.br" or then.terminator.successors != [join]:
                continue
            if sorted(map(id, term.successors)) != sorted(map(id, (join, then))):
                continue
            k_join = term.successors.index(join)
            for arg in list(join.args):
                direct = term.successor_args[k_join][arg.index]
                via = then.terminator.successor_args[0][arg.index]
                # (the value on the direct edge is one `branch` sees; the one through `then`
                # may need a constant of its own, made only when the rewrite happens)
                value = _available(via, branch, then, idom)
                if value is None:
                    continue
                # the condition sends threads to `join` directly when true if join is the
                # first successor
                pick = [direct, value] if k_join == 0 else [value, direct]
                sel = Operation("ptx.selp", [*pick, term.operands[0]], [arg.type],
                                {"mods": [f"b{int(arg.type[1:])}" if arg.type != "i1" else "pred"],
                                 "line": term.attr("line", 0)})
                sel.parent = branch
                branch.ops.insert(len(branch.ops) - 1, sel)
                remove_block_arg(join, arg, sel.results[0], [(term, k_join), (then.terminator, 0)])
                replaced += 1
            break
    return replaced


def _available(v: Value, branch: Block, then: Block, idom) -> Value | None:  # type: ignore[no-untyped-def]
    """v itself when the branch's block sees it, a fresh constant for a constant made (or
    moved) in `then`, else None."""
    from cpuify.ir.core import BlockArgument, dominates
    src = v
    while isinstance(src, OpResult) and src.op.name == "ptx.mov" and len(src.op.operands) == 1 \
            and src.op.parent is then:
        src = src.op.operands[0]
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
