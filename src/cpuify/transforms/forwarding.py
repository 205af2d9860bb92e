"""Store-to-load forwarding and dead stores across barriers (Polygeist paper, IV-B).

    w[ty][tx] = hidden[index];          // a store
    __syncthreads();
    w[ty][tx] = w[ty][tx] * node[ty];   // loads back what the same thread stored

A barrier orders memory between threads, not within one: the load reads the value this
thread stored when no other thread can have written the location in between.  That holds
for a `__shared__` variable all of whose stores use one address that is an injective
function of the thread index (each thread writes only its own element): then a load at
that same address reads the last store of its own thread.  The load is replaced by the
stored value; a store whose value nobody reads before the thread's next store there (no
load of the variable, by any thread, in the barrier intervals in between) is removed.

Across a barrier, a load is forwarded only when the store it reads then goes (no other
thread's load reads it): otherwise the value would be kept per thread across the barrier,
in a slot, while the store stays for the other threads, which costs what the load saved.
In the default pipeline before barrier-elimination: with Fig. 9's store and load gone, the
barrier between them orders nothing (`weights[ty][tx] = hidden[index] * node[ty]` in one
interval, the paper's IV-B).

Needs the block shape (injectivity; the kernel's `block_dims`).  Only plain scalar
accesses of `__shared__` variables qualify: no atomics, volatile or vector accesses, and no
shared access whose variable is unknown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cpuify.analysis.access import Affine, Symbols, affine_form, same_thread_only
from cpuify.analysis.cfg import cyclic_blocks
from cpuify.analysis.pointers import memory_space, shared_variables
from cpuify.analysis.uniformity import uniform_values
from cpuify.ir.core import (
    Block, Operation, Region, dominates, dominators, predecessors, replace_all_uses,
)
from cpuify.ir.dialects import memory_effects
from cpuify.ir.modifiers import mods, ty, type_size
from cpuify.ir.structure import block_body
from cpuify.ir.structured_shapes import nested_ops
from cpuify.transforms.barriers import _walk
from cpuify.analysis.manager import AnalysisManager
from cpuify.transforms.pass_manager import lower_for_cfg_rewrite, register, structured_now

_PLAIN = frozenset(("volatile", "relaxed", "acquire", "release", "mmio", "v2", "v4", "v8"))


@register("store-forwarding", "loads of shared memory replaced by the value the same thread "
                              "stored there, and stores no thread reads removed")
@dataclass(frozen=True)
class StoreForwarding:
    """Pass: forward stores to loads of thread-private shared elements across barriers."""
    name: str = "store-forwarding"
    #: on the CFG; structured input is lowered only where a shared store is (and the block
    #: shape is known)
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        dims = kernel.attributes.get("block_dims")
        if not dims:
            return 0
        if structured_now(kernel, analyses):
            if not any(_shared_access(op) and op.name == "ptx.st" for op in nested_ops(kernel)):
                return 0
            lower_for_cfg_rewrite(kernel, analyses)
        return forward_stores(block_body(kernel), tuple(dims))  # type: ignore[arg-type]


def _shared_access(op: Operation) -> bool:
    return op.name in ("ptx.ld", "ptx.st") and memory_space(op) == "shared"


def forward_stores(region: Region, block_dims: tuple[int, int, int]) -> int:
    symbols = Symbols(uniform_values(region), cyclic_blocks(region))
    var_of = shared_variables(region)
    memo: dict = {}  # type: ignore[type-arg]
    by_var: dict[str, list[Operation]] = {}
    for b in region.blocks:
        for op in b.ops:
            if op.name == "upir.barrier":
                continue                # it orders accesses, it makes none
            effects = memory_effects(op)
            if not any(space in ("shared", "generic") for _, space in effects):
                continue
            var = var_of.get(op.operands[0]) if _shared_access(op) else None
            if var is None:
                return 0                # an access that may touch any shared variable
            by_var.setdefault(var, []).append(op)

    def form(op: Operation) -> Affine | None:
        f = affine_form(op.operands[0], symbols, 0, memo)
        if f is None:
            return None
        return Affine(frozenset(f[0].items()), f[1] + int(op.attributes.get("offset", 0)))

    changed = 0
    idom = dominators(region)
    preds = predecessors(region)
    for var, ops in by_var.items():
        stores = [op for op in ops if op.name == "ptx.st"]
        if not stores or any(set(mods(op)) & _PLAIN for op in ops):
            continue
        forms = {form(op) for op in stores}
        sizes = {type_size(ty(op)) for op in stores}
        if len(forms) != 1 or None in forms or len(sizes) != 1:
            continue
        (f,) = forms
        (size,) = sizes
        assert f is not None
        if not same_thread_only(f, size, block_dims):
            continue
        # every store of the variable writes the storing thread's own element: a load at
        # that element reads the thread's last store there
        own = {op for op in ops if op.name == "ptx.ld" and form(op) == f}
        for load in [op for op in ops if op in own]:
            store = _reaching_store(load, stores, idom, preds, symbols.loop_blocks)
            if store is None or store.operands[1].type != load.results[0].type or \
                    type_size(ty(load)) != size:
                continue
            if not _same_interval(store, load) and \
                    not _dead_once_forwarded(region, store, ops, own, preds):
                # the value would be kept per thread across the barrier, in a slot, while
                # the store stays for the other threads' loads: no cheaper than the load
                continue
            replace_all_uses(load.results[0], store.operands[1])
            load.drop_uses()
            load.parent.ops.remove(load)  # type: ignore[union-attr]
            ops.remove(load)
            changed += 1
        changed += _remove_dead_stores(region, ops, preds)
    return changed


def _reaching_store(load: Operation, stores: list[Operation], idom,  # type: ignore[no-untyped-def]
                    preds: dict[Block, list[Block]], in_loops: set[Block]) -> Operation | None:
    """The store every path to `load` passes last (among `stores`), if there is one."""
    blk = load.parent
    assert blk is not None
    pos = blk.ops.index(load)
    for op in reversed(blk.ops[:pos]):
        if op in stores:
            return op
    # walk up the dominator tree; the nearest dominating store must not be followed by
    # another store on some path to the load
    node = idom.get(blk)
    candidate: Operation | None = None
    while node is not None:
        found = [op for op in node.ops if op in stores]
        if found:
            candidate = found[-1]
            break
        node = idom.get(node)
    if candidate is None:
        return None
    cblk = candidate.parent
    assert cblk is not None
    # blocks on a path from the candidate to the load (excluding the two ends' far sides)
    forward = _reach(cblk, lambda b: b.successors, stop=blk)
    backward = _reach(blk, lambda b: preds.get(b, []), stop=cblk)
    between = (forward & backward) - {cblk, blk}
    if any(op in stores for b in between for op in b.ops):
        return None
    if blk in in_loops:
        return None                     # the load is in a loop: another iteration's store
    if not dominates(idom, cblk, blk):
        return None
    return candidate


def _same_interval(store: Operation, load: Operation) -> bool:
    """Whether `load` follows `store` in its block with no barrier between."""
    blk = store.parent
    if blk is None or load.parent is not blk:
        return False
    ops = blk.ops
    i, j = ops.index(store), ops.index(load)
    return i < j and not any(op.name == "upir.barrier" for op in ops[i + 1:j])


def _dead_once_forwarded(region: Region, store: Operation, ops: list[Operation],
                         own: set[Operation], preds: dict[Block, list[Block]]) -> bool:
    """Whether `store` is dead once the loads of the thread's own element (`own`) that read
    it are forwarded: the same thread's next store there follows in its block, and no other
    load of the variable (another thread's element) runs in the barrier intervals from the
    one before `store` to the one after that next store (_remove_dead_stores' test)."""
    blk = store.parent
    assert blk is not None
    pos = blk.ops.index(store)
    stores = {op for op in ops if op.name == "ptx.st"}
    later = next((op for op in blk.ops[pos + 1:] if op in stores), None)
    if later is None:
        return False
    others = {op for op in ops if op.name == "ptx.ld" and op not in own}
    between = blk.ops[pos + 1: blk.ops.index(later)]
    before = _walk(region, store, False, True, preds)
    after = _walk(region, later, True, True, preds)
    return before is not None and after is not None and \
        not any(op in others for op in between + before + after)


def _reach(start: Block, next_of, stop: Block) -> set[Block]:  # type: ignore[no-untyped-def]
    seen: set[Block] = set()
    work = list(next_of(start))
    while work:
        b = work.pop()
        if b in seen:
            continue
        seen.add(b)
        if b is not stop:
            work.extend(next_of(b))
    return seen


def _remove_dead_stores(region: Region, ops: list[Operation],
                        preds: dict[Block, list[Block]]) -> int:
    """Stores of `var` followed, on every path, by another store of the same thread's
    element with no load of `var` (any thread's) in the barrier intervals in between."""
    removed = 0
    loads = {op for op in ops if op.name == "ptx.ld"}
    stores = [op for op in ops if op.name == "ptx.st"]
    for store in list(stores):
        blk = store.parent
        assert blk is not None
        pos = blk.ops.index(store)
        later = next((op for op in blk.ops[pos + 1:] if op in stores), None)
        if later is None:
            continue                    # (only the simple case: the next store in the block)
        between = blk.ops[pos + 1: blk.ops.index(later)]
        if any(op in loads for op in between):
            continue
        # other threads may run the interval before `store` and after `later` meanwhile
        # (an empty interval is no unknown one: `later` right before the barriers, Fig. 9's
        # `weights[ty][tx] = weights[ty][tx] * node[ty]; __syncthreads();`)
        before = _walk(region, store, False, True, preds)
        after = _walk(region, later, True, True, preds)
        if before is None or after is None or any(op in loads for op in before + after):
            continue
        store.drop_uses()
        blk.ops.remove(store)
        stores.remove(store)
        ops.remove(store)
        removed += 1
    return removed


__all__ = ["StoreForwarding", "forward_stores"]
