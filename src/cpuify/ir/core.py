"""The core IR: SSA values, operations, blocks and regions, MLIR-shaped.

An :class:`Operation` has a dotted name (`ptx.add`, `upir.barrier`, `cf.cond_br`), operands
(SSA :class:`Value`s), results, attributes (plain Python data), nested regions and, for
terminators, successor blocks with the values they pass to the successor's arguments
(MLIR's block arguments instead of phi nodes).

Types are interned strings: `i1 i8 i16 i32 i64 f16 f32 f64`.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Iterable, Iterator, Sequence, TypeVar

N = TypeVar("N", bound=Hashable)

TYPES = ("i1", "i8", "i16", "i32", "i64", "f16", "f32", "f64")
INT_TYPES = frozenset(("i1", "i8", "i16", "i32", "i64"))
FLOAT_TYPES = frozenset(("f16", "f32", "f64"))


def bit_width(type_: str) -> int:
    return int(type_[1:])


class Value:
    """An SSA value: an operation result or a block argument."""
    __slots__ = ("type", "uses", "hint")

    def __init__(self, type_: str, hint: str = "") -> None:
        self.type = type_
        self.uses: list[Operation] = []
        self.hint = hint

    @property
    def owner(self) -> Operation | Block:
        raise NotImplementedError


class OpResult(Value):
    __slots__ = ("op", "index")

    def __init__(self, type_: str, op: Operation, index: int, hint: str = "") -> None:
        super().__init__(type_, hint)
        self.op = op
        self.index = index

    @property
    def owner(self) -> Operation:
        return self.op


class BlockArgument(Value):
    __slots__ = ("block", "index")

    def __init__(self, type_: str, block: Block, index: int, hint: str = "") -> None:
        super().__init__(type_, hint)
        self.block = block
        self.index = index

    @property
    def owner(self) -> Block:
        return self.block


class Operation:
    __slots__ = ("name", "operands", "results", "attributes", "regions", "successors",
                 "successor_args", "parent")

    def __init__(self, name: str, operands: list[Value] | tuple[Value, ...] = (),
                 result_types: list[str] | tuple[str, ...] = (),
                 attributes: dict[str, Any] | None = None,
                 regions: list[Region] | None = None,
                 successors: list[Block] | None = None,
                 successor_args: list[list[Value]] | None = None) -> None:
        self.name = name
        self.operands: list[Value] = list(operands)
        for v in self.operands:
            v.uses.append(self)
        self.results = [OpResult(t, self, i) for i, t in enumerate(result_types)]
        self.attributes: dict[str, Any] = dict(attributes or {})
        self.regions: list[Region] = []
        for r in regions or []:
            self.add_region(r)
        self.successors: list[Block] = list(successors or [])
        self.successor_args: list[list[Value]] = [list(a) for a in (successor_args or [[] for _ in self.successors])]
        for args in self.successor_args:
            for v in args:
                v.uses.append(self)
        self.parent: Block | None = None

    @property
    def result(self) -> OpResult:
        return self.results[0]

    def add_region(self, region: Region) -> Region:
        region.parent = self
        self.regions.append(region)
        return region

    def set_operand(self, index: int, value: Value) -> None:
        old = self.operands[index]
        old.uses.remove(self)
        self.operands[index] = value
        value.uses.append(self)

    def drop_uses(self) -> None:
        for v in self.operands:
            v.uses.remove(self)
        for args in self.successor_args:
            for v in args:
                v.uses.remove(self)

    def walk(self) -> Iterator[Operation]:
        """This op and all ops nested in its regions, pre-order."""
        yield self
        for region in self.regions:
            for block in region.blocks:
                for op in block.ops:
                    yield from op.walk()

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attributes.get(key, default)

    def __repr__(self) -> str:
        return f"<{self.name} {self.attributes.get('line', '')}>"


class Block:
    __slots__ = ("args", "ops", "parent")

    def __init__(self, arg_types: list[str] | tuple[str, ...] = ()) -> None:
        self.args: list[BlockArgument] = [BlockArgument(t, self, i) for i, t in enumerate(arg_types)]
        self.ops: list[Operation] = []
        self.parent: Region | None = None

    def add_arg(self, type_: str, hint: str = "") -> BlockArgument:
        arg = BlockArgument(type_, self, len(self.args), hint)
        self.args.append(arg)
        return arg

    def append(self, op: Operation) -> Operation:
        op.parent = self
        self.ops.append(op)
        return op

    @property
    def terminator(self) -> Operation | None:
        return self.ops[-1] if self.ops else None

    @property
    def successors(self) -> list[Block]:
        term = self.terminator
        return term.successors if term is not None else []


class Region:
    __slots__ = ("blocks", "parent")

    def __init__(self, blocks: list[Block] | None = None) -> None:
        self.blocks: list[Block] = []
        self.parent: Operation | None = None
        for b in blocks or []:
            self.add_block(b)

    def add_block(self, block: Block) -> Block:
        block.parent = self
        self.blocks.append(block)
        return block

    @property
    def entry(self) -> Block:
        return self.blocks[0]


def predecessors(region: Region) -> dict[Block, list[Block]]:
    preds: dict[Block, list[Block]] = {b: [] for b in region.blocks}
    for b in region.blocks:
        for s in b.successors:
            preds[s].append(b)
    return preds


def defining_block(v: Value) -> "Block | None":
    """The block that defines v: its operation's block, or the block it is an argument of."""
    if isinstance(v, OpResult):
        return v.op.parent
    return v.block if isinstance(v, BlockArgument) else None


