"""Recursive device functions (direct, mutual, through function pointers) on a call stack per
thread, checked against hand computation (Python) and the reference interpreter; a too deep
recursion fails its launch with a stack overflow naming the kernel; a barrier or warp
collective inside a recursion is refused naming the function."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import cpuify
import cpuify.interp.thread as interp_thread
from cpuify.errors import KernelFailure, LaunchError, UnsupportedError
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.interp import interpret_kernel

RECURSIVE = r"""
__device__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__device__ long long fact(int n) { return n <= 1 ? 1 : n * fact(n - 1); }
__device__ bool is_odd(int n);
__device__ bool is_even(int n) { return n == 0 ? true : is_odd(n - 1); }
__device__ bool is_odd(int n) { return n == 0 ? false : is_even(n - 1); }
// quicksort of a thread's own array (in the kernel's local memory)
__device__ void quicksort(int *a, int lo, int hi) {
    if (lo >= hi) return;
    int p = a[(lo + hi) / 2], i = lo, j = hi;
    while (i <= j) {
        while (a[i] < p) i++;
        while (a[j] > p) j--;
        if (i <= j) { int t = a[i]; a[i] = a[j]; a[j] = t; i++; j--; }
    }
    quicksort(a, lo, j);
    quicksort(a, i, hi);
}
// a local array per activation, its element updated from the deeper call
__device__ int frames(int n) {
    int buf[4];
    for (int k = 0; k < 4; k++) buf[k] = n * k;
    if (n > 0) buf[n & 3] += frames(n - 1);
    int s = 0;
    for (int k = 0; k < 4; k++) s += buf[k];
    return s;
}
// a tree in an array: node i has children 2i+1, 2i+2; depth-first sum of the values
__device__ float tree_sum(const float *tree, int node, int n) {
    if (node >= n) return 0.0f;
    return tree[node] + tree_sum(tree, 2 * node + 1, n) + tree_sum(tree, 2 * node + 2, n);
}
extern "C" __global__ void kernel(int *out, long long *f, int *a, const float *tree,
                                  float *sums, int n) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    out[t * 4] = fib(t % 16);
    f[t] = fact(t % 21);
    out[t * 4 + 1] = is_even(t % 32);
    out[t * 4 + 2] = frames(t % 7);
    int loc[10];
    for (int q = 0; q < 10; q++) loc[q] = a[t * 10 + q];
    quicksort(loc, 0, 9);
    for (int q = 0; q < 10; q++) a[t * 10 + q] = loc[q];
    sums[t] = tree_sum(tree, t % 5, 31);
}
"""


def _fib(n: int) -> int:
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


def _frames(n: int) -> int:
    buf = [n * k for k in range(4)]
    if n > 0:
        buf[n & 3] += _frames(n - 1)
    return sum(buf)


def _tree_sum(tree: np.ndarray, node: int) -> np.float32:
    if node >= len(tree):
        return np.float32(0)
    return np.float32(np.float32(tree[node] + _tree_sum(tree, 2 * node + 1)) + _tree_sum(tree, 2 * node + 2))


@functools.cache
def _ptx(src: str) -> str:
    return compile_to_ptx(src).ptx


def _inputs(n: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(7)
    a = rng.integers(-100, 100, n * 10).astype(np.int32)
    tree = rng.random(31).astype(np.float32)
    return (np.zeros(n * 4, np.int32), np.zeros(n, np.int64), a, tree, np.zeros(n, np.float32))


def _check(n: int, out: np.ndarray, f: np.ndarray, a: np.ndarray, a0: np.ndarray,
           tree: np.ndarray, sums: np.ndarray) -> None:
    t = np.arange(n)
    assert out[0::4].tolist() == [_fib(x % 16) for x in t]
    assert f.tolist() == [math.factorial(x % 21) for x in t]
    assert out[1::4].tolist() == [int(x % 32 % 2 == 0) for x in t]
    assert out[2::4].tolist() == [_frames(x % 7) for x in t]
    np.testing.assert_array_equal(a.reshape(n, 10), np.sort(a0.reshape(n, 10), axis=1))
    np.testing.assert_array_equal(sums, [_tree_sum(tree, x % 5) for x in t])


def test_recursive_functions_compiled() -> None:
    n = 100
    out, f, a, tree, sums = _inputs(n)
    a0 = a.copy()
    kernel = cpuify.RawModule(code=RECURSIVE).get_function("kernel")
    kernel((2,), (64,), (out, f, a, tree, sums, np.int32(n)))
    _check(n, out, f, a, a0, tree, sums)


def test_recursive_functions_interpreter_agrees() -> None:
    n = 24
    out, f, a, tree, sums = _inputs(n)
    a0 = a.copy()
    interpret_kernel(_ptx(RECURSIVE), "kernel", (1, 1, 1), (n, 1, 1),
                     (out, f, a, tree, sums, np.int32(n)))
    _check(n, out, f, a, a0, tree, sums)


POINTERS = r"""
// recursion through function pointers: an expression tree evaluated by a table of functions
struct Node { int op; int left; int right; int value; };
__device__ int eval(const Node *nodes, int i);
__device__ int leaf(const Node *nodes, int i) { return nodes[i].value; }
__device__ int add(const Node *nodes, int i) { return eval(nodes, nodes[i].left) + eval(nodes, nodes[i].right); }
__device__ int mul(const Node *nodes, int i) { return eval(nodes, nodes[i].left) * eval(nodes, nodes[i].right); }
typedef int (*evaluator)(const Node *, int);
__device__ evaluator table[3] = {leaf, add, mul};
__device__ int eval(const Node *nodes, int i) { return table[nodes[i].op](nodes, i); }
extern "C" __global__ void evaluate(const Node *nodes, const int *roots, int *out, int n) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) out[t] = eval(nodes, roots[t]);
}
"""


def _expression_tree(rng: np.random.Generator) -> tuple[np.ndarray, list[int]]:
    nodes: list[tuple[int, int, int, int]] = []

    def build(depth: int) -> int:
        if depth == 0 or rng.random() < 0.2:
            nodes.append((0, 0, 0, int(rng.integers(-5, 6))))
            return len(nodes) - 1
        i = len(nodes)
        nodes.append((0, 0, 0, 0))
        left, right = build(depth - 1), build(depth - 1)
        nodes[i] = (int(rng.integers(1, 3)), left, right, 0)
        return i

    roots = [build(int(rng.integers(0, 6))) for _ in range(40)]
    return np.array(nodes, np.int32), roots


def _evaluate(nodes: np.ndarray, i: int) -> int:
    op, left, right, value = (int(x) for x in nodes[i])
    if op == 0:
        return value
    a, b = _evaluate(nodes, left), _evaluate(nodes, right)
    r = a + b if op == 1 else a * b
    return (r + 2**31) % 2**32 - 2**31        # int arithmetic wraps around


@pytest.mark.parametrize("executor", ["compiled", "interpreter"])
def test_recursion_through_function_pointers(executor: str) -> None:
    nodes, roots = _expression_tree(np.random.default_rng(3))
    roots_a = np.array(roots, np.int32)
    n = len(roots)
    out = np.zeros(n, np.int32)
    args = (nodes, roots_a, out, np.int32(n))
    if executor == "compiled":
        cpuify.RawModule(code=POINTERS).get_function("evaluate")((1,), (64,), args)
    else:
        interpret_kernel(_ptx(POINTERS), "evaluate", (1, 1, 1), (64, 1, 1), args)
    assert out.tolist() == [_evaluate(nodes, r) for r in roots]


DEEP = r"""
__device__ int depth(int n) { if (n == 0) return 0; return depth(n - 1) * 3 + n; }
extern "C" __global__ void deep(int *out, int n) { out[threadIdx.x] = depth(n); }
"""


def _depth(n: int) -> int:
    r = 0
    for k in range(1, n + 1):
        r = (r * 3 + k) & 0xffffffff
    return r - 2**32 if r >= 2**31 else r


def test_stack_overflow_is_a_launch_error_naming_the_kernel() -> None:
    kernel = cpuify.RawModule(code=DEEP).get_function("deep")
    out = np.zeros(4, np.int32)
    kernel((1,), (4,), (out, np.int32(10)))
    assert out.tolist() == [_depth(10)] * 4
    with pytest.raises(KernelFailure, match=r"(?s)deep.*stack overflow.*set_stack_limit"):
        kernel((1,), (4,), (out, np.int32(100000)))
    old = cpuify.stack_limit()
    assert old == 1024          # CUDA's default cudaLimitStackSize
    try:
        cpuify.set_stack_limit(8 << 20)
        kernel((1,), (4,), (out, np.int32(100000)))
        assert out.tolist() == [_depth(100000)] * 4
    finally:
        cpuify.set_stack_limit(old)
    with pytest.raises(KernelFailure, match="stack overflow"):
        kernel((1,), (4,), (out, np.int32(100000)))


def test_stack_overflow_in_the_interpreter() -> None:
    out = np.zeros(2, np.int32)
    with pytest.raises(LaunchError, match="stack overflow"):
        interpret_kernel(_ptx(DEEP), "deep", (1, 1, 1), (2, 1, 1), (out, np.int32(5000)))
    old = interp_thread.CALL_STACK_SIZE
    try:
        interp_thread.CALL_STACK_SIZE = 1 << 20
        interpret_kernel(_ptx(DEEP), "deep", (1, 1, 1), (2, 1, 1), (out, np.int32(5000)))
    finally:
        interp_thread.CALL_STACK_SIZE = old
    assert out.tolist() == [_depth(5000)] * 2


def test_barrier_inside_a_recursion_is_refused_by_name() -> None:
    src = r"""
    __device__ int down(int *s, int n) {
        s[threadIdx.x] = n;
        __syncthreads();
        return n == 0 ? s[0] : down(s, n - 1) * 3 + s[threadIdx.x ^ 1];
    }
    extern "C" __global__ void k(int *out) {
        __shared__ int s[32];
        out[threadIdx.x] = down(s, 3);
    }
    """
    with pytest.raises(UnsupportedError, match=r"bar\.sync.*recursive device function '_Z4downPii'"):
        cpuify.RawModule(code=src).get_function("k")((1,), (32,), (np.zeros(32, np.int32),))


def test_warp_collective_inside_a_recursion_is_refused_by_name() -> None:
    src = r"""
    __device__ int down(int v, int n) {
        return n == 0 ? v : down(__shfl_xor_sync(0xffffffff, v, 1), n - 1) * 3 + v;
    }
    extern "C" __global__ void k(int *out) { out[threadIdx.x] = down(threadIdx.x, 3); }
    """
    with pytest.raises(UnsupportedError, match=r"shfl.*recursive device function '_Z4downii'"):
        cpuify.RawModule(code=src).get_function("k")((1,), (32,), (np.zeros(32, np.int32),))


BETWEEN_BARRIERS = r"""
// recursions between barriers, with the same arguments in every thread (a block-uniform
// recursion) and with per-thread ones; float results compared bit for bit
__device__ float tree_sum(const float *tree, int node, int n) {
    if (node >= n) return 0.0f;
    return tree[node] * 0.5f + tree_sum(tree, 2 * node + 1, n) * 1.5f + tree_sum(tree, 2 * node + 2, n);
}
__device__ float walk(const float *w, float acc, int k) {
    if (k == 0) return acc;
    float r = walk(w, acc * 0.75f + w[k], k - 1);
    return r * 1.25f - w[k];
}
extern "C" __global__ void k(const float *tree, float *out, float *out2) {
    __shared__ float s[64];
    s[threadIdx.x] = tree[threadIdx.x % 31];
    __syncthreads();
    // (each block its own elements: two blocks adding to one element would be a race)
    out[blockIdx.x * 64 + threadIdx.x] = tree_sum(tree, 0, 31) + s[(threadIdx.x + 1) % 64];
    out2[blockIdx.x * 64 + threadIdx.x] = walk(tree, threadIdx.x, 20 + threadIdx.x % 5);
    __syncthreads();
    out[blockIdx.x * 64 + threadIdx.x] += s[0];
}
"""


def test_recursion_between_barriers_matches_the_interpreter() -> None:
    tree = np.random.default_rng(0).random(31).astype(np.float32)
    got = (np.zeros(128, np.float32), np.zeros(128, np.float32))
    want = (np.zeros(128, np.float32), np.zeros(128, np.float32))
    cpuify.RawModule(code=BETWEEN_BARRIERS).get_function("k")((2,), (64,), (tree, *got))
    interpret_kernel(_ptx(BETWEEN_BARRIERS), "k", (2, 1, 1), (64, 1, 1), (tree, *want))
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    # and a hand computation of the block-uniform one
    expect = _tree_sum_scaled(tree, 0) + tree[np.arange(1, 65) % 64 % 31] + tree[0]
    np.testing.assert_allclose(got[0], np.tile(expect, 2), rtol=1e-5)


def _tree_sum_scaled(tree: np.ndarray, node: int) -> float:
    if node >= len(tree):
        return 0.0
    return float(tree[node]) * 0.5 + _tree_sum_scaled(tree, 2 * node + 1) * 1.5 + \
        _tree_sum_scaled(tree, 2 * node + 2)


def test_recursion_inside_a_loop_with_barriers() -> None:
    src = r"""
    __device__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
    extern "C" __global__ void k(int *out, int iters) {
        __shared__ int s[128];
        int acc = 0;
        for (int it = 0; it < iters; it++) {
            int x = fib((threadIdx.x + it) % 12);
            s[threadIdx.x] = x;
            __syncthreads();
            acc += s[(threadIdx.x + 1) % blockDim.x];
            __syncthreads();
        }
        out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
    }
    """
    out = np.zeros(256, np.int32)
    cpuify.RawModule(code=src).get_function("k")((2,), (128,), (out, np.int32(5)))
    expect = [sum(_fib(((t + 1) % 128 + it) % 12) for it in range(5)) for t in range(128)] * 2
    assert out.tolist() == expect


def test_cupy_device_limit_sets_the_stack_size() -> None:
    import cpuify.cupy as cp
    runtime = cp.cuda.runtime
    old = runtime.deviceGetLimit(runtime.cudaLimitStackSize)
    try:
        runtime.deviceSetLimit(runtime.cudaLimitStackSize, 4096)
        assert cpuify.stack_limit() == 4096
        assert runtime.deviceGetLimit(runtime.cudaLimitStackSize) == 4096
    finally:
        runtime.deviceSetLimit(runtime.cudaLimitStackSize, old)
    assert cpuify.stack_limit() == old
