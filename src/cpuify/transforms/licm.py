"""Parallel loop-invariant code motion out of the grid (Polygeist paper, IV-C).

    __global__ void normalize(float *out, const float *in, int n) {
        float total = sum(in, n);                 // the same in every thread of the launch
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = in[i] / total;
    }

Every thread computes `sum(in, n)`: O(n) work per thread, O(n^2) per launch.  The loop's
operands are kernel parameters and what it reads is global memory that nothing in the kernel
writes before it, so its result is the same in every thread of every block.  The paper's
argument makes hoisting legal: the iterations of a parallel loop may run in lock step, so an
instruction may move out of it when its operands are invariant and no instruction *before*
it in the parallel loop conflicts with it; instructions after it need no check.

This pass hoists the kernel's invariant *prefix*: the blocks from the kernel's start that
compute only launch-invariant values (constants, parameters, addresses of module variables,
pure arithmetic on those, loads of global/constant memory through invariant addresses,
branches on invariant conditions) and that every thread runs before anything else.  They
move to a `upir.launch_prologue` region, run once per launch by one thread before any
block; the values the grid needs travel in the launch's parameter buffer (`upir.launch_store`
there, `upir.param` in the grid), or are recomputed in the grid when they are cheap
(constants, parameters and arithmetic on them).  Thread-dependent arithmetic of the
prologue's first block (`blockIdx.x * blockDim.x + threadIdx.x`) stays in the grid.

A prefix whose values depend on the block (`blockIdx`, `blockDim`: a row's sum in a
kernel with a block per row) is hoisted one level less far (hoist_block_invariant_prefix):
thread 0 of each block runs it and hands the values over in shared memory.

Only prefixes with a loop are hoisted (straight-line invariant code costs little per thread,
and LLVM already computes it once per thread loop).  Nothing is hoisted past a store, an
atomic, a barrier, a warp collective, printf, a volatile or ordered load, or a thread exit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar

from cpuify.analysis.cfg import incoming_values
from cpuify.ir.core import Block, OpResult, Operation, Region, Value, replace_uses_in
from cpuify.ir.dialects import info
from cpuify.ir.structure import block_body, grid_parallel, launch_prologue
from cpuify.ir.structured_values import has_nested_structure
from cpuify.analysis.manager import AnalysisManager
from cpuify.transforms.pass_manager import register
from cpuify.ir.modifiers import ORDERED as _ORDERED

#: how deep an expression is recomputed in the grid instead of being passed in a slot
_REMAT_DEPTH = 6
#: parameter-buffer types of the values passed from the prologue to the grid
_SLOT_TYPE = {"i8": "b8", "i16": "b16", "i32": "b32", "i64": "b64", "f32": "f32", "f64": "f64"}


@register("parallel-licm", "blocks of invariant code (with a loop) hoisted: out of the grid "
                           "into a launch prologue (run once per launch), or, when they depend "
                           "on the block, run by one thread per block")
@dataclass(frozen=True)
class ParallelLICM:
    """Pass: hoist the kernel's launch-invariant prefix into `upir.launch_prologue`."""
    name: str = "parallel-licm"
    #: the CFG, or the structured form (the prefix read from the regions, licm_structured.py)
    form: ClassVar[str] = "any"
    block_level: bool = True        # also hoist block-invariant prefixes (one thread per block)

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of blocks hoisted."""
        return hoist_launch_invariant_prefix(kernel) or \
            (hoist_block_invariant_prefix(kernel) if self.block_level else 0)


def _space(op: Operation) -> str:
    mods = op.attributes.get("mods", ())
    for s in ("global", "const", "shared", "local", "param"):
        if s in mods:
            return s
    return "generic"


#: special registers that are the same in every thread of a block
_BLOCK_SPECIALS = ("%ctaid", "%nctaid", "%ntid")


def _invariant_kind(op: Operation, block_level: bool = False) -> bool:
    """Whether op computes a launch-invariant value when its operands are invariant
    (`block_level`: a value the same in every thread of one block)."""
    name = op.name
    if block_level and name == "upir.special":
        return str(op.attributes.get("reg", "")).split(".")[0] in _BLOCK_SPECIALS
    if name in ("upir.const", "upir.param"):
        return True
    if name == "upir.addressof":
        return op.attributes.get("space") in ("global", "const", "param")
    if name in ("ptx.ld", "ptx.ldu"):
        mods = set(op.attributes.get("mods", ()))
        # generic addresses computed from parameters and module variables point to global
        # memory (a shared or local address would need a cvta of a non-invariant value)
        return _space(op) in ("global", "const", "generic") and not (mods & _ORDERED)
    if name == "ptx.cvta":
        return "local" not in op.attributes.get("mods", ()) and "shared" not in op.attributes.get("mods", ())
    return name.startswith("ptx.") and info(op).pure and not op.regions


def launch_invariant_values(region: Region, block_level: bool = False) -> set[Value]:
    """Values of `region` that are the same in every thread of a launch (`block_level`: of
    a block), as long as no write to global memory happens before them (the caller checks
    that)."""
    incoming = incoming_values(region)
    inv: set[Value] = set()
    for b in region.blocks:
        inv.update(b.args)                  # optimistic for loop-carried values
        for op in b.ops:
            if _invariant_kind(op, block_level):
                inv.update(op.results)
    changed = True
    while changed:
        changed = False
        for b in region.blocks:
            for a in b.args:
                if a in inv and not all(v in inv for v in incoming.get(a, [])):
                    inv.discard(a)
                    changed = True
            for op in b.ops:
                if op.results and op.results[0] in inv and not all(o in inv for o in op.operands):
                    inv.difference_update(op.results)
                    changed = True
    return inv


@dataclass
class _Prefix:
    """The kernel's invariant prefix: its blocks (entry first), the one block it leaves
    to, the edges leaving it, the entry's thread-dependent ops, the prefix's values and
    which of them the rest of the kernel uses (`body_blocks`: the blocks that may use them,
    nested ones included).  `entry_ops`: the ops of the CFG's entry block (recomputed in
    the grid where cheap); `cont_types`: the types of `cont`'s arguments; `commit`: what
    makes `cont` and `exits` when the rewrite begins (a structured prefix that ends in the
    middle of a block, licm_structured.py)."""
    blocks: list[Block]
    cont: Block
    exits: list[tuple[Block, int]]
    thread_ops: list[Operation]
    defined_in: dict[Value, Block]
    needed: dict[Value, None]
    body_blocks: list[Block]
    entry_ops: set[Operation] = field(default_factory=set)
    cont_types: list[str] = field(default_factory=list)
    commit: Callable[[], None] | None = None
    #: what the pass reports: the blocks hoisted (nested ones of structured ops included)
    count: int = 0

    def __post_init__(self) -> None:
        self.count = self.count or len(self.blocks)
        if self.cont is not None and not self.cont_types:
            self.cont_types = [a.type for a in self.cont.args]
        if not self.entry_ops and self.blocks:
            self.entry_ops = set(self.blocks[0].ops)


def _invariant_prefix(region: Region, inv: set[Value], block_level: bool = False) -> _Prefix | None:
    entry = region.entry

    def block_ok(b: Block) -> bool:
        term = b.terminator
        if term is None or term.name not in ("cf.br", "cf.cond_br"):
            return False
        if term.name == "cf.cond_br" and term.operands[0] not in inv:
            return False
        if any(a not in inv for a in b.args):
            return False
        for op in b.ops[:-1]:
            if op.results and all(r in inv for r in op.results) and _invariant_kind(op, block_level):
                continue
            # thread-dependent pure arithmetic may stay behind, in the first block only
            if b is entry and info(op).pure and not op.regions and op.name != "upir.const":
                continue
            return False
        return True

    # the prefix: blocks reachable from the entry through blocks that qualify
    if not block_ok(entry):
        return None
    prefix: list[Block] = []
    seen = {entry}
    stack = [entry]
    while stack:
        b = stack.pop()
        prefix.append(b)
        for s in b.successors:
            if s not in seen and block_ok(s) and s is not entry:
                seen.add(s)
                stack.append(s)
    in_prefix = set(prefix)
    exits = [(b, k) for b in prefix for k, s in enumerate(b.successors) if s not in in_prefix]
    targets = {b.successors[k] for b, k in exits}
    if len(targets) != 1 or any(entry in b.successors for b in prefix):
        return None
    (cont,) = targets
    if not _has_cycle(prefix, in_prefix):
        return None                     # straight-line code: not worth hoisting
    if not any(b.terminator.name == "cf.cond_br" and _data_dependent(b.terminator.operands[0])  # type: ignore[union-attr]
               for b in prefix):
        # every branch compares constants: a loop of a fixed, small trip count (nvcc
        # unrolls the rest) costs each thread little, less than a prologue or a barrier
        return None
    for b, k in exits:
        if any(x not in inv for x in b.terminator.successor_args[k]):  # type: ignore[union-attr]
            return None
    thread_ops = [op for op in entry.ops[:-1] if not (op.results and all(r in inv for r in op.results))]
    defined_in = {v: b for b in prefix for v in [*b.args, *(r for op in b.ops for r in op.results)]}
    body_blocks = [b for b in region.blocks if b not in in_prefix]
    needed: dict[Value, None] = {}
    for b in body_blocks:
        for op in b.ops:
            for v in [*op.operands, *(x for args in op.successor_args for x in args)]:
                if v in defined_in:
                    needed[v] = None
    return _Prefix(prefix, cont, exits, thread_ops, defined_in, needed, body_blocks)


def hoist_launch_invariant_prefix(kernel: Operation) -> int:
    if launch_prologue(kernel) is not None:
        return 0
    region = block_body(kernel)
    entry = region.entry
    inv, plan = _plan(region, block_level=False)
    if plan is None:
        return 0
    prefix = plan.blocks
    needed = plan.needed

    # the grid's new entry: recomputed values and slot loads, then a jump to `cont`
    new_entry = Block()
    base = _align(_align(int(kernel.attributes.get("param_size", 0)), 8) + 8, 8)
    slots: dict[Value, int] = {}
    replacement: dict[Value, Value] = {}

    def slot_of(v: Value) -> Value | None:
        if v.type not in _SLOT_TYPE:
            return None
        if v not in slots:
            slots[v] = base + 8 * len(slots)
        load = Operation("upir.param", [], [v.type],
                         {"offset": slots[v], "type": _SLOT_TYPE[v.type], "hoisted": True})
        new_entry.append(load)
        return load.results[0]

    for v in needed:
        if _copy_of(v, plan, inv, new_entry, slot_of, replacement) is None:
            return 0                    # (the ops appended to new_entry are discarded)
    # values entering `cont` from the prefix: one slot per argument of the merge block
    merge = Block(list(plan.cont_types))
    cont_args: list[Value] = []
    for a in merge.args:
        if a.type not in _SLOT_TYPE:
            return 0
        slots[a] = base + 8 * len(slots)
        load = Operation("upir.param", [], [a.type],
                         {"offset": slots[a], "type": _SLOT_TYPE[a.type], "hoisted": True})
        new_entry.append(load)
        cont_args.append(load.results[0])

    # --- rewrite: nothing above changed the IR ---
    if plan.commit is not None:
        plan.commit()
    cont, exits = plan.cont, plan.exits
    replace_uses_in(plan.body_blocks, replacement)
    new_entry.append(Operation("cf.br", [], [], {}, successors=[cont], successor_args=[cont_args]))
    for b, k in exits:
        b.terminator.successors[k] = merge  # type: ignore[union-attr]
    for v, off in slots.items():
        if v in merge.args:
            continue
        merge.append(Operation("upir.launch_store", [v], [], {"offset": off}))
    for a in merge.args:
        merge.append(Operation("upir.launch_store", [a], [], {"offset": slots[a]}))
    merge.append(Operation("upir.exit"))
    # the thread-dependent ops left in the prologue are dead there
    _drop_dead_thread_ops(entry, inv)

    prologue_region = Region()
    for b in prefix:
        region.blocks.remove(b)
    for b in prefix:                    # (the entry is first)
        prologue_region.add_block(b)
    prologue_region.add_block(merge)
    region.blocks.insert(0, new_entry)
    new_entry.parent = region
    prologue = Operation("upir.launch_prologue", regions=[prologue_region])
    top = kernel.regions[0].entry
    grid = grid_parallel(kernel)
    prologue.parent = top
    top.ops.insert(top.ops.index(grid), prologue)
    kernel.attributes["launch_bytes"] = 8 * len(slots)
    kernel.attributes["launch_offset"] = base
    return plan.count


def hoist_block_invariant_prefix(kernel: Operation) -> int:
    """The Polygeist paper's other variant of Fig. 1, for a prefix whose values depend on
    the block (`blockIdx`, `blockDim`): thread 0 of each block runs it and leaves the values
    the rest of the kernel uses in a `__shared__` variable of the pass's own, behind a
    barrier all threads reach (added barriers are always legal: the prefix comes first and
    no thread exits in it).  O(n) work per block instead of O(n) per thread; in code
    specialized for a block shape the prefix's segment runs thread 0 only."""
    region = block_body(kernel)
    entry = region.entry
    inv, plan = _plan(region, block_level=True)
    if plan is None:
        return 0
    symbol = f"__cpuify_hoisted_{kernel.attributes.get('sym_name', 'k')}"
    join = Block()
    slots: dict[Value, int] = {}
    replacement: dict[Value, Value] = {}
    address = Operation("upir.addressof", [], ["i64"], {"symbol": symbol, "space": "shared"})
    join.append(Operation("upir.barrier", [], [], {"mods": ["sync"], "hoisted": True}))
    join.append(address)

    def from_shared(v: Value) -> Value | None:
        if v.type not in _SLOT_TYPE:
            return None
        if v not in slots:
            slots[v] = 8 * len(slots)
        load = Operation("ptx.ld", [address.results[0]], [v.type],
                         {"mods": ["shared", _SLOT_TYPE[v.type]], "offset": slots[v]})
        join.append(load)
        return load.results[0]

    for v in plan.needed:
        if _copy_of(v, plan, inv, join, from_shared, replacement) is None:
            return 0
    merge = Block(list(plan.cont_types))
    cont_args: list[Value] = []
    for a in merge.args:
        got = from_shared(a)
        if got is None:
            return 0
        cont_args.append(got)
    # --- rewrite: nothing above changed the IR ---
    if plan.commit is not None:
        plan.commit()
    replace_uses_in(plan.body_blocks, replacement)
    join.append(Operation("cf.br", [], [], {}, successors=[plan.cont], successor_args=[cont_args]))
    for b, k in plan.exits:
        b.terminator.successors[k] = merge  # type: ignore[union-attr]
    store_base = Operation("upir.addressof", [], ["i64"], {"symbol": symbol, "space": "shared"})
    merge.append(store_base)
    for v, off in slots.items():
        merge.append(Operation("ptx.st", [store_base.results[0], v], [],
                               {"mods": ["shared", _SLOT_TYPE[v.type]], "offset": off}))
    merge.append(Operation("cf.br", [], [], {}, successors=[join]))
    # thread 0 runs the prefix; the others go straight to the barrier
    guard = Block()
    tids = []
    for axis in "xyz":
        tids.append(guard.append(Operation("upir.special", [], ["i32"],
                                           {"reg": f"%tid.{axis}"})).results[0])
    any_tid = guard.append(Operation("ptx.or", [tids[0], tids[1]], ["i32"], {"mods": ["b32"]}))
    any_tid = guard.append(Operation("ptx.or", [any_tid.results[0], tids[2]], ["i32"],
                                     {"mods": ["b32"]}))
    zero = guard.append(Operation("upir.const", [], ["i32"], {"value": 0}))
    first = guard.append(Operation("ptx.setp", [any_tid.results[0], zero.results[0]], ["i1"],
                                   {"mods": ["eq", "s32"]}))
    guard.append(Operation("cf.cond_br", [first.results[0]], [], {},
                           successors=[entry, join], successor_args=[[], []]))
    region.blocks.insert(0, guard)
    guard.parent = region
    region.add_block(merge)
    region.add_block(join)
    _drop_dead_thread_ops(entry, inv)
    decl = Operation("upir.global", attributes={
        "sym_name": symbol, "space": "shared", "type": "b8", "line": 0, "align": 8,
        "dims": [8 * len(slots)], "linkage": "", "vector": 1})
    top = kernel.regions[0].entry
    decl.parent = top
    top.ops.insert(0, decl)
    return plan.count


