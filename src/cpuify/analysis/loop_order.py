"""Which loop of a block-uniform serial loop and the thread loop should be innermost, read
from the loop's memory accesses.

A loop that every thread of the block runs the same way (`for (c = 0; c < cols; c++)`)
can run as `for thread: for c:` (each thread's own loop innermost) or, interchanged, as
`for c: for thread:` (the thread loop innermost).  Only the innermost loop vectorizes, and
it vectorizes well when its accesses are contiguous in *its* index:

* `x[c * n + tid]` (a column per thread): consecutive threads read consecutive elements;
  interchanged, one iteration of all threads is one vector load.
* `x[row * cols + c]` with `row = blockIdx.x * blockDim.x + threadIdx.x` (a row per
  thread, the naive row softmax): consecutive threads are `cols` elements apart and each
  thread walks its own row; interchanged, every vector access is a gather or a scatter,
  while the thread's own loop reads its row with contiguous vector loads.

Each access of the loop is described by how its address moves in one thread per iteration
(`within_step`, bytes, constant or unknown) and how it differs between threads at the same
iteration (`across`: the same address in every thread, `consecutive` threads one element
apart, or `strided`: any other dependence on the thread).  The caller also needs to know
what the loop carries per thread in floating point: a min/max reduction is exactly
reorderable (PTX's min/max are those of a total order: the vectorizer may split it into
lanes and combine them at the end, bit for bit), a sum is not (its additions must stay in
order, so the thread's own loop can only run them one after another)."""

from __future__ import annotations

from dataclasses import dataclass

from cpuify.analysis.cfg import incoming_values
from cpuify.analysis.induction import increment_terms
from cpuify.ir.core import (
    Block,
    BlockArgument,
    Operation,
    OpResult,
    Value,
    defining_block,
)
from cpuify.ir.modifiers import mods, ty, type_size

#: ops whose address operand (operand 0) the analysis reads
_MEMORY = ("ptx.ld", "ptx.ldu", "ptx.st")
#: a thread's address moving by at most this many bytes per iteration stays within one
#: cache line per iteration: its own loop reads memory contiguously
CONTIGUOUS_STEP = 64
#: f32/f64 min/max modifiers that keep the op an exactly reorderable reduction
_MIN_MAX_MODS = frozenset({"f32", "f64", "ftz", "NaN"})

UNIFORM = "uniform"
CONSECUTIVE = "consecutive"
STRIDED = "strided"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class LoopAccess:
    """One load or store of a loop: the bytes its address moves per iteration in one thread
    (None: not a constant), and how addresses of different threads relate at one iteration
    (UNIFORM: the same address in neighbouring threads along x, CONSECUTIVE: one access
    apart, STRIDED: further apart by a constant or block-uniform amount, UNKNOWN)."""
    op: Operation
    within_step: int | None
    across: str


@dataclass(frozen=True)
class LoopOrder:
    """The accesses of one loop (`other`: memory effects the analysis does not describe:
    atomics, calls, accesses whose address it cannot follow) and the kinds of its
    per-thread floating-point carried values."""
    accesses: tuple[LoopAccess, ...]
    other: int
    #: per-thread f32/f64 values the loop carries: "min/max" or "in order"
    carried: tuple[str, ...]

    def contiguous_within_thread(self) -> bool:
        """Every access walks memory contiguously in its own thread, some are strided across
        threads and none is consecutive across threads (one read at the same address by all
        threads, `w[c]`, is contiguous in either order): the thread's own loop is the one
        to vectorize."""
        return not self.other and any(a.across == STRIDED for a in self.accesses) and all(
            a.across != CONSECUTIVE and a.within_step is not None and
            0 < abs(a.within_step) <= CONTIGUOUS_STEP for a in self.accesses)

    def contiguous_across_threads(self) -> bool:
        """Every access is consecutive across threads or the same in all of them, some are
        consecutive, and none of those walks memory contiguously in its own thread (a
        column per thread, `a[i * n + tid]`; a thread's fixed address, `r[tid]` read each
        iteration, is contiguous in either order): interchanged, an iteration of all
        threads is one vector access; in each thread, every iteration is a cache line of
        its own."""
        return not self.other and any(a.across == CONSECUTIVE for a in self.accesses) and all(
            a.across in (CONSECUTIVE, UNIFORM) for a in self.accesses) and not any(
            a.across == CONSECUTIVE and a.within_step is not None and
            0 < abs(a.within_step) <= CONTIGUOUS_STEP for a in self.accesses)

    def reorderable(self) -> bool:
        """Every per-thread floating-point value the loop carries is a min/max reduction."""
        return all(kind == "min/max" for kind in self.carried)

    def describe(self) -> str:
        counts: dict[str, int] = {}
        for a in self.accesses:
            step = "contiguous in the thread" if a.within_step is not None and \
                0 < abs(a.within_step) <= CONTIGUOUS_STEP else "not contiguous in the thread"
            key = f"{a.across} across threads, {step}"
            counts[key] = counts.get(key, 0) + 1
        parts = [f"{n} {k}" for k, n in counts.items()]
        if self.other:
            parts.append(f"{self.other} not analysed")
        sums = sum(1 for k in self.carried if k != "min/max")
        if sums:
            parts.append(f"{sums} in-order float value(s) carried")
        return "; ".join(parts) or "no memory accesses"


