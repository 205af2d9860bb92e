"""Process-level behaviour: modules created, used and freed in any order; one kernel launched
from several Python threads at once; results independent of the worker count.  Scripts
that could crash the interpreter run in a subprocess, so a crash is a test failure, not the
end of the test session."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

import cpuify

SRC_DIR = str(Path(__file__).resolve().parents[2] / "src")

SCRIPT = textwrap.dedent(r'''
    import gc, sys
    import numpy as np
    import cpuify

    def make(k):
        return cpuify.RawModule(code="extern \"C\" __global__ void add(int *v) "
                                      "{ v[threadIdx.x] += %d; }" % k)

    v = np.zeros(8, np.int32)
    a = make(1)
    b = make(2)
    a.get_function("add")(1, 8, (v,))
    b.get_function("add")(1, 8, (v,))
    del a; gc.collect()
    del b; gc.collect()
    c = make(3)              # compiled after two modules were freed
    c.get_function("add")(1, 8, (v,))
    del c; gc.collect()
    assert (v == 6).all(), v
    print("DONE", flush=True)
''')


def test_freeing_modules_and_compiling_again(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC_DIR + os.pathsep + env.get("PYTHONPATH", "")
    env["CPUIFY_CACHE_DIR"] = str(tmp_path / "cache")       # really compile module c
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "DONE" in r.stdout, (
        f"exit code {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr[-2000:]}")


THREADS_SCRIPT = textwrap.dedent(r'''
    import threading
    import numpy as np
    import cpuify

    src = r"""
    extern "C" __global__ void fill(float *y, float v, int n) {
        __shared__ float s[256];
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        s[threadIdx.x] = v;
        __syncthreads();
        if (i < n) y[i] = s[(threadIdx.x + 1) % blockDim.x] + (float)i;
    }"""
    f = cpuify.RawModule(code=src).get_function("fill")
    n = 1 << 16
    outs = [np.zeros(n, np.float32) for _ in range(8)]
    bad = []

    def work(k):
        block = 64 * (k % 4 + 1)            # each thread uses its own launch configuration
        for r in range(20):
            f(((n + block - 1) // block,), (block,), (outs[k], np.float32(k * 1000 + r), np.int32(n)))
            if not np.array_equal(outs[k], np.float32(k * 1000 + r) + np.arange(n, dtype=np.float32)):
                bad.append((k, r))
                return

    ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in ts: t.start()
    for t in ts: t.join()
    assert not bad, bad
    print("DONE", flush=True)
''')


def test_same_kernel_launched_from_several_python_threads(tmp_path):
    """Launches release the GIL; one Function used from 8 threads at once, each with its own
    arguments and block size, must give every thread its own correct result."""
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC_DIR + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", THREADS_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "DONE" in r.stdout, (
        f"exit code {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr[-2000:]}")


def test_results_do_not_depend_on_worker_count():
    src = r'''
    extern "C" __global__ void block_sums(const int *x, long long *out) {
        __shared__ long long s[128];
        s[threadIdx.x] = x[blockIdx.x * 128 + threadIdx.x];
        __syncthreads();
        for (int k = 64; k > 0; k >>= 1) {
            if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
            __syncthreads();
        }
        if (threadIdx.x == 0) out[blockIdx.x] = s[0];
    }'''
    f = cpuify.RawModule(code=src).get_function("block_sums")
    rng = np.random.default_rng(7)
    x = rng.integers(-10**6, 10**6, 300 * 128, dtype=np.int32)
    ref = x.reshape(300, 128).astype(np.int64).sum(axis=1)
    before = cpuify.num_threads()
    try:
        for nt in (1, 2, 3, 8):
            cpuify.set_num_threads(nt)
            assert cpuify.num_threads() == nt
            out = np.zeros(300, np.int64)
            f((300,), (128,), (x, out))
            np.testing.assert_array_equal(out, ref, err_msg=f"{nt} worker threads")
    finally:
        cpuify.set_num_threads(before)