def _plan(region: Region, block_level: bool) -> tuple[set[Value], _Prefix | None]:
    """The invariant values and the prefix of a block body, read from the CFG or, where it
    holds structured ops, from their regions (licm_structured.py)."""
    if has_nested_structure(region):
        from cpuify.transforms.licm_structured import structured_invariant_values, structured_plan
        inv = structured_invariant_values(region, block_level)
        return inv, structured_plan(region, inv, block_level)
    inv = launch_invariant_values(region, block_level)
    return inv, _invariant_prefix(region, inv, block_level)


def _copy_of(v: Value, plan: _Prefix, inv: set[Value], into: Block,
             handed_over: "Callable[[Value], Value | None]", replacement: dict[Value, Value],
             depth: int = 0) -> Value | None:
    """The copy of prefix value v where the rest of the kernel runs: recomputed in `into`
    (thread-dependent arithmetic of the prefix's first block, cheap invariant arithmetic),
    else as `handed_over` gets it (a slot of the parameter buffer, a shared variable).
    None when neither can."""
    got = replacement.get(v)
    if got is not None:
        return got
    new: Value | None = None
    if isinstance(v, OpResult) and v.op in plan.entry_ops and (
            v.op in plan.thread_ops or _cheap(v.op, inv)) and depth <= _REMAT_DEPTH:
        operands = []
        for o in v.op.operands:
            x = _copy_of(o, plan, inv, into, handed_over, replacement, depth + 1) \
                if o in plan.defined_in else o
            if x is None:
                break
            operands.append(x)
        else:
            clone = Operation(v.op.name, operands, [r.type for r in v.op.results],
                              dict(v.op.attributes))
            into.append(clone)
            new = clone.results[v.index]
    if new is None and v in inv:
        new = handed_over(v)
    if new is not None:
        replacement[v] = new
    return new


