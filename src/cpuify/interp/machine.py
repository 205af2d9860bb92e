"""The reference interpreter: executes the lifted IR of a kernel one CUDA thread at a time.

    mod = InterpModule(ptx_text)
    mod.launch("kernel", grid, block, (x, y, np.int32(n)), shared_mem=0)

Same frontend as the compiler (parse_ptx, lift_kernel); the `upir.block_parallel` region
is executed directly.  Beyond that the interpreter shares no code with what it checks: it
imports only the IR, the errors and (to start from PTX text) the frontend and lifting, never
code generation, analyses, transforms, the API or the native runtime; its argument packing
(`params.py`), shared-memory layout, sync-point numbering, module-variable initializers
and printf (`printf.py`) are its own.


  * every CUDA thread is a Python generator walking the IR (an environment maps SSA values
    to Python values, block arguments are assigned on branches);
  * at a block barrier or warp collective the thread yields; the block scheduler runs all
    threads until each waits or has exited, then applies the semantics of
    `cpuify_run_block` (runtime/block_sched.c): warp collectives run first, per group of
    lanes waiting at the same collective with the same member mask, once all live lanes of
    the mask have arrived (or, when no group can run, anyway); otherwise every live thread
    must wait at the same barrier (exited threads are not waited for), else the launch
    fails with LaunchError (barrier divergence);
  * soft barriers (`upir.barrier {soft}`, which interchange-thread-strided-loops and
    interchange-uniform-loops put at the headers of the loops they interchange and after
    them) are points where a thread stops but waits for nobody: as long as any live thread
    is at one, the threads at the same soft barrier as the first of them (in thread order)
    go on, before anything that waits for other threads is looked at (the runtime's rule:
    one iteration of all threads in the loop at a time, threads that left it waiting at
    the next barrier meanwhile).  A soft barrier's `lockstep` header arguments (the
    interchange's iteration counter, which compiled code keeps once per block) must hold
    the same value in every thread resuming there together, else the launch fails naming
    the loop: the IR broke its own promise;
  * blocks run one after another, threads of a segment in linear thread order (the order of
    the compiled thread loops, so that even racy kernels usually agree);
  * forward progress, by a rule of its own: a thread that takes a backward branch after a
    volatile/acquire/relaxed load, an atomic, an mbarrier operation or a nanosleep since its
    last backward branch
    (or reaches a `upir.spin_wait` of optimized IR) parks there; the scheduler runs the other
    threads first, then the parked ones once more; when that moves none of them, the block
    yields to the next resident block (the next block of the grid is started when every
    resident one waits).  Two seconds without any thread of the launch getting anywhere
    fail the launch (LaunchError naming the loop).  `launch(..., cooperative=True)` gives
    `%envreg1:%envreg2` a zeroed grid workspace (grid.sync()).

IR after passes (`InterpModule.use_ir`, `InterpModule.from_ir`) runs as it says; a kernel
op's `block_dims` (code for one block shape) and `noalias_params` (code for pointer
arguments that overlap no other) are checked against the launch.  What the interpreter
ignores there does not change results: `duplicate_thread_dims` (it runs every thread, also a
schedule CUDA allows), `simd`, `flush_at_uses` (it flushes at the min/max, the readers flush
anyway), `fission`.  Code generation's own lowering of tensor-core instructions
(`upir.warp_matrix`, after the pipeline) is refused: they run as lifted.

The parts: this file has the module, its kernels and launches and the grid's block order;
`block.py` the block scheduler (`BlockRun`), `thread.py` the threads and the upir ops,
`ops.py`/`spec_eval.py` the PTX instructions, `values.py`/`memory.py` the values and memory.

Memory: global/generic/const addresses are real process addresses (NumPy arrays passed by
pointer, module variables in NumPy buffers of this module); shared and local addresses are
byte offsets into the block's shared window / the thread's local window, both NumPy buffers
(so `cvta` to generic gives real addresses as in compiled code).  Shared and local accesses
are bounds-checked; generic accesses below 64 KiB are refused (null pointers)."""

from __future__ import annotations

import ctypes
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np

