"""raise-structured-cf: the block body's reducible control flow as structured ops.

The lifted block body is a CFG (`cf.br`/`cf.cond_br`).  This pass nests its single-entry
pieces into MLIR-shaped ops of the upir dialect (ir/dialects.py), as Polygeist's `scf.if`,
`scf.while` and `scf.for` hold the code between barriers:

  * an if/else diamond or a triangle (`cond_br` at D whose arms meet again at D's immediate
    post-dominator J, every arm block entered only from D or its own arm) becomes
    `%r = upir.if(%c) ({then}, {else})`, J's arguments the op's results;
  * a natural loop with one exit edge, taken from a block E that every iteration passes
    (the blocks from the header to E are the `before` region, ending in
    `upir.condition(%continue, %forwarded...)`, the rest the `after` region, yielding the
    next iteration's header arguments) becomes `upir.while`; nvcc's rotated loops (the exit
    test at the bottom) are a while whose after region only yields;
  * a while whose before region is only `setp iv, bound` with a loop-invariant bound, and
    whose after region yields `iv + step` (a loop-invariant step; the induction variable as
    analysis/induction.py defines it), is a counted loop: `upir.for(%lb, %ub, %step, ...)`;
    so is nvcc's do-while under a guard `if (lb < ub)` that is its first test, inside the
    guard's `upir.if` (transforms/structured_for.py);
  * any other reducible loop (several exits: a `break`, a `return` or trap inside it; an
    exit not on every iteration) is a `upir.while` whose before region is the whole body,
    with i1 exit flags among its results and a branch on them to the exit targets after it
    (transforms/structured_exits.py).

Barriers stay where they are, inside the regions.  Inner structures are raised before the
ones that hold them (the dominator tree in post-order), each block is moved into a region
once, and the checks on an arm or a loop look at its blocks only: near-linear, no recursion.
What cannot be raised stays CFG, unchanged, and the reason is counted (an irreducible
cycle, an if with a path that ends the thread with `upir.exit`, a value used past its arm,
...): the pass never fails and never changes what the kernel computes.

Where it runs: early in the default pipeline, right after the passes that insert blocks and
barriers on the lifted CFG's edges; from there on the structured form is the pipeline's
working form (transforms/pass_manager.py, Forms): passes that work on structured ops or on
either form run on it, the pass manager lowers it (ir/structured.py, back to the same CFG)
for a pass that works on the CFG and raises it again after, and the IR the pipeline hands on
is structured: the printed IR (`--print-ir-after`, `cpuify ir`, `cpuify ir --mlir`) and
`cpuify explain` show the kernel's structure; code generation and the interpreter lower it.
`--disable-pass=raise-structured-cf` keeps the CFG as the working form (a structured pass
still gets the structured form, and the pipeline lowers it again at the end)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar

from cpuify.analysis.cfg import cyclic_blocks, immediate_post_dominators
from cpuify.analysis.manager import AnalysisManager
from cpuify.ir.core import (
    Block, DomTree, Operation, Region, Value, ancestor_in, dominators, postorder,
)
from cpuify.ir.structure import block_body, block_parallel
from cpuify.ir.structured import HEADER_PLACE, NEGATED_EXIT, RAISED_EDGE, UseEdits
from cpuify.transforms.pass_manager import register
from cpuify.transforms.structured_exits import is_dispatch, raise_multi_exit_loop
from cpuify.transforms.structured_for import raise_do_while_fors, to_for

#: what the pass records on the `upir.block_parallel` op (what `cpuify explain` prints)
RAISED_ATTR = "structured_cf"
LEFT_ATTR = "cfg_left"
WHILE_ATTR = "while_not_for"
#: structured ops nest at most this deep; deeper control flow stays CFG (the printer, the
#: verifier and Operation.walk recurse once per level of nesting)
MAX_NESTING = 64


@register("raise-structured-cf", "if/while/for regions raised from the CFG (structured control flow)")
@dataclass(frozen=True)
class RaiseStructuredControlFlow:
    """Pass: reducible control flow of the block body as upir.if/while/for."""
    name: str = "raise-structured-cf"
    #: what it makes (the pass manager's forms, transforms/pass_manager.py)
    form: ClassVar[str] = "structured"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of structured ops made."""
        report = raise_structured_control_flow(block_body(kernel))
        attrs = block_parallel(kernel).attributes
        # what the block body holds now (also what an earlier run of the pass raised)
        attrs[RAISED_ATTR] = []
        recount_structure(kernel)
        attrs[LEFT_ATTR] = [[why, n] for why, n in sorted(report.left.items())]
        if report.whiles:               # (why a while is no for: only where there is one)
            attrs[WHILE_ATTR] = [[why, n] for why, n in sorted(report.whiles.items())]
        else:
            attrs.pop(WHILE_ATTR, None)     # (an earlier raise's, in a pipeline that raises again)
        return sum(report.raised.values())


