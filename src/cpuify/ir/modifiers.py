"""Reading the PTX modifiers a `ptx.*` op carries in its `mods` attribute (shared by the
code generator and the reference interpreter, so that both read an op the same way).

The IR keeps its own table of PTX fundamental types: the IR sits above the frontend and
must not import it."""

from __future__ import annotations

from cpuify.ir.core import Operation

# PTX fundamental types (the names a `mods` list may hold) and their sizes in bytes
PTX_TYPE_SIZES = {
    "b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
    "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "tf32": 4,
    "b64": 8, "u64": 8, "s64": 8, "f64": 8, "pred": 1, "b128": 16,
    # (no PTX types: the 128-bit products of mul.hi.s64/u64 in the instruction table's
    # expressions, ir/ptx_table.py)
    "s128": 16, "u128": 16,
}


#: memory-model qualifiers of a load or store that order it or make it observable (a
#: protocol between threads): such an access stays exactly as written
ORDERED = frozenset(("volatile", "relaxed", "acquire", "release", "mmio"))


def is_ptx_type(word: str) -> bool:
    """Whether a modifier names a PTX fundamental type (`s32`, `f16x2`, `pred`, ...)."""
    return word in PTX_TYPE_SIZES


def type_size(ptx_type: str) -> int:
    """Size in bytes of a PTX fundamental type."""
    return PTX_TYPE_SIZES[ptx_type]


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
