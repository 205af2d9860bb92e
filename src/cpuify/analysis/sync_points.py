"""Sync points of a block body and what crosses each: liveness, rematerialization,
and induction variables recomputed from a loop counter."""

from __future__ import annotations

from dataclasses import dataclass, field

from cpuify.ir.core import Block, BlockArgument, OpResult, Operation, Region, Value, predecessors
from cpuify.ir.dialects import info, is_sync
from cpuify.analysis.induction import increment_terms
from cpuify.analysis.uniformity import uniform_values

# ops that can be recomputed at a resume point instead of being kept per thread
_REMAT_OPS = {"upir.const", "upir.param", "upir.special", "upir.addressof", "ptx.mov", "ptx.add",
              "ptx.sub", "ptx.mul", "ptx.mad", "ptx.shl", "ptx.shr", "ptx.and", "ptx.or",
              "ptx.xor", "ptx.cvt", "ptx.cvta", "ptx.neg", "ptx.not", "ptx.setp", "ptx.selp",
              "ptx.min", "ptx.max"}
_REMAT_DEPTH = 12


@dataclass
class SyncPoint:
    index: int                 # 1-based resume id
    op: Operation
    block: Block
    position: int              # index of the op in its block
    live: list[Value] = field(default_factory=list)     # kept per thread across the sync
    remat: list[Value] = field(default_factory=list)    # recomputed at the resume point
    # loop induction variables recomputed from the loop counter: value -> expression
    derived: dict[Value, Value] = field(default_factory=dict)
    # the block-uniform loop counters kept across the sync (`k = phi(k0, k + s)`, s a
    # constant): counter -> s.  With k + n*s for k, the values above are those n
    # iterations later (SegmentEmitter.restore, prefetch_ahead).
    steps: dict[Value, int] = field(default_factory=dict)
    # what `live` was before the min-cut replaced it by a cheaper set (None: not replaced)
    live_before_cut: list[Value] | None = None


def find_sync_points(region: Region) -> list[SyncPoint]:
    out: list[SyncPoint] = []
    for b in region.blocks:
        for i, op in enumerate(b.ops):
            if is_sync(op):
                out.append(SyncPoint(len(out) + 1, op, b, i))
    return out


def _uses_in(op: Operation) -> list[Value]:
    vals = list(op.operands)
    for args in op.successor_args:
        vals.extend(args)
    return vals


def block_liveness(region: Region) -> dict[Block, set[Value]]:
    """Live-in sets per block (block arguments are defined at block entry)."""
    live_in: dict[Block, set[Value]] = {b: set() for b in region.blocks}
    gen: dict[Block, set[Value]] = {}
    kill: dict[Block, set[Value]] = {}
    for b in region.blocks:
        defined: set[Value] = set(b.args)
        used: set[Value] = set()
        for op in b.ops:
            for v in _uses_in(op):
                if v not in defined and _local_to(v, region):
                    used.add(v)
            defined.update(op.results)
        gen[b] = used
        kill[b] = defined
    changed = True
    order = list(reversed(region.blocks))
    while changed:
        changed = False
        for b in order:
            out: set[Value] = set()
            for s in b.successors:
                out |= live_in[s]
            new = gen[b] | (out - kill[b])
            if new != live_in[b]:
                live_in[b] = new
                changed = True
    return live_in


def _local_to(v: Value, region: Region) -> bool:
    if isinstance(v, OpResult):
        blk = v.op.parent
        return blk is not None and blk.parent is region
    if isinstance(v, BlockArgument):
        return v.block.parent is region
    return False


def live_after(sp: SyncPoint, live_in: dict[Block, set[Value]], region: Region) -> set[Value]:
    live: set[Value] = set()
    for s in sp.block.successors:
        live |= live_in[s]
    for op in reversed(sp.block.ops[sp.position + 1:]):
        live -= set(op.results)
        for v in _uses_in(op):
            if _local_to(v, region):
                live.add(v)
    live -= set(sp.op.results)
    return live


def rematerializable(v: Value, depth: int = 0, memo: dict | None = None) -> bool:
    """Whether v can be recomputed from at most `_REMAT_DEPTH - depth` levels of cheap pure
    ops.  `memo` (a dict kept by the caller across queries on an unchanged region) makes
    each query constant time on average: without it, values shared in the expression DAG
    are looked at once per path (up to 2^_REMAT_DEPTH times)."""
    if not isinstance(v, OpResult) or depth > _REMAT_DEPTH:
        return False
    if memo is not None:
        key = (v, depth)
        got = memo.get(key)
        if got is not None:
            return got
    op = v.op
    if op.name not in _REMAT_OPS or not info(op).pure and op.name.startswith("ptx."):
        r = False
    elif op.name == "upir.special" and op.attributes.get("reg", "").startswith("%clock"):
        r = False
    else:
        r = all(rematerializable(o, depth + 1, memo) for o in op.operands)
    if memo is not None:
        memo[key] = r
    return r


