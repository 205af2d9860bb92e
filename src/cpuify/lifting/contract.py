"""Unrounded products fused into their sum, as ptxas compiles them.

PTX `mul`, `add` and `sub` on f32/f64 without a rounding modifier "may be optimized
aggressively by the code generator", and NVIDIA's ptxas does fuse them: measured on an H100
(tools/gpu_probes, tests/test_gpu_truth.py), an unrounded `mul` whose result has one use,
an unrounded `add`/`sub` of the same type in the same block, runs as one `fma.rn`
(`t - c` as fma(a, b, -c), `c - t` as fma(-a, b, c)); a product with a second use, or a
`mul.rn`/`add.rn`, is not fused.  nvcc leaves such pairs in PTX (it fuses most products
itself), and without this a kernel differs from the GPU in the last bit.  Done while
lifting, so the compiler and the reference interpreter both see the fused form."""

from __future__ import annotations

from cpuify.ir.core import Block, OpResult, Operation, Region, replace_all_uses
from cpuify.ir.modifiers import mods

_ROUNDINGS = {"rn", "rz", "rm", "rp"}
_TYPES = {"f32", "f64"}


def _unrounded(op: Operation, names: tuple[str, ...]) -> str | None:
    """The type of an unrounded f32/f64 `op` named one of `names`, else None."""
    if op.name not in names or len(op.operands) != 2 or len(op.results) != 1:
        return None
    m = mods(op)
    ts = [x for x in m if x in _TYPES]
    if len(ts) != 1 or _ROUNDINGS & set(m) or not set(m) <= _TYPES | {"ftz", "sat"}:
        return None
    return ts[0]


def fuse_unrounded_products(region: Region) -> int:
    """Rewrites each fusable mul + add/sub pair of `region` into ptx.fma; returns how many."""
    fused = 0
    for block in region.blocks:
        out: list[Operation] = []
        dead: set[int] = set()
        for op in block.ops:
            fma = _fuse(block, op)
            if fma is None:
                out.append(op)
                continue
            new, mul = fma
            dead.add(id(mul))
            out.extend(new)
            fused += 1
        if dead:
            block.ops[:] = [op for op in out if id(op) not in dead]
    return fused


def _fuse(block: Block, op: Operation) -> tuple[list[Operation], Operation] | None:
    """The ops that replace `op` (an add/sub of a one-use unrounded product), and the mul
    they make dead; None when `op` is not such a sum."""
    t = _unrounded(op, ("ptx.add", "ptx.sub"))
    if t is None:
        return None
    for side, v in enumerate(op.operands):
        if not (isinstance(v, OpResult) and v.op.parent is block and len(v.uses) == 1
                and _unrounded(v.op, ("ptx.mul",)) == t
                and ("ftz" in mods(v.op)) == ("ftz" in mods(op)) and "sat" not in mods(v.op)):
            continue
        mul = v.op
        a, b = mul.operands
        c = op.operands[1 - side]
        line = {"line": op.attributes["line"]} if "line" in op.attributes else {}
        new: list[Operation] = []
        if op.name == "ptx.sub" and side == 0:          # a*b - c = fma(a, b, -c)
            new.append(Operation("ptx.neg", [c], [t], {"mods": [t], **line}))
            c = new[-1].result
        elif op.name == "ptx.sub":                      # c - a*b = fma(-a, b, c)
            new.append(Operation("ptx.neg", [a], [t], {"mods": [t], **line}))
            a = new[-1].result
        extra = [x for x in ("ftz", "sat") if x in mods(op)]
        new.append(Operation("ptx.fma", [a, b, c], [t], {"mods": ["rn", *extra, t], **line}))
        for n in new:
            n.parent = block
        replace_all_uses(op.result, new[-1].result)
        op.drop_uses()
        mul.drop_uses()
        return new, mul
    return None
