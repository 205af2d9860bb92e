"""`thread-index-ranges`: which threads each `if` on one thread index selects, recorded on
its branch, so that a barrier interval guarded by it runs a thread loop over those threads
only.

In code specialized for a block shape (the kernel's `block_dims`), a branch whose condition
is a function of one thread index and constants (`tx == 0`, a reduction tree's `t < k` or
`ty % p == 0`) selects a fixed set of threads.  The pass evaluates the condition for every
index along that dimension and marks the `cf.cond_br` with `thread_index_if = [dim, extent]`
and, for each way whose threads are an arithmetic progression, `threads_true` /
`threads_false = [start, stop, step]`.

Code generation lowers the marks (codegen/thread_loop_plan.py): a barrier interval that
starts with such an `if` around everything it does runs its thread loop over the selected
threads only (`if (tx == 0) node[ty] = ...;` as a loop over ty; a tree step over every
other row), and such `if`s that end an interval run after its thread loop, as loops of
their own.  Unmarked (`--disable-pass=thread-index-ranges`, or `--passes=`), every interval
runs all threads of the block, the branch inside the loop (the paper's Fig. 9 layer:
2.6-3x slower, its `tx == 0` stores keeping the loop from vectorizing).

Must not fire on conditions that read anything but one thread index and constants
(`tid < n`, `blockIdx`, two thread indices), nor in code for no known block shape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cpuify.analysis.manager import AnalysisManager
from cpuify.analysis.thread_index import THREAD_INDEX_IF, THREADS_TAKING, mark_thread_index_if
from cpuify.ir.core import Operation, OpResult, Value
from cpuify.ir.structured import NEGATED_EXIT, RAISED_EDGE
from cpuify.ir.structured_shapes import nested_ops
from cpuify.transforms.pass_manager import register


@register("thread-index-ranges", "branches on one thread index whose threads are recorded: the "
          "barrier intervals they guard run a thread loop over those threads only")
@dataclass(frozen=True)
class ThreadIndexRanges:
    """Pass: on either form.  Structured, the marks go on the ops that become the
    `cf.cond_br`s once lowered (ir/structured.py copies their attributes onto it): a
    `upir.if` (its condition, its first region the true way), and a loop's
    `upir.condition` (the branch on its test, or on the test the raise negated, whose
    ways the lowering swaps back)."""
    name: str = "thread-index-ranges"
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        dims = kernel.attributes.get("block_dims")
        marked = 0
        for op in nested_ops(kernel):
            cond = _branch_condition(op)
            if cond is None:
                continue
            if dims is None:
                for key in (THREAD_INDEX_IF, *THREADS_TAKING):
                    op.attributes.pop(key, None)
                continue
            marked += mark_thread_index_if(op, tuple(int(d) for d in dims), cond)  # type: ignore[arg-type]
        return marked


def _branch_condition(op: Operation) -> Value | None:
    """The value the `cf.cond_br` that `op` is (or becomes once lowered) branches on, its
    first successor taken when it is true; None for an op that is no such branch (a
    condition the raise made a constant becomes an unconditional branch)."""
    if op.name in ("cf.cond_br", "upir.if"):
        return op.operands[0]
    if op.name != "upir.condition":
        return None
    test = op.operands[0]
    if not isinstance(test, OpResult):
        return test
    if test.op.name == "upir.const" and RAISED_EDGE in test.op.attributes:
        return None
    if test.op.name == "ptx.not" and test.op.attributes.get(NEGATED_EXIT) and test.uses == [op]:
        return test.op.operands[0]      # lowered: cond_br(x) [exit, loop]
    return test
