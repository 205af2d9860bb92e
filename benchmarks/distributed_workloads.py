"""Workloads for distributed execution (issue #19): CUDA kernels run through the Python API,
unchanged, whether or not the script runs under `mpiexec -n N` (docs/distributed.md).

Each workload builds its inputs from a fixed seed, runs its launches inside
`cpuify.distributed.resident()` (the arrays stay where they were computed between
launches) and returns its outputs; `digest()` of the outputs must be the same with any
number of ranks and without MPI (every result is computed by the same instructions in the
same order, whatever rank runs the block; the histogram's atomics are integer adds).
Used by tests/test_distributed.py and benchmarks/distributed.py."""

from __future__ import annotations

import contextlib
import hashlib
import time
from typing import Any, Callable, Iterator

import numpy as np

import cpuify

STENCIL2D = r'''
extern "C" __global__ void jacobi2d(const float *in, float *out, int n) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= 1 && x < n - 1 && y >= 1 && y < n - 1)
        out[y * n + x] = 0.2f * (in[y * n + x] + in[y * n + x - 1] + in[y * n + x + 1]
                                 + in[(y - 1) * n + x] + in[(y + 1) * n + x]);
}'''

STENCIL3D = r'''
extern "C" __global__ void jacobi3d(const float *in, float *out, int n) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x >= 1 && x < n - 1 && y >= 1 && y < n - 1 && z >= 1 && z < n - 1) {
        int i = (z * n + y) * n + x;
        out[i] = (in[i - 1] + in[i + 1] + in[i - n] + in[i + n] + in[i - n * n] + in[i + n * n]
                  + 2.0f * in[i]) * 0.125f;
    }
}'''

NBODY = r'''
extern "C" __global__ void forces(const float4 *pos, float4 *acc, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float4 p = pos[i];
    float ax = 0, ay = 0, az = 0;
    for (int j = 0; j < n; j++) {
        float4 q = pos[j];
        float dx = q.x - p.x, dy = q.y - p.y, dz = q.z - p.z;
        float r2 = dx * dx + dy * dy + dz * dz + 0.01f;
        float inv = rsqrtf(r2);
        float s = q.w * inv * inv * inv;
        ax += dx * s; ay += dy * s; az += dz * s;
    }
    acc[i] = make_float4(ax, ay, az, 0.0f);
}
extern "C" __global__ void advance(float4 *pos, float4 *vel, const float4 *acc, float dt, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float4 v = vel[i], a = acc[i], p = pos[i];
    v.x += a.x * dt; v.y += a.y * dt; v.z += a.z * dt;
    p.x += v.x * dt; p.y += v.y * dt; p.z += v.z * dt;
    vel[i] = v; pos[i] = p;
}'''

MATMUL = r'''
#define T 16
extern "C" __global__ void matmul(const float *a, const float *b, float *c, int n) {
    __shared__ float ta[T][T], tb[T][T];
    int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
    float acc = 0;
    for (int k0 = 0; k0 < n; k0 += T) {
        ta[threadIdx.y][threadIdx.x] = a[row * n + k0 + threadIdx.x];
        tb[threadIdx.y][threadIdx.x] = b[(k0 + threadIdx.y) * n + col];
        __syncthreads();
        for (int k = 0; k < T; k++) acc += ta[threadIdx.y][k] * tb[k][threadIdx.x];
        __syncthreads();
    }
    c[row * n + col] = acc;
}'''

TRANSPOSE = r'''
#define T 32
extern "C" __global__ void transpose(const float *in, float *out, int w, int h) {
    __shared__ float tile[T][T + 1];
    int x = blockIdx.x * T + threadIdx.x, y = blockIdx.y * T + threadIdx.y;
    if (x < w && y < h) tile[threadIdx.y][threadIdx.x] = in[y * w + x];
    __syncthreads();
    x = blockIdx.y * T + threadIdx.x;
    y = blockIdx.x * T + threadIdx.y;
    if (x < h && y < w) out[y * h + x] = tile[threadIdx.x][threadIdx.y];
}'''

HISTOGRAM = r'''
extern "C" __global__ void histogram(const unsigned *data, unsigned *bins, int n, int nbins) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&bins[data[i] % nbins], 1u);
}'''

GATHER = r'''
extern "C" __global__ void gather(const float *x, const int *idx, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[idx[i]];
}
extern "C" __global__ void scatter(const float *x, const int *perm, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[perm[i]] = x[i] + 1.0f;
}'''

PIPELINE = r'''
extern "C" __global__ void saxpy(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void block_sums(const float *y, float *sums, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * 256 + threadIdx.x;
    s[threadIdx.x] = i < n ? y[i] : 0.0f;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) sums[blockIdx.x] = s[0];
}
extern "C" __global__ void scale(float *y, const float *sums, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] / (1.0f + fabsf(sums[blockIdx.x]));
}'''

