"""Shared-memory tiles read in place: a block whose `__shared__` tile only stages global data
reads that data where it lies, when a check at the block's start shows that nothing the
block writes can change it.

    left[ty][tx] = a[(row0 + ty) * n + offset + tx];    // each thread copies one element
    top[ty][tx] = a[(offset + ty) * n + col0 + tx];
    __syncthreads();
    for (k = 0; k < 16; k++) sum += left[ty][k] * top[k][tx];     // (unrolled by nvcc)
    a[(row0 + ty) * n + col0 + tx] -= sum;

On a GPU the tile saves global-memory traffic; on a CPU the global data is in the caches
anyway and the copy is pure cost: each element is stored once more, and those stores
(32 vector stores per 16 x 16 block of the example, with nothing else to hide them) cost
about as much as the rest of the block (lu_tile: 12.7 ms with the copies, 9.3 ms for its
OpenMP twin, which reads the panels in place).  Thread t's load of `left[ty][k]` reads
what thread w(t) = (k, ty) stored there: `a[g(w(t))]`, the global element w(t) loaded.
When no store of the block writes any element the staging loads read, that element still
holds the value loaded, so t may load `a[g(w(t))]` itself and the tile's stores go.

The pass makes two versions of the block body: `upir.if %in_place` with the body reading
the tiles in place (their stores and the loads feeding them gone; the barrier stays for
barrier-elimination to judge), and the body as it was.  `%in_place` is computed at the
block's start from the addresses of the staging loads and of every global store, each
affine in the thread index (their values at threads (0,0,0), (1,0,0), (0,1,0), (0,0,1) give
base and coefficients): for each pair, their byte ranges over the block are disjoint, or
(2-D blocks) both are rows of the same pitch p whose column ranges never meet modulo p
(the left panel beside the tile being updated, in the rows being updated).  Other blocks'
stores do not count: a block reading what another writes without synchronization is a
data race on a GPU too.  The loads that read in place carry `in_place` (the tile's
variable): code generation tells LLVM that no store of the kernel writes what they read
(an alias scope), which is what the check established, so it can keep them in registers
across the stores (the example's top tile: 16 vectors loaded once per block).

When: code specialized for a block shape (`block_dims`, to invert the tile's store map),
a block body whose blocks run one after the other with exactly one `bar.sync` among their
ops (no loops, no barriers or returns inside the `upir.if`s it may hold), no atomics,
fences, volatile, vector, generic-space or warp-synchronous memory accesses; a tile stored
once, before the barrier, by one plain global load's value, each thread its own element;
loads of it only after the barrier (under an if too), each reading an element some thread
stored, the storing thread an affine function of the reading one (checked for every thread
of the block).  Addresses are affine in the thread index with block-uniform coefficients
(`(row0 + ty) * n`), computed by pure arithmetic; 32-bit index arithmetic is taken not to
wrap, as everywhere in cpuify.

Bound guards (transforms/tiles_guarded.py): a tile may be staged under a `upir.if` whose
condition is a conjunction of comparisons affine in the thread index (`if (row < n && col <
n) t[ty][tx] = a[..]; else t[ty][tx] = 0;`, the no-else form, the negated one, and `v =
guard ? a[..] : c; t[ty][tx] = v`); the check then also asks that the guard holds at the
block's corners, hence for all its threads (the set where it holds is convex), and blocks at
the edge run the body as it was.  The in-place version's own bound guards on work (`if (row
< n && col < n) a[..] -= sum;`, one arm empty) are dropped in a copy of it that blocks where
they hold at every corner run.  Tiles loaded inside a loop (matmul's) are
left alone: read in place they would be read again for every row of threads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

from cpuify.analysis.manager import AnalysisManager
from cpuify.analysis.pointers import memory_space, shared_variables
from cpuify.ir.core import Block, OpResult, Operation, Region, Value, replace_all_uses
from cpuify.ir.dialects import memory_effects
from cpuify.ir.modifiers import ORDERED, mods, ty, type_size
from cpuify.ir.structure import block_body
from cpuify.transforms.pass_manager import register
from cpuify.transforms.tiles_guarded import (body_chain, clone_blocks, convex_guard, corners, defined_in,
                                             incoming, nested_in, remove_op, splice_before, unguarded_inside,
                                             yielded)

#: the attribute on a load that reads a tile's element in place (value: the variable)
IN_PLACE = "in_place"
_TID = {"%tid.x": 0, "%tid.y": 1, "%tid.z": 2}
#: accesses the pass leaves alone: ordered (volatile, acquire, ...) or vector ones
_NOT_PLAIN = frozenset(ORDERED) | {"v2", "v4", "v8"}
#: integer ops an address may be built from, thread index entering linearly
_LINEAR = {"ptx.add", "ptx.sub", "ptx.mul", "ptx.mad", "ptx.shl", "ptx.mov", "ptx.cvt",
           "ptx.cvta"}
_DEPTH = 40
#: ops the pass does not take inside an `upir.if` of the body
_NOT_NESTED = {"upir.barrier", "upir.exit", "upir.condition", "upir.spin_wait", "upir.warp_collective",
               "upir.warp_matrix"}


@register("tiles-in-place", "loads of `__shared__` tiles that only stage global data made "
                            "loads of that data where it lies (the tiles' stores gone), in a "
                            "version of the block body a per-block check picks when no store "
                            "of the block writes it")
@dataclass(frozen=True)
class TilesInPlace:
    """Pass: version the block body on a check; the first version reads tiles in place."""
    name: str = "tiles-in-place"
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        dims = kernel.attributes.get("block_dims")
        if not dims:
            return 0
        return tiles_in_place(block_body(kernel), tuple(int(d) for d in dims))  # type: ignore[arg-type]


def _tid_dim(v: Value) -> int | None:
    if isinstance(v, OpResult) and v.op.name == "upir.special":
        return _TID.get(v.op.attributes.get("reg", ""))
    return None


def _depends_on_tid(v: Value, memo: dict[Value, bool], depth: int = 0) -> bool:
    if v in memo:
        return memo[v]
    if _tid_dim(v) is not None:
        out = True
    elif not isinstance(v, OpResult) or depth > _DEPTH:
        out = True                          # unknown: treated as thread-dependent
    else:
        out = any(_depends_on_tid(o, memo, depth + 1) for o in v.op.operands)
    memo[v] = out
    return out


def _pure(op: Operation) -> bool:
    return not op.regions and len(op.results) == 1 and not memory_effects(op) and \
        not op.name.startswith(("upir.barrier", "upir.warp"))


def _linear_address(v: Value, memo: dict[Value, bool], depth: int = 0) -> bool:
    """Whether v is computed by pure ops from block-uniform values and the thread index,
    the thread index entering linearly (sums, products with one thread-independent factor,
    shifts by thread-independent amounts, widenings)."""
    if _tid_dim(v) is not None:
        return True
    if not isinstance(v, OpResult) or depth > _DEPTH or not _pure(v.op):
        return False
    op = v.op
    if not _depends_on_tid(v, memo):
        return all(_linear_address(o, memo, depth + 1) for o in op.operands)
    m = mods(op)
    if op.name not in _LINEAR or "hi" in m or "cc" in m or \
            op.name == "ptx.cvt" and not all(t[:1] in "sub" for t in m if t[1:].isdigit()):
        return False                        # (high halves, carries, float conversions)
    deps = [_depends_on_tid(o, memo) for o in op.operands]
    if op.name in ("ptx.mul", "ptx.mad") and deps[0] and deps[1]:
        return False                        # a product of two thread-dependent factors
    if op.name == "ptx.shl" and not (isinstance(op.operands[1], OpResult) and
                                     op.operands[1].op.name == "upir.const"):
        return False                        # (a shift by a block-uniform amount: not handled)
    return all(_linear_address(o, memo, depth + 1) for o in op.operands)


def _shared_offset(v: Value, tid: tuple[int, int, int], symbol: str, depth: int = 0) -> int | None:
    """The byte offset into `symbol` of shared address v at thread index `tid`; None when v
    is not computed from the thread index, constants and the variable's address."""
    if depth > _DEPTH or not isinstance(v, OpResult):
        return None
    op = v.op
    d = _tid_dim(v)
    if d is not None:
        return tid[d]
    if op.name == "upir.const":
        val = op.attributes.get("value")
        return val if isinstance(val, int) else None
    if op.name == "upir.addressof":
        return 0 if op.attributes.get("symbol") == symbol else None
    args = [_shared_offset(o, tid, symbol, depth + 1) for o in op.operands]
    if any(a is None for a in args):
        return None
    a = [int(x) for x in args]  # type: ignore[arg-type]
    m = mods(op)
    if op.name in ("ptx.mov", "ptx.cvt", "ptx.cvta") and len(a) == 1:
        return a[0]
    if op.name == "ptx.add" and len(a) == 2:
        return a[0] + a[1]
    if op.name == "ptx.sub" and len(a) == 2:
        return a[0] - a[1]
    if op.name == "ptx.mul" and len(a) == 2 and "hi" not in m:
        return a[0] * a[1]
    if op.name == "ptx.mad" and len(a) == 3 and "hi" not in m:
        return a[0] * a[1] + a[2]
    if op.name == "ptx.shl" and len(a) == 2 and 0 <= a[1] < 32:
        return a[0] << a[1]
    return None


