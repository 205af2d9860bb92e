"""Choosing the split of a launch over ranks (cpuify.distributed.partition) with synthetic
footprint functions: the byte counts are worked out by hand."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from cpuify.distributed.partition import choose_partition, slabs, write_conflict
from cpuify.distributed.tracker import BufferTracker


@dataclass
class FP:
    reads: list[tuple[int, int]] = field(default_factory=list)
    writes: list[tuple[int, int]] = field(default_factory=list)
    atomics: list[tuple[int, int]] = field(default_factory=list)


# --- 1-D: blocks of 256 floats, a one-element halo on each side -------------------------

B1 = 256 * 4


def halo_1d(box):  # type: ignore[no-untyped-def]
    (x0, x1), _, _ = box
    return {0: FP(reads=[(x0 * B1 - 4, x1 * B1 + 4)]), 1: FP(writes=[(x0 * B1, x1 * B1)])}


def test_1d_slabs_and_bytes_from_the_host() -> None:
    inp, out = BufferTracker(100 * B1, 4), BufferTracker(100 * B1, 4)
    p = choose_partition((100, 1, 1), 4, halo_1d, {0: (inp, 0), 1: (out, 0)})
    assert p.dim == 0 and p.split and p.ranks_used == 4
    assert p.boxes == tuple(((25 * r, 25 * r + 25), (0, 1), (0, 1)) for r in range(4))
    # rank 0 is the host; the others fetch their slab and halo (rank 3's ends at the buffer)
    assert p.rank_bytes == (0, 25 * B1 + 8, 25 * B1 + 8, 25 * B1 + 4)
    assert p.est_bytes == sum(p.rank_bytes)
    assert p.rank_pieces == (0, 1, 1, 1)
    assert "outermost dimension with at least 4 blocks" in p.reason


def test_1d_second_launch_moves_only_halos() -> None:
    """After a launch that left each rank the sole holder of its slab of `a`, a launch that
    reads `a` with a halo fetches 4 bytes per neighbour."""
    a = BufferTracker(100 * B1, 4)
    for r in range(4):
        a.wrote(r, [(25 * r * B1, 25 * (r + 1) * B1)])
    b = BufferTracker(100 * B1, 4)
    p = choose_partition((100, 1, 1), 4, halo_1d, {0: (a, 0), 1: (b, 0)})
    assert p.rank_bytes == (4, 8, 8, 4) and p.est_bytes == 24
    assert p.rank_pieces == (1, 2, 2, 1)


def test_pointer_offsets_into_a_buffer_shift_and_clamp() -> None:
    """A parameter pointing 1024 bytes into its buffer: its intervals move by 1024, and what
    lies outside the buffer (an over-approximation) is clamped away."""
    buf = BufferTracker(10 * B1 + B1, 2)
    p = choose_partition((10, 1, 1), 2, halo_1d, {0: (buf, B1), 1: (BufferTracker(10 * B1, 2), 0)})
    # rank 1: blocks 5..9 read [5*B1-4, 10*B1+4) + B1, clamped to the buffer's end
    assert p.rank_bytes == (0, 5 * B1 + 4)


def test_balanced_slabs() -> None:
    assert slabs(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert slabs(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    with pytest.raises(ValueError):
        slabs(3, 4)
    p = choose_partition((10, 1, 1), 4, halo_1d)
    assert [b[0] for b in p.boxes if b] == [(0, 3), (3, 6), (6, 8), (8, 10)]


# --- 2-D 5-point stencil on a row-major W x H image of floats, 16 x 16 blocks ---------

T = 16


def stencil_2d(gx: int, gy: int):  # type: ignore[no-untyped-def]
    w, h = gx * T, gy * T

    def fp(box):  # type: ignore[no-untyped-def]
        (x0, x1), (y0, y1), _ = box
        c0, c1 = max(x0 * T - 1, 0), min(x1 * T + 1, w)
        reads = [(4 * (y * w + c0), 4 * (y * w + c1))
                 for y in range(max(y0 * T - 1, 0), min(y1 * T + 1, h))]
        writes = [(4 * (y * w + x0 * T), 4 * (y * w + x1 * T)) for y in range(y0 * T, y1 * T)]
        return {0: FP(reads=reads), 1: FP(writes=writes)}
    return fp, w, h


def rows_written_by_slab(t: BufferTracker, w: int, h: int, nranks: int) -> None:
    for r, (y0, y1) in enumerate(slabs(h, nranks)):
        t.wrote(r, [(4 * y0 * w, 4 * y1 * w)])


def cols_written_by_slab(t: BufferTracker, w: int, h: int, nranks: int) -> None:
    for r, (x0, x1) in enumerate(slabs(w, nranks)):
        t.wrote(r, [(4 * (y * w + x0), 4 * (y * w + x1)) for y in range(h)])


def test_2d_row_major_from_the_host_prefers_y() -> None:
    """Every byte on the host: y and x slabs fetch the same bytes, y in one piece per rank
    (whole rows), x in a piece per row."""
    fp, w, h = stencil_2d(8, 8)
    p = choose_partition((8, 8, 1), 4, fp, {0: (BufferTracker(4 * w * h, 4), 0),
                                             1: (BufferTracker(4 * w * h, 4), 0)})
    assert p.dim == 1
    assert p.boxes[1] == ((0, 8), (2, 4), (0, 1))
    assert p.rank_bytes[1] == 4 * w * (2 * T + 2)
    assert p.rank_pieces[1] == 1


def test_2d_row_major_after_a_y_split_moves_halo_rows() -> None:
    fp, w, h = stencil_2d(8, 8)
    a = BufferTracker(4 * w * h, 4)
    rows_written_by_slab(a, w, h, 4)
    p = choose_partition((8, 8, 1), 4, fp, {0: (a, 0), 1: (BufferTracker(4 * w * h, 4), 0)})
    assert p.dim == 1
    assert p.rank_bytes == (4 * w, 8 * w, 8 * w, 4 * w)      # one halo row per neighbour
    # along x each rank would fetch its columns (and halo columns) of the rows of the 3
    # other ranks: 33, 34, 34, 33 columns of 96 rows
    assert p.costs[0] == 4 * 96 * (33 + 34 + 34 + 33) and p.costs[1] == 24 * w
    assert "no split fetches fewer bytes" in p.reason


def test_2d_after_an_x_split_the_cost_beats_the_heuristic() -> None:
    """Data left in column slabs: splitting along x again moves only halo columns, though
    the paper's heuristic would split along y."""
    fp, w, h = stencil_2d(8, 8)
    a = BufferTracker(4 * w * h, 4)
    cols_written_by_slab(a, w, h, 4)
    p = choose_partition((8, 8, 1), 4, fp, {0: (a, 0), 1: (BufferTracker(4 * w * h, 4), 0)})
    assert p.dim == 0
    assert p.rank_bytes == (4 * h, 8 * h, 8 * h, 4 * h)      # one halo column per neighbour
    assert p.costs[1] > p.costs[0]
    assert "fewer bytes to fetch" in p.reason


