"""CuPy-compatible kernel API on the CPU: RawModule, RawKernel (CuPy 13-14's surface), and
Function, the compiled kernel behind a RawKernel (CuPy's `cupy.cuda.Function`).

    mod = cpuify.RawModule(code=src, options=("-DN=4",), name_expressions=("k<4>",))
    k = mod.get_function("k<4>")                 # a RawKernel
    k((blocks,), (threads,), (x, y, np.float32(2.0), np.int32(n)))

As in CuPy, compilation is lazy: on the first launch, `get_function`, `get_global`,
`.attributes` or `compile()`.  Pointers are NumPy arrays (or anything with the array
interface or the buffer protocol); scalars are converted to the parameter type the kernel
declares (the PTX knows it), with range checks; structs by value come from NumPy structured
scalars or bytes, complex parameters (cuComplex, complex<T>) from complex scalars."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import struct
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from cpuify.api import block_runs
from cpuify.api.arguments import ArgumentPacker, array_address
from cpuify.codegen.jit import LoadedObject
from cpuify.codegen.layout import (
    ERR_ASSERT, ERR_BARRIER_DIVERGENCE, ERR_STACK_OVERFLOW, ERR_TRAP, ERR_WARP_DIVERGENCE,
)
from cpuify.codegen.layout import ScratchLayout
from cpuify.codegen.llvm_gen import KernelInfo, dynamic_smem_offset
from cpuify.compiler import CompiledModule, compile_cuda, compile_ptx_cached
from cpuify.errors import (
    ArgumentError, ArgumentValueError, LaunchConfigError, CompileError, CompileException, CUDADriverError,
    DeadlockError, IllegalAddressError, KernelFailure, LaunchTimeoutError, ModuleFileNotFoundError,
    SymbolNotFoundError, UnsupportedError,
)
from cpuify.forksafe import compile_section
from cpuify.runtime.native import (
    CPUIFY_ERR_DEADLOCK, CPUIFY_ERR_HARDWARE, CPUIFY_ERR_ILLEGAL_ADDRESS, CPUIFY_ERR_INTERRUPTED,
    CPUIFY_ERR_TIMEOUT, CPUIFY_LAUNCH_COOPERATIVE, CPUIFY_LAUNCH_FIBERS, last_fault, last_message,
    load_runtime,
)

MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIM = (1024, 1024, 64)
MAX_GRID_DIM = (2**31 - 1, 65535, 65535)
DEFAULT_SHARED_LIMIT = 48 * 1024
MAX_SHARED_OPTIN = 227 * 1024

_ERROR_TEXT = {
    ERR_BARRIER_DIVERGENCE: "not all threads of the block reached the same __syncthreads() "
                            "(a barrier inside a branch that only some threads take), or a "
                            "named barrier (bar.sync id, count) waits for threads that never "
                            "arrive",
    ERR_TRAP: "the kernel executed a trap instruction (__trap() or asm(\"trap;\"))",
    ERR_WARP_DIVERGENCE: "threads of a warp disagree at a warp collective",
    ERR_ASSERT: "a device-side assert() failed",
    ERR_STACK_OVERFLOW: "stack overflow: a recursion of device functions outgrew the call stack "
                        "of a thread (raise it with cpuify.set_stack_limit(bytes), CuPy's "
                        "cuda.runtime.deviceSetLimit(cudaLimitStackSize, bytes))",
    5: "out of memory allocating shared/scratch memory for the launch",
}
# the CUDA driver status a GPU reports for each (KernelFailure.status)
_ERROR_STATUS = {ERR_BARRIER_DIVERGENCE: 719, ERR_TRAP: 719, ERR_WARP_DIVERGENCE: 719,
                 ERR_ASSERT: 710, ERR_STACK_OVERFLOW: 700, 5: 2}



#: per worker (cpuify's "multiprocessor"), the resident blocks a launch may count on, as
#: an sm_80 has: 2048 threads, 32 blocks, 164 KB of shared memory (cudart's occupancy API
#: reports the limits of the compiled architecture)
THREADS_PER_WORKER = 2048
BLOCKS_PER_WORKER = 32
SHARED_PER_WORKER = 167936


def coresident_blocks(nthreads: int, shared_bytes: int, workers: int) -> int:
    """The most blocks of `nthreads` threads and `shared_bytes` of shared memory that run at
    the same time (the limit of a cooperative launch, and of the blocks of a kernel with
    spin-wait loops that are resident at once)."""
    per = min(BLOCKS_PER_WORKER, THREADS_PER_WORKER // ((nthreads + 31) // 32 * 32))
    if shared_bytes:
        per = min(per, SHARED_PER_WORKER // shared_bytes)
    return max(per, 1) * max(workers, 1)


def _stopped_launch(name: str, rc: int, block: tuple[int, ...]) -> BaseException:
    """The exception for a launch the runtime stopped: a contained fault, the watchdog,
    Ctrl-C, a launch that can make no progress.  Nothing outlives it: the next launch starts
    afresh (a context reset)."""
    where = f"block ({block[0]}, {block[1]}, {block[2]})"
    if rc == CPUIFY_ERR_DEADLOCK:
        return DeadlockError(f"kernel '{name}' can make no progress: {last_message()}", name)
    if rc == CPUIFY_ERR_INTERRUPTED:
        # Python's own SIGINT handler ran too: in the main thread what it raises
        # (KeyboardInterrupt) comes now, if it has not already; in another thread (where
        # Python runs no signal handlers) the launch raises KeyboardInterrupt itself
        ctypes.pythonapi.PyErr_CheckSignals()
        return KeyboardInterrupt(f"kernel '{name}' was stopped in {where}")
    if rc == CPUIFY_ERR_TIMEOUT:
        limit = os.environ.get("CPUIFY_KERNEL_TIMEOUT", "?")
        return LaunchTimeoutError(
            f"kernel '{name}' ran longer than CPUIFY_KERNEL_TIMEOUT={limit} s and was stopped "
            f"(in {where}); a kernel that waits for something no block does never ends", name)
    fault = last_fault()
    addr: int | None = fault.address if fault.address != 2**64 - 1 else None
    at = f"address {addr:#x}" if addr is not None else "an unknown address"
    if rc == CPUIFY_ERR_HARDWARE:
        what = ("an illegal instruction" if fault.signal == signal.SIGILL
                else "an arithmetic exception")
        return KernelFailure(715 if fault.signal == signal.SIGILL else 719,
                             f"kernel '{name}' failed in {where}: {what} at {at}", name)
    access = {1: "writing", 0: "reading"}.get(fault.access, "accessing")
    hint = " (a NULL pointer)" if addr is not None and addr < 4096 else ""
    return IllegalAddressError(
        f"kernel '{name}' failed in {where}: invalid memory access {access} {at}{hint}; "
        "the launch was abandoned, later launches run normally",
        name, (block[0], block[1], block[2]), addr)


#: a box of blocks of a grid: ((x0, x1), (y0, y1), (z0, z1)), half-open ranges of blockIdx
Box = tuple[tuple[int, int], tuple[int, int], tuple[int, int]]


def _box_bounds(box: Any, g: tuple[int, int, int],
                kernel: str) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(lo, hi) of a box of grid `g`, checked: ranges 0 <= lo <= hi <= gridDim."""
    if type(box) is tuple and len(box) == 3 and all(
            type(r) is tuple and len(r) == 2 and type(r[0]) is int and type(r[1]) is int
            and 0 <= r[0] <= r[1] <= n for r, n in zip(box, g)):
        (x0, x1), (y0, y1), (z0, z1) = box
        return (x0, y0, z0), (x1, y1, z1)
    try:
        ranges = [(int(a), int(b)) for a, b in box]
        if len(ranges) != 3 or any(isinstance(v, bool) for r in box for v in r):
            raise TypeError
    except (TypeError, ValueError):
        raise ArgumentError(f"kernel '{kernel}': a box of blocks is ((x0, x1), (y0, y1), "
                            f"(z0, z1)), got {box!r:.80}") from None
    for w, (a, b) in enumerate(ranges):
        if not 0 <= a <= b <= g[w]:
            raise ArgumentValueError(f"kernel '{kernel}': the box's blockIdx.{'xyz'[w]} range "
                                     f"[{a}, {b}) is not within the grid's 0..{g[w]}")
    return (ranges[0][0], ranges[1][0], ranges[2][0]), (ranges[0][1], ranges[1][1], ranges[2][1])


