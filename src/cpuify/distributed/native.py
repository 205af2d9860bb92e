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
- a launch of a kernel with access maps that is distributable: the engine runs it over the
  ranks.  Any other launch (no maps, textures, device-side launches or malloc, cooperative
  or spin-waiting kernels, a pointer argument into memory the engine does not know) runs
  whole on rank 0 after every buffer is gathered there; afterwards every buffer is taken
  to have been written on rank 0.
- managed memory and mapped host memory: the host may touch them at any time, so a launch
  that gets a pointer into one first marks all of it written by the host, and afterwards
  gathers all of it back to rank 0.
- __device__/__constant__ variables: every rank has its own; before each launch the
  engine runs, rank 0 sends the variables whose bytes changed since the last launch (by
  cudaMemcpyToSymbol or a kernel run on rank 0) to the servers, which apply them when
  they resolve the launch's kernel (its key carries the number of updates sent so far).
"""

from __future__ import annotations

import ctypes
import importlib
import os
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cpuify.nvcc.device import elf_sections
from cpuify.nvcc.distinfo import DIST_SECTION, KernelDistInfo, decode

# runtime/cudart.c: enum MEM_*; the engine's buffer kinds
MEM_DEVICE, MEM_HOST, MEM_MANAGED, MEM_REGISTERED = 1, 2, 3, 4
KIND_NAMES = {MEM_DEVICE: "device", MEM_HOST: "host", MEM_MANAGED: "managed", MEM_REGISTERED: "host"}
# the launch hook's flags: cpuify_launch_flags | cpuify_kernel_desc.flags << 8
LAUNCH_FIBERS, LAUNCH_COOPERATIVE = 1, 2
KERNEL_SPINS, KERNEL_ENVREG = 2 << 8, 4 << 8
RUN_HERE = -1          # the launch hook's "run it here, as without MPI"
DIST_API_VERSION = 1
_SYMBOL_TAG = 7301     # MPI tag of the variable updates (on a communicator of our own)

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
                                        ctypes.POINTER(ctypes.c_uint32))),
        ("kernel_count", ctypes.CFUNCTYPE(ctypes.c_uint32)),
        ("kernel_name", ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_uint32)),
        ("variable", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint32, ctypes.POINTER(ctypes.c_char_p),
                                      ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                                      ctypes.POINTER(ctypes.c_uint32))),
        ("allocations", ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint64),
                                         ctypes.c_uint32)),
        ("set_sticky", ctypes.CFUNCTYPE(None, ctypes.c_int32)),
    ]


Box = tuple[tuple[int, int], tuple[int, int], tuple[int, int]]


def _dims(grid: tuple[int, int, int], block: tuple[int, int, int]) -> Any:
    return (ctypes.c_uint32 * 6)(*grid, *block)


@dataclass
class Variable:
    name: str
    addr: int
    size: int


@dataclass
class ProgramKernel:
    """A kernel of the program as the engine sees it (the engine's KernelRef): `key` names
    it on every rank (registration number, device name, variable updates sent so far)."""

    runtime: Runtime
    index: int
    name: str
    epoch: int = 0
    info: KernelDistInfo | None = None
    access: Any = None                     # cpuify.analysis.access_maps.KernelAccess
    param_layout: list[tuple[str, str, int, int]] = field(default_factory=list)

    @property
    def key(self) -> tuple[int, str, int]:
        return (self.index, self.name, self.epoch)

    @property
    def param_names(self) -> list[str]:
        """The scalar (non-pointer) parameters' names, in order: what footprints take."""
        pointers = {p.index for p in getattr(self.access, "params", ())}
        return [p[0] for i, p in enumerate(self.param_layout) if i not in pointers]

    def run_box(self, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
                params: bytes, box: Box | None) -> int:
        """Runs the blocks of `box` (half-open ranges per dimension; None: the whole grid)
        on this rank; the launch's cudaError_t."""
        return self.runtime.launch_box(self.index, self.name, grid, block, shared_mem, params, box)


class Runtime:
    """The program's CUDA runtime, through the table runtime/dist_main.c passed on."""

    def __init__(self, api_address: int) -> None:
        self.api = Api.from_address(api_address)
        if self.api.version != DIST_API_VERSION:
            raise RuntimeError(f"the program's CUDA runtime offers distributed API version "
                               f"{self.api.version}, this cpuify expects {DIST_API_VERSION}: "
                               "rebuild the program with this cpuify")

    def launch_box(self, index: int, name: str, grid: tuple[int, int, int],
                   block: tuple[int, int, int], shared_mem: int, params: bytes, box: Box | None) -> int:
        buf = ctypes.create_string_buffer(params, max(len(params), 1))
        c_box = None if box is None else (ctypes.c_uint32 * 6)(*box[0], *box[1], *box[2])
        return int(self.api.launch_box(index, name.encode(), _dims(grid, block), shared_mem,
                                       ctypes.addressof(buf), len(params), c_box))

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

    def __init__(self, engine: Any, runtime: Runtime, comm: Any, world_size: int,
                 access_override: Callable[[KernelDistInfo], Any] | None = None) -> None:
        self.engine = engine
        self.access_override = access_override
        self.runtime = runtime
        self.comm = comm
        self.world_size = world_size
        self.info = program_info()
        self.buffers: dict[int, tuple[int, int, int]] = {}    # address -> (buf id, bytes, kind)
        self.kernels: dict[int, ProgramKernel] = {}
        self.variables = runtime.variables()
        self.shadow = [ctypes.string_at(v.addr, v.size) for v in self.variables]
        self.epoch = 0
        self.pending: list[Any] = []       # variable updates still being sent
        self.local_launches = 0
        self.engine_launches = 0
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
                              param_layout=list(info.params) if info else [])
            if info is not None and self.access_override is not None:
                k.access = self.access_override(info)       # (a test's stand-in engine)
                info.reason = "" if k.access is not None else info.reason
            elif info is not None and info.access and not info.reason:
                try:
                    k.access = _load_access(info.access)
                except ImportError as exc:
                    info.reason = f"the access maps cannot be read here ({exc})"
            self.kernels[index] = k
        k.epoch = self.epoch
        return k

    def why_on_rank0(self, k: ProgramKernel, flags: int) -> str:
        """Why a launch must run whole on rank 0 ("" when the engine may distribute it)."""
        if flags & (LAUNCH_COOPERATIVE | LAUNCH_FIBERS | KERNEL_SPINS | KERNEL_ENVREG):
            return "cooperative or spin-waiting kernel"
        if k.info is None:
            return "no distribution record (a file not compiled with --distributed)"
        if k.info.reason:
            return k.info.reason
        if k.access is None:
            return "no access maps"
        if not getattr(k.access, "distributable", False):
            return getattr(k.access, "reason", "") or "not distributable"
        return ""

    def pointer_slots(self, k: ProgramKernel, params: bytes) -> list[tuple[int, int, int]] | None:
        """(offset in params, buffer id, offset in buffer) for each pointer parameter of the
        maps; None when one points into memory the engine does not know."""
        slots = []
        for pa in getattr(k.access, "params", ()):
            _name, _type, offset, size = k.param_layout[pa.index]
            value = int.from_bytes(params[offset:offset + min(size, 8)], "little")
            if value == 0:
                continue
            found = self.engine.find(value)
            if found is None:
                return None
            slots.append((offset, found[0], found[1]))
        return slots

    def on_launch(self, index: int, name_c: bytes, dims: Any, dyn_shared: int, params_addr: int,
                  param_size: int, flags: int) -> int:
        name = name_c.decode()
        grid = (dims[0], dims[1], dims[2])
        block = (dims[3], dims[4], dims[5])
        params = ctypes.string_at(params_addr, param_size)
        k = self.kernel(index, name)
        why = self.why_on_rank0(k, flags)
        slots = None if why else self.pointer_slots(k, params)
        if slots is None:
            return self.run_on_rank0(k, grid, block, dyn_shared, params)
        host_visible = {buf: (self.buffers[addr][1]) for addr, (buf, _n, kind) in self.buffers.items()
                        if kind != MEM_DEVICE and any(s[1] == buf for s in slots)}
        for buf, nbytes in host_visible.items():
            self.engine.host_wrote(buf, 0, nbytes)     # the host may have written it any time
        self.send_variables()
        k.epoch = self.epoch
        self.engine_launches += 1
        rc = int(self.engine.launch(k, grid, block, dyn_shared, params, slots))
        for buf, nbytes in host_visible.items():
            self.engine.host_read(buf, 0, nbytes)      # ... and read it any time after
        return rc

    def run_on_rank0(self, k: ProgramKernel, grid: tuple[int, int, int], block: tuple[int, int, int],
                     dyn_shared: int, params: bytes) -> int:
        """The launch whole on rank 0: every buffer gathered first (the kernel may reach any
        of them), every buffer taken as written by rank 0 after."""
        self.local_launches += 1
        for buf, nbytes, _kind in self.buffers.values():
            self.engine.host_read(buf, 0, nbytes)
        rc = k.run_box(grid, block, dyn_shared, params, None)
        for buf, nbytes, _kind in self.buffers.values():
            self.engine.host_wrote(buf, 0, nbytes)
        return rc

    # ---- __device__ / __constant__ variables ----
    def send_variables(self) -> None:
        updates = []
        for i, v in enumerate(self.variables):
            now = ctypes.string_at(v.addr, v.size)
            if now != self.shadow[i]:
                updates.append((i, now))
                self.shadow[i] = now
        if not updates:
            return
        self.epoch += 1
        for rank in range(1, self.world_size):
            self.pending.append(self.comm.isend(updates, dest=rank, tag=_SYMBOL_TAG))
        self.pending = [r for r in self.pending if not r.Test()]

    def finish(self) -> None:
        for r in self.pending:
            r.Wait()
        self.pending = []


