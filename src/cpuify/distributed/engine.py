"""The distributed engine: one CUDA program's launches spread over MPI ranks.

Rank 0 runs the host program (a Python script, or a whole program's `main`); the other
ranks serve: they hold an instance of every device buffer and run the part of each launch's
grid they are given (docs/distributed.md).  Rank 0 plans every step and tells the servers
what to do with one broadcast per step; data moves point to point, each rank sending what
it holds and receiving what it lacks, all transfers of a step posted at once.

Per launch (the multi-device partitioning paper, sections 5 and 8, over ranks):
  1. the kernel's access maps (analysis/access_maps.py) give each rank's read, write and
     atomic byte sets for a candidate partition of the grid (partition.py picks it);
  2. each rank fetches the parts of its read set it does not hold (tracker.py knows who
     holds the newest copy of every byte; copies that were only read stay valid, so data
     read by several ranks is sent once to each and never again while unchanged);
  3. every rank runs its box of blocks (blockIdx absolute, gridDim the whole grid);
  4. the tracker records each rank as the holder of what it wrote.
A launch whose writes cannot be split (the kernel is not distributable, or two partitions
may write the same bytes) runs whole on rank 0, after rank 0 has gathered what it reads.
Commutative atomics whose targets several partitions update (a histogram) run distributed
with per-rank partials: the servers start from the operation's identity and rank 0 folds
their partials into its copy afterwards.

Nothing here assumes memory or files shared between ranks: kernels reach servers by
message (a KernelRef's key and, for Python modules, the PTX), data by MPI."""

from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol, Sequence

import numpy as np

#: environment variables of the MPI launchers that give (size, rank): MPICH's hydra, Open MPI,
#: PMIx-based launchers, Slurm's srun
_WORLD_ENV = (("PMI_SIZE", "PMI_RANK"), ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
              ("PMIX_SIZE", "PMIX_RANK"), ("SLURM_NTASKS", "SLURM_PROCID"))

#: the largest message sent at once (MPI counts are C ints)
_CHUNK = 1 << 30


def mpi_world() -> tuple[int, int] | None:
    """(rank, size) when this process is one rank of an MPI launch that distributed
    execution should use, else None.  Cheap: reads the environment only (mpi4py is not
    imported).  CPUIFY_DISTRIBUTED=0 turns distribution off; CPUIFY_DISTRIBUTED=1 turns
    it on even for one rank (the engine with a single rank: measures its overhead)."""
    switch = os.environ.get("CPUIFY_DISTRIBUTED", "")
    if switch == "0":
        return None
    for size_var, rank_var in _WORLD_ENV:
        size, rank = os.environ.get(size_var), os.environ.get(rank_var)
        if size and rank and size.isdigit() and rank.isdigit():
            if int(size) > 1 or switch == "1":
                return int(rank), int(size)
            return None
    return (0, 1) if switch == "1" else None


def mpiexec_path() -> str | None:
    """The mpiexec to start ranks with: the one installed beside this Python (the mpich
    wheel's, in a virtual environment that is not activated), else the PATH's."""
    import shutil
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.access(here, os.X_OK) else shutil.which("mpiexec")


class KernelRef(Protocol):
    """A kernel as the engine sees it (the Python API's and the whole programs' fronts
    each make their own)."""
    key: Any                                    # picklable: servers resolve it
    name: str
    access: Any                                 # analysis.access_maps.KernelAccess | None
    param_layout: Sequence[tuple[str, str, int, int]]   # (name, PTX type, offset, size)

    def run_box(self, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
                params: bytes, box: tuple[tuple[int, int], ...]) -> int: ...


Interval = tuple[int, int]


@dataclass
class _Buffer:
    id: int
    nbytes: int
    address: int                    # this rank's instance
    keep: Any = None                # what keeps the instance alive (servers' arrays)
    tracker: Any = None             # rank 0: the segment tracker


@dataclass(slots=True)
class _Move:
    """One transfer: bytes [lo, hi) of buffer `buf` from rank `src` to rank `dst`."""
    buf: int
    lo: int
    hi: int
    src: int
    dst: int


