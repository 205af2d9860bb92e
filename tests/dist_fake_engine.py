"""A stand-in for cpuify.distributed.engine in tests of the whole-program front
(tests/test_distributed_programs.py; selected with CPUIFY_DIST_ENGINE=dist_fake_engine).

It has the engine's API and really runs each launch over the ranks, the simple way: the
grid is cut along x into one box per rank, every server gets whole copies of the buffers
the launch's pointers reach (its instances, at its own addresses: the pointer parameters
are rewritten), runs its box and sends the buffers back; rank 0 keeps the bytes a server
changed.  That is right for kernels whose blocks write disjoint bytes without atomics,
which is what the tests give it.  Every call of the API is logged (CPUIFY_FAKE_ENGINE_LOG)
so that the tests can check what the program's runtime reported."""

from __future__ import annotations

import ctypes
import json
import os
from typing import Any

from mpi4py import MPI

_TAG = 7401
_engine: Engine | None = None


def get() -> Engine | None:
    return _engine


def start() -> Engine:
    global _engine
    if _engine is None:
        _engine = Engine()
    return _engine


class Engine:
    def __init__(self) -> None:
        self.comm = MPI.COMM_WORLD.Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.buffers: dict[int, tuple[int, int, str]] = {}      # id -> (addr, bytes, kind)
        self.next_id = 1
        path = os.environ.get("CPUIFY_FAKE_ENGINE_LOG")
        self.log_file = open(path, "a") if path and self.rank == 0 else None  # noqa: SIM115 - open for the run

    def log(self, *event: Any) -> None:
        if self.log_file is not None:
            self.log_file.write(json.dumps(event) + "\n")
            self.log_file.flush()

    # ---- rank 0 ----
    def alloc(self, addr: int, nbytes: int, kind: str) -> int:
        buf = self.next_id
        self.next_id += 1
        self.buffers[buf] = (addr, nbytes, kind)
        self.log("alloc", buf, nbytes, kind)
        return buf

    def free(self, buf: int) -> None:
        self.buffers.pop(buf)
        self.log("free", buf)

    def find(self, addr: int) -> tuple[int, int] | None:
        for buf, (base, n, _kind) in self.buffers.items():
            if base <= addr < base + max(n, 1):
                return buf, addr - base
        return None

    def host_wrote(self, buf: int, lo: int, hi: int) -> None:
        self.log("host_wrote", buf, lo, hi)

    def host_read(self, buf: int, lo: int, hi: int) -> None:
        self.log("host_read", buf, lo, hi)

    def launch(self, kernel: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
               shared_mem: int, params: bytes, pointer_slots: list[tuple[int, int, int]], *,
               unknown_pointers: bool = False, single_reason: str | None = None,
               globals_: list[tuple[Any, bytes]] = ()) -> int:
        for key, data in globals_:
            self.log("global", key, len(data))
        if single_reason or unknown_pointers or kernel.access is None:
            # whole on rank 0 (which always holds everything here)
            why = single_reason or ("unknown pointers" if unknown_pointers else "no access")
            self.log("launch_rank0", kernel.name, why)
            self.pending_globals = list(getattr(self, "pending_globals", [])) + list(globals_)
            return kernel.run_box(grid, block, shared_mem, params, None)
        globals_ = list(getattr(self, "pending_globals", [])) + list(globals_)
        self.pending_globals = []
        self.log("launch", kernel.name, list(grid), list(block), len(pointer_slots))
        used = sorted({s[1] for s in pointer_slots})
        before = {b: ctypes.string_at(self.buffers[b][0], self.buffers[b][1]) for b in used}
        cuts = [grid[0] * r // self.size for r in range(self.size + 1)]
        boxes = [((cuts[r], cuts[r + 1]), (0, grid[1]), (0, grid[2])) for r in range(self.size)]
        for r in range(1, self.size):
            self.comm.send(("launch", kernel.key, grid, block, shared_mem, params, pointer_slots,
                            boxes[r], before, globals_), dest=r, tag=_TAG)
        rc = kernel.run_box(grid, block, shared_mem, params, boxes[0])
        for r in range(1, self.size):
            their_rc, after = self.comm.recv(source=r, tag=_TAG)
            rc = rc or their_rc
            for b, data in after.items():
                addr = self.buffers[b][0]
                old = before[b]
                mine = bytearray(ctypes.string_at(addr, len(old)))
                for i in range(len(old)):
                    if data[i] != old[i]:
                        mine[i] = data[i]
                ctypes.memmove(addr, bytes(mine), len(mine))
        return rc

    def shutdown(self) -> None:
        self.log("shutdown")
        for r in range(1, self.size):
            self.comm.send(("stop",), dest=r, tag=_TAG)
        self.comm.Free()

    # ---- ranks > 0 ----
    def serve(self, resolve: Any) -> None:
        while True:
            msg = self.comm.recv(source=0, tag=_TAG)
            if msg[0] == "stop":
                self.comm.Free()
                return
            _, key, grid, block, shared_mem, params, slots, box, data, globals_ = msg
            kernel = resolve(key, None)
            for k, value in globals_:
                kernel.set_global(k, value)
            instances = {b: ctypes.create_string_buffer(d, max(len(d), 1)) for b, d in data.items()}
            p = bytearray(params)
            for offset, b, off in slots:
                p[offset:offset + 8] = (ctypes.addressof(instances[b]) + off).to_bytes(8, "little")
            rc = kernel.run_box(grid, block, shared_mem, bytes(p), box)
            self.comm.send((rc, {b: inst.raw[:len(data[b])] for b, inst in instances.items()}),
                           dest=0, tag=_TAG)


class _Pointer:
    def __init__(self, index: int) -> None:
        self.index = index


class _Access:
    """What the front reads of a KernelAccess: every 64-bit parameter taken as a pointer."""

    def __init__(self, params: list[tuple[str, str, int, int]]) -> None:
        self.distributable = True
        self.reason = ""
        self.params = [_Pointer(i) for i, p in enumerate(params) if p[1] in ("u64", "b64", "s64")]


def kernel_access(info: Any) -> _Access | None:
    """Kernels whose names have 'local' in them keep no access (they run on rank 0)."""
    return None if "local" in info.name else _Access(info.params)