def _shared_symbol(v: Value) -> str | None:
    """The one `__shared__` variable whose address the pure arithmetic computing v starts
    from (an address computed in an arm of an `upir.if`, which shared_variables leaves out)."""
    symbols: set[str] = set()
    work, seen = [v], set()
    while work and len(seen) < 200:
        x = work.pop()
        if x in seen:
            continue
        seen.add(x)
        if not isinstance(x, OpResult) or not _pure(x.op) and x.op.name != "upir.addressof":
            return None
        if x.op.name == "upir.addressof":
            if x.op.attributes.get("space") != "shared":
                return None
            symbols.add(str(x.op.attributes.get("symbol")))
        work.extend(x.op.operands)
    return symbols.pop() if len(symbols) == 1 and not work else None


def _threads(dims: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    return [(x, y, z) for z in range(dims[2]) for y in range(dims[1]) for x in range(dims[0])]


@dataclass
class _Tile:
    symbol: str
    store: Operation                        # st.shared tile[f(t)] = staging
    staging: Operation                      # ld.global: the value each thread stores
    loads: dict[Operation, tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]]
    # each load -> the storing thread as alpha + beta . t (alpha[d], beta[d][e])
    guard: Operation | None = None          # the `upir.if` the tile is staged under
    staged_if: bool = True                  # which side of it stages (the other: a constant)
    yielded: bool = False                   # the `upir.if` yields the value, stored after it


