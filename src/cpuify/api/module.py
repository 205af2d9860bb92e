"""CuPy-compatible kernel API on the CPU: RawModule, RawKernel, Function.

    mod = cpuify.RawModule(code=src, options=("-DN=4",), name_expressions=("k<4>",))
    k = mod.get_function("k<4>")
    k((blocks,), (threads,), (x, y, np.float32(2.0), np.int32(n)))

Pointers are NumPy arrays (or anything with the array interface or the buffer protocol);
scalars are converted to the parameter type the kernel declares (the PTX knows it), with
range checks; structs by value come from NumPy structured scalars or bytes."""

from __future__ import annotations

import ctypes
import os
import signal
import struct
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from cpuify.api.arguments import ArgumentPacker
from cpuify.codegen.jit import LoadedObject
from cpuify.codegen.layout import (
    ERR_ASSERT, ERR_BARRIER_DIVERGENCE, ERR_TRAP, ERR_WARP_DIVERGENCE,
)
from cpuify.codegen.layout import ScratchLayout
from cpuify.codegen.llvm_gen import KernelInfo, dynamic_smem_offset
from cpuify.compiler import CompiledModule, compile_cuda, compile_ptx_cached
from cpuify.errors import (
    CpuifyError, IllegalAddressError, KernelFailure, LaunchError, LaunchTimeoutError,
    UnsupportedError,
)
from cpuify.runtime.native import (
    CPUIFY_ERR_HARDWARE, CPUIFY_ERR_ILLEGAL_ADDRESS, CPUIFY_ERR_INTERRUPTED, CPUIFY_ERR_TIMEOUT,
    last_fault, load_runtime,
)

MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIM = (1024, 1024, 64)
MAX_GRID_DIM = (2**31 - 1, 65535, 65535)
DEFAULT_SHARED_LIMIT = 48 * 1024
MAX_SHARED_OPTIN = 227 * 1024

_ERROR_TEXT = {
    ERR_BARRIER_DIVERGENCE: "not all threads of the block reached the same __syncthreads() "
                            "(a barrier inside a branch that only some threads take)",
    ERR_TRAP: "the kernel executed a trap instruction (__trap() or asm(\"trap;\"))",
    ERR_WARP_DIVERGENCE: "threads of a warp disagree at a warp collective",
    ERR_ASSERT: "a device-side assert() failed",
    5: "out of memory allocating shared/scratch memory for the launch",
}



def _stopped_launch(name: str, rc: int, block: tuple[int, ...]) -> BaseException:
    """The exception for a launch the runtime stopped: a contained fault, the watchdog,
    Ctrl-C.  Nothing outlives it: the next launch starts afresh (a context reset)."""
    where = f"block ({block[0]}, {block[1]}, {block[2]})"
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


def _dim3(value: Any, what: str, kernel: str) -> tuple[int, int, int]:
    if type(value) is tuple and all(type(v) is int for v in value):
        n = len(value)
        if n == 3:
            return value
        if n == 1:
            return value[0], 1, 1
        if n == 2:
            return value[0], value[1], 1
    if isinstance(value, (int, np.integer)):
        dims = [int(value)]
    else:
        try:
            if isinstance(value, (str, bytes)):
                raise TypeError
            dims = [int(v) for v in value]
        except (TypeError, ValueError):
            raise TypeError(f"kernel '{kernel}': {what} must be an int or a tuple of up to 3 ints, "
                            f"got {type(value).__name__}") from None
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"kernel '{kernel}': {what} must have 1 to 3 dimensions, got {len(dims)}")
    while len(dims) < 3:
        dims.append(1)
    return dims[0], dims[1], dims[2]


