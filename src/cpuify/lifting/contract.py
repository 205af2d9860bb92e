"""Unrounded products fused into their sums, as ptxas compiles them.

PTX `mul`, `add` and `sub` on f32/f64 without a rounding modifier "may be optimized
aggressively by the code generator", and NVIDIA's ptxas does fuse them.  nvcc leaves such
pairs in PTX (it fuses most products itself), and without this a kernel differs from the
GPU in the last bit.  Done while lifting, so the compiler and the reference interpreter
both see the fused form.

The rule, measured on an H100/H200 (tools/gpu_probes, tests/test_gpu_truth*.py) and read
from ptxas 13.0's SASS for sm_80/sm_90 (tests/test_contract.py lists the shapes):

- an unrounded `mul` (no `.rn`/`.rz`/`.rm`/`.rp`, no `.sat`) is fused when **every** use
  of its product is an unrounded `add`/`sub` of the same type and the same `.ftz`, with
  the product as one of its two operands, and then it is fused into all of them: each
  becomes one `fma.rn` (`t + c` as fma(a, b, c), `t - c` as fma(a, b, -c), `c - t` as
  fma(-a, b, c)); `.sat` on the sum stays on the fma;
- a plain `neg` or `mov` of the product is looked through (its uses count instead);
- one other use (a store, a compare, another `mul`, `abs`, a branch argument, an
  `add.rn`, `t + t`) and the product is not fused anywhere;
- sums in the product's block are fused; sums in other blocks (an if, a loop body, after
  a join) only when at most one of the mul's operands is in a register, the other an
  immediate or a kernel parameter (ptxas then moves the product to its sums, which costs
  no register), and never after the end of a loop the product is computed in (a use
  there goes through a phi for ptxas);
- the sums are visited in program order and each takes its first operand's product first
  (`p + q` of two fusable products is fma(pa, pb, q), and q has an fma use then).

The half types follow the same rule (SASS: HFMA2 against HMUL2 + HADD2): `f16`, `bf16`
(sm_90 PTX) and the packed `f16x2`/`bf16x2`, whose product fuses only into packed sums
(not into scalar sums of its unpacked halves, nor do packed scalar products fuse into a
packed sum).  Translation leaves the packed and bf16 add/sub/mul/neg whole for this
(lifting/halves.py expands them after it), so the rule sees them as ptxas does."""

from __future__ import annotations

from typing import Callable

from cpuify.ir.core import (Block, OpResult, Operation, Region, Value, natural_loops,
                             replace_all_uses)
from cpuify.ir.modifiers import mods

_ROUNDINGS = {"rn", "rz", "rm", "rp"}
_TYPES = {"f32", "f64", "f16", "bf16", "f16x2", "bf16x2"}
_BITS = {"f32": "b32", "f64": "b64", "f16": "b16", "bf16": "b16", "f16x2": "b32", "bf16x2": "b32"}


def _unrounded(op: Operation, names: tuple[str, ...]) -> str | None:
    """The type of an unrounded floating-point `op` named one of `names`, else None."""
    if op.name not in names or len(op.operands) != 2 or len(op.results) != 1:
        return None
    m = mods(op)
    ts = [x for x in m if x in _TYPES]
    if len(ts) != 1 or _ROUNDINGS & set(m) or not set(m) <= _TYPES | {"ftz", "sat"}:
        return None
    return ts[0]


def _see_through(op: Operation, t: str) -> bool:
    """Whether `op` is a plain neg or mov of a `t` value (ptxas folds both into an fma)."""
    if len(op.operands) != 1 or len(op.results) != 1 or op.successors:
        return False
    m = mods(op)
    if op.name == "ptx.neg":
        return m == [t]
    return (op.name == "ptx.mov" and m in ([t], [_BITS.get(t)])
            and op.results[0].type == op.operands[0].type)


def _product(v: Value, t: str) -> Operation | None:
    """The unrounded `t` mul whose product `v` is, through negs and movs; None when `v` is
    not such a product."""
    while isinstance(v, OpResult):
        op = v.op
        mul_type = _unrounded(op, ("ptx.mul",))
        if mul_type is not None:
            return op if mul_type == t and "sat" not in mods(op) else None
        if not _see_through(op, t):
            return None
        v = op.operands[0]
    return None


def _registers(mul: Operation) -> int:
    """How many operands of `mul` ptxas holds in registers: not an immediate or a kernel
    parameter (a constant-bank operand), looking through a plain neg or abs."""
    count = 0
    t = _unrounded(mul, ("ptx.mul",))
    for v in mul.operands:
        while (isinstance(v, OpResult) and v.op.name in ("ptx.neg", "ptx.abs")
               and mods(v.op) == [t]):
            v = v.op.operands[0]
        count += not (isinstance(v, OpResult) and v.op.name in ("upir.const", "upir.param"))
    return count