@dataclass
class _Body:
    """The block body as the pass sees it: its blocks run in order, the ops they hold (the
    branches between them left out), where the barrier is, and each op's top-level op."""
    chain: list[Block]
    ops: list[Operation]
    at_barrier: int
    top: dict[Operation, Operation]


def _body(chain: list[Block]) -> _Body | None:
    ops = [op for b in chain for op in b.ops[:-1]]
    if any(op.successors for op in ops):
        return None
    top: dict[Operation, Operation] = {}
    for op in ops:
        for inner in op.walk():
            top[inner] = op
            if inner is not op and (inner.name in _NOT_NESTED or inner.successors and inner.name != "cf.br"
                                    or inner.regions and inner.name != "upir.if"):
                return None                 # loops, barriers, returns, branches out
        if op.regions and op.name != "upir.if":
            return None
    barriers = [i for i, op in enumerate(ops) if op.name == "upir.barrier"]
    if len(barriers) != 1 or ops[barriers[0]].operands or mods(ops[barriers[0]]) not in (["sync"], []):
        return None
    return _Body(chain, ops, barriers[0], top)


def _find_tiles(body: _Body, dims: tuple[int, int, int]) -> tuple[list[_Tile], list[Operation]] | None:
    """The tiles that may be read in place, and the block's global stores; None when the
    body is not of the shape the pass handles."""
    region = body.chain[0].parent
    assert region is not None
    top_level = shared_variables(region)

    def var_of(address: Value) -> str | None:
        return top_level.get(address) or _shared_symbol(address)

    by_var: dict[str, list[Operation]] = {}
    global_stores: list[Operation] = []
    for op in (inner for top in body.ops for inner in top.walk()):
        effects = memory_effects(op)
        if op.name == "upir.barrier" or op.regions or not any(s in ("shared", "global") for _, s in effects):
            continue
        if op.name not in ("ptx.ld", "ptx.st") or set(mods(op)) & _NOT_PLAIN:
            return None                     # atomics, fences, ordered or vector accesses
        space = memory_space(op)
        if space == "shared":
            var = var_of(op.operands[0])
            if var is None:
                return None
            by_var.setdefault(var, []).append(op)
        elif space == "global":
            if op.name == "ptx.st":
                global_stores.append(op)
        else:
            return None                     # generic: may be either
    memo: dict[Value, bool] = {}
    for st in global_stores:
        if not _linear_address(st.operands[0], memo):
            return None                     # a store whose addresses the check cannot bound
    tiles = []
    threads = _threads(dims)
    for var, accesses in by_var.items():
        tile = _tile(var, accesses, body, dims, threads, memo)
        if tile is not None:
            tiles.append(tile)
    # a guarded staging goes with its whole `upir.if`: only when all it stages is read in
    # place and its guard holds on a convex set of threads (checked at the block's corners)
    tile_vars = {t.symbol for t in tiles}
    for guard in {t.guard for t in tiles if t.guard is not None}:
        # (an if that yields the staged value stays, its value unused; one that stores it goes)
        stores = [op for op in guard.walk() if op.name == "ptx.st"]
        dropped = any(not t.yielded for t in tiles if t.guard is guard)
        effects = dropped and any(not (_pure(op) or op.name in ("ptx.ld", "ptx.st", "upir.yield", "cf.br"))
                                  for op in guard.walk() if op is not guard)
        sides = {t.staged_if for t in tiles if t.guard is guard}
        if effects or any(memory_space(op) != "shared" or var_of(op.operands[0]) not in tile_vars for op in stores) \
                or len(sides) != 1 or not convex_guard(guard.operands[0], sides.pop(),
                                                       lambda v: _linear_address(v, memo),
                                                       lambda v: _depends_on_tid(v, memo)):
            tiles = [t for t in tiles if t.guard is not guard]
    return tiles, global_stores


