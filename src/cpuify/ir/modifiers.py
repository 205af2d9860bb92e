"""Reading the PTX modifiers a `ptx.*` op carries in its `mods` attribute (shared by the
code generator and the reference interpreter, so that both read an op the same way)."""

from __future__ import annotations

from cpuify.frontend.ptx_ast import is_ptx_type
from cpuify.ir.core import Operation


def mods(op: Operation) -> list[str]:
    return op.attributes.get("mods", [])


def types(op: Operation) -> list[str]:
    """The type modifiers, in order: `cvt.f32.s32` -> ['f32', 's32']."""
    return [m for m in mods(op) if is_ptx_type(m)]


def ty(op: Operation) -> str:
    """The (last) type modifier: the operand type."""
    ts = types(op)
    return ts[-1] if ts else "b32"


def has(op: Operation, *names: str) -> bool:
    m = mods(op)
    return any(n in m for n in names)


def rounding(op: Operation) -> str | None:
    """The floating-point rounding modifier (.rn/.rz/.rm/.rp), if any."""
    for r in ("rn", "rz", "rm", "rp"):
        if r in mods(op):
            return r
    return None
