"""`speculate-selected-loads`: a shared-memory load at an index chosen per thread becomes two
loads and a select of their values.

    int w = gx > 0 ? tx - 1 : tx;   ... s[ty][w] ...
    nvcc:  selp.b32 d, -1, 0, p;  shl.b32 o, d, 2;  add.s32 a, row, o;  ld.shared.f32 v, [a]

A load through the select is a gather in the vectorised thread loop (its address is no
affine function of the thread index); `p ? s[row - 1] : s[row]` is two loads that are each
affine (contiguous vector loads) and a blend.  The pass rewrites

    ld [base + f(selp(a, b, p))]   ->   selp(ld [base + f(a)], ld [base + f(b)], p)

where f is index arithmetic (add, sub, shl or mul by a constant, mad, mov, integer
conversions) and the two addresses are a constant `delta` bytes apart: both sides constants,
or the same value plus different constants (`tx - 1` and `tx`).  Speculating the load that
the thread does not select is safe when it cannot fault: the selected address is in the
block's shared segment (the program's own access), so the other lies within |delta| bytes of
it, inside the guard band the runtime keeps readable before and after every shared buffer
(runtime/cpuify_rt.c CPUIFY_BUFFER_GUARD, 256 bytes; the pass's `guard` option).  The pass
records the band it relies on on the kernel (`shared_guard`, bytes on each side) and code
generation refuses a kernel that needs more than the runtime keeps.  Each load it adds for
the side a thread may not select carries `speculative`: the reference interpreter reads such
a load outside the shared window as an arbitrary value (0), not as an error.

Not rewritten: loads of other spaces (a global neighbour's address may lie on an unmapped
page), volatile, relaxed/acquire and other ordered loads, vector loads, selects whose condition does not follow the thread index (all threads of a block take
the same side: the load is contiguous already), and addresses whose sides are not a
constant distance apart (`min(tx + 1, nx - 1)` against a bound only known at run time: the
code generator's clamped loads handle those)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cpuify.analysis.manager import AnalysisManager
from cpuify.analysis.pointers import memory_space
from cpuify.analysis.uniformity import uses_special
from cpuify.ir.core import Block, Operation, OpResult, Value, replace_all_uses
from cpuify.ir.structure import block_body
from cpuify.ir.structured import nested_blocks
from cpuify.transforms.pass_manager import register

#: the integer arithmetic an address may go through between the select and the load
_INDEX_OPS = ("ptx.add", "ptx.sub", "ptx.shl", "ptx.mul", "ptx.mad", "ptx.mov", "ptx.cvt")
#: load modifiers of a plain shared load (state space, vector width, element type)
_PLAIN_LOAD_MODS = frozenset(("shared", "shared::cta", "weak"))
_BITS = {"i8": 8, "i16": 16, "i32": 32, "i64": 64}
#: how deep the address arithmetic and the condition's dependence on %tid are followed
_DEPTH = 8


@register("speculate-selected-loads",
          "shared loads at a per-thread selected index turned into two loads and a select")
@dataclass(frozen=True)
class SpeculateSelectedLoads:
    """Pass: `ld.shared [f(selp(a, b, p))]` -> `selp(ld [f(a)], ld [f(b)], p)` where the two
    addresses are at most `guard` bytes apart (module doc).  A rewrite of single loads: it
    works on the CFG and in the regions of structured ops alike."""
    name: str = "speculate-selected-loads"
    guard: int = 256
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of loads rewritten."""
        count = 0
        needed = int(kernel.attributes.get("shared_guard", 0) or 0)
        for block in list(nested_blocks(block_body(kernel))):
            i = 0
            while i < len(block.ops):
                op = block.ops[i]
                plan = selected_load(op, self.guard)
                if plan is None:
                    i += 1
                    continue
                chain, sel, delta = plan
                i = _split(block, i, op, chain, sel)
                needed = max(needed, abs(delta))
                count += 1
        if count:
            kernel.attributes["shared_guard"] = needed
        return count