def _sums(mul: Operation, loops: Callable[[Block], frozenset[Block]]
          ) -> tuple[list[tuple[Operation, Value, bool]], list[Operation]] | None:
    """Every sum the product of `mul` reaches (the add/sub, the operand it reaches it as,
    whether negated) and the negs/movs between, when all its uses allow fusion; else None.
    `loops(block)`: the headers of the loops around `block`."""
    t = _unrounded(mul, ("ptx.mul",))
    ftz = "ftz" in mods(mul)
    sums: list[tuple[Operation, Value, bool]] = []
    between: list[Operation] = []
    work: list[tuple[Value, bool]] = [(mul.result, False)]
    while work:
        v, negated = work.pop()
        if not v.uses:
            return None
        for user in set(v.uses):
            if user.parent is not mul.parent and (
                    _registers(mul) > 1 or not loops(mul.parent) <= loops(user.parent)):
                return None     # ptxas keeps this product in its block
            if _see_through(user, t):
                between.append(user)
                work.append((user.result, negated ^ (user.name == "ptx.neg")))
            elif (_unrounded(user, ("ptx.add", "ptx.sub")) == t and ("ftz" in mods(user)) == ftz
                  and user.operands.count(v) == 1 and not user.successor_args
                  and all(s is not user for s, _, _ in sums)):
                sums.append((user, v, negated))
            else:
                return None
    return sums, between


def fuse_unrounded_products(region: Region) -> int:
    """Rewrites each fusable product of `region` and its sums into ptx.fma ops; returns how
    many sums became fmas."""
    replaced: dict[int, list[Operation]] = {}       # id(sum) -> the ops in its place
    dead: set[int] = set()
    nest: dict[Block, frozenset[Block]] = {}

    def loops(block: Block) -> frozenset[Block]:
        if not nest:
            around: dict[Block, set[Block]] = {b: set() for b in region.blocks}
            for header, (body, _) in natural_loops(region).items():
                for b in body:
                    around[b].add(header)
            nest.update((b, frozenset(h)) for b, h in around.items())
        return nest.get(block, frozenset())

    for block in region.blocks:
        for op in block.ops:
            if id(op) in replaced or _unrounded(op, ("ptx.add", "ptx.sub")) is None:
                continue
            for v in op.operands:
                mul = _product(v, _unrounded(op, ("ptx.add", "ptx.sub")) or "")
                reach = _sums(mul, loops) if mul is not None else None
                if reach is None:
                    continue
                sums, between = reach
                for s, operand, negated in sums:
                    replaced[id(s)] = _fma(s, operand, negated, mul)
                for x in (mul, *between):
                    x.drop_uses()
                    dead.add(id(x))
                break
    if replaced:
        for block in region.blocks:
            out: list[Operation] = []
            for op in block.ops:
                if id(op) in dead:
                    continue
                out.extend(replaced.get(id(op), (op,)))
            block.ops[:] = out
    return len(replaced)


def _fma(op: Operation, operand: Value, negated: bool, mul: Operation) -> list[Operation]:
    """The ops replacing the sum `op` of the product of `mul` (reaching it as `operand`,
    negated or not) and the other operand: an fma, after a neg where one is needed."""
    t = _unrounded(op, ("ptx.add", "ptx.sub"))
    block: Block = op.parent
    a, b = mul.operands
    side = op.operands.index(operand)
    c = op.operands[1 - side]
    line = {"line": op.attributes["line"]} if "line" in op.attributes else {}
    new: list[Operation] = []
    negate_product = negated != (op.name == "ptx.sub" and side == 1)   # c - t = c + (-t)
    if op.name == "ptx.sub" and side == 0:          # t - c = fma(.., .., -c)
        new.append(Operation("ptx.neg", [c], [c.type], {"mods": [t], **line}))
        c = new[-1].result
    if negate_product:                               # -(a*b) + c = fma(-a, b, c)
        new.append(Operation("ptx.neg", [a], [a.type], {"mods": [t], **line}))
        a = new[-1].result
    extra = [x for x in ("ftz", "sat") if x in mods(op)]
    new.append(Operation("ptx.fma", [a, b, c], [op.result.type],
                         {"mods": ["rn", *extra, t], **line}))
    for n in new:
        n.parent = block
    replace_all_uses(op.result, new[-1].result)
    op.drop_uses()
    return new
