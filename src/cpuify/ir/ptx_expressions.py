"""The expression language of the PTX instruction table (ir/ptx_table.py): the typed
expressions a form's semantics are written in, their functions and types, and how their
symbols resolve against an op's modifiers.

The expression language.  A value has a PTX type; type symbols in the table resolve
against an op's type modifiers: "T" the last one (the operand type: `add.s32` -> s32,
`setp.lt.f32` -> f32), "D" the first (the destination of `set.u32.f32`, `slct.f32.s32`),
"A" the second (the first source of `vabsdiff4.u32.s32.u32`), "W" T doubled
(`mul.wide.s32` -> s64), "U" T unsigned (s32 -> u32), "UW" U doubled; other names are PTX
types ("u32", "pred").
  Addresses have types of their own, which name a state space: "addr.generic", "addr.shared",
"addr.local", "addr.global", "addr.const", "addr.param" (ADDRESS_TYPES); "S" is the address
type of the op's state space (`cvta.shared` -> addr.shared; addr.generic without one), "G"
addr.generic.  An address is 64 bits: a generic, global, constant or parameter address is
the CPU address (cpuify keeps them all in host memory), a shared or local one the offset in
the block's shared memory or in the thread's local memory (its window).  "R" is a register
as it is (all its bits, whatever its type: what mov packs).  An operand read as an address
or as "R" is its register unconverted (a 32-bit address zero-extended); an address written
to a register is its bits.
  Src(i, t)      operand i read as type t (`.ftz` forms flush f32 sources, see Form.flush)
  Lit(v, t)      a constant
  Fn(name, args, type, param)   one of FUNCTIONS (their meaning is documented there, and
                 each reader implements each function on its own).

This module imports nothing above the IR."""

from __future__ import annotations

from dataclasses import dataclass

from cpuify.ir.modifiers import is_ptx_type, type_size


# --- the expression language ----------------------------------------------------------------

@dataclass(frozen=True, eq=False, slots=True)
class Expr:
    """A node of a semantics expression (compared by identity: a node used twice is one
    value, computed once)."""


@dataclass(frozen=True, eq=False, slots=True)
class Src(Expr):
    index: int
    type: str = "T"


@dataclass(frozen=True, eq=False, slots=True)
class Lit(Expr):
    value: int | float
    type: str = "T"


@dataclass(frozen=True, eq=False, slots=True)
class Fn(Expr):
    name: str
    args: tuple[Expr, ...]
    type: str | None = None            # the result type where FUNCTIONS says "given"
    param: int | str | None = None     # a relation, a bit count, a class name...


