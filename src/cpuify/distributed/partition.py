"""The split of one launch's grid over ranks: one box of blocks per rank.

A split cuts one grid dimension into contiguous slabs of blocks, one per rank, balanced
(block counts differ by at most one); a dimension with fewer blocks than ranks leaves the
last ranks idle.  The multi-device partitioning paper splits the outermost (slowest-varying)
dimension that has enough blocks: with row-major data that gives each partition contiguous
rows.  Here every dimension with two or more blocks is a candidate, and what decides is the
bytes each split makes the ranks fetch before the launch, from the kernel's footprints
(`footprint(box) -> {param: Footprint}`, byte intervals relative to each pointer parameter)
and the trackers of the buffers the parameters point into.  Ties go to the paper's choice.

A split whose partitions write the same bytes (other than by combinable atomics) cannot run
distributed: the candidate is dropped, and when every one is, the launch runs whole on rank
0 (`Partition.split` is False, `reason` says why)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cpuify.distributed.tracker import BufferTracker, normalize_intervals, place

__all__ = ["Box", "Footprint", "FootprintFn", "Partition", "TimeModel", "choose_partition",
           "slabs", "write_conflict"]

#: ((x0, x1), (y0, y1), (z0, z1)): half-open ranges of blockIdx
Box = tuple[tuple[int, int], tuple[int, int], tuple[int, int]]
Interval = tuple[int, int]

_DIM_NAMES = "xyz"


class Footprint(Protocol):
    """What a box of blocks touches through one pointer parameter: sorted disjoint byte
    intervals [lo, hi) relative to the pointer (analysis.access_maps.Footprint)."""
    reads: Sequence[Interval]
    writes: Sequence[Interval]
    atomics: Sequence[Interval]


FootprintFn = Callable[[Box], Mapping[int, Footprint]]
#: (blocks per rank, bytes each rank fetches, pieces they come in) -> predicted seconds
TimeModel = Callable[[Sequence[int], Sequence[int], Sequence[int]], float]


@dataclass(frozen=True)
class Partition:
    """The boxes of a launch per rank.

    dim: the grid dimension split (0 x, 1 y, 2 z), None when one rank runs the grid.
    boxes: per rank its box, None for an idle rank.
    est_bytes: bytes the ranks fetch before the launch (stale parts of their read sets),
    plus the atomic partials they send to rank 0 to be combined; rank_bytes: the same per
    rank;
    rank_pieces: the contiguous pieces those bytes come in.
    costs: est_bytes of each candidate dimension that was valid (for `explain`).
    reason: why this split, in words."""
    dim: int | None
    boxes: tuple[Box | None, ...]
    est_bytes: int
    rank_bytes: tuple[int, ...]
    reason: str
    costs: dict[int, int] = field(default_factory=dict)
    rank_pieces: tuple[int, ...] = ()

    @property
    def split(self) -> bool:
        return self.dim is not None

    @property
    def ranks_used(self) -> int:
        return sum(b is not None for b in self.boxes)

    def describe(self) -> str:
        """A few lines for `cpuify explain --partition`."""
        lines = [self.reason]
        if self.costs:
            lines.append("bytes to fetch per split: " + ", ".join(
                f"{_DIM_NAMES[d]}: {c}" for d, c in sorted(self.costs.items())))
        for r, b in enumerate(self.boxes):
            if b is not None:
                lines.append(f"  rank {r}: blocks x {b[0][0]}..{b[0][1] - 1}, "
                             f"y {b[1][0]}..{b[1][1] - 1}, z {b[2][0]}..{b[2][1] - 1}, "
                             f"{self.rank_bytes[r]} bytes to fetch")
        return "\n".join(lines)


def slabs(extent: int, parts: int) -> list[tuple[int, int]]:
    """`extent` blocks cut into `parts` contiguous ranges whose sizes differ by at most one
    (the larger ones first)."""
    if parts < 1 or extent < parts:
        raise ValueError(f"cannot cut {extent} blocks into {parts} non-empty slabs")
    q, r = divmod(extent, parts)
    out, lo = [], 0
    for i in range(parts):
        hi = lo + q + (i < r)
        out.append((lo, hi))
        lo = hi
    return out


def _boxes_along(grid: tuple[int, int, int], dim: int, nranks: int) -> list[Box | None]:
    parts = min(nranks, grid[dim])
    out: list[Box | None] = []
    for lo, hi in slabs(grid[dim], parts):
        ranges = [(0, grid[0]), (0, grid[1]), (0, grid[2])]
        ranges[dim] = (lo, hi)
        out.append((ranges[0], ranges[1], ranges[2]))
    return out + [None] * (nranks - parts)


def _heuristic_order(grid: tuple[int, int, int], nranks: int) -> list[int]:
    """Candidate dimensions (two or more blocks), the paper's choice first: the outermost
    with at least `nranks` blocks, then the others with that many (outermost first), then
    those with fewer, the most blocks first."""
    cands = [d for d in (2, 1, 0) if grid[d] >= 2]
    enough = [d for d in cands if grid[d] >= nranks]
    fewer = sorted((d for d in cands if grid[d] < nranks), key=lambda d: -grid[d])
    return enough + fewer


class _Buffers:
    """Footprints in the coordinates of the buffers the parameters point into: a key per
    buffer (a tracker, or a parameter with none), intervals shifted and clamped."""

    def __init__(self, buffers: Mapping[int, tuple[BufferTracker, int]]) -> None:
        self.buffers = buffers

    def key_and_shift(self, param: int) -> tuple[object, BufferTracker | None, int]:
        ref = self.buffers.get(param)
        if ref is None:
            return ("param", param), None, 0
        tracker, offset = ref
        return id(tracker), tracker, offset

    @staticmethod
    def place(intervals: Sequence[Interval], tracker: BufferTracker | None,
              offset: int) -> list[Interval]:
        if tracker is None:
            return list(intervals)
        return place(intervals, offset, tracker.nbytes)


@dataclass
class _RankSets:
    """One rank's footprint per buffer: what it reads (and must hold first), writes, and
    updates atomically (combinable, or not)."""
    reads: dict[object, list[Interval]] = field(default_factory=dict)
    writes: dict[object, list[Interval]] = field(default_factory=dict)
    atomics: dict[object, list[Interval]] = field(default_factory=dict)
    trackers: dict[object, BufferTracker] = field(default_factory=dict)


def _rank_sets(fps: Mapping[int, Footprint], where: _Buffers, inexact_writes: Collection[int],
               uncombinable_atomics: Collection[int]) -> _RankSets:
    sets = _RankSets()
    for param, fp in fps.items():
        key, tracker, offset = where.key_and_shift(param)
        if tracker is not None:
            sets.trackers[key] = tracker
        reads = where.place(fp.reads, tracker, offset)
        writes = where.place(fp.writes, tracker, offset)
        atomics = where.place(fp.atomics, tracker, offset)
        if param in inexact_writes:      # bytes it may not write must be current already
            reads = reads + writes
        if param in uncombinable_atomics:
            writes = writes + atomics
            reads = reads + atomics
            atomics = []
        for table, ivs in ((sets.reads, reads), (sets.writes, writes), (sets.atomics, atomics)):
            if ivs:
                table.setdefault(key, []).extend(ivs)
    for table in (sets.reads, sets.writes, sets.atomics):
        for key in table:
            table[key] = normalize_intervals(table[key])
    return sets


class _FurthestEnds:
    """Of the intervals seen so far (in order of their starts): the furthest end and its
    rank, and the furthest end of any other rank: enough to say how far the intervals of
    ranks other than a given one reach."""
    __slots__ = ("end", "end2", "rank", "rank2")

    def __init__(self) -> None:
        self.end, self.rank, self.end2, self.rank2 = -1, -1, -1, -1

    def add(self, hi: int, rank: int) -> None:
        if rank == self.rank:
            self.end = max(self.end, hi)
        elif hi > self.end:
            self.end2, self.rank2 = self.end, self.rank
            self.end, self.rank = hi, rank
        elif hi > self.end2:
            self.end2, self.rank2 = hi, rank

    def other_than(self, rank: int) -> tuple[int, int]:
        """(furthest end, its rank) among the intervals of ranks other than `rank`."""
        return (self.end, self.rank) if self.rank != rank else (self.end2, self.rank2)


def write_conflict(per_rank: Sequence[Mapping[object, Sequence[Interval]] | None],
                   atomics: Sequence[Mapping[object, Sequence[Interval]] | None] = ()) -> str | None:
    """Whether partitions write the same bytes: `per_rank[r]` maps a buffer key to the
    intervals rank r writes, `atomics[r]` to those it updates atomically.  Overlapping
    atomics of different ranks are fine (their partials combine); any other overlap between
    ranks is a conflict: returns a description of the first one found, or None."""
    by_key: dict[object, list[tuple[int, int, int, bool]]] = {}
    for atomic, table in ((False, per_rank), (True, atomics)):
        for rank, sets in enumerate(table):
            for key, ivs in (sets or {}).items():
                by_key.setdefault(key, []).extend((lo, hi, rank, atomic) for lo, hi in ivs
                                                  if hi > lo)
    for key, items in by_key.items():
        items.sort()
        seen = {False: _FurthestEnds(), True: _FurthestEnds()}
        for lo, hi, rank, atomic in items:
            # a write conflicts with other ranks' writes and atomics, an atomic with writes
            for kind in ((False,) if atomic else (False, True)):
                end, other = seen[kind].other_than(rank)
                if end > lo:
                    where = f" of parameter {key[1]}" if isinstance(key, tuple) else ""
                    return (f"rank {rank} {'updates' if atomic else 'writes'} byte {lo}{where}, "
                            f"which rank {other} {'updates atomically' if kind else 'writes'}")
            seen[atomic].add(hi, rank)
    return None


@dataclass
class _Candidate:
    """One way to run the launch: the boxes per rank and what each rank must fetch."""
    dim: int | None
    boxes: list[Box | None]
    fetch: list[int]          # bytes per rank
    pieces: list[int]         # contiguous pieces those bytes come in, per rank
    conflict: str | None

    @property
    def used(self) -> int:
        return sum(b is not None for b in self.boxes)

    def blocks(self) -> list[int]:
        return [0 if b is None else (b[0][1] - b[0][0]) * (b[1][1] - b[1][0]) * (b[2][1] - b[2][0])
                for b in self.boxes]


def choose_partition(grid: Sequence[int], nranks: int, footprint: FootprintFn,
                     buffers: Mapping[int, tuple[BufferTracker, int]] | None = None, *,
                     inexact_writes: Collection[int] = (),
                     uncombinable_atomics: Collection[int] = (),
                     time_model: TimeModel | None = None) -> Partition:
    """The boxes of a launch of `grid` (x, y, z blocks) over `nranks` ranks.

    footprint(box): per pointer parameter index, what the blocks of `box` read, write and
    update atomically (byte intervals relative to the pointer).
    buffers: per parameter, (tracker of the buffer it points into, byte offset of the
    pointer in it); parameters absent cost nothing to fetch (conflicts are still checked,
    per parameter).
    inexact_writes: parameters whose write sets are may-writes: a rank must hold their
    current bytes before it runs (they count as reads).
    uncombinable_atomics: parameters whose atomics cannot run as per-rank partials (the
    result is used, exch/cas...): they count as writes and reads.
    time_model(blocks per rank, bytes per rank, pieces per rank) -> seconds: when given,
    the split (or none: rank 0 runs the grid) with the least predicted time wins; else the
    split that uses the most ranks, then the fewest bytes to fetch, then the fewest pieces,
    then the paper's choice."""
    g = tuple(int(v) for v in grid)
    if len(g) != 3 or min(g) < 1:
        raise ValueError(f"a grid is 3 positive block counts, got {tuple(grid)}")
    if nranks < 1:
        raise ValueError(f"{nranks} ranks: there must be at least one")
    grid3 = (g[0], g[1], g[2])
    where = _Buffers(buffers or {})
    whole: Box = ((0, g[0]), (0, g[1]), (0, g[2]))

    def evaluate(dim: int | None, boxes: list[Box | None]) -> _Candidate:
        sets = [None if b is None else
                _rank_sets(footprint(b), where, inexact_writes, uncombinable_atomics)
                for b in boxes]
        conflict = write_conflict([s.writes if s else None for s in sets],
                                  [s.atomics if s else None for s in sets])
        fetch, pieces = [0] * len(boxes), [0] * len(boxes)
        for rank, s in enumerate(sets):
            for key, ivs in (s.reads.items() if s else ()):
                t = s.trackers.get(key)     # type: ignore[union-attr]
                if t is not None:
                    stale = t.stale(rank, ivs)
                    fetch[rank] += sum(hi - lo for lo, hi, _ in stale)
                    pieces[rank] += len(stale)
        # atomic partials: the ranks other than rank 0 (which every split uses) send theirs
        # to rank 0 to be combined
        partials = [sum(hi - lo for ivs in s.atomics.values() for lo, hi in ivs) if s else 0
                    for s in sets]
        if sum(p > 0 for p in partials) > 1:
            for r, p in enumerate(partials):
                if r and p:
                    fetch[r] += p
                    pieces[r] += sum(len(ivs) for ivs in sets[r].atomics.values())  # type: ignore[union-attr]
        return _Candidate(dim, boxes, fetch, pieces, conflict)

    def result(c: _Candidate, reason: str, costs: dict[int, int]) -> Partition:
        return Partition(c.dim, tuple(c.boxes), sum(c.fetch), tuple(c.fetch), reason, costs,
                         tuple(c.pieces))

    def alone() -> _Candidate:
        return evaluate(None, [whole] + [None] * (nranks - 1))

    if nranks == 1:
        return result(alone(), "one rank: the grid runs whole", {})
    order = _heuristic_order(grid3, nranks)
    if not order:
        return result(alone(), "a grid of one block: nothing to split", {})
    candidates = [evaluate(d, _boxes_along(grid3, d, nranks)) for d in order]
    conflicts = [f"along {_DIM_NAMES[c.dim]}: {c.conflict}" for c in candidates  # type: ignore[index]
                 if c.conflict]
    valid = [c for c in candidates if not c.conflict]
    costs = {c.dim: sum(c.fetch) for c in valid if c.dim is not None}
    if not valid:
        return result(alone(), "not split: partitions would write the same bytes ("
                      + "; ".join(conflicts) + ")", costs)

    paper = order[0]
    if time_model is not None:
        def predicted(c: _Candidate) -> float:
            return time_model(c.blocks(), c.fetch, c.pieces)
        best = min(valid, key=lambda c: (predicted(c), order.index(c.dim)))  # type: ignore[arg-type]
        one = alone()
        if predicted(one) <= predicted(best):
            return result(one, f"not split: one rank is predicted faster ({predicted(one):.3g} s) "
                               f"than a split along {_DIM_NAMES[best.dim]} "  # type: ignore[index]
                               f"({predicted(best):.3g} s)", costs)
        how = f"the least predicted time ({predicted(best):.3g} s)"
    else:
        best = min(valid, key=lambda c: (-c.used, sum(c.fetch), sum(c.pieces),
                                         order.index(c.dim)))  # type: ignore[arg-type]
        d = best.dim
        assert d is not None
        # (the paper's dimension uses the most ranks any split can: only bytes or
        # conflicting writes can beat it)
        if d == paper:
            how = (f"the outermost dimension with at least {nranks} blocks"
                   if grid3[d] >= nranks else f"the dimension with the most blocks ({grid3[d]})")
            if len(costs) > 1:
                how += ", and no split fetches fewer bytes"
        elif paper not in costs:
            how = f"along {_DIM_NAMES[paper]} partitions would write the same bytes"
        elif costs[d] < costs[paper]:
            how = (f"fewer bytes to fetch ({costs[d]}) than along {_DIM_NAMES[paper]} "
                   f"({costs[paper]})")
        else:
            how = (f"as many bytes to fetch as along {_DIM_NAMES[paper]} ({costs[d]}), in fewer "
                   f"pieces ({sum(best.pieces)})")
    reason = f"split along {_DIM_NAMES[best.dim]} into {best.used} slabs: {how}"  # type: ignore[index]
    if conflicts:
        reason += " (" + "; ".join(conflicts) + ")"
    return result(best, reason, costs)