from cpuify.errors import LaunchError, UnsupportedError
from cpuify.frontend.ptx_ast import Module as PTXModule
from cpuify.frontend.ptx_ast import VarDecl
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import (
    spec_eval,  # noqa: F401  (registers the table's spec-driven ops)
    texture,  # noqa: F401  (registers the texture and surface ops)
)
from cpuify.interp.block import BlockRun
from cpuify.interp.memory import align_up, alloc
from cpuify.interp.ops import mods
from cpuify.interp.params import pack_arguments
from cpuify.interp.thread import MAX_THREADS_PER_BLOCK, ChildLaunch, SpinPoint
from cpuify.ir.core import Operation, Region
from cpuify.ir.dialects import is_sync
from cpuify.ir.modifiers import type_size
from cpuify.ir.parser import parse_module
from cpuify.ir.structure import KernelView, block_body, launch_prologue, variable_of
from cpuify.ir.structured import lower_structured_control_flow
from cpuify.ir.verifier import verify
from cpuify.lifting import LiftedKernel, lift_kernel

_NO_PROGRESS_SECONDS = 2.0

# --- parameters --------------------------------------------------------------------------------

def pack_params(kernel: LiftedKernel, args: Sequence[Any]) -> bytes:
    """The packed parameter buffer (the interpreter's own packer, by the compiled path's
    rules), laid out as the lifted kernel's parameters say."""
    return pack_arguments(kernel.name, kernel.params, kernel.param_size, args)


def _dim3(value: Any, what: str, kernel: str) -> tuple[int, int, int]:
    dims = [int(value)] if isinstance(value, (int, np.integer)) else [int(v) for v in value]
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise ValueError(f"kernel '{kernel}': bad {what} {value!r}")
    x, y, z = (dims + [1, 1])[:3]
    return x, y, z


# --- one kernel, prepared ------------------------------------------------------------------------

@dataclass
class SharedLayout:
    """Where each `__shared__` variable of a kernel lives in the block's shared window."""
    offsets: dict[str, int] = field(default_factory=dict)   # variable -> byte offset
    dynamic_offset: int = 0          # where `extern __shared__` arrays start (static size)


def shared_layout(module: PTXModule, kernel: LiftedKernel) -> SharedLayout:
    """The shared variables of the module and of the kernel, one after another in
    declaration order, each at its alignment; the dynamic ones (`extern`, `[]`) all start
    after them, 16-byte aligned."""
    layout = SharedLayout()
    declared = [v for v in module.variables if v.space == "shared"] + list(kernel.shared_vars)
    end = 0
    for v in declared:
        if v.dims and v.dims[0] is None:
            continue
        end = align_up(end, max(v.alignment, 1))
        layout.offsets[v.name] = end
        end += v.size
    layout.dynamic_offset = align_up(end, 16)
    for v in declared:
        layout.offsets.setdefault(v.name, layout.dynamic_offset)
    return layout


def sync_points(region: Region) -> dict[Operation, int]:
    """Barriers, warp collectives and warp steps (warp_steps) of the block body, numbered
    from 1 in region order (block by block): a resumed group of lanes runs in this order,
    the compiled code's."""
    ops = [op for block in region.blocks for op in block.ops if is_sync(op) or _is_step(op)]
    return {op: i + 1 for i, op in enumerate(ops)}


def _is_step(op: Operation) -> bool:
    """A volatile shared-memory access: the interpreter runs each as a warp-level step.
    Before Volta the lanes of a warp executed every instruction together, and legacy
    warp-synchronous code (a reduction or scan finished inside one warp through `volatile`
    shared memory, with no __syncwarp) relies on it; running the lanes of a warp together at
    each such access is also a schedule any CUDA program allows."""
    if op.name not in ("ptx.ld", "ptx.st"):
        return False
    m = mods(op)
    return "volatile" in m and any(x.split("::")[0] == "shared" for x in m)


def warp_steps(region: Region) -> set[Operation]:
    """The ops where a lane waits for the lanes of its warp at the same op without a
    collective: volatile shared accesses (_is_step) and the compiler's lockstep steps
    (`upir.warp_collective {kind = "lockstep"}`, in IR after the warp-lockstep pass)."""
    return {op for block in region.blocks for op in block.ops
            if _is_step(op) or op.name == "upir.warp_collective" and
            op.attributes.get("kind") == "lockstep"}