def _dim3(value: Any, what: str, kernel: str) -> tuple[int, int, int]:
    if type(value) is tuple and all(type(v) is int for v in value):
        n = len(value)
        if n == 3:
            return value
        if n == 1:
            return value[0], 1, 1
        if n == 2:
            return value[0], value[1], 1
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        dims = [int(value)]
    else:
        try:
            if isinstance(value, (str, bytes)):
                raise TypeError
            items = list(value)
            if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                       for v in items):
                raise TypeError
            dims = [int(v) for v in items]
        except TypeError:
            raise ArgumentError(f"kernel '{kernel}': {what} must be an int or a tuple of up to 3 "
                                f"ints, got {value!r:.80}") from None
    if not 1 <= len(dims) <= 3:
        raise ArgumentValueError(f"kernel '{kernel}': {what} must have 1 to 3 dimensions, "
                                 f"got {len(dims)}")
    while len(dims) < 3:
        dims.append(1)
    return dims[0], dims[1], dims[2]


#: set by cpuify.distributed on rank 0 of an MPI run: launches go through its engine
_distributed_launch: Any = None


def set_distributed_launch(hook: Any) -> None:
    """Route every launch through `hook(fn, grid, block, args, params, shared_mem,
    cooperative) -> rc` (cpuify.distributed's engine), or back to local launches (None)."""
    global _distributed_launch
    _distributed_launch = hook


def _allocation_extent(arg: Any) -> tuple[int, int] | None:
    """The bytes [lo, hi) of the allocation an ndarray argument points into: those of the
    array that owns its memory (a view's base, followed through views), as a kernel may
    index anywhere in it.  None for anything whose extent is unknown."""
    if not isinstance(arg, np.ndarray):
        return None
    owner = arg
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    lo = array_address(owner) if type(owner) is np.ndarray else owner.__array_interface__["data"][0]
    flags = owner.flags
    if flags.c_contiguous or flags.f_contiguous:
        return lo, lo + owner.nbytes
    if owner.size == 0:
        return lo, lo
    hi = lo
    for n, stride in zip(owner.shape, owner.strides):
        if stride < 0:
            lo += stride * (n - 1)
        else:
            hi += stride * (n - 1)
    return lo, hi + owner.itemsize


def _disjoint_arguments(args: Sequence[Any], candidates: Sequence[int],
                        others: Sequence[int]) -> bool:
    """Whether the arrays at the argument indices `candidates` point into allocations that
    the array at no other index of `candidates` or `others` overlaps.  Null pointers (None)
    overlap nothing; a pointer of unknown extent (an integer address, a buffer object)
    fails the check."""
    extents: list[tuple[int, int, int]] = []
    for index in (*candidates, *others):
        if index >= len(args):
            return False
        arg = args[index]
        if arg is None:
            continue
        extent = _allocation_extent(arg)
        if extent is None:
            return False
        extents.append((index, extent[0], extent[1]))
    for index, lo, hi in extents[:len(candidates)]:
        if index not in candidates or lo == hi:
            continue
        for other, lo2, hi2 in extents:
            if other != index and lo < hi2 and lo2 < hi:
                return False
    return True