class Server:
    """Ranks > 0: resolves the kernels the engine names, applying variable updates."""

    def __init__(self, runtime: Runtime, comm: Any) -> None:
        self.runtime = runtime
        self.comm = comm
        self.variables = runtime.variables()
        self.epoch = 0
        self.kernels: dict[tuple[int, str], ProgramKernel] = {}

    def resolve(self, key: tuple[int, str, int]) -> ProgramKernel:
        index, name, epoch = key
        while self.epoch < epoch:
            for i, data in self.comm.recv(source=0, tag=_SYMBOL_TAG):
                v = self.variables[i]
                ctypes.memmove(v.addr, data, min(len(data), v.size))
            self.epoch += 1
        k = self.kernels.get((index, name))
        if k is None:
            k = self.kernels[(index, name)] = ProgramKernel(self.runtime, index, name)
        k.epoch = epoch
        return k


_state: dict[str, Any] = {}


def start(rank: int, size: int, api_address: int, local_only: int = 0) -> None:
    """Called by runtime/dist_main.c on every rank before main (rank 0) or serve (others)."""
    try:
        runtime = Runtime(api_address)
        module = _engine_module()
        engine = module.get()
        if engine is None:
            raise RuntimeError(f"rank {rank} of {size}: the distributed engine did not start "
                               "(is mpi4py installed?)")
        from mpi4py import MPI
        comm = MPI.COMM_WORLD.Dup()
        _state.update(rank=rank, size=size, runtime=runtime, engine=engine, comm=comm)
        if rank == 0:
            front = Front(engine, runtime, comm, size, getattr(module, "kernel_access", None))
            _state["front"] = front
            if not local_only:
                front.install()
            else:
                sys.stderr.write("cpuify: this program uses cuBLAS/cuFFT, which run on the "
                                 "host: its kernels run on rank 0 only\n")
    except BaseException:  # noqa: BLE001
        _fatal(f"starting rank {rank}")


def serve() -> None:
    """Ranks > 0: serve kernel partitions until rank 0 ends."""
    try:
        server = Server(_state["runtime"], _state["comm"])
        _state["engine"].serve(server.resolve)
        _finalize()
    except BaseException:  # noqa: BLE001
        _fatal(f"serving on rank {_state.get('rank')}")


def stop() -> None:
    """Rank 0, when main returns or the program exits: the servers leave serve()."""
    try:
        front: Front | None = _state.get("front")
        if front is not None:
            front.uninstall()
            front.finish()
            if os.environ.get("CPUIFY_DIST_VERBOSE"):
                sys.stderr.write(f"cpuify: distributed: {front.engine_launches} launches over "
                                 f"{_state['size']} ranks, {front.local_launches} on rank 0\n")
        _state["engine"].shutdown()
        _finalize()
    except BaseException:  # noqa: BLE001
        _fatal("shutting down")


def _finalize() -> None:
    from mpi4py import MPI
    comm = _state.pop("comm", None)
    if comm is not None:
        comm.Free()
    if not MPI.Is_finalized():
        MPI.Finalize()