def ancestor_in(op: Operation, region: Region) -> Operation | None:
    """The op of `region` that contains `op`, at any depth (op itself if it is in region);
    None when op is not inside region."""
    node: Operation | None = op
    while node is not None:
        blk = node.parent
        if blk is None:
            return None
        if blk.parent is region:
            return node
        node = blk.parent.parent if blk.parent is not None else None
    return None


def replace_uses_in(blocks: Iterable[Block], replacement: dict[Value, Value]) -> None:
    """Uses of the replaced values in `blocks`, operands and successor arguments alike."""
    for b in blocks:
        for op in b.ops:
            for i, o in enumerate(op.operands):
                if o in replacement:
                    op.set_operand(i, replacement[o])
            for args in op.successor_args:
                for i, o in enumerate(args):
                    if o in replacement:
                        o.uses.remove(op)
                        args[i] = replacement[o]
                        replacement[o].uses.append(op)


def replace_all_uses(old: Value, new: Value) -> None:
    """Every use of `old`, as an operand or a successor argument, becomes a use of `new`."""
    for user in list(old.uses):     # (one entry per use: a user using it twice is here twice)
        user.operands = [new if v is old else v for v in user.operands]
        user.successor_args = [[new if v is old else v for v in a] for a in user.successor_args]
        new.uses.append(user)
    old.uses.clear()


def remove_block_arg(block: Block, arg: BlockArgument, new: Value,
                     edges: list[tuple[Operation, int]]) -> None:
    """Replace every use of `arg` by `new` and drop `arg` from `block` and from the
    successor arguments of `edges` (terminator, successor index): all edges into `block`."""
    replace_all_uses(arg, new)
    index = arg.index
    for term, k in edges:
        removed = term.successor_args[k].pop(index)
        removed.uses.remove(term)
    block.args.pop(index)
    for i, a in enumerate(block.args):
        a.index = i


def postorder(roots: Iterable[N], successors: Callable[[N], Sequence[N]]) -> list[N]:
    """The nodes reachable from `roots` in depth-first post-order (each after the nodes it
    reaches first), by an iterative walk: no recursion however long the graph."""
    seen: set[N] = set()
    order: list[N] = []
    for root in roots:
        if root in seen:
            continue
        seen.add(root)
        stack: list[tuple[N, int]] = [(root, 0)]
        while stack:
            node, i = stack[-1]
            succs = successors(node)
            if i < len(succs):
                stack[-1] = (node, i + 1)
                s = succs[i]
                if s not in seen:
                    seen.add(s)
                    stack.append((s, 0))
            else:
                stack.pop()
                order.append(node)
    return order


def reverse_postorder(region: Region) -> list[Block]:
    """Blocks reachable from the entry, in reverse post-order."""
    order = postorder([region.entry], lambda b: b.successors)
    order.reverse()
    return order


def dominators(region: Region) -> dict[Block, Block | None]:
    """Immediate dominators (Cooper-Harvey-Kennedy).  Unreachable blocks are absent."""
    rpo = reverse_postorder(region)
    index = {b: i for i, b in enumerate(rpo)}
    preds = predecessors(region)
    idom: dict[Block, Block | None] = {rpo[0]: rpo[0]}

    def intersect(a: Block, b: Block) -> Block:
        while a is not b:
            while index[a] > index[b]:
                a = idom[a]  # type: ignore[assignment]
            while index[b] > index[a]:
                b = idom[b]  # type: ignore[assignment]
        return a

    changed = True
    while changed:
        changed = False
        for b in rpo[1:]:
            new: Block | None = None
            for p in preds[b]:
                if p in idom:
                    new = p if new is None else intersect(p, new)
            if new is not None and idom.get(b) is not new:
                idom[b] = new
                changed = True
    idom[rpo[0]] = None
    return _IdomMap(idom)


