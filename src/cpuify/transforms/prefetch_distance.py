"""`stream-prefetch-distance`: how far ahead a loop with block barriers prefetches its
global loads (the next block's lines, or iterations ahead), recorded on its barriers.

In code specialized for a block shape, the segment of a loop with barriers whose
block-uniform counter crosses a barrier prefetches, after its thread loop, the lines its
global loads will read some iterations later (codegen/thread_loop_plan.py,
`iteration_prefetches`; docs/usage.md "Prefetching in loops with barriers").  How far ahead
pays depends on where the lines come from:

* a loop whose every global load is addressed from every block index the kernel reads
  (pathfinder's rows: each block reads its own columns of each row, a row a page from the
  next, each line fetched once from DRAM in the whole launch) streams data no other block
  brings into the caches: its prefetches must cover DRAM's latency, and one iteration of a
  few hundred threads' work does not;
* a loop whose loads some blocks share (the tiled matmul: blockIdx.y alone picks A's
  tiles, blockIdx.x alone B's) mostly finds its lines in L2 or L3, brought there by the
  blocks before it; prefetching far ahead then only holds fill buffers (the suite's matmul,
  one thread, CPU time: 2 iterations ahead 50.8 ms, 4 ahead 52.1 ms, 5 ahead 54.8 ms).

The pass marks every block barrier (`upir.barrier`, not the soft barriers of the
interchanges) inside a loop of the first kind.  In a kernel that reads blockIdx.x (option
`next_block`, default on) with `prefetch_next_block = 1` and `prefetch_ahead = 1`: the
segments resuming there prefetch the lines of their own iteration in block blockIdx.x + 1,
which the worker runs next (block_sched.c hands out chunks of consecutive blocks), into L2.
Iterations ahead within the block leave its first iterations unprefetched and fetch past
its last (pathfinder: 20 rows a block, 5 ahead: a quarter of the rows each way); a block
ahead covers every row with a block's time to spare.  Otherwise with `prefetch_ahead = N`
(the option `ahead`, default FAR_AHEAD): N iterations ahead, into L1.  Code generation
prefetches LOOP_PREFETCH_AHEAD (2) iterations ahead where there is no mark
(`--disable-pass=stream-prefetch-distance`).  Pathfinder (100000 x 100, one thread, CPU
time, 2026-11-28, AMD EPYC VM): alternating in one process at load 4-5, 2 ahead 7.35 ms
median, 5 ahead 5.76 ms; at load 8-14, `next_block=false` and the default in one process,
11 alternating rounds: 5.71 -> 4.40 ms median (best 5.46 -> 4.10).

Must not fire without a block shape (no prefetches there), on a loop without barriers or
without global loads, on a loop with a load that does not read every block index the
kernel reads (shared between blocks, or a gather through loaded indices: its address then
reads a load, not the block index alone), nor on volatile or ordered loads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cpuify.analysis.manager import AnalysisManager
from cpuify.analysis.pointers import memory_space
from cpuify.ir.core import BlockArgument, Operation, OpResult, Value, natural_loops
from cpuify.ir.structured import forwarded_values
from cpuify.ir.structured_shapes import nested_ops
from cpuify.transforms.pass_manager import register
from cpuify.ir.modifiers import ORDERED as _ORDERED

#: the attribute on a block barrier: iterations ahead its segment prefetches
ATTRIBUTE = "prefetch_ahead"
#: ... and, on the barriers of a loop streaming data of its own, the blocks ahead (1: block
#: blockIdx.x + 1, which the worker runs next) whose lines of the segment's own iteration it
#: prefetches instead (`prefetch_ahead` is then 1: the iteration the segment runs)
NEXT_BLOCK = "prefetch_next_block"
#: iterations ahead for a loop that streams data of its own (pathfinder, one thread, CPU
#: time, medians of 12 alternating rounds: see the module docstring and docs/usage.md)
FAR_AHEAD = 5
_LOADS = ("ptx.ld", "ptx.ldu")


def _loop_bodies(kernel: Operation) -> list[list[Operation]]:
    """The ops of each loop of `kernel` (nested ops included): structured `upir.while` /
    `upir.for` ops and the natural loops of regions left as a CFG."""
    out: list[list[Operation]] = []
    for op in nested_ops(kernel):
        if op.name in ("upir.while", "upir.for"):
            out.append(nested_ops(op)[1:])
        for region in op.regions:
            if len(region.blocks) < 2:
                continue
            for blocks, _ in natural_loops(region).values():
                out.append([o for b in blocks for top in b.ops for o in nested_ops(top)])
    return out


class _Sources:
    """What each value is computed from, through branches' and structured ops' forwarded
    values (a loop-carried index: its initial value and its update)."""

    def __init__(self, kernel: Operation) -> None:
        self.into: dict[Value, list[Value]] = {}
        for op in nested_ops(kernel):
            for v, a in forwarded_values(op) or ():
                self.into.setdefault(a, []).append(v)
            if op.name == "upir.for":       # the induction variable: from the bounds
                self.into.setdefault(op.regions[0].entry.args[0], []).extend(op.operands[:3])

    def block_indices(self, v: Value) -> tuple[set[str], bool]:
        """(the %ctaid registers `v` is computed from, whether a load is on the way)."""
        regs: set[str] = set()
        loaded = False
        seen: set[Value] = set()
        work = [v]
        while work:
            x = work.pop()
            if x in seen:
                continue
            seen.add(x)
            if isinstance(x, OpResult):
                o = x.op
                if o.name == "upir.special":
                    reg = str(o.attributes.get("reg", ""))
                    if reg.startswith("%ctaid"):
                        regs.add(reg)
                elif o.name in _LOADS or o.name.startswith("ptx.atom"):
                    loaded = True
                else:
                    work.extend(o.operands)
            if isinstance(x, BlockArgument) or x in self.into:
                work.extend(self.into.get(x, ()))
        return regs, loaded


def streams_own_data(loop: list[Operation], sources: _Sources, indices: set[str]) -> bool:
    """Whether every global load of `loop` (and it has one) is addressed from every block
    index in `indices` and from no loaded value: data of this block's own."""
    loads = [o for o in loop if o.name in _LOADS and memory_space(o) == "global"]
    if not loads or not indices:
        return False
    for o in loads:
        if _ORDERED & set(o.attributes.get("mods", ())):
            return False
        regs, loaded = sources.block_indices(o.operands[0])
        if loaded or not indices <= regs:
            return False
    return True