#: name -> (sizes per size class)
SIZES = {
    "small": {"stencil2d": (256, 10), "stencil3d": (48, 6), "nbody": (1024, 3), "matmul": (128,),
              "transpose": (200, 136), "histogram": (1 << 16, 64), "gather": (1 << 14,),
              "pipeline": (1 << 16, 4)},
    "default": {"stencil2d": (4096, 20), "stencil3d": (256, 10), "nbody": (16384, 2),
                "matmul": (2048,), "transpose": (4096, 4096), "histogram": (1 << 25, 256),
                "gather": (1 << 23,), "pipeline": (1 << 23, 8)},
}


#: seconds the launches of the last workload took (its resident() block)
LAST_SECONDS = 0.0


@contextlib.contextmanager
def _resident() -> Iterator[None]:
    """The launches of a workload (timed: inputs are made before, outputs read after)."""
    global LAST_SECONDS
    from cpuify.distributed import api_front
    t = time.perf_counter()
    with api_front.resident():
        yield
    LAST_SECONDS = time.perf_counter() - t


def stencil2d(n: int, steps: int) -> list[np.ndarray]:
    k = cpuify.RawKernel(STENCIL2D, "jacobi2d")
    rng = np.random.default_rng(1)
    a = rng.random((n, n), dtype=np.float32)
    b = a.copy()
    grid, block = ((n + 15) // 16, (n + 15) // 16), (16, 16)
    with _resident():
        for _ in range(steps):
            k(grid, block, (a, b, np.int32(n)))
            a, b = b, a
    return [a]


def stencil3d(n: int, steps: int) -> list[np.ndarray]:
    k = cpuify.RawKernel(STENCIL3D, "jacobi3d")
    rng = np.random.default_rng(2)
    a = rng.random((n, n, n), dtype=np.float32)
    b = a.copy()
    grid, block = ((n + 7) // 8, (n + 7) // 8, (n + 3) // 4), (8, 8, 4)
    with _resident():
        for _ in range(steps):
            k(grid, block, (a, b, np.int32(n)))
            a, b = b, a
    return [a]


def nbody(n: int, steps: int) -> list[np.ndarray]:
    m = cpuify.RawModule(code=NBODY)
    forces, advance = m.get_function("forces"), m.get_function("advance")
    rng = np.random.default_rng(3)
    pos = rng.random((n, 4), dtype=np.float32)
    vel = np.zeros((n, 4), np.float32)
    acc = np.zeros((n, 4), np.float32)
    grid, block = ((n + 127) // 128,), (128,)
    with _resident():
        for _ in range(steps):
            forces(grid, block, (pos, acc, np.int32(n)))
            advance(grid, block, (pos, vel, acc, np.float32(0.001), np.int32(n)))
    return [pos, vel]


def matmul(n: int) -> list[np.ndarray]:
    k = cpuify.RawKernel(MATMUL, "matmul")
    rng = np.random.default_rng(4)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    c = np.zeros((n, n), np.float32)
    with _resident():
        k((n // 16, n // 16), (16, 16), (a, b, c, np.int32(n)))
    return [c]


def transpose(w: int, h: int) -> list[np.ndarray]:
    k = cpuify.RawKernel(TRANSPOSE, "transpose")
    rng = np.random.default_rng(5)
    a = rng.random((h, w), dtype=np.float32)
    out = np.zeros((w, h), np.float32)
    with _resident():
        k(((w + 31) // 32, (h + 31) // 32), (32, 32), (a, out, np.int32(w), np.int32(h)))
    return [out]


def histogram(n: int, nbins: int) -> list[np.ndarray]:
    k = cpuify.RawKernel(HISTOGRAM, "histogram")
    rng = np.random.default_rng(6)
    data = rng.integers(0, 1 << 30, n, dtype=np.uint32)
    bins = np.zeros(nbins, np.uint32)
    with _resident():
        k(((n + 255) // 256,), (256,), (data, bins, np.int32(n), np.int32(nbins)))
    return [bins]


def gather(n: int) -> list[np.ndarray]:
    m = cpuify.RawModule(code=GATHER)
    g, s = m.get_function("gather"), m.get_function("scatter")
    rng = np.random.default_rng(7)
    x = rng.random(n, dtype=np.float32)
    idx = rng.integers(0, n, n, dtype=np.int32)
    perm = rng.permutation(n).astype(np.int32)
    y = np.zeros(n, np.float32)
    z = np.zeros(n, np.float32)
    grid, block = ((n + 255) // 256,), (256,)
    with _resident():
        g(grid, block, (x, idx, y, np.int32(n)))
        s(grid, block, (y, perm, z, np.int32(n)))
    return [y, z]


def pipeline(n: int, rounds: int) -> list[np.ndarray]:
    m = cpuify.RawModule(code=PIPELINE)
    saxpy, sums_k, scale = (m.get_function(f) for f in ("saxpy", "block_sums", "scale"))
    rng = np.random.default_rng(8)
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    nb = (n + 255) // 256
    sums = np.zeros(nb, np.float32)
    with _resident():
        for _ in range(rounds):
            saxpy((nb,), (256,), (np.float32(0.5), x, y, np.int32(n)))
            sums_k((nb,), (256,), (y, sums, np.int32(n)))
            scale((nb,), (256,), (y, sums, np.int32(n)))
    return [y, sums]


WORKLOADS: dict[str, Callable[..., list[np.ndarray]]] = {
    "stencil2d": stencil2d, "stencil3d": stencil3d, "nbody": nbody, "matmul": matmul,
    "transpose": transpose, "histogram": histogram, "gather": gather, "pipeline": pipeline,
}


def digest(arrays: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def run(name: str, size: str = "small") -> dict[str, Any]:
    """Run one workload; its digest, the seconds its launches took (with the gather
    back to rank 0 at the end) and (under MPI) what the engine moved."""
    from cpuify.distributed import engine
    eng = engine.get()
    before = None if eng is None else dict(vars(eng.stats))
    out = WORKLOADS[name](*SIZES[size][name])
    result: dict[str, Any] = {"name": name, "digest": digest(out), "seconds": LAST_SECONDS}
    if eng is not None and before is not None:
        now = vars(eng.stats)
        result.update({k: now[k] - before[k] for k in ("launches", "distributed", "whole_on_rank0",
                                                       "bytes_moved", "bytes_minimum",
                                                       "bytes_gathered", "messages", "overlapped")})
        result["ranks"] = eng.size
    return result


def predict(journal: list[tuple[Any, ...]], link: Any, counts: tuple[int, ...],
            overhead_s: float = 0.0) -> dict[int, float]:
    """Predicted seconds of the launches in `journal` (recorded by a one-rank engine) on
    each rank count: the engine's own planning (cpuify.distributed.plan on trackers of N
    ranks, no MPI) gives each launch's boxes and each rank's bytes and messages, and
    cpuify.distributed.model's LaunchModel turns them into time: compute per block as
    measured here (one rank with all of this machine's cores: a node), `link` measured by
    MPI ping-pong."""
    from cpuify.distributed import plan
    from cpuify.distributed.engine import _Buffer
    from cpuify.distributed.model import LaunchModel
    from cpuify.distributed.tracker import BufferTracker

    sizes: dict[int, int] = {}
    for entry in journal:
        sizes.update(entry[5])
    out = {}
    for n in counts:
        class Dry:
            size = n
            exact_stats = False
            plan_cache: dict[Any, Any] = {}
            buffers = {bid: _Buffer(bid, nb, 0, tracker=BufferTracker(nb, n))
                       for bid, nb in sizes.items()}
        total = 0.0
        for ref, grid, block, params, slots, _, seconds in journal:
            nblocks = grid[0] * grid[1] * grid[2]
            reason = None if ref.access is not None and ref.access.distributable else "maps"
            step = plan.plan_launch(Dry, ref, grid, block, 0, params, slots,
                                    single_reason=reason or getattr(ref, "reason", None))
            blocks = [0 if b is None else
                      (b[0][1] - b[0][0]) * (b[1][1] - b[1][0]) * (b[2][1] - b[2][0])
                      for b in step.launch.boxes]
            moved = [0] * n
            sources: list[set[int]] = [set() for _ in range(n)]
            for m in step.launch.moves + step.launch.partials:
                moved[m.dst] += m.hi - m.lo
                sources[m.dst].add(m.src)
            model = LaunchModel(seconds / nblocks, link, overhead_s)
            total += model.predict(blocks, moved, [len(x) for x in sources])
            step.commit()
        out[n] = total
    return out


def _main(argv: list[str]) -> None:
    import argparse
    import json
    ap = argparse.ArgumentParser(description="run the distributed workloads (under mpiexec or not)")
    ap.add_argument("size", nargs="?", default="small", choices=sorted(SIZES))
    ap.add_argument("names", nargs="*")
    ap.add_argument("--timed", action="store_true",
                    help="run each workload twice first (compiles, specializations, access "
                         "maps), then time it")
    ap.add_argument("--model", metavar="LINK_JSON",
                    help="with a one-rank engine: also predict the time on 1..64 ranks "
                         "from the launches run (link: {latency_s, bandwidth})")
    args = ap.parse_intermixed_args(argv)
    from cpuify.distributed import engine
    eng = engine.get()
    for name in args.names or list(WORKLOADS):
        first = None
        if args.timed:
            # the first run counts the exact minimum of bytes (planning time), the second
            # (the same launches on new arrays) is timed without
            run(name, args.size)    # (the second launch of a block shape specializes it)
            if eng is not None:
                eng.exact_stats = True
            first = run(name, args.size)
            if eng is not None:
                eng.exact_stats = False
        if args.model and eng is not None:
            eng.journal = []
        result = run(name, args.size)
        if first is not None:
            result.update({k: v for k, v in first.items() if k.startswith("bytes") or k == "messages"})
        if args.model and eng is not None and eng.journal is not None:
            from cpuify.distributed.model import LinkModel
            link = LinkModel(**json.loads(args.model))
            counts = (1, 2, 4, 8, 16, 32, 64)
            result["predicted"] = predict(eng.journal, link, counts)
            eng.journal = None
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    import sys
    _main(sys.argv[1:])
