"""Accesses of one thread that depend on each other within a thread loop's iteration.

A thread loop's accesses carry the access group of `llvm.loop.parallel_accesses`
(ModuleCodegen.parallel_loop_id): its iterations (threads) are independent.  LLVM reads the
annotation as "no memory dependence at all", also between two accesses of the same
iteration, and its loop vectorizer then builds interleaved groups across them: the stores
of a group `s[t*4 + 0]`, `s[t*4 + 1]` ... are made at the last member's place and the loads
of a group at the first member's, past a load or store of the same thread to the same word
in between.  `same_thread_dependences` finds, in a segment function just emitted, each
store followed (in one iteration of a thread loop) by an access that may reach the same
bytes, where one of the two may join an interleaved group (its address may step by a
constant 2 to _MAX_GROUP elements from one thread to the next: _Strides); the segment
leaves those out of the group (SegmentValues.tag_parallel_accesses), and LLVM analyses
such a loop as an ordinary one.  Consecutive accesses (`a[i]`, `b[i]` through parameters
that may overlap) never move, so the loops of the benchmark suite all stay parallel.

Two accesses are independent when their addresses are the same base plus the same terms
and constants that keep their bytes apart (`s[t*4 + 1]` after `s[t*4]`), when they have
different alias scopes (two `__shared__` variables, two parameters known not to overlap),
or when one is in shared memory and the other through a pointer parameter.  Anything else
(a run-time index, two parameters that may overlap, a pointer loaded from memory) may be
the same word."""

from __future__ import annotations

from collections.abc import Iterable

from llvmlite import ir

from cpuify.codegen.lowering import _width

#: a linear form: {term key: coefficient}, constant (bytes)
Linear = tuple[dict[object, int], int]

_PURE = {"add", "sub", "mul", "shl", "lshr", "ashr", "and", "or", "xor", "udiv", "sdiv", "urem",
         "srem", "zext", "sext", "trunc", "select", "icmp", "getelementptr", "bitcast", "inttoptr",
         "ptrtoint"}
_MAX_DEPTH = 200
_FOLDED = {"add", "sub", "mul", "and", "or", "xor", "shl", "lshr", "zext", "sext", "trunc", "icmp", "select"}


def _opcode(v: ir.Instruction) -> str:
    """The instruction's opcode without its flags (`trunc nuw nsw` is a trunc)."""
    return v.opname.split(" ", 1)[0]