def test_ties_go_to_the_paper() -> None:
    """Every rank holds every byte: all splits fetch nothing; the outermost dimension with
    enough blocks wins."""
    fp, w, h = stencil_2d(8, 8)
    everywhere = BufferTracker(4 * w * h, 4, holders=range(4))
    p = choose_partition((8, 8, 1), 4, fp, {0: (everywhere, 0), 1: (BufferTracker(4 * w * h, 4), 0)})
    assert p.dim == 1 and p.costs == {0: 0, 1: 0} and p.est_bytes == 0
    q = choose_partition((4, 6, 5), 3, lambda box: {}, {})
    assert q.dim == 2 and q.boxes[0] == ((0, 4), (0, 6), (0, 2))


def test_conflicting_z_slabs_fall_back_to_the_cheapest_other_split() -> None:
    """A kernel whose footprint ignores blockIdx.z: z slabs would all write the same tiles.
    Of x (4 blocks: slabs of 2, 1, 1) and y (slabs of 2 rows of blocks), x fetches less:
    the host's rank 0 takes the largest slab."""
    fp, w, h = stencil_2d(4, 6)
    t = BufferTracker(4 * w * h, 3)
    p = choose_partition((4, 6, 5), 3, lambda box: fp((box[0], box[1], (0, 1))),
                         {0: (t, 0), 1: (BufferTracker(4 * w * h, 3), 0)})
    assert p.dim == 0 and "along z partitions would write the same bytes" in p.reason
    # x: ranks 1 and 2 fetch 16 + 2 halo columns of 96 rows; y: 2 rows of blocks + halos
    assert p.costs == {0: 2 * 4 * 96 * 18 - 4 * 96, 1: 4 * 64 * (33 + 34)}
    assert "along z: rank 1 writes byte 0 of" not in p.reason      # buffers have no names
    assert "along z: rank 1 writes byte 0, which rank 0 writes" in p.reason


