"""`thread-index-outermost` (transforms/canonicalize.py): 32-bit index sums `(A + tx) + B`
become `(A + B) + tx` when A and B do not vary with threadIdx.x, so that the vectorized
thread loop's index keeps its no-wrap flag (LLVM reassociates it itself but drops the flag,
and then guards the vector loop with a run-time wrap check and a scalar copy).

Checked on the printed IR (positive: the LU tile update's two tile indices; must not fire:
an int value that is stored rather than used as an index, sign-extended or not, sums whose terms all vary or none
varies), on the LLVM code (the wrap checks go), and on results against NumPy and the
reference interpreter with the pass on and off."""

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
#define T 16
extern "C" __global__ void tile_update(float *a, int n, int offset) {
    __shared__ float left[T][T];
    __shared__ float top[T][T];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = offset + T + blockIdx.y * T;
    const int col0 = offset + T + blockIdx.x * T;
    left[ty][tx] = a[(row0 + ty) * n + offset + tx];
    top[ty][tx] = a[(offset + ty) * n + col0 + tx];
    __syncthreads();
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < T; k++)
        sum += left[ty][k] * top[k][tx];
    a[(row0 + ty) * n + col0 + tx] -= sum;
}
// must not fire: the sums are values stored, not indices (no nsw), or nothing varies
extern "C" __global__ void not_indices(int *out, int base, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = (base + (int)threadIdx.x) + n;          // stored: may wrap in the source
    out[i] = v;
    out[i + 64] = (base + n) + blockIdx.x;          // uniform: nothing to move
}
// must not fire: a sum sign-extended and stored is a value too, not an index
extern "C" __global__ void extended_value(long long *out, int base, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = (long long)((base + (int)threadIdx.x) + n);
}
'''


@pytest.fixture(scope="module")
def ptx() -> str:
    return compile_to_ptx(SOURCE, filename="tiles.cu").ptx


def _optimized(ptx: str, name: str, options: PipelineOptions, block: tuple[int, int, int]):  # type: ignore[no-untyped-def]
    module = parse_ptx(ptx)
    entry = next(e for e in module.entries if e.name == name)
    return lift_and_optimize(module, entry, options, block)


def test_tile_indices_reassociated(ptx: str) -> None:
    # (tiles-in-place off: its second version of the block reads the tiles' global data
    # where it lies, with index arithmetic of its own)
    lifted, result = _optimized(ptx, "tile_update",
                                PipelineOptions(disabled=frozenset({"tiles-in-place"})), (16, 16, 1))
    assert result.counts["thread-index-outermost"] >= 2
    text = print_op(lifted.op)
    # every 64-bit global index is now (terms the same along threadIdx.x) + (a term that is
    # not), the latter added last
    from cpuify.analysis.uniformity import uniform_values
    from cpuify.ir.structure import block_body
    from cpuify.transforms.canonicalize import _same_along_x
    region = block_body(lifted.op)
    along_x = _same_along_x(region, uniform_values(region))
    widened = [op for b in region.blocks for op in b.ops
               if op.name == "ptx.mul" and "wide" in op.attributes.get("mods", [])]
    assert len(widened) == 3
    for w in widened:
        index = w.operands[0].op
        assert index.name == "ptx.add"
        first, last = index.operands
        assert first in along_x and last not in along_x
    off, _ = _optimized(ptx, "tile_update",
                        PipelineOptions(disabled=frozenset({"thread-index-outermost", "tiles-in-place"})),
                        (16, 16, 1))
    assert "thread-index-outermost" not in _.counts
    assert print_op(off.op) != text


def test_does_not_fire_on_values_or_uniform_sums(ptx: str) -> None:
    _, result = _optimized(ptx, "not_indices", PipelineOptions(), (64, 1, 1))
    assert result.counts["thread-index-outermost"] == 0


def test_does_not_fire_on_a_sign_extended_value(ptx: str) -> None:
    """The fuzzer's fz_2617_719 class: `(long long)(int sum)` stored may wrap in the source
    (unsigned arithmetic cast to int), so it gets no nsw and is not reassociated; the
    values wrap as 32-bit ints (hand computation), with the pass on and off."""
    _, result = _optimized(ptx, "extended_value", PipelineOptions(), (64, 1, 1))
    assert result.counts["thread-index-outermost"] == 0
    base, n = 2**31 - 40, 7                          # threads 33.. pass INT_MAX
    i = np.arange(128)
    want = ((base + i % 64 + n + 2**31) % 2**32 - 2**31).astype(np.int64)
    assert (want < 0).sum() == 2 * 31
    for options in ((), ("--disable-pass=thread-index-outermost",)):
        out = np.zeros(128, np.int64)
        cpuify.RawModule(code=SOURCE, options=options).get_function("extended_value")(
            (2,), (64,), (out, np.int32(base), np.int32(n)))
        np.testing.assert_array_equal(out, want, err_msg=str(options))


def _wrap_checks(ptx: str, options: PipelineOptions) -> int:
    from cpuify.codegen import jit
    from cpuify.codegen.llvm_gen import ModuleCodegen
    module = parse_ptx(ptx)
    entry = next(e for e in module.entries if e.name == "tile_update")
    lifted, _ = lift_and_optimize(module, entry, options, (16, 16, 1))
    gen = ModuleCodegen(module, *jit.triple_and_layout())
    gen.add_kernel(lifted, (16, 16, 1))
    text = str(jit.optimize(gen.llvm_text()))
    # the vectorizer's guard that a 32-bit index + 15 lanes does not pass INT_MAX
    return len(re.findall(r"icmp sgt i32 %\S+, 2147483632|vector\.scevcheck:", text))


def test_wrap_checks_go(ptx: str) -> None:
    on = _wrap_checks(ptx, PipelineOptions())
    off = _wrap_checks(ptx, PipelineOptions(disabled=frozenset({"thread-index-outermost"})))
    assert off > on


def _reference(a: np.ndarray, n: int, offset: int) -> np.ndarray:
    out = a.astype(np.float64)
    lo = offset + 16
    out[lo:, lo:] -= a[lo:, offset:lo].astype(np.float64) @ a[offset:lo, lo:].astype(np.float64)
    return out


@pytest.mark.parametrize("options", [(), ("--disable-pass=thread-index-outermost",)])
def test_tile_update_results(options: tuple[str, ...]) -> None:
    n, offset = 64, 16
    rng = np.random.default_rng(3)
    a0 = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    fn = cpuify.RawModule(code=SOURCE, options=options).get_function("tile_update")
    blocks = (n - offset) // 16 - 1
    for _ in range(2):              # generic code, then the code specialized for the block
        a = a0.copy()
        fn((blocks, blocks), (16, 16), (a, np.int32(n), np.int32(offset)))
        np.testing.assert_allclose(a, _reference(a0, n, offset), rtol=1e-5, atol=1e-5)


def test_interpreter_agrees_with_compiled(ptx: str) -> None:
    n, offset = 64, 16
    rng = np.random.default_rng(4)
    a0 = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    blocks = (n - offset) // 16 - 1
    lifted, _ = _optimized(ptx, "tile_update", PipelineOptions(), (16, 16, 1))
    interp = InterpModule(ptx)
    interp.use_ir("tile_update", lifted.op)
    a = a0.copy()
    interp.launch("tile_update", (blocks, blocks), (16, 16), [a, np.int32(n), np.int32(offset)])
    b = a0.copy()
    cpuify.RawModule(code=SOURCE).get_function("tile_update")(
        (blocks, blocks), (16, 16), (b, np.int32(n), np.int32(offset)))
    np.testing.assert_array_equal(a, b)
    out = a0.copy()
    interp = InterpModule(ptx)
    interp.launch("tile_update", (blocks, blocks), (16, 16), [out, np.int32(n), np.int32(offset)])
    np.testing.assert_array_equal(a, out)       # the same as the IR as lifted