def loop_order(header: Block, body: set[Block], uniform: set[Value],
               incoming: dict[BlockArgument, list[Value]] | None = None) -> LoopOrder:
    """The accesses of the loop (`header`, its blocks `body`) as LoopAccess, in program
    order; `uniform`: the values equal in every thread of the block; `incoming`: the
    region's incoming_values, when the caller has them (one computation for all loops)."""
    region = header.parent
    assert region is not None
    if incoming is None:
        incoming = incoming_values(region)
    blocks = [b for b in region.blocks if b in body]
    return loop_order_of(header.args, body, [op for b in blocks for op in b.ops], uniform,
                         incoming)


def loop_order_of(args: list[BlockArgument], body: set[Block], ops: list[Operation],
                  uniform: set[Value], incoming: dict[BlockArgument, list[Value]], *,
                  increments: dict[BlockArgument, list[Value]] | None = None,
                  same: dict[Value, Value] | None = None) -> LoopOrder:
    """loop_order for a loop given by what it reads of it: the arguments of its header (the
    values it carries), its blocks, its ops in program order, and the values flowing into
    block arguments.  `increments`: steps no op computes (a `upir.for`'s induction
    variable moves by its step on every back edge); `same`: values that stand for others
    (a while's after-region arguments for the values its condition passes, which the
    lowering puts in their place).  analysis/structured_loops.py gives them for loop ops."""
    same = same or {}
    # leaves of address expressions: block-uniform values fixed for the whole loop, and the
    # induction variables (whose steps say how the address moves)
    invariant = {v for v in uniform if defining_block(v) not in body}
    steps = _induction_steps(args, body, incoming, invariant, increments or {}, same)
    memos: tuple[dict, dict, dict] = ({}, {}, {})  # type: ignore[type-arg]
    accesses: list[LoopAccess] = []
    other = 0
    for op in ops:
        if op.name in _MEMORY and op.operands:
            found = _describe(op, steps, incoming, body, uniform, memos, same)
            if found is None:
                other += 1
            else:
                accesses.append(found)
        elif op.name in ("ptx.atom", "ptx.red", "upir.call", "ptx.call"):
            other += 1
    carried = tuple(_carried_kind(arg, incoming, body, ops, same) for arg in args
                    if arg.type in ("f32", "f64") and arg not in uniform)
    return LoopOrder(tuple(accesses), other, carried)


def _induction_steps(args: list[BlockArgument], body: set[Block],
                     incoming: dict[BlockArgument, list[Value]],
                     invariant: set[Value], increments: dict[BlockArgument, list[Value]],
                     same: dict[Value, Value]) -> dict[Value, int | None]:
    """Integer header arguments that move by the same amount on every back edge: that
    constant, or None for a block-uniform amount fixed for the loop (`n * 4`)."""
    out: dict[Value, int | None] = {}
    for arg in args:
        if arg.type not in ("i32", "i64"):
            continue
        step: int | None = None
        ok, seen = True, False
        backs: list[list[Value] | None] = [
            increment_terms(arg, v, same) for v in incoming.get(arg, [])
            if defining_block(v) in body]           # (the others: initial values)
        if arg in increments:
            backs.append(increments[arg])
        for terms in backs:
            if terms is None or any(_const(t) is None and t not in invariant for t in terms):
                ok = False
                break
            consts = [_const(t) for t in terms]
            s: int | None = None if None in consts else sum(c for c in consts if c is not None)
            if seen and s != step:
                ok = False
                break
            step, seen = s, True
        if ok and seen:
            out[arg] = step
    return out