#: name -> (arity, result type rule, meaning).  Result type rules: "same" the type of the
#: first argument, "second" that of the second, "pred", "u32", "given" (Fn.type), "generic"
#: (addr.generic), "none" (no value: a store).  A negative arity -n: n or more arguments.
#: Integers wrap at their width; signedness comes from the type (s: signed, u/b: not).
#: Floats (f32/f64) round to nearest even (IEEE).
FUNCTIONS: dict[str, tuple[int, str, str]] = {
    "add": (2, "same", "a + b (floats: rounded as <param> says, rn rz rm rp; None: rn)"),
    "sub": (2, "same", "a - b (floats: rounded as add)"),
    "mul": (2, "same", "a * b (the low half for integers; floats rounded as add)"),
    "fma": (3, "same", "a * b + c rounded once (floats, f16 and bf16 too), as add says"),
    "div": (2, "same", "a / b; integers truncate toward zero, x / 0 is all ones, "
                       "MIN / -1 wraps to MIN; floats rounded as add"),
    "rem": (2, "same", "integer remainder (sign of a); x % 0 is x, MIN % -1 is 0"),
    "add_sat": (2, "same", "s32 a + b clamped to the s32 range"),
    "sub_sat": (2, "same", "s32 a - b clamped to the s32 range"),
    "neg": (1, "same", "-a (integers wrap; floats flip the sign bit)"),
    "abs": (1, "same", "|a| (integers: |MIN| is MIN; floats clear the sign bit)"),
    "min": (2, "same", "the smaller; floats: a NaN operand is ignored (NaN if both are), "
                       "-0 < +0"),
    "max": (2, "same", "the larger; floats as min"),
    "min_nan": (2, "same", "float min where any NaN operand gives NaN"),
    "max_nan": (2, "same", "float max where any NaN operand gives NaN"),
    "and": (2, "same", "bitwise and (of predicates: logical)"),
    "or": (2, "same", "bitwise or"),
    "xor": (2, "same", "bitwise exclusive or"),
    "not": (1, "same", "bitwise complement"),
    "shl": (2, "same", "a << b, b an unsigned 32-bit amount; b >= width gives 0"),
    "shr": (2, "same", "a >> b, arithmetic for signed a; b >= width gives 0 or all sign bits"),
    "popc": (1, "u32", "the number of one bits"),
    "clz": (1, "u32", "the number of leading zero bits"),
    "brev": (1, "same", "the bits in reverse order"),
    "cmp": (2, "pred", "a <param> b: eq ne lt le gt ge (signed for s types), lo ls hi hs "
                       "(unsigned); floats: eq..ge are false on NaN, equ..geu true on NaN, "
                       "num: neither is NaN, nan: either is"),
    "select": (3, "second", "b if the predicate a else c"),
    "resize": (1, "given", "the integer a in another width: sign-extended from a signed a, "
                           "zero-extended otherwise, or truncated"),
    "ext": (1, "given", "the low <param> bits of a, extended (as resize) to the given type"),
    "slice": (1, "given", "bits <param>.. of a, truncated to the given type (<param> 'w': "
                          "the width of T)"),
    "copysign": (2, "second", "the magnitude of b with the sign of a"),
    "sqrt": (1, "same", "the square root (floats), rounded as add"),
    "rsqrt": (1, "same", "1 / sqrt(a), approximate (PTX: rsqrt.approx; each reader its own)"),
    "sin": (1, "same", "sin(a), approximate (each reader its own; see the readers)"),
    "cos": (1, "same", "cos(a), approximate"),
    "ex2": (1, "same", "2 ** a, approximate"),
    "lg2": (1, "same", "log2(a), approximate"),
    "tanh": (1, "same", "tanh(a), approximate"),
    "funnel": (3, "same", "the 64-bit b:a (b the high word) shifted by c mod 32: <param> 'l' "
                          "its high 32 bits after a left shift, 'r' its low 32 bits after a "
                          "right shift"),
    "bfe": (3, "same", "bits b..b+c-1 of a (b, c < 256) at the bottom; above the field and for "
                       "field bits past a's msb: 0 for unsigned a, else the bit "
                       "a[min(b+c-1, msb)] (0 when c is 0)"),
    "bfi": (4, "same", "b with bits c..c+d-1 (c, d < 256; those up to b's msb) replaced by "
                       "a's low bits"),
    "prmt": (3, "same", "4 bytes picked from the 8 of b:a (b the high word) by c: <param> None "
                        "the generic form (selector nibble k picks byte k of the result; its "
                        "bit 3 replicates the byte's sign bit), else the PTX mode (f4e b4e rc8 "
                        "ecl ecr rc16) on c's low 2 bits"),
    "lop3": (4, "same", "bit i is bit (4 a_i + 2 b_i + c_i) of the lookup table d (a constant)"),
    "fns": (3, "same", "the bit position of the |c|-th set bit of a (b32) from bit b (u32) up "
                       "(c > 0, s32) or down (c < 0); c = 0: b if bit b is set; 0xffffffff "
                       "where there is none or b > 31"),
    # addresses and state spaces (cvta, isspacep): each reader has its own windows
    "to_generic": (1, "generic", "the generic address of a, an address of some state space "
                                 "(its type's): shared and local the window's base plus the "
                                 "offset a, others a itself"),
    "to_space": (1, "given", "the address in the given address type's state space of the "
                             "generic address a: shared and local a minus the window's base "
                             "(mod 2^64: PTX leaves an address outside the window undefined), "
                             "others a itself"),
    "in_space": (1, "pred", "whether the generic address a lies in the window of the state "
                            "space <param>: shared the block's shared memory (static and "
                            "dynamic), local the thread's local memory; global, const and param: "
                            "in neither of those (all three are host memory: cpuify cannot tell "
                            "them apart)"),
    # memory: the state space is the address's (its type's); the op's qualifiers say how it
    # is ordered (memory_order), its cache hints do nothing on a CPU
    "at": (1, "same", "the address a plus the op's offset (the operand [a+offset])"),
    "element": (1, "same", "the address of element <param> (0, 1, ...) of a vector of the op's "
                           "data type T at the address a"),
    "load": (1, "given", "the value of the given type that memory holds at the address a"),
    "store": (2, "none", "memory at the address a := b (no value)"),
    "atomic": (-2, "second", "atomically (one read-modify-write of the memory at the address "
                             "a): the value there before, and memory := old <param> b, where "
                             "<param> is add (floats: rounded to nearest; halves too), min max "
                             "(floats as the min/max functions), inc (old >= b ? 0 : old + 1), "
                             "dec (old == 0 or old > b ? b : old - 1), and or xor, exch (b); "
                             "cas: c where old == b, else old"),
    # moves
    "concat": (-2, "given", "the bits of the arguments side by side, the first lowest, each "
                            "cut to (the given type's width / their number) bits (at least two "
                            "arguments)"),
    "testp": (1, "pred", "a is of float class <param>: finite infinite number notanumber "
                         "normal subnormal"),
    # conversions (cvt); half values (f16, bf16) are their values, whatever the registers hold
    "convert": (1, "given", "the value of a (an integer, or a float of any width) in the given "
                            "float type (f16 bf16 f32 f64), rounded as <param> says (rn rz rm "
                            "rp; None: rn) with IEEE overflow (rz, and rm/rp toward zero: the "
                            "largest finite); NaN, infinities and zeros as they are"),
    "round_int": (1, "same", "the float a rounded to an integral value in its own type: "
                             "<param> rni (to nearest even) rzi rmi rpi; NaN, infinities and "
                             "zeros as they are, the sign of a zero result a's"),
    "to_int": (1, "given", "the integer value of a (a float rounded as <param> says: rni rzi "
                           "rmi rpi, None: rzi) clamped to the given integer type's range; a "
                           "NaN is 0, or the type's top bit alone where a is f64 or the type "
                           "64 bits wide (as an H100 converts it)"),
    "tf32": (1, "given", "the bits of the f32 a rounded to tf32 (10 fraction bits, to nearest, "
                         "ties away from zero; the low 13 bits 0; an overflow is infinity); "
                         "NaN: 0x7fffe000"),
}