def _staging_store(stores: list[Operation], body: _Body
                   ) -> tuple[Operation, Operation, Operation | None, bool, bool] | None:
    """The store of a tile's staged value, its global load, the `upir.if` it is under (None:
    unguarded), on which side, and whether the if yields it (stored after the if): one
    top-level store of a global load or of what an if yields (`v = guard ? a[i] : c`); or
    the stores of one `upir.if` directly in its arms, at most one per arm, one of them
    storing a global load of its own arm."""
    if len(stores) == 1 and stores[0].parent in body.chain:
        store = stores[0]
        if _staged(store):
            return store, store.operands[1].op, None, True, False  # type: ignore[attr-defined]
        value = incoming(store.operands[1], body.chain)
        guard = value.op if isinstance(value, OpResult) else None
        if guard is None or guard.name != "upir.if" or body.top.get(guard) is not guard:
            return None
        for arm in (0, 1):
            load = yielded(guard, arm, value.index)  # type: ignore[attr-defined]
            if isinstance(load, OpResult) and _plain_global_load(load.op) and \
                    load.op.parent in guard.regions[arm].blocks:
                return store, load.op, guard, arm == 0, True
        return None
    guard = body.top.get(stores[0])
    if guard is None or guard.name != "upir.if" or guard.results or len(stores) > 2:
        return None
    arms = []
    for st in stores:
        block = st.parent
        region = block.parent if block is not None else None
        if region is None or region.parent is not guard or body.top.get(st) is not guard:
            return None
        arms.append(guard.regions.index(region))
    if len(set(arms)) != len(arms):
        return None                         # a tile written twice on one path
    loaded = [(st, arm) for st, arm in zip(stores, arms) if _staged(st)]
    if len(loaded) != 1:
        return None
    store = loaded[0][0]
    return store, store.operands[1].op, guard, loaded[0][1] == 0, False  # type: ignore[attr-defined]


def _plain_global_load(op: Operation) -> bool:
    return op.name == "ptx.ld" and memory_space(op) == "global" and not set(mods(op)) & _NOT_PLAIN


def _staged(store: Operation) -> bool:
    value = store.operands[1]
    return isinstance(value, OpResult) and _plain_global_load(value.op) and value.op.parent is store.parent


def _tile(var: str, accesses: list[Operation], body: _Body, dims: tuple[int, int, int],
          threads: list[tuple[int, int, int]], memo: dict[Value, bool]) -> _Tile | None:
    stores = [op for op in accesses if op.name == "ptx.st"]
    loads = [op for op in accesses if op.name == "ptx.ld"]
    if not stores or not loads:
        return None
    found = _staging_store(stores, body)
    if found is None:
        return None
    store, staging, guard, staged_if, through_if = found
    position = {op: i for i, op in enumerate(body.ops)}
    if position[body.top[store]] > body.at_barrier or \
            any(position[body.top[ld]] < body.at_barrier for ld in loads):
        return None
    size = type_size(ty(store))
    if type_size(ty(staging)) != size or not _linear_address(staging.operands[0], memo) or \
            any(type_size(ty(st)) != size or st.operands[0] is not store.operands[0] or
                st.attributes.get("offset", 0) != store.attributes.get("offset", 0) for st in stores):
        return None
    # the store map, inverted over the block: byte offset -> storing thread
    writer: dict[int, tuple[int, int, int]] = {}
    base = int(store.attributes.get("offset", 0))
    for t in threads:
        o = _shared_offset(store.operands[0], t, var)
        if o is None:
            return None
        writer[o + base] = t
    if len(writer) != len(threads) or any(
            abs(a - b) < size for a, b in zip(sorted(writer), sorted(writer)[1:])):
        return None                         # two threads store overlapping elements
    maps = {}
    for ld in loads:
        if type_size(ty(ld)) != size or ld.results[0].type != staging.results[0].type:
            return None
        fit = _writer_map(ld, var, writer, dims, threads)
        if fit is None:
            return None
        maps[ld] = fit
    return _Tile(var, store, staging, maps, guard, staged_if, through_if)