class _IdomMap(dict):
    """What :func:`dominators` returns: a plain dict of immediate dominators that also keeps
    a :class:`DomTree` for :func:`dominates`, built on the first deep query and dropped
    whenever the dict changes."""
    __slots__ = ("_tree",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tree: DomTree | None = None

    def __setitem__(self, key: Any, value: Any) -> None:
        self._tree = None
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self._tree = None
        super().__delitem__(key)

    def __ior__(self, other: Any) -> Any:
        self._tree = None
        return super().__ior__(other)

    def pop(self, *args: Any) -> Any:
        self._tree = None
        return super().pop(*args)

    def popitem(self) -> Any:
        self._tree = None
        return super().popitem()

    def clear(self) -> None:
        self._tree = None
        super().clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._tree = None
        super().update(*args, **kwargs)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._tree = None
        return super().setdefault(key, default)

    def __reduce__(self) -> Any:
        return (_IdomMap, (dict(self),))


def dominates(idom: dict[Block, Block | None], a: Block, b: Block) -> bool:
    """Whether `a` dominates `b` (`idom` from :func:`dominators`).  Walks the idom chain a
    few steps; a deeper query on a map from :func:`dominators` builds its DomTree once, so
    that many queries on a long chain of blocks cost constant time each."""
    node: Block | None = b
    for _ in range(32):
        if node is None:
            return False
        if node is a:
            return True
        node = idom.get(node)
    if type(idom) is _IdomMap:
        tree = idom._tree
        if tree is None:
            tree = idom._tree = DomTree(idom)
        return tree.dominates(a, b)
    while node is not None:
        if node is a:
            return True
        node = idom.get(node)
    return False


class DomTree:
    """Constant-time dominance queries over an immediate-dominator map (as returned by
    :func:`dominators`): pre/post numbers of an iterative walk of the dominator tree.
    `DomTree(idom).dominates(a, b)` is `dominates(idom, a, b)`, without walking the idom
    chain (whose length grows with the kernel)."""
    __slots__ = ("pre", "post")

    def __init__(self, idom: dict[Block, Block | None]) -> None:
        children: dict[Block, list[Block]] = {}
        roots: list[Block] = []
        for b, parent in idom.items():
            if parent is None or parent is b:
                roots.append(b)
            else:
                children.setdefault(parent, []).append(b)
        self.pre: dict[Block, int] = {}
        self.post: dict[Block, int] = {}
        clock = 0
        for root in roots:
            self.pre[root] = clock
            clock += 1
            stack: list[tuple[Block, int]] = [(root, 0)]
            while stack:
                b, i = stack[-1]
                kids = children.get(b, ())
                if i < len(kids):
                    stack[-1] = (b, i + 1)
                    c = kids[i]
                    if c not in self.pre:
                        self.pre[c] = clock
                        clock += 1
                        stack.append((c, 0))
                else:
                    stack.pop()
                    self.post[b] = clock
                    clock += 1

    def dominates(self, a: Block, b: Block) -> bool:
        if a is b:
            return True
        pb = self.pre.get(b)
        pa = self.pre.get(a)
        if pa is None or pb is None:
            return False
        return pa <= pb and self.post[b] <= self.post[a]


def natural_loops(region: Region) -> dict[Block, tuple[set[Block], list[Block]]]:
    """Loop header -> (the blocks of its natural loop, its latches: the blocks that branch
    back to it), for every header of a back edge (a branch to a block that dominates it)."""
    idom = dominators(region)
    preds = predecessors(region)
    loops: dict[Block, tuple[set[Block], list[Block]]] = {}
    for p in region.blocks:
        if p not in idom:
            continue
        for h in p.successors:
            if h in idom and dominates(idom, h, p):
                body, latches = loops.setdefault(h, ({h}, []))
                if p not in latches:
                    latches.append(p)
                work = [p]
                while work:
                    b = work.pop()
                    if b in body:
                        continue
                    body.add(b)
                    work.extend(preds.get(b, []))
    return loops