# --- tiny grids -----------------------------------------------------------------------

def test_fewer_blocks_than_ranks_leaves_ranks_idle() -> None:
    p = choose_partition((3, 1, 1), 8, halo_1d)
    assert p.dim == 0 and p.ranks_used == 3
    assert p.boxes[:3] == (((0, 1), (0, 1), (0, 1)), ((1, 2), (0, 1), (0, 1)),
                           ((2, 3), (0, 1), (0, 1)))
    assert p.boxes[3:] == (None,) * 5 and p.rank_bytes[3:] == (0,) * 5


def test_no_dimension_has_enough_blocks_takes_the_largest() -> None:
    p = choose_partition((2, 3, 1), 4, lambda box: {})
    assert p.dim == 1 and p.ranks_used == 3 and "most blocks (3)" in p.reason


def test_one_block_or_one_rank_is_not_split() -> None:
    for grid, n in [((1, 1, 1), 4), ((50, 2, 1), 1)]:
        p = choose_partition(grid, n, halo_1d if grid[1] == 1 else lambda box: {})
        assert not p.split and p.ranks_used == 1 and p.boxes[0] == ((0, grid[0]), (0, grid[1]), (0, 1))


# --- write conflicts ----------------------------------------------------------------------

def test_every_block_writes_one_word_is_not_distributed() -> None:
    """A result written (not atomically) by every block: no split can run."""
    def fp(box):  # type: ignore[no-untyped-def]
        return {0: FP(writes=[(0, 4)])}
    p = choose_partition((16, 4, 1), 4, fp)
    assert not p.split and p.boxes[0] == ((0, 16), (0, 4), (0, 1)) and p.boxes[1:] == (None,) * 3
    assert "would write the same bytes" in p.reason and "parameter 0" in p.reason


def test_atomics_on_one_word_are_distributed_with_partials() -> None:
    def fp(box):  # type: ignore[no-untyped-def]
        (x0, x1), _, _ = box
        return {0: FP(reads=[(x0 * 64, x1 * 64)]), 1: FP(atomics=[(0, 8)])}
    p = choose_partition((16, 1, 1), 4, fp, {0: (BufferTracker(16 * 64, 4), 0),
                                              1: (BufferTracker(8, 4), 0)})
    assert p.split and p.ranks_used == 4
    # 3 of the 4 ranks send their 8-byte partial (rank 0 keeps its own)
    assert p.rank_bytes == (0, 4 * 64 + 8, 4 * 64 + 8, 4 * 64 + 8)
    q = choose_partition((16, 1, 1), 4, fp, uncombinable_atomics={1})
    assert not q.split


