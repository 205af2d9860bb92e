"""The reference interpreter runs the IR after each pass of the pipeline, and with each pass
left out: every result equals the one from the IR as lifted (and NumPy where it applies).

Kernels of the shapes each pass rewrites: a compare-exchange (if-convert-swaps), a flag set
in an if across a barrier (select-if-phis), a launch-invariant loop (parallel-licm), a
grid-stride loop whose stride is computed before it (reroll-loops, then
interchange-thread-strided-loops), a block-uniform loop carrying a float
(interchange-uniform-loops), a staging `if (tx == 0)` before a barrier (barrier-motion), and a
shared-memory tree reduction with barriers."""

from __future__ import annotations

import numpy as np
import pytest

from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp.machine import InterpModule
from cpuify.lifting import lift_kernel
from cpuify.transforms.pass_manager import PipelineOptions, default_pipeline, run_pipeline

SOURCE = r'''
__device__ float total(const float *d, int n) { float t = 0; for (int i = 0; i < n; i++) t += d[i]; return t; }
extern "C" __global__ void normalize(float *out, const float *in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float s = total(in, n);
    if (i < n) out[i] = in[i] / s;
}
extern "C" __global__ void swaps(int *data) {
    __shared__ int s[64];
    int t = threadIdx.x;
    s[t] = data[blockIdx.x * 64 + t];
    __syncthreads();
    for (int k = 2; k <= 64; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            int p = t ^ j;
            if (p > t) {
                int a = s[t], b = s[p];
                if ((a > b) == ((t & k) == 0)) { s[t] = b; s[p] = a; }
            }
            __syncthreads();
        }
    data[blockIdx.x * 64 + t] = s[t];
}
extern "C" __global__ void flags(const int *x, int *out, int lo, int hi) {
    __shared__ int s[64];
    int t = threadIdx.x;
    bool done = false;
    int v = 7;
    if (t >= lo && t <= hi) { s[t] = x[t] * 2; done = true; v = x[t]; }
    __syncthreads();
    out[t] = done ? s[t] + v : -1;
}
extern "C" __global__ void grid_stride(const float *a, float *b, int n) {
    int step = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) b[i] = 2.0f * a[i] + 1.0f;
}
extern "C" __global__ void uniform_loop(const float4 *pos, float *acc, int n) {
    __shared__ float4 tile[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float4 me = pos[i];
    float a = 0.0f;
    for (int base = 0; base < n; base += 32) {
        tile[threadIdx.x] = pos[base + threadIdx.x];
        __syncthreads();
        for (int k = 0; k < 32; k++) {
            float dx = tile[k].x - me.x, dy = tile[k].y - me.y, dz = tile[k].z - me.z;
            float r2 = dx * dx + dy * dy + dz * dz + 0.01f;
            a += tile[k].w * dx / (r2 * sqrtf(r2)) + dy * 0.5f - dz * 0.25f;
        }
        __syncthreads();
    }
    acc[i] = a;
}
extern "C" __global__ void two_phases(const float *__restrict__ x, const float *y, float *out) {
    __shared__ float s1[64], s2[64], s3[64];
    int t = threadIdx.x;
    s1[t] = x[t];
    __syncthreads();
    s2[t] = y[t] * 2.0f;
    __syncthreads();
    s3[t] = s1[63 - t] + s2[63 - t];
    __syncthreads();
    out[t] = s3[t] * 0.5f;
}
extern "C" __global__ void row_normalize(const float *x, float *y, int cols) {
    const float *row = x + (size_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int j = 0; j < cols; j++) s += row[j];
    for (int j = threadIdx.x; j < cols; j += blockDim.x) y[(size_t)blockIdx.x * cols + j] = row[j] / s;
}
extern "C" __global__ void staged(const float *x, const float *w, float *out) {
    __shared__ float node[8], tile[8][8];
    int tx = threadIdx.x, ty = threadIdx.y, row = blockIdx.x * 8 + ty;
    if (tx == 0) node[ty] = x[row];
    __syncthreads();
    tile[ty][tx] = w[row * 8 + tx];
    __syncthreads();
    out[row * 8 + tx] = tile[ty][7 - tx] * node[ty];
}
extern "C" __global__ void tree_sum(const float *x, float *out) {
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = x[blockIdx.x * 64 + t];
    __syncthreads();
    for (int k = 32; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
'''


