"""Half precision in lifting: packed `f16x2`/`bf16x2` arithmetic becomes one scalar op per
half (unpack, an op on each half, pack), and the scalar `bf16` operations (and the `f16`
ones the backends do not compute in half precision) become `f32` ones between exact
conversions.  Code generation and the interpreter then implement only scalar `f16`/`bf16`
conversions, `fma`, and the `f16` add/sub/mul/neg/abs/comparisons they already had.

Why f32 is exact enough: a half value converts to f32 exactly; f32 has 24 bits, at least
2p + 2 for both half formats (p = 11 for f16, 8 for bf16), so rounding a sum, difference or
product to f32 and then to the half format gives the correctly rounded half result
(double rounding is innocuous, Figueroa 1995); min/max and comparisons of exact values are
exact; ex2/tanh are `.approx` anyway.  `fma` is not legalized (its f32 rounding could land
on a half-way point): the backends round it once."""

from __future__ import annotations

from typing import Callable, Sequence

from cpuify.frontend.ptx_ast import Instruction, is_ptx_type
from cpuify.ir.core import Operation, Region, Value, replace_all_uses

PACKED = {"f16x2": "f16", "bf16x2": "bf16"}
HALVES = ("f16", "bf16")

#: scalar ops computed in f32 (see the module docstring), by half type
VIA_F32 = {"bf16": {"add", "sub", "mul", "min", "max", "ex2", "tanh", "setp", "set"},
           "f16": {"min", "max", "ex2", "tanh"}}
#: sign-bit ops on bf16
_SIGN_BIT_OPS = {"neg": ("ptx.xor", 0x8000), "abs": ("ptx.and", 0x7FFF)}
#: instructions with packed forms that expand per half
PACKED_OPS = {"add", "sub", "mul", "fma", "neg", "abs", "min", "max", "ex2", "tanh", "setp",
              "set", "cvt"}

Emit = Callable[[Operation], Operation]
Const = Callable[[int | float, str], Value]
Error = Callable[[str], None]


def _types(mods: Sequence[str]) -> list[str]:
    return [m for m in mods if is_ptx_type(m)]


#: the ops ptxas may fuse (an unrounded add/sub/mul, a plain neg between) on the half types
#: that lifting expands: left whole by translation, so that contraction
#: (lifting/contract.py) sees them as ptxas does, and expanded after it (expand_deferred)
_DEFERRED_TYPES = ("f16x2", "bf16x2", "bf16")
_ROUNDINGS = {"rn", "rz", "rm", "rp"}


def deferred(instr: Instruction) -> bool:
    """Whether `instr` is an unrounded add/sub/mul or a neg on packed halves or bf16, which
    lifting expands only after contraction."""
    ts = _types(instr.modifiers)
    return (instr.opcode in ("add", "sub", "mul", "neg") and len(ts) == 1
            and ts[0] in _DEFERRED_TYPES and not (_ROUNDINGS | {"relu"}) & set(instr.modifiers))


def deferred_result_type(instr: Instruction) -> str:
    """The IR type of a deferred op's result (its bits)."""
    return "i32" if _types(instr.modifiers)[0] in PACKED else "i16"


def needs_expansion(instr: Instruction) -> bool:
    """Whether `instr` is packed half arithmetic or a scalar half op that lifting legalizes."""
    ts = _types(instr.modifiers)
    if any(t in PACKED for t in ts):
        return instr.opcode in PACKED_OPS
    if "relu" in instr.modifiers and any(t in HALVES for t in ts):
        return True
    src = ts[-1] if ts else ""
    return src in HALVES and (instr.opcode in VIA_F32[src] or instr.opcode in _SIGN_BIT_OPS
                              and (src == "bf16" or "ftz" in instr.modifiers))


