"""If-conversion of conditional swaps (transforms/ifconvert.py): which `if`s become
branch-free, on the CFG and on structured control flow (the pass's form: a swap is a
`upir.if`; the same decisions and, lowered, the same IR as on the CFG), IR-in/IR-out on
hand-written structured bodies, and sorting networks that run through the rewritten code
with the pass on and off, checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.ir.structure import block_body as _block_body
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.lifting import lift_kernel
from cpuify.ir.parser import parse_op
from cpuify.ir.printer import print_op
from cpuify.ir.structured import has_structured_ops, lower_structured_control_flow
from cpuify.ir.verifier import verify
from cpuify.transforms.ifconvert import (
    if_convert_swaps, select_if_phis, structured_if_convert_swaps,
)
from cpuify.transforms.pass_manager import PipelineOptions, make_pass, run_pipeline
from cpuify.transforms.structured_cf import raise_structured_control_flow
from test_ir import filecheck
from test_structured_cf import PROLOGUE, kernel

SRC = r'''
#define TILE 256
template <typename T>
__device__ __forceinline__ void compare_exchange(T &a, T &b, bool ascending) {
    if ((a > b) == ascending) { T t = a; a = b; b = t; }
}
// sorts each TILE of keys in shared memory (TILE / 2 threads), ascending
template <typename T>
__device__ void tile_sort(T *keys) {
    __shared__ T s[TILE];
    const unsigned base = blockIdx.x * TILE, t = threadIdx.x;
    s[t] = keys[base + t];
    s[t + TILE / 2] = keys[base + t + TILE / 2];
    for (unsigned k = 2; k <= TILE; k <<= 1)
        for (unsigned j = k >> 1; j > 0; j >>= 1) {
            __syncthreads();
            const unsigned pos = 2 * t - (t & (j - 1));
            compare_exchange(s[pos], s[pos + j], (pos & k) == 0);
        }
    __syncthreads();
    keys[base + t] = s[t];
    keys[base + t + TILE / 2] = s[t + TILE / 2];
}
extern "C" __global__ void sort_int(int *keys) { tile_sort(keys); }
extern "C" __global__ void sort_float(float *keys) { tile_sort(keys); }

// one step (k, j) of the network over global memory
extern "C" __global__ void merge_step(int *d, unsigned k, unsigned j) {
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned pos = 2 * t - (t & (j - 1));
    int a = d[pos], b = d[pos + j];
    if ((a > b) == ((pos & k) == 0)) { d[pos] = b; d[pos + j] = a; }
}

// a swap in an `if` that shares its join (only the lower partner of a pair compares): on
// structured IR the swap's `if` ends the outer `if`'s arm, followed by that arm's yield
extern "C" __global__ void guarded_swap(int *d, unsigned j) {
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x, p = t ^ j;
    if (p > t) {
        int a = d[t], b = d[p];
        if (a > b) { d[t] = b; d[p] = a; }
    }
}

// not swaps: each keeps its branch
extern "C" __global__ void racy_min(const int *v, int *m) {
    int x = v[blockIdx.x * blockDim.x + threadIdx.x];
    if (x < m[0]) m[0] = x;                       // stores a value it did not read
}
extern "C" __global__ void volatile_swap(volatile int *d) {
    int a = d[2 * threadIdx.x], b = d[2 * threadIdx.x + 1];
    if (a > b) { d[2 * threadIdx.x] = b; d[2 * threadIdx.x + 1] = a; }
}
extern "C" __global__ void store_between(int *d, int *flag) {
    int a = d[2 * threadIdx.x], b = d[2 * threadIdx.x + 1];
    flag[threadIdx.x] = 1;                        // may alias d: the values read may be stale
    if (a > b) { d[2 * threadIdx.x] = b; d[2 * threadIdx.x + 1] = a; }
}
// a flag set in an `if` and read after a barrier (pathfinder's `computed`)
extern "C" __global__ void flag_after_barrier(const int *x, int *out, int lo, int hi) {
    __shared__ int s[128];
    int t = threadIdx.x;
    bool done = false;
    int v = 7;
    if (t >= lo && t <= hi) {
        s[t] = x[blockIdx.x * 128 + t] * 2;
        done = true;
        v = x[blockIdx.x * 128 + t];
    }
    __syncthreads();
    out[blockIdx.x * 128 + t] = done ? s[t] + v : -1;
}
extern "C" __global__ void swap_and_count(int *d, int *count) {
    int a = d[2 * threadIdx.x], b = d[2 * threadIdx.x + 1];
    if (a > b) { d[2 * threadIdx.x] = b; d[2 * threadIdx.x + 1] = a; atomicAdd(count, 1); }
}
'''


@pytest.fixture(scope="module")
def module():
    return parse_ptx(compile_to_ptx(SRC).ptx)


def _converted(module, name: str) -> int:
    entry = next(f for f in module.functions.values() if f.name == name)
    return if_convert_swaps(_block_body(lift_kernel(module, entry).op))


@pytest.mark.parametrize("name, expected", [
    ("merge_step", 1),
    ("racy_min", 0),
    ("volatile_swap", 0),
    ("store_between", 0),
    ("swap_and_count", 0),
])
def test_which_ifs_are_converted(module, name, expected):
    assert _converted(module, name) == expected


def test_every_compare_exchange_of_an_unrolled_network_is_converted(module):
    # nvcc unrolls the network of a 256-key tile: 8 * 9 / 2 = 36 compare-exchanges
    assert _converted(module, "sort_int") == 36


@pytest.mark.parametrize("name, expected", [
    ("merge_step", 1), ("racy_min", 0), ("volatile_swap", 0), ("store_between", 0),
    ("swap_and_count", 0), ("sort_int", 36), ("sort_float", 36), ("flag_after_barrier", 0),
    ("guarded_swap", 1),
])
def test_structured_form_same_decisions_and_ir(module, name, expected):
    """The pass on the raised kernel (its form) converts the ifs the CFG matcher converts,
    as `upir.if` ops, and leaves, lowered, the IR the CFG conversion leaves."""
    entry = next(f for f in module.functions.values() if f.name == name)
    on_cfg = lift_kernel(module, entry).op
    assert if_convert_swaps(_block_body(on_cfg)) == expected
    raise_structured_control_flow(_block_body(on_cfg))
    lower_structured_control_flow(on_cfg)
    on_structured = lift_kernel(module, entry).op
    raise_structured_control_flow(_block_body(on_structured))
    ifs = print_op(on_structured).count('"upir.if"')
    assert structured_if_convert_swaps(_block_body(on_structured)) == expected
    verify(on_structured)
    assert print_op(on_structured).count('"upir.if"') == ifs - expected
    lower_structured_control_flow(on_structured)
    assert print_op(on_structured) == print_op(on_cfg)


def test_structured_swap_ending_an_arm(module):
    """The swap's `if` is the last op of the outer `if`'s arm (both join where the outer one
    does): it goes, its stores of selects end the arm, and the arm's yield takes the swap's
    line (the branch the CFG conversion leaves)."""
    entry = next(f for f in module.functions.values() if f.name == "guarded_swap")
    op = lift_kernel(module, entry).op
    raise_structured_control_flow(_block_body(op))
    assert print_op(op).count('"upir.if"') == 2
    assert make_pass("if-convert-swaps").run(op) == 1
    verify(op)
    text = print_op(op)
    assert text.count('"upir.if"') == 1
    filecheck(text, r'''
    CHECK: "upir.if"
    CHECK: [[A:%\d+]] = "ptx.ld"
    CHECK: [[B:%\d+]] = "ptx.ld"
    CHECK: [[G:%\d+]] = "ptx.setp"
    CHECK-NEXT: "ptx.selp"({{.*}}, [[G]])
    CHECK-NEXT: "ptx.st"
    CHECK-NEXT: "ptx.selp"({{.*}}, [[G]])
    CHECK-NEXT: "ptx.st"
    CHECK-NEXT: "upir.yield"() {line = [[L:\d+]] : i64}
    CHECK-NEXT: }
    ''')


#: a compare-exchange of two loaded words inside a counted loop (a `upir.if` in a `upir.for`)
SWAP_IN_LOOP = PROLOGUE + '''
  "cf.br"(%zero) [^bb1] : (i32) -> ()
^bb1(%i: i32):
  %c = "ptx.setp"(%i, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c) [^bb2, ^bb5] <{operandSegmentSizes = array<i32: 1, 0, 0>}> : (i1) -> ()
^bb2:
  %q = "ptx.add"(%p, %p) {mods = ["s64"]} : (i64, i64) -> i64
  %a = "ptx.ld"(%p) {mods = ["global", "s32"], offset = 0 : i64, line = 40 : i64} : (i64) -> i32
  %b = "ptx.ld"(%q) {mods = ["global", "s32"], offset = 0 : i64, line = 41 : i64} : (i64) -> i32
  %g = "ptx.setp"(%a, %b) {mods = ["gt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%g) [^bb3, ^bb4] <{operandSegmentSizes = array<i32: 1, 0, 0>}> {line = 42 : i64} : (i1) -> ()
^bb3:
  "ptx.st"(%p, %b) {mods = ["global", "s32"], offset = 0 : i64, line = 43 : i64} : (i64, i32) -> ()
  "ptx.st"(%q, %a) {mods = ["global", "s32"], offset = 0 : i64, line = 44 : i64} : (i64, i32) -> ()
  "cf.br"() [^bb4] {line = 45 : i64} : () -> ()
^bb4:
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  "cf.br"(%i2) [^bb1] : (i32) -> ()
^bb5:
  "upir.exit"() : () -> ()'''


def _raised(body: str):  # type: ignore[no-untyped-def]
    op = parse_op(kernel(body))
    verify(op)
    raise_structured_control_flow(_block_body(op))
    assert has_structured_ops(op)
    return op


def test_structured_swap_in_loop_ir():
    op = _raised(SWAP_IN_LOOP)
    assert make_pass("if-convert-swaps").run(op) == 1
    verify(op)
    filecheck(print_op(op), r'''
    CHECK: "upir.for"
    CHECK: [[A:%\d+]] = "ptx.ld"({{%\d+}}) {{.*}}line = 40
    CHECK-NEXT: [[B:%\d+]] = "ptx.ld"({{%\d+}}) {{.*}}line = 41
    CHECK-NEXT: [[G:%\d+]] = "ptx.setp"([[A]], [[B]])
    CHECK-NEXT: [[S:%\d+]] = "ptx.selp"([[B]], [[A]], [[G]]) {mods = ["s32"], line = 43 : i64}
    CHECK-NEXT: "ptx.st"({{%\d+}}, [[S]]) {{.*}}line = 43
    CHECK-NEXT: [[T:%\d+]] = "ptx.selp"([[A]], [[B]], [[G]]) {mods = ["s32"], line = 44 : i64}
    CHECK-NEXT: "ptx.st"({{%\d+}}, [[T]]) {{.*}}line = 44
    CHECK-NEXT: "cf.br"() [^bb1] {line = 42 : i64}
    CHECK-NOT: "upir.if"
    CHECK: "upir.yield"
    ''')


@pytest.mark.parametrize("change", [
    # a store of a value read elsewhere (racy_min's shape): no swap
    ('"ptx.st"(%q, %a)', '"ptx.st"(%q, %n)'),
    # a store between the loads and the branch: the values read may be stale
    ('%g = "ptx.setp"', '"ptx.st"(%p, %n) {mods = ["global", "s32"], offset = 8 : i64} : (i64, i32) -> ()\n  %g = "ptx.setp"'),
    # a volatile load
    ('{mods = ["global", "s32"], offset = 0 : i64, line = 41 : i64}', '{mods = ["volatile", "global", "s32"], offset = 0 : i64, line = 41 : i64}'),
    # a barrier in the arm: no store-only arm
    ('"cf.br"() [^bb4] {line = 45 : i64}', '"upir.barrier"() {mods = ["sync"]} : () -> ()\n  "cf.br"() [^bb4] {line = 45 : i64}'),
])
def test_structured_swap_must_not_fire(change):
    body = SWAP_IN_LOOP.replace(*change)
    assert body != SWAP_IN_LOOP
    op = _raised(body)
    before = print_op(op)
    assert make_pass("if-convert-swaps").run(op) == 0
    assert print_op(op) == before and '"upir.if"' in before


def test_swap_into_the_loop_header_is_left_on_both_forms():
    """A swap whose both ways go back to the loop header with the next counter (its join is
    the header, the branch passes arguments): the CFG matcher leaves it, and the raise keeps
    it a branch of the loop body (no `if`: its join is no block of the body), which the
    structured pass leaves as well."""
    body = SWAP_IN_LOOP.replace('''^bb2:
  %q = "ptx.add"(%p, %p)''', '''^bb2:
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %q = "ptx.add"(%p, %p)''').replace(
        '''"cf.cond_br"(%g) [^bb3, ^bb4] <{operandSegmentSizes = array<i32: 1, 0, 0>}> {line = 42 : i64} : (i1) -> ()''',
        '''"cf.cond_br"(%g, %i2) [^bb3, ^bb1] <{operandSegmentSizes = array<i32: 1, 0, 1>}> {line = 42 : i64} : (i1, i32) -> ()''').replace(
        '''"cf.br"() [^bb4] {line = 45 : i64} : () -> ()
^bb4:
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  "cf.br"(%i2) [^bb1] : (i32) -> ()''', '''"cf.br"(%i2) [^bb1] {line = 45 : i64} : (i32) -> ()''')
    assert "^bb4" not in body
    assert if_convert_swaps(_block_body(parse_op(kernel(body)))) == 0
    op = _raised(body)
    before = print_op(op)
    assert '"upir.while"' in before and '"upir.if"' not in before
    assert make_pass("if-convert-swaps").run(op) == 0
    assert print_op(op) == before


def test_pipeline_runs_it_on_the_structured_form():
    op = parse_op(kernel(SWAP_IN_LOOP))
    result = run_pipeline(op, PipelineOptions(passes=("raise-structured-cf", "if-convert-swaps",
                                                      "barrier-elimination"), verify_each=True))
    assert result.counts["if-convert-swaps"] == 1
    # (barrier-elimination takes either form and lowers only a kernel with a barrier: this
    # one has none, so the IR stays structured; a "cfg" pass after it lowers it)
    assert result.transitions == [] and has_structured_ops(op)
    op = parse_op(kernel(SWAP_IN_LOOP))
    result = run_pipeline(op, PipelineOptions(passes=("raise-structured-cf", "if-convert-swaps",
                                                      "warp-lockstep"), verify_each=True))
    assert result.counts["if-convert-swaps"] == 1
    assert result.transitions == [("lower", "warp-lockstep"), ("raise", "")]


@pytest.fixture(scope="module")
def mod():
    return cpuify.RawModule(code=SRC)


@pytest.fixture(scope="module")
def mod_without():
    return cpuify.RawModule(code=SRC, options=("--disable-pass=if-convert-swaps",))


@pytest.mark.parametrize("converted", [True, False])
@pytest.mark.parametrize("kernel, dtype", [("sort_int", np.int32), ("sort_float", np.float32)])
def test_tile_sort_matches_numpy(mod, mod_without, kernel, dtype, converted):
    rng = np.random.default_rng(1)
    tiles = 24
    keys = (rng.integers(-50, 50, tiles * 256) if dtype is np.int32
            else rng.standard_normal(tiles * 256)).astype(dtype)
    f = (mod if converted else mod_without).get_function(kernel)
    for _ in range(2):          # the second launch runs the code specialized for the block
        d = keys.copy()
        f((tiles,), (128,), (d,))
        np.testing.assert_array_equal(d.reshape(tiles, 256), np.sort(keys.reshape(tiles, 256), 1))


def test_global_network_sorts(mod):
    rng = np.random.default_rng(2)
    n = 1 << 12
    keys = rng.integers(0, 1000, n).astype(np.int32)     # many ties
    d = keys.copy()
    f = mod.get_function("merge_step")
    k = 2
    while k <= n:
        j = k >> 1
        while j > 0:
            f((n // 2 // 64,), (64,), (d, np.uint32(k), np.uint32(j)))
            j >>= 1
        k <<= 1
    np.testing.assert_array_equal(d, np.sort(keys))


def test_flag_phis_become_selects(module):
    entry = next(f for f in module.functions.values() if f.name == "flag_after_barrier")
    region = _block_body(lift_kernel(module, entry).op)
    # `done` (constants on both ways); `v` comes from a load inside the `if`: left alone
    assert select_if_phis(region) == 1


def test_flag_after_barrier(mod):
    x = np.arange(256, dtype=np.int32) - 100
    out = np.zeros_like(x)
    f = mod.get_function("flag_after_barrier")
    t = np.arange(256) % 128
    for lo, hi in ((10, 90), (0, 127), (50, 20)):
        for _ in range(2):
            out[:] = 0
            f((2,), (128,), (x, out, np.int32(lo), np.int32(hi)))
            inside = (t >= lo) & (t <= hi)
            np.testing.assert_array_equal(out, np.where(inside, 3 * x, -1))
