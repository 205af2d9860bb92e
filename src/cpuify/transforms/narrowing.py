"""Narrowing of 64-bit loop arithmetic whose high half nobody reads.

Cooperative groups index a grid-stride loop with 64-bit values:

    for (int i = g.thread_rank(); i < n; i += g.size()) ...

`thread_rank()` and `size()` are `unsigned long long`, `i` is an `int`: nvcc carries `i` in a
64-bit register and truncates it (`cvt.s64.s32`, `cvt.u32.u64`, `shl 32; shr.s 30`) wherever
it is read, so the loop's step is `sext(trunc(i)) + size` and no induction variable is seen.
Modulo 2^32 the same loop is `i32 = i32 + trunc(size)`, exactly, whatever wraps: the low 32
bits of a sum, difference or product depend only on the low 32 bits of its operands.  When
every read of a loop-carried 64-bit value and of everything computed from it looks only at
the low 32 bits, this pass computes the whole web in 32 bits instead (the reads get the
32-bit value, sign- or zero-extended where they extended it), and the loop is the one
written with `blockIdx`/`blockDim`/`gridDim`: a thread-strided loop that
interchange-thread-strided-loops recognizes and the code generator vectorizes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cpuify.analysis.cfg import cyclic_blocks
from cpuify.analysis.induction import LowBits, _extends_low_half, _truncates, low_bits_only
from cpuify.analysis.manager import AnalysisManager
from cpuify.ir.core import (
    Block,
    BlockArgument,
    Operation,
    OpResult,
    Region,
    Value,
    defining_block,
    replace_all_uses,
    reverse_postorder,
)
from cpuify.ir.dialects import STRUCTURED_OPS
from cpuify.ir.structure import block_body
from cpuify.ir.structured import lower_structured_control_flow, nested_blocks
from cpuify.ir.structured_values import has_nested_structure
from cpuify.transforms.pass_manager import register

_NARROW = {"s64": "s32", "u64": "u32", "b64": "b32"}


@register("narrow-induction-variables",
          "64-bit loop-carried values whose high half is never read computed in 32 bits "
          "(cooperative groups' grid-stride loops)")
@dataclass(frozen=True)
class NarrowInductionVariables:
    """Pass: rewrite each web of 64-bit values around a loop-carried block argument that is
    only ever read through its low 32 bits as 32-bit arithmetic."""
    name: str = "narrow-induction-variables"
    #: either form: on the structured form it first asks whether anything may narrow (a
    #: 64-bit value merged by a loop or an if read through a truncation) and lowers the
    #: kernel only then (the pass manager sees the CFG it leaves and raises it again where a
    #: pass needs it); most kernels have none, and keep the structured form
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of loop-carried values narrowed."""
        region = block_body(kernel)
        if has_nested_structure(region):
            if not may_narrow(region):
                return 0
            lower_structured_control_flow(kernel)
        return narrow_induction_variables(region)


def may_narrow(region: Region) -> bool:
    """Whether a block body in structured form may hold a web to narrow: a 64-bit value
    merged by a loop or an if (a block argument, a structured op's result) read through a
    truncation or a low-half extension.  The lowered CFG's merged values are among these
    (their reads with them), so False means that analysis/induction.py's `low_bits_only`
    finds nothing on the CFG either."""
    for b in nested_blocks(region):
        for v in [*b.args, *(r for op in b.ops if op.name in STRUCTURED_OPS for r in op.results)]:
            if v.type == "i64" and any(_truncates(u) or _extends_low_half(u) for u in v.uses):
                return True
    return False


def narrow_induction_variables(region: Region) -> int:
    """Narrow the webs of low-32-bit-only values that carry a value around a loop; returns
    how many loop-carried block arguments became 32-bit."""
    low = low_bits_only(region)
    if not low.values:
        return 0
    cyclic = cyclic_blocks(region)
    reachable = set(reverse_postorder(region))
    # program order, so that the narrowed IR is the same in every run (webs are sets)
    position: dict[Value, tuple[int, int]] = {}
    for i, block in enumerate(region.blocks):
        for a in block.args:
            position[a] = (i, a.index)
        for j, op in enumerate(block.ops):
            for r in op.results:
                position[r] = (i, len(block.args) + j)
    done = 0
    webs = sorted(low.webs(), key=lambda web: min(position.get(v, (0, 0)) for v in web))
    for web in webs:
        carried = [v for v in web if isinstance(v, BlockArgument) and v.block in cyclic]
        if carried and all(defining_block(v) in reachable for v in web):
            _narrow(region, web, low, position)
            done += len(carried)
    return done


def _trunc(x: Value, line: object) -> Operation:
    return Operation("ptx.cvt", [x], ["i32"], {"mods": ["u32", "u64"], "line": line})


def _insert_after_def(region: Region, x: Value, op: Operation) -> None:
    if isinstance(x, OpResult):
        block = x.op.parent
        assert block is not None
        block.ops.insert(block.ops.index(x.op) + 1, op)
    else:
        assert isinstance(x, BlockArgument)
        block = x.block
        block.ops.insert(0, op)
    op.parent = block