class _Expander:
    def __init__(self, instr: Instruction, emit: Emit, const: Const, error: Error) -> None:
        self.instr = instr
        self.line = instr.line
        self._emit, self.const, self.error = emit, const, error

    def op(self, name: str, operands: list[Value], result_types: list[str], mods: list[str]
           ) -> Operation:
        return self._emit(Operation(name, operands, result_types, {"mods": mods, "line": self.line}))

    def cvt(self, v: Value, dst: str, src: str, extra: Sequence[str] = ()) -> Value:
        rt = "f32" if dst == "f32" else "f64" if dst == "f64" else "i16"
        return self.op("ptx.cvt", [v], [rt], [*extra, dst, src]).results[0]

    def relu(self, v: Value, t: str) -> Value:
        """PTX .relu: a negative result is +0, NaN stays NaN (max.NaN with +0, exact in f32)."""
        wide = self.cvt(v, "f32", t)
        m = self.op("ptx.max", [wide, self.const(0.0, "f32")], ["f32"], ["NaN", "f32"]).results[0]
        return self.cvt(m, t, "f32", ("rn",))

    # -- scalar half ops --
    def scalar(self, opcode: str, mods: list[str], srcs: list[Value], src_types: list[str],
               result_type: str) -> Value:
        """One scalar op on half values (`srcs` of PTX types `src_types`), legalized."""
        ts = _types(mods)
        t = ts[-1]
        relu_type = ts[0] if opcode == "cvt" else t      # .relu acts on the result
        relu = "relu" in mods
        mods = [m for m in mods if m != "relu"]
        if "xorsign" in mods:
            self.error(f"'{self.instr.full_opcode}': min/max with .xorsign is not supported")
        if t == "f16" and opcode in _SIGN_BIT_OPS and "ftz" in mods:
            # as ptxas: the sign bit changed, then + (-0) with .ftz, which flushes a
            # subnormal (HADD2.FTZ of -x or |x| and -0)
            name, bits = _SIGN_BIT_OPS[opcode]
            r = self.op(name, [srcs[0], self.const(bits, "i16")], ["i16"], ["b16"]).results[0]
            r = self.op("ptx.add", [r, self.const(0x8000, "i16")], ["i16"],
                        ["rn", "ftz", "f16"]).results[0]
        elif t == "bf16" and opcode in _SIGN_BIT_OPS:
            name, bits = _SIGN_BIT_OPS[opcode]
            r = self.op(name, [srcs[0], self.const(bits, "i16")], ["i16"], ["b16"]).results[0]
        elif t in HALVES and opcode in VIA_F32[t]:
            if t == "f16" and "ftz" in mods:
                self.error(f"'{self.instr.full_opcode}': .ftz on this f16 operation is not "
                           "supported")
            wide = [self.cvt(v, "f32", st) if st == t else v for v, st in zip(srcs, src_types)]
            fmods = ["f32" if m == t else m for m in mods]
            rt = "f32" if result_type == "i16" and (not ts[:-1] or ts[0] == t) else result_type
            r = self.op(f"ptx.{opcode}", wide, [rt], fmods).results[0]
            if rt == "f32" and result_type == "i16":
                r = self.cvt(r, t, "f32", ("rn",))
        else:
            r = self.op(f"ptx.{opcode}", list(srcs), [result_type], mods).results[0]
        if relu:
            r = self.relu(r, relu_type)
        return r

    # -- packed ops --
    def unpack(self, v: Value) -> tuple[Value, Value]:
        lo, hi = self.op("ptx.mov", [v], ["i16", "i16"], ["b32"]).results
        return lo, hi

    def pack(self, lo: Value, hi: Value) -> Value:
        return self.op("ptx.mov", [lo, hi], ["i32"], ["b32"]).results[0]

    def packed(self, srcs: list[Value], result_types: list[str]) -> list[Value]:
        instr = self.instr
        mods = list(instr.modifiers)
        ts = _types(mods)
        if instr.opcode == "cvt":
            # cvt.rn{.relu}.f16x2.f32 d, a, b: a to the upper half, b to the lower
            if ts[0] not in PACKED or ts[-1] != "f32" or len(srcs) != 2:
                self.error(f"'{instr.full_opcode}' is not supported")
            lane = PACKED[ts[0]]
            extra = [m for m in mods if not is_ptx_type(m) and m != "relu"]
            halves = []
            for v in (srcs[1], srcs[0]):
                h = self.cvt(v, lane, "f32", extra)
                halves.append(self.relu(h, lane) if "relu" in mods else h)
            return [self.pack(halves[0], halves[1])]
        lane_t = PACKED[ts[-1]]
        lane_mods = [PACKED.get(m, m) for m in mods]
        if instr.opcode == "set" and ts[0] in ("u32", "s32", "b32"):
            lane_mods[mods.index(ts[0])] = ts[0][0] + "16"     # each half all ones or zero
        npacked = len(srcs)
        if instr.opcode in ("setp", "set") and any(m in mods for m in ("and", "or", "xor")):
            npacked -= 1                                      # the predicate operand
        lanes = [self.unpack(v) for v in srcs[:npacked]]
        rest = srcs[npacked:]
        src_types = [lane_t] * npacked + ["pred"] * len(rest)
        if instr.opcode == "setp":
            return [self.scalar("setp", lane_mods, [lv[k] for lv in lanes] + rest, src_types, "i1")
                    for k in (0, 1)][:len(result_types)]
        out = [self.scalar(instr.opcode, lane_mods, [lv[k] for lv in lanes] + rest, src_types,
                           "i16") for k in (0, 1)]
        return [self.pack(out[0], out[1])]


