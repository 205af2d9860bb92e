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
from cpuify.interp.memory import align_up, alloc, load, store
from cpuify.interp import texture  # noqa: F401  (registers the texture and surface ops)
from cpuify.interp import spec_eval  # noqa: F401  (registers the table's spec-driven ops)
from cpuify.interp.ops import PTX_OPS, in_order_sum, mods
from cpuify.interp.params import pack_arguments
from cpuify.interp.printf import device_assert_message, device_printf
from cpuify.interp.tensor_cores import ldmatrix, movmatrix, stmatrix, warp_mma
from cpuify.interp.values import (
    coerce, from_bits, ir_type_of, mask, read_as, resize_int, to_bits, to_signed, width_of,
    write_as,
)
from cpuify.ir.core import Operation, Region, Value
from cpuify.ir.dialects import is_sync
from cpuify.ir.modifiers import type_size
from cpuify.ir.parser import parse_module
from cpuify.ir.structured import lower_structured_control_flow
from cpuify.ir.structure import KernelView, block_body, launch_prologue, variable_of
from cpuify.ir.verifier import verify
from cpuify.lifting import LiftedKernel, lift_kernel
from cpuify.lifting.tensor_cores import parse_ldmatrix, parse_matrix_op

MAX_THREADS_PER_BLOCK = 1024
_NULL_PAGE = 1 << 16
#: what a speculated shared load (the compiler's `speculative` attribute,
#: transforms/selected_loads.py) outside the window reads: zeros, enough for any access
_SPECULATED_ZEROS = alloc(64, 64)
_EXITED = None            # scheduler state of a thread that has exited
_RESUMED = "resumed"      # ... of a thread whose warp collective has just been exchanged
#: loads that read what other threads write while a loop runs (a thread taking a backward
#: branch after one of these, an atomic or a nanosleep waits for other threads)
_WAITING_MODS = frozenset(("volatile", "acquire", "relaxed", "mmio"))
_NO_PROGRESS_SECONDS = 2.0


