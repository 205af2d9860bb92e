"""Which threads a condition on one thread index selects (evaluated per thread index)."""

from __future__ import annotations

import math

from cpuify.ir.core import OpResult, Operation, Value

_TID_DIMS = {"%tid.x": 0, "%tid.y": 1, "%tid.z": 2}


def _int_of(x: int, t: str) -> int:
    """x read as PTX integer type t (wraps; signed types are two's complement)."""
    bits = 64 if t.endswith("64") else 16 if t.endswith("16") else 8 if t.endswith("8") else 32
    x &= (1 << bits) - 1
    if t.startswith("s") and x >= 1 << (bits - 1):
        x -= 1 << bits
    return x


def _eval_on_thread(v: Value, dim_value: dict[int, int], depth: int = 0) -> int | bool | None:
    """v computed from one thread index and constants, for the thread index values in
    dim_value ({dim: t}); None for anything else (a load, a parameter, another special)."""
    if depth > 12 or not isinstance(v, OpResult):
        return None
    op = v.op
    if op.name == "upir.const":
        val = op.attributes["value"]
        return bool(val) if v.type == "i1" else val if isinstance(val, int) else None
    if op.name == "upir.special":
        dim = _TID_DIMS.get(op.attributes.get("reg", ""))
        return dim_value.get(dim) if dim is not None else None
    mods = op.attributes.get("mods", [])
    args = [_eval_on_thread(o, dim_value, depth + 1) for o in op.operands]
    if any(a is None for a in args):
        return None
    t = next((m for m in mods if m[:1] in "sub" and m[1:].isdigit()), "b32")
    name = op.name
    if name in ("ptx.mov", "ptx.cvt") and len(args) == 1 and len(op.results) == 1:
        return args[0]
    if v.type == "i1" or "pred" in mods:
        a = [bool(x) for x in args]
        if name == "ptx.not":
            return not a[0]
        if name in ("ptx.and", "ptx.or", "ptx.xor") and len(a) == 2:
            return {"ptx.and": a[0] and a[1], "ptx.or": a[0] or a[1], "ptx.xor": a[0] != a[1]}[name]
        if name != "ptx.setp" or len(args) != 2:
            return None
        x, y = (_int_of(int(a), "u32" if t.startswith("b") else t) for a in args)
        cmp = next((m for m in mods if m in _SETP), None)
        return _SETP[cmp](x, y) if cmp else None
    ints = [int(a) for a in args]
    ops2 = {"ptx.and": lambda x, y: x & y, "ptx.or": lambda x, y: x | y,
            "ptx.xor": lambda x, y: x ^ y, "ptx.add": lambda x, y: x + y,
            "ptx.sub": lambda x, y: x - y, "ptx.shl": lambda x, y: x << y,
            "ptx.shr": lambda x, y: x >> y,
            "ptx.rem": lambda x, y: None if y == 0 else int(math.fmod(x, y)),
            "ptx.div": lambda x, y: None if y == 0 else int(x / y)}
    if name == "ptx.mul" and "lo" in mods and len(ints) == 2:
        return _int_of(ints[0] * ints[1], t)
    if name in ops2 and len(ints) == 2:
        x, y = (_int_of(i, t) for i in ints)
        r = ops2[name](x, y)
        return None if r is None else _int_of(r, t)
    return None


_SETP = {"eq": lambda x, y: x == y, "ne": lambda x, y: x != y,
         "lt": lambda x, y: x < y, "lo": lambda x, y: x < y,
         "le": lambda x, y: x <= y, "ls": lambda x, y: x <= y,
         "gt": lambda x, y: x > y, "hi": lambda x, y: x > y,
         "ge": lambda x, y: x >= y, "hs": lambda x, y: x >= y}


def thread_index_condition(cond: Value, block_dims: tuple[int, int, int]
                           ) -> tuple[int, list[int]] | None:
    """(dim, the thread indices t in [0, block_dims[dim]) for which `cond` holds) when cond
    depends on threadIdx along one dimension only, through integer arithmetic with constants
    (`tx == 0`, `t < k`, `(ty & 3) == 0`, ...); None otherwise."""
    dims = {_TID_DIMS[op.attributes.get("reg", "")] for op in _special_ops(cond)
            if op.attributes.get("reg", "") in _TID_DIMS}
    if len(dims) != 1:
        return None
    (dim,) = dims
    true_for = []
    for t in range(block_dims[dim]):
        r = _eval_on_thread(cond, {dim: t})
        if r is None:
            return None
        if r:
            true_for.append(t)
    return dim, true_for


def _special_ops(v: Value, depth: int = 0) -> list[Operation]:
    if depth > 12 or not isinstance(v, OpResult):
        return []
    if v.op.name == "upir.special":
        return [v.op]
    return [s for o in v.op.operands for s in _special_ops(o, depth + 1)]


#: thread-index-ranges' mark on a `cf.cond_br` whose condition is a function of one thread
#: index (transforms/thread_ranges.py): [dim, the block's extent along dim it was computed
#: for]; with, per way, (start, stop, step) along dim of the threads that take it, where
#: those are an arithmetic progression (empty: [0, 0, 1])
THREAD_INDEX_IF = "thread_index_if"
THREADS_TAKING = ("threads_true", "threads_false")


def progression(work: list[int]) -> tuple[int, int, int] | None:
    """(start, stop, step) with range(start, stop, step) == work (sorted); (0, 0, 1) for
    none; None unless work is an arithmetic progression."""
    if not work:
        return 0, 0, 1
    lo, step, hi = work[0], (work[1] - work[0] if len(work) > 1 else 1), work[-1] + 1
    return (lo, hi, step) if work == list(range(lo, hi, step)) else None


def mark_thread_index_if(branch: Operation, block_dims: tuple[int, int, int],
                         condition: Value | None = None) -> bool:
    """Records on `branch` (a cf.cond_br, or a structured op that becomes one) which threads
    take each of its ways, when its condition (`condition`, else its first operand) is a
    function of one thread index; whether it did."""
    found = thread_index_condition(branch.operands[0] if condition is None else condition,
                                   block_dims)
    if found is None:
        return False
    dim, true_for = found
    false_for = sorted(set(range(block_dims[dim])) - set(true_for))
    branch.attributes[THREAD_INDEX_IF] = [dim, block_dims[dim]]
    for key, work in zip(THREADS_TAKING, (true_for, false_for)):
        box = progression(work)
        if box is None:
            branch.attributes.pop(key, None)
        else:
            branch.attributes[key] = list(box)
    return True


def marked_threads(branch: Operation, way: int, block_dims: tuple[int, int, int]
                   ) -> tuple[int, tuple[int, int, int]] | None:
    """(dim, (start, stop, step)) of the threads that take successor `way` of a branch
    thread-index-ranges marked for this block shape; None when it is unmarked, marked for
    another extent, or those threads are no arithmetic progression."""
    mark = branch.attributes.get(THREAD_INDEX_IF)
    if mark is None:
        return None
    dim, extent = (int(x) for x in mark)
    box = branch.attributes.get(THREADS_TAKING[way])
    if block_dims[dim] != extent or box is None:
        return None
    lo, hi, step = (int(x) for x in box)
    return dim, (lo, hi, step)
