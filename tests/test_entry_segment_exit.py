"""Blocks that end in their entry segment (BlockFunctionEmitter.unless_first_segment_ends_block):
the block function builds the context the scheduler and later segments read only when the
entry segment did not end the block.  Kernels whose blocks end there for some blocks and go on
through barriers for others, or trap in either part, compute and fail as before (checked
against NumPy); and the in-place LU tile update, whose every block ends in its entry segment,
stores few context fields before that segment (the suite's lu_tile kernel: it stored 12
and cleared two more)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cpuify
from benchmarks.suite.workloads.lu_tile import CUDA_SRC as LU_SRC
from cpuify.codegen import jit
from cpuify.codegen.llvm_gen import ModuleCodegen
from cpuify.compiler import lift_optimized
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx

SRC = r'''
// odd blocks leave in the entry segment, even ones reverse their piece through shared memory
extern "C" __global__ void some_blocks_exit(const float *x, float *y, int n, int trap_early,
                                            int trap_late) {
    __shared__ float s[128];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (blockIdx.x == trap_early && threadIdx.x == 3) __trap();
    if (blockIdx.x % 2) { if (i < n) y[i] = -x[i]; return; }
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (blockIdx.x == trap_late && threadIdx.x == 5) __trap();
    if (i < n) y[i] = s[blockDim.x - 1 - threadIdx.x];
}

'''


@pytest.fixture(scope="module")
def mod():
    return cpuify.RawModule(code=SRC)


def _expected(x, block):
    y = np.empty_like(x)
    for b0 in range(0, x.size, block):
        piece = x[b0:b0 + block]
        if (b0 // block) % 2:
            y[b0:b0 + block] = -piece
        else:
            full = np.zeros(block, np.float32)
            full[:piece.size] = piece
            y[b0:b0 + block] = full[::-1][:piece.size]
    return y


@pytest.mark.parametrize("block", [128, 96])
def test_blocks_ending_in_the_entry_segment_and_the_others(mod, block):
    n = 1000
    x = np.random.default_rng(block).standard_normal(n).astype(np.float32)
    f = mod.get_function("some_blocks_exit")
    for _ in range(2):          # generic code, then the code specialized for the block shape
        y = np.full_like(x, np.nan)
        f(((n + block - 1) // block,), (block,), (x, y, np.int32(n), np.int32(-1), np.int32(-1)))
        np.testing.assert_array_equal(y, _expected(x, block))


@pytest.mark.parametrize("early, late", [(1, -1), (2, -1), (-1, 4)])
def test_a_trap_fails_the_launch(mod, early, late):
    # block 1 traps in its entry segment and leaves there; block 2 traps there and goes on
    # to the barrier; block 4 traps after the barrier
    n = 1000
    x = np.ones(n, np.float32)
    y = np.zeros(n, np.float32)
    f = mod.get_function("some_blocks_exit")
    for _ in range(2):
        with pytest.raises(cpuify.KernelFailure):
            f((8,), (128,), (x, y, np.int32(n), np.int32(early), np.int32(late)))
    f((8,), (128,), (x, y, np.int32(n), np.int32(-1), np.int32(-1)))
    np.testing.assert_array_equal(y, _expected(x, 128))


def test_lu_update_stores_few_context_fields_before_its_entry_segment():
    module = parse_ptx(compile_to_ptx(LU_SRC).ptx)
    gen = ModuleCodegen(module)
    gen.add_kernel(lift_optimized(module, module.functions["lu_trailing_update"], (16, 16, 1)),
                   (16, 16, 1))
    text = str(jit.optimize(gen.llvm_text()))
    block = re.search(r"^define [^\n]*@cpuify_block_lu_trailing_update__16x16x1\(.*?^}", text,
                      re.MULTILINE | re.DOTALL)
    assert block is not None
    before_call = block.group(0).split("@cpuify_seg_lu_trailing_update_0(", 1)[0]
    assert before_call.count(" store ") <= 8, before_call
    assert "llvm.memset" not in before_call


def test_lu_update_matches_numpy():
    n = 64
    a0 = np.random.default_rng(3).uniform(-0.1, 0.1, (n, n)).astype(np.float32)
    a = a0.copy()
    f = cpuify.RawModule(code=LU_SRC).get_function("lu_trailing_update")
    ref = a0.astype(np.float64)
    for o in range(0, n - 16, 16):
        t = (n - o) // 16 - 1
        f((t, t), (16, 16), (a, np.int32(n), np.int32(o)))
        e = o + 16
        ref[e:, e:] -= ref[e:, o:e] @ ref[o:e, e:]
    np.testing.assert_allclose(a, ref, atol=1e-6)