class _SpinPoint:
    """Scheduler state of a thread parked in a loop that waits for other threads (one per
    loop header, or the `upir.spin_wait` op itself): `line` is the waiting read's PTX line."""
    __slots__ = ("attributes", "name")

    def __init__(self, line: int) -> None:
        self.name = "spin"
        self.attributes = {"line": line}


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
    spin_points: dict[Any, _SpinPoint] = field(default_factory=dict)  # loop header -> state


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
        self.children: list[_ChildLaunch] = []     # the launches of the running grid
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
                    for _ in _BlockRun(_Launch(self, k.prologue, one, one, launch.params, 0),
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


@dataclass
class _ChildLaunch:
    """A grid launched from device code: its parameter buffer, filled by the parent."""
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    params: Any                        # ctypes buffer
    launched: bool = False
    stream: int = 0


def _run_blocks(launch: "_Launch", g: tuple[int, int, int]) -> None:
    """The blocks of the grid one after another; a block whose threads all wait for others
    gives way to the blocks started before it and, when they all wait, to the next block."""
    ids = ((bx, by, bz) for bz in range(g[2]) for by in range(g[1]) for bx in range(g[0]))
    resident: list[tuple[_BlockRun, Iterator[bool]]] = []
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
            blk = _BlockRun(launch, ctaid)
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


# --- the C library (device malloc/free) ----------------------------------------------------

_LIBC = ctypes.CDLL(None)
_LIBC.malloc.restype = ctypes.c_void_p
_LIBC.malloc.argtypes = [ctypes.c_size_t]
_LIBC.free.restype = None
_LIBC.free.argtypes = [ctypes.c_void_p]


# --- threads -------------------------------------------------------------------------------------

class Thread:
    """One CUDA thread: its SSA environment, ids and local memory; `run()` is a generator
    that yields the sync op (barrier / warp collective) it waits at."""

    def __init__(self, blk: "_BlockRun", tid: tuple[int, int, int], linear: int) -> None:
        self.blk = blk
        self.launch = blk.launch
        self.kernel = blk.launch.kernel
        self.tid = tid
        self.linear = linear
        self.env: dict[Value, Any] = {}
        # what this thread contributes to / gets from its current collective
        self.xval = self.xb = self.xc = self.xmask = 0
        self.xregs: list[int] = []           # tensor-core collectives: registers in and out
        self.xregs_out: list[int] = []
        self.xout = 0
        self.xpred = 1
        size = self.kernel.local_size
        if size:
            self.local, self.local_base = alloc(size, 16)
        else:
            self.local, self.local_base = None, 0

    # -- values
    def get(self, v: Value) -> Any:
        return self.env[v]

    def src(self, op: Operation, i: int, ptx_type: str) -> Any:
        """Operand i read as PTX type `ptx_type`."""
        v = op.operands[i]
        return read_as(self.env[v], v.type, ptx_type)

    def bits(self, v: Value) -> int:
        return to_bits(self.env[v], v.type)

    def src_bits(self, op: Operation, i: int, ptx_type: str, width: int) -> int:
        t = ir_type_of(ptx_type)
        return resize_int(to_bits(self.src(op, i, ptx_type), t), width_of(t), width, False)

    def set(self, op: Operation, value: Any, ptx_type: str, index: int = 0) -> None:
        """Result `index` := value computed in PTX type `ptx_type`."""
        r = op.results[index]
        self.env[r] = write_as(value, ptx_type, r.type)

    # -- errors
    def unsupported(self, message: str, op: Operation) -> None:
        line = op.attributes.get("line")
        module = self.launch.module.module
        raise UnsupportedError(f"interpreter: {message}", line=line, kernel=self.launch.name,
                               source_line=module.source_line(line) if line else None)

    def fail(self, message: str, op: Operation | None = None) -> None:
        line = op.attributes.get("line") if op is not None else None
        where = f" (PTX line {line}, thread {self.tid})" if line else f" (thread {self.tid})"
        raise LaunchError(f"kernel '{self.launch.name}' failed in block {self.blk.ctaid}: "
                          f"{message}{where}")

    # -- memory
    def window_base(self, space: str) -> int:
        return self.blk.shared_base if space == "shared" else self.local_base

    def window_size(self, space: str) -> int:
        if space == "shared":
            return self.blk.shared_size
        return self.kernel.local_size

    def address(self, op: Operation, space: str, nbytes: int) -> int:
        """Real address accessed by memory op `op` (address operand + `offset`)."""
        base = op.operands[0]
        iv = resize_int(to_bits(self.env[base], base.type), width_of(base.type), 64, False)
        off = op.attributes.get("offset", 0)
        if space in ("shared", "local"):
            rel = (iv + off) & mask(64)
            if rel + nbytes > self.window_size(space):
                if "speculative" in op.attributes and op.name == "ptx.ld":
                    # (a load the compiler speculated, whose value the thread does not
                    # use here: any value will do; zeros, from a buffer of our own)
                    return _SPECULATED_ZEROS[1]
                self.fail(f"{space} memory access out of bounds: offset {to_signed(rel, 64)}, "
                          f"{nbytes} byte(s), window of {self.window_size(space)} bytes", op)
            return self.window_base(space) + rel
        addr = (iv + off) & mask(64)
        if addr < _NULL_PAGE:
            self.fail(f"{space} memory access at address {addr:#x} (null pointer?)", op)
        return addr

    # -- execution
    def run(self) -> Iterator[Operation]:
        env = self.env
        kernel = self.kernel
        block = kernel.region.entry
        sync = kernel.sync_index
        steps = kernel.steps
        position = kernel.block_index
        waited = 0          # PTX line of a waiting read since the last backward branch
        while True:
            for op in block.ops:
                handler = PTX_OPS.get(op.name)
                if handler is not None:
                    if op in steps:
                        yield op            # a warp step: the lanes of the warp meet here
                    if (op.name == "ptx.atom" or op.name == "ptx.mbarrier" or
                            op.name == "ptx.ld" and
                            _WAITING_MODS.intersection(op.attributes.get("mods", ()))):
                        waited = op.attributes.get("line") or -1
                    handler(self, op)
                    continue
                name = op.name
                if name == "cf.br" or name == "cf.cond_br":
                    k = 0 if name == "cf.br" or env[op.operands[0]] else 1
                    args = op.successor_args[k]
                    succ = op.successors[k]
                    vals = [(env[v], v.type) for v in args]     # parallel copy
                    for arg, (val, vt) in zip(succ.args, vals):
                        env[arg] = coerce(val, vt, arg.type)
                    if position[succ] <= position[block]:
                        if waited:          # round a loop that waits for other threads
                            spin = kernel.spin_points.get(succ)
                            if spin is None:
                                spin = kernel.spin_points[succ] = _SpinPoint(max(waited, 0))
                            yield spin      # type: ignore[misc]
                        waited = 0
                    block = succ
                    break
                if name == "upir.spin_wait":    # (optimized IR: the compiler's yield point)
                    yield op
                    waited = 0
                    continue
                if name == "upir.nanosleep":
                    waited = op.attributes.get("line") or -1
                if op in sync:
                    self.contribute(op)
                    yield op
                    self.receive(op)
                    continue
                if name == "upir.exit":
                    return
                if name == "upir.trap":
                    self.fail("a device-side assert() failed" if op.attributes.get("assert")
                              else "stack overflow: a recursion outgrew the thread's call stack "
                              f"({CALL_STACK_SIZE} bytes)" if op.attributes.get("stack_overflow")
                              else "the kernel executed a trap instruction", op)
                upir = UPIR_OPS.get(name)
                if upir is None:
                    if name == "upir.warp_matrix":
                        self.unsupported("'upir.warp_matrix' is code generation's form of a "
                                         "tensor-core instruction (after the pipeline); the "
                                         "interpreter runs them as lifted: give it the IR "
                                         "printed by --print-ir-after", op)
                    self.unsupported(f"no semantics for '{name}'", op)
                upir(self, op)  # type: ignore[misc]
            else:
                self.fail("basic block without terminator", None)

    def contribute(self, op: Operation) -> None:
        """This thread's inputs to the collective (codegen's leave_at_sync)."""
        def as64(v: Value) -> int:
            return resize_int(to_bits(self.env[v], v.type), width_of(v.type), 64, False)

        def as32(v: Value) -> int:
            return as64(v) & mask(32)

        vals = op.operands
        if op.name == "upir.barrier":
            # bar.red: the predicate is the last operand (`bar.red.popc.u32 d, a, {!}p`)
            self.xval = as64(vals[-1]) if vals else 0
            return
        kind = op.attributes["kind"]
        if kind in _MATRIX_KINDS:
            # every lane's registers (ld/stmatrix: first its row address, as a real address)
            self.xmask = 0xFFFFFFFF
            self.xregs = [self.bits(v) for v in vals]
            if kind in ("ldmatrix", "stmatrix"):
                spec = parse_ldmatrix(tuple(op.attributes["mods"]), kind)
                assert not isinstance(spec, str)
                if spec.space == "shared":
                    self.xregs[0] = self.blk.shared_base + self.xregs[0]
            return
        if kind == "shfl":
            self.xval, self.xb, self.xc, self.xmask = as64(vals[0]), as32(vals[1]), as32(vals[2]), as32(vals[3])
        elif kind in ("vote", "match", "redux"):
            self.xval = as64(vals[0])
            if len(vals) > 1:
                self.xmask = as32(vals[1])
        elif kind == "named_barrier":
            self.xb, self.xc = as32(vals[0]), as32(vals[1])
        elif vals:                        # syncwarp (activemask has no operand)
            self.xmask = as32(vals[0])

    def receive(self, op: Operation) -> None:
        """The collective's results (codegen's restore)."""
        if not op.results:
            return
        if op.name == "upir.warp_collective" and op.attributes["kind"] in _MATRIX_KINDS:
            for r, bits in zip(op.results, self.xregs_out):
                self.env[r] = from_bits(bits, r.type)
            return
        first = op.results[0]
        if first.type == "i1" and (op.name == "upir.barrier" or op.attributes.get("kind") == "vote"):
            self.env[first] = int(self.xout != 0)
        else:
            w = width_of(first.type)
            self.env[first] = coerce(self.xout & mask(w), f"i{w}", first.type)
        if len(op.results) > 1:
            self.env[op.results[1]] = int(self.xpred != 0)


# --- upir ops (everything but control flow and sync points) ---------------------------------------

def _const(th: Thread, op: Operation) -> None:
    r = op.results[0]
    val = op.attributes["value"]
    if r.type in ("f32", "f64"):
        np_t = np.float32 if r.type == "f32" else np.float64
        th.env[r] = from_bits(val, r.type) if isinstance(val, int) else np_t(float(val))
    else:
        th.env[r] = int(val) & mask(width_of(r.type))


def _param(th: Thread, op: Operation) -> None:
    t = op.attributes["type"]
    th.set(op, load(th.launch.params + op.attributes["offset"], t), t)


_STORE_TYPE = {"i8": "b8", "i16": "b16", "i32": "b32", "i64": "b64", "f32": "f32", "f64": "f64"}


def _launch_store(th: Thread, op: Operation) -> None:
    v = op.operands[0]
    store(th.launch.params + op.attributes["offset"], _STORE_TYPE[v.type], th.get(v))


def _special(th: Thread, op: Operation) -> None:
    reg: str = op.attributes["reg"]
    base, _, comp = reg.partition(".")
    k = "xyz".index(comp) if comp in ("x", "y", "z") else 0
    launch = th.launch
    lin = th.linear
    nthreads = launch.block[0] * launch.block[1] * launch.block[2]
    lane = lin & 31
    one = 1 << lane
    values = {
        "%tid": lambda: th.tid[k], "%ntid": lambda: launch.block[k],
        "%ctaid": lambda: th.blk.ctaid[k], "%nctaid": lambda: launch.grid[k],
        "%laneid": lambda: lane, "%warpid": lambda: lin >> 5,
        "%nwarpid": lambda: (nthreads + 31) >> 5, "%warpsize": lambda: 32,
        "%lanemask_eq": lambda: one, "%lanemask_lt": lambda: one - 1,
        "%lanemask_le": lambda: one | (one - 1), "%lanemask_gt": lambda: ~(one | (one - 1)),
        "%lanemask_ge": lambda: ~(one - 1), "%smid": lambda: 0, "%gridid": lambda: 0,
        "%nsmid": lambda: 1, "%dynamic_smem_size": lambda: launch.dyn_shared,
        "%total_smem_size": lambda: launch.dyn_shared + th.kernel.shared.dynamic_offset,
        "%aggr_smem_size": lambda: launch.dyn_shared + th.kernel.shared.dynamic_offset,
    }
    fn = values.get(base)
    if fn is None:
        th.unsupported(f"special register '{reg}' is not supported", op)
    th.set(op, fn() & mask(32), "u32")  # type: ignore[misc]


def _clock(th: Thread, op: Operation) -> None:
    th.set(op, time.perf_counter_ns() & mask(64), "u64")


def _addressof(th: Thread, op: Operation) -> None:
    sym = op.attributes["symbol"]
    space = op.attributes["space"]
    k = th.kernel
    if space == "shared":
        addr = k.shared.offsets.get(sym)
    elif space == "local":
        addr = k.local_offsets.get(sym)
    elif space == "param":
        p = next((p for p in k.lifted.params if p.name == sym), None)
        addr = th.launch.params + p.offset if p is not None else None
    else:
        g = th.launch.module.globals.get(sym)
        addr = g[1] if g is not None else None
    if addr is None:
        th.unsupported(f"unknown {space} variable '{sym}'", op)
    th.set(op, addr, "u64")


def _nop(th: Thread, op: Operation) -> None:
    pass


def _printf(th: Thread, op: Operation) -> None:
    fmt = th.bits(op.operands[0])
    if op.attributes.get("assert"):
        device_assert_message(fmt)
        return
    args = th.bits(op.operands[1]) if len(op.operands) > 1 else 0
    n = device_printf(fmt, args)
    if op.results:
        th.set(op, n & mask(32), "s32")


def _malloc(th: Thread, op: Operation) -> None:
    size = th.src(op, 0, "u64")
    th.set(op, _LIBC.malloc(size) or 0, "u64")


#: bytes of the call stack of each thread (recursive device functions; CUDA's default
#: cudaLimitStackSize); set it to run a deeper recursion
CALL_STACK_SIZE = 1024


def _call_stack(th: Thread, op: Operation) -> None:
    # a call stack of this thread's own
    stack = getattr(th, "call_stack", None)
    if stack is None:
        stack = th.call_stack = alloc(CALL_STACK_SIZE, 16)  # type: ignore[attr-defined]
    th.set(op, stack[1], "u64", 0)
    th.set(op, CALL_STACK_SIZE, "u64", 1)


def _launch_buffer(th: Thread, op: Operation) -> None:
    """cudaGetParameterBufferV2: a buffer for a child grid's parameters, or 0 and a status."""
    func = th.src(op, 0, "u64")
    dims = [th.src(op, i, "u32") for i in range(1, 8)]
    names = dict(zip(op.attributes["addresses"], op.attributes["kernels"]))  # type: ignore[call-overload]
    module = th.launch.module
    status, address = 0, 0
    name = names.get(func)
    if name is None:
        status = 98                      # cudaErrorInvalidDeviceFunction
    else:
        try:
            k = module.kernel(name)
        except UnsupportedError:
            status = 801                 # cudaErrorNotSupported
        else:
            g, b, smem = tuple(dims[0:3]), tuple(dims[3:6]), dims[6]
            req = k.lifted.directives.get("maxntid") or k.lifted.directives.get("reqntid")
            limit = min(int(np.prod(req)), MAX_THREADS_PER_BLOCK) if req else MAX_THREADS_PER_BLOCK
            if 0 in g or 0 in b or b[0] > 1024 or b[1] > 1024 or b[2] > 64 or \
                    b[0] * b[1] * b[2] > limit or g[1] > 65535 or g[2] > 65535:
                status = 9                   # cudaErrorInvalidConfiguration
            else:
                child = _ChildLaunch(name, g, b, smem, ctypes.create_string_buffer(k.buffer_size))  # type: ignore[arg-type]
                module.children.append(child)
                address = ctypes.addressof(child.params)
    th.set(op, address, "u64", 0)
    th.set(op, status, "u32", 1)


def _launch_device(th: Thread, op: Operation) -> None:
    """cudaLaunchDeviceV2: the grid whose buffer this is runs after the parent grid."""
    address = th.bits(op.operands[0])
    for child in th.launch.module.children:
        if ctypes.addressof(child.params) == address:
            child.launched = True
            child.stream = th.src(op, 1, "u64")
            th.set(op, 0, "u32")
            return
    th.set(op, 1, "u32")                 # cudaErrorInvalidValue


def _free(th: Thread, op: Operation) -> None:
    addr = th.bits(op.operands[0])
    if addr:
        _LIBC.free(addr)


def _envreg(th: Thread, op: Operation) -> None:
    w = th.launch.workspace
    reg = op.attributes.get("reg", "")
    th.set(op, (w >> 32) if reg == "%envreg1" else (w & 0xFFFFFFFF) if reg == "%envreg2" else 0,
           "u32")


UPIR_OPS = {
    "upir.const": _const, "upir.param": _param, "upir.special": _special,
    "upir.envreg": _envreg,
    "upir.launch_store": _launch_store,
    "upir.clock": _clock, "upir.addressof": _addressof, "upir.fence": _nop,
    "upir.nanosleep": _nop, "upir.printf": _printf, "upir.malloc": _malloc, "upir.free": _free,
    "upir.call_stack": _call_stack, "upir.in_order_sum": in_order_sum,
    "upir.launch_buffer": _launch_buffer, "upir.launch_device": _launch_device,
}


# --- the block scheduler ----------------------------------------------------------------------------

def _warp_exchange(lanes: list[Thread], group: int, op: Operation) -> None:
    """One warp collective among the lanes in `group` (bitmask over `lanes`), exactly as
    warp_exchange() in runtime/block_sched.c."""
    kind = op.attributes["kind"]
    m = mods(op)
    nlanes = len(lanes)
    members = [l for l in range(nlanes) if group >> l & 1]
    if kind in _MATRIX_KINDS:
        _matrix_exchange(lanes, group, op)
        return
    for l in members:
        th = lanes[l]
        out, pred = 0, 1
        if kind == "shfl":
            bval, cval, segmask = th.xb & 31, th.xc & 31, (th.xc >> 8) & 31
            maxlane = (l & segmask) | (cval & ~segmask)
            minlane = l & segmask
            if "up" in m:
                j = l - bval
                pred = int(j >= maxlane)
            elif "down" in m:
                j = l + bval
                pred = int(j <= maxlane)
            elif "bfly" in m:
                j = l ^ bval
                pred = int(j <= maxlane)
            else:  # idx
                j = minlane | (bval & ~segmask)
                pred = int(j <= maxlane)
            # (what an H100 returns: the lane's own value when the source is outside the
            # segment; 0 when the source lane takes no part: not in the member mask, at no
            # shuffle with this mask, exited, or past the end of a partial warp)
            if not pred:
                out = th.xval
            elif j < 0 or j >= nlanes or not group >> j & 1:
                out = 0
            else:
                out = lanes[j].xval
        elif kind == "vote":
            ballot = sum(1 << x for x in members if lanes[x].xval & 1)
            if "ballot" in m:
                out = ballot
            elif "all" in m:
                out = int(ballot == group)
            elif "any" in m:
                out = int(ballot != 0)
            else:  # uni
                out = int(ballot == 0 or ballot == group)
        elif kind == "activemask":
            out = group
        elif kind == "match":
            vmask = mask(64) if "b64" in m else mask(32)
            same = sum(1 << x for x in members if lanes[x].xval & vmask == th.xval & vmask)
            if "any" in m:
                out = same
            else:
                pred = int(same == group)
                out = group if pred else 0
        elif kind == "redux":
            signed = "s32" in m
            vals = [lanes[x].xval & mask(32) for x in members]
            if "add" in m:
                acc = sum(vals) & mask(32)
            elif "min" in m or "max" in m:
                key = (lambda v: to_signed(v, 32)) if signed else (lambda v: v)
                acc = (min if "min" in m else max)(vals, key=key)
            else:
                acc = vals[0]
                for v in vals[1:]:
                    acc = acc & v if "and" in m else acc | v if "or" in m else acc ^ v
            out = acc
        elif kind != "syncwarp":
            raise UnsupportedError(f"unknown warp collective '{kind}'", line=op.attributes.get("line"))
        th.xout, th.xpred = out, pred


def _same_collective(a: Any, b: Operation) -> bool:
    """Whether scheduler state `a` is a lane waiting at a warp collective like `b`: of the
    same kind, with the same modifiers (another instruction of the kernel may be that)."""
    return a is not _EXITED and a is not _RESUMED and isinstance(a, Operation) and \
        a.name == "upir.warp_collective" and a.attributes.get("kind") == b.attributes.get("kind") \
        and sorted(mods(a)) == sorted(mods(b))


_MATRIX_KINDS = ("mma", "ldmatrix", "stmatrix", "movmatrix")


def _matrix_exchange(lanes: list[Thread], group: int, op: Operation) -> None:
    """wmma.mma / mma.sync / ldmatrix: all 32 lanes of the warp take part (.aligned)."""
    line = op.attributes.get("line")
    if len(lanes) != 32 or group != 0xFFFFFFFF:
        raise LaunchError(f"kernel '{lanes[0].launch.name}': a warp-wide matrix instruction "
                          f"(PTX line {line}) was reached by only some lanes of a warp (it needs "
                          "all 32: .sync.aligned)")
    mods_ = tuple(op.attributes["mods"])
    kind = str(op.attributes["kind"])
    if kind in ("ldmatrix", "stmatrix", "movmatrix"):
        spec = parse_ldmatrix(mods_, kind)
        assert not isinstance(spec, str)
        if kind == "ldmatrix":
            outs = ldmatrix(spec, [th.xregs[0] for th in lanes])
        elif kind == "stmatrix":
            stmatrix(spec, [th.xregs[0] for th in lanes], [th.xregs[1:] for th in lanes])
            outs = [[] for _ in lanes]
        else:
            outs = movmatrix([th.xregs[0] for th in lanes])
    else:
        spec_m = parse_matrix_op(str(op.attributes["family"]), mods_)
        assert not isinstance(spec_m, str)
        outs = warp_mma(spec_m, [th.xregs for th in lanes])
    for th, regs in zip(lanes, outs):
        th.xregs_out = regs


def _is_soft(s: Any) -> bool:
    """A thread at a soft barrier (interchanged loops: a point where the thread may stop,
    waiting for no other thread)."""
    return s is not _EXITED and s is not _RESUMED and s.name == "upir.barrier" and \
        bool(s.attributes.get("soft"))


def _is_named(s: Any) -> bool:
    """A thread waiting at a named barrier (bar.sync/bar.arrive with an id or a count)."""
    return s is not _EXITED and s is not _RESUMED and s.name == "upir.warp_collective" and \
        s.attributes["kind"] == "named_barrier"



class _BlockRun:
    """Runs the threads of one block to completion."""

    def __init__(self, launch: _Launch, ctaid: tuple[int, int, int]) -> None:
        self.launch = launch
        self.ctaid = ctaid
        k = launch.kernel
        self.shared_size = k.shared_static + launch.dyn_shared
        self.shared, self.shared_base = alloc(max(self.shared_size, 1), 64)
        bx, by, bz = launch.block
        self.threads = [Thread(self, (x, y, z), (z * by + y) * bx + x)
                        for z in range(bz) for y in range(by) for x in range(bx)]

    def run(self) -> Iterator[bool]:
        """Runs the block; yields whenever every live thread waits for other threads (a
        round of the parked threads moved none of them), with whether any thread got
        anywhere since the last yield.  `stuck_at`: (thread, PTX line) of a waiting thread."""
        threads = self.threads
        n = len(threads)
        gens = [t.run() for t in threads]
        state: list[Any] = [_EXITED] * n      # the sync op a thread waits at, or _EXITED
        self.stuck_at = (0, 0)

        def advance(i: int) -> None:
            try:
                state[i] = next(gens[i])
            except StopIteration:
                state[i] = _EXITED

        for i in range(n):
            advance(i)
        arrived = [0] * 16                   # named barriers: bar.arrive counts not yet used
        moved = True
        while True:
            live = [i for i in range(n) if state[i] is not _EXITED]
            if not live:
                return
            soft = next((state[i] for i in live if _is_soft(state[i])), None)
            if soft is not None:
                # threads at a soft barrier wait for nobody: the group at the first thread's
                # goes on (the next iteration of an interchanged loop) before anything that
                # waits for other threads is looked at
                group = [i for i in live if state[i] is soft]
                self._check_lockstep(soft, group)
                for i in group:
                    advance(i)
                moved = True
                continue
            if self._named_round(state, advance, arrived, len(live)):
                moved = True
                continue
            spinning = [i for i in live
                        if getattr(state[i], "name", None) in ("spin", "upir.spin_wait")]
            if any(self._in_warp(state[i]) for i in live):
                if self._warp_round(state, advance, incomplete=not spinning):
                    moved = True
                    continue
            if spinning:
                # the threads that wait for others go round their loops once more
                went = False
                for i in spinning:
                    at = state[i]
                    advance(i)
                    if state[i] is not at:
                        went = True
                if went:
                    moved = True
                    continue
                first = spinning[0]
                self.stuck_at = (first, state[first].attributes.get("line", 0))  # type: ignore[union-attr]
                yield moved
                moved = False
                continue
            moved = True
            barriers = {state[i] for i in live}
            if any(_is_named(b) for b in barriers):
                raise LaunchError(
                    f"kernel '{self.launch.name}' failed in block {self.ctaid}: threads wait at "
                    "named barriers (bar.sync id, count) that cannot complete: waiting at PTX "
                    f"lines {', '.join(sorted(str(b.attributes.get('line')) for b in barriers))}")
            if len(barriers) > 1:
                lines = sorted(str(b.attributes.get("line")) for b in barriers)  # type: ignore[union-attr]
                raise LaunchError(
                    f"kernel '{self.launch.name}' failed in block {self.ctaid}: not all threads "
                    "of the block reached the same __syncthreads() (a barrier inside a branch "
                    f"that only some threads take): live threads wait at barriers on PTX lines "
                    f"{', '.join(lines)}")
            (bar,) = barriers
            red = bar.attributes.get("reduce")  # type: ignore[union-attr]
            if red is not None:
                preds = [threads[i].xval & 1 for i in live]
                out = sum(preds) if red == "popc" else int(all(preds)) if red == "and" else int(any(preds))
                for i in live:
                    threads[i].xout = out
            for i in live:
                advance(i)

    def _check_lockstep(self, soft: Operation, group: list[int]) -> None:
        """The promise of a soft barrier's `lockstep` header arguments (the iteration
        counters of interchange-thread-strided-loops, which compiled code keeps once per
        block): every thread resuming there together holds the same value in each."""
        header = soft.parent
        indices = soft.attributes.get("lockstep") or []
        if header is None or not indices:
            return
        for index in indices:
            arg = header.args[int(index)]
            values = {self.threads[i].env.get(arg) for i in group}
            if len(values) > 1:
                raise LaunchError(
                    f"kernel '{self.launch.name}' failed in block {self.ctaid}: the threads "
                    f"resuming at the soft barrier of the loop at PTX line "
                    f"{soft.attributes.get('line')} hold different values "
                    f"({', '.join(str(v) for v in sorted(values, key=str))}) in its lockstep "
                    f"argument {arg.hint or index}, which the IR says is the same in all of "
                    "them (an interchange of a loop the threads do not enter together: a "
                    "compiler bug; run with --disable-pass=interchange-thread-strided-loops)")

    def _in_warp(self, s: Any) -> bool:
        """Whether a thread in scheduler state `s` waits for lanes of its warp (at a warp
        collective or a warp step), not for the block."""
        return s is not _EXITED and s is not _RESUMED and (
            s.name == "upir.warp_collective" and s.attributes.get("kind") != "named_barrier"
            or s in self.launch.kernel.steps)

    def _named_round(self, state: list, advance: Any, arrived: list[int], nlive: int) -> bool:
        """Named barriers (as cpuify_run_block): threads at bar.arrive add to their
        barrier's count and go on; threads waiting at bar.sync on a barrier are released
        `count` at a time (0: every live thread), counting arrivals, in thread order.
        Returns whether any thread was resumed."""
        threads = self.threads
        index = self.launch.kernel.sync_index
        resumed: dict[int, list[int]] = {}
        waiting: dict[int, list[int]] = {}
        for i, s in enumerate(state):
            if not _is_named(s):
                continue
            bar = threads[i].xb & 15
            if s.attributes.get("arrive"):
                arrived[bar] += 1
                resumed.setdefault(index[s], []).append(i)
            else:
                waiting.setdefault(bar, []).append(i)
        for bar, ids in sorted(waiting.items()):
            while ids:
                need = threads[ids[0]].xc or nlive
                used = min(arrived[bar], need)
                if used + len(ids) < need:
                    break
                arrived[bar] -= used
                go, ids = ids[:need - used], ids[need - used:]
                for i in go:
                    resumed.setdefault(index[state[i]], []).append(i)
        for i in (i for r in resumed.values() for i in r):
            state[i] = _RESUMED
        for r in sorted(resumed):
            for i in sorted(resumed[r]):
                advance(i)
        return bool(resumed)

    def _warp_round(self, state: list, advance: Any, incomplete: bool = True) -> bool:
        """Exchange the warp collectives that can run, then resume their lanes (as
        cpuify_run_block): per warp, lanes waiting at one collective with one member mask
        form a group; a group runs when every live lane of its mask has arrived (pass 0);
        if no group of the block is complete, incomplete groups run anyway (pass 1, unless
        not `incomplete`).  Resumed groups run in the order of their sync point, threads in
        linear order.  Returns whether a group ran."""
        threads = self.threads
        n = len(threads)
        index = self.launch.kernel.sync_index
        steps = self.launch.kernel.steps
        resumed: dict[int, list[int]] = {}
        for pass_ in (0, 1) if incomplete else (0,):
            if resumed:
                break
            for base in range(0, n, 32):
                lanes = threads[base:base + 32]
                live = sum(1 << m for m in range(len(lanes)) if state[base + m] is not _EXITED)
                # of the lanes at warp steps, those at the first in program order go on: the
                # others wait for them (the reconvergence of a pre-Volta warp)
                lowest = min((index[s] for s in state[base:base + 32] if s in steps),
                             default=None)
                done = 0
                for l in range(len(lanes)):
                    s = state[base + l]
                    if s is _EXITED or s is _RESUMED or done >> l & 1 or not self._in_warp(s):
                        continue
                    step = s in steps
                    if step and index[s] != lowest:
                        continue
                    masked = not step and s.attributes["kind"] != "activemask"
                    mask = lanes[l].xmask
                    # a `.sync` collective meets the lanes at any collective of the same
                    # kind and modifiers with the same member mask (PTX ISA: "executed
                    # shfl.sync with the same qualifiers and the same membermask")
                    group = sum(1 << m for m in range(l, len(lanes))
                                if (state[base + m] is s or masked and not done >> m & 1 and
                                    _same_collective(state[base + m], s))
                                and (not masked or lanes[m].xmask == mask))
                    done |= group
                    want = mask & live if masked else group
                    if pass_ == 0 and want & ~group:
                        continue                 # members still on their way: wait for them
                    if not step:
                        _warp_exchange(lanes, group, s)
                    members = [base + m for m in range(len(lanes)) if group >> m & 1]
                    for i in members:
                        resumed.setdefault(index[state[i]], []).append(i)   # each at its own op
                        state[i] = _RESUMED
        for r in sorted(resumed):
            for i in sorted(resumed[r]):
                advance(i)
        return bool(resumed)
