"""Fission of a block-uniform loop into its elementwise work and its in-order float sum.

The naive row softmax runs one thread per row:

    for (c = 0; c < cols; c++) { e = expf(in[c] - m); out[c] = e; total += e; }

Every access is contiguous within the thread (a row each), so the thread's own loop is the
one to vectorize, but `total` must add its terms one after another (CUDA semantics: one
thread, in order): in each thread the loop is a chain of dependent additions, and
interchanged with the thread loop (threads as vector lanes) every column is a gather and a
scatter.  This pass splits the loop in two:

    for (c ...) { e = expf(in[c] - m); out[c] = e; }        // "terms": stays in each thread,
                                                            // vectorized along the row
    for (c ...) total += out[c];                            // "reload": interchanged by
                                                            // interchange-uniform-loops

The second loop reads back the terms the first one stored: each thread adds exactly the
same values in exactly the same order, so the sum is bit for bit the original one.  Only
the (cheap) additions run with the threads as vector lanes; the elementwise work runs as
contiguous vectors along the row.

A lone sum adding one term the loop stores to global memory (`total += e`, nothing else of
the loop read after it) is read back by one `upir.in_order_sum(P0, P_end, init)` per thread
instead, alone between two soft barriers (marked `sum_split`, which interchange-uniform-
loops does not take for an interchanged loop's): code generation vectorizes its thread loop
with variants that load each thread's terms as vectors and transpose the rows of 16 threads
in registers (codegen/in_order_sums.py), where the interchanged loop gathers every column.
Option `sum_op=false` keeps the loop.

Taken only when (else the loop is left to interchange-uniform-loops as before):
  * the loop is one block (its own latch), innermost by construction, with a block-uniform
    exit, no sync point, no recursion in the kernel and no soft barrier yet;
  * the access analysis finds it contiguous within a thread and strided across threads
    (loop_order.contiguous_within_thread) and it carries an in-order float value;
  * each in-order value is a chain of ops reading it once; each term the chain reads from
    the loop is a value the loop stores (`st [P + o], e`), the chain's values are read by
    nothing else in the loop;
  * every load of the loop reads read-only memory (`ld.global.nc`, const, param) and its
    only other side effects are plain stores, all through one pointer induction variable
    P with a constant positive step s, whose (offset, size) intervals never meet within a
    thread (no iteration overwrites what another stored).

Other threads' stores must not overwrite a term before it is read back.  That is checked
at run time after the first loop, by a guard on block-uniform quantities: the bytes the
thread's stores span, (P_end - P0) + (max end - min offset - s), at most the distance to
the neighbouring thread's P0 (P0 evaluated for threadIdx.x + 1, from the same
expression), and a block of one dimension (ntid.y = ntid.z = 1).  Where the guard fails,
a third loop recomputes the terms from the (read-only) inputs (the original loop
without its stores; interchange-uniform-loops treats it as it treated the original).  Stores of other blocks are not checked: a kernel
whose blocks write the same location unsynchronized has a data race."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cpuify.analysis.cfg import incoming_values
from cpuify.analysis.evolution import read_only_load
from cpuify.analysis.loop_order import loop_order, tid_x_stride
from cpuify.analysis.manager import AnalysisManager, cached
from cpuify.analysis.uniformity import UNIFORM_CONDITION, uniform_values
from cpuify.ir.core import Block, BlockArgument, Operation, OpResult, Region, Value, replace_uses_in
from cpuify.ir.dialects import info, is_sync
from cpuify.ir.modifiers import mods, ty, type_size
from cpuify.ir.structure import block_body
from cpuify.ir.structured_shapes import nested_ops, single_block_loop
from cpuify.transforms.pass_manager import lower_for_cfg_rewrite, register, structured_now

#: attribute on the back edges (and the guard) of the loops this pass makes
SUM_SPLIT = "sum_split"
TERMS = "terms"             # the elementwise loop: stays in each thread
RELOAD = "reload"           # the in-order sums over the stored terms: interchanged
RECOMPUTE = "recompute"     # the guard's fallback: the terms recomputed
GUARD = "guard"

#: the modifiers of a term's store that its read-back load keeps (space and type; a store's
#: cache hints, `.wb`/`.wt`, are no load's)
_LOAD_MODS = frozenset(("global", "f32", "f64", "b32", "b64", "u32", "s32", "u64", "s64"))
#: how deep the neighbouring thread's start address is followed
_DEPTH = 32


@register("split-in-order-sums",
          "block-uniform loops carrying an in-order float sum of stored terms split into the "
          "elementwise loop (kept in each thread) and the sum over the terms read back "
          "(interchanged), behind a run-time check that threads' stores do not overlap")
@dataclass(frozen=True)
class SplitInOrderSums:
    """Pass: fission of single-block uniform loops whose in-order float sums add values the
    loop stores (the naive row softmax's `out[c] = e; total += e`)."""
    name: str = "split-in-order-sums"
    #: the read-back of a lone sum of one stored term per iteration as one
    #: `upir.in_order_sum` per thread between soft barriers (rows of 16 threads transposed
    #: in registers), instead of a loop interchanged with the thread loop (a gather per
    #: column)
    sum_op: bool = True
    #: on the CFG; structured input is lowered only where a loop of one block carries a
    #: float and stores, and no soft barrier is (_may_split)
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of loops split."""
        if structured_now(kernel, analyses):
            if not _may_split(kernel):
                return 0
            lower_for_cfg_rewrite(kernel, analyses)
        return len(split_in_order_sums(block_body(kernel), analyses, sum_op=self.sum_op))


def _may_split(kernel: Operation) -> bool:
    """The quick test on the structured form: a loop of one block once lowered whose header
    carries an f32/f64 value (the sum) and stores (the terms the split reads back: _plan
    takes no loop without a store), and no soft barrier or recursion (the pass leaves such
    kernels as they are)."""
    ops = nested_ops(kernel)
    if any(o.name == "upir.call_stack" or o.name == "upir.barrier" and o.attr("soft") for o in ops):
        return False
    for o in ops:
        if not single_block_loop(o):
            continue
        header = o.parent if o.name not in ("upir.while", "upir.for") else o.regions[0].entry
        if header is not None and any(a.type in ("f32", "f64") for a in header.args) and \
                any(x.name == "ptx.st" for x in header.ops):
            return True
    return False


def split_in_order_sums(region: Region, analyses: AnalysisManager | None = None, *,
                        sum_op: bool = True) -> list[Block]:
    """Split every loop of `region` that qualifies (module docstring).  Returns the blocks
    that read the terms back (the "reload" loops' headers; with `sum_op`, where the sum
    qualifies, the block of its `upir.in_order_sum`)."""
    if any(op.name in ("upir.call_stack",) or op.name == "upir.barrier" and op.attr("soft")
           for b in region.blocks for op in b.ops):
        return []
    uniform = cached(analyses, uniform_values, region)
    incoming = None
    done: list[Block] = []
    # (the last loops first: a split's join hides from the access analysis what the loops
    # after it start from, such as nvcc's remainder loop's index)
    for header in reversed(list(region.blocks)):
        term = header.terminator
        if term is None or term.name != "cf.cond_br" or header not in term.successors or \
                len(set(term.successors)) != 2:
            continue
        if not any(a.type in ("f32", "f64") and a not in uniform for a in header.args):
            continue
        if incoming is None:
            incoming = incoming_values(region)
        plan = _plan(header, uniform, incoming)
        if plan is None:
            continue
        done.append(_split(region, header, plan, uniform, sum_op))
        uniform = uniform_values(region)    # (the IR changed)
        incoming = None
    return done


def splits(header: Block, uniform: set[Value],
           incoming: dict[BlockArgument, list[Value]]) -> bool:
    """Whether the pass would split the single-block loop `header` (reroll-loops asks before
    re-rolling a loop that carries an in-order sum)."""
    return _plan(header, uniform, incoming) is not None


@dataclass
class _Plan:
    sums: list[BlockArgument]           # the in-order float header arguments
    chain: set[Operation]               # the ops computing them
    terms: dict[Value, Operation]       # term value -> the store that stores it
    pointer: BlockArgument              # P
    step: int                           # s
    low: int                            # smallest store offset
    high: int                           # largest store offset + size


def _plan(header: Block, uniform: set[Value],
          incoming: dict[BlockArgument, list[Value]]) -> _Plan | None:
    term = header.terminator
    assert term is not None
    if term.operands[0] not in uniform:
        return None                     # threads would leave at different iterations
    ops = header.ops[:-1]
    if any(is_sync(op) for op in ops):
        return None
    order = loop_order(header, {header}, uniform, incoming)
    if order.reorderable() or not order.contiguous_within_thread():
        return None
    back = term.successors.index(header)
    back_args = term.successor_args[back]
    # the in-order chains: from each float argument to its back-edge value
    sums: list[BlockArgument] = []
    chain: set[Operation] = set()
    terms: list[Value] = []
    for arg in header.args:
        if arg.type not in ("f32", "f64") or arg in uniform:
            continue
        found = _chain(arg, back_args[arg.index], header)
        if found is None:
            return None
        ops_of_chain, chain_terms = found
        sums.append(arg)
        chain |= ops_of_chain
        terms.extend(chain_terms)
    if not sums:
        return None
    chain_values = set(sums) | {r for op in chain for r in op.results}
    # the chains' values are read only by the chains, the back edge and code after the loop
    for v in chain_values:
        for user in v.uses:
            if user.parent is header and user not in chain and user is not term:
                return None
    # side effects: read-only loads, plain stores through one pointer induction variable
    stores = []
    for op in ops:
        if op.name == "ptx.st":
            stores.append(op)
        elif op.name in ("ptx.ld", "ptx.ldu"):
            if not read_only_load(op):
                return None
        elif not info(op).pure or op.regions:
            return None
    if not stores:
        return None
    pointer = stores[0].operands[0]
    if not isinstance(pointer, BlockArgument) or pointer.block is not header or pointer.type != "i64":
        return None
    step = _constant_step(pointer, back_args[pointer.index])
    if step is None or step <= 0:
        return None
    intervals = []
    for st in stores:
        m = mods(st)
        if st.operands[0] is not pointer or "volatile" in m or "v2" in m or "v4" in m or \
                not isinstance(st.attributes.get("offset", 0), int) or \
                not ({"global", "generic"} & set(m) or not {"shared", "local"} & set(m)):
            return None
        if any(x in m for x in ("relaxed", "release", "mmio", "shared", "local")):
            return None
        intervals.append((st.attributes.get("offset", 0), type_size(ty(st))))
    if not _disjoint_in_thread(intervals, step):
        return None
    stored: dict[Value, Operation] = {}
    for st in stores:
        stored.setdefault(st.operands[1], st)
    term_stores: dict[Value, Operation] = {}
    for t in terms:
        st = stored.get(t)
        if st is None or st.operands[1].type != t.type or ty(st) not in ("f32", "f64", "b32", "b64"):
            return None
        term_stores[t] = st
    # the guard compares with the neighbouring thread's start: it must depend on threadIdx.x
    entry = [v for v in incoming.get(pointer, []) if v is not back_args[pointer.index]]
    if len(entry) != 1 or not _neighbour_computable(entry[0], uniform) or \
            tid_x_stride(entry[0], uniform, {}) in (None, 0):
        return None                     # (linear in threadIdx.x: every thread's guard agrees)
    low = min(o for o, _ in intervals)
    high = max(o + n for o, n in intervals)
    return _Plan(sums, chain, term_stores, pointer, step, low, high)


def _chain(arg: BlockArgument, back: Value, header: Block
           ) -> tuple[set[Operation], list[Value]] | None:
    """The ops from `arg` to `back` (each reading the chain once) and the values they add
    that the loop computes (the terms), or None."""
    ops: set[Operation] = set()
    terms: list[Value] = []
    v = back
    while v is not arg:
        if not isinstance(v, OpResult) or v.op.parent is not header or len(v.op.results) != 1:
            return None
        op = v.op
        if not info(op).pure or op.name == "upir.const":
            return None
        through = [o for o in op.operands if _reads_chain(o, arg, header)]
        if len(through) != 1:
            return None
        ops.add(op)
        for o in op.operands:
            if o is through[0]:
                continue
            if isinstance(o, BlockArgument) and o.block is header:
                return None                 # (a carried value: nothing stores it per iteration)
            if isinstance(o, OpResult) and o.op.parent is header:
                terms.append(o)
        v = through[0]
    return ops, terms


def _reads_chain(v: Value, arg: BlockArgument, header: Block) -> bool:
    """Whether v is computed from arg within the loop's block."""
    work, seen = [v], set()
    while work:
        x = work.pop()
        if x is arg:
            return True
        if x in seen or not isinstance(x, OpResult) or x.op.parent is not header:
            continue
        seen.add(x)
        work.extend(x.op.operands)
    return False


def _constant_step(arg: BlockArgument, back: Value) -> int | None:
    if isinstance(back, OpResult) and back.op.name == "ptx.add" and len(back.op.operands) == 2:
        a, b = back.op.operands
        if a is arg:
            return _const(b)
        if b is arg:
            return _const(a)
    return None


def _const(v: Value) -> int | None:
    if isinstance(v, OpResult) and v.op.name == "upir.const" and isinstance(v.op.attributes.get("value"), int):
        value = v.op.attributes["value"]
        bits = int(v.type[1:]) if v.type[1:].isdigit() else 64
        return value - (1 << bits) if value >= 1 << (bits - 1) else value
    return None


def _disjoint_in_thread(intervals: list[tuple[int, int]], step: int) -> bool:
    """Whether stores at P + o (size n) for P = P0, P0 + step, ... never overlap one another
    (each location written once by the thread)."""
    if any(n > step for _, n in intervals):
        return False
    spans = sorted((o % step, n) for o, n in intervals)
    for (a, n), (b, _) in zip(spans, spans[1:]):
        if a + n > b:
            return False
    first, _ = spans[0]
    last, n = spans[-1]
    return last + n <= first + step


# --- the rewrite ------------------------------------------------------------------------------

def _clone(op: Operation, vmap: dict[Value, Value]) -> Operation:
    new = Operation(op.name, [vmap.get(o, o) for o in op.operands], [r.type for r in op.results],
                    {k: (list(v) if isinstance(v, list) else v) for k, v in op.attributes.items()
                     if k not in ("loop_order", "loop_accesses")})
    for r, n in zip(op.results, new.results):
        n.hint = r.hint
        vmap[r] = n
    return new


def _slice(header: Block, roots: list[Value], replaced: dict[Value, Operation]
           ) -> tuple[set[Operation], set[BlockArgument]] | None:
    """The ops and header arguments of the loop that `roots` need, following back edges,
    where the values in `replaced` are read back by a load of their store's address instead
    of computed (None when the slice would hold a side effect other than a read-only load)."""
    term = header.terminator
    assert term is not None
    back = term.successor_args[term.successors.index(header)]
    ops: set[Operation] = set()
    args: set[BlockArgument] = set()
    work = list(roots)
    while work:
        v = work.pop()
        if v in replaced:
            work.append(replaced[v].operands[0])
            continue
        if isinstance(v, BlockArgument) and v.block is header:
            if v not in args:
                args.add(v)
                work.append(back[v.index])
        elif isinstance(v, OpResult) and v.op.parent is header and v.op not in ops:
            op = v.op
            if not (info(op).pure or read_only_load(op)) or op.regions:
                return None
            ops.add(op)
            work.extend(op.operands)
    return ops, args


def _split(region: Region, header: Block, plan: _Plan, uniform: set[Value], sum_op: bool) -> Block:
    term = header.terminator
    assert term is not None
    line = term.attributes.get("line")
    back_index = term.successors.index(header)
    exit_index = 1 - back_index
    exit_block = term.successors[exit_index]
    back = term.successor_args[back_index]
    exit_args = term.successor_args[exit_index]
    # the edge into the loop from outside (exactly one)
    entries = [(b.terminator, k) for b in region.blocks if b is not header and b.terminator is not None
               for k, s in enumerate(b.terminator.successors) if s is header]
    assert len(entries) == 1
    entry_term, entry_k = entries[0]
    init = list(entry_term.successor_args[entry_k])
    # values of the loop read after it (by the exit edge or by other blocks)
    defined = set(header.args) | {r for op in header.ops for r in op.results}
    needed: list[Value] = []
    for v in exit_args:
        if v in defined and v not in needed:
            needed.append(v)
    for b in region.blocks:
        if b is header:
            continue
        for op in b.ops:
            for v in list(op.operands) + [x for a in op.successor_args for x in a]:
                if v in defined and v not in needed:
                    needed.append(v)
    roots = [back[a.index] for a in plan.sums] + [term.operands[0]] + needed
    reload_slice = _slice(header, roots, plan.terms)
    recompute_slice = _slice(header, roots, {})
    assert reload_slice is not None and recompute_slice is not None  # (_plan checked the ops)

    terms_loop, guard, reload_loop, recompute_loop, join = Block(), Block(), Block(), Block(), Block()

    # 1. the elementwise loop: the original loop without the sums
    kept = [a for a in header.args if a not in plan.sums]
    vmap1: dict[Value, Value] = {a: terms_loop.add_arg(a.type, a.hint) for a in kept}
    for op in header.ops[:-1]:
        if op not in plan.chain:
            terms_loop.append(_clone(op, vmap1))
    next1 = [vmap1.get(back[a.index], back[a.index]) for a in kept]
    succ1 = [terms_loop, guard] if back_index == 0 else [guard, terms_loop]
    sargs1 = [next1, []] if back_index == 0 else [[], next1]
    terms_loop.append(Operation("cf.cond_br", [vmap1.get(term.operands[0], term.operands[0])], [],
                                {"line": line, SUM_SPLIT: TERMS}, successors=succ1,
                                successor_args=sargs1))

    # 2. the guard: the thread's stores span no more than the distance to its neighbour's
    p0 = init[plan.pointer.index]
    p_end = vmap1[back[plan.pointer.index]]
    neighbour = _neighbour_value(p0, uniform, guard, line)
    assert neighbour is not None
    i64 = p0.type

    def emit(name: str, operands: list[Value], mods_: list[str], result: str = i64) -> Value:
        return guard.append(Operation(name, operands, [result], {"mods": mods_, "line": line})).results[0]

    def const(value: int, type_: str = i64) -> Value:
        bits = 64 if type_ == "i64" else 32
        return guard.append(Operation("upir.const", [], [type_], {"value": value % (1 << bits)})).results[0]

    span = emit("ptx.sub", [p_end, p0], ["s64"])
    span = emit("ptx.add", [span, const(plan.high - plan.low - plan.step)], ["s64"])
    distance = emit("ptx.sub", [neighbour, p0], ["s64"])
    apart = emit("ptx.setp", [span, distance], ["le", "s64"], "i1")
    for reg in ("%ntid.y", "%ntid.z"):
        n = guard.append(Operation("upir.special", [], ["i32"], {"reg": reg, "line": line})).results[0]
        one = emit("ptx.setp", [n, const(1, "i32")], ["eq", "u32"], "i1")
        apart = emit("ptx.and", [apart, one], ["pred"], "i1")

    # 3./4. the sums over the terms read back, and the fallback recomputing them
    def sum_loop(block: Block, sliced: tuple[set[Operation], set[BlockArgument]],
                 replaced: dict[Value, Operation], kind: str) -> list[Value]:
        ops, args = sliced
        order = [a for a in header.args if a in args]
        vmap: dict[Value, Value] = {a: block.add_arg(a.type, a.hint) for a in order}
        for op in header.ops[:-1]:
            if op in ops:
                block.append(_clone(op, vmap))
                continue
            for value in op.results:
                st = replaced.get(value)
                if st is None:
                    continue
                # the term read back where it was computed, from where the loop stored it
                load = Operation("ptx.ld", [vmap[st.operands[0]]], [value.type],
                                 {"mods": [m for m in mods(st) if m in _LOAD_MODS],
                                  "offset": st.attributes.get("offset", 0),
                                  "line": st.attributes.get("line")})
                block.append(load)
                vmap[value] = load.results[0]
        nexts = [vmap.get(back[a.index], back[a.index]) for a in order]
        succ = [block, join] if back_index == 0 else [join, block]
        leave = [vmap.get(v, v) for v in needed]
        sargs = [nexts, leave] if back_index == 0 else [leave, nexts]
        block.append(Operation("cf.cond_br", [vmap.get(term.operands[0], term.operands[0])], [],
                               {"line": line, SUM_SPLIT: kind}, successors=succ, successor_args=sargs))
        return [init[a.index] for a in order]

    op_form = _sum_op_form(plan, back, needed) if sum_op else None
    if op_form is None:
        reload_init = sum_loop(reload_loop, reload_slice, plan.terms, RELOAD)
    else:
        add, store = op_form
        total = Operation("upir.in_order_sum", [p0, p_end, init[plan.sums[0].index]],
                          [plan.sums[0].type],
                          {"mods": ["global", *mods(add)], "step": plan.step,
                           "offset": store.attributes.get("offset", 0),
                           "line": store.attributes.get("line"), SUM_SPLIT: RELOAD})
        total.results[0].hint = plan.sums[0].hint
        # alone between soft barriers: its thread loop has no inner loop, so LLVM vectorizes
        # it across the threads (the sum's vector variant, codegen/in_order_sums.py)
        soft = {"soft": True, "line": line, SUM_SPLIT: RELOAD}
        for op in (Operation("upir.barrier", [], [], dict(soft)), total,
                   Operation("upir.barrier", [], [], dict(soft)),
                   Operation("cf.br", [], [], {"line": line}, successors=[join],
                             successor_args=[[total.results[0]]])):
            reload_loop.append(op)
        reload_init = []
    recompute_init = sum_loop(recompute_loop, recompute_slice, {}, RECOMPUTE)
    # (span and distance are block-uniform: the trip count is, and the start is linear in
    # threadIdx.x with a block-uniform stride; so every thread takes the same way)
    guard.append(Operation("cf.cond_br", [apart], [], {"line": line, SUM_SPLIT: GUARD,
                                                       UNIFORM_CONDITION: True},
                           successors=[reload_loop, recompute_loop],
                           successor_args=[reload_init, recompute_init]))

    # 5. the join: the values read after the loop
    jmap = {v: join.add_arg(v.type, v.hint) for v in needed}
    join.append(Operation("cf.br", [], [], {"line": line}, successors=[exit_block],
                          successor_args=[[jmap.get(v, v) for v in exit_args]]))
    replace_uses_in((b for b in region.blocks if b is not header), jmap)
    # the entry edge now goes to the elementwise loop
    for v in init:
        v.uses.remove(entry_term)
    entry_term.successors[entry_k] = terms_loop
    entry_term.successor_args[entry_k] = [init[a.index] for a in kept]
    for v in entry_term.successor_args[entry_k]:
        v.uses.append(entry_term)
    for op in header.ops:
        op.drop_uses()
    at = region.blocks.index(header)
    region.blocks.pop(at)
    header.parent = None
    for b in (terms_loop, guard, reload_loop, recompute_loop, join):
        b.parent = region
        region.blocks.insert(at, b)
        at += 1
    return reload_loop


def _sum_op_form(plan: _Plan, back: list[Value], needed: list[Value]
                 ) -> tuple[Operation, Operation] | None:
    """(the add, the term's store) where the read-back is one `upir.in_order_sum`: a single
    sum, the only value read after the loop, made by one `add` rounded to nearest (`.ftz`
    allowed) of the sum and a term the loop stores to global memory at its pointer with a
    step of at least the term's size."""
    if len(plan.sums) != 1:
        return None
    total = plan.sums[0]
    final = back[total.index]
    if needed != [final] or not isinstance(final, OpResult) or plan.chain != {final.op}:
        return None
    add = final.op
    t = total.type
    if add.name != "ptx.add" or len(add.operands) != 2 or add.operands[0] is not total or \
            not set(mods(add)) <= {t, "rn", "ftz"} or ty(add) != t:
        return None
    store = plan.terms.get(add.operands[1])
    size = type_size(t)
    if store is None or ty(store) not in (t, f"b{8 * size}") or "global" not in mods(store) or \
            plan.step < size:
        return None
    return add, store


def _neighbour_computable(v: Value, uniform: set[Value]) -> bool:
    """Whether _neighbour_value can evaluate v for the next thread along x and v depends
    on threadIdx.x (through pure ops over block-uniform values)."""
    memo: dict[Value, str] = {}

    def walk(x: Value, depth: int) -> str:      # "same", "tid" or "no"
        if x in memo:
            return memo[x]
        out = "no"
        if x in uniform:
            out = "same"
        elif isinstance(x, OpResult) and depth <= _DEPTH:
            op = x.op
            if op.name == "upir.special":
                reg = op.attributes.get("reg")
                out = "tid" if reg == "%tid.x" else "same" if reg in ("%tid.y", "%tid.z") else "no"
            elif info(op).pure and not op.regions and not op.successors and len(op.results) == 1:
                kinds = [walk(o, depth + 1) for o in op.operands]
                out = "no" if "no" in kinds else "tid" if "tid" in kinds else "same"
        memo[x] = out
        return out
    return walk(v, 0) == "tid"


def _neighbour_value(v: Value, uniform: set[Value], block: Block, line: object,
                     memo: dict[Value, Value | None] | None = None, tid1: list[Value] | None = None,
                     depth: int = 0) -> Value | None:
    """v as the thread threadIdx.x + 1 computes it (ops appended to `block`), or None when v
    is not a function of threadIdx.x over block-uniform values and pure ops."""
    memo = {} if memo is None else memo
    tid1 = [] if tid1 is None else tid1
    if v in memo:
        return memo[v]
    result: Value | None = None
    if v in uniform:
        result = v
    elif isinstance(v, OpResult) and depth <= _DEPTH:
        op = v.op
        if op.name == "upir.special":
            reg = op.attributes.get("reg")
            if reg == "%tid.x":
                if not tid1:
                    one = block.append(Operation("upir.const", [], [v.type], {"value": 1})).results[0]
                    tid1.append(block.append(Operation("ptx.add", [v, one], [v.type],
                                                       {"mods": ["u32"], "line": line})).results[0])
                result = tid1[0]
            elif reg in ("%tid.y", "%tid.z"):
                result = v                  # (the same for the neighbour along x)
        elif info(op).pure and not op.regions and not op.successors and len(op.results) == 1:
            operands = [_neighbour_value(o, uniform, block, line, memo, tid1, depth + 1)
                        for o in op.operands]
            if all(o is not None for o in operands):
                if all(o is x for o, x in zip(operands, op.operands)):
                    result = v
                else:
                    result = block.append(_clone(op, dict(zip(op.operands, operands)))).results[0]  # type: ignore[arg-type]
    memo[v] = result
    return result


__all__ = ["GUARD", "RECOMPUTE", "RELOAD", "SUM_SPLIT", "TERMS", "SplitInOrderSums",
           "split_in_order_sums"]
