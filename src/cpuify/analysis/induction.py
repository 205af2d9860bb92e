"""Induction variables by what they compute, not how PTX spells them.

A loop-carried integer `i = phi(i0, i_next)` is an induction variable when `i_next` is `i`
plus loop-invariant terms, through any chain of additions: nvcc's unrolled grid-stride loop
`for (i = tid; i < n; i += s)` carries `i` and computes `((i + s) + s) + s) + s` for the
next iteration, which is `i + 4s`."""

from __future__ import annotations

from cpuify.ir.core import BlockArgument, Operation, OpResult, Region, Value

#: how many additions a step may be spread over
MAX_CHAIN = 16


def increment_terms(arg: BlockArgument, value: Value,
                    same: dict[Value, Value] | None = None) -> list[Value] | None:
    """The terms t1..tk with value == arg + t1 + ... + tk (integer additions of arg's type,
    wrapping as the loop does), or None when value is not arg plus terms.  `same`: values
    that stand for others (a while's after-region arguments for what its condition passes,
    which the lowering puts in their place)."""
    terms: list[Value] = []
    v = value
    same = same or {}
    for _ in range(MAX_CHAIN):
        v = same.get(v, v)
        if v is arg:
            return terms if terms else None
        if not (isinstance(v, OpResult) and v.op.name == "ptx.add" and len(v.op.operands) == 2
                and v.type == arg.type and "cc" not in v.op.attributes.get("mods", ())
                and "sat" not in v.op.attributes.get("mods", ())):
            return None
        a, b = v.op.operands
        # follow the operand that leads back to arg (the other one is a term)
        if _reaches(a, arg, same=same):
            terms.append(b)
            v = a
        elif _reaches(b, arg, same=same):
            terms.append(a)
            v = b
        else:
            return None
    return None


def _reaches(v: Value, arg: BlockArgument, depth: int = 0, memo: dict | None = None,
             same: dict[Value, Value] | None = None) -> bool:
    """Whether v is a chain of additions over arg (arg among its leaves)."""
    if same:
        v = same.get(v, v)
    if v is arg:
        return True
    if depth >= MAX_CHAIN or not (isinstance(v, OpResult) and v.op.name == "ptx.add"):
        return False
    memo = {} if memo is None else memo
    if v not in memo:
        memo[v] = any(_reaches(o, arg, depth + 1, memo, same) for o in v.op.operands)
    return memo[v]


# --- values read only through their low 32 bits ------------------------------------------

#: 64-bit ops whose result's low 32 bits depend only on the low 32 bits of their operands
_LOW_ARITH = ("ptx.add", "ptx.sub", "ptx.mul", "ptx.mad", "ptx.neg", "ptx.not", "ptx.and",
              "ptx.or", "ptx.xor", "ptx.mov", "ptx.shl")
_INT64 = ("s64", "u64", "b64")
_INT32 = ("s32", "u32", "b32")


def _int_types(op: Operation) -> list[str]:
    return [m for m in op.attributes.get("mods", ()) if m[:1] in "sub" and m[1:].isdigit()]


def _shift_amount(op: Operation) -> int | None:
    amount = op.operands[1] if len(op.operands) == 2 else None
    if isinstance(amount, OpResult) and amount.op.name == "upir.const":
        value = amount.op.attributes.get("value")
        return value if isinstance(value, int) else None
    return None


def _low_arith(op: Operation) -> bool:
    """A 64-bit integer op whose result's low half is a function of its operands' low halves
    (add, sub, mul.lo, mad.lo, logic, mov, a left shift by a constant below 32)."""
    mods = op.attributes.get("mods", ())
    if op.name not in _LOW_ARITH or len(op.results) != 1 or op.results[0].type != "i64" or \
            any(m in mods for m in ("cc", "sat", "hi", "wide")) or \
            not all(t in _INT64 for t in _int_types(op)):
        return False
    if op.name in ("ptx.mul", "ptx.mad") and "lo" not in mods:
        return False
    if op.name == "ptx.shl":
        amount = _shift_amount(op)
        return amount is not None and 0 <= amount < 32 and op.operands[0].type == "i64"
    return all(o.type == "i64" for o in op.operands)


def _extends_low_half(op: Operation) -> bool:
    """cvt.s64.s32 / cvt.u64.u32 (no saturation): a 64-bit result that reads only the low
    32 bits of its source, whatever the source's register width."""
    types = _int_types(op)
    return op.name == "ptx.cvt" and len(types) == 2 and types[0] in _INT64 and \
        types[1] in _INT32 and "sat" not in op.attributes.get("mods", ()) and \
        op.results[0].type == "i64"