def _data_dependent(v: Value, depth: int = 0) -> bool:
    """Whether v depends on a kernel parameter, a load or a special register (a loop bound
    known only at run time)."""
    if depth > 16:
        return False
    if not isinstance(v, OpResult):
        return _arg_data_dependent(v, depth)
    if v.op.name in ("upir.param", "ptx.ld", "ptx.ldu", "upir.special"):
        return True
    return any(_data_dependent(o, depth + 1) for o in v.op.operands)


def _arg_data_dependent(v: Value, depth: int) -> bool:
    """A block argument (a loop counter): data dependent when a value flowing into it is."""
    from cpuify.ir.core import BlockArgument
    if not isinstance(v, BlockArgument) or depth > 8:
        return False
    region = v.block.parent
    if region is None:
        return False
    for b in region.blocks:
        term = b.terminator
        if term is None:
            continue
        for succ, args in zip(term.successors, term.successor_args):
            if succ is v.block and args[v.index] is not v and \
                    isinstance(args[v.index], OpResult) and _data_dependent(args[v.index], depth + 4):
                return True
    return False


def _cheap(op: Operation, inv: set[Value]) -> bool:
    """Recomputing op in every thread costs about as much as loading it."""
    return op.name in ("upir.const", "upir.param", "upir.addressof", "ptx.cvta", "ptx.mov",
                       "ptx.add", "ptx.sub", "ptx.mul", "ptx.shl", "ptx.cvt", "ptx.and", "ptx.or")


def _drop_dead_thread_ops(entry: Block, inv: set[Value]) -> None:
    """Remove the pure thread-dependent ops of `entry` nothing uses any more (in one
    backward pass: an op's users come after it)."""
    dead: set[Operation] = set()
    for op in reversed(entry.ops[:-1]):
        if info(op).pure and op.results and not all(r in inv for r in op.results) and \
                all(user in dead for r in op.results for user in r.uses):
            dead.add(op)
    for op in dead:
        op.drop_uses()
    entry.ops = [op for op in entry.ops if op not in dead]


def _has_cycle(blocks: list[Block], members: set[Block]) -> bool:
    color: dict[Block, int] = {}
    for start in blocks:
        if start in color:
            continue
        stack = [(start, iter(start.successors))]
        color[start] = 1
        while stack:
            b, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[b] = 2
                stack.pop()
            elif nxt in members:
                c = color.get(nxt, 0)
                if c == 1:
                    return True
                if c == 0:
                    color[nxt] = 1
                    stack.append((nxt, iter(nxt.successors)))
    return False


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


__all__ = ["ParallelLICM", "hoist_launch_invariant_prefix", "launch_invariant_values"]
