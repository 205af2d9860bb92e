"""Whole programs across MPI ranks: the Python side of `cpuify nvcc --distributed`.

A program built with --distributed and started by `mpiexec -n N` (N > 1) runs an embedded
Python on every rank (runtime/dist_main.c) that calls `start` here.  Rank 0 then runs the
program's `main`; its CUDA runtime (runtime/cudart.c) reports every allocation, every
copy or memset that touches device memory and every kernel launch through hooks set here,
which forward them to the distributed engine (cpuify.distributed.engine): the engine keeps
the buffers' instances on the ranks current and runs each launch's grid in parts, one box
of blocks per rank.  Ranks > 0 call `serve` and never enter `main`.

What is synchronized when (docs/distributed.md, "Whole programs"):
- cudaMalloc/cudaMallocManaged/cudaMallocHost/cudaHostRegister: a buffer of the engine (all
  ranks get an instance); cudaFree: freed everywhere.
- a copy or memset that writes device memory: rank 0's copy of the bytes written becomes
  the newest (pitched writes first gather their whole span); one that reads device memory
  first makes rank 0's copy of the bytes read current.
- every launch goes to the engine, which splits distributable kernels over the ranks.
  A launch the engine must run whole on rank 0 (no maps, maps that say so, textures,
  device-side launches or malloc, cooperative or spin-waiting kernels, a pointer argument
  into memory the engine does not know) gathers every buffer there first; afterwards every
  buffer is taken to have been written on rank 0.
- managed memory and mapped host memory: the host may touch them at any time, so a launch
  that gets a pointer into one first marks all of it written by the host, and afterwards
  gathers all of it back to rank 0.
- __device__/__constant__ variables: every rank has its own; each launch carries the
  variables whose bytes changed on rank 0 since the last launch (cudaMemcpyToSymbol, a
  kernel run on rank 0) and every rank sets them before running its part.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cpuify.distributed.partition import Box
from cpuify.errors import LaunchError
from cpuify.nvcc.device import elf_sections
from cpuify.nvcc.distinfo import DIST_SECTION, KernelDistInfo, decode

# runtime/cudart.c: enum MEM_*; the engine's buffer kinds
MEM_DEVICE, MEM_HOST, MEM_MANAGED, MEM_REGISTERED = 1, 2, 3, 4
KIND_NAMES = {MEM_DEVICE: "device", MEM_HOST: "host", MEM_MANAGED: "managed", MEM_REGISTERED: "host"}
# the launch hook's flags: cpuify_launch_flags | cpuify_kernel_desc.flags << 8
LAUNCH_FIBERS, LAUNCH_COOPERATIVE = 1, 2
KERNEL_SPINS, KERNEL_ENVREG = 2 << 8, 4 << 8
DIST_API_VERSION = 1
CUDA_ERROR_LAUNCH_FAILURE = 719

ALLOC_HOOK = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32)
RELEASE_HOOK = ctypes.CFUNCTYPE(None, ctypes.c_uint64)
RANGE_HOOK = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint64)
LAUNCH_HOOK = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_uint32, ctypes.c_char_p,
                               ctypes.POINTER(ctypes.c_uint32), ctypes.c_uint64, ctypes.c_uint64,
                               ctypes.c_uint32, ctypes.c_uint32)


class Hooks(ctypes.Structure):
    """struct cpuify_dist_hooks (runtime/cudart.c)."""

    _fields_ = [("alloc", ALLOC_HOOK), ("release", RELEASE_HOOK), ("host_wrote", RANGE_HOOK),
                ("host_read", RANGE_HOOK), ("launch", LAUNCH_HOOK)]


class Api(ctypes.Structure):
    """struct cpuify_dist_api (runtime/cudart.c): what the program's runtime offers."""

    _fields_ = [
        ("version", ctypes.c_uint32),
        ("set_hooks", ctypes.CFUNCTYPE(None, ctypes.c_void_p)),
        ("launch_box", ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_uint32, ctypes.c_char_p,
                                        ctypes.POINTER(ctypes.c_uint32), ctypes.c_uint64,
                                        ctypes.c_uint64, ctypes.c_uint32,
                                        ctypes.POINTER(ctypes.c_uint32), ctypes.c_int32)),
        ("kernel_count", ctypes.CFUNCTYPE(ctypes.c_uint32)),
        ("kernel_name", ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_uint32)),
        ("variable", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint32, ctypes.POINTER(ctypes.c_char_p),
                                      ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                                      ctypes.POINTER(ctypes.c_uint32))),
        ("allocations", ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint64),
                                         ctypes.c_uint32)),
        ("set_sticky", ctypes.CFUNCTYPE(None, ctypes.c_int32)),
    ]