def selected_load(op: Operation, guard: int) -> tuple[list[Operation], Operation, int] | None:
    """For a plain shared load whose address goes through one integer select of a
    thread-dependent condition, sides at most `guard` minus the access size bytes apart:
    (the ops from the select up to the address, in order; the select; the distance in bytes
    between the address with the select's first side and with its second); else None.
    (Vector loads, several results, are left alone.)"""
    if op.name != "ptx.ld" or len(op.operands) != 1 or len(op.results) != 1:
        return None
    if memory_space(op) != "shared" or "speculative" in op.attributes:
        return None
    mods = op.attributes.get("mods", [])
    types = [m for m in mods if m not in _PLAIN_LOAD_MODS]
    if len(types) != 1 or types[0][:1] not in "subf" or not types[0][1:].isdigit():
        return None         # volatile, ordered, cached-hint or otherwise special loads
    size = int(types[0][1:]) // 8
    found = _select_under(op.operands[0])
    if found is None:
        return None
    chain, sel = found
    a, b, cond = sel.operands
    if not uses_special(cond, "%tid", 12):
        return None         # one side for the whole block: the load is affine already
    slope, unsigned = _slope(op.operands[0], chain, sel)
    if slope is None:
        return None
    diff = _side_difference(a, b, sel.results[0].type, unsigned)
    if diff is None:
        return None
    delta = slope * diff
    if abs(delta) > guard - size:
        return None
    return chain, sel, delta


def _select_under(addr: Value) -> tuple[list[Operation], Operation] | None:
    """(the index-arithmetic ops from the select up to `addr`, defs before uses; the select)
    when addr is such arithmetic over exactly one integer `ptx.selp`."""
    found: list[Operation] = []
    order: list[Operation] = []
    seen: dict[Value, bool] = {}

    def walk(v: Value, depth: int) -> bool:
        if v in seen:
            return seen[v]
        hit = False
        if isinstance(v, OpResult) and depth <= _DEPTH:
            op = v.op
            if op.name == "ptx.selp" and len(op.operands) == 3 and op.results[0].type in _BITS:
                if op not in found:
                    found.append(op)
                hit = True
            elif op.name in _INDEX_OPS and len(op.results) == 1:
                hits = [walk(o, depth + 1) for o in op.operands]
                if any(hits):
                    order.append(op)
                    hit = True
        seen[v] = hit
        return hit

    walk(addr, 0)
    if len(found) != 1 or not order:
        return None
    return order, found[0]


def _type_mod(op: Operation) -> str:
    return next((m for m in op.attributes.get("mods", []) if m[:1] in "subf" and m[1:].isdigit()), "")


def _slope(addr: Value, chain: list[Operation], sel: Operation) -> tuple[int | None, bool]:
    """(how many bytes the address moves per unit of the select's value, whether a
    zero-extension lies on the way) when the way from the select to addr is linear: every op
    on it has one operand on the way and moves it by a constant factor; else (None, ...)."""
    on_way = {sel.results[0]} | {o.results[0] for o in chain}
    slope: dict[Value, int] = {sel.results[0]: 1}
    unsigned = False
    for op in chain:
        ins = [k for k, o in enumerate(op.operands) if o in on_way]
        if len(ins) != 1:
            return None, unsigned       # (the select's value reaches it twice)
        k = ins[0]
        inner = slope[op.operands[k]]
        mods = op.attributes.get("mods", [])
        if op.name == "ptx.cvt":
            types = [m for m in mods if m[:1] in "subf" and m[1:].isdigit()]
            if len(types) != 2 or "f" in (types[0][0], types[1][0]):
                return None, unsigned
            if int(types[0][1:]) < int(types[1][1:]):
                return None, unsigned   # a truncation may wrap the two sides apart
            unsigned |= types[1][0] == "u" and int(types[0][1:]) > int(types[1][1:])
            s = inner
        elif op.name in ("ptx.mov", "ptx.add"):
            s = inner
        elif op.name == "ptx.sub":
            s = inner if k == 0 else -inner
        elif op.name == "ptx.shl" and k == 0:
            amount = _const(op.operands[1])
            if amount is None or not 0 <= amount < 32:
                return None, unsigned
            s = inner << amount
        elif op.name in ("ptx.mul", "ptx.mad") and k < 2:
            if "hi" in mods:
                return None, unsigned
            if "wide" in mods and _type_mod(op).startswith("u"):
                unsigned = True
            factor = _const(op.operands[1 - k])
            if factor is None:
                return None, unsigned
            s = inner * _signed(factor, _BITS.get(op.operands[1 - k].type, 64))
        elif op.name == "ptx.mad" and k == 2:
            s = inner
        else:
            return None, unsigned
        slope[op.results[0]] = s
    return slope[addr], unsigned


