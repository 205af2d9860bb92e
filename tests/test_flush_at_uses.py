"""`flush-min-max-at-uses` (transforms/flush.py): a `min/max.ftz.f32` whose result is read
only through a flush leaves its flushes to the readers, so a running max compiled with
-ftz=true (every CuPy-style compile) stays a max reduction LLVM vectorizes.

Checked on the printed IR (which ops are marked, and the cases where the pass must not fire:
a result stored, moved to an integer, or carried out of a loop into a store), and end to end
on subnormal, signed-zero and NaN inputs against a NumPy model of the GPU's flushing and the
reference interpreter, with the pass on and off."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cpuify
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp.machine import InterpModule
from cpuify.ir.printer import print_op
from cpuify.transforms.pass_manager import PipelineOptions

SOURCE = r'''
// One thread per row: the row's max and min, read through a multiply (flushing readers) and
// stored as they are (readers that see subnormals).
extern "C" __global__ void row_extremes(const float *x, float *scaled_max, float *scaled_min,
                                        float *stored_max, int *max_bits, int cols, float s) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    const float *row = x + (size_t)r * cols;
    float m = -3.402823466e38f, lo = 3.402823466e38f;
    for (int c = 0; c < cols; c++) {
        m = fmaxf(m, row[c]);
        lo = fminf(lo, row[c]);
    }
    scaled_max[r] = m * s;
    scaled_min[r] = lo * s;
    float last = fmaxf(row[0], row[1]);
    max_bits[r] = __float_as_int(fmaxf(row[2], row[3]));
    float k = -3.402823466e38f;
    for (int c = 0; c < cols; c++)
        k = fmaxf(k, row[c]);
    stored_max[r] = k + 0.0f == 1.0f ? last : k;    // the loop's max stored as it is
}
'''
ROWS, COLS, BLOCK = 8, 6, 4
TINY = np.float32(1.1754943508222875e-38)


def _flush(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, np.float32).copy()
    small = np.abs(v) < TINY
    v[small] = np.copysign(np.float32(0), v[small])
    return v


def _inputs() -> np.ndarray:
    d = np.float32(3e-39)
    rows = [
        [d, 2 * d, 1e-45, d, d, 5e-39],                     # all subnormal: max/min +0
        [-d, -2 * d, -1.0, -d, -7.0, -1e-45],               # max of flushed: -0
        [1.5, -2.0, d, 4.0, -d, 0.25],                      # normals win
        [np.nan, d, -d, np.nan, 2.0, -3.0],                 # NaNs ignored
        [-0.0, -d, 0.0, d, -0.0, 0.0],                      # signed zeros: max +0, min -0
        [1e-38, 1.1e-38, -1e-38, 1e-38, 1e-38, 1e-38],     # just below the normal range
        [np.nan] * 6,                                       # all NaN: NaN
        [3.0, 2.0, 1.0, 0.5, -0.5, 7.0],
    ]
    return np.array(rows, np.float32)


def _expected(x: np.ndarray, s: np.float32) -> dict[str, np.ndarray]:
    f = _flush(x)
    with np.errstate(invalid="ignore"):
        m = np.fmax.reduce(np.concatenate([np.full((ROWS, 1), -3.402823466e38, np.float32), f], 1), 1)
        lo = np.fmin.reduce(np.concatenate([np.full((ROWS, 1), 3.402823466e38, np.float32), f], 1), 1)
    # PTX orders -0 below +0
    for r in range(ROWS):
        if m[r] == 0:
            m[r] = np.float32(0.0) if np.any((f[r] == 0) & ~np.signbit(f[r])) else np.float32(-0.0)
        if lo[r] == 0:
            lo[r] = np.float32(-0.0) if np.any((f[r] == 0) & np.signbit(f[r])) else np.float32(0.0)
    bits = np.fmax(f[:, 2], f[:, 3])
    for r in range(ROWS):
        if bits[r] == 0:
            bits[r] = np.float32(0.0) if np.any((f[r, 2:4] == 0) & ~np.signbit(f[r, 2:4])) \
                else np.float32(-0.0)
    with np.errstate(over="ignore"):
        sm, sl = _flush(m * s), _flush(lo * s)
    return {"scaled_max": sm, "scaled_min": sl, "stored_max": m,
            "max_bits": bits.view(np.int32)}


@pytest.fixture(scope="module")
def ptx() -> str:
    return compile_to_ptx(SOURCE, filename="flush.cu", options=("-ftz=true",)).ptx


def _optimized(ptx: str, options: PipelineOptions):  # type: ignore[no-untyped-def]
    module = parse_ptx(ptx)
    entry = next(e for e in module.entries if e.name == "row_extremes")
    return lift_and_optimize(module, entry, options, (BLOCK, 1, 1))


def test_marks_only_min_max_read_through_a_flush(ptx: str) -> None:
    lifted, result = _optimized(ptx, PipelineOptions())
    text = print_op(lifted.op)
    minmax = [line for line in text.splitlines() if re.search(r'"ptx\.(min|max)"', line)]
    assert all('"ftz"' in line for line in minmax)
    marked = [line for line in minmax if "flush_at_uses = true" in line]
    # the running max and min read through `* s` are marked, and so is the second loop's
    # running max (stored after the loop: a flush of its own is put in front of the select
    # that reads it); fmaxf(row[0], row[1]) (stored when the select picks it) and
    # fmaxf(row[2], row[3]) (its bits stored) are not: no loop, nothing to vectorize
    assert result.counts["flush-min-max-at-uses"] == len(marked)
    assert any('"ptx.max"' in line for line in marked)
    assert any('"ptx.min"' in line for line in marked)
    assert len(minmax) - len(marked) == 2
    flushes = [line for line in text.splitlines()
               if '"ptx.cvt"' in line and 'mods = ["ftz", "f32", "f32"]' in line]
    assert len(flushes) == 1
    for line in marked:
        assert "flush_at_uses" in line


def test_does_not_fire_when_disabled(ptx: str) -> None:
    lifted, result = _optimized(
        ptx, PipelineOptions(disabled=frozenset({"flush-min-max-at-uses"})))
    assert "flush_at_uses" not in print_op(lifted.op)
    assert "flush-min-max-at-uses" not in result.counts


def _launch_args(x: np.ndarray, s: np.float32) -> list:  # type: ignore[type-arg]
    outs = [np.full(ROWS, 7, np.float32) for _ in range(3)] + [np.zeros(ROWS, np.int32)]
    return [x, *outs, np.int32(COLS), s]


def _check(args: list, want: dict[str, np.ndarray], how: str) -> None:  # type: ignore[type-arg]
    got = dict(zip(("scaled_max", "scaled_min", "stored_max", "max_bits"), args[1:5]))
    for k, v in want.items():
        if v.dtype == np.int32:
            np.testing.assert_array_equal(got[k], v, err_msg=f"{k} ({how})")
            continue
        np.testing.assert_array_equal(got[k], v, err_msg=f"{k} ({how})")
        np.testing.assert_array_equal(np.signbit(got[k]), np.signbit(v), err_msg=f"{k} sign ({how})")


@pytest.mark.parametrize("options", [(), ("--disable-pass=flush-min-max-at-uses",)])
def test_compiled_flushes_like_the_gpu(options: tuple[str, ...]) -> None:
    x = _inputs()
    s = np.float32(2.0)
    want = _expected(x, s)
    mod = cpuify.RawModule(code=SOURCE, options=options)      # -ftz=true, as CuPy
    fn = mod.get_function("row_extremes")
    for _ in range(2):          # generic code, then the code specialized for the block shape
        args = _launch_args(x, s)
        fn((ROWS // BLOCK,), (BLOCK,), tuple(args))
        _check(args, want, f"compiled {options}")


def test_interpreter_agrees(ptx: str) -> None:
    x = _inputs()
    s = np.float32(2.0)
    want = _expected(x, s)
    lifted, _ = _optimized(ptx, PipelineOptions())
    interp = InterpModule(ptx)
    interp.use_ir("row_extremes", lifted.op)
    args = _launch_args(x, s)
    interp.launch("row_extremes", (ROWS // BLOCK,), (BLOCK,), args)
    _check(args, want, "interpreter")


def _optimized_llvm(src: str, name: str, options: tuple[str, ...], pipeline: PipelineOptions,
                    block: tuple[int, int, int]) -> str:
    from cpuify.codegen import jit
    from cpuify.codegen.llvm_gen import ModuleCodegen
    module = parse_ptx(compile_to_ptx(src, filename="k.cu", options=options).ptx)
    entry = next(e for e in module.entries if e.name == name)
    lifted, _ = lift_and_optimize(module, entry, pipeline, block)
    gen = ModuleCodegen(module, *jit.triple_and_layout())
    gen.add_kernel(lifted, block)
    return str(jit.optimize(gen.llvm_text()))


def test_row_softmax_running_max_stays_a_vector_reduction_under_ftz() -> None:
    """Guard for the regression this pass fixes: with -ftz=true (what the Python API and
    CuPy add to every compile) the benchmark's one-thread-per-row softmax kept its running
    max scalar (flushes on the loop-carried value), 6x slower.  Its code specialized for
    the benchmark's block shape must hold a vector max reduction, with -ftz=true as without."""
    from benchmarks.suite.workloads.row_softmax import BLOCK, CUDA_SRC
    block = (BLOCK, 1, 1)
    vector_max = re.compile(r"@llvm\.maximum\.v\d+f32")
    for options in ((), ("-ftz=true",)):
        text = _optimized_llvm(CUDA_SRC, "softmax_rows", options, PipelineOptions(), block)
        assert vector_max.search(text), f"no vector max reduction with {options}"
    off = PipelineOptions(disabled=frozenset({"flush-min-max-at-uses"}))
    text = _optimized_llvm(CUDA_SRC, "softmax_rows", ("-ftz=true",), off, block)
    assert not vector_max.search(text)      # the guard can fail: without the pass, none


