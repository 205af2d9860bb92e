"""raise-structured-cf: loops with several exits as `upir.while` (a `break`, a `return` or
trap inside the loop, an exit that is not on every iteration).

The whole loop body is the while's `before` region and its `after` region only passes the
next iteration's values back (the form of a do-while).  Every edge that leaves the body
becomes a `upir.condition`: a back edge to the header continues (true) with the header's
arguments, an exit edge leaves (false) with

  * one i1 flag per exit target but the first, naming the target (the flag of target k is
    true, those before it false; all false: the first target),
  * the arguments of its target block, in that target's slots,
  * the values of the loop used after it, where the exiting block has them (dominance),

and `upir.undef` in every slot the edge does not fill (as MLIR's `ub.poison`).  A latch
`cf.cond_br %c, ^header(..), ^exit(..)` is one condition on %c carrying both; any other
branch's edge out goes to a new block holding only its condition.  After the op, the
holder block branches to the one exit target, or dispatches on the flags with a chain of
`cf.cond_br` marked `exit_dispatch` (Polygeist/MLIR's loop-carried exit kind and dispatch
after the loop; the dispatch stays a branch of the enclosing CFG, since a target such as
the block that ends the thread is no region).  The raise never rewrites a dispatch branch
in place (an enclosing if, loop or holder takes its edges through blocks of their own), so
the lowering finds it right after its while.  ir/structured.py lowers the op back: each
condition branches straight to the target its flags name, with the values in that
target's slots, so the CFG is the one the raise found."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cpuify.ir.core import Block, Operation, Region, Value, ancestor_in
from cpuify.ir.structured import EXIT_DISPATCH, EXIT_FLAGS, NEGATED_EXIT, RAISED_EDGE

if TYPE_CHECKING:
    from cpuify.transforms.structured_cf import _Raiser


def _defined_in(block: Block) -> list[Value]:
    out: list[Value] = list(block.args)
    for op in block.ops:
        out.extend(op.results)
    return out


class _Slots:
    """The condition operands of one edge out of the loop: ops made for constants and
    undefined slots go to `made` (placed before the condition, marked RAISED_EDGE)."""

    def __init__(self, types: list[str]) -> None:
        self.types = types
        self.made: list[Operation] = []
        self.vals: list[Value | None] = [None] * len(types)
        self._consts: dict[tuple[str, int], Value] = {}

    def const(self, type_: str, value: int) -> Value:
        key = (type_, value)
        if key not in self._consts:
            op = Operation("upir.const", [], [type_], {"value": value, RAISED_EDGE: None})
            self.made.append(op)
            self._consts[key] = op.results[0]
        return self._consts[key]

    def operands(self) -> list[Value]:
        out: list[Value] = []
        for t, v in zip(self.types, self.vals):
            if v is None:
                op = Operation("upir.undef", [], [t], {RAISED_EDGE: None})
                self.made.append(op)
                v = op.results[0]
            out.append(v)
        return out


def raise_multi_exit_loop(r: _Raiser, header: Block, body: set[Block],
                          outside: list[Block]) -> str | None:
    """Raise the natural loop `body` (entered only at `header`, from the blocks `outside`)
    as a `upir.while` with its exit dispatch; returns why not (then nothing changed)."""
    order = [header]
    seen = {header}
    stack = [header]
    while stack:
        b = stack.pop()
        term = b.terminator
        if term is None or term.name not in ("cf.br", "cf.cond_br"):
            return "loop block that ends the thread"
        for s in term.successors:
            if s in body and s not in seen:
                seen.add(s)
                order.append(s)
                stack.append(s)
    if len(order) != len(body):
        return "loop changed shape"
    targets: list[Block] = []
    for b in order:
        for s in b.successors:
            if s not in body and s not in targets:
                targets.append(s)
    if not targets:
        return "loop with no exit"
    flags = len(targets) - 1
    types = ["i1"] * flags
    at_target: dict[Block, int] = {}
    for t in targets:
        at_target[t] = len(types)
        types += [a.type for a in t.args]
    at_header = len(types)
    types += [a.type for a in header.args]
    # values of the loop used after it (not through the exit edges' arguments)
    outer: dict[Value, list[Operation]] = {}
    home: dict[Value, Block] = {}
    for b in order:
        for v in _defined_in(b):
            for user in r.edits.uses(v):
                top = ancestor_in(user, r.region)
                if top is None or top.parent not in body:
                    outer.setdefault(v, []).append(user)
                    home[v] = b
    at_value: dict[Value, int] = {}
    for v in outer:
        at_value[v] = len(types)
        types.append(v.type)
    original = {holder: h for h, holder in r.placed.items()}
    original.update(r.dispatch_of)

    def dominates(a: Block, b: Block) -> bool:
        return r.tree.dominates(original.get(a, a), original.get(b, b))

    def edge(at: Block, back: list[Value] | None, target: Block | None,
             args: list[Value]) -> _Slots:
        slots = _Slots(types)
        if back is not None:
            slots.vals[at_header:at_header + len(back)] = back
        if target is not None:
            k = targets.index(target)
            for j in range(flags):
                slots.vals[j] = slots.const("i1", int(j == k - 1))
            base = at_target[target]
            slots.vals[base:base + len(args)] = args
            for v, j in at_value.items():
                if dominates(home[v], at):
                    slots.vals[j] = v
        return slots

    before: list[Block] = []
    for b in order:
        before.append(b)
        term = b.ops[-1]
        leaving = [k for k, s in enumerate(term.successors) if s is header or s not in body]
        if not leaving:
            continue
        attrs = dict(term.attributes)
        if term.name == "cf.br" and not is_dispatch(term):
            s, args = term.successors[0], list(term.successor_args[0])
            slots = edge(b, args, None, []) if s is header else edge(b, None, s, args)
            test = slots.const("i1", int(s is header))
        elif len(leaving) == 2 and header in term.successors and \
                term.successors[0] is not term.successors[1] and not is_dispatch(term):
            # a latch that also leaves: one condition on its branch's predicate
            k_in = term.successors.index(header)
            slots = edge(b, list(term.successor_args[k_in]), term.successors[1 - k_in],
                         list(term.successor_args[1 - k_in]))
            test = term.operands[0]
            if k_in != 0:
                neg = Operation("ptx.not", [test], ["i1"], {"mods": ["pred"], NEGATED_EXIT: True})
                slots.made.append(neg)
                test = neg.results[0]
        else:
            # each edge out of a conditional branch (or of an inner loop's dispatch, which
            # stays as it is) goes to a block that only holds its condition
            for k in leaving:
                s, args = term.successors[k], list(term.successor_args[k])
                slots = edge(b, args, None, []) if s is header else edge(b, None, s, args)
                test = slots.const("i1", int(s is header))
                out = Block()
                operands = slots.operands()
                for o in slots.made:
                    out.append(o)
                out.append(Operation("upir.condition", [test] + operands,
                                     attributes={RAISED_EDGE: None}))
                r._drop_edges(term)
                for v in term.successor_args[k]:
                    r.edits.unuse(v, term)
                term.successors[k] = out
                term.successor_args[k] = []
                r._add_edges(term)
                before.append(out)
            continue
        operands = slots.operands()
        r.set_terminator(b, None)
        for o in slots.made:
            b.append(o)
        b.append(Operation("upir.condition", [test] + operands, attributes=attrs))
    after = Region()
    entry = after.add_block(Block(types))
    entry.append(Operation("upir.yield", entry.args[at_header:at_header + len(header.args)]))
    holder, inits, attrs = r.loop_holder(header, outside)
    attrs[EXIT_FLAGS] = flags
    while_op = Operation("upir.while", inits, types, attrs, [Region(before), after])
    holder.append(while_op)
    r.depth[holder] = max(r.depth.get(holder, 0), 1 + max(r.depth.get(b, 0) for b in body))
    for v, users in outer.items():
        for user in users:
            r.edits.replace_operand(user, v, while_op.results[at_value[v]])
    results = while_op.results

    def passed(t: Block) -> list[Value]:
        return list(results[at_target[t]:at_target[t] + len(t.args)])

    if not flags:
        br = Operation("cf.br", attributes={EXIT_DISPATCH: None}, successors=[targets[0]],
                       successor_args=[passed(targets[0])])
        holder.append(br)
        r._add_edges(br)
    block = holder
    for j in range(flags):
        last = j == flags - 1
        other = targets[0] if last else Block()
        br = Operation("cf.cond_br", [results[j]], attributes={EXIT_DISPATCH: None},
                       successors=[targets[j + 1], other],
                       successor_args=[passed(targets[j + 1]), passed(other) if last else []])
        block.append(br)
        r.preds.setdefault(other, {})
        r._add_edges(br)
        if not last:
            other.parent = r.region
            r.dispatch_blocks.setdefault(holder, []).append(other)
            r.dispatch_of[other] = original.get(holder, holder)
            block = other
    if flags:
        r.left["branch on a loop's exit target"] += flags
    for b in before:
        r.home[b] = holder
    return None


def is_dispatch(term: Operation | None) -> bool:
    """Whether `term` is (part of) the branch to a multi-exit loop's exit targets."""
    return term is not None and EXIT_DISPATCH in term.attributes