def _writer_map(ld: Operation, var: str, writer: dict[int, tuple[int, int, int]],
                dims: tuple[int, int, int], threads: list[tuple[int, int, int]]
                ) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]] | None:
    """The thread that stored what `ld` reads, as alpha + beta . t for every reading thread t
    (checked for each); None when some thread reads an element nobody stored or the map is
    not affine."""
    base = int(ld.attributes.get("offset", 0))

    def who(t: tuple[int, int, int]) -> tuple[int, int, int] | None:
        o = _shared_offset(ld.operands[0], t, var)
        return None if o is None else writer.get(o + base)

    origin = who((0, 0, 0))
    if origin is None:
        return None
    beta = []
    for e in range(3):
        unit = tuple(1 if i == e else 0 for i in range(3))
        w = who(unit) if dims[e] > 1 else origin  # type: ignore[arg-type]
        if w is None:
            return None
        beta.append(tuple(w[d] - origin[d] for d in range(3)))
    for t in threads:
        expect = tuple(origin[d] + sum(beta[e][d] * t[e] for e in range(3)) for d in range(3))
        if who(t) != expect:
            return None
    return origin, tuple(tuple(beta[e][d] for e in range(3)) for d in range(3))


class _Emitter:
    """Appends new ops to a block; constants made once."""

    def __init__(self, block: Block, line: int) -> None:
        self.block = block
        self.line = line
        self.consts: dict[tuple[int, str], Value] = {}
        self.tids: dict[int, Value] = {}       # thread indices read by what it emitted

    def op(self, name: str, operands: list[Value], rtype: str, m: list[str]) -> Value:
        op = Operation(name, operands, [rtype], {"mods": m, "line": self.line})
        return self.block.append(op).results[0]

    def const(self, value: int, rtype: str) -> Value:
        key = (value, rtype)
        if key not in self.consts:
            op = Operation("upir.const", [], [rtype], {"value": value})
            self.consts[key] = self.block.append(op).results[0]
        return self.consts[key]


def _clone(v: Value, lookup: Callable[[Value], Value | None], emit: _Emitter,
           cache: dict[Value, Value]) -> Value:
    """v recomputed into emit's block: each operand through `lookup` first (a substitute,
    or None to clone its op too)."""
    got = lookup(v)
    if got is not None:
        return got
    if v in cache:
        return cache[v]
    assert isinstance(v, OpResult) and _pure(v.op)
    op = v.op
    new = Operation(op.name, [_clone(o, lookup, emit, cache) for o in op.operands],
                    [r.type for r in op.results], dict(op.attributes))
    emit.block.append(new)
    cache[v] = new.results[0]
    return cache[v]


