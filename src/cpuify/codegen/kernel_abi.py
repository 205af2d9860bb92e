"""The interface of generated code with the runtime and the Python API: the LLVM types of
the block context (runtime/cpuify_rt.h's cpuify_block_ctx) and of the launch dimensions,
the memory areas a segment function takes, the guard zones of the exchange buffer, the
block function's symbol, and what a launch needs to know of a compiled kernel."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from llvmlite import ir

from cpuify.codegen.layout import CTX_FIELDS, CTX_U32_FIELDS, ScratchLayout, align_up
from cpuify.codegen.lowering import I32, PTR

CTX_TYPE = ir.LiteralStructType([PTR] * len(CTX_FIELDS) + [I32] * len(CTX_U32_FIELDS))
DIMS_TYPE = ir.LiteralStructType([ir.ArrayType(I32, 3), ir.ArrayType(I32, 3)])


SEGMENT_AREAS = ("params", "shared", "state", "slots", "local", "xval", "xout")


#: Bytes kept free before and after the `xval` array (32 lanes of 8 bytes): a static
#: shuffle up or down reads the value `t -+ k` (k < 32) of every thread unconditionally
#: (SegmentEmitter.read_static_shuffle), and selects its own where that is no lane of its warp.
XVAL_GUARD = 256

#: Readable bytes before and after the shared-memory (and scratch) buffer of a block
#: (runtime/cpuify_rt.c CPUIFY_BUFFER_GUARD): a shared load `c ? s[i + a] : s[i + b]` loads
#: both sides when they are at most this far apart (one of them is in the buffer).
BUFFER_GUARD = 256


def dynamic_smem_offset(param_size: int) -> int:
    """Where the launcher puts the launch's dynamic shared memory size (a u32)."""
    return align_up(param_size, 8)


def ctx_index(name: str) -> int:
    if name in CTX_FIELDS:
        return CTX_FIELDS.index(name)
    return len(CTX_FIELDS) + CTX_U32_FIELDS.index(name)


@dataclass
class KernelInfo:
    """What the runtime and Python API need to launch a compiled kernel."""
    name: str
    symbol: str                     # block function symbol
    param_size: int
    params: list[tuple[str, str, int, int]]    # (name, ptx type, offset, size)
    aggregate_params: list[bool]                # declared as byte arrays: structs by value
    scratch: ScratchLayout
    shared_static: int
    has_sync: bool
    num_sync: int
    directives: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # the launch prologue (parallel-licm): its block function, run once per launch on one
    # thread (grid and block of 1) with the launch's parameter buffer before the grid; it
    # writes launch_bytes of hoisted values after the dynamic shared size word
    prologue_symbol: str = ""
    prologue_scratch: int = 0
    launch_bytes: int = 0
    # indexes of the pointer parameters the kernel stores or atomically updates through
    # (analysis.access.written_parameters): the API refuses read-only arrays for them
    written_params: tuple[int, ...] = ()
    # yield points (spin-wait loops, transforms/progress.py): the runtime runs the blocks as
    # resumable fibers (cpuify_launch_ex, CPUIFY_LAUNCH_FIBERS)
    spin_waits: int = 0
    # the kernel reads %envreg (grid.sync()): it needs a cooperative launch's grid workspace
    reads_envreg: bool = False

    def buffer_size(self) -> int:
        """Bytes of a launch's parameter buffer: the parameters, the dynamic shared memory
        size, the values the prologue hands to the grid."""
        return dynamic_smem_offset(self.param_size) + 8 + self.launch_bytes


def specialized_symbol(kernel: str, block_dims: tuple[int, int, int],
                       noalias: Sequence[int] = (), block_run: tuple[int, int] = (1, 1)) -> str:
    """The block function of `kernel` compiled for one block shape (and, with `noalias`,
    for launches whose pointer arguments at those parameter offsets overlap no other; with
    a `block_run` other than (1, 1), running that many blocks in x and y per call:
    transforms/block_runs.py)."""
    name = f"cpuify_block_{kernel}__{block_dims[0]}x{block_dims[1]}x{block_dims[2]}"
    if noalias:
        name += "__noalias_" + "_".join(str(int(x)) for x in sorted(noalias))
    if tuple(block_run) != (1, 1):
        name += f"__run{block_run[0]}x{block_run[1]}"
    return name
