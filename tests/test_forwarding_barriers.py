"""store-forwarding before barrier-elimination, and barrier-elimination's rule on the two
barrier intervals of a barrier (`adjacent_intervals`): the Polygeist paper's Fig. 9 loses
the shared-memory round trip of `weights[ty][tx]` and the barrier it crossed (IV-B), and the
barriers that order accesses of different threads stay (neighbours at +-1, pointers that may
alias, a value forwarded across a barrier whose store other threads read)."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.codegen.llvm_gen import KernelCodegen, ModuleCodegen
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.structured import lower_structured_control_flow
from cpuify.transforms.pass_manager import PipelineOptions

from test_barrier_elimination import SOURCE as FIG9_SOURCE

SOURCE = r'''
// neighbours: each thread reads its own element and the next one's, then overwrites its own
extern "C" __global__ void shift(const float *x, float *y) {
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = x[blockIdx.x * 64 + t];
    __syncthreads();
    float v = s[t] + s[(t + 1) & 63];
    __syncthreads();
    s[t] = v;
    __syncthreads();
    y[blockIdx.x * 64 + t] = s[(t + 63) & 63];
}
// a barrier between a read through b and a write through a (they may be one array)
extern "C" __global__ void alias_pair(float *a, const float *b, float *y) {
    int t = threadIdx.x;
    float v = b[t];
    __syncthreads();
    a[(t + 1) & 63] = v + 1.0f;
    y[t] = v;
}
// two barriers: the first orders nothing between its intervals (a write of s, a write of
// y), the second orders the write of s before the neighbours' reads
extern "C" __global__ void two_barriers(const float *__restrict__ x, float *y, float *out) {
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = x[t];
    __syncthreads();
    y[t] = 2.0f * x[t];
    __syncthreads();
    out[t] = s[(t + 1) & 63];
}
'''


@pytest.fixture(scope="module")
def fig9_module():
    return parse_ptx(compile_to_ptx(FIG9_SOURCE, filename="barriers.cu").ptx)


@pytest.fixture(scope="module")
def module():
    return parse_ptx(compile_to_ptx(SOURCE).ptx)


def _run(module, name, dims, options=(), noalias=()):  # type: ignore[no-untyped-def]
    pipeline = PipelineOptions.parse(list(options))[0]
    lifted, result = lift_and_optimize(module, module.functions[name], pipeline, dims, noalias)
    lower_structured_control_flow(lifted.op)
    barriers = sum(o.name == "upir.barrier" for o in lifted.op.walk())
    return lifted, result.counts, barriers


def test_fig9_forwarding_removes_the_round_trip_and_its_barrier(fig9_module):
    lifted, counts, barriers = _run(fig9_module, "fig9", (16, 16, 1))
    # one load forwarded (weights[ty][tx] after the barrier), one dead store (the copy of
    # hidden[index] into weights), and the barrier between them
    assert counts["store-forwarding"] == 2
    assert counts["barrier-elimination"] == 1 and counts["barrier-motion"] == 0
    assert barriers == 7
    # nothing is kept per thread across a barrier: hidden[index] * node[ty] in one interval
    plan = KernelCodegen(ModuleCodegen(fig9_module), lifted, (16, 16, 1))
    assert all(not sp.live for sp in plan.syncs) and plan.slot_bytes == 0
    # with `hidden` apart from the other arrays (the launch-time variant): 6
    assert _run(fig9_module, "fig9", (16, 16, 1), noalias=(8,))[2] == 6
    # the paper's rule keeps it: the load of hidden[index] may read an element another
    # thread writes at the kernel's end (hid unknown)
    _, counts, barriers = _run(fig9_module, "fig9", (16, 16, 1),
                               ["--disable-pass=barrier-motion", "--passes=store-forwarding,"
                                "barrier-elimination{adjacent_intervals=false}"])
    assert counts["barrier-elimination"] == 0 and barriers == 8


def test_fig9_forwards_no_value_across_a_barrier_whose_store_stays(fig9_module):
    # the tree's first step reads weights[ty][tx], stored before the barrier and read by
    # the other rows' threads too: forwarded, the value would be kept in a slot per thread
    def shared_loads(options):  # type: ignore[no-untyped-def]
        lifted, counts, _ = _run(fig9_module, "fig9", (16, 16, 1), options)
        return counts, sum(o.name == "ptx.ld" and "shared" in o.attributes["mods"]
                           for o in lifted.op.walk())
    counts, forwarded = shared_loads(["--passes=store-forwarding"])
    assert counts["store-forwarding"] == 2
    assert shared_loads(["--passes="])[1] - forwarded == 1      # only the multiplication's


def test_neighbours_keep_their_barriers_and_stores(module):
    _, counts, barriers = _run(module, "shift", (64, 1, 1))
    assert counts["store-forwarding"] == 0 and counts["barrier-elimination"] == 0
    assert barriers == 3


def test_aliasing_pointers_keep_the_barrier(module):
    _, counts, barriers = _run(module, "alias_pair", (64, 1, 1))
    assert barriers == 1 and counts["barrier-elimination"] == 0
    # ... which goes when a and y are apart from the other arrays (the launch-time variant)
    assert _run(module, "alias_pair", (64, 1, 1), noalias=(0, 16))[2] == 0


def test_removals_compose(module):
    _, counts, barriers = _run(module, "two_barriers", (64, 1, 1))
    assert counts["barrier-elimination"] == 1 and barriers == 1


@pytest.mark.parametrize("options", [(), ("--passes=",)])
def test_results_match_numpy(options):
    mod = cpuify.RawModule(code=SOURCE, options=options)
    rng = np.random.default_rng(4)
    x = rng.random(3 * 64, dtype=np.float32)
    for _ in range(3):                  # generic, then specialized code
        y = np.zeros_like(x)
        mod.get_function("shift")((3,), (64,), (x, y))
        v = x.reshape(3, 64) + np.roll(x.reshape(3, 64), -1, axis=1)
        np.testing.assert_array_equal(y.reshape(3, 64), np.roll(v, 1, axis=1))
        a, y2 = np.zeros(64, np.float32), np.zeros(64, np.float32)
        b = x[:64].copy()
        mod.get_function("alias_pair")((1,), (64,), (a, b, y2))
        np.testing.assert_array_equal(y2, b)
        np.testing.assert_array_equal(a, np.roll(b + 1.0, 1))
        # a and b the same array: every thread reads b[t] before any writes a[t + 1]
        ab = x[:64].copy()
        mod.get_function("alias_pair")((1,), (64,), (ab, ab, y2))
        np.testing.assert_array_equal(y2, x[:64])
        np.testing.assert_array_equal(ab, np.roll(x[:64] + 1.0, 1))
        yy, out = np.zeros(64, np.float32), np.zeros(64, np.float32)
        mod.get_function("two_barriers")((1,), (64,), (x[:64], yy, out))
        np.testing.assert_array_equal(yy, 2.0 * x[:64])
        np.testing.assert_array_equal(out, np.roll(x[:64], -1))
