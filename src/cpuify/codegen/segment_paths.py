"""Where the threads of a segment go: the operations a segment runs, the sync points its
threads reach and whether they all take the same path there, the kind of each sync point
(the first layer of KernelCodegen: kernel_plan.py computes the plans from these)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

from cpuify.analysis.sync_points import SyncPoint
from cpuify.analysis.uniformity import uses_special
from cpuify.codegen.layout import SYNC_64BIT, SYNC_KINDS
from cpuify.errors import UnsupportedError
from cpuify.ir.core import Block, BlockArgument, Operation, OpResult, Region, Value
from cpuify.ir.dialects import info
from cpuify.ir.structure import block_parallel
from cpuify.lifting.lift import LiftedKernel
from cpuify.ir.modifiers import ORDERED

if TYPE_CHECKING:
    from cpuify.codegen.llvm_gen import ModuleCodegen



class SegmentPaths:
    """Queries on the paths of the kernel's threads between sync points (KernelPlan sets the
    attributes below)."""

    mod: ModuleCodegen
    kernel: LiftedKernel
    name: str
    block_dims: tuple[int, int, int] | None
    launch_dims: tuple[int, int, int] | None
    duplicate_dims: frozenset[int]
    region: Region
    segment_sizes: dict[int, int]
    syncs: list[SyncPoint]
    sync_of_op: dict[Operation, SyncPoint]
    uniform: set[Value]
    ipdom: dict[Block, Block]
    convergent: set[int]
    masked_runs: bool

    def convergent_segments(self) -> set[int]:
        """Resume points from which every thread follows the same path to the same next
        sync point (all branches on the way have block-uniform conditions), so that the
        scheduler need not look at each thread's state."""
        out: set[int] = set()
        # resume point -> the one sync point every thread reaches from it (no exit on the
        # way): its segment need not record each thread's state (see leave_at_sync)
        self.only_next: dict[int, SyncPoint] = {}
        # resume points from which every thread exits without reaching a sync point: in a
        # run of all threads, their segment stores no states and says that all exited
        self.only_exit: set[int] = set()
        if not self.syncs:
            return out
        starts = [(self.region.entry, 0)] + [(sp.block, sp.position + 1) for sp in self.syncs]
        for r, (blk, pos) in enumerate(starts):
            if not self.reaches_sync(blk, pos):
                self.only_exit.add(r)
            ok, reached, ends = self.convergent_walk(blk, pos, {})
            if ok:
                out.add(r)
                if len(reached) == 1 and not ends:
                    self.only_next[r] = self.sync_of_op[reached.pop()]
        return out

    def plan_masked_runs(self) -> bool:
        """Whether a segment can ever run for only some of the block's threads (a masked
        run: the threads waiting at its resume point, after others stopped elsewhere or
        exited).  Not when every segment is convergent (or lets every thread exit) and
        every sync point is a plain barrier: the run of all threads then returns the one
        state all threads are in, the block function goes on with all of them from there
        (masked 0), and it never enters the scheduler (block_sched.c), which alone runs
        segments masked.  Its segments then get no masked copy of their thread loops: half
        of their LLVM IR (SHOC's bottom_scan: 28 barriers in a loop, 56 segments)."""
        if not self.syncs:
            return False
        plain = (SYNC_KINDS["barrier"], SYNC_KINDS["soft"], SYNC_KINDS["lockstep"])
        if any(self.sync_kind(sp) not in plain for sp in self.syncs):
            return True
        return any(r not in self.convergent and r not in self.only_exit
                   for r in range(len(self.syncs) + 1))

    def plan_prefix_runs(self) -> bool:
        """Whether the segments after the kernel's start get a third thread loop, run when
        the live threads are the block's first live_end ones, whole warps, and the others
        exited: a block reduction's `if (warp == 0)` stage after the other warps returned.
        Without it, each of warp 0's steps was a masked run (a state check per thread), a
        scan of the states and, at each shuffle, an exchange.  In code specialized for a
        one-dimensional block shape with sync points, where some segment lets some threads
        exit and others go on."""
        dims = self.block_dims
        if dims is None or dims[1] * dims[2] != 1 or not self.syncs:
            return False
        # (in a convergent segment, all threads exit or none does)
        return any(r not in self.only_exit and r not in self.convergent and
                   any(op.name == "upir.exit" for op in self.ops_from(*self.resume_point(r)))
                   for r in range(len(self.syncs) + 1))

    def convergent_walk(self, blk: Block, pos: int, decided: dict[Operation, int]
                        ) -> tuple[bool, set[Operation], bool]:
        """(whether every thread going on from op `pos` of `blk` follows the same path,
        the sync points reached, whether some way exits) when the branches in `decided`
        go to the successor given."""
        seen: set[Block] = set()
        work = [(blk, pos)]
        reached: set[Operation] = set()
        ends = False
        while work:
            b, p = work.pop()
            for op in b.ops[p:]:
                if op in self.sync_of_op:
                    reached.add(op)
                    break
                if op.name in ("upir.exit", "upir.trap"):
                    ends = True
                succs = op.successors
                if op in decided:
                    succs = [op.successors[decided[op]]]
                elif op.name == "cf.cond_br" and op.operands[0] not in self.uniform \
                        and not self.reconverges(b):
                    return False, reached, ends
                for succ in succs:
                    if succ not in seen:
                        seen.add(succ)
                        work.append((succ, 0))
        return True, reached, ends

    #: a segment with more ops than this gets thread loops LLVM does not vectorize: the loop
    #: vectorizer's time grows faster than the loop body (generated chains of statements:
    #: 2000 statements, 7k ops, 2.3 s of 3.0 s in LLVM; 4000, 14k ops, 13.8 of 16.9 s;
    #: 16000: over 700 s; without it 1.0 s at 4000)
    MAX_VECTORIZED_OPS = 10000

    def too_large_to_vectorize(self, resume: int) -> bool:
        sizes = self.segment_sizes
        if resume not in sizes:
            n = 0
            for _ in self.segment_ops(resume):
                n += 1
                if n > self.MAX_VECTORIZED_OPS:
                    break
            sizes[resume] = n
        return sizes[resume] > self.MAX_VECTORIZED_OPS

    def wants_flat_loop(self, resume: int) -> bool:
        """Whether the segment from `resume`, in code for any block shape, runs its threads
        in one loop over the block's linear thread index (the thread indices counted along
        with it) instead of a z/y/x nest of three loops: when LLVM's loop vectorizer would
        not take its x loop anyway, since every way through the segment runs an access it
        never vectorizes (a volatile or otherwise ordered load or store, an atomic).  LLVM's
        loop passes then see one loop per copy of the thread loop, not three (SHOC's
        warp-synchronous scans: 112 such segments in one file).  Specialized code keeps its
        nest (constant bounds), and so do kernels without sync points.  Only in kernels the
        flat-thread-loops pass marked."""
        if self.launch_dims is not None or not self.syncs or \
                not block_parallel(self.kernel.op).attributes.get("flat_thread_loops"):
            return False
        return not self._ordered_avoidable(*self.resume_point(resume))

    def _ordered_avoidable(self, blk: Block, pos: int) -> bool:
        """Whether a thread loop running from op `pos` of `blk` to the segment's end has a
        version without an ordered access (ORDERED, atomics) once LLVM unswitched it: some
        way avoids them where each block-uniform branch takes one side (unswitching copies
        the loop for each) and each other branch both (they stay in the one loop)."""
        def scan(b: Block, p: int) -> tuple[bool | None, list[Block], bool]:
            # (the way's end when the block decides it, successors, whether all must avoid)
            for op in b.ops[p:]:
                if op in self.sync_of_op or op.name in ("upir.exit", "upir.trap"):
                    return True, [], False
                if op.name in ("ptx.atom", "ptx.red") or op.name in ("ptx.ld", "ptx.st") and \
                        ORDERED & set(op.attributes.get("mods", ())):
                    return False, [], False
                if op.successors:
                    branch = len(op.successors) > 1 and bool(op.operands) and \
                        op.operands[0] not in self.uniform
                    return None, list(op.successors), branch
            return True, [], False      # (the kernel's end)
        nodes: dict[tuple[Block, int], tuple[bool | None, list[Block], bool]] = {}
        work = [(blk, pos)]
        while work:
            key = work.pop()
            if key not in nodes:
                nodes[key] = scan(*key)
                work.extend((succ, 0) for succ in nodes[key][1])
        # least fixpoint: a way avoids them only if it is shown to reach the end
        avoid = {key: bool(end) for key, (end, _, _) in nodes.items()}
        changed = True
        while changed:
            changed = False
            for key, (end, succs, every) in nodes.items():
                if end is None and not avoid[key]:
                    ways = (avoid[(succ, 0)] for succ in succs)
                    if all(ways) if every else any(ways):
                        avoid[key] = changed = True
        return avoid[(blk, pos)]

    def segment_ops(self, resume: int) -> Iterator[Operation]:
        """The operations the segment from `resume` runs: those it reaches, and those that
        recompute at its start the values crossing the sync point (an address computed
        before a barrier and used after it)."""
        yield from (op for op in self.ops_from(*self.resume_point(resume))
                    if op not in self.sync_of_op)
        if not resume:
            return
        sp = self.syncs[resume - 1]
        seen: set[Operation] = set()
        work = [v for v in [*sp.remat, *sp.derived.values()] if isinstance(v, OpResult)]
        kept = set(sp.live)                 # (restored from their slots, not recomputed)
        while work:
            op = work.pop().op
            if op in seen:
                continue
            seen.add(op)
            yield op
            work.extend(o for o in op.operands if isinstance(o, OpResult) and o not in kept)

    def _if_join(self, branch: Operation) -> Block | None:
        """Where the two ways of an `if` meet, when neither reaches a sync point or an exit
        before that; else None."""
        if branch.parent is None or not self.reconverges(branch.parent):
            return None
        return self.ipdom.get(branch.parent)

    def unsigned_index_segments(self) -> set[int]:
        """Segments that widen an unsigned 32-bit value computed from the thread index
        (`mul.wide.u32 %rd, %r_i, 4`: an address from an `unsigned int i`)."""
        out = set()
        for r in range(len(self.syncs) + 1):
            for op in self.ops_from(*self.resume_point(r)):
                m = op.attributes.get("mods", [])
                if op.name in ("ptx.mul", "ptx.cvt") and ("wide" in m or op.name == "ptx.cvt") \
                        and "u32" in m and any(uses_special(o, "%tid", 12) for o in op.operands):
                    out.add(r)
                    break
        return out

    def resume_point(self, resume: int) -> tuple[Block, int]:
        """(block, op index) where the segment from `resume` starts."""
        if resume == 0:
            return self.region.entry, 0
        sp = self.syncs[resume - 1]
        return sp.block, sp.position + 1

    def restored_at(self, resume: int) -> set[Value]:
        """The values the segment from `resume` reads from slots or recomputes at its start."""
        if resume == 0:
            return set()
        sp = self.syncs[resume - 1]
        return set(sp.live) | set(sp.remat) | set(sp.derived)

    def ops_from(self, blk: Block, pos: int) -> Iterator[Operation]:
        """The operations a thread may run going on from op `pos` of `blk`, up to and
        including the sync points it reaches; each once, nearest first."""
        seen: set[Block] = set()
        work = deque([(blk, pos)])
        while work:
            b, p = work.popleft()
            for op in b.ops[p:]:
                yield op
                if op in self.sync_of_op:
                    break
                for succ in op.successors:
                    if succ not in seen:
                        seen.add(succ)
                        work.append((succ, 0))

    def reaches_sync(self, blk: Block, pos: int) -> bool:
        """Whether a thread going on from op `pos` of `blk` may reach a sync point."""
        return any(op in self.sync_of_op for op in self.ops_from(blk, pos))

    def _only_goes_on(self, block: Block, target: Operation | None) -> bool:
        """Whether a thread entering `block` only reaches `target` (the sync point; None:
        the thread's exit) through blocks that do nothing."""
        seen: set[Block] = set()
        while block not in seen:
            seen.add(block)
            if block.args:
                return False
            for op in block.ops:
                if op is target:
                    return True
                if op is block.terminator:
                    break
                if not info(op).pure:
                    return False
            term = block.terminator
            if term is None:
                return False
            if target is None and term.name == "upir.exit":
                return True
            if term.name != "cf.br":
                return False
            block = term.successors[0]
        return False

    def defined_in_segment(self, v: Value, resume: int) -> bool:
        """Whether a thread running the segment from `resume` may (re)define v."""
        for op in self.ops_from(*self.resume_point(resume)):
            if op in self.sync_of_op:
                continue
            if isinstance(v, OpResult) and op is v.op:
                return True
            if isinstance(v, BlockArgument) and v.owner in op.successors:
                return True
        return False

    def reconverges(self, branch: Block) -> bool:
        """Whether the threads parting at `branch` all meet again at its immediate
        post-dominator before any of them reaches a sync point or exits."""
        join = self.ipdom.get(branch)
        if join is None:
            return False
        seen: set[Block] = set()
        work = list(branch.successors)
        while work:
            x = work.pop()
            if x is join or x in seen:
                continue
            seen.add(x)
            if not x.successors or any(op in self.sync_of_op for op in x.ops):
                return False
            work.extend(x.successors)
        return True

    def error(self, msg: str, op: Operation) -> None:
        line = op.attributes.get("line")
        raise UnsupportedError(msg, line=line, kernel=self.name,
                               source_line=self.mod.ptx.source_line(line) if line else None)

    def sync_kind(self, sp: SyncPoint) -> int:
        op = sp.op
        mods = op.attributes.get("mods", [])
        if op.name == "upir.spin_wait":
            return SYNC_KINDS["yield"]
        if op.name == "upir.barrier":
            if op.attributes.get("soft"):
                return SYNC_KINDS["soft"]
            red = op.attributes.get("reduce")
            return SYNC_KINDS["barrier" if red is None else f"barrier.{red}"]
        kind = op.attributes["kind"]
        if kind == "named_barrier":
            return SYNC_KINDS["barrier.arrive" if op.attributes.get("arrive") else "barrier.named"]
        if kind == "syncwarp":
            return SYNC_KINDS["syncwarp"]
        if kind == "shfl":
            mode = next(m for m in mods if m in ("up", "down", "bfly", "idx"))
            return SYNC_KINDS[f"shfl.{mode}"]
        if kind == "vote":
            mode = next(m for m in mods if m in ("all", "any", "uni", "ballot"))
            return SYNC_KINDS[f"vote.{mode}"]
        if kind in ("activemask", "lockstep"):
            return SYNC_KINDS[kind]
        if kind == "match":
            mode = "any" if "any" in mods else "all"
            return SYNC_KINDS[f"match.{mode}"] | (SYNC_64BIT if "b64" in mods else 0)
        if kind == "redux":
            opn = next(m for m in mods if m in ("add", "min", "max", "and", "or", "xor"))
            if opn in ("min", "max"):
                t = "s32" if "s32" in mods else "u32"
                return SYNC_KINDS[f"redux.{opn}.{t}"]
            return SYNC_KINDS[f"redux.{opn}"]
        self.error(f"unknown warp collective '{kind}'", op)
        return 0
