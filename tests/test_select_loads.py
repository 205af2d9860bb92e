"""Selects in index arithmetic: `selects-to-min-max` (transforms/canonicalize.py) turns a
select on a compare of its own operands into min/max (a clamp the code generator checks
once per block), and a shared-memory load whose address goes through a select
(`s[ty][tx > 0 ? tx - 1 : tx]`) loads both sides, contiguously, when they are at most the
runtime's guard zone apart (codegen/speculation.py selected_shared_load).  Results are
checked against NumPy and the reference interpreter, in the generic code and the code
specialized for the block shape."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import cpuify
from cpuify.codegen.kernel_abi import BUFFER_GUARD
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import interpret_kernel
from cpuify.ir.printer import print_op
from cpuify.lifting import lift_kernel
from cpuify.transforms.canonicalize import SelectsToMinMax

PTX = r"""
.version 8.0
.target sm_75
.address_size 64
.visible .entry selects(.param .u64 out_p, .param .u32 n) {
    .reg .pred %p<8>;
    .reg .b32 %r<20>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out_p];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %tid.x;
    add.s32 %r3, %r2, -5;
    setp.gt.s32 %p1, %r3, 0;
    selp.b32 %r4, %r3, 0, %p1;          // max(r3, 0)
    setp.lt.s32 %p2, %r4, %r1;
    selp.b32 %r5, %r1, %r4, %p2;        // r4 < n ? n : r4  = max(r4, n)
    setp.le.u32 %p3, %r2, %r1;
    selp.b32 %r6, %r2, %r1, %p3;        // min.u32(r2, n)
    setp.gt.s32 %p4, %r3, %r1;
    selp.b32 %r7, %r2, %r1, %p4;        // not a min/max: compares other values
    setp.ne.s32 %p5, %r3, 0;
    selp.b32 %r8, %r3, 0, %p5;          // not a min/max: ne
    cvt.rn.f32.s32 %f1, %r3;
    setp.gt.f32 %p6, %f1, 0f00000000;
    selp.f32 %f2, %f1, 0f00000000, %p6;  // floats keep their select (NaN)
    cvt.rzi.s32.f32 %r9, %f2;
    add.s32 %r10, %r4, %r5;
    add.s32 %r11, %r10, %r6;
    add.s32 %r12, %r11, %r7;
    add.s32 %r13, %r12, %r8;
    add.s32 %r14, %r13, %r9;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r14;
    ret;
}
"""


def _expected(n: int, threads: int) -> np.ndarray:
    t = np.arange(threads, dtype=np.int64)
    r3 = t - 5
    r4 = np.maximum(r3, 0)
    r5 = np.maximum(r4, n)
    r6 = np.minimum(t, n)
    r7 = np.where(r3 > n, t, n)
    r8 = r3                         # r3 != 0 ? r3 : 0
    r9 = np.maximum(r3, 0)
    return (r4 + r5 + r6 + r7 + r8 + r9).astype(np.int32)


def test_selects_to_min_max_on_ir() -> None:
    module = parse_ptx(PTX)
    kernel = lift_kernel(module, module.functions["selects"]).op
    assert SelectsToMinMax().run(kernel) == 3
    text = print_op(kernel)
    assert len(re.findall(r'"ptx\.max"', text)) == 2 and len(re.findall(r'"ptx\.min"', text)) == 1
    # the three that must stay selects: other operands than compared, `ne`, floats
    assert len(re.findall(r'"ptx\.selp"', text)) == 3
    assert 'mods = ["u32"]' in text                  # min.u32 keeps the compare's type


@pytest.mark.parametrize("n", [0, 3, 40])
def test_selects_to_min_max_results(n: int) -> None:
    threads = 64
    for opts in ((), ("--disable-pass=selects-to-min-max",)):
        f = cpuify.RawModule(ptx=PTX, options=opts).get_function("selects")
        for _ in range(2):          # generic code, then the specialized block shape
            out = np.zeros(threads, np.int32)
            f((1,), (threads,), (out, np.int32(n)))
            np.testing.assert_array_equal(out, _expected(n, threads))
    out = np.zeros(threads, np.int32)
    interpret_kernel(PTX, "selects", (1,), (threads,), (out, np.int32(n)))
    np.testing.assert_array_equal(out, _expected(n, threads))


NEIGHBOURS = r'''
// a tile's left and right neighbours chosen per thread (at the tile's edge a cell is its
// own neighbour: the select's other side reads before the tile's first element, inside
// the runtime's guard zone), a row above chosen the same way, and two sides too far apart
// to load both (a branch: each side loaded only by the lanes that take it)
extern "C" __global__ void neighbours(const float *in, float *out, int nx) {
    __shared__ float tile[16][16];
    __shared__ float big[512];
    int tx = threadIdx.x, ty = threadIdx.y;
    int gx = blockIdx.x * 16 + tx, gy = blockIdx.y * 16 + ty;
    tile[ty][tx] = in[gy * nx + gx];
    big[ty * 16 + tx] = 2.0f * in[gy * nx + gx];
    big[256 + ty * 16 + tx] = -1.0f * in[gy * nx + gx];
    __syncthreads();
    int w = tx > 0 ? tx - 1 : tx;
    int e = tx < 15 ? tx + 1 : tx;
    int n = ty > 0 ? ty - 1 : ty;
    int far = ((gx + gy) & 1) ? ty * 16 + tx + 256 : ty * 16 + tx;
    out[gy * nx + gx] = tile[ty][w] + 10.0f * tile[ty][e] + 100.0f * tile[n][tx] + big[far];
}'''


def _neighbours_ref(a: np.ndarray) -> np.ndarray:
    ny, nx = a.shape
    t = a.reshape(ny // 16, 16, nx // 16, 16).transpose(0, 2, 1, 3)   # tiles [by, bx, ty, tx]
    idx = np.arange(16)
    w, e, n = np.maximum(idx - 1, 0), np.minimum(idx + 1, 15), np.maximum(idx - 1, 0)
    gy, gx = np.meshgrid(np.arange(ny), np.arange(nx), indexing="ij")
    far = np.where((gx + gy) & 1, -1.0, 2.0) * a
    res = t[..., :, w] + 10 * t[..., :, e] + 100 * t[..., n, :]
    return res.transpose(0, 2, 1, 3).reshape(ny, nx) + far


def test_select_in_shared_address() -> None:
    ptx = compile_to_ptx(NEIGHBOURS).ptx
    rng = np.random.default_rng(5)
    a = rng.integers(-50, 50, (32, 48)).astype(np.float32)
    ref = _neighbours_ref(a.astype(np.float64))
    for opts in ((), ("--disable-pass=selects-to-min-max",)):
        f = cpuify.RawModule(ptx=ptx, options=opts).get_function("neighbours")
        for _ in range(3):          # generic code, then the specialized block shape
            out = np.zeros_like(a)
            f((3, 2), (16, 16), (a, out, np.int32(48)))
            np.testing.assert_array_equal(out, ref)
    out = np.zeros((16, 16), np.float32)
    small = np.ascontiguousarray(a[:16, :16])
    interpret_kernel(ptx, "neighbours", (1, 1), (16, 16), (small, out, np.int32(16)))
    np.testing.assert_array_equal(out, _neighbours_ref(small.astype(np.float64)))


def test_loads_of_both_sides_are_plain_vector_loads() -> None:
    """In the code specialized for 16x16 blocks, the three neighbour reads are plain vector
    loads and selects, the far-apart pair (1 KiB) masked loads: no gathers from shared
    memory; switched off, the selects of addresses gather."""
    from cpuify.codegen import jit
    from cpuify.codegen.llvm_gen import ModuleCodegen
    from cpuify.compiler import lift_and_optimize
    from cpuify.transforms.pass_manager import PipelineOptions
    ptx = compile_to_ptx(NEIGHBOURS).ptx

    def llvm_text(pipeline: PipelineOptions) -> str:
        module = parse_ptx(ptx)
        gen = ModuleCodegen(module, *jit.triple_and_layout())
        lifted, _ = lift_and_optimize(module, module.functions["neighbours"], pipeline, (16, 16, 1))
        gen.add_kernel(lifted, (16, 16, 1))
        return str(jit.optimize(gen.llvm_text()))

    text = llvm_text(PipelineOptions())
    assert "masked.load" in text
    # the remaining gathers, if any, read global memory (`in`), never the shared tile
    assert text.count("masked.gather") <= 2


def test_guard_zone_matches_the_runtime() -> None:
    src = (Path(cpuify.__file__).parent / "runtime" / "cpuify_rt.c").read_text()
    m = re.search(r"#define CPUIFY_BUFFER_GUARD (\d+)", src)
    assert m and int(m.group(1)) == BUFFER_GUARD


STEPS = r'''
// a 1D pyramid stencil (the suite's thermal_pyramid in one dimension): the neighbours are
// chosen per thread before a time-step loop with barriers, from a cell index that depends
// on a load (`shift[0]`), so the chosen offsets are kept per thread across the loop's
// barrier instead of recomputed; a segment that resumes there reads them from their slots
extern "C" __global__ void steps(const float *in, float *out, const int *shift, int n,
                                 int nsteps) {
    __shared__ float ta[64], tb[64];
    const int tx = threadIdx.x;
    const int gx = blockIdx.x * (64 - 2 * nsteps) - nsteps + tx + shift[0];
    ta[tx] = in[min(max(gx, 0), n - 1)];
    const int w = gx > 0 ? tx - 1 : tx;
    const int e = gx < n - 1 ? tx + 1 : tx;
    float *cur = ta, *nxt = tb;
    __syncthreads();
    for (int s = 0; s < nsteps; s++) {
        if (gx >= 0 && gx < n && tx > s && tx < 63 - s)
            nxt[tx] = 0.25f * cur[w] + 0.5f * cur[tx] + 0.25f * cur[e];
        __syncthreads();
        float *t = cur; cur = nxt; nxt = t;
        __syncthreads();
    }
    if (gx >= 0 && gx < n && tx >= nsteps && tx < 64 - nsteps)
        out[gx] = cur[tx];
}'''


def _steps_ref(x: np.ndarray, nsteps: int) -> np.ndarray:
    y = x.astype(np.float64)
    for _ in range(nsteps):
        p = np.pad(y, 1, mode="edge")
        y = 0.25 * p[:-2] + 0.5 * p[1:-1] + 0.25 * p[2:]
    return y


@pytest.mark.parametrize("nsteps", [1, 2, 3, 5])
def test_select_behind_a_kept_value(nsteps: int) -> None:
    """The load `cur[w]` goes through the select that chose w, but in the segment after the
    loop's barrier w's address offset comes from its slot: the select's condition (gx > 0)
    was never computed there, so the load must not be split into the select's two sides.
    Before, the cells at both ends of the grid read the wrong neighbour from step 2 on."""
    ptx = compile_to_ptx(STEPS).ptx
    n = 200
    x = np.random.default_rng(3).random(n).astype(np.float32)
    shift = np.zeros(1, np.int32)
    span = 64 - 2 * nsteps
    grid = ((n + span - 1) // span,)
    ref = _steps_ref(x, nsteps)
    f = cpuify.RawModule(ptx=ptx).get_function("steps")
    for _ in range(3):          # generic code, then the specialized block shape
        out = np.zeros(n, np.float32)
        f(grid, (64,), (x, out, shift, np.int32(n), np.int32(nsteps)))
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    out = np.zeros(n, np.float32)
    interpret_kernel(ptx, "steps", grid, (64,), (x, out, shift, np.int32(n), np.int32(nsteps)))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
