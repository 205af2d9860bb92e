"""Which `__shared__` variable each shared-memory access goes through (analysis.py
`shared_variables`), the alias scopes code generation derives from it, and results of
kernels whose accesses it separates (against NumPy)."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.analysis.pointers import shared_variables
from cpuify.ir.structure import block_body as _block_body
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.lifting import lift_kernel

SRC = r'''
// clamped neighbours of one array, result in another (Rodinia pathfinder's accesses)
extern "C" __global__ void smooth(const int *in, int *out, int n) {
    __shared__ int src[256];
    __shared__ int dst[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    src[t] = in[min(i, n - 1)];
    __syncthreads();
    int w = max(t - 1, 0), e = min(t + 1, (int)blockDim.x - 1);
    dst[t] = min(min(src[w], src[t]), src[e]) + 1;
    __syncthreads();
    if (i < n) out[i] = dst[(t + 1) % blockDim.x];
}
// one pointer that points into either array: belongs to neither
extern "C" __global__ void either(int *out, int pick) {
    __shared__ int a[64];
    __shared__ int b[64];
    int t = threadIdx.x;
    a[t] = t;
    b[t] = 100 + t;
    __syncthreads();
    int *p = pick ? a : b;
    out[t] = p[63 - t];
}
'''


@pytest.fixture(scope="module")
def ptx():
    return compile_to_ptx(SRC).ptx


def _accesses(ptx, name):
    module = parse_ptx(ptx)
    region = _block_body(lift_kernel(module, module.functions[name]).op)
    variables = shared_variables(region)
    out = []
    for blk in region.blocks:
        for op in blk.ops:
            if op.name in ("ptx.ld", "ptx.st") and "shared" in op.attributes.get("mods", ()):
                out.append((op.name, variables.get(op.operands[0])))
    return out


def test_each_access_has_its_variable(ptx):
    acc = _accesses(ptx, "smooth")
    assert len(acc) == 6
    names = {v for _, v in acc}
    assert None not in names and len(names) == 2
    stores = [v for k, v in acc if k == "ptx.st"]
    assert len(set(stores)) == 2          # src[t] and dst[t]


def test_pointer_into_either_array_has_none(ptx):
    acc = _accesses(ptx, "either")
    loads = [v for k, v in acc if k == "ptx.ld"]
    assert loads == [None]


def test_alias_scopes_in_llvm(ptx):
    from cpuify.codegen.llvm_gen import ModuleCodegen
    module = parse_ptx(ptx)
    gen = ModuleCodegen(module)
    gen.add_kernel(lift_kernel(module, module.functions["smooth"]))
    text = str(gen.module)
    assert "cpuify.shared.smooth" in text and "!alias.scope" in text and "!noalias" in text


@pytest.mark.parametrize("n", [1, 255, 1000])
def test_smooth_matches_numpy(ptx, n):
    rng = np.random.default_rng(n)
    x = rng.integers(0, 1000, n, dtype=np.int32)
    f = cpuify.RawModule(ptx=ptx).get_function("smooth")
    blocks = (n + 255) // 256
    padded = np.concatenate([x, np.full(blocks * 256 - n, x[-1], np.int32)])
    ref = np.empty(blocks * 256, np.int32)
    for b in range(blocks):
        s = padded[b * 256:(b + 1) * 256]
        d = np.minimum(np.minimum(np.concatenate([s[:1], s[:-1]]), s),
                       np.concatenate([s[1:], s[-1:]])) + 1
        ref[b * 256:(b + 1) * 256] = np.roll(d, -1)
    for _ in range(3):                   # generic, then specialized code
        out = np.zeros(n, np.int32)
        f((blocks,), (256,), (x, out, np.int32(n)))
        np.testing.assert_array_equal(out, ref[:n])


@pytest.mark.parametrize("pick", [0, 1])
def test_either(ptx, pick):
    out = np.zeros(64, np.int32)
    cpuify.RawModule(ptx=ptx).get_function("either")((1,), (64,), (out, np.int32(pick)))
    t = 63 - np.arange(64)
    np.testing.assert_array_equal(out, t if pick else 100 + t)
