"""Program structure: __constant__ and __device__ variables through get_global, state kept
across launches, device-function call chains (noinline, with barriers inside), templates
instantiated through name_expressions, structs passed by value."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify

GLOBALS_SRC = r'''
__constant__ float coeffs[4];                  // set from the host
__constant__ int offsets[3] = {10, 20, 30};    // initialized in the source
__device__ float scratch[512];
__device__ int launches = 5;
__device__ unsigned long long total;

// Horner evaluation of coeffs[0] + coeffs[1] x + coeffs[2] x^2 + coeffs[3] x^3
extern "C" __global__ void poly(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = ((coeffs[3] * v + coeffs[2]) * v + coeffs[1]) * v + coeffs[0];
    }
}

extern "C" __global__ void add_offsets(int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i + offsets[i % 3];
}

// first launch: fill the __device__ buffer; second launch: consume it
extern "C" __global__ void produce(const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) scratch[i] = x[i] * 2.0f;
    if (i == 0) launches += 1;
}

extern "C" __global__ void consume(float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = scratch[n - 1 - i] + (float)launches;
        atomicAdd(&total, (unsigned long long)i);
    }
}
'''

CALLS_SRC = r'''
// a block-wide sum in a separate (not inlined) function, barriers inside
__noinline__ __device__ float block_sum(float v, float *s) {
    int t = threadIdx.x;
    s[t] = v;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    float r = s[0];
    __syncthreads();          // everybody has read s[0] before s is reused
    return r;
}

__noinline__ __device__ float normalize(float v, float *s) {
    float total = block_sum(v, s);
    return v / total;
}

__noinline__ __device__ float level3(float v, float *s) {
    float a = normalize(v, s);
    float b = block_sum(a * a, s);      // a second barrier-containing call
    return a + b;
}

extern "C" __global__ void call_chain_with_barriers(const float *x, float *y) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = level3(x[i], s);
}

'''

# kept apart from the barrier-containing calls above so each feature is tested alone
CHAIN_SRC = r'''
// a deep, recursion-free chain of noinline functions
__noinline__ __device__ int f7(int x) { return x * 3 + 1; }
__noinline__ __device__ int f6(int x) { return f7(x) ^ (x << 1); }
__noinline__ __device__ int f5(int x) { return f6(x) - f7(x - 1); }
__noinline__ __device__ int f4(int x) { return f5(x) + f6(x >> 1); }
__noinline__ __device__ int f3(int x) { return x & 1 ? f4(x) : f5(x) * 2; }
__noinline__ __device__ int f2(int x) { int s = 0; for (int k = 0; k < 3; ++k) s += f3(x + k); return s; }
__noinline__ __device__ int f1(int x) { return f2(x) + f3(x) + f4(x); }

extern "C" __global__ void deep_chain(const int *x, int *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = f1(x[i]);
}

// a device function taking pointers and a reference-like out param, plus a struct return
struct MinMax { float lo, hi; };
__noinline__ __device__ MinMax range_of(const float *p, int len, int *argmax) {
    MinMax r = {p[0], p[0]};
    *argmax = 0;
    for (int k = 1; k < len; ++k) {
        if (p[k] < r.lo) r.lo = p[k];
        if (p[k] > r.hi) { r.hi = p[k]; *argmax = k; }
    }
    return r;
}

extern "C" __global__ void row_ranges(const float *m, int cols, float *lo, float *hi, int *am) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    int a;
    MinMax mm = range_of(m + r * cols, cols, &a);
    lo[r] = mm.lo; hi[r] = mm.hi; am[r] = a;
}
'''

TEMPLATE_SRC = r'''
template <typename T, int BS>
__global__ void block_reduce(const T *x, T *out, int n) {
    __shared__ T s[BS];
    int t = threadIdx.x;
    T acc = T(0);
    for (int i = blockIdx.x * BS + t; i < n; i += BS * gridDim.x) acc += x[i];
    s[t] = acc;
    __syncthreads();
    #pragma unroll
    for (int k = BS / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

template <typename T> __device__ T twice(T v) { return v + v; }

template <typename T>
__global__ void axpy(T a, const T *x, T *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + twice(y[i]);
}

namespace ns {
template <int K> __global__ void scale_by(int *v) { v[threadIdx.x] *= K; }
}
'''

STRUCT_SRC = r'''
struct Params { float x; int n; double d; };
struct Mixed { char c; short s; int a[3]; double w; float3 v; };

extern "C" __global__ void use_params(Params p, double *out, int len) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < len) out[i] = (double)(p.x * (float)i) + (double)(p.n * i) + p.d;
}

extern "C" __global__ void use_mixed(int k, Mixed m, double *out) {
    int t = threadIdx.x;
    out[t] = (double)m.c + m.s + m.a[t % 3] + m.w * t + m.v.x + m.v.y * 10.0 + m.v.z * 100.0 + k;
}
'''

PARAMS_DT = np.dtype([("x", np.float32), ("n", np.int32), ("d", np.float64)], align=True)
MIXED_DT = np.dtype([("c", np.int8), ("s", np.int16), ("a", np.int32, 3), ("w", np.float64),
                     ("v", np.float32, 3)], align=True)


@pytest.fixture(scope="module")
def gmod():
    return cpuify.RawModule(code=GLOBALS_SRC)


@pytest.fixture(scope="module")
def calls():
    return cpuify.RawModule(code=CALLS_SRC)


@pytest.fixture(scope="module")
def chain():
    return cpuify.RawModule(code=CHAIN_SRC)


@pytest.fixture(scope="module")
def tmpl():
    return cpuify.RawModule(code=TEMPLATE_SRC, name_expressions=(
        "block_reduce<float, 128>", "block_reduce<double, 256>", "block_reduce<int, 64>",
        "axpy<float>", "axpy<double>", "ns::scale_by<7>", "ns::scale_by<-3>"))


@pytest.fixture(scope="module")
def smod():
    return cpuify.RawModule(code=STRUCT_SRC)


def test_constant_memory_set_via_get_global(gmod, rng):
    c = gmod.get_global("coeffs", dtype=np.float32)
    assert c.shape == (4,)
    x = rng.standard_normal(300).astype(np.float32)
    y = np.zeros_like(x)
    for coefs in ([1, 2, 3, 4], [0.5, -1, 0, 0.25]):
        c[:] = coefs
        gmod.get_function("poly")((3,), (128,), (x, y, np.int32(x.size)))
        a = np.float32(coefs)
        # Horner steps in float32; the kernel may fuse each step into an fma
        ref = ((a[3] * x.astype(np.float64) + a[2]) * x + a[1]) * x + a[0]
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_constant_initializer_and_host_update(gmod):
    off = gmod.get_global("offsets", dtype=np.int32)
    np.testing.assert_array_equal(off, [10, 20, 30])
    out = np.zeros(10, np.int32)
    gmod.get_function("add_offsets")((1,), (32,), (out, np.int32(10)))
    np.testing.assert_array_equal(out, np.arange(10) + np.array([10, 20, 30])[np.arange(10) % 3])
    off[1] = -100
    gmod.get_function("add_offsets")((1,), (32,), (out, np.int32(10)))
    np.testing.assert_array_equal(out, np.arange(10) + np.array([10, -100, 30])[np.arange(10) % 3])
    off[1] = 20


def test_device_globals_across_two_launches(gmod, rng):
    n = 500
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    launches = gmod.get_global("launches", dtype=np.int32)
    total = gmod.get_global("total", dtype=np.uint64)
    start = int(launches[0])
    assert start == 5                                # the initializer
    total[0] = 0
    gmod.get_function("produce")((4,), (128,), (x, np.int32(n)))
    assert launches[0] == start + 1                  # written by the kernel, seen by the host
    gmod.get_function("consume")((4,), (128,), (y, np.int32(n)))
    np.testing.assert_array_equal(y, (x * 2)[::-1] + np.float32(start + 1))
    assert total[0] == n * (n - 1) // 2
    scratch = gmod.get_global("scratch", dtype=np.float32)
    np.testing.assert_array_equal(scratch[:n], x * 2)
    scratch[:n] = 1.0                                # host writes are seen by the next launch
    gmod.get_function("consume")((4,), (128,), (y, np.int32(n)))
    np.testing.assert_array_equal(y, np.full(n, start + 2, np.float32))
    assert total[0] == n * (n - 1)


def test_get_global_unknown_name(gmod):
    with pytest.raises(LookupError):
        gmod.get_global("no_such_var")


def test_noinline_call_chain_with_syncthreads(calls, rng):
    nb, bs = 4, 256
    x = rng.random(nb * bs).astype(np.float32) + 0.5
    y = np.zeros_like(x)
    calls.get_function("call_chain_with_barriers")((nb,), (bs,), (x, y))
    xs = x.reshape(nb, bs).astype(np.float64)
    a = xs / xs.sum(axis=1, keepdims=True)
    ref = a + (a * a).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(y.reshape(nb, bs), ref, rtol=1e-5)


def _deep_ref(x):
    m = lambda v: ((v + 2**31) % 2**32) - 2**31      # int32 wrap
    f7 = lambda v: m(v * 3 + 1)
    f6 = lambda v: m(f7(v) ^ m(v << 1))
    f5 = lambda v: m(f6(v) - f7(v - 1))
    f4 = lambda v: m(f5(v) + f6(v >> 1))
    f3 = lambda v: f4(v) if v & 1 else m(f5(v) * 2)
    f2 = lambda v: m(sum(f3(v + k) for k in range(3)))
    f1 = lambda v: m(f2(v) + f3(v) + f4(v))
    return np.array([f1(int(v)) for v in x], np.int32)


FILE_SHARED_SRC = r'''
__shared__ float gs[256];                 // file-scope shared array used by a called function
__noinline__ __device__ float reversed(float v) {
    gs[threadIdx.x] = v;
    __syncthreads();
    float r = gs[blockDim.x - 1 - threadIdx.x];
    __syncthreads();
    return r;
}
extern "C" __global__ void twice_reversed(const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = reversed(x[i]) + reversed(2.0f * x[i] + 1.0f) * 10.0f;
}
'''


def test_noinline_function_with_barriers_and_file_scope_shared(rng):
    m = cpuify.RawModule(code=FILE_SHARED_SRC)
    nb, bs = 3, 256
    x = rng.integers(-100, 100, nb * bs).astype(np.float32)
    y = np.zeros_like(x)
    m.get_function("twice_reversed")((nb,), (bs,), (x, y))
    xr = x.reshape(nb, bs)[:, ::-1]
    np.testing.assert_array_equal(y.reshape(nb, bs), xr + (2 * xr + 1) * 10)


OPTIONS_SRC = r'''
#ifndef SCALE
#error "SCALE must be defined with -DSCALE=..."
#endif
template <int N> __global__ void fill(int *v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) v[i] = i * SCALE + OFFSET;
}
'''


@pytest.mark.parametrize("scale,offset", [(3, 0), (-2, 100)])
def test_macro_options_with_name_expressions(scale, offset):
    m = cpuify.RawModule(code=OPTIONS_SRC, options=(f"-DSCALE={scale}", f"-DOFFSET={offset}"),
               name_expressions=("fill<20>",))
    v = np.full(32, -1, np.int32)
    m.get_function("fill<20>")((1,), (32,), (v,))
    np.testing.assert_array_equal(v[:20], np.arange(20) * scale + offset)
    assert (v[20:] == -1).all()


def test_deep_noinline_call_chain(chain, rng):
    n = 300
    x = rng.integers(-10000, 10000, n, dtype=np.int32)
    y = np.zeros(n, np.int32)
    chain.get_function("deep_chain")((3,), (128,), (x, y, np.int32(n)))
    np.testing.assert_array_equal(y, _deep_ref(x))


def test_device_function_struct_return_and_out_param(chain, rng):
    rows, cols = 64, 37
    m = rng.standard_normal((rows, cols)).astype(np.float32)
    lo = np.zeros(rows, np.float32); hi = np.zeros(rows, np.float32); am = np.zeros(rows, np.int32)
    chain.get_function("row_ranges")((2,), (32,), (m, np.int32(cols), lo, hi, am))
    np.testing.assert_array_equal(lo, m.min(axis=1))
    np.testing.assert_array_equal(hi, m.max(axis=1))
    np.testing.assert_array_equal(am, m.argmax(axis=1))


@pytest.mark.parametrize("name,dtype,bs", [("block_reduce<float, 128>", np.float32, 128),
                                           ("block_reduce<double, 256>", np.float64, 256),
                                           ("block_reduce<int, 64>", np.int32, 64)])
def test_template_block_reduce(tmpl, rng, name, dtype, bs):
    n = 10_000
    x = rng.integers(-100, 100, n).astype(dtype)     # exact sums in every type
    nb = 7
    out = np.zeros(nb, dtype)
    tmpl.get_function(name)((nb,), (bs,), (x, out, np.int32(n)))
    assert out.sum() == x.astype(np.float64).sum()
    ref = [x[np.concatenate([np.arange(s, min(s + bs, n)) for s in range(b * bs, n, nb * bs)])].sum()
           for b in range(nb)]
    np.testing.assert_array_equal(out, np.array(ref, dtype))


@pytest.mark.parametrize("dtype,name", [(np.float32, "axpy<float>"), (np.float64, "axpy<double>")])
def test_template_axpy_float_and_double(tmpl, rng, dtype, name):
    n = 1000
    x = rng.standard_normal(n).astype(dtype)
    y = rng.standard_normal(n).astype(dtype)
    y0 = y.copy()
    tmpl.get_function(name)((4,), (256,), (dtype(0.75), x, y, np.int32(n)))
    # a*x + 2y is one fma on the GPU: compare with a tolerance of a few ulps
    ref = 0.75 * x.astype(np.float64) + 2 * y0.astype(np.float64)
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(y, ref, rtol=tol, atol=tol)


def test_template_non_type_params_in_namespace(tmpl):
    v = np.arange(16, dtype=np.int32)
    tmpl.get_function("ns::scale_by<7>")((1,), (16,), (v,))
    np.testing.assert_array_equal(v, np.arange(16) * 7)
    tmpl.get_function("ns::scale_by<-3>")((1,), (16,), (v,))
    np.testing.assert_array_equal(v, np.arange(16) * -21)


def test_struct_by_value_aligned_dtype(smod):
    assert PARAMS_DT.itemsize == 16
    p = np.zeros((), PARAMS_DT)[()]
    p["x"], p["n"], p["d"] = 1.5, -3, 0.125
    n = 200
    out = np.zeros(n, np.float64)
    smod.get_function("use_params")((2,), (128,), (p, out, np.int32(n)))
    i = np.arange(n)
    np.testing.assert_array_equal(out, (np.float32(1.5) * i.astype(np.float32)).astype(np.float64)
                                  - 3.0 * i + 0.125)
    # the same struct given as raw bytes
    out2 = np.zeros(n, np.float64)
    smod.get_function("use_params")((2,), (128,), (p.tobytes(), out2, np.int32(n)))
    np.testing.assert_array_equal(out2, out)


def test_struct_with_array_and_vector_members(smod):
    m = np.zeros((), MIXED_DT)[()]
    m["c"], m["s"], m["a"], m["w"], m["v"] = -7, 1000, [1, 2, 3], 0.5, [1.0, 2.0, 3.0]
    out = np.zeros(6, np.float64)
    smod.get_function("use_mixed")((1,), (6,), (np.int32(9), m, out))
    t = np.arange(6)
    np.testing.assert_array_equal(out, -7 + 1000 + np.array([1, 2, 3])[t % 3] + 0.5 * t
                                  + 1 + 20 + 300 + 9)


def test_struct_wrong_size_rejected(smod):
    out = np.zeros(4, np.float64)
    with pytest.raises(ValueError):
        smod.get_function("use_params")((1,), (4,), (b"\0" * 12, out, np.int32(4)))
