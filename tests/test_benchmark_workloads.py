"""The benchmark suite's CUDA workloads, through cpuify at their small sizes, checked against
each workload's own NumPy reference (the suite checks every implementation the same way,
but runs only when asked: `python -m benchmarks`).  Each runs twice: the first call runs the
generic code, the second the code specialized for its block shape, and a workload must
also give the right answer when called again (accumulators cleared, inputs untouched)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import numpy as np
import pytest

import cpuify

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.suite import workloads  # noqa: E402

NAMES = sorted(m.name for m in pkgutil.iter_modules(workloads.__path__))


def test_every_workload_is_listed():
    assert len(NAMES) >= 14


@pytest.mark.parametrize("name", NAMES)
def test_workload_matches_its_reference(name):
    w = importlib.import_module(f"benchmarks.suite.workloads.{name}").WORKLOAD
    p = w.sizes["small"]
    inp = w.make_inputs(p, np.random.default_rng(3))
    ref = w.reference(p, inp)
    mod = cpuify.RawModule(code=w.cuda_source)
    for call in range(3):
        ok, why = w.check(p, w.run_cpuify(p, inp, mod), ref)
        assert ok, f"{name}, call {call + 1}: {why}"


def test_aligned_work_buffers():
    # lu_tile's rows are whole cache lines only when its work buffer is; each peer
    # allocates its own buffer with aligned_empty, so none runs with split rows by chance
    from benchmarks.suite.workload import aligned_empty
    for shape, dtype in (((1,), np.float32), ((33, 17), np.float64), ((1024, 1024), np.float32)):
        a = aligned_empty(shape, dtype)
        assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous
        assert a.ctypes.data % 256 == 0
        a[...] = 1                      # the whole extent is writable
    w = importlib.import_module("benchmarks.suite.workloads.lu_tile").WORKLOAD
    p = w.sizes["small"]
    inp = w.make_inputs(p, np.random.default_rng(3))
    out = w.run_cpuify(p, inp, cpuify.RawModule(code=w.cuda_source))
    assert out["a"].ctypes.data % 256 == 0 and inp["a"].ctypes.data % 256 == 0
