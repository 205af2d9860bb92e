"""Values kept across sync points: which share a slot (coalescing of a loop-carried value
with its back-edge value), and that sharing never mixes two values live at once."""

from __future__ import annotations

import numpy as np

import cpuify
from cpuify.codegen.llvm_gen import KernelCodegen, ModuleCodegen
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import interpret_kernel
from cpuify.compiler import lift_optimized

SRC = r'''
// the running sum crosses both barriers of each iteration: the sum entering an iteration and
// the sum after it are never kept at the same barrier, so they share a slot
extern "C" __global__ void tiled_dot(const float *a, const float *b, float *out, int tiles) {
    __shared__ float as[64], bs[64];
    float sum = 0;
#pragma unroll 1
    for (int k = 0; k < tiles; k++) {
        as[threadIdx.x] = a[k * 64 + threadIdx.x];
        bs[threadIdx.x] = b[k * 64 + threadIdx.x];
        __syncthreads();
        sum += as[threadIdx.x] * bs[63 - threadIdx.x];
        __syncthreads();
    }
    out[threadIdx.x] = sum;
}
// x (entering the iteration) and y (its next value) are both kept at the first barrier:
// separate slots
extern "C" __global__ void both_live(const float *in, float *out, int iters) {
    __shared__ float s[64];
    int t = threadIdx.x;
    float x = in[t], acc = 0;
    for (int i = 0; i < iters; i++) {
        float y = x * 0.5f + 1.0f;
        s[t] = y;
        __syncthreads();
        acc += x * s[(t + 1) % 64];
        __syncthreads();
        x = y;
    }
    out[t] = acc + x;
}
'''


def _codegen(kernel: str) -> KernelCodegen:
    module = parse_ptx(compile_to_ptx(SRC).ptx)
    return KernelCodegen(ModuleCodegen(module), lift_optimized(module, module.functions[kernel], (64, 1, 1)),
                         (64, 1, 1))


def _float_slots(kc: KernelCodegen) -> dict:
    kept = {v for sp in kc.syncs for v in sp.live if v.type == "f32"}
    return {v: kc.slot_offset[v] for v in kept}


def test_loop_carried_sum_shares_one_slot():
    slots = _float_slots(_codegen("tiled_dot"))
    assert len(slots) == 2 and len(set(slots.values())) == 1


def test_values_live_at_one_barrier_get_separate_slots():
    kc = _codegen("both_live")
    for sp in kc.syncs:
        offsets = [kc.slot_offset[v] for v in sp.live]
        assert len(offsets) == len(set(offsets))


def test_shared_and_separate_slots_compute_the_right_values():
    mod = cpuify.RawModule(code=SRC)
    rng = np.random.default_rng(1)
    a, b = rng.random(5 * 64, dtype=np.float32), rng.random(5 * 64, dtype=np.float32)
    ref = (a.reshape(5, 64) * b.reshape(5, 64)[:, ::-1]).sum(0)
    x0 = rng.random(64, dtype=np.float32)
    x, acc = x0.astype(np.float64), np.zeros(64)
    for _ in range(7):
        y = x * 0.5 + 1.0
        acc += x * np.roll(y, -1)
        x = y
    for _ in range(3):                  # generic, then specialized code
        out = np.zeros(64, np.float32)
        mod.get_function("tiled_dot")((1,), (64,), (a, b, out, np.int32(5)))
        np.testing.assert_allclose(out, ref, rtol=1e-5)
        out2 = np.zeros(64, np.float32)
        mod.get_function("both_live")((1,), (64,), (x0, out2, np.int32(7)))
        np.testing.assert_allclose(out2, acc + x, rtol=1e-5)
    small = np.zeros(64, np.float32)
    interpret_kernel(compile_to_ptx(SRC).ptx, "both_live", (1,), (64,), (x0, small, np.int32(7)))
    np.testing.assert_array_equal(out2, small)
