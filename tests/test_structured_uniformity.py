"""Divergence analysis on structured control flow (analysis/structured_uniformity.py): the
same values uniform as the CFG analysis (analysis/uniformity.py) finds on the CFG the
structure was raised from, and the rules one by one on a kernel that has each (a uniform
loop, a loop with a thread-dependent exit, a uniform loop inside a divergent `if`, a
multi-exit while)."""

from __future__ import annotations

import pytest

from cpuify.analysis.structured_uniformity import structured_uniform_values
from cpuify.analysis.uniformity import uniform_values
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.core import Operation
from cpuify.ir.dialects import STRUCTURED_OPS
from cpuify.ir.parser import parse_op
from cpuify.ir.structure import block_body
from cpuify.lifting import lift_kernel
from cpuify.transforms.structured_cf import raise_structured_control_flow
from test_structured_cf import BODIES, kernel

SOURCE = r'''
extern "C" __global__ void rules(int *y, int n, int m) {
    int t = threadIdx.x;
    int uni = 1;
    #pragma unroll 1
    for (int i = 0; i < m; i++) uni = uni * 3 + i;          // uniform: bounds and values
    int own = 1;
    #pragma unroll 1
    for (int i = 0; i < t; i++) own = own * 5 + i;          // exit on threadIdx.x
    int arm = 1;
    if (t < n) {
        #pragma unroll 1
        for (int i = 0; i < m; i++) arm = arm * 7 + i;      // uniform inside a divergent if
    }
    y[t] = uni + own + arm;
}
extern "C" __global__ void breaks(int *y, const int *x, int n) {
    int t = threadIdx.x, k = 0, s = 0;
    #pragma unroll 1
    for (; k < n; k++) {
        if (x[k] == t) break;                                // a thread-dependent break
        s = s * 3 + k;
    }
    y[t] = s + k;
}
extern "C" __global__ void uniform_break(int *y, int n, int m) {
    int t = threadIdx.x, k = 0, s = 0;
    #pragma unroll 1
    for (; k < n; k++) {
        if (k * k > m) break;                                // a uniform break
        s = s * 3 + k;
    }
    y[t] = s + k;
}
'''


@pytest.fixture(scope="module")
def module():  # type: ignore[no-untyped-def]
    return parse_ptx(compile_to_ptx(SOURCE).ptx)


def _both(op: Operation) -> tuple[dict[Operation, bool], set, Operation]:  # type: ignore[type-arg]
    """(op -> its first result uniform on the CFG, the structured analysis' set, op)."""
    body = block_body(op)
    on_cfg = uniform_values(body)
    ops = {o: o.results[0] in on_cfg for b in body.blocks for o in b.ops if o.results}
    raise_structured_control_flow(body)
    assert any(o.name in STRUCTURED_OPS for o in op.walk())
    return ops, structured_uniform_values(body), op


def _same_as_cfg(op: Operation) -> None:
    ops, uniform, raised = _both(op)
    present = set(raised.walk())
    for o, was in ops.items():
        if o in present and o.name not in STRUCTURED_OPS:
            assert (o.results[0] in uniform) == was, (o.name, o.attributes.get("line"))


@pytest.mark.parametrize("name", sorted(set(BODIES) - {"irreducible", "exit_in_arm"}))
def test_same_as_cfg_on_hand_written_bodies(name: str) -> None:
    _same_as_cfg(parse_op(kernel(BODIES[name])))


@pytest.mark.parametrize("name", ["rules", "breaks", "uniform_break"])
def test_same_as_cfg_on_kernels(module, name: str) -> None:  # type: ignore[no-untyped-def]
    _same_as_cfg(lift_kernel(module, module.functions[name]).op)


def _loops(op: Operation) -> list[Operation]:
    return [o for o in op.walk() if o.name in ("upir.for", "upir.while")]


def test_the_rules(module) -> None:  # type: ignore[no-untyped-def]
    op = lift_kernel(module, module.functions["rules"]).op
    raise_structured_control_flow(block_body(op))
    uniform = structured_uniform_values(block_body(op))
    loops = _loops(op)
    assert len(loops) == 3, [o.name for o in loops]
    uni, own, arm = loops
    # the uniform loop: its carried values and results
    assert all(a in uniform for a in uni.regions[0].entry.args) and all(r in uniform for r in uni.results)
    # threads leave the loop on threadIdx.x at different iterations: nothing it carries is
    # the same in all of them, nor what it hands on
    assert not any(a in uniform for a in own.regions[0].entry.args)
    assert not any(r in uniform for r in own.results)
    # inside `if (t < n)` the loop runs alike in the threads that run it; the `if`'s result
    # (the loop's value in some threads, 1 in the others) is not uniform
    assert all(a in uniform for a in arm.regions[0].entry.args)
    guard = arm.parent.parent.parent
    assert guard.name == "upir.if" and guard.operands[0] not in uniform
    assert guard.results and not any(r in uniform for r in guard.results)


@pytest.mark.parametrize("name, carried_uniform", [("breaks", False), ("uniform_break", True)])
def test_a_break_divides_the_loop_only_on_a_thread_dependent_test(module, name, carried_uniform
                                                                  ) -> None:  # type: ignore[no-untyped-def]
    op = lift_kernel(module, module.functions[name]).op
    raise_structured_control_flow(block_body(op))
    uniform = structured_uniform_values(block_body(op))
    (loop,) = _loops(op)
    args = loop.regions[0].entry.args
    assert args and all((a in uniform) == carried_uniform for a in args)