@dataclass
class RaiseReport:
    raised: Counter[str]           # "if" / "while" / "for" -> how many
    left: Counter[str]             # why a branch or loop stayed CFG -> how many
    whiles: Counter[str] = field(default_factory=Counter)   # why a while is no for -> how many


def recount_structure(kernel: Operation) -> None:
    """The structured ops the block body holds now, recorded for `explain` (where the pass
    recorded its own): a pipeline that hands on the form it raised early, never lowered,
    has passes on the regions since (if-convert-swaps removes ifs, parallel-licm moves
    them out of the block body)."""
    parallel = block_parallel(kernel)
    if RAISED_ATTR not in parallel.attributes:
        return
    present = Counter(op.name[len("upir."):] for op in parallel.walk()
                      if op.name in ("upir.if", "upir.while", "upir.for"))
    parallel.attributes[RAISED_ATTR] = [[k, present[k]] for k in ("if", "while", "for")]


def forget_structure(kernel: Operation) -> None:
    """Drop what the pass recorded on the kernel (the pass manager lowers the structured
    form for good: a pipeline without the raise that raised only for a structured pass)."""
    attrs = block_parallel(kernel).attributes
    for key in (RAISED_ATTR, LEFT_ATTR, WHILE_ATTR):
        attrs.pop(key, None)


def structure_summary(kernel: Operation) -> list[str]:
    """Lines for `cpuify explain`: the structured ops of the kernel's block body and what
    stayed CFG, and why (as raise-structured-cf recorded it)."""
    attrs = block_parallel(kernel).attributes
    if RAISED_ATTR not in attrs:
        return []
    counts = {str(k): int(n) for k, n in attrs[RAISED_ATTR]}
    line = (f"structured control flow: {counts.get('if', 0)} if, {counts.get('while', 0)} "
            f"while, {counts.get('for', 0)} for")
    left = [(str(w), int(n)) for w, n in attrs.get(LEFT_ATTR, [])]
    if left:
        line += "; left as CFG: " + ", ".join(f"{n} {w}" for w, n in left)
    else:
        line += "; no branch left as CFG"
    whiles = [(str(w), int(n)) for w, n in attrs.get(WHILE_ATTR, [])]
    if whiles:
        line += "; while, not for: " + ", ".join(f"{n} {w}" for w, n in whiles)
    return [line]


def _ancestor_block(op: Operation, region: Region) -> Block | None:
    """The block of `region` that holds `op`, at any depth."""
    top = ancestor_in(op, region)
    return top.parent if top is not None else None


def _defined_in(block: Block) -> list[Value]:
    out: list[Value] = list(block.args)
    for op in block.ops:
        out.extend(op.results)
    return out


def _has_lockstep_barrier(block: Block) -> bool:
    return any(op.name == "upir.barrier" and op.attributes.get("lockstep") for op in block.ops)


