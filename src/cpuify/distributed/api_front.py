"""The Python API over MPI ranks: `mpiexec -n 4 python script.py`.

Rank 0 runs the script; `import cpuify` on the other ranks enters the engine's serve loop
and they leave the process when rank 0 ends (cpuify/__init__.py).  Kernel launches
(`RawKernel`, `Function`) on rank 0 go through the engine: NumPy arrays passed to kernels
are the buffers; every rank other than 0 holds an instance of each.

NumPy arrays stay host memory, which the script may read or write at any moment, so by
default each launch starts from rank 0's arrays (the servers' copies are taken as stale)
and ends with what the servers wrote gathered back into them.  Inside
`with cpuify.distributed.resident():` the script promises not to touch the arrays it
passes to kernels between launches: data then stays where it was computed and moves only
when a partition reads what another rank wrote, as for device memory in whole programs;
leaving the block (or `cpuify.distributed.fetch(a)`) brings it back to rank 0."""

from __future__ import annotations

import contextlib
import hashlib
import weakref
from typing import Any, Iterator

import numpy as np

from cpuify.distributed import engine as _engine

_resident = 0

try:                                        # NumPy 2
    from numpy.lib.array_utils import byte_bounds as _byte_bounds
except ImportError:                         # NumPy 1
    _byte_bounds = np.byte_bounds


class PyKernel:
    """A KernelRef for a kernel of a RawModule (rank 0) or its rebuilt copy (servers)."""

    def __init__(self, fn: Any, with_access: bool = True) -> None:
        self.fn = fn
        compiled = fn.module._compiled
        self.name = fn.name
        digest = hashlib.sha256(compiled.ptx.encode()).hexdigest()[:32]
        self.key = (digest, fn.name)
        self.param_layout = list(fn._plan)
        self.ptx = compiled.ptx
        self.globals = {name: g.size for name, g in compiled.globals.items()
                        if g.space in ("global", "const") and g.size}
        self.access: Any = None
        self.reason: str | None = None
        if with_access:
            self.access, self.reason = _access_of(compiled, fn.name, self.key)
        if fn.info.spin_waits:
            self.reason = "it waits for other blocks (spin-wait loops)"

    def run_box(self, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
                params: bytes, box: tuple[tuple[int, int], ...]) -> int:
        return self.fn._launch_packed(grid, block, params, shared_mem, box)

    def set_global(self, name: str, data: bytes) -> None:
        view = self.fn.module.global_view(name)
        view.view(np.uint8).reshape(-1)[:len(data)] = np.frombuffer(data, np.uint8)

    def global_bytes(self) -> list[tuple[str, bytes]]:
        return [(name, self.fn.module.global_view(name).view(np.uint8).tobytes())
                for name in self.globals]


_ACCESS: dict[Any, tuple[Any, str | None]] = {}


def _access_of(compiled: Any, name: str, key: Any) -> tuple[Any, str | None]:
    """A kernel's access maps (built once per PTX and kernel, however often the module is
    created again), or None and why they could not be built."""
    got = _ACCESS.get(key)
    if got is None:
        try:
            from cpuify.analysis.access_maps import kernel_access
            got = (kernel_access(compiled, name), None)
        except Exception as e:      # noqa: BLE001 - the launch then runs whole on rank 0
            got = (None, f"its access maps could not be built ({type(e).__name__}: {e})")
        if len(_ACCESS) > 512:
            _ACCESS.clear()
        _ACCESS[key] = got
    return got


def resolve(key: Any, payload: Any) -> PyKernel:
    """Servers: rebuild a kernel from the PTX rank 0 sent (compiled here, cached here)."""
    from cpuify.api.module import RawModule
    module = RawModule(ptx=payload)
    return PyKernel(module.get_function(key[1]).kernel, with_access=False)


