"""Tensor-core instructions (`wmma.*`, `mma.sync`, `ldmatrix`): which shapes and types cpuify
implements, how many registers each operand has, and the fragment layouts, i.e. which
element (row, column) of the warp's matrix each lane's register element holds.

A layout is written as the element offsets of lane 0 plus how the row and column move with
the lane's group `g = lane >> 2` and its index in the group `t = lane & 3`: every layout of
the PTX ISA (mma.sync) and every wmma layout an H100 (sm_90, nvcc 13) showed has that form.

  mma.sync     the layouts the PTX ISA documents ("Matrix fragments for mma.m16n8k16" ...)
  wmma.*       CUDA leaves them opaque; these are the ones an H100 uses (read off a GPU by
               loading matrices whose elements are their own indices; tests/data holds the
               readout): each is the mma.m16n8k* layout of the same types tiled over the
               wmma shape, f16 `a`/`b` fragments holding copies (16 halves for 8 or 4
               distinct elements).  Row- and column-major loads give the same (row, column)
               for a register element, so the `.row`/`.col` qualifiers of `wmma.mma` change
               nothing.

This module is the specification that code generation and the reference interpreter both
read (like the PTX AST): each computes fragments from it with its own code."""

from __future__ import annotations

import re
from dataclasses import dataclass

#: (dr, dc) per unit of g and of t, and lane 0's (row, column) per element; or ("table",
#: the 32 lanes' (row, column) of offset (0, 0), the offsets)
Layout = tuple[object, object, tuple[tuple[int, int], ...]]

_G_ROW, _G_COL = (1, 0), (0, 1)


