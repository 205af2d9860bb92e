"""Per kernel, per pointer parameter: which bytes each block of the grid reads, writes and
updates atomically, as integer sets (polyhedral access maps, multi-device partitioning
paper, sections 4 and 6), for splitting a launch over MPI ranks (docs/distributed.md).

An address `param + index` is taken apart into the pointer parameter and an index
polynomial over *atoms*: the kernel's integer scalar parameters, `ntid`/`nctaid` (known
per launch: "parameter-like"), the block index `bx, by, bz` (the map's domain) and
existential values (`tid`, loop iteration counts, merges of values, quotients and
remainders).  A product of a parameter-like atom and one other atom (`ctaid.x * ntid.x`,
`row * n`) is affine once the launch fixes the parameters: that is the paper's blockOff
trick, here extended to symbolic pitches (`A[row * n + k]`).  The map of one launch is
built from these forms as an isl map `{ [bx, by, bz] -> [byte] }` whose parameters are
numbers; its image for a box of blocks is a union of byte intervals.

Sound by construction: anything not understood widens the set (a guard that is not an
affine comparison is dropped; an index that is not affine makes the access "whole
buffer"); a write set that may be wider than what runs is marked inexact (a "may" write).
What cannot be described per parameter (pointers loaded from memory, grid sync, device
malloc, writes to module variables, ...) makes the kernel not distributable, with a reason.
Integer index arithmetic is taken not to wrap (as analysis/access.py does), and a loop
that exits on `i != bound` is taken to reach its bound."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cpuify.errors import CpuifyError
from cpuify.ir.core import (
    Block,
    BlockArgument,
    Operation,
    OpResult,
    Value,
    dominates,
    dominators,
    predecessors,
)
from cpuify.ir.modifiers import mods, ty, type_size

WHOLE = "whole"
#: a "whole buffer" footprint: [-BIG, BIG), clamped by the caller to the allocation
BIG = 1 << 62
WHOLE_INTERVAL = (-BIG, BIG)
ATOMIC_OPS = ("add", "min", "max", "and", "or", "xor", "exch", "cas", "inc", "dec")
#: more byte intervals than this in one footprint: their hull is returned instead
MAX_INTERVALS = 1 << 16
_DIMS = "xyz"
_BLOCK_VARS = ("bx", "by", "bz")
_TEXT_FORMAT = 1

# --- polynomials over atoms: {monomial (sorted atom names): coefficient} --------------------

Poly = dict  # dict[tuple[str, ...], int]


def _p_const(c: int) -> Poly:
    return {(): c} if c else {}


def _p_atom(name: str) -> Poly:
    return {(name,): 1}


def _p_add(a: Poly, b: Poly, sign: int = 1) -> Poly:
    out = dict(a)
    for m, c in b.items():
        v = out.get(m, 0) + sign * c
        if v:
            out[m] = v
        else:
            out.pop(m, None)
    return out


def _p_scale(a: Poly, k: int) -> Poly:
    return {m: c * k for m, c in a.items()} if k else {}


def _p_mul(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(sorted(ma + mb))
            v = out.get(m, 0) + ca * cb
            if v:
                out[m] = v
            else:
                out.pop(m, None)
    return out


def _p_subst(a: Poly, atom: str, by: Poly) -> Poly:
    """a with `atom` replaced by the polynomial `by`."""
    out: Poly = {}
    for m, c in a.items():
        term: Poly = {tuple(x for x in m if x != atom): c}
        for _ in range(m.count(atom)):
            term = _p_mul(term, by)
        out = _p_add(out, term)
    return out


def _p_atoms(a: Poly) -> set[str]:
    return {x for m in a for x in m}


def _p_text(a: Poly, show=lambda s: s) -> str:  # type: ignore[no-untyped-def]
    if not a:
        return "0"
    parts = []
    for m, c in sorted(a.items(), key=lambda kv: (-len(kv[0]), kv[0])):
        body = "*".join(show(x) for x in m)
        if not body:
            parts.append(str(c))
        elif c == 1:
            parts.append(body)
        elif c == -1:
            parts.append("-" + body)
        else:
            parts.append(f"{c}*{body}")
    return " + ".join(parts).replace("+ -", "- ")


def _p_json(a: Poly) -> list:  # type: ignore[type-arg]
    return [[c, list(m)] for m, c in sorted(a.items())]


def _p_from_json(data: list) -> Poly:  # type: ignore[type-arg]
    return {tuple(m): int(c) for c, m in data}


# --- constraints: ("ge", p) p >= 0, ("eq", p), ("ne", p), ("and", [..]), ("or", [..]) ---------

TRUE: tuple = ("and", [])  # type: ignore[type-arg]
FALSE: tuple = ("or", [])  # type: ignore[type-arg]


def _c_simplify(c: tuple) -> tuple:  # type: ignore[type-arg]
    """c with constant comparisons decided and nested and/or flattened."""
    if c[0] in ("and", "or"):
        unit, zero = (TRUE, FALSE) if c[0] == "and" else (FALSE, TRUE)
        parts: list[tuple] = []  # type: ignore[type-arg]
        for x in c[1]:
            y = _c_simplify(x)
            if y == zero:
                return zero
            if y == unit:
                continue
            parts.extend(y[1] if y[0] == c[0] else [y])
        unique = []
        for y in parts:
            if y not in unique:
                unique.append(y)
        return unique[0] if len(unique) == 1 else (c[0], unique)
    if all(m == () for m in c[1]):
        v = c[1].get((), 0)
        holds = v >= 0 if c[0] == "ge" else v == 0 if c[0] == "eq" else v != 0
        return TRUE if holds else FALSE
    return c


def _c_atoms(c: tuple) -> set[str]:  # type: ignore[type-arg]
    if c[0] in ("and", "or"):
        out: set[str] = set()
        for x in c[1]:
            out |= _c_atoms(x)
        return out
    return _p_atoms(c[1])


def _c_map(c: tuple, f) -> tuple:  # type: ignore[no-untyped-def, type-arg]
    if c[0] in ("and", "or"):
        return (c[0], [_c_map(x, f) for x in c[1]])
    return (c[0], f(c[1]))


def _c_json(c: tuple) -> list:  # type: ignore[type-arg]
    if c[0] in ("and", "or"):
        return [c[0], [_c_json(x) for x in c[1]]]
    return [c[0], _p_json(c[1])]


def _c_from_json(d: list) -> tuple:  # type: ignore[type-arg]
    if d[0] in ("and", "or"):
        return (d[0], [_c_from_json(x) for x in d[1]])
    if d[0] not in ("ge", "eq", "ne"):
        raise ValueError(f"unknown constraint kind {d[0]!r}")
    return (d[0], _p_from_json(d[1]))


def _c_text(c: tuple, show) -> str:  # type: ignore[no-untyped-def, type-arg]
    if c[0] == "and":
        return " and ".join(_c_text(x, show) for x in c[1]) if c[1] else "true"
    if c[0] == "or":
        return "(" + " or ".join(_c_text(x, show) for x in c[1]) + ")" if c[1] else "false"
    op = {"ge": ">=", "eq": "=", "ne": "!="}[c[0]]
    return f"{_p_text(c[1], show)} {op} 0"


def _compare(kind: str, a: Poly, b: Poly) -> tuple:  # type: ignore[type-arg]
    """a <kind> b as a constraint (kind: lt le gt ge eq ne)."""
    if kind == "lt":
        return ("ge", _p_add(_p_add(b, a, -1), _p_const(-1)))
    if kind == "le":
        return ("ge", _p_add(b, a, -1))
    if kind == "gt":
        return ("ge", _p_add(_p_add(a, b, -1), _p_const(-1)))
    if kind == "ge":
        return ("ge", _p_add(a, b, -1))
    if kind == "eq":
        return ("eq", _p_add(a, b, -1))
    return ("ne", _p_add(a, b, -1))


_NEGATED = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}
_CMP = {"lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "eq": "eq", "ne": "ne",
        "lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}


# --- atoms ---------------------------------------------------------------------------------

def _param_like_name(name: str) -> bool:
    return name.startswith(("p:", "ntid_", "nctaid_"))


@dataclass
class _Atom:
    """An existential value.  kind: 'tid' (0 <= tid < ntid), 'loop' (an iteration count,
    `cond`), 'set' (a value constrained by `cond`: merges, selects, min/max), 'div'/'rem'
    (quotient/remainder of `operand` by `divisor`, floor or truncated), 'mask' (0 <= a <=
    `divisor`), 'free' (any value)."""
    kind: str
    cond: tuple = TRUE  # type: ignore[type-arg]
    operand: Poly = field(default_factory=dict)
    divisor: Poly = field(default_factory=dict)
    signed: bool = False
    exact: bool = True

    def atoms(self) -> set[str]:
        return _c_atoms(self.cond) | _p_atoms(self.operand) | _p_atoms(self.divisor)

    def to_json(self) -> dict:  # type: ignore[type-arg]
        return {"kind": self.kind, "cond": _c_json(self.cond), "operand": _p_json(self.operand),
                "divisor": _p_json(self.divisor), "signed": self.signed, "exact": self.exact}

    @staticmethod
    def from_json(d: dict) -> _Atom:  # type: ignore[type-arg]
        return _Atom(str(d["kind"]), _c_from_json(d["cond"]), _p_from_json(d["operand"]),
                     _p_from_json(d["divisor"]), bool(d["signed"]), bool(d["exact"]))


@dataclass
class Access:
    """One memory instruction's access through a pointer parameter: the bytes
    [param + index, param + index + size) for every assignment of the atoms that satisfies
    `guard` and the atoms' own conditions; `index` None: anywhere in the buffer."""
    kind: str                      # "read" | "write" | "atomic"
    index: Poly | None
    size: int
    guard: tuple                   # type: ignore[type-arg]
    exact: bool
    line: int = 0

    def to_json(self) -> dict:  # type: ignore[type-arg]
        return {"kind": self.kind, "index": None if self.index is None else _p_json(self.index),
                "size": self.size, "guard": _c_json(self.guard), "exact": self.exact,
                "line": self.line}

    @staticmethod
    def from_json(d: dict) -> Access:  # type: ignore[type-arg]
        return Access(str(d["kind"]), None if d["index"] is None else _p_from_json(d["index"]),
                      int(d["size"]), _c_from_json(d["guard"]), bool(d["exact"]), int(d["line"]))


