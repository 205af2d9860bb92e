"""Distributed execution: one CUDA program's launches over MPI ranks (docs/distributed.md).

`mpiexec -n 4 python script.py`: rank 0 runs the script, the other ranks serve kernel
partitions; `resident()` and `fetch()` control when NumPy arrays come back to rank 0."""

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