def _rows(*offsets: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    return tuple(offsets)


def _shift(offs: tuple[tuple[int, int], ...], dr: int, dc: int) -> tuple[tuple[int, int], ...]:
    return tuple((r + dr, c + dc) for r, c in offs)


# 16-bit A of m16n8k16 (a0..a7), B of m16n8k16 (b0..b3), C of m16n8 (c0..c3)
_A16 = _rows((0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9))
_B16 = _rows((0, 0), (1, 0), (8, 0), (9, 0))
_C = _rows((0, 0), (0, 1), (8, 0), (8, 1))
# 8-bit A and B of m16n8k16
_A8 = _rows(*[(0, i) for i in range(4)], *[(8, i) for i in range(4)])
_B8 = _rows(*[(i, 0) for i in range(4)])

#: (instruction family, shape, operand class, matrix) -> layout; operand classes: "16"
#: (f16, bf16), "f16" where f16 fragments differ from bf16 ones (copies), "8" (s8, u8),
#: "tf32", "f64", "acc" (f32, f16, s32 accumulators)
LAYOUTS: dict[tuple[str, str, str, str], Layout] = {
    # ---- mma.sync (PTX ISA) ----
    ("mma", "m16n8k16", "16", "a"): ((1, 0), (0, 2), _A16),
    ("mma", "m16n8k16", "16", "b"): ((0, 1), (2, 0), _B16),
    ("mma", "m16n8k8", "16", "a"): ((1, 0), (0, 2), _A16[:4]),
    ("mma", "m16n8k8", "16", "b"): ((0, 1), (2, 0), _B16[:2]),
    ("mma", "m16n8k4", "tf32", "a"): ((1, 0), (0, 1), _rows((0, 0), (8, 0))),
    ("mma", "m16n8k4", "tf32", "b"): ((0, 1), (1, 0), _rows((0, 0))),
    ("mma", "m16n8k8", "tf32", "a"): ((1, 0), (0, 1), _rows((0, 0), (8, 0), (0, 4), (8, 4))),
    ("mma", "m16n8k8", "tf32", "b"): ((0, 1), (1, 0), _rows((0, 0), (4, 0))),
    ("mma", "m16n8k16", "8", "a"): ((1, 0), (0, 4), _A8),
    ("mma", "m16n8k16", "8", "b"): ((0, 1), (4, 0), _B8),
    ("mma", "m16n8k32", "8", "a"): ((1, 0), (0, 4), _A8 + _shift(_A8, 0, 16)),
    ("mma", "m16n8k32", "8", "b"): ((0, 1), (4, 0), _B8 + _shift(_B8, 16, 0)),
    ("mma", "m8n8k16", "8", "a"): ((1, 0), (0, 4), _A8[:4]),
    ("mma", "m8n8k16", "8", "b"): ((0, 1), (4, 0), _B8),
    ("mma", "m8n8k16", "acc", "c"): ((1, 0), (0, 2), _C[:2]),
    ("mma", "m8n8k4", "f64", "a"): ((1, 0), (0, 1), _rows((0, 0))),
    ("mma", "m8n8k4", "f64", "b"): ((0, 1), (1, 0), _rows((0, 0))),
    ("mma", "m8n8k4", "f64", "c"): ((1, 0), (0, 2), _rows((0, 0), (0, 1))),
    # ---- wmma (as an H100 lays them out) ----
    ("wmma", "m16n16k16", "16", "a"): ((1, 0), (0, 2), _A16),
    ("wmma", "m16n16k16", "f16", "a"): ((1, 0), (0, 2), _A16 * 2),
    ("wmma", "m16n16k16", "16", "b"): ((0, 1), (2, 0), _B16 + _shift(_B16, 0, 8)),
    ("wmma", "m16n16k16", "f16", "b"): ((0, 1), (2, 0), (_B16 + _shift(_B16, 0, 8)) * 2),
    ("wmma", "m16n16k16", "8", "a"): ((1, 0), (0, 4), _A8),
    ("wmma", "m16n16k16", "8", "b"): ((0, 1), (4, 0), _B8 + _shift(_B8, 0, 8)),
    ("wmma", "m16n16k16", "acc", "c"): ((1, 0), (0, 2), _C + _shift(_C, 0, 8)),
    ("wmma", "m32n8k16", "16", "a"): ((1, 0), (0, 2), _A16 + _shift(_A16, 16, 0)),
    ("wmma", "m32n8k16", "f16", "a"): ((1, 0), (0, 2), _A16 + _shift(_A16, 16, 0)),
    ("wmma", "m32n8k16", "16", "b"): ((0, 1), (2, 0), _B16),
    ("wmma", "m32n8k16", "f16", "b"): ((0, 1), (2, 0), _B16 * 4),
    ("wmma", "m32n8k16", "8", "a"): ((1, 0), (0, 4), _A8 + _shift(_A8, 16, 0)),
    ("wmma", "m32n8k16", "8", "b"): ((0, 1), (4, 0), _B8),
    ("wmma", "m32n8k16", "acc", "c"): ((1, 0), (0, 2), _C + _shift(_C, 16, 0)),
    ("wmma", "m8n32k16", "16", "a"): ((1, 0), (0, 2), _rows((0, 0), (0, 1), (0, 8), (0, 9))),
    ("wmma", "m8n32k16", "f16", "a"): ((1, 0), (0, 2), _rows((0, 0), (0, 1), (0, 8), (0, 9)) * 4),
    ("wmma", "m8n32k16", "16", "b"): ((0, 1), (2, 0), _rows(
        (0, 0), (1, 0), (0, 8), (1, 8), (8, 0), (9, 0), (8, 8), (9, 8),
        (0, 16), (1, 16), (0, 24), (1, 24), (8, 16), (9, 16), (8, 24), (9, 24))),
    ("wmma", "m8n32k16", "8", "a"): ((1, 0), (0, 4), _A8[:4]),
    ("wmma", "m8n32k16", "8", "b"): ((0, 1), (4, 0), _B8 + _shift(_B8, 0, 8) + _shift(_B8, 0, 16)
                                     + _shift(_B8, 0, 24)),
    ("wmma", "m8n32k16", "acc", "c"): ((0, 1), (2, 0), _rows(
        (0, 0), (1, 0), (0, 8), (1, 8), (0, 16), (1, 16), (0, 24), (1, 24))),
    ("wmma", "m16n16k8", "tf32", "a"): ((1, 0), (0, 1), _rows((0, 0), (8, 0), (0, 4), (8, 4))),
    ("wmma", "m16n16k8", "tf32", "b"): ((0, 1), (1, 0), _rows((0, 0), (4, 0), (0, 8), (4, 8))),
    ("wmma", "m16n16k8", "acc", "c"): ((1, 0), (0, 2), _C + _shift(_C, 0, 8)),
    ("wmma", "m8n8k4", "f64", "a"): ((1, 0), (0, 1), _rows((0, 0))),
    ("wmma", "m8n8k4", "f64", "b"): ((0, 1), (1, 0), _rows((0, 0))),
    ("wmma", "m8n8k4", "f64", "c"): ((1, 0), (0, 2), _rows((0, 0), (0, 1))),
}
# mma.m8n8k4 with f16 inputs (Volta's): four quad pairs (lanes 4q..4q+3 and 4q+16..4q+19)
# each compute an 8x8x4 product of their own.  Written as one warp-wide product of a 32x4 A
# and a 4x32 B of which D keeps the diagonal 8x8 blocks (quad pair q: rows and columns
# 8q..8q+7); the lane's index in its quad pair is i = l % 4 + 4 (l / 16).  Read off an H100.
def _volta(base) -> tuple[str, tuple[tuple[int, int], ...]]:  # type: ignore[no-untyped-def]
    return "table", tuple(base((lane >> 2) & 3, (lane & 3) + 4 * (lane >> 4), lane)
                          for lane in range(32))


LAYOUTS[("mma", "m8n8k4", "16.row", "a")] = (
    *_volta(lambda q, i, lane: (8 * q + i, 0)), _rows((0, 0), (0, 1), (0, 2), (0, 3)))
LAYOUTS[("mma", "m8n8k4", "16.col", "b")] = (
    *_volta(lambda q, i, lane: (0, 8 * q + i)), _rows((0, 0), (1, 0), (2, 0), (3, 0)))
LAYOUTS[("mma", "m8n8k4", "16.row", "b")] = (
    *_volta(lambda q, i, lane: (lane & 3, 8 * q + 4 * (lane >> 4))),
    _rows((0, 0), (0, 1), (0, 2), (0, 3)))
LAYOUTS[("mma", "m8n8k4", "acc", "c")] = (
    *_volta(lambda q, i, lane: (8 * q + (lane & 1) + 4 * (lane >> 4), 8 * q + 2 * ((lane >> 1) & 1))),
    _rows((0, 0), (0, 1), (2, 0), (2, 1), (0, 4), (0, 5), (2, 4), (2, 5)))

# the m8n32k16 f16 B fragment is the bf16 one (16 distinct halves)
LAYOUTS[("wmma", "m8n32k16", "f16", "b")] = LAYOUTS[("wmma", "m8n32k16", "16", "b")]
for _shape in ("m16n8k16", "m16n8k8", "m16n8k4", "m16n8k32"):
    LAYOUTS[("mma", _shape, "acc", "c")] = ((1, 0), (0, 2), _C)

WMMA_SHAPES = {"m16n16k16", "m32n8k16", "m8n32k16", "m16n16k8", "m8n8k4"}
MMA_SHAPES = {"m16n8k16", "m16n8k8", "m16n8k4", "m16n8k32", "m8n8k4", "m8n8k16"}

#: bits of one element of each type
ELEMENT_BITS = {"f16": 16, "bf16": 16, "s8": 8, "u8": 8, "tf32": 32, "f32": 32, "s32": 32,
                "f64": 64}


def shape_dims(shape: str) -> tuple[int, int, int]:
    m = re.fullmatch(r"m(\d+)n(\d+)k(\d+)", shape)
    assert m is not None
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def operand_class(family: str, shape: str, ptx_type: str, matrix: str, order: str = "") -> str:
    if family == "mma" and shape == "m8n8k4" and ptx_type == "f16" and matrix in ("a", "b"):
        return f"16.{order}"
    if matrix in ("c", "d"):
        return "f64" if ptx_type == "f64" else "acc"
    if ptx_type in ("f16", "bf16"):
        return "f16" if family == "wmma" and ptx_type == "f16" and \
            (family, shape, "f16", matrix) in LAYOUTS else "16"
    if ptx_type in ("s8", "u8"):
        return "8"
    return ptx_type


def layout(family: str, shape: str, ptx_type: str, matrix: str, order: str = "") -> Layout | None:
    m = "c" if matrix == "d" else matrix
    return LAYOUTS.get((family, shape, operand_class(family, shape, ptx_type, m, order), m))


def lane_base(lay: Layout, lane: int) -> tuple[int, int]:
    """(row, column) of element offset (0, 0) for `lane`: linear in g = lane / 4 and
    t = lane % 4, or (Volta's quad pairs) a table of the 32 lanes."""
    first, second, _ = lay
    if first == "table":
        return second[lane]                            # type: ignore[return-value]
    (gr, gc), (tr, tc) = first, second                 # type: ignore[misc]
    g, t = lane >> 2, lane & 3
    return gr * g + tr * t, gc * g + tc * t


def lane_elements(lay: Layout, lane: int) -> list[tuple[int, int]]:
    """(row, column) of each register element of `lane` (A: row of M, column of K; B: row of
    K, column of N; C/D: row of M, column of N)."""
    br, bc = lane_base(lay, lane)
    return [(r + br, c + bc) for r, c in lay[2]]


def per_register(ptx_type: str) -> int:
    """Elements packed into one register (f16/bf16 two per .b32, s8/u8 four)."""
    return {16: 2, 8: 4}.get(ELEMENT_BITS[ptx_type], 1)


@dataclass(frozen=True)
class MatrixOp:
    """A parsed `wmma.load/store/mma` or `mma.sync` instruction."""
    family: str                 # "wmma" or "mma"
    action: str                 # "load", "store", "mma"
    shape: str
    matrix: str                 # load: a/b/c; store: d; mma: ""
    layouts: tuple[str, ...]    # load/store: (row|col,); mma: (alayout, blayout)
    types: dict[str, str]       # matrix -> element type ("a", "b", "c", "d")
    space: str                  # load/store: the state space ("generic" if none)
    satfinite: bool = False

    def layout(self, matrix: str) -> Layout | None:
        order = "" if self.family != "mma" else self.layouts[0] if matrix == "a" else \
            self.layouts[1] if matrix == "b" else ""
        return layout(self.family, self.shape, self.types[matrix], matrix, order)

    def quad_pairs(self) -> bool:
        """mma.m8n8k4 with f16 inputs: four 8x8x4 products, one per quad pair."""
        return self.family == "mma" and self.shape == "m8n8k4" and self.types.get("a") == "f16"

    def dims(self) -> tuple[int, int, int]:
        """(M, N, K) of the warp-wide product the fragments describe."""
        return (32, 32, 4) if self.quad_pairs() else shape_dims(self.shape)

    def registers(self, matrix: str) -> int:
        lay = self.layout(matrix)
        assert lay is not None
        return len(lay[2]) // per_register(self.types[matrix])



_SPACE = {"global", "shared", "generic", "shared::cta"}


def parse_matrix_op(opcode: str, modifiers: tuple[str, ...]) -> MatrixOp | str:
    """The instruction, or why cpuify does not implement it (a sentence)."""
    mods = [m for m in modifiers if m not in ("sync", "aligned")]
    shapes = [m for m in mods if re.fullmatch(r"m\d+n\d+k\d+", m)]
    if len(shapes) != 1:
        return "expected one shape qualifier (e.g. .m16n16k16)"
    shape = shapes[0]
    known_shapes = WMMA_SHAPES if opcode == "wmma" else MMA_SHAPES
    if shape not in known_shapes:
        return f"{opcode} shape .{shape} is not supported (supported: {', '.join(sorted(known_shapes))})"
    types = [m for m in mods if m in ELEMENT_BITS]
    lays = [m for m in mods if m in ("row", "col")]
    satfinite = "satfinite" in mods
    # (.rn: the f64 rounding, the only one there is)
    known = set(shapes) | set(types) | set(lays) | {"satfinite", "load", "store", "mma", "a",
                                                   "b", "c", "d", "rn"} | _SPACE
    unknown = [m for m in mods if m not in known]
    if unknown:
        return f"qualifier .{unknown[0]} is not supported"
    if opcode == "wmma":
        if shape not in WMMA_SHAPES:
            return f"wmma shape .{shape} is not supported (supported: {', '.join(sorted(WMMA_SHAPES))})"
        action = mods[0]
        space = next((m for m in mods if m in _SPACE), "generic").replace("shared::cta", "shared")
        if action in ("load", "store"):
            matrix = mods[1]
            if len(types) != 1 or len(lays) != 1 or matrix not in ("a", "b", "c", "d") or \
                    (action == "load") == (matrix == "d"):
                return "expected wmma.load.{a,b,c} or wmma.store.d with one layout and one type"
            t = types[0]
            op = MatrixOp("wmma", action, shape, matrix, tuple(lays), {matrix: t}, space)
            if layout("wmma", shape, t, matrix) is None or not _wmma_type_ok(shape, matrix, t):
                return f"wmma.{action}.{matrix} .{shape} .{t} is not a wmma fragment cpuify implements"
            return op
        if action != "mma" or len(lays) != 2:
            return "expected wmma.load, wmma.store or wmma.mma with two layouts"
        if len(types) == 2:         # f16 inputs: .dtype.ctype
            d, c = types
            a = b = "f16"
        elif len(types) == 4:
            d, a, b, c = types
        else:
            return "expected .dtype.ctype (f16 inputs) or .dtype.atype.btype.ctype"
        op = MatrixOp("wmma", "mma", shape, "", tuple(lays), {"a": a, "b": b, "c": c, "d": d},
                      "", satfinite)
        why = _mma_types_ok(op)
        return why or op
    # mma.sync
    if shape not in MMA_SHAPES:
        return f"mma shape .{shape} is not supported (supported: {', '.join(sorted(MMA_SHAPES))})"
    if len(types) != 4 or len(lays) != 2:
        return "expected mma.sync.aligned.shape.row.col.dtype.atype.btype.ctype"
    d, a, b, c = types
    volta = shape == "m8n8k4" and a == "f16"
    if lays != ["row", "col"] and not (volta and lays == ["row", "row"]):
        return "only the .row.col layouts (and .row.row for m8n8k4 with f16) are supported"
    if volta and (c, d) != ("f32", "f32"):
        return "m8n8k4 with .f16 inputs is supported with .f32 accumulators only"
    op = MatrixOp("mma", "mma", shape, "", tuple(lays), {"a": a, "b": b, "c": c, "d": d}, "",
                  satfinite)
    return _mma_types_ok(op) or op


def _wmma_type_ok(shape: str, matrix: str, t: str) -> bool:
    if matrix in ("a", "b"):
        allowed = {"m16n16k8": ("tf32",), "m8n8k4": ("f64",)}.get(shape, ("f16", "bf16", "s8", "u8"))
    else:
        allowed = {"m16n16k8": ("f32",), "m8n8k4": ("f64",)}.get(shape, ("f16", "f32", "s32"))
    return t in allowed


def _mma_types_ok(op: MatrixOp) -> str | None:
    a, b, c, d = (op.types[m] for m in "abcd")
    if a != b and not ({a, b} <= {"s8", "u8"}):
        return f"mixed input types .{a}/.{b} are not supported"
    for m in "abcd":
        if op.layout(m) is None:
            return f".{op.shape} with .{op.types[m]} {m.upper()} fragments is not supported"
    if a in ("f16",):
        ok = c in ("f16", "f32") and d in ("f16", "f32")
    elif a in ("bf16", "tf32"):
        ok = c == d == "f32"
    elif a in ("s8", "u8"):
        ok = c == d == "s32"
    else:
        ok = c == d == "f64"
    if not ok:
        return f"accumulator types .{d}/.{c} do not go with .{a} inputs"
    if op.satfinite and a not in ("s8", "u8"):
        return ".satfinite is implemented for integer mma only"
    return None


# ---- ldmatrix ----

@dataclass(frozen=True)
class LdMatrix:
    """ldmatrix / stmatrix / movmatrix (m8n8 b16): matrix m's row i is at the address lane
    8m + i gives; lane l holds row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 of each matrix
    (.trans: the transposed matrix)."""
    count: int          # matrices: 1, 2 or 4 (one register each)
    trans: bool
    space: str
    action: str = "ld"  # "ld", "st" or "mov"


def parse_ldmatrix(modifiers: tuple[str, ...], opcode: str = "ldmatrix") -> LdMatrix | str:
    mods = [m for m in modifiers if m not in ("sync", "aligned")]
    if opcode == "movmatrix":
        if sorted(mods) != ["b16", "m8n8", "trans"]:
            return "only movmatrix.sync.aligned.m8n8.trans.b16 is supported"
        return LdMatrix(1, True, "generic", "mov")
    count = next((int(m[1]) for m in mods if m in ("x1", "x2", "x4")), 0)
    rest = [m for m in mods if m not in ("x1", "x2", "x4", "m8n8", "b16", "trans", "shared",
                                         "shared::cta")]
    if "m8n8" not in mods or "b16" not in mods or not count or rest:
        return f"only {opcode}.sync.aligned.m8n8.{{x1,x2,x4}}{{.trans}}{{.shared}}.b16 is supported"
    return LdMatrix(count, "trans" in mods, "shared" if any(m.startswith("shared") for m in mods)
                    else "generic", "st" if opcode == "stmatrix" else "ld")