def _side_difference(a: Value, b: Value, type_: str, unsigned: bool) -> int | None:
    """a - b when it is a constant: two constants (signed at the select's width unless a
    zero-extension follows), or one value plus two constants (not through a zero-extension,
    where `x - 1` and `x` are 2^32 - 1 apart at x = 0)."""
    bits = _BITS[type_]
    ca, cb = _const(a), _const(b)
    if ca is not None and cb is not None:
        if unsigned:
            return ca - cb
        return _signed(ca, bits) - _signed(cb, bits)
    if unsigned:
        return None
    (ra, ka), (rb, kb) = _base_and_offset(a, bits), _base_and_offset(b, bits)
    if ra is not rb:
        return None
    return ka - kb


def _base_and_offset(v: Value, bits: int) -> tuple[Value, int]:
    """v as (a value, a constant) whose sum it is, through adds and subtractions of
    constants."""
    offset = 0
    for _ in range(_DEPTH):
        if not isinstance(v, OpResult) or v.op.name not in ("ptx.add", "ptx.sub") or \
                len(v.op.operands) != 2 or "f" in _type_mod(v.op)[:1]:
            break
        x, y = v.op.operands
        cy, cx = _const(y), _const(x)
        if cy is not None:
            offset += _signed(cy, bits) if v.op.name == "ptx.add" else -_signed(cy, bits)
            v = x
        elif cx is not None and v.op.name == "ptx.add":
            offset += _signed(cx, bits)
            v = y
        else:
            break
    return v, offset


def _const(v: Value) -> int | None:
    if isinstance(v, OpResult) and v.op.name == "upir.const":
        value = v.op.attributes.get("value")
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _signed(x: int, bits: int) -> int:
    x &= (1 << bits) - 1
    return x - (1 << bits) if x >= 1 << (bits - 1) else x


def _split(block: Block, index: int, load: Operation, chain: list[Operation],
           sel: Operation) -> int:
    """Replace `load` (block.ops[index]) by the loads at the select's two sides (the chain of
    address arithmetic copied for each) and a select of their values; the arithmetic and
    select left unused are removed.  Returns the index in `block` after the new select."""
    a, b, cond = sel.operands
    line = load.attributes.get("line", 0)
    new: list[Operation] = []
    loads = []
    for side in (a, b):
        values: dict[Value, Value] = {sel.results[0]: side}
        for op in chain:
            copy = Operation(op.name, [values.get(o, o) for o in op.operands],
                             [r.type for r in op.results], dict(op.attributes))
            new.append(copy)
            values[op.results[0]] = copy.results[0]
        attrs = dict(load.attributes)
        attrs["speculative"] = None
        side_load = Operation("ptx.ld", [values[load.operands[0]]], [load.results[0].type], attrs)
        new.append(side_load)
        loads.append(side_load)
    t = load.results[0].type
    blend = Operation("ptx.selp", [loads[0].results[0], loads[1].results[0], cond], [t],
                      {"mods": [_selp_type(t)], "line": line})
    new.append(blend)
    for op in new:
        op.parent = block
    block.ops[index:index + 1] = new
    replace_all_uses(load.results[0], blend.results[0])
    load.drop_uses()
    for op in [*reversed(chain), sel]:
        # (the address arithmetic no other op reads: gone, not kept across barriers)
        if not any(r.uses for r in op.results) and op.parent is not None:
            op.parent.ops.remove(op)
            op.drop_uses()
    return block.ops.index(blend) + 1


def _selp_type(t: str) -> str:
    return {"f32": "f32", "f64": "f64", "i64": "b64", "i16": "b16"}.get(t, "b32")
