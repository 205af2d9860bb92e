"""Finding the parallel structure of a `upir.kernel` op:

    upir.kernel @name {
      upir.launch_prologue { ... }     // optional: runs once per launch, before any block
      upir.grid_parallel {             // blocks of the grid
        upir.block_parallel { ... }    // threads of one block: the block body
      }
    }
"""

from __future__ import annotations

from cpuify.errors import IRError
from cpuify.ir.core import Operation, Region, Value


def _child(parent: Operation, name: str) -> Operation | None:
    for op in parent.regions[0].entry.ops:
        if op.name == name:
            return op
    return None


def grid_parallel(kernel: Operation) -> Operation:
    grid = _child(kernel, "upir.grid_parallel")
    if grid is None:
        raise IRError(f"kernel '{kernel.attributes.get('sym_name')}' has no upir.grid_parallel")
    return grid


def block_parallel(kernel: Operation) -> Operation:
    block = _child(grid_parallel(kernel), "upir.block_parallel")
    if block is None:
        raise IRError(f"kernel '{kernel.attributes.get('sym_name')}' has no upir.block_parallel")
    return block


def block_body(kernel: Operation) -> Region:
    """The region the threads of a block run (a CFG)."""
    return block_parallel(kernel).regions[0]


def launch_prologue(kernel: Operation) -> Operation | None:
    """The `upir.launch_prologue` op: code hoisted out of the grid, run once per launch."""
    return _child(kernel, "upir.launch_prologue")


def lockstep_counters(region: Region) -> set[Value]:
    """The iteration counters that interchange-thread-strided-loops recorded on its soft
    barriers (`lockstep`: indices of the header's arguments): the same in every thread
    resuming there."""
    out: set[Value] = set()
    for b in region.blocks:
        for op in b.ops:
            if op.name == "upir.barrier" and op.attributes.get("soft"):
                out.update(b.args[i] for i in op.attributes.get("lockstep", []))
    return out
