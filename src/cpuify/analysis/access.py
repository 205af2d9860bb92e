"""Memory accesses of the block body as affine functions of the thread index.

An address is written as `sum(c * leaf) + const`, where a leaf is a thread index
(`%tid.x/y/z`) or a value that is the same in every thread of the block (a parameter,
`blockIdx`, a block-uniform loop counter: opaque symbols).  Two accesses with the same
affine address touch the same location only in the same thread when the map from thread
index to address is injective over the block (and the accesses do not overlap a
neighbour's): the "hole" in a barrier's memory effects (Polygeist paper, III-A) that makes
`s[ty][tx] = x; __syncthreads(); y = s[ty][tx];` communication within a thread only."""

from __future__ import annotations

from dataclasses import dataclass

from cpuify.analysis.pointers import memory_space, pointer_parameter
from cpuify.ir.core import OpResult, Operation, Value
from cpuify.ir.dialects import READ, WRITE, memory_effects
from cpuify.ir.modifiers import mods, ty, type_size

_TID = {"%tid.x": 0, "%tid.y": 1, "%tid.z": 2}
_ORDERED = frozenset(("volatile", "relaxed", "acquire", "release", "mmio"))
#: ops whose value depends only on an attribute (and the launch): parameters, variables'
#: addresses, block-uniform special registers
_SYMBOLIC = {"upir.param": "offset", "upir.addressof": "symbol", "upir.special": "reg"}
#: how deep an address expression is followed
_DEPTH = 24


@dataclass(frozen=True)
class Affine:
    """sum(coef * leaf) + const; leaves are ("tid", d) or uniform Values."""
    terms: frozenset[tuple[object, int]]
    const: int

    def tid_coefficients(self) -> tuple[int, int, int]:
        c = [0, 0, 0]
        for leaf, k in self.terms:
            if isinstance(leaf, tuple) and leaf[0] == "tid":
                c[leaf[1]] += k
        return c[0], c[1], c[2]


