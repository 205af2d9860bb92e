"""Sort of n int32 keys, n a power of two >= 1024 (kind: other).

* CUDA: bitonic sort in the style of the CUDA samples' sortingNetworks: `bitonic_sort_shared`
  sorts every 1024-key tile in `__shared__` memory (512 threads, one compare-exchange each per
  step, `__syncthreads()` inside two nested loops over (k, j), alternating directions so
  that pairs of tiles form bitonic sequences); then for every stage k = 2048 .. n, one
  `bitonic_merge_global` launch per step j = k/2 .. 1024 (one thread per compare-exchange,
  straight over global memory) and one `bitonic_merge_shared` launch doing all steps
  j = 512 .. 1 of that stage inside shared memory.  For n = 2^20: 1 + 55 + 10 = 66 launches.
  The keys are copied from the input into a work buffer inside the timed call.
* OpenMP: a parallel merge sort, what one would write on a CPU: the keys are cut into one
  chunk per thread (rounded up to a power of two), each chunk sorted with a serial
  quicksort (median of three, insertion sort below 24 keys), then log2(chunks) merge rounds
  in which every pairwise merge is itself split over all threads by merge-path
  partitioning (binary search of the co-rank), with a branch-free merge loop; buffers
  ping-pong so that the last round writes the output.
* OpenCL: the same three kernels as CUDA with `__local` tiles.

Reference: np.sort.  Check: exact equality.
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload, INT_P as _ip

CUDA_SRC = r"""
#define SHARED_SIZE 1024             // keys per tile; blocks have SHARED_SIZE / 2 threads

__device__ __forceinline__ void compare_exchange(int &a, int &b, bool ascending) {
    if ((a > b) == ascending) {
        int t = a; a = b; b = t;
    }
}

// Sorts each SHARED_SIZE tile: ascending where (global index & k) == 0 for every stage k,
// so that after the last stage (k = SHARED_SIZE) even tiles ascend and odd tiles descend.
extern "C" __global__ void bitonic_sort_shared(int *d_keys) {
    __shared__ int s_keys[SHARED_SIZE];
    const unsigned base = blockIdx.x * SHARED_SIZE;
    const unsigned t = threadIdx.x;
    s_keys[t] = d_keys[base + t];
    s_keys[t + SHARED_SIZE / 2] = d_keys[base + t + SHARED_SIZE / 2];

    for (unsigned k = 2; k <= SHARED_SIZE; k <<= 1) {
        for (unsigned j = k >> 1; j > 0; j >>= 1) {
            __syncthreads();
            const unsigned pos = 2 * t - (t & (j - 1));       // lower key of the pair
            compare_exchange(s_keys[pos], s_keys[pos + j], ((base + pos) & k) == 0);
        }
    }
    __syncthreads();
    d_keys[base + t] = s_keys[t];
    d_keys[base + t + SHARED_SIZE / 2] = s_keys[t + SHARED_SIZE / 2];
}

// One step (k, j) of the bitonic network over global memory, j >= SHARED_SIZE;
// one thread per compare-exchange (n / 2 threads).
extern "C" __global__ void bitonic_merge_global(int *d_keys, unsigned k, unsigned j) {
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned pos = 2 * t - (t & (j - 1));
    int a = d_keys[pos], b = d_keys[pos + j];
    const bool ascending = (pos & k) == 0;
    if ((a > b) == ascending) {
        d_keys[pos] = b;
        d_keys[pos + j] = a;
    }
}