def plan_sync_points(region: Region, lockstep: set[Value] = frozenset(),  # type: ignore[assignment]
                     min_cut: bool = False) -> list[SyncPoint]:
    """Sync points with what crosses each.  `lockstep`: values known to be the same in all
    threads that resume together (iteration counters of interchanged loops).  `min_cut`:
    keep the cheapest set of values from which the others are recomputed (_min_cut)."""
    points = find_sync_points(region)
    if not points:
        return points
    live_in = block_liveness(region)
    counters: dict[Value, int] = {}
    uniform = uniform_values(region) | set(lockstep)
    inductions = induction_variables(region, uniform, counters)
    order = _value_order(region)
    memo: dict = {}
    preds: dict[Block, list[Block]] | None = None     # (for the min-cut, made once)
    for sp in points:
        live = sorted(live_after(sp, live_in, region), key=order)
        for v in live:
            if rematerializable(v, 0, memo):
                sp.remat.append(v)
            elif v in inductions:
                sp.derived[v] = inductions[v][0]
            else:
                sp.live.append(v)
        # the loop counters the derived values need must cross the sync point too
        for v in sp.derived:
            counter = inductions[v][1]
            if counter not in sp.live and not rematerializable(counter, 0, memo):
                sp.live.append(counter)
        if min_cut and len(sp.live) > 1:
            if preds is None:
                preds = predecessors(region)
            _min_cut(sp, preds, uniform, memo, order)
        sp.steps = {v: counters[v] for v in sp.live if v in counters}
    return points


#: ops the min-cut may recompute after a sync point from kept operands (pure arithmetic)
_RECOMPUTE_OPS = _REMAT_OPS | {"ptx.fma", "ptx.div", "ptx.rem", "ptx.abs", "ptx.mul24",
                               "ptx.mad24", "ptx.shf", "ptx.bfe", "ptx.lop3", "ptx.popc",
                               "ptx.clz", "ptx.brev", "ptx.copysign", "ptx.slct"}
_SIZES = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "f32": 4, "i64": 8, "f64": 8, "f16": 2}
#: how far back from a kept value the cut looks for cheaper values to keep
_CUT_DEPTH = 6
_CUT_NODES = 200


def kept_bytes(points: list[SyncPoint], uniform: set[Value], before_cut: bool = False) -> int:
    """Bytes per thread of the values kept per thread across the sync points (each sync
    point's values; uniform values are kept once per block); `before_cut`: as they were
    before the min-cut chose cheaper ones."""
    def kept(sp: SyncPoint) -> list[Value]:
        return sp.live_before_cut if before_cut and sp.live_before_cut is not None else sp.live
    return sum(_SIZES.get(v.type, 8) for sp in points for v in kept(sp) if v not in uniform)


def _available_before(sp: SyncPoint, preds: dict[Block, list[Block]]) -> set[Value]:
    """Values the thread computed since the previous sync point on every way to `sp` (their
    defining op reaches sp without crossing a sync point, whichever path the thread took):
    they can be kept at sp.  A value computed only on some of the ways (before an `if` whose
    other branch holds a sync point) is not: a thread that resumed at that sync point has not
    computed it in this segment (fz_2611_77: such a value, kept, was read from the slot
    another block had filled)."""
    def since_sync(ops: list[Operation]) -> tuple[bool, set[Value]]:
        defs: set[Value] = set()
        for op in reversed(ops):
            if is_sync(op):
                return True, defs
            defs.update(op.results)
        return False, defs

    blocks: set[Block] = set()
    work = list(preds.get(sp.block, []))
    while work:
        b = work.pop()
        if b not in blocks:
            blocks.add(b)
            work.extend(preds.get(b, []))
    at_end: dict[Block, set[Value] | None] = {b: None for b in blocks}    # None: not known yet

    def meet(b: Block) -> set[Value]:
        known = [at_end[p] for p in preds.get(b, []) if at_end.get(p) is not None]
        if not known:
            return set()
        out = set(known[0])
        for k in known[1:]:
            out &= k                     # type: ignore[operator]
        return out

    for _ in range(2 * len(blocks) + 2):
        changed = False
        for b in blocks:
            synced, defs = since_sync(b.ops)
            new = defs if synced else meet(b) | defs
            if new != at_end[b]:
                at_end[b], changed = new, True
        if not changed:
            break
    synced, defs = since_sync(sp.block.ops[:sp.position])
    return defs if synced else meet(sp.block) | defs


