"""parallel-licm on the structured form: the kernel's invariant prefix read from the block
body's ops and the `upir.if`/`upir.while`/`upir.for` ops nested in it, without lowering.

The prefix is what transforms/licm.py hoists on the CFG, stated for regions: the block
body's leading ops, in order (following `cf.br` from a block to the next when that block has
no other way in), each of which

  * computes a launch-invariant value (`block_level`: block-invariant) from invariant
    operands: constants, parameters, module variables' addresses, pure arithmetic, loads of
    global/constant memory that are neither volatile nor ordered;
  * or is a whole structured op whose regions hold only such ops, whose conditions (an
    if's, a while's `upir.condition` tests, a for's bounds and step) are invariant and
    whose results are (a loop over parameters, as `sum(in, n)` in the paper's Fig. 1);
  * or, before the first structured op, pure arithmetic on the thread indices (it stays in
    the grid, recomputed there).

Nothing past a store, an atomic, a barrier, a warp collective, printf or a thread exit: the
first op that is none of the above ends it, with what precedes it since the last structured
op (straight-line code, which would be one block of the CFG with the op that ends it) left
in the grid too.  A value is invariant when the values passed into it (ir/structured.py
`forwarded_values`: initial values, yields, conditions, branch arguments) are; a for's
induction variable when its lower bound and step are.  The rewrite is transforms/licm.py's:
the prefix's blocks move to the `upir.launch_prologue` (or run on thread 0 of each block),
structured ops and all; lowered, the result is the CFG the pass makes of the lowered
kernel."""

from __future__ import annotations

from cpuify.ir.core import Block, Operation, OpResult, Region, Value
from cpuify.ir.dialects import STRUCTURED_OPS, info
from cpuify.ir.structured import EXIT_FLAGS, UseEdits, nested_blocks
from cpuify.ir.structured_values import merged_values


def structured_invariant_values(region: Region, block_level: bool = False) -> set[Value]:
    """licm.launch_invariant_values for a block body in structured form (or mixed)."""
    from cpuify.transforms.licm import _invariant_kind
    incoming = merged_values(region)
    blocks = list(nested_blocks(region))
    inv: set[Value] = set(incoming)           # optimistic for loop-carried and merged values
    for b in blocks:
        inv.update(b.args)
        for op in b.ops:
            if _invariant_kind(op, block_level):
                inv.update(op.results)
    changed = True
    while changed:
        changed = False
        for a, vals in incoming.items():
            if a in inv and not all(v in inv for v in vals):
                inv.discard(a)
                changed = True
        for b in blocks:
            for a in b.args:
                if a in inv and a not in incoming:
                    inv.discard(a)          # (a block no branch enters: nothing to merge)
                    changed = True
            for op in b.ops:
                if op.results and op.name not in STRUCTURED_OPS and op.results[0] in inv \
                        and not all(o in inv for o in op.operands):
                    inv.difference_update(op.results)
                    changed = True
    return inv


def _nested_ok(op: Operation, inv: set[Value], block_level: bool) -> bool:
    """The structured op `op` may move as a whole: everything in it is invariant."""
    from cpuify.transforms.licm import _invariant_kind
    if any(r not in inv for r in op.results):
        return False
    if op.name == "upir.if" and op.operands[0] not in inv:
        return False
    if op.name == "upir.for" and any(v not in inv for v in op.operands[:3]):
        return False
    for region in op.regions:
        for b in nested_blocks(region):
            if any(a not in inv for a in b.args):
                return False
            for o in b.ops:
                name = o.name
                if name in STRUCTURED_OPS:
                    if o.operands and name == "upir.if" and o.operands[0] not in inv or \
                            name == "upir.for" and any(v not in inv for v in o.operands[:3]) or \
                            any(r not in inv for r in o.results):
                        return False
                elif name in ("upir.yield", "cf.br"):
                    continue
                elif name in ("upir.condition", "cf.cond_br"):
                    if o.operands[0] not in inv:
                        return False
                elif not (o.results and all(r in inv for r in o.results)
                          and _invariant_kind(o, block_level)):
                    return False
    return True


def _conditions(op: Operation) -> list[Value]:
    """The values the branches of structured op `op` (at any depth) test, once lowered."""
    out: list[Value] = []
    for o in op.walk():
        if o.name == "upir.if":
            out.append(o.operands[0])
        elif o.name in ("upir.condition", "cf.cond_br"):
            out.append(o.operands[0])
        elif o.name == "upir.for":
            out.extend(o.operands[:3])      # (the header's test: iv from lb and step, ub)
    return out