class _Check:
    """The per-block check, built in its own block: each access's address at thread
    (0, 0, 0) and its growth per unit of each thread index (_coefficient), computed from
    copies of the thread-independent values it uses (the body moves into the `upir.if`)."""

    def __init__(self, emit: _Emitter, dims: tuple[int, int, int]) -> None:
        self.emit = emit
        self.dims = dims
        self.cache: dict[Value, Value] = {}
        self.memo: dict[Value, bool] = {}
        self.zero_tid = emit.const(0, "i32")
        self.extents: dict[Operation, tuple[Value, list[int | Value], Value, Value]] = {}

    def value(self, v: Value) -> Value:
        return _clone(v, lambda x: self.zero_tid if _tid_dim(x) is not None else None,
                      self.emit, self.cache)

    def at_thread(self, v: Value, tid: tuple[int, int, int]) -> Value:
        """Thread `tid`'s value of the (pure) v, computed at the block's start."""
        def lookup(x: Value) -> Value | None:
            d = _tid_dim(x)
            if d is not None:
                return self.emit.const(tid[d], "i32")
            return self.value(x) if not _depends_on_tid(x, self.memo) else None

        return _clone(v, lookup, self.emit, {})

    def extent(self, op: Operation) -> tuple[Value, list[int | Value], Value, Value]:
        """(address at thread 0, [growth per unit of each thread index], low, high): the
        addresses `op` accesses in the block's threads lie in [low, high)."""
        if op in self.extents:
            return self.extents[op]
        emit = self.emit
        base = self.value(op.operands[0])
        if base.type != "i64":
            base = emit.op("ptx.cvt", [base], "i64", ["s64", "s32"])
        offset = int(op.attributes.get("offset", 0))
        if offset:
            base = emit.op("ptx.add", [base, emit.const(offset, "i64")], "i64", ["s64"])
        coef: list[int | Value] = []
        low, high = base, base
        for d in range(3):
            c = _coefficient(op.operands[0], d, self.value, emit, self.memo) if self.dims[d] > 1 else 0
            coef.append(c)
            if isinstance(c, int):
                span = c * (self.dims[d] - 1)
                low = _plus(low, min(span, 0), emit)  # type: ignore[assignment]
                high = _plus(high, max(span, 0), emit)  # type: ignore[assignment]
                continue
            span = emit.op("ptx.mul", [c, emit.const(self.dims[d] - 1, "i64")], "i64", ["lo", "s64"])
            zero = emit.const(0, "i64")
            low = emit.op("ptx.add", [low, emit.op("ptx.min", [span, zero], "i64", ["s64"])], "i64", ["s64"])
            high = emit.op("ptx.add", [high, emit.op("ptx.max", [span, zero], "i64", ["s64"])], "i64", ["s64"])
        high = _plus(high, type_size(ty(op)), emit)  # type: ignore[assignment]
        self.extents[op] = (base, coef, low, high)
        return self.extents[op]

    def disjoint(self, read: Operation, write: Operation) -> Value:
        """A predicate: no address `read` accesses in any thread of the block is one `write`
        accesses in any thread."""
        emit = self.emit
        r0, rc, rlo, rhi = self.extent(read)
        w0, wc, wlo, whi = self.extent(write)

        def setp(cmp: str, a: int | Value, b: int | Value) -> Value:
            x = emit.const(a, "i64") if isinstance(a, int) else a
            y = emit.const(b, "i64") if isinstance(b, int) else b
            return emit.op("ptx.setp", [x, y], "i1", [cmp, "s64"])

        def both(*preds: Value) -> Value:
            out = preds[0]
            for q in preds[1:]:
                out = emit.op("ptx.and", [out, q], "i1", ["pred"])
            return out

        apart = emit.op("ptx.or", [setp("le", rhi, wlo), setp("le", whi, rlo)], "i1", ["pred"])
        if self.dims[1] == 1 or self.dims[2] != 1 or isinstance(rc[1], int) or isinstance(wc[1], int):
            return apart
        # rows of one pitch p (the y growth) within one pitch of each other: element (x, y)
        # at base + p*y + c*x; with d = w0 - r0 in (-p, p) and r = d mod p, a read row and a
        # write row never meet when r leaves room for the read row's extent before the
        # write row and the write row's before the next read row (the left panel beside the
        # tile being updated, in the rows being updated)
        p = rc[1]
        ext_r = _plus(_times(rc[0], self.dims[0] - 1, emit), type_size(ty(read)), emit)
        ext_w = _plus(_times(wc[0], self.dims[0] - 1, emit), type_size(ty(write)), emit)
        d = emit.op("ptx.sub", [w0, r0], "i64", ["s64"])
        negative = setp("lt", d, 0)
        r = emit.op("ptx.selp", [emit.op("ptx.add", [d, p], "i64", ["s64"]), d, negative], "i64", ["s64"])
        neg_p = emit.op("ptx.neg", [p], "i64", ["s64"])
        rows = both(setp("eq", p, wc[1]), setp("gt", d, neg_p), setp("lt", d, p),
                    setp("ge", rc[0], 0), setp("ge", wc[0], 0),
                    setp("le", ext_r, p), setp("le", ext_w, p),
                    setp("ge", r, ext_r), setp("le", _plus(r, ext_w, emit), p))
        return emit.op("ptx.or", [apart, rows], "i1", ["pred"])