def _dims(grid: tuple[int, int, int], block: tuple[int, int, int]) -> Any:
    return (ctypes.c_uint32 * 6)(*grid, *block)


@dataclass
class Variable:
    name: str
    addr: int
    size: int


@dataclass
class ProgramKernel:
    """A kernel of the program as the engine sees it (the engine's KernelRef): `key`, its
    registration number and device name, names it on every rank."""

    runtime: Runtime
    index: int
    name: str
    info: KernelDistInfo | None = None
    access: Any = None                     # cpuify.analysis.access_maps.KernelAccess
    param_layout: list[tuple[str, str, int, int]] = field(default_factory=list)
    cooperative: bool = False              # the launch being run (rank 0 runs those whole)
    variables: list[Variable] = field(default_factory=list)

    @property
    def key(self) -> tuple[int, str]:
        return (self.index, self.name)

    @property
    def param_names(self) -> list[str]:
        """The scalar (non-pointer) parameters' names, in order: what footprints take."""
        pointers = {p.index for p in getattr(self.access, "params", ())}
        return [p[0] for i, p in enumerate(self.param_layout) if i not in pointers]

    def run_box(self, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
                params: bytes, box: Box | None) -> int:
        """Runs the blocks of `box` (half-open ranges per dimension; None: the whole grid)
        on this rank; the launch's cudaError_t."""
        return self.runtime.launch_box(self.index, self.name, grid, block, shared_mem, params, box,
                                       self.cooperative)

    def set_global(self, key: int, data: bytes) -> None:
        """Variable number `key` of the program now holds `data` (sent by rank 0)."""
        v = self.variables[key]
        ctypes.memmove(v.addr, data, min(len(data), v.size))


class Runtime:
    """The program's CUDA runtime, through the table runtime/dist_main.c passed on."""

    def __init__(self, api_address: int) -> None:
        self.api = Api.from_address(api_address)
        if self.api.version != DIST_API_VERSION:
            raise RuntimeError(f"the program's CUDA runtime offers distributed API version "
                               f"{self.api.version}, this cpuify expects {DIST_API_VERSION}: "
                               "rebuild the program with this cpuify")

    def launch_box(self, index: int, name: str, grid: tuple[int, int, int],
                   block: tuple[int, int, int], shared_mem: int, params: bytes, box: Box | None,
                   cooperative: bool = False) -> int:
        buf = ctypes.create_string_buffer(params, max(len(params), 1))
        c_box = None if box is None else (ctypes.c_uint32 * 6)(*box[0], *box[1], *box[2])
        return int(self.api.launch_box(index, name.encode(), _dims(grid, block), shared_mem,
                                       ctypes.addressof(buf), len(params), c_box, int(cooperative)))

    def kernel_names(self) -> list[str]:
        return [self.api.kernel_name(i).decode() for i in range(self.api.kernel_count())]

    def variables(self) -> list[Variable]:
        out = []
        name, addr, size, const = ctypes.c_char_p(), ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint32()
        i = 0
        while self.api.variable(i, ctypes.byref(name), ctypes.byref(addr), ctypes.byref(size),
                                ctypes.byref(const)):
            if size.value and addr.value:
                out.append(Variable((name.value or b"?").decode(), addr.value, size.value))
            i += 1
        return out

    def allocations(self) -> list[tuple[int, int, int]]:
        n = self.api.allocations(None, 0)
        arr = (ctypes.c_uint64 * (3 * max(n, 1)))()
        n = min(n, self.api.allocations(arr, n))
        return [(arr[3 * i], arr[3 * i + 1], int(arr[3 * i + 2])) for i in range(n)]


