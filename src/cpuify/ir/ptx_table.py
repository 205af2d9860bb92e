"""The PTX instruction table: one entry per PTX opcode that says everything cpuify knows
about it, so that adding an instruction is one entry.

An entry (`Instruction`) declares
  * the opcode and the modifiers it accepts besides its types (the lifter refuses others,
    lifting/semantics.py), whether it must carry a type, whether it has half forms;
  * its memory effects ((kind, space) pairs, `()` when pure; ir/dialects.py registers them);
  * its semantics: a list of `Form`s, the first whose guard matches an op's modifiers
    applies.  A form either gives the results as expressions of a tiny typed expression
    language over the operands (below), or says `hand=True`: a hand-written lowering and
    evaluation, named in the entry's `hand` field (see there where they live).

Two readers interpret the expressions independently: the code generator lowers them to
LLVM IR (codegen/ptx_spec.py), the reference interpreter evaluates them with Python
integers and NumPy floats (interp/spec_eval.py).  Neither reads the other's code: the
interpreter stays an independent oracle of the compiler because it evaluates the spec.
The expression language (Src, Lit, Fn over FUNCTIONS, the type symbols) is
ir/ptx_expressions.py; this module re-exports it.

This module imports nothing above the IR: the lifter, the code generator and the
interpreter all read it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cpuify.ir.modifiers import is_ptx_type, type_size
from cpuify.ir.ptx_expressions import (  # noqa: F401  (the table's language, re-exported)
    ADDRESS_TYPES, ATOMIC_OPERATIONS, COMPARISONS, FLOAT_CLASSES, FUNCTIONS, PRMT_MODES,
    STATE_SPACES, Expr, Fn, Lit, Src, _fn, is_address_type, memory_order, resolve_param,
    resolve_type, result_type, space_of, state_space, takes_arguments, type_symbols,
)


# --- forms and entries -------------------------------------------------------------------------

INTS = frozenset(("b16", "u16", "s16", "b32", "u32", "s32", "b64", "u64", "s64"))
SIGNED = frozenset(("s16", "s32", "s64"))
UNSIGNED = frozenset(("u16", "u32", "u64"))
FLOATS = frozenset(("f32", "f64"))
DIRECTED = frozenset(("rz", "rm", "rp"))
CVT_INTS = INTS | {"u8", "s8", "b8"}


@dataclass(frozen=True, slots=True)
class Form:
    """One form of an instruction: a guard on the op's modifiers and what it computes."""
    results: tuple[Expr, ...] = ()      # result i := results[i]
    effects: tuple[Expr, ...] = ()      # evaluated after the results, in order (stores)
    types: frozenset[str] | None = None   # T must be one of these (None: any)
    all_types: frozenset[str] | None = None   # every type modifier must be one of these
    dest_types: frozenset[str] | None = None   # D must be one of these
    mods: frozenset[str] = frozenset()    # all of these modifiers present
    without: frozenset[str] = frozenset()  # none of these present
    # .ftz on f32: "sources" flushes subnormal sources, "all" sources and the result;
    # "all" also applies .sat to a float result (clamp to [0, 1], NaN -> 0)
    flush: str = "none"
    hand: bool = False                  # computed by the entry's hand-written code
    sources: int | None = None          # the op has this many operands (None: any)
    dests: int | None = None            # the op has this many results (None: any)

    def matches(self, op_mods: list[str] | tuple[str, ...], n_sources: int | None = None,
                n_results: int | None = None) -> bool:
        """Whether the form applies to an op with these modifiers and, where given, numbers
        of operands and results (unknown numbers match any)."""
        if None not in (self.sources, n_sources) and self.sources != n_sources:
            return False
        if None not in (self.dests, n_results) and self.dests != n_results:
            return False
        ts = [m for m in op_mods if is_ptx_type(m)]
        t, d = (ts[-1], ts[0]) if ts else ("b32", "b32")
        if self.types is not None and t not in self.types:
            return False
        if self.dest_types is not None and d not in self.dest_types:
            return False
        if self.all_types is not None and not set(ts) <= self.all_types:
            return False
        if not self.mods <= set(op_mods):
            return False
        return not (self.without & set(op_mods))

    def source_types(self, op_mods: list[str] | tuple[str, ...]) -> dict[int, str]:
        """The PTX type each operand is read as (what an immediate operand is typed as)."""
        key = (id(self), tuple(op_mods))
        cached = _SOURCE_TYPES_CACHE.get(key)
        if cached is not None:
            return cached
        found: dict[int, str] = {}
        work = [*self.results, *self.effects]
        while work:
            x = work.pop(0)
            if isinstance(x, Src):
                t = resolve_type(x.type, op_mods)
                if t != "R" and not is_address_type(t):   # (those: the lifter's own rules)
                    found.setdefault(x.index, t)
            elif isinstance(x, Fn):
                work[:0] = x.args
        _SOURCE_TYPES_CACHE[key] = found
        return found