def _moves_to_array(moves: list[_Move]) -> np.ndarray:
    return np.array([(m.buf, m.lo, m.hi, m.src, m.dst) for m in moves], np.int64).reshape(-1, 5)


def _moves_from_array(a: np.ndarray) -> list[_Move]:
    return [_Move(*row) for row in a.tolist()]


@dataclass
class _Launch:
    """What rank 0 broadcasts for one launch (its moves travel as one integer array)."""
    key: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    params: bytes
    slots: list[tuple[int, int, int]]             # (offset in params, buffer id, offset)
    boxes: list[tuple[tuple[int, int], ...] | None]   # per rank; None: idle
    moves: list[_Move]                            # before the launch
    fills: list[tuple[int, int, int, bytes]] = field(default_factory=list)  # servers: identity
    partials: list[_Move] = field(default_factory=list)   # after: servers' partials to rank 0
    globals_: list[tuple[Any, bytes]] = field(default_factory=list)  # module variables to set
    folds: dict[int, str] = field(default_factory=dict)   # buffer -> atomic op of its partials
    #: per rank, (boxes that run while the transfers are in flight, boxes that run after),
    #: or None: the rank's box runs after its transfers
    stages: list[tuple[list[Any], list[Any]] | None] = field(default_factory=list)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["moves"] = _moves_to_array(self.moves)
        state["partials"] = _moves_to_array(self.partials)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["moves"] = _moves_from_array(state["moves"])
        state["partials"] = _moves_from_array(state["partials"])
        self.__dict__.update(state)


@dataclass
class LaunchStats:
    """What the engine did for launches so far (rank 0): for the figures and the tests."""
    launches: int = 0
    distributed: int = 0            # launches split over more than one rank
    whole_on_rank0: int = 0         # launches run whole on rank 0
    bytes_moved: int = 0            # before launches (fetches) and after (partials)
    bytes_minimum: int = 0          # the exact minimum for the same partitions (exact_stats)
    bytes_gathered: int = 0         # device -> host
    messages: int = 0
    overlapped: int = 0             # launches where some rank computed during its transfers
    reasons: dict[str, int] = field(default_factory=dict)


def _one_at_a_time(method: Callable[..., Any]) -> Callable[..., Any]:
    """Rank 0's steps are broadcast in one order: host threads take turns."""
    import functools

    @functools.wraps(method)
    def wrapper(self: "Engine", *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)
    return wrapper


