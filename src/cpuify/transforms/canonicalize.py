"""Canonical forms that later passes and the code generator recognize.

`selects-to-min-max`: nvcc writes `max(x, 0)` as a compare and a select when it reuses the
compare for something else (`int w = gx > 0 ? tx - 1 : tx; int lx = max(gx, 0);` becomes
`setp.gt.s32 p, gx, 0; selp.b32 lx, gx, 0, p`).  As a select, the clamp hides that `lx`
grows with the thread index; as `max.s32` it is a clamp that the code generator checks
once per block (a stencil's interior blocks then load their rows with contiguous vector
loads instead of gathers)."""

from __future__ import annotations

import struct

from dataclasses import dataclass
from typing import ClassVar

from cpuify.analysis.manager import AnalysisManager
from cpuify.ir.core import Operation, OpResult, Region, Value, replace_all_uses
from cpuify.ir.dialects import info
from cpuify.ir.structure import block_body
from cpuify.ir.structured import nested_blocks
from cpuify.transforms.pass_manager import register

_INT_TYPES = ("s32", "u32", "s64", "u64")
#: setp comparison -> (min or max when the select picks its first operand on true)
_PICKS_FIRST = {"gt": "max", "ge": "max", "lt": "min", "le": "min"}
_SWAPPED = {"max": "min", "min": "max"}


@register("selects-to-min-max",
          "integer selects on a compare of their own operands turned into min/max")
