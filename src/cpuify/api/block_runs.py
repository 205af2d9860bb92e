"""The launcher's side of fuse-block-runs (transforms/block_runs.py): which run of blocks a
launch asks the specialized code to run as one block, and the grid of runs it launches.

The run is chosen from the launch's grid: in x, the whole grid row when the fused block
stays within RUN_MAX_THREADS threads and RUN_MAX_SCRATCH bytes of scratch (its per-thread
slots and local memory stay in L2; laplace3d's 200 columns are 7 blocks of 32: one run of
224 threads; its 400 columns, 13 blocks: 416), else the fewest runs of equal length; then in
y as many block rows as keep within both and, with several worker threads, leave each
RUNS_PER_WORKER runs to share out (laplace3d 200^3: runs of 7 x 4 blocks on one thread,
7 x 2 on two).  Whole rows matter: laplace3d at 400^3 in runs of 7 x 4 blocks (half rows of
224 threads) ran 10% slower than unfused, in runs of 13 x 2 (whole rows) 1.75x faster.
CPUIFY_BLOCK_RUNS=0 turns it off (as `--disable-pass=fuse-block-runs` does)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

from cpuify.codegen.layout import ScratchLayout
from cpuify.errors import SpecializationWarning

#: the most threads of a fused block
RUN_MAX_THREADS = 8192
#: the most scratch bytes of a fused block (per-thread slots, local memory: laplace3d's 128
#: bytes a thread x 8192 threads), about half an L2
RUN_MAX_SCRATCH = 1 << 20
#: runs per worker thread the y run leaves at least, where it can (laplace3d's 7 x 4 blocks
#: in runs of 7 x 4: 7 runs, one thread; on two, 7 x 2)
RUNS_PER_WORKER = 6
#: fused variants compiled per block shape (each grid shape may want another run)
MAX_RUN_VARIANTS = 4


def enabled() -> bool:
    return os.environ.get("CPUIFY_BLOCK_RUNS", "1") not in ("0", "")


def _run_length(blocks: int, most: int) -> int:
    """How many of a grid dimension's `blocks` one run takes, at most `most`: all of them
    when they fit, else as few runs as can be, of equal length (the last one shorter by
    less than a run's count of blocks)."""
    if most <= 1 or blocks <= 1:
        return 1
    runs = -(-blocks // most)
    return -(-blocks // runs)


def choose_block_run(block: tuple[int, int, int], grid: tuple[int, int, int],
                     workers: int = 1, per_thread: int = 0) -> tuple[int, int]:
    """The run (x, y) of blocks a launch of `grid` blocks of `block` threads asks to fuse,
    on `workers` worker threads, for code with `per_thread` bytes of scratch a thread: fewer
    block rows per run where that leaves fewer than RUNS_PER_WORKER runs per worker (the runs
    are what the workers share out)."""
    bx, by, bz = block
    most = RUN_MAX_THREADS
    if per_thread > 0:
        most = max(1, min(most, RUN_MAX_SCRATCH // per_thread))
    rx = _run_length(grid[0], most // (bx * by * bz))
    most_y = most // (rx * bx * by * bz)
    runs_x = -(-grid[0] // rx)
    want = RUNS_PER_WORKER * workers if workers > 1 else 1    # (one worker: no sharing)
    while most_y > 1 and runs_x * -(-grid[1] // most_y) < want:
        most_y -= 1
    return rx, _run_length(grid[1], most_y)


def run_grid(grid: tuple[int, int, int], run: tuple[int, int]) -> tuple[int, int, int]:
    """The grid of runs: what the block function fused for `run` is called for."""
    return (-(-grid[0] // run[0]), -(-grid[1] // run[1]), grid[2])


#: (address, scratch layout, run fused) of a block function compiled for a run of blocks
Variant = tuple[int, ScratchLayout, tuple[int, int]]


class RunVariants:
    """One kernel's block functions compiled for runs of blocks, per (block shape, run
    asked for); `compile(block, run)` compiles one (its run (1, 1): the kernel refused)."""

    def __init__(self, kernel: str,
                 compile: Callable[[tuple[int, int, int], tuple[int, int]], Variant]) -> None:
        self.kernel = kernel
        self.compile = compile
        self.enabled = enabled()
        #: (shape, run asked for) -> the variant (None: refused, or its compile failed)
        self.variants: dict[tuple[tuple[int, int, int], tuple[int, int]], Variant | None] = {}
        #: shapes whose kernel runs one block per call
        self.refused: set[tuple[int, int, int]] = set()

    def for_launch(self, block: tuple[int, int, int], grid: tuple[int, int, int],
                   workers: int, per_thread: int = 0) -> Variant | None:
        """The variant a launch of `grid` runs (on `workers` threads; the shape's code has
        `per_thread` scratch bytes a thread), or None: runs are off, the kernel's blocks may
        not run fused, no run pays for this grid, or the compile failed (the code for the
        shape then runs, as it always can)."""
        if not self.enabled or block in self.refused:
            return None
        run = choose_block_run(block, grid, workers, per_thread)
        if run == (1, 1):
            return None
        key = (block, run)
        if key not in self.variants:
            if sum(1 for b, _ in self.variants if b == block) >= MAX_RUN_VARIANTS:
                return None
            try:
                got: Variant | None = self.compile(block, run)
            except Exception as e:  # noqa: BLE001 - the code for the shape is correct: keep using it
                warnings.warn(f"kernel '{self.kernel}': compiling it for runs of {run} blocks "
                              f"failed ({type(e).__name__}: {e}); running the code for the "
                              "block shape", SpecializationWarning, stacklevel=5)
                got = None
            if got is not None and got[2] == (1, 1):
                self.refused.add(block)
                got = None
            self.variants[key] = got
        return self.variants[key]
