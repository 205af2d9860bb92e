"""Warp-level passes: lockstep steps for legacy warp-synchronous code (`warp-lockstep`), and
the collectives code generation may run as vector operations across a warp's lanes
(`simd-collectives`).

`warp-lockstep`.  Code written for GPUs before Volta finishes a reduction or a scan inside
one warp through `volatile` shared memory with no `__syncwarp`, relying on the 32 lanes
executing each instruction together:

    if (tid < 32) { volatile float *s = sdata; s[tid] += s[tid + 32]; s[tid] += s[tid + 16]; ... }
    if (lane >= 1) s[i] += s[i - 1]; if (lane >= 2) s[i] += s[i - 2]; ...   // a warp scan

Run one thread after another between sync points, lane 0 does every step before lane 1
starts, and reads values the other lanes have not written yet.  This pass makes each
volatile access a warp-level step (COX's hierarchical collapsing at warp level): it inserts
a `upir.warp_collective {kind = "lockstep"}` before each group of volatile shared loads,
before each volatile shared store and after it, so the lanes of a warp that are at the same
step run it together (all their loads of a statement, then all their stores) and a lane
that went past a step waits until the lanes behind it catch up (the runtime schedules the
lowest pending step of a warp first, which makes the lanes that skipped a branch wait at
its end, as the reconvergence of a pre-Volta warp does).

A kernel gets steps when it has both volatile shared loads and volatile shared stores at
addresses that depend on the thread (or both volatile global/generic loads and stores at
thread-dependent addresses: the same reduction done in place in a global array), and a volatile store may be followed or preceded by a
volatile access to another element (or to one other lanes share) with no barrier or
`__syncwarp` between (automatic detection: what one lane writes, another reads without
synchronization), or, with the pass option `all=true` (`CPUIFY_WARP_LOCKSTEP=1`,
the `--warp-lockstep` option), every kernel at each of its shared and generic loads and
stores, volatile or not: for warp-synchronous code the detection misses (no `volatile`).
The loads and stores of a shared slot handed over with no barrier (a block-uniform location
that threads read and one thread then overwrites before the next sync point, as persistent
task-queue kernels fetch their next task; see `_slot_handoffs`) get steps too, volatile or not.
So does the second access of each pair of a shared store and another lane's load of the same
bytes (either order) with no sync point between, volatile or not, at affine addresses
(`_plain_exchange`: NPB-GPU LU's flux kernels, one warp per block).  A loop whose body holds
steps gets one at the end of each latch (`insert_latch_steps`): the lanes finish a pass
together before any starts the next, as a pre-Volta warp reconverges before the back edge.

`simd-collectives`.  A warp collective whose member mask is the full warp and whose lane
operands are the same in every thread (`__shfl_down_sync(0xffffffff, v, offset)` in a loop
over `offset`, votes, `__reduce_*_sync`) is marked `simd`: when every thread of the block
waits there and no thread has exited, the generated block function exchanges the values of
each warp with vector instructions on a `<32 x i32>` of its lanes' values (a shuffle, a
compare and bitcast for a ballot, a vector reduction for redux) and runs the next segment
for all threads, instead of the C scheduler's lane-by-lane exchange and a masked run.
Disable it (`--disable-pass=simd-collectives`) for the scalar lowering."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cpuify.analysis.access import Affine, affine_form
from cpuify.analysis.manager import AnalysisManager, cached
from cpuify.analysis.uniformity import uniform_values
from cpuify.analysis.thread_index import thread_index_condition
from cpuify.ir.core import Block, Operation, OpResult, Region, Value, dominators, natural_loops, \
    predecessors
from cpuify.ir.dialects import info
from cpuify.ir.structure import block_body
from cpuify.ir.structured_shapes import nested_ops
from cpuify.transforms.pass_manager import lower_for_cfg_rewrite, register, structured_now

LOCKSTEP = "lockstep"
_SPACES = ("global", "shared", "local", "const", "param", "tex")


def _space(op: Operation) -> str:
    """The state space of a load or store: `shared`, `global`, ... or `generic`."""
    for m in op.attributes.get("mods", ()):
        base = m.split("::")[0]
        if base in _SPACES:
            return base
    return "generic"


def _is_volatile(op: Operation) -> bool:
    return "volatile" in op.attributes.get("mods", ())


def lockstep_accesses(region: Region, all_accesses: bool = False,
                      uniform: set[Value] | None = None,
                      block_dims: tuple[int, int, int] | None = None) -> set[Operation]:
    """The loads and stores of a block body that become warp-level steps: its volatile
    shared accesses when the kernel communicates between lanes through them (it both loads
    and stores volatile shared memory, at an address that depends on the thread, and a
    store and another lane's access of the same memory may follow each other with no barrier
    or __syncwarp between), or, with `all_accesses`, every shared and generic load and
    store.  `block_dims`: the block shape the code is for, when known."""
    accesses = [op for b in region.blocks for op in b.ops if op.name in ("ptx.ld", "ptx.st")]
    if all_accesses:
        return {op for op in accesses if _space(op) in ("shared", "generic")}
    if uniform is None:
        uniform = uniform_values(region)
    stepped = _slot_handoffs(accesses, uniform)
    # volatile shared memory, and global memory reached through a global or generic pointer
    # (the same reduction done in place in the input array: `volatile int *v = g_idata +
    # ...`); there only accesses at thread-dependent addresses, so that a flag a spin-wait
    # polls (one address for every thread) is not made a step
    volatile_shared = [op for op in accesses if _is_volatile(op) and _space(op) == "shared"]
    volatile_other = [op for op in accesses if _is_volatile(op) and
                      _space(op) in ("global", "generic") and op.operands[0] not in uniform]
    for volatile in (volatile_shared, volatile_other):
        loads = [op for op in volatile if op.name == "ptx.ld"]
        stores = [op for op in volatile if op.name == "ptx.st"]
        if loads and stores and not all(op.operands[0] in uniform for op in volatile) and \
                _unsynchronized_exchange(region, set(volatile), uniform, block_dims):
            stepped.update(volatile)    # (one address for every thread: a flag, not lanes' data)
    shared = [op for op in accesses if _space(op) == "shared"]
    stepped.update(_plain_exchange(region, shared, uniform, block_dims))
    return stepped


#: more shared accesses than this: _plain_exchange does not look (the pairs cost too much)
_PLAIN_EXCHANGE_LIMIT = 512


def _plain_exchange(region: Region, shared: list[Operation], uniform: set[Value],
                    block_dims: tuple[int, int, int] | None) -> set[Operation]:
    """The second accesses of the pairs where a shared store and a shared access that
    another lane of the same warp makes to the same bytes follow each other with no barrier
    or __syncwarp between, volatile or not, where both addresses are affine in the thread
    index over the same block-uniform terms (so that the overlap is a fact of the addresses,
    not a guess from unknown ones):

        t[2 * tid] = x + y; ... out[tid] = t[tid];               // lane 1 reads lane 0's slot
        while (i < n) { t[tid] = in[i]; __syncthreads();          // the next pass overwrites
                        if (tid >= 1) out[i] = t[tid - 1]; i += blockDim.x - 2; }

    Code written for one warp per block (NPB-GPU LU's flux kernels) exchanges data this
    way and relies on the warp's lockstep; one thread after another, lane 0 would read
    slots before the others wrote them, or overwrite slots they have not read yet.  A step
    before each second access is enough: every lane of the warp has made the first one when
    any lane goes on (the latch steps keep a loop's passes apart), and it costs far fewer
    steps than stepping every shared access (NPB-GPU LU's rhs kernels: 163 steps)."""
    if len(shared) > _PLAIN_EXCHANGE_LIMIT or not any(op.name == "ptx.st" for op in shared):
        return set()
    memo: dict = {}     # type: ignore[type-arg]
    lanes = _warp_lanes(block_dims)
    guards = _thread_index_guards(region, block_dims or (32, 1, 1))

    def address(op: Operation) -> tuple[frozenset, tuple[int, int, int], int] | None:  # type: ignore[type-arg]
        form = affine_form(op.operands[0], uniform, 0, memo)
        if form is None:
            return None
        leaves = frozenset((k, c) for k, c in form[0].items()
                           if not (isinstance(k, tuple) and k[0] == "tid"))
        return leaves, Affine(frozenset(form[0].items()), 0).tid_coefficients(), \
            form[1] + int(op.attributes.get("offset", 0))

    seen: dict = {}     # type: ignore[type-arg]

    def other_lane(a: Operation, b: Operation) -> bool:
        fa, fb = address(a), address(b)
        key = (fa, fb, _access_bytes(a), _access_bytes(b), tuple(guards.get(a.parent, ())),
               tuple(guards.get(b.parent, ())))
        if key not in seen:
            seen[key] = overlap(a, b, fa, fb)
        return seen[key]

    def overlap(a, b, fa, fb) -> bool:  # type: ignore[no-untyped-def]
        """Whether lanes k != m of one warp that may run a and b (their blocks' guards on
        one thread index let them) touch a common byte."""
        if fa is None or fb is None or fa[0] != fb[0] or fa[1] == fb[1] == (0, 0, 0):
            return False    # (one address for every lane: a flag or slot, _slot_handoffs')
        if lanes is None and (fa[1][1:] != (0, 0) or fb[1][1:] != (0, 0)):
            return False    # (y/z parts with an unknown block shape: lanes unknown)
        sa, sb = _access_bytes(a), _access_bytes(b)
        ga, gb = guards.get(a.parent, ()), guards.get(b.parent, ())
        for warp in lanes or (tuple((x, 0, 0) for x in range(32)),):
            at_b: dict[int, list[int]] = {}
            for k, t in enumerate(warp):
                if all(t[d] in ok for d, ok in gb):
                    at_b.setdefault(fb[2] + sum(c * i for c, i in zip(fb[1], t)), []).append(k)
            for k, t in enumerate(warp):
                if not all(t[d] in ok for d, ok in ga):
                    continue
                x = fa[2] + sum(c * i for c, i in zip(fa[1], t))
                if any(m != k for y in range(x - sb + 1, x + sa) for m in at_b.get(y, ())):
                    return True
        return False

    targets = set(shared)
    second: set[Operation] = set()
    for a in shared:
        for b in _reached_without_sync(a, targets):
            # a store and another lane's load (two stores: lockstep orders them no better)
            if b not in second and (a.name == "ptx.st") != (b.name == "ptx.st") and \
                    other_lane(a, b):
                second.add(b)
    return second


def _thread_index_guards(region: Region, block_dims: tuple[int, int, int]
                         ) -> dict[Block, list[tuple[int, frozenset[int]]]]:
    """Per block, the conditions on one thread index that every thread running it has met:
    (dim, the indices along dim that pass) for each branch on a thread index (`tid < k`,
    `tid >= 1`) whose way is the only entry of a block that dominates this one.  Without a
    known block shape, x indices 0..31 (one warp's lanes along x)."""
    idom = dominators(region)
    preds = predecessors(region)
    taken: dict[Block, tuple[int, frozenset[int]]] = {}
    for b in region.blocks:
        term = b.ops[-1] if b.ops else None
        if term is None or term.name != "cf.cond_br" or len(set(b.successors)) != 2:
            continue
        found = thread_index_condition(term.operands[0], block_dims)
        if found is None:
            continue
        dim, true_for = found
        ways = (frozenset(true_for), frozenset(range(block_dims[dim])) - frozenset(true_for))
        for way, ok in zip(b.successors, ways):
            if preds.get(way) == [b]:
                taken[way] = (dim, ok)
    out: dict[Block, list[tuple[int, frozenset[int]]]] = {}
    for b in region.blocks:
        conds, d = [], b
        while d is not None and d in idom:
            if d in taken:
                conds.append(taken[d])
            up = idom[d]
            d = None if up is d else up
        if conds:
            out[b] = conds
    return out


def _warp_lanes(block_dims: tuple[int, int, int] | None
                ) -> list[tuple[tuple[int, int, int], ...]] | None:
    """The (x, y, z) thread indices of each warp of a block of `block_dims` (None: unknown)."""
    if block_dims is None:
        return None
    bx, by, bz = block_dims
    n = bx * by * bz
    return [tuple((t % bx, t // bx % by, t // (bx * by)) for t in range(base, min(base + 32, n)))
            for base in range(0, n, 32)]


def _access_bytes(op: Operation) -> int:
    """How many bytes a load or store moves (vector forms included)."""
    mods = op.attributes.get("mods", ())
    bits = next((int(m[1:]) for m in mods if m[:1] in "subf" and m[1:].isdigit()), 32)
    lanes = next((int(m[1:]) for m in mods if m[:1] == "v" and m[1:].isdigit()), 1)
    return max(1, bits // 8) * lanes


def _slot_handoffs(accesses: list[Operation], uniform: set[Value]) -> set[Operation]:
    """The shared loads and stores of "slots" handed over with no barrier: one shared
    location at a block-uniform address (the current task of a persistent task-queue
    kernel) that threads read and that is then overwritten (`if (tid == 0) slot = next`)
    with no __syncthreads() between the reads and the write, where some threads read it
    and go on without writing it:

        while (slot < n) { work(task); if (threadIdx.x == 0) { slot = atomicAdd(...); task = q[slot]; } __syncthreads(); }

    A race in CUDA terms, which GPUs resolve the way the program expects (the writing
    lane's warp has read the slot in lockstep, and the writer's atomic is slow), while
    one thread after another would have thread 0 publish the next task before thread 1
    has read the current one.  Stepping these accesses (the loads of every lane before a
    store) gives the GPU's order."""
    memo: dict = {}     # type: ignore[type-arg]

    def where(op: Operation) -> tuple[frozenset, int] | None:  # type: ignore[type-arg]
        if op.operands[0] not in uniform:
            return None
        form = affine_form(op.operands[0], uniform, 0, memo)
        if form is None or any(isinstance(k, tuple) and k[0] == "tid" for k in form[0]):
            return None
        return frozenset(form[0].items()), form[1] + int(op.attributes.get("offset", 0))

    shared = [op for op in accesses if _space(op) == "shared"]
    stores = [(op, where(op)) for op in shared if op.name == "ptx.st"]
    stores = [(op, at) for op, at in stores if at is not None]
    if not stores:
        return set()
    found: set[Operation] = set()
    for load in shared:
        if load.name != "ptx.ld":
            continue
        at = where(load)
        if at is None:
            continue
        size = _access_bytes(load)
        same = {st for st, sat in stores if sat[0] == at[0]
                and sat[1] < at[1] + size and at[1] < sat[1] + _access_bytes(st)}
        if not same:
            continue
        reached = _reached_without_sync(load, same)
        if reached and _may_end_without(load, reached):
            found.add(load)
            found.update(reached)
    if not found:
        return found
    # every read of a slot that is handed over steps, so all lanes read before the write
    slots = {where(op) for op in found}
    found.update(op for op in shared if op.name == "ptx.ld" and where(op) in slots)
    return found


def _may_end_without(start: Operation, stores: set[Operation]) -> bool:
    """Whether a thread may go from `start` to a sync point or the kernel's end without
    executing any of `stores` (some threads read the slot and leave the writing to others)."""
    seen: set = set()   # type: ignore[type-arg]
    work: list = []     # type: ignore[type-arg]

    def scan(ops: list[Operation], blk) -> bool:  # type: ignore[no-untyped-def]
        for op in ops:
            if op in stores:
                return False
            if _is_sync_between(op):
                return True
        if not blk.successors:
            return True
        work.extend(blk.successors)
        return False

    block = start.parent
    assert block is not None
    if scan(block.ops[block.ops.index(start) + 1:], block):
        return True
    while work:
        blk = work.pop()
        if blk in seen:
            continue
        seen.add(blk)
        if scan(blk.ops, blk):
            return True
    return False


def _unsynchronized_exchange(region: Region, volatile: set[Operation], uniform: set[Value],
                             block_dims: tuple[int, int, int] | None) -> bool:
    """Whether a volatile store and a volatile access that another lane of the same warp
    may make to the same bytes follow each other with no barrier or __syncwarp between:
    what one lane writes another reads or overwrites, relying on lockstep.  Code that
    synchronizes every exchange (a Kogge-Stone scan with __syncthreads() around each step,
    `s[i] += t` touching only the thread's own element in between) needs no steps."""
    memo: dict = {}     # type: ignore[type-arg]

    def address(op: Operation) -> tuple[frozenset, int] | None:  # type: ignore[type-arg]
        form = affine_form(op.operands[0], uniform, 0, memo)
        if form is None:
            return None
        return frozenset(form[0].items()), form[1] + int(op.attributes.get("offset", 0))

    def size_of(op: Operation) -> int:
        bits = next((m[1:] for m in op.attributes.get("mods", ())
                     if m[:1] in "subf" and m[1:].isdigit()), "32")
        return max(1, int(bits) // 8)

    deltas_of: dict[tuple[int, int, int], set[int]] = {}

    def lane_deltas(coefs: tuple[int, int, int]) -> set[int]:
        """How far apart (in bytes) the thread-index parts of an address are for two
        different lanes of one warp."""
        got = deltas_of.get(coefs)
        if got is not None:
            return got
        if block_dims is None or (coefs[1] == 0 and coefs[2] == 0 and block_dims[0] % 32 == 0):
            got = {coefs[0] * k for k in range(-31, 32) if k}      # lanes are consecutive x
        else:
            bx, by, bz = block_dims
            n = bx * by * bz
            got = set()
            for base in range(0, n, 32):
                lanes = {coefs[0] * (t % bx) + coefs[1] * (t // bx % by) + coefs[2] * (t // (bx * by))
                         for t in range(base, min(base + 32, n))}
                if len(lanes) < min(32, n - base):
                    got.add(0)                                      # two lanes, one address
                got.update(y - x for x in lanes for y in lanes if x != y)
        deltas_of[coefs] = got
        return got

    def cross_lane(a: Operation, b: Operation) -> bool:
        """Whether one lane's access `a` and another lane's access `b`, in the same warp,
        may touch a common byte."""
        fa, fb = address(a), address(b)
        if fa is None or fb is None:
            return True
        leaves_a = {(k, c) for k, c in fa[0] if not (isinstance(k, tuple) and k[0] == "tid")}
        leaves_b = {(k, c) for k, c in fb[0] if not (isinstance(k, tuple) and k[0] == "tid")}
        coefs = Affine(fa[0], 0).tid_coefficients()
        if leaves_a != leaves_b or coefs != Affine(fb[0], 0).tid_coefficients():
            return True
        if block_dims is None and (coefs[1] or coefs[2]):
            return True
        sa, sb = size_of(a), size_of(b)
        return any(-sb < d + fb[1] - fa[1] < sa for d in lane_deltas(coefs))

    if len(volatile) > 256:
        return True         # (not worth the pairs: take it as warp-synchronous)
    for a in volatile:
        for b in _reached_without_sync(a, volatile):
            if (a.name == "ptx.st" or b.name == "ptx.st") and cross_lane(a, b):
                return True
    return False


def _is_sync_between(op: Operation) -> bool:
    return op.name == "upir.barrier" or (op.name == "upir.warp_collective" and
                                         op.attributes.get("kind") == "syncwarp")


def _reached_without_sync(start: Operation, targets: set[Operation]) -> set[Operation]:
    """The ops of `targets` a thread may execute after `start` with no block barrier or
    __syncwarp in between (around loops too)."""
    found: set[Operation] = set()
    block = start.parent
    assert block is not None
    seen: set = set()   # type: ignore[type-arg]
    work: list = []     # type: ignore[type-arg]

    def scan(ops: list[Operation], blk) -> None:  # type: ignore[no-untyped-def]
        for op in ops:
            if _is_sync_between(op):
                return
            if op in targets:
                found.add(op)
        work.extend(blk.successors)

    scan(block.ops[block.ops.index(start) + 1:], block)
    while work:
        blk = work.pop()
        if blk in seen:
            continue
        seen.add(blk)
        scan(blk.ops, blk)
    return found


def _step(line: object) -> Operation:
    attrs: dict[str, object] = {"kind": LOCKSTEP}
    if line is not None:
        attrs["line"] = line
    return Operation("upir.warp_collective", [], [], attrs)


def _is_step(op: Operation | None) -> bool:
    return op is not None and op.name == "upir.warp_collective" and \
        op.attributes.get("kind") == LOCKSTEP


def insert_latch_steps(region: Region) -> int:
    """A step at the end of each latch of a loop that has steps (before the branch back):
    the lanes of a warp finish the loop's pass together before any goes on to the next.
    The runtime runs the lowest pending step of a warp first, which makes lanes that skip
    a branch wait at the step after it; without this step, a lane that skips the last
    stepped accesses of the body reaches the first step of the next pass, which comes
    earlier in the kernel, and runs it before the other lanes have finished this pass
    (a pre-Volta warp reconverges first).  Returns the number of steps added."""
    added = 0
    for header, (body, latches) in natural_loops(region).items():
        if not any(_is_step(op) for b in body for op in b.ops):
            continue
        for latch in latches:
            ops = latch.ops
            end = len(ops) - 1 if ops and info(ops[-1]).terminator else len(ops)
            if end > 0 and _is_step(ops[end - 1]):
                continue
            last = next((op.attributes.get("line") for op in reversed(ops)
                         if op.attributes.get("line") is not None), None)
            step = _step(last)
            step.parent = latch
            ops.insert(end, step)
            added += 1
    return added


def insert_lockstep_steps(region: Region, accesses: set[Operation]) -> int:
    """A step before each run of loads among `accesses`, before each store and after it
    (the next access then sees every lane's store).  Returns the number of steps added."""
    added = 0
    for block in region.blocks:
        out: list[Operation] = []
        after_load = False          # the last op out is a stepped load (a run of loads)
        for op in block.ops:
            if op in accesses:
                is_load = op.name == "ptx.ld"
                if not (is_load and after_load) and not _is_step(out[-1] if out else None):
                    step = _step(op.attributes.get("line"))
                    step.parent = block
                    out.append(step)
                    added += 1
                out.append(op)
                after_load = is_load
                if not is_load:
                    step = _step(op.attributes.get("line"))
                    step.parent = block
                    out.append(step)
                    added += 1
                continue
            # pure ops between the loads of one statement keep the run going
            if info(op).pure and not info(op).terminator:
                out.append(op)
                continue
            after_load = False
            out.append(op)
        block.ops = out
    return added


@register("warp-lockstep",
          "warp-level steps inserted around the volatile shared (and thread-indexed global) "
          "accesses of legacy "
          "warp-synchronous code and around shared slots handed over with no barrier "
          "(all=true: around every shared/generic access)")
@dataclass(frozen=True)
class WarpLockstep:
    """Pass: lockstep steps (`upir.warp_collective {kind = "lockstep"}`) around the accesses
    lockstep_accesses() picks; the kernel op records `warp_lockstep = <steps>`."""
    name: str = "warp-lockstep"
    all: bool = False

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of steps inserted."""
        region = block_body(kernel)
        if any(_is_step(op) for b in region.blocks for op in b.ops):
            return 0            # (already done: a pipeline naming the pass twice)
        uniform = None if self.all else cached(analyses, uniform_values, region)
        dims = kernel.attributes.get("block_dims")
        accesses = lockstep_accesses(region, self.all, uniform,
                                     tuple(dims) if dims else None)  # type: ignore[arg-type]
        if not accesses:
            return 0
        added = insert_lockstep_steps(region, accesses)
        added += insert_latch_steps(region)
        if added:
            kernel.attributes["warp_lockstep"] = added
        return added


#: collectives the vector exchange implements (kind -> the mode modifiers it handles)
_SIMD_KINDS = {"shfl": ("up", "down", "bfly", "idx"), "vote": ("all", "any", "uni", "ballot"),
               "redux": ("add", "min", "max", "and", "or", "xor")}
FULL_MASK = 0xFFFFFFFF


def _const(v: Value) -> int | None:
    """An integer constant's value (through moves), else None."""
    while isinstance(v, OpResult) and v.op.name == "ptx.mov" and len(v.op.operands) == 1 \
            and len(v.op.results) == 1:
        v = v.op.operands[0]
    if isinstance(v, OpResult) and v.op.name == "upir.const":
        c = v.op.attributes.get("value")
        return c if isinstance(c, int) else None
    return None


def simd_collective(op: Operation, uniform: set[Value]) -> bool:
    """Whether the vector exchange can do `op` for a whole block: a shuffle, vote or redux
    over the full warp (a constant member mask 0xffffffff) whose other operands (lane
    offset, clamp) are the same in every thread, on values of at most 32 bits."""
    if op.name != "upir.warp_collective":
        return False
    kind = op.attributes.get("kind")
    modes = _SIMD_KINDS.get(kind)  # type: ignore[arg-type]
    mods = op.attributes.get("mods", ())
    if modes is None or not any(m in modes for m in mods) or "b64" in mods:
        return False
    operands = op.operands
    if kind == "shfl":
        if len(operands) != 4:
            return False
        mask, lane_operands = operands[3], operands[1:3]
    else:
        if len(operands) != 2:
            return False
        mask, lane_operands = operands[1], []
    c = _const(mask)
    if c is None or c & FULL_MASK != FULL_MASK:
        return False
    return all(v in uniform for v in lane_operands) and \
        all(v.type in ("i32", "f32", "i16", "i8", "i1") for v in operands[:1])


@register("simd-collectives",
          "warp shuffles, votes and reductions over the full warp with block-uniform "
          "operands, marked for the vector exchange across lanes")
@dataclass(frozen=True)
class SimdCollectives:
    """Pass: marks `upir.warp_collective` ops `simd = true` (simd_collective)."""
    name: str = "simd-collectives"
    #: on the CFG (its uniformity); structured input is lowered only where a collective is
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of collectives marked."""
        if structured_now(kernel, analyses):
            if not any(op.name == "upir.warp_collective" for op in nested_ops(kernel)):
                return 0
            lower_for_cfg_rewrite(kernel, analyses)
        region = block_body(kernel)
        ops = [op for b in region.blocks for op in b.ops if op.name == "upir.warp_collective"]
        if not ops:
            return 0
        uniform = cached(analyses, uniform_values, region)
        marked = 0
        for op in ops:
            if simd_collective(op, uniform) and not op.attributes.get("simd"):
                op.attributes["simd"] = True
                marked += 1
        return marked
