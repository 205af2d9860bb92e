"""The virtual-buffer tracker (cpuify.distributed.tracker) against a brute-force model that
keeps the set of holder ranks of every byte."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cpuify.distributed.tracker import BufferTracker, normalize_intervals


class ByteModel:
    """One set of holder ranks per byte."""

    def __init__(self, nbytes: int, nranks: int, source: str) -> None:
        self.h = [frozenset({0}) for _ in range(nbytes)]
        self.nranks, self.source = nranks, source

    def pick(self, holders: frozenset[int], rank: int) -> int:
        if self.source == "spread":     # the first holder after `rank`, cyclically
            return next((rank + k) % self.nranks for k in range(1, self.nranks + 1)
                        if (rank + k) % self.nranks in holders)
        return min(holders)

    def stale(self, rank: int, intervals: list[tuple[int, int]]) -> dict[int, int]:
        out = {}
        for lo, hi in intervals:
            for b in range(lo, hi):
                if rank not in self.h[b]:
                    out[b] = self.pick(self.h[b], rank)
        return out

    def received(self, rank: int, lo: int, hi: int) -> None:
        for b in range(lo, hi):
            self.h[b] = self.h[b] | {rank}

    def wrote(self, rank: int, intervals: list[tuple[int, int]]) -> None:
        for lo, hi in intervals:
            for b in range(lo, hi):
                self.h[b] = frozenset({rank})


def random_intervals(rng: np.random.Generator, nbytes: int) -> list[tuple[int, int]]:
    out = []
    for _ in range(int(rng.integers(0, 4))):
        lo = int(rng.integers(0, nbytes + 1))
        hi = int(rng.integers(lo, min(nbytes, lo + int(rng.integers(0, 40))) + 1))
        out.append((lo, hi))
    return out


def expand(pieces) -> dict[int, int]:  # type: ignore[no-untyped-def]
    out = {}
    for lo, hi, src in pieces:
        for b in range(lo, hi):
            assert b not in out, "a byte listed twice"
            out[b] = src
    return out


@pytest.mark.parametrize("seed,nbytes,nranks,source", [
    (1, 97, 3, "spread"), (2, 64, 4, "lowest"), (3, 200, 5, "spread"), (4, 1, 2, "spread"),
    (5, 33, 1, "lowest"), (6, 150, 8, "spread"),
])
def test_random_operations_agree_with_the_byte_model(seed: int, nbytes: int, nranks: int,
                                                     source: str) -> None:
    rng = np.random.default_rng(seed)
    t = BufferTracker(nbytes, nranks, source=source)
    m = ByteModel(nbytes, nranks, source)
    for _ in range(2000):
        op = int(rng.integers(0, 6))
        rank = int(rng.integers(0, nranks))
        if op == 0:
            ivs = random_intervals(rng, nbytes)
            pieces = t.stale(rank, ivs)
            assert expand(pieces) == m.stale(rank, ivs)
            # in order, merged where contiguous from one source
            for (a0, b0, s0), (a1, b1, s1) in itertools.pairwise(pieces):
                assert b0 <= a1 and (b0 < a1 or s0 != s1)
            assert t.stale_bytes(rank, ivs) == len(m.stale(rank, ivs))
        elif op == 1:
            lo = int(rng.integers(0, nbytes + 1))
            hi = int(rng.integers(lo, nbytes + 1))
            t.received(rank, lo, hi)
            m.received(rank, lo, hi)
        elif op == 2:
            ivs = random_intervals(rng, nbytes)
            t.wrote(rank, ivs)
            m.wrote(rank, ivs)
        elif op == 3:
            lo = int(rng.integers(0, nbytes + 1))
            hi = int(rng.integers(lo, nbytes + 1))
            got = {b: r for a, c, r in t.holders(lo, hi) for b in range(a, c)}
            assert got == {b: m.h[b] for b in range(lo, hi)}
        elif op == 4:
            owned = t.owned_by(rank)
            want = [b for b in range(nbytes) if rank in m.h[b]]
            assert [b for lo, hi in owned for b in range(lo, hi)] == want
            assert all(b0 < a1 for (_, b0), (a1, _) in itertools.pairwise(owned))   # merged
        else:
            lo = int(rng.integers(0, nbytes + 1))
            hi = int(rng.integers(lo, nbytes + 1))
            assert expand(t.gather_plan(lo, hi, rank)) == m.stale(rank, [(lo, hi)])
        t.check_invariants()


def test_stale_sources_from_a_paper_like_sequence() -> None:
    """Host-to-device, a launch whose partitions write slabs, a halo exchange, a gather."""
    t = BufferTracker(1000, 3)
    assert t.stale(1, [(0, 500)]) == [(0, 500, 0)]
    t.received(1, 0, 500)
    t.received(2, 500, 1000)
    t.wrote(0, [(0, 333)])
    t.wrote(1, [(333, 666)])
    t.wrote(2, [(666, 1000)])
    assert [(a, b, sorted(r)) for a, b, r in t.segments()] == \
        [(0, 333, [0]), (333, 666, [1]), (666, 1000, [2])]
    # rank 1's halo: one row on each side
    assert t.stale(1, [(323, 676)]) == [(323, 333, 0), (666, 676, 2)]
    # the host gathers everything it does not hold
    assert t.gather_plan(0, 1000, 0) == [(333, 666, 1), (666, 1000, 2)]
    assert t.owned_by(2) == [(666, 1000)]


def test_shared_copies_spread_the_load() -> None:
    t = BufferTracker(100, 4, holders=(1, 2))
    assert t.stale(0, [(0, 100)]) == [(0, 100, 1)]
    assert t.stale(1, [(0, 100)]) == []
    assert t.stale(2, [(0, 100)]) == []
    assert t.stale(3, [(0, 100)]) == [(0, 100, 1)]      # wraps round to the first holder
    t.received(0, 0, 50)
    assert t.stale(3, [(0, 100)]) == [(0, 50, 0), (50, 100, 1)]
    lowest = BufferTracker(100, 4, holders=(1, 2), source="lowest")
    assert lowest.stale(3, [(0, 100)]) == [(0, 100, 1)]


def test_writes_merge_back_into_one_segment() -> None:
    t = BufferTracker(64, 2)
    for lo in range(0, 64, 4):
        t.wrote(1, [(lo, lo + 2)])
    assert len(t) == 32
    t.wrote(1, [(0, 64)])
    assert len(t) == 1 and t.segments() == [(0, 64, frozenset({1}))]
    t.received(0, 0, 64)
    assert t.segments() == [(0, 64, frozenset({0, 1}))]
    c = t.copy()
    c.wrote(0, [(0, 8)])
    assert t.segments() == [(0, 64, frozenset({0, 1}))] and len(c) == 2


def test_bad_arguments_are_refused() -> None:
    t = BufferTracker(10, 2)
    with pytest.raises(ValueError, match=r"byte range \[5, 11\) is not within the buffer's 10 bytes"):
        t.stale(1, [(5, 11)])
    with pytest.raises(ValueError, match="rank 2 is not one of the 2 ranks"):
        t.wrote(2, [(0, 1)])
    with pytest.raises(ValueError, match="at least one rank"):
        BufferTracker(10, 2, holders=())
    with pytest.raises(ValueError, match="source must be"):
        BufferTracker(10, 2, source="random")
    empty = BufferTracker(0, 2)
    assert empty.segments() == [] and empty.stale(1, [(0, 0)]) == [] and empty.owned_by(0) == []


def test_normalize_intervals() -> None:
    assert normalize_intervals([(5, 7), (0, 2), (2, 3), (6, 9), (4, 4)]) == [(0, 3), (5, 9)]


def test_thousands_of_segments() -> None:
    """A buffer cut into 40000 segments (halo-sized pieces of many writers)."""
    n = 40000
    t = BufferTracker(n * 64, 4)
    for k in range(n // 2):
        t.wrote(1 + k % 3, [(128 * k, 128 * k + 64)])
    assert len(t) == n
    for k in range(0, n // 2 - 1, 7):
        lo = 128 * k
        want = [] if (k % 3) + 1 == 2 else [(lo, lo + 64, 1 + k % 3)]
        if (k + 1) % 3 + 1 != 2:
            want.append((lo + 128, lo + 192, 1 + (k + 1) % 3))
        got = t.stale(2, [(lo, lo + 192)])
        assert [p for p in got if p[0] % 128 == 0] == want, k
        assert t.stale_bytes(2, [(lo, lo + 192)]) == sum(b - a for a, b, _ in got)
        t.received(2, lo, lo + 64)
    t.check_invariants()


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_bulk_updates_agree_with_the_byte_model(seed: int) -> None:
    """wrote / received_many with many intervals (the one-pass merge, > 8 intervals)."""
    rng = np.random.default_rng(seed)
    nbytes, nranks = 300, 4
    t = BufferTracker(nbytes, nranks)
    m = ByteModel(nbytes, nranks, "spread")
    for _ in range(300):
        rank = int(rng.integers(0, nranks))
        ivs = [iv for _ in range(int(rng.integers(9, 30))) for iv in random_intervals(rng, nbytes)]
        if rng.integers(0, 2):
            t.wrote(rank, ivs)
            m.wrote(rank, ivs)
        else:
            t.received_many(rank, ivs)
            for lo, hi in ivs:
                m.received(rank, lo, hi)
        t.check_invariants()
        got = {b: r for a, c, r in t.holders(0, nbytes) for b in range(a, c)}
        assert got == {b: m.h[b] for b in range(nbytes)}