def initial_bytes(var: VarDecl, size: int, functions: dict[str, int] | None = None) -> bytes:
    """The first `size` bytes of a `.global`/`.const` variable: its initializer, zeros after
    (`functions`: the values of device-function addresses, for vtables)."""
    if var.init is None:
        return bytes(size)
    out = bytearray()
    esize = type_size(var.type)
    for v in var.init:
        if isinstance(v, str) and functions and v in functions:
            v = functions[v]
        if isinstance(v, str):
            raise UnsupportedError(f"initializer of '{var.name}' takes the address of '{v}'; "
                                   "address initializers are not supported", line=var.line)
        if var.type == "f32":
            out += struct.pack("<f", float(v))
        elif var.type == "f64":
            out += struct.pack("<d", float(v))
        else:
            out += (int(v) & ((1 << (8 * esize)) - 1)).to_bytes(esize, "little")
    return bytes(out[:size]) + bytes(max(size - len(out), 0))


@dataclass
class _Kernel:
    lifted: LiftedKernel
    region: Region
    shared: SharedLayout
    shared_static: int                 # bytes before dynamic shared memory
    local_offsets: dict[str, int]
    local_size: int
    sync_index: dict[Operation, int]   # sync op -> resume id (region order, from 1)
    steps: set[Operation] = field(default_factory=set)   # warp_steps()
    prologue: "_Kernel | None" = None  # the launch prologue, run as a grid of one thread
    buffer_size: int = 0               # bytes of the launch's parameter buffer
    block_index: dict[Any, int] = field(default_factory=dict)   # block -> region position
    spin_points: dict[Any, SpinPoint] = field(default_factory=dict)  # loop header -> state


def _prepare(module: PTXModule, lifted: LiftedKernel, body: Region | None = None) -> _Kernel:
    if body is None:
        # structured if/while/for (raise-structured-cf) run as the branches they stand for
        lower_structured_control_flow(lifted.op)
    region = block_body(lifted.op) if body is None else body
    shared = shared_layout(module, lifted)
    local_offsets: dict[str, int] = {}
    off = 0
    for v in lifted.local_vars:
        off = align_up(off, max(v.alignment, 1))
        local_offsets[v.name] = off
        off += v.size
    k = _Kernel(lifted, region, shared, shared.dynamic_offset, local_offsets,
                align_up(off, 16), sync_points(region), warp_steps(region))
    k.block_index = {b: i for i, b in enumerate(region.blocks)}
    attrs = lifted.op.attributes
    k.buffer_size = max(lifted.param_size, 1)
    # code run once per launch, by one thread, before the grid (it writes values into the
    # launch's parameter buffer)
    prologue = launch_prologue(lifted.op) if body is None else None
    if prologue is not None:
        k.prologue = _prepare(module, lifted, prologue.regions[0])
        k.buffer_size = int(attrs["launch_offset"]) + int(attrs["launch_bytes"])
    return k


# --- the module -----------------------------------------------------------------------------------