def _min_cut(sp: SyncPoint, preds: dict[Block, list[Block]], uniform: set[Value],
             memo: dict, order) -> None:  # type: ignore[no-untyped-def,type-arg]
    """Keep fewer bytes across `sp`: a value computed by pure arithmetic from values
    available before the barrier may be recomputed after it from those (the Polygeist
    paper's min-cut, III-B1): of all sets of values from which everything used after the
    barrier can be recomputed, keep one of least size per thread (minimum vertex cut
    between the values that cannot be recomputed and the values used)."""
    available = _available_before(sp, preds)
    sinks = list(sp.live)
    nodes: dict[Value, bool] = {}        # value -> can be recomputed from its operands
    work = [(v, 0) for v in sinks]
    while work:
        v, depth = work.pop()
        if v in nodes:
            continue
        if len(nodes) > _CUT_NODES:
            return
        op = v.op if isinstance(v, OpResult) else None
        recomputable = op is not None and op.name in _RECOMPUTE_OPS and depth < _CUT_DEPTH and \
            len(op.results) == 1 and (info(op).pure or not op.name.startswith("ptx.")) and \
            all(o in available or rematerializable(o, 0, memo) or o in sinks
                for o in op.operands)
        nodes[v] = recomputable
        if recomputable:
            work.extend((o, depth + 1) for o in op.operands  # type: ignore[union-attr]
                        if not rematerializable(o, 0, memo))

    def cost(v: Value) -> int | None:
        if v in sinks or v in available:
            return 1 if v in uniform else 16 * _SIZES.get(v.type, 8)
        return None                      # cannot be kept here

    before = sum(cost(v) or 0 for v in sinks)
    INF = 1 << 40
    cap: dict[object, dict[object, int]] = {}

    def edge(a: object, b: object, c: int) -> None:
        cap.setdefault(a, {})
        cap.setdefault(b, {})
        cap[a][b] = cap[a].get(b, 0) + c
        cap[b].setdefault(a, 0)

    S, T = "source", "sink"
    cap[S], cap[T] = {}, {}              # (every value may be recomputable: no edge from S)
    for v, recomputable in nodes.items():
        c = cost(v)
        edge((v, 0), (v, 1), INF if c is None else c)
        if not recomputable:
            edge(S, (v, 0), INF)
        else:
            for o in v.op.operands:  # type: ignore[union-attr]
                if o in nodes:
                    edge((o, 1), (v, 0), INF)
    for v in sinks:
        edge((v, 1), T, INF)
    flow = 0
    while True:                          # Edmonds-Karp
        parent: dict[object, object] = {S: S}
        queue = [S]
        for x in queue:
            for y, c in cap[x].items():
                if c > 0 and y not in parent:
                    parent[y] = x
                    queue.append(y)
        if T not in parent:
            break
        path = []
        y = T
        while y != S:
            path.append((parent[y], y))
            y = parent[y]
        push = min(cap[a][b] for a, b in path)
        for a, b in path:
            cap[a][b] -= push
            cap[b][a] += push
        flow += push
        if flow >= before:
            return                       # no cheaper cut than keeping what is used
    reach = set(parent)                  # the source side of the minimum cut
    kept = [v for v in nodes if (v, 0) in reach and (v, 1) not in reach]
    if flow >= before or any(cost(v) is None for v in kept):
        return
    recomputed = [v for v in sinks if v not in kept]
    sp.live_before_cut = sp.live
    sp.live = sorted(kept, key=order)
    sp.remat.extend(sorted(recomputed, key=order))


def _is_const(v: Value, value: int) -> bool:
    return isinstance(v, OpResult) and v.op.name == "upir.const" and v.op.attributes.get("value") == value


