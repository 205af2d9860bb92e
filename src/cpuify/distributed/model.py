"""How long a launch takes on N ranks: an alpha-beta model of communication plus measured
compute.

    link = measure_link()                       # under mpiexec: ping-pong of ranks 0 and 1
    model = LaunchModel(seconds_per_block=2e-5, link=link)
    model.predict(blocks_per_rank=[25, 25, 25, 25], bytes_per_rank=[0, 4, 8, 4])

A launch on N ranks costs: rank 0 broadcasts it (a tree: alpha per level), every rank
fetches the stale parts of its read set (alpha per message plus bytes over the bandwidth)
and runs its blocks, and rank 0 learns that all are done (another tree).  The slowest rank
sets the time:

    T(N) = overhead + 2 alpha ceil(log2 N) + max_r (alpha m_r + b_r / beta + blocks_r t_block)

with m_r messages and b_r bytes for rank r (from `choose_partition`: its rank_pieces, an
upper bound of the messages when pieces from one source are batched, and rank_bytes).
`LaunchModel` is a `TimeModel` for choose_partition (it may keep a small launch on one rank),
and `predict_scaling` runs a sequence of launches on simulated trackers to predict the time
of a steady-state iteration on 1, 2, 4, ... ranks.

`python -m cpuify.distributed.model` under `mpiexec -n 2` prints the measured link."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cpuify.distributed.partition import FootprintFn, Partition, choose_partition
from cpuify.distributed.tracker import BufferTracker, place

__all__ = ["Launch", "LaunchModel", "LinkModel", "ScalingPoint", "fit_alpha_beta",
           "measure_link", "predict_scaling", "seconds_per_block", "simulate_launch"]


@dataclass(frozen=True)
class LinkModel:
    """Point-to-point messages between two ranks: `latency_s` (alpha) per message and
    `bandwidth` (beta) bytes per second."""
    latency_s: float
    bandwidth: float

    def __post_init__(self) -> None:
        if self.latency_s < 0 or not self.bandwidth > 0:
            raise ValueError(f"a link needs latency >= 0 and bandwidth > 0, got "
                             f"{self.latency_s} s and {self.bandwidth} B/s")

    def transfer_s(self, nbytes: int, messages: int = 1) -> float:
        """Seconds to move `nbytes` in `messages` messages (one after another)."""
        return messages * self.latency_s + nbytes / self.bandwidth

    def __str__(self) -> str:
        return f"latency {self.latency_s * 1e6:.2f} us, bandwidth {self.bandwidth / 1e9:.3f} GB/s"


def fit_alpha_beta(sizes: Sequence[int], seconds: Sequence[float]) -> LinkModel:
    """The LinkModel that fits one-way times `seconds` of messages of `sizes` bytes best
    (least squares of t = alpha + n / beta; alpha kept >= 0)."""
    if len(sizes) != len(seconds) or len(set(sizes)) < 2:
        raise ValueError("fitting a link needs times for at least two message sizes")
    smallest = min(sizes)
    if smallest == 0:
        # the latency is what an empty message costs; the bandwidth fits the rest (a free
        # intercept would be set by the large messages' noise, often below zero)
        alpha = max(seconds[list(sizes).index(0)], 0.0)
        xs = [x for x in sizes if x]
        ys = [y - alpha for x, y in zip(sizes, seconds) if x]
        slope = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
        if not slope > 0:
            raise ValueError("message times do not grow with their size: no bandwidth to fit")
        return LinkModel(alpha, 1.0 / slope)
    n = len(sizes)
    mx, my = sum(sizes) / n, sum(seconds) / n
    sxx = sum((x - mx) ** 2 for x in sizes)
    sxy = sum((x - mx) * (y - my) for x, y in zip(sizes, seconds))
    slope = sxy / sxx
    alpha = my - slope * mx
    if alpha < 0:               # through the origin instead
        alpha = 0.0
        slope = sum(x * y for x, y in zip(sizes, seconds)) / sum(x * x for x in sizes)
    if not slope > 0:
        raise ValueError("message times do not grow with their size: no bandwidth to fit")
    return LinkModel(alpha, 1.0 / slope)


@dataclass(frozen=True)
class LaunchModel:
    """Predicted seconds of a launch over ranks (see the module's docstring).

    seconds_per_block: compute time of one block on one rank (all its workers busy: the
    time of a launch of many blocks over their number); overhead_s: the fixed cost of a
    launch on rank 0 (partition, packing)."""
    seconds_per_block: float
    link: LinkModel
    overhead_s: float = 0.0

    def predict(self, blocks_per_rank: Sequence[int], bytes_per_rank: Sequence[int],
                messages_per_rank: Sequence[int] | None = None) -> float:
        """Seconds of a launch whose rank r runs blocks_per_rank[r] blocks after fetching
        bytes_per_rank[r] bytes in messages_per_rank[r] messages (default: one message per
        rank that fetches anything)."""
        if len(bytes_per_rank) != len(blocks_per_rank):
            raise ValueError("blocks_per_rank and bytes_per_rank must have one entry per rank")
        if messages_per_rank is None:
            messages_per_rank = [1 if b else 0 for b in bytes_per_rank]
        busy = [r for r, (k, b) in enumerate(zip(blocks_per_rank, bytes_per_rank)) if k or b]
        tree = 2 * self.link.latency_s * math.ceil(math.log2(len(busy))) if len(busy) > 1 else 0.0
        slowest = max((self.link.transfer_s(bytes_per_rank[r], messages_per_rank[r])
                       + blocks_per_rank[r] * self.seconds_per_block for r in busy), default=0.0)
        return self.overhead_s + tree + slowest

    def __call__(self, blocks_per_rank: Sequence[int], bytes_per_rank: Sequence[int],
                 pieces_per_rank: Sequence[int]) -> float:
        """The TimeModel of choose_partition: pieces count as messages."""
        return self.predict(blocks_per_rank, bytes_per_rank, pieces_per_rank)


# ---------------------------------------------------------------------------------------
# predicting scaling from footprints


@dataclass(frozen=True)
class Launch:
    """One launch of a program for `predict_scaling`: its grid, its footprint function and
    where its pointer parameters point: param -> (buffer name, byte offset)."""
    grid: tuple[int, int, int]
    footprint: FootprintFn
    params: Mapping[int, tuple[str, int]]
    seconds_per_block: float | None = None      # (else the model's)


@dataclass(frozen=True)
class ScalingPoint:
    """`predict_scaling`'s result for one rank count: seconds and bytes moved per pass over
    the launches (after the warm-up passes), and each launch's partition in that pass."""
    nranks: int
    seconds: float
    bytes_moved: int
    partitions: tuple[Partition, ...] = field(repr=False)


def simulate_launch(partition: Partition, footprint: FootprintFn,
                    buffers: Mapping[int, tuple[BufferTracker, int]]) -> None:
    """Updates the trackers as a launch run by `partition` does: each rank fetched the
    stale parts of what it reads, then became the sole holder of what it wrote; atomic
    targets of one rank are that rank's, those of several ranks end up combined on rank 0
    (as choose_partition counts them)."""
    footprints = [None if box is None else footprint(box) for box in partition.boxes]
    for rank, fps in enumerate(footprints):
        for param, fp in (fps or {}).items():
            ref = buffers.get(param)
            if ref is not None:
                t, off = ref
                for lo, hi, _ in t.stale(rank, place(fp.reads, off, t.nbytes)):
                    t.received(rank, lo, hi)
    updaters = {r for r, fps in enumerate(footprints) for param, fp in (fps or {}).items()
                if fp.atomics and param in buffers}
    for rank, fps in enumerate(footprints):
        for param, fp in (fps or {}).items():
            ref = buffers.get(param)
            if ref is not None:
                t, off = ref
                t.wrote(rank, place(fp.writes, off, t.nbytes))
                t.wrote(rank if len(updaters) == 1 else 0, place(fp.atomics, off, t.nbytes))


def predict_scaling(launches: Sequence[Launch], buffer_sizes: Mapping[str, int],
                    model: LaunchModel, rank_counts: Sequence[int] = (1, 2, 4, 8),
                    warmup: int = 1, choose_with_model: bool = False) -> list[ScalingPoint]:
    """Predicted seconds of one pass over `launches` (an iteration of a program) on each
    rank count: the buffers start on the host (rank 0), `warmup` passes bring them to a
    steady state, the next pass is measured.  With `choose_with_model` the partitions are
    chosen by predicted time (a launch may stay on one rank), else by bytes."""
    points = []
    for n in rank_counts:
        trackers = {name: BufferTracker(size, n) for name, size in buffer_sizes.items()}
        total, moved, parts = 0.0, 0, []
        for rep in range(warmup + 1):
            for launch in launches:
                buffers = {p: (trackers[name], off) for p, (name, off) in launch.params.items()}
                m = model if launch.seconds_per_block is None else LaunchModel(
                    launch.seconds_per_block, model.link, model.overhead_s)
                part = choose_partition(launch.grid, n, launch.footprint, buffers,
                                        time_model=m if choose_with_model else None)
                if rep == warmup:
                    blocks = [0 if b is None else _blocks(b) for b in part.boxes]
                    total += m.predict(blocks, part.rank_bytes, part.rank_pieces)
                    moved += part.est_bytes
                    parts.append(part)
                simulate_launch(part, launch.footprint, buffers)
        points.append(ScalingPoint(n, total, moved, tuple(parts)))
    return points


def _blocks(box: tuple[tuple[int, int], tuple[int, int], tuple[int, int]]) -> int:
    return (box[0][1] - box[0][0]) * (box[1][1] - box[1][0]) * (box[2][1] - box[2][0])


# ---------------------------------------------------------------------------------------
# measuring


def seconds_per_block(run: Callable[[], object], nblocks: int, repeats: int = 3) -> float:
    """Compute seconds per block of a launch: the fastest of `repeats` calls of `run` (one
    launch of `nblocks` blocks, synchronous) over the block count."""
    if nblocks < 1 or repeats < 1:
        raise ValueError("nblocks and repeats must be positive")
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best / nblocks


def measure_link(comm: object = None, sizes: Sequence[int] = (0, 1 << 10, 1 << 14, 1 << 18,
                                                               1 << 22),
                 repeats: int = 20) -> LinkModel:
    """The LinkModel of ranks 0 and 1 of `comm` (default MPI.COMM_WORLD), from ping-pong
    round trips of each size (the fastest of `repeats`, halved: a round trip is only ever
    made slower by the machine's other work, and the median of a busy machine's rounds
    could make an empty message slower than a 1 MiB one); every rank of `comm` must call it
    and gets the same result, or the same ValueError where the times fit no link.  Needs
    mpi4py and at least two ranks."""
    try:
        from mpi4py import MPI
    except ImportError as e:  # pragma: no cover - mpi4py is in the 'distributed' extra
        raise RuntimeError("measuring the MPI link needs mpi4py: pip install "
                           "'cpuify[distributed]'") from e
    import numpy as np

    world = MPI.COMM_WORLD if comm is None else comm
    rank, size = world.Get_rank(), world.Get_size()      # type: ignore[attr-defined]
    if size < 2:
        raise ValueError("measuring the link needs at least two ranks (run under "
                         "mpiexec -n 2 or more)")
    one_way = []
    buf = np.zeros(max(sizes) if sizes else 0, np.uint8)
    for n in sizes:
        msg = buf[:n]
        times = []
        for i in range(repeats + 2):                     # two rounds to warm up
            world.Barrier()                              # type: ignore[attr-defined]
            t0 = time.perf_counter()
            if rank == 0:
                world.Send(msg, dest=1, tag=n)           # type: ignore[attr-defined]
                world.Recv(msg, source=1, tag=n)         # type: ignore[attr-defined]
            elif rank == 1:
                world.Recv(msg, source=0, tag=n)         # type: ignore[attr-defined]
                world.Send(msg, dest=0, tag=n)           # type: ignore[attr-defined]
            if i >= 2:
                times.append((time.perf_counter() - t0) / 2)
        one_way.append(min(times))
    link: LinkModel | str | None = None
    if rank == 0:
        try:
            link = fit_alpha_beta(list(sizes), one_way)
        except ValueError as e:
            link = str(e)           # raised on every rank below, never left waiting in bcast
    link = world.bcast(link, root=0)                     # type: ignore[attr-defined]
    if isinstance(link, str):
        raise ValueError(f"measuring the MPI link: {link} (one-way times {one_way} s for "
                         f"messages of {list(sizes)} bytes)")
    return link  # type: ignore[return-value]


def _main() -> None:
    from mpi4py import MPI
    link = measure_link()
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(f"MPI link between ranks 0 and 1 of {MPI.COMM_WORLD.Get_size()}: {link}")


if __name__ == "__main__":
    _main()
