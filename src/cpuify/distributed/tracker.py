"""Which rank holds the newest copy of each byte of a virtual buffer.

A virtual buffer (the multi-device partitioning paper, section 8.1) has one instance per
rank; its tracker is a sorted list of non-overlapping segments that cover the buffer, each
with the set of ranks whose instance holds the newest data of that segment.  Unlike the
paper's tracker (one owner per segment), several ranks may hold the same newest data: a
rank that fetched a segment keeps a read-only copy until someone writes it, so data that
every partition reads (a matrix operand, a stencil's coefficients) moves once, not once per
launch.  Rank 0 is the host: its instance is the memory the host program sees.

Operations are in byte offsets from the start of the buffer, half-open [lo, hi):

    t = BufferTracker(nbytes=4096, nranks=4)     # rank 0 (the host) holds everything
    t.stale(2, [(0, 1024)])       -> [(0, 1024, 0)]   # rank 2 must fetch these from rank 0
    t.received(2, 0, 1024)        # ... and now holds a copy
    t.wrote(3, [(512, 600)])      # rank 3 wrote: it alone holds [512, 600)
    t.holders(0, 1024)            -> [(0, 512, {0, 2}), (512, 600, {3}), (600, 1024, {0, 2})]

Segments are kept merged (neighbours never have the same holders) and found by bisection,
so each operation costs O(log n) plus the segments it touches."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence

from cpuify.analysis.access_maps import merge_intervals

__all__ = ["BufferTracker", "normalize_intervals", "place"]

Interval = tuple[int, int]


def place(intervals: Iterable[Sequence[int]], offset: int, nbytes: int) -> list[Interval]:
    """Intervals relative to a pointer moved to the buffer it points into (`offset` bytes
    in) and clipped to the buffer's `nbytes`; empty ones dropped."""
    out: list[Interval] = []
    for lo, hi in intervals:
        a, b = max(lo + offset, 0), min(hi + offset, nbytes)
        if a < b:
            out.append((a, b))
    return out


def normalize_intervals(intervals: Iterable[Sequence[int]]) -> list[Interval]:
    """Sorted, disjoint, non-empty [lo, hi) intervals covering what `intervals` cover
    (touching intervals merged)."""
    return merge_intervals([(int(lo), int(hi)) for lo, hi in intervals if hi > lo])


def _lowest(mask: int) -> int:
    return (mask & -mask).bit_length() - 1


def _ranks(mask: int) -> frozenset[int]:
    out = []
    while mask:
        r = _lowest(mask)
        out.append(r)
        mask &= mask - 1
    return frozenset(out)


