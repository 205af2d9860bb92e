"""Distributed execution over MPI ranks (issue 19; the multi-device partitioning paper).

One CUDA program runs across ranks: rank 0 runs the host program, the other ranks serve
kernel partitions.  Each launch's grid is split along block boundaries into one box of
blocks per rank; buffers are virtual buffers whose newest bytes a tracker follows, so only
the stale parts of each partition's read set move.

  tracker    which ranks hold the newest copy of each byte range of a buffer
  partition  the split of a launch's grid into boxes per rank (the paper's heuristic plus
             the bytes each split would move), write conflicts between partitions
  model      an alpha-beta model of a launch's time on N ranks; MPI latency/bandwidth
             measured by ping-pong

Importing this package needs neither MPI nor isl: mpi4py is imported only by what runs
under mpiexec.

`mpiexec -n 4 python script.py`: rank 0 runs the script, the other ranks serve kernel
partitions (docs/distributed.md); `resident()` and `fetch()` say when NumPy arrays come back
to rank 0."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:     # lazy: mpi4py and NumPy load on first use
    if name in ("resident", "fetch"):
        from cpuify.distributed import api_front
        return getattr(api_front, name)
    if name in ("mpi_world", "get"):
        from cpuify.distributed import engine
        return getattr(engine, name)
    raise AttributeError(f"module 'cpuify.distributed' has no attribute {name!r}")
