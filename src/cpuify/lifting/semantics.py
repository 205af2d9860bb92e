"""Which PTX instructions and modifiers cpuify implements, and how operands are typed.

Everything not listed here is refused with an error naming the instruction, modifier,
kernel and PTX line: never silently mis-executed."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from cpuify.errors import UnsupportedError
from cpuify.frontend.ptx_ast import Addr, Imm, Instruction, Reg, is_ptx_type
from cpuify.ir.ptx_table import TABLE
from cpuify.lifting.tensor_cores import parse_ldmatrix, parse_matrix_op

if TYPE_CHECKING:
    from cpuify.lifting.lift import _Lifter

#: the special registers PTX code reads (`%tid.x`, `%clock64`, ...)
SPECIAL_REGS = {
    "%tid", "%ntid", "%ctaid", "%nctaid", "%laneid", "%warpid", "%nwarpid", "%smid", "%nsmid",
    "%gridid", "%clock", "%clock64", "%clock_hi", "%globaltimer", "%globaltimer_lo",
    "%globaltimer_hi", "%lanemask_eq", "%lanemask_le", "%lanemask_lt", "%lanemask_ge",
    "%lanemask_gt", "%dynamic_smem_size", "%total_smem_size", "%aggr_smem_size",
    "%warpsize",
}

#: the shared variable behind %reserved_smem_offset_* (1 KB, as on sm_80 and later)
RESERVED_SMEM = "__cpuify_reserved_smem"
RESERVED_SMEM_SIZE = 1024

# opcode -> allowed non-type modifiers, whether a type is required, which have half forms:
# from the instruction table (ir/ptx_table.py)
ALLOWED: dict[str, set[str]] = {e.opcode: set(e.modifiers) for e in TABLE.values()}
_UNTYPED = {e.opcode for e in TABLE.values() if not e.typed}
#: instructions with f16x2/bf16x2/bf16 forms that cpuify implements (lifting/halves.py)
_HALF_OPS = {e.opcode for e in TABLE.values() if e.halves}
_TEX_GEOMETRY = {"1d", "2d", "3d", "a1d", "a2d"}
#: a byte or half-word selector/mask on a register operand (`%r1.b3210`, `%r2.h10`)
_SELECTOR = re.compile(r"\.[bh][0-7]+$")

_REFUSED = {
    "wgmma": "warpgroup-level wgmma operations are not supported",
    "griddepcontrol": "programmatic dependent launch is not supported",
}


def instr_types(instr: Instruction) -> list[str]:
    return [m for m in instr.modifiers if is_ptx_type(m)]


def operand_type(instr: Instruction) -> str:
    """The instruction's (last) type modifier: `add.s32` -> 's32'; `cvt.f32.s32` -> 's32'."""
    types = instr_types(instr)
    if not types:
        return "b32"
    return types[-1]


def check_instruction(instr: Instruction, lifter: "_Lifter") -> None:
    op = instr.opcode
    if op in _REFUSED:
        lifter.error(f"'{instr.full_opcode}': {_REFUSED[op]}", instr.line)
    if op in ("wmma", "mma", "ldmatrix", "stmatrix", "movmatrix"):
        spec = parse_matrix_op(op, instr.modifiers) if op in ("wmma", "mma") else \
            parse_ldmatrix(instr.modifiers, op)
        if isinstance(spec, str):
            lifter.error(f"'{instr.full_opcode}': {spec}", instr.line)
        return
    if op == "cp" and "bulk" in instr.modifiers:
        lifter.error(f"'{instr.full_opcode}': the bulk (TMA) copies are not supported "
                     "(cp.async with commit/wait groups is)", instr.line)
    if op == "cp" and "noinc" in instr.modifiers and "mbarrier" not in ALLOWED:
        lifter.error(f"'{instr.full_opcode}': cp.async.mbarrier.arrive.noinc needs mbarrier "
                     "objects, which are not supported", instr.line)
    selected = next((o.name for o in instr.operands if isinstance(o, Reg) and
                     _SELECTOR.search(o.name) and not o.name.startswith(tuple(SPECIAL_REGS))), None)
    if selected is not None:
        lifter.error(f"'{instr.full_opcode}': operand selectors and masks ('{selected}') of "
                     "the SIMD video instructions are not supported (the default ones are)",
                     instr.line)
    allowed = ALLOWED.get(op)
    if allowed is None:
        lifter.error(f"instruction '{instr.full_opcode}' is not supported by cpuify", instr.line)
        return
    for m in instr.modifiers:
        if is_ptx_type(m) or m in allowed:
            continue
        lifter.error(f"modifier '.{m}' of '{instr.full_opcode}' is not supported by cpuify",
                     instr.line)
    types = instr_types(instr)
    if op not in _UNTYPED and not types:
        lifter.error(f"'{instr.full_opcode}' has no type modifier", instr.line)
    if op == "cvt" and "tf32" in types and (types != ["tf32", "f32"] or "rna" not in instr.modifiers):
        lifter.error(f"'{instr.full_opcode}': of the tf32 conversions, cvt.rna.tf32.f32 is "
                     "supported", instr.line)
    if op == "cvt" and "rna" in instr.modifiers and types != ["tf32", "f32"]:
        lifter.error(f"'{instr.full_opcode}': .rna is supported for cvt.rna.tf32.f32 only",
                     instr.line)
    if any(t in ("tf32", "b128") for t in types) and op not in ("mov", "ld", "st", "cvt"):
        lifter.error(f"'{instr.full_opcode}': {'/'.join(types)} operations are not supported",
                     instr.line)
    if any(t in ("f16x2", "bf16x2", "bf16") for t in types) and \
            op not in _HALF_OPS | {"mov", "ld", "st", "selp", "atom", "red"}:
        lifter.error(f"'{instr.full_opcode}': this half/bfloat16 operation is not supported",
                     instr.line)
    if op == "cvt" and any(t in ("bf16x2", "f16x2") for t in types) and \
            (types[0] not in ("bf16x2", "f16x2") or types[-1] != "f32"):
        lifter.error(f"'{instr.full_opcode}': packed conversions other than from two f32 "
                     "values are not supported", instr.line)
    if "relu" in instr.modifiers and not any(t in ("f16", "bf16", "f16x2", "bf16x2") for t in types):
        lifter.error(f"'{instr.full_opcode}': .relu is only supported on half types", instr.line)
    if op in ("ld", "st") and any(t == "b128" for t in types):
        lifter.error(f"'{instr.full_opcode}': 128-bit scalar accesses are not supported", instr.line)
    if op in ("atom", "red"):
        halves = any(t in ("f16", "bf16", "f16x2", "bf16x2") for t in types)
        if halves and "add" not in instr.modifiers or "b128" in types or "v2" in instr.modifiers \
                or "v4" in instr.modifiers:
            lifter.error(f"'{instr.full_opcode}': this atomic type is not supported", instr.line)
    if op in ("tex", "tld4", "txq", "suld", "sust"):
        check_texture(instr, lifter)
    if op == "cp":
        check_cp_async(instr, lifter)
    if op in ("bar", "barrier") and "red" in instr.modifiers and len(instr.operands) != 3:
        lifter.error(f"'{instr.full_opcode}': barrier reductions with a thread count are not "
                     "supported (bar.sync/bar.arrive with counts are)", instr.line)
    if op in ("bar", "barrier") and "arrive" in instr.modifiers and len(instr.operands) != 2:
        lifter.error(f"'{instr.full_opcode}': expected a barrier and a thread count", instr.line)


