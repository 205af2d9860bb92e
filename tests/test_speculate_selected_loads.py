"""`speculate-selected-loads` (transforms/selected_loads.py): a shared load at an index
chosen per thread, `s[p ? i + a : i + b]`, becomes two loads and a select of their values
when the two addresses are at most the runtime's guard band apart.  IR in / IR out on
hand-written PTX (positive: constant sides as nvcc writes them, sides that differ by a
constant, a pointer that is a loop's block argument; negative: global memory, sides too far
apart, volatile, a condition the same for the whole block); the reference interpreter on
the rewritten IR (a speculated load outside the shared window reads an arbitrary value, an
ordinary one is an error); end-to-end kernels of the suite's thermal_pyramid shape against
NumPy and the interpreter, with the pass and without it; code generation refusing a kernel
that needs a wider guard band than the runtime keeps."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cpuify
from cpuify.codegen.kernel_abi import BUFFER_GUARD
from cpuify.errors import CpuifyError, LaunchError
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import interpret_kernel
from cpuify.interp.machine import InterpModule
from cpuify.ir.core import Operation
from cpuify.ir.parser import parse_op
from cpuify.ir.printer import print_op
from cpuify.lifting import lift_kernel
from cpuify.transforms.pass_manager import PipelineOptions, run_pipeline
from cpuify.transforms.selected_loads import SpeculateSelectedLoads

# One kernel, its load written several ways: out[tid] = s[tid + k] with k chosen per thread
# (LOAD below), the 64 floats of s from `in`.
_TEMPLATE = r"""
.version 8.0
.target sm_75
.address_size 64
.visible .entry pick(.param .u64 in_p, .param .u64 out_p) {
    .reg .pred %p<4>;
    .reg .b32 %r<20>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<12>;
    .shared .align 4 .b8 s[256];
    ld.param.u64 %rd1, [in_p];
    ld.param.u64 %rd2, [out_p];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mov.u32 %r1, %tid.x;
    mov.u32 %r9, %ctaid.x;
    mul.wide.u32 %rd5, %r1, 4;
    add.s64 %rd6, %rd3, %rd5;
    ld.global.f32 %f1, [%rd6];
    mov.u32 %r2, s;
    shl.b32 %r3, %r1, 2;
    add.s32 %r4, %r2, %r3;
    st.shared.f32 [%r4], %f1;
    bar.sync 0;
    setp.gt.u32 %p1, %r1, 0;
LOAD
    add.s64 %rd7, %rd4, %rd5;
    st.global.f32 [%rd7], %f2;
    ret;
}
"""

#: nvcc's form: `s[tid > 0 ? tid - 1 : tid]` as base + (selp(-1, 0, p) << 2)
CONST_SIDES = """
    selp.b32 %r5, -1, 0, %p1;
    shl.b32 %r6, %r5, 2;
    add.s32 %r7, %r4, %r6;
    ld.shared.f32 %f2, [%r7];"""
#: the sides as values: tid - 1 and tid
VALUE_SIDES = """
    add.s32 %r10, %r1, -1;
    selp.b32 %r5, %r10, %r1, %p1;
    shl.b32 %r6, %r5, 2;
    add.s32 %r7, %r2, %r6;
    ld.shared.f32 %f2, [%r7];"""
#: 100 elements apart: 400 bytes, more than the guard band
FAR_SIDES = """
    selp.b32 %r5, 100, 0, %p1;
    shl.b32 %r6, %r5, 2;
    add.s32 %r7, %r4, %r6;
    ld.shared.f32 %f2, [%r7];"""
VOLATILE = CONST_SIDES.replace("ld.shared.f32", "ld.volatile.shared.f32")
#: the same select on a global address (the input): a neighbour there may be unmapped
GLOBAL = """
    selp.b32 %r5, -1, 0, %p1;
    mul.wide.s32 %rd8, %r5, 4;
    add.s64 %rd9, %rd6, %rd8;
    ld.global.f32 %f2, [%rd9];"""
#: a condition on the block index only: every thread of a block takes the same side
UNIFORM = """
    setp.gt.u32 %p2, %r9, 0;
    selp.b32 %r5, -1, 0, %p2;
    shl.b32 %r6, %r5, 2;
    add.s32 %r7, %r4, %r6;
    ld.shared.f32 %f2, [%r7];"""


def _kernel(load: str) -> Operation:
    module = parse_ptx(_TEMPLATE.replace("LOAD", load))
    return lift_kernel(module, module.functions["pick"]).op


def _loads(text: str) -> list[str]:
    return re.findall(r'"ptx\.ld"\(.*', text)


@pytest.mark.parametrize("load, guard", [(CONST_SIDES, 4), (VALUE_SIDES, 4)])
def test_selected_index_becomes_two_loads(load: str, guard: int) -> None:
    kernel = _kernel(load)
    assert SpeculateSelectedLoads().run(kernel) == 1
    text = print_op(kernel)
    shared = [ld for ld in _loads(text) if '"shared"' in ld]
    assert len(shared) == 2 and all("speculative" in ld for ld in shared)
    # the value is selected now, not the address
    assert re.search(r'"ptx\.selp"\(%\d+, %\d+, %\d+\) \{mods = \["f32"\]', text)
    assert not re.search(r'"ptx\.selp"\([^)]*\) \{mods = \["b32"\]', text)
    assert kernel.attributes["shared_guard"] == guard
    assert SpeculateSelectedLoads().run(kernel) == 0        # nothing left to rewrite


@pytest.mark.parametrize("load", [FAR_SIDES, VOLATILE, GLOBAL, UNIFORM])
def test_loads_left_alone(load: str) -> None:
    kernel = _kernel(load)
    before = print_op(kernel)
    assert SpeculateSelectedLoads().run(kernel) == 0
    assert print_op(kernel) == before and "shared_guard" not in kernel.attributes


def test_guard_option_bounds_the_distance() -> None:
    """400 bytes apart: rewritten once the band allowed is wider (the guard the kernel then
    needs is recorded, and code generation refuses it: test_wider_guard_is_refused)."""
    kernel = _kernel(FAR_SIDES)
    assert SpeculateSelectedLoads(guard=400).run(kernel) == 0      # (400 + 4 bytes read)
    assert SpeculateSelectedLoads(guard=404).run(kernel) == 1
    assert kernel.attributes["shared_guard"] == 400


def _run_pick(load: str, options: tuple[str, ...]) -> np.ndarray:
    ptx = _TEMPLATE.replace("LOAD", load)
    x = np.arange(1, 65, dtype=np.float32)
    f = cpuify.RawModule(ptx=ptx, options=options).get_function("pick")
    outs = []
    for _ in range(2):          # generic code, then the code for the block shape
        out = np.zeros(64, np.float32)
        f((1,), (64,), (x, out))
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    return outs[0]


@pytest.mark.parametrize("load", [CONST_SIDES, VALUE_SIDES])
def test_pick_results(load: str) -> None:
    x = np.arange(1, 65, dtype=np.float32)
    want = x[np.maximum(np.arange(64) - 1, 0)]
    for options in ((), ("--disable-pass=speculate-selected-loads",)):
        np.testing.assert_array_equal(_run_pick(load, options), want)
    out = np.zeros(64, np.float32)
    interpret_kernel(_TEMPLATE.replace("LOAD", load), "pick", (1,), (64,), (x, out))
    np.testing.assert_array_equal(out, want)


def test_wider_guard_is_refused() -> None:
    with pytest.raises(CpuifyError, match="guard band of 400 bytes"):
        _run_pick(FAR_SIDES, ("--passes=speculate-selected-loads{guard=1024}",))


def test_interpreter_reads_speculated_loads_outside_the_window() -> None:
    """Thread 0's speculated load reads 4 bytes before the shared window: on the rewritten IR
    the interpreter gives the right result; the same IR with the mark taken off is an
    out-of-bounds access (what the mark is for)."""
    ptx = _TEMPLATE.replace("LOAD", CONST_SIDES)
    kernel = _kernel(CONST_SIDES)
    run_pipeline(kernel, PipelineOptions(passes=("speculate-selected-loads",)))
    text = print_op(kernel)
    x = np.arange(1, 65, dtype=np.float32)
    interp = InterpModule(ptx)
    interp.use_ir("pick", parse_op(text))
    out = np.zeros(64, np.float32)
    interp.launch("pick", (1,), (64,), (x, out))
    np.testing.assert_array_equal(out, x[np.maximum(np.arange(64) - 1, 0)])
    unmarked = InterpModule(ptx)
    unmarked.use_ir("pick", parse_op(text.replace(", speculative = unit", "")))
    with pytest.raises(LaunchError, match="out of bounds"):
        unmarked.launch("pick", (1,), (64,), (x, np.zeros(64, np.float32)))


# --- the suite's thermal_pyramid shape, our own kernel ---------------------------------------

PYRAMID = r'''
// `steps` smoothing steps of a 2-D grid in one 16x16 shared tile per block (a halo of
// `steps` cells), the neighbours' indices chosen per thread before the step loop (a cell at
// the grid's edge is its own neighbour), two tiles swapped through pointers every step
#define T 16
extern "C" __global__ void pyramid(const float *in, float *out, int nx, int ny, int steps) {
    __shared__ float ta[T][T], tb[T][T];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int span = T - 2 * steps;
    const int gx = blockIdx.x * span - steps + tx, gy = blockIdx.y * span - steps + ty;
    const bool inside = gx >= 0 && gx < nx && gy >= 0 && gy < ny;
    ta[ty][tx] = in[min(max(gy, 0), ny - 1) * nx + min(max(gx, 0), nx - 1)];
    const int w = gx > 0 ? tx - 1 : tx, e = gx < nx - 1 ? tx + 1 : tx;
    const int n = gy > 0 ? ty - 1 : ty, s = gy < ny - 1 ? ty + 1 : ty;
    float (*cur)[T] = ta, (*nxt)[T] = tb;
    __syncthreads();
    for (int k = 0; k < steps; k++) {
        if (inside && tx > k && tx < T - 1 - k && ty > k && ty < T - 1 - k)
            nxt[ty][tx] = 0.5f * cur[ty][tx] + 0.25f * (cur[ty][w] - cur[ty][e])
                          + 0.125f * (cur[n][tx] + 2.0f * cur[s][tx]);
        __syncthreads();
        float (*t)[T] = cur; cur = nxt; nxt = t;
        __syncthreads();
    }
    if (inside && tx >= steps && tx < T - steps && ty >= steps && ty < T - steps)
        out[gy * nx + gx] = cur[ty][tx];
}'''


def _pyramid_ref(a: np.ndarray, steps: int) -> np.ndarray:
    t = a.astype(np.float64)
    for _ in range(steps):
        p = np.pad(t, 1, mode="edge")
        t = 0.5 * t + 0.25 * (p[1:-1, :-2] - p[1:-1, 2:]) + 0.125 * (p[:-2, 1:-1] + 2 * p[2:, 1:-1])
    return t


@pytest.mark.parametrize("nx, ny, steps, interp", [(37, 23, 3, True), (20, 12, 1, True),
                                                   (40, 30, 5, False)])
def test_pyramid_shape(nx: int, ny: int, steps: int, interp: bool) -> None:
    """The grid's edges (where the unselected neighbour lies outside the tile: before its
    first row or after its last) in several blocks; both tiles through the swapped
    pointers; with and without the pass, natively and (the smaller grids) in the
    interpreter."""
    ptx = compile_to_ptx(PYRAMID).ptx
    a = np.random.default_rng(nx).integers(-40, 40, (ny, nx)).astype(np.float32)
    ref = _pyramid_ref(a, steps)
    span = 16 - 2 * steps
    grid = (-(-nx // span), -(-ny // span))

    def args(out: np.ndarray) -> tuple:
        return (a, out, np.int32(nx), np.int32(ny), np.int32(steps))
    for options in ((), ("--disable-pass=speculate-selected-loads",)):
        f = cpuify.RawModule(ptx=ptx, options=options).get_function("pyramid")
        for _ in range(2):          # generic code, then the code for the block shape
            out = np.zeros_like(a)
            f(grid, (16, 16), args(out))
            np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-4)
    if not interp:
        return          # (35 blocks: a minute in the interpreter)
    out = np.zeros_like(a)
    interpret_kernel(ptx, "pyramid", grid, (16, 16), args(out))
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-4)


def test_pyramid_loads_are_rewritten() -> None:
    """All four neighbour loads of the step loop, through whichever tile pointer nvcc keeps
    (a loop's block argument in its rolled form), become two loads each."""
    ptx = compile_to_ptx(PYRAMID).ptx
    module = parse_ptx(ptx)
    kernel = lift_kernel(module, module.functions["pyramid"]).op
    result = run_pipeline(kernel, PipelineOptions(passes=(
        "raise-structured-cf", "selects-to-min-max", "speculate-selected-loads")))
    assert result.counts["speculate-selected-loads"] >= 4
    assert result.counts["speculate-selected-loads"] % 4 == 0       # (nvcc's unrolled copies)
    assert 0 < kernel.attributes["shared_guard"] <= 64 < BUFFER_GUARD


#: two halves of one array as ping-pong tiles, the pointers swapped through the loop's block
#: arguments (registers %r20/%r21 carried around it): 3 steps of out[t] = cur[t > 0 ? t - 1 : t]
SWAPPED = r"""
.version 8.0
.target sm_75
.address_size 64
.visible .entry swapped(.param .u64 in_p, .param .u64 out_p) {
    .reg .pred %p<4>;
    .reg .b32 %r<30>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<12>;
    .shared .align 4 .b8 s[256];
    ld.param.u64 %rd1, [in_p];
    ld.param.u64 %rd2, [out_p];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd5, %r1, 4;
    add.s64 %rd6, %rd3, %rd5;
    ld.global.f32 %f1, [%rd6];
    mov.u32 %r20, s;
    add.s32 %r21, %r20, 128;
    shl.b32 %r3, %r1, 2;
    add.s32 %r4, %r20, %r3;
    st.shared.f32 [%r4], %f1;
    setp.gt.u32 %p1, %r1, 0;
    selp.b32 %r5, -1, 0, %p1;
    shl.b32 %r6, %r5, 2;
    mov.u32 %r9, 0;
    bar.sync 0;
$L_step:
    add.s32 %r7, %r20, %r3;
    add.s32 %r8, %r7, %r6;
    ld.shared.f32 %f2, [%r8];
    add.s32 %r10, %r21, %r3;
    st.shared.f32 [%r10], %f2;
    bar.sync 0;
    mov.u32 %r11, %r20;
    mov.u32 %r20, %r21;
    mov.u32 %r21, %r11;
    add.s32 %r9, %r9, 1;
    setp.lt.u32 %p2, %r9, 3;
    @%p2 bra $L_step;
    add.s32 %r12, %r20, %r3;
    ld.shared.f32 %f3, [%r12];
    add.s64 %rd7, %rd4, %rd5;
    st.global.f32 [%rd7], %f3;
    ret;
}
"""


def test_pointer_carried_around_a_loop() -> None:
    """The tile pointer a block argument of the loop (the two halves swapped each step):
    the load through it and the select is split; results natively (with and without the
    pass) and in the interpreter on the lifted IR and on the rewritten one."""
    module = parse_ptx(SWAPPED)
    kernel = lift_kernel(module, module.functions["swapped"]).op
    run_pipeline(kernel, PipelineOptions(passes=("raise-structured-cf", "speculate-selected-loads")))
    text = print_op(kernel)
    assert sum("speculative" in ld for ld in _loads(text)) == 2
    assert kernel.attributes["shared_guard"] == 4
    x = np.arange(1, 33, dtype=np.float32)
    want = x[np.maximum(np.arange(32) - 3, 0)]
    for options in ((), ("--disable-pass=speculate-selected-loads",)):
        f = cpuify.RawModule(ptx=SWAPPED, options=options).get_function("swapped")
        for _ in range(2):
            out = np.zeros(32, np.float32)
            f((1,), (32,), (x, out))
            np.testing.assert_array_equal(out, want)
    for ir in (None, text):
        interp = InterpModule(SWAPPED)
        if ir is not None:
            interp.use_ir("swapped", parse_op(ir))
        out = np.zeros(32, np.float32)
        interp.launch("swapped", (1,), (32,), (x, out))
        np.testing.assert_array_equal(out, want)
