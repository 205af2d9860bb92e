"""Loops recognised by what they compute (issue #15's scalar evolution, #18's grid-sync
leftovers): cooperative groups' 64-bit grid-stride loops narrowed to 32 bits and interchanged
with the thread loop, and a grid-sync solver's time loop keeping its values once per block
across spin-wait yield points.  IR-level checks (the pass fires / must not fire) and results
against NumPy and the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.analysis.uniformity import uniform_across_yields, uniform_values
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import interpret_kernel
from cpuify.ir.printer import print_op
from cpuify.ir.structure import block_body
from cpuify.ir.verifier import verify
from cpuify.lifting import lift_kernel
from cpuify.transforms.pass_manager import (
    PipelineOptions,
    default_pipeline,
    run_pipeline,
)

SRC = r'''
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
// cooperative groups' grid-stride loop: 64-bit rank and size, `int i` truncated each round
extern "C" __global__ void cg_axpy(float a, const float *x, float *y, int n) {
    cg::grid_group g = cg::this_grid();
    for (int i = g.thread_rank(); i < n; i += g.size()) y[i] = a * x[i] + y[i];
}
// a start whose high half is set (modulo 2^32 it is rank + 3): the narrowed loop must
// agree with the 64-bit one, which truncates in every round
extern "C" __global__ void cg_offset(const int *x, int *y, int n, unsigned long long off) {
    cg::grid_group g = cg::this_grid();
    for (int i = (int)(g.thread_rank() + off); i < n; i += g.size()) y[i] = 2 * x[i] + i;
}
// must not narrow: the 64-bit counter is compared in 64 bits (its high half is read); a
// 64-bit induction variable of its own, interchanged as it is
extern "C" __global__ void wide_counter(const float *x, float *y, long long n) {
    cg::grid_group g = cg::this_grid();
    for (unsigned long long i = g.thread_rank(); i < n; i += g.size()) y[(int)i] = x[(int)i] + 1.0f;
}
// must not interchange: the stride differs from thread to thread. Two threads can reach
// the same element, so the update is atomic (a plain += there is a race: blocks run on
// different cores, and one of the two updates could be lost)
extern "C" __global__ void ragged_stride(const int *x, int *y, int n) {
    int s = blockDim.x * gridDim.x + (threadIdx.x & 1);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += s) atomicAdd(&y[i], x[i] + 1);
}
// Jacobi sweeps with grid.sync() between them, indexed both ways
extern "C" __global__ void jacobi_cg(const float *b, float *x0, float *x1, int n, int iters) {
    cg::grid_group g = cg::this_grid();
    float *src = x0, *dst = x1;
    for (int it = 0; it < iters; it++) {
        for (int i = g.thread_rank(); i < n; i += g.size()) {
            float l = i > 0 ? src[i - 1] : 0.0f, r = i < n - 1 ? src[i + 1] : 0.0f;
            dst[i] = 0.5f * (b[i] + l + r);
        }
        g.sync();
        float *t = src; src = dst; dst = t;
    }
}
extern "C" __global__ void jacobi_ids(const float *b, float *x0, float *x1, int n, int iters) {
    cg::grid_group g = cg::this_grid();
    float *src = x0, *dst = x1;
    for (int it = 0; it < iters; it++) {
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
            float l = i > 0 ? src[i - 1] : 0.0f, r = i < n - 1 ? src[i + 1] : 0.0f;
            dst[i] = 0.5f * (b[i] + l + r);
        }
        g.sync();
        float *t = src; src = dst; dst = t;
    }
}
// a thread-dependent branch to a trap (nvcc's check that grid.sync() has its workspace,
// an assert) divides no live threads: the loop around it keeps a uniform counter
extern "C" __global__ void trap_then_loop(const int *x, int *out, int m) {
    int acc = 0;
    for (int k = 0; k < m; k++) {
        if (x[threadIdx.x] < 0) __trap();
        acc += x[k];
        __syncthreads();
    }
    out[threadIdx.x] = acc;
}
// must not share: k is the same in every thread in each round, but threads waiting in the
// spin are in different rounds (thread t sets flag k for k % blockDim.x == t; no barrier)
extern "C" __global__ void flag_chain(volatile int *flag, int *out, int m) {
    int acc = 0;
    for (int k = 0; k < m; k++) {
        if (threadIdx.x == k % blockDim.x) flag[k] = k + 1;
        while (flag[k] == 0) { }
        acc += flag[k] * (int)(threadIdx.x + 1);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
'''


@pytest.fixture(scope="module")
def ptx() -> str:
    return compile_to_ptx(SRC).ptx


def _kernel(ptx: str, name: str, passes: list[str] | None = None):  # type: ignore[no-untyped-def]
    module = parse_ptx(ptx)
    kernel = lift_kernel(module, module.functions[name]).op
    # (left a CFG: these tests walk the blocks the passes leave, not raise-structured-cf's regions)
    result = run_pipeline(kernel, PipelineOptions(passes=tuple(passes) if passes else None,
                                                  disabled=frozenset({"raise-structured-cf"}),
                                                  verify_each=True))
    return kernel, result.counts


def _upto(last: str) -> list[str]:
    order = default_pipeline()
    return order[:order.index(last) + 1]


@pytest.mark.parametrize("name,narrowed,interchanged", [
    ("cg_axpy", 1, 1), ("cg_offset", 1, 1), ("jacobi_cg", 1, 1), ("jacobi_ids", 0, 1),
    ("wide_counter", 0, 1), ("ragged_stride", 0, 0)])
def test_which_loops_are_narrowed_and_interchanged(ptx, name, narrowed, interchanged):
    _, counts = _kernel(ptx, name, _upto("interchange-thread-strided-loops"))
    assert counts["narrow-induction-variables"] == narrowed
    assert counts["interchange-thread-strided-loops"] == interchanged


def test_narrowed_loop_is_32_bit_in_printed_ir(ptx):
    kernel, _ = _kernel(ptx, "cg_axpy", _upto("narrow-induction-variables"))
    verify(kernel)
    region = block_body(kernel)
    carried = [a for b in region.blocks for a in b.args]
    assert [a.type for a in carried] == ["i32"]          # was one i64 block argument
    text = print_op(kernel)
    assert '"ptx.cvt.' not in text and "(i64) -> i32" not in text.split("^bb2")[1]


def test_twin_copies_of_the_index_become_one(ptx):
    # nvcc carries `int i` of jacobi_cg's grid-stride loop twice (the 64-bit register and a
    # 32-bit copy); narrowed, they are one argument, so nothing is kept per thread at the
    # loop's soft barrier
    kernel, _ = _kernel(ptx, "jacobi_cg", _upto("narrow-induction-variables"))
    headers = [[a.type for a in b.args] for b in block_body(kernel).blocks if b.args]
    assert ["i32"] in headers and ["i32", "i32"] not in headers and \
        not any(t == "i64" for h in headers if len(h) < 3 for t in h)


def test_without_the_pass_the_cg_loop_is_not_interchanged(ptx):
    passes = [p for p in _upto("interchange-thread-strided-loops")
              if p != "narrow-induction-variables"]
    _, counts = _kernel(ptx, "cg_axpy", passes)
    assert counts["interchange-thread-strided-loops"] == 0


@pytest.mark.parametrize("n,grid", [(1, 1), (1000, 3), (100_003, 16)])
def test_cg_grid_stride_matches_numpy_and_interpreter(ptx, n, grid):
    rng = np.random.default_rng(n)
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    ref = np.float32(1.5) * x + y
    f = cpuify.RawModule(ptx=ptx).get_function("cg_axpy")
    for _ in range(3):                   # generic code, then the specialized block shape
        y2 = y.copy()
        f((grid,), (128,), (np.float32(1.5), x, y2, np.int32(n)))
        np.testing.assert_allclose(y2, ref, rtol=1e-6)
    m = min(n, 700)
    y3 = y[:m].copy()
    interpret_kernel(ptx, "cg_axpy", (2,), (64,), (np.float32(1.5), x[:m], y3, np.int32(m)))
    np.testing.assert_allclose(y3, ref[:m], rtol=1e-6)


def test_high_half_of_the_start_changes_nothing(ptx):
    n, grid, block = 5000, 3, 64
    x = np.arange(n, dtype=np.int32) * 7 - 100
    off = np.uint64((1 << 32) + 3)       # (int)(rank + off) == rank + 3
    i = np.arange(3, n)
    ref = np.full(n, -1, np.int32)
    ref[i] = 2 * x[i] + i
    y = np.full(n, -1, np.int32)
    cpuify.RawModule(ptx=ptx).get_function("cg_offset")((grid,), (block,), (x, y, np.int32(n), off))
    np.testing.assert_array_equal(y, ref)
    small = np.full(300, -1, np.int32)
    interpret_kernel(ptx, "cg_offset", (2,), (32,), (x[:300], small, np.int32(300), off))
    np.testing.assert_array_equal(small, ref[:300])


def test_must_not_fire_cases_still_compute_right(ptx):
    mod = cpuify.RawModule(ptx=ptx)
    n = 3000
    x = np.random.default_rng(5).random(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    mod.get_function("wide_counter")((4,), (64,), (x, y, np.int64(n)))
    np.testing.assert_allclose(y, x + 1)
    xi = np.arange(n, dtype=np.int32)
    yi = np.zeros(n, np.int32)
    mod.get_function("ragged_stride")((2,), (64,), (xi, yi, np.int32(n)))
    ref = np.zeros(n, np.int32)
    interpret_kernel(ptx, "ragged_stride", (2,), (64,), (xi, ref, np.int32(n)))
    np.testing.assert_array_equal(yi, ref)
    assert (yi[:128] == xi[:128] + 1).all()


def jacobi_reference(b: np.ndarray, iters: int) -> np.ndarray:
    x = np.zeros_like(b)
    for _ in range(iters):
        left = np.concatenate([[np.float32(0)], x[:-1]])
        right = np.concatenate([x[1:], [np.float32(0)]])
        x = np.float32(0.5) * (b + left + right)
    return x


def _yield_uniform(ptx: str, name: str):  # type: ignore[no-untyped-def]
    kernel, _ = _kernel(ptx, name)
    region = block_body(kernel)
    uniform = uniform_values(region)
    return region, uniform, uniform_across_yields(region, uniform)


@pytest.mark.parametrize("name", ["jacobi_cg", "jacobi_ids"])
def test_time_loop_values_stay_shared_across_grid_sync(ptx, name):
    region, uniform, shared = _yield_uniform(ptx, name)
    assert any(op.name == "upir.spin_wait" for b in region.blocks for op in b.ops)
    # the time loop: the block arguments carrying `it`, `src`, `dst` (a grid.sync() in each
    # iteration) are uniform and stay one copy per block
    time_loop = [b for b in region.blocks if len(b.args) == 3]
    assert time_loop and all(a in uniform and a in shared for a in time_loop[0].args)


@pytest.mark.parametrize("name", ["jacobi_cg", "jacobi_ids"])
@pytest.mark.parametrize("n,iters,blocks", [(5000, 40, 6), (300, 7, 3)])
def test_grid_sync_jacobi_matches_numpy(ptx, name, n, iters, blocks):
    b = np.random.default_rng(n).random(n).astype(np.float32)
    k = cpuify.RawModule(ptx=ptx, enable_cooperative_groups=True).get_function(name)
    for _ in range(3):                   # generic code, then the specialized block shape
        x0 = np.zeros(n, np.float32)
        x1 = np.zeros(n, np.float32)
        k((blocks,), (128,), (b, x0, x1, np.int32(n), np.int32(iters + iters % 2)))
        np.testing.assert_allclose(x0, jacobi_reference(b, iters + iters % 2), rtol=1e-5)


def test_grid_sync_jacobi_matches_interpreter(ptx):
    n, iters = 200, 6
    b = np.random.default_rng(9).random(n).astype(np.float32)
    want = np.zeros(n, np.float32)
    interpret_kernel(ptx, "jacobi_cg", (3,), (32,), (b, want, np.zeros(n, np.float32),
                                                     np.int32(n), np.int32(iters)),
                     cooperative=True)
    got = np.zeros(n, np.float32)
    cpuify.RawModule(ptx=ptx, enable_cooperative_groups=True).get_function("jacobi_cg")(
        (3,), (32,), (b, got, np.zeros(n, np.float32), np.int32(n), np.int32(iters)))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_spin_inside_a_loop_without_barrier_keeps_its_counter_per_thread(ptx):
    region, uniform, shared = _yield_uniform(ptx, "flag_chain")
    carried_int = [a for b in region.blocks for a in b.args if a.type == "i32" and a in uniform]
    assert carried_int                           # k: the same in each round of every thread
    assert not any(a in shared for a in carried_int)     # ... but not shared at the yield
    m, block = 45, 32
    flag = np.zeros(m, np.int32)
    out = np.zeros(block, np.int32)
    cpuify.RawModule(ptx=ptx).get_function("flag_chain")((1,), (block,), (flag, out, np.int32(m)))
    k = np.arange(m)
    np.testing.assert_array_equal(out, (k + 1).sum() * (np.arange(block) + 1))
    np.testing.assert_array_equal(flag, k + 1)


@pytest.mark.parametrize("name", ["cg_axpy", "cg_offset"])
def test_interpreter_after_each_pass_and_without_each(ptx, name):
    """The reference interpreter runs the IR after each pass of the pipeline and with each
    pass off: the narrowed and interchanged loops compute what the PTX does."""
    from cpuify.interp.machine import InterpModule
    passes = default_pipeline()
    pipelines = [passes[:k] for k in range(1, len(passes) + 1)]
    pipelines += [[p for p in passes if p != off] for off in passes]
    n = 300
    x = (np.arange(n) % 17).astype(np.float32 if name == "cg_axpy" else np.int32)
    reference = None
    for pipeline in [[]] + pipelines:
        module = parse_ptx(ptx)
        lifted = lift_kernel(module, module.functions[name])
        lifted.op.attributes["block_dims"] = [32, 1, 1]
        run_pipeline(lifted.op, PipelineOptions(passes=tuple(pipeline), verify_each=True))
        interp = InterpModule(ptx)
        interp.use_ir(name, lifted.op)
        y = np.full(n, 3, x.dtype)
        args = (np.float32(0.5), x, y, np.int32(n)) if name == "cg_axpy" else \
            (x, y, np.int32(n), np.uint64((1 << 32) + 3))
        interp.launch(name, (2,), (32,), args)
        if reference is None:
            reference = y
        np.testing.assert_array_equal(y, reference, err_msg=f"{name} after {pipeline}")


def test_branch_to_a_trap_divides_no_threads(ptx):
    kernel, _ = _kernel(ptx, "trap_then_loop", [])
    region = block_body(kernel)
    uniform = uniform_values(region)
    counters = [a for b in region.blocks for a in b.args if a.type == "i32"]
    assert counters and any(a in uniform for a in counters)
    x = np.arange(64, dtype=np.int32)
    out = np.zeros(64, np.int32)
    f = cpuify.RawModule(ptx=ptx).get_function("trap_then_loop")
    f((1,), (64,), (x, out, np.int32(10)))
    np.testing.assert_array_equal(out, np.full(64, 45))
    x[5] = -1
    with pytest.raises(cpuify.KernelFailure):
        f((1,), (64,), (x, out, np.int32(10)))
