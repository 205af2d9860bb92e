"""raise-structured-cf on loops with several exits (transforms/structured_exits.py) and
their lowering back (ir/structured.py).

IR in/out (FileCheck) on hand-written block bodies: a break to the loop's own exit block,
a break to another block, two breaks, a return inside a loop, a nested loop with a break out
of the inner one, a return out of two loops; must not fire: an irreducible cycle with two
exits; two loops in a row after a break, a break in an if's arm, continue-outer, a break
out of both loops.  Raise, print, parse and lower gives back the same CFG (also on 60
random structured programs); xDSL reads the printed IR;
a CUDA kernel with these loops runs with the pass on and off, natively and in the
interpreter on the printed structured IR, against NumPy."""

from __future__ import annotations

import random

import numpy as np
import pytest

import cpuify
from cpuify.errors import IRError
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import InterpModule
from cpuify.ir.core import replace_all_uses
from cpuify.ir.parser import parse_op
from cpuify.ir.printer import print_op
from cpuify.ir.structure import block_body
from cpuify.ir.structured import lower_structured_control_flow
from cpuify.ir.verifier import verify
from cpuify.lifting import lift_kernel
from cpuify.transforms.pass_manager import PipelineOptions, run_pipeline
from test_ir import filecheck
from test_structured_cf import PROLOGUE, _canonical, kernel

BR = '<{operandSegmentSizes = array<i32: 1, %d, %d>}>'