def _add(a: dict[object, int], b: dict[object, int], sign: int = 1) -> dict[object, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + sign * v
        if out[k] == 0:
            del out[k]
    return out


def _const_of(v: Value) -> int | None:
    if isinstance(v, OpResult) and v.op.name == "upir.const" and isinstance(v.op.attributes.get("value"), int):
        value = v.op.attributes["value"]
        bits = int(v.type[1:]) if v.type != "i1" else 1
        return value - (1 << bits) if value >= 1 << (bits - 1) and bits > 1 else value
    return None


def affine_form(v: Value, uniform: set[Value] | "Symbols", depth: int = 0,
                memo: dict[Value, tuple[dict[object, int], int] | None] | None = None
                ) -> tuple[dict[object, int], int] | None:
    """v as (terms, const), or None when it is not affine in the thread index over
    block-uniform symbols (`uniform`: the values that may be leaves).  (Index arithmetic
    is taken not to wrap, as nvcc's does not for in-bounds C++ indices.)"""
    memo = {} if memo is None else memo
    if v in memo:
        return memo[v]
    result: tuple[dict[object, int], int] | None = None
    c = _const_of(v)
    if c is not None:
        result = ({}, c)
    elif depth > _DEPTH:
        result = ({v: 1}, 0) if v in uniform else None
    elif isinstance(v, OpResult) and v.op.name == "upir.special" and v.op.attributes.get("reg") in _TID:
        result = ({("tid", _TID[v.op.attributes["reg"]]): 1}, 0)
    elif isinstance(v, OpResult) and v.op.name in _SYMBOLIC and v in getattr(uniform, "uniform", uniform):
        # the same value wherever it is computed: a leaf named by what it reads
        key = v.op.attributes.get(_SYMBOLIC[v.op.name])
        result = ({(v.op.name, key, v.type): 1}, 0)
    elif isinstance(v, OpResult) and v.op.name.startswith("ptx."):
        result = _affine_op(v.op, uniform, depth, memo)
        if result is None and v in uniform:
            result = ({v: 1}, 0)
    elif v in uniform:
        result = ({v: 1}, 0)
    memo[v] = result
    return result


def _affine_op(op: Operation, uniform: set[Value], depth: int,
               memo: dict) -> tuple[dict[object, int], int] | None:  # type: ignore[type-arg]
    name = op.name
    m = mods(op)
    if "hi" in m or "sat" in m or "cc" in m or "f32" in m or "f64" in m:
        return None

    def form(x: Value) -> tuple[dict[object, int], int] | None:
        return affine_form(x, uniform, depth + 1, memo)

    def scaled(f: tuple[dict[object, int], int], k: int) -> tuple[dict[object, int], int]:
        return ({key: val * k for key, val in f[0].items() if val * k}, f[1] * k)

    ops = op.operands
    if name in ("ptx.mov", "ptx.cvt", "ptx.cvta") and len(ops) == 1 and len(op.results) == 1:
        return form(ops[0])
    if name in ("ptx.add", "ptx.sub") and len(ops) == 2:
        a, b = form(ops[0]), form(ops[1])
        if a is None or b is None:
            return None
        sign = 1 if name == "ptx.add" else -1
        return _add(a[0], b[0], sign), a[1] + sign * b[1]
    if name in ("ptx.mul", "ptx.mad", "ptx.shl") and len(ops) >= 2:
        if name == "ptx.shl":
            k = _const_of(ops[1])
            if k is None or not 0 <= k < 32:
                return None
            prod = form(ops[0])
            prod = None if prod is None else scaled(prod, 1 << k)
        else:
            ka, kb = _const_of(ops[0]), _const_of(ops[1])
            if kb is not None:
                prod = form(ops[0])
                prod = None if prod is None else scaled(prod, kb)
            elif ka is not None:
                prod = form(ops[1])
                prod = None if prod is None else scaled(prod, ka)
            else:
                return None
        if prod is None:
            return None
        if name == "ptx.mad":
            c = form(ops[2])
            if c is None:
                return None
            return _add(prod[0], c[0]), prod[1] + c[1]
        return prod
    return None


@dataclass(frozen=True)
class Access:
    """One memory effect of one op: kind (read/write), space, and where known the address
    (affine form, plus the op's offset) and the access size in bytes."""
    op: Operation
    kind: str
    space: str
    address: Affine | None
    size: int
    read_only: bool = False        # ld.global.nc / ldu: memory no thread writes in the kernel
    #: the byte offset of the pointer parameter the address is based on (None: unknown)
    base: int | None = None


_MEMORY_OPS = ("ptx.ld", "ptx.ldu", "ptx.st", "ptx.atom", "ptx.red")


class Symbols:
    """The values an address may use as opaque leaves: block-uniform values defined outside
    every loop of the region, so that each has one value per thread for the whole kernel
    (a loop counter differs between the iterations an access before a barrier and one
    after it may run in)."""

    def __init__(self, uniform: set[Value], loop_blocks: set) -> None:  # type: ignore[type-arg]
        self.uniform = uniform
        self.loop_blocks = loop_blocks

    def __contains__(self, v: object) -> bool:
        if v not in self.uniform:
            return False
        from cpuify.ir.core import BlockArgument
        owner = v.block if isinstance(v, BlockArgument) else v.op.parent  # type: ignore[union-attr]
        return owner not in self.loop_blocks


def accesses(op: Operation, uniform: "set[Value] | Symbols", memo: dict) -> list[Access]:  # type: ignore[type-arg]
    """The memory effects of op, with addresses where they are affine."""
    effects = memory_effects(op)
    if not effects:
        return []
    if op.name in _MEMORY_OPS:
        space = memory_space(op)
        form = affine_form(op.operands[0], uniform, 0, memo)
        address = None
        if form is not None:
            address = Affine(frozenset(form[0].items()), form[1] + int(op.attributes.get("offset", 0)))
        size = type_size(ty(op)) * (4 if "v4" in mods(op) else 2 if "v2" in mods(op) else 1)
        nc = op.name == "ptx.ldu" or "nc" in mods(op)
        if set(mods(op)) & _ORDERED:
            address = None              # volatile/atomic-ordered: observable, never "same thread"
        kinds = sorted({k for k, _ in effects})
        base = None
        if space in ("global", "generic"):
            bases = memo.setdefault("pointer bases", {})
            base = pointer_parameter(op.operands[0], None, bases)
        return [Access(op, k, space, address, size, nc, base) for k in kinds]
    return [Access(op, k, s, None, 0) for k, s in effects]


def _spaces(space: str) -> set[str]:
    return {"global", "shared", "const"} if space == "generic" else {space}


def may_conflict(a: Access, b: Access, block_dims: tuple[int, int, int] | None,
                 shared_var: dict[Value, str], noalias: frozenset[int] = frozenset()) -> bool:
    """Whether a and b, run by two *different* threads of a block, may touch the same
    location with at least one write.  `noalias`: the byte offsets of the pointer
    parameters known to point into memory no other pointer parameter reaches (the kernel's
    `noalias_params`)."""
    common = _spaces(a.space) & _spaces(b.space)
    common -= {"local", "param", "const"}   # per thread, or never written by a kernel
    if _apart(a, b, common, shared_var, noalias):
        return False
    if a.address is not None and b.address is not None and a.address == b.address and \
            a.size == b.size and same_thread_only(a.address, a.size, block_dims):
        return False
    return True


def _thread_spaces(space: str) -> set[str]:
    return {"global", "shared", "const", "local"} if space == "generic" else {space}


def may_conflict_in_thread(a: Access, b: Access, shared_var: dict[Value, str],
                           noalias: frozenset[int] = frozenset()) -> bool:
    """Whether a and b, run by the *same* thread, may touch the same location with at least
    one write (what keeps two accesses of a thread in their order)."""
    # (a generic address may also point into the thread's own local memory)
    common = _thread_spaces(a.space) & _thread_spaces(b.space) - {"param", "const"}
    return not _apart(a, b, common, shared_var, noalias)


def apart_by_parameters(a: Access, b: Access, noalias: frozenset[int]) -> bool:
    """Whether a and b are based on two different pointer parameters, one of which is known
    to point into memory no other pointer parameter reaches (in `noalias`)."""
    return a.base is not None and b.base is not None and a.base != b.base and \
        (a.base in noalias or b.base in noalias)


def _apart(a: Access, b: Access, common: set[str], shared_var: dict[Value, str],
           noalias: frozenset[int] = frozenset()) -> bool:
    """What both conflict tests know apart from addresses: a and b never touch the same
    location with a write when both read, one reads `.nc` data, their memory spaces
    (`common`: those both may reach) are disjoint, they are distinct __shared__ variables,
    or they are based on different pointer parameters one of which is in `noalias`."""
    if a.kind == READ and b.kind == READ:
        return True
    if a.read_only and a.kind == READ or b.read_only and b.kind == READ:
        return True                     # .nc data is not written during the kernel
    if not common:
        return True
    if noalias and apart_by_parameters(a, b, noalias):
        return True
    if common == {"shared"} and a.op.name in _MEMORY_OPS and b.op.name in _MEMORY_OPS:
        va, vb = shared_var.get(a.op.operands[0]), shared_var.get(b.op.operands[0])
        if va is not None and vb is not None and va != vb:
            return True                 # distinct __shared__ variables never overlap
    return False


def same_thread_only(address: Affine, size: int, block_dims: tuple[int, int, int] | None) -> bool:
    """Whether two different threads of a block never touch overlapping bytes of
    [address, address + size): the thread-index part of the address is injective with
    steps of at least `size` (a mixed-radix layout: each dimension's coefficient spans the
    ones below it)."""
    if block_dims is None:
        return False
    coefs = address.tid_coefficients()
    dims = [(abs(c), n) for c, n in zip(coefs, block_dims) if n > 1]
    if any(c == 0 for c, _ in dims):
        return False                    # threads differing only there share the address
    span = size                         # bytes covered by the dimensions placed so far
    for c, n in sorted(dims):
        if c < span:
            return False
        span = c * (n - 1) + span
    return True


__all__ = [
    "READ",
    "WRITE",
    "Access",
    "Affine",
    "Symbols",
    "accesses",
    "affine_form",
    "apart_by_parameters",
    "may_conflict",
    "may_conflict_in_thread",
    "same_thread_only",
]


#: ops through which an address keeps pointing into the object its operands point into
#: (arithmetic, moves, conversions, selects); loads start a new provenance
_ADDRESS_ARITHMETIC = ("ptx.add", "ptx.sub", "ptx.mov", "ptx.cvta", "ptx.mad", "ptx.mul",
                       "ptx.shl", "ptx.cvt", "ptx.and", "ptx.or", "ptx.xor", "ptx.selp",
                       "ptx.slct", "ptx.neg", "ptx.min", "ptx.max")


def written_parameters(kernel: Operation) -> set[int]:
    """Byte offsets of the kernel's parameters (`upir.param`) that an address written through
    (a global or generic `st`, `atom`, `red`) is computed from, following address
    arithmetic and block arguments back, not loads: a pointer loaded from memory may point
    anywhere, and an index read from an array (`out[idx[i]]`) does not make `idx` written.
    A parameter not in the set is one the kernel is known only to read through."""
    from cpuify.analysis.cfg import incoming_values
    from cpuify.ir.core import BlockArgument
    incoming: dict[BlockArgument, list[Value]] = {}
    stores: list[Value] = []
    for op in kernel.walk():
        for region in op.regions:
            incoming.update(incoming_values(region))
        if op.name in ("ptx.st", "ptx.atom", "ptx.red") and op.operands and \
                memory_space(op) in ("global", "generic"):
            stores.append(op.operands[0])
    written: set[int] = set()
    seen: set[Value] = set()
    work = list(stores)
    while work:
        v = work.pop()
        if v in seen:
            continue
        seen.add(v)
        if isinstance(v, OpResult):
            op = v.op
            if op.name == "upir.param":
                written.add(int(op.attributes.get("offset", -1)))
            elif op.name in _ADDRESS_ARITHMETIC:
                work.extend(op.operands)
        elif isinstance(v, BlockArgument):
            work.extend(incoming.get(v, ()))
    return written