def _cases(rng: np.random.Generator) -> dict:
    n = 100
    pos = rng.random((64, 4), dtype=np.float32)
    return {
        "normalize": ((4,), (32,), lambda: [np.zeros(n, np.float32), rng.random(n, dtype=np.float32) + 1,
                                            np.int32(n)]),
        "swaps": ((2,), (64,), lambda: [rng.integers(0, 1000, 128).astype(np.int32)]),
        "flags": ((1,), (64,), lambda: [rng.integers(0, 20, 64).astype(np.int32), np.zeros(64, np.int32),
                                        np.int32(5), np.int32(40)]),
        "grid_stride": ((2,), (16,), lambda: [rng.random(n, dtype=np.float32), np.zeros(n, np.float32),
                                              np.int32(n)]),
        "uniform_loop": ((2,), (32,), lambda: [pos.copy(), np.zeros(64, np.float32), np.int32(64)]),
        "two_phases": ((1,), (64,), lambda: [rng.random(64, dtype=np.float32),
                                             rng.random(64, dtype=np.float32), np.zeros(64, np.float32)]),
        "row_normalize": ((3,), (16,), lambda: [rng.random(3 * 40, dtype=np.float32),
                                                np.zeros(3 * 40, np.float32), np.int32(40)]),
        "staged": ((2,), (8, 8), lambda: [rng.random(16, dtype=np.float32),
                                          rng.random(128, dtype=np.float32), np.zeros(128, np.float32)]),
        "tree_sum": ((2,), (64,), lambda: [rng.random(128, dtype=np.float32), np.zeros(2, np.float32)]),
    }


@pytest.fixture(scope="module")
def ptx() -> str:
    return compile_to_ptx(SOURCE, filename="passes.cu").ptx


def _run(ptx: str, name: str, pipeline: list[str], args_of, grid, block) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    module = parse_ptx(ptx)
    lifted = lift_kernel(module, module.functions[name])
    # the block shape is known, as in code specialized for it (barrier-elimination's
    # same-thread rule needs it)
    lifted.op.attributes["block_dims"] = list((tuple(block) + (1, 1))[:3])
    run_pipeline(lifted.op, PipelineOptions(passes=tuple(pipeline), verify_each=True))
    interp = InterpModule(ptx)
    interp.use_ir(name, lifted.op)
    args = args_of()
    interp.launch(name, grid, block, args)
    return [a for a in args if isinstance(a, np.ndarray)]


@pytest.mark.parametrize("name", ["normalize", "swaps", "flags", "grid_stride", "uniform_loop",
                                  "two_phases", "row_normalize", "tree_sum", "staged"])
def test_interpreter_after_each_pass_and_without_each(ptx: str, name: str) -> None:
    passes = default_pipeline()
    pipelines = [passes[:k] for k in range(1, len(passes) + 1)]            # after each pass
    pipelines += [[p for p in passes if p != off] for off in passes]         # each pass off
    reference = None
    for pipeline in [[]] + pipelines:
        grid, block, args_of = _cases(np.random.default_rng(7))[name]
        got = _run(ptx, name, pipeline, args_of, grid, block)
        if reference is None:
            reference = got
            continue
        for a, b in zip(reference, got):
            np.testing.assert_array_equal(a, b, err_msg=f"{name} after {pipeline}")


def test_the_passes_fire(ptx: str) -> None:
    """Each kernel above is rewritten by the pass it is there for (else the differential
    test would compare unchanged IR)."""
    module = parse_ptx(ptx)
    fired = {}
    for name in ("normalize", "swaps", "flags", "grid_stride", "uniform_loop", "two_phases",
                 "row_normalize"):
        lifted = lift_kernel(module, module.functions[name])
        lifted.op.attributes["block_dims"] = [64, 1, 1]
        counts = run_pipeline(lifted.op, PipelineOptions()).counts
        fired[name] = {p for p, n in counts.items() if n}
    assert "parallel-licm" in fired["normalize"]
    assert "if-convert-swaps" in fired["swaps"]
    assert "select-if-phis" in fired["flags"]
    assert "interchange-thread-strided-loops" in fired["grid_stride"]
    assert "reroll-loops" in fired["grid_stride"]
    assert "interchange-uniform-loops" in fired["uniform_loop"]
    assert "barrier-elimination" in fired["two_phases"]
    assert "parallel-licm" in fired["row_normalize"]
    lifted = lift_kernel(module, module.functions["staged"])
    lifted.op.attributes["block_dims"] = [8, 8, 1]
    assert run_pipeline(lifted.op, PipelineOptions()).counts["barrier-motion"] == 1
