"""Breadth-first search levels from vertex 0, level-synchronous frontier expansion
(kind: other).

Graph: a random directed graph in CSR, n vertices (2^20 by default), Poisson(8) out-degrees
and uniformly random heads (~8 n edges, ~9 levels, >99.9% of the vertices reached).
Output: level of every vertex (-1 where unreachable).

* CUDA: one `bfs_expand` launch per level, one thread per frontier vertex: it walks the
  vertex's adjacency list and claims unvisited neighbours with `atomicCAS(&level[u], -1,
  depth + 1)`; claimed vertices are queued in a per-block `__shared__` queue (shared
  `atomicAdd`), then one global `atomicAdd` per block reserves room in the next frontier
  and the block copies its queue out (overflowing entries go straight to the global queue).
  The host loop reads the next frontier's size after each launch (a cudaMemcpy of 4 bytes
  on a GPU) and swaps the queues; levels are reset with a fill (cudaMemset) first.
* OpenMP: the same level-synchronous algorithm inside one parallel region: frontier split
  with `schedule(dynamic, 64)`, visited claimed with `__atomic_compare_exchange_n`, each
  thread collecting discoveries in a private 4096-entry buffer that it appends to the next
  frontier with one `omp atomic capture` per flush; `omp single` swaps the frontiers.
* OpenCL: the same kernel (`atomic_cmpxchg`, `__local` queue with `atomic_inc`).

Reference: NumPy level-by-level expansion (neighbours of the frontier gathered with
`np.repeat` offsets, unvisited ones deduplicated with `np.unique`).  Check: exact (BFS
levels do not depend on the visiting order).
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload, INT_P as _ip

CUDA_SRC = r"""
#define BLOCK 256
#define QCAP 2048           // shared queue entries per block

// Expands the frontier of depth `depth`: claims unvisited neighbours (level -1) for
// depth + 1 and appends them to next_frontier.  *next_size must be 0 before the launch.
extern "C" __global__ void bfs_expand(const int *__restrict__ row_ptr,
                                      const int *__restrict__ col,
                                      int *level,
                                      const int *__restrict__ frontier, int frontier_size,
                                      int *next_frontier, int *next_size, int depth) {
    __shared__ int queue[QCAP];
    __shared__ int queue_len, queue_base;
    if (threadIdx.x == 0) queue_len = 0;
    __syncthreads();

    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < frontier_size) {
        const int v = frontier[i];
        const int end = row_ptr[v + 1];
        for (int e = row_ptr[v]; e < end; e++) {
            const int u = col[e];
            if (level[u] == -1 && atomicCAS(&level[u], -1, depth + 1) == -1) {
                const int slot = atomicAdd(&queue_len, 1);
                if (slot < QCAP)
                    queue[slot] = u;
                else
                    next_frontier[atomicAdd(next_size, 1)] = u;    // queue full
            }
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        const int len = min(queue_len, QCAP);
        queue_len = len;
        queue_base = atomicAdd(next_size, len);
    }
    __syncthreads();
    for (int k = threadIdx.x; k < queue_len; k += blockDim.x)
        next_frontier[queue_base + k] = queue[k];
}
"""

OMP_SRC = r"""
#include <stddef.h>
#include <string.h>

#define LOCAL_BUF 4096

static inline void flush(int *restrict buf, int *cnt, int *restrict next, long *next_size)
{
    long base;
#pragma omp atomic capture
    { base = *next_size; *next_size += *cnt; }
    memcpy(next + base, buf, (size_t)*cnt * sizeof(int));
    *cnt = 0;
}

