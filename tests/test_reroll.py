"""reroll-loops: nvcc's remainder loop + 4x unrolled main loop of a strided loop whose stride
is computed before the loop becomes the simple loop (behind a range guard), which the
interchange takes.  IR in / IR out (where it fires, where it must not), and results against
NumPy, a hand computation and the reference interpreter: odd n (remainder iterations),
n < stride, n = 0, and the guard's fallback (a negative stride, indices near INT_MAX)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cpuify
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp.machine import InterpModule
from cpuify.ir.parser import parse_op
from cpuify.ir.printer import print_op
from cpuify.ir.structure import block_body
from cpuify.ir.structured import lower_structured_control_flow
from cpuify.ir.verifier import verify
from cpuify.lifting import lift_kernel
from cpuify.transforms.pass_manager import (
    PipelineOptions,
    default_pipeline,
    run_pipeline,
)

SRC = r'''
extern "C" __global__ void axpy_pre(float a, const float *x, float *y, int n) {
    int s = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += s) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void axpy_pre_d(double a, const double *x, double *y, int n) {
    int s = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += s) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void sum_pre(const float *x, float *out, int n) {
    int s = blockDim.x * gridDim.x;
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += s) acc += x[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
extern "C" __global__ void fms_restrict(const float *__restrict__ x, const float *__restrict__ z,
                                        float *__restrict__ y, int n) {
    int s = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += s) y[i] = x[i] * z[i] - y[i];
}
extern "C" __global__ void axpy_step(float a, const float *x, float *y, int base, int n, int step) {
    for (int i = base + threadIdx.x; i < n; i += step) { int j = i & 2047; y[j] = a * x[j] + y[j]; }
}
extern "C" __global__ void isum_pre(const int *x, int *out, int n) {
    int s = blockDim.x * gridDim.x, acc = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += s) acc += x[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
extern "C" __global__ void isum_step(const int *x, int *out, int base, int n, int step) {
    int acc = 0;
    for (int i = base + threadIdx.x; i < n; i += step) acc += x[i & 1023] * (i & 7);
    out[threadIdx.x] = acc;
}
extern "C" __global__ void steps_pre(float *x, int n, int iters) {
    int s = blockDim.x;
    for (int t = 0; t < iters; t++) {
        for (int i = threadIdx.x; i < n; i += s) x[i] = x[i] * 0.5f + 1.0f;
        __syncthreads();
    }
}
extern "C" __global__ void steps_step(float *y, int n, int step, int iters) {
    for (int t = 0; t < iters; t++) {
        for (int i = threadIdx.x; i < n; i += step) y[i] = y[i] * 0.5f + 1.0f;
        __syncthreads();
    }
}
extern "C" __global__ void no_unroll(const float *x, float *y, int n) {
    int s = blockDim.x * gridDim.x;
#pragma unroll 1
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += s) y[i] = 2.0f * x[i];
}
extern "C" __global__ void own_stride(const float *x, float *y, int n) {
    int s = blockDim.x * gridDim.x + (threadIdx.x & 1);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += s) y[i] = 2.0f * x[i];
}
// thread coarsening (CUB's items per thread): K loads a blockDim apart per iteration; nvcc
// strength-reduces them into K indices starting at blockDim * ((blockIdx << 2) | k) + tid
extern "C" __global__ void sum_coarse4(const float *__restrict__ x, float *out, int n) {
    float acc = 0.0f;
    int s = blockDim.x * gridDim.x * 4;
    for (int i = blockIdx.x * blockDim.x * 4 + threadIdx.x; i < n; i += s) {
#pragma unroll
        for (int k = 0; k < 4; k++) acc += x[i + k * blockDim.x];
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
extern "C" __global__ void forwarded(float *y, int n) {
    int s = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += s) y[i + s] = y[i] + 1.0f;
}
'''

UPTO = default_pipeline()[:default_pipeline().index("reroll-loops")]


@pytest.fixture(scope="module")
def ptx() -> str:
    return compile_to_ptx(SRC, filename="reroll.cu").ptx


@pytest.fixture(scope="module")
def mod(ptx: str) -> cpuify.RawModule:
    return cpuify.RawModule(ptx=ptx)


def _before_reroll(ptx: str, name: str):  # type: ignore[no-untyped-def]
    """The kernel as reroll-loops sees it in the default pipeline."""
    module = parse_ptx(ptx)
    kernel = lift_kernel(module, module.functions[name]).op
    run_pipeline(kernel, PipelineOptions(passes=tuple(UPTO)))
    # (the pipeline hands on structured control flow; reroll-loops works on the CFG, which
    # the pass manager lowers for it)
    lower_structured_control_flow(kernel)
    return kernel


def _reroll(kernel) -> int:  # type: ignore[no-untyped-def]
    return run_pipeline(kernel, PipelineOptions(passes=("reroll-loops",), verify_each=True)
                        ).counts["reroll-loops"]


def _loop_headers(kernel) -> list:  # type: ignore[no-untyped-def]
    region = block_body(kernel)
    return [b for b in region.blocks if b in b.successors]


@pytest.mark.parametrize("name,fires", [("axpy_pre", 1), ("axpy_pre_d", 1), ("sum_pre", 1),
                                        ("fms_restrict", 1), ("axpy_step", 1), ("isum_pre", 1),
                                        ("isum_step", 1), ("steps_pre", 1), ("steps_step", 1),
                                        ("sum_coarse4", 1), ("no_unroll", 0), ("own_stride", 0), ("forwarded", 0)])
def test_which_loops_are_rerolled(ptx: str, name: str, fires: int) -> None:
    """Fires on nvcc's remainder + unrolled pair (fp32, fp64, a carried sum, `.nc` loads that
    nvcc moved across the previous copy's store, a stride from a parameter) and on its
    unrolled-loop-first pair (integer sums, one index per copy in the unrolled loop) and on its
    remainder peeled into `if`s inside a time-step loop; not on a loop
    nvcc did not unroll (`#pragma unroll 1`), a stride that differs between threads, or a
    loop whose value nvcc forwards from one iteration's store to the next (a load in the
    preheader)."""
    kernel = _before_reroll(ptx, name)
    before = print_op(kernel)
    assert _reroll(kernel) == fires
    if not fires:
        assert print_op(kernel) == before
        return
    text = print_op(kernel)
    # the original loops stay, marked, behind the guard; the simple loop has one copy
    assert text.count("reroll_fallback = true") == (1 if name.startswith("steps") else 2)
    simple = [h for h in _loop_headers(kernel)
              if not h.ops[-1].attributes.get("reroll_fallback")]
    assert len(simple) == 1
    stores = [op for op in simple[0].ops if op.name == "ptx.st"]
    assert len(stores) == (0 if "sum" in name else 1)
    # the guard: 0 < s, n <= INT_MAX - s, i0 < n
    assert "value = 2147483647" in text
    assert len(re.findall(r'mods = \["(gt|le|lt)", "s32"\]', text)) >= 3
    # the printed IR parses back and verifies
    verify(parse_op(text))


def test_the_interchange_takes_the_simple_loop(ptx: str) -> None:
    module = parse_ptx(ptx)
    kernel = lift_kernel(module, module.functions["axpy_pre"]).op
    counts = run_pipeline(kernel, PipelineOptions(disabled=frozenset({"raise-structured-cf"}),
                                                  verify_each=True)).counts   # (left a CFG)
    assert counts["reroll-loops"] == 1 and counts["interchange-thread-strided-loops"] == 1
    (soft,) = [op for b in block_body(kernel).blocks for op in b.ops
               if op.name == "upir.barrier" and op.attributes.get("soft")]
    header = soft.parent
    assert header is not None and not header.ops[-1].attributes.get("reroll_fallback")
    assert sum(op.name == "ptx.ld" for op in header.ops) == 2     # x[i] and y[i], once


# --- must not fire: the unrolled copies are not the remainder loop's body -------------------

def _main_loop(kernel):  # type: ignore[no-untyped-def]
    """nvcc's main loop: the single-block loop with the most stores."""
    return max(_loop_headers(kernel), key=lambda b: sum(op.name == "ptx.st" for op in b.ops))


