"""thread-index-ranges: the threads an `if` on one thread index selects, recorded on its
branch (IR level), and the thread loops code generation narrows from those marks only."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.analysis.thread_index import THREAD_INDEX_IF
from cpuify.codegen.llvm_gen import KernelCodegen, ModuleCodegen
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.structured import lower_structured_control_flow
from cpuify.transforms.pass_manager import PipelineOptions, default_pipeline

SRC = r'''
extern "C" __global__ void rows(const float *in, float *out, int n) {
    __shared__ float node[16];
    __shared__ float m[16][16];
    int tx = threadIdx.x, ty = threadIdx.y;
    if (tx == 0) node[ty] = in[blockIdx.x * 16 + ty];
    __syncthreads();
    m[ty][tx] = in[(blockIdx.x * 16 + ty) * 16 + tx] * node[ty];
    __syncthreads();
    if (ty % 4 == 0) m[ty][tx] += m[ty + 1][tx] + m[ty + 2][tx] + m[ty + 3][tx];
    __syncthreads();
    if (tx == 0) out[blockIdx.x * 16 + ty] = m[ty & 12][ty];
}
// conditions that are no function of one thread index and constants, and one whose
// threads are no arithmetic progression
extern "C" __global__ void others(const float *in, float *out, int n) {
    __shared__ float s[64];
    int tx = threadIdx.x, ty = threadIdx.y;
    s[ty * 8 + tx] = in[blockIdx.x * 64 + ty * 8 + tx];
    __syncthreads();
    if (tx < n) out[blockIdx.x * 64 + ty * 8 + tx] += s[ty * 8 + tx];          // a parameter
    if (blockIdx.x == 1) out[blockIdx.x * 64 + tx] += 1.0f;                    // the block
    if (tx == ty) out[blockIdx.x * 64 + tx] += s[tx * 9];                      // two indices
    if ((0x23u >> tx) & 1u) out[blockIdx.x * 64 + ty] += s[ty];      // tx 0, 1, 5: no progression
}
'''


@pytest.fixture(scope="module")
def module():
    return parse_ptx(compile_to_ptx(SRC).ptx)


def _branches(op):
    return [o for o in op.walk() if o.name == "cf.cond_br"]


def _marks(module, name, passes, dims):
    lifted, result = lift_and_optimize(module, module.functions[name],
                                       PipelineOptions(passes=passes), dims)
    lower_structured_control_flow(lifted.op)
    return lifted, result, [(b.attributes.get(THREAD_INDEX_IF), b.attributes.get("threads_true"),
                             b.attributes.get("threads_false"))
                            for b in _branches(lifted.op) if THREAD_INDEX_IF in b.attributes]


def test_marks_the_threads_of_each_way(module):
    _, result, marks = _marks(module, "rows", ("thread-index-ranges",), (16, 16, 1))
    assert result.counts["thread-index-ranges"] == 3
    # (nvcc may branch on the negated condition: the ways are compared as a set)
    ways = [(dim, {str(t), str(f)}) for dim, t, f in marks]
    assert ways.count(([0, 16], {"[0, 1, 1]", "[1, 16, 1]"})) == 2          # both if (tx == 0)
    assert ([1, 16], {"[0, 13, 4]", "None"}) in ways     # ty % 4 == 0; the rest no progression


def test_marks_survive_structured_control_flow(module):
    # raise-structured-cf runs last; code generation lowers it back to the marked branches
    _, _, marks = _marks(module, "rows", ("thread-index-ranges", "raise-structured-cf"), (16, 16, 1))
    assert len(marks) == 3 and all(dim in ([0, 16], [1, 16]) for dim, _, _ in marks)


def test_must_not_fire(module):
    _, result, marks = _marks(module, "others", ("thread-index-ranges",), (8, 8, 1))
    # tx < n, blockIdx.x == 1, tx == ty: unmarked; tx in {0, 1, 5}: marked, but neither
    # its threads nor the others ({2, 3, 4, 6, 7}) are a progression
    assert marks == [([0, 8], None, None)]
    assert result.counts["thread-index-ranges"] == 1
    # code for no known block shape: nothing
    _, result, marks = _marks(module, "rows", ("thread-index-ranges",), None)
    assert marks == [] and result.counts["thread-index-ranges"] == 0


def test_code_generation_narrows_only_marked_branches(module):
    def plan(passes):
        lifted, _ = lift_and_optimize(module, module.functions["rows"], PipelineOptions(passes=passes),
                                      (16, 16, 1))
        return KernelCodegen(ModuleCodegen(module), lifted, (16, 16, 1))
    assert "thread-index-ranges" in default_pipeline()
    narrowed = plan(("thread-index-ranges",))
    assert set(narrowed.thread_range.values()) == {
        ((0, 1, 1), (0, 16, 1), (0, 1, 1)), ((0, 16, 1), (0, 13, 4), (0, 1, 1))}
    assert [r.ranges for d in narrowed.deferred.values() for r in d] == []
    plain = plan(())                    # no passes: every interval runs all 256 threads
    assert plain.thread_range == {} and plain.deferred == {}


@pytest.mark.parametrize("options", [(), ("--passes=",), ("--passes=thread-index-ranges",)])
def test_results_match_numpy(options):
    mod = cpuify.RawModule(code=SRC, options=options)
    nb = 5
    x = np.random.default_rng(3).random(nb * 256, dtype=np.float32)
    m = x.reshape(nb, 16, 16) * x[:nb * 16].reshape(nb, 16, 1)
    sums = m.reshape(nb, 4, 4, 16).sum(axis=2)               # rows 0, 4, 8, 12 after the step
    ref = np.array([[sums[b, ty // 4, ty] for ty in range(16)] for b in range(nb)]).ravel()
    for _ in range(3):                  # generic, then specialized code
        out = np.zeros(nb * 16, np.float32)
        mod.get_function("rows")((nb,), (16, 16), (x, out, np.int32(0)))
        np.testing.assert_allclose(out, ref, rtol=1e-5)