class Function:
    """A compiled kernel, launched with `fn(grid, block, args, shared_mem=0)`."""

    def __init__(self, module: "RawModule", info: KernelInfo, loaded: LoadedObject) -> None:
        self.module = module
        self.info = info
        self.name = info.name
        self._rt = load_runtime()
        self._launch = self._rt.cpuify_launch
        self._addr = loaded.function_address(info.symbol)
        self._loaded = loaded
        # launch-config specialization: a block shape launched a second time gets code
        # compiled for exactly that shape (constant thread-loop bounds)
        self._shape_addr: dict[tuple[int, int, int], int] = {}
        # the scratch layout of each specialized block function (its own slots)
        self._shape_scratch: dict[tuple[int, int, int], ScratchLayout] = {}
        self._shape_seen: dict[tuple[int, int, int], int] = {}
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
        self._packer = ArgumentPacker(self.name, self._plan, self._aggregate)
        # launch configurations (grid, block, shared_mem) already checked
        self._checked: set[tuple[Any, Any, int]] = set()

    # CuPy-compatible read-only attributes
    @property
    def num_regs(self) -> int:
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
            addr = self._loaded.function_address(specialized_symbol(self.name, block))
        except Exception as e:      # the generic code is always correct: keep using it
            import warnings
            from cpuify.errors import SpecializationWarning
            warnings.warn(f"kernel '{self.name}': compiling it for blocks of {block} failed "
                          f"({type(e).__name__}: {e}); running the generic code",
                          SpecializationWarning, stacklevel=3)
            addr = self._addr
        self._shape_addr[block] = addr
        return addr

    def _pack(self, args: Sequence[Any], bufs: "_LaunchBuffers") -> None:
        self._packer(args, bufs.params)

    def __call__(self, grid: Any, block: Any, args: Sequence[Any], *, shared_mem: int = 0,
                 stream: Any = None, enable_cooperative_groups: bool = False) -> None:
        name = self.name
        g = _dim3(grid, "grid", name)
        bl = _dim3(block, "block", name)
        nthreads = bl[0] * bl[1] * bl[2]
        if type(shared_mem) is not int:
            shared_mem = int(shared_mem)
        config = (g, bl, shared_mem)
        if config not in self._checked:
            self._check_config(g, bl, nthreads, shared_mem)
            if len(self._checked) < 64:
                self._checked.add(config)
        addr = self._shape_addr.get(bl)
        if addr is None:
            addr = self._block_function_for(bl)
        shared_bytes = self.info.shared_static + shared_mem
        scratch = self._shape_scratch.get(bl, self.info.scratch).scratch_bytes(nthreads)
        own = self._busy.acquire(blocking=False)
        bufs = self._buffers if own else _LaunchBuffers(self._param_size)
        try:
            self._pack(args, bufs)
            struct.pack_into("<I", bufs.params, self._dyn_offset, shared_mem)
            d = bufs.dims
            rc = 0
            if self._prologue:
                d[0], d[1], d[2], d[3], d[4], d[5] = 1, 1, 1, 1, 1, 1
                rc = self._launch(self._prologue, bufs.params_addr, bufs.dims_addr, 0,
                                  self.info.prologue_scratch, bufs.err_addr)
            d[0], d[1], d[2], d[3], d[4], d[5] = g[0], g[1], g[2], bl[0], bl[1], bl[2]
            if rc == 0:
                rc = self._launch(addr, bufs.params_addr, bufs.dims_addr, shared_bytes, scratch,
                                  bufs.err_addr)
            e = tuple(bufs.err) if rc else ()
        finally:
            if own:
                self._busy.release()
        if self._flush:
            sys.stdout.flush()
            self._rt.cpuify_flush()
        if rc:
            if rc >= CPUIFY_ERR_ILLEGAL_ADDRESS:
                raise _stopped_launch(name, rc, e)
            raise LaunchError(f"kernel '{name}' failed in block ({e[0]}, {e[1]}, {e[2]}): "
                              f"{_ERROR_TEXT.get(rc, f'error code {rc}')}")

    def _check_config(self, g: tuple[int, int, int], bl: tuple[int, int, int], nthreads: int,
                      shared_mem: int) -> None:
        """Raises for a launch configuration CUDA would refuse."""
        name = self.name
        for k in range(3):
            if not 1 <= bl[k] <= MAX_BLOCK_DIM[k]:
                raise ValueError(f"kernel '{name}': block dimension {'xyz'[k]} = {bl[k]} is out of "
                                 f"range 1..{MAX_BLOCK_DIM[k]} (cudaErrorInvalidConfiguration)")
            if not 1 <= g[k] <= MAX_GRID_DIM[k]:
                raise ValueError(f"kernel '{name}': grid dimension {'xyz'[k]} = {g[k]} is out of "
                                 f"range 1..{MAX_GRID_DIM[k]} (cudaErrorInvalidConfiguration)")
        req = self.info.directives.get("reqntid")
        if req and tuple(req) + (1,) * (3 - len(req)) != bl:
            raise ValueError(f"kernel '{name}' requires a block of exactly "
                             f"{tuple(req) + (1,) * (3 - len(req))} threads (__launch_bounds__/"
                             f".reqntid), got {bl} (cudaErrorInvalidConfiguration)")
        if nthreads > self.max_threads_per_block:
            raise ValueError(f"kernel '{name}': {nthreads} threads per block exceeds the limit of "
                             f"{self.max_threads_per_block} (cudaErrorInvalidConfiguration)")
        if shared_mem < 0:
            raise ValueError(f"kernel '{name}': shared_mem must be >= 0")
        if shared_mem > self.max_dynamic_shared_size_bytes:
            raise ValueError(
                f"kernel '{name}': {shared_mem} bytes of dynamic shared memory exceed the limit of "
                f"{self.max_dynamic_shared_size_bytes} bytes; raise it with "
                f"fn.max_dynamic_shared_size_bytes = N (up to {MAX_SHARED_OPTIN - self.info.shared_static}), "
                "as cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize) does")

    def __setattr__(self, key: str, value: Any) -> None:
        if key == "max_dynamic_shared_size_bytes" and hasattr(self, "info"):
            value = int(value)
            limit = MAX_SHARED_OPTIN - self.info.shared_static
            if not 0 <= value <= limit:
                raise ValueError(f"kernel '{self.name}': max_dynamic_shared_size_bytes must be in "
                                 f"0..{limit} (cudaErrorInvalidValue)")
            if hasattr(self, "_checked"):
                self._checked.clear()       # the limit the checked launches were held to
        object.__setattr__(self, key, value)