def _mutated(ptx: str, mutate) -> int:  # type: ignore[no-untyped-def]
    kernel = _before_reroll(ptx, "axpy_pre")
    mutate(_main_loop(kernel))
    verify(kernel)
    kernel = parse_op(print_op(kernel))      # (IR in, as text)
    return _reroll(kernel)


def test_unmutated_main_loop_fires(ptx: str) -> None:
    assert _mutated(ptx, lambda main: None) == 1


def test_not_when_one_copy_computes_something_else(ptx: str) -> None:
    def mutate(main):  # type: ignore[no-untyped-def]
        fmas = [op for op in main.ops if op.name == "ptx.fma"]
        third = fmas[2]
        third.operands[1], third.operands[2] = third.operands[2], third.operands[1]
    assert _mutated(ptx, mutate) == 0


def test_not_when_the_stride_changes_inside_the_loop(ptx: str) -> None:
    """The third copy's address advances by another amount (8 bytes per s, not 4)."""
    def mutate(main):  # type: ignore[no-untyped-def]
        adds = [op for op in main.ops if op.name == "ptx.add" and op.results[0].type == "i64"
                and op.operands[1].owner is not main and
                getattr(op.operands[1].owner, "parent", None) is not main]
        step = adds[-1].operands[1]
        doubled = type(main.ops[0])("ptx.add", [step, step], ["i64"], {"mods": ["s64"]})
        doubled.parent = main
        main.ops.insert(main.ops.index(adds[-1]), doubled)
        adds[-1].set_operand(1, doubled.results[0])
    assert _mutated(ptx, mutate) == 0