@dataclass(frozen=True)
class SelectsToMinMax:
    """Pass: `selp(a, b, setp.gt(a, b))` -> `max(a, b)` (and the other orders).  A rewrite
    of single ops: it works on the CFG and in the regions of structured ops alike."""
    name: str = "selects-to-min-max"
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of selects rewritten."""
        count = 0
        for block in nested_blocks(block_body(kernel)):
            for i, op in enumerate(block.ops):
                new = _min_max_of(op)
                if new is None:
                    continue
                new.parent = block
                block.ops[i] = new
                replace_all_uses(op.results[0], new.results[0])
                op.drop_uses()
                count += 1
        return count


def _same(a: Value, b: Value) -> bool:
    """The same value, or equal constants (floats bit for bit: not -0.0 and 0.0)."""
    if a is b:
        return True
    if not (isinstance(a, OpResult) and isinstance(b, OpResult) and a.op.name == "upir.const"
            and b.op.name == "upir.const" and a.type == b.type):
        return False
    x, y = a.op.attributes.get("value"), b.op.attributes.get("value")
    if isinstance(x, float) or isinstance(y, float):
        return isinstance(x, float) and isinstance(y, float) and \
            struct.pack("<d", x) == struct.pack("<d", y)
    return x == y


def _min_max_of(op: Operation) -> Operation | None:
    """The min/max op equivalent to the select `op`, or None."""
    if op.name != "ptx.selp" or len(op.operands) != 3 or op.results[0].type not in ("i32", "i64"):
        return None
    a, b, p = op.operands
    if not isinstance(p, OpResult) or p.op.name != "ptx.setp" or len(p.op.operands) != 2 \
            or len(p.op.results) != 1:
        return None
    mods = p.op.attributes.get("mods", [])
    cmp = next((m for m in mods if m in _PICKS_FIRST), None)
    t = next((m for m in mods if m in _INT_TYPES), None)
    if cmp is None or t is None or len(mods) != 2:
        return None
    if (t.endswith("64")) != (op.results[0].type == "i64"):
        return None
    x, y = p.op.operands
    kind = _PICKS_FIRST[cmp]
    if _same(x, a) and _same(y, b):
        pass                            # a > b ? a : b
    elif _same(x, b) and _same(y, a):
        kind = _SWAPPED[kind]           # b > a ? a : b
    else:
        return None
    return Operation(f"ptx.{kind}", [a, b], [op.results[0].type],
                     {"mods": [t], "line": op.attributes.get("line", 0)})


# --- thread-index terms outermost in 32-bit index sums ----------------------------------------

@register("thread-index-outermost",
          "32-bit index sums reassociated so that the thread-dependent term is added last "
          "(the rest the same along threadIdx.x): the thread loop's index stays a no-wrap recurrence")
@dataclass(frozen=True)
class ThreadIndexOutermost:
    """Pass: `(A + t) + B` -> `(A + B) + t` (and `a * b + (A + t)` -> `(a * b + A) + t`) for 32-bit indices (`nsw`: they only feed sign
    extensions to 64-bit addresses), A and B the same along threadIdx.x (the dimension the
    thread loop vectorizes), t not.

    nvcc writes `a[(row0 + ty) * n + col0 + tx]` as `r * n + (col0 + tx)`; LLVM reassociates
    it to `(r * n + col0) + tx` itself but drops the no-wrap flags on the way, and the
    vectorized thread loop then checks at run time that the 32-bit index does not wrap,
    with a scalar copy of the loop beside the vector one (lu_tile: the rows of threads then
    run one after another).  Written here in that order, both additions keep `nsw`, as the
    source's `int` arithmetic allows."""
    name: str = "thread-index-outermost"
    #: a rewrite of single ops, in the regions of structured ops too (the uniformity and
    #: no-wrap analyses read either form)
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of sums reassociated."""
        from cpuify.analysis.pointers import no_signed_wrap
        from cpuify.analysis.structured_uniformity import structured_uniform_values
        from cpuify.analysis.uniformity import uniform_values
        from cpuify.ir.structured_values import has_nested_structure
        region = block_body(kernel)
        structured = has_nested_structure(region)
        blocks = list(nested_blocks(region)) if structured else region.blocks
        uniform = structured_uniform_values(region) if structured else uniform_values(region)
        along_x = _same_along_x(region, uniform)
        nsw = no_signed_wrap(region)
        count = 0
        for block in blocks:
            i = 0
            while i < len(block.ops):
                op = block.ops[i]
                new = _reassociated(op, along_x, nsw)
                if new is not None:
                    for k, n in enumerate(new):
                        n.parent = block
                        block.ops.insert(i + k, n)
                    i += len(new)
                    replace_all_uses(op.results[0], new[-1].results[0])
                    block.ops.remove(op)
                    op.drop_uses()
                    for v in op.operands:       # the inner sum, when nothing else reads it
                        if isinstance(v, OpResult) and not v.uses and v.op.parent is not None:
                            v.op.parent.ops.remove(v.op)
                            v.op.drop_uses()
                            if v.op.parent is block:
                                i -= 1
                    count += 1
                    continue
                i += 1
        return count


def _index_add(op: Operation, nsw: set[Value]) -> bool:
    m = op.attributes.get("mods", [])
    return op.name == "ptx.add" and m in (["s32"], ["u32"]) and op.results[0] in nsw


def _same_along_x(region: Region, uniform: set[Value]) -> set[Value]:
    """The values that do not vary with threadIdx.x: block-uniform ones, and pure arithmetic
    on them and on threadIdx.y/z (in the op order of the blocks, those of structured ops'
    regions after the blocks that hold them; block arguments and structured ops' results
    that are not uniform count as varying)."""
    out = set(uniform)
    for block in nested_blocks(region):
        for op in block.ops:
            if len(op.results) != 1 or op.results[0] in out or op.regions:
                continue
            if op.name == "upir.special":
                if str(op.attributes.get("reg", "")) in ("%tid.y", "%tid.z"):
                    out.add(op.results[0])
            elif op.name.startswith("ptx.") and info(op).pure and op.operands and \
                    all(v in out for v in op.operands):
                out.add(op.results[0])
    return out


def _reassociated(op: Operation, uniform: set[Value], nsw: set[Value]) -> list[Operation] | None:
    """[A + B, (A + B) + t] for `op` = (A + t) + B or B + (A + t) (either order inside),
    where the inner sum is an index add too, A and B in `uniform`, t not; None otherwise."""
    if op.name == "ptx.mad" and op.attributes.get("mods") in (["lo", "s32"], ["lo", "u32"]) \
            and op.results[0] in nsw and all(v.type == "i32" for v in op.operands) \
            and op.operands[0] in uniform and op.operands[1] in uniform:
        # a * b + (A + t) -> (a * b + A) + t
        inner = op.operands[2]
        if not isinstance(inner, OpResult) or not _index_add(inner.op, nsw):
            return None
        x, y = inner.op.operands
        if (x in uniform) == (y in uniform):
            return None
        a, t = (x, y) if x in uniform else (y, x)
        line = op.attributes.get("line", 0)
        m = op.attributes["mods"]
        first = Operation("ptx.mad", [op.operands[0], op.operands[1], a], ["i32"],
                          {"mods": list(m), "line": line})
        second = Operation("ptx.add", [first.results[0], t], ["i32"],
                           {"mods": [m[1]], "line": line})
        return [first, second]
    if not _index_add(op, nsw) or not all(v.type == "i32" for v in op.operands):
        return None
    for inner_at in (0, 1):
        inner, b = op.operands[inner_at], op.operands[1 - inner_at]
        if b not in uniform or not isinstance(inner, OpResult) or not _index_add(inner.op, nsw) \
                or inner in uniform:
            continue
        x, y = inner.op.operands
        if x in uniform and y not in uniform:
            a, t = x, y
        elif y in uniform and x not in uniform:
            a, t = y, x
        else:
            continue
        line = op.attributes.get("line", 0)
        mods_ = list(op.attributes["mods"])
        first = Operation("ptx.add", [a, b], ["i32"], {"mods": mods_, "line": line})
        second = Operation("ptx.add", [first.results[0], t], ["i32"],
                           {"mods": list(mods_), "line": line})
        return [first, second]
    return None