class BufferTracker:
    """The segment map of one virtual buffer of `nbytes` bytes over `nranks` ranks.

    `source` is how `stale` picks the rank to fetch from when several hold the newest copy:
    "spread" (default) takes the first holder after the fetching rank in cyclic rank order,
    so that ranks fetching the same shared data draw on different holders; "lowest" takes
    the lowest-numbered holder.  Both are deterministic: every rank computing a plan from the
    same tracker state gets the same plan."""

    __slots__ = ("_masks", "_starts", "nbytes", "nranks", "source")

    def __init__(self, nbytes: int, nranks: int, holders: Iterable[int] = (0,),
                 source: str = "spread") -> None:
        if nbytes < 0:
            raise ValueError(f"a buffer of {nbytes} bytes")
        if nranks < 1:
            raise ValueError(f"{nranks} ranks: there must be at least one")
        if source not in ("spread", "lowest"):
            raise ValueError(f"source must be 'spread' or 'lowest', not {source!r}")
        self.nbytes = int(nbytes)
        self.nranks = int(nranks)
        self.source = source
        mask = self._mask_of(holders)
        # segment i is [_starts[i], _starts[i + 1]) (the last one ends at nbytes), held by
        # the ranks whose bits are set in _masks[i]; an empty buffer has no segments
        self._starts: list[int] = [0] if nbytes else []
        self._masks: list[int] = [mask] if nbytes else []

    # ---------------------------------------------------------------------------------
    # queries

    def __len__(self) -> int:
        """The number of segments."""
        return len(self._starts)

    def segments(self) -> list[tuple[int, int, frozenset[int]]]:
        """Every segment: (lo, hi, ranks holding its newest copy), in order."""
        return self.holders(0, self.nbytes)

    def holders(self, lo: int, hi: int) -> list[tuple[int, int, frozenset[int]]]:
        """The segments overlapping [lo, hi), clipped to it: (lo, hi, holder ranks)."""
        lo, hi = self._check(lo, hi)
        return [(a, b, _ranks(m)) for a, b, m in self._walk(lo, hi)]

    def owned_by(self, rank: int) -> list[Interval]:
        """The byte ranges whose newest copy `rank` holds (alone or shared), merged."""
        bit = 1 << self._check_rank(rank)
        out: list[Interval] = []
        for a, b, m in self._walk(0, self.nbytes):
            if m & bit:
                if out and out[-1][1] == a:
                    out[-1] = (out[-1][0], b)
                else:
                    out.append((a, b))
        return out

    def stale(self, rank: int, intervals: Iterable[Sequence[int]]) -> list[tuple[int, int, int]]:
        """What `rank` must fetch to hold the newest copy of every byte of `intervals`:
        (lo, hi, source rank) in order, contiguous pieces from one source merged."""
        bit = 1 << self._check_rank(rank)
        if self._all_held(bit):
            return []
        out: list[tuple[int, int, int]] = []
        for a, b, m in self._walk_many(intervals):
            if m & bit:
                continue
            src = self._pick(m, rank)
            if out and out[-1][1] == a and out[-1][2] == src:
                out[-1] = (out[-1][0], b, src)
            else:
                out.append((a, b, src))
        return out

    def stale_bytes(self, rank: int, intervals: Iterable[Sequence[int]]) -> int:
        """The number of bytes `stale(rank, intervals)` lists."""
        bit = 1 << self._check_rank(rank)
        if self._all_held(bit):
            return 0
        return sum(b - a for a, b, m in self._walk_many(intervals) if not m & bit)

    def gather_plan(self, lo: int, hi: int, to_rank: int) -> list[tuple[int, int, int]]:
        """The copies that bring the newest data of [lo, hi) to `to_rank` (the host, for a
        device-to-host copy): (lo, hi, source rank), in order; nothing `to_rank` holds."""
        return self.stale(to_rank, [(lo, hi)])

    # ---------------------------------------------------------------------------------
    # updates

    def received(self, rank: int, lo: int, hi: int) -> None:
        """`rank` now holds a copy of the newest data of [lo, hi) (it fetched it)."""
        bit = 1 << self._check_rank(rank)
        lo, hi = self._check(lo, hi)
        self._update(lo, hi, lambda m: m | bit)

    def received_many(self, rank: int, intervals: Iterable[Sequence[int]]) -> None:
        """`received` for each of `intervals` (one pass over the segments)."""
        bit = 1 << self._check_rank(rank)
        if self._all_held(bit):
            return
        self._update_many(normalize_intervals(intervals), lambda m: m | bit)

    def wrote(self, rank: int, intervals: Iterable[Sequence[int]]) -> None:
        """`rank` wrote `intervals`: its copy is the only newest one there."""
        bit = 1 << self._check_rank(rank)
        if self._masks == [bit]:
            return          # (rank alone holds the whole buffer already: one rank, say)
        self._update_many(normalize_intervals(intervals), lambda m: bit)

    def copy(self) -> BufferTracker:
        """An independent tracker in the same state (to try a plan without committing it)."""
        t = BufferTracker.__new__(BufferTracker)
        t.nbytes, t.nranks, t.source = self.nbytes, self.nranks, self.source
        t._starts, t._masks = list(self._starts), list(self._masks)
        return t

    # ---------------------------------------------------------------------------------
    # internals

    def _all_held(self, bit: int) -> bool:
        """Whether the rank of `bit` holds the newest copy of the whole buffer (one
        segment: the common case of one rank, and of data nobody else wrote)."""
        return len(self._masks) == 1 and bool(self._masks[0] & bit)

    def _mask_of(self, ranks: Iterable[int]) -> int:
        mask = 0
        for r in ranks:
            mask |= 1 << self._check_rank(r)
        if not mask:
            raise ValueError("a buffer's newest copy must be held by at least one rank")
        return mask

    def _check_rank(self, rank: int) -> int:
        if not 0 <= rank < self.nranks:
            raise ValueError(f"rank {rank} is not one of the {self.nranks} ranks")
        return int(rank)

    def _check(self, lo: int, hi: int) -> Interval:
        if not 0 <= lo <= hi <= self.nbytes:
            raise ValueError(f"byte range [{lo}, {hi}) is not within the buffer's "
                             f"{self.nbytes} bytes")
        return int(lo), int(hi)

    def _pick(self, mask: int, rank: int) -> int:
        if self.source == "spread":
            later = mask >> (rank + 1)
            if later:
                return rank + 1 + _lowest(later)
        return _lowest(mask)

    def _walk(self, lo: int, hi: int) -> Iterator[tuple[int, int, int]]:
        """(a, b, mask) of the segments overlapping [lo, hi), clipped."""
        return self._walk_many([(lo, hi)])

    def _walk_many(self, intervals: Iterable[Sequence[int]]) -> Iterator[tuple[int, int, int]]:
        """(a, b, mask) of the segments overlapping each of `intervals` (normalized first),
        clipped, in order: one pass, each interval's first segment found by bisection from
        where the previous one ended."""
        starts, masks, nbytes = self._starts, self._masks, self.nbytes
        n = len(starts)
        i = 0
        for lo, hi in normalize_intervals(intervals):
            self._check(lo, hi)
            i = bisect_right(starts, lo, i) - 1
            while i < n and starts[i] < hi:
                end = starts[i + 1] if i + 1 < n else nbytes
                yield max(starts[i], lo), min(end, hi), masks[i]
                i += 1
            i = max(i - 1, 0)       # the last segment may go on into the next interval

    def _split(self, pos: int) -> int:
        """Makes `pos` (0 <= pos < nbytes) a segment start; returns that segment's index."""
        i = bisect_right(self._starts, pos) - 1
        if self._starts[i] == pos:
            return i
        self._starts.insert(i + 1, pos)
        self._masks.insert(i + 1, self._masks[i])
        return i + 1

    def _update(self, lo: int, hi: int, change) -> None:  # type: ignore[no-untyped-def]
        """Applies `change` (mask -> mask) to the holders of [lo, hi), then merges."""
        if lo >= hi:
            return
        i = self._split(lo)
        j = self._split(hi) if hi < self.nbytes else len(self._starts)
        masks = self._masks
        for k in range(i, j):
            masks[k] = change(masks[k])
        # merge equal neighbours from the segment before lo to the one at hi
        a, b = max(i - 1, 0), min(j, len(self._starts) - 1)
        keep_s, keep_m = [self._starts[a]], [masks[a]]
        for k in range(a + 1, b + 1):
            if masks[k] != keep_m[-1]:
                keep_s.append(self._starts[k])
                keep_m.append(masks[k])
        self._starts[a:b + 1] = keep_s
        self._masks[a:b + 1] = keep_m

    def _update_many(self, ivs: list[Interval], change) -> None:  # type: ignore[no-untyped-def]
        """`_update` of each of `ivs` (sorted, disjoint): a few one at a time, many in one
        merge of the segment starts with the intervals' ends."""
        for lo, hi in ivs:
            self._check(lo, hi)
        if len(ivs) <= 8:
            for lo, hi in ivs:
                self._update(lo, hi, change)
            return
        starts, masks, nbytes = self._starts, self._masks, self.nbytes
        points = sorted(set(starts).union(*((lo, hi) for lo, hi in ivs)) - {nbytes})
        new_s: list[int] = []
        new_m: list[int] = []
        seg = 0                 # the segment holding the current point
        iv = 0                  # the first interval not ending at or before it
        nseg, niv = len(starts), len(ivs)
        for p in points:
            while seg + 1 < nseg and starts[seg + 1] <= p:
                seg += 1
            while iv < niv and ivs[iv][1] <= p:
                iv += 1
            m = masks[seg]
            if iv < niv and ivs[iv][0] <= p:
                m = change(m)
            if not new_m or new_m[-1] != m:
                new_s.append(p)
                new_m.append(m)
        self._starts, self._masks = new_s, new_m

    def check_invariants(self) -> None:
        """Raises AssertionError unless the segments cover the buffer in order, each held
        by at least one rank, with no two neighbours held alike (for tests)."""
        s, m = self._starts, self._masks
        assert len(s) == len(m)
        if not self.nbytes:
            assert not s
            return
        assert s[0] == 0
        for k in range(len(s)):
            assert 0 < m[k] < (1 << self.nranks), (k, m[k])
            if k:
                assert s[k - 1] < s[k] < self.nbytes, (k, s[k - 1], s[k])
                assert m[k - 1] != m[k], ("unmerged", k)

    def __repr__(self) -> str:
        segs = ", ".join(f"[{a}, {b}): {sorted(r)}" for a, b, r in self.segments()[:8])
        more = f", ... ({len(self)} segments)" if len(self) > 8 else ""
        return f"<BufferTracker {self.nbytes} bytes, {self.nranks} ranks: {segs}{more}>"