def test_row_sums_conflict_along_x_only() -> None:
    """Block (bx, by) writes out[by]: x slabs write the same words, y slabs do not (even
    though x is the only dimension with 4 blocks)."""
    def fp(box):  # type: ignore[no-untyped-def]
        _, (y0, y1), _ = box
        return {0: FP(writes=[(4 * y0, 4 * y1)])}
    p = choose_partition((8, 3, 1), 4, fp)
    assert p.dim == 1 and p.ranks_used == 3
    assert "along x: rank 1 writes byte 0 of parameter 0, which rank 0 writes" in p.reason


def test_aliased_parameters_conflict_in_the_buffer() -> None:
    """Two parameters into one buffer, 400 bytes apart: a write through one and a write
    through the other hit the same bytes from different ranks."""
    t = BufferTracker(1000, 2)

    def fp(box):  # type: ignore[no-untyped-def]
        (x0, x1), _, _ = box
        return {0: FP(writes=[(x0 * 100, x1 * 100)]), 1: FP(writes=[(x0 * 100, x1 * 100)])}
    p = choose_partition((4, 1, 1), 2, fp, {0: (t, 0), 1: (t, 200)})
    assert not p.split
    ok = choose_partition((4, 1, 1), 2, fp, {0: (t, 0), 1: (t, 400)})
    assert ok.split


def test_write_conflict_sweep() -> None:
    assert write_conflict([{"b": [(0, 10)]}, {"b": [(10, 20)]}]) is None
    assert write_conflict([{"b": [(0, 11)]}, {"b": [(10, 20)]}]) is not None
    assert write_conflict([{"b": [(0, 11)]}, {"c": [(10, 20)]}]) is None
    assert write_conflict([None, None], [{"b": [(0, 8)]}, {"b": [(0, 8)]}]) is None
    assert write_conflict([{"b": [(0, 100)]}, None], [None, {"b": [(50, 51)]}]) is not None
    assert write_conflict([None, {"b": [(50, 51)]}], [{"b": [(0, 100)]}, None]) is not None
    # a long interval of rank 0, then rank 0 again, then rank 1 inside the first
    assert write_conflict([{"b": [(0, 100), (101, 102)]}, {"b": [(102, 103), (60, 70)]}]) is not None
    assert write_conflict([{"b": [(0, 10), (20, 30)]}, {"b": [(10, 20), (30, 40)]}]) is None


def test_inexact_writes_count_as_reads() -> None:
    """A may-write set: a rank must hold the bytes first (it might not overwrite them)."""
    def fp(box):  # type: ignore[no-untyped-def]
        (x0, x1), _, _ = box
        return {0: FP(writes=[(x0 * 100, x1 * 100)])}
    t = BufferTracker(400, 2)
    assert choose_partition((4, 1, 1), 2, fp, {0: (t, 0)}).est_bytes == 0
    assert choose_partition((4, 1, 1), 2, fp, {0: (t, 0)}, inexact_writes={0}).rank_bytes == (0, 200)


def test_time_model_can_keep_a_launch_on_one_rank() -> None:
    slow_network = lambda blocks, nbytes, pieces: max(b * 1e-6 + n * 1e-3 for b, n in zip(blocks, nbytes))
    fast_network = lambda blocks, nbytes, pieces: max(b * 1e-3 + n * 1e-9 for b, n in zip(blocks, nbytes))
    t = BufferTracker(100 * B1, 4)
    p = choose_partition((100, 1, 1), 4, halo_1d, {0: (t, 0)}, time_model=slow_network)
    assert not p.split and "one rank is predicted faster" in p.reason
    q = choose_partition((100, 1, 1), 4, halo_1d, {0: (t, 0)}, time_model=fast_network)
    assert q.split and q.ranks_used == 4 and "least predicted time" in q.reason


def test_describe_names_each_rank() -> None:
    text = choose_partition((10, 1, 1), 3, halo_1d).describe()
    assert "rank 2: blocks x 7..9, y 0..0, z 0..0" in text


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="3 positive block counts"):
        choose_partition((4, 0, 1), 2, halo_1d)
    with pytest.raises(ValueError, match="at least one"):
        choose_partition((4, 1, 1), 0, halo_1d)
