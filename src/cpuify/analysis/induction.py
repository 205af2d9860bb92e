"""Induction variables by what they compute, not how PTX spells them.

A loop-carried integer `i = phi(i0, i_next)` is an induction variable when `i_next` is `i`
plus loop-invariant terms, through any chain of additions: nvcc's unrolled grid-stride loop
`for (i = tid; i < n; i += s)` carries `i` and computes `((i + s) + s) + s) + s` for the
next iteration, which is `i + 4s`."""

from __future__ import annotations

from cpuify.ir.core import BlockArgument, OpResult, Value

#: how many additions a step may be spread over
MAX_CHAIN = 16


def increment_terms(arg: BlockArgument, value: Value) -> list[Value] | None:
    """The terms t1..tk with value == arg + t1 + ... + tk (integer additions of arg's type,
    wrapping as the loop does), or None when value is not arg plus terms."""
    terms: list[Value] = []
    v = value
    for _ in range(MAX_CHAIN):
        if v is arg:
            return terms if terms else None
        if not (isinstance(v, OpResult) and v.op.name == "ptx.add" and len(v.op.operands) == 2
                and v.type == arg.type and "cc" not in v.op.attributes.get("mods", ())
                and "sat" not in v.op.attributes.get("mods", ())):
            return None
        a, b = v.op.operands
        # follow the operand that leads back to arg (the other one is a term)
        if _reaches(a, arg):
            terms.append(b)
            v = a
        elif _reaches(b, arg):
            terms.append(a)
            v = b
        else:
            return None
    return None


def _reaches(v: Value, arg: BlockArgument, depth: int = 0, memo: dict | None = None) -> bool:
    """Whether v is a chain of additions over arg (arg among its leaves)."""
    if v is arg:
        return True
    if depth >= MAX_CHAIN or not (isinstance(v, OpResult) and v.op.name == "ptx.add"):
        return False
    memo = {} if memo is None else memo
    if v not in memo:
        memo[v] = any(_reaches(o, arg, depth + 1, memo) for o in v.op.operands)
    return memo[v]
