"""Counted loops of raise-structured-cf: `upir.while` ops that are `upir.for` ops.

Two shapes (transforms/structured_cf.py calls these on each while it builds, then on every
while of the raised body):

  * tested at the top: the before region is only `%c = setp iv, %ub` and
    `upir.condition(%c, its arguments)`, the after region yields `iv + %step` (`to_for`);
  * nvcc's rotated loop, tested at the bottom, under a guard that is its first test
    (`do_while_to_for`): `if (lb < ub) { pre-header; do { body; iv += step } while (iv < ub) }`.
    The do-while becomes `upir.for(lb, ub, step)` in the guard's arm, which keeps its
    pre-header (ops that run only when the loop does: moving them above the guard would
    change the code).  The for says so in its `do_while` attribute (ir/loop_guard.py), and
    the lowering (ir/structured.py) gives back the bottom-tested CFG, the add and the
    compare where they were; the verifier checks that the guard is still the first test.

In both, %ub and %step are defined outside the loop, the compare is an integer `setp` of
iv's type, the add has no carry or saturation, and the induction variable's final value is
not used after the loop: the loop runs exactly as the two instructions say, wrapping
included.  A while that is none of these stays a while; `do_while_to_for` says why."""

from __future__ import annotations

from cpuify.ir.core import Operation, OpResult, Region, Value
from cpuify.ir.loop_guard import DO_WHILE, guards_entry, integer_compare
from cpuify.ir.structured import UseEdits


def _inside(v: Value, op: Operation) -> bool:
    """Whether `v` is defined inside `op`'s regions."""
    blk = v.op.parent if isinstance(v, OpResult) else getattr(v, "block", None)
    while blk is not None and blk.parent is not None:
        owner = blk.parent.parent
        if owner is op:
            return True
        if owner is None:
            return False
        blk = owner.parent
    return False


_INT_COMPARE_TYPES = ("s16", "u16", "s32", "u32", "s64", "u64", "b16", "b32", "b64")


def to_for(loop: Operation, edits: UseEdits) -> bool:
    """Make `loop` (a upir.while just built) a upir.for when it counts: the before region
    is `%c = setp iv, %ub` and `upir.condition(%c, its arguments)`, the after region yields
    `iv + %step` for iv (one yield), %ub and %step are defined outside the loop, and the
    final iv is not used."""
    before, after = loop.regions
    if len(before.blocks) != 1 or len(after.blocks) < 1:
        return False
    head = before.entry
    if len(head.ops) != 2 or head.ops[0].name != "ptx.setp" or len(head.ops[0].operands) != 2:
        return False
    test, cond = head.ops
    if cond.operands[0] is not test.results[0] or list(cond.operands[1:]) != list(head.args) or \
            len(edits.uses(test.results[0])) != 1:
        return False
    mods = list(test.attributes.get("mods", ()))
    if not any(m in _INT_COMPARE_TYPES for m in mods) or any(m in ("and", "or", "xor") for m in mods):
        return False
    iv_before, bound = test.operands
    if iv_before not in head.args or _inside(bound, loop):
        return False
    k = head.args.index(iv_before)  # type: ignore[arg-type]
    if edits.uses(loop.results[k]):
        return False
    yields = [b.ops[-1] for b in after.blocks if b.ops and b.ops[-1].name == "upir.yield"]
    if len(yields) != 1:
        return False
    y = yields[0]
    iv = after.entry.args[k]
    nxt = y.operands[k]
    if not (isinstance(nxt, OpResult) and nxt.op.name == "ptx.add" and len(nxt.op.operands) == 2
            and nxt.op.operands[0] is iv and not _inside(nxt.op.operands[1], loop)
            and len(edits.uses(nxt)) == 1 and nxt.type == iv.type
            and not any(m in ("cc", "sat") for m in nxt.op.attributes.get("mods", ()))):
        return False
    if iv.type not in ("i16", "i32", "i64") or bound.type != iv.type:
        return False
    step_op = nxt.op
    step = step_op.operands[1]
    inits = list(loop.operands)
    attrs = dict(loop.attributes)
    attrs.update(predicate=mods, increment=list(step_op.attributes.get("mods", ())))
    if "line" in test.attributes:
        attrs["predicate_line"] = test.attributes["line"]
    if "line" in step_op.attributes:
        attrs["increment_line"] = step_op.attributes["line"]
    # the body: the after region, the induction variable its first argument
    edits.drop(step_op)
    step_op.parent.ops.remove(step_op)  # type: ignore[union-attr]
    step_op.parent = None
    removed = y.operands.pop(k)         # (the add's only use)
    edits.unuse(removed, y)
    entry = after.entry
    entry.args.insert(0, entry.args.pop(k))
    for i, a in enumerate(entry.args):
        a.index = i
    others = [v for i, v in enumerate(inits) if i != k]
    body = Region()
    for b in list(after.blocks):
        body.add_block(b)
    after.blocks = []
    for_op = Operation("upir.for", [inits[k], bound, step] + others,
                       [v.type for v in others], attrs, [body])
    holder = loop.parent
    assert holder is not None
    at = holder.ops.index(loop)
    for_op.parent = holder
    holder.ops[at] = for_op
    loop.parent = None
    results = [r for i, r in enumerate(loop.results) if i != k]
    for old, new in zip(results, for_op.results):
        edits.replace_all(old, new)
    for o in (test, cond):
        edits.drop(o)
    edits.drop(loop)
    return True