def tiles_in_place(region: Region, dims: tuple[int, int, int]) -> int:
    """Version the body `region` (blocks run in order) on a per-block check (module doc); the
    number of shared loads that read in place in the first version (0: unchanged)."""
    chain = body_chain(region)
    body = _body(chain) if chain is not None else None
    found = _find_tiles(body, dims) if body is not None else None
    if not found or not found[0]:
        return 0
    assert body is not None
    tiles, global_stores = found
    exit_op = body.chain[-1].ops[-1]
    line = int(exit_op.attributes.get("line", 0))
    # the check, at the block's start
    check = Block()
    emit = _Emitter(check, line)
    checker = _Check(emit, dims)
    preds = [checker.disjoint(tile.staging, st) for tile in tiles for st in global_stores]
    guards = {t.guard: t.staged_if for t in tiles if t.guard is not None}
    for guard, side in guards.items():
        for corner in corners(dims):
            held = checker.at_thread(guard.operands[0], corner)
            preds.append(held if side else emit.op("ptx.not", [held], "i1", ["pred"]))
    ok = preds[0] if preds else emit.op(
        "ptx.setp", [emit.const(0, "i32"), emit.const(0, "i32")], "i1", ["eq", "s32"])
    for q in preds[1:]:
        ok = emit.op("ptx.and", [ok, q], "i1", ["pred"])
    # the version that reads the tiles in place: a copy of the body, rewritten
    mapped: dict[Value, Value] = {}
    copied: dict[Operation, Operation] = {}
    fast = clone_blocks(body.chain, mapped, copied)
    nested = nested_in(body.ops)
    count = 0
    made: dict[Block, tuple[dict[int, Value], dict[tuple[int, str], Value]]] = {}
    for tile, ld in sorted(((t, ld) for t in tiles for ld in t.loads), key=lambda x: _order(x[1], body)):
        twin = copied[ld]
        staging = Block()
        femit = _Emitter(staging, line)
        assert twin.parent is not None
        femit.tids, femit.consts = made.setdefault(twin.parent, ({}, {}))  # (earlier in the block)
        value = _read_in_place(ld, tile, mapped, nested, femit)
        splice_before(twin, staging.ops)
        replace_all_uses(twin.results[0], value)
        remove_op(twin)
        count += 1
    for tile in tiles:
        if tile.guard is not None and not tile.yielded:
            if copied[tile.guard].parent is not None:
                remove_op(copied[tile.guard])
            continue
        remove_op(copied[tile.store])
        if tile.guard is None and tile.staging.results[0].uses == [tile.store]:
            remove_op(copied[tile.staging])
    _end_with_yield(fast[-1], line)
    memo: dict[Value, bool] = {}
    fast = unguarded_inside(fast, dims, line, lambda v, positive: convex_guard(
        v, positive, lambda x: _linear_address(x, memo), lambda x: _depends_on_tid(x, memo)),
        checker.at_thread, emit.op)
    # the body as it was
    slow = list(body.chain)
    _end_with_yield(slow[-1], line)
    region.blocks = []
    block = region.add_block(Block())
    for op in check.ops:
        block.append(op)
    block.append(Operation("upir.if", [ok], [], {"line": line, IN_PLACE: sorted(t.symbol for t in tiles)},
                           regions=[Region(fast), Region(slow)]))
    block.append(exit_op)
    return count


def _order(ld: Operation, body: _Body) -> tuple[int, int]:
    top = body.top[ld]
    return body.ops.index(top), [op for op in top.walk()].index(ld)


def _end_with_yield(block: Block, line: int) -> None:
    """The last block of a body copy ends in `upir.yield` (its `upir.exit` is the kernel's)."""
    last = block.ops.pop()
    last.drop_uses()
    last.parent = None
    block.append(Operation("upir.yield", [], [], {"line": line}))


def _read_in_place(ld: Operation, tile: _Tile, mapped: dict[Value, Value], nested: set[Operation],
                   emit: _Emitter) -> Value:
    """The global load reading, for each thread t, what thread w(t) stored at `ld`'s element:
    the staging load's address g computed for the thread part of w(t) (beta . t), plus the
    constant part alpha times g's coefficients, a constant byte offset where they are
    constants (`left[ty][k]`: g(k, ty) = g(0, ty) + 4k, an immediate offset LLVM folds into
    the load), else block-uniform arithmetic (`top[k][tx]`: g(tx, 0) + k * 4n).  `mapped`:
    the body's values -> the copy's; thread-independent values computed under a staging
    guard (`nested`, gone from the copy) are computed again."""
    alpha, beta = tile.loads[ld]
    tids = emit.tids

    def tid(e: int) -> Value:
        if e not in tids:
            op = Operation("upir.special", [], ["i32"], {"reg": ("%tid.x", "%tid.y", "%tid.z")[e]})
            tids[e] = emit.block.append(op).results[0]
        return tids[e]

    # w(t) for the writer's coordinates that follow the thread index (alpha included: with
    # a widening of an unsigned index, `(b * 64 + (63 - t)) * 4` must not become
    # `(b * 64 - t) * 4 + 252`); those that are constants, 0 (a thread of the block too),
    # their alpha added below as alpha times the address's growth along them
    constant = [not any(beta[d]) for d in range(3)]
    writer: dict[int, Value] = {}
    for d in range(3):
        acc: Value | None = None if constant[d] or not alpha[d] else emit.const(alpha[d], "i32")
        for e in range(3):
            if beta[d][e]:
                term = tid(e) if beta[d][e] == 1 else emit.op(
                    "ptx.mul", [tid(e), emit.const(beta[d][e], "i32")], "i32", ["lo", "s32"])
                acc = term if acc is None else emit.op("ptx.add", [acc, term], "i32", ["s32"])
        writer[d] = acc if acc is not None else emit.const(0, "i32")
    memo: dict[Value, bool] = {}

    def lookup(v: Value) -> Value | None:
        d = _tid_dim(v)
        if d is not None:
            return writer[d]
        if not _depends_on_tid(v, memo) and not defined_in(v, nested):
            return mapped.get(v, v)
        return None

    cache: dict[Value, Value] = {}
    address = _clone(tile.staging.operands[0], lookup, emit, cache)
    if address.type != "i64":
        address = emit.op("ptx.cvt", [address], "i64", ["s64", "s32"])
    offset = int(tile.staging.attributes.get("offset", 0))
    for d in range(3):
        if constant[d] and alpha[d]:
            c = _coefficient(tile.staging.operands[0], d, lambda v: _clone(v, lookup, emit, cache), emit, memo)
            if isinstance(c, int):
                offset += alpha[d] * c
            else:
                step = emit.op("ptx.mul", [c, emit.const(alpha[d], "i64")], "i64", ["lo", "s64"])
                address = emit.op("ptx.add", [address, step], "i64", ["s64"])
    attributes = dict(tile.staging.attributes)
    attributes["line"] = ld.attributes.get("line", attributes.get("line", 0))
    attributes["offset"] = offset
    attributes[IN_PLACE] = tile.symbol
    new = Operation("ptx.ld", [address], [ld.results[0].type], attributes)
    return emit.block.append(new).results[0]


