"""Analyses code generation needs on the block body: sync points, liveness across them,
rematerialization, and which 64-bit integers are really pointers (so that addresses are
emitted as GEPs the loop vectorizer understands)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from cpuify.ir.core import Block, BlockArgument, OpResult, Operation, Region, Value, predecessors
from cpuify.ir.dialects import info, is_sync

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


def rematerializable(v: Value, depth: int = 0) -> bool:
    if not isinstance(v, OpResult) or depth > _REMAT_DEPTH:
        return False
    op = v.op
    if op.name not in _REMAT_OPS or not info(op).pure and op.name.startswith("ptx."):
        return False
    if op.name == "upir.special" and op.attributes.get("reg", "").startswith("%clock"):
        return False
    return all(rematerializable(o, depth + 1) for o in op.operands)


def plan_sync_points(region: Region, lockstep: set[Value] = frozenset()) -> list[SyncPoint]:  # type: ignore[assignment]
    """Sync points with what crosses each.  `lockstep`: values known to be the same in all
    threads that resume together (iteration counters of interchanged loops)."""
    points = find_sync_points(region)
    if not points:
        return points
    live_in = block_liveness(region)
    counters: dict[Value, int] = {}
    inductions = induction_variables(region, uniform_values(region) | set(lockstep), counters)
    for sp in points:
        live = sorted(live_after(sp, live_in, region), key=_value_order(region))
        for v in live:
            if rematerializable(v):
                sp.remat.append(v)
            elif v in inductions:
                sp.derived[v] = inductions[v][0]
            else:
                sp.live.append(v)
        # the loop counters the derived values need must cross the sync point too
        for v in sp.derived:
            counter = inductions[v][1]
            if counter not in sp.live and not rematerializable(counter):
                sp.live.append(counter)
        sp.steps = {v: counters[v] for v in sp.live if v in counters}
    return points


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
    from cpuify.ir.core import dominates, dominators
    idom = dominators(region)
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
            (backs if p in idom and dominates(idom, header, p) else entries).append((p, k))
        if not entries or not backs:
            continue

        def incoming(arg: BlockArgument, edges: list[tuple[Block, int]]) -> list[Value]:
            return [p.terminator.successor_args[k][arg.index] for p, k in edges]  # type: ignore[union-attr]

        def step_of(arg: BlockArgument) -> Value | None:
            steps = set()
            for v in incoming(arg, backs):
                if not (isinstance(v, OpResult) and v.op.name == "ptx.add" and arg in v.op.operands):
                    return None
                other = [o for o in v.op.operands if o is not arg]
                if len(other) != 1:
                    return None
                steps.add(other[0])
            return steps.pop() if len(steps) == 1 else None

        def init_of(arg: BlockArgument) -> Value | None:
            inits = set(incoming(arg, entries))
            if len(inits) != 1:
                return None
            (init,) = inits
            return init if rematerializable(init) else None

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
            init, step = init_of(a), step_of(a)
            if init is None or step is None or not rematerializable(step):
                continue
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


# --- pointer inference ------------------------------------------------------------------

_ADDRESS_SPACES_REAL = ("global", "const", "generic", "param")


def _mem_space(op: Operation) -> str:
    mods = op.attributes.get("mods", [])
    for s in ("global", "shared", "local", "const", "param"):
        if s in mods:
            return s
    return "generic"


def memory_space(op: Operation) -> str:
    return _mem_space(op)


def infer_pointers(region: Region) -> set[Value]:
    """64-bit values that hold real (global/generic) addresses: emitted as LLVM `ptr`."""
    address_flow: set[Value] = set()
    work: list[Value] = []

    def mark(v: Value) -> None:
        if v.type == "i64" and v not in address_flow:
            address_flow.add(v)
            work.append(v)

    all_ops = [op for b in region.blocks for op in b.ops]
    for op in all_ops:
        if op.name in ("ptx.ld", "ptx.ldu", "ptx.st", "ptx.atom", "ptx.red") and \
                _mem_space(op) in _ADDRESS_SPACES_REAL:
            mark(op.operands[0])
        elif op.name == "ptx.cvta" and "to" in op.attributes.get("mods", ()):
            mark(op.operands[0])
    incoming = _incoming(region)
    while work:
        v = work.pop()
        if isinstance(v, OpResult):
            op = v.op
            if op.name in ("ptx.add", "ptx.sub", "ptx.mov"):
                for o in op.operands:
                    mark(o)
        elif isinstance(v, BlockArgument):
            for src in incoming.get(v, []):
                mark(src)

    pointers: set[Value] = set()
    for op in all_ops:
        for r in op.results:
            if r not in address_flow and not (op.name == "ptx.cvta"):
                continue
            if op.name == "ptx.cvta" and r.type == "i64" and "to" not in op.attributes.get("mods", ()):
                pointers.add(r)       # shared/local/global -> generic: a real address
            elif op.name == "ptx.cvta" and r.type == "i64" and ("global" in op.attributes["mods"]):
                pointers.add(r)
            elif op.name in ("upir.param", "ptx.ld", "ptx.ldu") and r.type == "i64":
                pointers.add(r)
            elif op.name == "upir.addressof" and op.attributes.get("space") in ("global", "const", "param"):
                pointers.add(r)
    for b in region.blocks:
        for a in b.args:
            if a in address_flow:
                pointers.add(a)
    # forward: add/sub/mov with exactly one pointer operand; block args need all inputs
    changed = True
    while changed:
        changed = False
        for op in all_ops:
            if op.name in ("ptx.add", "ptx.sub", "ptx.mov") and op.results and op.results[0].type == "i64":
                r = op.results[0]
                n_ptr = sum(1 for o in op.operands if o in pointers)
                is_ptr = r in address_flow and (
                    (op.name == "ptx.add" and n_ptr == 1) or
                    (op.name in ("ptx.sub", "ptx.mov") and op.operands[0] in pointers and n_ptr == 1))
                if is_ptr and r not in pointers:
                    pointers.add(r)
                    changed = True
                elif not is_ptr and r in pointers:
                    pointers.discard(r)
                    changed = True
        for b in region.blocks:
            for a in b.args:
                if a in pointers and not all(src in pointers for src in incoming.get(a, [])):
                    pointers.discard(a)
                    changed = True
    return pointers


def _incoming(region: Region) -> dict[BlockArgument, list[Value]]:
    out: dict[BlockArgument, list[Value]] = {}
    for b in region.blocks:
        term = b.terminator
        if term is None:
            continue
        for s, args in zip(term.successors, term.successor_args):
            for a, v in zip(s.args, args):
                out.setdefault(a, []).append(v)
    return out


# --- uniformity ---------------------------------------------------------------------------

_UNIFORM_SPECIALS = ("%ntid", "%nctaid", "%ctaid", "%nwarpid", "%warpsize", "%dynamic_smem_size",
                     "%total_smem_size", "%aggr_smem_size", "%smid", "%nsmid", "%gridid")


def uses_special(v: Value, prefix: str, depth: int) -> bool:
    """Whether v is computed (within `depth` operations) from a special register whose name
    starts with `prefix` (`%nctaid`: a grid-stride step; `%ctaid`: an index of the block)."""
    if not isinstance(v, OpResult) or depth < 0:
        return False
    if v.op.name == "upir.special":
        return str(v.op.attributes.get("reg", "")).startswith(prefix)
    return any(uses_special(o, prefix, depth - 1) for o in v.op.operands)


def _op_may_be_uniform(op: Operation) -> bool:
    if op.name in ("upir.const", "upir.param", "upir.addressof"):
        return True
    if op.name == "upir.special":
        return op.attributes.get("reg", "").split(".")[0] in _UNIFORM_SPECIALS
    if op.name == "ptx.cvta":
        return "local" not in op.attributes.get("mods", ())
    return op.name.startswith("ptx.") and info(op).pure


def _exits_at_once(block: Block) -> bool:
    """A block that only ends the thread (`if (i >= n) return;`): the threads that branch
    there are gone, so the branch leaves the others all on one path."""
    return not block.successors and all(op.name == "upir.exit" or (info(op).pure and not op.results)
                                        for op in block.ops) and not block.args


def immediate_post_dominators(region: Region) -> dict[Block, Block]:
    """Block -> its immediate post-dominator, for blocks that have one other than the exit
    (every path from the block to the end of the kernel passes through it)."""
    blocks = region.blocks
    exits = [b for b in blocks if not b.successors]
    full = set(blocks)
    # post-dominator sets by iteration to a fixed point (regions are small)
    pdom: dict[Block, set[Block]] = {b: ({b} if b in exits else set(full)) for b in blocks}
    changed = True
    while changed:
        changed = False
        for b in reversed(blocks):
            if b in exits:
                continue
            new = set.intersection(*(pdom[s] for s in b.successors)) | {b}
            if new != pdom[b]:
                pdom[b] = new
                changed = True
    # blocks with no path to an exit (an endless loop) have no post-dominators
    reach_exit = set(exits)
    preds = predecessors(region)
    work = list(exits)
    while work:
        for p in preds.get(work.pop(), []):
            if p not in reach_exit:
                reach_exit.add(p)
                work.append(p)
    out: dict[Block, Block] = {}
    for b in blocks:
        if b not in reach_exit:
            continue
        strict = pdom[b] - {b}
        # the immediate one is the strict post-dominator that all others post-dominate
        for c in strict:
            if strict <= pdom[c]:
                out[b] = c
                break
    return out


def uniform_values(region: Region) -> set[Value]:
    """Values equal in every thread of a block (same value in each dynamic instance).

    Conservative divergence analysis: an op result is uniform if the op is pure, reads no
    per-thread state and has uniform operands; a block argument is uniform if its incoming
    values are and its block cannot be reached from a branch whose condition is not uniform
    before that branch's immediate post-dominator, where the threads meet again (so all
    threads merge the same way; this also rules out the temporal divergence of loops with
    thread-dependent exits, whose headers such a branch reaches before the exit).  A branch
    to a block that only exits (`if (i >= n) return;`) divides no live threads."""
    incoming = _incoming(region)
    ipdom = immediate_post_dominators(region)
    tainted: set[Block] = set()
    while True:
        # optimistic start (loop-carried values), then remove what is not uniform
        # (a pure op with uniform operands is uniform wherever it runs; only the merges
        # of block arguments depend on the path taken)
        uniform: set[Value] = set()
        for b in region.blocks:
            if b not in tainted:
                uniform.update(b.args)
            for op in b.ops:
                if _op_may_be_uniform(op):
                    uniform.update(op.results)
        changed = True
        while changed:
            changed = False
            for b in region.blocks:
                for a in b.args:
                    if a in uniform and not all(v in uniform for v in incoming.get(a, [])):
                        uniform.discard(a)
                        changed = True
                for op in b.ops:
                    if op.results and op.results[0] in uniform and \
                            not all(o in uniform for o in op.operands):
                        uniform.difference_update(op.results)
                        changed = True
        new_tainted: set[Block] = set()
        for b in region.blocks:
            term = b.terminator
            if term is not None and term.name == "cf.cond_br" and term.operands[0] not in uniform \
                    and not any(_exits_at_once(s) for s in term.successors):
                # threads part here and meet again at the immediate post-dominator: the
                # blocks on the way, and the meeting block's merges, see divergence
                join = ipdom.get(b)
                stack = list(term.successors)
                while stack:
                    x = stack.pop()
                    if x not in new_tainted:
                        new_tainted.add(x)
                        if x is not join:
                            stack.extend(x.successors)
        if new_tainted <= tainted:
            return uniform
        tainted |= new_tainted


# --- signed index arithmetic ----------------------------------------------------------------

_INDEX_OPS = ("ptx.add", "ptx.sub", "ptx.mul", "ptx.mad")


def _is_sext_to_64(op: Operation) -> bool:
    mods = op.attributes.get("mods", ())
    if op.name in ("ptx.mul", "ptx.mad") and "wide" in mods and "s32" in mods:
        return True
    return op.name == "ptx.cvt" and "s64" in mods and "s32" in mods


def no_signed_wrap(region: Region) -> set[Value]:
    """32-bit signed add/sub/mul results that only feed sign extensions to 64 bits or
    shared/local addresses (directly or through more such arithmetic): array indices computed
    in C++ `int`, whose overflow is undefined in the source.  Marking them `nsw` (as clang does) lets LLVM prove that the
    64-bit addresses are affine in the thread index, instead of guarding every vector loop
    with wrap checks.  A wrapped index would address memory ~8 GiB away anyway."""
    cand: set[Value] = set()
    for b in region.blocks:
        for op in b.ops:
            mods = op.attributes.get("mods", ())
            if op.name in _INDEX_OPS and ("s32" in mods or "u32" in mods or "b32" in mods) \
                    and "wide" not in mods and "hi" not in mods \
                    and "sat" not in mods and "cc" not in mods and op.results:
                cand.add(op.results[0])
    changed = True
    while changed:
        changed = False
        for v in list(cand):
            for user in v.uses:
                if user.name in _INDEX_OPS and user.results and user.results[0] in cand:
                    continue
                if _is_sext_to_64(user) and v in user.operands[:2]:
                    continue
                # shared/local offsets are sign-extended by the code generator too
                if user.name in ("ptx.ld", "ptx.st", "ptx.atom", "ptx.red") and \
                        _mem_space(user) in ("shared", "local") and user.operands[0] is v and \
                        v not in user.operands[1:]:
                    continue
                cand.discard(v)
                changed = True
                break
    return cand



# --- which __shared__ variable an address points into ---------------------------------------

_ADDRESS_ARITH = ("ptx.add", "ptx.sub", "ptx.mad", "ptx.mov", "ptx.cvta", "ptx.cvt")


def shared_variables(region: Region) -> dict[Value, str]:
    """Shared-memory addresses -> the `__shared__` variable they point into, where every
    path derives the address from that one variable (its `upir.addressof` plus offsets).
    Distinct variables never overlap and indexing past the end of one is undefined in
    CUDA, so accesses through different variables are independent."""
    incoming = _incoming(region)
    users: dict[Value, list[Operation]] = {}
    for b in region.blocks:
        for op in b.ops:
            for o in op.operands:
                users.setdefault(o, []).append(op)
    # the values an address flows into (through address arithmetic and block arguments)
    roots = [op.results[0] for b in region.blocks for op in b.ops
             if op.name == "upir.addressof" and op.attributes.get("space") == "shared"]
    flow: set[Value] = set(roots)
    work = list(roots)
    while work:
        v = work.pop()
        for op in users.get(v, []):
            if op.name in _ADDRESS_ARITH and op.results:
                targets = [op.results[0]]
            elif op.name in ("cf.br", "cf.cond_br"):
                targets = [a for succ, args in zip(op.successors, op.successor_args)
                           for a, x in zip(succ.args, args) if x is v]
            else:
                targets = []
            for t in targets:
                if t not in flow:
                    flow.add(t)
                    work.append(t)
    # optimistic: a value's variable, or None once two variables (or a non-address) meet
    base: dict[Value, str | None] = {op.results[0]: op.attributes["symbol"] for b in region.blocks
                                     for op in b.ops if op.name == "upir.addressof"
                                     and op.attributes.get("space") == "shared"}

    def derive(op: Operation) -> str | None:
        ops = op.operands
        if op.name == "ptx.mad":       # a*b + c is an address only through c
            addr, offsets = ops[2:], ops[:2]
        elif op.name == "ptx.sub":     # address - offset
            addr, offsets = ops[:1], ops[1:]
        elif op.name == "ptx.add":
            addr = [o for o in ops if o in flow]
            offsets = [o for o in ops if o not in flow]
        else:
            addr, offsets = ops[:1], ops[1:]
        if len(addr) != 1 or any(o in flow for o in offsets) or addr[0] not in flow:
            return None
        return base.get(addr[0], "")

    changed = True
    while changed:
        changed = False
        for b in region.blocks:
            values: list[tuple[Value, str | None]] = []
            for a in b.args:
                if a in flow:
                    srcs = incoming.get(a, [])
                    got = {None if x not in flow else base.get(x, "") for x in srcs} - {""}
                    values.append((a, got.pop() if len(got) == 1 else None if got else ""))
            for op in b.ops:
                if op.results and op.results[0] in flow and op.name != "upir.addressof":
                    values.append((op.results[0], derive(op)))
            for v, new in values:
                if new == "":
                    continue            # nothing known yet (a loop not visited)
                old = base.get(v, "")
                merged = new if old == "" else (old if old == new else None)
                if merged != old:
                    base[v] = merged
                    changed = True
    return {v: s for v, s in base.items() if s}


# --- which threads a condition on one thread index selects ---------------------------------

_TID_DIMS = {"%tid.x": 0, "%tid.y": 1, "%tid.z": 2}


def _int_of(x: int, t: str) -> int:
    """x read as PTX integer type t (wraps; signed types are two's complement)."""
    bits = 64 if t.endswith("64") else 16 if t.endswith("16") else 8 if t.endswith("8") else 32
    x &= (1 << bits) - 1
    if t.startswith("s") and x >= 1 << (bits - 1):
        x -= 1 << bits
    return x


def _eval_on_thread(v: Value, dim_value: dict[int, int], depth: int = 0) -> int | bool | None:
    """v computed from one thread index and constants, for the thread index values in
    dim_value ({dim: t}); None for anything else (a load, a parameter, another special)."""
    if depth > 12 or not isinstance(v, OpResult):
        return None
    op = v.op
    if op.name == "upir.const":
        val = op.attributes["value"]
        return bool(val) if v.type == "i1" else val if isinstance(val, int) else None
    if op.name == "upir.special":
        dim = _TID_DIMS.get(op.attributes.get("reg", ""))
        return dim_value.get(dim) if dim is not None else None
    mods = op.attributes.get("mods", [])
    args = [_eval_on_thread(o, dim_value, depth + 1) for o in op.operands]
    if any(a is None for a in args):
        return None
    t = next((m for m in mods if m[:1] in "sub" and m[1:].isdigit()), "b32")
    name = op.name
    if name in ("ptx.mov", "ptx.cvt") and len(args) == 1:
        return args[0]
    if v.type == "i1" or "pred" in mods:
        a = [bool(x) for x in args]
        if name == "ptx.not":
            return not a[0]
        if name in ("ptx.and", "ptx.or", "ptx.xor") and len(a) == 2:
            return {"ptx.and": a[0] and a[1], "ptx.or": a[0] or a[1], "ptx.xor": a[0] != a[1]}[name]
        if name != "ptx.setp" or len(args) != 2:
            return None
        x, y = (_int_of(int(a), "u32" if t.startswith("b") else t) for a in args)
        cmp = next((m for m in mods if m in _SETP), None)
        return _SETP[cmp](x, y) if cmp else None
    ints = [int(a) for a in args]
    ops2 = {"ptx.and": lambda x, y: x & y, "ptx.or": lambda x, y: x | y,
            "ptx.xor": lambda x, y: x ^ y, "ptx.add": lambda x, y: x + y,
            "ptx.sub": lambda x, y: x - y, "ptx.shl": lambda x, y: x << y,
            "ptx.shr": lambda x, y: x >> y,
            "ptx.rem": lambda x, y: None if y == 0 else int(math.fmod(x, y)),
            "ptx.div": lambda x, y: None if y == 0 else int(x / y)}
    if name == "ptx.mul" and "lo" in mods and len(ints) == 2:
        return _int_of(ints[0] * ints[1], t)
    if name in ops2 and len(ints) == 2:
        x, y = (_int_of(i, t) for i in ints)
        r = ops2[name](x, y)
        return None if r is None else _int_of(r, t)
    return None


_SETP = {"eq": lambda x, y: x == y, "ne": lambda x, y: x != y,
         "lt": lambda x, y: x < y, "lo": lambda x, y: x < y,
         "le": lambda x, y: x <= y, "ls": lambda x, y: x <= y,
         "gt": lambda x, y: x > y, "hi": lambda x, y: x > y,
         "ge": lambda x, y: x >= y, "hs": lambda x, y: x >= y}


def thread_index_condition(cond: Value, block_dims: tuple[int, int, int]
                           ) -> tuple[int, list[int]] | None:
    """(dim, the thread indices t in [0, block_dims[dim]) for which `cond` holds) when cond
    depends on threadIdx along one dimension only, through integer arithmetic with constants
    (`tx == 0`, `t < k`, `(ty & 3) == 0`, ...); None otherwise."""
    dims = {_TID_DIMS[op.attributes.get("reg", "")] for op in _special_ops(cond)
            if op.attributes.get("reg", "") in _TID_DIMS}
    if len(dims) != 1:
        return None
    (dim,) = dims
    true_for = []
    for t in range(block_dims[dim]):
        r = _eval_on_thread(cond, {dim: t})
        if r is None:
            return None
        if r:
            true_for.append(t)
    return dim, true_for


def _special_ops(v: Value, depth: int = 0) -> list[Operation]:
    if depth > 12 or not isinstance(v, OpResult):
        return []
    if v.op.name == "upir.special":
        return [v.op]
    return [s for o in v.op.operands for s in _special_ops(o, depth + 1)]
