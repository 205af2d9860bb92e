"""The launcher's side of fuse-block-runs (transforms/block_runs.py): which run of blocks a
launch asks the specialized code to run as one block, and the grid of runs it launches.

The run is chosen from the launch's grid: in x, rows of at least RUN_ROW_THREADS threads
(the whole grid row when it has no more blocks than that: laplace3d's 200 columns are 7
blocks of 32, one run of 224 threads; a longer grid row in runs that waste the fewest
threads), then in y as many block rows as keep the fused block within RUN_MAX_THREADS
threads (its per-thread slots stay in L2).  CPUIFY_BLOCK_RUNS=0 turns it off (as
`--disable-pass=fuse-block-runs` does)."""

from __future__ import annotations

import os

#: a fused row spans at least this many threads when the grid row is long enough
RUN_ROW_THREADS = 256
#: the most threads of a fused block
RUN_MAX_THREADS = 8192
#: fused variants compiled per block shape (each grid shape may want another run)
MAX_RUN_VARIANTS = 4


def enabled() -> bool:
    return os.environ.get("CPUIFY_BLOCK_RUNS", "1") not in ("0", "")


def _run_length(blocks: int, most: int) -> int:
    """How many of a grid dimension's `blocks` one run takes, at most `most`: all of them
    when they fit, else the longest run from most/2 to most whose last run wastes at most
    an eighth of the blocks (else the one that wastes fewest)."""
    if most <= 1 or blocks <= 1:
        return 1
    if blocks <= most:
        return blocks
    options = range(max(1, most // 2), most + 1)
    waste = {r: -(-blocks // r) * r - blocks for r in options}
    good = [r for r in options if waste[r] <= max(1, blocks // 8)]
    return max(good) if good else min(options, key=lambda r: (waste[r], -r))


def choose_block_run(block: tuple[int, int, int], grid: tuple[int, int, int]) -> tuple[int, int]:
    """The run (x, y) of blocks a launch of `grid` blocks of `block` threads asks to fuse."""
    bx, by, bz = block
    rx = _run_length(grid[0], -(-RUN_ROW_THREADS // bx))
    ry = _run_length(grid[1], RUN_MAX_THREADS // (rx * bx * by * bz))
    return rx, ry


def run_grid(grid: tuple[int, int, int], run: tuple[int, int]) -> tuple[int, int, int]:
    """The grid of runs: what the block function fused for `run` is called for."""
    return (-(-grid[0] // run[0]), -(-grid[1] // run[1]), grid[2])