// Steps j = SHARED_SIZE / 2 .. 1 of stage k (k > SHARED_SIZE) inside one tile.
extern "C" __global__ void bitonic_merge_shared(int *d_keys, unsigned k) {
    __shared__ int s_keys[SHARED_SIZE];
    const unsigned base = blockIdx.x * SHARED_SIZE;
    const unsigned t = threadIdx.x;
    s_keys[t] = d_keys[base + t];
    s_keys[t + SHARED_SIZE / 2] = d_keys[base + t + SHARED_SIZE / 2];
    const bool ascending = (base & k) == 0;                  // k > tile: same for the block

    for (unsigned j = SHARED_SIZE / 2; j > 0; j >>= 1) {
        __syncthreads();
        const unsigned pos = 2 * t - (t & (j - 1));
        compare_exchange(s_keys[pos], s_keys[pos + j], ascending);
    }
    __syncthreads();
    d_keys[base + t] = s_keys[t];
    d_keys[base + t + SHARED_SIZE / 2] = s_keys[t + SHARED_SIZE / 2];
}
"""

OMP_SRC = r"""
#include <omp.h>
#include <stddef.h>
#include <string.h>

static void insertion_sort(int *a, long n)
{
    for (long i = 1; i < n; i++) {
        int v = a[i];
        long j = i - 1;
        while (j >= 0 && a[j] > v) {
            a[j + 1] = a[j];
            j--;
        }
        a[j + 1] = v;
    }
}

static inline void swap_int(int *a, int *b) { int t = *a; *a = *b; *b = t; }

/* Quicksort: median of three, Hoare partition, recursion on the smaller side. */
static void quicksort(int *a, long n)
{
    while (n > 24) {
        long m = n / 2;
        if (a[m] < a[0]) swap_int(&a[m], &a[0]);
        if (a[n - 1] < a[0]) swap_int(&a[n - 1], &a[0]);
        if (a[n - 1] < a[m]) swap_int(&a[n - 1], &a[m]);
        const int pivot = a[m];
        long i = -1, j = n;
        for (;;) {
            do i++; while (a[i] < pivot);
            do j--; while (a[j] > pivot);
            if (i >= j) break;
            swap_int(&a[i], &a[j]);
        }
        /* a[0..j] <= pivot <= a[j+1..n) */
        if (j + 1 < n - j - 1) {
            quicksort(a, j + 1);
            a += j + 1;
            n -= j + 1;
        } else {
            quicksort(a + j + 1, n - j - 1);
            n = j + 1;
        }
    }
    insertion_sort(a, n);
}

/* Number i of keys taken from a among the first k outputs of merge(a, b) (a first on ties). */
static long corank(long k, const int *a, long na, const int *b, long nb)
{
    long lo = k > nb ? k - nb : 0, hi = k < na ? k : na;
    while (lo < hi) {
        long i = lo + (hi - lo) / 2;
        if (b[k - i - 1] < a[i]) hi = i; else lo = i + 1;
    }
    return lo;
}

static void merge_seq(const int *restrict a, long na, const int *restrict b, long nb,
                      int *restrict out)
{
    long i = 0, j = 0, k = 0;
    while (i < na && j < nb) {
        const int x = a[i], y = b[j];
        const int take_b = y < x;
        out[k++] = take_b ? y : x;
        j += take_b;
        i += !take_b;
    }
    if (i < na) memcpy(out + k, a + i, (size_t)(na - i) * sizeof(int));
    if (j < nb) memcpy(out + k, b + j, (size_t)(nb - j) * sizeof(int));
}

/* out = sorted(in); tmp: workspace of n ints. */
void sort_omp(const int *restrict in, int *restrict out, int *restrict tmp, long n)
{
    const int nt = omp_get_max_threads();
    int nchunks = 1, rounds = 0;
    while (nchunks < nt) { nchunks <<= 1; rounds++; }
    /* the merge rounds ping-pong: start in tmp when their number is odd */
    int *src = (rounds & 1) ? tmp : out, *dst = (rounds & 1) ? out : tmp;

#pragma omp parallel for schedule(dynamic, 1)
    for (int c = 0; c < nchunks; c++) {
        const long lo = n * c / nchunks, hi = n * (c + 1) / nchunks;
        memcpy(src + lo, in + lo, (size_t)(hi - lo) * sizeof(int));
        quicksort(src + lo, hi - lo);
    }

    for (int width = 1; width < nchunks; width *= 2) {
        const int npairs = nchunks / (2 * width);
        const int parts = nt;                        /* pieces per pairwise merge */
#pragma omp parallel for collapse(2) schedule(static)
        for (int pr = 0; pr < npairs; pr++) {
            for (int part = 0; part < parts; part++) {
                const long lo = n * (2L * pr * width) / nchunks;
                const long mid = n * ((2L * pr + 1) * width) / nchunks;
                const long hi = n * ((2L * pr + 2) * width) / nchunks;
                const int *a = src + lo, *b = src + mid;
                const long na = mid - lo, nb = hi - mid, len = na + nb;
                const long k0 = len * part / parts, k1 = len * (part + 1) / parts;
                const long i0 = corank(k0, a, na, b, nb), i1 = corank(k1, a, na, b, nb);
                merge_seq(a + i0, i1 - i0, b + (k0 - i0), (k1 - i1) - (k0 - i0), dst + lo + k0);
            }
        }
        int *t = src; src = dst; dst = t;
    }
}
"""

OPENCL_SRC = r"""
#define SHARED_SIZE 1024