def _const(v: Value) -> int | None:
    if isinstance(v, OpResult) and v.op.name == "upir.const" and isinstance(v.op.attributes.get("value"), int):
        value = v.op.attributes["value"]
        bits = int(v.type[1:]) if v.type.startswith("i") and v.type[1:].isdigit() else 64
        return value - (1 << bits) if value >= 1 << (bits - 1) else value
    return None


def _describe(op: Operation, steps: dict[Value, int | None],
              incoming: dict[BlockArgument, list[Value]], body: set[Block],
              uniform: set[Value], memos: tuple[dict, dict, dict],  # type: ignore[type-arg]
              same: dict[Value, Value]) -> LoopAccess | None:
    """The access of `op` (a load or store): its address's stride per iteration in one
    thread and between neighbouring threads, evaluated through the address arithmetic
    (None: the address is not linear in the induction variables or the thread index)."""
    address = op.operands[0]
    size = type_size(ty(op)) * (4 if "v4" in mods(op) else 2 if "v2" in mods(op) else 1)
    within_memo, across_memo, start_memo = memos

    def outside(v: Value) -> bool:
        return defining_block(v) not in body

    def within_leaf(v: Value) -> object:
        if v in steps:
            step = steps[v]
            return SYMBOLIC if step is None else step
        if outside(v):
            return 0                        # fixed for the whole loop in each thread
        return None if isinstance(v, BlockArgument) else _INSIDE

    def across_leaf(v: Value) -> object:
        if v in steps:                      # an induction variable: as its initial values
            return _across_start(v, incoming, body, uniform, start_memo)  # type: ignore[arg-type]
        if outside(v):
            return tid_x_stride(v, uniform, start_memo)
        return None if isinstance(v, BlockArgument) else _INSIDE

    within = _stride(address, within_leaf, outside, within_memo, same=same)
    across = _stride(address, across_leaf, lambda v: v in uniform, across_memo, same=same)
    if across is None:
        kind = UNKNOWN
    elif across == 0:
        kind = UNIFORM
    elif across == size:
        kind = CONSECUTIVE
    else:
        kind = STRIDED
    if within is None and across is None:
        return None
    return LoopAccess(op, within if isinstance(within, int) else None, kind)


def _across_start(arg: BlockArgument, incoming: dict[BlockArgument, list[Value]],
                  body: set[Block], uniform: set[Value], memo: dict  # type: ignore[type-arg]
                  ) -> int | str | None:
    """The stride between neighbouring threads of an induction variable's initial values
    (None when they differ in kind or are not linear in the thread index)."""
    strides = {tid_x_stride(v, uniform, memo) for v in incoming.get(arg, [])
               if defining_block(v) not in body}
    return strides.pop() if len(strides) == 1 else None


#: a stride that is a block-uniform value times a constant (`row * cols`: cols elements)
SYMBOLIC = "symbolic"


#: a leaf function's answer for a value it does not decide: evaluate its op's operands
_INSIDE = object()
_TID_X = "%tid.x"
_OTHER_TIDS = ("%tid.y", "%tid.z")


def tid_x_stride(v: Value, uniform: set[Value], memo: dict[Value, int | str | None]
                 ) -> int | str | None:
    """How much v grows from one thread to the next along x, where v is linear in
    threadIdx.x: a constant, SYMBOLIC (a block-uniform amount: `(blockIdx.x * blockDim.x +
    threadIdx.x) * cols`), or None (not linear in it, or not followed).  Integer arithmetic
    is taken not to wrap (as cpuify.analysis.access.affine_form takes it)."""
    def leaf(x: Value) -> object:
        if x in uniform:
            return 0
        if isinstance(x, OpResult) and x.op.name == "upir.special":
            reg = x.op.attributes.get("reg")
            return 1 if reg == _TID_X else 0 if reg in _OTHER_TIDS else None
        return _INSIDE
    return _stride(v, leaf, lambda x: x in uniform, memo)


