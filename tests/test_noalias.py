"""Pointer-argument aliasing (issue #15, item 3): the pointer parameter an address is based
on (analysis.pointers.pointer_parameter), the kernel's `noalias_params` fact the barrier
passes read, the cheap check that records which parameters' non-overlap would remove a
barrier (`noalias_candidates`), and the launch-time specialization in the Python API: a
launch whose arrays are disjoint runs a variant compiled with the fact, any other launch
the code without it (the checked fallback)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cpuify
from cpuify.analysis.pointers import parameter_bases, pointer_parameter
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp.machine import InterpModule
from cpuify.ir.printer import print_op
from cpuify.ir.structure import block_body
from cpuify.transforms.pass_manager import PipelineOptions

# the paper's Fig. 9 kernel, shared by the API tests and the whole program below
FIG9 = r'''__global__ void fig9(const float *input, float *hidden, float *output, int hid) {
    __shared__ float node[H];
    __shared__ float weights[H][H];
    int by = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y;
    int index = (hid + 1) * H * by + (hid + 1) * ty + tx + 1 + (hid + 1);
    if (tx == 0) node[ty] = input[H * by + ty + 1];
    __syncthreads();
    weights[ty][tx] = hidden[index];
    __syncthreads();
    weights[ty][tx] = weights[ty][tx] * node[ty];
    __syncthreads();
    for (int p = 2; p <= H; p *= 2) {
        if (ty % p == 0) weights[ty][tx] += weights[ty + p / 2][tx];
        __syncthreads();
    }
    hidden[index] = weights[ty][tx];
    __syncthreads();
    if (tx == 0) output[by * hid + ty] = weights[tx][ty];
}
'''

SOURCE = r'''
#define H 16
// the paper's Fig. 9 (its barrier #2 orders hidden[] before output[]: needed only when
// the two may overlap)
extern "C" ''' + FIG9 + r'''// a barrier between a write through one pointer and a neighbour's read through another:
// removable only when a and b do not overlap
extern "C" __global__ void two_arrays(float *a, const float *b, float *c) {
    int t = threadIdx.x;
    a[t] = 2.0f * t;
    __syncthreads();
    c[t] = b[(t + 1) & 63] + 1.0f;
}
// the same, but the read goes through a pointer loaded from memory: no fact helps
extern "C" __global__ void loaded_pointer(float *a, float *const *table, float *c) {
    int t = threadIdx.x;
    a[t] = 2.0f * t;
    __syncthreads();
    c[t] = table[0][(t + 1) & 63] + 1.0f;
}
'''


@pytest.fixture(scope="module")
def ptx() -> str:
    return compile_to_ptx(SOURCE, filename="noalias.cu").ptx


def _optimized(ptx: str, name: str, dims=(16, 16, 1), noalias=()):  # type: ignore[no-untyped-def]
    """(the kernel's IR after the default pipeline, left a CFG: without raise-structured-cf,
    the passes' counts)."""
    module = parse_ptx(ptx)
    options = PipelineOptions.parse(["--disable-pass=raise-structured-cf"])[0]
    lifted, result = lift_and_optimize(module, module.functions[name], options, dims, noalias)
    return lifted.op, result.counts


def _barriers(op) -> int:  # type: ignore[no-untyped-def]
    return sum(o.name == "upir.barrier" for b in block_body(op).blocks for o in b.ops)


def test_pointer_parameter(ptx: str) -> None:
    """Addresses through cvta/mul.wide/add are based on their parameter; an address read
    from memory is based on none."""
    module = parse_ptx(ptx)
    for name, want in (("two_arrays", {0, 8, 16}), ("loaded_pointer", {0, 8, 16})):
        lifted, _ = lift_and_optimize(module, module.functions[name], PipelineOptions(passes=()))
        bases = {}
        for b in block_body(lifted.op).blocks:
            for op in b.ops:
                if op.name in ("ptx.ld", "ptx.st") and "global" in op.attributes["mods"]:
                    bases[op] = pointer_parameter(op.operands[0])
        if name == "two_arrays":
            assert set(bases.values()) == want
        else:
            # a[t] (0), table[0] (8), c[t] (16), and table[0][...]: a loaded pointer
            assert sorted(bases.values(), key=str) == [0, 16, 8, None] or \
                set(bases.values()) == {0, 8, 16, None}
            assert None in bases.values()
        assert parameter_bases(lifted.op) == want


def test_fig9_barrier_goes_only_with_the_fact(ptx: str) -> None:
    """Without the fact the passes record that hidden (offset 8) and output (16) overlapping
    is all that keeps a barrier (hidden apart from every other array suffices); with
    `noalias_params` the barrier goes: the store to
    hidden[] is followed by the `if (tx == 0)` that writes output[], no barrier between."""
    from test_ir import filecheck
    op, counts = _optimized(ptx, "fig9")
    # (7 either way: barrier-elimination's default rule removes the one barrier-motion
    # moved by the paper's rule)
    assert _barriers(op) == 7 and counts["barrier-elimination"] + counts["barrier-motion"] == 1
    assert op.attributes["noalias_candidates"] == [8]        # hidden apart from the others
    assert "noalias_params" not in op.attributes
    op, counts = _optimized(ptx, "fig9", noalias=(8, 16))
    assert _barriers(op) == 6 and counts["barrier-elimination"] + counts["barrier-motion"] == 2
    text = print_op(op)
    assert "noalias_params = [8 : i64, 16 : i64]" in text
    filecheck(text, r'''
        CHECK: "ptx.st"({{.*}}) {mods = ["global", "f32"]
        CHECK-NOT: "upir.barrier"
        CHECK: "cf.cond_br"
        CHECK-NOT: "upir.barrier"
        CHECK: "ptx.st"({{.*}}) {mods = ["global", "f32"]
        CHECK-NOT: "upir.barrier"
        CHECK: "upir.exit"
    ''')


def test_the_fact_must_name_the_right_parameters(ptx: str) -> None:
    """input (0) not overlapping the others changes nothing: hidden and output may still
    be one array.  And in generic code (no block shape) the barrier stays either way: the
    `if (tx == 0)` after it is no thread-index `if` code generation can defer there."""
    op, _ = _optimized(ptx, "fig9", noalias=(0,))
    assert _barriers(op) == 7
    op, counts = _optimized(ptx, "fig9", dims=None, noalias=(8, 16))
    assert counts["barrier-elimination"] == 0


def test_two_arrays(ptx: str) -> None:
    op, _ = _optimized(ptx, "two_arrays", (64, 1, 1))
    # a[t] written conflicts with b[t + 1] read and c[t'] written: a apart from both
    assert _barriers(op) == 1 and op.attributes["noalias_candidates"] == [0]
    op, _ = _optimized(ptx, "two_arrays", (64, 1, 1), noalias=(0,))
    assert _barriers(op) == 0
    # a pointer loaded from memory may point anywhere: nothing to specialize on
    op, _ = _optimized(ptx, "loaded_pointer", (64, 1, 1))
    assert _barriers(op) == 1 and "noalias_candidates" not in op.attributes
    op, _ = _optimized(ptx, "loaded_pointer", (64, 1, 1), noalias=(0, 8, 16))
    assert _barriers(op) == 1


def _fig9_reference(inp: np.ndarray, hidden: np.ndarray, blocks: int, hid: int) -> np.ndarray:
    w = hidden.reshape(-1, hid + 1)[1:, 1:].astype(np.float64)
    x = inp[1:].astype(np.float64)
    return (w * x[:, None]).reshape(blocks, 16, hid).sum(axis=1).ravel()


def test_launch_with_disjoint_arrays_runs_the_variant(ptx: str) -> None:
    """From the second launch with 16 x 16 blocks on, disjoint arrays run the variant; the
    results equal NumPy's and the interpreter's on the variant's IR."""
    hid, blocks = 16, 8
    rng = np.random.default_rng(5)
    inp = rng.random(16 * blocks + 1, dtype=np.float32)
    hidden0 = rng.random((hid + 1) * (16 * blocks + 1), dtype=np.float32)
    want = _fig9_reference(inp, hidden0, blocks, hid)
    f = cpuify.RawModule(code=SOURCE).get_function("fig9")
    results = []
    for _ in range(3):
        hidden, out = hidden0.copy(), np.zeros(blocks * hid, np.float32)
        f((1, blocks), (16, 16), (inp, hidden, out, np.int32(hid)))
        np.testing.assert_allclose(out, want, rtol=1e-5)
        results.append((hidden, out))
    assert f.noalias_launches == 2         # the generic code first, then the variant twice
    op, _ = _optimized(ptx, "fig9", noalias=(8, 16))
    interp = InterpModule(ptx)
    interp.use_ir("fig9", op)
    hidden, out = hidden0.copy(), np.zeros(blocks * hid, np.float32)
    interp.launch("fig9", (1, blocks), (16, 16), (inp, hidden, out, np.int32(hid)))
    for h, o in results:
        np.testing.assert_array_equal(o, out)
        np.testing.assert_array_equal(h, hidden)


def _hand_computed(hidden0: np.ndarray, inp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One block of Fig. 9 (hid = 16) by hand: hidden's rows 1..16 (columns 1..16) become
    weights after the reduction tree; then the `tx == 0` threads write the column sums."""
    w = hidden0.reshape(17, 17)[1:, 1:].copy() * inp[1:17, None]
    for p in (2, 4, 8, 16):
        for ty in range(0, 16, p):
            w[ty] = w[ty] + w[ty + p // 2]
    hidden = hidden0.copy()
    hidden.reshape(17, 17)[1:, 1:] = w
    return hidden, w[0].copy()


def test_overlapping_arrays_run_the_code_without_the_fact(ptx: str) -> None:
    """Must not fire: `output` a view into `hidden` (output[ty] is hidden[35 + ty], the
    element thread (ty, 1) stores; with barrier #2 the column sum written after it wins) and
    the same array passed twice (input is hidden): the launch runs the code without the
    fact, and the results are the hand-computed ones."""
    rng = np.random.default_rng(6)
    hidden0 = rng.random(17 * 17 + 16, dtype=np.float32)
    inp = rng.random(17, dtype=np.float32)
    f = cpuify.RawModule(code=SOURCE).get_function("fig9")
    want_hidden, sums = _hand_computed(hidden0[:289], inp)
    for _ in range(3):
        hidden = hidden0.copy()
        f((1, 1), (16, 16), (inp, hidden, hidden[35:], np.int32(16)))
        expect = np.concatenate([want_hidden, hidden0[289:]])
        expect[35:51] = sums
        np.testing.assert_allclose(hidden, expect, rtol=1e-6)
    assert f.noalias_launches == 0
    # the interpreter on the code without the fact agrees
    op, _ = _optimized(ptx, "fig9")
    interp = InterpModule(ptx)
    interp.use_ir("fig9", op)
    h = hidden0.copy()
    interp.launch("fig9", (1, 1), (16, 16), (inp, h, h[35:], np.int32(16)))
    np.testing.assert_array_equal(h, hidden)
    # input and hidden the same array: node[ty] reads hidden[1 + ty] (not written)
    g = cpuify.RawModule(code=SOURCE).get_function("fig9")
    for _ in range(3):
        hidden, out = hidden0[:289].copy(), np.zeros(16, np.float32)
        g((1, 1), (16, 16), (hidden, hidden, out, np.int32(16)))
        want_hidden, sums = _hand_computed(hidden0[:289], hidden0[:17])
        np.testing.assert_allclose(out, sums, rtol=1e-6)
        np.testing.assert_allclose(hidden, want_hidden, rtol=1e-6)
    assert g.noalias_launches == 0
    # disjoint again: the variant
    hidden, out = hidden0[:289].copy(), np.zeros(16, np.float32)
    g((1, 1), (16, 16), (inp, hidden, out, np.int32(16)))
    assert g.noalias_launches == 1
    np.testing.assert_allclose(out, _hand_computed(hidden0[:289], inp)[1], rtol=1e-6)


def test_two_arrays_results(ptx: str) -> None:
    """two_arrays with b disjoint from a (the variant, no barrier) and b the same array as a
    (the code with the barrier: every thread reads its neighbour's new value)."""
    f = cpuify.RawModule(code=SOURCE).get_function("two_arrays")
    t = np.arange(64)
    b = np.random.default_rng(7).random(64, dtype=np.float32)
    for _ in range(3):
        a, c = np.zeros(64, np.float32), np.zeros(64, np.float32)
        f((1,), (64,), (a, b, c))
        np.testing.assert_array_equal(c, b[(t + 1) & 63] + np.float32(1))
        np.testing.assert_array_equal(a, 2.0 * t)
    assert f.noalias_launches == 2
    for _ in range(2):
        a, c = np.zeros(64, np.float32), np.zeros(64, np.float32)
        f((1,), (64,), (a, a, c))
        np.testing.assert_array_equal(c, 2.0 * ((t + 1) & 63) + 1.0)
    # a view of a's own memory is the same allocation, even where the ranges differ
    for _ in range(2):
        a, c = np.zeros(128, np.float32), np.zeros(64, np.float32)
        f((1,), (64,), (a[:64], a[64:], c))
        np.testing.assert_array_equal(c, np.ones(64, np.float32))
    assert f.noalias_launches == 2


def test_explain_reports_the_variant(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys
    src = tmp_path / "fig9.cu"
    src.write_text(SOURCE)
    out = subprocess.run([sys.executable, "-m", "cpuify.cli.main", "explain", "--kernel", "fig9",
                          "--block", "16,16", str(src)], capture_output=True, text=True,
                         check=True).stdout
    assert "launch-time specialization: when the arrays passed for fig9_param_1 " \
           "overlap no other pointer argument" in out
    assert "noalias_params = [8]: 1 more barrier(s) removed" in out


def test_the_fact_is_part_of_the_printed_ir(ptx: str) -> None:
    """IR in, IR out: the kernel as lifted, printed with `noalias_params` added and parsed
    back, loses the barrier in the passes; the same text without the attribute keeps it."""
    from cpuify.compiler import optimize_kernel
    from cpuify.ir.parser import parse_op
    module = parse_ptx(ptx)
    lifted, _ = lift_and_optimize(module, module.functions["two_arrays"],
                                  PipelineOptions(passes=()))
    text = print_op(lifted.op)
    assert "noalias_params" not in text
    with_fact = text.replace('sym_name = "two_arrays"',
                             'sym_name = "two_arrays", noalias_params = [0 : i64]')
    assert with_fact != text
    kept, _ = optimize_kernel(parse_op(text), PipelineOptions(), (64, 1, 1))
    gone, counts = optimize_kernel(parse_op(with_fact), PipelineOptions(), (64, 1, 1))
    assert _barriers(kept.op) == 1 and _barriers(gone.op) == 0
    assert counts.counts["barrier-elimination"] == 1
    assert "noalias_params = [0 : i64]" in print_op(gone.op)


PROGRAM = r'''#include <cstdio>
#include <cstdlib>
#include <cmath>
#define H 16
''' + FIG9 + r'''
// one block of Fig. 9 by hand (hid = 16): rows 1..16 of hidden become the reduction
// tree's values, then output[ty] gets the column sums
static void reference(const float *h0, const float *in, float *h, float *sums) {
    float w[16][16];
    for (int i = 0; i < 17 * 17; i++) h[i] = h0[i];
    for (int ty = 0; ty < 16; ty++)
        for (int tx = 0; tx < 16; tx++) w[ty][tx] = h0[17 * (ty + 1) + tx + 1] * in[ty + 1];
    for (int p = 2; p <= 16; p *= 2)
        for (int ty = 0; ty < 16; ty += p)
            for (int tx = 0; tx < 16; tx++) w[ty][tx] += w[ty + p / 2][tx];
    for (int ty = 0; ty < 16; ty++)
        for (int tx = 0; tx < 16; tx++) h[17 * (ty + 1) + tx + 1] = w[ty][tx];
    for (int tx = 0; tx < 16; tx++) sums[tx] = w[0][tx];
}

int main() {
    const int n = 17 * 17 + 16;
    float h0[n], in[17], h[n], sums[16], got[n], out[16];
    for (int i = 0; i < n; i++) h0[i] = (float)((i * 37) % 101) / 101.0f;
    for (int i = 0; i < 17; i++) in[i] = 0.5f + (float)((i * 13) % 17) / 34.0f;
    float *d_in, *d_h, *d_out;
    cudaMalloc(&d_in, sizeof in);
    cudaMalloc(&d_h, sizeof h0);
    cudaMalloc(&d_out, sizeof out);
    cudaMemcpy(d_in, in, sizeof in, cudaMemcpyHostToDevice);
    int bad = 0;
    dim3 grid(1, 1);
    reference(h0, in, h, sums);
    for (int rep = 0; rep < 2; rep++) {     // disjoint allocations: the variant may run
        cudaMemcpy(d_h, h0, sizeof h0, cudaMemcpyHostToDevice);
        fig9<<<grid, dim3(16, 16)>>>(d_in, d_h, d_out, 16);
        cudaMemcpy(out, d_out, sizeof out, cudaMemcpyDeviceToHost);
        cudaMemcpy(got, d_h, sizeof h0, cudaMemcpyDeviceToHost);
        for (int i = 0; i < 16; i++) bad += fabsf(out[i] - sums[i]) > 1e-5f * fabsf(sums[i]);
        for (int i = 0; i < 17 * 17; i++) bad += fabsf(got[i] - h[i]) > 1e-5f * fabsf(h[i]);
    }
    for (int rep = 0; rep < 2; rep++) {     // output inside hidden: hidden[35 + ty]
        cudaMemcpy(d_h, h0, sizeof h0, cudaMemcpyHostToDevice);
        fig9<<<grid, dim3(16, 16)>>>(d_in, d_h, d_h + 35, 16);
        cudaMemcpy(got, d_h, sizeof h0, cudaMemcpyDeviceToHost);
        for (int i = 0; i < n; i++) {
            float want = i < 17 * 17 ? h[i] : h0[i];
            if (i >= 35 && i < 51) want = sums[i - 35];
            bad += fabsf(got[i] - want) > 1e-5f * fabsf(want);
        }
    }
    printf("%s\n", bad ? "FAILED" : "ok");
    return bad != 0;
}
'''


def test_whole_program(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`cpuify nvcc`: the build compiles the variant next to the code for the 16 x 16 shape;
    at run time the launches on disjoint cudaMalloc allocations run it, those whose
    `output` points into `hidden` the code with the barrier, all with the hand-computed
    results (the program checks them)."""
    import os
    import subprocess
    import sys
    (tmp_path / "fig9prog.cu").write_text(PROGRAM)
    build = subprocess.run([sys.executable, "-m", "cpuify.cli.main", "nvcc", "fig9prog.cu",
                            "-o", "fig9prog"], cwd=tmp_path, capture_output=True, text=True,
                           check=False)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(tmp_path / "fig9prog")], capture_output=True, text=True, check=False,
                         env={**os.environ, "CPUIFY_PROFILE": "1"})
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr
    assert "(4 specialized for their block shape, 2 of them for non-overlapping pointers)" \
        in run.stderr, run.stderr


def test_llvm_alias_scopes_in_the_variant(ptx: str) -> None:
    """The variant's LLVM IR: the accesses through `a` (offset 0, in noalias_params) get a
    scope of their own and are declared independent of those through b and c, which share
    the scope of the other parameters (they may overlap each other); the code without the
    fact has no parameter scopes."""
    from cpuify.codegen import jit
    from cpuify.codegen.llvm_gen import ModuleCodegen
    module = parse_ptx(ptx)
    texts = []
    for noalias in ((), (0,)):
        lifted, _ = lift_and_optimize(module, module.functions["two_arrays"], PipelineOptions(),
                                      (64, 1, 1), noalias)
        triple, layout = jit.triple_and_layout()
        gen = ModuleCodegen(module, triple, layout, define_globals=False)
        gen.add_kernel(lifted, (64, 1, 1))
        texts.append(gen.llvm_text())
    assert "cpuify.param." not in texts[0]
    text = texts[1]
    scope = {m.group(2): m.group(1) for m in
             re.finditer(r'^(!\d+) = !\{ !"cpuify\.param\.two_arrays\.(\w+)", !\d+ \}', text, re.MULTILINE)}
    assert set(scope) == {"0", "other"}
    lists = {m.group(2): m.group(1) for m in re.finditer(r'^(!\d+) = !\{ (!\d+) \}', text, re.MULTILINE)}
    mine, others = lists[scope["0"]], lists[scope["other"]]
    accesses = [line for line in text.splitlines()
                if ("store float" in line or "= load float" in line) and "alias.scope" in line]
    assert all(f"!alias.scope {mine}, !noalias {others}" in line or
               f"!alias.scope {others}, !noalias {mine}" in line for line in accesses)
    # a[t] = ...: once per copy of its thread loop (rows split at a cache line run two)
    ours = [line for line in accesses if f"!alias.scope {mine}," in line]
    assert 1 <= len(ours) <= 2 and all("store float" in line for line in ours)
    theirs = [line for line in accesses if line not in ours]      # b[...] and c[t] = ...
    loads = [line for line in theirs if "= load float" in line]
    assert 1 <= len(loads) <= 2 and len(theirs) == 2 * len(loads)


def test_parallel_device_build_keeps_the_variant(ptx: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`cpuify nvcc`'s parallel device build (forked workers, one per shape) builds the
    launch-time pointer variant next to the code for the shape, as the serial build does:
    the same objects, byte for byte, the variant with its noalias_params."""
    from cpuify.nvcc import device
    monkeypatch.setenv("CPUIFY_NO_CACHE", "1")
    monkeypatch.setattr(device, "PARALLEL_FROM_PTX_LINES", 0)
    monkeypatch.setattr(device, "PARALLEL_FROM_COMPILES", 0)
    shapes = {"fig9": [(16, 16, 1)]}
    serial = device.compile_device_parallel(ptx, "noalias.cu", shapes, jobs=1)
    parallel = device.compile_device_parallel(ptx, "noalias.cu", shapes, jobs=2)
    got = [(b, s.noalias_params, s.object_code) for b, s in parallel[2]["fig9"]]
    assert got == [(b, s.noalias_params, s.object_code) for b, s in serial[2]["fig9"]]
    assert [bool(p) for _, p, _ in got] == [False, True], "no variant for non-overlapping pointers"