def _plain(op: Operation) -> bool:
    """An op whose attributes the lowering can rebuild (modifiers and PTX line only)."""
    return set(op.attributes) <= {"mods", "line"}


def do_while_to_for(loop: Operation, edits: UseEdits) -> str | None:
    """Make `loop`, a bottom-tested `upir.while` (its after region only yields), a
    `upir.for` when it counts from lb to ub under a guard that is its first test; None when
    done, else why not (in the words `cpuify explain` prints)."""
    before, after = loop.regions
    if len(after.blocks) != 1 or len(after.entry.ops) != 1 or after.entry.ops[0].name != "upir.yield":
        return "tested at the top"
    back = after.entry.ops[0]
    conds = [b.ops[-1] for b in before.blocks if b.ops and b.ops[-1].name == "upir.condition"]
    if len(conds) != 1:
        return "several exit tests"
    cond = conds[0]
    block = cond.parent
    assert block is not None
    test = cond.operands[0]
    if not (isinstance(test, OpResult) and test.op.name == "ptx.setp" and test.op.parent is block
            and len(test.op.operands) == 2 and len(test.op.results) == 1 and _plain(test.op)):
        return "exit test not a compare"
    mods = list(test.op.attributes.get("mods", ()))
    if integer_compare(mods) is None:
        return "exit test not an integer compare"
    nxt, bound = test.op.operands
    head = before.entry
    if not (isinstance(nxt, OpResult) and nxt.op.name == "ptx.add" and nxt.op.parent is block
            and len(nxt.op.operands) == 2 and _plain(nxt.op)
            and any(nxt.op.operands[0] is a for a in head.args)):
        return "exit test not on the induction variable plus a step"
    iv, step = nxt.op.operands
    if any(m in ("cc", "sat") for m in nxt.op.attributes.get("mods", ())) or \
            iv.type not in ("i16", "i32", "i64") or not (bound.type == step.type == nxt.type == iv.type):
        return "exit test not on the induction variable plus a step"
    if _inside(bound, loop) or _inside(step, loop):
        return "bound or step computed in the loop"
    if any(u is not cond for u in edits.uses(test)) or \
            any(u is not cond and u is not test.op for u in edits.uses(nxt)):
        return "induction variable's next value used in the body"
    k = next(i for i, a in enumerate(head.args) if a is iv)
    fwd = list(cond.operands[1:])
    carried = after.entry.args
    # the next iteration's induction variable is the add, and nothing else is
    stepped = back.operands[k]
    if not any(stepped is carried[j] and fwd[j] is nxt for j in range(len(fwd))):
        return "induction variable not stepped by its add"
    for j, v in enumerate(fwd):
        if v is nxt and (edits.uses(loop.results[j]) or
                         any(u is not back for u in edits.uses(carried[j])) or
                         sum(1 for o in back.operands if o is carried[j]) != 1):
            return "induction variable's next value used in the body"
    # each result used after the loop is a value the next iteration takes (a for's result)
    takes: dict[int, int] = {}
    for j, r in enumerate(loop.results):
        if edits.uses(r):
            i = next((i for i, o in enumerate(back.operands) if o is carried[j] and i != k), None)
            if i is None:
                return "value of the last iteration used after the loop"
            takes[j] = i
    holder = loop.parent
    assert holder is not None
    if holder.ops[0] is loop and list(loop.operands) == list(holder.args) and holder.args:
        return "loop entered from several places"     # (its header is that block again)
    if not guards_entry(loop, mods, loop.operands[k], bound):
        return "no guard that is its first test"
    # -- the for: the before region is its body, the condition its yield
    n = len(block.ops) - 1
    where = [k, n - block.ops.index(nxt.op), n - block.ops.index(test.op)]
    index = {id(a): j for j, a in enumerate(carried)}
    nexts = [fwd[index[id(v)]] if id(v) in index else v
             for i, v in enumerate(back.operands) if i != k]
    attrs = dict(loop.attributes)
    attrs.update(predicate=mods, increment=list(nxt.op.attributes.get("mods", ())))
    if "line" in test.op.attributes:
        attrs["predicate_line"] = test.op.attributes["line"]
    if "line" in nxt.op.attributes:
        attrs["increment_line"] = nxt.op.attributes["line"]
    attrs[DO_WHILE] = where
    for o in (cond, test.op, nxt.op):
        edits.drop(o)
        block.ops.remove(o)
        o.parent = None
    block.append(Operation("upir.yield", nexts, attributes=dict(cond.attributes)))
    head.args.insert(0, head.args.pop(k))
    for i, a in enumerate(head.args):
        a.index = i
    # (a soft barrier's lockstep counters: indices of the header's arguments, reordered too)
    for o in head.ops:
        if o.name == "upir.barrier" and o.attributes.get("lockstep"):
            o.attributes["lockstep"] = sorted(0 if i == k else i + 1 if i < k else i
                                              for i in o.attributes["lockstep"])
    inits = list(loop.operands)
    others = [i for i in range(len(inits)) if i != k]
    body = Region()
    for b in list(before.blocks):
        body.add_block(b)
    before.blocks = []
    for_op = Operation("upir.for", [inits[k], bound, step] + [inits[i] for i in others],
                       [inits[i].type for i in others], attrs, [body])
    holder.ops[holder.ops.index(loop)] = for_op
    for_op.parent = holder
    loop.parent = None
    for j, i in takes.items():
        edits.replace_all(loop.results[j], for_op.results[others.index(i)])
    edits.drop(back)
    edits.drop(loop)
    return None


def raise_do_while_fors(loops: list[Operation], edits: UseEdits) -> tuple[int, dict[str, int]]:
    """Each bottom-tested `upir.while` of `loops` (the whiles the raise built, once their
    guards are ifs) that is a counted loop under its guard made a `upir.for`: (how many,
    why the other whiles stayed whiles)."""
    made = 0
    kept: dict[str, int] = {}
    for loop in loops:
        why = do_while_to_for(loop, edits)
        if why is None:
            made += 1
        else:
            why = "not counted (tested at the top)" if why == "tested at the top" else why
            kept[why] = kept.get(why, 0) + 1
    return made, kept