class AccessRelation:
    """The accesses of one kind through one pointer parameter: a map from the block index
    to byte offsets whose parameters (scalars, ntid, nctaid) are fixed per launch;
    `map(scalars, grid, block)` is it as an isl map `{ [bx, by, bz] -> [byte] }`."""

    def __init__(self, kernel: KernelAccess, accesses: list[Access]) -> None:
        self._kernel = kernel
        self.accesses = accesses

    @property
    def whole(self) -> bool:
        return any(a.index is None for a in self.accesses)

    def map(self, scalars: Mapping[str, int], grid: Sequence[int], block: Sequence[int]):  # type: ignore[no-untyped-def]
        """The isl map of this launch (None for a whole-buffer access)."""
        if self.whole:
            return None
        return _LaunchMap(self._kernel, self.accesses, self._kernel._env(scalars, grid, block)).flat

    def __str__(self) -> str:
        return "\n".join(self._kernel._access_text(a) for a in self.accesses)

    def __repr__(self) -> str:
        return f"<AccessRelation {len(self.accesses)} access(es)>"


@dataclass
class ParamAccess:
    """What a kernel does through one pointer parameter.  reads/writes/atomics: None (no
    such access), or an AccessRelation (`.whole`: somewhere in the buffer, not known
    where).  writes_exact: every byte of the write set is written (a "must" set)."""
    index: int
    name: str
    reads: AccessRelation | None = None
    writes: AccessRelation | None = None
    atomics: AccessRelation | None = None
    writes_exact: bool = True
    atomic_ops: frozenset[str] = frozenset()
    atomic_result_used: bool = False


@dataclass
class Footprint:
    """Sorted, disjoint byte intervals [lo, hi) relative to the pointer parameter's value;
    a whole-buffer access is WHOLE_INTERVAL (the caller clamps to the allocation)."""
    reads: list[tuple[int, int]] = field(default_factory=list)
    writes: list[tuple[int, int]] = field(default_factory=list)
    atomics: list[tuple[int, int]] = field(default_factory=list)
    #: every byte of `writes` is written by the box (the parameter's writes_exact, and the
    #: intervals not widened to a hull because listing them exactly was too much work)
    writes_exact: bool = True


class KernelAccess:
    """The access maps of one kernel (kernel_access builds it; from_text rebuilds it)."""

    def __init__(self, name: str, params: list[ParamAccess], distributable: bool, reason: str,
                 scalar_params: list[tuple[str, str]], atoms: dict[str, _Atom],
                 accesses: dict[str, list[Access]], const_symbols: list[str] | None = None) -> None:
        self.name = name
        self.params = params
        self.distributable = distributable
        self.reason = reason
        #: the integer scalar parameters the maps use: (PTX name, PTX type)
        self.scalar_params = scalar_params
        #: __constant__ variables the kernel reads (their contents must be the same on
        #: every rank)
        self.const_symbols = list(const_symbols or [])
        self._atoms = atoms
        self._accesses = accesses
        self._maps: dict[tuple, dict] = {}          # type: ignore[type-arg]
        self._footprints: dict[tuple, dict[int, Footprint]] = {}  # type: ignore[type-arg]
        self._used: list[str] | None = None
        for p in params:
            got = accesses.get(p.name, [])
            for kind, attr in (("read", "reads"), ("write", "writes"), ("atomic", "atomics")):
                mine = [a for a in got if a.kind == kind]
                setattr(p, attr, AccessRelation(self, mine) if mine else None)

    # --- launch values ---
    def _env(self, scalars: Mapping[str, int], grid: Sequence[int],
             block: Sequence[int]) -> dict[str, int]:
        grid3 = (tuple(int(g) for g in grid) + (1, 1, 1))[:3]
        block3 = (tuple(int(b) for b in block) + (1, 1, 1))[:3]
        env: dict[str, int] = {}
        for d, g, b in zip(_DIMS, grid3, block3):
            env[f"nctaid_{d}"] = g
            env[f"ntid_{d}"] = b
        for name, ptype in self.scalar_params:
            if name in scalars:
                env["p:" + name] = _as_type(int(scalars[name]), ptype)
        return env

    def _used_scalars(self) -> list[str]:
        if self._used is None:
            self._used = self._scalars_in_maps()
        return self._used

    def _scalars_in_maps(self) -> list[str]:
        used: set[str] = set()
        for accs in self._accesses.values():
            for a in accs:
                used |= _c_atoms(a.guard) | (_p_atoms(a.index) if a.index else set())
        for at in self._atoms.values():
            used |= at.atoms()
        return sorted(x[2:] for x in used if x.startswith("p:"))

    def _eval_param(self, poly: Poly, env: dict[str, int]) -> int | None:
        """poly's value when it uses only parameter-like atoms (None otherwise)."""
        total = 0
        for m, c in poly.items():
            v = c
            for x in m:
                got = self._param_value(x, env)
                if got is None:
                    return None
                v *= got
            total += v
        return total

    def _param_value(self, x: str, env: dict[str, int]) -> int | None:
        if x in env:
            return env[x]
        if _param_like_name(x):
            raise CpuifyError(f"kernel '{self.name}': the access maps need the value of "
                              f"scalar parameter '{x[2:]}' (pass it in `scalars`)")
        at = self._atoms.get(x)
        if at is None or at.kind not in ("div", "rem", "mask"):
            return None
        a = self._eval_param(at.operand, env)
        d = self._eval_param(at.divisor, env)
        if a is None or d is None:
            return None
        if at.kind == "mask":
            value = a & d
        elif d == 0:
            return None
        elif at.signed:
            q = abs(a) // abs(d) * (1 if (a >= 0) == (d > 0) else -1)
            value = q if at.kind == "div" else a - q * d
        else:
            value = a // d if at.kind == "div" else a % d
        env[x] = value
        return value

    # --- isl ---
    def _access_isl(self, a: Access, env: dict[str, int],
                    pitches: list[int] | None = None, split: int = 0) -> tuple[str, bool]:
        """The isl text of one access for the launch `env`: block -> byte offset, or with
        `pitches` block -> [d_0, ..., d_k] where the byte offset is sum(pitch_i * d_i) (the
        last pitch 1: the byte within a row; see _row_groups); and whether conditions were
        left out (the text then describes a wider set)."""
        assert a.index is not None
        renderer = _Renderer(self, env)
        if pitches is None:
            outs = ["o"]
            defs = [f"o = {renderer.linear(a.index)} + t_byte"]
        else:
            groups = renderer.row_groups(a.index, split)
            outs = [f"d{i}" for i in range(len(pitches))]
            defs = []
            for i, pitch in enumerate(pitches):
                expr = renderer.linear_terms(groups.get(pitch, {}))
                defs.append(f"{outs[i]} = {expr}" + (" + t_byte" if pitch == 1 else ""))
        conds = [renderer.cond(a.guard)]
        # the existential atoms used, with the conditions they carry (transitively)
        todo = [x for x in renderer.vars_used]
        seen: set[str] = set()
        while todo:
            x = todo.pop()
            if x in seen:
                continue
            seen.add(x)
            conds.append(renderer.atom_cond(x))
            todo.extend(v for v in renderer.vars_used if v not in seen)
        dims = [f"0 <= {b} < {env[f'nctaid_{d}']}" for b, d in zip(_BLOCK_VARS, _DIMS)]
        exists = sorted((renderer.vars_used | renderer.helpers) - set(_BLOCK_VARS))
        if "false" in conds:
            conds = ["1 = 0"]             # the launch rules the access out
        # isl expands the conjunction of disjunctions (its DNF): past _MAX_DISJUNCTS, the
        # largest disjunctions are left out (a wider set, no longer exact)
        conds = [c for c in conds if c != "true"]
        widened = False
        while True:
            total = 1
            for c in conds:
                total *= renderer.size.get(c, 1)
            if total <= _MAX_DISJUNCTS:
                break
            conds.remove(max(conds, key=lambda c: renderer.size.get(c, 1)))
            widened = True
        body = " and ".join(dims + defs + [f"0 <= t_byte < {a.size}"] + conds)
        names = ", ".join([_isl_name(x) for x in exists] + ["t_byte"])
        return (f"{{ [bx, by, bz] -> [{', '.join(outs)}] : exists ({names} : {body}) }}",
                widened)

    def _row_pitches(self, accesses: list[Access], env: dict[str, int], split: int) -> list[int]:
        pitches = {1}
        for a in accesses:
            assert a.index is not None
            pitches.update(_Renderer(self, env).row_groups(a.index, split))
        return sorted(pitches, reverse=True)

    def _show(self, x: str) -> str:
        prefix = f"p:{self.name}_param_"
        return "param_" + x[len(prefix):] if x.startswith(prefix) else _show_atom(x)

    def _access_text(self, a: Access) -> str:
        show = self._show
        kind = {"read": "reads", "write": "writes", "atomic": "updates"}[a.kind]
        if a.index is None:
            return f"    {kind} anywhere in the buffer (PTX line {a.line}: index not affine)"
        conds = [_c_text(a.guard, show)] if a.guard != TRUE else []
        todo = sorted(_p_atoms(a.index) | _c_atoms(a.guard))
        seen: set[str] = set()
        while todo:
            x = todo.pop(0)
            if x in seen or x not in self._atoms:
                continue
            seen.add(x)
            at = self._atoms[x]
            conds.append(_atom_text(x, at, show))
            todo.extend(sorted(at.atoms()))
        where = (" : " + " and ".join(c for c in conds if c != "true")) if conds else ""
        exact = "" if a.exact else " (may)"
        return (f"    {kind}{exact} [{_p_text(a.index, show)}, +{a.size}) "
                f"(PTX line {a.line}){where}")

    # --- footprints ---
    def footprint(self, scalars: Mapping[str, int], grid: Sequence[int], block: Sequence[int],
                  box: Sequence[Sequence[int]]) -> dict[int, Footprint]:
        """Byte intervals each pointer parameter (by parameter index) is read, written and
        updated atomically at by the blocks of `box` ((x0, x1), (y0, y1), (z0, z1), half
        open) of a launch of `grid` x `block` with integer scalar parameters `scalars`
        (PTX parameter name -> value).  Cached per arguments."""
        used = self._used_scalars()
        missing = [n for n in used if n not in scalars]
        if missing:
            raise CpuifyError(f"kernel '{self.name}': footprint needs the scalar parameter(s) "
                              f"{', '.join(missing)}")
        grid3 = tuple((tuple(int(g) for g in grid) + (1, 1, 1))[:3])
        block3 = tuple((tuple(int(b) for b in block) + (1, 1, 1))[:3])
        box3 = tuple((tuple((int(lo), int(hi)) for lo, hi in box) + ((0, 1), (0, 1)))[:3])
        launch_key = (tuple((n, int(scalars[n])) for n in used), grid3, block3)
        key = launch_key + (box3,)
        got = self._footprints.get(key)
        if got is not None:
            return got
        if not self.distributable:
            # what the maps miss (a pointer loaded from memory, ...) may be anywhere
            return {p.index: Footprint([WHOLE_INTERVAL], [WHOLE_INTERVAL],
                                       [WHOLE_INTERVAL] if p.atomics is not None else [],
                                       writes_exact=False) for p in self.params}
        maps = self._maps.get(launch_key)
        if maps is None:
            env = self._env(scalars, grid3, block3)
            maps = {}
            for p in self.params:
                for kind in ("read", "write", "atomic"):
                    accs = [a for a in self._accesses.get(p.name, []) if a.kind == kind]
                    if not accs:
                        continue
                    if any(a.index is None for a in accs):
                        maps[(p.index, kind)] = WHOLE
                    else:
                        maps[(p.index, kind)] = _LaunchMap(self, accs, env)
            self._maps[launch_key] = maps
        isl = _isl()
        (x0, x1), (y0, y1), (z0, z1) = box3
        box_set = isl.Set(f"{{ [bx, by, bz] : {x0} <= bx < {x1} and {y0} <= by < {y1} and "
                          f"{z0} <= bz < {z1} }}")
        out: dict[int, Footprint] = {}
        for p in self.params:
            fp = Footprint(writes_exact=p.writes_exact)
            for kind, attr in (("read", "reads"), ("write", "writes"), ("atomic", "atomics")):
                m = maps.get((p.index, kind))
                if m is None:
                    continue
                if m is WHOLE:
                    setattr(fp, attr, [WHOLE_INTERVAL])
                    exact = False
                else:
                    intervals, exact = m.intervals(box_set)
                    setattr(fp, attr, intervals)
                if kind == "write" and not exact:
                    fp.writes_exact = False
            out[p.index] = fp
        if len(self._footprints) > 4096:
            self._footprints.clear()
        self._footprints[key] = out
        return out

    def disjoint_write_dims(self, scalars: Mapping[str, int], grid: Sequence[int],
                            block: Sequence[int]) -> list[str]:
        """The grid dimensions ('x', 'y', 'z') along which blocks with different indices
        never write (or update atomically) the same byte of any parameter, for this launch."""
        isl = _isl()
        self.footprint(scalars, grid, block, ((0, 1), (0, 1), (0, 1)))
        used = self._used_scalars()
        grid3 = tuple((tuple(int(g) for g in grid) + (1, 1, 1))[:3])
        block3 = tuple((tuple(int(b) for b in block) + (1, 1, 1))[:3])
        maps = self._maps[(tuple((n, int(scalars[n])) for n in used), grid3, block3)]
        dims = []
        for d, b in enumerate(_BLOCK_VARS):
            ok = True
            for p in self.params:
                for kind in ("write", "atomic"):
                    m = maps.get((p.index, kind))
                    if m is None:
                        continue
                    if m is WHOLE:
                        ok = ok and grid3[d] == 1
                        continue
                    # pairs of blocks writing a common byte, differing in dimension d
                    flat = m.flat
                    other = isl.Map(f"{{ [bx, by, bz] -> [cx, cy, cz] : {b} != c{_DIMS[d]} }}")
                    disjoint = flat is not None and _bounded(
                        lambda flat=flat, other=other: flat.apply_range(flat.reverse())
                        .intersect(other).is_empty(), ISL_OPERATIONS)
                    if not disjoint:
                        ok = False
            if ok and grid3[d] > 1:
                dims.append(_DIMS[d])
        return dims

    # --- text ---
    def to_text(self) -> str:
        return json.dumps({
            "format": _TEXT_FORMAT, "kernel": self.name, "distributable": self.distributable,
            "reason": self.reason, "scalar_params": [list(x) for x in self.scalar_params],
            "const_symbols": self.const_symbols,
            "atoms": {k: v.to_json() for k, v in sorted(self._atoms.items())},
            "params": [{"index": p.index, "name": p.name, "writes_exact": p.writes_exact,
                        "atomic_ops": sorted(p.atomic_ops),
                        "atomic_result_used": p.atomic_result_used,
                        "accesses": [a.to_json() for a in self._accesses.get(p.name, [])]}
                       for p in self.params]}, separators=(",", ":"))

    @classmethod
    def from_text(cls, text: str) -> KernelAccess:
        try:
            d = json.loads(text)
            if d.get("format") != _TEXT_FORMAT:
                raise ValueError(f"format {d.get('format')!r}, expected {_TEXT_FORMAT}")
            params = [ParamAccess(int(p["index"]), str(p["name"]),
                                  writes_exact=bool(p["writes_exact"]),
                                  atomic_ops=frozenset(p["atomic_ops"]),
                                  atomic_result_used=bool(p["atomic_result_used"]))
                      for p in d["params"]]
            accesses = {str(p["name"]): [Access.from_json(a) for a in p["accesses"]]
                        for p in d["params"]}
            atoms = {str(k): _Atom.from_json(v) for k, v in d["atoms"].items()}
            return cls(str(d["kernel"]), params, bool(d["distributable"]), str(d["reason"]),
                       [(str(a), str(b)) for a, b in d["scalar_params"]], atoms, accesses,
                       [str(s) for s in d.get("const_symbols", [])])
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise CpuifyError(f"access maps text cannot be read back: {exc}") from None

    def describe(self) -> str:
        lines = [f"kernel {self.name}: " + ("distributable" if self.distributable
                                            else f"not distributable: {self.reason}")]
        if self.scalar_params:
            lines.append("  scalar parameters: " + ", ".join(
                n + ("" if self._show("p:" + n) == n else f" ({self._show('p:' + n)})")
                for n, _ in self.scalar_params))
        for s in self.const_symbols:
            lines.append(f"  reads __constant__ {s} (replicated on every rank)")
        for p in self.params:
            head = f"  param {p.index} {p.name}:"
            if p.reads is None and p.writes is None and p.atomics is None:
                lines.append(head + " not accessed")
                continue
            lines.append(head)
            for attr in ("reads", "writes", "atomics"):
                rel = getattr(p, attr)
                if rel is not None:
                    lines.append(str(rel))
            if p.writes is not None:
                lines.append("    write set " + ("exact (must)" if p.writes_exact
                                                 else "over-approximated (may)"))
            if p.atomics is not None:
                lines.append(f"    atomic ops: {', '.join(sorted(p.atomic_ops))}; result "
                             + ("used" if p.atomic_result_used else "unused"))
        return "\n".join(lines)

    def heuristic_split(self) -> str | None:
        """A grid dimension to split along, from the maps alone (no launch values): one
        whose block index every write and atomic update's index depends on, preferring the
        outermost (z, y, x: whole rows of a row-major array per rank).  None: no such
        dimension (or nothing written)."""
        writes = [a for p in self.params for a in self._accesses.get(p.name, [])
                  if a.kind in ("write", "atomic")]
        if not writes or not self.distributable:
            return None
        for d in (2, 1, 0):
            b = _BLOCK_VARS[d]
            if all(a.index is not None and any(b in m for m in a.index) for a in writes):
                return _DIMS[d]
        return None