class Function:
    """A compiled kernel, launched with `fn(grid, block, args, shared_mem=0)`."""

    def __init__(self, module: "_Image", info: KernelInfo, loaded: LoadedObject) -> None:
        self.module = module
        self.info = info
        self.name = info.name
        self._rt = load_runtime()
        self._launch = self._rt.cpuify_launch
        self._launch_range = self._rt.cpuify_launch_range
        self._addr = loaded.function_address(info.symbol)
        self._loaded = loaded
        # launch-config specialization: a block shape launched a second time gets code
        # compiled for exactly that shape (constant thread-loop bounds)
        self._shape_addr: dict[tuple[int, int, int], int] = {}
        # the scratch layout of each specialized block function (its own slots)
        self._shape_scratch: dict[tuple[int, int, int], ScratchLayout] = {}
        self._shape_seen: dict[tuple[int, int, int], int] = {}
        # runs of blocks fused into one (fuse-block-runs): the variants compiled per (shape,
        # run), the shapes whose kernel refused (api/block_runs.py)
        self._runs = block_runs.RunVariants(self.name, self._compile_run_variant)
        #: launches that ran blocks fused into runs, and the last run fused
        self.block_run_launches = 0
        self.last_block_run: tuple[int, int] = (1, 1)
        # launch-time pointer specialization: per block shape, the pointer parameters whose
        # non-overlap would remove a barrier and the parameters accesses are based on
        # (SpecializedObject), and the variant compiled with them as `noalias_params`
        # (None: its compile failed), built at the first launch whose arrays allow it
        self._noalias_of_shape: dict[tuple[int, int, int],
                                     tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {}
        self._noalias_variant: dict[tuple[int, int, int], tuple[int, ScratchLayout] | None] = {}
        #: launches that ran the variant compiled for non-overlapping pointer arguments
        self.noalias_launches = 0
        self._specialize_noalias = os.environ.get("CPUIFY_NOALIAS_VARIANTS", "1") != "0"
        # parameter offset -> argument index, for the pointer parameters
        self._pointer_arg = {off: i for i, (_, t, off, size) in enumerate(info.params)
                             if t in ("b64", "u64", "s64") and size == 8
                             and not info.aggregate_params[i]}
        self._specialize = os.environ.get("CPUIFY_SPECIALIZE", "1") != "0"
        self._dyn_offset = dynamic_smem_offset(info.param_size)
        self._param_size = info.buffer_size()
        # the launch prologue (parallel-licm), run before each launch's grid
        self._prologue = loaded.function_address(info.prologue_symbol) if info.prologue_symbol else 0
        # launch buffers, reused by one launch at a time (launches release the GIL; a
        # concurrent launch of the same kernel from another thread gets fresh ones)
        self._buffers = _LaunchBuffers(self._param_size)
        self._busy = threading.Lock()
        self._flush = "vprintf" in module._compiled.ptx
        self.max_dynamic_shared_size_bytes = DEFAULT_SHARED_LIMIT - info.shared_static
        self._plan = [(name, t, off, size) for (name, t, off, size) in info.params]
        self._aggregate = list(info.aggregate_params)
        self._packer = ArgumentPacker(self.name, self._plan, self._aggregate, info.written_params)
        self.preferred_shared_memory_carveout = -1     # CUDA's "no preference"
        # launch configurations (grid, block, shared_mem) already checked
        self._checked: set[tuple[Any, Any, int]] = set()

    # CuPy-compatible read-only attributes (CUDA's cuFuncGetAttribute)
    @property
    def num_regs(self) -> int:
        """An estimate: the 32-bit PTX virtual registers the kernel declares (64-bit ones
        count two, predicates none), at most 255 as on a GPU.  ptxas would allocate fewer;
        the CPU code keeps values in its own registers and its per-thread scratch."""
        return self.module.entry_facts(self.name)[0]

    @property
    def local_size_bytes(self) -> int:
        """Bytes of local memory per thread: the kernel's `.local` arrays (stack frames of
        called functions included when the compiler declared them in the kernel)."""
        return self.module.entry_facts(self.name)[1]

    @property
    def const_size_bytes(self) -> int:
        """Bytes of the module's `__constant__` variables."""
        return sum(g.size for g in self.module._compiled.globals.values() if g.space == "const")

    @property
    def ptx_version(self) -> int:
        """The PTX ISA version of the kernel's PTX, 10 * major + minor (PTX 8.5: 85)."""
        return self.module.ptx_facts()[0]

    @property
    def binary_version(self) -> int:
        """The architecture the PTX was generated for, 10 * major + minor (sm_75: 75)."""
        return self.module.ptx_facts()[1]

    @property
    def cache_mode_ca(self) -> int:
        """0: no `-Xptxas -dlcm=ca` (global loads cached in L1), which has no CPU meaning."""
        return 0

    @property
    def max_threads_per_block(self) -> int:
        req = self.info.directives.get("maxntid") or self.info.directives.get("reqntid")
        if req:
            n = 1
            for v in req:
                n *= v
            return min(n, MAX_THREADS_PER_BLOCK)
        return MAX_THREADS_PER_BLOCK

    @property
    def shared_size_bytes(self) -> int:
        return self.info.shared_static

    @property
    def kernel_name(self) -> str:
        return self.name

    @property
    def ptr(self) -> int:
        """The address of the kernel's generic block function (CuPy's Function.ptr)."""
        return self._addr

    def __repr__(self) -> str:
        return f"<cpuify.Function {self.name}({', '.join(t for _, t, _, _ in self._plan)})>"

    def _block_function_for(self, block: tuple[int, int, int]) -> int:
        """The generic block function, or (from the second launch with this block shape on)
        one specialized for the shape, compiled once and cached on disk."""
        if not self._specialize:
            return self._addr
        seen = self._shape_seen.get(block, 0) + 1
        self._shape_seen[block] = seen
        if seen < 2:
            return self._addr
        from cpuify.codegen.llvm_gen import specialized_symbol
        from cpuify.compiler import compile_specialized
        try:
            spec = compile_specialized(self.module._compiled.ptx, self.name, block,
                                       self.module._compiled.passes)
            self._loaded.add(spec.object_code)
            self._shape_scratch[block] = spec.scratch
            if not spec.block_runs_possible:
                self._runs.refused.add(block)
            addr = self._loaded.function_address(specialized_symbol(self.name, block))
            if spec.noalias_candidates and self._specialize_noalias and \
                    all(off in self._pointer_arg for off in spec.noalias_candidates):
                # (as argument indices: the candidates, and the other parameters accesses
                # are based on, whose arrays the candidates' must not overlap)
                cands = tuple(self._pointer_arg[off] for off in spec.noalias_candidates)
                others = tuple(self._pointer_arg.get(off, 1 << 30) for off in spec.pointer_bases
                               if off not in spec.noalias_candidates)
                self._noalias_of_shape[block] = (spec.noalias_candidates, cands, others)
        except Exception as e:      # the generic code is always correct: keep using it
            import warnings
            from cpuify.errors import SpecializationWarning
            warnings.warn(f"kernel '{self.name}': compiling it for blocks of {block} failed "
                          f"({type(e).__name__}: {e}); running the generic code",
                          SpecializationWarning, stacklevel=3)
            addr = self._addr
        self._shape_addr[block] = addr
        return addr

    def _noalias_block_function(self, block: tuple[int, int, int], args: Sequence[Any]
                                ) -> tuple[int, ScratchLayout] | None:
        """The block function (and its scratch layout) compiled for `block` with the
        candidate pointer parameters as `noalias_params`, when this launch's arrays show
        that those parameters point into memory no other pointer argument reaches; None
        otherwise (the checked fallback: the code for the shape runs)."""
        candidates, indices, others = self._noalias_of_shape[block]
        if not _disjoint_arguments(args, indices, others):
            return None
        if block not in self._noalias_variant:
            from cpuify.codegen.llvm_gen import specialized_symbol
            from cpuify.compiler import compile_specialized
            try:
                spec = compile_specialized(self.module._compiled.ptx, self.name, block,
                                           self.module._compiled.passes, candidates)
                self._loaded.add(spec.object_code)
                addr = self._loaded.function_address(
                    specialized_symbol(self.name, block, candidates))
                self._noalias_variant[block] = (addr, spec.scratch)
            except Exception as e:  # noqa: BLE001 - the code for the shape is correct: keep using it
                import warnings
                from cpuify.errors import SpecializationWarning
                warnings.warn(f"kernel '{self.name}': compiling it for non-overlapping "
                              f"pointer arguments failed ({type(e).__name__}: {e}); running "
                              "the code for the block shape", SpecializationWarning,
                              stacklevel=4)
                self._noalias_variant[block] = None
        return self._noalias_variant[block]

    def _compile_run_variant(self, block: tuple[int, int, int], run: tuple[int, int]
                             ) -> tuple[int, ScratchLayout, tuple[int, int]]:
        """The block function compiled for `block` asking for runs of `run` blocks: its
        address, scratch layout and the run it fused ((1, 1): refused)."""
        from cpuify.codegen.llvm_gen import specialized_symbol
        from cpuify.compiler import compile_specialized
        spec = compile_specialized(self.module._compiled.ptx, self.name, block,
                                   self.module._compiled.passes, block_run=run)
        if spec.block_run == (1, 1):
            return 0, spec.scratch, (1, 1)
        self._loaded.add(spec.object_code)
        return (self._loaded.function_address(specialized_symbol(self.name, block, (),
                                                                 spec.block_run)),
                spec.scratch, spec.block_run)

    def _pack(self, args: Sequence[Any], bufs: "_LaunchBuffers") -> None:
        self._packer(args, bufs.params)

    def __call__(self, grid: Any, block: Any, args: Sequence[Any], *, shared_mem: int = 0,
                 stream: Any = None, enable_cooperative_groups: bool = False) -> None:
        """Launch; with `enable_cooperative_groups` as a cooperative launch (CuPy's flag,
        cuLaunchCooperativeKernel): every block resident at once, the grid workspace that
        `this_grid().sync()` uses, at most coresident_blocks() blocks."""
        self._run(grid, block, args, None, shared_mem, None, bool(enable_cooperative_groups))

    def _launch_box(self, grid: Any, block: Any, args: Sequence[Any], shared_mem: int = 0,
                    box: Box | None = None) -> None:
        """Launch only the blocks of `box`, ((x0, x1), (y0, y1), (z0, z1)): the half-open
        ranges of blockIdx.x/y/z to run (None: the whole grid).  The kernel sees the whole
        grid (gridDim is `grid`, blockIdx absolute); launches of boxes that tile the grid do
        what one launch of the grid does.  For the distributed engine (one box per rank)."""
        self._run(grid, block, args, None, shared_mem, box, False)

    def _launch_packed(self, grid: Any, block: Any, params: bytes | bytearray | memoryview,
                       shared_mem: int = 0, box: Box | None = None) -> None:
        """`_launch_box` from parameters already packed (what `_packed_params` returns, its
        pointers possibly rewritten to this process's copies of the buffers)."""
        if not isinstance(params, (bytes, bytearray, memoryview)):
            raise ArgumentError(f"kernel '{self.name}': packed parameters must be bytes, got "
                                f"{type(params).__name__}")
        if len(params) != self.info.param_size:
            raise ArgumentValueError(f"kernel '{self.name}': its parameters are "
                                     f"{self.info.param_size} bytes packed, {len(params)} given")
        self._run(grid, block, None, bytes(params), shared_mem, box, False)

    def _packed_params(self, args: Sequence[Any]) -> bytes:
        """The parameter bytes a launch with `args` passes (pointers as data addresses), as
        `_launch_packed` takes them; the same checks as a launch."""
        buf = bytearray(self.info.param_size)
        self._packer(args, buf)
        return bytes(buf)

    def _run(self, grid: Any, block: Any, args: Sequence[Any] | None, packed: bytes | None,
             shared_mem: int, box: Box | None, cooperative: bool) -> None:
        """The one launch path: checks the configuration, packs `args` (or copies `packed`),
        runs the launch prologue, then the blocks of `box` (None: the grid)."""
        name = self.name
        g = _dim3(grid, "grid", name)
        bl = _dim3(block, "block", name)
        nthreads = bl[0] * bl[1] * bl[2]
        if type(shared_mem) is not int:
            if not isinstance(shared_mem, (int, np.integer)) or isinstance(shared_mem, bool):
                raise ArgumentError(f"kernel '{name}': shared_mem must be an int (bytes of "
                                    f"dynamic shared memory), got {shared_mem!r:.80}")
            shared_mem = int(shared_mem)
        config = (g, bl, shared_mem)
        if config not in self._checked:
            self._check_config(g, bl, nthreads, shared_mem)
            if len(self._checked) < 64:
                self._checked.add(config)
        bounds = None if box is None else _box_bounds(box, g, name)
        if bounds is not None and any(lo == hi for lo, hi in zip(*bounds)):
            return      # an empty box: no block runs
        distributed = _distributed_launch is not None and packed is None and box is None
        addr = scratch = 0
        run = (1, 1)
        if not distributed:     # (over MPI the engine's box launches pick the block function)
            addr = self._shape_addr.get(bl) or self._block_function_for(bl)
            layout = self._shape_scratch.get(bl, self.info.scratch)
            variant = None
            if bl in self._noalias_of_shape and args is not None:
                variant = self._noalias_block_function(bl, args)
                if variant is not None:
                    addr, layout = variant
                    self.noalias_launches += 1
            if variant is None and bl in self._shape_scratch and bounds is None and \
                    not cooperative and not self.info.spin_waits:
                fused = self._runs.for_launch(bl, g, int(self._rt.cpuify_num_workers()),
                                              self._shape_scratch[bl].per_thread())
                if fused is not None:
                    addr, layout, run = fused
            scratch = layout.scratch_bytes(nthreads * run[0] * run[1])
        shared_bytes = self.info.shared_static + shared_mem
        own = self._busy.acquire(blocking=False)
        bufs = self._buffers if own else _LaunchBuffers(self._param_size)
        try:
            if packed is None:
                self._pack(args if args is not None else (), bufs)
            else:
                ctypes.memmove(bufs.params_addr, packed, len(packed))
            struct.pack_into("<I", bufs.params, self._dyn_offset, shared_mem)
            d = bufs.dims
            rc = 0
            if self._prologue and not distributed:
                d[0], d[1], d[2], d[3], d[4], d[5] = 1, 1, 1, 1, 1, 1
                rc = self._launch(self._prologue, bufs.params_addr, bufs.dims_addr, 0,
                                  self.info.prologue_scratch, bufs.err_addr)
            d[0], d[1], d[2], d[3], d[4], d[5] = g[0], g[1], g[2], bl[0], bl[1], bl[2]
            if distributed and rc == 0:
                # over MPI ranks (cpuify.distributed): each rank runs the prologue and its box
                rc = _distributed_launch(self, g, bl, args, bytes(bufs.params)[:self.info.param_size],
                                         shared_mem, cooperative)
            elif rc == 0 and run != (1, 1):
                # a grid of runs; the kernel reads the real gridDim from the dims
                b = bufs.box
                b[0] = b[1] = b[2] = 0
                b[3], b[4], b[5] = block_runs.run_grid(g, run)
                rc = int(self._launch_range(addr, bufs.params_addr, bufs.dims_addr, shared_bytes,
                                            scratch, bufs.err_addr, 0, 0, bufs.box_addr,
                                            bufs.box_addr + 12))
                self.block_run_launches += 1
                self.last_block_run = run
            elif rc == 0:
                if self.info.spin_waits or cooperative or bounds is not None:
                    rc = self._launch_with_flags(g, nthreads, shared_bytes, addr, bufs, scratch,
                                                 cooperative, bounds)
                else:
                    rc = self._launch(addr, bufs.params_addr, bufs.dims_addr, shared_bytes,
                                      scratch, bufs.err_addr)
            e = tuple(bufs.err) if rc else ()
            if rc and run != (1, 1) and e and e[0] != 0xFFFFFFFF:
                # the runtime names the run: the blocks it holds
                e = tuple(f"{e[k] * run[k]}..{min((e[k] + 1) * run[k], g[k]) - 1}"  # type: ignore[assignment]
                          if run[k] > 1 else e[k] for k in (0, 1)) + (e[2],)
        finally:
            if own:
                self._busy.release()
        if self._flush:
            sys.stdout.flush()
            self._rt.cpuify_flush()
        if rc:
            if CPUIFY_ERR_ILLEGAL_ADDRESS <= rc <= CPUIFY_ERR_INTERRUPTED or rc == CPUIFY_ERR_DEADLOCK:
                raise _stopped_launch(name, rc, e)
            where = f" in block ({e[0]}, {e[1]}, {e[2]})" if rc != 5 and e[0] != 0xFFFFFFFF else ""
            child = self._rt.cpuify_failed_child()
            if child:       # a grid this launch started from device code failed
                where = f" (in the child grid of kernel '{child.decode()}' it launched)" + where
            hint = ""
            if rc == ERR_TRAP and self.info.reads_envreg and not cooperative:
                hint = ("; it synchronizes the whole grid (this_grid().sync()), which needs a "
                        "cooperative launch: launch it with enable_cooperative_groups=True")
            raise KernelFailure(_ERROR_STATUS.get(rc, 719),
                                f"kernel '{name}' failed{where}: "
                                f"{_ERROR_TEXT.get(rc, f'error code {rc}')}{hint}", name)

    def _launch_with_flags(self, g: tuple[int, int, int], nthreads: int, shared_bytes: int,
                           addr: int, bufs: "_LaunchBuffers", scratch: int, cooperative: bool,
                           bounds: tuple[tuple[int, int, int], tuple[int, int, int]] | None) -> int:
        """cpuify_launch_range: blocks as fibers for a kernel with spin-wait loops or a
        cooperative launch (checked against the co-resident limit first); only the blocks
        of `bounds` (lo, hi), when given."""
        limit = flags = 0
        if self.info.spin_waits or cooperative:
            workers = int(self._rt.cpuify_num_workers())
            limit = coresident_blocks(nthreads, shared_bytes, workers)
            flags = CPUIFY_LAUNCH_FIBERS
        if cooperative:
            nblocks = g[0] * g[1] * g[2]
            if nblocks > limit:
                raise CUDADriverError(
                    720, f"kernel '{self.name}': a cooperative launch of {nblocks} blocks of "
                    f"{nthreads} threads; cpuify runs at most {limit} such blocks at once "
                    f"({limit // max(workers, 1)} per worker x {workers} workers, "
                    "CPUIFY_NUM_THREADS)")
            flags |= CPUIFY_LAUNCH_COOPERATIVE
        lo = hi = None
        if bounds is not None:
            b = bufs.box
            (b[0], b[1], b[2]), (b[3], b[4], b[5]) = bounds
            lo, hi = bufs.box_addr, bufs.box_addr + 12
        return int(self._launch_range(addr, bufs.params_addr, bufs.dims_addr, shared_bytes,
                                      scratch, bufs.err_addr, flags, limit, lo, hi))

    def _check_config(self, g: tuple[int, int, int], bl: tuple[int, int, int], nthreads: int,
                      shared_mem: int) -> None:
        """Raises for a launch configuration CUDA would refuse."""
        name = self.name
        for k in range(3):
            if not 1 <= bl[k] <= MAX_BLOCK_DIM[k]:
                raise LaunchConfigError(f"kernel '{name}': block dimension {'xyz'[k]} = {bl[k]} is out of "
                                 f"range 1..{MAX_BLOCK_DIM[k]}")
            if not 1 <= g[k] <= MAX_GRID_DIM[k]:
                raise LaunchConfigError(f"kernel '{name}': grid dimension {'xyz'[k]} = {g[k]} is out of "
                                 f"range 1..{MAX_GRID_DIM[k]}")
        req = self.info.directives.get("reqntid")
        if req and tuple(req) + (1,) * (3 - len(req)) != bl:
            raise LaunchConfigError(f"kernel '{name}' requires a block of exactly "
                             f"{tuple(req) + (1,) * (3 - len(req))} threads (__launch_bounds__/"
                             f".reqntid), got {bl}")
        if nthreads > self.max_threads_per_block:
            raise LaunchConfigError(f"kernel '{name}': {nthreads} threads per block exceeds the limit of "
                             f"{self.max_threads_per_block}")
        if shared_mem < 0:
            raise ArgumentValueError(f"kernel '{name}': shared_mem must be >= 0, got {shared_mem}")
        if shared_mem > self.max_dynamic_shared_size_bytes:
            raise LaunchConfigError(
                f"kernel '{name}': {shared_mem} bytes of dynamic shared memory exceed the limit of "
                f"{self.max_dynamic_shared_size_bytes} bytes; raise it with "
                f"fn.max_dynamic_shared_size_bytes = N (up to {MAX_SHARED_OPTIN - self.info.shared_static}), "
                "as cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize) does")

    def __setattr__(self, key: str, value: Any) -> None:
        if key == "max_dynamic_shared_size_bytes" and hasattr(self, "info"):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise ArgumentError(f"kernel '{self.name}': max_dynamic_shared_size_bytes must be "
                                    f"an int, got {value!r:.80}")
            value = int(value)
            limit = MAX_SHARED_OPTIN - self.info.shared_static
            if not 0 <= value <= limit:
                raise ArgumentValueError(f"kernel '{self.name}': max_dynamic_shared_size_bytes "
                                         f"must be in 0..{limit} (cudaErrorInvalidValue)")
            if hasattr(self, "_checked"):
                self._checked.clear()       # the limit the checked launches were held to
        elif key == "preferred_shared_memory_carveout" and hasattr(self, "info"):
            # a hint about the L1/shared split of a GPU: checked as CUDA does, no effect here
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or \
                    not -1 <= int(value) <= 100:
                raise ArgumentValueError(f"kernel '{self.name}': preferred_shared_memory_carveout "
                                         f"must be -1 or a percentage 0..100, got {value!r:.80}")
            value = int(value)
        object.__setattr__(self, key, value)


class _LaunchBuffers:
    """ctypes buffers of one launch: packed parameters, dims, the failing block's index, the
    box of blocks to run (lo x/y/z, hi x/y/z)."""
    __slots__ = ("params", "params_addr", "dims", "dims_addr", "err", "err_addr", "box",
                 "box_addr")

    def __init__(self, param_size: int) -> None:
        self.params = (ctypes.c_char * param_size)()
        self.params_addr = ctypes.addressof(self.params)
        self.dims = (ctypes.c_uint32 * 6)()
        self.dims_addr = ctypes.addressof(self.dims)
        self.err = (ctypes.c_uint32 * 3)()
        self.err_addr = ctypes.addressof(self.err)
        self.box = (ctypes.c_uint32 * 6)()
        self.box_addr = ctypes.addressof(self.box)


_REG_DECL = re.compile(r"\.reg\s+\.(\w+)\s+[%\w$]+(?:<(\d+)>)?")
_LOCAL_DECL = re.compile(r"\.local\s+(?:\.align\s+\d+\s+)?\.(\w+)\s+[%\w$]+((?:\[\d*\])*)")
_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\(")


def _entry_bodies(ptx: str) -> dict[str, str]:
    """The text of each `.entry` of a PTX module, from its name to its closing brace."""
    bodies: dict[str, str] = {}
    for m in _ENTRY.finditer(ptx):
        start = ptx.find("{", m.end())
        if start < 0:
            continue
        depth, i = 0, start
        while i < len(ptx):
            c = ptx[i]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        bodies[m.group(1)] = ptx[m.start():i + 1]
    return bodies


def _type_bytes(t: str) -> int:
    digits = re.sub(r"\D", "", t)
    return max(1, int(digits) // 8) if digits else 4


class _Image:
    """A compiled module loaded into this process (what `RawModule.module` returns; CuPy's
    `cupy.cuda.Module`): its kernels as Functions, its variables, `mapping` from name
    expressions to mangled names."""

    def __init__(self, compiled: CompiledModule) -> None:
        self._compiled = compiled
        self._loaded = LoadedObject(compiled.object_code)
        self.mapping: dict[str, str] = dict(compiled.lowered_names)
        self._functions: dict[str, Function] = {}
        self._global_views: dict[str, np.ndarray] = {}
        self._bodies: dict[str, str] | None = None
        self._facts: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()

    def _entry_text(self, name: str) -> str:
        if self._bodies is None:
            self._bodies = _entry_bodies(self._compiled.ptx)
        return self._bodies.get(name, "")

    def entry_facts(self, name: str) -> tuple[int, int]:
        """(register estimate, local bytes per thread) of one kernel, from its PTX."""
        facts = self._facts.get(name)
        if facts is None:
            body = self._entry_text(name)
            regs = 0
            for m in _REG_DECL.finditer(body):
                t, n = m.group(1), int(m.group(2) or 1)
                if t != "pred":
                    regs += n * (2 if _type_bytes(t) == 8 else 1)
            local = 0
            for m in _LOCAL_DECL.finditer(body):
                n = 1
                for dim in re.findall(r"\[(\d*)\]", m.group(2)):
                    n *= int(dim or 0)
                local += n * _type_bytes(m.group(1))
            facts = self._facts[name] = (max(1, min(regs, 255)), local)
        return facts

    def ptx_facts(self) -> tuple[int, int]:
        """(PTX ISA version, target architecture), both as 10 * major + minor."""
        ptx = self._compiled.ptx
        v = re.search(r"^\s*\.version\s+(\d+)\.(\d+)", ptx, re.MULTILINE)
        t = re.search(r"^\s*\.target\s+sm_(\d+)", ptx, re.MULTILINE)
        return (int(v.group(1)) * 10 + int(v.group(2)) if v else 0, int(t.group(1)) if t else 0)

    def get_function(self, name: str, expressions: Sequence[str] = ()) -> Function:
        fn = self._functions.get(name)
        if fn is not None:
            return fn
        compiled = self._compiled
        symbol = self.mapping.get(name, name)
        info = compiled.kernels.get(symbol)
        if info is None and symbol in compiled.refused:
            raise UnsupportedError(compiled.refused[symbol])
        if info is None:
            known = ", ".join(sorted(compiled.kernels)) or "none"
            hint = ""
            if "<" in name and name not in expressions:
                hint = " (template kernels must be listed in name_expressions=)"
            elif any(k.startswith("_Z") and name in k for k in compiled.kernels):
                hint = " (the kernel name is C++-mangled: declare it extern \"C\" or use name_expressions=)"
            raise SymbolNotFoundError(f"no kernel named '{name}' in this module{hint}; "
                                      f"kernels: {known}")
        with self._lock:
            fn = self._functions.get(name)
            if fn is None:
                fn = self._functions[name] = Function(self, info, self._loaded)
        return fn

    def get_global_var(self, name: str) -> int:
        """The address of a `__device__`/`__constant__` variable (CuPy's Module method)."""
        return self._global_var(name)[0]

    def _global_var(self, name: str) -> tuple[int, int]:
        """(address, size in bytes) of a `__device__`/`__constant__` variable."""
        symbol = self.mapping.get(name, name)
        g = self._compiled.globals.get(symbol)
        if g is None:
            known = ", ".join(sorted(n for n in self._compiled.globals if not n.startswith("$"))) or "none"
            raise SymbolNotFoundError(f"no __device__/__constant__ variable named '{name}'; "
                                      f"variables: {known}")
        return self._loaded.global_address(symbol), g.size

    def global_view(self, name: str) -> np.ndarray:
        """The bytes of a variable as a uint8 array; one per variable, made once: the JIT
        memory stays alive as long as any view of it (ctypes array -> this image)."""
        view = self._global_views.get(name)
        if view is None:
            addr, size = self._global_var(name)
            raw = (ctypes.c_uint8 * size).from_address(addr)
            raw._cpuify_image = self        # type: ignore[attr-defined]
            view = np.frombuffer(raw, dtype=np.uint8)
            self._global_views[name] = view
        return view


_BACKENDS = ("nvrtc", "nvcc")
_MISSING_HEADER = re.compile(r'cannot open source file "([^"]+)"')


def _options_tuple(options: Any, what: str) -> tuple[str, ...]:
    if options is None:
        return ()
    if isinstance(options, str):
        return (options,)
    try:
        out = tuple(options)
    except TypeError:
        raise ArgumentError(f"{what}: options must be a tuple of strings, got "
                            f"{type(options).__name__}") from None
    for o in out:
        if not isinstance(o, (str, bytes, tuple, list)):
            raise ArgumentError(f"{what}: option {o!r} is not a string")
    return out


class RawModule:
    """CUDA C++ (or PTX) compiled for the CPU.  Mirrors `cupy.RawModule` (CuPy 13-14).

    `code=` CUDA source, or `path=` a file (.ptx, or CUDA source; a cubin or fatbin is
    refused: it holds GPU machine code), or `ptx=` PTX text.  Compiled on first use."""

    def __init__(self, code: str | None = None, *, path: str | os.PathLike[str] | None = None,
                 options: Sequence[str] = (), backend: str = "nvrtc",
                 translate_cucomplex: bool = False, enable_cooperative_groups: bool = False,
                 name_expressions: Sequence[str] | None = None, jitify: bool | None = False,
                 ptx: str | None = None, filename: str = "kernel.cu") -> None:
        """`filename`: the name the compiler's messages give the source (`code=`)."""
        given = [x is not None for x in (code, path, ptx)]
        if sum(given) != 1:
            raise ArgumentError("RawModule: give exactly one of code=, path= or ptx=")
        if code is not None and not isinstance(code, str):
            raise ArgumentError(f"RawModule: code must be a str, got {type(code).__name__}")
        if ptx is not None and not isinstance(ptx, str):
            raise ArgumentError(f"RawModule: ptx must be a str, got {type(ptx).__name__}")
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise ArgumentError(f"RawModule: path must be a str or path, got {type(path).__name__}")
        if backend not in _BACKENDS:
            raise ArgumentValueError(f"RawModule: backend must be 'nvrtc' or 'nvcc', got {backend!r}")
        if name_expressions is not None:
            if isinstance(name_expressions, str):
                name_expressions = (name_expressions,)
            if code is None:
                raise ArgumentValueError("RawModule: name_expressions need CUDA C++ code (code=), not a "
                                 "compiled module")
            if backend != "nvrtc":
                raise ArgumentValueError("RawModule: only backend='nvrtc' supports name_expressions "
                                 "(nvcc cannot report the mangled names)")
            if not all(isinstance(n, str) for n in name_expressions):
                raise ArgumentError("RawModule: name_expressions must be strings")
        if jitify:
            if code is None:
                raise ArgumentValueError("RawModule: jitify=True needs CUDA C++ code (code=)")
            if backend != "nvrtc":
                raise ArgumentValueError("RawModule: jitify=True only works with backend='nvrtc'")
        self.code = code
        self.file_path = os.fspath(path) if path is not None else None
        self._ptx_text = ptx
        self._filename = str(filename)
        # (CuPy drops the options of path= modules, which are cubins or PTX there; a path=
        # here may name CUDA source, compiled with the options and backend given)
        self.options = _options_tuple(options, "RawModule")
        self.backend = backend
        self.translate_cucomplex = bool(translate_cucomplex) and ptx is None
        self.enable_cooperative_groups = bool(enable_cooperative_groups)
        self.name_expressions = tuple(name_expressions) if name_expressions is not None else None
        self.jitify = jitify
        self._init_state()

    def _init_state(self) -> None:
        self._image: _Image | None = None
        self._kernels: dict[str, RawKernel] = {}
        self._build_lock = threading.Lock()

    # -- compilation ---------------------------------------------------------------------
    @property
    def module(self) -> _Image:
        """The compiled module (compiles on first access)."""
        image = self._image
        if image is None:
            image = self._build()
        return image

    def compile(self, log_stream: Any = None) -> None:
        """Compile now (launches, get_function, get_global compile on first use anyway).
        `log_stream`: a file object (sys.stdout, io.StringIO) that receives the CUDA
        compiler's warnings."""
        image = self.module
        if log_stream is not None and image._compiled.log:
            log_stream.write(image._compiled.log)
            if not image._compiled.log.endswith("\n"):
                log_stream.write("\n")
            flush = getattr(log_stream, "flush", None)
            if flush is not None:
                flush()

    def _build(self) -> _Image:
        # a compile section: a fork waits for the build, so no child inherits the lock held
        with compile_section(), self._build_lock:
            if self._image is not None:
                return self._image
            self._image = _Image(self._compile())
            return self._image

    def _source(self) -> tuple[str, str, str]:
        """('cuda' | 'ptx', text, file name) of what this module compiles."""
        if self.code is not None:
            return "cuda", self.code, self._filename
        if self._ptx_text is not None:
            return "ptx", self._ptx_text, "kernel.ptx"
        assert self.file_path is not None
        return _read_module_file(self.file_path)

    def _compile(self) -> CompiledModule:
        kind, text, filename = self._source()
        if kind == "ptx":
            return compile_ptx_cached(text, self.options)
        from cpuify.api import headers
        source = headers.translate_cucomplex(text) if self.translate_cucomplex else text
        given = headers.headers_for(source, jitify=bool(self.jitify))
        # CuPy appends -ftz=true to the options of every source it compiles (after the
        # caller's, so it wins over a -ftz=false): f32 subnormals flush to zero there, and here
        options = self.options + ("-ftz=true",)
        for _ in range(32):
            try:
                return compile_cuda(source, options=options,
                                    name_expressions=self.name_expressions or (),
                                    filename=filename, backend=self.backend, headers=given)
            except CompileException:
                raise
            except CompileError as exc:
                missing = _MISSING_HEADER.findall(exc.log or str(exc))
                if self.jitify and missing and not any(m in given for m in missing):
                    # as Jitify does: a header that cannot be found is taken as empty (the
                    # compile fails later if the kernel needed anything from it)
                    import warnings
                    warnings.warn(f"jitify: header(s) {', '.join(missing)} not found; "
                                  "compiling without them", RuntimeWarning, stacklevel=4)
                    given = {**given, **{m: "" for m in missing}}
                    continue
                raise CompileException(str(exc), source, filename, self.options, self.backend,
                                       log=exc.log) from None
        raise CompileException(f"{filename}: too many missing headers", source, filename,
                               self.options, self.backend)

    @property
    def _compiled(self) -> CompiledModule:
        return self.module._compiled

    @property
    def ptx(self) -> str:
        """The PTX the module was compiled from."""
        return self._compiled.ptx

    @property
    def kernel_names(self) -> list[str]:
        return list(self._compiled.kernels)

    # -- contents ------------------------------------------------------------------------
    def get_function(self, name: str) -> "RawKernel":
        """The kernel `name` (an extern "C" name, a mangled name, or one of the
        name_expressions) as a RawKernel.  SymbolNotFoundError (CUDA_ERROR_NOT_FOUND, a
        CUDADriverError and a LookupError) if the module has no such kernel."""
        k = self._kernels.get(name)
        if k is not None:
            return k
        if not isinstance(name, str):
            raise ArgumentError(f"get_function: the kernel name must be a str, got {type(name).__name__}")
        fn = self.module.get_function(name, self.name_expressions or ())
        k = RawKernel._from_module(self, name, fn)
        self._kernels[name] = k
        return k

    def get_global(self, name: str, dtype: Any = np.uint8) -> np.ndarray:
        """A writable NumPy view of a `__device__` or `__constant__` variable (CuPy returns a
        MemoryPointer; on the CPU the memory is the array), as `dtype`."""
        if not isinstance(name, str):
            raise ArgumentError(f"get_global: the variable name must be a str, got {type(name).__name__}")
        view = self.module.global_view(name)
        try:
            dt = np.dtype(dtype)
        except TypeError as exc:
            raise ArgumentError(f"get_global('{name}'): bad dtype {dtype!r}: {exc}") from None
        if dt == np.uint8:
            return view[...]
        if dt.hasobject:
            raise ArgumentError(f"get_global('{name}'): dtype=object cannot view device memory")
        if view.nbytes % dt.itemsize:
            raise ArgumentValueError(f"get_global('{name}'): the variable is {view.nbytes} bytes, "
                                     f"not a multiple of {dt} ({dt.itemsize} bytes)")
        return view.view(dt)

    def get_texref(self, name: str) -> Any:
        """CuPy's texture references (the legacy `texture<>` API) do not exist on the CPU."""
        raise UnsupportedError(f"get_texref('{name}'): texture references are not supported by "
                               "cpuify (textures and surfaces are refused); read the array "
                               "through a pointer parameter instead")

    # -- pickling: the source and options; an unpickled module compiles on first use -----
    def __getstate__(self) -> dict[str, Any]:
        return {"code": self.code, "file_path": self.file_path, "ptx": self._ptx_text,
                "options": self.options, "backend": self.backend,
                "translate_cucomplex": self.translate_cucomplex,
                "enable_cooperative_groups": self.enable_cooperative_groups,
                "name_expressions": self.name_expressions, "jitify": self.jitify,
                "filename": self._filename, "cpuify_raw_version": 1}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state.get("cpuify_raw_version") != 1:
            import pickle
            raise pickle.UnpicklingError("this pickled cpuify.RawModule comes from another "
                                         "cpuify version; create it again")
        self.code = state["code"]
        self.file_path = state["file_path"]
        self._ptx_text = state["ptx"]
        self.options = tuple(state["options"])
        self.backend = state["backend"]
        self.translate_cucomplex = state["translate_cucomplex"]
        self.enable_cooperative_groups = state["enable_cooperative_groups"]
        self.name_expressions = state["name_expressions"]
        self.jitify = state["jitify"]
        self._filename = state.get("filename", "kernel.cu")
        self._init_state()

    def __repr__(self) -> str:
        what = f"path={self.file_path!r}" if self.file_path else \
            "ptx=..." if self._ptx_text is not None else "code=..."
        state = "compiled" if self._image is not None else "not compiled yet"
        return f"<cpuify.RawModule {what} backend={self.backend!r} ({state})>"


_ELF_MAGIC = b"\x7fELF"
_FATBIN_MAGIC = (b"\x50\xed\x55\xba", b"\x46\x62\xb1\x43")     # fatbin, fatbin wrapper


def _read_module_file(path: str) -> tuple[str, str, str]:
    """('ptx' | 'cuda', text, file name) of a module file; clear errors for a missing file
    and for GPU binaries (cubin, fatbin) that cannot run on a CPU."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ModuleFileNotFoundError(str(path)) from None
    except IsADirectoryError:
        raise CUDADriverError(1, f"{path} is a directory, not a PTX or CUDA source file") from None
    except OSError as exc:
        raise CUDADriverError(301, f"cannot read {path}: {exc.strerror or exc}") from None
    if data.startswith(_ELF_MAGIC):
        raise CUDADriverError(
            209, f"{path} is a cubin (ELF): GPU machine code, which cpuify cannot run on a CPU. "
            "Load the PTX instead (nvcc -ptx, or RawModule(code=...) with the CUDA source)")
    if data[:4] in _FATBIN_MAGIC:
        raise CUDADriverError(
            209, f"{path} is a fatbin: GPU binaries, which cpuify cannot load. Load the PTX "
            "instead (nvcc -ptx, or RawModule(code=...) with the CUDA source)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CUDADriverError(200, f"{path} is neither PTX nor CUDA source (not text); give a "
                              ".ptx or .cu file") from None
    if "\0" in text:
        raise CUDADriverError(200, f"{path} is neither PTX nor CUDA source (binary data)")
    stripped = re.sub(r"//[^\n]*", "", text)
    if p.suffix == ".ptx" or (re.search(r"^\s*\.version\s", stripped, re.MULTILINE) and
                              re.search(r"^\s*\.target\s", stripped, re.MULTILINE)):
        return "ptx", text, p.name
    return "cuda", text, p.name


class RawKernel:
    """One kernel from CUDA source.  Mirrors `cupy.RawKernel` (CuPy 13-14): compiled on the
    first launch (or `compile()`), `attributes` and the properties of CUDA's function
    attributes, picklable (the source and options; recompiled after unpickling)."""

    def __init__(self, code: str, name: str, options: Sequence[str] = (), backend: str = "nvrtc",
                 *, translate_cucomplex: bool = False, enable_cooperative_groups: bool = False,
                 jitify: bool | None = False) -> None:
        if not isinstance(code, str):
            raise ArgumentError(f"RawKernel: code must be a str, got {type(code).__name__}")
        if not isinstance(name, str):
            raise ArgumentError(f"RawKernel: name must be a str, got {type(name).__name__}")
        if backend not in _BACKENDS:
            raise ArgumentValueError(f"RawKernel: backend must be 'nvrtc' or 'nvcc', got {backend!r}")
        if jitify and backend != "nvrtc":
            raise ArgumentValueError("RawKernel: jitify=True only works with backend='nvrtc'")
        self.code: str | None = code
        self.name = name
        self.__name__ = name
        self.options = _options_tuple(options, f"RawKernel '{name}'")
        self.backend = backend
        self.translate_cucomplex = bool(translate_cucomplex)
        self.enable_cooperative_groups = bool(enable_cooperative_groups)
        self.jitify = jitify
        self.file_path: str | None = None          # set for kernels of RawModule(path=...)
        self.name_expressions: tuple[str, ...] | None = None
        self._ptx_text: str | None = None
        self._owner: RawModule | None = None
        self._fn: Function | None = None

    @classmethod
    def _from_module(cls, module: RawModule, name: str, fn: Function) -> "RawKernel":
        k = cls.__new__(cls)
        k.code, k.name, k.__name__ = module.code, name, name
        k.options, k.backend = module.options, module.backend
        k.translate_cucomplex = module.translate_cucomplex
        k.enable_cooperative_groups = module.enable_cooperative_groups
        k.jitify, k.file_path = module.jitify, module.file_path
        k.name_expressions, k._ptx_text = module.name_expressions, module._ptx_text
        k._owner, k._fn = module, fn
        return k

    def _module(self) -> RawModule:
        owner = self._owner
        if owner is None:
            owner = RawModule(code=self.code, path=self.file_path, ptx=self._ptx_text,
                              options=self.options, backend=self.backend,
                              translate_cucomplex=self.translate_cucomplex,
                              enable_cooperative_groups=self.enable_cooperative_groups,
                              name_expressions=self.name_expressions, jitify=self.jitify)
            self._owner = owner
        return owner

    def _function(self) -> Function:
        fn = self._fn
        if fn is None:
            mod = self._module()
            fn = self._fn = mod.module.get_function(self.name, self.name_expressions or ())
        return fn

    @property
    def kernel(self) -> Function:
        """The compiled kernel (compiles on first access)."""
        return self._fn or self._function()

    def compile(self, log_stream: Any = None) -> None:
        """Compile now; `log_stream` receives the compiler's warnings."""
        self._module().compile(log_stream)
        self._function()

    def __call__(self, grid: Any, block: Any, args: Sequence[Any], *, shared_mem: int = 0,
                 stream: Any = None, enable_cooperative_groups: bool | None = None) -> None:
        """Launch on `grid` blocks of `block` threads (ints or tuples of up to 3); returns
        when the kernel has finished (`stream` is accepted, launches are synchronous)."""
        fn = self._fn
        if fn is None:
            fn = self._function()
        if enable_cooperative_groups is None:
            enable_cooperative_groups = self.enable_cooperative_groups
        fn(grid, block, args, shared_mem=shared_mem,
           enable_cooperative_groups=enable_cooperative_groups)

    # -- attributes (CUDA's function attributes, as CuPy reports them) -------------------
    _ATTRIBUTES = ("max_threads_per_block", "shared_size_bytes", "const_size_bytes",
                   "local_size_bytes", "num_regs", "ptx_version", "binary_version",
                   "cache_mode_ca", "max_dynamic_shared_size_bytes",
                   "preferred_shared_memory_carveout")

    @property
    def attributes(self) -> dict[str, int]:
        """All ten of CuPy's keys.  num_regs is an estimate from the PTX (see
        Function.num_regs); max_dynamic_shared_size_bytes and
        preferred_shared_memory_carveout can be set as properties."""
        fn = self.kernel
        return {key: getattr(fn, key) for key in self._ATTRIBUTES}

    @property
    def max_threads_per_block(self) -> int:
        return self.kernel.max_threads_per_block

    @property
    def shared_size_bytes(self) -> int:
        return self.kernel.shared_size_bytes

    @property
    def const_size_bytes(self) -> int:
        return self.kernel.const_size_bytes

    @property
    def local_size_bytes(self) -> int:
        return self.kernel.local_size_bytes

    @property
    def num_regs(self) -> int:
        return self.kernel.num_regs

    @property
    def ptx_version(self) -> int:
        return self.kernel.ptx_version

    @property
    def binary_version(self) -> int:
        return self.kernel.binary_version

    @property
    def cache_mode_ca(self) -> int:
        return self.kernel.cache_mode_ca

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self.kernel.max_dynamic_shared_size_bytes

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value: int) -> None:
        self.kernel.max_dynamic_shared_size_bytes = value

    @property
    def preferred_shared_memory_carveout(self) -> int:
        return self.kernel.preferred_shared_memory_carveout

    @preferred_shared_memory_carveout.setter
    def preferred_shared_memory_carveout(self, value: int) -> None:
        self.kernel.preferred_shared_memory_carveout = value

    def __getattr__(self, key: str) -> Any:
        # what get_function returned before it returned RawKernels (Function's details)
        if key.startswith("__") or key in ("_fn", "_owner"):
            raise AttributeError(key)
        return getattr(self._function(), key)

    # -- pickling ------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        return {"code": self.code, "name": self.name, "options": self.options,
                "backend": self.backend, "translate_cucomplex": self.translate_cucomplex,
                "enable_cooperative_groups": self.enable_cooperative_groups,
                "jitify": self.jitify, "file_path": self.file_path,
                "name_expressions": self.name_expressions, "ptx": self._ptx_text,
                "cpuify_raw_version": 1}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state.get("cpuify_raw_version") != 1:
            import pickle
            raise pickle.UnpicklingError("this pickled cpuify.RawKernel comes from another "
                                         "cpuify version; create it again")
        self.code, self.name = state["code"], state["name"]
        self.__name__ = self.name
        self.options, self.backend = tuple(state["options"]), state["backend"]
        self.translate_cucomplex = state["translate_cucomplex"]
        self.enable_cooperative_groups = state["enable_cooperative_groups"]
        self.jitify, self.file_path = state["jitify"], state["file_path"]
        self.name_expressions, self._ptx_text = state["name_expressions"], state["ptx"]
        self._owner, self._fn = None, None

    def __repr__(self) -> str:
        return f"<cpuify.RawKernel {self.name!r}>"
