"""`split-row-streams`: one row of an array per pass over the block's threads.

A block that reads two rows of the same array between two sync points (the "first add
during global load" reduction: `v = in[i]; v += in[i + 256];` with 256 threads, a tile
scan's four coalesced loads `in[base + k * 256 + tid]`, an update of four rows
`out[i + k * 256] += off`) runs as one thread loop whose vector iterations touch every
row in turn: two or four interleaved streams of one block's lines, each a row apart, each
with a row-sized gap at the next block.  The hardware prefetchers follow one ascending
stream far better: the suite's reduction, one thread, took 18-19 ms as written and 11 ms
with a barrier between its two loads (2^26 floats, 2026-11-28, AMD EPYC VM).

In code specialized for a block shape (`block_dims`), the pass walks the straight-line
part of the block body (the chain of blocks the entry reaches through unconditional
branches) and, where an op accesses a row of a global array that the current pass over
the threads already accesses another row of, puts a soft barrier before that op: the
thread loop ends there and the next one starts, which is a schedule CUDA allows (threads
between two barriers run in any order; soft barriers order no memory).  Two accesses are
rows of the same array when their addresses, affine in the thread index over block-uniform
values (analysis.access), have the same terms, are consecutive across threadIdx.x (the
thread index's coefficient is the access size) and their constants differ by at least a
row of the block (`blockDim.x` accesses) of at least `min_row_bytes`.

Not inside loops (the passes of an interchanged loop are its iterations already), nor
between accesses inside one `if` (the branch is split only where all of it runs in one
pass), nor for volatile, ordered or atomic accesses, nor in code for no known block shape.
Values live across the new soft barrier are kept per thread or recomputed as across any
other (min-cut-fission runs after)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cpuify.analysis.access import affine_form
from cpuify.analysis.manager import AnalysisManager, cached
from cpuify.analysis.pointers import memory_space
from cpuify.analysis.structured_uniformity import structured_uniform_values
from cpuify.ir.core import Block, Operation, Region, Value, predecessors
from cpuify.ir.dialects import is_sync
from cpuify.ir.modifiers import ORDERED, ty, type_size
from cpuify.ir.structure import ROW_STREAM, block_body
from cpuify.ir.structured_shapes import nested_ops
from cpuify.transforms.pass_manager import register

#: the ops whose regions are loops: their accesses run once per iteration
_LOOPS = frozenset({"upir.for", "upir.while"})

#: a row of an array in a pass: (the address's terms, its constant byte offset)
_Row = tuple[frozenset[tuple[object, int]], int]


@register("split-row-streams", "soft barriers between accesses of different rows of one "
          "global array in a barrier interval (code for a block shape): one row per pass "
          "over the block's threads")
@dataclass(frozen=True)
class SplitRowStreams:
    """Pass: a soft barrier before each op of the block body's straight-line part that
    accesses another row of an array the current pass over the threads already accesses
    (module doc).  Returns the number of soft barriers inserted."""
    name: str = "split-row-streams"
    form: ClassVar[str] = "structured"
    #: rows shorter than this (bytes a row of the block's threads accesses) are left
    #: interleaved: a few lines the hardware fetches anyway
    min_row_bytes: int = 256

    def may_fire(self, kernel: Operation) -> bool:
        """Whether the pass may insert a soft barrier: code for a block shape with two
        global accesses at least (a quick test on either form: the pass manager raises a
        CFG for the pass only then)."""
        if kernel.attributes.get("block_dims") is None:
            return False
        n = 0
        for blk in block_body(kernel).blocks:
            for op in blk.ops:
                for o in nested_ops(op):
                    if o.name in ("ptx.ld", "ptx.st") and memory_space(o) == "global":
                        n += 1
                        if n >= 2:
                            return True
        return False

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        dims = kernel.attributes.get("block_dims")
        if dims is None:
            return 0
        width = int(dims[0])
        region = block_body(kernel)
        uniform = cached(analyses, structured_uniform_values, region)
        memo: dict = {}  # type: ignore[type-arg]
        inserted = 0
        current: dict[frozenset[tuple[object, int]], list[int]] = {}   # rows of this pass
        for blk in _straight_line(region):
            k = 0
            while k < len(blk.ops):
                op = blk.ops[k]
                inner = nested_ops(op)
                if op.name in _LOOPS or any(is_sync(o) for o in inner):
                    current = {}        # a sync point or a loop: a pass ends here
                    k += 1
                    continue
                rows = [r for o in inner if (r := _row(o, uniform, memo, width,
                                                       self.min_row_bytes)) is not None]
                if any(_another_row(row, current, width, size) for row, size in rows):
                    soft = Operation("upir.barrier", [], [],
                                     {"soft": True, ROW_STREAM: True,
                                      "line": op.attributes.get("line", 0)})
                    soft.parent = blk
                    blk.ops.insert(k, soft)
                    inserted += 1
                    k += 1
                    current = {}
                for (terms, const), _ in rows:
                    current.setdefault(terms, []).append(const)
                k += 1
        return inserted


def _straight_line(region: Region) -> list[Block]:
    """The blocks every thread that does not exit runs in order from the region's entry:
    each the only successor of the one before, through an unconditional branch, and reached
    from it alone."""
    preds = predecessors(region)
    blk = region.entry
    chain = [blk]
    seen = {blk}
    while blk.ops and blk.ops[-1].name == "cf.br":
        (nxt,) = blk.ops[-1].successors
        if nxt in seen or len(preds.get(nxt, ())) != 1:
            break
        chain.append(nxt)
        seen.add(nxt)
        blk = nxt
    return chain


def _row(op: Operation, uniform: set[Value], memo: dict, width: int,  # type: ignore[type-arg]
         min_row_bytes: int) -> tuple[_Row, int] | None:
    """((terms, constant) of `op`'s address, its access size) when `op` is a plain global
    load or store whose address is affine and consecutive across threadIdx.x, in rows of
    at least `min_row_bytes`; None otherwise."""
    if op.name not in ("ptx.ld", "ptx.st") or memory_space(op) != "global":
        return None
    if ORDERED & set(op.attributes.get("mods", ())):
        return None
    count = len(op.results) if op.name == "ptx.ld" else len(op.operands) - 1
    try:
        size = type_size(ty(op)) * max(1, count)
    except (KeyError, ValueError):
        return None
    if size <= 0 or width * size < min_row_bytes:
        return None
    form = affine_form(op.operands[0], uniform, 0, memo)
    if form is None or form[0].get(("tid", 0)) != size:
        return None
    return (frozenset(form[0].items()), form[1] + int(op.attributes.get("offset", 0))), size


def _another_row(row: _Row, current: dict[frozenset[tuple[object, int]], list[int]],
                 width: int, size: int) -> bool:
    """Whether the current pass accesses another row of the array `row` is a row of: the
    same terms, constants at least a row of the block apart from every one it has."""
    terms, const = row
    have = current.get(terms)
    return bool(have) and all(abs(const - c) >= width * size for c in have)