def _isl():  # type: ignore[no-untyped-def]
    """islpy, or an error saying how to get it."""
    try:
        import islpy
    except ImportError:
        raise CpuifyError("access maps need islpy (pip install islpy, or cpuify's "
                          "'distributed' extra)") from None
    return islpy


def _as_type(value: int, ptype: str) -> int:
    bits = 8 * type_size(ptype) if ptype in ("u8", "s8", "u16", "s16", "u32", "s32", "u64",
                                            "s64", "b8", "b16", "b32", "b64") else 64
    value &= (1 << bits) - 1
    if ptype.startswith("s") and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def _isl_name(x: str) -> str:
    return "v_" + "".join(ch if ch.isalnum() else "_" for ch in x)


def _show_atom(x: str) -> str:
    if x.startswith("p:"):
        return x[2:]
    if x.startswith("tid_"):
        return "tid." + x[4:]
    if x.startswith(("ntid_", "nctaid_")):
        return x.replace("_", ".")
    return x


def _atom_text(x: str, at: _Atom, show) -> str:  # type: ignore[no-untyped-def]
    if at.kind == "tid":
        return f"0 <= {show(x)} < {show('ntid_' + x[-1])}"
    if at.kind in ("loop", "set"):
        return _c_text(at.cond, show)
    if at.kind in ("div", "rem"):
        op = {"div": "/", "rem": "%"}[at.kind]
        return f"{x} = ({_p_text(at.operand, show)}) {op} ({_p_text(at.divisor, show)})"
    if at.kind == "mask":
        return f"{x} = ({_p_text(at.operand, show)}) & {_p_text(at.divisor, show)}"
    return f"{x} any"