def test_not_when_a_later_copy_loads_before_an_earlier_copy_stores(ptx: str) -> None:
    """Copy 1's loads moved above copy 0's store: that store could feed them (y[i] and
    y[i + s] may be one location for all the pass knows), so the order is not the loop's."""
    def mutate(main):  # type: ignore[no-untyped-def]
        first_store = next(op for op in main.ops if op.name == "ptx.st")
        later_load = [op for op in main.ops if op.name == "ptx.ld"][2]
        addr = later_load.operands[0]
        # compute the load's address and the load itself right before the first store
        at = main.ops.index(first_store)
        for op in (addr.owner, later_load):
            main.ops.remove(op)
        main.ops.insert(at, later_load)
        main.ops.insert(at, addr.owner)
    assert _mutated(ptx, mutate) == 0


def test_not_when_the_main_loop_runs_a_different_number_of_copies(ptx: str) -> None:
    """A fifth copy of the last store (the unroll factor is the remainder mask + 1)."""
    def mutate(main):  # type: ignore[no-untyped-def]
        last = [op for op in main.ops if op.name == "ptx.st"][-1]
        again = type(last)("ptx.st", list(last.operands), [], dict(last.attributes))
        again.parent = main
        main.ops.insert(main.ops.index(last) + 1, again)
    assert _mutated(ptx, mutate) == 0


# --- results -----------------------------------------------------------------------------

def _interp(ptx: str, name: str, pipeline, grid, block, args):  # type: ignore[no-untyped-def]
    module = parse_ptx(ptx)
    kernel = lift_kernel(module, module.functions[name]).op
    run_pipeline(kernel, PipelineOptions(passes=tuple(pipeline), verify_each=True))
    interp = InterpModule(ptx)
    interp.use_ir(name, kernel)
    interp.launch(name, grid, block, args)
    return args


NS = [0, 1, 5, 63, 64, 65, 200, 1001, 4099]     # n = 0, n < stride (64), odd remainders


@pytest.mark.parametrize("n", NS)
def test_axpy_matches_numpy_and_interpreter(ptx: str, mod, n: int) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(n)
    x = rng.random(n + 1, dtype=np.float32)
    y = rng.random(n + 1, dtype=np.float32)
    a = np.float32(1.5)
    ref = y.copy()
    ref[:n] = (a * x[:n]).astype(np.float32) + y[:n]     # fma: compare within one rounding
    f = mod.get_function("axpy_pre")
    for _ in range(3):          # the third launch runs code specialized for the block shape
        got = y.copy()
        f((2,), (32,), (a, x, got, np.int32(n)))
        np.testing.assert_allclose(got, ref, rtol=1e-6)
        assert got[n] == y[n]
    lifted = _interp(ptx, "axpy_pre", [], (2,), (32,), [a, x, y.copy(), np.int32(n)])[2]
    rerolled = _interp(ptx, "axpy_pre", UPTO + ["reroll-loops"], (2,), (32,),
                       [a, x, y.copy(), np.int32(n)])[2]
    np.testing.assert_array_equal(rerolled, lifted)
    np.testing.assert_array_equal(got, lifted)