def test_running_max_stored_as_it_is_gets_one_flush_and_vectorizes() -> None:
    """A running max stored straight after the loop (`out[row] = m`, the common row-max
    kernel): a `cvt.ftz.f32.f32` in front of the store gives it the flushed value, and the
    loop's max ops leave their flushes to it, so the loop stays a vector max reduction
    under -ftz=true (without the flush: scalar, 580 vs 26-30 ms on 2^16 rows x 784)."""
    src = r'''
extern "C" __global__ void row_max(const float *x, float *out, int cols) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    const float *row = x + (size_t)r * cols;
    float m = -3.402823466e38f;
    for (int c = 0; c < cols; c++) m = fmaxf(m, row[c]);
    out[r] = m;
}'''
    block = (BLOCK, 1, 1)
    text = _optimized_llvm(src, "row_max", ("-ftz=true",), PipelineOptions(), block)
    assert re.search(r"@llvm\.maximum\.v\d+f32", text)
    off = PipelineOptions(disabled=frozenset({"flush-min-max-at-uses"}))
    text = _optimized_llvm(src, "row_max", ("-ftz=true",), off, block)
    assert not re.search(r"@llvm\.maximum\.v\d+f32", text)
    # subnormal, signed-zero and NaN rows: the GPU's flushed max, compiled and interpreted
    x = _inputs()
    want = _expected(x, np.float32(1.0))["stored_max"]
    ptx = compile_to_ptx(src, filename="k.cu", options=("-ftz=true",)).ptx
    fn = cpuify.RawModule(ptx=ptx).get_function("row_max")
    for _ in range(2):
        out = np.full(ROWS, 7, np.float32)
        fn((ROWS // BLOCK,), (BLOCK,), (x, out, np.int32(COLS)))
        np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    module = parse_ptx(ptx)
    entry = next(e for e in module.entries if e.name == "row_max")
    lifted, _ = lift_and_optimize(module, entry, PipelineOptions(), block)
    interp = InterpModule(ptx)
    interp.use_ir("row_max", lifted.op)
    out = np.full(ROWS, 7, np.float32)
    interp.launch("row_max", (ROWS // BLOCK,), (BLOCK,), [x, out, np.int32(COLS)])
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