class InterpModule:
    """A PTX module for the interpreter: its `.global`/`.const` variables live in NumPy
    buffers for the lifetime of this object (shared by all launches, like a RawModule)."""

    def __init__(self, ptx: str) -> None:
        self.ptx = ptx
        self._setup(parse_ptx(ptx))

    @classmethod
    def from_ir(cls, text: str) -> InterpModule:
        """A module from IR text instead of PTX: an MLIR file as `cpuify ir --mlir` writes it
        (module-scope variables as top-level `upir.global` ops, then the kernels), or
        `upir.kernel` ops as printed by `--print-ir-after` (a kernel that reads module-scope
        variables needs the file's declarations of them).  Its kernels run as that IR says."""
        ops = parse_module(text)
        kernels = [op for op in ops if op.name == "upir.kernel"]
        if not kernels:
            raise ValueError("the IR text holds no upir.kernel op")
        module = PTXModule()
        for op in ops:
            if op.name == "upir.global":
                v = variable_of(op)
                module.variables.append(VarDecl(v.space, v.type, v.name, v.line, v.align, v.dims,
                                                v.init, v.linkage, v.vector))
        self = cls.__new__(cls)
        self.ptx = ""
        self._setup(module)
        for op in kernels:
            verify(op)
            view = KernelView.from_op(op)
            self._kernels[view.name] = _prepare(module, view)
        return self

    def _setup(self, module: PTXModule) -> None:
        self.module = module
        self.globals: dict[str, tuple[np.ndarray, int]] = {}
        self.children: list[ChildLaunch] = []     # the launches of the running grid
        self._kernels: dict[str, _Kernel] = {}
        for var in self.module.variables:
            if var.space not in ("global", "const"):
                continue
            if var.linkage == "extern" and var.init is None and var.size == 0:
                raise UnsupportedError(f"extern {var.space} variable '{var.name}' has no "
                                       "definition in this module", line=var.line)
            size = max(var.size, 1)
            data = initial_bytes(var, size, self.module.function_addresses())
            buf, addr = alloc(size, max(var.alignment, 16))
            buf[:] = np.frombuffer(data, dtype=np.uint8)
            self.globals[var.name] = (buf, addr)

    @property
    def kernel_names(self) -> list[str]:
        names = [f.name for f in self.module.entries]
        return names + [n for n in self._kernels if n not in names]

    def get_global(self, name: str, dtype: Any = np.uint8) -> np.ndarray:
        """A writable NumPy view of a `__device__`/`__constant__` variable."""
        if name not in self.globals:
            known = ", ".join(sorted(self.globals)) or "none"
            raise LookupError(f"no __device__/__constant__ variable named '{name}'; variables: {known}")
        buf = self.globals[name][0]
        return buf.view(dtype) if np.dtype(dtype) != np.uint8 else buf

    def kernel(self, name: str) -> _Kernel:
        k = self._kernels.get(name)
        if k is None:
            entry = self.module.functions.get(name)
            if entry is None or entry.kind != "entry" or entry.body is None:
                known = ", ".join(self.kernel_names) or "none"
                raise LookupError(f"no kernel named '{name}' in this module; kernels: {known}")
            lifted = lift_kernel(self.module, entry)
            verify(lifted.op)
            k = self._kernels[name] = _prepare(self.module, lifted)
        return k

    def use_ir(self, name: str, kernel_op: Operation) -> None:
        """Run kernel `name` from `kernel_op`, a `upir.kernel` op (e.g. its IR after passes,
        or printed and parsed back), instead of the IR lifted from the PTX: its parameters,
        variables and directives are read from the op."""
        verify(kernel_op)
        self.kernel(name)                   # (the name must be one of the module's kernels)
        self._kernels[name] = _prepare(self.module, KernelView.from_op(kernel_op))

    def launch(self, name: str, grid: Any, block: Any, args: Sequence[Any],
               shared_mem: int = 0, cooperative: bool = False) -> None:
        """Run the kernel; `cooperative`: as a cooperative launch (a grid workspace for
        grid.sync())."""
        k = self.kernel(name)
        g = _dim3(grid, "grid", name)
        b = _dim3(block, "block", name)
        nthreads = b[0] * b[1] * b[2]
        req = k.lifted.directives.get("maxntid") or k.lifted.directives.get("reqntid")
        limit = MAX_THREADS_PER_BLOCK
        if req:
            limit = min(int(np.prod(req)), limit)
        if nthreads > limit:
            raise ValueError(f"kernel '{name}': {nthreads} threads per block exceeds the limit "
                             f"of {limit} (cudaErrorInvalidConfiguration)")
        if shared_mem < 0:
            raise ValueError(f"kernel '{name}': shared_mem must be >= 0")
        _check_specialization(k, b, args)
        params = ctypes.create_string_buffer(pack_params(k.lifted, args), k.buffer_size)
        self._run_grid(k, g, b, ctypes.addressof(params), int(shared_mem), cooperative)

    def _run_grid(self, k: _Kernel, g: tuple[int, int, int], b: tuple[int, int, int],
                  params: int, shared_mem: int, cooperative: bool = False) -> None:
        """One grid, then the grids it launched (dynamic parallelism): in launch order, each
        with its own, then its tail launches: the parent is complete when its children are."""
        launch = _Launch(self, k, g, b, params, shared_mem)
        workspace = np.zeros(16, np.uint32) if cooperative else None   # grid.sync()'s
        if workspace is not None:
            launch.workspace = workspace.ctypes.data
        outer, self.children = self.children, []
        try:
            with np.errstate(all="ignore"):            # IEEE results, no warnings
                if k.prologue is not None:
                    one = (1, 1, 1)
                    for _ in BlockRun(_Launch(self, k.prologue, one, one, launch.params, 0),
                                       (0, 0, 0)).run():
                        raise LaunchError(f"kernel '{launch.name}': the launch prologue waits "
                                          "for other threads")
                _run_blocks(launch, g)
            children = self.children
        finally:
            self.children = outer
        for tail in (False, True):
            for c in children:
                if c.launched and (c.stream == _STREAM_TAIL_LAUNCH) == tail:
                    self._run_grid(self.kernel(c.kernel), c.grid, c.block,
                                   ctypes.addressof(c.params), c.shared_mem)