@pytest.mark.parametrize("n", [0, 3, 97, 1003])
def test_fp64_sum_and_restrict_match_numpy(mod, n: int) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(n + 1)
    x = rng.random(n, dtype=np.float64)
    y = rng.random(n, dtype=np.float64)
    for _ in range(3):
        got = y.copy()
        mod.get_function("axpy_pre_d")((3,), (16,), (np.float64(-0.5), x, got, np.int32(n)))
        np.testing.assert_allclose(got, -0.5 * x + y, rtol=1e-15)
    xf = x.astype(np.float32)
    out = np.zeros(48, np.float32)
    ref = np.zeros(48, np.float64)
    for t in range(48):
        ref[t] = xf[t::48].astype(np.float64).sum()
    for _ in range(3):
        mod.get_function("sum_pre")((3,), (16,), (xf, out, np.int32(n)))
        np.testing.assert_allclose(out, ref, rtol=1e-5)
    z = rng.random(n, dtype=np.float32)
    yf = y.astype(np.float32)
    for _ in range(3):
        got = yf.copy()
        mod.get_function("fms_restrict")((3,), (16,), (xf, z, got, np.int32(n)))
        np.testing.assert_allclose(got, xf * z - yf, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,n", [("sum_pre", 1003), ("fms_restrict", 77), ("axpy_pre_d", 150)])
def test_interpreter_after_reroll_equals_lifted(ptx: str, name: str, n: int) -> None:
    rng = np.random.default_rng(5)

    def args():  # type: ignore[no-untyped-def]
        if name == "sum_pre":
            return [rng.random(n, dtype=np.float32), np.zeros(40, np.float32), np.int32(n)]
        if name == "fms_restrict":
            return [rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32),
                    rng.random(n, dtype=np.float32), np.int32(n)]
        return [np.float64(2.0), rng.random(n), rng.random(n), np.int32(n)]
    state = rng.bit_generator.state
    lifted = _interp(ptx, name, [], (4,), (10,), args())
    rng.bit_generator.state = state
    # (the whole pipeline too: after the interchange, threads whose trip counts differ stop
    # at the loop's soft barrier and at the one after it, which the interpreter runs as the
    # scheduler does; it once ran soft barriers as block barriers and reported a divergence)
    for pipeline in (UPTO + ["reroll-loops"], default_pipeline()):
        rng.bit_generator.state = state
        got = _interp(ptx, name, pipeline, (4,), (10,), args())
        for a, b in zip(lifted, got):
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, b)


def _step_ref(a, x, y, base: int, n: int, step: int, threads: int):  # type: ignore[no-untyped-def]
    """What the PTX does, computed by hand: each thread runs T = (n - i0 - 1) /u step + 1
    iterations (unsigned division of 32-bit values), i0 = base + tid."""
    y = y.copy()
    for t in range(threads):
        i0 = base + t
        if i0 >= n:
            continue
        trips = ((n - i0 - 1) % 2**32) // (step % 2**32) + 1
        for k in range(trips):
            j = (i0 + k * step) & 2047
            y[j] = np.float32(a * x[j] + y[j])
    return y


