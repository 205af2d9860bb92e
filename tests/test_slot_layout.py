"""The slots of the values kept across sync points (KernelCodegen's slot layout) as `cpuify
explain` reports them: the bytes per thread of the values kept per thread and of the values
the same in every thread of the block (uniform), apart.  A uniform value's slot is an array
of one element per thread too (each thread stores its own, a vector store; the next segment
reads one copy), so both count per thread.  The kernel here keeps one double per thread (v)
and two ints the same in every thread (the loop counter and h) across its barrier, counted by
hand: 8 + 8 bytes.  Its results are checked against NumPy in the generic code and the code
specialized for the block shape."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.cli.main import main

SRC = r'''
extern "C" __global__ void keep(const double *x, double *out, int steps) {
    __shared__ double s[2][256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    double v = x[i];                    // each thread's own: kept per thread
    unsigned h = 1;                     // the same in every thread: kept once per block
    #pragma unroll 1
    for (int t = 0; t < steps; ++t) {   // t: kept once per block
        s[t & 1][threadIdx.x] = v;
        __syncthreads();
        v = 0.5 * v + s[t & 1][threadIdx.x ^ 1];
        h = h * 3u + 1u;
    }
    out[i] = v + (double)(h & 1023u);
}
'''


def _reference(x: np.ndarray, block: int, steps: int) -> np.ndarray:
    v = x.reshape(-1, block).copy()
    partner = np.arange(block) ^ 1
    h = 1
    for _ in range(steps):
        v = 0.5 * v + v[:, partner]
        h = (h * 3 + 1) & 0xFFFFFFFF
    return (v + (h & 1023)).reshape(-1)


def test_explain_reports_slots_per_thread_and_uniform(tmp_path, capsys):
    src = tmp_path / "k.cu"
    src.write_text(SRC)
    for extra in ([], ["--block", "64"]):
        assert main(["explain", *extra, str(src)]) == 0
        out = capsys.readouterr().out
        assert ("16 bytes of slots per thread for the values kept across sync points: 8 for "
                "values kept per thread, 8 for uniform values") in out, out
        assert "1 value(s) kept per thread, 2 uniform (one copy per block)" in out


@pytest.mark.parametrize("block,nblocks,steps", [(64, 3, 5), (256, 2, 1), (32, 4, 0), (128, 1, 9)])
def test_kept_values_round_trip(run_twice, block, nblocks, steps):
    mod = cpuify.RawModule(code=SRC)
    rng = np.random.default_rng(block * 10 + steps)
    x = rng.standard_normal(block * nblocks)
    out = np.zeros_like(x)
    want = _reference(x, block, steps)
    for got in run_twice(mod, "keep", (nblocks,), (block,), (x, out, np.int32(steps)), out):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