def _data_dependent(v: Value, incoming: dict[Value, list[Value]], seen: set[Value]) -> bool:
    """Whether v depends on a kernel parameter, a load or a special register, through
    operands and merged values (a loop bound known only at run time)."""
    stack = [v]
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        if isinstance(x, OpResult) and x.op.name not in STRUCTURED_OPS:
            if x.op.name in ("upir.param", "ptx.ld", "ptx.ldu", "upir.special"):
                return True
            stack.extend(x.op.operands)
        else:
            stack.extend(incoming.get(x, ()))
    return False


class StructuredPrefix:
    """Where the prefix ends: `blocks` (the block body's blocks it takes whole, entry
    first), and either the block it continues to (`cont`, entered from the last of them by
    its `cf.br`) or a place in the middle of the last block (`split`: the index of the first
    op that stays, right after a structured op)."""
    __slots__ = ("blocks", "cont", "split", "entry_ops", "items")

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.cont: Block | None = None
        self.split: int | None = None
        self.entry_ops: set[Operation] = set()
        self.items: list[Operation] = []


def find_structured_prefix(region: Region, inv: set[Value],
                           block_level: bool = False) -> StructuredPrefix | None:
    """The invariant prefix of a block body in structured form (module doc), or None when
    it holds no loop worth hoisting (none, or only loops of constant trip counts), or ends
    where the rewrite cannot take it (a branch on an invariant condition left as CFG)."""
    from cpuify.transforms.licm import _invariant_kind
    entry = region.entry
    preds: dict[Block, int] = {}
    for b in region.blocks:
        for s in b.successors:
            preds[s] = preds.get(s, 0) + 1
    if preds.get(entry):
        return None
    out = StructuredPrefix()
    block: Block = entry
    in_entry = True             # before the first structured op: thread arithmetic may stay
    boundary = (entry, 0)       # the last place a block of the lowered CFG starts
    taken: list[Operation] = []     # the ops in the prefix, in order
    mark = 0                        # len(taken) at the boundary
    while True:
        out.blocks.append(block)
        stop = False
        for i, op in enumerate(block.ops):
            name = op.name
            if name in STRUCTURED_OPS:
                if EXIT_FLAGS in op.attributes or not _nested_ok(op, inv, block_level):
                    stop = True
                    break
                taken.append(op)
                in_entry = False
                boundary, mark = (block, i + 1), len(taken)
                continue
            if name == "cf.br":
                nxt = op.successors[0]
                if preds.get(nxt, 0) != 1 or nxt is entry or nxt in out.blocks:
                    return None
                if any(v not in inv for v in op.successor_args[0]):
                    return None         # (lowered, the edge out of the prefix passes them)
                taken.append(op)
                block = nxt
                in_entry = False
                boundary, mark = (nxt, 0), len(taken)
                break
            if name == "cf.cond_br":
                if op.operands[0] in inv:
                    return None         # (a branch left as CFG: the rewrite takes no part of it)
                stop = True
                break
            if info(op).terminator:
                stop = True             # (a thread exit: nothing after the prefix to go to)
                break
            if op.results and all(r in inv for r in op.results) and _invariant_kind(op, block_level):
                taken.append(op)
                if in_entry:
                    out.entry_ops.add(op)
                continue
            if in_entry and info(op).pure and not op.regions and name != "upir.const":
                taken.append(op)
                out.entry_ops.add(op)
                continue
            stop = True
            break
        if stop:
            break
    at_block, at = boundary
    if at_block is entry and at == 0:
        return None
    if at == 0:
        # the prefix's last block is the one that branches to `at_block`
        out.blocks = out.blocks[:out.blocks.index(at_block)]
        out.cont = at_block
    else:
        out.blocks = out.blocks[:out.blocks.index(at_block) + 1]
        out.split = at
    out.items = taken[:mark]
    if not any(o.name in ("upir.while", "upir.for") for op in out.items
               if op.name in STRUCTURED_OPS for o in op.walk()):
        return None                     # straight-line code: not worth hoisting
    incoming = merged_values(region)
    seen: set[Value] = set()
    if not any(_data_dependent(c, incoming, seen)
               for op in out.items if op.name in STRUCTURED_OPS for c in _conditions(op)):
        return None                     # every loop runs a fixed, small trip count
    if out.cont is not None and out.cont.args:
        term = out.blocks[-1].ops[-1]
        if any(v not in inv for v in term.successor_args[0]):
            return None
    out.entry_ops = {op for op in out.entry_ops if op in set(out.items)}
    return out


