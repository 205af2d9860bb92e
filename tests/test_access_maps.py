"""Access maps (analysis/access_maps.py): per pointer parameter, the bytes each block reads,
writes and updates atomically.  The reference is the interpreter run with a spy on the
addresses it touches (per block, per parameter), and for some kernels the CUDA formula
worked out by hand: a footprint is never smaller than what runs (soundness) and equal to it
where the accesses are affine."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("islpy")

from cpuify.analysis.access_maps import (
    WHOLE_INTERVAL,
    Footprint,
    KernelAccess,
    kernel_access,
)
from cpuify.errors import CpuifyError
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.interp import interpret_kernel
from cpuify.interp.thread import Thread

SRC = r"""
extern "C" __global__ void axpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void stencil(const float* in, float* out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x > 0 && x < w - 1 && y > 0 && y < h - 1)
    out[y * w + x] = in[y * w + x - 1] + in[y * w + x + 1] + in[(y - 1) * w + x]
                   + in[(y + 1) * w + x] - 4.0f * in[y * w + x];
}
extern "C" __global__ void matmul(const float* A, const float* B, float* C, int n) {
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row < n && col < n) {
    float s = 0;
    for (int k = 0; k < n; ++k) s += A[row * n + k] * B[k * n + col];
    C[row * n + col] = s;
  }
}
extern "C" __global__ void transpose(const float* in, float* out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) out[x * h + y] = in[y * w + x];
}
#define T 4
extern "C" __global__ void tiled(const float* A, const float* B, float* C, int n) {
  __shared__ float sa[T][T], sb[T][T];
  int tx = threadIdx.x, ty = threadIdx.y;
  int row = blockIdx.y * T + ty, col = blockIdx.x * T + tx;
  float s = 0;
  for (int t = 0; t < n / T; ++t) {
    sa[ty][tx] = A[row * n + t * T + tx];
    sb[ty][tx] = B[(t * T + ty) * n + col];
    __syncthreads();
    for (int k = 0; k < T; ++k) s += sa[ty][k] * sb[k][tx];
    __syncthreads();
  }
  C[row * n + col] = s;
}
extern "C" __global__ void histogram(const unsigned* data, unsigned* hist, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&hist[data[i] % 16], 1u);
}
extern "C" __global__ void gather(const float* x, const int* idx, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[idx[i]];
}
extern "C" __global__ void nbody(const float4* pos, float4* acc, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float4 p = pos[i];
  float ax = 0, ay = 0, az = 0;
  for (int j = 0; j < n; ++j) {
    float4 q = pos[j];
    float dx = q.x - p.x, dy = q.y - p.y, dz = q.z - p.z;
    float r = rsqrtf(dx * dx + dy * dy + dz * dz + 0.01f);
    float s = q.w * r * r * r;
    ax += dx * s; ay += dy * s; az += dz * s;
  }
  acc[i] = make_float4(ax, ay, az, 0.0f);
}
extern "C" __global__ void chase(float** ptrs, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) ptrs[0][i] = 1.0f;
}
extern "C" __global__ void gridstride(int n, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    y[i] = 2.0f * x[i];
}
__device__ float total;
extern "C" __global__ void to_global(const float* x) { total = x[threadIdx.x]; }
extern "C" __global__ void choose(float* a, float* b, int flag) {
  float* p = flag ? a : b;
  p[threadIdx.x] = 1.0f;
}
extern "C" __global__ void dmalloc(float* out) {
  float* p = (float*)malloc(16);
  p[0] = 1.0f; out[threadIdx.x] = p[0]; free(p);
}
extern "C" __global__ void divmod(const float* in, float* out, int w, int h) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < w * h) { int r = i / w, c = i % w; out[c * h + r] = in[i]; }
}
extern "C" __global__ void clamp(const float* in, float* out, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[min(i + 1, n - 1)] + in[i > 0 ? i - 1 : 0];
}
extern "C" __global__ void positive(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] > 0.0f) y[i] = x[i];
}
extern "C" __global__ void until_zero(const int* x, int* y, int n) {
  int i = blockIdx.x;
  for (int k = 0; k < n; ++k) {
    if (x[i * n + k] == 0) break;
    y[i * n + k] = 1;
  }
}
struct Ptrs { float* a; int n; };
extern "C" __global__ void in_struct(Ptrs p) { p.a[threadIdx.x] = 1.0f; }
extern "C" __global__ void rows(float* m, int pitch, int w) {
  // a 2-D array with a pitch in elements: row y, columns [0, w) of a pitch-wide row
  int y = blockIdx.x;
  for (int x = threadIdx.x; x < w; x += blockDim.x) m[y * pitch + x] += 1.0f;
}
"""


@pytest.fixture(scope="module")
def ptx() -> str:
    return compile_to_ptx(SRC).ptx


def _touched(monkeypatch, ptx, kernel, grid, block, args):  # type: ignore[no-untyped-def]
    """{(block index, param index, kind): set of byte offsets} the interpreter touched."""
    arrays = [(i, a) for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    seen: dict[tuple, set[int]] = {}  # type: ignore[type-arg]
    original = Thread.address

    def spy(self, op, space, nbytes):  # type: ignore[no-untyped-def]
        addr = original(self, op, space, nbytes)
        if space in ("shared", "local"):
            return addr
        kind = {"ptx.ld": "read", "ptx.ldu": "read", "ptx.st": "write"}.get(op.name, "atomic")
        for i, arr in arrays:
            base = arr.ctypes.data
            if base <= addr < base + arr.nbytes:
                seen.setdefault((self.blk.ctaid, i, kind), set()).update(
                    range(addr - base, addr - base + nbytes))
        return addr

    monkeypatch.setattr(Thread, "address", spy)
    interpret_kernel(ptx, kernel, grid, block, args)
    monkeypatch.undo()
    return seen


def _bytes(intervals: list[tuple[int, int]], limit: int) -> set[int]:
    out: set[int] = set()
    for lo, hi in intervals:
        out.update(range(max(lo, 0), min(hi, limit)))
    return out


def _check(monkeypatch, ptx, kernel, grid, block, args, scalars,  # type: ignore[no-untyped-def]
           exact_kinds=("read", "write", "atomic"), whole=(), whole_allowed=False):
    """Per block: footprint ⊇ what the interpreter touched; == for `exact_kinds` (param
    index, kind) or kind; `whole`: (param index, kind) expected to be whole-buffer."""
    ka = kernel_access(ptx, kernel)
    assert ka.distributable, ka.reason
    truth = _touched(monkeypatch, ptx, kernel, grid, block, args)
    assert truth, "the interpreter touched no global memory"
    sizes = {i: a.nbytes for i, a in enumerate(args) if isinstance(a, np.ndarray)}
    grid3 = tuple(grid) + (1,) * (3 - len(grid))
    for b in itertools.product(*(range(g) for g in grid3)):
        fp = ka.footprint(scalars, grid, block, tuple((c, c + 1) for c in b))
        for p in ka.params:
            f = fp[p.index]
            for kind, got in (("read", f.reads), ("write", f.writes), ("atomic", f.atomics)):
                want = truth.get((b, p.index, kind), set())
                if (p.index, kind) in whole:
                    assert got == [WHOLE_INTERVAL], (b, p.name, kind)
                    continue
                assert whole_allowed or got != [WHOLE_INTERVAL], (b, p.name, kind)
                have = _bytes(got, sizes[p.index])
                assert want <= have, (kernel, b, p.name, kind, sorted(want - have)[:8])
                if kind in exact_kinds or (p.index, kind) in exact_kinds:
                    assert have == want, (kernel, b, p.name, kind, sorted(have ^ want)[:8])
                # intervals sorted, disjoint, not touching
                assert all(lo < hi for lo, hi in got)
                assert all(a[1] < c[0] for a, c in itertools.pairwise(got))
    return ka


def test_axpy_by_hand_and_interpreter(ptx, monkeypatch):
    n = 70
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, np.float32)
    ka = _check(monkeypatch, ptx, "axpy", (3,), (32,), (np.int32(n), np.float32(2), x, y),
                {"axpy_param_0": n})
    assert [p.name for p in ka.params] == ["axpy_param_2", "axpy_param_3"]
    assert [n for n, _ in ka.scalar_params] == ["axpy_param_0"]
    y_param = ka.params[1]
    assert y_param.writes_exact and y_param.atomics is None
    # by hand: blocks [1, 3) of 32 threads touch elements 32 .. n-1
    fp = ka.footprint({"axpy_param_0": n}, (3, 1, 1), (32, 1, 1), ((1, 3), (0, 1), (0, 1)))
    assert fp[2].reads == [(32 * 4, n * 4)] and fp[2].writes == []
    assert fp[3].reads == fp[3].writes == [(32 * 4, n * 4)]


def test_stencil_rows_with_halo(ptx, monkeypatch):
    w, h = 10, 9
    a = np.zeros(w * h, np.float32)
    out = np.zeros(w * h, np.float32)
    ka = _check(monkeypatch, ptx, "stencil", (3, 3), (4, 4), (a, out, np.int32(w), np.int32(h)),
                {"stencil_param_2": w, "stencil_param_3": h})
    assert ka.params[1].writes_exact
    # by hand: block (1, 1) covers x, y in [4, 8): writes rows 4..7 columns 4..7 (x < w-1 = 9,
    # y < h-1 = 8), reads the same plus a one-element halo
    fp = ka.footprint({"stencil_param_2": w, "stencil_param_3": h}, (3, 3), (4, 4),
                      ((1, 2), (1, 2), (0, 1)))
    assert fp[1].writes == [((y * w + 4) * 4, (y * w + 8) * 4) for y in range(4, 8)]
    want = set()
    for y in range(4, 8):
        for x in range(4, 8):
            for dx, dy in ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)):
                want.update(range(((y + dy) * w + x + dx) * 4, ((y + dy) * w + x + dx) * 4 + 4))
    assert _bytes(fp[0].reads, 10**6) == want


def test_stencil_footprint_of_many_rows_is_fast(ptx):
    import time
    ka = kernel_access(ptx, "stencil")
    scalars = {"stencil_param_2": 4096, "stencil_param_3": 1000}
    box = ((0, 256), (0, 63), (0, 1))
    start = time.perf_counter()
    fp = ka.footprint(scalars, (256, 63), (16, 16), box)
    first = time.perf_counter() - start
    # by hand: the input's rows 1 .. 998 are read whole (x - 1 and x + 1 reach columns 0
    # and 4095), rows 0 and 999 (the halo of y = 1 and y = 998) without their corners
    row = 4096 * 4
    assert fp[0].reads == [(4, row - 4), (row, 999 * row), (999 * row + 4, 1000 * row - 4)]
    assert len(fp[1].writes) == 998            # rows 1 .. 998, columns 1 .. 4094 each
    assert fp[1].writes[0] == ((4096 + 1) * 4, (2 * 4096 - 1) * 4)
    start = time.perf_counter()
    assert ka.footprint(scalars, (256, 63), (16, 16), box) is fp
    second = time.perf_counter() - start
    print(f"stencil footprint over 1000 rows: first {first * 1e3:.1f} ms, "
          f"again {second * 1e6:.1f} us")
    assert second < first


@pytest.mark.parametrize("n", [8, 10])
def test_matmul_loop_over_k(ptx, monkeypatch, n):
    a = np.zeros(n * n, np.float32)
    b = np.zeros(n * n, np.float32)
    c = np.zeros(n * n, np.float32)
    ka = _check(monkeypatch, ptx, "matmul", (3, 3), (4, 4), (a, b, c, np.int32(n)),
                {"matmul_param_3": n})
    assert ka.params[2].writes_exact


def test_transpose(ptx, monkeypatch):
    w, h = 7, 5
    a = np.zeros(w * h, np.float32)
    out = np.zeros(w * h, np.float32)
    ka = _check(monkeypatch, ptx, "transpose", (2, 2), (4, 4), (a, out, np.int32(w), np.int32(h)),
                {"transpose_param_2": w, "transpose_param_3": h})
    assert ka.params[1].writes_exact


def test_tiled_shared_memory_matmul(ptx, monkeypatch):
    n = 8
    a = np.zeros(n * n, np.float32)
    b = np.zeros(n * n, np.float32)
    c = np.zeros(n * n, np.float32)
    ka = _check(monkeypatch, ptx, "tiled", (2, 2), (4, 4), (a, b, c, np.int32(n)),
                {"tiled_param_3": n})
    assert ka.params[2].writes_exact


def test_histogram_atomics(ptx, monkeypatch):
    n = 40
    data = (np.arange(n, dtype=np.uint32) * 7) % 23
    hist = np.zeros(16, np.uint32)
    ka = _check(monkeypatch, ptx, "histogram", (2,), (32,), (data, hist, np.int32(n)),
                {"histogram_param_2": n}, whole={(1, "atomic")})
    p = ka.params[1]
    assert p.atomic_ops == frozenset({"add.u32"}) and not p.atomic_result_used
    assert p.reads is None and p.writes is None and p.atomics is not None and p.atomics.whole


def test_gather_reads_whole_source(ptx, monkeypatch):
    n = 20
    x = np.arange(50, dtype=np.float32)
    idx = (np.arange(n, dtype=np.int32) * 3) % 50
    y = np.zeros(n, np.float32)
    ka = _check(monkeypatch, ptx, "gather", (2,), (16,), (x, idx, y, np.int32(n)),
                {"gather_param_3": n}, whole={(0, "read")})
    assert ka.params[2].writes_exact


def test_nbody_reads_all_positions(ptx, monkeypatch):
    n = 12
    pos = np.ones(4 * n, np.float32)
    acc = np.zeros(4 * n, np.float32)
    ka = _check(monkeypatch, ptx, "nbody", (2,), (8,), (pos, acc, np.int32(n)),
                {"nbody_param_2": n})
    fp = ka.footprint({"nbody_param_2": n}, (2,), (8,), ((1, 2), (0, 1), (0, 1)))
    assert fp[0].reads == [(0, n * 16)]
    assert fp[1].writes == [(8 * 16, n * 16)]


def test_grid_stride_loop(ptx, monkeypatch):
    n = 45
    x = np.zeros(n, np.float32)
    y = np.zeros(n, np.float32)
    ka = _check(monkeypatch, ptx, "gridstride", (2,), (8,), (np.int32(n), x, y),
                {"gridstride_param_0": n})
    assert ka.params[1].writes_exact


def test_pitched_rows(ptx, monkeypatch):
    pitch, w, rows = 12, 9, 3
    m = np.zeros(pitch * rows, np.float32)
    ka = _check(monkeypatch, ptx, "rows", (rows,), (4,), (m, np.int32(pitch), np.int32(w)),
                {"rows_param_1": pitch, "rows_param_2": w})
    fp = ka.footprint({"rows_param_1": pitch, "rows_param_2": w}, (rows,), (4,),
                      ((0, rows), (0, 1), (0, 1)))
    assert fp[0].writes == [(y * pitch * 4, (y * pitch + w) * 4) for y in range(rows)]


def test_quotient_and_remainder(ptx, monkeypatch):
    w, h = 5, 3
    a = np.zeros(w * h, np.float32)
    out = np.zeros(w * h, np.float32)
    ka = _check(monkeypatch, ptx, "divmod", (2,), (8,), (a, out, np.int32(w), np.int32(h)),
                {"divmod_param_2": w, "divmod_param_3": h})
    assert ka.params[1].writes_exact


def test_unsigned_compare_min_and_select(ptx, monkeypatch):
    n = 13
    a = np.zeros(n, np.float32)
    out = np.zeros(n, np.float32)
    _check(monkeypatch, ptx, "clamp", (2,), (8,), (a, out, np.uint32(n)), {"clamp_param_2": n})


def test_data_dependent_guard_is_a_may_write(ptx, monkeypatch):
    n = 20
    x = np.where(np.arange(n) % 3 == 0, 1.0, -1.0).astype(np.float32)
    y = np.zeros(n, np.float32)
    ka = _check(monkeypatch, ptx, "positive", (2,), (16,), (x, y, np.int32(n)),
                {"positive_param_2": n}, exact_kinds=("read",))
    assert not ka.params[1].writes_exact
    fp = ka.footprint({"positive_param_2": n}, (2,), (16,), ((0, 2), (0, 1), (0, 1)))
    assert fp[1].writes == [(0, n * 4)] and not fp[1].writes_exact
    assert "may" in ka.describe() and "over-approximated" in ka.describe()


def test_loop_with_break_is_a_may_write(ptx, monkeypatch):
    n = 6
    x = np.ones(3 * n, np.int32)
    x[[3, 8, 13]] = 0
    y = np.zeros(3 * n, np.int32)
    ka = _check(monkeypatch, ptx, "until_zero", (3,), (1,), (x, y, np.int32(n)),
                {"until_zero_param_2": n}, exact_kinds=())
    assert not ka.params[1].writes_exact


def test_not_distributable_footprint_is_whole(ptx):
    ka = kernel_access(ptx, "chase")
    fp = ka.footprint({"chase_param_1": 4}, (1,), (4,), ((0, 1), (0, 1), (0, 1)))
    assert fp[0].reads == fp[0].writes == [WHOLE_INTERVAL] and not fp[0].writes_exact


def test_partition_command_line(ptx, tmp_path, capsys):
    from cpuify.cli.main import main
    path = tmp_path / "k.ptx"
    path.write_text(ptx)
    assert main(["explain", "--partition", str(path), "--kernel", "stencil"]) == 0
    out = capsys.readouterr().out
    assert "kernel stencil: distributable" in out and "write set exact" in out
    assert "split: y" in out
    assert main(["explain", "--partition", str(path), "--kernel", "matmul", "--grid", "4,2",
                 "--block", "8,8", "--scalar", "matmul_param_3=32"]) == 0
    assert "split: x (grid (4, 2, 1)" in capsys.readouterr().out
    assert main(["explain", "--partition", str(path), "--kernel", "chase"]) == 0
    assert "not distributable: a pointer loaded from memory" in capsys.readouterr().out
    assert main(["explain", "--partition", str(path), "--kernel", "matmul", "--grid", "4",
                 "--block", "8", "--scalar", "n"]) == 1
    assert "NAME=INTEGER" in capsys.readouterr().err


@pytest.mark.parametrize("kernel, why", [
    ("chase", "pointer loaded from memory"),
    ("to_global", "module variable 'total'"),
    ("choose", "pointer chosen between parameters"),
    ("dmalloc", "malloc"),
    ("in_struct", "struct parameter"),
])
def test_not_distributable(ptx, kernel, why):
    ka = kernel_access(ptx, kernel)
    assert not ka.distributable
    assert why in ka.reason
    assert why in ka.describe()


def test_text_round_trip(ptx):
    for kernel in ("matmul", "stencil", "histogram", "chase", "gridstride"):
        ka = kernel_access(ptx, kernel)
        back = KernelAccess.from_text(ka.to_text())
        assert back.to_text() == ka.to_text()
        assert back.describe() == ka.describe()
        assert (back.distributable, back.reason) == (ka.distributable, ka.reason)
        if ka.distributable:
            scalars = {name: 9 for name, _ in ka.scalar_params}
            for box in (((0, 1), (0, 1), (0, 1)), ((1, 3), (0, 2), (0, 1))):
                assert back.footprint(scalars, (3, 2), (4, 4), box) == \
                    ka.footprint(scalars, (3, 2), (4, 4), box)
    with pytest.raises(CpuifyError, match="cannot be read back"):
        KernelAccess.from_text('{"format": 1}')


def test_isl_map_of_a_launch(ptx):
    ka = kernel_access(ptx, "axpy")
    m = ka.params[1].writes.map({"axpy_param_0": 10}, (2,), (8,))
    assert m.is_equal(type(m)("{ [bx, by, bz] -> [o] : by = 0 and bz = 0 and 0 <= bx < 2 and "
                              "8*bx <= floor(o/4) < 8*bx + 8 and 0 <= o < 40 }"))


def test_missing_scalar_is_a_clear_error(ptx):
    ka = kernel_access(ptx, "axpy")
    with pytest.raises(CpuifyError, match="axpy_param_0"):
        ka.footprint({}, (1,), (32,), ((0, 1), (0, 1), (0, 1)))
    with pytest.raises(CpuifyError, match="not in the module"):
        kernel_access(ptx, "nope")


def test_split_dimension(ptx):
    assert kernel_access(ptx, "stencil").heuristic_split() == "y"
    assert kernel_access(ptx, "axpy").heuristic_split() == "x"
    assert kernel_access(ptx, "histogram").heuristic_split() is None
    mm = kernel_access(ptx, "matmul")
    assert mm.disjoint_write_dims({"matmul_param_3": 8}, (2, 2), (4, 4)) == ["x", "y"]
    hist = kernel_access(ptx, "histogram")
    assert hist.disjoint_write_dims({"histogram_param_2": 64}, (2,), (32,)) == []


def test_footprint_type():
    assert Footprint() == Footprint([], [], [])


COOPERATIVE = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void twophase(float* x, int n) {
  cg::grid_group g = cg::this_grid();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
  g.sync();
  if (i < n) x[i] *= 2.0f;
}
extern "C" __global__ void child(float* x) { x[threadIdx.x] = 1.0f; }
extern "C" __global__ void parent(float* x) { if (threadIdx.x == 0) child<<<1, 32>>>(x); }
"""


