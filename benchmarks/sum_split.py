"""The row softmax of the suite (one thread per row, 784 columns) with the default pipeline,
with the split's sum read back by an interchanged loop (`split-in-order-sums{sum_op=false}`),
without `split-in-order-sums`, without `reroll-loops`, the same source with
`#pragma unroll 1` on its three loops (what re-rolling nvcc's unrolled loops aims at), and
its OpenMP twin, interleaved in one process.

    CPUIFY_NUM_THREADS=1 OMP_NUM_THREADS=1 python benchmarks/sum_split.py [--rows 65536] [--rounds 5]

Prints per variant the best and the median CPU time of one launch (user + system time of
this process, so a busy machine's other work does not count; with one worker thread it is
the kernel's own time) and checks that the cpuify variants write the same bits (the split
reads back the stored terms and adds them in the original order; the re-rolled loops run
the same iterations in the same order)."""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import shutil
import subprocess
import tempfile

import numpy as np

import cpuify
from benchmarks.suite.workloads.row_softmax import BLOCK, COLS, CUDA_SRC, OMP_SRC
from cpuify.transforms.pass_manager import default_pipeline

#: the default pipeline with the sum read back by an interchanged loop (a gather per
#: column) instead of one upir.in_order_sum per thread (rows transposed in registers)
LOOP_READ_BACK = "--passes=" + ",".join(
    "split-in-order-sums{sum_op=false}" if p == "split-in-order-sums" else p
    for p in default_pipeline())


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1 << 16)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    rows = args.rows
    x = np.random.default_rng(0).standard_normal((rows, COLS), dtype=np.float32) * np.float32(3)
    y = np.empty_like(x)
    grid = ((rows + BLOCK - 1) // BLOCK,)
    runs = {}
    unroll_1 = CUDA_SRC.replace("    for (int c = 0; c < cols; c++)",
                                "    _Pragma(\"unroll 1\") for (int c = 0; c < cols; c++)")
    assert unroll_1.count("unroll 1") == 3
    for label, source, options in (
            ("default", CUDA_SRC, ()),
            ("loop sum", CUDA_SRC, (LOOP_READ_BACK,)),
            ("not split", CUDA_SRC, ("--disable-pass=split-in-order-sums",)),
            ("unrolled", CUDA_SRC, ("--disable-pass=reroll-loops",)),
            ("unroll 1", unroll_1, ())):
        fn = cpuify.RawModule(code=source, options=options).get_function("softmax_rows")
        runs[label] = (lambda fn=fn: fn(grid, (BLOCK,), (x, y, np.int32(rows), np.int32(COLS))))
    with tempfile.TemporaryDirectory() as tmp:
        gcc = shutil.which("gcc")
        if gcc is not None:
            with open(os.path.join(tmp, "twin.c"), "w") as f:
                f.write(OMP_SRC)
            lib_path = os.path.join(tmp, "twin.so")
            subprocess.run([gcc, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC",
                            os.path.join(tmp, "twin.c"), "-o", lib_path, "-lm"], check=True)
            lib = ctypes.CDLL(lib_path)
            lib.softmax_rows.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_long] * 2
            runs["OpenMP"] = lambda: lib.softmax_rows(x.ctypes.data, y.ctypes.data, rows, COLS)
        outs = {}
        for label, run in runs.items():          # compile, specialize, keep the output
            run()
            run()
            outs[label] = y.copy()
        same = all(np.array_equal(outs["default"].view(np.uint32), outs[label].view(np.uint32))
                   for label in outs if label != "OpenMP")
        times: dict[str, list[float]] = {label: [] for label in runs}
        for _ in range(args.rounds):
            for label, run in runs.items():
                t0 = _cpu()
                run()
                times[label].append(_cpu() - t0)
    print(f"{rows} rows x {COLS} columns, {grid[0]} blocks of {BLOCK} threads, "
          f"CPUIFY_NUM_THREADS={os.environ.get('CPUIFY_NUM_THREADS', 'all')}; CPU time of "
          f"one launch over {args.rounds} rounds; the cpuify variants bit-equal: {same}")
    base = min(times["default"])
    for label, ts in times.items():
        ts.sort()
        print(f"  {label:10} best {ts[0] * 1e3:7.1f} ms  median {ts[len(ts) // 2] * 1e3:7.1f} ms"
              f"  ({ts[0] / base:.2f}x default's best)")


if __name__ == "__main__":
    main()
