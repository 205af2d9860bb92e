"""Counted loops of raise-structured-cf: nvcc's guarded do-while as `upir.for`.

IR in/out on hand-written block bodies (test_structured_cf.BODIES: a guarded do-while, the
spellings nvcc gives the guard, and where no for may be made: no guard, a guard that is not
the loop's first test, a bound computed in the loop); the guard's equivalence with the
first test on its own; the verifier's check of a `do_while` for; the raise then lowering
back gives the same CFG (test_structured_cf's round trip covers these bodies too); a kernel
of several loop shapes with the pass on and off against Python's arithmetic, natively and
in the interpreter, also with the fors lowered as plain top-tested fors."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cpuify
from cpuify.errors import IRError
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import InterpModule
from cpuify.ir.core import Block, Operation, OpResult, Value
from cpuify.ir.loop_guard import same_test
from cpuify.ir.parser import parse_op
from cpuify.ir.printer import print_op
from cpuify.ir.verifier import verify
from cpuify.lifting import lift_kernel
from cpuify.transforms.pass_manager import PipelineOptions, run_pipeline
from cpuify.transforms.structured_cf import structure_summary
from test_ir import filecheck
from test_structured_cf import raised


def test_guarded_do_while_is_a_for() -> None:
    after = raised("guarded_for")[1]
    filecheck(after, r'''
    CHECK: "ptx.setp"({{%\d+}}, {{%\d+}}) {mods = ["ge", "s32"], line = 10 : i64}
    CHECK-NEXT: = "upir.if"({{%\d+}}) ({
    CHECK-NEXT: "upir.yield"({{%\d+}}) {edge = unit} : (i32) -> ()
    CHECK-NEXT: }, {
    CHECK-NEXT: "ptx.mov"
    CHECK-NEXT: = "upir.for"({{%\d+}}, {{%\d+}}, {{%\d+}}, {{%\d+}}) ({
    CHECK-NEXT: ^bb0({{%\d+}}: i32, {{%\d+}}: i32):
    CHECK-NEXT: "ptx.add"
    CHECK-NEXT: "upir.barrier"
    CHECK-NEXT: "upir.yield"({{%\d+}}) {line = 17 : i64} : (i32) -> ()
    CHECK-NEXT: }) {line = 13 : i64, predicate = ["lt", "s32"], increment = ["s32"], predicate_line = 16 : i64, increment_line = 15 : i64, do_while = [0 : i64, 2 : i64, 1 : i64]} : (i32, i32, i32, i32) -> i32
    CHECK-NEXT: "cf.br"() [^bb1]
    CHECK-NEXT: ^bb1:
    CHECK-NEXT: "upir.yield"({{%\d+}}) {line = 18 : i64}
    CHECK: structured_cf = [["if", 1 : i64], ["while", 0 : i64], ["for", 1 : i64]], cfg_left = []}
    ''')
    assert "upir.while" not in after and "cf.cond_br" not in after
    # the for counts from the guard's t to its n, the induction variable its body's first
    # argument; the arm's result is the for's
    op = parse_op(after)
    (if_op,) = [o for o in op.walk() if o.name == "upir.if"]
    (for_op,) = [o for o in op.walk() if o.name == "upir.for"]
    guard = if_op.operands[0]
    assert isinstance(guard, OpResult)
    assert for_op.operands[:2] == guard.op.operands
    assert for_op.parent is not None and for_op.parent.parent is if_op.regions[1]
    (add,) = [o for o in for_op.walk() if o.name == "ptx.add"]
    assert add.operands[1] is for_op.regions[0].entry.args[0]


@pytest.mark.parametrize("name, why", [
    ("do_while_unguarded", "no guard that is its first test"),
    ("do_while_other_guard", "no guard that is its first test"),
    ("do_while_bound_varies", "bound or step computed in the loop"),
    ("while", "not counted (tested at the top)"),
])
def test_no_for(name: str, why: str) -> None:
    after = raised(name)[1]
    assert '"upir.while"' in after and '"upir.for"' not in after
    assert f'while_not_for = [["{why}", 1 : i64]]' in after


def test_explain_says_why_a_while_is_no_for() -> None:
    op = parse_op(raised("do_while_other_guard")[1])
    assert structure_summary(op) == [
        "structured control flow: 1 if, 1 while, 0 for; no branch left as CFG; while, not for: "
        "1 no guard that is its first test"]
    assert structure_summary(parse_op(raised("guarded_for")[1])) == [
        "structured control flow: 1 if, 0 while, 1 for; no branch left as CFG"]


def _values(text: str) -> dict[str, Value]:
    """name -> value of lines `name = arg TYPE | const TYPE N | ptx.OP MODS OPERANDS...`."""
    block = Block()
    env: dict[str, Value] = {}
    for line in text.strip().splitlines():
        name, rest = (s.strip() for s in line.split("=", 1))
        kind, *args = rest.split()
        if kind == "arg":
            env[name] = block.add_arg(args[0])
            continue
        if kind == "const":
            op = Operation("upir.const", [], [args[0]], {"value": int(args[1])})
        else:
            operands = [env[a] for a in args[1:]]
            op = Operation(kind, operands, ["i1" if kind == "ptx.setp" else operands[0].type],
                           {"mods": args[0].split(".")})
        block.append(op)
        env[name] = op.results[0]
    return env


# (guard, its value on the loop's arm, the loop's test, lb, ub): `same_test`
GUARDS = '''
lb = arg i32
ub = arg i32
n = arg i32
zero = const i32 0
one = const i32 1
c255 = const i32 255
c256 = const i32 256
max = const i32 2147483647
zero_mov = ptx.mov u32 zero
ge = ptx.setp ge.s32 lb ub
lt = ptx.setp lt.s32 lb ub
gt_swapped = ptx.setp gt.s32 ub lb
le = ptx.setp le.s32 lb ub
lt_u = ptx.setp lt.u32 lb ub
lo = ptx.setp lo.u32 lb ub
n_lt_1 = ptx.setp lt.s32 n one
gt_255 = ptx.setp gt.s32 lb c255
eq_0 = ptx.setp eq.s32 lb zero
ne_0_swapped = ptx.setp ne.b32 zero lb
le_max = ptx.setp le.s32 lb max
ge_and = ptx.setp ge.and.s32 lb ub
'''


@pytest.mark.parametrize("guard, taken, test, lb, ub, same", [
    ("ge", False, "lt.s32", "lb", "ub", True),           # skip when lb >= ub
    ("lt", True, "lt.s32", "lb", "ub", True),
    ("gt_swapped", True, "lt.s32", "lb", "ub", True),    # ub > lb
    ("ge", True, "lt.s32", "lb", "ub", False),           # the wrong arm
    ("le", True, "lt.s32", "lb", "ub", False),           # <= is not <
    ("lt_u", True, "lt.s32", "lb", "ub", False),         # unsigned is not signed
    ("lo", True, "lt.u32", "lb", "ub", True),            # lo is unsigned lt
    ("lt", True, "lt.s32", "lb", "n", False),            # another bound
    ("n_lt_1", False, "lt.s32", "zero", "n", True),      # !(n < 1) is 0 < n
    ("n_lt_1", False, "lt.s32", "zero_mov", "n", True),  # (a copy of the 0)
    ("n_lt_1", False, "lt.s32", "one", "n", False),
    ("gt_255", False, "lt.s32", "lb", "c256", True),     # !(lb > 255) is lb < 256
    ("gt_255", False, "le.s32", "lb", "c255", True),
    ("eq_0", False, "ne.s32", "lb", "zero", True),       # !(lb == 0) is lb != 0
    ("ne_0_swapped", True, "ne.s32", "lb", "zero", True),
    ("le_max", True, "lt.s32", "lb", "max", False),      # lb <= MAX has no < form
    ("ge_and", False, "lt.s32", "lb", "ub", False),      # combined with a predicate
])
def test_guard_is_the_first_test(guard: str, taken: bool, test: str, lb: str, ub: str,
                                 same: bool) -> None:
    env = _values(GUARDS)
    setp = env[guard]
    assert isinstance(setp, OpResult)
    assert same_test(setp.op, taken, test.split("."), env[lb], env[ub]) is same


def test_verifier_rejects_a_do_while_for_without_its_guard() -> None:
    text = raised("guarded_for")[1]
    verify(parse_op(text))
    wrong = text.replace('{mods = ["ge", "s32"], line = 10 : i64}', '{mods = ["gt", "s32"], line = 10 : i64}')
    assert wrong != text
    with pytest.raises(IRError, match="must sit in an arm of a 'upir.if' whose condition"):
        verify(parse_op(wrong))
    # without the attribute it is a plain for (top-tested): valid anywhere
    verify(parse_op(_plain_fors(wrong)))


def _plain_fors(text: str) -> str:
    """The IR with its do-while fors made plain fors (lowered tested at the top)."""
    return re.sub(r", do_while = \[[^\]]*\]", "", text)


# --- end to end ------------------------------------------------------------------------

LOOPS = r'''
extern "C" __global__ void loops(const int *a, int *out, int n, int m) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int s = 0;
    for (int i = t; i < n; i += blockDim.x * gridDim.x) s += a[i];     // grid-stride
    for (int k = m; k != 0; --k) s = s * 3 + k;                        // counting down
    for (int j = 0; j <= (t & 7); j++) s ^= j << 2;                     // <= bound
    #pragma unroll 1
    for (unsigned u = t; u < 256u; u += 64u) s += (int)u;              // unsigned
    for (int r = 0; r < (t % 5); r++) s += a[r] * r;                   // unrolled by nvcc
    out[t] = s;
}
'''


def _loops_reference(a: np.ndarray, n: int, m: int, threads: int) -> np.ndarray:
    def wrap(x: int) -> int:
        return (x + 2**31) % 2**32 - 2**31
    out = np.zeros(threads, np.int32)
    for t in range(threads):
        s = 0
        for i in range(t, n, threads):
            s = wrap(s + int(a[i]))
        for k in range(m, 0, -1):
            s = wrap(s * 3 + k)
        for j in range((t & 7) + 1):
            s ^= j << 2
        for u in range(t, 256, 64):
            s = wrap(s + u)
        for r in range(t % 5):
            s = wrap(s + int(a[r]) * r)
        out[t] = s
    return out


@pytest.mark.parametrize("raise_cf", [True, False])
def test_loops_with_and_without_the_pass(raise_cf: bool) -> None:
    rng = np.random.default_rng(5)
    blocks, threads_per_block, n, m = 2, 64, 300, 7
    threads = blocks * threads_per_block
    a = rng.integers(-1000, 1000, n).astype(np.int32)
    want = _loops_reference(a, n, m, threads)
    options = () if raise_cf else ("--disable-pass=raise-structured-cf",)
    fn = cpuify.RawModule(LOOPS, options=options).get_function("loops")
    out = np.zeros(threads, np.int32)
    fn((blocks,), (threads_per_block,), (a, out, np.int32(n), np.int32(m)))
    np.testing.assert_array_equal(out, want)
    if not raise_cf:
        return
    # the interpreter on the printed IR, the fors lowered as nvcc's loops and as plain fors
    ptx = compile_to_ptx(LOOPS).ptx
    module = parse_ptx(ptx)
    op = lift_kernel(module, module.functions["loops"]).op
    run_pipeline(op, PipelineOptions(verify_each=True))
    text = print_op(op)
    assert text.count('"upir.for"') >= 3 and text.count("do_while = ") >= 3
    for ir in (text, _plain_fors(text)):
        kernel = parse_op(ir)
        verify(kernel)
        interp = InterpModule(ptx)
        interp.use_ir("loops", kernel)
        got = np.zeros(threads, np.int32)
        interp.launch("loops", (blocks,), (threads_per_block,), [a, got, np.int32(n), np.int32(m)])
        np.testing.assert_array_equal(got, want)


def test_for_as_while_lowers_to_the_same_cfg() -> None:
    """for_as_while (ir/structured.py): a top-tested `upir.for` becomes the `upir.while` with
    the test in its before region (the loop's header once lowered: where an interchange puts
    its soft barrier), lowered to the CFG the for lowers to; a soft barrier first in the
    before region is first in that header.  A for raised from nvcc's do-while has its header
    already (the body's entry): it is left alone."""
    from test_structured_cf import BODIES, kernel
    from cpuify.ir.structure import block_body
    from cpuify.ir.structured import for_as_while, lower_structured_control_flow
    from cpuify.transforms.structured_cf import raise_structured_control_flow

    def raised_for(name: str) -> Operation:
        op = parse_op(kernel(BODIES[name]))
        raise_structured_control_flow(block_body(op))
        return op

    as_for = raised_for("for")
    lower_structured_control_flow(as_for)
    op = raised_for("for")
    (loop,) = [o for o in op.walk() if o.name == "upir.for"]
    made = for_as_while(loop)
    assert made is not None and made.name == "upir.while"
    verify(op)
    text = print_op(op)
    assert '"upir.for"' not in text
    filecheck(text, r'''
    CHECK: "upir.while"
    CHECK-NEXT: ^bb0([[IV:%\d+]]: i32, {{%\d+}}: i32):
    CHECK-NEXT: [[T:%\d+]] = "ptx.setp"([[IV]], {{%\d+}}) {mods = ["lt", "s32"], line = 30 : i64}
    CHECK-NEXT: "upir.condition"([[T]], [[IV]], {{%\d+}})
    CHECK: "upir.barrier"
    CHECK: "ptx.add"({{%\d+}}, {{%\d+}}) {mods = ["s32"], line = 33 : i64}
    CHECK-NEXT: "upir.yield"
    ''')
    op = parse_op(text)
    lower_structured_control_flow(op)
    assert print_op(op) == print_op(as_for)
    # a soft barrier at the top of the before region is the lowered header's first op
    op = raised_for("for")
    made = for_as_while(next(o for o in op.walk() if o.name == "upir.for"))
    assert made is not None
    header = made.regions[0].entry
    soft = Operation("upir.barrier", [], [], {"soft": True})
    soft.parent = header
    header.ops.insert(0, soft)
    lower_structured_control_flow(op)
    lowered = block_body(op)
    first = [b.ops[0] for b in lowered.blocks if b.ops and b.ops[0].name == "upir.barrier"
             and b.ops[0].attributes.get("soft")]
    assert len(first) == 1 and first[0].parent.ops[1].name == "ptx.setp"
    # nvcc's guarded do-while: the body's entry is its header already
    op = raised_for("guarded_for_spelled")
    fors = [o for o in op.walk() if o.name == "upir.for"]
    assert fors and all(for_as_while(f) is None for f in fors)