#: the comparison modifiers of setp/set (a "$cmp" param names the op's one)
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu",
               "leu", "gtu", "geu", "num", "nan")
FLOAT_CLASSES = ("finite", "infinite", "number", "notanumber", "normal", "subnormal")
#: the modes of prmt (a "prmt" function's param; None: the generic form)
PRMT_MODES = ("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")
#: the state spaces an address can name; an address type is "addr." + one of them
STATE_SPACES = ("generic", "shared", "local", "global", "const", "param")
ADDRESS_TYPES = frozenset("addr." + s for s in STATE_SPACES)
#: the space modifiers of an op, in the order an op's state space is looked up
_SPACE_MODS = ("shared", "local", "global", "const", "param")


def is_address_type(t: str) -> bool:
    return t in ADDRESS_TYPES


def space_of(address_type: str) -> str:
    """The state space an address type names (addr.shared -> shared)."""
    return address_type[len("addr."):]


def state_space(op_mods: list[str] | tuple[str, ...]) -> str:
    """The state space an op names (`ld.shared` -> shared; generic without one)."""
    return next((s for s in _SPACE_MODS if s in op_mods), "generic")


def takes_arguments(name: str, n: int) -> bool:
    """Whether function `name` takes `n` arguments."""
    arity = FUNCTIONS[name][0]
    return n == arity if arity >= 0 else n >= -arity


def _fn(name: str, *args: Expr, type: str | None = None, param: int | str | None = None) -> Fn:
    if not takes_arguments(name, len(args)):
        raise ValueError(f"{name} takes {FUNCTIONS[name][0]} argument(s), got {len(args)}")
    return Fn(name, args, type, param)


# --- resolving the symbols of an expression against an op ---------------------------------------

