"""Forward progress: yield points in loops that wait for other threads.

A GPU runs the threads of a block and the blocks of a grid at the same time, so a thread may
wait for another by spinning on memory:

    while (atomicCAS(&lock, 0, 1) != 0) {}              // a lock
    while (((volatile int *)flags)[b - 1] == 0) {}      // a chained scan's look-back
    this_grid().sync()                                  // nvcc: ld.acquire.gpu in a loop

cpuify runs the threads of a block one after another between sync points, so such a loop
would spin forever on a value the thread it waits for never gets to write.  This pass finds
those loops and puts a `upir.spin_wait` on each of their back edges: a thread that goes
round once more stops there (a sync point of kind "yield"), the block scheduler runs the
other threads of the block, and when every thread of the block waits, the runtime runs other
blocks (runtime/cpuify_rt.c: blocks of such kernels are resumable fibers).

A loop waits for memory when one of its exits depends (through the values the loop computes
and carries) on a *waiting read*:
  * a load other threads may have written since: `ld.volatile`, `ld.acquire`, `ld.relaxed`,
    `ld.mmio`, an atomic that polls (compare-and-swap, exchange, `atomicAdd(p, 0)`: not
    `atomicAdd(&next, 1)`, a work queue that moves on by itself), or
    `mbarrier.test_wait`/`try_wait` (`cuda::barrier` waits),
  * a plain load of global, shared or generic memory from an address the loop does not
    change, in a loop that stores nothing there (nvcc keeps such a load in the loop only
    when it must be read again),
or when it calls `nanosleep` (a back-off loop).  Counted loops (`for (i = 0; i < n; i++)`),
loops over arrays (`while (a[i] < x) i++`: the address changes) and binary searches do not
qualify: their exits depend on counters or on loads from moving addresses.  The yield point
costs a trip through the scheduler per extra iteration, only when the loop goes round again:
a wait that is over at once never stops."""

from __future__ import annotations

from dataclasses import dataclass

from cpuify.analysis.cfg import incoming_values
from cpuify.analysis.manager import AnalysisManager
from cpuify.ir.core import (
    Block,
    BlockArgument,
    Operation,
    OpResult,
    Region,
    Value,
    natural_loops,
)
from cpuify.ir.modifiers import mods
from cpuify.ir.structure import block_body
from cpuify.transforms.pass_manager import register

#: load modifiers that make a load read memory again every time (other threads' writes)
_WAITING_MODS = frozenset(("volatile", "acquire", "relaxed", "mmio"))
_SPACES = ("global", "shared", "local", "const", "param")
#: how many values the walk back from an exit condition looks at
_SLICE_LIMIT = 256


@register("spin-wait-yields",
          "spin-wait loops given a yield point (a thread that waits there lets the other "
          "threads and blocks run)")
