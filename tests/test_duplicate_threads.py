"""merge-duplicate-threads (transforms/threads.py): threads that differ only in a thread-index
dimension the kernel never reads run once.

Where the pass must fire and where it must not (IR attribute), and results against NumPy:
the racy-but-GPU-consistent accumulation of PolyBench-ACC's matrix-vector kernels (one sum,
as on a GPU), unchanged results for kernels whose threads can tell each other apart, and
counts from atomics with several threads per index (not merged)."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.structure import block_parallel
from cpuify.transforms.pass_manager import PipelineOptions

# one thread per row i; launched with blockDim.y = 8, eight threads per row accumulate into
# x[i] without atomics (PolyBench-ACC mvt's shape)
MATVEC = r'''
extern "C" __global__ void matvec(int n, const float *a, float *x, const float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        for (int j = 0; j < n; j++) x[i] += a[i * n + j] * y[j];
}'''

NOT_MERGED = {
    "reads_ty": r'''
extern "C" __global__ void reads_ty(float *out) {
    out[threadIdx.y * blockDim.x + threadIdx.x] = threadIdx.y;
}''',
    "atomic": r'''
extern "C" __global__ void atomic(int *count) { atomicAdd(&count[threadIdx.x], 1); }''',
    "barrier": r'''
extern "C" __global__ void barrier(float *out) {
    __shared__ float s[32];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[31 - threadIdx.x];
}''',
    "lane": r'''
extern "C" __global__ void lane(int *out) {
    out[threadIdx.x] = __shfl_down_sync(0xffffffff, (int)threadIdx.x, 1);
}''',
    "printf": r'''
extern "C" __global__ void printf_kernel(int *out) { printf("%d\n", threadIdx.x); }''',
}


def _dims(source: str, name: str, options: PipelineOptions | None = None) -> list[int]:
    ptx = compile_to_ptx(source, filename=f"{name}.cu").ptx
    module = parse_ptx(ptx)
    lifted, _ = lift_and_optimize(module, module.functions[name], options or PipelineOptions())
    return list(block_parallel(lifted.op).attributes.get("duplicate_thread_dims", []))


def test_unread_dimensions_are_marked() -> None:
    assert _dims(MATVEC, "matvec") == [1, 2]


def test_pass_can_be_switched_off() -> None:
    assert _dims(MATVEC, "matvec", PipelineOptions(disabled=frozenset({"merge-duplicate-threads"}))) == []


@pytest.mark.parametrize("name", sorted(NOT_MERGED))
def test_threads_that_can_tell_each_other_apart_are_kept(name: str) -> None:
    kernel = "printf_kernel" if name == "printf" else name
    dims = _dims(NOT_MERGED[name], kernel)
    if name == "reads_ty":
        assert dims == [2]          # x and y are read; z is a duplicate dimension
    else:
        assert dims == []


@pytest.mark.parametrize("block", [(32, 8), (32, 4, 2), (16, 3)])
def test_racy_accumulation_gives_one_sum(block: tuple[int, ...]) -> None:
    n = 96
    rng = np.random.default_rng(1)
    a = rng.random((n, n), dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    x = np.full(n, 0.5, np.float32)
    k = cpuify.RawKernel(MATVEC, "matvec")
    k(((n + block[0] - 1) // block[0],), block, (np.int32(n), a, x, y))
    np.testing.assert_allclose(x, 0.5 + a.astype(np.float64) @ y, rtol=1e-5)


def test_kernel_reading_y_keeps_every_thread() -> None:
    out = np.zeros(4 * 8, np.float32)
    cpuify.RawKernel(NOT_MERGED["reads_ty"], "reads_ty")((1,), (8, 4), (out,))
    np.testing.assert_array_equal(out, np.repeat(np.arange(4, dtype=np.float32), 8))


def test_atomics_count_every_thread() -> None:
    count = np.zeros(32, np.int32)
    cpuify.RawKernel(NOT_MERGED["atomic"], "atomic")((2,), (32, 3, 2), (count,))
    np.testing.assert_array_equal(count, np.full(32, 2 * 3 * 2))


def test_specialized_and_generic_code_agree(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # a whole program launches the kernel with a constant block shape (specialized code)
    # and with one from a variable (generic code); both give one sum per row
    import shutil
    import subprocess
    import sys
    from cpuify.nvcc.toolkit import find_toolkit
    try:
        find_toolkit()
    except Exception:
        pytest.skip("nvcc wheel missing")
    if shutil.which("g++") is None:
        pytest.skip("g++ missing")
    src = tmp_path / "mv.cu"
    src.write_text(MATVEC + r'''
#include <cstdio>
int main(int argc, char **argv) {
    const int n = 64;
    float *a, *x, *y;
    cudaMallocManaged(&a, n * n * sizeof(float));
    cudaMallocManaged(&x, n * sizeof(float));
    cudaMallocManaged(&y, n * sizeof(float));
    for (int i = 0; i < n * n; i++) a[i] = (i % 7) * 0.25f;
    for (int i = 0; i < n; i++) { y[i] = (i % 5) * 0.5f; x[i] = 0; }
    matvec<<<2, dim3(32, 8)>>>(n, a, x, y);
    int ty = argc + 3;                       // 4, not a constant to the compiler
    matvec<<<2, dim3(32, ty)>>>(n, a, x, y);
    cudaDeviceSynchronize();
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < n; j++) s += (double)a[i * n + j] * y[j];
        if (x[i] < 2 * s - 1e-3 || x[i] > 2 * s + 1e-3) bad++;
    }
    printf("bad %d\n", bad);
    return bad != 0;
}
''')
    exe = tmp_path / "mv"
    r = subprocess.run([sys.executable, "-m", "cpuify.cli.main", "nvcc", str(src), "-o", str(exe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(exe)], capture_output=True, text=True)
    assert r.stdout.strip() == "bad 0", r.stdout + r.stderr