@dataclass(frozen=True, slots=True)
class Instruction:
    """Everything about one PTX opcode (see the module docstring)."""
    opcode: str
    modifiers: frozenset[str] = frozenset()   # accepted modifiers besides types
    effects: tuple[tuple[str, str], ...] = ()  # (read|write, space|"$space"); () pure
    forms: tuple[Form, ...] = ()
    hand: str = ""                  # where the hand-written lowering/evaluation live
    ir_op: str | None = None        # the IR op it becomes (None: ptx.<opcode>; "" other ops)
    typed: bool = True              # must carry a type modifier
    halves: bool = False            # has f16/bf16/f16x2/bf16x2 forms (lifting/halves.py)
    pure_ir_op: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pure_ir_op", not self.effects)

    @property
    def ir_name(self) -> str:
        return f"ptx.{self.opcode}" if self.ir_op is None else self.ir_op

    @property
    def spec_driven(self) -> bool:
        """Whether some form is computed from the spec (not hand-written)."""
        return any(not f.hand for f in self.forms)

    @property
    def hand_written(self) -> bool:
        """Whether some form (or the whole instruction) is hand-written code."""
        return not self.forms or any(f.hand for f in self.forms)

    def form_for(self, op_mods: list[str] | tuple[str, ...], n_sources: int | None = None,
                 n_results: int | None = None) -> Form | None:
        """The form that applies to an op with these modifiers and numbers of operands and
        results (None: no form does; an unknown number matches any)."""
        key = (self.opcode, tuple(op_mods), n_sources, n_results)
        found = _FORM_CACHE.get(key, _MISSING)
        if found is _MISSING:
            found = _FORM_CACHE[key] = next(
                (f for f in self.forms if f.matches(op_mods, n_sources, n_results)), None)
        return found  # type: ignore[return-value]

    def form_of(self, op: "OperationLike") -> Form | None:
        """The form that applies to an IR op of this instruction."""
        return self.form_for(op.attributes.get("mods", ()), len(op.operands), len(op.results))


class OperationLike(Protocol):
    """What form_of reads of an IR op (ir.core.Operation)."""
    attributes: dict[str, Any]
    operands: Sequence[object]
    results: Sequence[object]


#: (form, modifiers) -> operand types, for the lifter's typing of immediates
_SOURCE_TYPES_CACHE: dict[tuple[int, tuple[str, ...]], dict[int, str]] = {}
#: (opcode, modifiers, operands, results) -> form: looked up when an op is lifted and lowered
_FORM_CACHE: dict[tuple[str, tuple[str, ...], int | None, int | None], object] = {}
_MISSING = object()


# --- the table -----------------------------------------------------------------------------------

a, b, c = Src(0), Src(1), Src(2)
_ROUND = frozenset(("rn", "rz", "rm", "rp"))
_ROUNDI = frozenset(("rni", "rzi", "rmi", "rpi"))
_SPACES = frozenset(("global", "shared", "local", "const", "param", "generic"))
# ld/st qualifiers: the memory orders (what memory_order reads; .weak is the default) ...
_MEMORY_ORDERS = frozenset(("volatile", "relaxed", "acquire", "release", "weak"))
# ... their scopes and the cache hints, which a CPU's coherent memory makes moot
_SCOPES = frozenset(("gpu", "cta", "sys", "cluster"))
_CACHE_HINTS = frozenset(("ca", "cg", "cs", "lu", "cv", "wb", "wt", "nc", "L1::evict_last",
                          "L1::no_allocate", "L2::64B", "L2::128B", "L2::256B",
                          "L1::evict_normal", "L1::evict_first", "L2::cache_hint", "L1", "L2",
                          "evict_last", "evict_first", "evict_normal", "no_allocate", "64B",
                          "128B", "256B", "unified"))
_CACHE = _MEMORY_ORDERS | _SCOPES | _CACHE_HINTS
_VEC = frozenset(("v2", "v4", "v8"))
_CMP_MODS = frozenset(COMPARISONS) | {"and", "or", "xor", "ftz"}
_BOOL = ("and", "or", "xor")
_ATOM_KINDS = frozenset(("add", "min", "max", "inc", "dec", "and", "or", "xor", "exch"))
_ORDER = frozenset(("relaxed", "acquire", "release", "acq_rel", "gpu", "cta", "sys", "noftz"))
_TEX_GEOMETRY = frozenset(("1d", "2d", "3d", "a1d", "a2d"))
_SURF = _TEX_GEOMETRY | {"ca", "cg", "cs", "cv", "wb", "wt", "b", "v2", "v4", "trap", "clamp",
                         "zero"}
READ_SPACE = (("read", "$space"),)
WRITE_SPACE = (("write", "$space"),)
READ_WRITE_SPACE = (("read", "$space"), ("write", "$space"))
ORDERS = (("read", "shared"), ("write", "shared"), ("read", "global"), ("write", "global"))
NO_MEMORY = (("none", ""),)          # not pure (keeps its place), touches no memory


def _f(*results: Expr, **guard: object) -> Form:
    g = {k: frozenset(v) if isinstance(v, (set, tuple, list, frozenset)) and k != "effects"
         else v for k, v in guard.items()}  # type: ignore[arg-type]
    return Form(results=results, **g)  # type: ignore[arg-type]


def _hand(**guard: object) -> Form:
    return Form(hand=True, **{k: frozenset(v) for k, v in guard.items()})  # type: ignore[arg-type]


