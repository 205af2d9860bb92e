"""min-cut-fission (transforms/barriers.py, analysis/sync_points.py _min_cut): across a
barrier, keep the least bytes per thread from which everything used after it can be
recomputed (the Polygeist paper's Fig. 6: a load and three values computed from it cross
the barrier; keeping the load alone is enough)."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.analysis.sync_points import kept_bytes, plan_sync_points
from cpuify.analysis.uniformity import uniform_values
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.structure import block_body
from cpuify.transforms.pass_manager import PipelineOptions

SOURCE = r'''
extern "C" __global__ void fig6(const float *x, float *y) {
    __shared__ float s[256];
    int t = threadIdx.x;
    float a = x[t];
    float p = a * 2.0f, q = a + 1.0f, r = a - 3.0f;
    s[t] = a;
    __syncthreads();
    y[t] = p * s[255 - t] + q * r;
}
// two loaded values each used after the barrier: nothing cheaper to keep than them
extern "C" __global__ void two_loads(const float *x, const float *z, float *y) {
    __shared__ float s[256];
    int t = threadIdx.x;
    float a = x[t], b = z[t];
    s[t] = a + b;
    __syncthreads();
    y[t] = a * s[255 - t] - b;
}
// the values cross two barriers; the one they come from is gone by the second
extern "C" __global__ void two_barriers(const float *x, float *y) {
    __shared__ float s[256];
    int t = threadIdx.x;
    float a = x[t];
    float p = a * a, q = a + 0.5f;
    s[t] = a;
    __syncthreads();
    float u = s[255 - t];
    __syncthreads();
    s[t] = u * 3.0f;
    __syncthreads();
    y[t] = p * s[(t + 1) & 255] + q;
}
'''


@pytest.fixture(scope="module")
def module():  # type: ignore[no-untyped-def]
    return parse_ptx(compile_to_ptx(SOURCE, filename="mc.cu").ptx)


def _bytes(module, name: str, min_cut: bool) -> int:  # type: ignore[no-untyped-def]
    lifted, _ = lift_and_optimize(module, module.functions[name], PipelineOptions())
    region = block_body(lifted.op)
    return kept_bytes(plan_sync_points(region, set(), min_cut=min_cut), uniform_values(region))


def test_fig6_keeps_the_load_only(module) -> None:  # type: ignore[no-untyped-def]
    assert _bytes(module, "fig6", False) == 12 and _bytes(module, "fig6", True) == 4
    lifted, result = lift_and_optimize(module, module.functions["fig6"], PipelineOptions())
    assert result.counts["min-cut-fission"] == 8
    assert lifted.op.attributes["fission"] == "min-cut"


def test_no_cheaper_cut(module) -> None:  # type: ignore[no-untyped-def]
    assert _bytes(module, "two_loads", True) == _bytes(module, "two_loads", False) == 8


def test_values_not_available_at_a_later_barrier(module) -> None:  # type: ignore[no-untyped-def]
    """At the third barrier `a` is no longer kept (p and q are): recomputing p and q from a
    there would need a value the thread no longer has, so they stay."""
    with_cut = _bytes(module, "two_barriers", True)
    without = _bytes(module, "two_barriers", False)
    assert with_cut < without


@pytest.mark.parametrize("name", ["fig6", "two_loads", "two_barriers"])
def test_results_with_and_without(name: str) -> None:
    rng = np.random.default_rng(4)
    x, z = rng.random(256, dtype=np.float32), rng.random(256, dtype=np.float32)
    outs = []
    for opts in ((), ("--disable-pass=min-cut-fission",)):
        k = cpuify.RawModule(code=SOURCE, options=opts).get_function(name)
        for _ in range(2):              # generic, then specialized for 256 threads
            y = np.zeros(256, np.float32)
            args = (x, z, y) if name == "two_loads" else (x, y)
            k((1,), (256,), args)
            outs.append(y)
    for y in outs[1:]:
        np.testing.assert_array_equal(y, outs[0])
    if name == "fig6":
        a = x
        np.testing.assert_allclose(outs[0], (a * 2) * a[::-1] + (a + 1) * (a - 3), rtol=1e-5)