def _narrow(region: Region, web: set[Value], low: LowBits,
            position: dict[Value, tuple[int, int]]) -> None:
    shadow: dict[Value, Value] = {}
    truncations: set[Operation] = set()     # the ones made here (not reads to rewrite)

    def narrow_of(x: Value, line: object) -> Value:
        """The 32-bit value equal to x's low half."""
        if x.type == "i32":
            return x
        got = shadow.get(x)
        if got is None:             # a 64-bit value from outside the web: truncate it once
            t = _trunc(x, line)
            truncations.add(t)
            _insert_after_def(region, x, t)
            got = shadow[x] = t.results[0]
        return got

    args = sorted((v for v in web if isinstance(v, BlockArgument)), key=lambda a: position[a])
    for a in args:
        shadow[a] = a.block.add_arg("i32", a.hint)
    removed: list[Operation] = []
    for block in reverse_postorder(region):
        for op in list(block.ops):
            if not op.results or op.results[0] not in web or op.results[0] in shadow:
                continue
            r = op.results[0]
            line = op.attributes.get("line", 0)
            kind = low.kind.get(r)
            if kind == "extend":        # cvt.s64.s32 / cvt.u64.u32: its low half is the source's
                shadow[r] = narrow_of(op.operands[0], line)
            elif kind == "arith":
                new = _narrow_op(op, [narrow_of(o, line) if o.type == "i64" else o
                                      for o in op.operands])
                _insert_after_def(region, r, new)
                shadow[r] = new.results[0]
            else:                       # a load, a parameter: kept, read through a truncation
                narrow_of(r, line)
                continue
            removed.append(op)
    # the edges into narrowed block arguments pass the narrowed values
    for a in args:
        for p in region.blocks:
            term = p.terminator
            if term is None:
                continue
            for k, succ in enumerate(term.successors):
                if succ is a.block:
                    v = narrow_of(term.successor_args[k][a.index],
                                  term.attributes.get("line", 0))
                    term.successor_args[k].append(v)
                    v.uses.append(term)
    # the reads of the low half now read the narrowed values
    for x in sorted(web, key=lambda v: position.get(v, (0, 0))):
        for user in list(x.uses):
            if user in removed or user in truncations or user.successors:
                continue
            line = user.attributes.get("line", 0)
            if user.name == "ptx.cvt" and user.results[0].type == "i32":
                replace_all_uses(user.results[0], narrow_of(x, line))
                user.drop_uses()
                assert user.parent is not None
                user.parent.ops.remove(user)
            elif user.name == "ptx.cvt":            # an extension of the low half
                user.set_operand(0, narrow_of(x, line))
            elif user.name == "ptx.shl":            # x << 32 (or more): the low half, shifted
                wide = Operation("ptx.cvt", [narrow_of(x, line)], ["i64"],
                                 {"mods": ["u64", "u32"], "line": line})
                assert user.parent is not None
                user.parent.ops.insert(user.parent.ops.index(user), wide)
                wide.parent = user.parent
                user.set_operand(0, wide.results[0])
    # the 64-bit web is dead now: its ops, then its block arguments
    for op in reversed(removed):
        assert op.parent is not None
        op.drop_uses()
        op.parent.ops.remove(op)
    for a in sorted(args, key=lambda a: -a.index):
        block = a.block
        for p in region.blocks:
            term = p.terminator
            if term is None:
                continue
            for k, succ in enumerate(term.successors):
                if succ is block:
                    gone = term.successor_args[k].pop(a.index)
                    gone.uses.remove(term)
        block.args.pop(a.index)
        for i, b in enumerate(block.args):
            b.index = i
    for a in args:
        assert not a.uses, "narrow-induction-variables: a narrowed value is still read"
        assert all(not r.uses for op in removed for r in op.results), \
            "narrow-induction-variables: a narrowed value is still read"
    for block in dict.fromkeys(a.block for a in args):
        _merge_equal_args(region, block)


def _same_value(x: Value) -> Value:
    """x without the copies (`mov`s of the same type) it is made of."""
    while isinstance(x, OpResult) and x.op.name == "ptx.mov" and len(x.op.operands) == 1 \
            and x.op.operands[0].type == x.type:
        x = x.op.operands[0]
    return x


def _merge_equal_args(region: Region, block: Block) -> None:
    """Block arguments that receive the same value on every edge are one value: nvcc often
    carries `int i` twice (the 64-bit register and a 32-bit copy), which after narrowing
    are two equal 32-bit arguments, each kept per thread across sync points."""
    edges = [(p.terminator, k) for p in region.blocks if p.terminator is not None
             for k, succ in enumerate(p.terminator.successors) if succ is block]
    k = 0
    while k < len(block.args):
        a = block.args[k]
        twin = next((b for b in block.args[:k] if b.type == a.type and all(
            _same_value(term.successor_args[i][b.index]) is
            _same_value(term.successor_args[i][a.index]) for term, i in edges)), None)
        if twin is None:
            k += 1
            continue
        replace_all_uses(a, twin)
        for term, i in edges:
            gone = term.successor_args[i].pop(a.index)
            gone.uses.remove(term)
        block.args.pop(a.index)
        for j, b in enumerate(block.args):
            b.index = j


def _narrow_op(op: Operation, operands: list[Value]) -> Operation:
    """The 32-bit form of a 64-bit op whose result's low half depends only on the low
    halves of its operands."""
    mods = [_NARROW.get(m, m) for m in op.attributes.get("mods", [])]
    if op.name == "ptx.shl":
        return Operation("ptx.shl", operands, ["i32"], {"mods": ["b32"],
                                                        "line": op.attributes.get("line", 0)})
    return Operation(op.name, operands, ["i32"], {**op.attributes, "mods": mods})