class _Renderer:
    """Polynomials and constraints of one access as isl text, with the launch's values."""

    def __init__(self, kernel: KernelAccess, env: dict[str, int]) -> None:
        self.kernel = kernel
        self.env = env
        self.vars_used: set[str] = set()
        self.helpers: set[str] = set()
        #: rendered condition -> how many conjunctions isl makes of it (its DNF's size)
        self.size: dict[str, int] = {}

    def linear(self, poly: Poly) -> str:
        terms: dict[str, int] = {}
        const = 0
        for m, c in poly.items():
            k = c
            var = None
            for x in m:
                v = self.kernel._param_value(x, self.env)
                if v is None:
                    if var is not None:
                        raise CpuifyError(f"kernel '{self.kernel.name}': access map not "
                                          f"affine ({_p_text(poly)})")
                    var = x
                else:
                    k *= v
            if var is None:
                const += k
            elif k:
                terms[var] = terms.get(var, 0) + k
        parts = []
        for var, k in sorted(terms.items()):
            if not k:
                continue
            self.vars_used.add(var)
            name = var if var in _BLOCK_VARS else _isl_name(var)
            parts.append(f"{k}*{name}")
        parts.append(str(const))
        return " + ".join(parts).replace("+ -", "- ")

    def row_groups(self, poly: Poly, split: int) -> dict[int, dict[str, int]]:
        """poly's terms by the product of the scalar parameters in them (a row pitch:
        `row * n + col` -> {n: row, 1: col}), evaluated; with `split`, a term of a constant
        coefficient at least `split` is a row of its own (`i * 4096 + j`)."""
        groups: dict[int, dict[str, int]] = {}
        for m, c in poly.items():
            pitch, k, var = 1, c, ""
            for x in m:
                v = self.kernel._param_value(x, self.env)
                if v is None:
                    var = x
                elif x.startswith(("ntid_", "nctaid_")):
                    k *= v
                else:
                    pitch *= v
            if pitch == 0 or k == 0:
                continue
            if pitch < 0:
                pitch, k = -pitch, -k
            if var and pitch == 1 and split and abs(k) >= split:
                pitch, k = abs(k), (1 if k > 0 else -1)
            group = groups.setdefault(pitch, {})
            group[var] = group.get(var, 0) + k
        return groups

    def linear_terms(self, terms: dict[str, int]) -> str:
        return self.linear({((x,) if x else ()): k for x, k in terms.items() if k})

    def cond(self, c: tuple) -> str:  # type: ignore[type-arg]
        """c as isl text; comparisons the launch's values decide are folded ("true",
        "false"), so that isl sees no disjunction the launch has settled."""
        if c[0] in ("and", "or"):
            unit, zero = ("true", "false") if c[0] == "and" else ("false", "true")
            parts = []
            for x in c[1]:
                got = self.cond(x)
                if got == zero:
                    return zero
                if got != unit and got not in parts:
                    parts.append(got)
            if not parts:
                return unit
            if len(parts) == 1:
                return parts[0]
            text = "(" + f" {c[0]} ".join(parts) + ")"
            sizes = [self.size.get(x, 1) for x in parts]
            total = 1
            for n in sizes:
                total = total * n if c[0] == "and" else total
            self.size[text] = total if c[0] == "and" else sum(sizes)
            return text
        constant = self.constant(c[1])
        if constant is not None:
            v = constant
            holds = v >= 0 if c[0] == "ge" else v == 0 if c[0] == "eq" else v != 0
            return "true" if holds else "false"
        e = self.linear(c[1])
        if c[0] == "ge":
            return f"{e} >= 0"
        if c[0] == "eq":
            return f"{e} = 0"
        text = f"({e} >= 1 or {e} <= -1)"
        self.size[text] = 2
        return text

    def constant(self, poly: Poly) -> int | None:
        """poly's value when the launch fixes all of it."""
        total = 0
        for m, c in poly.items():
            k = c
            for x in m:
                v = self.kernel._param_value(x, self.env)
                if v is None:
                    return None
                k *= v
            total += k
        return total

    def atom_cond(self, x: str) -> str:
        if x in _BLOCK_VARS:
            return "true"
        at = self.kernel._atoms.get(x)
        if at is None:
            return "true"
        name = _isl_name(x)
        if at.kind == "tid":
            return f"0 <= {name} < {self.env['ntid_' + x[-1]]}"
        if at.kind in ("loop", "set"):
            return self.cond(at.cond)
        if at.kind == "free":
            return "true"
        operand = self.linear(at.operand)
        d = self.kernel._eval_param(at.divisor, self.env)
        if d is None or (d == 0 and at.kind != "mask"):
            return "true"
        if at.kind == "mask":
            return f"0 <= {name} <= {d}" if d >= 0 else "true"
        other = _isl_name(x + "_h")
        self.helpers.add(x + "_h")
        q, r = (name, other) if at.kind == "div" else (other, name)
        ad = abs(d)
        if not at.signed:
            return f"{operand} = {d}*{q} + {r} and 0 <= {r} < {ad}"
        # truncation: the remainder has the sign of the dividend
        text = (f"{operand} = {d}*{q} + {r} and (({operand} >= 0 and 0 <= {r} < {ad}) or "
                f"({operand} < 0 and -{ad} < {r} <= 0))")
        self.size[text] = 2
        return text


