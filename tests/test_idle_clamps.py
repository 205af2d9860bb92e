"""Clamped indices (`min(x, n - 1)`, `max(x - 1, 0)`) in code specialized for a block shape:
where no clamp of a segment changes anything for any thread of the block, the segment runs
a copy of its thread loop without them (SegmentEmitter.idle_clamp), where the loads are
contiguous.  Guards next to clamps must keep working.  Checked against NumPy with sizes that are not multiples of the block, so that
edge blocks take the clamping copy and interior blocks the other; each kernel runs twice
(generic code, then the specialized code)."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify

SRC = r'''
// clamp-to-edge 3-point blur along rows, 2-D blocks (16, 4)
extern "C" __global__ void blur_rows(const float *in, float *out, int nx, int ny) {
    int x = blockIdx.x * 16 + threadIdx.x, y = blockIdx.y * 4 + threadIdx.y;
    int xc = min(x, nx - 1), yc = min(y, ny - 1);
    const float *row = in + (size_t)yc * nx;
    float v = row[max(xc - 1, 0)] + 2.0f * row[xc] + row[min(xc + 1, nx - 1)];
    if (x < nx && y < ny) out[(size_t)y * nx + x] = v;
}
// a decreasing index: read the row backwards, clamped at 0
extern "C" __global__ void reverse_clamped(const int *in, int *out, int n, int shift) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int j = max(n - 1 - i - shift, 0);
    if (i < n) out[i] = in[j];
}
// guards in both forms nvcc emits, and one on a shrinking index
extern "C" __global__ void guarded(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int j = n - 1 - i;
    float v = 2.0f * x[i];
    if (j >= 8) v += x[i + 8];
    if (i < n - 3) v += 1.0f;
    y[i] = v;
}
// an index that wraps around inside a block: the clamp must stay
extern "C" __global__ void wrapping(const int *in, int *out, int n, int base) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int k = base + threadIdx.x * 0x1000000;          // wraps past INT_MAX for large base
    out[i] = in[min(max(k, 0), n - 1) % n];
}
'''


@pytest.fixture(scope="module")
def mod():
    return cpuify.RawModule(code=SRC)


def _twice(f, grid, block, args, out):
    got = []
    for _ in range(2):
        out[:] = -7
        f(grid, block, args)
        got.append(out.copy())
    return got


@pytest.mark.parametrize("nx, ny", [(64, 16), (70, 13), (5, 3)])
def test_blur_rows(mod, nx, ny):
    rng = np.random.default_rng(nx * ny)
    a = rng.standard_normal((ny, nx)).astype(np.float32)
    out = np.zeros_like(a)
    left = np.concatenate([a[:, :1], a[:, :-1]], 1)
    right = np.concatenate([a[:, 1:], a[:, -1:]], 1)
    want = left + 2 * a + right
    grid = ((nx + 15) // 16, (ny + 3) // 4)
    for got in _twice(mod.get_function("blur_rows"), grid, (16, 4),
                      (a, out, np.int32(nx), np.int32(ny)), out):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shift", [0, 5, 300])
def test_decreasing_index(mod, shift):
    n = 1000
    a = np.arange(n, dtype=np.int32) * 3
    out = np.zeros_like(a)
    i = np.arange(n)
    want = a[np.maximum(n - 1 - i - shift, 0)]
    for got in _twice(mod.get_function("reverse_clamped"), ((n + 127) // 128,), (128,),
                      (a, out, np.int32(n), np.int32(shift)), out):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("base", [0, 2**31 - 2**26])
def test_wrapping_index_keeps_its_clamp(mod, base):
    n = 97
    a = np.arange(n, dtype=np.int32)
    out = np.zeros(256, np.int32)
    t = np.arange(256) % 128
    k = ((base + t * 0x1000000 + 2**31) % 2**32 - 2**31).astype(np.int64)   # int32 wrap
    want = a[np.minimum(np.maximum(k, 0), n - 1) % n]
    for got in _twice(mod.get_function("wrapping"), (2,), (128,),
                      (a, out, np.int32(n), np.int32(base)), out):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [512, 500, 7])
def test_guards(mod, n):
    x = np.arange(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    i = np.arange(n)
    want = 2 * x + np.where(n - 1 - i >= 8, x[np.minimum(i + 8, n - 1)], 0) + (i < n - 3)
    for got in _twice(mod.get_function("guarded"), ((n + 127) // 128,), (128,),
                      (x, y, np.int32(n)), y):
        np.testing.assert_array_equal(got, want.astype(np.float32))


COLS = r'''
// clamp-to-edge 3-point blur along columns and rows of a 16x16-tile kernel: the row
// clamps follow threadIdx.y only (one value per row of threads), the column ones threadIdx.x
extern "C" __global__ void blur_2d(const float *in, float *out, int nx, int ny) {
    int x = blockIdx.x * 16 + threadIdx.x, y = blockIdx.y * 16 + threadIdx.y;
    int xc = min(x, nx - 1), yc = min(y, ny - 1);
    int up = max(yc - 1, 0), down = min(yc + 1, ny - 1);
    int left = max(xc - 1, 0), right = min(xc + 1, nx - 1);
    float v = in[(size_t)up * nx + xc] + in[(size_t)down * nx + xc] + 4.0f * in[(size_t)yc * nx + xc]
              + in[(size_t)yc * nx + left] + in[(size_t)yc * nx + right];
    if (x < nx && y < ny) out[(size_t)y * nx + x] = v;
}
'''


def _clamps(block):
    """(PTX lines of the clamps the block-wide check takes, of those left to each row) of
    blur_2d's only segment, specialized for `block`."""
    from cpuify.codegen.llvm_gen import KernelCodegen, ModuleCodegen
    from cpuify.codegen.speculation import idle_clamps
    from cpuify.compiler import lift_and_optimize
    from cpuify.frontend.nvrtc import compile_to_ptx
    from cpuify.frontend.ptx_parser import parse_ptx
    from cpuify.transforms.pass_manager import PipelineOptions
    ptx = parse_ptx(compile_to_ptx(COLS).ptx)
    lifted = lift_and_optimize(ptx, ptx.functions["blur_2d"], PipelineOptions())[0]
    kc = KernelCodegen(ModuleCodegen(ptx), lifted, block)
    checked, per_row = idle_clamps(kc, 0)
    texts = {op: str(op.attributes.get("line")) for op in list(checked) + per_row}
    return sorted(texts[op] for op in checked), sorted(texts[op] for op in per_row)


