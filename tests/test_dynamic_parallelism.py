"""Dynamic parallelism: kernels launching kernels (compiled with -rdc=true), run with CUDA's
completion rules (a child grid runs after its parent's blocks, before the parent counts as
complete; a block's launches into one stream in order; tail launches after all other work of
the parent), checked against NumPy and the reference interpreter."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import cpuify
from cpuify.errors import KernelFailure, UnsupportedError
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import interpret_kernel
from cpuify.lifting.lift import lift_kernel

RDC = ("-rdc=true",)


@functools.cache
def _ptx(src: str) -> str:
    return compile_to_ptx(src, options=RDC).ptx


def _run(executor: str, src: str, kernel: str, grid: tuple[int, ...], block: tuple[int, ...],
         args: tuple) -> None:
    if executor == "compiled":
        cpuify.RawModule(code=src, options=RDC).get_function(kernel)(grid, block, args)
    else:
        interpret_kernel(_ptx(src), kernel, grid + (1,) * (3 - len(grid)),
                         block + (1,) * (3 - len(block)), args)


EXECUTORS = pytest.mark.parametrize("executor", ["compiled", "interpreter"])

QUICKSORT = r"""
#define MAX_DEPTH 12
#define SMALL 16
__device__ void selection_sort(int *data, int left, int right) {
    for (int i = left; i <= right; ++i) {
        int min_val = data[i], min_idx = i;
        for (int j = i + 1; j <= right; ++j)
            if (data[j] < min_val) { min_val = data[j]; min_idx = j; }
        data[min_idx] = data[i];
        data[i] = min_val;
    }
}
// one thread partitions [left, right], then sorts each part in a child grid of its own
// stream; below SMALL elements or at MAX_DEPTH it sorts in place
extern "C" __global__ void quicksort(int *data, int left, int right, int depth) {
    if (depth >= MAX_DEPTH || right - left <= SMALL) {
        selection_sort(data, left, right);
        return;
    }
    int pivot = data[(left + right) / 2];
    int i = left, j = right;
    while (i <= j) {
        while (data[i] < pivot) i++;
        while (data[j] > pivot) j--;
        if (i <= j) { int t = data[i]; data[i] = data[j]; data[j] = t; i++; j--; }
    }
    if (left < j) {
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        quicksort<<<1, 1, 0, s>>>(data, left, j, depth + 1);
        cudaStreamDestroy(s);
    }
    if (i < right) {
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        quicksort<<<1, 1, 0, s>>>(data, i, right, depth + 1);
        cudaStreamDestroy(s);
    }
}

