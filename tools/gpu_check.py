"""Runs the kernels of a test file on a real GPU (CuPy) and on cpuify, and compares.

The tests check cpuify against NumPy models of what CUDA does; this checks the models against
CUDA itself, for kernels whose semantics are subtle (threads that exit before a barrier or
a shuffle, divergent __syncwarp).  Two steps, on two machines:

    python tools/gpu_check.py gpu OUT.npz          # where a GPU and CuPy are: GPU results
    python tools/gpu_check.py compare OUT.npz      # here: cpuify on the same inputs

Cases: the kernels of tests/test_prefix_runs.py, each at the launch shapes its tests use,
inputs from a fixed seed.  A third mode checks the benchmark suite's CUDA kernels on the
GPU against the suite's own NumPy references (the kernels cpuify is timed on are correct
CUDA), through a CuPy module with cpuify's call interface (host arrays copied in and out):

    python tools/gpu_check.py suite [small|default]

Not part of the test suite (CI has no GPU)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _source() -> str:
    text = (ROOT / "tests" / "test_prefix_runs.py").read_text()
    return re.search(r"SRC = r'''(.*?)'''", text, re.S).group(1)


def _cases() -> list[tuple[str, str, tuple, tuple, list]]:
    """(case name, kernel, grid, block, [arguments: arrays, ('out', shape, dtype) or scalars])."""
    rng = np.random.default_rng(11)
    cases = []
    for block, n in ((256, 256 * 7), (256, 1000), (1024, 3000), (64, 640), (96, 500), (32, 100)):
        grid = (n + block - 1) // block
        x = rng.integers(-1000, 1000, grid * block).astype(np.int32)
        cases.append((f"block_sum_{block}_{n}", "block_sum", (grid,), (block,),
                      [x, ("out", grid, np.int32), np.int32(n)]))
    cases.append(("steps", "steps", (3,), (256,),
                  [rng.integers(-1000, 1000, 768).astype(np.int32), ("out", 768, np.int32)]))
    cases.append(("holes", "holes", (2,), (256,),
                  [rng.integers(-1000, 1000, 512).astype(np.int32), ("out", 512, np.int32)]))
    cases.append(("partial", "partial", (2,), (256,),
                  [np.arange(512, dtype=np.int32) * 3, ("out", 512, np.int32)]))
    cases.append(("diverge", "diverge", (2,), (128,),
                  [rng.integers(-1000, 1000, 256).astype(np.int32), ("out", 256, np.int32)]))
    for name in ("vote_after_exits", "count_after_exits"):
        cases.append((name, name, (2,), (256,),
                      [rng.integers(-1000, 1000, 512).astype(np.int32), ("out", 512, np.int32)]))
    return cases


def run(backend: str) -> dict[str, np.ndarray]:
    if backend == "gpu":
        import cupy as xp
        mod = xp.RawModule(code=_source())
    else:
        import cpuify
        xp = np
        mod = cpuify.RawModule(code=_source())
    results = {}
    for name, kernel, grid, block, args in _cases():
        call, outs = [], []
        for a in args:
            if isinstance(a, tuple):
                buf = xp.full(a[1], -1, dtype=a[2])
                outs.append(buf)
                call.append(buf)
            elif isinstance(a, np.ndarray):
                call.append(xp.asarray(a))
            else:
                call.append(a)
        mod.get_function(kernel)(grid, block, tuple(call))
        results[name] = outs[0].get() if backend == "gpu" else outs[0].copy()
    return results


class _CupyModule:
    """cupy.RawModule behind cpuify's interface: kernels take NumPy arrays (copied to the GPU
    before the launch and back after it), get_global gives a NumPy array copied to the
    module's variable before each launch."""

    def __init__(self, code: str, options: tuple = ()) -> None:
        import cupy
        self.cp = cupy
        self.code, self.options = code, tuple(options)
        self.mod = cupy.RawModule(code=code, options=self.options)
        self.globals: list[tuple[object, np.ndarray]] = []

    def get_global(self, name: str, dtype=np.uint8) -> np.ndarray:
        import ctypes
        ptr = self.mod.get_global(name)
        # its size: cuModuleGetGlobal (CuPy's binding returns the address alone)
        dptr, size = ctypes.c_uint64(), ctypes.c_size_t()
        rc = ctypes.CDLL("libcuda.so.1").cuModuleGetGlobal_v2(
            ctypes.byref(dptr), ctypes.byref(size), ctypes.c_void_p(self.mod.module.ptr),
            name.encode())
        assert rc == 0 and dptr.value == ptr.ptr, (rc, name)
        host = np.zeros(size.value // np.dtype(dtype).itemsize, dtype)
        self.globals.append((ptr, host))
        return host

    def get_function(self, name: str):
        fn = self.mod.get_function(name)
        cp = self.cp

        def launch(grid, block, args, shared_mem=0, **kw):
            for ptr, host in self.globals:
                ptr.copy_from_host(host.ctypes.data, host.nbytes)
            dev = [cp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
            fn(tuple(grid), tuple(block), tuple(dev), shared_mem=shared_mem)
            for a, d in zip(args, dev):
                if isinstance(a, np.ndarray) and a.flags.writeable:
                    a[...] = d.get()
        return launch


def suite(size: str) -> int:
    sys.path.insert(0, str(ROOT))
    from benchmarks.suite.harness import load_workload
    names = sorted(p.stem for p in (ROOT / "benchmarks" / "suite" / "workloads").glob("*.py")
                   if not p.stem.startswith("_"))
    bad = 0
    for name in names:
        w = load_workload(name)
        p = w.sizes[size]
        inp = w.make_inputs(p, np.random.default_rng(0))
        ref = w.reference(p, inp)
        mod = _CupyModule(w.cuda_source, tuple(getattr(w, "cuda_options", ()) or ()))
        ok, msg = w.check(p, w.run_cpuify(p, inp, mod), ref)
        bad += not ok
        print(f"{name:12s} {'ok' if ok else 'WRONG'}  {msg}")
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["suite"] and len(argv) <= 2:
        return suite(argv[1] if len(argv) == 2 else "small")
    if len(argv) != 2 or argv[0] not in ("gpu", "compare"):
        print(__doc__)
        return 2
    if argv[0] == "gpu":
        np.savez(argv[1], **run("gpu"))
        print(f"GPU results of {len(_cases())} cases written to {argv[1]}")
        return 0
    want = np.load(argv[1])
    got = run("cpuify")
    bad = [k for k in got if not np.array_equal(got[k], want[k])]
    for k in got:
        print(f"{k:24s} {'ok' if k not in bad else 'DIFFERS'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
