"""Block-cooperative kernels with __shared__ memory and __syncthreads: tiled matmul,
reductions, scans, bitonic sort, transpose, stencils and dynamic shared memory."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify

SRC = r'''
#define TILE 16

// C[M x N] = A[M x K] * B[K x N], row-major, any sizes (bounds-checked tiles)
extern "C" __global__ void matmul_tiled(const float *A, const float *B, float *C,
                                        int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty;
    int col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ka = t * TILE + tx, kb = t * TILE + ty;
        As[ty][tx] = (row < M && ka < K) ? A[row * K + ka] : 0.0f;
        Bs[ty][tx] = (kb < K && col < N) ? B[kb * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k)
            acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N)
        C[row * N + col] = acc;
}

// one partial sum per block; blockDim.x is a power of two <= 1024
extern "C" __global__ void reduce_sum(const int *in, int *partial, int n) {
    __shared__ int sdata[1024];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x * 2 + threadIdx.x;
    int v = 0;
    if (i < n) v += in[i];
    if (i + blockDim.x < n) v += in[i + blockDim.x];
    sdata[tid] = v;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s)
            sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = sdata[0];
}

// max reduction with a float payload and the index of the maximum
extern "C" __global__ void reduce_argmax(const float *in, float *best, int *best_idx, int n) {
    __shared__ float sv[256];
    __shared__ int si[256];
    int tid = threadIdx.x;
    float v = -3.0e38f; int idx = -1;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x)
        if (in[i] > v) { v = in[i]; idx = i; }
    sv[tid] = v; si[tid] = idx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (tid < s) {
            float o = sv[tid + s]; int oi = si[tid + s];
            if (o > sv[tid] || (o == sv[tid] && oi >= 0 && oi < si[tid])) { sv[tid] = o; si[tid] = oi; }
        }
        __syncthreads();
    }
    if (tid == 0) { best[blockIdx.x] = sv[0]; best_idx[blockIdx.x] = si[0]; }
}

// inclusive scan of each block's blockDim.x elements, Hillis-Steele with double buffering
extern "C" __global__ void scan_hillis_steele(const int *in, int *out) {
    __shared__ int buf[2][1024];
    int tid = threadIdx.x;
    int base = blockIdx.x * blockDim.x;
    int pout = 0, pin = 1;
    buf[pout][tid] = in[base + tid];
    __syncthreads();
    for (int offset = 1; offset < blockDim.x; offset *= 2) {
        pout = 1 - pout; pin = 1 - pout;
        if (tid >= offset)
            buf[pout][tid] = buf[pin][tid] + buf[pin][tid - offset];
        else
            buf[pout][tid] = buf[pin][tid];
        __syncthreads();
    }
    out[base + tid] = buf[pout][tid];
}

// sorts 2*blockDim.x floats per block ascending (bitonic network, barriers in nested loops)
extern "C" __global__ void bitonic_sort(float *data) {
    __shared__ float s[2048];
    int tid = threadIdx.x;
    int n = 2 * blockDim.x;
    float *d = data + blockIdx.x * n;
    s[tid] = d[tid];
    s[tid + blockDim.x] = d[tid + blockDim.x];
    __syncthreads();
    for (int k = 2; k <= n; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = tid; i < n; i += blockDim.x) {
                int ixj = i ^ j;
                if (ixj > i) {
                    bool up = (i & k) == 0;
                    float a = s[i], b = s[ixj];
                    if ((a > b) == up) { s[i] = b; s[ixj] = a; }
                }
            }
            __syncthreads();
        }
    }
    d[tid] = s[tid];
    d[tid + blockDim.x] = s[tid + blockDim.x];
}

#define TDIM 32
#define BROWS 8
// out[cols x rows] = in[rows x cols]^T, 32x8 threads per 32x32 tile, padded shared tile
extern "C" __global__ void transpose(const float *in, float *out, int rows, int cols) {
    __shared__ float tile[TDIM][TDIM + 1];
    int x = blockIdx.x * TDIM + threadIdx.x;
    int y = blockIdx.y * TDIM + threadIdx.y;
    for (int j = 0; j < TDIM; j += BROWS)
        if (x < cols && y + j < rows)
            tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * cols + x];
    __syncthreads();
    x = blockIdx.y * TDIM + threadIdx.x;
    y = blockIdx.x * TDIM + threadIdx.y;
    for (int j = 0; j < TDIM; j += BROWS)
        if (x < rows && y + j < cols)
            out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}

// 5-point stencil with a 1-cell halo in shared memory; clamped borders
#define BS 16
extern "C" __global__ void stencil5(const float *in, float *out, int H, int W) {
    __shared__ float t[BS + 2][BS + 2];
    int lx = threadIdx.x + 1, ly = threadIdx.y + 1;
    int gx = blockIdx.x * BS + threadIdx.x, gy = blockIdx.y * BS + threadIdx.y;
    int cx = min(gx, W - 1), cy = min(gy, H - 1);
    t[ly][lx] = in[cy * W + cx];
    if (threadIdx.x == 0)      t[ly][0]      = in[cy * W + max(cx - 1, 0)];
    if (threadIdx.x == BS - 1) t[ly][BS + 1] = in[cy * W + min(cx + 1, W - 1)];
    if (threadIdx.y == 0)      t[0][lx]      = in[max(cy - 1, 0) * W + cx];
    if (threadIdx.y == BS - 1) t[BS + 1][lx] = in[min(cy + 1, H - 1) * W + cx];
    __syncthreads();
    if (gx < W && gy < H) {
        // at the partial right/bottom edge the neighbour inside the image is the clamped one
        float r = (gx + 1 < W) ? t[ly][lx + 1] : t[ly][lx];
        float d = (gy + 1 < H) ? t[ly + 1][lx] : t[ly][lx];
        out[gy * W + gx] = 4.0f * t[ly][lx] - t[ly][lx - 1] - r - t[ly - 1][lx] - d;
    }
}

// reverse each block's segment through dynamic shared memory
extern "C" __global__ void reverse_dyn(const float *in, float *out) {
    extern __shared__ float buf[];
    int tid = threadIdx.x, n = blockDim.x;
    buf[tid] = in[blockIdx.x * n + tid];
    __syncthreads();
    out[blockIdx.x * n + tid] = buf[n - 1 - tid];
}

// dynamic shared carved into a float array and an int array
extern "C" __global__ void carve_dyn(const float *in, float *out_f, int *out_i, int per_thread) {
    extern __shared__ unsigned char raw[];
    int nt = blockDim.x;
    float *fs = (float *)raw;
    int *is = (int *)(raw + nt * per_thread * sizeof(float));
    for (int k = 0; k < per_thread; ++k) {
        int j = k * nt + threadIdx.x;
        fs[j] = in[blockIdx.x * nt * per_thread + j];
        is[j] = j * 3;
    }
    __syncthreads();
    float acc = 0.0f; int iacc = 0;
    for (int k = 0; k < per_thread; ++k) {
        int j = k * nt + (nt - 1 - threadIdx.x);    // read what another thread wrote
        acc += fs[j]; iacc += is[j];
    }
    out_f[blockIdx.x * nt + threadIdx.x] = acc;
    out_i[blockIdx.x * nt + threadIdx.x] = iacc;
}
'''


# separate module: its indexing makes NVRTC emit negative address offsets ([%r+-4])
BLELLOCH_SRC = r'''
// exclusive scan of 2*blockDim.x elements per block, Blelloch (work-efficient)
extern "C" __global__ void scan_blelloch(const int *in, int *out, int *block_sums) {
    __shared__ int temp[2048];
    int tid = threadIdx.x;
    int n = 2 * blockDim.x;
    int base = blockIdx.x * n;
    temp[2 * tid] = in[base + 2 * tid];
    temp[2 * tid + 1] = in[base + 2 * tid + 1];
    int offset = 1;
    for (int d = n >> 1; d > 0; d >>= 1) {
        __syncthreads();
        if (tid < d) {
            int ai = offset * (2 * tid + 1) - 1;
            int bi = offset * (2 * tid + 2) - 1;
            temp[bi] += temp[ai];
        }
        offset *= 2;
    }
    if (tid == 0) { block_sums[blockIdx.x] = temp[n - 1]; temp[n - 1] = 0; }
    for (int d = 1; d < n; d *= 2) {
        offset >>= 1;
        __syncthreads();
        if (tid < d) {
            int ai = offset * (2 * tid + 1) - 1;
            int bi = offset * (2 * tid + 2) - 1;
            int t = temp[ai];
            temp[ai] = temp[bi];
            temp[bi] += t;
        }
    }
    __syncthreads();
    out[base + 2 * tid] = temp[2 * tid];
    out[base + 2 * tid + 1] = temp[2 * tid + 1];
}
'''


@pytest.fixture(scope="module")
def mod():
    return cpuify.RawModule(code=SRC)


@pytest.mark.parametrize("M,N,K", [(64, 64, 64), (128, 128, 128), (50, 37, 70), (17, 96, 1)])
def test_tiled_matmul(mod, rng, M, N, K):
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    C = np.full((M, N), np.nan, np.float32)
    mod.get_function("matmul_tiled")(((N + 15) // 16, (M + 15) // 16), (16, 16),
                                     (A, B, C, np.int32(M), np.int32(N), np.int32(K)))
    ref = A.astype(np.float64) @ B.astype(np.float64)
    # float32 accumulation over K terms in a different order than NumPy
    np.testing.assert_allclose(C, ref, rtol=1e-4, atol=1e-4 * np.sqrt(K))


@pytest.mark.parametrize("block", [32, 64, 256, 1024])
def test_tree_reduction_sum(mod, rng, block):
    n = 50_000
    x = rng.integers(-1000, 1000, n, dtype=np.int32)
    nblocks = (n + 2 * block - 1) // (2 * block)
    partial = np.zeros(nblocks, np.int32)
    mod.get_function("reduce_sum")((nblocks,), (block,), (x, partial, np.int32(n)))
    padded = np.zeros(nblocks * 2 * block, np.int64)
    padded[:n] = x
    np.testing.assert_array_equal(partial, padded.reshape(nblocks, 2 * block).sum(axis=1))
    assert partial.sum() == x.sum()


def test_reduction_argmax(mod, rng):
    n = 30_001
    x = rng.standard_normal(n).astype(np.float32)
    x[12345] = 50.0
    nb = 8
    best = np.zeros(nb, np.float32)
    idx = np.zeros(nb, np.int32)
    mod.get_function("reduce_argmax")((nb,), (256,), (x, best, idx, np.int32(n)))
    g = int(np.argmax(best))
    assert best[g] == 50.0 and idx[g] == 12345
    # every block's answer is the max over the elements that block visited
    for b in range(nb):
        mine = np.zeros(n, bool)
        for start in range(b * 256, n, nb * 256):
            mine[start:start + 256] = True
        assert best[b] == x[mine].max()
        assert idx[b] == np.flatnonzero(mine)[np.argmax(x[mine])]


@pytest.mark.parametrize("block", [32, 128, 1024])
def test_scan_hillis_steele(mod, rng, block):
    nb = 5
    x = rng.integers(-50, 50, nb * block, dtype=np.int32)
    out = np.zeros_like(x)
    mod.get_function("scan_hillis_steele")((nb,), (block,), (x, out))
    np.testing.assert_array_equal(out.reshape(nb, block), np.cumsum(x.reshape(nb, block), axis=1))


@pytest.mark.parametrize("block", [16, 256, 1024])
def test_scan_blelloch_exclusive(rng, block):
    nb = 4
    n = 2 * block
    x = rng.integers(0, 100, nb * n, dtype=np.int32)
    out = np.full_like(x, -1)
    sums = np.zeros(nb, np.int32)
    cpuify.RawKernel(BLELLOCH_SRC, "scan_blelloch")((nb,), (block,), (x, out, sums))
    xs = x.reshape(nb, n)
    excl = np.cumsum(xs, axis=1) - xs
    np.testing.assert_array_equal(out.reshape(nb, n), excl)
    np.testing.assert_array_equal(sums, xs.sum(axis=1))


@pytest.mark.parametrize("block", [1, 64, 512, 1024])
def test_bitonic_sort_shared(mod, rng, block):
    nb = 3
    n = 2 * block
    x = rng.standard_normal(nb * n).astype(np.float32)
    orig = x.copy()
    mod.get_function("bitonic_sort")((nb,), (block,), (x,))
    np.testing.assert_array_equal(x.reshape(nb, n), np.sort(orig.reshape(nb, n), axis=1))


@pytest.mark.parametrize("rows,cols", [(64, 96), (100, 33), (1, 70)])
def test_transpose_padded_tile(mod, rng, rows, cols):
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    out = np.full((cols, rows), np.nan, np.float32)
    mod.get_function("transpose")(((cols + 31) // 32, (rows + 31) // 32), (32, 8),
                                  (a, out, np.int32(rows), np.int32(cols)))
    np.testing.assert_array_equal(out, a.T)


@pytest.mark.parametrize("H,W", [(32, 48), (37, 21)])
def test_stencil_with_halo(mod, rng, H, W):
    a = rng.standard_normal((H, W)).astype(np.float32)
    out = np.full((H, W), np.nan, np.float32)
    mod.get_function("stencil5")(((W + 15) // 16, (H + 15) // 16), (16, 16),
                                 (a, out, np.int32(H), np.int32(W)))
    p = np.pad(a, 1, mode="edge")
    ref = 4 * p[1:-1, 1:-1] - p[1:-1, :-2] - p[1:-1, 2:] - p[:-2, 1:-1] - p[2:, 1:-1]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block", [1, 32, 250, 1024])
def test_dynamic_shared_reverse(mod, rng, block):
    nb = 3
    x = rng.standard_normal(nb * block).astype(np.float32)
    out = np.zeros_like(x)
    mod.get_function("reverse_dyn")((nb,), (block,), (x, out), shared_mem=block * 4)
    np.testing.assert_array_equal(out.reshape(nb, block), x.reshape(nb, block)[:, ::-1])


def _carve_expected(x, nb, nt, per):
    xs = x.reshape(nb, per, nt)
    exp_f = np.zeros((nb, nt), np.float32)
    for k in range(per):        # same summation order as the kernel
        exp_f += xs[:, k, ::-1]
    j = np.arange(per)[:, None] * nt + (nt - 1 - np.arange(nt))[None, :]
    exp_i = (3 * j).sum(axis=0)
    return exp_f, np.broadcast_to(exp_i, (nb, nt))


@pytest.mark.parametrize("nt,per", [(64, 2), (128, 11)])
def test_dynamic_shared_carved_into_two_arrays(mod, rng, nt, per):
    nb = 2
    x = rng.standard_normal(nb * nt * per).astype(np.float32)
    of = np.zeros(nb * nt, np.float32)
    oi = np.zeros(nb * nt, np.int32)
    shared = nt * per * 8
    assert shared <= 48 * 1024
    mod.get_function("carve_dyn")((nb,), (nt,), (x, of, oi, np.int32(per)), shared_mem=shared)
    ef, ei = _carve_expected(x, nb, nt, per)
    np.testing.assert_array_equal(of.reshape(nb, nt), ef)
    np.testing.assert_array_equal(oi.reshape(nb, nt), ei)


def test_dynamic_shared_above_48k_with_opt_in(rng):
    # its own module: the opt-in is a per-function attribute
    m = cpuify.RawModule(code=SRC)
    f = m.get_function("carve_dyn")
    nt, per, nb = 256, 40, 2                 # 256*40*8 = 80 KiB
    shared = nt * per * 8
    assert shared > 48 * 1024
    x = rng.standard_normal(nb * nt * per).astype(np.float32)
    of = np.zeros(nb * nt, np.float32)
    oi = np.zeros(nb * nt, np.int32)
    with pytest.raises(ValueError):
        f((nb,), (nt,), (x, of, oi, np.int32(per)), shared_mem=shared)
    f.max_dynamic_shared_size_bytes = 96 * 1024
    f((nb,), (nt,), (x, of, oi, np.int32(per)), shared_mem=shared)
    ef, ei = _carve_expected(x, nb, nt, per)
    np.testing.assert_array_equal(of.reshape(nb, nt), ef)
    np.testing.assert_array_equal(oi.reshape(nb, nt), ei)