class _Raiser:
    def __init__(self, region: Region) -> None:
        self.region = region
        self.raised: Counter[str] = Counter()
        self.left: Counter[str] = Counter()
        # predecessors as edge counts, kept up to date as branches are rewritten
        self.preds: dict[Block, dict[Block, int]] = {b: {} for b in region.blocks}
        for b in region.blocks:
            for s in b.successors:
                edges = self.preds.setdefault(s, {})
                edges[b] = edges.get(b, 0) + 1
        # new blocks that take a loop header's place in the block order
        self.placed: dict[Block, Block] = {}
        # a block moved into a structured op -> the block of this region now holding it
        self.home: dict[Block, Block] = {}
        # how deep the structured ops in a block nest (absent: none)
        self.depth: dict[Block, int] = {}
        self.edits = UseEdits()
        # the whiles built (inner ones first), for the fors under a guard
        self.whiles: list[Operation] = []
        # whiles with several exits (transforms/structured_exits.py): the blocks of their
        # exit dispatch after the holder, and each one's holder (for dominance queries)
        self.multi_exit = 0
        self.dispatch_blocks: dict[Block, list[Block]] = {}
        self.dispatch_of: dict[Block, Block] = {}
        self.tree: DomTree

    # --- bookkeeping -------------------------------------------------------------------
    def find(self, b: Block) -> Block:
        root = b
        while root in self.home:
            root = self.home[root]
        while b in self.home and self.home[b] is not root:      # path compression
            self.home[b], b = root, self.home[b]
        return root

    def _drop_edges(self, term: Operation) -> None:
        for s in term.successors:
            edges = self.preds.get(s)
            if edges is not None and term.parent in edges:
                edges[term.parent] -= 1  # type: ignore[index]
                if not edges[term.parent]:  # type: ignore[index]
                    del edges[term.parent]  # type: ignore[arg-type]

    def _add_edges(self, term: Operation) -> None:
        for s in term.successors:
            edges = self.preds.setdefault(s, {})
            edges[term.parent] = edges.get(term.parent, 0) + 1  # type: ignore[index]

    def set_terminator(self, block: Block, new: Operation | None) -> None:
        """Replace `block`'s terminator by `new` (None: just remove it)."""
        old = block.ops[-1]
        self._drop_edges(old)
        self.edits.drop(old)
        block.ops.pop()
        old.parent = None
        if new is not None:
            block.append(new)
            self._add_edges(new)

    def in_region(self, b: Block) -> bool:
        return b.parent is self.region

    # --- the walk ----------------------------------------------------------------------
    def run(self) -> None:
        region = self.region
        idom = dominators(region)
        tree = self.tree = DomTree(idom)
        ipdom = immediate_post_dominators(region)
        latches: dict[Block, list[Block]] = {}
        children: dict[Block, list[Block]] = {}
        for b in region.blocks:
            if b not in idom:
                continue
            parent = idom[b]
            if parent is not None:
                children.setdefault(parent, []).append(b)
            for s in b.successors:
                if tree.dominates(s, b):
                    latches.setdefault(s, []).append(b)
        # an irreducible cycle: blocks on a cycle with no back edge to a dominating header
        cyclic = cyclic_blocks(region)
        if cyclic:
            natural = self._natural_members(latches)
            if cyclic - natural:
                self.left["irreducible cycle"] += 1
        order = postorder([region.entry], lambda b: children.get(b, ()))
        for b in order:
            if not self.in_region(b):
                continue
            term = b.terminator
            # a branch that closes a loop (an edge back to a dominating header) is no if
            branch = term is not None and term.name == "cf.cond_br" and \
                not any(tree.dominates(s, b) for s in term.successors)
            if b in latches:
                # an if at the header inside the loop first (quietly: a header that tests
                # the loop's condition has the loop as an arm)
                if branch:
                    self.raise_if(b, ipdom.get(b), quiet=True)
                self.raise_loop(b, latches[b])
                if not self.in_region(b):
                    continue
                term = b.terminator
                branch = term is not None and term.name == "cf.cond_br"
            if branch:
                self.raise_if(b, ipdom.get(b))
        # blocks moved into regions leave the list; a loop's new block takes its header's place
        kept: list[Block] = []
        for b in region.blocks:
            b = self.placed.get(b, b)
            kept.append(b)
            kept.extend(self.dispatch_blocks.get(b, ()))
        region.blocks = [b for b in kept if b.parent is region]
        for b in region.blocks:
            b.parent = region

    def _natural_members(self, latches: dict[Block, list[Block]]) -> set[Block]:
        preds: dict[Block, list[Block]] = {b: list(e) for b, e in self.preds.items()}
        members: set[Block] = set()
        for header, ls in latches.items():
            loop = {header}
            stack = [l for l in ls if l not in loop]
            loop.update(stack)
            while stack:
                x = stack.pop()
                for p in preds.get(x, ()):
                    if p not in loop:
                        loop.add(p)
                        stack.append(p)
            members |= loop
        return members

    # --- if ----------------------------------------------------------------------------
    def _arm(self, start: Block, branch: Block, join: Block) -> list[Block] | str:
        """The blocks of an arm from `start` to `join` (empty when start is join), or why
        they are not a single-entry arm of the branch at `branch`."""
        if start is join:
            return []
        if self.preds.get(start) != {branch: 1}:
            return "branch into an arm from outside it"
        seen = {start}
        arm = [start]
        stack = [start]
        while stack:
            b = stack.pop()
            term = b.terminator
            if term is None or term.name not in ("cf.br", "cf.cond_br"):
                return "path that ends the thread (exit or trap)"
            for s in term.successors:
                if s is join or s in seen:
                    continue
                if s is branch or not self.in_region(s):
                    return "cycle through a branch"
                seen.add(s)
                arm.append(s)
                stack.append(s)
        for b in arm[1:]:
            if any(p not in seen for p in self.preds.get(b, ())):
                return "branch into an arm from outside it"
        return arm

    def _escapes(self, blocks: list[Block], inside: set[Block]) -> bool:
        """Whether a value defined in `blocks` is used outside the blocks of `inside`."""
        for b in blocks:
            for v in _defined_in(b):
                for user in self.edits.uses(v):
                    if _ancestor_block(user, self.region) not in inside:
                        return True
        return False

    def raise_if(self, branch: Block, join: Block | None, quiet: bool = False) -> None:
        term = branch.ops[-1]
        if is_dispatch(term):
            return                          # (a multi-exit loop's, counted there)
        left = Counter() if quiet else self.left
        if join is not None:
            join = self.placed.get(join, join)     # (a loop header: the block now in its place)
        if join is None or not self.in_region(join):
            left["branch with no join (a path ends the thread or never ends)"] += 1
            return
        then_block, else_block = term.successors
        if then_block is else_block:
            return                          # (both ways to one block: nothing to raise)
        arms: list[list[Block]] = []
        for start in (then_block, else_block):
            arm = self._arm(start, branch, join)
            if isinstance(arm, str):
                left[arm] += 1
                return
            if arm and arm[0].args and _has_lockstep_barrier(arm[0]):
                left["arm with a lockstep barrier at its entry"] += 1
                return
            arms.append(arm)
        if any(self._escapes(arm, set(arm)) for arm in arms):
            left["value used past its arm"] += 1
            return
        depth = 1 + max((self.depth.get(b, 0) for arm in arms for b in arm), default=0)
        if depth > MAX_NESTING:
            left[f"nesting deeper than {MAX_NESTING}"] += 1
            return
        self.depth[branch] = max(depth, self.depth.get(branch, 0))
        regions: list[Region] = []
        cond = term.operands[0]
        for k, arm in enumerate(arms):
            passed = list(term.successor_args[k])
            region = Region()
            if not arm:
                block = Block()
                block.append(Operation("upir.yield", passed, attributes={RAISED_EDGE: None}))
                region.add_block(block)
                regions.append(region)
                continue
            entry = arm[0]
            for a, v in zip(entry.args, passed):
                self.edits.replace_all(a, v)
            entry.args = []
            for b in arm:
                region.add_block(b)         # (the entry first)
            for b in arm:
                self._yields_for(b, join, region)
                self.home[b] = branch
            regions.append(region)
        attrs = dict(term.attributes)
        if_op = Operation("upir.if", [cond], [a.type for a in join.args], attrs, regions)
        self.set_terminator(branch, None)
        branch.append(if_op)
        br = Operation("cf.br", successors=[join], successor_args=[list(if_op.results)])
        branch.append(br)
        self._add_edges(br)
        self.raised["if"] += 1

    def _yields_for(self, b: Block, target: Block, region: Region) -> None:
        """`b`'s branches to `target` (outside the region `b` moved to) become `upir.yield`
        ops with the values passed (a `cf.br` keeps its attributes, the PTX line)."""
        term = b.ops[-1]
        if target not in term.successors:
            return
        if term.name == "cf.br" and not is_dispatch(term):
            y = Operation("upir.yield", list(term.successor_args[0]),
                          attributes=dict(term.attributes))
            self.set_terminator(b, y)
            return
        # a conditional branch with an edge out: that edge goes to a block that yields
        for k, s in enumerate(term.successors):
            if s is not target:
                continue
            out = Block()
            passed = term.successor_args[k]
            for v in passed:
                self.edits.unuse(v, term)
            out.append(Operation("upir.yield", list(passed), attributes={RAISED_EDGE: None}))
            region.add_block(out)
            self._drop_edges(term)
            term.successors[k] = out
            term.successor_args[k] = []
            self._add_edges(term)

    # --- while / for ---------------------------------------------------------------------
    def raise_loop(self, header: Block, latch_list: list[Block]) -> None:
        region = self.region
        latches = {self.find(l) for l in latch_list}
        if any(not self.in_region(l) or header not in l.successors for l in latches):
            self.left["loop changed shape"] += 1
            return
        body = {header} | latches
        stack = [l for l in latches if l is not header]
        while stack:
            x = stack.pop()
            for p in self.preds.get(x, ()):
                if p not in body:
                    body.add(p)
                    stack.append(p)
        outside = [p for p in self.preds.get(header, ()) if p not in body]
        if not outside or header is region.entry:
            self.left["loop entered at the region's entry"] += 1
            return
        for b in body:
            if b is not header and any(p not in body for p in self.preds.get(b, ())):
                self.left["loop entered in the middle (irreducible)"] += 1
                return
        if 1 + max(self.depth.get(b, 0) for b in body) > MAX_NESTING:
            self.left[f"nesting deeper than {MAX_NESTING}"] += 1
            return
        if self._single_exit_while(header, body, outside) is None:
            return
        # several exits, or one the plain while cannot take: the whole body before the test
        why = raise_multi_exit_loop(self, header, body, outside)
        if why is not None:
            self.left[why] += 1
            return
        self.raised["while"] += 1
        self.multi_exit += 1

    def _single_exit_while(self, header: Block, body: set[Block], outside: list[Block]
                           ) -> str | None:
        """Raise a loop with one exit, taken on every iteration, as a plain while; returns
        why not (then nothing changed)."""
        exits = [(b, s) for b in body for s in b.successors if s not in body]
        if len(exits) != 1:
            return f"loop with {len(exits)} exits"
        exiting, after_loop = exits[0]
        term = exiting.ops[-1]
        if term.name != "cf.cond_br" or term.successors[0] is term.successors[1] or \
                is_dispatch(term):
            return "loop exit not a conditional branch"
        k_out = term.successors.index(after_loop)
        k_in = 1 - k_out
        stay = term.successors[k_in]
        # the before region: from the header to the exit test
        before = [header]
        in_before = {header}
        stack = [header] if header is not exiting else []
        while stack:
            b = stack.pop()
            for s in b.successors:
                if s is header:
                    return "loop that continues before its exit test"
                if s not in in_before:
                    in_before.add(s)
                    before.append(s)
                    if s is not exiting:
                        stack.append(s)
        if exiting not in in_before:
            return "loop exit not on every iteration"
        after: list[Block] = []
        if stay is not header:
            if stay in in_before or self.preds.get(stay) != {exiting: 1}:
                return "loop with an inner cycle left as CFG"
            after = [stay]
            in_after = {stay}
            stack = [stay]
            while stack:
                b = stack.pop()
                for s in b.successors:
                    if s is header:
                        continue
                    if s in in_before or s is stay:
                        return "loop with an inner cycle left as CFG"
                    if s not in in_after:
                        in_after.add(s)
                        after.append(s)
                        stack.append(s)
            if len(in_before) + len(in_after) != len(body):
                return "loop changed shape"
            if stay.args and _has_lockstep_barrier(stay):
                return "arm with a lockstep barrier at its entry"
            if self._escapes(after, in_after):
                return "value used past its arm"
        elif len(in_before) != len(body):
            return "loop changed shape"
        self._build_while(header, before, in_before, after, body, exiting, k_in, outside)
        return None

    def _build_while(self, header: Block, before: list[Block], in_before: set[Block],
                     after: list[Block], body: set[Block], exiting: Block, k_in: int,
                     outside: list[Block]) -> None:
        term = exiting.ops[-1]
        stay, after_loop = term.successors[k_in], term.successors[1 - k_in]
        stay_args = list(term.successor_args[k_in])
        exit_args = list(term.successor_args[1 - k_in])
        cond = term.operands[0]
        if after:
            for a, v in zip(stay.args, stay_args):
                self.edits.replace_all(a, v)
            stay.args = []
        # values of the before region needed after it: forwarded by the condition
        extra = set(exit_args) | (set(stay_args) if not after else set())
        forwarded: list[Value] = []
        outer_uses: dict[Value, list[Operation]] = {}
        after_uses: dict[Value, list[Operation]] = {}
        for b in before:
            for v in _defined_in(b):
                needed = v in extra
                for user in self.edits.uses(v):
                    if user is term:
                        continue
                    home = _ancestor_block(user, self.region)
                    if home in in_before:
                        continue
                    needed = True
                    (after_uses if home in body else outer_uses).setdefault(v, []).append(user)
                if needed:
                    forwarded.append(v)
        types = [v.type for v in forwarded]
        index = {v: i for i, v in enumerate(forwarded)}
        # the condition: true continues
        test = cond
        exiting.ops.pop()
        self._drop_edges(term)
        self.edits.drop(term)
        term.parent = None
        if k_in != 0:
            neg = Operation("ptx.not", [cond], ["i1"], {"mods": ["pred"], NEGATED_EXIT: True})
            exiting.append(neg)
            test = neg.results[0]
        exiting.append(Operation("upir.condition", [test] + forwarded,
                                 attributes=dict(term.attributes)))
        before_region = Region(before)
        # the after region, its entry taking the forwarded values
        after_region = Region()
        if after:
            entry = after[0]
            for t in types:
                entry.add_arg(t)
            for v, users in after_uses.items():
                new = entry.args[index[v]]
                for user in users:
                    self.edits.replace_operand(user, v, new)
            for b in after:
                after_region.add_block(b)
            for b in after:
                self._yields_for(b, header, after_region)
        else:
            entry = after_region.add_block(Block(types))
            back = [entry.args[index[v]] if v in index else v for v in stay_args]
            entry.append(Operation("upir.yield", back))
        holder, inits, attrs = self.loop_holder(header, outside)
        while_op = Operation("upir.while", inits, types, attrs, [before_region, after_region])
        holder.append(while_op)
        self.depth[holder] = max(self.depth.get(holder, 0),
                                 1 + max(self.depth.get(b, 0) for b in body))
        for v, users in outer_uses.items():
            for user in users:
                self.edits.replace_operand(user, v, while_op.results[index[v]])
        out_args = [while_op.results[index[v]] if v in index else v for v in exit_args]
        br = Operation("cf.br", successors=[after_loop], successor_args=[out_args])
        holder.append(br)
        self._add_edges(br)
        for b in body:
            self.home[b] = holder
        self.raised["while"] += 1
        if to_for(while_op, self.edits):
            self.raised["while"] -= 1
            self.raised["for"] += 1
        else:
            self.whiles.append(while_op)


    def loop_holder(self, header: Block, outside: list[Block]
                    ) -> tuple[Block, list[Value], dict]:  # type: ignore[type-arg]
        """Where a loop op goes: the one block branching to the header from outside (its branch
        removed), or a new block in the header's place; with the op's initial values and
        attributes."""
        pre = outside[0]
        pre_term = pre.ops[-1]
        if len(outside) == 1 and self.preds[header][pre] == 1 and pre_term.name == "cf.br" \
                and not is_dispatch(pre_term):
            inits = list(pre_term.successor_args[0])
            attrs = dict(pre_term.attributes)
            self.set_terminator(pre, None)
            return pre, inits, attrs
        holder = Block([a.type for a in header.args])
        holder.parent = self.region
        self.preds[holder] = {}
        self.placed[header] = holder
        for p in outside:
            t = p.ops[-1]
            self._drop_edges(t)
            t.successors = [holder if s is header else s for s in t.successors]
            self._add_edges(t)
        # (no block of the CFG: lowered, none again)
        return holder, list(holder.args), {HEADER_PLACE: None}


def raise_structured_control_flow(region: Region) -> RaiseReport:
    """Raise the reducible control flow of `region` (a block body) in place."""
    raiser = _Raiser(region)
    raiser.run()
    # nvcc's rotated loops are fors once their guards are ifs (the guard holds the loop)
    made, kept = raise_do_while_fors(raiser.whiles, raiser.edits)
    if raiser.multi_exit:
        kept["several exits"] = raiser.multi_exit
    raiser.raised["while"] -= made
    raiser.raised["for"] += made
    raiser.edits.flush()
    return RaiseReport(raiser.raised, raiser.left, Counter(kept))
