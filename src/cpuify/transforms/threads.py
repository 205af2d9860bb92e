"""`merge-duplicate-threads`: threads that differ only in a thread-index dimension the kernel
never reads run once.

A 1D kernel launched with 2D blocks (`dim3 block(32, 8)` with `i = blockIdx.x * blockDim.x +
threadIdx.x`: PolyBench-ACC's matrix-vector kernels) has eight threads per `i` doing
exactly the same thing.  When the kernel cannot tell them apart (it reads neither
`threadIdx.y` nor anything derived from the linear thread index: lane, warp, lane masks)
and they cannot see each other (no barrier, warp collective, atomic, printf or allocation:
only plain loads and stores), executing each group of identical threads once is one of the
schedules CUDA allows: the identical threads running in lockstep, each load returning the
same value to all of them and each store writing the same value to the same address.  It is
the schedule a GPU comes close to in practice, and racy kernels of this shape rely on it
(`x1[i] += a[i * n + j] * y[j]` by eight threads: one sum on a GPU, eight times the sum when
the threads run one after another).  It also does a factor of blockDim.y less work.

The pass records the dimensions whose threads are duplicates on the `upir.block_parallel`
op (`duplicate_thread_dims = [1]` for y, `[1, 2]` for y and z); the code generator then
runs those dimensions' thread loops once (`%ntid` still reads the launch's block shape).
The reference interpreter runs every thread, which is also a schedule CUDA allows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cpuify.analysis.manager import AnalysisManager
from cpuify.ir.core import Operation
from cpuify.ir.dialects import STRUCTURED_OPS, info, is_sync
from cpuify.ir.structure import block_body, block_parallel
from cpuify.ir.structured import nested_blocks
from cpuify.transforms.pass_manager import register
from cpuify.ir.modifiers import ORDERED as _ORDERED

ATTRIBUTE = "duplicate_thread_dims"
#: the `upir.block_parallel` attribute of flat-thread-loops
FLAT_ATTRIBUTE = "flat_thread_loops"

#: ops with effects that duplicated threads perform identically (each duplicate reads what
#: the others read and writes what they write); anything else may tell them apart
_SAME_IN_DUPLICATES = frozenset({
    "ptx.ld", "ptx.ldu", "ptx.st", "ptx.prefetch", "ptx.prefetchu", "upir.exit", "upir.trap",
    "upir.fence", "upir.clock", "upir.yield", "upir.param", "upir.special", "upir.launch_store",
})
#: special registers that tell threads of a block apart beyond tid.x/y/z
_THREAD_SPECIALS = ("%laneid", "%warpid", "%lanemask")


def duplicate_dims(kernel: Operation) -> list[int]:
    """The thread-index dimensions (0 = x, 1 = y, 2 = z) whose threads are exact duplicates
    of each other in `kernel`, or [] when the kernel can tell them apart."""
    body = block_body(kernel)
    read = set()
    for block in nested_blocks(body):
        for op in block.ops:
            if op.name in STRUCTURED_OPS:
                continue            # (its regions' blocks are walked; it has no effects of its own)
            if op.regions:
                return []
            if op.name == "upir.special":
                reg = str(op.attributes.get("reg", ""))
                if reg.startswith(_THREAD_SPECIALS):
                    return []
                if reg.startswith("%tid"):
                    comp = reg.partition(".")[2]
                    read.add("xyz".index(comp) if comp in ("x", "y", "z") else 0)
                continue
            i = info(op)
            if i.pure or i.terminator and op.name.startswith("cf."):
                continue
            if op.name not in _SAME_IN_DUPLICATES or i.block_sync or i.warp_sync:
                return []
            if op.name in ("ptx.ld", "ptx.st") and any(
                    m in ("volatile", "relaxed", "acquire", "release")
                    for m in op.attributes.get("mods", ())):
                return []       # a flag protocol between threads: keep every thread
    return [k for k in (0, 1, 2) if k not in read]


@register("merge-duplicate-threads",
          "thread-index dimensions the kernel never reads, run once (blocks whose threads "
          "differ only there are duplicates)")
@dataclass(frozen=True)
class MergeDuplicateThreads:
    """Pass: records `duplicate_thread_dims` on the kernel's `upir.block_parallel`.  It reads
    every op of the block body, in the regions of structured ops too (form "any")."""
    name: str = "merge-duplicate-threads"
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of thread dimensions marked as duplicates."""
        dims = duplicate_dims(kernel)
        if not dims:
            return 0
        bp = block_parallel(kernel)
        if bp.attributes.get(ATTRIBUTE) == dims:
            return 0
        bp.attributes[ATTRIBUTE] = dims
        return len(dims)




def ordered_accesses(kernel: Operation) -> int:
    """The volatile, ordered and atomic accesses of the kernel's block body (none of which
    LLVM's loop vectorizer takes), or 0 when the body has no sync point."""
    ops = [op for block in nested_blocks(block_body(kernel)) for op in block.ops]
    if not any(is_sync(op) for op in ops):
        return 0
    return sum(1 for op in ops if op.name in ("ptx.atom", "ptx.red") or
               op.name in ("ptx.ld", "ptx.st") and _ORDERED & set(op.attributes.get("mods", ())))


@register("flat-thread-loops",
          "volatile, ordered and atomic accesses of a kernel with sync points: in code for any "
          "block shape, the segments that run one on every way loop over the linear thread index")
@dataclass(frozen=True)
class FlatThreadLoops:
    """Pass: records `flat_thread_loops` on the `upir.block_parallel` of a kernel with sync
    points and volatile, ordered or atomic accesses.  In code for any block shape, the code
    generator then runs each segment whose every way runs such an access (LLVM's loop
    vectorizer takes none of them: its thread loop stays scalar) as one loop over the linear
    thread index, the thread indices counted along with it, instead of a z/y/x nest of three
    loops (codegen's KernelPlan.flat_loops): a third of the loops for LLVM's loop passes, the
    same loops vectorized (warp-synchronous scans and reductions).  Specialized code keeps
    its nests.  Returns the number of such accesses (form "any": it reads the regions)."""
    name: str = "flat-thread-loops"
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        n = ordered_accesses(kernel)
        bp = block_parallel(kernel)
        if not n or bp.attributes.get(FLAT_ATTRIBUTE):
            return 0
        bp.attributes[FLAT_ATTRIBUTE] = True
        return n