def _coefficient(v: Value, d: int, value_of: Callable[[Value], Value], emit: _Emitter,
                 memo: dict[Value, bool], depth: int = 0) -> int | Value:
    """How much the (linear, _linear_address) address v grows per unit of thread index d:
    a constant where it is one, else a 64-bit value computed in emit's block from the
    thread-independent factors (`value_of` gives each as emit's block sees it)."""
    if not _depends_on_tid(v, memo):
        return 0
    k = _tid_dim(v)
    if k is not None:
        return 1 if k == d else 0
    assert isinstance(v, OpResult) and depth <= _DEPTH
    op = v.op
    a = op.operands

    def coef(x: Value) -> int | Value:
        return _coefficient(x, d, value_of, emit, memo, depth + 1)

    if op.name in ("ptx.mov", "ptx.cvt", "ptx.cvta"):
        return coef(a[0])
    if op.name in ("ptx.add", "ptx.sub"):
        right = coef(a[1])
        if op.name == "ptx.sub":
            right = _times(right, -1, emit)
        return _plus(coef(a[0]), right, emit)
    if op.name == "ptx.shl":
        shift = _uniform(a[1], op, value_of, emit)
        assert isinstance(shift, int)
        return _times(coef(a[0]), 1 << shift, emit)
    assert op.name in ("ptx.mul", "ptx.mad")
    if _depends_on_tid(a[0], memo):
        product = _times(coef(a[0]), _uniform(a[1], op, value_of, emit), emit)
    else:
        product = _times(_uniform(a[0], op, value_of, emit), coef(a[1]), emit)
    return _plus(product, coef(a[2]), emit) if op.name == "ptx.mad" else product


def _uniform(v: Value, op: Operation, value_of: Callable[[Value], Value], emit: _Emitter) -> int | Value:
    """A thread-independent factor of `op` as a constant or a 64-bit value (extended as
    `op`'s type says)."""
    if isinstance(v, OpResult) and v.op.name == "upir.const" and isinstance(v.op.attributes.get("value"), int):
        value = int(v.op.attributes["value"])
        bits = int(v.type[1:]) if v.type.startswith("i") and v.type[1:].isdigit() else 64
        signed = not any(m.startswith("u") for m in mods(op))
        return value - (1 << bits) if signed and bits > 1 and value >= 1 << (bits - 1) else value
    x = value_of(v)
    if x.type == "i64":
        return x
    signed = not any(m.startswith("u") for m in mods(op))
    return emit.op("ptx.cvt", [x], "i64", ["s64" if signed else "u64", "s32" if signed else "u32"])


def _plus(a: int | Value, b: int | Value, emit: _Emitter) -> int | Value:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if isinstance(a, int) and a == 0:
        return b
    if isinstance(b, int) and b == 0:
        return a
    x = emit.const(a, "i64") if isinstance(a, int) else a
    y = emit.const(b, "i64") if isinstance(b, int) else b
    return emit.op("ptx.add", [x, y], "i64", ["s64"])


def _times(a: int | Value, b: int | Value, emit: _Emitter) -> int | Value:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if isinstance(a, int) and a in (0, 1) or isinstance(b, int) and b in (0, 1):
        return (b if a == 1 else 0) if isinstance(a, int) else (a if b == 1 else 0)
    x = emit.const(a, "i64") if isinstance(a, int) else a
    y = emit.const(b, "i64") if isinstance(b, int) else b
    return emit.op("ptx.mul", [x, y], "i64", ["lo", "s64"])


__all__ = ["IN_PLACE", "TilesInPlace", "tiles_in_place"]