/* BFS levels from src; fa, fb: frontier workspaces of n ints.  Returns the depth reached. */
int bfs(const int *restrict row_ptr, const int *restrict col, int *restrict level,
        int *fa, int *fb, long n, int src)
{
    long frontier_size = 1, next_size = 0;
    int depth = 0;
#pragma omp parallel
    {
        int buf[LOCAL_BUF];
        int cnt = 0;
        int *cur = fa, *nxt = fb;
        int d = 0;
#pragma omp for schedule(static)
        for (long v = 0; v < n; v++)
            level[v] = -1;
#pragma omp single
        {
            level[src] = 0;
            fa[0] = src;
        }
        while (frontier_size > 0) {
            const long fs = frontier_size;
#pragma omp for schedule(dynamic, 64) nowait
            for (long i = 0; i < fs; i++) {
                const int v = cur[i];
                for (int e = row_ptr[v]; e < row_ptr[v + 1]; e++) {
                    const int u = col[e];
                    int expected = -1;
                    if (__atomic_load_n(&level[u], __ATOMIC_RELAXED) == -1 &&
                        __atomic_compare_exchange_n(&level[u], &expected, d + 1, 0,
                                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
                        buf[cnt++] = u;
                        if (cnt == LOCAL_BUF)
                            flush(buf, &cnt, nxt, &next_size);
                    }
                }
            }
            if (cnt > 0)
                flush(buf, &cnt, nxt, &next_size);
#pragma omp barrier
#pragma omp single
            {
                frontier_size = next_size;
                next_size = 0;
                if (frontier_size > 0) depth = d + 1;
            }
            int *t = cur; cur = nxt; nxt = t;
            d++;
        }
    }
    return depth;
}
"""

OPENCL_SRC = r"""
#define QCAP 2048

__kernel void bfs_expand(__global const int *restrict row_ptr,
                         __global const int *restrict col,
                         __global int *level,
                         __global const int *restrict frontier, int frontier_size,
                         __global int *next_frontier, __global int *next_size, int depth) {
    __local int queue[QCAP];
    __local int queue_len, queue_base;
    const int lid = get_local_id(0);
    if (lid == 0) queue_len = 0;
    barrier(CLK_LOCAL_MEM_FENCE);

    const int i = get_global_id(0);
    if (i < frontier_size) {
        const int v = frontier[i];
        const int end = row_ptr[v + 1];
        for (int e = row_ptr[v]; e < end; e++) {
            const int u = col[e];
            if (level[u] == -1 && atomic_cmpxchg(&level[u], -1, depth + 1) == -1) {
                const int slot = atomic_inc(&queue_len);
                if (slot < QCAP)
                    queue[slot] = u;
                else
                    next_frontier[atomic_inc(next_size)] = u;
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        const int len = min(queue_len, QCAP);
        queue_len = len;
        queue_base = atomic_add(next_size, len);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = lid; k < queue_len; k += get_local_size(0))
        next_frontier[queue_base + k] = queue[k];
}
"""


BLOCK = 256


def random_graph(n: int, degree: int, rng: np.random.Generator):
    """CSR (row_ptr int32[n+1], col int32[m]) of a random digraph: Poisson(degree)
    out-degrees (the degrees of ~degree * n uniformly random edges), uniform heads."""
    row_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(rng.poisson(degree, n), out=row_ptr[1:])
    col = rng.integers(0, n, int(row_ptr[-1]), dtype=np.int32)
    return row_ptr.astype(np.int32), col


def bfs_levels_numpy(row_ptr, col, n, source=0):
    level = np.full(n, -1, np.int32)
    level[source] = 0
    frontier = np.array([source], np.int64)
    depth = 0
    while frontier.size:
        starts = row_ptr[frontier].astype(np.int64)
        lens = row_ptr[frontier + 1].astype(np.int64) - starts
        total = int(lens.sum())
        if total == 0:
            break
        # edge indices of all frontier vertices: start of the owner + offset within its list
        offs = np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(total)
        nb = col[offs]
        nb = np.unique(nb[level[nb] == -1])
        depth += 1
        level[nb] = depth
        frontier = nb.astype(np.int64)
    return level


class BFS(Workload):
    name = "bfs"
    kind = "other"
    description = "level-synchronous BFS, random digraph, avg degree 8, atomicCAS visited"
    sizes = {
        "small": {"n": 1 << 16, "degree": 8},
        "default": {"n": 1 << 20, "degree": 8},
        "large": {"n": 1 << 22, "degree": 8},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    opencl_reason = ""
    numba_reason = "no Python port"

    def make_inputs(self, p, rng):
        row_ptr, col = random_graph(p["n"], p["degree"], rng)
        return {"row_ptr": row_ptr, "col": col}

    def reference(self, p, inp):
        return {"level": bfs_levels_numpy(inp["row_ptr"], inp["col"], p["n"])}

    def run_cpuify(self, p, inp, mod):
        n = p["n"]
        bufs = inp.setdefault("_cpuify_bufs", {})
        if "level" not in bufs:
            bufs["level"] = np.empty(n, np.int32)
            bufs["fa"] = np.empty(n, np.int32)
            bufs["fb"] = np.empty(n, np.int32)
            bufs["size"] = np.zeros(1, np.int32)
            bufs["fn"] = mod.get_function("bfs_expand")
        level, size, fn = bufs["level"], bufs["size"], bufs["fn"]
        cur, nxt = bufs["fa"], bufs["fb"]
        rp, col = inp["row_ptr"], inp["col"]
        level.fill(-1)
        level[0] = 0
        cur[0] = 0
        fsize, depth = 1, 0
        while fsize > 0:
            size[0] = 0
            fn(((fsize + BLOCK - 1) // BLOCK,), (BLOCK,),
               (rp, col, level, cur, np.int32(fsize), nxt, size, np.int32(depth)))
            fsize = int(size[0])
            cur, nxt = nxt, cur
            depth += 1
        return {"level": level}

    def run_omp(self, p, inp, lib):
        n = p["n"]
        bufs = inp.setdefault("_omp_bufs", {})
        if "level" not in bufs:
            bufs["level"] = np.empty(n, np.int32)
            bufs["fa"] = np.empty(n, np.int32)
            bufs["fb"] = np.empty(n, np.int32)
            lib.bfs.restype = ctypes.c_int
            lib.bfs.argtypes = [_ip, _ip, _ip, _ip, _ip, ctypes.c_long, ctypes.c_int]
        level = bufs["level"]
        lib.bfs(inp["row_ptr"].ctypes.data_as(_ip), inp["col"].ctypes.data_as(_ip),
                level.ctypes.data_as(_ip), bufs["fa"].ctypes.data_as(_ip),
                bufs["fb"].ctypes.data_as(_ip), n, 0)
        return {"level": level}

    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        n = p["n"]
        bufs = inp.get("_cl_bufs")
        if bufs is None:
            mf = cl.mem_flags
            bufs = inp["_cl_bufs"] = {
                "row_ptr": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["row_ptr"]),
                "col": cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["col"]),
                "level": cl.Buffer(ctx, mf.READ_WRITE, size=n * 4),
                "fa": cl.Buffer(ctx, mf.READ_WRITE, size=n * 4),
                "fb": cl.Buffer(ctx, mf.READ_WRITE, size=n * 4),
                "size": cl.Buffer(ctx, mf.READ_WRITE, size=4),
                "hlevel": np.empty(n, np.int32),
                "hsize": np.zeros(1, np.int32),
                "zero": np.zeros(1, np.int32),
                "k": cl.Kernel(prg, "bfs_expand"),
            }
        k, level, size = bufs["k"], bufs["level"], bufs["size"]
        cl.enqueue_fill_buffer(queue, level, np.int32(-1), 0, n * 4)
        cl.enqueue_copy(queue, level, bufs["zero"])            # level[0] = 0
        cl.enqueue_copy(queue, bufs["fa"], bufs["zero"])       # frontier = [0]
        cur, nxt = bufs["fa"], bufs["fb"]
        fsize, depth = 1, 0
        while fsize > 0:
            cl.enqueue_copy(queue, size, bufs["zero"])
            k.set_args(bufs["row_ptr"], bufs["col"], level, cur, np.int32(fsize), nxt, size,
                       np.int32(depth))
            cl.enqueue_nd_range_kernel(queue, k, (((fsize + BLOCK - 1) // BLOCK) * BLOCK,),
                                       (BLOCK,))
            cl.enqueue_copy(queue, bufs["hsize"], size)         # blocking read
            fsize = int(bufs["hsize"][0])
            cur, nxt = nxt, cur
            depth += 1
        cl.enqueue_copy(queue, bufs["hlevel"], level)
        queue.finish()
        return {"level": bufs["hlevel"]}

    def bytes_moved(self, p):
        n, m = p["n"], p["n"] * p["degree"]           # expected edge count
        # row_ptr (2 reads per vertex), col and the level of every edge's head, the frontier
        # queues (write + read), the level array (init + claim)
        return 4.0 * (2 * n + 2 * m + 2 * n + 2 * n)

    def flops(self, p):
        return None


WORKLOAD = BFS()