def test_row_clamps_stay_out_of_the_block_check():
    """Clamps of an index that follows threadIdx.y only have one value per row of threads
    (contiguous loads along x either way): they are left out of the block's check, so that
    blocks at the grid's top and bottom rows, whose row clamps act, still run the copy
    without the column clamps (the suite's thermal_pyramid: those blocks gathered)."""
    checked, per_row = _clamps((16, 16, 1))
    assert len(checked) == 3 and len(per_row) == 3     # min(x), max(xc-1), min(xc+1); the same for y
    # must not fire: blocks one thread wide along x run their thread loop along y
    checked1, per_row1 = _clamps((1, 16, 1))
    assert per_row1 == [] and sorted(checked1) == sorted(checked + per_row)
    # generic code: no block shape, no idle clamps
    assert _clamps(None) == ([], [])


@pytest.mark.parametrize("nx, ny", [(64, 48), (70, 37), (5, 3), (40, 17)])
def test_blur_2d(nx, ny):
    """Against NumPy, with blocks at every edge and corner (the row clamps acting, the
    column clamps acting, both, neither)."""
    rng = np.random.default_rng(nx + 100 * ny)
    a = rng.standard_normal((ny, nx)).astype(np.float32)
    p = np.pad(a, 1, mode="edge")
    want = p[:-2, 1:-1] + p[2:, 1:-1] + 4 * a + p[1:-1, :-2] + p[1:-1, 2:]
    out = np.zeros_like(a)
    f = cpuify.RawModule(code=COLS).get_function("blur_2d")
    grid = ((nx + 15) // 16, (ny + 15) // 16)
    for got in _twice(f, grid, (16, 16), (a, out, np.int32(nx), np.int32(ny)), out):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_explain_names_the_row_clamps(tmp_path, capsys):
    from cpuify.cli.main import main
    src = tmp_path / "blur.cu"
    src.write_text(COLS)
    assert main(["explain", "--block", "16,16", str(src)]) == 0
    text = capsys.readouterr().out
    assert "are checked once per block: where none changes anything, a copy of the thread " \
           "loop without them runs" in text
    assert "follow threadIdx.y/z only: left to each row of threads, out of the block's " \
           "check" in text