@dataclass(frozen=True)
class SpinWaitYields:
    """Pass: a `upir.spin_wait` on each back edge of each loop that waits for memory other
    threads write (see the module docstring)."""
    name: str = "spin-wait-yields"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of loops given a yield point."""
        return len(insert_spin_waits(block_body(kernel)))


def _space(op: Operation) -> str:
    return next((s for s in _SPACES if s in mods(op)), "generic")


def _defined_in(v: Value, body: set[Block]) -> bool:
    if isinstance(v, OpResult):
        return v.op.parent in body
    if isinstance(v, BlockArgument):
        return v.block in body
    return False


def waiting_reads(body: set[Block]) -> list[Operation]:
    """The loads and atomics of the loop `body` that read memory other threads may write
    while the loop runs (see the module docstring)."""
    stores: set[str] = set()
    for b in body:
        for op in b.ops:
            if op.name in ("ptx.st", "ptx.atom", "ptx.red"):
                stores.add(_space(op))
    out: list[Operation] = []
    for b in body:
        for op in b.ops:
            if op.name == "ptx.atom" and op.results and _polls(op):
                out.append(op)
            elif op.name == "ptx.mbarrier" and op.results and \
                    {"test_wait", "try_wait"} & set(mods(op)):
                out.append(op)          # the phase of an asynchronous barrier
            elif op.name == "ptx.ld" and op.results:
                m = set(mods(op))
                space = _space(op)
                # a plain load of memory the loop does not write, from an address it does
                # not change: read again only to see another thread's write
                plain_wait = space in ("global", "shared", "generic") and "nc" not in m and \
                    not _defined_in(op.operands[0], body) and \
                    not (stores & {space, "generic"}) and \
                    not (space == "generic" and stores & {"global", "shared"})
                if m & _WAITING_MODS or plain_wait:
                    out.append(op)
    return out


def _polls(atom: Operation) -> bool:
    """Whether an atomic reads memory without moving it on: a compare-and-swap or exchange
    (a lock: it changes nothing while the lock is taken), or an update by the identity
    (`atomicAdd(p, 0)`, `atomicOr(p, 0)`).  `atomicAdd(&next, 1)` in a loop takes work items
    from a queue: each round moves on by itself, nobody is waited for."""
    m = set(mods(atom))
    if m & {"cas", "exch"}:
        return True
    value = atom.operands[1] if len(atom.operands) > 1 else None
    c = value.op.attributes.get("value") if isinstance(value, OpResult) and \
        value.op.name == "upir.const" else None
    if not isinstance(c, int):
        return False
    bits = 64 if m & {"b64", "u64", "s64"} else 32
    return (c == 0 and bool(m & {"add", "or", "xor"})) or \
        (c & ((1 << bits) - 1) == (1 << bits) - 1 and "and" in m)


def _exit_depends_on(body: set[Block], reads: set[Value],
                     incoming: dict[BlockArgument, list[Value]]) -> Operation | None:
    """The waiting read an exit condition of the loop depends on (within the loop), if any."""
    # (in the region's block order: `body` is a set, and the read found first names the
    # loop in the runtime's message, the same in every run)
    region = next(iter(body)).parent if body else None
    order = [b for b in region.blocks if b in body] if region is not None else list(body)
    conditions = [b.terminator.operands[0] for b in order
                  if b.terminator is not None and b.terminator.name == "cf.cond_br"
                  and any(s not in body for s in b.terminator.successors)]
    seen: set[Value] = set()
    work = list(conditions)
    while work and len(seen) < _SLICE_LIMIT:
        v = work.pop()
        if v in seen or not _defined_in(v, body):
            continue
        seen.add(v)
        if v in reads:
            return v.op  # type: ignore[union-attr]
        if isinstance(v, OpResult):
            work.extend(v.op.operands)
        elif isinstance(v, BlockArgument):
            work.extend(incoming.get(v, []))
    return None


def insert_spin_waits(region: Region) -> list[Operation]:
    """Put a `upir.spin_wait` on every back edge of every loop of `region` that waits for
    memory other threads write; returns the spin waits inserted (one per loop: on a loop
    with several back edges, copies of it share its attributes)."""
    loops = natural_loops(region)
    if not loops:
        return []
    incoming = incoming_values(region)
    inserted: list[Operation] = []
    # (an outer loop that waits too gets its own yield point: its inner wait may be over at
    # once in every round)
    for header, (body, latches) in sorted(loops.items(), key=lambda kv: len(kv[1][0])):
        sleeps = next((op for b in region.blocks if b in body for op in b.ops
                       if op.name == "upir.nanosleep"), None)
        reads = {op.results[0] for op in waiting_reads(body)}
        read = _exit_depends_on(body, reads, incoming) if reads else None
        why = read if read is not None else sleeps
        if why is None:
            continue
        attrs = {"line": why.attributes.get("line", 0),
                 "reason": "nanosleep" if read is None else why.name[4:]}
        first = None
        for latch in latches:
            term = latch.terminator
            assert term is not None
            for k, s in enumerate(term.successors):
                if s is not header:
                    continue
                edge = Block([a.type for a in header.args])
                op = Operation("upir.spin_wait", [], [], dict(attrs))
                edge.append(op)
                edge.append(Operation("cf.br", [], [], {"line": 0}, successors=[header],
                                      successor_args=[list(edge.args)]))
                _retarget(term, k, edge)
                region.blocks.insert(region.blocks.index(latch) + 1, edge)
                edge.parent = region
                for other, _ in loops.values():     # the loops around it hold it too
                    if header in other:
                        other.add(edge)
                if first is None:
                    first = op
        if first is not None:
            inserted.append(first)
    return inserted


def _retarget(term: Operation, k: int, target: Block) -> None:
    """Make successor k of `term` be `target` (which takes the same arguments)."""
    term.successors[k] = target
