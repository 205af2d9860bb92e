"""How each segment's thread loop is shaped, in code specialized for a block shape: the
threads it runs (thread ranges, deferred `if`s on a thread index), the copy for blocks whose
threads agree on its branches (range branches), lane groups and the lines it prefetches for
later iterations."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from cpuify.analysis.access import affine_form
from cpuify.analysis.pointers import memory_space
from cpuify.analysis.sync_points import SyncPoint
from cpuify.analysis.thread_index import THREAD_INDEX_IF, marked_threads
from cpuify.analysis.uniformity import uses_special
from cpuify.codegen.helpers import (
    ENTRY_SPECIALS, access_size, const_int, depends_on, forwards_to, is_thread_x, pure_over,
    row_probes, thread_ranges_along,
)
from cpuify.codegen.layout import SYNC_KINDS
from cpuify.codegen.segment_paths import ORDERED, SegmentPaths
from cpuify.ir.core import Block, Operation, OpResult, Value
from cpuify.ir.dialects import info



def next_block_prefetch_enabled() -> bool:
    """Whether entry segments prefetch the next block's lines (ThreadLoopPlans
    .next_block_prefetches): on unless CPUIFY_NEXT_BLOCK_PREFETCH=0 (part of the compile
    cache's key, compiler.toolchain_key)."""
    return os.environ.get("CPUIFY_NEXT_BLOCK_PREFETCH", "1").strip() != "0"

def _probes_in(ranges: tuple[tuple[int, int, int], ...], size: int) -> list[tuple[int, int, int]]:
    """The threads (x, y, z) whose addresses of `size` bytes cover every line that the threads
    in `ranges` ((start, stop, step) for x, y, z) touch along a row: one per 64-byte line of
    each row and the row's last, of consecutive threads; every thread of a strided range."""
    (x0, x1, xs), (y0, y1, ys), (z0, z1, zs) = ranges
    xs_probed = [x0 + x for x in row_probes(x1 - x0, size)] if xs == 1 else list(range(x0, x1, xs))
    return [(x, y, z) for z in range(z0, z1, zs) for y in range(y0, y1, ys) for x in xs_probed]


@dataclass
class DeferredRegion:
    """An `if` on one thread index near the end of a segment (a stencil's halo load under
    `tx == 0`), run after the segment's thread loop as a loop over the threads it selects
    (KernelCodegen.deferred_regions)."""
    branch: Operation                       # the cf.cond_br
    entry: Block                            # first block of the `then` side
    join: Block                             # where both sides meet
    ranges: tuple[tuple[int, int, int], ...]    # (start, stop, step) for x, y, z
    external: list[Value]                   # values from before the branch it uses


@dataclass
class RangeBranch:
    """A branch near the start of a segment whose condition, as threadIdx.x goes over the
    block, keeps one value on an interval of threads: a conjunction of comparisons of
    values `tx + u` (u the same in every thread) with values the same in every thread
    (`i < n` for i = blockIdx.x * blockDim.x + threadIdx.x; a grid-stride loop's test).
    Before the thread loop, the comparisons are evaluated for the first and the last
    thread; when every thread is inside the interval, a copy of the loop in which the
    branch is decided runs instead (KernelCodegen.range_branch)."""
    branch: Operation                       # the cf.cond_br
    # per edge on the way from the resume point to it: the block arguments it sets that are
    # the same in every thread, (argument, incoming value)
    edges: list[list[tuple[Value, Value]]]
    # v cmp c for every thread inside: (v = tx + u, c, "lt" | "le" | "gt" | "ge", unsigned)
    terms: list[tuple[Value, Value, str, bool]]
    inside: bool                            # the condition's value for the threads inside
    # how the threads of the copy with the branch decided stop (convergent_walk): all at
    # one sync point, all exiting, or all the same way; None: as in the segment
    decided_next: SyncPoint | None = None
    decided_exit: bool = False
    decided_convergent: bool = False
    # further branches of the segment on comparisons of the same kind, decided in the same
    # copy when their comparisons hold for every thread too (the reduction's
    # `if (i + BLOCK < n) v += in[i + BLOCK]` after `if (i < n) v = in[i]`): (the cf.cond_br,
    # its terms, its condition's value inside)
    also: list[tuple[Operation, list[tuple[Value, Value, str, bool]], bool]] = \
        field(default_factory=list)

    def decided(self) -> list[tuple[Operation, list[tuple[Value, Value, str, bool]], bool]]:
        """Every branch the copy decides: (the cf.cond_br, its terms, the condition there)."""
        return [(self.branch, self.terms, self.inside)] + self.also


class ThreadLoopPlans(SegmentPaths):
    """The plans of the segments' thread loops (KernelPlan computes them for every segment)."""

    thread_range: dict[int, tuple[tuple[int, int, int], ...]]
    deferred: dict[int, list[DeferredRegion]]
    lane_groups: set[int]
    aligned_rows: dict[int, Operation]
    lockstep: set[Value]
    preds: dict[Block, list[Block]]

    #: iterations ahead that the passes of an interchanged loop prefetch
    PREFETCH_AHEAD = 4
    #: ... of an interchanged block-uniform loop, whose passes prefetch hundreds of lines
    #: (UNIFORM_LOOP_MAX_PREFETCHES), each row of threads its own rows' lines right after
    #: it ran (row_prefetches): one pass ahead.  All of a pass's lines at its end, 2 passes
    #: ahead, laplace3d (408 lines a pass) spent 56% of its pass in the prefetch
    #: instructions, waiting for the L1's fill buffers, while the next pass's arithmetic
    #: waited behind them (one thread, 200^3, CPU time, interleaved: 36.2 ms; by rows 1
    #: pass ahead 31.8 ms, 2 ahead 33.0 ms; all at the end 1 ahead 36.6 ms; 2026-11-27)
    UNIFORM_LOOP_PREFETCH_AHEAD = 1
    #: iterations ahead that the segment of a loop with barriers prefetches (counted from
    #: the iteration whose barrier it resumes at; its own accesses are for the next one)
    LOOP_PREFETCH_AHEAD = 2
    #: at most this many prefetches per pass (rows x lines x accesses)
    MAX_PREFETCHES = 64
    #: the same for an iteration of an interchanged block-uniform loop: a block marching
    #: through a 3D grid (laplace3d: 32 x 8 threads, 4 planes per unrolled iteration, each
    #: plane's rows a page apart and the planes 160 KB apart, where the hardware
    #: prefetchers do not follow) reads new lines in most of its ~24 accesses; with the
    #: first 64 (or 192) probes it ran as before, with all of them 1.5x faster (one thread)
    UNIFORM_LOOP_MAX_PREFETCHES = 640
    #: ... only for accesses whose row of threads spans at most this many bytes (laplace3d's
    #: 32 floats: 2 lines): a longer contiguous run (the clustering cost's 256 floats per
    #: iteration) is followed by the hardware's stream prefetcher, and prefetching it as
    #: well made that kernel 10-15% slower
    UNIFORM_LOOP_MAX_ROW = 256

    def iteration_prefetches(self, resume: int
                             ) -> list[tuple[Operation, list[tuple[int, int, int]], bool]]:
        """The global loads and stores of an interchanged loop's iteration (the segment
        from the soft barrier at its header, `resume`) whose lines each pass prefetches for
        the pass prefetch_advance iterations later (SegmentEmitter.prefetch_ahead), each
        with the threads (x, y, z) whose addresses cover its lines and whether the lines
        will be written (a store, or a load from the address a store then writes: once,
        as prefetchw), in code specialized for a block shape.  A grid-stride loop run one
        block at a time reads one block's worth (1 KB for 256 floats) every
        gridDim * blockDim elements: a new page in each iteration, where the hardware
        prefetchers do not follow, so each pass waited for its lines to come from L3 or
        DRAM.  Only accesses with addresses computed from the
        iteration counter, the induction variables derived from it, block-uniform values,
        thread and block indices, parameters and constants.

        The same for a loop with barriers whose block-uniform counter crosses the barrier
        `resume` resumes at (SyncPoint.steps: the CUDA samples' matrixMul stepping through
        tiles, pathfinder's rows): the segment loads the next iteration's tiles and
        prefetches those of the iteration LOOP_PREFETCH_AHEAD after the barrier's, whose
        rows are a page apart (pathfinder 1.74 -> 1.66 ms; matrixMul's stall on its B
        tile, 16 lines 4 KB apart, stayed: within noise)."""
        dims = self.block_dims
        sp = self.syncs[resume - 1]
        if dims is None:
            return []
        budget = self.MAX_PREFETCHES
        if self.sync_kind(sp) == SYNC_KINDS["soft"]:
            counters = {v for v in sp.live if v in self.lockstep}
            if self._uniform_loop_pass(sp):
                # an interchanged block-uniform loop (interchange-uniform-loops): its counter
                # advances by a constant step (restore(advance=...) moves it ahead)
                counters = set(sp.steps)
                budget = self.UNIFORM_LOOP_MAX_PREFETCHES
        else:
            counters = set(sp.steps)
        if not counters:
            return []
        leaves = {v for v in sp.live if v in self.uniform} | set(sp.derived)
        found: list[tuple[Operation, list[tuple[int, int, int]], bool]] = []
        seen: dict[tuple[Value, int], int] = {}
        lines = 0
        for op in self.ops_from(*self.resume_point(resume)):
            if op.name not in ("ptx.ld", "ptx.st") or memory_space(op) != "global" or \
                    ORDERED & set(op.attributes.get("mods", ())):
                continue        # (a volatile or ordered access is left exactly as written)
            addr = op.operands[0]
            key = (addr, op.attributes.get("offset", 0))
            # y[i] = ... y[i]: the load's prefetch, for writing; x[i - 1], x[i + 1] next to
            # x[i]: the lines of its row (probes cover whole rows), at most one more
            near = key if key in seen else next(
                (k for k in seen if k[0] is addr and abs(k[1] - key[1]) < 64), None) \
                if budget > self.MAX_PREFETCHES else None
            if near is not None:
                k = seen[near]
                found[k] = (found[k][0], found[k][1], found[k][2] or op.name == "ptx.st")
                continue
            if not pure_over(addr, leaves, self._PREFETCH_SPECIALS, 16):
                continue
            inputs = [addr] + [e for v, e in sp.derived.items() if depends_on(addr, v, 16)]
            if not any(depends_on(addr, v, 16) for v in counters | set(sp.derived)):
                continue
            if any(uses_special(v, "%tid", 16) for v in inputs):
                if budget > self.MAX_PREFETCHES and \
                        dims[0] * access_size(op) > self.UNIFORM_LOOP_MAX_ROW:
                    continue    # a long run of lines: the hardware's stream prefetcher's
                probes = [(x, y, z) for z in range(dims[2]) for y in range(dims[1])
                          for x in row_probes(dims[0], access_size(op))]
            else:
                probes = [(0, 0, 0)]    # the same address in every thread
            # (within the budget: a row wider than it gets its first lines prefetched, where
            # the hardware prefetcher has not picked up the page yet)
            probes = probes[:budget - lines]
            if not probes:
                break
            lines += len(probes)
            seen[key] = len(found)
            found.append((op, probes, op.name == "ptx.st"))
        return found

    _PREFETCH_SPECIALS = ("%tid", "%ctaid", "%nctaid", "%ntid")

    #: lines the entry segment prefetches for the next block (next_block_prefetches): scan's
    #: tile kernel reads 4 KB and writes 4 KB a block, 136 lines with the probes' ends
    NEXT_BLOCK_MAX_PREFETCHES = 160

    def next_block_prefetches(self) -> list[tuple[Operation, list[tuple[int, int, int]], bool]]:
        """The global loads and stores of the kernel whose lines the entry segment prefetches,
        after its thread loop, for the block blockIdx.x + 1 (SegmentEmitter
        .prefetch_next_block), each with the probe threads covering its lines and whether
        they will be written (prefetchw), in code specialized for a block shape.  A worker
        runs consecutive blocks of its chunk one after another; in a kernel with barriers
        the block's phases between its first loads and its last stores touch only shared
        memory (a tile scan's Hillis-Steele steps, a reduction's tree), and the next block's
        first loads and its stores' read-for-ownership then waited for DRAM at each block's
        start and end, where the hardware prefetchers had not followed: a new page.  Only
        accesses with addresses computed from thread and block indices, parameters and
        constants that depend on blockIdx.x (those of the next block are then known), and
        only where every global access of the kernel is such (a kernel with loads in loops
        over its data, tiles of a matmul, has its own traffic and prefetches, and was left as
        it was), in kernels with block barriers (a barrier-free kernel streams through its
        rows, which the hardware follows) and not volatile or ordered ones; off with
        CPUIFY_NEXT_BLOCK_PREFETCH=0."""
        dims = self.block_dims
        self.in_place_update = False
        if dims is None or self.lockstep or not next_block_prefetch_enabled() or \
                not any(self.sync_kind(sp) != SYNC_KINDS["soft"] for sp in self.syncs):
            return []
        if self.updates_in_place():
            self.in_place_update = True
            return []
        found: list[tuple[Operation, list[tuple[int, int, int]], bool]] = []
        seen: dict[tuple[Value, int], int] = {}
        lines = 0
        # an access in an `if` on one thread index that runs after its segment's thread loop
        # (a stencil's halo column under `tx == 0`): probed for the threads it runs for only,
        # which leaves the budget to the accesses after it (the hotspot stencil's halo rows
        # and columns took all 160 lines, its power loads and output stores got none)
        full = tuple((0, d, 1) for d in dims)
        selected = self._deferred_blocks()
        for blk in self.region.blocks:
            for op in blk.ops:
                if op.name not in ("ptx.ld", "ptx.st") or memory_space(op) != "global" or \
                        ORDERED & set(op.attributes.get("mods", ())):
                    continue
                addr = op.operands[0]
                key = (addr, op.attributes.get("offset", 0))
                if key in seen:     # y[i] loaded, then stored: prefetched for writing
                    k = seen[key]
                    found[k] = (found[k][0], found[k][1], found[k][2] or op.name == "ptx.st")
                    continue
                if not pure_over(addr, set(), self._PREFETCH_SPECIALS, 16) or \
                        not uses_special(addr, "%ctaid.x", 16):
                    return []   # a block whose traffic is not all known ahead: left alone
                if uses_special(addr, "%tid", 16):
                    probes = _probes_in(selected.get(blk, full), access_size(op))
                else:
                    probes = [(0, 0, 0)]    # the same address in every thread
                probes = probes[:self.NEXT_BLOCK_MAX_PREFETCHES - lines]
                if not probes:
                    return found
                lines += len(probes)
                seen[key] = len(found)
                found.append((op, probes, op.name == "ptx.st"))
        return found


    def _deferred_blocks(self) -> dict[Block, tuple[tuple[int, int, int], ...]]:
        """The blocks of the `if`s on one thread index that run after their segment's thread
        loop (deferred_regions), each with the (start, stop, step) of the x, y and z threads
        that run it."""
        out: dict[Block, tuple[tuple[int, int, int], ...]] = {}
        for regions in self.deferred.values():
            for region in regions:
                stack = [region.entry]
                while stack:
                    b = stack.pop()
                    if b is region.join or b in out:
                        continue
                    out[b] = region.ranges
                    stack.extend(b.successors)
        return out

    #: set by next_block_prefetches: the kernel was left without them as an in-place update
    in_place_update: bool = False

    def updates_in_place(self) -> bool:
        """Whether the kernel's global stores write exactly the elements its global loads
        read, no more and no less (the access analysis' affine addresses over thread
        indices and block-uniform values, with their offsets and sizes, are the same two
        sets): an in-place pass such as a bitonic sort's tile steps, which runs right after
        another pass over the same array (its blocks' lines mostly in cache already), and
        whose stores only rewrite lines its loads fetched.  The next block's prefetches were
        pure overhead there (the suite's bitonic 2-5% slower with them)."""
        loads: set[object] = set()
        stores: set[object] = set()
        memo: dict = {}  # type: ignore[type-arg]
        for blk in self.region.blocks:
            for op in blk.ops:
                if op.name not in ("ptx.ld", "ptx.st") or memory_space(op) != "global":
                    continue
                form = affine_form(op.operands[0], self.uniform, 0, memo)
                if form is None:
                    return False    # an address the analysis cannot compare
                key = (frozenset(form[0].items()), form[1] + int(op.attributes.get("offset", 0)),
                       access_size(op))
                (stores if op.name == "ptx.st" else loads).add(key)
        return bool(stores) and stores == loads

    def aligning_store(self, resume: int) -> Operation | None:
        """The global store whose row of addresses the thread loop of the segment from
        `resume` splits at a cache line (SegmentEmitter.aligned_split): the first store the
        segment reaches on every way its block-uniform branches go, its address computed
        without memory reads from thread indices, parameters and the values restored at the
        resume point.  Not when it is the segment's only global store and updates in place
        what the segment loaded (`y[i] = a * x[i] + y[i]`: its lines were just loaded, a
        store across two of them is cheap).  Only in code specialized for blocks at least
        32 threads wide, where a row of threads spans several vectors, and not in a pass of
        an interchanged loop, a segment whose thread loop runs some threads only
        (thread_ranges) or in lane groups, or lockstep code."""
        dims = self.block_dims
        if dims is None or dims[0] < 32 or self.lockstep or resume in self.thread_range or \
                resume in self.lane_groups:
            return None
        if resume and self.sync_kind(self.syncs[resume - 1]) == SYNC_KINDS["soft"]:
            return None
        blk, pos = self.resume_point(resume)
        restored = self.restored_at(resume)
        store = None
        ops = list(self.ops_from(blk, pos))
        for op in ops:
            if op in self.sync_of_op:
                if self.sync_kind(self.sync_of_op[op]) == SYNC_KINDS["soft"]:
                    return None     # the segment enters an interchanged loop
            elif op.name == "ptx.st" and store is None and memory_space(op) == "global" and \
                    not ORDERED & set(op.attributes.get("mods", ())):
                store = op
        # global memory only: shared and local arrays are laid out aligned by cpuify
        if store is None or not self._computed_from_threads(store.operands[0], restored) or \
                not self._on_every_way(blk, pos, store, set()):
            return None
        key = (store.operands[0], store.attributes.get("offset", 0))
        if any(op.name == "ptx.ld" and (op.operands[0], op.attributes.get("offset", 0)) == key
               for op in ops) and \
                sum(1 for op in ops if op.name == "ptx.st" and memory_space(op) == "global") == 1:
            return None
        return store

    def _on_every_way(self, blk: Block, pos: int, store: Operation, seen: set[Block],
                      memo: dict[Block, bool] | None = None) -> bool:
        """Whether a vector of threads going on from op `pos` of `blk` reaches `store`
        whichever way each block-uniform branch goes (a branch on a thread-dependent
        condition is taken both ways by a vector of threads: one way suffices).  `memo`
        keeps each block's answer (a chain of k if-diamonds is not walked 2^k times); an
        answer cut short by a cycle is False, which only gives up the split."""
        if memo is None:
            memo = {}
        if pos == 0:
            if blk in seen:
                return False
            if blk in memo:
                return memo[blk]
            seen = seen | {blk}
        result = False
        for op in blk.ops[pos:]:
            if op is store:
                result = True
                break
            if op in self.sync_of_op or op.name in ("upir.exit", "upir.trap"):
                break
            if op.name == "cf.br":
                result = self._on_every_way(op.successors[0], 0, store, seen, memo)
                break
            if op.name == "cf.cond_br":
                ways = [self._on_every_way(succ, 0, store, seen, memo) for succ in op.successors]
                result = all(ways) if op.operands[0] in self.uniform else any(ways)
                break
        if pos == 0:
            memo[blk] = result
        return result

    def split_row_prefetches(self, resume: int,
                             ops: list[tuple[Operation, list[tuple[int, int, int]], bool]]
                             ) -> tuple[list[tuple[Operation, list[tuple[int, int, int]], bool]],
                                        list[tuple[Operation, list[tuple[int, int, int]], bool]]]:
        """(the prefetches of the pass of an interchanged block-uniform loop from `resume`
        that each row of threads issues for its own rows after running, those issued after
        the thread loop): a pass prefetches hundreds of lines, and issued together at its
        end they stalled it on the L1's fill buffers with no arithmetic left to overlap;
        spread over its rows, each row's lines go out while the next rows compute.  By rows:
        the accesses whose probes cover every row of threads alike (a row's lines are at
        offsets from its first probe); after the loop: the others (an address the same in
        every thread, a row cut short by the budget), and every prefetch of the other
        kinds of passes (a grid-stride loop's one long row, a loop with barriers)."""
        dims = self.block_dims
        if dims is None or not self._uniform_loop_pass(self.syncs[resume - 1]):
            return [], ops
        rows = dims[1] * dims[2]
        by_row, after = [], []
        for op, probes, writes in ops:
            per_row: dict[tuple[int, int], list[int]] = {}
            for x, y, z in probes:
                per_row.setdefault((y, z), []).append(x)
            xs = next(iter(per_row.values()))
            whole = len(per_row) == rows and rows > 1 and \
                all(v == xs for v in per_row.values())
            (by_row if whole else after).append((op, probes, writes))
        return by_row, after

    def _uniform_loop_pass(self, sp: SyncPoint) -> bool:
        """Whether the segment resuming at soft barrier `sp` is a pass of an interchanged
        block-uniform loop (a counter stepping by a constant, no lockstep counter), not of
        an interchanged grid-stride loop."""
        return self.sync_kind(sp) == SYNC_KINDS["soft"] and bool(sp.steps) and \
            not any(v in self.lockstep for v in sp.live)

    #: llvm.prefetch locality of an interchanged grid-stride loop's passes: prefetcht1 (L2).
    #: Into L1 the 17 lines a pass prefetches held the fill buffers its own loads then waited
    #: for (perf: 87% of warp_reduce's pass on its load): 6.6 -> 4.7 ms (docs/usage.md)
    GRID_STRIDE_PREFETCH_LOCALITY = 2

    def prefetch_locality(self, resume: int) -> int:
        """llvm.prefetch's locality for the prefetches of the segment from `resume`."""
        sp = self.syncs[resume - 1]
        if self.sync_kind(sp) == SYNC_KINDS["soft"] and not self._uniform_loop_pass(sp):
            return self.GRID_STRIDE_PREFETCH_LOCALITY
        return 3

    def prefetch_advance(self, resume: int) -> int:
        """How many iterations ahead the prefetches of the segment from `resume` are."""
        sp = self.syncs[resume - 1]
        if self._uniform_loop_pass(sp):
            return self.UNIFORM_LOOP_PREFETCH_AHEAD
        if self.sync_kind(sp) == SYNC_KINDS["soft"]:
            return self.PREFETCH_AHEAD
        # (stream-prefetch-distance marks the barriers of loops that stream data of their own)
        return int(sp.op.attributes.get("prefetch_ahead", self.LOOP_PREFETCH_AHEAD))

    @staticmethod
    def _computed_from_threads(v: Value, restored: set[Value]) -> bool:
        """Whether v is pure arithmetic on constants, parameters, special registers and the
        values restored at the resume point."""
        return pure_over(v, restored, None, 24)

    def deferred_regions(self, resume: int) -> list[DeferredRegion]:
        """The `if`s on one thread index that end the segment from `resume`, in code
        specialized for a block shape: after the segment's last memory access other than
        them, only such `if`s and pure computation lead to its sync point or exit.  Inside
        the thread loop their code runs for one or two threads of each row of 16 as masked
        gathers and scatters, keeping the rest of the loop from plain vectors; after the
        loop, as a loop of their own over the threads they select, they vectorize along
        the other dimension or run as scalars.  Moving them after the other threads' work
        is sound: threads do not communicate between sync points, and the thread's own
        code after them touches no memory."""
        dims = self.block_dims
        if dims is None or resume in self.thread_range:
            return []
        blk, pos = self.resume_point(resume)
        restored = self.restored_at(resume)
        found: list[DeferredRegion] = []
        seen: set[Block] = set()
        while blk not in seen:
            seen.add(blk)
            nxt = None
            for op in blk.ops[pos:]:
                if op in self.sync_of_op or op.name == "upir.exit":
                    return found
                if op.name == "cf.br" and not op.successor_args[0]:
                    nxt = op.successors[0]
                    break
                if op.name == "cf.cond_br":
                    region = self._deferrable(op, restored)
                    if region is not None:
                        found.append(region)
                        nxt = region.join
                    else:
                        # another `if` (on data, say): stays in the loop; go on after it
                        nxt = self._if_join(op)
                        found = []
                        if nxt is None:
                            return []
                    break
                if op.successors:
                    return []           # a branch of another kind
                if not info(op).pure:
                    found = []          # a memory access: the tail starts after it
            if nxt is None or nxt.args:
                return []
            blk, pos = nxt, 0
        return []

    #: threads per lane group: the vector width for 32-bit values with AVX-512
    LANES = 16

    def wants_lane_groups(self, resume: int) -> bool:
        """Whether the segment from `resume` (code for a one-dimensional block shape, a
        multiple of LANES threads wide) computes `threadIdx.x & m` or `threadIdx.x ^ m` with
        a block-uniform or constant m: a bitonic or butterfly network's partner index.  Its
        thread loop then runs in groups of LANES threads (SegmentEmitter.lane_bitwise), where
        such an index is affine within the group whenever m allows, and the lanes' loop is
        unrolled where it does not (unrolled_lanes)."""
        dims = self.block_dims
        if dims is None or dims[1] * dims[2] != 1 or dims[0] % self.LANES or dims[0] < 2 * self.LANES \
                or resume in self.thread_range or resume in self.deferred or not self.syncs:
            return False
        if not any(op.name in ("ptx.and", "ptx.xor") and self.lane_operands(op) is not None
                   for op in self.segment_ops(resume)):
            return False
        # a segment whose lanes would be unrolled (unrolled_lanes) only when it is small: a
        # sorting network's compare-exchange, not a long computation that uses `tid & 3`
        return not self.unrolled_lanes(resume) or \
            sum(1 for _ in self.segment_ops(resume)) <= self.MAX_UNROLLED_OPS

    #: Operations of a segment at most, for its lanes' loop to be unrolled (LANES copies).
    MAX_UNROLLED_OPS = 96

    def lane_operands(self, op: Operation) -> Value | None:
        """For `tid.x & m` / `tid.x ^ m` (32-bit, m block-uniform or a constant): m.  (A
        constant whose low bits make the result no affine function of the lane, a partner at
        distance < LANES, gets its lanes unrolled: unrolled_lanes.)"""
        if len(op.operands) != 2 or op.results[0].type != "i32":
            return None
        a, m = op.operands
        if not is_thread_x(a):
            a, m = m, a
        if not is_thread_x(a) or not (m in self.uniform or const_int(m) is not None):
            return None
        return m

    def unrolled_lanes(self, resume: int) -> bool:
        """Whether the segment's lane groups mix the lane into `tid & c` / `tid ^ c` with a
        constant c whose low bits are neither all ones nor all zeros (a sorting network's
        partner at distance < LANES): no affine index, so the lanes' loop is unrolled and
        the SLP vectorizer gets 2 x LANES accesses at constant offsets of the group."""
        low = self.LANES - 1
        return any(op.name in ("ptx.and", "ptx.xor") and self.lane_operands(op) is not None
                   and (c := const_int(self.lane_operands(op))) is not None
                   and (c & low) not in (0, low)
                   for op in self.segment_ops(resume))

    def _deferrable(self, branch: Operation, restored: set[Value]) -> DeferredRegion | None:
        dims = self.block_dims
        assert dims is not None
        join = self.ipdom.get(branch.parent) if branch.parent is not None else None
        if join is None or branch.successors[0] is branch.successors[1] or \
                any(branch.successor_args):
            return None
        # one way goes to the join, directly or through blocks that only jump (nvcc's
        # `@%p bra THEN; bra.uni JOIN; THEN: ...`)
        ways = [forwards_to(succ, join) for succ in branch.successors]
        if ways.count(True) != 1:
            return None
        # the threads that run the `if` (thread-index-ranges' mark)
        found = marked_threads(branch, ways.index(False), dims)
        if found is None:
            return None
        dim, (lo, hi, step) = found
        entry = branch.successors[ways.index(False)]
        if lo >= hi or (lo, hi, step) == (0, dims[dim], 1):
            return None
        ranges = thread_ranges_along(dims, dim, (lo, hi, step))
        blocks: set[Block] = set()
        stack = [entry]
        while stack:
            b = stack.pop()
            if b is join or b in blocks:
                continue
            blocks.add(b)
            if not b.successors or any(op in self.sync_of_op or op.name in ("upir.exit", "upir.trap")
                                       for op in b.ops):
                return None
            stack.extend(b.successors)
        external: dict[Value, None] = {}
        for b in blocks:
            if b is not entry and any(p not in blocks for p in self.preds[b]):
                return None     # entered from outside the `if`
            for op in b.ops:
                for r in op.results:
                    if any(u.parent not in blocks for u in r.uses):
                        return None     # a value of the `if` used after it
                for o in op.operands:
                    defined_in = o.op.parent if isinstance(o, OpResult) else getattr(o, "block", None)
                    if defined_in not in blocks:
                        if not self._computed_from_threads(o, restored):
                            return None
                        external[o] = None
        return DeferredRegion(branch, entry, join, ranges, list(external))

    def thread_ranges(self, resume: int) -> tuple[tuple[int, int, int], ...] | None:
        """For code specialized for a block shape: when the segment from `resume` starts
        with a branch on a condition of one thread index (`if (tx == 0)`, a tree step
        `if (t < k)` or `if ((ty & 3) == 0)`) around everything it does, and the threads
        that skip it only go on to the one sync point the segment reaches, or exit: the
        (start, stop, step) of the x, y and z thread loops over the threads that do the
        work.  Threads skipped this way store nothing: the segment knows where every thread
        stops (only_next, only_exit).  None when the segment has another shape or the
        working threads are not an arithmetic progression."""
        dims = self.block_dims
        if dims is None or not (resume in self.only_next or resume in self.only_exit):
            return None
        blk, pos = self.resume_point(resume)
        branch = next((op for op in blk.ops[pos:] if not (info(op).pure and op.results)), None)
        if branch is None or branch.name != "cf.cond_br" or any(branch.successor_args):
            return None
        if branch.attributes.get(THREAD_INDEX_IF) is None:
            return None     # (thread-index-ranges marks the branches on one thread index)
        target = self.only_next.get(resume)
        skip = [k for k, succ in enumerate(branch.successors)
                if self._only_goes_on(succ, None if target is None else target.op)]
        if len(skip) != 1:
            return None
        found = marked_threads(branch, 1 - skip[0], dims)
        if found is None:
            return None
        # skipped threads store nothing, so every value kept at the next sync point must
        # already be in its slot: kept at the resume point too, not recomputed there (the
        # min-cut may keep a value at one sync point and what it was computed from at the
        # one before; fz_2700_9167: the skipped threads' slot held another block's value)
        kept_here = set(self.syncs[resume - 1].live) if resume else set()
        if target is not None and (target.op.operands or
                                   any(self.defined_in_segment(v, resume) or v not in kept_here
                                       for v in target.live)):
            return None     # skipped threads would have to contribute or keep a value
        return thread_ranges_along(dims, *found)

    def range_branch(self, resume: int) -> RangeBranch | None:
        """The branch of the segment from `resume` whose thread loop gets a copy for blocks
        whose threads all agree on it (RangeBranch), in code specialized for a
        one-dimensional block shape: the first branch on a thread-dependent condition on
        the way from the resume point, reached by every thread that gets there through the
        same edges (block-uniform branches whose other way does not lead to it) and
        evaluated once per thread."""
        dims = self.block_dims
        if dims is None or dims[1] * dims[2] != 1 or resume in self.thread_range or \
                resume in self.deferred or resume in self.lane_groups:
            return None
        leaves, derived = self.uniform_at(resume)
        found = self._find_range_branch(*self.resume_point(resume), [], leaves, derived, set())
        if found is None:
            return None
        found.also = self._further_range_branches(
            found, leaves | {a for edge in found.edges for a, _ in edge}, derived)
        if not self.syncs:
            return found
        ok, reached, ends = self.convergent_walk(
            *self.resume_point(resume),     # successor 0: the condition holds
            {br: 1 - int(inside) for br, _, inside in found.decided()})
        if ok:
            found.decided_convergent = True
            found.decided_exit = not reached
            if len(reached) == 1 and not ends:
                found.decided_next = self.sync_of_op[reached.pop()]
        return found

    #: at most this many branches after the first are decided along with it
    MAX_FURTHER_RANGE_BRANCHES = 4

    def _further_range_branches(self, first: RangeBranch, leaves: set[Value],
                                derived: dict[Value, Value]
                                ) -> list[tuple[Operation, list[tuple[Value, Value, str, bool]], bool]]:
        """The thread-dependent branches a thread may reach after `first` (up to the next
        sync point), outside loops of the segment, whose conditions are conjunctions of
        comparisons of tx + u with values the same in every thread, all pure over `leaves`
        (the values restored at the resume point and those set on the way to `first`): the
        same value for a thread wherever it is evaluated, so the copy that decides `first`
        can decide them too.  Without them, each such `if` guarding a load (`if (i + BLOCK
        < n)`) stayed a masked load in the copy, and masked loads cost several times a
        plain one here (the reduction's first phase)."""
        out: list[tuple[Operation, list[tuple[Value, Value, str, bool]], bool]] = []
        start = first.branch.successors[0 if first.inside else 1]
        for op in self.ops_from(start, 0):
            if len(out) >= self.MAX_FURTHER_RANGE_BRANCHES:
                break
            if op.name != "cf.cond_br" or op is first.branch or op.operands[0] in self.uniform:
                continue
            if self._in_segment_loop(op):
                continue        # evaluated more than once
            side = self._range_side(op, leaves, derived)
            if side is not None:
                out.append((op, side[1], side[0]))
        return out

    def _in_segment_loop(self, op: Operation) -> bool:
        """Whether branch `op` is in a loop of its segment (evaluated more than once)."""
        return any(op in set(self.ops_from(succ, 0)) for succ in op.successors)

    def _range_side(self, op: Operation, leaves: set[Value], derived: dict[Value, Value]
                    ) -> tuple[bool, list[tuple[Value, Value, str, bool]]] | None:
        """(inside, terms) of the branch `op`'s condition as an interval of the thread index,
        None when it is none.  One comparison is an interval both ways: the side where the
        index is below its bound (`i < n`: a guard's work, a grid-stride loop going on)."""
        found = []
        for inside in (True, False):
            terms: list[tuple[Value, Value, str, bool]] = []
            if self._range_terms(op.operands[0], inside, leaves, derived, terms, 0):
                below = all(cmp in ("lt", "le") for _, _, cmp, _ in terms)
                found.append((below, inside, terms))
        if not found:
            return None
        _, inside, terms = max(found, key=lambda f: f[0])
        return inside, terms

    def uniform_at(self, resume: int) -> tuple[set[Value], dict[Value, Value]]:
        """(the block-uniform values restored at `resume`, the induction variables derived
        there with their expressions): what _tx_affine builds on in that segment."""
        leaves = {v for v in self.restored_at(resume) if v in self.uniform}
        return leaves, dict(self.syncs[resume - 1].derived) if resume else {}

    def _find_range_branch(self, blk: Block, pos: int, edges: list[list[tuple[Value, Value]]],
                           leaves: set[Value], derived: dict[Value, Value],
                           visited: set[Block]) -> RangeBranch | None:
        if blk in visited or len(visited) > 16:
            return None
        visited = visited | {blk}
        for op in blk.ops[pos:]:
            if op in self.sync_of_op:
                return None
            if op.name == "cf.cond_br" and op.operands[0] not in self.uniform:
                if self._in_segment_loop(op):
                    return None         # evaluated more than once
                side = self._range_side(op, leaves, derived)
                if side is None:
                    return None
                return RangeBranch(op, edges, side[1], side[0])
            if op.name in ("cf.br", "cf.cond_br"):
                # a block-uniform branch: each way in turn; the way that leads to the
                # branch must be the only way to it
                for k, succ in enumerate(op.successors):
                    # the block arguments the same in every thread, as the edge sets them
                    passed = [(a, v) for a, v in zip(succ.args, op.successor_args[k])
                              if pure_over(v, leaves, ENTRY_SPECIALS, 24)]
                    found = self._find_range_branch(succ, 0, edges + [passed],
                                                    leaves | {a for a, _ in passed}, derived,
                                                    visited)
                    if found is not None and all(
                            found.branch not in set(self.ops_from(other, 0))
                            for other in op.successors[:k] + op.successors[k + 1:]):
                        return found
                return None
            if op.successors:
                return None
        return None

    _RANGE_SWAP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
    _RANGE_NEG = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}

    def _range_terms(self, v: Value, want: bool, leaves: set[Value], derived: dict[Value, Value],
                     terms: list[tuple[Value, Value, str, bool]], depth: int) -> bool:
        """Adds to `terms` the comparisons that all hold exactly when v == want; False when
        v is no conjunction (for `want`) of 32-bit comparisons of a value tx + u
        (_tx_affine) with a value pure over `leaves`."""
        if depth > 12 or not isinstance(v, OpResult):
            return False
        op = v.op
        if op.name in ("ptx.not", "ptx.mov") and len(op.operands) == 1 and v.type == "i1":
            return self._range_terms(op.operands[0], want ^ (op.name == "ptx.not"), leaves,
                                     derived, terms, depth + 1)
        if op.name in ("ptx.and", "ptx.or") and v.type == "i1" and \
                want == (op.name == "ptx.and"):
            return all(self._range_terms(o, want, leaves, derived, terms, depth + 1)
                       for o in op.operands)
        if op.name != "ptx.setp" or len(op.operands) != 2:
            return False
        m = op.attributes.get("mods", ())
        cmp = next((c for c in m if c in self._RANGE_NEG), None)
        kind = next((t for t in m if t in ("s32", "u32")), None)
        if cmp is None or kind is None:
            return False
        if v is op.results[-1] and len(op.results) == 2:
            want = not want         # the second result is the negation
        a, c = op.operands
        if not self._tx_affine(a, leaves, derived, 0):
            a, c = c, a
            cmp = self._RANGE_SWAP[cmp]
        if not self._tx_affine(a, leaves, derived, 0) or \
                not pure_over(c, leaves, ENTRY_SPECIALS, 24):
            return False
        terms.append((a, c, cmp if want else self._RANGE_NEG[cmp], kind == "u32"))
        return True

    def _tx_affine(self, v: Value, leaves: set[Value], derived: dict[Value, Value],
                   depth: int) -> bool:
        """Whether the 32-bit v is threadIdx.x plus a value the same in every thread (pure
        over `leaves`), through additions, subtractions of such values, `mad.lo a, b, tx`,
        and the induction variables derived at the resume point."""
        if depth > 12 or v.type != "i32":
            return False
        if is_thread_x(v):
            return True
        if v in derived:
            return self._tx_affine(derived[v], leaves, derived, depth + 1)
        if not isinstance(v, OpResult):
            return False
        op = v.op

        def same(x: Value) -> bool:
            return pure_over(x, leaves, ENTRY_SPECIALS, 24)

        mods = op.attributes.get("mods", ())
        if op.name == "ptx.add" and len(op.operands) == 2 and "sat" not in mods and "cc" not in mods:
            x, y = op.operands
            return (self._tx_affine(x, leaves, derived, depth + 1) and same(y)) or \
                (self._tx_affine(y, leaves, derived, depth + 1) and same(x))
        if op.name == "ptx.sub" and len(op.operands) == 2 and "sat" not in mods and "cc" not in mods:
            return self._tx_affine(op.operands[0], leaves, derived, depth + 1) and \
                same(op.operands[1])
        if op.name == "ptx.mad" and "lo" in mods and len(op.operands) == 3 and "cc" not in mods:
            return same(op.operands[0]) and same(op.operands[1]) and \
                self._tx_affine(op.operands[2], leaves, derived, depth + 1)
        if op.name == "ptx.mov" and len(op.operands) == 1:
            return self._tx_affine(op.operands[0], leaves, derived, depth + 1)
        return False
