"""Scalar evolution: what the values of a loop compute, as closed forms over the iteration
number, so that two spellings of one computation compare equal.

nvcc strength-reduces and unrolls: `b[i]` in the second copy of an unrolled body is
`(&b[i] + 4*s)`, in a remainder loop it is a pointer carried and advanced by `4*s`, in the
simple loop it is `&b[0] + 4*sext(i)`.  Evaluated here, all three are the same symbol
`{&b + 4 sext(i0), +, 4 sext(s)}` at the same iteration.

Symbols are hash-consed integers (`Syms.make`), so equal symbols are equal ids:
  ("aff", width, const, ((leaf, coef), ...))   const + sum coef*leaf modulo 2^width
  ("rec", start, step)                         start + m * step, start/step affine, m the
                                               iteration number (an add-recurrence)
  ("leaf", key)                                a value from outside the loops (or sext of one,
                                               or ("mul", x, y): the product of two leaves)
  ("const", type, value)                       a floating-point constant
  ("state", k)                                 a loop-carried value with no closed form,
                                               at the start of the iteration
  ("op", name, attributes, operands, result)   a pure op over symbols
  ("eff", k, name, attributes, operands, result)  the k-th side effect of an iteration
                                               (result -1: the effect itself)

Rules are exact modulo 2^width, except one: a sign extension of the loop index distributes
over `i0 + j*s` (`sext(i0 + j*s) = sext(i0) + j*sext(s)`), which holds only where no index
value wraps; whoever passes `index` must have proven that (reroll-loops guards it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cpuify.ir.core import Block, BlockArgument, Operation, OpResult, Value
from cpuify.ir.dialects import REGISTRY

Sym = int

#: how deep the evaluation of a value from outside the loops follows its operands
MAX_DEPTH = 24
#: the most symbols one analysis may make (a bound on pathological expression growth)
MAX_SYMS = 200_000


class NotAnalysable(Exception):
    """The loops hold something the evaluation does not model (it refuses, never guesses)."""


_INT_WIDTH = {"i8": 8, "i16": 16, "i32": 32, "i64": 64}


@dataclass(frozen=True)
class IndexRange:
    """The loop index `i0 + m*step` (32-bit affine symbols), and how far past an iteration
    (`max_shift` steps) its values are known not to wrap."""
    start: Sym
    step: Sym
    max_shift: int


class Syms:
    """A hash-consing table of symbols and the evaluation rules over them."""

    def __init__(self) -> None:
        self.nodes: list[tuple] = []
        self.ids: dict[tuple, Sym] = {}
        self.index: IndexRange | None = None
        self._outside: dict[Value, Sym] = {}
        #: the value each value leaf stands for
        self.values: dict[Sym, Value] = {}
        self._varies: dict[Sym, bool] = {}
        self._loaded: dict[Sym, bool] = {}

    # --- construction ---------------------------------------------------------------------
    def make(self, node: tuple) -> Sym:
        got = self.ids.get(node)
        if got is None:
            if len(self.nodes) >= MAX_SYMS:
                raise NotAnalysable("expressions too large")
            got = self.ids[node] = len(self.nodes)
            self.nodes.append(node)
        return got

    def node(self, s: Sym) -> tuple:
        return self.nodes[s]

    def aff(self, width: int, const: int = 0, terms: dict[Sym, int] | None = None) -> Sym:
        mask = (1 << width) - 1
        items = tuple(sorted((leaf, c & mask) for leaf, c in (terms or {}).items() if c & mask))
        return self.make(("aff", width, const & mask, items))

    def leaf(self, key: tuple, width: int | None) -> Sym:
        """A leaf; integer leaves are wrapped in an affine symbol of their width."""
        s = self.make(("leaf", key))
        return self.aff(width, 0, {s: 1}) if width else s

    def rec(self, start: Sym, step: Sym) -> Sym:
        st = self.node(step)
        if st[2] == 0 and not st[3]:
            return start
        return self.make(("rec", start, step))

    # --- affine arithmetic ----------------------------------------------------------------
    def linear(self, s: Sym) -> tuple[Sym, Sym] | None:
        """(start, step) of an affine or recurrence symbol, else None."""
        n = self.node(s)
        if n[0] == "aff":
            return s, self.aff(n[1])
        if n[0] == "rec":
            return n[1], n[2]
        return None

    def width(self, s: Sym) -> int | None:
        n = self.node(s)
        if n[0] == "aff":
            return n[1]
        if n[0] == "rec":
            return self.node(n[1])[1]
        return None

    def _combine(self, a: Sym, b: Sym, ka: int, kb: int) -> Sym:
        na, nb = self.node(a), self.node(b)
        assert na[1] == nb[1]
        terms: dict[Sym, int] = {}
        for leaf, c in na[3]:
            terms[leaf] = terms.get(leaf, 0) + ka * c
        for leaf, c in nb[3]:
            terms[leaf] = terms.get(leaf, 0) + kb * c
        return self.aff(na[1], ka * na[2] + kb * nb[2], terms)

    def lin(self, a: Sym, b: Sym, ka: int = 1, kb: int = 1) -> Sym | None:
        """ka*a + kb*b for linear symbols of one width, else None."""
        la, lb = self.linear(a), self.linear(b)
        if la is None or lb is None or self.width(a) != self.width(b):
            return None
        return self.rec(self._combine(la[0], lb[0], ka, kb), self._combine(la[1], lb[1], ka, kb))

    def const_of(self, s: Sym) -> int | None:
        n = self.node(s)
        return n[2] if n[0] == "aff" and not n[3] else None

    def sext(self, s: Sym, to: int) -> Sym:
        """Sign extension of a 32-bit symbol to `to` bits."""
        n = self.node(s)
        c = self.const_of(s)
        if c is not None:
            w = n[1]
            return self.aff(to, c - (1 << w) if c >> (w - 1) else c)
        if n[0] == "aff":
            return self.leaf(("sext", s, to), to)
        if n[0] == "rec" and self.index is not None:
            ix = self.index
            start, step = n[1], n[2]
            if step == ix.step:
                for j in range(ix.max_shift + 1):
                    if start == self.lin(ix.start, ix.step, 1, j):
                        # an index value of an iteration: no wrap, so sext distributes
                        return self.rec(self.lin(self.sext(ix.start, to), self.sext(ix.step, to), 1, j),  # type: ignore[arg-type]
                                        self.sext(ix.step, to))
        return self.make(("op", "sext", to, (s,), 0))

    # --- evaluation of values and ops -----------------------------------------------------
    def outside(self, v: Value, inside: set[Block], depth: int = 0) -> Sym:
        """The symbol of a value defined outside the loops (through affine ops, else a leaf)."""
        got = self._outside.get(v)
        if got is not None:
            return got
        width = _INT_WIDTH.get(v.type)
        sym: Sym | None = None
        if isinstance(v, OpResult) and depth < MAX_DEPTH and v.op.parent not in inside \
                and not v.op.regions and _pure(v.op):
            ops = [self.outside(o, inside, depth + 1) for o in v.op.operands]
            sym = self.op_result(v.op, v.index, ops, None)
            if self.node(sym)[0] not in ("aff", "const"):
                sym = None          # only affine forms are expanded
        if sym is None:
            sym = self.leaf(("v", id(v)), width)
            self.values[self.make(("leaf", ("v", id(v))))] = v
        self._outside[v] = sym
        return sym

    def fixed(self, s: Sym, type_: str) -> Sym:
        """An integer op with no affine form over values fixed in the loop (`row * cols`, a
        product of two values from before it) as a leaf of the affine forms, so that the
        addresses built on it are affine (`&x[row * cols + c]` an add-recurrence in c); the
        leaf stands for the op over those symbols: equal ops are equal leaves."""
        width = _INT_WIDTH.get(type_)
        if width is None or self.node(s)[0] != "op" or self.varies(s) or self._reads_memory(s):
            return s
        return self.leaf(("fixed", s), width)

    def _reads_memory(self, s: Sym) -> bool:
        """Whether s depends on a side effect's result (a value loaded in the iteration: no
        value fixed before the loop, even at an address that is)."""
        got = self._loaded.get(s)
        if got is None:
            n = self.node(s)
            got = n[0] == "eff" or n[0] == "op" and any(self._reads_memory(o) for o in n[3])
            self._loaded[s] = got
        return got

    def value_of(self, s: Sym) -> Value | None:
        """The value an affine symbol `1 * leaf` stands for, if it is one."""
        n = self.node(s)
        if n[0] == "aff" and n[2] == 0 and len(n[3]) == 1 and n[3][0][1] == 1:
            return self.values.get(n[3][0][0])
        return None

    def varies(self, s: Sym) -> bool:
        """Whether s depends on the iteration (a recurrence or a carried state inside)."""
        got = self._varies.get(s)
        if got is None:
            n = self.node(s)
            if n[0] in ("rec", "state"):
                got = True
            elif n[0] == "op":
                got = any(self.varies(o) for o in n[3])
            elif n[0] == "eff":
                got = any(self.varies(o) for o in n[4])
            elif n[0] == "leaf" and n[1][0] == "sext":
                got = self.varies(n[1][1])
            else:
                got = False
            self._varies[s] = got
        return got

    def op_result(self, op: Operation, index: int, ops: list[Sym], effect: int | None) -> Sym:
        """The symbol of result `index` of `op` with operand symbols `ops`; `effect`: its
        position among the iteration's side effects (None: a pure op)."""
        if effect is None:
            sym = self._arith(op, ops) if index == 0 and len(op.results) == 1 else None
            if sym is not None:
                return sym
            return self.make(("op", op.name, _attributes(op), tuple(ops), index))
        return self.make(("eff", effect, op.name, _attributes(op), tuple(ops), index))

    def _arith(self, op: Operation, ops: list[Sym]) -> Sym | None:
        name = op.name
        rtype = op.results[0].type
        if name == "upir.const":
            value = op.attributes.get("value")
            width = _INT_WIDTH.get(rtype)
            if width and isinstance(value, int):
                return self.aff(width, value)
            return self.make(("const", rtype, repr(value)))
        if name == "ptx.mov" and len(ops) == 1 and op.operands[0].type == rtype:
            return ops[0]
        width = _INT_WIDTH.get(rtype)
        if width is None:
            return None
        mods = op.attributes.get("mods", ())
        if any(m in mods for m in ("cc", "sat", "hi")) or any(m[:1] == "f" for m in mods):
            return None
        same = all(self.width(o) == width for o in ops)
        if name in ("ptx.add", "ptx.sub") and len(ops) == 2 and same:
            return self.lin(ops[0], ops[1], 1, 1 if name == "ptx.add" else -1)
        if name == "ptx.neg" and len(ops) == 1 and same:
            return self.lin(ops[0], ops[0], -1, 0)
        if name == "ptx.not" and len(ops) == 1 and same:
            minus_one = self.aff(width, -1)
            return self.lin(ops[0], minus_one, -1, 1)
        if name == "ptx.shl" and len(ops) == 2 and self.width(ops[0]) == width:
            k = self.const_of(ops[1])
            if k is not None and k < width:
                return self.lin(ops[0], ops[0], 1 << k, 0)
            return None
        if name == "ptx.or" and len(ops) == 2 and same:
            # `(b << 2) | 1`: an or with a constant below the bits the other side leaves
            # zero is an add
            for x, y in ((ops[0], ops[1]), (ops[1], ops[0])):
                c = self.const_of(y)
                if c is not None and self.node(x)[0] == "aff" and c < 1 << self._low_zero_bits(x):
                    return self.lin(x, y)
            return None
        if name in ("ptx.mul", "ptx.mad") and len(ops) == (2 if name == "ptx.mul" else 3):
            if "lo" in mods and all(self.width(o) == width for o in ops):
                product = self._times(ops[0], ops[1])
            elif "wide" in mods and "s32" in mods and width == 64 and \
                    all(self.width(o) == 32 for o in ops[:2]):
                product = self._times(self.sext(ops[0], 64), self.sext(ops[1], 64))
            else:
                return None
            if product is None or name == "ptx.mul":
                return product
            return self.lin(product, ops[2]) if self.width(ops[2]) == width else None
        if name == "ptx.cvt" and len(ops) == 1 and width == 64 and self.width(ops[0]) == 32 \
                and [m for m in mods if m[:1] in "sub" and m[1:].isdigit()] == ["s64", "s32"]:
            return self.sext(ops[0], 64)
        return None

    def _times(self, a: Sym, b: Sym) -> Sym | None:
        for x, y in ((a, b), (b, a)):
            k = self.const_of(y)
            if k is not None and self.linear(x) is not None:
                return self.lin(x, x, k, 0)
        na, nb = self.node(a), self.node(b)
        if na[0] != "aff" or nb[0] != "aff" or na[1] != nb[1]:
            return None
        # two affine forms of values fixed in the loops (nvcc's `blockDim.x * (4 * blockIdx.x
        # + 1)` next to `4 * blockDim.x * blockIdx.x + blockDim.x`): multiplied out, each
        # product of two leaves one leaf of its own, so that the two spellings compare equal
        # (exact modulo 2^width: a ring)
        terms: dict[Sym, int] = {}
        for leaf, c in na[3]:
            terms[leaf] = terms.get(leaf, 0) + c * nb[2]
        for leaf, d in nb[3]:
            terms[leaf] = terms.get(leaf, 0) + d * na[2]
        for x, c in na[3]:
            for y, d in nb[3]:
                product = self.make(("leaf", ("mul",) + tuple(sorted((x, y)))))
                terms[product] = terms.get(product, 0) + c * d
        return self.aff(na[1], na[2] * nb[2], terms)

    def _low_zero_bits(self, s: Sym) -> int:
        """How many low bits of the affine symbol s are zero in every value (each coefficient
        and the constant a multiple of 2^k)."""
        n = self.node(s)
        k = n[1]
        for c in [n[2]] + [c for _, c in n[3]]:
            if c:
                k = min(k, (c & -c).bit_length() - 1)
        return k

    def at_start(self, s: Sym, memo: dict[Sym, Sym]) -> Sym:
        """s at iteration 0: each recurrence replaced by its start."""
        got = memo.get(s)
        if got is not None:
            return got
        n = self.node(s)
        if n[0] == "rec":
            out = n[1]
        elif n[0] == "op":
            out = self.make(n[:3] + (tuple(self.at_start(o, memo) for o in n[3]),) + n[4:])
            if n[1] == "sext" and len(n[3]) == 1:
                ext = self.sext(self.node(out)[3][0], n[2])
                out = ext if self.node(ext)[0] != "op" else out
        elif n[0] == "eff":
            out = self.make(n[:4] + (tuple(self.at_start(o, memo) for o in n[4]),) + n[5:])
        else:
            out = s
        memo[s] = out
        return out

    # --- moving a symbol to a later iteration ----------------------------------------------
    def advance(self, s: Sym, j: int, states: dict[int, Sym], memo: dict[Sym, Sym]) -> Sym:
        """s, j iterations later: recurrences shifted by j steps, each `("state", k)` replaced
        by `states[k]` (the carried value j iterations later)."""
        got = memo.get(s)
        if got is not None:
            return got
        n = self.node(s)
        kind = n[0]
        if kind == "rec":
            out = self.rec(self._combine(n[1], n[2], 1, j), n[2])
        elif kind == "state":
            out = states[n[1]]
        elif kind == "op":
            out = self.make(n[:3] + (tuple(self.advance(o, j, states, memo) for o in n[3]),) + n[4:])
            if n[1] == "sext" and len(n[3]) == 1:
                ext = self.sext(self.node(out)[3][0], n[2])
                out = ext if self.node(ext)[0] != "op" else out
        elif kind == "eff":
            out = self.make(n[:4] + (tuple(self.advance(o, j, states, memo) for o in n[4]),) + n[5:])
        else:
            out = s
        memo[s] = out
        return out