_WIDE = {"s16": "s32", "u16": "u32", "b16": "b32", "s32": "s64", "u32": "u64", "b32": "b64",
         "s8": "s16", "u8": "u16", "b8": "b16", "s64": "s128", "u64": "u128", "b64": "b128"}


def resolve_type(symbol: str, op_mods: list[str] | tuple[str, ...]) -> str:
    """The PTX type a type symbol of the table ("T", "D", "A", "W" or a type) means for an
    op."""
    if symbol not in _SYMBOLS:
        return symbol
    return type_symbols(op_mods)[symbol]


_SYMBOLS = ("T", "D", "A", "W", "U", "UW", "S", "G")
_SYMBOLS_CACHE: dict[tuple[str, ...], dict[str, str]] = {}


def type_symbols(op_mods: list[str] | tuple[str, ...]) -> dict[str, str]:
    """What "T", "D", "A" and "W" mean for an op with these modifiers (looked up once per
    modifier list)."""
    key = tuple(op_mods)
    found = _SYMBOLS_CACHE.get(key)
    if found is None:
        ts = [m for m in op_mods if is_ptx_type(m)] or ["b32"]
        t = ts[-1]
        u = "u" + t[1:] if t[0] == "s" else t
        found = _SYMBOLS_CACHE[key] = {"T": t, "D": ts[0], "A": ts[min(1, len(ts) - 1)],
                                       "W": _WIDE.get(t, t), "U": u, "UW": _WIDE.get(u, u),
                                       "S": "addr." + state_space(key), "G": "addr.generic"}
    return found


def resolve_param(param: int | str | None, op_mods: list[str] | tuple[str, ...]) -> int | str | None:
    """A function's parameter for an op: "$cmp" the op's comparison modifier, "$rnd" its
    float rounding modifier (rn rz rm rp; None without one), "$irnd" its integer rounding
    modifier (rni rzi rmi rpi; None without one), "w" the width in bits of T, "$space" its
    state space (generic without one), anything else as written."""
    if param == "$cmp":
        return next(m for m in op_mods if m in COMPARISONS)
    if param == "$rnd":
        return next((m for m in op_mods if m in ("rn", "rz", "rm", "rp")), None)
    if param == "$irnd":
        return next((m for m in op_mods if m in ("rni", "rzi", "rmi", "rpi")), None)
    if param == "w":
        return 8 * type_size(resolve_type("T", op_mods))
    if param == "$space":
        return state_space(op_mods)
    return param


def result_type(e: Expr, op_mods: list[str] | tuple[str, ...]) -> str:
    """The PTX type of expression `e` for an op with modifiers `op_mods`."""
    if isinstance(e, (Src, Lit)):
        return resolve_type(e.type, op_mods)
    assert isinstance(e, Fn)
    rule = FUNCTIONS[e.name][1]
    if rule == "same":
        return result_type(e.args[0], op_mods)
    if rule == "second":
        return result_type(e.args[1], op_mods)
    if rule == "given":
        assert e.type is not None
        return resolve_type(e.type, op_mods)
    if rule == "generic":
        return "addr.generic"
    if rule == "none":
        return "none"
    return rule                         # "pred", "u32"


# how ld/st/atom are ordered: the memory-model qualifiers (their other modifiers in the table are cache
# hints and scopes, which a CPU's coherent memory makes moot)
_LOAD_ORDERS = {"acquire": "acquire", "relaxed": "relaxed", "volatile": "volatile"}
_STORE_ORDERS = {"release": "release", "relaxed": "relaxed", "volatile": "volatile"}


def memory_order(op_mods: list[str] | tuple[str, ...], kind: str) -> str:
    """How a load ("load") or a store ("store") with these modifiers is ordered: "acquire"
    (loads) or "release" (stores), "relaxed" (an atomic access without ordering), "volatile"
    (a read or write in program order, never merged or removed), or "weak" (an ordinary
    access).  A spin on a flag that another block, the host or an earlier kernel writes
    needs one of the first four to see the write."""
    orders = _LOAD_ORDERS if kind == "load" else _STORE_ORDERS
    return next((orders[m] for m in orders if m in op_mods), "weak")


#: the read-modify-write operations of atom/red (an "atomic" function's param)
ATOMIC_OPERATIONS = ("add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas")