def _wide_product(x: Expr, y: Expr) -> Fn:
    return _fn("mul", _fn("resize", x, type="W"), _fn("resize", y, type="W"))


def _mul24(x: Expr, y: Expr) -> Fn:
    return _fn("mul", _fn("ext", x, type="W", param=24), _fn("ext", y, type="W", param=24))


def _carry(name: str, x: Expr, y: Expr, carry_in: bool, product: bool = False
           ) -> tuple[Expr, Expr]:
    """x + y (x - y) with the carry (borrow) flag: the result and the flag out, a u32 0 or
    1 (bit w of the sum of the unsigned operands, in twice their width); `carry_in` adds
    (subtracts) the flag operand (the last operand: lifting/translate.py passes the flag as
    one) too.  The operands as unsigned: `product` takes x as it is (a mad's product)."""
    wide: list[Expr] = [_fn("resize", _fn("resize", x, type="U") if product else x, type="UW"),
                        _fn("resize", y, type="UW")]
    result: Expr = _fn(name, x, y)
    total: Expr = _fn(name, *wide)
    if carry_in:
        flag = _fn("and", Src(3 if product else 2, "u32"), Lit(1, "u32"))
        result = _fn(name, result, _fn("resize", flag, type="U"))
        total = _fn(name, total, _fn("resize", flag, type="UW"))
    out = _fn("and", _fn("slice", total, type="u32", param="w"), Lit(1, "u32"))
    return result, out


def _carry_forms(name: str, carry_in: bool) -> tuple[Form, ...]:
    return (_f(*_carry(name, Src(0, "U"), Src(1, "U"), carry_in), types=INTS),)


def _mad_carry_forms(carry_in: bool, mods: frozenset[str] = frozenset()) -> tuple[Form, ...]:
    """mad.cc/madc: the low or high half of the product plus c, with the carry flag."""
    hi = _fn("slice", _wide_product(a, b), type="T", param="w")
    return (_f(*_carry("add", hi, Src(2, "U"), carry_in, product=True), types=INTS,
               mods={"hi"} | mods),
            _f(*_carry("add", _fn("mul", a, b), Src(2, "U"), carry_in, product=True),
               types=INTS, mods=mods))


def _binary(name: str, sat: str | None = None) -> tuple[Form, ...]:
    """add/sub: integers (s32 .sat clamps; .cc sets the carry flag); f32/f64 rounded as the
    op says; f16 (.rn only)."""
    forms = [_f(*_carry(name, Src(0, "U"), Src(1, "U"), False), types=INTS, mods={"cc"})]
    if sat:
        forms.append(_f(_fn(sat, a, b), types=INTS, mods={"sat"}))
    forms += [_f(_fn(name, a, b), types=INTS),
              _f(_fn(name, a, b, param="$rnd"), types=FLOATS, flush="all"),
              _f(_fn(name, a, b), types={"f16"}, without=DIRECTED, flush="all")]
    return tuple(forms)


def _simd_absdiff(lanes: int) -> tuple[Form, ...]:
    """vabsdiff4/vabsdiff2 (SIMD video instructions) with the default selectors and mask:
    lane k of a (type A) and of b (type T), sign- or zero-extended, |a_k - b_k|.  `.add`:
    c plus the sum of the lanes' differences; otherwise the differences packed into d's
    lanes (kept to the lane's bits; `.sat` clamps them to the lane range of D first)."""
    bits = 32 // lanes
    diffs = [_fn("abs", _fn("sub", _fn("ext", _fn("slice", Src(0, "A"), type="A", param=bits * k), type="s32", param=bits),
                         _fn("ext", _fn("slice", b, type="T", param=bits * k), type="s32", param=bits)))
             for k in range(lanes)]
    total: Expr = Src(2, "D")
    for d in diffs:
        total = _fn("add", total, _fn("resize", d, type="D"))

    def packed(sat_bound: int | None) -> Expr:
        out: Expr | None = None
        for k, d in enumerate(diffs):
            if sat_bound is not None:
                d = _fn("min", d, Lit(sat_bound, "s32"))
            lane = _fn("and", _fn("resize", d, type="D"), Lit((1 << bits) - 1, "D"))
            if k:
                lane = _fn("shl", lane, Lit(bits * k, "u32"))
            out = lane if out is None else _fn("or", out, lane)
        assert out is not None
        return out

    word = frozenset(("u32", "s32"))
    return (_f(total, all_types=word, mods={"add"}),
            _f(packed((1 << bits) - 1), all_types=word, dest_types={"u32"}, mods={"sat"}),
            _f(packed((1 << (bits - 1)) - 1), all_types=word, dest_types={"s32"}, mods={"sat"}),
            _f(packed(None), all_types=word))