def read_only_load(op: Operation) -> bool:
    """A load from memory no thread writes while the kernel runs (`ld.global.nc`, constant
    and parameter space): a function of its address, in whatever order it runs."""
    if op.name != "ptx.ld":
        return False
    mods = op.attributes.get("mods", ())
    space = op.attributes.get("space")
    return "volatile" not in mods and \
        ("nc" in mods or space in ("const", "param") or "const" in mods or "param" in mods)


def _pure(op: Operation) -> bool:
    i = REGISTRY.get(op.name)
    return i is not None and i.pure and not i.terminator


def _attributes(op: Operation) -> str:
    return repr(sorted((k, v) for k, v in op.attributes.items() if k != "line"))


@dataclass
class Iteration:
    """One evaluated iteration of a single-block loop body: the symbol of every value it
    defines, its side effects in order, and what it passes back to its header."""
    values: dict[Value, Sym]
    effects: list[Sym]


def evaluate_ops(syms: Syms, ops: list[Operation], env: dict[Value, Sym], inside: set[Block],
                 period: int | None = None, skip: Callable[[Operation], bool] | None = None,
                 body: Block | None = None) -> Iteration:
    """Evaluate `ops` (straight-line, in order) with the symbols in `env` (block arguments of
    the loops, values already evaluated); values defined outside `inside` are evaluated by
    `Syms.outside`.  Side effects are numbered modulo `period` (None: their count so far).
    `body`: the loop block the ops are the iteration of; a value it reads from before the loop
    must be the same in every iteration (its symbol may not depend on the iteration number:
    it was computed once, at the iteration the loop started from)."""
    effects: list[Sym] = []

    def sym_of(v: Value) -> Sym:
        got = env.get(v)
        if got is not None:
            if body is not None and syms.varies(got):
                block = v.op.parent if isinstance(v, OpResult) else \
                    v.block if isinstance(v, BlockArgument) else None
                if block is not body:
                    raise NotAnalysable("a value fixed when the loop started, read in the loop")
            return got
        block = v.op.parent if isinstance(v, OpResult) else v.block if isinstance(v, BlockArgument) else None
        if block in inside:
            raise NotAnalysable(f"value {v.hint or v} of another loop iteration or block")
        return syms.outside(v, inside)

    for op in ops:
        if skip is not None and skip(op):
            continue
        i = REGISTRY.get(op.name)
        if i is None or op.regions or op.successors or i.terminator or \
                i.block_sync or i.warp_sync or i.yield_sync:
            raise NotAnalysable(f"op {op.name}")
        operands = [sym_of(o) for o in op.operands]
        if not (i.pure or read_only_load(op)):
            k = len(effects)
            effect = k % period if period else k
            operands, attributes = _fold_offset(syms, op, operands)
            effects.append(syms.make(("eff", effect, op.name, attributes, tuple(operands), -1)))
            for r in op.results:
                env[r] = syms.make(("eff", effect, op.name, attributes, tuple(operands), r.index))
        elif read_only_load(op):        # (a function of its address, offset folded in)
            operands, attributes = _fold_offset(syms, op, operands)
            for r in op.results:
                env[r] = syms.make(("op", op.name, attributes, tuple(operands), r.index))
        else:
            for r in op.results:
                env[r] = syms.fixed(syms.op_result(op, r.index, operands, None), r.type)
    return Iteration(env, effects)


_ADDRESSED = ("ptx.ld", "ptx.st", "ptx.atom", "ptx.red")


def _fold_offset(syms: Syms, op: Operation, operands: list[Sym]) -> tuple[list[Sym], str]:
    """A memory op's immediate offset added to its address (`[p+8]` is `[(p+8)]`), and the
    attributes that remain."""
    offset = op.attributes.get("offset")
    if op.name in _ADDRESSED and operands and isinstance(offset, int):
        w = syms.width(operands[0])
        moved = syms.lin(operands[0], syms.aff(w, offset)) if w is not None else None
        if moved is not None:
            return [moved] + operands[1:], repr(sorted(
                (k, v) for k, v in op.attributes.items() if k not in ("line", "offset")))
    return operands, _attributes(op)
