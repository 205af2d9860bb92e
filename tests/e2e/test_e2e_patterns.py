"""Common real-world kernel patterns: vector loads/stores, arrays of structs, convergence
loops with barriers and a shared flag, do/while(__syncthreads_or), static + dynamic shared
memory together, barriers in functions called from loops, 3-D blocks with shared memory,
per-thread stack arrays in 1024-thread blocks, functor templates, 64-bit atomics."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify

SRC = r'''
extern "C" __global__ void vec_types(const float4 *a, const int2 *b, const double2 *c,
                                     const uchar4 *d, float4 *fo, int2 *io, double2 *dout,
                                     uchar4 *uo, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float4 v = a[i];
    fo[i] = make_float4(v.w, v.z * 2.0f, v.y + 1.0f, v.x - v.w);
    int2 w = __ldg(&b[i]);
    io[i] = make_int2(w.x + w.y, w.x - w.y);
    double2 q = c[i];
    dout[i] = make_double2(q.y, q.x * 0.5);
    uchar4 u = d[i];
    uo[i] = make_uchar4(u.w, u.z, u.y, (unsigned char)(u.x + 1));
}

struct Particle { float x, y, z; float vx, vy, vz; int id; float mass; };

extern "C" __global__ void step_particles(Particle *p, int n, float dt, float *energy) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    Particle q = p[i];
    q.x += q.vx * dt; q.y += q.vy * dt; q.z += q.vz * dt;
    q.vy -= 9.8f * dt;
    q.id = -q.id;
    p[i] = q;
    atomicAdd(energy, 0.5f * q.mass * (q.vx * q.vx + q.vy * q.vy + q.vz * q.vz));
}

// Jacobi-style relaxation in shared memory until nothing changes (flag in shared memory,
// uniform break out of a loop that contains barriers)
extern "C" __global__ void relax_until_stable(int *data, int *iterations) {
    __shared__ int v[256];
    __shared__ int changed;
    int t = threadIdx.x, n = blockDim.x;
    v[t] = data[blockIdx.x * n + t];
    int it = 0;
    while (true) {
        if (t == 0) changed = 0;
        __syncthreads();
        int left = t > 0 ? v[t - 1] : v[t];
        int right = t < n - 1 ? v[t + 1] : v[t];
        int m = max(v[t], max(left, right) - 1);
        __syncthreads();
        if (m != v[t]) { v[t] = m; changed = 1; }
        __syncthreads();
        ++it;
        int c = changed;
        __syncthreads();          // everybody has read the flag before thread 0 clears it
        if (!c) break;
    }
    data[blockIdx.x * n + t] = v[t];
    if (t == 0) iterations[blockIdx.x] = it;
}

// label propagation: do { ... } while (__syncthreads_or(changed))
extern "C" __global__ void min_label(const int *next, int *label) {
    __shared__ int lab[256];
    int t = threadIdx.x;
    lab[t] = t;
    __syncthreads();
    int changed;
    do {
        int nb = next[blockIdx.x * blockDim.x + t];
        int mine = lab[t], other = lab[nb];
        __syncthreads();
        changed = 0;
        if (other < mine) { atomicMin(&lab[t], other); changed = 1; }
        if (mine < other) { atomicMin(&lab[nb], mine); changed = 1; }
    } while (__syncthreads_or(changed));
    label[blockIdx.x * blockDim.x + t] = lab[t];
}

// static and dynamic shared memory in the same kernel
extern "C" __global__ void static_and_dynamic(const float *x, float *y) {
    __shared__ float stat[64];
    extern __shared__ float dyn[];
    int t = threadIdx.x;
    stat[t % 64] = 1.0f;
    dyn[t] = x[blockIdx.x * blockDim.x + t];
    __syncthreads();
    stat[t % 64] = (float)(t % 64);
    __syncthreads();
    y[blockIdx.x * blockDim.x + t] = __fmul_rn(dyn[blockDim.x - 1 - t], 10.0f) + stat[(t + 1) % 64];
}

__device__ int block_exclusive_scan(int v, int *s) {   // barriers inside, called in a loop
    int t = threadIdx.x;
    s[t] = v;
    __syncthreads();
    for (int off = 1; off < blockDim.x; off <<= 1) {
        int a = t >= off ? s[t - off] : 0;
        __syncthreads();
        s[t] += a;
        __syncthreads();
    }
    int r = s[t] - v;
    __syncthreads();
    return r;
}

extern "C" __global__ void multi_pass_scan(const int *x, int *out, int passes) {
    __shared__ int s[512];
    int t = threadIdx.x;
    int v = x[blockIdx.x * blockDim.x + t];
    for (int p = 0; p < passes; ++p)
        v = block_exclusive_scan(v, s) + 1;
    out[blockIdx.x * blockDim.x + t] = v;
}

// 3-D block: sum along z for every (x, y) column through shared memory
extern "C" __global__ void reduce_z(const float *in, float *out) {
    __shared__ float s[8][8][8];
    int x = threadIdx.x, y = threadIdx.y, z = threadIdx.z;
    int bx = blockIdx.x;
    s[z][y][x] = in[((bx * 8 + z) * 8 + y) * 8 + x];
    __syncthreads();
    for (int k = 4; k > 0; k >>= 1) {
        if (z < k) s[z][y][x] += s[z + k][y][x];
        __syncthreads();
    }
    if (z == 0) out[(bx * 8 + y) * 8 + x] = s[0][y][x];
}

// 1024 threads, each with a 32-entry stack array that lives across barriers
extern "C" __global__ void big_local(const int *x, int *out) {
    __shared__ int s[1024];
    int t = threadIdx.x;
    int a[32];
    for (int k = 0; k < 32; ++k) a[k] = x[t] * k + t;
    s[t] = a[t % 32];
    __syncthreads();
    int other = s[(t + 100) % blockDim.x];
    __syncthreads();
    for (int k = 0; k < 32; ++k) a[(k * 7) % 32] += other ^ k;
    int r = 0;
    for (int k = 0; k < 32; ++k) r += a[k] * (k + 1);
    out[t] = r;
}

extern "C" __global__ void atomics64(const long long *x, const unsigned long long *u, int n,
                                     long long *mm, unsigned long long *umm, double *dsum) {
    __shared__ double sd;
    if (threadIdx.x == 0) sd = 0.0;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicMax(&mm[0], x[i]);
        atomicMin(&mm[1], x[i]);
        atomicMax(&umm[0], u[i]);
        atomicMin(&umm[1], u[i]);
        atomicAnd(&umm[2], u[i] | 0xF0F0F0F0F0F0F0F0ull);
        atomicAdd(&sd, (double)(x[i] % 1000));
    }
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(dsum, sd);
}

extern "C" __global__ void no_params_kernel() {
    __threadfence();
    __threadfence_block();
}

extern "C" __global__ void clock_and_fences(long long *dt, int *flag) {
    long long t0 = clock64();
    __threadfence();
    atomicExch(flag, 1);
    __threadfence_system();
    long long t1 = clock64();
    dt[threadIdx.x] = t1 - t0;
}
'''

FUNCTOR_SRC = r'''
struct Square { __device__ float operator()(float v) const { return v * v; } };
struct AddK { float k; __device__ float operator()(float v) const { return v + k; } };
template <typename F> __global__ void map(F f, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = f(x[i]);
}
'''


@pytest.fixture(scope="module")
def mod():
    return cpuify.RawModule(code=SRC)


def test_vector_type_loads_and_stores(mod, rng):
    n = 300
    a = rng.standard_normal((n, 4)).astype(np.float32)
    b = rng.integers(-10**6, 10**6, (n, 2), dtype=np.int32)
    c = rng.standard_normal((n, 2))
    d = rng.integers(0, 256, (n, 4), dtype=np.uint8)
    fo = np.zeros_like(a); io = np.zeros_like(b); do = np.zeros_like(c); uo = np.zeros_like(d)
    mod.get_function("vec_types")((3,), (128,), (a, b, c, d, fo, io, do, uo, np.int32(n)))
    np.testing.assert_array_equal(fo, np.stack([a[:, 3], a[:, 2] * 2, a[:, 1] + 1, a[:, 0] - a[:, 3]], 1))
    np.testing.assert_array_equal(io, np.stack([b[:, 0] + b[:, 1], b[:, 0] - b[:, 1]], 1))
    np.testing.assert_array_equal(do, np.stack([c[:, 1], c[:, 0] * 0.5], 1))
    np.testing.assert_array_equal(uo, np.stack([d[:, 3], d[:, 2], d[:, 1], d[:, 0] + np.uint8(1)], 1))


PARTICLE = np.dtype([("x", "f4"), ("y", "f4"), ("z", "f4"), ("vx", "f4"), ("vy", "f4"),
                     ("vz", "f4"), ("id", "i4"), ("mass", "f4")], align=True)


def test_array_of_structs(mod, rng):
    n = 500
    p = np.zeros(n, PARTICLE)
    for f in ("x", "y", "z", "vx", "vy", "vz"):
        p[f] = rng.standard_normal(n)
    p["id"] = np.arange(n)
    p["mass"] = rng.integers(1, 4, n)
    p0 = p.copy()
    energy = np.zeros(1, np.float32)
    dt = np.float32(0.125)
    mod.get_function("step_particles")((4,), (128,), (p, np.int32(n), dt, energy))
    for f in ("x", "y", "z"):
        # x + vx*dt may be fused into one fma: allow an ulp
        np.testing.assert_allclose(p[f], p0[f] + p0["v" + f] * dt, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(p["vy"], p0["vy"] - np.float32(9.8) * dt, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(p["vx"], p0["vx"])
    np.testing.assert_array_equal(p["id"], -np.arange(n))
    np.testing.assert_array_equal(p["mass"], p0["mass"])
    ke = 0.5 * p["mass"].astype(np.float64) * (p["vx"].astype(np.float64) ** 2 + p["vy"] ** 2 + p["vz"] ** 2)
    np.testing.assert_allclose(energy[0], ke.sum(), rtol=1e-4)


def test_convergence_loop_with_shared_flag(mod, rng):
    nb, bs = 3, 256
    data = np.zeros(nb * bs, np.int32)
    peaks = {0: [(10, 50)], 1: [(0, 5), (200, 120)], 2: []}
    for b, pk in peaks.items():
        for pos, h in pk:
            data[b * bs + pos] = h
    its = np.zeros(nb, np.int32)
    mod.get_function("relax_until_stable")((nb,), (bs,), (data, its))
    pos = np.arange(bs)
    for b, pk in peaks.items():
        exp = np.zeros(bs, np.int64)
        for p_, h in pk:
            exp = np.maximum(exp, h - np.abs(pos - p_))
        np.testing.assert_array_equal(data[b * bs:(b + 1) * bs], exp, err_msg=f"block {b}")
    # one sweep per unit of the tallest slope, plus the final sweep that changes nothing
    assert its[2] == 1
    assert its[0] == 50 and its[1] == 120


def test_do_while_syncthreads_or_label_propagation(mod, rng):
    nb, bs = 2, 256
    # block 0: four chains of 64; block 1: random pairing
    nxt = np.zeros(nb * bs, np.int32)
    t = np.arange(bs)
    nxt[:bs] = np.where(t % 64 == 63, t, t + 1)
    nxt[bs:] = rng.permutation(bs)
    lab = np.zeros(nb * bs, np.int32)
    mod.get_function("min_label")((nb,), (bs,), (nxt, lab))
    for b in range(nb):
        nx = nxt[b * bs:(b + 1) * bs]
        parent = list(range(bs))

        def find(a):
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a
        for a in range(bs):
            ra, rb = find(a), find(int(nx[a]))
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
        comp_min = {}
        for a in range(bs):
            r = find(a)
            comp_min[r] = min(comp_min.get(r, a), a)
        exp = [comp_min[find(a)] for a in range(bs)]
        np.testing.assert_array_equal(lab[b * bs:(b + 1) * bs], exp, err_msg=f"block {b}")


@pytest.mark.parametrize("bs", [64, 200])
def test_static_and_dynamic_shared_together(mod, rng, bs):
    nb = 2
    x = rng.standard_normal(nb * bs).astype(np.float32)
    y = np.zeros_like(x)
    mod.get_function("static_and_dynamic")((nb,), (bs,), (x, y), shared_mem=bs * 4)
    t = np.arange(bs)
    exp = x.reshape(nb, bs)[:, ::-1] * np.float32(10) + ((t + 1) % 64).astype(np.float32)
    np.testing.assert_array_equal(y.reshape(nb, bs), exp)


@pytest.mark.parametrize("bs,passes", [(32, 1), (512, 3), (100, 2)])
def test_barrier_function_called_in_loop(mod, rng, bs, passes):
    nb = 2
    x = rng.integers(0, 10, nb * bs, dtype=np.int32)
    out = np.zeros_like(x)
    mod.get_function("multi_pass_scan")((nb,), (bs,), (x, out, np.int32(passes)))
    v = x.reshape(nb, bs).astype(np.int64)
    for _ in range(passes):
        v = np.cumsum(v, axis=1) - v + 1
    np.testing.assert_array_equal(out.reshape(nb, bs), v)


def test_3d_block_shared_reduction(mod, rng):
    nb = 3
    a = rng.integers(-100, 100, (nb, 8, 8, 8)).astype(np.float32)   # [block][z][y][x]
    out = np.zeros((nb, 8, 8), np.float32)
    mod.get_function("reduce_z")((nb,), (8, 8, 8), (a, out))
    np.testing.assert_array_equal(out, a.sum(axis=1))


def test_1024_threads_with_stack_arrays_across_barrier(mod, rng):
    bs = 1024
    x = rng.integers(-1000, 1000, bs, dtype=np.int32)
    out = np.zeros_like(x)
    mod.get_function("big_local")((1,), (bs,), (x, out))
    t = np.arange(bs, dtype=np.int64)
    k = np.arange(32, dtype=np.int64)
    a = x[:, None].astype(np.int64) * k[None, :] + t[:, None]
    s = a[t, t % 32]
    other = s[(t + 100) % bs]
    for kk in range(32):
        a[:, (kk * 7) % 32] += other ^ kk
    exp = (a * (k + 1)).sum(axis=1)
    np.testing.assert_array_equal(out, exp.astype(np.int32))


def test_64bit_atomics_and_shared_double_add(mod, rng):
    n = 2000
    x = rng.integers(-2**62, 2**62, n, dtype=np.int64)
    u = rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2)
    mm = np.array([-2**63, 2**63 - 1], np.int64)
    umm = np.array([0, 2**64 - 1, 2**64 - 1], np.uint64)
    dsum = np.zeros(1)
    mod.get_function("atomics64")(((n + 255) // 256,), (256,), (x, u, np.int32(n), mm, umm, dsum))
    assert mm[0] == x.max() and mm[1] == x.min()
    assert umm[0] == u.max() and umm[1] == u.min()
    assert umm[2] == np.bitwise_and.reduce(u | np.uint64(0xF0F0F0F0F0F0F0F0))
    assert dsum[0] == np.fmod(x, 1000).sum()           # small integers: exact in any order


def test_kernel_without_params_and_fences(mod):
    mod.get_function("no_params_kernel")((4,), (32,), ())
    dt = np.full(64, -1, np.int64)
    flag = np.zeros(1, np.int32)
    mod.get_function("clock_and_fences")((1,), (64,), (dt, flag))
    assert flag[0] == 1
    assert (dt >= 0).all(), "clock64() went backwards"


def test_functor_template_name_expressions(rng):
    m = cpuify.RawModule(code=FUNCTOR_SRC, name_expressions=("map<Square>", "map<AddK>"))
    x = rng.standard_normal(100).astype(np.float32)
    y = np.zeros_like(x)
    m.get_function("map<Square>")((1,), (128,), (np.zeros((), np.uint8).tobytes(), x, y, np.int32(100)))
    np.testing.assert_array_equal(y, x * x)
    addk = np.array(2.5, np.float32).tobytes()
    m.get_function("map<AddK>")((1,), (128,), (addk, x, y, np.int32(100)))
    np.testing.assert_array_equal(y, x + np.float32(2.5))