@register("stream-prefetch-distance",
          "block barriers in loops that stream data of their own (every global load "
          "addressed from every block index) marked: their segments prefetch the lines of "
          "their iteration in the next block, into L2 (or, next_block=false, 5 iterations "
          "ahead, not 2; code specialized for a block shape)")
@dataclass(frozen=True)
class StreamPrefetchDistance:
    """Pass: marks the block barriers of loops whose global loads stream this block's own
    data with `prefetch_next_block` (`next_block`, where the kernel reads blockIdx.x) or
    `prefetch_ahead` (see the module docstring); returns how many it marked."""
    name: str = "stream-prefetch-distance"
    ahead: int = FAR_AHEAD
    next_block: bool = True
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        if kernel.attributes.get("block_dims") is None:
            return 0
        ops = nested_ops(kernel)
        indices = {str(o.attributes.get("reg")) for o in ops if o.name == "upir.special"
                   and str(o.attributes.get("reg", "")).startswith("%ctaid")}
        sources = _Sources(kernel)
        marked = 0
        for loop in _loop_bodies(kernel):
            barriers = [o for o in loop if o.name == "upir.barrier" and not o.attributes.get("soft")
                        and ATTRIBUTE not in o.attributes]
            if barriers and streams_own_data(loop, sources, indices):
                for b in barriers:
                    if self.next_block and "%ctaid.x" in indices:
                        b.attributes[ATTRIBUTE] = 1
                        b.attributes[NEXT_BLOCK] = 1
                    else:
                        b.attributes[ATTRIBUTE] = int(self.ahead)
                    marked += 1
        return marked