class _LaunchBuffers:
    """ctypes buffers of one launch: packed parameters, dims, the failing block's index."""
    __slots__ = ("params", "params_addr", "dims", "dims_addr", "err", "err_addr")

    def __init__(self, param_size: int) -> None:
        self.params = (ctypes.c_char * param_size)()
        self.params_addr = ctypes.addressof(self.params)
        self.dims = (ctypes.c_uint32 * 6)()
        self.dims_addr = ctypes.addressof(self.dims)
        self.err = (ctypes.c_uint32 * 3)()
        self.err_addr = ctypes.addressof(self.err)


class RawModule:
    """CUDA C++ (or PTX) compiled for the CPU.  Mirrors `cupy.RawModule`."""

    def __init__(self, code: str | None = None, *, path: str | os.PathLike[str] | None = None,
                 options: Sequence[str] = (), backend: str = "nvrtc",
                 translate_cucomplex: bool = False, enable_cooperative_groups: bool = False,
                 name_expressions: Sequence[str] | None = None, jitify: bool = False,
                 ptx: str | None = None) -> None:
        if jitify:
            raise CpuifyError("jitify=True is not supported by cpuify; compile without it")
        if backend not in ("nvrtc", "nvcc"):
            raise ValueError(f"backend must be 'nvrtc' or 'nvcc', got {backend!r}")
        sources = [x is not None for x in (code, path, ptx)]
        if sum(sources) != 1:
            raise TypeError("give exactly one of code=, path= or ptx=")
        filename = "kernel.cu"
        if path is not None:
            p = Path(path)
            text = p.read_text()
            if p.suffix == ".ptx" or text.lstrip().startswith(("//", ".version")) and ".entry" in text:
                ptx = text
            else:
                code, filename = text, p.name
        if isinstance(options, str):
            options = (options,)
        self.code = code
        self.options = tuple(options)
        self.name_expressions = tuple(name_expressions or ())
        if ptx is not None:
            self._compiled: CompiledModule = compile_ptx_cached(ptx, self.options)
        else:
            assert code is not None
            self._compiled = compile_cuda(code, options=self.options,
                                          name_expressions=self.name_expressions, filename=filename)
        self._loaded = LoadedObject(self._compiled.object_code)
        self._functions: dict[str, Function] = {}

    @property
    def ptx(self) -> str:
        return self._compiled.ptx

    @property
    def kernel_names(self) -> list[str]:
        return list(self._compiled.kernels)

    def _resolve(self, name: str) -> str:
        return self._compiled.lowered_names.get(name, name)

    def get_function(self, name: str) -> Function:
        fn = self._functions.get(name)
        if fn is not None:
            return fn
        symbol = self._resolve(name)
        info = self._compiled.kernels.get(symbol)
        if info is None and symbol in self._compiled.refused:
            raise UnsupportedError(self._compiled.refused[symbol])
        if info is None:
            known = ", ".join(sorted(self._compiled.kernels)) or "none"
            hint = ""
            if "<" in name and name not in self.name_expressions:
                hint = " (template kernels must be listed in name_expressions=)"
            elif any(k.startswith("_Z") and name in k for k in self._compiled.kernels):
                hint = " (the kernel name is C++-mangled: declare it extern \"C\" or use name_expressions=)"
            raise LookupError(f"no kernel named '{name}' in this module{hint}; kernels: {known}")
        fn = Function(self, info, self._loaded)
        self._functions[name] = fn
        return fn

    def get_global(self, name: str, dtype: Any = np.uint8) -> np.ndarray:
        """A writable NumPy view of a `__device__` or `__constant__` variable."""
        symbol = self._resolve(name)
        g = self._compiled.globals.get(symbol)
        if g is None:
            known = ", ".join(sorted(n for n in self._compiled.globals if not n.startswith("$"))) or "none"
            raise LookupError(f"no __device__/__constant__ variable named '{name}'; variables: {known}")
        addr = self._loaded.global_address(symbol)
        raw = (ctypes.c_uint8 * g.size).from_address(addr)
        arr = np.frombuffer(raw, dtype=np.uint8)
        arr = arr.view(dtype) if np.dtype(dtype) != np.uint8 else arr
        # keep the JIT memory alive as long as the view
        _views_keepalive.setdefault(id(self), (self, []))[1].append(raw)
        return arr