class _Front:
    """Rank 0's side: NumPy arrays as buffers, launches through the engine."""

    def __init__(self, eng: "_engine.Engine") -> None:
        self.engine = eng
        self.kernels: dict[int, PyKernel] = {}
        self.arrays: dict[int, tuple[int, Any]] = {}     # id(root) -> (buffer id, weakref)
        self.dead: list[int] = []
        self.shipped: dict[tuple[Any, str], bytes] = {}

    def kernel(self, fn: Any) -> PyKernel:
        k = self.kernels.get(id(fn))
        if k is None or k.fn is not fn:
            k = PyKernel(fn)
            self.kernels[id(fn)] = k
            self.engine.register_kernel(k, k.ptx)
        return k

    def _forget(self) -> None:
        while self.dead:
            self.engine.free(self.dead.pop())

    def buffer_of(self, arr: Any) -> tuple[int, int] | None:
        """(buffer id, offset) of an array argument's memory (its owning array becomes a
        buffer on first use), or None when it cannot be followed."""
        if not isinstance(arr, np.ndarray):
            return None
        root = arr
        while isinstance(root.base, np.ndarray):
            root = root.base
        key = id(root)
        low, high = _byte_bounds(root)
        entry = self.arrays.get(key)
        if entry is not None and entry[1]() is root:
            bid = entry[0]
        else:
            try:
                ref = weakref.ref(root)
            except TypeError:
                return None
            bid = self.engine.alloc(low, high - low, "host")
            self.arrays[key] = (bid, ref)
            weakref.finalize(root, self._dead, key, bid)
        return bid, arr.__array_interface__["data"][0] - low

    def _dead(self, key: int, bid: int) -> None:
        # (a finalizer runs at any moment: the free is sent before the next step)
        entry = self.arrays.get(key)
        if entry is not None and entry[0] == bid:
            del self.arrays[key]
        self.dead.append(bid)

    def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
               args: Any, params: bytes, shared_mem: int, cooperative: bool) -> int:
        self._forget()
        eng = self.engine
        k = self.kernel(fn)
        slots: list[tuple[int, int, int]] = []
        unknown = False
        used: set[int] = set()
        for (name, t, off, size), agg, arg in zip(fn._plan, fn._aggregate, args):
            if agg or size != 8 or t not in ("u64", "b64", "s64"):
                continue
            where = self.buffer_of(arg)
            if where is None:
                value = int.from_bytes(params[off:off + 8], "little")
                where = eng.find(value) if value else None
                if where is None:
                    unknown = unknown or value != 0
                    continue
            slots.append((off, where[0], where[1]))
            used.add(where[0])
        if not _resident:
            for bid in used:
                eng.host_wrote(bid, 0, eng.buffers[bid].nbytes)
        changed = []
        for name, data in k.global_bytes():
            if self.shipped.get((k.key, name)) != data:
                self.shipped[(k.key, name)] = data
                changed.append((name, data))
        rc = eng.launch(k, grid, block, shared_mem, params, slots, unknown_pointers=unknown,
                        single_reason="a cooperative launch" if cooperative else k.reason,
                        globals_=changed)
        if not _resident:
            for bid in used:
                eng.host_read(bid, 0, eng.buffers[bid].nbytes)
        return rc


_front: _Front | None = None


def install(eng: "_engine.Engine") -> None:
    """Rank 0: route the API's launches through the engine."""
    global _front
    from cpuify.api import module
    _front = _Front(eng)
    module.set_distributed_launch(_front.launch)


@contextlib.contextmanager
def resident() -> Iterator[None]:
    """Inside, arrays passed to kernels stay distributed between launches (the script
    must not read or write them there, except through fetch()); on leaving, rank 0's
    arrays are brought up to date."""
    global _resident
    _resident += 1
    try:
        yield
    finally:
        _resident -= 1
        if _resident == 0 and _front is not None:
            _front.engine.gather_all()


def fetch(arr: np.ndarray) -> np.ndarray:
    """Bring rank 0's copy of `arr` up to date (inside resident()); returns `arr`."""
    if _front is not None:
        where = _front.buffer_of(arr)
        if where is not None:
            lo, hi = _byte_bounds(arr)
            bid, off = where
            _front.engine.host_read(bid, off, off + (hi - lo))
    return arr