def _size(t: ir.Type) -> int | None:
    """Bytes of a scalar or vector LLVM type; None for aggregates."""
    if isinstance(t, ir.VectorType):
        inner = _size(t.element)
        return None if inner is None else inner * t.count
    try:
        return max(_width(t) // 8, 1)
    except TypeError:
        return None


class _Addresses:
    """Canonical keys of values and linear forms of addresses, memoized for one function.
    A load of one of the segment's allocas (a value passed between its LLVM blocks) stands
    for the value stored there when there is one such store (what mem2reg makes of it)."""

    def __init__(self, fn: ir.Function) -> None:
        self.keys: dict[int, object] = {}
        self.linear: dict[int, Linear | None] = {}
        self.stored: dict[ir.AllocaInstr, list[ir.Value]] = {}
        for bb in fn.blocks:
            for instr in bb.instructions:
                if isinstance(instr, ir.StoreInstr) and isinstance(instr.operands[1], ir.AllocaInstr):
                    self.stored.setdefault(instr.operands[1], []).append(instr.operands[0])

    def forwarded(self, v: ir.Value) -> ir.Value:
        """`v`, or the one value stored to the alloca `v` loads."""
        for _ in range(_MAX_DEPTH):
            if not (isinstance(v, ir.LoadInstr) and isinstance(v.operands[0], ir.AllocaInstr)):
                break
            values = self.stored.get(v.operands[0], [])
            if len(values) != 1:
                break
            v = values[0]
        return v

    def key(self, v: ir.Value, depth: int = 0) -> object:
        """Equal keys: equal values (the same side-effect-free computation of equal keys)."""
        v = self.forwarded(v)
        got = self.keys.get(id(v))
        if got is not None:
            return got
        if isinstance(v, ir.Constant):
            k: object = ("const", str(v.type), str(v.constant))
        elif isinstance(v, ir.Instruction) and _opcode(v) in _PURE and depth < _MAX_DEPTH:
            flags = tuple(getattr(v, "flags", ()) or ())
            k = (v.opname, str(v.type), flags, getattr(v, "op", None),
                 tuple(self.key(o, depth + 1) for o in v.operands))
        else:
            k = ("value", id(v))
        self.keys[id(v)] = k
        return k

    def integer(self, v: ir.Value, depth: int = 0) -> Linear:
        """`v` (an integer) as a sum of terms times constants plus a constant.  Values the
        form does not look into (loads, phis, zext of a non-constant ...) are terms."""
        v = self.forwarded(v)
        got = self.linear.get(id(v))
        if got is not None:
            return got
        form = self._integer(v, depth)
        self.linear[id(v)] = form
        return form

    def _integer(self, v: ir.Value, depth: int) -> Linear:
        if isinstance(v, ir.Constant) and isinstance(v.type, ir.IntType) and isinstance(v.constant, int):
            return {}, _signed(v.constant, v.type.width)
        if isinstance(v, ir.Instruction) and depth < _MAX_DEPTH:
            ops = v.operands
            if _opcode(v) in ("add", "sub") and len(ops) == 2:
                a, b = self.integer(ops[0], depth + 1), self.integer(ops[1], depth + 1)
                return _combine(a, b, 1 if _opcode(v) == "add" else -1)
            if _opcode(v) in ("mul", "shl") and len(ops) == 2:
                a, b = self.integer(ops[0], depth + 1), self.integer(ops[1], depth + 1)
                if _opcode(v) == "shl":
                    if not b[0] and 0 <= b[1] < 64:
                        return _scale(a, 1 << b[1])
                elif not b[0]:
                    return _scale(a, b[1])
                elif not a[0]:
                    return _scale(b, a[1])
            if _opcode(v) in ("zext", "sext", "trunc") and len(ops) == 1:
                a = self.integer(ops[0], depth + 1)
                if not a[0] and isinstance(ops[0].type, ir.IntType):
                    w = ops[0].type.width
                    c = a[1] & ((1 << w) - 1) if _opcode(v) == "zext" else a[1]
                    return {}, _signed(c, v.type.width) if _opcode(v) == "trunc" else c
        return {self.key(v, depth): 1}, 0

    def pointer(self, p: ir.Value, depth: int = 0) -> tuple[ir.Value, Linear]:
        """(root, byte offset from the root) of pointer `p`: through bitcasts and GEPs with
        scalar element types."""
        offset: Linear = ({}, 0)
        while depth < _MAX_DEPTH:
            depth += 1
            p = self.forwarded(p)
            if isinstance(p, ir.CastInstr) and p.opname == "bitcast":
                p = p.operands[0]
                continue
            if isinstance(p, ir.GEPInstr) and len(p.operands) == 2 and isinstance(p.operands[0].type, ir.PointerType):
                size = _size(p.operands[0].type.pointee)
                if size is not None:
                    offset = _combine(offset, _scale(self.integer(p.operands[1], depth), size), 1)
                    p = p.operands[0]
                    continue
            break
        return p, offset


#: what a value's change per step of the thread loops can be: a set of possible derivatives
#: (each a sorted tuple of (loop phi id, coefficient); () for a loop-invariant value),
#: OPAQUE (it changes in a way LLVM's scalar evolution has no recurrence for: never part of
#: an interleaved group) or None (anything)
Derivative = frozenset[tuple[tuple[int, int], ...]] | str | None
OPAQUE = "opaque"
_INVARIANT: frozenset[tuple[tuple[int, int], ...]] = frozenset({()})
#: what a memoized derivative that depends on where it was asked "read" (_Strides.memo)
_CONTEXT = -1
#: interleaved groups have at most LLVM's -max-interleave-group-factor (8) members; twice that
_MAX_GROUP = 16


class _Strides:
    """How the addresses of a segment's accesses change from one thread to the next.  Only an
    access whose address steps by 2 to _MAX_GROUP elements per thread (a constant stride)
    can join one of LLVM's interleaved groups and move; the rest stay where they are.  The
    derivative over-approximates what scalar evolution may find after LLVM's own rewrites:
    masks, remainders by powers of two and casts keep a recurrence's step, a multiplication
    by a run-time value may be versioned to 1."""

    def __init__(self, addresses: _Addresses, loop_phis: set[ir.Instruction],
                 outer_phis: set[ir.Instruction]) -> None:
        self.addresses = addresses
        self.loop_phis = loop_phis
        self.outer_phis = outer_phis
        # value -> (its derivative, the allocas it was computed from; _CONTEXT: a result
        # that depends on where it was asked, a cycle cut or the depth limit reached)
        self.memo: dict[int, tuple[Derivative, frozenset[int]]] = {}
        self.busy: set[int] = set()
        self.reads: list[set[int]] = []     # what each `of` under way has read so far
        # the values of each alloca (a variable of the segment, loop counters among them):
        # a fixed point over its stores, all allocas at once
        self.allocas: dict[int, Derivative] = {id(x): frozenset() for x in addresses.stored}
        for _ in range(8):
            changed = False
            for x, values in addresses.stored.items():
                d = _join([self.of(v) for v in values])
                if d != self.allocas[id(x)]:
                    self.allocas[id(x)], changed = d, True
                    # values computed from the older estimate (or where they were asked)
                    # are computed again; the others would come out the same
                    self.memo = {k: e for k, e in self.memo.items()
                                 if id(x) not in e[1] and _CONTEXT not in e[1]}
            if not changed:
                break
        else:
            self.allocas = dict.fromkeys(self.allocas)      # no fixed point: anything
            self.memo.clear()

    def strided(self, pointer: ir.Value, size: int | None) -> bool:
        d = self.of(pointer)
        if d is None or size is None or d == frozenset():
            return True
        if d == OPAQUE:
            return False
        assert isinstance(d, frozenset)
        return any(2 * size <= abs(c) <= _MAX_GROUP * size for vec in d for _, c in vec)

    def of(self, v: ir.Value, depth: int = 0) -> Derivative:
        if isinstance(v, (ir.Constant, ir.Argument, ir.GlobalValue)):
            return _INVARIANT
        if isinstance(v, ir.LoadInstr) and isinstance(v.operands[0], ir.AllocaInstr):
            if self.reads:
                self.reads[-1].add(id(v.operands[0]))
            return self.allocas.get(id(v.operands[0]), _INVARIANT)
        got = self.memo.get(id(v))
        if got is not None:
            if self.reads:
                self.reads[-1].update(got[1])
            return got[0]
        if id(v) in self.busy or depth > _MAX_DEPTH:
            if self.reads:
                self.reads[-1].add(_CONTEXT)
            return None         # a cycle (a counter of a loop inside the segment): anything
        self.busy.add(id(v))
        self.reads.append(set())
        try:
            d = self._of(v, depth + 1)
        finally:
            self.busy.discard(id(v))
            read = self.reads.pop()
        if self.reads:
            self.reads[-1].update(read)
        if isinstance(v.type, ir.IntType):
            d = _wrapped(d, v.type.width)
        self.memo[id(v)] = (d, frozenset(read))
        return d

    def _of(self, v: ir.Value, depth: int) -> Derivative:
        if not isinstance(v, ir.Instruction):
            return None
        if v in self.loop_phis:
            return frozenset({((id(v), 1),)})
        op, ops = _opcode(v), v.operands
        if isinstance(v, ir.LoadInstr):
            return _INVARIANT if self.of(ops[0], depth) == _INVARIANT else OPAQUE
        if isinstance(v, ir.PhiInstr):
            # the counters of loops around a thread loop (y and z of the block) hold still
            # while it runs; other phis: anything
            return _INVARIANT if v in self.outer_phis else None
        if isinstance(v, ir.AllocaInstr):
            return _INVARIANT
        ds = [self.of(o, depth) for o in ops if not isinstance(o, ir.Block)]
        if all(d == _INVARIANT for d in ds):
            return _INVARIANT
        if isinstance(v, ir.CallInstr):
            return OPAQUE
        if None in ds:
            return None
        if OPAQUE in ds:
            return OPAQUE
        if op in ("add", "sub", "or"):
            return _sum(ds[0], ds[1], -1 if op == "sub" else 1)
        if op in ("zext", "sext", "trunc", "bitcast", "ptrtoint", "inttoptr", "freeze"):
            return ds[0]
        if op in ("mul", "shl", "and", "xor"):
            if ds[0] != _INVARIANT and ds[1] != _INVARIANT:
                return OPAQUE               # a product of two varying values, `t ^ (t >> 1)`
            varying, c = (ds[0], _constant(ops[1])) if ds[1] == _INVARIANT else \
                (ds[1], _constant(ops[0]))
            if op == "mul":
                return _times(varying, c if c is not None else 1)   # (a run-time factor: versioned to 1)
            if op == "shl":
                return _times(varying, 1 << c) if ds[1] == _INVARIANT and c is not None and 0 <= c < 64 \
                    else OPAQUE
            return varying                  # masks keep the step (zext of a narrower recurrence)
        if op in ("udiv", "sdiv", "lshr", "ashr", "urem", "srem"):
            c = _constant(ops[1])      # (evaluated only where needed: it recurses)
            if ds[1] != _INVARIANT or c is None or c <= 0:
                return OPAQUE
            divisor = 1 << c if op in ("lshr", "ashr") and c < 64 else c
            if op in ("urem", "srem"):
                return ds[0] if divisor & (divisor - 1) == 0 else OPAQUE
            return _divided(ds[0], divisor)
        if op == "select":
            if ds[0] != _INVARIANT:
                return OPAQUE
            return _join(ds[1:])
        if op in ("icmp", "fcmp"):
            return OPAQUE
        if isinstance(v, ir.GEPInstr) and len(ops) == 2 and isinstance(ops[0].type, ir.PointerType):
            size = _size(ops[0].type.pointee)
            if size is not None:
                return _sum(ds[0], _times(ds[1], size), 1)
        return None


def _constant(v: ir.Value, depth: int = 0) -> int | None:
    """The integer `v` always is (constants and what LLVM folds of them), else None."""
    if isinstance(v, ir.Constant) and isinstance(v.type, ir.IntType) and isinstance(v.constant, int):
        return v.constant & ((1 << v.type.width) - 1)
    if not isinstance(v, ir.Instruction) or depth > 20 or not isinstance(v.type, ir.IntType) \
            or _opcode(v) not in _FOLDED or not v.operands:
        return None
    ops = [_constant(o, depth + 1) if not isinstance(o, ir.Block) else None for o in v.operands]
    w = v.type.width
    mask = (1 << w) - 1
    if _opcode(v) == "select":
        return None if ops[0] is None else ops[1] if ops[0] else ops[2]
    if any(o is None for o in ops):
        return None
    a = ops[0]
    assert a is not None
    if _opcode(v) in ("zext", "trunc"):
        return a & mask
    if _opcode(v) == "sext":
        return _signed(a, v.operands[0].type.width) & mask
    b = ops[1] if len(ops) > 1 else None
    if b is None:
        return None
    if _opcode(v) == "icmp":
        wa = v.operands[0].type.width
        sa, sb = _signed(a, wa), _signed(b, wa)
        truth = {"eq": a == b, "ne": a != b, "ult": a < b, "ule": a <= b, "ugt": a > b, "uge": a >= b,
                 "slt": sa < sb, "sle": sa <= sb, "sgt": sa > sb, "sge": sa >= sb}.get(getattr(v, "op", ""))
        return None if truth is None else int(truth)
    table = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "and": lambda: a & b,
             "or": lambda: a | b, "xor": lambda: a ^ b, "shl": lambda: a << b if b < w else None,
             "lshr": lambda: a >> b if b < w else None}
    f = table.get(_opcode(v))
    got = f() if f else None
    return None if got is None else got & mask