def _check_specialization(k: _Kernel, block: tuple[int, int, int], args: Sequence[Any]) -> None:
    """IR run with `use_ir` may be code for one block shape (`block_dims`) or for pointer
    arguments that overlap no other (`noalias_params`, byte offsets of parameters): a launch
    that breaks what the IR was compiled for is refused, not run with a wrong answer."""
    attrs = k.lifted.op.attributes
    name = k.lifted.name
    dims = attrs.get("block_dims")
    if dims is not None and tuple(int(d) for d in dims) != block:
        raise ValueError(f"kernel '{name}': its IR is the code for blocks of "
                         f"{tuple(int(d) for d in dims)}, launched with blocks of {block}")
    noalias = {int(x) for x in attrs.get("noalias_params") or ()}
    if not noalias:
        return

    def extent(a: Any) -> tuple[int, int] | None:
        if not isinstance(a, np.ndarray):
            return None
        lo, hi = np.byte_bounds(a) if hasattr(np, "byte_bounds") else \
            np.lib.array_utils.byte_bounds(a)  # type: ignore[attr-defined]
        return int(lo), int(hi)
    extents = [extent(a) for a in args]
    for i, p in enumerate(k.lifted.params[:len(args)]):
        if p.offset not in noalias:
            continue
        mine = extents[i]
        if mine is None:
            raise ValueError(f"kernel '{name}': its IR is the code for a pointer argument "
                             f"'{p.name}' that overlaps no other; give it an array")
        for j, other in enumerate(extents):
            if j != i and other is not None and other[0] < mine[1] and mine[0] < other[1]:
                raise ValueError(f"kernel '{name}': its IR is the code for a pointer argument "
                                 f"'{p.name}' that overlaps no other, but it overlaps argument "
                                 f"{j}")


_STREAM_TAIL_LAUNCH = 0x3            # CUDA 12's cudaStreamTailLaunch


def _run_blocks(launch: "_Launch", g: tuple[int, int, int]) -> None:
    """The blocks of the grid one after another; a block whose threads all wait for others
    gives way to the blocks started before it and, when they all wait, to the next block."""
    ids = ((bx, by, bz) for bz in range(g[2]) for by in range(g[1]) for bx in range(g[0]))
    resident: list[tuple[BlockRun, Iterator[bool]]] = []
    last_progress = time.monotonic()
    while True:
        progressed = False
        for run in list(resident):
            blk, steps = run
            try:
                if next(steps):
                    progressed = True
            except StopIteration:
                resident.remove(run)
                progressed = True
        if progressed:
            last_progress = time.monotonic()
        if resident and progressed:
            continue
        ctaid = next(ids, None)
        if ctaid is not None:           # every resident block waits (or none is left)
            blk = BlockRun(launch, ctaid)
            resident.append((blk, blk.run()))
            last_progress = time.monotonic()
            continue
        if not resident:
            return
        if time.monotonic() - last_progress > _NO_PROGRESS_SECONDS:
            blk = resident[0][0]
            thread, line = blk.stuck_at
            raise LaunchError(
                f"kernel '{launch.name}' can make no progress: every thread waits in a "
                f"spin-wait loop; block {blk.ctaid}, thread {thread} waits in the loop at PTX "
                f"line {line} for memory that no running thread writes")


@dataclass
class _Launch:
    module: InterpModule
    kernel: _Kernel
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    params: int                        # address of the packed parameter buffer
    dyn_shared: int
    workspace: int = 0                 # the grid workspace of a cooperative launch

    @property
    def name(self) -> str:
        return self.kernel.lifted.name


def interpret_kernel(ptx_text: str, kernel: str, grid: Any, block: Any, args: tuple,
                     shared_mem: int = 0, cooperative: bool = False) -> None:
    """Run `kernel` of the PTX module `ptx_text` in the reference interpreter.

    Module variables start from their initializers at every call; keep an `InterpModule`
    to launch several kernels on the same `__device__` variables."""
    InterpModule(ptx_text).launch(kernel, grid, block, args, shared_mem, cooperative)