def _stride(v: Value, leaf, invariant, memo: dict,  # type: ignore[no-untyped-def,type-arg]
            depth: int = 0, same: dict[Value, Value] | None = None) -> int | str | None:
    """The amount v grows by when the variables `leaf` gives strides for grow by theirs (a
    constant, SYMBOLIC: a constant times a value `invariant` holds fixed, or None: not
    linear).  `leaf(x)` answers for x, or _INSIDE to evaluate x's op.  `same`: values
    that stand for others (loop_order_of)."""
    if same:
        v = same.get(v, v)
    got = leaf(v)
    if got is not _INSIDE:
        return got  # type: ignore[no-any-return]
    if v in memo:
        return memo[v]  # type: ignore[no-any-return]
    result: int | str | None = None
    if isinstance(v, OpResult) and depth <= 24:
        op = v.op
        m = mods(op)
        ops = op.operands

        def of(x: Value) -> int | str | None:
            return _stride(x, leaf, invariant, memo, depth + 1, same)

        if op.name == "upir.const":
            result = 0
        elif op.name == "upir.special" or "f32" in m or "f64" in m or "hi" in m or \
                "sat" in m or "cc" in m:
            result = None
        elif op.name in ("ptx.mov", "ptx.cvt", "ptx.cvta") and len(ops) == 1 and len(op.results) == 1:
            result = of(ops[0])
        elif op.name in ("ptx.add", "ptx.sub") and len(ops) == 2:
            a, b = of(ops[0]), of(ops[1])
            if a is None or b is None:
                result = None
            elif SYMBOLIC in (a, b):
                result = SYMBOLIC if (a, b).count(0) == 1 else None
            else:
                result = a + b if op.name == "ptx.add" else a - b  # type: ignore[operator]
        elif op.name == "ptx.shl" and len(ops) == 2 and _const(ops[1]) is not None:
            a, k = of(ops[0]), _const(ops[1])
            result = a if a in (None, SYMBOLIC) else a << k  # type: ignore[operator]
        elif op.name in ("ptx.mul", "ptx.mad") and len(ops) >= 2:
            a, b = of(ops[0]), of(ops[1])
            prod: int | str | None
            if a == 0 and b == 0:
                prod = 0
            elif a == 0 or b == 0:
                # a growing factor times a fixed one: a constant, or one `invariant` holds
                # fixed (a block-uniform `cols`); another fixed one is no single stride
                fixed = ops[0] if a == 0 else ops[1]
                grows = b if a == 0 else a
                k = _const(fixed)
                if grows is None:
                    prod = None
                elif k is not None and grows != SYMBOLIC:
                    prod = grows * k  # type: ignore[operator]
                elif k is not None or invariant(fixed):
                    prod = SYMBOLIC
                else:
                    prod = None
            else:
                prod = None                 # a product of two growing values
            if op.name == "ptx.mad" and prod is not None:
                c = of(ops[2])
                prod = None if c is None else prod + c if isinstance(prod, int) and \
                    isinstance(c, int) else SYMBOLIC if 0 in (prod, c) else None  # type: ignore[operator]
            result = prod
    memo[v] = result
    return result


def _carried_kind(arg: BlockArgument, incoming: dict[BlockArgument, list[Value]],
                  body: set[Block], ops: list[Operation], same: dict[Value, Value]) -> str:
    """"min/max" when every value the loop carries back into `arg` is `arg` combined with
    other values by f32/f64 min/max only (each step reading arg's chain once), else
    "in order"."""
    # the values of the loop computed from arg (the loop body is acyclic apart from its
    # header's arguments: one pass in program order)
    from_arg: set[Value] = {arg}
    for op in ops:
        if any(same.get(o, o) in from_arg for o in op.operands):
            from_arg.update(op.results)
    for v in incoming.get(arg, []):
        if defining_block(v) not in body:
            continue
        v = same.get(v, v)
        while v is not arg:
            if not isinstance(v, OpResult):
                return "in order"
            op = v.op
            through = [same.get(o, o) for o in op.operands if same.get(o, o) in from_arg]
            if len(through) != 1 or not (
                    op.name == "ptx.mov" or
                    op.name in ("ptx.min", "ptx.max") and set(mods(op)) <= _MIN_MAX_MODS):
                return "in order"
            v = through[0]
    return "min/max"


__all__ = ["CONSECUTIVE", "STRIDED", "SYMBOLIC", "UNIFORM", "UNKNOWN", "LoopAccess", "LoopOrder",
           "loop_order", "tid_x_stride"]