def split_after(block: Block, at: int) -> Block:
    """Move `block.ops[at:]` to a new block whose arguments take the results of the
    structured op before them (as the lowering's continuation block does), and end `block`
    with a `cf.br` to it passing them; returns the new block (not yet in any region)."""
    op = block.ops[at - 1]
    cont = Block([r.type for r in op.results])
    edits = UseEdits()
    moved = block.ops[at:]
    del block.ops[at:]
    for o in moved:
        cont.append(o)
    inside = set(cont.ops)
    for r, a in zip(op.results, cont.args):
        for user in list(r.uses):
            if _within(user, inside):
                edits.replace_operand(user, r, a)
    edits.flush()
    block.append(Operation("cf.br", [], [], {}, successors=[cont],
                           successor_args=[list(op.results)]))
    return cont


def _within(op: Operation, tops: set[Operation]) -> bool:
    """Whether `op` is one of `tops` or nested in one."""
    node: Operation | None = op
    while node is not None:
        if node in tops:
            return True
        blk = node.parent
        region = blk.parent if blk is not None else None
        node = region.parent if region is not None else None
    return False



def structured_plan(region: Region, inv: set[Value], block_level: bool = False):  # type: ignore[no-untyped-def]
    """The prefix as transforms/licm.py's plan (`_Prefix`), or None.  A prefix that ends in
    the middle of a block is split there when the rewrite begins (`commit`)."""
    from cpuify.transforms.licm import _Prefix
    sp = find_structured_prefix(region, inv, block_level)
    if sp is None:
        return None
    prefix = sp.blocks
    in_prefix = set(prefix)
    last = prefix[-1]
    rest = last.ops[sp.split:] if sp.split is not None else []
    split_op = last.ops[sp.split - 1] if sp.split is not None else None
    defined_in: dict[Value, Block] = {}
    for b in prefix:
        ops = b.ops if b is not last or sp.split is None else b.ops[:sp.split]
        defined_in.update((a, b) for a in b.args)
        for op in ops:
            for inner in op.walk():
                for r in inner.results:
                    defined_in[r] = b
                for region_ in inner.regions:
                    for nb in region_.blocks:
                        defined_in.update((a, b) for a in nb.args)
    outside = [b for b in region.blocks if b not in in_prefix]
    needed: dict[Value, None] = {}
    skip = set(split_op.results) if split_op is not None else set()

    def scan(op: Operation) -> None:
        for inner in op.walk():
            for v in [*inner.operands, *(x for args in inner.successor_args for x in args)]:
                if v in defined_in and v not in skip:
                    needed[v] = None

    for b in outside:
        for op in b.ops:
            scan(op)
    for op in rest:
        scan(op)
    thread_ops = [op for op in sp.entry_ops
                  if not (op.results and all(r in inv for r in op.results))]
    body = [nb for b in outside for nb in nested_blocks_of(b)]
    if sp.cont is not None:
        plan = _Prefix(prefix, sp.cont, [(last, 0)], thread_ops, defined_in, needed, body)
    else:
        plan = _Prefix(prefix, None, [], thread_ops, defined_in, needed, body)  # type: ignore[arg-type]
        plan.cont_types = [r.type for r in split_op.results]  # type: ignore[union-attr]

        def commit() -> None:
            at = sp.split
            assert at is not None
            cont = split_after(last, at)
            cont.parent = region
            region.blocks.insert(region.blocks.index(last) + 1, cont)
            plan.cont = cont
            plan.exits = [(last, 0)]
            plan.body_blocks = list(nested_blocks_of(cont)) + plan.body_blocks
        plan.commit = commit
    plan.entry_ops = set(sp.entry_ops)
    plan.count = sum(len(nested_blocks_of(b)) for b in prefix)
    return plan


def nested_blocks_of(block: Block) -> list[Block]:
    """`block` and the blocks of the structured ops in it, at any depth."""
    out = [block]
    for op in block.ops:
        if op.name in STRUCTURED_OPS:
            for r in op.regions:
                out.extend(nested_blocks(r))
    return out