def _is_unpack(op: Operation) -> bool:
    """`mov.b32 {lo, hi}, r`: a 32-bit value split into its two 16-bit halves."""
    return op.name == "ptx.mov" and len(op.operands) == 1 and len(op.results) == 2 and \
        op.attributes.get("mods") == ["b32"] and op.operands[0].type == "i32" and \
        all(r.type == "i16" for r in op.results)


def _is_pack(op: Operation) -> bool:
    """`mov.b32 r, {lo, hi}`: two 16-bit halves joined into a 32-bit value."""
    return op.name == "ptx.mov" and len(op.operands) == 2 and len(op.results) == 1 and \
        op.attributes.get("mods") == ["b32"] and op.results[0].type == "i32" and \
        all(v.type == "i16" for v in op.operands)


def fold_half_packing(region: Region) -> int:
    """The halves of a packed value taken where they are known, after expansion: an unpack
    of a pack gives the pack's own halves, a second unpack of a value in the same block the
    first one's (a chain of f16x2 fmas otherwise packs each result and unpacks it again for
    the next, and unpacks a shared operand once per instruction: six ops per packed fma
    instead of two, each lowered and optimized); unpacks and packs left without uses are
    removed (they have no effects).  Exact: the halves are the same bits.  Returns how many
    unpacks were folded."""
    folded = 0
    for block in region.blocks:
        first: dict[int, Operation] = {}             # id(packed value) -> its first unpack
        here = folded
        for op in block.ops:
            if not _is_unpack(op):
                continue
            src = op.operands[0]
            owner = getattr(src, "op", None)
            if owner is not None and _is_pack(owner):
                halves: Sequence[Value] = owner.operands
            elif id(src) in first:
                halves = first[id(src)].results
            else:
                first[id(src)] = op
                continue
            for r, h in zip(op.results, halves):
                replace_all_uses(r, h)
            folded += 1
        if folded == here:
            continue
        kept: list[Operation] = []
        for op in reversed(block.ops):
            if (_is_unpack(op) or _is_pack(op)) and not any(r.uses for r in op.results):
                op.drop_uses()
                continue
            kept.append(op)
        block.ops[:] = kept[::-1]
    return folded


def expand_deferred(region: Region, const: Const, error: Error) -> int:
    """Expands the ops translation deferred (and the fmas contraction made of them) as
    translation expands the others; returns how many it expanded."""
    count = 0
    for block in region.blocks:
        out: list[Operation] = []
        for op in block.ops:
            ts = [m for m in op.attributes.get("mods", []) if is_ptx_type(m)] \
                if op.name.startswith("ptx.") else []
            instr = Instruction(op.name.removeprefix("ptx."), tuple(op.attributes["mods"]), (),
                                int(op.attributes.get("line", 0))) \
                if len(ts) == 1 and ts[0] in _DEFERRED_TYPES else None
            if instr is None or not needs_expansion(instr):
                out.append(op)
                continue

            def emit(new: Operation) -> Operation:
                new.parent = block
                out.append(new)
                return new
            results = expand(instr, list(op.operands), ts * len(op.operands),
                             [r.type for r in op.results], emit, const, error)
            replace_all_uses(op.results[0], results[0])
            op.drop_uses()
            count += 1
        block.ops[:] = out
    return count


def expand(instr: Instruction, srcs: list[Value], src_types: list[str], result_types: list[str],
           emit: Emit, const: Const, error: Error) -> list[Value]:
    """The IR values of `instr`'s destinations, computed with the ops above (emitted through
    `emit`)."""
    ex = _Expander(instr, emit, const, error)
    if any(t in PACKED for t in _types(instr.modifiers)):
        return ex.packed(srcs, result_types)
    return [ex.scalar(instr.opcode, list(instr.modifiers), srcs, src_types, result_types[0])]
