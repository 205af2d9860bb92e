"""raise-structured-cf (transforms/structured_cf.py) and the lowering back (ir/structured.py).

IR-in/IR-out checks on hand-written block bodies (if, if/else, a while, a counted for,
nested loops with barriers; and where the pass must not fire: an irreducible cycle, a path
that ends the thread; loops with several exits: tests/test_structured_exits.py); the ops'
verification; raise then lower gives back the same CFG; the printed IR after the pass is MLIR xDSL reads and our parser reads
back; kernels run with the pass on and off, natively and in the interpreter on the printed
IR, against NumPy; `cpuify explain` shows the structure."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.cli.main import main
from cpuify.errors import IRError
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import InterpModule
from cpuify.ir.core import reverse_postorder
from cpuify.ir.parser import parse_op
from cpuify.ir.printer import print_op
from cpuify.ir.structure import block_body
from cpuify.ir.structured import lower_structured_control_flow
from cpuify.ir.verifier import verify
from cpuify.lifting import lift_kernel
from cpuify.transforms.pass_manager import PipelineOptions, run_pipeline
from test_ir import filecheck


def kernel(body: str) -> str:
    """A kernel op around a block body written in MLIR generic syntax (params: an i64
    pointer at 0 and an i32 n at 8)."""
    return ('"upir.kernel"() ({\n"upir.grid_parallel"() ({\n"upir.block_parallel"() ({\n'
            + body + '\n}) : () -> ()\n"upir.yield"() : () -> ()\n}) : () -> ()\n'
            '"upir.yield"() : () -> ()\n}) {sym_name = "k", param_size = 12 : i64, params = '
            '[["p", "u64", 0 : i64, 8 : i64, 8 : i64, []], ["n", "u32", 8 : i64, 4 : i64, '
            '4 : i64, []]], directives = []} : () -> ()\n')


PROLOGUE = '''
  %p = "upir.param"() {offset = 0 : i64, type = "u64"} : () -> i64
  %n = "upir.param"() {offset = 8 : i64, type = "u32"} : () -> i32
  %t = "upir.special"() {reg = "%tid.x"} : () -> i32
  %zero = "upir.const"() {value = 0 : i64} : () -> i32
  %one = "upir.const"() {value = 1 : i64} : () -> i32
'''

BODIES = {
    # if without else (a triangle), a value merged at the join
    "if": PROLOGUE + '''
  %c = "ptx.setp"(%t, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c, %zero) [^bb1, ^bb2] <{operandSegmentSizes = array<i32: 1, 0, 1>}> {line = 7 : i64} : (i1, i32) -> ()
^bb1:
  %x = "ptx.add"(%t, %one) {mods = ["s32"]} : (i32, i32) -> i32
  "cf.br"(%x) [^bb2] {line = 9 : i64} : (i32) -> ()
^bb2(%m: i32):
  "ptx.st"(%p, %m) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # if/else with a barrier after the join
    "if_else": PROLOGUE + '''
  %c = "ptx.setp"(%t, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c) [^bb1, ^bb2] <{operandSegmentSizes = array<i32: 1, 0, 0>}> : (i1) -> ()
^bb1:
  %x = "ptx.add"(%t, %one) {mods = ["s32"]} : (i32, i32) -> i32
  "cf.br"(%x) [^bb3] : (i32) -> ()
^bb2:
  %y = "ptx.sub"(%t, %one) {mods = ["s32"]} : (i32, i32) -> i32
  "cf.br"(%y) [^bb3] : (i32) -> ()
^bb3(%m: i32):
  "upir.barrier"() {mods = ["sync"]} : () -> ()
  "ptx.st"(%p, %m) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # a while loop that is not counted (it halves x), its exit test at the top
    "while": PROLOGUE + '''
  "cf.br"(%n) [^bb1] : (i32) -> ()
^bb1(%x: i32):
  %c = "ptx.setp"(%x, %zero) {mods = ["gt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c) [^bb2, ^bb3] <{operandSegmentSizes = array<i32: 1, 0, 0>}> {line = 20 : i64} : (i1) -> ()
^bb2:
  %h = "ptx.shr"(%x, %one) {mods = ["s32"]} : (i32, i32) -> i32
  "cf.br"(%h) [^bb1] : (i32) -> ()
^bb3:
  "ptx.st"(%p, %x) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # a counted loop: for (i = 0; i < n; i += 1) s += i, a barrier in the body
    "for": PROLOGUE + '''
  "cf.br"(%zero, %zero) [^bb1] : (i32, i32) -> ()
^bb1(%i: i32, %s: i32):
  %c = "ptx.setp"(%i, %n) {mods = ["lt", "s32"], line = 30 : i64} : (i32, i32) -> i1
  "cf.cond_br"(%c) [^bb2, ^bb3] <{operandSegmentSizes = array<i32: 1, 0, 0>}> : (i1) -> ()
^bb2:
  %s2 = "ptx.add"(%s, %i) {mods = ["s32"]} : (i32, i32) -> i32
  "upir.barrier"() {mods = ["sync"]} : () -> ()
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"], line = 33 : i64} : (i32, i32) -> i32
  "cf.br"(%i2, %s2) [^bb1] : (i32, i32) -> ()
^bb3:
  "ptx.st"(%p, %s) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # nested rotated loops (nvcc's do-while shape), barriers in both, an if in the inner
    "nested": PROLOGUE + '''
  "cf.br"(%zero, %zero) [^bb1] : (i32, i32) -> ()
^bb1(%i: i32, %s: i32):
  "upir.barrier"() {mods = ["sync"]} : () -> ()
  "cf.br"(%zero, %s) [^bb2] : (i32, i32) -> ()
^bb2(%j: i32, %u: i32):
  %odd = "ptx.and"(%j, %one) {mods = ["b32"]} : (i32, i32) -> i32
  %c0 = "ptx.setp"(%odd, %zero) {mods = ["eq", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c0) [^bb3, ^bb4] <{operandSegmentSizes = array<i32: 1, 0, 0>}> : (i1) -> ()
^bb3:
  %u1 = "ptx.add"(%u, %j) {mods = ["s32"]} : (i32, i32) -> i32
  "cf.br"(%u1) [^bb4b] : (i32) -> ()
^bb4:
  "cf.br"(%u) [^bb4b] : (i32) -> ()
^bb4b(%u2: i32):
  "upir.barrier"() {mods = ["sync"]} : () -> ()
  %j2 = "ptx.add"(%j, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %c1 = "ptx.setp"(%j2, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c1, %j2, %u2) [^bb2, ^bb5] <{operandSegmentSizes = array<i32: 1, 2, 0>}> : (i1, i32, i32) -> ()
^bb5:
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %c2 = "ptx.setp"(%i2, %n) {mods = ["ge", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c2, %i2, %u2) [^bb6, ^bb1] <{operandSegmentSizes = array<i32: 1, 0, 2>}> {line = 50 : i64} : (i1, i32, i32) -> ()
^bb6:
  "ptx.st"(%p, %u2) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # a do-while loop entered from both arms of an if (a block in the header's place
    # holds the while; lowered, it is the header again)
    "two_entries": PROLOGUE + '''
  %c = "ptx.setp"(%t, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c) [^bb1, ^bb2] <{operandSegmentSizes = array<i32: 1, 0, 0>}> : (i1) -> ()
^bb1:
  "cf.br"(%t) [^bb3] {line = 3 : i64} : (i32) -> ()
^bb2:
  "cf.br"(%n) [^bb3] {line = 4 : i64} : (i32) -> ()
^bb3(%x: i32):
  "upir.barrier"() {mods = ["sync"]} : () -> ()
  %x2 = "ptx.shr"(%x, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %go = "ptx.setp"(%x2, %zero) {mods = ["gt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%go, %x2) [^bb3, ^bb4] <{operandSegmentSizes = array<i32: 1, 1, 0>}> : (i1, i32) -> ()
^bb4:
  "ptx.st"(%p, %x2) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # nvcc's counted loop: a guard (skip when t >= n) around a do-while from t to n whose
    # test is at the bottom; the guard is the loop's first test: a for in the guard's arm
    "guarded_for": PROLOGUE + '''
  %g = "ptx.setp"(%t, %n) {mods = ["ge", "s32"], line = 10 : i64} : (i32, i32) -> i1
  "cf.cond_br"(%g, %zero) [^bb4, ^bb1] <{operandSegmentSizes = array<i32: 1, 1, 0>}> {line = 11 : i64} : (i1, i32) -> ()
^bb1:
  %s0 = "ptx.mov"(%zero) {mods = ["u32"], line = 12 : i64} : (i32) -> i32
  "cf.br"(%t, %s0) [^bb2] {line = 13 : i64} : (i32, i32) -> ()
^bb2(%i: i32, %s: i32):
  %s2 = "ptx.add"(%s, %i) {mods = ["s32"], line = 14 : i64} : (i32, i32) -> i32
  "upir.barrier"() {mods = ["sync"]} : () -> ()
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"], line = 15 : i64} : (i32, i32) -> i32
  %c = "ptx.setp"(%i2, %n) {mods = ["lt", "s32"], line = 16 : i64} : (i32, i32) -> i1
  "cf.cond_br"(%c, %i2, %s2) [^bb2, ^bb3] <{operandSegmentSizes = array<i32: 1, 2, 0>}> {line = 17 : i64} : (i1, i32, i32) -> ()
^bb3:
  "cf.br"(%s2) [^bb4] {line = 18 : i64} : (i32) -> ()
^bb4(%r: i32):
  "ptx.st"(%p, %r) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # the same from 0 (the guard `n < 1`), counting in its second argument, the add and the
    # compare among other ops (the lowering puts them back there), and a remainder loop
    # counting down to 0 under `r == 0` (its guard: the negation of `!=`)
    "guarded_for_spelled": PROLOGUE + '''
  %g = "ptx.setp"(%n, %one) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%g, %zero) [^bb4, ^bb1] <{operandSegmentSizes = array<i32: 1, 1, 0>}> : (i1, i32) -> ()
^bb1:
  %z = "ptx.mov"(%zero) {mods = ["u32"]} : (i32) -> i32
  "cf.br"(%zero, %z) [^bb2] : (i32, i32) -> ()
^bb2(%s: i32, %i: i32):
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"], line = 21 : i64} : (i32, i32) -> i32
  %x = "ptx.mul"(%i, %t) {mods = ["lo", "s32"]} : (i32, i32) -> i32
  %c = "ptx.setp"(%i2, %n) {mods = ["lt", "s32"], line = 23 : i64} : (i32, i32) -> i1
  %s2 = "ptx.add"(%s, %x) {mods = ["s32"]} : (i32, i32) -> i32
  "cf.cond_br"(%c, %s2, %i2) [^bb2, ^bb3] <{operandSegmentSizes = array<i32: 1, 2, 0>}> : (i1, i32, i32) -> ()
^bb3:
  "cf.br"(%s2) [^bb4] : (i32) -> ()
^bb4(%r: i32):
  %three = "upir.const"() {value = 3 : i64} : () -> i32
  %minus = "upir.const"() {value = 4294967295 : i64} : () -> i32
  %m = "ptx.and"(%n, %three) {mods = ["b32"]} : (i32, i32) -> i32
  %h = "ptx.setp"(%m, %zero) {mods = ["eq", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%h, %r) [^bb7, ^bb5] <{operandSegmentSizes = array<i32: 1, 1, 0>}> : (i1, i32) -> ()
^bb5:
  "cf.br"(%m, %r) [^bb6] : (i32, i32) -> ()
^bb6(%k: i32, %u: i32):
  %u2 = "ptx.add"(%u, %k) {mods = ["s32"]} : (i32, i32) -> i32
  %k2 = "ptx.add"(%k, %minus) {mods = ["s32"]} : (i32, i32) -> i32
  %d = "ptx.setp"(%k2, %zero) {mods = ["ne", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%d, %k2, %u2, %u2) [^bb6, ^bb7] <{operandSegmentSizes = array<i32: 1, 2, 1>}> : (i1, i32, i32, i32) -> ()
^bb7(%v: i32):
  "ptx.st"(%p, %v) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # a guarded do-while entered straight from the guard's branch (the raise puts the loop
    # in a new block in its header's place; lowered, the branch goes to the header again)
    "for_from_branch": PROLOGUE + '''
  %g = "ptx.setp"(%t, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%g, %t, %zero, %zero) [^bb1, ^bb3] <{operandSegmentSizes = array<i32: 1, 2, 1>}> : (i1, i32, i32, i32) -> ()
^bb1(%i: i32, %s: i32):
  %s2 = "ptx.add"(%s, %i) {mods = ["s32"]} : (i32, i32) -> i32
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %c = "ptx.setp"(%i2, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c, %i2, %s2) [^bb1, ^bb2] <{operandSegmentSizes = array<i32: 1, 2, 0>}> : (i1, i32, i32) -> ()
^bb2:
  "cf.br"(%s2) [^bb3] : (i32) -> ()
^bb3(%r: i32):
  "ptx.st"(%p, %r) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # the same with a while (its exit test is on another value than its step)
    "while_from_branch": PROLOGUE + '''
  %g = "ptx.setp"(%t, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%g, %t, %zero, %zero) [^bb1, ^bb3] <{operandSegmentSizes = array<i32: 1, 2, 1>}> : (i1, i32, i32, i32) -> ()
^bb1(%i: i32, %s: i32):
  %s2 = "ptx.add"(%s, %i) {mods = ["s32"]} : (i32, i32) -> i32
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %c = "ptx.setp"(%s2, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c, %i2, %s2) [^bb1, ^bb2] <{operandSegmentSizes = array<i32: 1, 2, 0>}> : (i1, i32, i32) -> ()
^bb2:
  "cf.br"(%s2) [^bb3] : (i32) -> ()
^bb3(%r: i32):
  "ptx.st"(%p, %r) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # must not fire (a while, no for): a do-while with no guard (it runs once at least)
    "do_while_unguarded": PROLOGUE + '''
  "cf.br"(%t, %zero) [^bb1] : (i32, i32) -> ()
^bb1(%i: i32, %s: i32):
  %s2 = "ptx.add"(%s, %i) {mods = ["s32"]} : (i32, i32) -> i32
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %c = "ptx.setp"(%i2, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c, %i2, %s2) [^bb1, ^bb2] <{operandSegmentSizes = array<i32: 1, 2, 0>}> : (i1, i32, i32) -> ()
^bb2:
  "ptx.st"(%p, %s2) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # must not fire: the guard tests t < n but the loop starts from 0 (not its first test)
    "do_while_other_guard": PROLOGUE + '''
  %g = "ptx.setp"(%t, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%g, %zero) [^bb1, ^bb4] <{operandSegmentSizes = array<i32: 1, 0, 1>}> : (i1, i32) -> ()
^bb1:
  "cf.br"(%zero, %zero) [^bb2] : (i32, i32) -> ()
^bb2(%i: i32, %s: i32):
  %s2 = "ptx.add"(%s, %i) {mods = ["s32"]} : (i32, i32) -> i32
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %c = "ptx.setp"(%i2, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c, %i2, %s2) [^bb2, ^bb3] <{operandSegmentSizes = array<i32: 1, 2, 0>}> : (i1, i32, i32) -> ()
^bb3:
  "cf.br"(%s2) [^bb4] : (i32) -> ()
^bb4(%r: i32):
  "ptx.st"(%p, %r) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # must not fire: the bound is loaded in the loop (not invariant), under a guard on it
    "do_while_bound_varies": PROLOGUE + '''
  %g = "ptx.setp"(%t, %n) {mods = ["ge", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%g, %zero) [^bb4, ^bb1] <{operandSegmentSizes = array<i32: 1, 1, 0>}> : (i1, i32) -> ()
^bb1:
  "cf.br"(%t, %zero) [^bb2] : (i32, i32) -> ()
^bb2(%i: i32, %s: i32):
  %s2 = "ptx.add"(%s, %i) {mods = ["s32"]} : (i32, i32) -> i32
  %ub = "ptx.ld"(%p) {mods = ["global", "s32"], offset = 0 : i64} : (i64) -> i32
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %c = "ptx.setp"(%i2, %ub) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c, %i2, %s2) [^bb2, ^bb3] <{operandSegmentSizes = array<i32: 1, 2, 0>}> : (i1, i32, i32) -> ()
^bb3:
  "cf.br"(%s2) [^bb4] : (i32) -> ()
^bb4(%r: i32):
  "ptx.st"(%p, %r) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # must not fire: an irreducible cycle (two entries, ^bb1 and ^bb2)
    "irreducible": PROLOGUE + '''
  %c = "ptx.setp"(%t, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c, %zero, %n) [^bb1, ^bb2] <{operandSegmentSizes = array<i32: 1, 1, 1>}> : (i1, i32, i32) -> ()
^bb1(%a: i32):
  %a2 = "ptx.add"(%a, %one) {mods = ["s32"]} : (i32, i32) -> i32
  "cf.br"(%a2) [^bb2] : (i32) -> ()
^bb2(%b: i32):
  %d = "ptx.setp"(%b, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%d, %b) [^bb1, ^bb3] <{operandSegmentSizes = array<i32: 1, 1, 0>}> : (i1, i32) -> ()
^bb3:
  "ptx.st"(%p, %b) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
    # a loop with two exits (a break): raised with an exit flag (tests/test_structured_exits.py)
    "two_exits": PROLOGUE + '''
  "cf.br"(%zero) [^bb1] : (i32) -> ()
^bb1(%i: i32):
  %brk = "ptx.setp"(%i, %t) {mods = ["eq", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%brk) [^bb3, ^bb2] <{operandSegmentSizes = array<i32: 1, 0, 0>}> : (i1) -> ()
^bb2:
  %i2 = "ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32
  %c = "ptx.setp"(%i2, %n) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c, %i2) [^bb1, ^bb4] <{operandSegmentSizes = array<i32: 1, 1, 0>}> : (i1, i32) -> ()
^bb3:
  "ptx.st"(%p, %i) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "cf.br"() [^bb4] : () -> ()
^bb4:
  "upir.exit"() : () -> ()''',
    # must not fire: one arm ends the thread (upir.exit inside)
    "exit_in_arm": PROLOGUE + '''
  %c = "ptx.setp"(%t, %n) {mods = ["ge", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c) [^bb1, ^bb2] <{operandSegmentSizes = array<i32: 1, 0, 0>}> : (i1) -> ()
^bb1:
  "upir.exit"() : () -> ()
^bb2:
  "ptx.st"(%p, %t) {mods = ["global", "s32"], offset = 0 : i64} : (i64, i32) -> ()
  "upir.exit"() : () -> ()''',
}


def raised(name: str) -> tuple[str, str]:
    """(the IR before, the IR after raise-structured-cf) of BODIES[name], verified."""
    op = parse_op(kernel(BODIES[name]))
    verify(op)
    before = print_op(op)
    run_pipeline(op, PipelineOptions(passes=("raise-structured-cf",), verify_each=True))
    return before, print_op(op)


def test_if_triangle() -> None:
    filecheck(raised("if")[1], r'''
    CHECK: "ptx.setp"
    CHECK: = "upir.if"({{%\d+}}) ({
    CHECK-NEXT: "ptx.add"
    CHECK-NEXT: "upir.yield"({{%\d+}}) {line = 9 : i64} : (i32) -> ()
    CHECK-NEXT: }, {
    CHECK-NEXT: "upir.yield"({{%\d+}}) {edge = unit} : (i32) -> ()
    CHECK-NEXT: }) {line = 7 : i64} : (i1) -> i32
    CHECK-NEXT: "cf.br"
    CHECK: "ptx.st"
    CHECK: structured_cf = [["if", 1 : i64], ["while", 0 : i64], ["for", 0 : i64]], cfg_left = []
    ''')


def test_if_else_barrier_after_the_join() -> None:
    filecheck(raised("if_else")[1], r'''
    CHECK: "upir.if"
    CHECK-NEXT: "ptx.add"
    CHECK-NEXT: "upir.yield"
    CHECK-NEXT: }, {
    CHECK-NEXT: "ptx.sub"
    CHECK-NEXT: "upir.yield"
    CHECK: ^bb1({{%\d+}}: i32):
    CHECK-NEXT: "upir.barrier"
    ''')


def test_while_not_counted() -> None:
    filecheck(raised("while")[1], r'''
    CHECK: = "upir.while"({{%\d+}}) ({
    CHECK-NEXT: ^bb0({{%\d+}}: i32):
    CHECK-NEXT: "ptx.setp"
    CHECK-NEXT: "upir.condition"
    CHECK-NEXT: }, {
    CHECK-NEXT: ^bb0({{%\d+}}: i32):
    CHECK-NEXT: "ptx.shr"
    CHECK-NEXT: "upir.yield"
    CHECK-NEXT: }) : (i32) -> i32
    CHECK-NOT: "cf.cond_br"
    CHECK: ["while", 1 : i64]
    ''')


def test_counted_loop_is_a_for() -> None:
    filecheck(raised("for")[1], r'''
    CHECK: = "upir.for"({{%\d+}}, {{%\d+}}, {{%\d+}}, {{%\d+}}) ({
    CHECK-NEXT: ^bb0({{%\d+}}: i32, {{%\d+}}: i32):
    CHECK-NEXT: "ptx.add"
    CHECK-NEXT: "upir.barrier"
    CHECK-NEXT: "upir.yield"({{%\d+}}) : (i32) -> ()
    CHECK-NEXT: }) {predicate = ["lt", "s32"], increment = ["s32"], predicate_line = 30 : i64, increment_line = 33 : i64} : (i32, i32, i32, i32) -> i32
    CHECK: ["for", 1 : i64]
    ''')


def test_nested_loops_with_barriers() -> None:
    text = raised("nested")[1]
    filecheck(text, r'''
    CHECK: "upir.while"
    CHECK: "upir.barrier"
    CHECK: "upir.while"
    CHECK: "upir.if"
    CHECK: "upir.barrier"
    CHECK: "upir.condition"
    CHECK: "upir.condition"
    CHECK: structured_cf = [["if", 1 : i64], ["while", 2 : i64], ["for", 0 : i64]], cfg_left = []
    ''')
    # the outer loop left on the true side of its branch: the continue test is its negation
    assert '"ptx.not"' in text and "structured_negation = true" in text


def test_loop_entered_from_two_places() -> None:
    filecheck(raised("two_entries")[1], r'''
    CHECK: = "upir.if"
    CHECK: "cf.br"({{%\d+}}) [^bb1]
    CHECK: ^bb1({{%\d+}}: i32):
    CHECK-NEXT: = "upir.while"
    CHECK: "upir.barrier"
    CHECK: "upir.condition"
    CHECK: structured_cf = [["if", 1 : i64], ["while", 1 : i64], ["for", 0 : i64]], cfg_left = []
    ''')


@pytest.mark.parametrize("name, why", [
    ("irreducible", "irreducible cycle"),
    ("exit_in_arm", "branch with no join"),
])
def test_must_not_fire(name: str, why: str) -> None:
    before, after = raised(name)
    assert why in after
    # the IR is unchanged (but for what the pass records)
    assert _canonical(after) == _canonical(before)


def _canonical(text: str) -> str:
    """The kernel's IR with its block body's blocks in reverse post-order (the lowering
    may order blocks differently; the CFG must be the same)."""
    op = parse_op(text)
    region = block_body(op)
    order = reverse_postorder(region)
    region.blocks = order + [b for b in region.blocks if b not in set(order)]
    op.attributes.pop("structured_cf", None)
    bp = region.parent
    assert bp is not None
    bp.attributes.pop("structured_cf", None)
    bp.attributes.pop("cfg_left", None)
    bp.attributes.pop("while_not_for", None)
    return print_op(op)


@pytest.mark.parametrize("name", sorted(BODIES))
def test_raise_then_lower_is_the_same_cfg(name: str) -> None:
    before, after = raised(name)
    op = parse_op(after)
    verify(op)
    lower_structured_control_flow(op)
    verify(op)
    assert "upir.if" not in print_op(op) and "upir.while" not in print_op(op)
    assert _canonical(print_op(op)) == _canonical(before)


def test_pass_manager_lowers_before_a_cfg_pass() -> None:
    """A pass of form "cfg" after the raise works on the CFG (the pass manager lowers first),
    and the pipeline hands on the structured form (it raises again after the last pass;
    tests/test_pass_forms.py checks what each pass finds)."""
    op = parse_op(kernel(BODIES["nested"]))
    result = run_pipeline(op, PipelineOptions(passes=("raise-structured-cf", "barrier-elimination"),
                                              verify_each=True))
    assert result.transitions == [("lower", "barrier-elimination"), ("raise", "")]
    assert "upir.while" in print_op(op)


@pytest.mark.parametrize("text, message", [
    ('%c = "upir.const"() {value = 1 : i64} : () -> i1\n'
     '%r = "upir.if"(%c) ({\n "upir.yield"() : () -> ()\n}, {\n "upir.yield"() : () -> ()\n}) : (i1) -> i32\n'
     '"upir.exit"() : () -> ()', "a yield of the then region has types ()"),
    ('%c = "upir.const"() {value = 1 : i64} : () -> i32\n'
     '"upir.if"(%c) ({\n "upir.yield"() : () -> ()\n}, {\n "upir.yield"() : () -> ()\n}) : (i32) -> ()\n'
     '"upir.exit"() : () -> ()', "takes one i1 condition"),
    ('%c = "upir.const"() {value = 1 : i64} : () -> i1\n'
     '"upir.if"(%c) ({\n %x = "upir.const"() {value = 1 : i64} : () -> i32\n "upir.yield"() : () -> ()\n}, '
     '{\n "upir.yield"() : () -> ()\n}) : (i1) -> ()\n'
     '"ptx.st"(%x, %x) {mods = ["global", "s32"], offset = 0 : i64} : (i32, i32) -> ()\n'
     '"upir.exit"() : () -> ()', "does not enclose it"),
    ('%c = "upir.const"() {value = 1 : i64} : () -> i1\n'
     '"upir.condition"(%c) : (i1) -> ()', "before region only"),
    ('%z = "upir.const"() {value = 1 : i64} : () -> i32\n'
     '"upir.while"(%z) ({\n^bb0(%a: i32):\n "upir.yield"(%a) : (i32) -> ()\n}, {\n^bb0(%b: i32):\n'
     ' "upir.yield"(%b) : (i32) -> ()\n}) : (i32) -> ()\n"upir.exit"() : () -> ()', "no 'upir.condition'"),
])
def test_verifier_rejects(text: str, message: str) -> None:
    with pytest.raises(IRError, match=message):
        verify(parse_op(kernel(text)))


def test_mlir_after_the_pass_is_read_by_xdsl_and_round_trips() -> None:
    from test_mlir_export import xdsl_name, xdsl_parse
    for name in ("for", "nested", "two_exits", "guarded_for", "guarded_for_spelled"):
        text = raised(name)[1]
        module = xdsl_parse(text)
        seen = {xdsl_name(op) for op in module.walk()}
        assert {"upir.while", "upir.for"} & seen
        assert print_op(parse_op(text)) == text


# --- end to end ------------------------------------------------------------------------

SOURCE = r'''
extern "C" __global__ void tiles(float *out, const float *in, int n, int m) {
    __shared__ float s[64];
    int t = threadIdx.x;
    float acc = 0;
    for (int i = 0; i < n; i++) {                 // a loop with barriers and ifs inside
        s[t] = in[(i * 64 + t) % m];
        __syncthreads();
        if (t & 1) acc += s[63 - t]; else acc -= 0.5f * s[t];
        int k = t;
        while (k > 1) { acc += 0.25f * s[k & 63]; k >>= 1; }   // a while in each thread
        __syncthreads();
    }
    if (t < n) out[blockIdx.x * 64 + t] = acc; else out[blockIdx.x * 64 + t] = -acc;
}
'''


def _reference(inp: np.ndarray, n: int, m: int, blocks: int) -> np.ndarray:
    out = np.zeros(blocks * 64, np.float32)
    for b in range(blocks):
        for t in range(64):
            acc = np.float32(0)
            for i in range(n):
                s = inp[(i * 64 + np.arange(64)) % m]
                acc = np.float32(acc + s[63 - t]) if t & 1 else np.float32(acc - np.float32(0.5) * s[t])
                k = t
                while k > 1:
                    acc = np.float32(acc + np.float32(0.25) * s[k & 63])
                    k >>= 1
            out[b * 64 + t] = acc if t < n else -acc
    return out


@pytest.mark.parametrize("raise_cf", [True, False])
def test_kernel_with_and_without_the_pass(raise_cf: bool) -> None:
    rng = np.random.default_rng(3)
    n, m, blocks = 5, 300, 2
    inp = rng.standard_normal(m).astype(np.float32)
    want = _reference(inp, n, m, blocks)
    options = () if raise_cf else ("--disable-pass=raise-structured-cf",)
    fn = cpuify.RawModule(SOURCE, options=options).get_function("tiles")
    out = np.zeros(blocks * 64, np.float32)
    fn((blocks,), (64,), (out, inp, np.int32(n), np.int32(m)))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    # the interpreter on the printed IR after the whole pipeline (the pass on or off)
    ptx = compile_to_ptx(SOURCE).ptx
    module = parse_ptx(ptx)
    op = lift_kernel(module, module.functions["tiles"]).op
    passes = PipelineOptions(disabled=frozenset() if raise_cf else frozenset({"raise-structured-cf"}),
                             verify_each=True)
    run_pipeline(op, passes)
    text = print_op(op)
    assert ('"upir.while"' in text) == raise_cf
    interp = InterpModule(ptx)
    interp.use_ir("tiles", parse_op(text))
    got = np.zeros(blocks * 64, np.float32)
    interp.launch("tiles", (blocks,), (64,), [got, inp, np.int32(n), np.int32(m)])
    np.testing.assert_array_equal(got, out)


def test_explain_shows_the_structure(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "tiles.cu"
    src.write_text(SOURCE)
    assert main(["explain", str(src)]) == 0
    out = capsys.readouterr().out
    assert "structured control flow: " in out and " while" in out
    assert main(["explain", str(src), "--disable-pass=raise-structured-cf"]) == 0
    assert "structured control flow" not in capsys.readouterr().out
    assert main(["ir", str(src), "--print-ir-after=raise-structured-cf"]) == 0
    err = capsys.readouterr().err
    assert "after raise-structured-cf" in err and '"upir.while"' in err


# fz_2701_15 (the fuzzer, seed 2701): an `if` holding a shuffle inside a loop whose trip count
# differs by warp; one round of the lowering left the `if` behind in the block body, and code
# generation refused the kernel ("no code generation for 'upir.if'").
NESTED_IF = r'''
extern "C" __global__ void nested_if(const unsigned *iu, double *out) {
  const unsigned lt = threadIdx.x, warp = lt >> 5, bid = blockIdx.x;
  const unsigned gt = bid * blockDim.x + lt;
  unsigned u0 = iu[(gt * 11u + 248u) & 255u];
  double d1 = 0.0;
  for (unsigned i1 = 0u; i1 < (warp % 3u); i1++) {
    d1 += 2.0;
    if ((warp ^ bid) & 1u) {
      u0 = u0 * 3u + i1;
      d1 += __shfl_up_sync(0xFFFFFFFFu, 0.5 * u0, 16u);
    }
  }
  out[gt * 2u] = (double)u0; out[gt * 2u + 1u] = d1;
}'''


def _nested_if_reference(iu: np.ndarray, blocks: int, threads: int) -> np.ndarray:
    out = np.zeros((blocks * threads, 2))
    for bid in range(blocks):
        for w in range(threads // 32):
            gts = bid * threads + w * 32 + np.arange(32)
            u0 = iu[(gts * 11 + 248) & 255].astype(np.uint64)
            d1 = np.zeros(32)
            for i1 in range(w % 3):
                d1 += 2.0
                if (w ^ bid) & 1:
                    u0 = (u0 * 3 + i1) & 0xFFFFFFFF
                    v = 0.5 * u0.astype(np.float64)
                    d1 += np.concatenate([v[:16], v[:16]])    # shfl_up by 16: lanes < 16 keep theirs
            out[gts, 0], out[gts, 1] = u0, d1
    return out.ravel()


def test_lowering_leaves_no_structured_op_behind() -> None:
    module = parse_ptx(compile_to_ptx(NESTED_IF).ptx)
    kernel = lift_kernel(module, module.functions["nested_if"]).op
    run_pipeline(kernel, PipelineOptions(verify_each=True))
    assert any(o.name.startswith("upir.") and o.regions for o in kernel.walk()
               if o.name in ("upir.if", "upir.while", "upir.for"))
    lower_structured_control_flow(kernel)
    assert not [o.name for o in kernel.walk() if o.name in ("upir.if", "upir.while", "upir.for")]
    verify(kernel)


def test_if_with_a_shuffle_in_a_loop_runs() -> None:
    iu = (np.arange(256, dtype=np.uint64) * 2654435761 % 2**32).astype(np.uint32)
    want = _nested_if_reference(iu, 2, 128)
    fn = cpuify.RawModule(code=NESTED_IF).get_function("nested_if")
    for run in ("generic", "specialized"):
        out = np.zeros(2 * 256)
        fn((2,), (128,), (iu, out))
        np.testing.assert_array_equal(out, want, err_msg=run)