def induction_variables(region: Region, uniform: set[Value],
                        counters: dict[Value, int] | None = None) -> dict[Value, tuple[Value, Value]]:
    """Loop-carried integers `b = phi(b0, b + step)` of a loop that also has a counter
    `k = phi(k0, k + s)` (s a constant): in every iteration b == b0 + ((k - k0) / s) * step,
    so b need not be kept per thread across a barrier when b0, step and k0 can be
    recomputed.  The counter must be block-uniform (one copy per block is kept).
    Returns b -> (a detached expression for the code generator, k); fills `counters` with
    each loop's counter k -> s (also for loops with no other induction variable)."""
    from cpuify.ir.core import DomTree, dominators
    idom = dominators(region)
    dom = DomTree(idom)
    memo: dict = {}
    preds: dict[Block, list[tuple[Block, int]]] = {}
    for blk in region.blocks:
        term = blk.terminator
        if term is None:
            continue
        for k, succ in enumerate(term.successors):
            preds.setdefault(succ, []).append((blk, k))
    out: dict[Value, tuple[Value, Value]] = {}
    for header in region.blocks:
        if not header.args or header not in idom:
            continue
        entries: list[tuple[Block, int]] = []
        backs: list[tuple[Block, int]] = []
        for p, k in preds.get(header, []):
            (backs if p in idom and dom.dominates(header, p) else entries).append((p, k))
        if not entries or not backs:
            continue

        def incoming(arg: BlockArgument, edges: list[tuple[Block, int]]) -> list[Value]:
            return [p.terminator.successor_args[k][arg.index] for p, k in edges]  # type: ignore[union-attr]

        def step_terms_of(arg: BlockArgument) -> list[Value] | None:
            """arg's step as terms added on every back edge (an unrolled loop adds its
            step several times: `((i + s) + s) + s`), the same on each back edge."""
            found: list[Value] | None = None
            for v in incoming(arg, backs):
                terms = increment_terms(arg, v)
                if terms is None or found is not None and terms != found:
                    return None
                found = terms
            return found

        def step_of(arg: BlockArgument) -> Value | None:
            terms = step_terms_of(arg)
            return terms[0] if terms is not None and len(terms) == 1 else None

        def init_of(arg: BlockArgument) -> Value | None:
            inits = set(incoming(arg, entries))
            if len(inits) != 1:
                return None
            (init,) = inits
            return init if rematerializable(init, 0, memo) else None

        # the loop counter: a constant step (1 from 0 is the common, division-free case)
        best: tuple[int, BlockArgument, Value, Value] | None = None
        for a in header.args:
            step, init = step_of(a), init_of(a)
            if a.type not in ("i32", "i64") or a not in uniform or step is None or init is None or \
                    not (isinstance(step, OpResult) and step.op.name == "upir.const") or \
                    not isinstance(step.op.attributes.get("value"), int) or \
                    step.op.attributes["value"] == 0:
                continue
            simple = _is_const(step, 1) and (_is_const(init, 0) or _mov_of_zero(init))
            rank = 0 if simple else 1
            if best is None or rank < best[0]:
                best = (rank, a, init, step)
        if best is None:
            continue
        rank, counter, k0, s = best
        if counters is not None:
            counters[counter] = s.op.attributes["value"]   # type: ignore[union-attr]
        it = counter.type
        ops: list[Operation] = []
        if rank == 0:
            iteration: Value = counter
        else:
            sub = Operation("ptx.sub", [counter, k0], [it], {"mods": ["s" + it[1:]]})
            div = Operation("ptx.div", [sub.results[0], s], [it], {"mods": ["s" + it[1:]]})
            ops += [sub, div]
            iteration = div.results[0]
        for a in header.args:
            if a is counter or a.type not in ("i32", "i64") or (a.type == "i32" and it != "i32"):
                continue
            init, terms = init_of(a), step_terms_of(a)
            if init is None or terms is None or \
                    not all(rematerializable(s, 0, memo) for s in terms):
                continue
            step = terms[0]
            for term in terms[1:]:      # the step of an unrolled loop: the sum of its terms
                total = Operation("ptx.add", [step, term], [a.type], {"mods": ["s" + a.type[1:]]})
                ops.append(total)
                step = total.results[0]
            k = iteration
            if a.type == "i64":
                wide = Operation("ptx.cvt", [iteration], ["i64"],
                                 {"mods": ["s64", "s32" if it == "i32" else "s64"]})
                ops.append(wide)
                k = wide.results[0]
            bits = a.type[1:]
            mul = Operation("ptx.mul", [k, step], [a.type], {"mods": ["lo", "s" + bits]})
            add = Operation("ptx.add", [init, mul.results[0]], [a.type], {"mods": ["s" + bits]})
            out[a] = (add.results[0], counter)
            ops += [mul, add]
        # detached ops must not count as uses of the real values
        for op in ops:
            op.drop_uses()
    return out


def _mov_of_zero(v: Value) -> bool:
    return isinstance(v, OpResult) and v.op.name == "ptx.mov" and _is_const(v.op.operands[0], 0)


def _value_order(region: Region):  # type: ignore[no-untyped-def]
    order: dict[Value, int] = {}
    for b in region.blocks:
        for a in b.args:
            order[a] = len(order)
        for op in b.ops:
            for r in op.results:
                order[r] = len(order)
    return lambda v: order.get(v, 0)