BODIES = {
    # a break to the block the loop's test leaves to, with another value: one exit target
    "break_same_target": PROLOGUE + '''
  "cf.br"(%zero) [^bb1] : (i32) -> ()
^bb1(%i: i32):
  %brk = "ptx.setp"(%i, %t) {mods = ["eq", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%brk, %i) [^bb3, ^bb2] ''' + BR % (1, 0) + ''' {line = 11 : i64} : (i1, i32) -> ()
^bb2:
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %c = "ptx.setp"(%i2, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c, %i2, %n) [^bb1, ^bb3] ''' + BR % (1, 1) + ''' {line = 14 : i64} : (i1, i32, i32) -> ()
^bb3(%r: i32):
  "ptx.st"(%p, %r) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # a break to a block of its own (code only the break runs), then the loop's exit block
    "break_elsewhere": PROLOGUE + '''
  "cf.br"(%zero) [^bb1] : (i32) -> ()
^bb1(%i: i32):
  %brk = "ptx.setp"(%i, %t) {mods = ["eq", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%brk) [^bb3, ^bb2] ''' + BR % (0, 0) + ''' : (i1) -> ()
^bb2:
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %c = "ptx.setp"(%i2, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c, %i2) [^bb1, ^bb4] ''' + BR % (1, 0) + ''' : (i1, i32) -> ()
^bb3:
  "ptx.st"(%p, %i) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "cf.br"() [^bb4] : () -> ()
^bb4:
  "upir.exit"() : () -> ()''',
    # two breaks to blocks of their own and the loop's exit: three targets, two flags
    "two_breaks": PROLOGUE + '''
  "cf.br"(%zero, %zero) [^bb1] : (i32, i32) -> ()
^bb1(%i: i32, %s: i32):
  %c = "ptx.setp"(%i, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c) [^bb2, ^bb7] ''' + BR % (0, 0) + ''' : (i1) -> ()
^bb2:
  %a = "ptx.setp"(%i, %t) {mods = ["eq", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%a) [^bb5, ^bb3] ''' + BR % (0, 0) + ''' : (i1) -> ()
^bb3:
  %s2 = "ptx.add"(%s, %i) {mods = ["s32"]} : (i32, i32) -> i32
  %b = "ptx.setp"(%s2, %n) {mods = ["gt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%b) [^bb6, ^bb4] ''' + BR % (0, 0) + ''' : (i1) -> ()
^bb4:
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  "cf.br"(%i2, %s2) [^bb1] {line = 30 : i64} : (i32, i32) -> ()
^bb5:
  "ptx.st"(%p, %s) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "cf.br"() [^bb8] : () -> ()
^bb6:
  "ptx.st"(%p, %s2) {mods = ["global", "s32"], offset = 4 : i64} : (i64, i32) -> ()
  "cf.br"() [^bb8] : () -> ()
^bb7:
  "ptx.st"(%p, %s) {mods = ["global", "s32"], offset = 8 : i64} : (i64, i32) -> ()
  "cf.br"() [^bb8] : () -> ()
^bb8:
  "upir.exit"() : () -> ()''',
    # a return inside a loop: one exit ends the thread
    "return_in_loop": PROLOGUE + '''
  "cf.br"(%zero) [^bb1] : (i32) -> ()
^bb1(%i: i32):
  %c = "ptx.setp"(%i, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c) [^bb2, ^bb4] ''' + BR % (0, 0) + ''' : (i1) -> ()
^bb2:
  %r = "ptx.setp"(%i, %t) {mods = ["eq", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%r) [^bb5, ^bb3] ''' + BR % (0, 0) + ''' : (i1) -> ()
^bb3:
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  "cf.br"(%i2) [^bb1] : (i32) -> ()
^bb4:
  "ptx.st"(%p, %i) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()
^bb5:
  "upir.exit"() : () -> ()''',
    # nested loops, a break out of the inner one (to the inner loop's exit block)
    "nested_break": PROLOGUE + '''
  "cf.br"(%zero) [^bb1] : (i32) -> ()
^bb1(%i: i32):
  "cf.br"(%zero) [^bb2] : (i32) -> ()
^bb2(%j: i32):
  %x = "ptx.add"(%i, %j) {mods = ["s32"]} : (i32, i32) -> i32
  %b = "ptx.setp"(%x, %t) {mods = ["eq", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%b, %j) [^bb4, ^bb3] ''' + BR % (1, 0) + ''' : (i1, i32) -> ()
^bb3:
  %j2 = "ptx.add"(%j, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %cj = "ptx.setp"(%j2, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%cj, %j2, %n) [^bb2, ^bb4] ''' + BR % (1, 1) + ''' : (i1, i32, i32) -> ()
^bb4(%r: i32):
  "ptx.st"(%p, %r) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %ci = "ptx.setp"(%i2, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%ci, %i2) [^bb1, ^bb5] ''' + BR % (1, 0) + ''' : (i1, i32) -> ()
^bb5:
  "upir.exit"() : () -> ()''',
    # a return out of two loops: the inner loop's exit to the thread's end leaves both, and
    # a value of the inner loop (%x) is used past both
    "nested_return": PROLOGUE + '''
  "cf.br"(%zero) [^bb1] : (i32) -> ()
^bb1(%i: i32):
  "cf.br"(%zero) [^bb2] : (i32) -> ()
^bb2(%j: i32):
  %x = "ptx.add"(%i, %j) {mods = ["s32"]} : (i32, i32) -> i32
  %b = "ptx.setp"(%x, %t) {mods = ["eq", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%b) [^bb6, ^bb3] ''' + BR % (0, 0) + ''' : (i1) -> ()
^bb3:
  %j2 = "ptx.add"(%j, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %cj = "ptx.setp"(%j2, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%cj, %j2) [^bb2, ^bb4] ''' + BR % (1, 0) + ''' : (i1, i32) -> ()
^bb4:
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %ci = "ptx.setp"(%i2, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%ci, %i2) [^bb1, ^bb5] ''' + BR % (1, 0) + ''' : (i1, i32) -> ()
^bb5:
  "upir.exit"() : () -> ()
^bb6:
  "ptx.st"(%p, %x) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # two loops in a row, the first one's exits (a break) both go to the second one's header:
    # the first one's branch after it stays, the second loop gets a block of its own
    "break_then_loop": PROLOGUE + '''
  "cf.br"(%zero) [^bb1] : (i32) -> ()
^bb1(%i: i32):
  %b = "ptx.setp"(%i, %t) {mods = ["eq", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%b, %i) [^bb3, ^bb2] ''' + BR % (1, 0) + ''' : (i1, i32) -> ()
^bb2:
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %c = "ptx.setp"(%i2, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c, %i2, %zero) [^bb1, ^bb3] ''' + BR % (1, 1) + ''' : (i1, i32, i32) -> ()
^bb3(%j: i32):
  %j2 = "ptx.add"(%j, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %d = "ptx.setp"(%j2, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%d, %j2) [^bb3, ^bb4] ''' + BR % (1, 0) + ''' : (i1, i32) -> ()
^bb4:
  "ptx.st"(%p, %j2) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # a loop with a break inside an if's arm, both exits to the if's join
    "break_in_arm": PROLOGUE + '''
  %c0 = "ptx.setp"(%t, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c0, %zero) [^bb1, ^bb4] ''' + BR % (0, 1) + ''' : (i1, i32) -> ()
^bb1:
  "cf.br"(%zero) [^bb2] : (i32) -> ()
^bb2(%i: i32):
  %b = "ptx.setp"(%i, %t) {mods = ["eq", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%b, %i) [^bb4, ^bb3] ''' + BR % (1, 0) + ''' : (i1, i32) -> ()
^bb3:
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %c = "ptx.setp"(%i2, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c, %i2, %n) [^bb2, ^bb4] ''' + BR % (1, 1) + ''' : (i1, i32, i32) -> ()
^bb4(%r: i32):
  "ptx.st"(%p, %r) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # `continue outer` from the inner loop: the inner loop's dispatch is a back edge of the
    # outer one
    "continue_outer": PROLOGUE + '''
  "cf.br"(%zero) [^bb1] : (i32) -> ()
^bb1(%i: i32):
  "cf.br"(%zero) [^bb2] : (i32) -> ()
^bb2(%j: i32):
  %x = "ptx.add"(%i, %j) {mods = ["s32"]} : (i32, i32) -> i32
  %b = "ptx.setp"(%x, %t) {mods = ["eq", "s32"]} : (i32, i32) -> i1
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  "cf.cond_br"(%b, %i2) [^bb1, ^bb3] ''' + BR % (1, 0) + ''' : (i1, i32) -> ()
^bb3:
  %j2 = "ptx.add"(%j, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %cj = "ptx.setp"(%j2, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%cj, %j2) [^bb2, ^bb4] ''' + BR % (1, 0) + ''' : (i1, i32) -> ()
^bb4:
  "ptx.st"(%p, %i) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  %i3 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %ci = "ptx.setp"(%i3, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%ci, %i3) [^bb1, ^bb6] ''' + BR % (1, 0) + ''' : (i1, i32) -> ()
^bb6:
  "upir.exit"() : () -> ()''',
    # the outer loop's only exit is the inner loop's break out of both
    "break_both": PROLOGUE + '''
  "cf.br"(%zero) [^bb1] : (i32) -> ()
^bb1(%i: i32):
  "cf.br"(%zero) [^bb2] : (i32) -> ()
^bb2(%j: i32):
  %x = "ptx.add"(%i, %j) {mods = ["s32"]} : (i32, i32) -> i32
  %b = "ptx.setp"(%x, %t) {mods = ["eq", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%b, %x) [^bb5, ^bb3] ''' + BR % (1, 0) + ''' : (i1, i32) -> ()
^bb3:
  %j2 = "ptx.add"(%j, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %cj = "ptx.setp"(%j2, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%cj, %j2) [^bb2, ^bb4] ''' + BR % (1, 0) + ''' : (i1, i32) -> ()
^bb4:
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  "cf.br"(%i2) [^bb1] : (i32) -> ()
^bb5(%r: i32):
  "ptx.st"(%p, %r) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # must not fire: an irreducible cycle (entered at ^bb1 and ^bb2) with two exits
    "irreducible_exits": PROLOGUE + '''
  %c = "ptx.setp"(%t, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c, %zero, %n) [^bb1, ^bb2] ''' + BR % (1, 1) + ''' : (i1, i32, i32) -> ()
^bb1(%a: i32):
  %a2 = "ptx.add"(%a, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %e = "ptx.setp"(%a2, %t) {mods = ["eq", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%e, %a2) [^bb4, ^bb2] ''' + BR % (0, 1) + ''' : (i1, i32) -> ()
^bb2(%b: i32):
  %d = "ptx.setp"(%b, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%d, %b) [^bb1, ^bb3] ''' + BR % (1, 0) + ''' : (i1, i32) -> ()
^bb3:
  "ptx.st"(%p, %b) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()
^bb4:
  "upir.exit"() : () -> ()''',
}


def raised(name: str) -> tuple[str, str]:
    """(the IR before, the IR after raise-structured-cf) of BODIES[name], verified."""
    op = parse_op(kernel(BODIES[name]))
    verify(op)
    before = print_op(op)
    run_pipeline(op, PipelineOptions(passes=("raise-structured-cf",), verify_each=True))
    return before, print_op(op)


def test_break_to_the_loops_exit_block() -> None:
    # one target: no flag, the break's value and the loop's passed in the target's slot
    filecheck(raised("break_same_target")[1], r'''
    CHECK: %[[R:\d+]], %{{\d+}} = "upir.while"(%{{\d+}}) ({
    CHECK-NEXT: ^bb0(%[[I:\d+]]: i32):
    CHECK-NEXT: "ptx.setp"
    CHECK-NEXT: "cf.cond_br"({{%\d+}}) [^bb1, ^bb2]
    CHECK-NEXT: ^bb1:
    CHECK-NEXT: %[[F:\d+]] = "upir.const"() {value = 0 : i64, edge = unit} : () -> i1
    CHECK-NEXT: %[[U:\d+]] = "upir.undef"() {edge = unit} : () -> i32
    CHECK-NEXT: "upir.condition"(%[[F]], %[[I]], %[[U]]) {edge = unit}
    CHECK-NEXT: ^bb2:
    CHECK-NEXT: "ptx.add"
    CHECK-NEXT: "ptx.setp"
    CHECK-NEXT: "upir.condition"({{%\d+}}, {{%\d+}}, {{%\d+}}) {line = 14 : i64}
    CHECK-NEXT: }, {
    CHECK-NEXT: ^bb0({{%\d+}}: i32, %[[N:\d+]]: i32):
    CHECK-NEXT: "upir.yield"(%[[N]])
    CHECK-NEXT: }) {exit_flags = 0 : i64} : (i32) -> (i32, i32)
    CHECK-NEXT: "cf.br"(%[[R]]) [^bb1]
    CHECK: ["while", 1 : i64], ["for", 0 : i64]], cfg_left = [], while_not_for = [["several exits", 1 : i64]]
    ''')


def test_break_to_a_block_of_its_own() -> None:
    # two targets: one flag; the value the break's block stores (%i) is forwarded
    filecheck(raised("break_elsewhere")[1], r'''
    CHECK: %[[FLAG:\d+]], %{{\d+}}, %[[FWD:\d+]] = "upir.while"
    CHECK: %[[F:\d+]] = "upir.const"() {value = 0 : i64, edge = unit} : () -> i1
    CHECK: "upir.condition"(%[[F]], %[[F]],
    CHECK: %[[T:\d+]] = "upir.const"() {value = 1 : i64, edge = unit} : () -> i1
    CHECK-NEXT: "upir.condition"({{%\d+}}, %[[T]],
    CHECK: }) {exit_flags = 1 : i64} : (i32) -> (i1, i32, i32)
    CHECK-NEXT: "cf.cond_br"(%[[FLAG]]) [^[[EXIT:bb\d+]], ^[[BREAK:bb\d+]]] {{.*}} {exit_dispatch = unit}
    CHECK: ^[[BREAK]]:
    CHECK-NEXT: "ptx.st"({{%\d+}}, %[[FWD]])
    CHECK: cfg_left = [["branch on a loop's exit target", 1 : i64]]
    ''')


def test_two_breaks() -> None:
    # three targets: two flags, a chain of two dispatch branches; the loop's branches to the
    # breaks stay branches inside the while's before region ("cycle through a branch")
    filecheck(raised("two_breaks")[1], r'''
    CHECK: %[[F1:\d+]], %[[F2:\d+]], {{.*}} = "upir.while"
    CHECK: "upir.condition"
    CHECK: "upir.condition"
    CHECK: "upir.condition"
    CHECK: "upir.condition"({{.*}}) {line = 30 : i64}
    CHECK: }) {exit_flags = 2 : i64}
    CHECK-NEXT: "cf.cond_br"(%[[F1]]) [^{{bb\d+}}, ^[[NEXT:bb\d+]]] {{.*}} {exit_dispatch = unit}
    CHECK: ^[[NEXT]]:
    CHECK-NEXT: "cf.cond_br"(%[[F2]]) {{.*}} {exit_dispatch = unit}
    CHECK: cfg_left = [["branch on a loop's exit target", 2 : i64],
    ''')


def test_return_inside_a_loop() -> None:
    filecheck(raised("return_in_loop")[1], r'''
    CHECK: %[[FLAG:\d+]], {{.*}} = "upir.while"
    CHECK: }) {exit_flags = 1 : i64}
    CHECK-NEXT: "cf.cond_br"(%[[FLAG]]) [^[[RET:bb\d+]], ^{{bb\d+}}]
    CHECK: ^[[RET]]:
    CHECK-NEXT: "upir.exit"
    ''')


def test_nested_loop_break_out_of_the_inner_one() -> None:
    text = raised("nested_break")[1]
    filecheck(text, r'''
    CHECK: = "upir.while"
    CHECK: = "upir.while"
    CHECK: }) {exit_flags = 0 : i64}
    CHECK: "ptx.st"
    CHECK: "upir.condition"
    CHECK: structured_cf = [["if", 0 : i64], ["while", 2 : i64], ["for", 0 : i64]], cfg_left = []
    ''')


def test_return_out_of_two_loops() -> None:
    # the inner loop's dispatch sits in the outer loop, whose own dispatch leads to the store
    text = raised("nested_return")[1]
    filecheck(text, r'''
    CHECK: %[[OUTER:\d+]], {{.*}} = "upir.while"
    CHECK: %[[INNER:\d+]], {{.*}} = "upir.while"
    CHECK: }) {exit_flags = 1 : i64}
    CHECK-NEXT: "cf.cond_br"(%[[INNER]]) {{.*}} {exit_dispatch = unit}
    CHECK: }) {exit_flags = 1 : i64}
    CHECK-NEXT: "cf.cond_br"(%[[OUTER]]) {{.*}} {exit_dispatch = unit}
    CHECK: "ptx.st"
    ''')
    assert text.count('"upir.while"') == 2


def test_irreducible_cycle_with_two_exits_stays_cfg() -> None:
    before, after = raised("irreducible_exits")
    assert "irreducible cycle" in after and '"upir.while"' not in after
    assert _canonical(after) == _canonical(before)


@pytest.mark.parametrize("name", sorted(BODIES))
def test_raise_then_lower_is_the_same_cfg(name: str) -> None:
    before, after = raised(name)
    op = parse_op(after)
    verify(op)
    lower_structured_control_flow(op)
    verify(op)
    text = print_op(op)
    assert "upir.while" not in text and "upir.undef" not in text and "edge = unit" not in text
    assert _canonical(text) == _canonical(before)


def test_mlir_is_read_by_xdsl() -> None:
    from test_mlir_export import xdsl_name, xdsl_parse
    for name in ("two_breaks", "nested_return"):
        text = raised(name)[1]
        seen = {xdsl_name(op) for op in xdsl_parse(text).walk()}
        assert {"upir.while", "upir.condition", "upir.undef"} <= seen


# --- end to end ------------------------------------------------------------------------

SOURCE = r'''
extern "C" __global__ void exits(const int *a, int *out, int n, int m) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= m) return;
    int found = -1;                                  // a break
    for (int i = 0; i < n; i++) {
        if (a[i] == t % 17) { found = i; break; }
    }
    int s = 0, why = 0;                              // two breaks
    for (int i = 0; i < n; i++) {
        int v = a[(i + t) % n];
        if (v == 3) { why = 1; break; }
        if (s > 40 + t % 7) { why = 2 + s; break; }
        s += v;
    }
    int hits = 0;                                    // a break out of the inner loop
    for (int i = 0; i < n; i += 7) {
        for (int j = i; j < n; j++) {
            if (a[j] > 10 + t % 5) break;
            hits += j;
        }
    }
    out[t * 5 + 0] = found; out[t * 5 + 1] = s; out[t * 5 + 2] = why; out[t * 5 + 3] = hits;
    int acc = 0;                                     // a return inside a loop
    for (int i = t % 4; i < n; i++) {
        if (a[i] == 16) { out[t * 5 + 4] = acc; return; }
        acc += a[i] * (i + 1);
    }
    out[t * 5 + 4] = -acc;
}
'''


def _reference(a: np.ndarray, m: int) -> np.ndarray:
    n = len(a)
    out = np.zeros(m * 5, np.int32)
    for t in range(m):
        found = next((i for i in range(n) if a[i] == t % 17), -1)
        s = why = 0
        for i in range(n):
            v = a[(i + t) % n]
            if v == 3:
                why = 1
                break
            if s > 40 + t % 7:
                why = 2 + s
                break
            s += v
        hits = 0
        for i in range(0, n, 7):
            for j in range(i, n):
                if a[j] > 10 + t % 5:
                    break
                hits += j
        acc, ret = 0, False
        for i in range(t % 4, n):
            if a[i] == 16:
                ret = True
                break
            acc += a[i] * (i + 1)
        out[t * 5:t * 5 + 5] = [found, s, why, hits, acc if ret else -acc]
    return out


@pytest.mark.parametrize("raise_cf", [True, False])
def test_kernel_with_and_without_the_pass(raise_cf: bool) -> None:
    rng = np.random.default_rng(7)
    m = 70
    a = rng.integers(0, 18, 48).astype(np.int32)
    want = _reference(a, m)
    options = () if raise_cf else ("--disable-pass=raise-structured-cf",)
    fn = cpuify.RawModule(SOURCE, options=options).get_function("exits")
    out = np.zeros(m * 5, np.int32)
    fn((3,), (32,), (a, out, np.int32(len(a)), np.int32(m)))
    np.testing.assert_array_equal(out, want)
    # the interpreter on the printed IR after the whole pipeline (the pass on or off)
    ptx = compile_to_ptx(SOURCE).ptx
    module = parse_ptx(ptx)
    op = lift_kernel(module, module.functions["exits"]).op
    run_pipeline(op, PipelineOptions(
        disabled=frozenset() if raise_cf else frozenset({"raise-structured-cf"}), verify_each=True))
    text = print_op(op)
    # the loops with a break or a return are whiles with exit flags (none stays CFG)
    assert (text.count("exit_flags = ") >= 4) == raise_cf
    assert "loop with" not in text
    interp = InterpModule(ptx)
    interp.use_ir("exits", parse_op(text))
    got = np.zeros(m * 5, np.int32)
    interp.launch("exits", (3,), (32,), [a, got, np.int32(len(a)), np.int32(m)])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("exit_flags = 1 : i64", "exit_flags = 5 : i64"), "counts the i1 results"),
    (lambda t: t.replace('"cf.cond_br"(%5) [^bb2, ^bb1]', '"upir.exit"() : () -> ()\n^bb9:\n'
                         '"cf.cond_br"(%5) [^bb2, ^bb1]'), "followed by the branch"),
])
def test_verifier_rejects(edit, message) -> None:  # type: ignore[no-untyped-def]
    text = raised("break_elsewhere")[1]
    verify(parse_op(text))
    with pytest.raises(IRError, match=message):
        verify(parse_op(edit(text)))


# --- random structured programs ----------------------------------------------------------
# Nested loops (tested at the top or the bottom) and ifs with break/continue out of any
# enclosing loop, returns, barriers and stores of the loops' values after them; every loop
# is raised, and raise, print, parse, lower gives back the same CFG (but for the arguments of
# an if arm's entry that only one edge enters: a trivial phi the if raise replaces by its
# value, documented in ir/structured.py).

def _random_statements(rng, depth: int, loops: int) -> list:  # type: ignore[no-untyped-def,type-arg]
    out: list = []  # type: ignore[type-arg]
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        if r < 0.3 and depth < 4:
            out.append(("loop", rng.random() < 0.4, _random_statements(rng, depth + 1, loops + 1)))
        elif r < 0.55 and depth < 4:
            out.append(("if", _random_statements(rng, depth + 1, loops),
                        _random_statements(rng, depth + 1, loops) if rng.random() < 0.5 else []))
        elif r < 0.7 and loops:
            out.append(("break", rng.randint(1, loops)))
        elif r < 0.78 and loops:
            out.append(("continue", rng.randint(1, loops)))
        elif r < 0.85:
            out.append(("return",))
        else:
            out.append(("op",))
    return out


class _Program:
    """Block body text of random statements (values: %t, %n, %p, %zero, %one of PROLOGUE)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0
        self.open = True
        self.loops: list[tuple[str, str, str]] = []    # (header value, latch, follow)
        self.preds: dict[str, int] = {}

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def start(self, name: str, arg: str | None = None) -> None:
        self.lines.append(f"^{name}" + (f"(%{arg}: i32):" if arg else ":"))
        self.open = True

    def br(self, target: str, arg: str | None = None) -> None:
        self.preds[target] = self.preds.get(target, 0) + 1
        self.lines.append(f'  "cf.br"(%{arg}) [^{target}] : (i32) -> ()' if arg
                          else f'  "cf.br"() [^{target}] : () -> ()')
        self.open = False

    def cond_br(self, a: str, b: str, a_arg: str | None = None, b_arg: str | None = None) -> None:
        v, c = self.fresh("v"), self.fresh("c")
        self.lines.append(f'  %{v} = "ptx.add"(%t, %n) {{mods = ["s32"]}} : (i32, i32) -> i32')
        self.lines.append(f'  %{c} = "ptx.setp"(%{v}, %one) {{mods = ["lt", "s32"]}} : (i32, i32) -> i1')
        args = [x for x in (a_arg, b_arg) if x]
        self.lines.append(f'  "cf.cond_br"(%{c}' + "".join(f", %{x}" for x in args) + f') [^{a}, ^{b}] '
                          + BR % (int(a_arg is not None), int(b_arg is not None))
                          + f' : ({", ".join(["i1"] + ["i32"] * len(args))}) -> ()')
        for t in (a, b):
            self.preds[t] = self.preds.get(t, 0) + 1
        self.open = False

    def statements(self, statements: list) -> None:  # type: ignore[type-arg]
        for s in statements:
            if not self.open:
                return
            if s[0] == "op" and self.count % 3 == 0:
                self.lines.append('  "upir.barrier"() {mods = ["sync"]} : () -> ()')
            elif s[0] == "op":
                w = self.fresh("w")
                self.lines.append(f'  %{w} = "ptx.mul"(%t, %n) {{mods = ["lo", "s32"]}} : (i32, i32) -> i32')
                self.lines.append(f'  "ptx.st"(%p, %{w}) {{mods = ["global", "s32"], offset = 0 : i64}} : (i64, i32) -> ()')
            elif s[0] == "if":
                a, b, join = self.fresh("then"), self.fresh("else"), self.fresh("join")
                self.cond_br(a, b)
                for name, arm in ((a, s[1]), (b, s[2])):
                    self.start(name)
                    self.statements(arm)
                    if self.open:
                        self.br(join)
                if not self.preds.get(join):
                    return
                self.start(join)
            elif s[0] == "loop":
                bottom = s[1]
                head, h, latch, follow = (self.fresh(x) for x in ("head", "h", "latch", "follow"))
                self.br(head, "zero")
                self.start(head, h)
                if not bottom:
                    body = self.fresh("body")
                    self.cond_br(body, follow, None, h)
                    self.start(body)
                self.loops.append((h, latch, follow))
                self.statements(s[2])
                self.loops.pop()
                if self.open:
                    self.br(latch)
                if self.preds.get(latch):
                    self.start(latch)
                    nxt = self.fresh("next")
                    self.lines.append(f'  %{nxt} = "ptx.add"(%{h}, %one) {{mods = ["s32"]}} : (i32, i32) -> i32')
                    if bottom:
                        self.cond_br(head, follow, nxt, nxt)
                    else:
                        self.br(head, nxt)
                if not self.preds.get(follow):
                    return
                arg = self.fresh("a")
                self.start(follow, arg)
                for v, at in ((h, 4), (arg, 8)):
                    self.lines.append(f'  "ptx.st"(%p, %{v}) {{mods = ["global", "s32"], offset = {at} : i64}} : (i64, i32) -> ()')
            elif s[0] in ("break", "continue"):
                h, latch, follow = self.loops[-s[1]]
                if s[0] == "break":
                    self.br(follow, self.loops[-1][0])
                else:
                    self.br(latch)
                return
            else:
                ret = self.fresh("ret")
                self.br(ret)
                self.start(ret)
                self.lines.append('  "upir.exit"() : () -> ()')
                self.open = False
                return


def _trivial_phis_removed(text: str) -> str:
    """`text` with the arguments of blocks that one edge enters replaced by the values
    passed."""
    op = parse_op(text)
    region = block_body(op)
    into: dict = {}  # type: ignore[type-arg]
    for b in region.blocks:
        for k, s in enumerate(b.ops[-1].successors):
            into.setdefault(s, []).append((b.ops[-1], k))
    for b, edges in into.items():
        if len(edges) == 1 and b.args:
            term, k = edges[0]
            for a, v in zip(b.args, term.successor_args[k]):
                replace_all_uses(a, v)
            b.args = []
            term.successor_args[k] = []
    return print_op(op)


def test_random_programs_round_trip() -> None:
    rng = random.Random(15)
    loops = raised_loops = multi_exit = 0
    for _ in range(60):
        program = _Program()
        program.statements(_random_statements(rng, 0, 0))
        if program.open:
            program.lines.append('  "upir.exit"() : () -> ()')
        op = parse_op(kernel(PROLOGUE + "\n".join(program.lines)))
        verify(op)
        before = print_op(op)
        run_pipeline(op, PipelineOptions(passes=("raise-structured-cf",), verify_each=True))
        after = print_op(op)
        back = parse_op(after)
        verify(back)
        lower_structured_control_flow(back)
        verify(back)
        assert _canonical(_trivial_phis_removed(print_op(back))) == \
            _canonical(_trivial_phis_removed(before)), before
        loops += sum(line.startswith("^latch") for line in program.lines)
        raised_loops += after.count('"upir.while"') + after.count('"upir.for"')
        multi_exit += after.count("exit_flags = ")
    assert raised_loops == loops > 40 and multi_exit > 20, (loops, raised_loops, multi_exit)