inline void compare_exchange(__local int *a, __local int *b, bool ascending) {
    int x = *a, y = *b;
    if ((x > y) == ascending) { *a = y; *b = x; }
}

__kernel void bitonic_sort_shared(__global int *d_keys) {
    __local int s_keys[SHARED_SIZE];
    const uint base = get_group_id(0) * SHARED_SIZE;
    const uint t = get_local_id(0);
    s_keys[t] = d_keys[base + t];
    s_keys[t + SHARED_SIZE / 2] = d_keys[base + t + SHARED_SIZE / 2];
    for (uint k = 2; k <= SHARED_SIZE; k <<= 1) {
        for (uint j = k >> 1; j > 0; j >>= 1) {
            barrier(CLK_LOCAL_MEM_FENCE);
            const uint pos = 2 * t - (t & (j - 1));
            compare_exchange(&s_keys[pos], &s_keys[pos + j], ((base + pos) & k) == 0);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    d_keys[base + t] = s_keys[t];
    d_keys[base + t + SHARED_SIZE / 2] = s_keys[t + SHARED_SIZE / 2];
}

__kernel void bitonic_merge_global(__global int *d_keys, uint k, uint j) {
    const uint t = get_global_id(0);
    const uint pos = 2 * t - (t & (j - 1));
    int a = d_keys[pos], b = d_keys[pos + j];
    const bool ascending = (pos & k) == 0;
    if ((a > b) == ascending) {
        d_keys[pos] = b;
        d_keys[pos + j] = a;
    }
}

__kernel void bitonic_merge_shared(__global int *d_keys, uint k) {
    __local int s_keys[SHARED_SIZE];
    const uint base = get_group_id(0) * SHARED_SIZE;
    const uint t = get_local_id(0);
    s_keys[t] = d_keys[base + t];
    s_keys[t + SHARED_SIZE / 2] = d_keys[base + t + SHARED_SIZE / 2];
    const bool ascending = (base & k) == 0;
    for (uint j = SHARED_SIZE / 2; j > 0; j >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        const uint pos = 2 * t - (t & (j - 1));
        compare_exchange(&s_keys[pos], &s_keys[pos + j], ascending);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    d_keys[base + t] = s_keys[t];
    d_keys[base + t + SHARED_SIZE / 2] = s_keys[t + SHARED_SIZE / 2];
}
"""


TILE = 1024            # keys per shared-memory tile (SHARED_SIZE)
GLOBAL_BLOCK = 256     # threads per block of bitonic_merge_global


def bitonic_steps(n: int):
    """The launches of the bitonic network: ("sort",), ("global", k, j), ("shared", k)."""
    steps = [("sort",)]
    k = 2 * TILE
    while k <= n:
        j = k // 2
        while j >= TILE:
            steps.append(("global", k, j))
            j //= 2
        steps.append(("shared", k))
        k *= 2
    return steps


class Bitonic(Workload):
    name = "bitonic"
    kind = "other"
    description = "bitonic sort of int32 keys (shared-memory tiles + global steps)"
    sizes = {
        "small": {"n": 1 << 16},
        "default": {"n": 1 << 20},
        "large": {"n": 1 << 22},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    opencl_reason = ""
    numba_reason = "no Python port"

    def make_inputs(self, p, rng):
        n = p["n"]
        assert n >= TILE and n & (n - 1) == 0, "n must be a power of two >= 1024"
        keys = rng.integers(np.iinfo(np.int32).min, np.iinfo(np.int32).max, n,
                            dtype=np.int32, endpoint=True)
        return {"keys": keys}

    def reference(self, p, inp):
        return {"sorted": np.sort(inp["keys"])}

    def run_cpuify(self, p, inp, mod):
        n = p["n"]
        bufs = inp.setdefault("_cpuify_bufs", {})
        if "keys" not in bufs:
            bufs["keys"] = np.empty(n, np.int32)
            bufs["sort"] = mod.get_function("bitonic_sort_shared")
            bufs["global"] = mod.get_function("bitonic_merge_global")
            bufs["shared"] = mod.get_function("bitonic_merge_shared")
            bufs["steps"] = bitonic_steps(n)
        d = bufs["keys"]
        np.copyto(d, inp["keys"])
        tiles = (n // TILE,)
        half = (TILE // 2,)
        ggrid = (n // 2 // GLOBAL_BLOCK,)
        sort, glob, shared = bufs["sort"], bufs["global"], bufs["shared"]
        for st in bufs["steps"]:
            if st[0] == "global":
                glob(ggrid, (GLOBAL_BLOCK,), (d, np.uint32(st[1]), np.uint32(st[2])))
            elif st[0] == "shared":
                shared(tiles, half, (d, np.uint32(st[1])))
            else:
                sort(tiles, half, (d,))
        return {"sorted": d}

    def run_omp(self, p, inp, lib):
        n = p["n"]
        bufs = inp.setdefault("_omp_bufs", {})
        if "out" not in bufs:
            bufs["out"] = np.empty(n, np.int32)
            bufs["tmp"] = np.empty(n, np.int32)
            lib.sort_omp.restype = None
            lib.sort_omp.argtypes = [_ip, _ip, _ip, ctypes.c_long]
        out = bufs["out"]
        lib.sort_omp(inp["keys"].ctypes.data_as(_ip), out.ctypes.data_as(_ip),
                     bufs["tmp"].ctypes.data_as(_ip), n)
        return {"sorted": out}

    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        n = p["n"]
        bufs = inp.get("_cl_bufs")
        if bufs is None:
            mf = cl.mem_flags
            bufs = inp["_cl_bufs"] = {
                "in": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["keys"]),
                "keys": cl.Buffer(ctx, mf.READ_WRITE, size=n * 4),
                "h": np.empty(n, np.int32),
                "sort": cl.Kernel(prg, "bitonic_sort_shared"),
                "global": cl.Kernel(prg, "bitonic_merge_global"),
                "shared": cl.Kernel(prg, "bitonic_merge_shared"),
                "steps": bitonic_steps(n),
            }
        d = bufs["keys"]
        cl.enqueue_copy(queue, d, bufs["in"])          # device-side copy of the input
        for st in bufs["steps"]:
            if st[0] == "global":
                k = bufs["global"]
                k.set_args(d, np.uint32(st[1]), np.uint32(st[2]))
                cl.enqueue_nd_range_kernel(queue, k, (n // 2,), (GLOBAL_BLOCK,))
            elif st[0] == "shared":
                k = bufs["shared"]
                k.set_args(d, np.uint32(st[1]))
                cl.enqueue_nd_range_kernel(queue, k, (n // 2,), (TILE // 2,))
            else:
                k = bufs["sort"]
                k.set_args(d)
                cl.enqueue_nd_range_kernel(queue, k, (n // 2,), (TILE // 2,))
        cl.enqueue_copy(queue, bufs["h"], d)
        queue.finish()
        return {"sorted": bufs["h"]}

    def bytes_moved(self, p):
        return None          # the algorithms differ (bitonic network vs merge sort)

    def flops(self, p):
        return None


WORKLOAD = Bitonic()