def program_info(path: str = "/proc/self/exe") -> dict[str, KernelDistInfo]:
    """The kernels' distribution records the build embedded in the executable."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return {}
    return decode(elf_sections(data).get(DIST_SECTION, b""))


def _load_access(text: str | None) -> Any:
    if not text:
        return None
    from cpuify.analysis.access_maps import KernelAccess
    return KernelAccess.from_text(text)


def _engine_module() -> Any:
    """The engine (cpuify.distributed.engine; CPUIFY_DIST_ENGINE names another module with
    the same `get()`, for tests of this front: such a module may also define
    `kernel_access(info)`, the access of a kernel in place of its maps)."""
    return importlib.import_module(os.environ.get("CPUIFY_DIST_ENGINE") or "cpuify.distributed.engine")


def _fatal(what: str) -> None:
    """An error of the distributed machinery: nothing sensible can go on; the whole MPI
    job is stopped (a server left waiting would hang it)."""
    sys.stderr.write(f"cpuify: distributed execution failed ({what}):\n")
    traceback.print_exc()
    sys.stderr.flush()
    try:
        from mpi4py import MPI
        MPI.COMM_WORLD.Abort(1)
    finally:
        os._exit(1)


class Front:
    """Rank 0: the hooks of the program's CUDA runtime, forwarding to the engine."""

    def __init__(self, engine: Any, runtime: Runtime, access_override: Callable[[KernelDistInfo], Any] | None = None) -> None:
        self.engine = engine
        self.runtime = runtime
        self.access_override = access_override
        self.info = program_info()
        self.buffers: dict[int, tuple[int, int, int]] = {}    # address -> (buf id, bytes, kind)
        self.kernels: dict[int, ProgramKernel] = {}
        self.variables = runtime.variables()
        self.shadow = [ctypes.string_at(v.addr, v.size) for v in self.variables]
        self.lock = threading.RLock()
        for addr, nbytes, kind in runtime.allocations():   # (made before main: constructors)
            self.on_alloc(addr, nbytes, kind)
        self.hooks = Hooks(ALLOC_HOOK(self._guard(self.on_alloc)),
                           RELEASE_HOOK(self._guard(self.on_release)),
                           RANGE_HOOK(self._guard(self.on_host_wrote)),
                           RANGE_HOOK(self._guard(self.on_host_read)),
                           LAUNCH_HOOK(self._guard(self.on_launch)))

    def _guard(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        # one hook at a time (host threads may copy or launch at once; the engine's messages
        # must not interleave); an exception in a ctypes callback would be printed and
        # ignored: stop the job instead
        def hook(*args: Any) -> Any:
            try:
                with self.lock:
                    return fn(*args)
            except BaseException:  # noqa: BLE001
                _fatal(f"in the {fn.__name__} hook")
        hook.__name__ = fn.__name__
        return hook

    def install(self) -> None:
        self.runtime.api.set_hooks(ctypes.addressof(self.hooks))

    def uninstall(self) -> None:
        self.runtime.api.set_hooks(None)

    # ---- memory ----
    def on_alloc(self, addr: int, nbytes: int, kind: int) -> None:
        buf = self.engine.alloc(addr, nbytes, KIND_NAMES.get(kind, "device"))
        self.buffers[addr] = (buf, nbytes, kind)

    def on_release(self, addr: int) -> None:
        entry = self.buffers.pop(addr, None)
        if entry is not None:
            self.engine.free(entry[0])

    def on_host_wrote(self, addr: int, nbytes: int) -> None:
        found = self.engine.find(addr)
        if found is not None:
            buf, off = found
            self.engine.host_wrote(buf, off, off + nbytes)

    def on_host_read(self, addr: int, nbytes: int) -> None:
        found = self.engine.find(addr)
        if found is not None:
            buf, off = found
            self.engine.host_read(buf, off, off + nbytes)

    # ---- launches ----
    def kernel(self, index: int, name: str) -> ProgramKernel:
        k = self.kernels.get(index)
        if k is None or k.name != name:
            info = self.info.get(name)
            k = ProgramKernel(self.runtime, index, name, info=info,
                              param_layout=list(info.params) if info else [],
                              variables=self.variables)
            if info is not None and self.access_override is not None:
                k.access = self.access_override(info)       # (a test's stand-in engine)
                info.reason = "" if k.access is not None else info.reason
            elif info is not None and info.access and not info.reason:
                try:
                    k.access = _load_access(info.access)
                except ImportError as exc:
                    info.reason = f"the access maps cannot be read here ({exc})"
            self.kernels[index] = k
        return k

    @staticmethod
    def single_reason(k: ProgramKernel, flags: int) -> str | None:
        """Why a launch must run whole on rank 0 beyond what its maps say (None: nothing)."""
        if flags & (LAUNCH_COOPERATIVE | KERNEL_ENVREG):
            return "a cooperative launch (grid synchronization)"
        if flags & (LAUNCH_FIBERS | KERNEL_SPINS):
            return "spin-wait loops (blocks may wait for each other)"
        if k.info is None:
            return "no access maps (its file was not compiled with --distributed)"
        return k.info.reason or None

    def pointer_slots(self, k: ProgramKernel, params: bytes) -> tuple[list[tuple[int, int, int]], bool]:
        """(offset in params, buffer id, offset in buffer) for each pointer parameter of the
        maps into a known buffer, and whether one points anywhere else."""
        slots = []
        unknown = False
        for pa in getattr(k.access, "params", ()):
            _name, _type, offset, size = k.param_layout[pa.index]
            value = int.from_bytes(params[offset:offset + min(size, 8)], "little")
            if value == 0:
                continue
            found = self.engine.find(value)
            if found is None:
                unknown = True
            else:
                slots.append((offset, found[0], found[1]))
        return slots, unknown

    def changed_variables(self) -> list[tuple[int, bytes]]:
        """The __device__/__constant__ variables whose bytes changed since the last launch."""
        out = []
        for i, v in enumerate(self.variables):
            now = ctypes.string_at(v.addr, v.size)
            if now != self.shadow[i]:
                out.append((i, now))
                self.shadow[i] = now
        return out

    def on_launch(self, index: int, name_c: bytes, dims: Any, dyn_shared: int, params_addr: int,
                  param_size: int, flags: int) -> int:
        name = name_c.decode()
        grid = (dims[0], dims[1], dims[2])
        block = (dims[3], dims[4], dims[5])
        params = ctypes.string_at(params_addr, param_size)
        k = self.kernel(index, name)
        k.cooperative = bool(flags & LAUNCH_COOPERATIVE)
        slots, unknown = self.pointer_slots(k, params)
        # managed and mapped host memory: the host may have written it at any time, and
        # may read it at any time after
        host_visible = {buf: nbytes for buf, nbytes, kind in self.buffers.values()
                        if kind != MEM_DEVICE and any(s[1] == buf for s in slots)}
        for buf, nbytes in host_visible.items():
            self.engine.host_wrote(buf, 0, nbytes)
        try:
            rc = int(self.engine.launch(k, grid, block, dyn_shared, params, slots,
                                        unknown_pointers=unknown,
                                        single_reason=self.single_reason(k, flags),
                                        globals_=self.changed_variables()))
        except LaunchError as exc:
            # a server's part failed (it printed why): the launch's error, as a local failure
            m = re.search(r"error code (\d+)", str(exc))
            rc = int(m.group(1)) if m else CUDA_ERROR_LAUNCH_FAILURE
        for buf, nbytes in host_visible.items():
            self.engine.host_read(buf, 0, nbytes)
        # (a kernel run on rank 0 may have written variables: the next launch sends them)
        return rc


class Server:
    """Ranks > 0: resolves the kernels the engine names."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.variables = runtime.variables()

    def resolve(self, key: tuple[int, str], payload: Any = None) -> ProgramKernel:
        index, name = key
        return ProgramKernel(self.runtime, index, name, variables=self.variables)


_state: dict[str, Any] = {}


def start(rank: int, size: int, api_address: int, local_only: int = 0) -> None:
    """Called by runtime/dist_main.c on every rank before main (rank 0) or serve (others)."""
    try:
        runtime = Runtime(api_address)
        module = _engine_module()
        engine = module.start() if hasattr(module, "start") else module.get()
        if engine is None:
            raise RuntimeError(f"rank {rank} of {size}: the distributed engine did not start")
        _state.update(rank=rank, size=size, runtime=runtime, engine=engine)
        if rank == 0:
            front = Front(engine, runtime, getattr(module, "kernel_access", None))
            _state["front"] = front
            if not local_only:
                front.install()
            else:
                sys.stderr.write("cpuify: this program uses cuBLAS/cuFFT, which work on rank 0's "
                                 "memory: its kernels run on rank 0 only\n")
    except BaseException:  # noqa: BLE001
        _fatal(f"starting rank {rank}")


def serve() -> None:
    """Ranks > 0: serve kernel partitions until rank 0 ends."""
    try:
        server = Server(_state["runtime"])
        _state["engine"].serve(server.resolve)
        _finalize()
    except BaseException:  # noqa: BLE001
        _fatal(f"serving on rank {_state.get('rank')}")


def stop() -> None:
    """Rank 0, when main returns or the program exits: the servers leave serve()."""
    try:
        front: Front | None = _state.pop("front", None)
        engine = _state["engine"]
        if front is not None:
            front.uninstall()
            stats = getattr(engine, "stats", None)
            if os.environ.get("CPUIFY_DIST_VERBOSE") and stats is not None:
                sys.stderr.write(f"cpuify: distributed over {_state['size']} ranks: {stats}\n")
        engine.shutdown()
        _finalize()
    except BaseException:  # noqa: BLE001
        _fatal("shutting down")


def _finalize() -> None:
    from mpi4py import MPI
    if not MPI.Is_finalized():
        MPI.Finalize()
