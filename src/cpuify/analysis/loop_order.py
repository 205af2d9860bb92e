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

from cpuify.analysis.access import affine_form
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
    (UNIFORM: the same address in every thread, CONSECUTIVE: neighbouring threads one
    access apart, STRIDED: further apart by a constant or block-uniform amount, UNKNOWN)."""
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
    # leaves of address expressions: block-uniform values fixed for the whole loop, and the
    # induction variables (whose steps say how the address moves)
    invariant = {v for v in uniform if defining_block(v) not in body}
    steps = _induction_steps(header, body, incoming, invariant)
    leaves: set[Value] = invariant | set(steps)
    memo: dict = {}  # type: ignore[type-arg]
    accesses: list[LoopAccess] = []
    other = 0
    blocks = [b for b in region.blocks if b in body]
    for b in blocks:
        for op in b.ops:
            if op.name in _MEMORY and op.operands:
                found = _describe(op, leaves, steps, incoming, body, uniform, memo)
                if found is None:
                    other += 1
                else:
                    accesses.append(found)
            elif op.name in ("ptx.atom", "ptx.red", "upir.call", "ptx.call"):
                other += 1
    carried = tuple(_carried_kind(arg, incoming, body, blocks) for arg in header.args
                    if arg.type in ("f32", "f64") and arg not in uniform)
    return LoopOrder(tuple(accesses), other, carried)


def _induction_steps(header: Block, body: set[Block],
                     incoming: dict[BlockArgument, list[Value]],
                     invariant: set[Value]) -> dict[Value, int | None]:
    """Integer header arguments that move by the same amount on every back edge: that
    constant, or None for a block-uniform amount fixed for the loop (`n * 4`)."""
    out: dict[Value, int | None] = {}
    for arg in header.args:
        if arg.type not in ("i32", "i64"):
            continue
        step: int | None = None
        ok, seen = True, False
        for v in incoming.get(arg, []):
            if defining_block(v) not in body:
                continue                    # an initial value
            terms = increment_terms(arg, v)
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


def _describe(op: Operation, leaves: set[Value], steps: dict[Value, int | None],
              incoming: dict[BlockArgument, list[Value]], body: set[Block],
              uniform: set[Value], memo: dict) -> LoopAccess | None:  # type: ignore[type-arg]
    address = op.operands[0]
    form = affine_form(address, leaves, 0, memo)
    if form is None:
        return None
    terms, _ = form
    within: int | None = 0
    across: set[str] = set()
    size = type_size(ty(op)) * (4 if "v4" in mods(op) else 2 if "v2" in mods(op) else 1)
    for leaf, coef in terms.items():
        if isinstance(leaf, tuple) and leaf and leaf[0] == "tid":
            across.add(CONSECUTIVE if leaf[1] == 0 and coef == size else
                       STRIDED if leaf[1] == 0 else UNKNOWN)
        elif leaf in steps:
            step = steps[leaf]  # type: ignore[index]
            within = None if within is None or step is None else within + coef * step
            start = _across_at_start(leaf, incoming, body, uniform, size)  # type: ignore[arg-type]
            across.add(start if coef == 1 or start in (UNIFORM, UNKNOWN) else STRIDED)
        elif isinstance(leaf, Value) and leaf not in uniform:
            across.add(UNKNOWN)
    kind = next((k for k in (UNKNOWN, STRIDED, CONSECUTIVE) if k in across), UNIFORM)
    return LoopAccess(op, within, kind)


def _across_at_start(arg: BlockArgument, incoming: dict[BlockArgument, list[Value]],
                     body: set[Block], uniform: set[Value], size: int) -> str:
    """How the initial values of an induction variable differ between threads."""
    kinds = set()
    for v in incoming.get(arg, []):
        if defining_block(v) not in body:
            kinds.add(_across(v, uniform, size))
    for kind in (UNKNOWN, STRIDED, CONSECUTIVE):
        if kind in kinds:
            return kind
    return UNIFORM


def _across(v: Value, uniform: set[Value], size: int) -> str:
    """How v differs between neighbouring threads (threadIdx.x and threadIdx.x + 1)."""
    if v in uniform:
        return UNIFORM
    stride = tid_x_stride(v, uniform, {})
    if stride == size:
        return CONSECUTIVE
    if stride == SYMBOLIC or isinstance(stride, int) and stride != 0:
        return STRIDED
    return UNKNOWN          # not linear in the thread index, or varying in y/z only


#: a stride that is a block-uniform value times a constant (`row * cols`: cols elements)
SYMBOLIC = "symbolic"


def tid_x_stride(v: Value, uniform: set[Value], memo: dict[Value, int | str | None],
                 depth: int = 0) -> int | str | None:
    """How much v grows from one thread to the next along x, where v is linear in
    threadIdx.x: a constant, SYMBOLIC (a block-uniform amount: `(blockIdx.x * blockDim.x +
    threadIdx.x) * cols`), or None (not linear in it, or not followed).  Integer arithmetic
    is taken not to wrap, as for affine_form."""
    if v in uniform:
        return 0
    if v in memo:
        return memo[v]
    result: int | str | None = None
    if isinstance(v, OpResult) and depth <= 24:
        op = v.op
        m = mods(op)
        ops = op.operands

        def of(x: Value) -> int | str | None:
            return tid_x_stride(x, uniform, memo, depth + 1)

        if op.name == "upir.special":
            reg = op.attributes.get("reg")
            result = 1 if reg == "%tid.x" else None
        elif "f32" in m or "f64" in m or "hi" in m or "sat" in m or "cc" in m:
            result = None
        elif op.name in ("ptx.mov", "ptx.cvt", "ptx.cvta") and len(ops) == 1:
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
                # a thread-dependent factor times a uniform one
                k = _const(ops[0] if a == 0 else ops[1])
                t = b if a == 0 else a
                prod = None if t is None else t * k if k is not None and t != SYMBOLIC \
                    else SYMBOLIC  # type: ignore[operator]
            else:
                prod = None                 # a product of two thread-dependent values
            if op.name == "ptx.mad" and prod is not None:
                c = of(ops[2])
                prod = None if c is None else prod + c if isinstance(prod, int) and \
                    isinstance(c, int) else SYMBOLIC if 0 in (prod, c) else None  # type: ignore[operator]
            result = prod
    memo[v] = result
    return result


def _carried_kind(arg: BlockArgument, incoming: dict[BlockArgument, list[Value]],
                  body: set[Block], blocks: list[Block]) -> str:
    """"min/max" when every value the loop carries back into `arg` is `arg` combined with
    other values by f32/f64 min/max only (each step reading arg's chain once), else
    "in order"."""
    # the values of the loop computed from arg (the loop body is acyclic apart from its
    # header's arguments: one pass in block order)
    from_arg: set[Value] = {arg}
    for b in blocks:
        for op in b.ops:
            if any(o in from_arg for o in op.operands):
                from_arg.update(op.results)
    for v in incoming.get(arg, []):
        if defining_block(v) not in body:
            continue
        while v is not arg:
            if not isinstance(v, OpResult):
                return "in order"
            op = v.op
            through = [o for o in op.operands if o in from_arg]
            if len(through) != 1 or not (
                    op.name == "ptx.mov" or
                    op.name in ("ptx.min", "ptx.max") and set(mods(op)) <= _MIN_MAX_MODS):
                return "in order"
            v = through[0]
    return "min/max"


__all__ = ["CONSECUTIVE", "STRIDED", "SYMBOLIC", "UNIFORM", "UNKNOWN", "LoopAccess", "LoopOrder",
           "loop_order", "tid_x_stride"]