// merge sort: each grid splits its range in two child grids, then a tail launch merges
// the two sorted halves once both children are done
extern "C" __global__ void merge(int *data, int *tmp, int left, int mid, int right) {
    int i = left, j = mid, k = left;
    while (i < mid && j < right) tmp[k++] = data[i] <= data[j] ? data[i++] : data[j++];
    while (i < mid) tmp[k++] = data[i++];
    while (j < right) tmp[k++] = data[j++];
    for (k = left; k < right; ++k) data[k] = tmp[k];
}
extern "C" __global__ void mergesort(int *data, int *tmp, int left, int right) {
    if (right - left <= 8) {
        selection_sort(data, left, right - 1);
        return;
    }
    int mid = (left + right) / 2;
    mergesort<<<1, 1>>>(data, tmp, left, mid);
    mergesort<<<1, 1>>>(data, tmp, mid, right);
    merge<<<1, 1, 0, cudaStreamTailLaunch>>>(data, tmp, left, mid, right);
}
"""


@EXECUTORS
def test_recursive_quicksort_by_child_launches(executor: str) -> None:
    n = 3000 if executor == "compiled" else 200
    data = np.random.default_rng(5).integers(-10**6, 10**6, n).astype(np.int32)
    expect = np.sort(data)
    _run(executor, QUICKSORT, "quicksort", (1,), (1,), (data, np.int32(0), np.int32(n - 1), np.int32(0)))
    np.testing.assert_array_equal(data, expect)


@EXECUTORS
def test_recursive_mergesort_with_tail_launches(executor: str) -> None:
    n = 1000 if executor == "compiled" else 100
    data = np.random.default_rng(6).integers(-1000, 1000, n).astype(np.int32)
    expect = np.sort(data)
    tmp = np.zeros_like(data)
    _run(executor, QUICKSORT, "mergesort", (1,), (1,), (data, tmp, np.int32(0), np.int32(n)))
    np.testing.assert_array_equal(data, expect)


GRIDS = r"""
__global__ void grandchild(float *out, int row, int col) {
    out[(row * 8 + col) * 4 + threadIdx.x] = row * 1000.0f + col * 10.0f + threadIdx.x;
}
// a child grid per element of the parent: row i of a matrix, each element of which launches
// a grandchild grid
__global__ void row(const float *x, float *y, float *out, int i, int m) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < m) {
        y[i * m + j] = x[i] * (j + 1) + x[j % 16];
        if (j < 8) grandchild<<<1, 4, 0, cudaStreamFireAndForget>>>(out, i, j);
    }
}
extern "C" __global__ void outer(const float *x, float *y, float *out, int n, int m) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) row<<<(m + 31) / 32, 32>>>(x, y, out, i, m);
}
"""


@EXECUTORS
def test_parent_child_and_grandchild_grids(executor: str) -> None:
    n, m = 16, 100
    x = np.random.default_rng(1).integers(0, 100, n).astype(np.float32)   # (exact sums)
    y = np.zeros(n * m, np.float32)
    out = np.zeros(n * 8 * 4, np.float32)
    _run(executor, GRIDS, "outer", (2,), (8,), (x, y, out, np.int32(n), np.int32(m)))
    j = np.arange(m)
    expect = (x[:, None] * (j + 1).astype(np.float32) + x[j % 16][None, :]).astype(np.float32)
    np.testing.assert_array_equal(y.reshape(n, m), expect)
    row, col, t = np.meshgrid(np.arange(n), np.arange(8), np.arange(4), indexing="ij")
    np.testing.assert_array_equal(out.reshape(n, 8, 4),
                                  (row * 1000.0 + col * 10.0 + t).astype(np.float32))


ORDER = r"""
__global__ void first(int *a, int b) { a[b * 32 + threadIdx.x] += 1; }
__global__ void second(int *a, int *c, int b) {
    // launched after `first` into the same stream by the same block: sees its writes
    c[b * 32 + threadIdx.x] = a[b * 32 + threadIdx.x] * 10;
}
__global__ void total(const int *c, int *sum, int n) {
    // a tail launch: runs after the parent and all the grids it launched
    int s = 0;
    for (int i = 0; i < n; i++) s += c[i];
    *sum = s;
}
extern "C" __global__ void parent(int *a, int *c, int *sum, int *errors) {
    int b = blockIdx.x;
    a[b * 32 + threadIdx.x] = b + threadIdx.x;       // written before the launch: the child sees it
    __syncthreads();
    if (threadIdx.x == 0) {
        first<<<1, 32>>>(a, b);
        second<<<1, 32>>>(a, c, b);
        if (b == 0) total<<<1, 1, 0, cudaStreamTailLaunch>>>(c, sum, gridDim.x * 32);
        // a launch CUDA refuses: the error is the thread's last error
        first<<<1, 2048>>>(a, b);
        errors[b] = cudaGetLastError();
        errors[gridDim.x + b] = cudaGetLastError();
    }
}
"""


@EXECUTORS
def test_ordering_of_parent_and_child_writes(executor: str) -> None:
    blocks = 4
    a = np.zeros(blocks * 32, np.int32)
    c = np.zeros_like(a)
    total = np.zeros(1, np.int32)
    errors = np.full(2 * blocks, -1, np.int32)
    _run(executor, ORDER, "parent", (blocks,), (32,), (a, c, total, errors))
    b, t = np.divmod(np.arange(blocks * 32), 32)
    np.testing.assert_array_equal(a, b + t + 1)
    np.testing.assert_array_equal(c, (b + t + 1) * 10)
    assert int(total[0]) == int(c.sum())
    # cudaErrorInvalidConfiguration, then cleared
    assert errors.tolist() == [9] * blocks + [0] * blocks


def test_device_malloc_and_free() -> None:
    src = r"""
    __global__ void use(int *buf, int *out, int n) { out[threadIdx.x] = buf[threadIdx.x] * 2; }
    extern "C" __global__ void k(int *out, int n) {
        int *buf;
        if (cudaMalloc((void **)&buf, n * sizeof(int)) != cudaSuccess) { out[0] = -1; return; }
        for (int i = 0; i < n; i++) buf[i] = i + 1;
        use<<<1, n>>>(buf, out, n);    // (the buffer outlives the parent: the child reads it)
    }
    extern "C" __global__ void alloc_free(int *out) {
        int *p;
        out[0] = cudaMalloc((void **)&p, 64);
        p[3] = 42;
        out[1] = p[3];
        out[2] = cudaFree(p);
    }
    """
    m = cpuify.RawModule(code=src, options=RDC)
    out = np.zeros(16, np.int32)
    m.get_function("k")((1,), (1,), (out, np.int32(16)))
    np.testing.assert_array_equal(out, 2 * np.arange(1, 17))
    out[:] = -5
    m.get_function("alloc_free")((1,), (1,), (out,))
    assert out[:3].tolist() == [0, 42, 0]


def test_a_failing_child_grid_fails_the_parent_launch_naming_the_child() -> None:
    src = r"""
    __global__ void child(int *p) { if (threadIdx.x == 3) __trap(); p[threadIdx.x] = 1; }
    extern "C" __global__ void parent(int *p) { if (threadIdx.x == 0) child<<<1, 8>>>(p); }
    """
    kernel = cpuify.RawModule(code=src, options=RDC).get_function("parent")
    with pytest.raises(KernelFailure, match=r"parent.*child grid of kernel '_Z5childPi'.*trap"):
        kernel((1,), (4,), (np.zeros(8, np.int32),))
    # a later launch runs normally
    ok = cpuify.RawModule(code=src.replace("if (threadIdx.x == 3) __trap();", ""),
                          options=RDC).get_function("parent")
    p = np.zeros(8, np.int32)
    ok((1,), (4,), (p,))
    assert p.tolist() == [1] * 8


DEVICE_SYNC_PTX = """
.version 8.0
.target sm_80
.address_size 64
.extern .func (.param .b32 func_retval0) cudaDeviceSynchronize ();
.visible .entry waits(.param .u64 p)
{
    .reg .b32 %r<2>;
    { .param .b32 retval0;
      call.uni (retval0), cudaDeviceSynchronize, ();
      ld.param.b32 %r1, [retval0+0]; }
    ret;
}
"""


def test_device_side_synchronize_is_refused_clearly() -> None:
    module = parse_ptx(DEVICE_SYNC_PTX)
    with pytest.raises(UnsupportedError, match=r"cudaDeviceSynchronize\(\) in device code.*CUDA 12 removed it"):
        lift_kernel(module, module.functions["waits"])


def test_a_kernel_launching_a_refused_kernel_is_refused_naming_both() -> None:
    src = r"""
    __global__ void child(int *p) { asm volatile("griddepcontrol.wait;"); p[threadIdx.x] = 1; }
    extern "C" __global__ void parent(int *p) { child<<<1, 64>>>(p); }
    extern "C" __global__ void fine(int *p) { p[threadIdx.x] = 2; }
    """
    m = cpuify.RawModule(code=src, options=RDC)
    with pytest.raises(UnsupportedError, match=r"parent.*launches kernel '_Z5childPi' from device code, "
                                               r"which cannot run on the CPU"):
        m.get_function("parent")
    p = np.zeros(4, np.int32)
    m.get_function("fine")((1,), (4,), (p,))
    assert p.tolist() == [2] * 4


RECURSIVE_LAUNCHES = r"""
__global__ void mark(int *p, int i) { p[i] = i * 10 + threadIdx.x; }
// a recursion that launches a grid at each level; at level 5 a launch CUDA refuses: the
// error is the thread's, seen after the recursion returns (no frame keeps an older one)
__device__ int down(int *p, int *seen, int n) {
    if (n == 0) return 0;
    if (n == 5) mark<<<1, 4096>>>(p, n);
    else mark<<<1, 1>>>(p, n);
    int r = down(p, seen, n - 1);
    if (n == 8) *seen = cudaPeekAtLastError();      // the error of level 5, below
    return r * 2 + n;
}
extern "C" __global__ void k(int *p, int *out) {
    out[0] = down(p, out + 3, 10);
    out[1] = cudaGetLastError();
    out[2] = cudaGetLastError();
}
"""


@EXECUTORS
def test_grids_launched_from_a_recursion(executor: str) -> None:
    p = np.zeros(11, np.int32)
    out = np.zeros(4, np.int32)
    _run(executor, RECURSIVE_LAUNCHES, "k", (1,), (1,), (p, out))
    r = 0
    for n in range(1, 11):
        r = r * 2 + n
    assert out.tolist() == [r, 9, 0, 9]
    assert p.tolist() == [0] + [n * 10 if n != 5 else 0 for n in range(1, 11)]


def test_a_child_with_a_launch_prologue() -> None:
    # the child's invariant sum is hoisted out of its grid (parallel-licm): the child's launch
    # from device code runs that prologue first, as a host launch does
    src = r"""
    __device__ float total(const float *x, int n) { float s = 0; for (int i = 0; i < n; i++) s += x[i]; return s; }
    __global__ void normalize(const float *x, float *y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        float t = total(x, n);
        if (i < n) y[i] = x[i] / t;
    }
    extern "C" __global__ void parent(const float *x, float *y, int n) {
        normalize<<<(n + 63) / 64, 64>>>(x, y, n);
    }
    """
    n = 1000
    x = np.random.default_rng(2).random(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    m = cpuify.RawModule(code=src, options=RDC)
    m.get_function("parent")((1,), (1,), (x, y, np.int32(n)))
    assert m.module._compiled.kernels["_Z9normalizePKfPfi"].prologue_symbol
    s = np.float32(0)
    for v in x:
        s = np.float32(s + v)
    np.testing.assert_array_equal(y, x / s)