def _dot_product(a_bits: int, b_offset: int) -> Fn:
    """dp4a/dp2a: c plus the products of a's lanes (a_bits wide, type D) with b's bytes
    (type T) from byte b_offset up, each sign- or zero-extended by its type."""
    total: Expr = Src(2, "b32")
    for k in range(32 // a_bits):
        x = _fn("ext", _fn("slice", Src(0, "D"), type="D", param=a_bits * k), type="s32",
                param=a_bits)
        y = _fn("ext", _fn("slice", b, type="T", param=8 * (k + b_offset)), type="s32", param=8)
        total = _fn("add", total, _fn("mul", x, y))
    assert isinstance(total, Fn)
    return total


def _bfind_forms() -> tuple[Form, ...]:
    """bfind: the position of the most significant non-sign bit (.shiftamt: the left shift
    that would bring it to the top), 0xffffffff where there is none."""
    forms = []
    for ts in (("u32", "s32"), ("u64", "s64")):
        for signed in (False, True):
            t = ts[signed]
            x: Expr = _fn("select", _fn("cmp", a, Lit(0), param="lt"), _fn("not", a), a) \
                if signed else a
            none = _fn("cmp", x, Lit(0), param="eq")
            top = Lit(8 * type_size(t) - 1, "u32")
            for shiftamt in (True, False):
                pos = _fn("clz", x) if shiftamt else _fn("sub", top, _fn("clz", x))
                forms.append(_f(_fn("select", none, Lit(0xFFFFFFFF, "u32"), pos), types={t},
                                **({"mods": {"shiftamt"}} if shiftamt else {})))
    return tuple(forms)


def _byte_of(x: Expr) -> Fn:
    """The bit-field instructions read their position and length operands mod 256."""
    return _fn("and", x, Lit(0xFF, "u32"))


def _shf_forms() -> tuple[Form, ...]:
    """shf.l/shf.r: a funnel shift of b:a; .wrap takes the amount mod 32 (as `funnel` does),
    .clamp at 32, where the result is the whole other word (a for .l, b for .r)."""
    forms = []
    n = Src(2, "u32")
    for direction, whole in (("l", a), ("r", b)):
        shifted = _fn("funnel", a, b, n, param=direction)
        forms += [_f(_fn("select", _fn("cmp", n, Lit(32, "u32"), param="hs"), whole, shifted),
                     types={"b32"}, mods={direction, "clamp"}),
                  _f(shifted, types={"b32"}, mods={direction})]
    return tuple(forms)


def _bmsk_forms() -> tuple[Form, ...]:
    """bmsk: the ones from bit a up to (not including) bit a + b.  PTX ISA: mask0 = ~0 << a1,
    mask1 = ~0 << (a1 + b1), d = mask0 & ~mask1, with mask1 = 0 where a1 + b1 overflows
    (and in .clamp where a or b >= 32, mask0 = 0 where a >= 32) and ~0 where b1 = 0.  The
    shifts of the language give 0 for amounts >= 32, which is each of those cases: .wrap
    takes a1, b1 mod 32 (b1 = 0: mask1 = mask0, d = 0 as with ~0); .clamp adds min(b, 32)
    (b >= 32: a sum >= 32) to a (a >= 32: mask0 = 0, whatever mask1 is)."""
    ones = Lit(0xFFFFFFFF, "b32")
    x, y = Src(0, "u32"), Src(1, "u32")

    def mask(lo: Expr, width: Expr) -> Fn:
        return _fn("and", _fn("shl", ones, lo), _fn("not", _fn("shl", ones, _fn("add", lo, width))))

    five = Lit(31, "u32")
    return (_f(mask(_fn("and", x, five), _fn("and", y, five)), types={"b32"}, mods={"wrap"}),
            _f(mask(x, _fn("min", y, Lit(32, "u32"))), types={"b32"}, mods={"clamp"}))


def _setp_forms() -> tuple[Form, ...]:
    """setp: p = a <cmp> b, q = !p, each combined with the predicate operand by .and/.or/
    .xor when the op names one."""
    forms = []
    for boolop in _BOOL:
        r = _fn("cmp", a, b, param="$cmp")
        x = Src(2, "pred")
        forms.append(_f(_fn(boolop, r, x), _fn(boolop, _fn("not", r), x), mods={boolop},
                        flush="sources"))
    r = _fn("cmp", a, b, param="$cmp")
    forms.append(_f(r, _fn("not", r), flush="sources"))
    return tuple(forms)


def _set_forms() -> tuple[Form, ...]:
    """set: the comparison (combined as setp's) as all ones/1.0 or 0 of the destination
    type."""
    forms = []
    for boolop in (*_BOOL, None):
        for dest, one, zero, rt in ((INTS, -1, 0, "D"), ({"f32"}, 1.0, 0.0, "D"),
                                    ({"f16"}, 0x3C00, 0, "b16"), ({"bf16"}, 0x3F80, 0, "b16")):
            r: Expr = _fn("cmp", a, b, param="$cmp")
            if boolop is not None:
                r = _fn(boolop, r, Src(2, "pred"))
            forms.append(_f(_fn("select", r, Lit(one, rt), Lit(zero, rt)), dest_types=dest,
                            mods={boolop} if boolop else set(), flush="sources"))
    return tuple(forms)


def _cvt_forms() -> tuple[Form, ...]:
    """cvt.D.T: between integers a resize (.sat: clamped to D's range); into an integer a
    float rounded as the op's .rni/.rzi/.rmi/.rpi says (.rzi without one), clamped; a float
    with an integer rounding rounded to an integral value in its own type; otherwise (into a
    float) the value rounded as the op's .rn/.rz/.rm/.rp says; .rna into tf32.  .ftz
    flushes f32 sources and results, .sat clamps a float result to [0, 1] (flush "all");
    .relu and the packed halves become other ops in lifting (lifting/halves.py)."""
    into_float = frozenset(("f16", "bf16", "f32", "f64"))
    return (_f(_fn("resize", a, type="D"), all_types=CVT_INTS, without={"sat"}),
            _f(_fn("to_int", a, type="D"), all_types=CVT_INTS),
            _f(_fn("tf32", a, type="b32"), dest_types={"tf32"}, types={"f32"}, mods={"rna"}),
            _f(_fn("to_int", a, type="D", param="$irnd"), dest_types=CVT_INTS, flush="all"),
            *(_f(_fn("convert", _fn("round_int", a, param=m), type="D"), mods={m},
                 dest_types=into_float, flush="all") for m in sorted(_ROUNDI)),
            _f(_fn("convert", a, type="D", param="$rnd"), dest_types=into_float, flush="all"))


def _mov_forms() -> tuple[Form, ...]:
    """mov: with a vector of n sources `{a, b}` their bits packed into d (the first lowest;
    .b16/.b32/.b64/.b128 with 2 or 4 parts), with a vector of n results d's bits unpacked
    into them, else d := a."""
    forms = []
    for width in (16, 32, 64, 128):
        types = {f"{k}{width}" for k in "bus"} | ({f"f{width}"} if width in (32, 64) else set())
        for n in (2, 4):
            part = width // n
            if part < 8:
                continue
            forms.append(_f(_fn("concat", *(Src(k, "R") for k in range(n)), type="T"),
                            types=types, sources=n))
            whole = Src(0, "T")
            forms.append(_f(*(_fn("slice", whole, type=f"b{part}", param=part * k)
                              for k in range(n)), types=types, dests=n))
    forms.append(_f(a, sources=1, dests=1))
    return tuple(forms)


def _memory_forms(kind: str) -> tuple[Form, ...]:
    """ld/ldu (kind "load"), st ("store"), atom ("atomic") and red ("reduction"): operand 0
    the address in the op's state space ("S") plus the op's offset; ld.v2/v4/v8 and st's
    vectors as many consecutive elements of type T; atom/red's operation by its modifier."""
    at = _fn("at", Src(0, "S"))
    forms = []
    if kind == "load":
        for n in (1, 2, 4, 8):
            forms.append(_f(*(_fn("load", _fn("element", at, param=k), type="T")
                              for k in range(n)), dests=n))
    elif kind == "store":
        for n in (1, 2, 4, 8):
            forms.append(_f(effects=tuple(_fn("store", _fn("element", at, param=k),
                                              Src(k + 1, "T")) for k in range(n)),
                            sources=n + 1))
    else:
        for name in ATOMIC_OPERATIONS:
            if kind == "reduction" and name in ("exch", "cas"):
                continue
            operands = (Src(1, "T"), Src(2, "T")) if name == "cas" else (Src(1, "T"),)
            update = _fn("atomic", at, *operands, param=name)
            forms.append(_f(update, mods={name}) if kind == "atomic" else
                         _f(effects=(update,), mods={name}))
    return tuple(forms)


def _table() -> list[Instruction]:
    I = Instruction  # noqa: E741  (one letter: the table reads as a table)
    hi, wide, sat = "hi", "wide", "sat"
    return [
        # -- moves, conversions and addresses
        I("mov", typed=False, forms=_mov_forms()),
        I("cvt", _ROUND | _ROUNDI | {"ftz", "sat", "relu", "rna"}, typed=False, halves=True,
          forms=_cvt_forms()),
        # cvta.to.space: a generic address into the space's; cvta.space: back (.u32/.u64:
        # the register's width)
        I("cvta", frozenset({"to"}) | _SPACES, typed=False, forms=(
            _f(_fn("to_space", Src(0, "G"), type="S"), mods={"to"}),
            _f(_fn("to_generic", Src(0, "S"))))),
        I("isspacep", _SPACES, typed=False, forms=(
            _f(_fn("in_space", Src(0, "G"), param="$space")),)),
        # -- integer and float arithmetic
        I("add", frozenset({"cc", "sat", "ftz"}) | _ROUND, halves=True, forms=_binary("add", "add_sat"),
),
        I("sub", frozenset({"cc", "sat", "ftz"}) | _ROUND, halves=True, forms=_binary("sub", "sub_sat"),
),
        I("addc", frozenset({"cc"}), forms=_carry_forms("add", True)),
        I("subc", frozenset({"cc"}), forms=_carry_forms("sub", True)),
        I("mul", frozenset({"lo", "hi", "wide", "ftz", "sat"}) | _ROUND, halves=True, forms=(
            _f(_wide_product(a, b), types=INTS, mods={wide}),
            _f(_fn("slice", _wide_product(a, b), type="T", param="w"), types=INTS, mods={hi}),
            _f(_fn("mul", a, b), types=INTS),
            _f(_fn("mul", a, b, param="$rnd"), types=FLOATS, flush="all"),
            _f(_fn("mul", a, b), types={"f16"}, without=DIRECTED, flush="all"))),
        I("mad", frozenset({"lo", "hi", "wide", "cc", "ftz", "sat"}) | _ROUND, forms=(
            *_mad_carry_forms(False, frozenset({"cc"})),
            _f(_fn("add", _wide_product(a, b), Src(2, "W")), types=INTS, mods={wide}),
            _f(_fn("add_sat", _fn("slice", _wide_product(a, b), type="T", param="w"), c),
               types=INTS, mods={hi, sat}),
            _f(_fn("add", _fn("slice", _wide_product(a, b), type="T", param="w"), c),
               types=INTS, mods={hi}),
            _f(_fn("add_sat", _fn("mul", a, b), c), types=INTS, mods={sat}),
            _f(_fn("add", _fn("mul", a, b), c), types=INTS),
            _f(_fn("fma", a, b, c, param="$rnd"), types=FLOATS, flush="all"))),
        I("madc", frozenset({"lo", "hi", "cc"}), forms=_mad_carry_forms(True)),
        I("mul24", frozenset({"lo", "hi"}), forms=(
            _f(_fn("slice", _mul24(a, b), type="T", param=16), types=INTS, mods={hi}),
            _f(_fn("resize", _mul24(a, b), type="T"), types=INTS))),
        I("mad24", frozenset({"lo", "hi"}), forms=(
            _f(_fn("add", _fn("slice", _mul24(a, b), type="T", param=16), c), types=INTS,
               mods={hi}),
            _f(_fn("add", _fn("resize", _mul24(a, b), type="T"), c), types=INTS))),
        I("sad", forms=(_f(_fn("add", c, _fn("select", _fn("cmp", a, b, param="lt"),
                                             _fn("sub", b, a), _fn("sub", a, b))),
                           types=INTS),)),
        I("fma", frozenset({"ftz", "sat", "relu"}) | _ROUND, halves=True, forms=(
            _f(_fn("fma", a, b, c, param="$rnd"), types=FLOATS, flush="all"),
            _f(_fn("fma", a, b, c), types={"f16", "bf16"}, without=DIRECTED, flush="all"))),
        I("div", frozenset({"approx", "full", "ftz"}) | _ROUND, forms=(
            _f(_fn("div", a, b), types=INTS),
            _f(_fn("div", a, b, param="$rnd"), types=FLOATS, flush="all"))),
        I("rem", forms=(_f(_fn("rem", a, b), types=INTS),)),
        I("neg", frozenset({"ftz"}), halves=True, forms=(
            _f(_fn("neg", a), types=INTS),
            _f(_fn("neg", a), types=FLOATS, flush="all"),
            _f(_fn("xor", Src(0, "b16"), Lit(0x8000, "b16")), types={"f16"}))),
        I("abs", frozenset({"ftz"}), halves=True, forms=(
            _f(_fn("abs", a), types=INTS),
            _f(_fn("abs", a), types=FLOATS, flush="all"),
            _f(_fn("and", Src(0, "b16"), Lit(0x7FFF, "b16")), types={"f16"}))),
        I("min", frozenset({"ftz", "NaN", "relu"}), halves=True, forms=(
            _f(_fn("min", a, b), types=INTS),
            _f(_fn("min_nan", a, b), types=FLOATS, mods={"NaN"}, flush="all"),
            _f(_fn("min", a, b), types=FLOATS, flush="all"))),
        I("max", frozenset({"ftz", "NaN", "relu"}), halves=True, forms=(
            _f(_fn("max", a, b), types=INTS),
            _f(_fn("max_nan", a, b), types=FLOATS, mods={"NaN"}, flush="all"),
            _f(_fn("max", a, b), types=FLOATS, flush="all"))),
        I("copysign", forms=(_f(_fn("copysign", a, b), types=FLOATS),)),
        # -- math functions (f16/bf16 ex2 and tanh are computed in f32: lifting/halves.py)
        I("sqrt", frozenset({"approx", "ftz"}) | _ROUND, forms=(
            _f(_fn("sqrt", a, param="$rnd"), types=FLOATS, flush="all"),)),
        I("rcp", frozenset({"approx", "ftz"}) | _ROUND, forms=(
            _f(_fn("div", Lit(1.0), a, param="$rnd"), types=FLOATS, flush="all"),)),
        *(I(name, mods, halves=name in ("ex2", "tanh"),
            forms=(_f(_fn(name, a), types=FLOATS, flush="all"),))
          for name, mods in (
              ("rsqrt", frozenset({"approx", "ftz"})), ("sin", frozenset({"approx", "ftz"})),
              ("cos", frozenset({"approx", "ftz"})), ("ex2", frozenset({"approx", "ftz"})),
              ("lg2", frozenset({"approx", "ftz"})), ("tanh", frozenset({"approx"})))),
        I("testp", frozenset(FLOAT_CLASSES), forms=tuple(
            _f(_fn("testp", a, param=k), types=FLOATS, mods={k}) for k in FLOAT_CLASSES)),
        # -- bitwise
        I("and", forms=(_f(_fn("and", a, b)),)),
        I("or", forms=(_f(_fn("or", a, b)),)),
        I("xor", forms=(_f(_fn("xor", a, b)),)),
        I("not", forms=(_f(_fn("not", a)),)),
        I("cnot", forms=(_f(_fn("resize", _fn("cmp", a, Lit(0), param="eq"), type="T")),)),
        I("shl", forms=(_f(_fn("shl", a, Src(1, "u32"))),)),
        I("shr", forms=(_f(_fn("shr", a, Src(1, "u32"))),)),
        I("popc", forms=(_f(_fn("popc", a)),)),
        I("clz", forms=(_f(_fn("clz", a)),)),
        I("brev", forms=(_f(_fn("brev", a)),)),
        I("shf", frozenset({"l", "r", "clamp", "wrap"}), forms=_shf_forms()),
        I("fns", forms=(_f(_fn("fns", a, Src(1, "u32"), Src(2, "s32")), types={"b32"}),)),
        I("bfind", frozenset({"shiftamt"}), forms=_bfind_forms()),
        I("bfe", forms=(_f(_fn("bfe", a, _byte_of(Src(1, "u32")), _byte_of(Src(2, "u32"))),
                           types={"u32", "s32", "u64", "s64"}),)),
        I("bfi", forms=(_f(_fn("bfi", a, b, _byte_of(Src(2, "u32")), _byte_of(Src(3, "u32"))),
                           types={"b32", "b64"}),)),
        I("bmsk", frozenset({"clamp", "wrap"}), forms=_bmsk_forms()),
        I("prmt", frozenset(PRMT_MODES), forms=(
            *(_f(_fn("prmt", a, b, c, param=m), types={"b32"}, mods={m}) for m in PRMT_MODES),
            _f(_fn("prmt", a, b, c), types={"b32"}))),
        I("lop3", forms=(_f(_fn("lop3", a, b, c, Src(3, "b32")), types={"b32"}),)),
        I("dp4a", forms=(_f(_dot_product(8, 0), all_types={"u32", "s32"}),)),
        I("dp2a", frozenset({"lo", "hi"}), forms=(
            _f(_dot_product(16, 2), all_types={"u32", "s32"}, mods={"hi"}),
            _f(_dot_product(16, 0), all_types={"u32", "s32"}))),
        # -- comparisons and selects
        I("setp", _CMP_MODS, halves=True, forms=_setp_forms()),
        I("set", _CMP_MODS, halves=True, forms=_set_forms()),
        I("selp", forms=(_f(_fn("select", Src(2, "pred"), a, b)),)),
        I("slct", frozenset({"ftz"}), forms=(
            _f(_fn("select", _fn("cmp", Src(2, "T"), Lit(0, "T"), param="ge"), Src(0, "D"),
                   Src(1, "D")), flush="sources"),)),
        # -- SIMD video instructions (default byte/half-word selectors and mask only)
        I("vabsdiff4", frozenset({"add", "sat"}), forms=_simd_absdiff(4)),
        I("vabsdiff2", frozenset({"add", "sat"}), forms=_simd_absdiff(2)),
        # -- memory (the effects: what the forms' load/store/atomic functions do)
        I("ld", _SPACES | _CACHE | _VEC, typed=False, effects=READ_SPACE,
          forms=_memory_forms("load")),
        I("ldu", _SPACES | _VEC, effects=READ_SPACE, forms=_memory_forms("load")),
        I("st", _SPACES | _CACHE | _VEC, typed=False, effects=WRITE_SPACE,
          forms=_memory_forms("store")),
        I("atom", _SPACES | _ATOM_KINDS | {"cas"} | _ORDER, effects=READ_WRITE_SPACE,
          forms=_memory_forms("atomic")),
        I("red", _SPACES | _ATOM_KINDS - {"exch"} | _ORDER, effects=READ_WRITE_SPACE,
          forms=_memory_forms("reduction")),
        # asynchronous barriers in shared memory (ptx_ops.py _mbarrier); no clusters
        I("mbarrier", frozenset({"init", "inval", "arrive", "arrive_drop", "test_wait",
                                 "try_wait", "parity", "pending_count", "expect_tx",
                                 "complete_tx", "noComplete", "shared", "shared::cta",
                                 "release", "acquire", "relaxed", "cta"}),
          effects=READ_WRITE_SPACE, hand="_mbarrier (ptx_ops.py)"),
        # cp.async: copied at issue (lifting/translate.py); the ops are ptx.cp_async
        I("cp", frozenset({"async", "ca", "cg", "shared", "global", "commit_group",
                           "wait_group", "wait_all", "L2::64B", "L2::128B", "L2::256B",
                           "L2::cache_hint", "mbarrier", "arrive", "noinc", "b64"}),
          typed=False, ir_op="ptx.cp_async", effects=(("read", "global"), ("write", "shared")),
          hand="_cp_async (ptx_ops.py)"),
        # textures and surfaces: the handle names a descriptor whose data is global memory
        I("tex", _TEX_GEOMETRY | {"v4", "level", "grad", "base"}, effects=(("read", "global"),),
          hand="ptx_texture.py"),
        I("tld4", frozenset({"2d", "a2d", "v4", "r", "g", "b", "a"}), effects=(("read", "global"),),
          hand="ptx_texture.py"),
        I("txq", frozenset({"width", "height", "depth", "channel_data_type", "channel_order",
                            "normalized_coords", "filter_mode", "addr_mode_0", "addr_mode_1",
                            "addr_mode_2", "array_size", "num_mipmap_levels", "num_samples"}),
          effects=(("read", "global"),), hand="ptx_texture.py"),
        I("suld", _SURF, effects=(("read", "global"),), hand="ptx_texture.py"),
        I("sust", _SURF, effects=(("write", "global"),), hand="ptx_texture.py"),
        # -- tensor cores (lifting/tensor_cores.py checks their shapes; ptx_tensor.py)
        *(I(name, ir_op="", typed=False, effects=ORDERS, hand="ptx_tensor.py")
          for name in ("wmma", "mma", "ldmatrix", "stmatrix", "movmatrix")),
        # -- synchronization and warp collectives: upir ops (ir/dialects.py)
        I("bar", frozenset({"sync", "arrive", "red", "popc", "and", "or", "warp", "aligned", "cta"}),
          typed=False, ir_op="upir.barrier", effects=ORDERS, hand="upir_ops.py"),
        I("barrier", frozenset({"sync", "aligned", "arrive", "red", "popc", "and", "or", "cta"}),
          typed=False, ir_op="upir.barrier", effects=ORDERS, hand="upir_ops.py"),
        I("membar", frozenset({"cta", "gl", "sys", "gpu"}), typed=False, ir_op="upir.fence",
          effects=ORDERS, hand="upir_ops.py"),
        I("fence", frozenset({"sc", "acq_rel", "cta", "gpu", "sys", "proxy", "async"}), typed=False,
          ir_op="upir.fence", effects=ORDERS, hand="upir_ops.py"),
        I("shfl", frozenset({"sync", "up", "down", "bfly", "idx"}), ir_op="upir.warp_collective",
          effects=ORDERS, hand="upir_ops.py, simd_collectives.py"),
        I("vote", frozenset({"sync", "all", "any", "uni", "ballot"}), ir_op="upir.warp_collective",
          effects=ORDERS, hand="upir_ops.py, simd_collectives.py"),
        I("activemask", typed=False, ir_op="upir.warp_collective", effects=ORDERS,
          hand="upir_ops.py"),
        I("match", frozenset({"any", "all", "sync"}), ir_op="upir.warp_collective", effects=ORDERS,
          hand="upir_ops.py"),
        I("redux", frozenset({"sync", "add", "min", "max", "and", "or", "xor"}),
          ir_op="upir.warp_collective", effects=ORDERS, hand="upir_ops.py"),
        # -- control flow and the rest (lifting/lift.py, upir_ops.py)
        I("bra", frozenset({"uni"}), typed=False, ir_op="", effects=NO_MEMORY, hand="lifting"),
        I("ret", frozenset({"uni"}), typed=False, ir_op="", effects=NO_MEMORY, hand="lifting"),
        I("exit", typed=False, ir_op="upir.exit", effects=NO_MEMORY, hand="upir_ops.py"),
        I("nanosleep", typed=False, ir_op="upir.nanosleep", effects=NO_MEMORY, hand="upir_ops.py"),
        # trap.stack_overflow: cpuify's own, a recursion outgrew the call stack (inline.py)
        I("trap", frozenset({"stack_overflow"}), typed=False, ir_op="upir.trap",
          effects=NO_MEMORY, hand="upir_ops.py"),
        I("prefetch", _SPACES | {"L1", "L2"}, typed=False, ir_op="", effects=NO_MEMORY,
          hand="dropped (a hint)"),
        I("prefetchu", frozenset({"L1"}), typed=False, ir_op="", effects=NO_MEMORY,
          hand="dropped (a hint)"),
        I("pmevent", typed=False, ir_op="", effects=NO_MEMORY, hand="dropped"),
        I("discard", _SPACES | {"L2"}, typed=False, ir_op="", effects=NO_MEMORY,
          hand="dropped (a hint)"),
        # pseudo-instructions of cpuify's own lifting (lifting/inline.py): calls of the
        # device runtime and of device functions
        *(I(name, typed=False, ir_op="", effects=NO_MEMORY, hand="lifting/inline.py")
          for name in ("call_stack", "launch_buffer", "launch_device", "printf", "assertfail",
                       "malloc", "free", "param_copy")),
    ]


TABLE: dict[str, Instruction] = {}
for _entry in _table():
    if _entry.opcode in TABLE:
        raise ValueError(f"two entries for PTX opcode '{_entry.opcode}'")
    TABLE[_entry.opcode] = _entry

#: the table by the `ptx.*` IR op each entry becomes
BY_IR_OP: dict[str, Instruction] = {e.ir_name: e for e in TABLE.values()
                                     if e.ir_name.startswith("ptx.")}


def entry_of(ir_op_name: str) -> Instruction | None:
    """The table entry of a `ptx.*` IR op (None for other ops)."""
    return BY_IR_OP.get(ir_op_name)