def test_grid_sync_and_dynamic_parallelism_are_not_distributable():
    ptx = compile_to_ptx(COOPERATIVE, options=["-rdc=true"]).ptx
    assert "grid-wide sync" in kernel_access(ptx, "twophase").reason
    assert "dynamic parallelism" in kernel_access(ptx, "parent").reason
    assert kernel_access(ptx, "child").distributable


def _random_kernels(seed: int, count: int) -> tuple[str, list[str]]:
    """Kernels with random index arithmetic (affine terms, quotients, remainders, shifts,
    min/max, loops with random bounds and steps, random guards), every index masked into
    [0, 256) elements so that the interpreter stays inside the arrays."""
    import random
    rng = random.Random(seed)
    names = []
    parts = []
    for k in range(count):
        def term() -> str:
            a, b, c = rng.randint(-3, 3), rng.randint(-3, 3), rng.randint(-5, 5)
            e = f"({a} * i + {b} * j + {c} * n + {rng.randint(-9, 9)})"
            kind = rng.choice(["plain", "div", "rem", "shift", "min", "mask"])
            if kind == "div":
                e = f"({e} / {rng.randint(2, 5)})"
            elif kind == "rem":
                e = f"({e} % {rng.randint(2, 7)})"
            elif kind == "shift":
                e = f"({e} >> {rng.randint(1, 3)})"
            elif kind == "min":
                e = f"min({e}, {rng.randint(-4, 20)})"
            elif kind == "mask":
                e = f"({e} & {rng.choice([3, 7, 12, -4])})"
            return e
        guard = rng.choice(["i < n", "i > j", "i + j < 2 * n", "j != 3", "(unsigned)(i - 2) < 5u", "true"])
        loop = rng.choice([None, (0, "n", 1), (1, "n + 2", 2), ("j", "12", 3)])
        index = f"({term()} + {term()} * n" + (" + 3 * k" if loop else "") + ")"
        body = f"y[({index}) & 255] += x[({term()} + j) & 255];"
        if loop:
            body = f"for (int k = {loop[0]}; k < {loop[1]}; k += {loop[2]}) {{ {body} }}"
        names.append(f"random{k}")
        parts.append(f"""extern "C" __global__ void random{k}(const float* x, float* y, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  if ({guard}) {{ {body} }}
}}""")
    return "\n".join(parts), names


def test_random_index_arithmetic_is_never_under_approximated(monkeypatch):
    src, names = _random_kernels(19, 12)
    ptx = compile_to_ptx(src).ptx
    for k, name in enumerate(names):
        x = np.zeros(256, np.float32)
        y = np.zeros(256, np.float32)
        for n in (3 + k % 6,):
            _check(monkeypatch, ptx, name, (2, 2), (4, 4), (x, y, np.int32(n)),
                   {f"{name}_param_2": n}, exact_kinds=(), whole_allowed=True)
