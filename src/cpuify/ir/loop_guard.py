"""Whether an if's condition is a counted loop's first test (nvcc's guard of a rotated loop).

nvcc emits `for (i = lb; i < ub; i += step)` as a guard and a bottom-tested loop:

    if (lb < ub) { [pre-header]  do { body; i += step; } while (i < ub); }

and spells the guard as it likes: `setp.ge lb, ub` branching around the loop, `setp.lt ub, 1`
for lb = 0, `setp.gt tid, 255` for ub = 256, `setp.eq lb, 0` for `i != 0`.  The do-while
under such a guard is exactly `upir.for(lb, ub, step)`: the guard is the for's first test,
the do-while's test its every later one.  :func:`guards_entry` decides it from the values
alone (SSA: the guard tested the same lb and ub the loop starts from, wherever the loop sits
inside the guarded arm), by putting both compares in one normal form: integer compares
only, `gt`/`ge` as swapped `lt`/`le`, `x <= c` as `x < c + 1` where c + 1 does not wrap,
`ptx.mov` and constants looked through.  Used by raise-structured-cf to make such loops
fors and by the verifier to check a for that says it is lowered as one (`do_while`)."""

from __future__ import annotations

from cpuify.ir.core import Operation, OpResult, Region, Value

#: setp comparisons on integers -> (relation, signed or None when the type decides)
_RELATIONS = {"eq": ("eq", None), "ne": ("ne", None), "lt": ("lt", None), "le": ("le", None),
              "gt": ("gt", None), "ge": ("ge", None), "lo": ("lt", False), "ls": ("le", False),
              "hi": ("gt", False), "hs": ("ge", False)}
_SWAPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}
_NEGATED = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}
_INT_TYPES = {"s16": (True, 16), "u16": (False, 16), "b16": (False, 16),
              "s32": (True, 32), "u32": (False, 32), "b32": (False, 32),
              "s64": (True, 64), "u64": (False, 64), "b64": (False, 64)}

#: attribute of a `upir.for` raised from nvcc's guarded do-while: [the induction variable's
#: place among the loop header's arguments, the add's and the compare's places counted from
#: the end of the block that tests (the lowering puts them back there)]
DO_WHILE = "do_while"

Compare = tuple[str, bool, int]          # (relation, signed, width)
Operand = Value | int                    # a value, or an integer constant


def integer_compare(mods: list[str] | tuple[str, ...]) -> Compare | None:
    """(relation, signed, width) of a `setp` on integers with these modifiers, or None (a
    float compare, a setp that combines with another predicate)."""
    if any(m in ("and", "or", "xor") for m in mods):
        return None
    rel = next((_RELATIONS[m] for m in mods if m in _RELATIONS), None)
    typ = next((m for m in mods if m in _INT_TYPES), None)
    if rel is None or typ is None or (typ[0] == "b" and rel[0] not in ("eq", "ne")):
        return None
    signed = _INT_TYPES[typ][0] if rel[1] is None else rel[1]
    if rel[0] in ("eq", "ne"):
        signed = False                   # (equality: one representation of constants)
    return rel[0], signed, _INT_TYPES[typ][1]


def _source(v: Value, width: int, signed: bool) -> Operand:
    """The value `v` copies (through `ptx.mov` of its type), or its constant."""
    for _ in range(16):
        if not isinstance(v, OpResult):
            return v
        op = v.op
        if op.name == "upir.const":
            value = op.attributes.get("value")
            if not isinstance(value, int) or isinstance(value, bool):
                return v
            value &= (1 << width) - 1
            if signed and value >> (width - 1):
                value -= 1 << width
            return value
        if op.name == "ptx.mov" and len(op.operands) == 1 and op.operands[0].type == v.type:
            v = op.operands[0]
            continue
        return v
    return v


def _normal(rel: str, signed: bool, width: int, x: Operand, y: Operand
            ) -> tuple[str, Operand, Operand]:
    """`x rel y` as lt/le/eq/ne, with `<=` against a constant made `<` where that is exact."""
    if rel in ("gt", "ge"):
        rel, x, y = _SWAPPED[rel], y, x
    if rel == "le":
        lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
        if isinstance(y, int) and y < hi:
            rel, y = "lt", y + 1
        elif isinstance(x, int) and x > lo:
            rel, x = "lt", x - 1
    return rel, x, y


def _same(a: Operand, b: Operand) -> bool:
    return a == b if isinstance(a, int) and isinstance(b, int) else a is b


def same_test(guard: Operation, taken: bool, predicate: list[str], lb: Value, ub: Value) -> bool:
    """Whether `guard` (a `ptx.setp`) being `taken` (True, or False: its negation) is
    `lb <predicate> ub` (predicate: a setp's modifiers) for every lb and ub."""
    if guard.name != "ptx.setp" or len(guard.operands) != 2 or len(guard.results) != 1:
        return False
    mine = integer_compare(list(guard.attributes.get("mods", ())))
    theirs = integer_compare(predicate)
    if mine is None or theirs is None or mine[2] != theirs[2]:
        return False
    rel, signed, width = mine
    if not taken:
        rel = _NEGATED[rel]
    if rel not in ("eq", "ne") and signed != theirs[1]:
        return False
    x, y = (_source(v, width, signed) for v in guard.operands)
    a = _normal(rel, signed, width, x, y)
    b = _normal(theirs[0], theirs[1], width, _source(lb, width, theirs[1]),
                _source(ub, width, theirs[1]))
    if a[0] != b[0]:
        return False
    if _same(a[1], b[1]) and _same(a[2], b[2]):
        return True
    return a[0] in ("eq", "ne") and _same(a[1], b[2]) and _same(a[2], b[1])


def guards_entry(op: Operation, predicate: list[str], lb: Value, ub: Value) -> bool:
    """Whether `op` sits (at any depth) in an arm of a `upir.if` whose condition, on that
    arm, is `lb <predicate> ub`: the first test of a loop from lb to ub."""
    node = op
    while True:
        block = node.parent
        region: Region | None = block.parent if block is not None else None
        owner = region.parent if region is not None else None
        if owner is None or owner.name not in ("upir.if", "upir.while", "upir.for"):
            return False
        if owner.name == "upir.if":
            cond = owner.operands[0] if owner.operands else None
            taken = owner.regions[0] is region
            if isinstance(cond, OpResult) and same_test(cond.op, taken, predicate, lb, ub):
                return True
        node = owner