@pytest.mark.parametrize("base,n,step,wraps", [
    (0, 1000, 37, False),                       # the simple loop runs
    (0, 50, -5, False),                         # s < 0: T = 1 in each thread, the fallback runs
    (2**31 - 1001, 2**31 - 11, 400, True),      # n > INT_MAX - s: the index after the last
                                                # wraps (T = 3: remainder loop only)
    (2**31 - 2001, 2**31 - 291, 300, False),    # n > INT_MAX - s, T = 6: the unrolled loop
])
def test_guard_sends_what_the_proof_does_not_cover_to_the_original_loops(
        ptx: str, mod, base: int, n: int, step: int, wraps: bool) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(11)
    size = 2048         # (the kernel indexes with i & 2047; no two iterations meet there)
    assert n - base <= size
    x = rng.random(size, dtype=np.float32)
    y = rng.random(size, dtype=np.float32)
    a = np.float32(0.75)
    threads = 32
    if step > 0:
        last = max(base + t + ((n - base - t - 1) // step) * step for t in range(threads))
        assert (last + step > 2**31 - 1) == wraps       # the case is the one it is named for
    ref = _step_ref(a, x, y, base, n, step, threads)
    args = (a, x, None, np.int32(base), np.int32(n), np.int32(step))
    f = mod.get_function("axpy_step")
    for _ in range(3):
        got = y.copy()
        f((1,), (threads,), args[:2] + (got,) + args[3:])
        np.testing.assert_allclose(got, ref, rtol=1e-6)
    got = _interp(ptx, "axpy_step", UPTO + ["reroll-loops"], (1,), (threads,),
                  [a, x, y.copy(), np.int32(base), np.int32(n), np.int32(step)])[2]
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_disabled_leaves_the_unrolled_loops(ptx: str) -> None:
    module = parse_ptx(ptx)
    kernel = lift_kernel(module, module.functions["axpy_pre"]).op
    counts = run_pipeline(kernel, PipelineOptions(disabled=frozenset({"reroll-loops"}))).counts
    assert "reroll-loops" not in counts
    assert "reroll_fallback" not in print_op(kernel)


@pytest.mark.parametrize("n", [0, 1, 7, 64, 65, 259, 5003])
def test_integer_sum_unrolled_loop_first_matches_numpy(ptx: str, mod, n: int) -> None:  # type: ignore[no-untyped-def]
    """nvcc puts the unrolled loop first for an integer sum (the remainder after it)."""
    rng = np.random.default_rng(n)
    x = rng.integers(-1000, 1000, n + 1).astype(np.int32)
    threads = 2 * 32
    ref = np.array([x[t:n:threads].astype(np.int64).sum() for t in range(threads)], np.int32)
    f = mod.get_function("isum_pre")
    for _ in range(3):
        out = np.zeros(threads, np.int32)
        f((2,), (32,), (x, out, np.int32(n)))
        np.testing.assert_array_equal(out, ref)
    got = _interp(ptx, "isum_pre", UPTO + ["reroll-loops"], (2,), (32,),
                  [x, np.zeros(threads, np.int32), np.int32(n)])[1]
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("base,n,step", [(0, 3000, 41), (0, 50, -3), (2**31 - 1001, 2**31 - 11, 400),
                                         (2**31 - 2001, 2**31 - 291, 300)])
def test_integer_sum_guard(ptx: str, mod, base: int, n: int, step: int) -> None:  # type: ignore[no-untyped-def]
    """The unrolled-loop-first arrangement behind the same guard: a negative stride and an
    index past INT_MAX - s run nvcc's loops (hand-computed PTX semantics)."""
    rng = np.random.default_rng(3)
    x = rng.integers(-50, 50, 1024).astype(np.int32)
    threads = 32
    ref = np.zeros(threads, np.int64)
    for t in range(threads):
        i0 = base + t
        if i0 >= n:
            continue
        trips = ((n - i0 - 1) % 2**32) // (step % 2**32) + 1
        for k in range(trips):
            i = (i0 + k * step + 2**31) % 2**32 - 2**31       # the 32-bit index
            ref[t] += int(x[i & 1023]) * (i & 7)
    ref = ref.astype(np.int32)
    f = mod.get_function("isum_step")
    for _ in range(3):
        out = np.zeros(threads, np.int32)
        f((1,), (threads,), (x, out, np.int32(base), np.int32(n), np.int32(step)))
        np.testing.assert_array_equal(out, ref)
    got = _interp(ptx, "isum_step", UPTO + ["reroll-loops"], (1,), (threads,),
                  [x, np.zeros(threads, np.int32), np.int32(base), np.int32(n), np.int32(step)])[1]
    np.testing.assert_array_equal(got, ref)


# --- the symbolic evaluation (analysis/evolution.py) ---------------------------------------

def _op(block, name, operands, rtype, mods, **attrs):  # type: ignore[no-untyped-def]
    from cpuify.ir.core import Operation
    op = Operation(name, operands, [rtype] if rtype else [], {"mods": mods, **attrs})
    block.append(op)
    return op.results[0] if rtype else op


def test_evolution_affine_forms_and_the_index_rule() -> None:
    from cpuify.analysis.evolution import IndexRange, Syms, evaluate_ops
    from cpuify.ir.core import Block
    outer = Block(["i32", "i32", "i32", "i64"])
    i0, n, s, base = outer.args
    syms = Syms()
    # nvcc's dividend: (s + n) + ~(i0 + s) is n - i0 - 1
    a = _op(outer, "ptx.add", [s, n], "i32", ["s32"])
    b = _op(outer, "ptx.add", [i0, s], "i32", ["s32"])
    c = _op(outer, "ptx.not", [b], "i32", ["b32"])
    d = _op(outer, "ptx.add", [a, c], "i32", ["s32"])
    N, I0, S = (syms.outside(v, set()) for v in (n, i0, s))
    assert syms.outside(d, set()) == syms.lin(syms.lin(N, I0, 1, -1), syms.aff(32, 1), 1, -1)
    # the loop: index i (i0 + m*s); a sign extension distributes over the index only
    loop = Block(["i32"])
    (i,) = loop.args
    syms.index = IndexRange(I0, S, 4)
    i_next = _op(loop, "ptx.add", [i, s], "i32", ["s32"])
    wide = _op(loop, "ptx.mul", [i_next, _const_in(loop, 4)], "i64", ["wide", "s32"])
    addr = _op(loop, "ptx.add", [base, wide], "i64", ["s64"])
    doubled = _op(loop, "ptx.add", [i, i], "i32", ["s32"])
    wide2 = _op(loop, "ptx.mul", [doubled, _const_in(loop, 4)], "i64", ["wide", "s32"])
    _op(loop, "ptx.ld", [addr], "f32", ["global", "f32"], offset=8)
    nc = _op(loop, "ptx.ld", [addr], "f32", ["global", "nc", "f32"], offset=0)
    env = {i: syms.rec(I0, S)}
    it = evaluate_ops(syms, loop.ops, env, {loop}, body=loop)

    def sext(x: int) -> int:
        return syms.sext(x, 64)
    # &base[i + s] = base + 4 sext(i0) + 4 sext(s) + m * 4 sext(s)
    four_s = syms.lin(sext(S), sext(S), 4, 0)
    start = syms.lin(syms.lin(syms.outside(base, set()), sext(I0), 1, 4), four_s)
    assert it.values[addr] == syms.rec(start, four_s)
    # 2i is no index value: its extension stays an opaque op
    assert syms.node(it.values[wide2])[0] == "op"
    # the plain load is the iteration's first effect, its offset folded into the address;
    # the .nc load is a function of its address (no effect)
    assert len(it.effects) == 1
    (effect,) = it.effects
    node = syms.node(effect)
    assert node[0] == "eff" and node[4][0] == syms.lin(it.values[addr], syms.aff(64, 8))
    assert syms.node(it.values[nc])[0] == "op"
    # one iteration later: every recurrence advances by its step
    later = syms.advance(it.values[addr], 1, {}, {})
    assert later == syms.rec(syms.lin(start, four_s), four_s)
    assert syms.varies(it.values[addr]) and not syms.varies(four_s)


def _const_in(block, value: int):  # type: ignore[no-untyped-def]
    from cpuify.ir.core import Operation
    op = Operation("upir.const", [], ["i32"], {"value": value})
    block.append(op)
    return op.results[0]


def test_evolution_sign_extension_outside_the_proven_range() -> None:
    """sext(i0 + j*s) distributes for 0 <= j <= max_shift only (beyond, i could wrap)."""
    from cpuify.analysis.evolution import IndexRange, Syms
    from cpuify.ir.core import Block
    outer = Block(["i32", "i32"])
    syms = Syms()
    I0, S = (syms.outside(v, set()) for v in outer.args)
    syms.index = IndexRange(I0, S, 2)
    inside = syms.sext(syms.rec(syms.lin(I0, S, 1, 2), S), 64)
    beyond = syms.sext(syms.rec(syms.lin(I0, S, 1, 3), S), 64)
    other_step = syms.sext(syms.rec(I0, syms.lin(S, S, 2, 0)), 64)
    assert syms.node(inside)[0] == "rec"
    assert syms.node(beyond)[0] == "op" and syms.node(other_step)[0] == "op"


@pytest.mark.parametrize("n", [0, 5, 63, 64, 65, 1001])
def test_peeled_remainder_in_a_time_loop_matches_numpy(ptx: str, mod, n: int) -> None:  # type: ignore[no-untyped-def]
    """Inside a time-step loop with __syncthreads() nvcc peels the remainder into `if`s."""
    x = np.random.default_rng(n).random(n + 1, dtype=np.float32)
    ref = x.copy()
    for _ in range(5):
        ref[:n] = (ref[:n] * np.float32(0.5) + np.float32(1)).astype(np.float32)
    f = mod.get_function("steps_pre")
    for _ in range(3):
        got = x.copy()
        f((1,), (64,), (got, np.int32(n), np.int32(5)))
        np.testing.assert_allclose(got, ref, rtol=1e-6)
    lifted = _interp(ptx, "steps_pre", [], (1,), (64,), [x.copy(), np.int32(n), np.int32(5)])[0]
    got = _interp(ptx, "steps_pre", UPTO + ["reroll-loops"], (1,), (64,),
                  [x.copy(), np.int32(n), np.int32(5)])[0]
    np.testing.assert_array_equal(got, lifted)


@pytest.mark.parametrize("n,step", [(1500, 37), (50, -5)])
def test_peeled_remainder_guard(ptx: str, mod, n: int, step: int) -> None:  # type: ignore[no-untyped-def]
    """A negative stride runs the peeled copies and nvcc's loop (T = 1 in each thread; the
    range part of the guard, shared with the other arrangements, is tested above)."""
    base = 0
    rng = np.random.default_rng(9)
    y = rng.random(2048, dtype=np.float32)
    threads, iters = 32, 3
    ref = y.copy()
    for _ in range(iters):
        for t in range(threads):
            i0 = base + t
            if i0 >= n:
                continue
            trips = ((n - i0 - 1) % 2**32) // (step % 2**32) + 1
            for k in range(trips):
                j = i0 + k * step
                ref[j] = np.float32(ref[j] * np.float32(0.5) + np.float32(1))
    f = mod.get_function("steps_step")
    args = (np.int32(n), np.int32(step), np.int32(iters))
    for _ in range(3):
        got = y.copy()
        f((1,), (threads,), (got,) + args)
        np.testing.assert_allclose(got, ref, rtol=1e-6)
    got = _interp(ptx, "steps_step", UPTO + ["reroll-loops"], (1,), (threads,),
                  [y.copy(), *args])[0]
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_not_when_a_peeled_copy_differs(ptx: str) -> None:
    """The second of the `if`-peeled remainder copies computes something else: the pass
    must leave the kernel alone (the copies are checked against the unrolled loop's)."""
    kernel = _before_reroll(ptx, "steps_pre")
    assert _reroll(parse_op(print_op(kernel))) == 1
    peeled = [b for b in block_body(kernel).blocks if b not in b.successors and
              sum(op.name == "ptx.st" for op in b.ops) == 1]
    assert len(peeled) == 3
    fma = next(op for op in peeled[1].ops if op.name == "ptx.fma")
    fma.operands[1], fma.operands[2] = fma.operands[2], fma.operands[1]
    assert _reroll(parse_op(print_op(kernel))) == 0


@pytest.mark.parametrize("n", [0, 128, 384, 512, 1280, 4096 + 128])
def test_thread_coarsened_sum_matches_numpy_and_interpreter(ptx: str, mod, n: int) -> None:  # type: ignore[no-untyped-def]
    """nvcc's K = 4 strength-reduced indices (blockDim * ((blockIdx << 2) | k) + tid) are
    proven equal to the main loop's i + k * blockDim (products of two values multiplied
    out, an or of low bits an add): re-rolled, interchanged, and each thread's sum is the
    one NumPy computes for its elements (n a multiple of 4 * blockDim: no bounds test)."""
    grid, block = 3, 32
    rng = np.random.default_rng(n + 7)
    x = rng.random(n, dtype=np.float32)
    ref = np.zeros(grid * block, np.float64)
    for b in range(grid):
        for t in range(block):
            for i in range(b * block * 4 + t, n, grid * block * 4):
                ref[b * block + t] += x[i:i + 4 * block:block].astype(np.float64).sum()
    out = np.zeros(grid * block, np.float32)
    for _ in range(3):          # the third launch runs code specialized for the block shape
        mod.get_function("sum_coarse4")((grid,), (block,), (x, out, np.int32(n)))
        np.testing.assert_allclose(out, ref, rtol=1e-5)
    lifted = _interp(ptx, "sum_coarse4", [], (grid,), (block,),
                     [x, np.zeros_like(out), np.int32(n)])[1]
    rerolled = _interp(ptx, "sum_coarse4", UPTO + ["reroll-loops"], (grid,), (block,),
                       [x, np.zeros_like(out), np.int32(n)])[1]
    np.testing.assert_array_equal(rerolled, lifted)
    np.testing.assert_array_equal(out, lifted)


def test_evolution_products_and_low_bit_ors() -> None:
    """Two values multiplied (no constant side) are multiplied out, each product of two
    leaves a leaf: ntid * ((b << 2) | 1) + t equals (ntid << 2) * b + t + ntid.  An or is an
    add only where the constant fits in the bits the other side leaves zero."""
    from cpuify.analysis.evolution import Syms
    from cpuify.ir.core import Block
    outer = Block(["i32", "i32", "i32"])
    ntid, b, t = outer.args
    syms = Syms()
    shifted = _op(outer, "ptx.shl", [b, _const_in(outer, 2)], "i32", ["b32"])
    ored = _op(outer, "ptx.or", [shifted, _const_in(outer, 1)], "i32", ["b32"])
    first = _op(outer, "ptx.mad", [ntid, ored, t], "i32", ["lo", "s32"])
    ntid4 = _op(outer, "ptx.shl", [ntid, _const_in(outer, 2)], "i32", ["b32"])
    i0 = _op(outer, "ptx.mad", [ntid4, b, t], "i32", ["lo", "s32"])
    second = _op(outer, "ptx.add", [i0, ntid], "i32", ["s32"])
    assert syms.outside(first, set()) == syms.outside(second, set())
    assert syms.node(syms.outside(first, set()))[0] == "aff"
    # (b << 1) | 3: bit 1 may be set on both sides, no add
    overlap = _op(outer, "ptx.or", [_op(outer, "ptx.shl", [b, _const_in(outer, 1)], "i32", ["b32"]),
                                    _const_in(outer, 3)], "i32", ["b32"])
    plus = _op(outer, "ptx.add", [_op(outer, "ptx.shl", [b, _const_in(outer, 1)], "i32", ["b32"]),
                                  _const_in(outer, 3)], "i32", ["s32"])
    assert syms.outside(overlap, set()) != syms.outside(plus, set())
    # the product of two sums, multiplied out, modulo 2^32: (b + 1) * (t + 2) = bt + 2b + t + 2
    bt = _op(outer, "ptx.mul", [_op(outer, "ptx.add", [b, _const_in(outer, 1)], "i32", ["s32"]),
                                _op(outer, "ptx.add", [t, _const_in(outer, 2)], "i32", ["s32"])],
             "i32", ["lo", "s32"])
    plain = _op(outer, "ptx.mul", [t, b], "i32", ["lo", "s32"])
    B, T = syms.outside(b, set()), syms.outside(t, set())
    expect = syms.lin(syms.lin(syms.outside(plain, set()), B, 1, 2), syms.lin(T, syms.aff(32, 2)))
    assert syms.outside(bt, set()) == expect