def _truncates(op: Operation) -> bool:
    """cvt.u32.u64 and the like (no saturation): the low 32 bits of a 64-bit source."""
    types = _int_types(op)
    return op.name == "ptx.cvt" and len(types) == 2 and types[0] in _INT32 and \
        types[1] in _INT64 and "sat" not in op.attributes.get("mods", ()) and \
        op.results[0].type == "i32"


class LowBits:
    """The 64-bit values of a region that are only ever read through their low 32 bits
    (`values`), how each is computed (`kind`: 'arith' from such values, 'extend' from a
    32-bit source, 'leaf' otherwise), and what links them (`links`: operands and the
    incoming values of block arguments)."""

    def __init__(self) -> None:
        self.values: set[Value] = set()
        self.kind: dict[Value, str] = {}
        self.links: dict[Value, list[Value]] = {}

    def webs(self) -> list[set[Value]]:
        """The connected groups of values (linked through operands and block arguments)."""
        seen: set[Value] = set()
        out: list[set[Value]] = []
        adjacent: dict[Value, list[Value]] = {}
        for v, others in self.links.items():
            for o in others:
                adjacent.setdefault(v, []).append(o)
                adjacent.setdefault(o, []).append(v)
        for v in self.values:
            if v in seen:
                continue
            web = {v}
            seen.add(v)
            work = [v]
            while work:
                x = work.pop()
                for y in adjacent.get(x, ()):
                    if y not in seen:
                        seen.add(y)
                        web.add(y)
                        work.append(y)
            out.append(web)
        return out


def low_bits_only(region: Region) -> LowBits:
    """The 64-bit values every read of which looks only at the low 32 bits: truncations to
    32 bits, extensions of the low half (`cvt.s64.s32` of a 64-bit register), left shifts by
    32 or more, and ops and block arguments of the same kind (the greatest such set).
    Exact modulo 2^32: no assumption that anything stays in range."""
    from cpuify.analysis.cfg import incoming_values
    out = LowBits()
    # a quick way out: no 64-bit loop-carried value is read through a truncation
    candidates = [a for b in region.blocks for a in b.args if a.type == "i64"]
    if not any(_truncates(u) or _extends_low_half(u) for a in candidates for u in a.uses):
        return out
    incoming = incoming_values(region)
    values: set[Value] = set(candidates)
    for b in region.blocks:
        for op in b.ops:
            for r in op.results:
                if r.type == "i64":
                    values.add(r)

    def reads_low_half(v: Value, user: Operation) -> bool:
        if user.successors:
            return all(a in values for succ, args in zip(user.successors, user.successor_args)
                       for a, x in zip(succ.args, args) if x is v) and v not in user.operands
        if _truncates(user) or _extends_low_half(user):
            return True
        if user.name == "ptx.shl" and user.operands[0] is v and v not in user.operands[1:]:
            amount = _shift_amount(user)
            if amount is not None and 32 <= amount < 64 and user.results[0].type == "i64":
                return True     # (x << 32) depends on x's low half only
        return _low_arith(user) and user.results[0] in values

    def sources(v: Value) -> list[Value]:
        """The values whose low half v's low half is computed from."""
        if isinstance(v, BlockArgument):
            return list(incoming.get(v, []))
        if isinstance(v, OpResult) and (_low_arith(v.op) or _extends_low_half(v.op)):
            return [o for o in v.op.operands if o.type == "i64"]
        return []

    # the greatest such set: start from every 64-bit value, drop those with a read of the
    # high half; a dropped value's sources (its operands, its incoming values) are looked
    # at again, as their read through it no longer counts as a low-half read
    work = list(values)
    while work:
        v = work.pop()
        if v in values and not all(reads_low_half(v, u) for u in v.uses):
            values.discard(v)
            work.extend(s for s in sources(v) if s in values)
    for v in values:
        if isinstance(v, BlockArgument) or isinstance(v, OpResult) and _low_arith(v.op):
            out.kind[v] = "arith"
        elif isinstance(v, OpResult) and _extends_low_half(v.op):
            out.kind[v] = "extend"
        else:
            out.kind[v] = "leaf"
        out.links[v] = [s for s in sources(v) if s in values]
    out.values = values
    return out