class Engine:
    """One per process (get())."""

    def __init__(self, comm: Any, partition_planner: Callable[..., Any] | None = None) -> None:
        from mpi4py import MPI
        self._MPI = MPI
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.buffers: dict[int, _Buffer] = {}
        self._next_id = 1
        self._by_start: list[tuple[int, int]] = []      # rank 0: sorted (address, id)
        self._kernels: dict[Any, KernelRef] = {}        # servers: resolved kernels
        self._sent_keys: set[Any] = set()               # rank 0: kernels servers know
        self._payloads: dict[Any, Any] = {}             # rank 0: what servers resolve keys from
        self.plan_cache: dict[Any, Any] = {}            # rank 0: plan.py's layouts of launches
        #: rank 0 counts the exact minimum of bytes each launch must move (stats.bytes_minimum:
        #: the stale parts of the exact read sets; costs planning time): CPUIFY_DISTRIBUTED_STATS=1
        #: (or a whole program's CPUIFY_DIST_VERBOSE=1, which prints the counts at the end)
        self.exact_stats = "1" in (os.environ.get("CPUIFY_DISTRIBUTED_STATS"),
                                   os.environ.get("CPUIFY_DIST_VERBOSE"))
        self._resolve: Callable[[Any, Any], KernelRef] | None = None
        self.stats = LaunchStats()
        self._stopped = False
        self._lock = threading.RLock()
        #: when a list, rank 0 appends every launch (what the scaling model replays):
        #: (ref, grid, block, params, slots, buffer sizes, seconds rank 0's part ran)
        self.journal: list[tuple[Any, ...]] | None = None

    # ------------------------------------------------------------------ rank 0: memory
    @_one_at_a_time
    def alloc(self, address: int, nbytes: int, kind: str = "device") -> int:
        """A device allocation of rank 0 (the host's) at `address`: servers make an
        instance; rank 0 holds all of it."""
        from cpuify.distributed.tracker import BufferTracker
        bid = self._next_id
        self._next_id += 1
        buf = _Buffer(bid, nbytes, address, tracker=BufferTracker(nbytes, self.size))
        self.buffers[bid] = buf
        import bisect
        bisect.insort(self._by_start, (address, bid))
        self._command(("alloc", bid, nbytes))
        return bid

    @_one_at_a_time
    def free(self, bid: int) -> None:
        buf = self.buffers.pop(bid, None)
        if buf is None:
            return
        self._by_start.remove((buf.address, bid))
        if not self._stopped:
            self._command(("free", bid))

    def find(self, address: int) -> tuple[int, int] | None:
        """(buffer id, offset) of the buffer `address` falls in, or None."""
        import bisect
        i = bisect.bisect_right(self._by_start, (address, 1 << 62)) - 1
        if i >= 0:
            start, bid = self._by_start[i]
            buf = self.buffers[bid]
            if start <= address < start + max(buf.nbytes, 1):
                return bid, address - start
        return None

    @_one_at_a_time
    def host_wrote(self, bid: int, lo: int, hi: int) -> None:
        """The host wrote [lo, hi) of rank 0's instance: rank 0 alone holds it now."""
        buf = self.buffers[bid]
        lo, hi = max(lo, 0), min(hi, buf.nbytes)
        if lo < hi:
            buf.tracker.wrote(0, [(lo, hi)])

    @_one_at_a_time
    def host_read(self, bid: int, lo: int, hi: int) -> None:
        """Make rank 0's instance of [lo, hi) current (before the host reads it)."""
        buf = self.buffers[bid]
        lo, hi = max(lo, 0), min(hi, buf.nbytes)
        if lo >= hi or self.size == 1:
            return
        moves = [_Move(bid, a, b, src, 0) for a, b, src in buf.tracker.stale(0, [(lo, hi)])]
        if moves:
            for m in moves:
                buf.tracker.received(0, m.lo, m.hi)
            n = sum(m.hi - m.lo for m in moves)
            self.stats.bytes_gathered += n
            self._command(("move", _moves_to_array(moves)))
            self._exchange(moves)

    @_one_at_a_time
    def gather_all(self) -> None:
        """Rank 0 holds the newest copy of every buffer afterwards."""
        for bid, buf in list(self.buffers.items()):
            self.host_read(bid, 0, buf.nbytes)

    # ------------------------------------------------------------------ rank 0: launches
    def register_kernel(self, ref: KernelRef, payload: Any = None) -> None:
        """What servers need to resolve `ref.key` (sent with the first launch)."""
        self._payloads[ref.key] = payload

    @_one_at_a_time
    def launch(self, ref: KernelRef, grid: tuple[int, int, int], block: tuple[int, int, int],
               shared_mem: int, params: bytes, slots: Sequence[tuple[int, int, int]],
               *, unknown_pointers: bool = False, single_reason: str | None = None,
               globals_: Sequence[tuple[Any, bytes]] = ()) -> int:
        """Run one launch over the ranks; returns rank 0's rc or the first server's.
        `slots`: (offset in params, buffer id, offset in the buffer) of every pointer
        parameter into a known buffer; `unknown_pointers`: a pointer parameter points
        elsewhere (the launch then runs whole on rank 0)."""
        from cpuify.distributed import plan as planning
        self.stats.launches += 1
        if ref.key not in self._sent_keys and self.size > 1:
            self._command(("kernel", ref.key, self._payloads.get(ref.key)))
            self._sent_keys.add(ref.key)
        step = planning.plan_launch(self, ref, grid, block, shared_mem, params, list(slots),
                                    unknown_pointers=unknown_pointers,
                                    single_reason=single_reason)
        step.launch.globals_ = list(globals_)
        if step.reason:
            self.stats.whole_on_rank0 += 1
            self.stats.reasons[step.reason] = self.stats.reasons.get(step.reason, 0) + 1
        elif sum(b is not None for b in step.launch.boxes) > 1:
            self.stats.distributed += 1
        self.stats.bytes_moved += sum(m.hi - m.lo for m in step.launch.moves) + \
            sum(m.hi - m.lo for m in step.launch.partials)
        self.stats.bytes_minimum += step.minimum
        self.stats.messages += len({(m.src, m.dst) for m in step.launch.moves}) + len(step.launch.partials)
        self.stats.overlapped += any(st is not None for st in step.launch.stages)
        t0 = time.perf_counter()
        if self.size > 1 and (any(b is not None for b in step.launch.boxes[1:])
                              or step.launch.moves or step.launch.globals_):
            self._command(("launch", step.launch))
            rc = self._run_launch(step.launch, ref)
        else:
            rc = self._run_local(step.launch, ref)
        step.commit()
        if self.journal is not None:
            sizes = {bid: self.buffers[bid].nbytes for _, bid, _ in slots}
            self.journal.append((ref, grid, block, params, list(slots), sizes,
                                 time.perf_counter() - t0))
        return rc

    # ------------------------------------------------------------------ all ranks
    def _command(self, cmd: tuple[Any, ...]) -> None:
        if self.size > 1:
            self.comm.bcast(cmd, root=0)

    def _view(self, bid: int, lo: int, hi: int) -> Any:
        buf = self.buffers[bid]
        return (ctypes.c_char * (hi - lo)).from_address(buf.address + lo)

    def _exchange(self, moves: Iterable[_Move], scratch: dict[int, np.ndarray] | None = None) -> None:
        """Every transfer of a step, done when this returns (see _post_exchange)."""
        self._finish_exchange(self._post_exchange(moves, scratch))

    def _post_exchange(self, moves: Iterable[_Move],
                       scratch: dict[int, np.ndarray] | None = None) -> tuple[Any, Any]:
        """Post every transfer of a step at once, then wait: each rank sends what it holds
        and receives what it lacks.  The pieces one rank sends another travel as one
        message (packed, then unpacked into place), so a halo of many short rows costs one
        latency.  Moves into `scratch` (partials) land in rank 0's scratch arrays, keyed by
        the move's index."""
        MPI = self._MPI
        me = self.rank
        pairs: dict[tuple[int, int], list[tuple[int, _Move]]] = {}
        for i, m in enumerate(moves):
            if me in (m.src, m.dst) and m.src != m.dst:
                pairs.setdefault((m.src, m.dst), []).append((i, m))
        reqs = []
        unpack: list[tuple[np.ndarray, list[_Move]]] = []
        for (src, dst), items in sorted(pairs.items()):
            tag0 = 0       # (both sides post in one order: MPI matches them in that order)
            if scratch is not None or len(items) == 1:
                for i, m in items:
                    target = scratch[i] if scratch is not None and me == dst else None
                    self._post(reqs, m, target, tag0 + 1 + i % 8191)
                continue
            total = sum(m.hi - m.lo for _, m in items)
            packed = np.empty(total, np.uint8)
            if me == src:
                self._copy_pieces([m for _, m in items], packed, pack=True)
            else:
                unpack.append((packed, [m for _, m in items]))
            for part, a in enumerate(range(0, total, _CHUNK)):
                chunk = packed[a:a + _CHUNK]
                if me == src:
                    reqs.append(self.comm.Isend([chunk, MPI.BYTE], dest=dst, tag=tag0 + part % 64))
                else:
                    reqs.append(self.comm.Irecv([chunk, MPI.BYTE], source=src, tag=tag0 + part % 64))
        return reqs, unpack

    def _finish_exchange(self, posted: tuple[Any, Any]) -> None:
        """Waits for the transfers _post_exchange started, then unpacks what came packed."""
        reqs, unpack = posted
        if reqs:
            self._MPI.Request.Waitall(reqs)
        for packed, ms in unpack:
            self._copy_pieces(ms, packed, pack=False)

    def _copy_pieces(self, ms: list[_Move], packed: np.ndarray, pack: bool) -> None:
        """Copies the pieces `ms` into `packed` one after another (pack) or back out of it.
        Many short pieces of one buffer (a 3D grid's boundary columns) go in one NumPy
        gather/scatter, the others one memmove each."""
        at = 0
        i = 0
        while i < len(ms):
            j = i
            while j < len(ms) and ms[j].buf == ms[i].buf:
                j += 1
            group = ms[i:j]
            lens = np.fromiter((m.hi - m.lo for m in group), np.int64, len(group))
            total = int(lens.sum())
            if len(group) > 32 and total < 256 * len(group):
                los = np.fromiter((m.lo for m in group), np.int64, len(group))
                idx = np.repeat(los - (np.cumsum(lens) - lens), lens) + np.arange(total)
                view = self._array(group[0].buf)
                if pack:
                    packed[at:at + total] = view[idx]
                else:
                    view[idx] = packed[at:at + total]
            else:
                base = self.buffers[group[0].buf].address
                where = packed.ctypes.data + at
                for m in group:
                    n = m.hi - m.lo
                    if pack:
                        ctypes.memmove(where, base + m.lo, n)
                    else:
                        ctypes.memmove(base + m.lo, where, n)
                    where += n
            at += total
            i = j

    def _array(self, bid: int) -> np.ndarray:
        """This rank's instance of a buffer as a NumPy byte array."""
        buf = self.buffers[bid]
        if not isinstance(buf.keep, np.ndarray):
            raw = (ctypes.c_uint8 * max(buf.nbytes, 1)).from_address(buf.address)
            buf.keep = np.ctypeslib.as_array(raw)
        return buf.keep  # type: ignore[no-any-return]

    def _post(self, reqs: list[Any], m: _Move, target: np.ndarray | None, tag: int) -> None:
        """The sends or receives of one move (chunked under MPI's count limit)."""
        MPI = self._MPI
        for part, a in enumerate(range(m.lo, m.hi, _CHUNK)):
            b = min(a + _CHUNK, m.hi)
            t = (tag + part) % 32000
            if self.rank == m.src:
                reqs.append(self.comm.Isend([self._view(m.buf, a, b), MPI.BYTE], dest=m.dst, tag=t))
            elif target is not None:
                reqs.append(self.comm.Irecv([target[a - m.lo:b - m.lo], MPI.BYTE], source=m.src, tag=t))
            else:
                reqs.append(self.comm.Irecv([self._view(m.buf, a, b), MPI.BYTE], source=m.src, tag=t))

    def _patched(self, launch: _Launch) -> bytes:
        """The parameter bytes with every pointer into a buffer moved to this rank's
        instance."""
        if not launch.slots:
            return launch.params
        p = bytearray(launch.params)
        for off, bid, boff in launch.slots:
            p[off:off + 8] = (self.buffers[bid].address + boff).to_bytes(8, "little")
        return bytes(p)

    def _run_local(self, launch: _Launch, ref: KernelRef) -> int:
        box = launch.boxes[self.rank]
        if box is None:
            return 0
        return int(ref.run_box(launch.grid, launch.block, launch.shared_mem,
                               self._patched(launch), box) or 0)

    def _run_launch(self, launch: _Launch, ref: KernelRef) -> int:
        """Every rank's part of a launch (rank 0 after broadcasting it): the transfers
        start, the blocks that need nothing in flight run meanwhile (the plan's early
        boxes), then the rest."""
        posted = self._post_exchange(launch.moves)
        early: list[Any] = []
        stage = launch.stages[self.rank] if launch.stages else None
        if stage is not None:
            early, rest = stage
        for key, data in launch.globals_:
            self._set_global(ref, key, data)
        for bid, lo, hi, pattern in launch.fills:
            if self.rank != 0:
                n = hi - lo
                reps = -(-n // len(pattern))
                ctypes.memmove(self.buffers[bid].address + lo, (pattern * reps)[:n], n)
        rc, msg = 0, ""
        failure: BaseException | None = None
        params = self._patched(launch)
        waiting = True
        try:
            if stage is None:
                self._finish_exchange(posted)
                waiting = False
                rc = self._run_local(launch, ref)
            else:
                for box in early:
                    rc = rc or int(ref.run_box(launch.grid, launch.block, launch.shared_mem,
                                               params, box) or 0)
                self._finish_exchange(posted)
                waiting = False
                for box in rest:
                    rc = rc or int(ref.run_box(launch.grid, launch.block, launch.shared_mem,
                                               params, box) or 0)
        except Exception as e:         # noqa: BLE001 - reported to rank 0 as the launch's error
            rc, msg, failure = -1, f"{type(e).__name__}: {e}", e
            if waiting:
                self._finish_exchange(posted)
        scratch = None
        if launch.partials:
            scratch = {i: np.empty(m.hi - m.lo, np.uint8) for i, m in enumerate(launch.partials)}
            self._exchange(launch.partials, scratch if self.rank == 0 else None)
        results = self.comm.gather((rc, msg), root=0)
        if self.rank != 0:
            return rc
        if failure is not None:
            raise failure       # (after the servers finished the step: they stay in step)
        if scratch:
            _fold_partials(self, launch, scratch)
        for r, (code, text) in enumerate(results):
            if code and not rc:
                from cpuify.errors import LaunchError
                raise LaunchError(f"kernel '{ref.name}' failed on rank {r} of {self.size}: "
                                  f"{text or f'error code {code}'}")
        return rc

    def _set_global(self, ref: KernelRef, key: Any, data: bytes) -> None:
        setter = getattr(ref, "set_global", None)
        if setter is not None:
            setter(key, data)

    # ------------------------------------------------------------------ servers
    def serve(self, resolve: Callable[[Any, Any], KernelRef]) -> None:
        """Ranks > 0: follow rank 0's commands until it stops."""
        self._resolve = resolve
        while True:
            cmd = self.comm.bcast(None, root=0)
            what = cmd[0]
            if what == "stop":
                return
            try:
                if what == "alloc":
                    _, bid, nbytes = cmd
                    arr = np.zeros(max(nbytes, 1), np.uint8)    # calloc: pages appear when touched
                    self.buffers[bid] = _Buffer(bid, nbytes, arr.ctypes.data, keep=arr)
                elif what == "free":
                    self.buffers.pop(cmd[1], None)
                elif what == "move":
                    self._exchange(_moves_from_array(cmd[1]))
                elif what == "kernel":
                    self._kernels[cmd[1]] = resolve(cmd[1], cmd[2])
                elif what == "launch":
                    launch = cmd[1]
                    self._run_launch(launch, self._kernels[launch.key])
                else:
                    raise RuntimeError(f"unknown command {what!r}")
            except Exception:          # noqa: BLE001 - a server cannot go on: end the job
                sys.stderr.write(f"cpuify: rank {self.rank} failed serving {what!r}:\n")
                traceback.print_exc()
                sys.stderr.flush()
                self.comm.Abort(1)

    @_one_at_a_time
    def shutdown(self) -> None:
        """Rank 0: the servers leave serve() (at exit)."""
        if self.rank == 0 and not self._stopped:
            self._stopped = True
            self._command(("stop",))


def _fold_partials(engine: Engine, launch: _Launch, scratch: dict[int, np.ndarray]) -> None:
    """Rank 0 folds the servers' atomic partials into its instance."""
    from cpuify.distributed.plan import fold
    for i, m in enumerate(launch.partials):
        fold(engine, m, scratch[i], launch.folds[m.buf])


_engine: Engine | None = None


def get() -> Engine | None:
    """The process's engine (None when not running distributed)."""
    return _engine


def start() -> Engine:
    """Create the engine of this process (MPI is initialized here); rank 0 stops the
    servers at exit."""
    global _engine
    if _engine is None:
        from mpi4py import MPI
        _engine = Engine(MPI.COMM_WORLD)
        if _engine.rank == 0:
            atexit.register(_engine.shutdown)
    return _engine
