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

from cpuify.analysis.manager import AnalysisManager
from cpuify.ir.core import Operation, OpResult, Value, replace_all_uses
from cpuify.ir.structure import block_body
from cpuify.transforms.pass_manager import register

_INT_TYPES = ("s32", "u32", "s64", "u64")
#: setp comparison -> (min or max when the select picks its first operand on true)
_PICKS_FIRST = {"gt": "max", "ge": "max", "lt": "min", "le": "min"}
_SWAPPED = {"max": "min", "min": "max"}


@register("selects-to-min-max",
          "integer selects on a compare of their own operands turned into min/max")
@dataclass(frozen=True)
class SelectsToMinMax:
    """Pass: `selp(a, b, setp.gt(a, b))` -> `max(a, b)` (and the other orders)."""
    name: str = "selects-to-min-max"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of selects rewritten."""
        count = 0
        for block in block_body(kernel).blocks:
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