class _LaunchMap:
    """The accesses of one kind through one parameter for one launch, as isl maps: `flat`
    (block -> byte) and, built when needed, `rows` (block -> [row..., byte in row])."""

    def __init__(self, kernel: KernelAccess, accesses: list[Access], env: dict[str, int]) -> None:
        self.kernel = kernel
        self.accesses = accesses
        self.env = env
        self._flat = None
        self._rows: dict[int, tuple] = {}  # type: ignore[type-arg]
        #: a condition was left out of some access's map (see _access_isl)
        self.widened = False

    @property
    def flat(self):  # type: ignore[no-untyped-def]
        """The isl map block -> byte; None when building it took isl too much work."""
        if self._flat is None:
            self._flat = _bounded(lambda: self._union(None, 0), ISL_OPERATIONS) or False
        return self._flat or None

    def _union(self, pitches: list[int] | None, split: int):  # type: ignore[no-untyped-def]
        isl = _isl()
        result = None
        for a in self.accesses:
            text, widened = self.kernel._access_isl(a, self.env, pitches, split)
            self.widened = self.widened or widened
            m = isl.Map(text)
            result = m if result is None else result.union(m)
        return result

    def rows(self, split: int):  # type: ignore[no-untyped-def]
        """(isl map block -> [rows..., byte in row], row pitches) (run under _bounded)."""
        got = self._rows.get(split)
        if got is None:
            pitches = self.kernel._row_pitches(self.accesses, self.env, split)
            got = self._rows[split] = (self._union(pitches, split), pitches)
        return got

    def intervals(self, box) -> tuple[list[tuple[int, int]], bool]:  # type: ignore[no-untyped-def]
        """The byte intervals the blocks of `box` touch, and whether exactly (not widened)."""
        flat = self.flat
        def image():  # type: ignore[no-untyped-def]
            r = flat.intersect_domain(box).range().coalesce()
            return r, r.is_empty(), r.is_bounded()

        s = None if flat is None else _bounded(image, ISL_OPERATIONS)
        if s is None:
            return [WHOLE_INTERVAL], False
        s, empty, bounded = s
        if empty:
            return [], True
        if not bounded:
            return [WHOLE_INTERVAL], False
        got = _bounded(lambda: _flat_runs(s), ISL_OPERATIONS // 4)
        if got is not None:
            return got, not self.widened
        # rows: byte offsets taken apart by row pitch, first the scalar parameters'
        # (`row * n + col`), then also large constant strides (`i * 4096 + j`)
        tried: list[list[int]] = []
        for split in (0, 256):
            pitches = self.kernel._row_pitches(self.accesses, self.env, split)
            if len(pitches) == 1 or pitches in tried:
                continue
            tried.append(pitches)
            got = _bounded(lambda split=split: self._row_runs(box, split), ISL_OPERATIONS // 2)
            if got is not None:
                return got, not self.widened
        isl = _isl()
        hulls = _bounded(lambda: [(_coordinate(b.lexmin()), _coordinate(b.lexmax()) + 1)
                                  for b in map(isl.Set.from_basic_set, s.get_basic_sets())],
                         ISL_OPERATIONS)
        if hulls is None:
            return [WHOLE_INTERVAL], False
        return merge_intervals(hulls), False

    def _row_runs(self, box, split: int) -> list[tuple[int, int]] | None:  # type: ignore[no-untyped-def]
        """Per row (all but the last of the row dimensions fixed) the least and the greatest
        byte in it, when every row is a run (checked); None otherwise or when there are more
        than MAX_INTERVALS rows.  The paper's row-wise enumeration (section 6)."""
        isl = _isl()
        m, pitches = self.rows(split)
        k = len(pitches)
        if k == 1:
            return None
        r = isl.Map.from_range(m.intersect_domain(box).range())
        r = r.move_dims(isl.dim_type.in_, 0, isl.dim_type.out, 0, k - 1)
        lo, hi = r.lexmin(), r.lexmax()
        if _count(lo.domain()) > MAX_INTERVALS:
            return None
        between = lo.apply_range(isl.Map("{ [m] -> [c] : c >= m }")).intersect(
            hi.apply_range(isl.Map("{ [m] -> [c] : c <= m }")))
        if not between.is_subset(r):
            return None                     # a row with a gap
        ends: dict[tuple[int, ...], list[int]] = {}
        for which, f in ((0, lo), (1, hi)):
            for c in _points(f.wrap().flatten(), k):
                ends.setdefault(tuple(c[:-1]), [0, 0])[which] = c[-1]
        out = []
        for row, (first, last) in ends.items():
            base = sum(p * c for p, c in zip(pitches, row))
            out.append((base + first, base + last + 1))
        return merge_intervals(out)


#: runs listed per convex piece before the pieces are given up for their union
_PIECE_RUNS = 4096


def _flat_runs(s) -> list[tuple[int, int]] | None:  # type: ignore[no-untyped-def]
    """The runs of a bounded 1-D set: per convex piece (isl's basic sets: cheap to subtract
    from each other, unlike a union of many) when each has few, else for the union (the
    pieces of an unrolled loop interleave: each is strided, their union is not); None when
    more than MAX_INTERVALS."""
    isl = _isl()
    pieces: list[tuple[int, int]] | None = []
    for basic in s.get_basic_sets():
        got = _runs(isl.Set.from_basic_set(basic), _PIECE_RUNS)
        if got is None:
            pieces = None
            break
        pieces.extend(got)  # type: ignore[union-attr]
    merged = merge_intervals(pieces) if pieces is not None else _runs(s, MAX_INTERVALS)
    if merged is None or len(merged) > MAX_INTERVALS:
        return None
    return merged


#: isl operations one interval computation may take before another way (or a coarser,
#: still sound answer) is tried: a union of many pieces with many conditions (a 3-D stencil
#: with its halo cases) can make subtracting it from itself take minutes
ISL_OPERATIONS = 500_000


def _bounded(compute, limit: int):  # type: ignore[no-untyped-def]
    """compute() with isl's work limited to `limit` operations; None when it ran out."""
    isl = _isl()
    ctx = isl.DEFAULT_CONTEXT
    previous = ctx.get_max_operations()
    ctx.reset_operations()
    ctx.set_max_operations(limit)
    try:
        return compute()
    except (isl.Error, _OutOfWork):
        return None
    finally:
        ctx.set_max_operations(previous)
        ctx.reset_operations()


class _OutOfWork(Exception):
    """isl ran out of the operations _bounded allows (some calls answer NaN then)."""


def _points(s, k: int) -> list[list[int]]:  # type: ignore[no-untyped-def]
    """The points of s (k coordinates each), s known to have few (counted first): listed
    outside the work limit of _bounded, which then starts afresh."""
    isl = _isl()
    ctx = isl.DEFAULT_CONTEXT
    limit = ctx.get_max_operations()
    ctx.set_max_operations(0)
    out: list[list[int]] = []
    try:
        s.foreach_point(lambda p: out.append(
            [p.get_coordinate_val(isl.dim_type.set, i).to_python() for i in range(k)]))
    finally:
        ctx.reset_operations()
        ctx.set_max_operations(limit)
    return out


def _count(s) -> int:  # type: ignore[no-untyped-def]
    try:
        v = s.count_val()
        return int(v.to_python())
    except (TypeError, ValueError):     # NaN: isl gave up (out of operations)
        raise _OutOfWork from None


def _coordinate(s) -> int:  # type: ignore[no-untyped-def]
    isl = _isl()
    return s.sample_point().get_coordinate_val(isl.dim_type.set, 0).to_python()


def _runs(s, cap: int) -> list[tuple[int, int]] | None:  # type: ignore[no-untyped-def]
    """The maximal runs of consecutive integers of the bounded 1-D set s: its points whose
    left (right) neighbour is not in s start (end) one; None when there are more than cap."""
    isl = _isl()
    up = isl.Map("{ [o] -> [o + 1] }")
    starts = s.subtract(s.apply(up))
    if _count(starts) > cap:                          # counted in isl: no callbacks
        return None
    ends = s.subtract(s.apply(up.reverse()))
    lo = sorted(c[0] for c in _points(starts, 1))
    hi = sorted(c[0] for c in _points(ends, 1))
    return [(a, b + 1) for a, b in zip(lo, hi)]


def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint, non-adjacent intervals covering the same bytes (the distributed
    engine's interval sets use it too)."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out




# --- building the maps from the lifted IR ----------------------------------------------------

_SPECIAL = {"%tid.x": "tid_x", "%tid.y": "tid_y", "%tid.z": "tid_z",
            "%ctaid.x": "bx", "%ctaid.y": "by", "%ctaid.z": "bz",
            "%ntid.x": "ntid_x", "%ntid.y": "ntid_y", "%ntid.z": "ntid_z",
            "%nctaid.x": "nctaid_x", "%nctaid.y": "nctaid_y", "%nctaid.z": "nctaid_z"}
_INT_PARAM_TYPES = ("u8", "s8", "b8", "u16", "s16", "b16", "u32", "s32", "b32", "u64", "s64", "b64")
_POINTER_TYPES = ("u64", "b64")
_FLOAT_MODS = frozenset(("f16", "f32", "f64", "bf16", "f16x2", "bf16x2", "tf32"))
#: ops with global-memory effects that touch no particular address (ordering, printing)
_NO_ADDRESS = frozenset(("upir.barrier", "upir.warp_collective", "upir.spin_wait", "upir.fence",
                         "upir.printf", "upir.exit", "upir.trap", "upir.clock", "upir.nanosleep",
                         "upir.call_stack"))
_NOT_DISTRIBUTABLE = {
    "upir.envreg": "grid-wide sync (cooperative launch)",
    "upir.malloc": "device-side malloc", "upir.free": "device-side free",
    "upir.launch_device": "dynamic parallelism (a kernel launched from the device)",
    "upir.launch_buffer": "dynamic parallelism (a kernel launched from the device)",
    "ptx.tex": "texture reads", "ptx.tld4": "texture reads", "ptx.txq": "texture queries",
    "ptx.suld": "surface reads", "ptx.sust": "surface writes",
}


#: how deep a value's operands are followed (run() computes values in dominance order, so
#: the chains followed at once are short), and the most terms an index polynomial may have
_MAX_DEPTH = 200
_MAX_TERMS = 64


#: conjunctions isl may make of one access's conditions (see _access_isl)
_MAX_DISJUNCTS = 64


class _Builder:
    """Walks one lifted kernel (before the optimizing passes) and collects its accesses."""

    def __init__(self, kernel_op: Operation) -> None:
        from cpuify.analysis.cfg import incoming_values
        from cpuify.ir.core import reverse_postorder
        from cpuify.ir.structure import KernelView, block_body
        self.view = KernelView.from_op(kernel_op)
        self.name = self.view.name
        self.region = block_body(kernel_op)
        self.order = reverse_postorder(self.region)
        self.idom = dominators(self.region)
        self.preds = predecessors(self.region)
        self.incoming = incoming_values(self.region)
        self.memo: dict[Value, Poly | None] = {}
        self.busy: set[Value] = set()
        self.atoms: dict[str, _Atom] = {}
        self.derived: dict[str, str] = {}           # key of a derived value -> its atom
        self.loop_j: dict[Block, str] = {}
        self.home: dict[str, Block] = {}            # set/loop atom -> the block it is set in
        self.loops = self._find_loops()
        self.reasons: list[str] = []
        self.accesses: dict[str, list[tuple[Access, Block, Operation]]] = {}
        self.base_params: set[str] = set()
        self.atomic_ops: dict[str, set[str]] = {}
        self.atomic_used: dict[str, bool] = {}
        self.const_symbols: list[str] = []
        self.cvta_params: set[str] = set()
        self.stored: list[Operation] = []
        self._param_like_memo: dict[str, bool] = {}
        self.counter = 0

    # --- structure ---
    def _find_loops(self) -> dict[Block, tuple[set[Block], list[Block]]]:
        loops: dict[Block, tuple[set[Block], list[Block]]] = {}
        for b in self.order:
            for s in b.successors:
                if s in self.idom and dominates(self.idom, s, b):
                    loops.setdefault(s, (set(), []))[1].append(b)
        for h, (body, latches) in loops.items():
            body.add(h)
            work = list(latches)
            while work:
                x = work.pop()
                if x in body:
                    continue
                body.add(x)
                work.extend(self.preds.get(x, ()))
        return loops

    def _edge_values(self, block: Block, index: int) -> list[tuple[Block, Value]]:
        out = []
        for p in dict.fromkeys(self.preds.get(block, ())):
            term = p.terminator
            if term is None:
                continue
            for s, args in zip(term.successors, term.successor_args):
                if s is block and index < len(args):
                    out.append((p, args[index]))
        return out

    def _new_atom(self, prefix: str, atom: _Atom, home: Block | None = None) -> str:
        self.counter += 1
        name = f"{prefix}{self.counter}"
        self.atoms[name] = atom
        if home is not None:
            self.home[name] = home
        return name

    def invariant(self, x: str, body: set[Block]) -> bool:
        """Whether atom x has one value during a whole run of the loop `body`."""
        if self.param_like(x) or x in _BLOCK_VARS or x.startswith("tid_"):
            return True
        at = self.atoms.get(x)
        if at is None:
            return False
        if at.kind in ("div", "rem", "mask"):
            return all(self.invariant(y, body) for y in _p_atoms(at.operand) | _p_atoms(at.divisor))
        home = self.home.get(x)
        return home is not None and home not in body

    def param_like(self, x: str) -> bool:
        if _param_like_name(x):
            return True
        got = self._param_like_memo.get(x)
        if got is None:
            at = self.atoms.get(x)
            got = at is not None and at.kind in ("div", "rem", "mask") and \
                all(self.param_like(y) for y in _p_atoms(at.operand) | _p_atoms(at.divisor))
            self._param_like_memo[x] = got
        return got

    def affine_ok(self, poly: Poly) -> bool:
        """Affine once the launch fixes the parameter-like atoms."""
        return all(sum(1 for x in m if not self.param_like(x)) <= 1 for m in poly)

    def _param_of(self, op: Operation):  # type: ignore[no-untyped-def]
        off = int(op.attributes.get("offset", -1))
        for p in self.view.params:
            if p.offset <= off < p.offset + max(p.size, 1):
                return p, off == p.offset and not p.dims
        return None, False

    # --- values as polynomials ---
    def val(self, v: Value) -> Poly | None:
        if v in self.memo:
            return self.memo[v]
        if v in self.busy or len(self.busy) > _MAX_DEPTH:
            return None                 # a cycle, or a chain too long to follow: unknown
        self.busy.add(v)
        try:
            got = self._val(v)
        finally:
            self.busy.discard(v)
        if got is not None and len(got) > _MAX_TERMS:
            got = None
        self.memo[v] = got
        return got

    def _val(self, v: Value) -> Poly | None:
        from cpuify.analysis.access import _const_of
        if isinstance(v, BlockArgument):
            return self._block_arg(v)
        assert isinstance(v, OpResult)
        op = v.op
        name = op.name
        c = _const_of(v)
        if c is not None:
            return _p_const(c)
        m = set(mods(op))
        if name == "upir.param":
            p, whole = self._param_of(op)
            if p is None or not whole or p.ptx_type not in _INT_PARAM_TYPES or v.type[0] != "i":
                return None
            return _p_atom("p:" + p.name)
        if name == "upir.special":
            reg = _SPECIAL.get(op.attributes.get("reg", ""))
            if reg is None:
                return None
            if reg.startswith("tid_") and reg not in self.atoms:
                self.atoms[reg] = _Atom("tid")
            return _p_atom(reg)
        if name == "ptx.mul" and "hi" in m and len(op.operands) == 2 and v.type[0] == "i" \
                and not m & _FLOAT_MODS:
            return self._mul_hi(op)
        if not name.startswith("ptx.") or m & _FLOAT_MODS or m & {"cc", "sat", "hi"} \
                or v.type[0] != "i" or v.type == "i1":
            return None
        ops = op.operands
        if name in ("ptx.mov", "ptx.cvta", "ptx.cvt") and len(ops) == 1 and len(op.results) == 1:
            return self.val(ops[0])
        if name in ("ptx.add", "ptx.sub") and len(ops) == 2:
            a, b = self.val(ops[0]), self.val(ops[1])
            return None if a is None or b is None else _p_add(a, b, 1 if name == "ptx.add" else -1)
        if name in ("ptx.mul", "ptx.mul24", "ptx.mad", "ptx.mad24") and len(ops) in (2, 3):
            if name.startswith("ptx.mad") != (len(ops) == 3):
                return None
            a, b = self._factor(op, ops[0]), self._factor(op, ops[1])
            c2 = self.val(ops[2]) if len(ops) == 3 else {}
            return None if a is None or b is None or c2 is None else _p_add(_p_mul(a, b), c2)
        if name == "ptx.neg" and len(ops) == 1:
            a = self.val(ops[0])
            return None if a is None else _p_scale(a, -1)
        if name == "ptx.not" and len(ops) == 1:       # ~x == -x - 1
            a = self.val(ops[0])
            return None if a is None else _p_add(_p_scale(a, -1), _p_const(-1))
        if name == "ptx.shl" and len(ops) == 2:
            k = _const_of(ops[1])
            a = self.val(ops[0])
            return None if a is None or k is None or not 0 <= k < 64 else _p_scale(a, 1 << k)
        if name in ("ptx.div", "ptx.rem", "ptx.shr") and len(ops) == 2:
            a = self.val(ops[0])
            if name == "ptx.shr":
                k = _const_of(ops[1])
                if k is None or not 0 <= k < 64:
                    return None
                d: Poly | None = _p_const(1 << k)
            else:
                d = self.val(ops[1])
            if a is None or d is None or not all(self.param_like(x) for x in _p_atoms(d)):
                return None
            t = ty(op)
            if t.startswith("s"):
                # shr.s is a floor division, div.s/rem.s truncate
                return _p_atom(self._derived("div" if name != "ptx.rem" else "rem", a, d,
                                             name != "ptx.shr"))
            # on the unsigned value: x mod 2^bits (nvcc takes a sign bit with shr.u32 x, 31)
            wrap = _p_const(1 << (8 * type_size(t)))
            a = _p_atom(self._derived("rem", a, wrap, False))
            if len(d) != 1 or d.get((), 0) <= 0:
                d = _p_atom(self._derived("rem", d, wrap, False))
            return _p_atom(self._derived("div" if name != "ptx.rem" else "rem", a, d, False))
        if name == "ptx.and" and len(ops) == 2:
            k = _const_of(ops[1])
            x = ops[0]
            if k is None:
                k, x = _const_of(ops[0]), ops[1]
            a = self.val(x)
            if a is None or k is None:
                return None
            if k >= 0 and k & (k + 1) == 0:          # x & (2^n - 1): x mod 2^n
                return _p_atom(self._derived("rem", a, _p_const(k + 1), False))
            if k < 0 and (-k) & (-k - 1) == 0:       # x & -2^n: 2^n * floor(x / 2^n)
                return _p_scale(_p_atom(self._derived("div", a, _p_const(-k), False)), -k)
            if k >= 0:
                return _p_atom(self._derived("mask", a, _p_const(k), False))
            return None
        if name in ("ptx.or", "ptx.xor") and len(ops) == 2:
            # x | c == x + c when the bits of c are zero in x: every coefficient of x is a
            # multiple of a power of two above c (`(i << 12) * 4 | 8`)
            k = _const_of(ops[1])
            x = ops[0]
            if k is None:
                k, x = _const_of(ops[0]), ops[1]
            a = self.val(x)
            if a is None or k is None or k < 0:
                return None
            step = 1
            while step <= k:
                step *= 2
            if all(c % step == 0 for c in a.values()):
                return _p_add(a, _p_const(k))
            return None
        if name in ("ptx.min", "ptx.max") and len(ops) == 2:
            a, b = self.val(ops[0]), self.val(ops[1])
            if a is None or b is None:
                return None
            s = self._new_atom("m", _Atom("set"), op.parent)
            me = _p_atom(s)
            kind = "le" if name == "ptx.min" else "ge"
            self.atoms[s].cond = ("and", [_compare(kind, me, a), _compare(kind, me, b),
                                          ("or", [_compare("eq", me, a), _compare("eq", me, b)])])
            return me
        if name == "ptx.selp" and len(ops) == 3:
            a, b = self.val(ops[0]), self.val(ops[1])
            if a is None or b is None:
                return None
            if a == b:
                return a
            s = self._new_atom("s", _Atom("set"), op.parent)
            me = _p_atom(s)
            yes, no = self.cond(ops[2], False), self.cond(ops[2], True)
            if yes is None or no is None:
                self.atoms[s].cond = ("or", [_compare("eq", me, a), _compare("eq", me, b)])
                self.atoms[s].exact = False
            else:
                self.atoms[s].cond = ("or", [("and", [yes[0], _compare("eq", me, a)]),
                                             ("and", [no[0], _compare("eq", me, b)])])
                self.atoms[s].exact = yes[1] and no[1]
            return me
        return None

    def _mul_hi(self, op: Operation) -> Poly | None:
        """mul.hi by a constant (nvcc's division by a constant: a magic multiplier, then
        shifts): the high half of the double-width product, floor(x * c / 2^bits), with x
        and c unsigned for .u."""
        from cpuify.analysis.access import _const_of
        t = ty(op)
        bits = 8 * type_size(t)
        ops = op.operands
        c, x = _const_of(ops[1]), ops[0]
        if c is None:
            c, x = _const_of(ops[0]), ops[1]
        a = self.val(x)
        if a is None or c is None:
            return None
        if not t.startswith("s"):
            c %= 1 << bits
            a = _p_atom(self._derived("rem", a, _p_const(1 << bits), False))
        return _p_atom(self._derived("div", _p_scale(a, c), _p_const(1 << bits), False))

    def _factor(self, op: Operation, v: Value) -> Poly | None:
        """An operand of a multiplication: a constant of a widening unsigned one
        (`mul.wide.u32 x, 0xAAAAAAAB`, nvcc's division by 3) is its unsigned value."""
        from cpuify.analysis.access import _const_of
        c = _const_of(v)
        t = ty(op)
        if c is not None and c < 0 and "wide" in mods(op) and t.startswith("u"):
            return _p_const(c + (1 << (8 * type_size(t))))
        return self.val(v)

    def _derived(self, kind: str, operand: Poly, divisor: Poly, signed: bool) -> str:
        key = json.dumps([kind, _p_json(operand), _p_json(divisor), signed])
        got = self.derived.get(key)
        if got is None:
            exact = kind != "mask" or all(self.param_like(x) for x in _p_atoms(operand))
            got = self._new_atom("q", _Atom(kind, TRUE, operand, divisor, signed, exact))
            self.derived[key] = got
        return got

    def _block_arg(self, a: BlockArgument) -> Poly | None:
        block = a.block
        edges = self._edge_values(block, a.index)
        if not edges:
            return None
        loop = self.loops.get(block)
        if loop is None:
            polys = [self.val(v) for _, v in edges]
            if any(p is None for p in polys):
                return None
            if all(p == polys[0] for p in polys):
                return polys[0]
            # a merge: the value of an incoming edge, under the conditions known to hold
            # on that edge (a value from a path not taken is no value of the merge)
            s = self._new_atom("f", _Atom("set", exact=False), block)
            me = _p_atom(s)
            per_edge = []
            for (pred, _), p in zip(edges, polys):
                conds, _ = self.guard(pred)
                term = pred.terminator
                if term is not None and term.name == "cf.cond_br" and \
                        term.successors[0] is not term.successors[1]:
                    got = self.cond(term.operands[0], term.successors[1] is block)
                    if got is not None:
                        conds = ("and", conds[1] + [got[0]])
                conds, _ = self._filter(conds)
                per_edge.append(list(conds[1]))
            # what holds on every edge says nothing about which value came (and would
            # only multiply the disjunction's size)
            common = [c for c in per_edge[0] if all(c in other for other in per_edge[1:])]
            alternatives = [("and", [c for c in conds if c not in common] + [_compare("eq", me, p)])
                            for conds, p in zip(per_edge, polys)]  # type: ignore[arg-type]
            self.atoms[s].cond = ("or", alternatives)
            return me
        body, _ = loop
        entry = [v for p, v in edges if p not in body]
        back = [v for p, v in edges if p in body]
        from cpuify.analysis.induction import increment_terms
        step: Poly | None = None
        for v in back:
            while isinstance(v, OpResult) and v.op.name == "ptx.mov" and \
                    len(v.op.operands) == 1 and v.op.operands[0].type == v.type:
                v = v.op.operands[0]            # (a copy at the end of the loop body)
            if v is a:
                s: Poly = {}
            else:
                terms = increment_terms(a, v)
                if terms is None:
                    return self._follower(a, block, entry, back)
                s = {}
                for t in terms:
                    tp = self.val(t)
                    if tp is None:
                        return None
                    s = _p_add(s, tp)
            if not all(self.param_like(x) for x in _p_atoms(s)):
                return None
            if step is None:
                step = s
            elif step != s:
                return None
        inits = [self.val(v) for v in entry]
        if not inits or any(p is None for p in inits):
            return None
        init = self._one_of(inits, exact=False, home=block)  # type: ignore[arg-type]
        if not step:
            return init
        j = self.loop_j.get(block)
        if j is None:
            j = self._new_atom("j", _Atom("loop"), block)
            self.loop_j[block] = j
        return _p_add(init, _p_mul(step, _p_atom(j)))

    def _follower(self, a: BlockArgument, block: Block, entry: list[Value],
                  back: list[Value]) -> Poly | None:
        """A loop-carried value that is no induction variable of its own but a function of
        the loop's iteration count (`k2 = ~k`, k an induction variable): its entry value in
        iteration 0, the latch's value of iteration j - 1 in iteration j."""
        body = self.loops[block][0]
        j = self.loop_j.get(block)
        if j is None:
            j = self._new_atom("j", _Atom("loop"), block)
            self.loop_j[block] = j
        inits = [self.val(v) for v in entry]
        nexts = [self.val(v) for v in back]
        if not inits or any(p is None for p in inits + nexts):
            return None
        if not all(self.invariant(x, body) or x == j
                   for p in nexts for x in _p_atoms(p)):  # type: ignore[arg-type]
            return None
        s = self._new_atom("f", _Atom("set"), block)
        me = _p_atom(s)
        previous = _p_add(_p_atom(j), _p_const(-1))
        first = [("and", [_compare("eq", _p_atom(j), {}), _compare("eq", me, p)])
                 for p in inits]  # type: ignore[arg-type]
        later = [("and", [_compare("ge", _p_atom(j), _p_const(1)),
                          _compare("eq", me, _p_subst(p, j, previous))])  # type: ignore[arg-type]
                 for p in nexts]
        self.atoms[s].cond = ("or", first + later)
        self.atoms[s].exact = len(inits) == 1 and len(nexts) == 1
        return me

    def _one_of(self, polys: list[Poly], exact: bool, home: Block) -> Poly:
        distinct = []
        for p in polys:
            if p not in distinct:
                distinct.append(p)
        if len(distinct) == 1:
            return distinct[0]
        s = self._new_atom("f", _Atom("set", exact=exact), home)
        me = _p_atom(s)
        self.atoms[s].cond = ("or", [_compare("eq", me, p) for p in distinct])
        return me

    # --- conditions ---
    def cond(self, v: Value, negate: bool) -> tuple[tuple, bool] | None:  # type: ignore[type-arg]
        """The predicate v (or its negation) as a constraint, and whether exactly."""
        from cpuify.analysis.access import _const_of
        if not isinstance(v, OpResult):
            return None
        op = v.op
        name = op.name
        if name == "upir.const":
            c = _const_of(v)
            if c is None:
                return None
            return (TRUE if bool(c) != negate else FALSE), True
        if name == "ptx.setp" and len(op.operands) == 2:
            m = mods(op)
            if set(m) & _FLOAT_MODS:
                return None
            kind = next((_CMP[x] for x in m if x in _CMP), None)
            if kind is None:
                return None
            a, b = self.val(op.operands[0]), self.val(op.operands[1])
            if a is None or b is None:
                return None
            unsigned = any(x in ("lo", "ls", "hi", "hs") or x.startswith("u") for x in m
                           if x in _CMP or x in _INT_PARAM_TYPES) and kind not in ("eq", "ne")
            if negate:
                kind = _NEGATED[kind]
            if not unsigned:
                return _compare(kind, a, b), True
            if kind in ("gt", "ge"):
                a, b, kind = b, a, {"gt": "lt", "ge": "le"}[kind]
            # x <u y for values taken as signed: the order of their unsigned images
            zero: Poly = {}
            return ("or", [("and", [_compare("ge", a, zero), _compare("ge", b, zero), _compare(kind, a, b)]),
                           ("and", [_compare("lt", a, zero), _compare("lt", b, zero), _compare(kind, a, b)]),
                           ("and", [_compare("ge", a, zero), _compare("lt", b, zero)])]), True
        if name == "ptx.not" and len(op.operands) == 1:
            return self.cond(op.operands[0], not negate)
        if name == "ptx.mov" and len(op.operands) == 1 and len(op.results) == 1:
            return self.cond(op.operands[0], negate)
        if name == "ptx.xor" and len(op.operands) == 2 and v.type == "i1":
            for i in (0, 1):
                c = _const_of(op.operands[i])
                if c is not None:
                    return self.cond(op.operands[1 - i], negate != bool(c))
            return None
        if name in ("ptx.and", "ptx.or") and len(op.operands) == 2 and v.type == "i1":
            a = self.cond(op.operands[0], negate)
            b = self.cond(op.operands[1], negate)
            conj = (name == "ptx.and") != negate
            if conj:
                if a is None and b is None:
                    return None
                if a is None or b is None:
                    return (a or b)[0], False  # type: ignore[index]
                return ("and", [a[0], b[0]]), a[1] and b[1]
            if a is None or b is None:
                return None
            return ("or", [a[0], b[0]]), a[1] and b[1]
        return None

    def _filter(self, c: tuple) -> tuple[tuple, bool]:  # type: ignore[type-arg]
        """c without the parts that are not affine (dropped: a wider set)."""
        if c[0] == "and":
            keep = []
            exact = True
            for x in c[1]:
                y, e = self._filter(x)
                exact = exact and e
                if y is not None:
                    keep.append(y)
            return ("and", keep), exact
        if c[0] == "or":
            parts = [self._filter(x) for x in c[1]]
            if any(p[0] is None or p[0] == TRUE and not p[1] for p in parts):
                return TRUE, False
            return ("or", [p[0] for p in parts]), all(p[1] for p in parts)
        if self.affine_ok(c[1]):
            return c, True
        return TRUE, False

    def guard(self, b: Block) -> tuple[tuple, bool]:  # type: ignore[type-arg]
        """The branch conditions that hold whenever b runs: those of the edges that
        dominate it."""
        conds = []
        exact = True
        d = self.idom.get(b)
        while d is not None:
            term = d.terminator
            if term is not None and term.name == "cf.cond_br" and len(term.successors) == 2 \
                    and term.successors[0] is not term.successors[1]:
                for k, s in enumerate(term.successors):
                    if dominates(self.idom, s, b) and all(
                            p is d or dominates(self.idom, s, p) for p in self.preds.get(s, ())):
                        got = self.cond(term.operands[0], k == 1)
                        if got is None:
                            exact = False
                        else:
                            conds.append(got[0])
                            exact = exact and got[1]
            d = self.idom.get(d)
        return ("and", conds), exact

    def finish_loops(self) -> None:
        """Each loop's iteration count j: 0, or a count after which a latch continued."""
        done: set[Block] = set()
        while True:
            todo = [h for h in self.loop_j if h not in done]
            if not todo:
                return
            for h in todo:
                done.add(h)
                self._finish_loop(h)

    def _finish_loop(self, h: Block) -> None:
        j = self.loop_j[h]
        body, latches = self.loops[h]
        me = _p_atom(j)
        alternatives = []
        exact = len(latches) == 1
        exits = sum(1 for b in body for s in b.successors if s not in body)
        exact = exact and exits == 1
        for latch in dict.fromkeys(latches):
            term = latch.terminator
            got = None
            if term is not None and term.name == "cf.cond_br" and \
                    term.successors[0] is not term.successors[1]:
                k = 0 if term.successors[0] is h else 1
                got = self.cond(term.operands[0], k == 1)
            if got is None:
                alternatives = None
                break
            c = self._continue_cond(got[0], j)
            c, e = self._filter(c)
            if not all(self.invariant(x, body) or x == j for x in _c_atoms(c)):
                # a value of the loop other than its count: in the condition of iteration
                # j - 1 it would stand for its value in iteration j
                alternatives = None
                break
            exact = exact and got[1] and e
            # iteration j runs when the latch continued after iteration j - 1
            shifted = _c_map(c, lambda p: _p_subst(p, j, _p_add(me, _p_const(-1))))
            alternatives.append(shifted)
        if alternatives is None:
            self.atoms[j].cond = _compare("ge", me, {})
            self.atoms[j].exact = False
            return
        self.atoms[j].cond = ("and", [_compare("ge", me, {}),
                                      ("or", [_compare("eq", me, {})] + alternatives)])
        self.atoms[j].exact = exact

    def _continue_cond(self, c: tuple, j: str) -> tuple:  # type: ignore[type-arg]
        """`i != bound` continuing a loop whose i moves by a fixed step toward the bound:
        i has not reached it yet (the loop is taken to terminate)."""
        if c[0] == "and":
            return ("and", [self._continue_cond(x, j) for x in c[1]])
        if c[0] != "ne" or any(m.count(j) > 1 for m in c[1]):
            return c
        d = c[1]
        slope = _p_add(_p_subst(d, j, _p_const(1)), _p_subst(d, j, {}), -1)
        if not slope:
            return c
        return ("ge", _p_add(_p_scale(_p_mul(slope, d), -1), _p_const(-1)))

    # --- pointers ---
    def provenance(self, v: Value) -> set[tuple]:  # type: ignore[type-arg]
        """Where an address comes from: ('param', name), ('struct', name), ('load', line),
        (space, symbol) for a variable, ('unknown', op name)."""
        out: set[tuple] = set()  # type: ignore[type-arg]
        seen: set[Value] = set()
        work = [v]
        while work:
            x = work.pop()
            if x in seen:
                continue
            seen.add(x)
            if isinstance(x, BlockArgument):
                work.extend(self.incoming.get(x, ()))
                continue
            assert isinstance(x, OpResult)
            op = x.op
            n = op.name
            if n == "upir.param":
                p, whole = self._param_of(op)
                if p is None:
                    out.add(("unknown", n))
                else:
                    out.add(("param" if whole and p.ptx_type in _INT_PARAM_TYPES else "struct", p.name))
            elif n in ("ptx.ld", "ptx.ldu", "ptx.atom"):
                out.add(("load", op.attributes.get("line", 0)))
            elif n == "upir.addressof":
                out.add((str(op.attributes.get("space", "global")), str(op.attributes.get("symbol"))))
            elif n in ("upir.const", "upir.special", "ptx.mul", "ptx.shl", "ptx.shr", "ptx.div",
                       "ptx.rem", "ptx.mul24", "ptx.setp"):
                continue
            elif n == "ptx.cvt":
                if x.type == "i64" and op.operands and op.operands[0].type == "i64":
                    work.append(op.operands[0])
            elif n in ("ptx.mov", "ptx.cvta", "ptx.neg") or n == "ptx.sub":
                work.extend(op.operands[:1])
            elif n == "ptx.mad":
                work.extend(op.operands[2:3])
            elif n in ("ptx.selp", "ptx.slct"):
                work.extend(op.operands[:2])
            elif n in ("ptx.add", "ptx.and", "ptx.or", "ptx.xor", "ptx.min", "ptx.max"):
                work.extend(op.operands)
            else:
                out.add(("unknown", n))
        return out

    def base_of(self, op: Operation, address: Value) -> str | None:
        """The pointer parameter an address points into; None (with a reason recorded, or
        for shared/local memory) when it is not one parameter."""
        line = op.attributes.get("line", 0)
        where = f"PTX line {line}"
        bases = self.provenance(address)
        params = sorted(name for k, name in bases if k == "param")
        kinds = {k for k, _ in bases}
        if "load" in kinds:
            self.reasons.append(f"a pointer loaded from memory is dereferenced ({where})")
            return None
        for k, name in bases:
            if k == "global":
                what = "writes" if op.name != "ptx.ld" and op.name != "ptx.ldu" else "reads"
                self.reasons.append(f"{what} module variable '{name}' ({where})")
                return None
            if k == "const" and name not in self.const_symbols:
                self.const_symbols.append(name)
        if "struct" in kinds:
            self.reasons.append(f"pointer inside a by-value struct parameter ({where})")
            return None
        if "unknown" in kinds:
            self.reasons.append(f"address not traced to a kernel parameter ({where})")
            return None
        if not params:
            return None                     # shared/local/const variables
        if len(params) > 1:
            preferred = [p for p in params if p in self.cvta_params]
            if len(preferred) != 1:
                self.reasons.append(f"pointer chosen between parameters {', '.join(params)} ({where})")
                return None
            params = preferred
        ptype = next(p.ptx_type for p in self.view.params if p.name == params[0])
        if ptype not in _POINTER_TYPES:
            self.reasons.append(f"address computed from a {ptype} parameter ({where})")
            return None
        return params[0]

    # --- the walk ---
    def run(self) -> KernelAccess:
        from cpuify.analysis.pointers import memory_space
        from cpuify.ir.dialects import memory_effects
        for b in self.order:
            for op in b.ops:
                if op.name == "ptx.cvta" and "to" in mods(op) and "global" in mods(op):
                    for k, n in self.provenance(op.operands[0]):
                        if k == "param":
                            self.cvta_params.add(n)
        for b in self.order:
            # integer values in dominance order: each one's operands are known when it is
            # reached (what a memory access asks for is then a lookup)
            for op in b.ops:
                for r in op.results:
                    if r.type[0] == "i" and r.type != "i1":
                        self.val(r)
        for b in self.order:
            for op in b.ops:
                name = op.name
                if name in _NOT_DISTRIBUTABLE:
                    self.reasons.append(f"{_NOT_DISTRIBUTABLE[name]} (PTX line {op.attributes.get('line', 0)})")
                    continue
                if name in ("ptx.ld", "ptx.ldu", "ptx.st", "ptx.atom", "ptx.red", "ptx.cp_async",
                            "ptx.wmma_load", "ptx.wmma_store"):
                    space = "global" if name == "ptx.cp_async" else memory_space(op)
                    if space in ("shared", "local", "param"):
                        continue
                    if name in ("ptx.st", "ptx.atom") and len(op.operands) > 1:
                        self.stored.append(op)
                    self._record(b, op, space)
                    continue
                if name in _NO_ADDRESS or not name.startswith(("ptx.", "upir.")):
                    continue
                effects = memory_effects(op)
                if any(s == "global" for _, s in effects) and name not in ("ptx.mbarrier",):
                    self.reasons.append(f"'{name}' touches global memory at no known address "
                                        f"(PTX line {op.attributes.get('line', 0)})")
        self.finish_loops()
        return self._result()

    def _record(self, b: Block, op: Operation, space: str) -> None:
        name = op.name
        if name == "ptx.cp_async":
            address, offset, size, kind = op.operands[1], int(op.attributes.get("src_offset", 0)), \
                int(op.attributes.get("size", 16)), "read"
        else:
            address, offset = op.operands[0], int(op.attributes.get("offset", 0))
            m = mods(op)
            size = type_size(ty(op)) * (4 if "v4" in m else 2 if "v2" in m else 8 if "v8" in m else 1)
            kind = {"ptx.ld": "read", "ptx.ldu": "read", "ptx.wmma_load": "read",
                    "ptx.st": "write", "ptx.wmma_store": "write"}.get(name, "atomic")
        if space == "const":
            self.base_of(op, address)       # a __constant__ variable: noted, never split
            return
        base = self.base_of(op, address)
        if base is None:
            return
        self.base_params.add(base)
        index: Poly | None = None
        if name not in ("ptx.wmma_load", "ptx.wmma_store"):
            poly = self.val(address)
            atom = "p:" + base
            if poly is not None and poly.get((atom,)) == 1 and \
                    not any(atom in mono for mono in poly if mono != (atom,)):
                index = _p_add(_p_add(poly, _p_atom(atom), -1), _p_const(offset))
                if not self.affine_ok(index):
                    index = None
        guard, gexact = self.guard(b)
        guard, fexact = self._filter(guard)
        access = Access(kind, index, size, guard, gexact and fexact, int(op.attributes.get("line", 0)))
        self.accesses.setdefault(base, []).append((access, b, op))
        if kind == "atomic":
            # the operation and its type ("add.u32"): what folding partial results needs
            ops = {f"{o}.{ty(op)}" for o in set(mods(op)) & set(ATOMIC_OPS)}
            self.atomic_ops.setdefault(base, set()).update(
                ops or {f"add.{ty(op)}"} if name == "ptx.red" else ops)
            used = name == "ptx.atom" and bool(op.results) and bool(op.results[0].uses)
            self.atomic_used[base] = self.atomic_used.get(base, False) or used

    def _closure_exact(self, names: Iterable[str]) -> bool:
        todo = list(names)
        seen: set[str] = set()
        while todo:
            x = todo.pop()
            if x in seen:
                continue
            seen.add(x)
            at = self.atoms.get(x)
            if at is None:
                continue
            if not at.exact:
                return False
            todo.extend(at.atoms())
        return True

    def _result(self) -> KernelAccess:
        pointer_params = [p for p in self.view.params if p.name in self.base_params or (
            p.ptx_type in _POINTER_TYPES and not p.dims)]
        pointer_names = {p.name for p in pointer_params}
        # a pointer parameter's value used as a number (stored, compared, indexed by): the
        # maps could not follow it
        for op in self.stored:
            for v in op.operands[1:]:
                for k, n in self.provenance(v):
                    if k == "param" and n in self.base_params:
                        self.reasons.append(f"pointer parameter '{n}' stored to memory "
                                            f"(PTX line {op.attributes.get('line', 0)})")
        base_atoms = {"p:" + n for n in pointer_names}
        accesses: dict[str, list[Access]] = {}
        for base, got in self.accesses.items():
            out = []
            for a, _, _ in got:
                if a.index is not None and _p_atoms(a.index) & base_atoms:
                    a.index = None
                if _c_atoms(a.guard) & base_atoms:
                    a.guard = ("and", [c for c in a.guard[1] if not _c_atoms(c) & base_atoms])
                    a.exact = False
                atoms = (_p_atoms(a.index) if a.index else set()) | _c_atoms(a.guard)
                a.exact = a.exact and a.index is not None and self._closure_exact(atoms)
                out.append(a)
            accesses[base] = out
        # only the atoms the accesses use (transitively)
        used: set[str] = set()
        todo = [x for accs in accesses.values() for a in accs
                for x in ((_p_atoms(a.index) if a.index else set()) | _c_atoms(a.guard))]
        while todo:
            x = todo.pop()
            if x in used or x not in self.atoms:
                continue
            used.add(x)
            todo.extend(self.atoms[x].atoms())
        atoms = {k: v for k, v in self.atoms.items() if k in used}
        for at in atoms.values():
            at.cond = _c_simplify(at.cond)
        for accs in accesses.values():
            for a in accs:
                a.guard = _c_simplify(a.guard)
                if a.guard[0] != "and":
                    a.guard = ("and", [a.guard])
        scalars = [(p.name, p.ptx_type) for p in self.view.params
                   if p.name not in pointer_names and p.ptx_type in _INT_PARAM_TYPES and not p.dims]
        params = []
        for i, p in enumerate(self.view.params):
            if p.name not in pointer_names:
                continue
            accs = accesses.get(p.name, [])
            params.append(ParamAccess(
                i, p.name, writes_exact=all(a.exact for a in accs if a.kind == "write"),
                atomic_ops=frozenset(self.atomic_ops.get(p.name, ())),
                atomic_result_used=self.atomic_used.get(p.name, False)))
        reasons = list(dict.fromkeys(self.reasons))
        reason = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "")
        return KernelAccess(self.name, params, not reasons, reason, scalars, atoms, accesses,
                            self.const_symbols)


def analyze_kernel_op(kernel_op: Operation) -> KernelAccess:
    """The access maps of a lifted `upir.kernel` op (before the optimizing passes)."""
    return _Builder(kernel_op).run()


_CACHE: dict[tuple[str, str], KernelAccess] = {}


def kernel_access(compiled_module_or_ptx: Any, kernel_name: str) -> KernelAccess:
    """The access maps of kernel `kernel_name` (its PTX .entry name, or a name expression
    the compiled module lowered) of a CompiledModule (anything with `.ptx`) or PTX text."""
    import hashlib
    ptx = getattr(compiled_module_or_ptx, "ptx", compiled_module_or_ptx)
    if not isinstance(ptx, str):
        raise CpuifyError("kernel_access needs a compiled module or PTX text, got "
                          f"{type(compiled_module_or_ptx).__name__}")
    lowered = getattr(compiled_module_or_ptx, "lowered_names", {}) or {}
    name = lowered.get(kernel_name, kernel_name)
    key = (hashlib.sha256(ptx.encode()).hexdigest(), name)
    got = _CACHE.get(key)
    if got is not None:
        return got
    from cpuify.frontend.ptx_parser import parse_ptx
    from cpuify.lifting import lift_kernel
    module = parse_ptx(ptx)
    entry = next((e for e in module.entries if e.name == name), None)
    if entry is None:
        names = ", ".join(e.name for e in module.entries) or "none"
        raise CpuifyError(f"kernel '{kernel_name}' is not in the module (its kernels: {names})")
    result = analyze_kernel_op(lift_kernel(module, entry).op)
    if len(_CACHE) > 256:
        _CACHE.clear()
    _CACHE[key] = result
    return result


__all__ = [
    "ATOMIC_OPS",
    "BIG",
    "WHOLE",
    "WHOLE_INTERVAL",
    "Access",
    "AccessRelation",
    "Footprint",
    "KernelAccess",
    "ParamAccess",
    "analyze_kernel_op",
    "kernel_access",
]