def check_cp_async(instr: Instruction, lifter: "_Lifter") -> None:
    """cp.async: the copies from global to shared memory (4, 8 or 16 bytes, optional
    src-size or ignore-src, cache hints) and their groups; not the bulk (TMA) copies or the
    mbarrier completion forms."""
    m = instr.modifiers
    if m[:1] != ("async",):
        lifter.error(f"'{instr.full_opcode}': only cp.async copies are supported", instr.line)
    if "commit_group" in m or "wait_all" in m or "wait_group" in m:
        if len(m) != 2:
            lifter.error(f"'{instr.full_opcode}': unexpected modifiers", instr.line)
        return
    if "mbarrier" in m:
        if not ("arrive" in m and "shared" in m and len(instr.operands) == 1
                and isinstance(instr.operands[0], Addr)):
            lifter.error(f"'{instr.full_opcode}': expected "
                         "cp.async.mbarrier.arrive{.noinc}.shared.b64 [mbar]", instr.line)
        return
    if not ("shared" in m and "global" in m and ("ca" in m or "cg" in m)):
        lifter.error(f"'{instr.full_opcode}': cp.async copies from .global to .shared with "
                     ".ca or .cg are supported", instr.line)
    ops = instr.operands
    size = ops[2] if len(ops) > 2 else None
    if not (3 <= len(ops) <= 5) or not isinstance(size, Imm) or size.value not in (4, 8, 16) \
            or "cg" in m and size.value != 16:
        lifter.error(f"'{instr.full_opcode}': expected [dst], [src], cp-size (4, 8 or 16; "
                     "16 with .cg){, src-size | ignore-src}{, cache-policy}", instr.line)


def check_texture(instr: Instruction, lifter: "_Lifter") -> None:
    """Texture and surface instructions: the forms cpuify samples (object handles in
    registers, 1D/2D/3D and layered geometries, 32-bit results)."""
    op, m = instr.opcode, instr.modifiers
    if op == "txq":
        return
    if not any(g in m for g in _TEX_GEOMETRY):
        lifter.error(f"'{instr.full_opcode}': only 1d, 2d, 3d, a1d and a2d textures and surfaces "
                     "are supported (no cube maps or multisample textures)", instr.line)
    types = instr_types(instr)
    if op in ("tex", "tld4"):
        if len(types) != 2 or types[0] not in ("f32", "s32", "u32") or types[1] not in ("f32", "s32"):
            lifter.error(f"'{instr.full_opcode}': texture fetches return f32, s32 or u32 "
                         "from f32 or s32 coordinates", instr.line)
        if op == "tld4" and types[1] != "f32":
            lifter.error(f"'{instr.full_opcode}': gathers take f32 coordinates", instr.line)
    elif len(types) != 1 or types[0] not in ("b8", "b16", "b32", "b64"):
        lifter.error(f"'{instr.full_opcode}': surface accesses are .b8/.b16/.b32/.b64", instr.line)
    elif "b" not in m:
        lifter.error(f"'{instr.full_opcode}': only unformatted (.b) surface accesses are supported",
                     instr.line)


def ensure(cond: bool, instr: Instruction, message: str) -> None:
    if not cond:
        raise UnsupportedError(message, line=instr.line, source_line=instr.text)