_views_keepalive: dict[int, tuple[RawModule, list[Any]]] = {}


class RawKernel:
    """One kernel from CUDA source.  Mirrors `cupy.RawKernel`."""

    def __init__(self, code: str, name: str, options: Sequence[str] = (), backend: str = "nvrtc",
                 translate_cucomplex: bool = False, enable_cooperative_groups: bool = False,
                 jitify: bool = False) -> None:
        self.code = code
        self.name = name
        self.options = tuple(options) if not isinstance(options, str) else (options,)
        self._module = RawModule(code=code, options=self.options, backend=backend,
                                 enable_cooperative_groups=enable_cooperative_groups, jitify=jitify)
        self._fn = self._module.get_function(name)

    @property
    def kernel(self) -> Function:
        return self._fn

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self._fn.max_dynamic_shared_size_bytes

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value: int) -> None:
        self._fn.max_dynamic_shared_size_bytes = value

    @property
    def attributes(self) -> dict[str, int]:
        return {"max_threads_per_block": self._fn.max_threads_per_block,
                "shared_size_bytes": self._fn.shared_size_bytes,
                "max_dynamic_shared_size_bytes": self._fn.max_dynamic_shared_size_bytes}

    def __call__(self, grid: Any, block: Any, args: Sequence[Any], *, shared_mem: int = 0,
                 stream: Any = None, enable_cooperative_groups: bool = False) -> None:
        self._fn(grid, block, args, shared_mem=shared_mem)