def _join(ds: list[Derivative]) -> Derivative:
    if any(d is None for d in ds):
        return None
    ds = [d for d in ds if d != frozenset()]       # (a fixed point's first estimate)
    sets = [d for d in ds if isinstance(d, frozenset)]
    if len(sets) < len(ds):
        return OPAQUE if all(d == _INVARIANT for d in sets) else None
    out: frozenset[tuple[tuple[int, int], ...]] = frozenset().union(*sets)
    return out if len(out) <= 16 else None


def _sum(a: Derivative, b: Derivative, sign: int) -> Derivative:
    if not (isinstance(a, frozenset) and isinstance(b, frozenset)):
        return None
    out = set()
    for x in a:
        for y in b:
            coeffs = dict(x)
            for k, c in y:
                coeffs[k] = coeffs.get(k, 0) + sign * c
            out.add(tuple(sorted((k, c) for k, c in coeffs.items() if c)))
    return frozenset(out) if len(out) <= 16 else None


def _times(a: Derivative, f: int) -> Derivative:
    if not isinstance(a, frozenset):
        return a
    return frozenset(tuple((k, c * f) for k, c in x if c * f) for x in a)


def _divided(a: Derivative, f: int) -> Derivative:
    if not isinstance(a, frozenset):
        return a
    if any(c % f for x in a for _, c in x):
        return None
    return frozenset(tuple((k, c // f) for k, c in x) for x in a)


def _wrapped(a: Derivative, width: int) -> Derivative:
    """The steps of an integer of `width` bits, modulo 2^width as signed numbers: nvcc's
    `gt * 37 + gt * -33` (its -33 a 32-bit constant, 4294967263 read unsigned) steps by 4,
    not by 4 + 2^32 (the fuzzer's fz_2807_2107 took such a store as no group member)."""
    if not isinstance(a, frozenset):
        return a
    return frozenset(tuple((k, w) for k, c in x if (w := _signed(c, width))) for x in a)


def _signed(c: int, width: int) -> int:
    c &= (1 << width) - 1
    return c - (1 << width) if c >> (width - 1) else c


def _combine(a: Linear, b: Linear, sign: int) -> Linear:
    terms = dict(a[0])
    for k, c in b[0].items():
        terms[k] = terms.get(k, 0) + sign * c
        if terms[k] == 0:
            del terms[k]
    return terms, a[1] + sign * b[1]


def _scale(a: Linear, f: int) -> Linear:
    if f == 0:
        return {}, 0
    return {k: c * f for k, c in a[0].items()}, a[1] * f


class _Access:
    __slots__ = ("instr", "is_store", "root", "offset", "size", "kind", "scope", "strided")

    def __init__(self, instr: ir.Instruction, root: ir.Value, offset: Linear, size: int | None,
                 kind: str) -> None:
        self.instr = instr
        self.is_store = isinstance(instr, ir.StoreInstr)
        self.root = root
        self.offset = offset
        self.size = size
        self.kind = kind                   # "shared" | "parameter" (through a pointer parameter) | "unknown"
        self.scope = instr.metadata.get("alias.scope") if hasattr(instr, "metadata") else None
        self.strided = True


def _may_alias(a: _Access, b: _Access) -> bool:
    if a.scope is not None and b.scope is not None and a.scope is not b.scope:
        return False            # two shared variables, or two parameters known apart
    if {a.kind, b.kind} == {"shared", "parameter"}:
        return False            # a kernel parameter never points into shared memory
    if a.root is not b.root or a.size is None or b.size is None:
        return True
    if a.offset[0] != b.offset[0]:
        return True
    d = b.offset[1] - a.offset[1]        # b's first byte minus a's (modulo wrap-around)
    return not (a.size <= d < 2**31 or b.size <= -d < 2**31)


def _successors(bb: ir.Block) -> list[ir.Block]:
    term = bb.terminator
    if term is None:
        return []
    if isinstance(term, ir.SwitchInstr):
        return [term.default] + [blk for _, blk in term.cases]
    return [o for o in term.operands if isinstance(o, ir.Block)]


def _iteration_successors(fn: ir.Function) -> tuple[dict[ir.Block, list[ir.Block]], set[ir.Block]]:
    """The function's CFG without the back edges of thread loops (the branches that carry
    `llvm.loop`): a path in it stays within one iteration of every thread loop; and the
    thread loops' headers."""
    succ = {bb: _successors(bb) for bb in fn.blocks}
    headers: set[ir.Block] = set()
    for bb in fn.blocks:
        term = bb.terminator
        if term is None or "llvm.loop" not in getattr(term, "metadata", {}):
            continue
        back = [s for s in succ[bb] if bb in _reachable(succ, s, inclusive=True)]
        headers.update(back)
        succ[bb] = [s for s in succ[bb] if s not in back]
    return succ, headers


def _phis(blocks: Iterable[ir.Block]) -> set[ir.Instruction]:
    return {i for bb in blocks for i in bb.instructions if isinstance(i, ir.PhiInstr)}


def _outer_headers(fn: ir.Function, succ: dict[ir.Block, list[ir.Block]],
                   headers: set[ir.Block]) -> set[ir.Block]:
    """Headers of the loops (without `llvm.loop`) around thread loops: blocks with phis on
    a cycle through a thread loop's header that does not take the thread loop's back edge
    (`succ` is the CFG without those)."""
    reach: dict[ir.Block, set[ir.Block]] = {}

    def reached(bb: ir.Block) -> set[ir.Block]:
        # (computed for the blocks asked about only: for every block, quadratic in a
        # segment's blocks)
        got = reach.get(bb)
        if got is None:
            got = reach[bb] = _reachable(succ, bb)
        return got
    out = set()
    for bb in fn.blocks:
        if bb in headers or not _phis([bb]) or bb not in reached(bb):
            continue
        if any(h in reached(bb) and bb in reached(h) for h in headers):
            out.add(bb)
    return out


def _reachable(succ: dict[ir.Block, list[ir.Block]], start: ir.Block, inclusive: bool = False) -> set[ir.Block]:
    """Blocks reached from `start` by one edge or more (and `start` itself if `inclusive`)."""
    seen: set[ir.Block] = set()
    todo = [start] if inclusive else list(succ.get(start, ()))
    while todo:
        bb = todo.pop()
        if bb not in seen:
            seen.add(bb)
            todo.extend(succ.get(bb, ()))
    return seen


def same_thread_dependences(fn: ir.Function, candidates: Iterable[ir.Instruction],
                            shared_root: ir.Value, parameter_area: ir.Value,
                            own_areas: Iterable[ir.Value]) -> set[ir.Instruction]:
    """The loads and stores among `candidates` (the accesses that would join the access
    group) that take part in a dependence within one iteration of a thread loop of `fn`: a
    store, and a later access of the same thread that may reach its bytes.  Accesses based
    on `own_areas` (the segment's scratch arguments: parameters, thread states, kept values,
    exchange buffers; distinct memory that no kernel pointer reaches) are left alone.  The
    local area is among them: a thread's local memory, and generic accesses that may reach
    it, stay out of the group where any of them stores (SegmentValues.tag_parallel_accesses'
    private accesses), before this check."""
    own = {id(a) for a in own_areas}
    addresses = _Addresses(fn)
    accesses: dict[ir.Instruction, _Access] = {}
    for instr in candidates:
        if isinstance(instr, ir.LoadInstr):
            ptr, size = instr.operands[0], _size(instr.type)
        elif isinstance(instr, ir.StoreInstr):
            ptr, size = instr.operands[1], _size(instr.operands[0].type)
        else:
            continue
        root, offset = addresses.pointer(ptr)
        if id(root) in own and root is not shared_root:
            continue
        if root is shared_root:
            kind = "shared"
        elif isinstance(root, ir.LoadInstr) and addresses.pointer(root.operands[0])[0] is parameter_area:
            kind = "parameter"
        else:
            kind = "unknown"
        accesses[instr] = _Access(instr, root, offset, size, kind)
    if not any(a.is_store for a in accesses.values()):
        return set()
    succ, headers = _iteration_successors(fn)
    strides = _Strides(addresses, _phis(headers), _phis(_outer_headers(fn, succ, headers)))
    for a in accesses.values():
        a.strided = strides.strided(a.instr.operands[0 if isinstance(a.instr, ir.LoadInstr) else 1], a.size)
    by_block: dict[ir.Block, list[_Access]] = {}
    for bb in fn.blocks:
        by_block[bb] = [accesses[i] for i in bb.instructions if i in accesses]
    found: set[ir.Instruction] = set()
    for bb, in_block in by_block.items():
        stores = [k for k, a in enumerate(in_block) if a.is_store]
        if not stores:
            continue
        later_blocks = _reachable(succ, bb)
        again = bb in later_blocks             # an inner loop comes back to this block
        after = [a for blk in later_blocks if blk is not bb for a in by_block.get(blk, ())]
        for k in stores:
            s = in_block[k]
            sinks = (in_block if again else in_block[k + 1:]) + after
            for other in sinks:
                # only an access with a constant stride moves (to the first load or the
                # last store of its interleaved group)
                if (other is not s or again) and (s.strided or other.strided) and _may_alias(s, other):
                    found.update((s.instr, other.instr))
    return found
