"""IR -> LLVM IR (llvmlite.ir).

Execution model (ARCHITECTURE.md): one CPU worker runs a whole thread block.  The block
body is cut at its sync points (block barriers and warp collectives) into *segments*; a
segment is emitted as a thread loop

    for tz, ty, tx in block:   (tx innermost: the loop LLVM vectorizes)
        run the kernel from resume point r until the thread reaches a sync point or exits

Values live across a sync point are either recomputed at the resume point (pure address
arithmetic on thread ids and parameters) or kept per thread in scratch arrays (SoA, one
array per value).  `state[tid]` records where each thread stopped; the C scheduler in the
runtime (`cpuify_run_block`) checks that all threads reached the same barrier, performs
warp exchanges, and calls the next segment.  A kernel without sync points is one loop and
needs no scheduler.

Inside a segment, every IR value used outside its defining LLVM block goes through an
alloca; LLVM's mem2reg/SROA rebuilds SSA (a resume point may sit inside a loop of the
original CFG, so the segment's CFG is not the kernel's)."""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field, replace
from collections import deque
from contextlib import contextmanager
from typing import Callable, Iterator

from llvmlite import ir

from cpuify.analysis.cfg import immediate_post_dominators
from cpuify.analysis.pointers import infer_pointers, memory_space, no_signed_wrap, shared_variables
from cpuify.analysis.sync_points import SyncPoint, plan_sync_points
from cpuify.analysis.thread_index import thread_index_condition
from cpuify.analysis.uniformity import uniform_values, uses_special
from cpuify.codegen.layout import (
    CTX_FIELDS, CTX_U32_FIELDS, ERR_ASSERT, ERR_TRAP, STATE_EXITED, STATE_UNKNOWN, STATE_WAIT,
    SYNC_64BIT, SYNC_STATIC,
    SYNC_KINDS, ScratchLayout, SharedLayout, align_up,
)
from cpuify.errors import PTXError, UnsupportedError
from cpuify.frontend.ptx_ast import Module as PTXModule, VarDecl, type_size
from cpuify.ir.core import Block, BlockArgument, OpResult, Operation, Region, Value, predecessors
from cpuify.ir.dialects import info
from cpuify.ir.modifiers import ty as operand_type
from cpuify.ir.structure import block_body, launch_prologue, lockstep_counters
from cpuify.codegen import ptx_ops  # noqa: F401  (registers the PTX instructions' lowerings)
from cpuify.codegen.lowering import (
    HANDLERS, I1, I8, I32, I64, IR_LLVM, PTR, PTX_HANDLERS, VOID, handles, is_signed,
    ptx_llvm_type, _width,
)
from cpuify.lifting.lift import LiftedKernel



CTX_TYPE = ir.LiteralStructType([PTR] * len(CTX_FIELDS) + [I32] * len(CTX_U32_FIELDS))
DIMS_TYPE = ir.LiteralStructType([ir.ArrayType(I32, 3), ir.ArrayType(I32, 3)])


SEGMENT_AREAS = ("params", "shared", "state", "slots", "local", "xval", "xout")


def dynamic_smem_offset(param_size: int) -> int:
    """Where the launcher puts the launch's dynamic shared memory size (a u32)."""
    return align_up(param_size, 8)


def ctx_index(name: str) -> int:
    if name in CTX_FIELDS:
        return CTX_FIELDS.index(name)
    return len(CTX_FIELDS) + CTX_U32_FIELDS.index(name)


@dataclass
class KernelInfo:
    """What the runtime and Python API need to launch a compiled kernel."""
    name: str
    symbol: str                     # block function symbol
    param_size: int
    params: list[tuple[str, str, int, int]]    # (name, ptx type, offset, size)
    aggregate_params: list[bool]                # declared as byte arrays: structs by value
    scratch: ScratchLayout
    shared_static: int
    has_sync: bool
    num_sync: int
    directives: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # the launch prologue (parallel-licm): its block function, run once per launch on one
    # thread (grid and block of 1) with the launch's parameter buffer before the grid; it
    # writes launch_bytes of hoisted values after the dynamic shared size word
    prologue_symbol: str = ""
    prologue_scratch: int = 0
    launch_bytes: int = 0

    def buffer_size(self) -> int:
        """Bytes of a launch's parameter buffer: the parameters, the dynamic shared memory
        size, the values the prologue hands to the grid."""
        return dynamic_smem_offset(self.param_size) + 8 + self.launch_bytes


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


class ModuleCodegen:
    """Emits one LLVM module for one PTX module: globals + one block function per kernel."""

    def __init__(self, ptx: PTXModule, triple: str = "", data_layout: str = "",
                 *, define_globals: bool = True) -> None:
        """`define_globals=False` declares the module's variables instead of defining them:
        for code loaded next to an object that already defines them (specializations)."""
        self.ptx = ptx
        self.define_globals = define_globals
        self.module = ir.Module(name="cpuify")
        if triple:
            self.module.triple = triple
        if data_layout:
            self.module.data_layout = data_layout
        self.globals: dict[str, ir.GlobalVariable] = {}
        self.kernels: list[KernelInfo] = []
        self._intrinsics: dict[str, ir.Function] = {}
        self._access_group: ir.Value | None = None
        self._loop_ids = 0
        # set by code that wants LLVM's reciprocal square root estimate unrefined (it
        # refines it itself: ptx_ops.approx_rsqrt_f32)
        self.rsqrt_estimates = False
        self.emit_globals()

    # --- thread loops are parallel loops ---
    # Between two sync points the threads of a block do not communicate through memory in
    # a race-free CUDA program (that needs a barrier, a warp collective or an atomic), so
    # no memory access of one iteration of a thread loop depends on another iteration: what
    # `#pragma omp simd` asserts.  Thread loops carry `llvm.loop.parallel_accesses` and
    # their loads and stores an access group; LLVM then vectorizes them without dependence
    # analysis or runtime alias checks.  Volatile accesses and the load/store pairs of
    # shared-memory atomics stay out of the group (LLVM then analyses that loop as usual).
    # Both nodes must be `distinct`, which llvmlite cannot print: llvm_text() rewrites
    # their placeholders.
    _ACCESS_GROUP = "cpuify.access_group"
    _THREAD_LOOP = "cpuify.thread_loop."

    @property
    def access_group(self) -> ir.Value:
        if self._access_group is None:
            m = self.module
            self._access_group = m.add_metadata([ir.MetaDataString(m, self._ACCESS_GROUP)])
        return self._access_group

    def parallel_loop_id(self, *, keep_loop: bool = False, unroll_full: bool = False,
                         no_vectorize: bool = False) -> ir.Value:
        """A new `llvm.loop` id for one thread loop.  `keep_loop`: forbid unrolling it.  A
        short thread loop inside a loop over rows (16 threads of a 16x16 block) must stay a
        loop for the vectorizer: fully unrolled first, the loop around it would be
        vectorized instead, across rows, with strided gathers and scatters."""
        m = self.module
        self._loop_ids += 1
        props = [m.add_metadata([ir.MetaDataString(m, "llvm.loop.parallel_accesses"),
                                 self.access_group])]
        if keep_loop:
            props.append(m.add_metadata([ir.MetaDataString(m, "llvm.loop.unroll.disable")]))
        if unroll_full:
            props.append(m.add_metadata([ir.MetaDataString(m, "llvm.loop.unroll.full")]))
        if no_vectorize:
            props.append(m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.enable"),
                                         ir.Constant(ir.IntType(1), 0)]))

        return m.add_metadata([ir.MetaDataString(m, f"{self._THREAD_LOOP}{self._loop_ids}"),
                               *props])

    def llvm_text(self) -> str:
        """The module as LLVM assembly, with the access group and the thread-loop ids made
        `distinct` (a loop id's first operand is itself)."""
        text = str(self.module)
        text = re.sub(r'^(![0-9]+) = !\{ !"' + re.escape(self._ACCESS_GROUP) + r'" \}$',
                      r"\1 = distinct !{}", text, flags=re.M)
        text = re.sub(r'^(![0-9]+) = !\{ !"' + re.escape(self._THREAD_LOOP) + r'[0-9]+", (.*) \}$',
                      r"\1 = distinct !{\1, \2}", text, flags=re.M)
        if self.rsqrt_estimates:
            # (a string attribute, which llvmlite cannot add)
            text = re.sub(r"^(define .*)$", r'\1 "reciprocal-estimates"="sqrtf:0,vec-sqrtf:0"',
                          text, flags=re.M)
        return text

    # --- module-scope variables ---
    def emit_globals(self) -> None:
        for var in self.ptx.variables:
            if var.space not in ("global", "const"):
                continue
            if var.linkage == "extern" and var.init is None and var.size == 0:
                raise UnsupportedError(f"extern {var.space} variable '{var.name}' has no definition "
                                       "in this module", line=var.line)
            size = max(var.size, 1)
            ty = ir.ArrayType(I8, size)
            g = ir.GlobalVariable(self.module, ty, name=var.name)
            g.align = max(var.alignment, 16 if size >= 16 else 1)
            if self.define_globals:
                g.initializer = ir.Constant(ty, bytearray(self._init_bytes(var, size)))
            self.globals[var.name] = g

    def _init_bytes(self, var: VarDecl, size: int) -> bytes:
        if var.init is None:
            return bytes(size)
        out = bytearray()
        esize = type_size(var.type)
        for v in var.init:
            if isinstance(v, str):
                raise UnsupportedError(f"initializer of '{var.name}' takes the address of '{v}'; "
                                       "address initializers are not supported", line=var.line)
            if var.type in ("f32",):
                out += struct.pack("<f", float(v))
            elif var.type == "f64":
                out += struct.pack("<d", float(v))
            else:
                out += (int(v) & ((1 << (8 * esize)) - 1)).to_bytes(esize, "little")
        out = out[:size]
        return bytes(out) + bytes(size - len(out))

    def intrinsic(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        fn = self._intrinsics.get(name)
        if fn is None:
            existing = self.module.globals.get(name)
            if existing is not None:
                fn = existing  # type: ignore[assignment]
            else:
                fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
            self._intrinsics[name] = fn
        return fn

    def forget(self, names: set[str]) -> None:
        """Drop functions/globals (a kernel that failed half-way through emission)."""
        for name in names:
            del self.module.globals[name]
            self._intrinsics.pop(name, None)

    def shared_layout(self, kernel: LiftedKernel) -> SharedLayout:
        layout = SharedLayout()
        off = 0
        decls = [v for v in self.ptx.variables if v.space == "shared" and v.dims != (None,)]
        decls += kernel.shared_vars
        has_dynamic = False
        for v in self.ptx.variables + kernel.shared_vars:
            if v.space == "shared" and (v.dims and v.dims[0] is None or v.linkage == "extern"):
                has_dynamic = True
        for v in decls:
            if v.dims and v.dims[0] is None:
                continue
            off = align_up(off, max(v.alignment, 1))
            layout.offsets[v.name] = off
            off += v.size
        layout.static_size = off
        layout.dynamic_offset = align_up(off, 16)
        for v in self.ptx.variables + kernel.shared_vars:
            if v.space == "shared" and v.name not in layout.offsets:
                layout.offsets[v.name] = layout.dynamic_offset
        del has_dynamic
        return layout

    def add_kernel(self, kernel: LiftedKernel,
                   block_dims: tuple[int, int, int] | None = None) -> KernelInfo:
        """Emit `kernel` (its IR after the pass pipeline).  A kernel with a launch prologue
        (parallel-licm) gets a second block function for it, run once per launch on one
        thread before the grid; code specialized for a block shape shares the generic
        code's prologue."""
        info = KernelCodegen(self, kernel, block_dims).emit()
        prologue = launch_prologue(kernel.op)
        if prologue is not None and block_dims is None:
            pk = replace(kernel, name=f"{kernel.name}__launch_prologue", shared_vars=[],
                         local_vars=[])
            pinfo = KernelCodegen(self, pk, None, body=prologue.regions[0]).emit()
            self.kernels.remove(pinfo)
            info.prologue_symbol = pinfo.symbol
            info.prologue_scratch = pinfo.scratch.scratch_bytes(1)
            info.launch_bytes = int(kernel.op.attributes.get("launch_bytes", 0))
        return info


def specialized_symbol(kernel: str, block_dims: tuple[int, int, int]) -> str:
    return f"cpuify_block_{kernel}__{block_dims[0]}x{block_dims[1]}x{block_dims[2]}"


class KernelCodegen:
    def __init__(self, mod: ModuleCodegen, kernel: LiftedKernel,
                 block_dims: tuple[int, int, int] | None = None, *,
                 body: Region | None = None) -> None:
        """`block_dims`: compile for this block shape only (launch-config specialization:
        constant thread-loop bounds let LLVM drop remainder loops and runtime checks).
        `kernel.op` is the kernel's IR after the pass pipeline (cpuify.transforms);
        `body`: the region to emit instead of the kernel's block body (its launch prologue)."""
        self.mod = mod
        self.kernel = kernel
        self.name = kernel.name
        self.block_dims = block_dims
        self.region = block_body(kernel.op) if body is None else body
        # iteration counters of interchanged loops: the same in all threads that run together
        self.lockstep = lockstep_counters(self.region)
        # resume point -> ops its segment runs, counted up to MAX_VECTORIZED_OPS + 1
        self.segment_sizes: dict[int, int] = {}
        self.syncs: list[SyncPoint] = plan_sync_points(
            self.region, self.lockstep,
            min_cut=kernel.op.attributes.get("fission") == "min-cut" and body is None)
        self.sync_of_op = {sp.op: sp for sp in self.syncs}
        self.pointers = infer_pointers(self.region)
        self.nsw = no_signed_wrap(self.region)
        for sp in self.syncs:
            for v, expr in sp.derived.items():
                if v in self.pointers:
                    self.pointers.add(expr)
        # values kept across sync points that are the same in every thread get one slot
        self.uniform = (uniform_values(self.region) | self.lockstep) if self.syncs else set()
        self.ipdom = immediate_post_dominators(self.region)
        self.preds = predecessors(self.region)
        self.convergent = self.convergent_segments()
        self.thread_range = {r: k for r in range(len(self.syncs) + 1)
                             if (k := self.thread_ranges(r)) is not None}
        self.deferred = {r: d for r in range(len(self.syncs) + 1)
                         if (d := self.deferred_regions(r))}
        self.lane_groups = {r for r in range(len(self.syncs) + 1) if self.wants_lane_groups(r)}
        self.range_branches = {r: k for r in range(len(self.syncs) + 1)
                               if (k := self.range_branch(r)) is not None}
        self.prefix_runs = self.plan_prefix_runs()
        # lane groups whose lanes' loop is unrolled (unrolled_lanes)
        self.unrolled_lane_groups = {r for r in self.lane_groups if self.unrolled_lanes(r)}
        self.unsigned_indices = self.unsigned_index_segments()
        self.static_shuffles = self.plan_static_shuffles()
        self.prefetches = {r: ops for r in range(1, len(self.syncs) + 1)
                           if (ops := self.iteration_prefetches(r))}
        self.shared = mod.shared_layout(kernel)
        self.shared_alias_tags = self.shared_variable_scopes()
        # local memory (per thread): kernel .local depots
        self.local_offsets: dict[str, int] = {}
        off = 0
        for v in kernel.local_vars:
            off = align_up(off, max(v.alignment, 1))
            self.local_offsets[v.name] = off
            off += v.size
        self.local_size = align_up(off, 16)
        # slots for values kept per thread across sync points (sorted by size: aligned)
        kept: dict[Value, None] = {}
        for sp in self.syncs:
            for v in sp.live:
                kept[v] = None
        sizes = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "f32": 4, "i64": 8, "f64": 8, "f16": 2}
        leader = self.coalesce_slots(kept)
        ordered = sorted((v for v in kept if leader[v] is v), key=lambda v: -sizes[v.type])
        self.slot_offset: dict[Value, int] = {}
        off = 0
        for v in ordered:
            self.slot_offset[v] = off
            off += sizes[v.type]
        for v in kept:
            self.slot_offset[v] = self.slot_offset[leader[v]]
        self.slot_bytes = align_up(off, 8)
        self.value_order: dict[Value, int] = {}
        for b in self.region.blocks:
            for a in b.args:
                self.value_order[a] = len(self.value_order)
            for op in b.ops:
                for r in op.results:
                    self.value_order[r] = len(self.value_order)

    def coalesce_slots(self, kept: dict[Value, None]) -> dict[Value, Value]:
        """Kept value -> the value whose slot it shares.  A loop-carried value and the value
        it takes on the back edge (a matmul's running sum: the sum entering an iteration and
        the sum after it) share one slot when no sync point keeps both: then a segment that
        restores one and stores the other writes back what it read, a store LLVM removes.
        A slot holds one value at a time: a thread reads its element at the start of a
        segment and writes it only where it stops, so values never live across the same
        sync point can share it."""
        leader: dict[Value, Value] = {v: v for v in kept}
        members: dict[Value, set[Value]] = {v: {v} for v in kept}
        lives = [set(sp.live) for sp in self.syncs]

        def find(v: Value) -> Value:
            while leader[v] is not v:
                v = leader[v]
            return v

        for b in self.region.blocks:
            term = b.terminator
            if term is None:
                continue
            for succ, args in zip(term.successors, term.successor_args):
                for arg, value in zip(succ.args, args):
                    if arg not in kept or value not in kept or arg.type != value.type:
                        continue
                    x, y = find(arg), find(value)
                    if x is y or any(members[x] & live and members[y] & live for live in lives):
                        continue
                    leader[y] = x
                    members[x] |= members.pop(y)
        return {v: find(v) for v in kept}

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

    def aligning_store(self, resume: int) -> Operation | None:
        """The store whose address the thread loop of the segment from `resume` aligns to
        whole vectors (see SegmentEmitter.alignment_offset): the first store the segment
        reaches, when its address is computed without memory reads from thread indices,
        parameters and the values restored at the resume point, unless it is the segment's
        only global store and stores where the segment loaded.  Only in code specialized
        for blocks at least 32 threads wide, where a row of threads spans several vectors."""
        dims = self.block_dims
        if dims is None or dims[0] < 32:
            return None
        if resume and self.sync_kind(self.syncs[resume - 1]) == SYNC_KINDS["soft"]:
            return None     # an iteration of an interchanged loop: stores are rare there
        blk, pos = self.resume_point(resume)
        restored = self.restored_at(resume)
        store = None
        ops = list(self.ops_from(blk, pos))
        for op in ops:
            if op in self.sync_of_op:
                if self.sync_kind(self.sync_of_op[op]) == SYNC_KINDS["soft"]:
                    return None     # the segment enters an interchanged loop
            elif op.name == "ptx.st" and store is None and memory_space(op) == "global":
                store = op
        # global memory only: shared and local arrays are laid out aligned by cpuify; and a
        # store on the segment's way whichever way its uniform branches go (not one on a
        # rarely taken way, the exit of a loop that runs in segments)
        if store is None or not self._computed_from_threads(store.operands[0], restored) or \
                not self._on_every_way(blk, pos, store, set()):
            return None
        key = (store.operands[0], store.attributes.get("offset", 0))
        if any(op.name == "ptx.ld" and (op.operands[0], op.attributes.get("offset", 0)) == key
               for op in ops) and \
                sum(1 for op in ops if op.name == "ptx.st" and memory_space(op) == "global") == 1:
            # the segment's one global store updates in place (`y[i] = a * x[i] + y[i]`):
            # the lines it stores were just loaded, so a store across two of them is
            # cheap, and shifting the row costs more than it saves (saxpy 8.55 -> 7.57 ms
            # without it; the triad, which stores to an array it does not read, 13.7 ->
            # 15.3 ms; a bitonic merge step, which exchanges two elements in place, 10%
            # slower, keeps it)
            return None
        return store

    #: iterations ahead that the passes of an interchanged loop prefetch
    PREFETCH_AHEAD = 4
    #: iterations ahead that the segment of a loop with barriers prefetches (counted from
    #: the iteration whose barrier it resumes at; its own accesses are for the next one)
    LOOP_PREFETCH_AHEAD = 2
    #: at most this many prefetches per pass (rows x lines x accesses)
    MAX_PREFETCHES = 64

    def iteration_prefetches(self, resume: int
                             ) -> list[tuple[Operation, list[tuple[int, int, int]], bool]]:
        """The global loads and stores of an interchanged loop's iteration (the segment
        from the soft barrier at its header, `resume`) whose lines each pass prefetches for
        the pass PREFETCH_AHEAD iterations later (SegmentEmitter.prefetch_ahead), each
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
        if self.sync_kind(sp) == SYNC_KINDS["soft"]:
            counters = {v for v in sp.live if v in self.lockstep}
        else:
            counters = set(sp.steps)
        if not counters:
            return []
        leaves = {v for v in sp.live if v in self.uniform} | set(sp.derived)
        found: list[tuple[Operation, list[tuple[int, int, int]], bool]] = []
        seen: dict[tuple[Value, int], int] = {}
        lines = 0
        for op in self.ops_from(*self.resume_point(resume)):
            if op.name not in ("ptx.ld", "ptx.st") or memory_space(op) != "global":
                continue
            addr = op.operands[0]
            key = (addr, op.attributes.get("offset", 0))
            if key in seen:         # y[i] = ... y[i]: the load's prefetch, for writing
                k = seen[key]
                found[k] = (found[k][0], found[k][1], found[k][2] or op.name == "ptx.st")
                continue
            if not _pure_over(addr, leaves, self._PREFETCH_SPECIALS, 16):
                continue
            inputs = [addr] + [e for v, e in sp.derived.items() if _depends_on(addr, v, 16)]
            if not any(_depends_on(addr, v, 16) for v in counters | set(sp.derived)):
                continue
            if any(uses_special(v, "%tid", 16) for v in inputs):
                probes = [(x, y, z) for z in range(dims[2]) for y in range(dims[1])
                          for x in _row_probes(dims[0], access_size(op))]
            else:
                probes = [(0, 0, 0)]    # the same address in every thread
            # (within the budget: a row wider than it gets its first lines prefetched, where
            # the hardware prefetcher has not picked up the page yet)
            probes = probes[:self.MAX_PREFETCHES - lines]
            if not probes:
                break
            lines += len(probes)
            seen[key] = len(found)
            found.append((op, probes, op.name == "ptx.st"))
        return found

    _PREFETCH_SPECIALS = ("%tid", "%ctaid", "%nctaid", "%ntid")

    def prefetch_advance(self, resume: int) -> int:
        """How many iterations ahead the prefetches of the segment from `resume` are."""
        soft = self.sync_kind(self.syncs[resume - 1]) == SYNC_KINDS["soft"]
        return self.PREFETCH_AHEAD if soft else self.LOOP_PREFETCH_AHEAD

    def _on_every_way(self, blk: Block, pos: int, store: Operation, seen: set[Block]) -> bool:
        """Whether a vector of threads going on from op `pos` of `blk` reaches `store`
        whichever way each block-uniform branch goes (a branch on a thread-dependent
        condition is taken both ways by a vector of threads: one way suffices)."""
        if pos == 0:
            if blk in seen:
                return False
            seen = seen | {blk}
        for op in blk.ops[pos:]:
            if op is store:
                return True
            if op in self.sync_of_op or op.name in ("upir.exit", "upir.trap"):
                return False
            if op.name == "cf.br":
                return self._on_every_way(op.successors[0], 0, store, seen)
            if op.name == "cf.cond_br":
                ways = [self._on_every_way(succ, 0, store, seen) for succ in op.successors]
                return all(ways) if op.operands[0] in self.uniform else any(ways)
        return False

    @staticmethod
    def _computed_from_threads(v: Value, restored: set[Value]) -> bool:
        """Whether v is pure arithmetic on constants, parameters, special registers and the
        values restored at the resume point."""
        return _pure_over(v, restored, None, 24)

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

    def lane_operands(self, op: Operation) -> Value | None:
        """For `tid.x & m` / `tid.x ^ m` (32-bit, m block-uniform or a constant): m.  (A
        constant whose low bits make the result no affine function of the lane, a partner at
        distance < LANES, gets its lanes unrolled: unrolled_lanes.)"""
        if len(op.operands) != 2 or op.results[0].type != "i32":
            return None
        a, m = op.operands
        if not _is_thread_x(a):
            a, m = m, a
        if not _is_thread_x(a) or not (m in self.uniform or _const_int(m) is not None):
            return None
        return m

    def unrolled_lanes(self, resume: int) -> bool:
        """Whether the segment's lane groups mix the lane into `tid & c` / `tid ^ c` with a
        constant c whose low bits are neither all ones nor all zeros (a sorting network's
        partner at distance < LANES): no affine index, so the lanes' loop is unrolled and
        the SLP vectorizer gets 2 x LANES accesses at constant offsets of the group."""
        low = self.LANES - 1
        return any(op.name in ("ptx.and", "ptx.xor") and self.lane_operands(op) is not None
                   and (c := _const_int(self.lane_operands(op))) is not None
                   and (c & low) not in (0, low)
                   for op in self.segment_ops(resume))

    def _if_join(self, branch: Operation) -> Block | None:
        """Where the two ways of an `if` meet, when neither reaches a sync point or an exit
        before that; else None."""
        if branch.parent is None or not self.reconverges(branch.parent):
            return None
        return self.ipdom.get(branch.parent)

    def _deferrable(self, branch: Operation, restored: set[Value]) -> DeferredRegion | None:
        dims = self.block_dims
        assert dims is not None
        found = thread_index_condition(branch.operands[0], dims)
        join = self.ipdom.get(branch.parent) if branch.parent is not None else None
        if found is None or join is None or branch.successors[0] is branch.successors[1] or \
                any(branch.successor_args):
            return None
        # one way goes to the join, directly or through blocks that only jump (nvcc's
        # `@%p bra THEN; bra.uni JOIN; THEN: ...`)
        ways = [_forwards_to(succ, join) for succ in branch.successors]
        if ways.count(True) != 1:
            return None
        dim, true_for = found
        entry = branch.successors[ways.index(False)]
        work = true_for if entry is branch.successors[0] else \
            sorted(set(range(dims[dim])) - set(true_for))
        ranges = _thread_box(dims, dim, work)
        if not work or len(work) == dims[dim] or ranges is None:
            return None
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

    def plan_static_shuffles(self) -> dict[int, tuple[str, int, int, int]]:
        """Sync index -> (mode, lane operand, clamp word, buffer 1 or 2) of the static
        shuffles.  Each has a buffer of its own kind (not `xval`, which the exchange paths
        read): the segment after one reads its buffer while its threads, one after another,
        store the values of the next shuffles; a thread must not overwrite a value a later
        thread still reads, so consecutive static shuffles alternate between the two, and a
        shuffle a segment reaches with the buffer that segment reads is left to the
        exchange."""
        found = {sp.index: k for sp in self.syncs if (k := self.static_shuffle(sp)) is not None}
        buffers = {idx: 1 + n % 2 for n, idx in enumerate(sorted(found))}
        changed = True
        while changed:
            changed = False
            for idx in sorted(buffers):
                if idx not in buffers:
                    continue
                for op in self.ops_from(*self.resume_point(idx)):
                    sp = self.sync_of_op.get(op)
                    if sp is not None and sp.index in buffers and \
                            buffers[sp.index] == buffers[idx]:
                        del buffers[sp.index]
                        changed = True
        return {idx: (*found[idx], buffers[idx]) for idx in sorted(buffers)}

    def static_shuffle(self, sp: SyncPoint) -> tuple[str, int, int] | None:
        """(mode, lane operand, clamp word) of a shuffle whose lane operand, clamp and
        member mask are constants and whose mask is the full warp
        (`__shfl_down_sync(0xffffffff, v, 16)`).  When every thread of the block waits at
        such a shuffle, the next segment reads the source lane's value directly
        (SegmentEmitter.read_static_shuffle): no exchange pass."""
        op = sp.op
        if op.name != "upir.warp_collective" or op.attributes.get("kind") != "shfl":
            return None
        consts = [_const_int(o) for o in op.operands[1:4]]
        if len(consts) != 3 or any(c is None for c in consts) or \
                consts[2] & 0xFFFFFFFF != 0xFFFFFFFF:
            return None
        mode = next(m for m in op.attributes.get("mods", []) if m in ("up", "down", "bfly", "idx"))
        return mode, consts[0], consts[1]

    @staticmethod
    def static_buffer_stride(b: ir.IRBuilder, n64: ir.Value) -> ir.Value:
        """Bytes from `xval` to the first buffer of static shuffles, and from it to the
        second: n 8-byte values and two guard zones, 64-byte aligned."""
        size = b.add(b.mul(n64, I64(8)), I64(2 * XVAL_GUARD))
        return b.and_(b.add(size, I64(63)), I64(~63 & (2**64 - 1)))

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

    def shared_variable_scopes(self) -> dict[Value, tuple[ir.Value, ir.Value]]:
        """Shared-memory address -> (alias.scope, noalias) metadata of the `__shared__`
        variable it points into: LLVM then knows that accesses to different variables are
        independent even where it cannot bound their indices (a clamped neighbour index),
        which would otherwise keep it from vectorizing the thread loop."""
        variables = shared_variables(self.region)
        groups = sorted({self.shared.offsets[sym] for sym in variables.values()
                         if sym in self.shared.offsets})
        if len(groups) < 2:
            return {}
        m = self.mod.module
        domain = m.add_metadata([ir.MetaDataString(m, f"cpuify.shared.{self.name}")])
        scopes = {g: m.add_metadata([ir.MetaDataString(m, f"cpuify.shared.{self.name}.{g}"), domain])
                  for g in groups}
        tags = {g: (m.add_metadata([scopes[g]]), m.add_metadata([scopes[h] for h in groups if h != g]))
                for g in groups}
        return {v: tags[self.shared.offsets[sym]] for v, sym in variables.items()
                if sym in self.shared.offsets}

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
        found = thread_index_condition(branch.operands[0], dims)
        if found is None:
            return None
        dim, true_for = found
        target = self.only_next.get(resume)
        skip = [k for k, succ in enumerate(branch.successors)
                if self._only_goes_on(succ, None if target is None else target.op)]
        if len(skip) != 1:
            return None
        if target is not None and (target.op.operands or
                                   any(self.defined_in_segment(v, resume) for v in target.live)):
            return None     # skipped threads would have to contribute or keep a value
        work = true_for if skip[0] == 1 else sorted(set(range(dims[dim])) - set(true_for))
        return _thread_box(dims, dim, work)

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
        if found is None or not self.syncs:
            return found
        ok, reached, ends = self.convergent_walk(
            *self.resume_point(resume),
            {found.branch: 1 - int(found.inside)})    # successor 0: the condition holds
        if ok:
            found.decided_convergent = True
            found.decided_exit = not reached
            if len(reached) == 1 and not ends:
                found.decided_next = self.sync_of_op[reached.pop()]
        return found

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
                if any(op in set(self.ops_from(succ, 0)) for succ in op.successors):
                    return None         # in a loop of the segment: evaluated more than once
                # one comparison is an interval both ways: the side where the index is
                # below its bound (`i < n`: a guard's work, a grid-stride loop going on)
                found = []
                for inside in (True, False):
                    terms: list[tuple[Value, Value, str, bool]] = []
                    if self._range_terms(op.operands[0], inside, leaves, derived, terms, 0):
                        below = all(cmp in ("lt", "le") for _, _, cmp, _ in terms)
                        found.append((below, inside, terms))
                if not found:
                    return None
                _, inside, terms = max(found, key=lambda f: f[0])
                return RangeBranch(op, edges, terms, inside)
            if op.name in ("cf.br", "cf.cond_br"):
                # a block-uniform branch: each way in turn; the way that leads to the
                # branch must be the only way to it
                for k, succ in enumerate(op.successors):
                    # the block arguments the same in every thread, as the edge sets them
                    passed = [(a, v) for a, v in zip(succ.args, op.successor_args[k])
                              if _pure_over(v, leaves, SegmentEmitter._ENTRY_SPECIALS, 24)]
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
                not _pure_over(c, leaves, SegmentEmitter._ENTRY_SPECIALS, 24):
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
        if _is_thread_x(v):
            return True
        if v in derived:
            return self._tx_affine(derived[v], leaves, derived, depth + 1)
        if not isinstance(v, OpResult):
            return False
        op = v.op

        def same(x: Value) -> bool:
            return _pure_over(x, leaves, SegmentEmitter._ENTRY_SPECIALS, 24)

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

    # --- top level ---
    def emit(self) -> KernelInfo:
        m = self.mod.module
        # the parameter buffer, shared memory and the scratch arrays are distinct memory
        # that kernel pointers never reach: passing them as noalias arguments spares the
        # vectorizer its runtime alias checks
        # a segment returns where all threads stopped when that is known without looking
        # (STATE_UNKNOWN otherwise): see convergent_segments()
        seg_ty = ir.FunctionType(I32, [PTR, I32] + [PTR] * len(SEGMENT_AREAS))
        segments = []
        for r in range(len(self.syncs) + 1):
            fn = ir.Function(m, seg_ty, name=f"cpuify_seg_{self.name}_{r}")
            fn.linkage = "internal"
            fn.attributes.add("nounwind")
            for a in fn.args[2:]:
                a.add_attribute("noalias")
            segments.append(fn)
        for r, fn in enumerate(segments):
            emitter = SegmentEmitter(self, fn, r)
            emitter.emit()
            emitter.tag_parallel_accesses()
        block_fn = self.emit_block_function(segments)
        info = KernelInfo(
            name=self.name, symbol=block_fn.name, param_size=self.kernel.param_size,
            params=[(p.name, p.ptx_type, p.offset, p.size) for p in self.kernel.params],
            aggregate_params=[bool(p.dims) for p in self.kernel.params],
            scratch=ScratchLayout(bool(self.syncs), self.slot_bytes, self.local_size),
            shared_static=self.shared.dynamic_offset if self.shared.static_size else 0,
            has_sync=bool(self.syncs), num_sync=len(self.syncs),
            directives=self.kernel.directives)
        self.mod.kernels.append(info)
        return info

    def emit_block_function(self, segments: list[ir.Function]) -> ir.Function:
        m = self.mod.module
        fty = ir.FunctionType(I32, [PTR, PTR, I32, I32, I32, PTR, PTR])
        fn = ir.Function(m, fty, name=f"cpuify_block_{self.name}" if self.block_dims is None
                         else specialized_symbol(self.name, self.block_dims))
        params, dims, bx, by, bz, shared, scratch = fn.args
        for a in (params, dims, shared, scratch):
            a.add_attribute("noalias") if a is not params else None
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        ctx = b.alloca(CTX_TYPE, name="ctx")

        def setf(name: str, value: ir.Value) -> None:
            idx = ctx_index(name)
            p = b.gep(ctx, [I32(0), I32(idx)])
            b.store(value, p)

        dims_p = b.bitcast(dims, DIMS_TYPE.as_pointer())
        if self.block_dims is not None:
            blk = [I32(d) for d in self.block_dims]
        else:
            blk = [b.load(b.gep(dims_p, [I32(0), I32(1), I32(k)])) for k in range(3)]
        n = b.mul(b.mul(blk[0], blk[1]), blk[2], name="nthreads")
        n64 = b.zext(n, I64)
        setf("params", params)
        setf("dims", dims)
        setf("shared", shared)
        setf("scratch", scratch)
        for name, v in (("bx", bx), ("by", by), ("bz", bz), ("nthreads", n), ("error", I32(0)),
                        ("local_size", I32(self.local_size)), ("live_end", I32(0))):
            setf(name, v)
        # the launcher stores the dynamic shared memory size right after the parameters
        dyn_p = b.gep(params, [I64(dynamic_smem_offset(self.kernel.param_size))])
        setf("dyn_shared", b.load(b.bitcast(dyn_p, I32.as_pointer())))
        # carve scratch: arrays 64-byte aligned
        offset = ir.Constant(I64, 0)

        def carve(name: str, elem: int, guard: int = 0) -> None:
            # `guard` bytes before and after the array (see XVAL_GUARD)
            nonlocal offset
            setf(name, b.gep(scratch, [b.add(offset, I64(guard))]))
            size = b.add(b.mul(n64, I64(elem)), I64(2 * guard))
            size = b.and_(b.add(size, I64(63)), I64(~63 & (2**64 - 1)))
            offset = b.add(offset, size)

        null = ir.Constant(PTR, None)
        if self.syncs:
            for name, elem in (("state", 4), ("xval", 8), ("xb", 4), ("xc", 4), ("xmask", 4),
                               ("xout", 8), ("xpred", 4)):
                carve(name, elem, XVAL_GUARD if name == "xval" else 0)
                if name == "xval":
                    # the two buffers of static shuffles follow, at static_buffer_stride()
                    # from xval and from each other (no ctx fields of their own)
                    offset = b.add(offset, b.mul(self.static_buffer_stride(b, n64), I64(2)))
        else:
            for name in ("state", "xval", "xb", "xc", "xmask", "xout", "xpred"):
                setf(name, null)
        if self.slot_bytes:
            carve("slots", self.slot_bytes)
        else:
            setf("slots", null)
        if self.local_size:
            carve("local", self.local_size)
        else:
            setf("local", null)
        ctx_i8 = b.bitcast(ctx, PTR)
        if not self.syncs:
            b.call(segments[0], [ctx_i8, I32(0)] + self.area_args(b, ctx))
            err = b.load(b.gep(ctx, [I32(0), I32(ctx_index("error"))]))
            b.ret(err)
            return fn
        # dispatcher for the C scheduler
        disp = ir.Function(m, ir.FunctionType(I32, [PTR, I32, I32]), name=f"cpuify_dispatch_{self.name}")
        disp.linkage = "internal"
        db = ir.IRBuilder(disp.append_basic_block("entry"))
        dctx, dr, dmasked = disp.args
        default = disp.append_basic_block("default")
        sw = db.switch(dr, default)
        for r, seg in enumerate(segments):
            bb = disp.append_basic_block(f"r{r}")
            sw.add_case(I32(r), bb)
            db.position_at_end(bb)
            dctx_t = db.bitcast(dctx, CTX_TYPE.as_pointer())
            db.ret(db.call(seg, [dctx, dmasked] + self.area_args(db, dctx_t)))
        db.position_at_end(default)
        db.ret(I32(STATE_UNKNOWN))
        kinds = [self.sync_kind(sp) for sp in self.syncs]
        kt = ir.ArrayType(I32, len(kinds))
        kg = ir.GlobalVariable(m, kt, name=f"cpuify_sync_kinds_{self.name}")
        kg.initializer = ir.Constant(kt, [k | (SYNC_STATIC if i + 1 in self.static_shuffles else 0)
                                          for i, k in enumerate(kinds)])
        kg.global_constant = True
        kg.linkage = "internal"
        # The common path runs here, with direct calls that LLVM can inline: while every
        # thread stops at the same plain (or soft) barrier, go straight to its segment.
        # Anything else (divergence, warp collectives, exits of some threads) goes to the
        # scheduler in the runtime.
        err_p = b.gep(ctx, [I32(0), I32(ctx_index("error"))])
        live_end_p = b.gep(ctx, [I32(0), I32(ctx_index("live_end"))])
        state_p = b.bitcast(b.load(b.gep(ctx, [I32(0), I32(ctx_index("state"))])), I32.as_pointer())
        pre = b.block
        loop = fn.append_basic_block("segments")
        check = fn.append_basic_block("stopped")
        check_known = fn.append_basic_block("known")
        scan = fn.append_basic_block("scan_states")
        fast = fn.append_basic_block("same_sync")
        slow = fn.append_basic_block("scheduler")
        failed = fn.append_basic_block("failed")
        done = fn.append_basic_block("all_exited")
        b.position_at_end(loop)
        resume = b.phi(I32, name="resume")
        masked = b.phi(I32, name="masked")
        called = b.call(disp, [ctx_i8, resume, masked], name="called")
        returned = fn.append_basic_block("returned")
        b.branch(returned)
        b.position_at_end(returned)
        known = b.phi(I32, name="known")
        known.add_incoming(called, loop)
        # Chains of segments that each end where all threads wait at the one plain barrier
        # they reach (only_next: a tree reduction's steps, the phases of a tile) call each
        # other directly: what the segment returns is compared with the one state it
        # returns when nothing went wrong, and anything else takes the general path.
        direct = [fn.append_basic_block(f"direct{r}") for r in range(len(segments))]
        b.position_at_end(pre)
        b.branch(direct[0])
        for r, seg in enumerate(segments):
            b.position_at_end(direct[r])
            got = b.call(seg, [ctx_i8, I32(0)] + self.area_args(b, ctx), name=f"known{r}")
            target = self.only_next.get(r)
            if target is not None and (self.sync_kind(target) in (SYNC_KINDS["barrier"],
                                                                  SYNC_KINDS["soft"])
                                       or target.index in self.static_shuffles):
                expected = I32(STATE_WAIT | target.index)
                b.cbranch(b.icmp_signed("==", got, expected), direct[target.index], returned)
            else:
                b.branch(returned)
            known.add_incoming(got, direct[r])
        b.position_at_end(returned)
        err = b.load(err_p)
        b.cbranch(b.icmp_unsigned("!=", err, I32(0)), failed, check)
        b.position_at_end(failed)
        b.ret(err)
        b.position_at_end(check)
        b.cbranch(b.icmp_signed("==", known, I32(STATE_EXITED)), done, check_known)
        b.position_at_end(done)
        b.ret(I32(0))
        b.position_at_end(check_known)
        b.cbranch(b.icmp_signed("==", known, I32(STATE_UNKNOWN)), scan, fast)
        # Where did the threads stop?  A segment knows when they all took one path; else
        # one vectorizable scan finds whether every live thread waits at the same sync
        # point, and whether some threads exited (they are not waited for, as on Volta).
        b.position_at_end(scan)
        # threads from ctx.live_end on (when set) exited in an earlier step and stay exited:
        # the scan stops there (the five shuffles of warp 0 after a block reduction's other
        # warps exited scan its 32 threads, not the block's)
        prev_end = b.load(live_end_p)
        bound = b.select(b.icmp_unsigned("==", prev_end, I32(0)), n64, b.zext(prev_end, I64))
        live_or, live_and, exited, last_live, live_count = \
            self.scan_live_states(b, state_p, bound)
        exited = b.or_(exited, b.icmp_unsigned("!=", bound, n64))
        live_end64 = b.zext(b.add(last_live, I32(1)), I64)
        # the live threads are the first live_end, whole warps (plan_prefix_runs)
        prefix_scanned = ir.Constant(I1, 0)
        if self.prefix_runs:
            prefix_scanned = b.and_(b.icmp_unsigned("==", live_count, b.add(last_live, I32(1))),
                                    b.icmp_unsigned("==", b.and_(last_live, I32(31)), I32(31)))
        same = b.and_(b.icmp_unsigned("==", live_or, live_and),
                      b.icmp_unsigned("!=", b.and_(live_and, I32(STATE_WAIT)), I32(0)))
        scanned_at = b.select(same, live_and, I32(STATE_UNKNOWN))
        scanned = b.block
        b.cbranch(b.icmp_signed("==", live_and, I32(-1)), done, fast)
        b.position_at_end(fast)
        at = b.phi(I32, name="at")
        some_exited = b.phi(I1, name="some_exited")
        live_end = b.phi(I64, name="live_end")      # threads from here on have exited
        at.add_incoming(known, check_known)
        at.add_incoming(scanned_at, scanned)
        prefix = b.phi(I1, name="prefix")     # some_exited, and the live threads a prefix
        some_exited.add_incoming(exited, scanned)
        live_end.add_incoming(live_end64, scanned)
        prefix.add_incoming(prefix_scanned, scanned)
        if self.prefix_runs:
            # a segment returns where its threads stopped only from a run of all threads or
            # of a prefix (a masked run returns STATE_UNKNOWN): after a prefix run,
            # ctx.live_end still says where the live threads end
            with b.goto_block(check_known):
                b.position_before(check_known.terminator)
                prev = b.load(live_end_p)
                after_prefix = b.icmp_unsigned("!=", prev, I32(0))
                known_end = b.select(after_prefix, b.zext(prev, I64), n64)
            some_exited.add_incoming(after_prefix, check_known)
            live_end.add_incoming(known_end, check_known)
            prefix.add_incoming(after_prefix, check_known)
        else:
            some_exited.add_incoming(ir.Constant(I1, 0), check_known)
            live_end.add_incoming(n64, check_known)
            prefix.add_incoming(ir.Constant(I1, 0), check_known)
        sync = b.and_(at, I32(0xFFFF))
        valid = b.and_(b.icmp_signed("!=", at, I32(STATE_UNKNOWN)),
                       b.icmp_unsigned("!=", b.and_(at, I32(STATE_WAIT)), I32(0)))
        index = b.select(valid, b.sub(sync, I32(1)), I32(0))
        kind = b.load(b.gep(kg, [I32(0), index]))
        plain = b.or_(b.icmp_signed("==", kind, I32(SYNC_KINDS["barrier"])),
                      b.icmp_signed("==", kind, I32(SYNC_KINDS["soft"])))
        if self.static_shuffles:
            # every thread waits at a static shuffle: the next segment reads the source
            # lanes itself (SegmentEmitter.read_static_shuffle), no exchange
            static = b.icmp_unsigned("!=", b.and_(kind, I32(SYNC_STATIC)), I32(0))
            plain = b.or_(plain, b.and_(static, b.or_(b.not_(some_exited), prefix)))
        go = fn.append_basic_block("go_on")
        exchange = self.emit_warp_exchange(kinds)
        if exchange is None:
            b.cbranch(b.and_(valid, plain), go, slow)
        else:
            # every live thread waits at the same shuffle: exchange here when every lane's
            # member mask is the full warp (the scheduler otherwise)
            try_inline = fn.append_basic_block("warp_exchange")
            b.cbranch(b.and_(valid, plain), go, try_inline)
            b.position_at_end(try_inline)
            ok = b.and_(valid, b.icmp_unsigned(
                "!=", b.call(exchange, [ctx_i8, sync, some_exited, live_end]), I32(0)))
            b.cbranch(ok, go, slow)
        # threads that exited stay out of the next segment: the others are marked to run
        # (a masked run), or they are the first live_end threads (a prefix run: masked 2)
        b.position_at_end(go)
        again = fn.append_basic_block("next_segment")
        mark = fn.append_basic_block("mark_waiting")
        b.cbranch(b.and_(some_exited, b.not_(prefix)), mark, again)
        b.position_at_end(mark)
        self.mark_waiting(b, state_p, live_end, sync)
        b.branch(again)
        b.position_at_end(again)
        b.store(b.select(some_exited, b.trunc(live_end, I32), I32(0)), live_end_p)
        resume.add_incoming(sync, again)
        masked.add_incoming(b.select(prefix, I32(2), b.zext(some_exited, I32)), again)
        b.branch(loop)
        b.position_at_end(slow)
        if self.prefix_runs:
            # after a prefix run that knew where its threads stopped (no states stored),
            # the scheduler must not take `known` for every thread: the first live_end
            # threads get it in state[], the others stay exited, and it scans
            fill = fn.append_basic_block("prefix_states")
            call = fn.append_basic_block("scheduler_call")
            unknown = b.icmp_signed("==", known, I32(STATE_UNKNOWN))
            b.cbranch(b.and_(prefix, b.not_(unknown)), fill, call)
            b.position_at_end(fill)
            self.mark_waiting(b, state_p, live_end, known)
            filled = b.block
            b.branch(call)
            b.position_at_end(call)
            handed = b.phi(I32, name="handed")
            handed.add_incoming(known, slow)
            handed.add_incoming(I32(STATE_UNKNOWN), filled)
        else:
            handed = known
        run_from = self.mod.intrinsic("cpuify_run_block_from", I32, [PTR, PTR, PTR, I32, I32])
        b.ret(b.call(run_from, [ctx_i8, b.bitcast(disp, PTR), b.bitcast(kg, PTR),
                                I32(len(kinds)), handed]))
        return fn

    def counted_loop(self, b: ir.IRBuilder, n64: ir.Value, inits: list[ir.Value],
                     body: Callable[[ir.IRBuilder, ir.Value, list[ir.Value]], list[ir.Value]],
                     name: str) -> list[ir.Value]:
        """for t in [0, n): carried = body(t, carried); returns the final carried values.
        A loop over the block's threads whose iterations touch only thread t's elements
        (or read shared data): marked parallel like the thread loops."""
        fn = b.function
        pre = b.block
        head = fn.append_basic_block(f"{name}.head")
        loop_body = fn.append_basic_block(f"{name}.body")
        exit_bb = fn.append_basic_block(f"{name}.done")
        b.branch(head)
        b.position_at_end(head)
        t = b.phi(I64, name="t")
        t.add_incoming(I64(0), pre)
        phis = []
        for v in inits:
            phi = b.phi(v.type)
            phi.add_incoming(v, pre)
            phis.append(phi)
        b.cbranch(b.icmp_unsigned("<", t, n64), loop_body, exit_bb)
        b.position_at_end(loop_body)
        nxt = body(b, t, list(phis))
        t.add_incoming(b.add(t, I64(1), flags=["nuw"]), b.block)
        for phi, v in zip(phis, nxt):
            phi.add_incoming(v, b.block)
        b.branch(head).set_metadata("llvm.loop", self.mod.parallel_loop_id())
        group = self.mod.access_group
        blocks = list(fn.blocks)
        for bb in blocks[blocks.index(loop_body):blocks.index(b.block) + 1]:
            for instr in bb.instructions:
                if isinstance(instr, (ir.LoadInstr, ir.StoreInstr)):
                    instr.set_metadata("llvm.access.group", group)
        b.position_at_end(exit_bb)
        return phis

    def scan_live_states(self, b: ir.IRBuilder, state_p: ir.Value, n64: ir.Value
                         ) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
        """(OR, AND of the states of live threads, whether some thread exited, the last live
        thread's index or -1, the number of live threads); OR == AND when all live threads
        are in one state, AND == -1 when none is live."""
        def body(b: ir.IRBuilder, t: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            st = b.load(b.gep(state_p, [t]))
            dead = b.icmp_signed("==", st, I32(STATE_EXITED))
            live_t = b.select(dead, I32(-1), b.trunc(t, I32))
            return [b.or_(acc[0], b.select(dead, I32(0), st)), b.and_(acc[1], st),
                    b.or_(acc[2], dead), b.select(b.icmp_signed(">", live_t, acc[3]), live_t, acc[3]),
                    b.add(acc[4], b.zext(b.not_(dead), I32))]
        live_or, live_and, exited, last_live, count = self.counted_loop(
            b, n64, [I32(0), I32(-1), ir.Constant(I1, 0), I32(-1), I32(0)], body, "scan")
        return live_or, live_and, exited, last_live, count

    def mark_waiting(self, b: ir.IRBuilder, state_p: ir.Value, n64: ir.Value, sync: ir.Value) -> None:
        """Live threads (all waiting at `sync`) get state `sync`: the masked thread loop runs
        the threads whose state is its resume point."""
        def body(b: ir.IRBuilder, t: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            p = b.gep(state_p, [t])
            st = b.load(p)
            b.store(b.select(b.icmp_signed("==", st, I32(STATE_EXITED)), st, sync), p)
            return []
        self.counted_loop(b, n64, [], body, "mark")

    def emit_warp_exchange(self, kinds: list[int]) -> ir.Function | None:
        """`i32 exchange(ctx, sync, some_exited, live_end)`: the shuffle at sync point `sync`
        done for every thread of the block at once (up to live_end: the threads after it
        have exited), as the scheduler's warp_exchange does (threads that exited take no
        part; their states are read only when `some_exited`); returns
        0, having changed nothing the scheduler reads, when `sync` is no shuffle or a live
        lane's member mask is not the full warp.  Called only when every live thread waits
        at `sync`.  None when the kernel has no shuffles."""
        modes = {SYNC_KINDS[f"shfl.{m}"]: m for m in ("up", "down", "bfly", "idx")}
        shuffles = [(i + 1, modes[k]) for i, k in enumerate(kinds) if k in modes]
        if not shuffles:
            return None
        m = self.mod.module
        fn = ir.Function(m, ir.FunctionType(I32, [PTR, I32, I1, I64]), name=f"cpuify_exchange_{self.name}")
        fn.linkage = "internal"
        ctx_raw, sync, some_exited, live_end = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        ctx = b.bitcast(ctx_raw, CTX_TYPE.as_pointer())

        def field(name: str, elem: ir.Type) -> ir.Value:
            return b.bitcast(b.load(b.gep(ctx, [I32(0), I32(ctx_index(name))])), elem.as_pointer())

        xval, xout = field("xval", I64), field("xout", I64)
        state, xb, xc, xmask, xpred = (field(f, I32) for f in ("state", "xb", "xc", "xmask", "xpred"))
        n64 = b.zext(b.load(b.gep(ctx, [I32(0), I32(ctx_index("nthreads"))])), I64)
        no = fn.append_basic_block("not_a_shuffle")
        sw = b.switch(sync, no)
        b.position_at_end(no)
        b.ret(I32(0))
        for index, mode in shuffles:
            case = fn.append_basic_block(f"shfl{index}")
            sw.add_case(I32(index), case)
            b.position_at_end(case)
            # operands that are constants in the kernel (`__shfl_down_sync(0xffffffff, v, 16)`)
            # are used as such: the source lane is then the thread's own index plus a
            # constant, a contiguous load rather than a gather
            consts = [_const_int(o) for o in self.syncs[index - 1].op.operands[1:4]]
            consts += [None] * (3 - len(consts))

            def lane_body(b: ir.IRBuilder, t: ir.Value, acc: list[ir.Value], mode: str = mode,
                          consts: list[int | None] = consts) -> list[ir.Value]:
                cb, cc, cm = consts
                bval = I32(cb & 31) if cb is not None else b.and_(b.load(b.gep(xb, [t])), I32(31))
                cword = I32(cc & 0xFFFFFFFF) if cc is not None else b.load(b.gep(xc, [t]))
                base, j, pred = _shuffle_source(b, t, mode, bval, cword)
                # the source lane must exist (a partial last warp) and not have exited; the
                # loads are conditional on that (masked), so the index needs no clamping
                src = b.add(base, b.sext(j, I64))
                inside = b.and_(pred, b.and_(b.icmp_unsigned("<", j, I32(32)),
                                             b.icmp_unsigned("<", src, n64)))
                fn_ = b.function
                read = fn_.append_basic_block("shfl.read")
                own = fn_.append_basic_block("shfl.own")
                done = fn_.append_basic_block("shfl.done")
                b.cbranch(inside, read, own)
                b.position_at_end(read)
                # states are read only when threads may have exited (they need not be
                # stored when a segment knew where every thread stopped)
                live_src = b.or_(b.not_(some_exited),
                                 b.icmp_signed("!=", b.load(b.gep(state, [src])), I32(STATE_EXITED)))
                other = b.load(b.gep(xval, [src]))
                read_end = b.block
                b.cbranch(live_src, done, own)
                b.position_at_end(own)
                mine = b.load(b.gep(xval, [t]))
                b.branch(done)
                b.position_at_end(done)
                got = b.phi(I64)
                got.add_incoming(other, read_end)
                got.add_incoming(mine, own)
                b.store(got, b.gep(xout, [t]))
                b.store(b.zext(pred, I32), b.gep(xpred, [t]))
                dead = b.and_(some_exited,
                              b.icmp_signed("==", b.load(b.gep(state, [t])), I32(STATE_EXITED)))
                mask = I32(cm & 0xFFFFFFFF) if cm is not None else b.load(b.gep(xmask, [t]))
                return [b.and_(acc[0], b.select(dead, I32(-1), mask))]

            full, = self.counted_loop(b, live_end, [I32(-1)], lane_body, f"shfl{index}")
            b.ret(b.zext(b.icmp_unsigned("==", full, I32(-1)), I32))
        return fn

    @staticmethod
    def area_args(b: ir.IRBuilder, ctx: ir.Value) -> list[ir.Value]:
        return [b.load(b.gep(ctx, [I32(0), I32(ctx_index(name))])) for name in SEGMENT_AREAS]

    def sync_kind(self, sp: SyncPoint) -> int:
        op = sp.op
        mods = op.attributes.get("mods", [])
        if op.name == "upir.barrier":
            if op.attributes.get("soft"):
                return SYNC_KINDS["soft"]
            red = op.attributes.get("reduce")
            return SYNC_KINDS["barrier" if red is None else f"barrier.{red}"]
        kind = op.attributes["kind"]
        if kind == "syncwarp":
            return SYNC_KINDS["syncwarp"]
        if kind == "shfl":
            mode = next(m for m in mods if m in ("up", "down", "bfly", "idx"))
            return SYNC_KINDS[f"shfl.{mode}"]
        if kind == "vote":
            mode = next(m for m in mods if m in ("all", "any", "uni", "ballot"))
            return SYNC_KINDS[f"vote.{mode}"]
        if kind == "activemask":
            return SYNC_KINDS["activemask"]
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


class SegmentEmitter:
    """Emits the thread loop of one segment (resume point r)."""

    def __init__(self, kc: KernelCodegen, fn: ir.Function, resume: int) -> None:
        self.kc = kc
        self.mod = kc.mod
        self.fn = fn
        self.resume = resume
        self.vals: dict[Value, ir.Value] = {}           # per LLVM block (reset at block start)
        self.slots: dict[Value, ir.AllocaInstr] = {}     # cross-block values
        self.block_map: dict[Block, ir.Block] = {}
        self.pending: list[Block] = []
        self.param_cache: dict[tuple[int, str, bool], ir.Value] = {}
        # accesses through which threads of one segment communicate (shared atomics)
        self.serial_accesses: set[ir.Instruction] = set()
        # values computed for another thread than the loop's (alignment_offset): not stored
        self.speculating = False
        # cf.cond_br -> its join: `if`s the thread loop steps over (run after it, deferred)
        self.skip_regions: dict[Operation, Block] = {}
        # (first thread of the group, lane) when the thread loop runs in lane groups
        self.lane_group: tuple[ir.Value, ir.Value] | None = None
        # the thread loop being emitted runs only the threads waiting at its resume point
        self.masked_loop = False
        # interchanged loops' iteration counters: the copies restored before the thread loop,
        # and those some thread may stop with (store_lockstep_counters)
        self.lockstep_entry: dict[Value, ir.Value] = {}
        self.lockstep_reached: set[Value] = set()
        # block-wide idle clamps (idle_clamp): min/max op -> its thread-dependent operand,
        # and the flag that all of them are idle
        self.idle_sides: dict[Operation, int] = {}
        self.idle_flag: ir.Value | None = None
        # values decided for every thread of the thread loop being emitted (a range
        # branch's condition in the copy where all threads agree, see emit_thread_loops)
        self.known: dict[Value, ir.Value] = {}
        # clamped shared loads on the inside of the segment's range branch -> an i1, computed
        # before the thread loop being emitted: the clamp changes nothing for the threads
        # inside the branch's interval (interval_clamps)
        self.interval_idle: dict[Operation, ir.Value] = {}
        # the thread loop being emitted runs the first ctx.live_end threads, all waiting at
        # `resume` (the others exited; KernelCodegen.plan_prefix_runs)
        self.prefix_run = False
        self._live_end: ir.Value | None = None      # live_end()
        # how the threads of the thread loop being emitted stop: all at this sync point, all
        # exiting, all the same way (KernelCodegen.convergent_segments)
        self.next_sync: SyncPoint | None = kc.only_next.get(resume)
        self.all_exit = resume in kc.only_exit
        self.convergent = resume in kc.convergent

    # ---- helpers
    @property
    def b(self) -> ir.IRBuilder:
        return self.builder

    def emit(self) -> None:
        fn = self.fn
        ctx_raw, masked = fn.args[:2]
        areas = dict(zip(SEGMENT_AREAS, fn.args[2:]))
        entry = fn.append_basic_block("entry")
        self.builder = ir.IRBuilder(entry)
        b = self.builder
        ctx = b.bitcast(ctx_raw, CTX_TYPE.as_pointer())
        self.ctx = ctx

        def field(name: str) -> ir.Value:
            return b.load(b.gep(ctx, [I32(0), I32(ctx_index(name))]), name=name)

        self.params = areas["params"]
        dims = b.bitcast(field("dims"), DIMS_TYPE.as_pointer())
        if self.kc.block_dims is not None:
            self.ntid = [I32(d) for d in self.kc.block_dims]
        else:
            self.ntid = [b.load(b.gep(dims, [I32(0), I32(1), I32(k)]), name=f"ntid{k}") for k in range(3)]
        self.nctaid = [b.load(b.gep(dims, [I32(0), I32(0), I32(k)]), name=f"nctaid{k}") for k in range(3)]
        self.ctaid = [field(n) for n in ("bx", "by", "bz")]
        self.shared = areas["shared"]
        self.state = areas["state"]
        self.xarr = {n: areas[n] if n in areas else field(n)
                     for n in ("xval", "xb", "xc", "xmask", "xout", "xpred")}
        self.slots_base = areas["slots"]
        self.local_base_all = areas["local"]
        shape = self.kc.block_dims
        # in code specialized for a block shape the thread count is a constant: slot arrays
        # then sit at constant offsets from each other, and LLVM sees that they are apart
        self.nthreads = field("nthreads") if shape is None else I32(shape[0] * shape[1] * shape[2])
        self.dyn_shared = field("dyn_shared")
        self.nthreads64 = b.zext(self.nthreads, I64)
        if self.kc.local_size and not self.kc.syncs:
            # no sync points: a thread's local memory never outlives its loop iteration
            arr = b.alloca(ir.ArrayType(I8, self.kc.local_size), name="localmem")
            arr.align = 16
            self.local_alloca: ir.Value | None = b.bitcast(arr, PTR)
        else:
            self.local_alloca = None
        exit_bb = fn.append_basic_block("done")
        exit_some_bb = fn.append_basic_block("done_some")
        unmasked_bb = fn.append_basic_block("all_threads")
        prefix = self.kc.prefix_runs and self.resume > 0
        if prefix:
            masked_bb = fn.append_basic_block("some_threads")
            prefix_bb = fn.append_basic_block("first_threads")
            sw = b.switch(masked, unmasked_bb)
            sw.add_case(I32(1), masked_bb)
            sw.add_case(I32(2), prefix_bb)
        elif self.kc.syncs:
            masked_bb = fn.append_basic_block("some_threads")
            b.cbranch(b.icmp_signed("!=", masked, I32(0)), masked_bb, unmasked_bb)
        else:
            b.branch(unmasked_bb)
        # allocas and parameter loads go to the entry block, before its terminator
        self.entry_builder = ir.IRBuilder(entry)
        self.entry_builder.position_before(entry.terminator)
        # sync point -> block-uniform values threads of the current thread loop may leave
        # there (stored per thread; element 0 filled after the loop)
        self.uniform_stops: dict[int, dict[Value, None]] = {}
        # two copies of the thread loop: all threads (vectorizable), or only those at `resume`
        self.emit_thread_loops(unmasked_bb, exit_bb, masked=False)
        unmasked_stops, self.uniform_stops = self.uniform_stops, {}
        unmasked_last_state = self.last_state
        if self.kc.syncs:
            self.emit_thread_loops(masked_bb, exit_some_bb, masked=True)
        if prefix:
            exit_prefix_bb = fn.append_basic_block("done_first")
            self.uniform_stops = {}
            self.prefix_run = True
            try:
                self.emit_thread_loops(prefix_bb, exit_prefix_bb, masked=False)
                b.position_at_end(exit_prefix_bb)
                self.finish_run(b, self.uniform_stops, self.last_state)
            finally:
                self.prefix_run = False
        b.position_at_end(exit_bb)
        self.finish_run(b, unmasked_stops, unmasked_last_state)
        b.position_at_end(exit_some_bb)
        self.store_lockstep_counters(b)
        self.gather_uniform_slots(b, self.uniform_stops)
        b.ret(I32(STATE_UNKNOWN))

    def finish_run(self, b: ir.IRBuilder, stops: dict[int, dict[Value, None]],
                   last_state: ir.AllocaInstr | None) -> None:
        """After a run of all threads (`b` there): the lockstep counters, the prefetches,
        and the state every thread is in, when known (the segment's return value)."""
        self.store_lockstep_counters(b)
        self.prefetch_ahead(b)
        if self.all_exit:
            # all threads ran this segment to their exit (their states were not stored)
            b.ret(I32(STATE_EXITED))
        elif self.next_sync is not None:
            # every thread stopped at the one sync point this segment reaches: their states
            # were not stored (the block function or the scheduler fills them when needed)
            b.ret(I32(STATE_WAIT | self.next_sync.index))
        elif self.convergent and last_state is not None:
            # every thread took the same path: the last thread's state is everyone's
            self.gather_uniform_slots(b, stops)
            b.ret(b.load(last_state))
        elif self.kc.syncs:
            common = self.common_state(b)
            self.gather_uniform_slots(b, stops, common)
            b.ret(common)
        else:
            b.ret(I32(STATE_UNKNOWN))

    def store_lockstep_counters(self, b: ir.IRBuilder) -> None:
        """The next value of each interchanged loop's iteration counter that a thread of
        this segment may have stopped with at the loop's header, written once to the copy
        the next segment reads: the counter restored at the segment's start plus one (the
        segment from the header runs one iteration), or 0 in a segment that reaches the
        header from outside the loop (every thread that comes back to the header has done
        the same iterations; one that leaves the loop never comes back, so writing it when
        none stopped there is harmless).  Written per thread, it was one more store in
        every iteration of the thread loop."""
        for v in sorted(self.lockstep_reached, key=lambda x: self.kc.value_order.get(x, 0)):
            restored = self.lockstep_entry.get(v)
            nxt = I32(0) if restored is None else b.add(self.coerce_bits(restored, I32), I32(1))
            b.store(nxt, b.bitcast(self.slot_address(v, b), I32.as_pointer()))

    def gather_uniform_slots(self, b: ir.IRBuilder, stops: dict[int, dict[Value, None]],
                             common: ir.Value | None = None) -> None:
        """Element 0 of a block-uniform value's slot array is the copy the next segment
        reads: for each sync point where threads stopped with uniform values, copy the
        elements of the last thread waiting there.  `common`: the state every thread is
        in, when the segment has found one (then that thread is the last of the block);
        else a vectorizable max over the states finds it."""
        states = b.bitcast(self.state, I32.as_pointer())
        for index, values in sorted(stops.items()):
            at = I32(STATE_WAIT | index)
            pre = b.block
            scan = self.fn.append_basic_block(f"gather{index}.scan")
            found = self.fn.append_basic_block(f"gather{index}.found")
            copy = self.fn.append_basic_block(f"gather{index}.copy")
            done = self.fn.append_basic_block(f"gather{index}.done")
            all_here = ir.Constant(I1, 0) if common is None else b.icmp_signed("==", common, at)
            b.cbranch(all_here, found, scan)
            b.position_at_end(scan)

            def body(b: ir.IRBuilder, t: ir.Value, acc: list[ir.Value], at: ir.Value = at
                     ) -> list[ir.Value]:
                here = b.icmp_signed("==", b.load(b.gep(states, [t])), at)
                last = b.select(here, b.trunc(t, I32), I32(-1))
                return [b.select(b.icmp_signed(">", last, acc[0]), last, acc[0])]
            last_scanned, = self.kc.counted_loop(b, self.nthreads64, [I32(-1)], body, f"gather{index}")
            scanned = b.block
            b.branch(found)
            b.position_at_end(found)
            last = b.phi(I32)
            last.add_incoming(I32(0), pre)      # every thread is here: element 0 is written
            last.add_incoming(last_scanned, scanned)
            b.cbranch(b.icmp_signed(">", last, I32(0)), copy, done)
            b.position_at_end(copy)
            for v in values:
                arr = self.slot_address(v, b)
                b.store(b.load(b.gep(arr, [b.zext(last, I64)])), arr)
            b.branch(done)
            b.position_at_end(done)

    def live_end(self) -> ir.Value:
        """ctx.live_end, loaded once in the entry block: where the block function found the
        threads after the last live one (0: none exited).  The masked and prefix runs stop
        there."""
        if self._live_end is None:
            e = self.entry_builder
            self._live_end = e.load(e.gep(self.ctx, [I32(0), I32(ctx_index("live_end"))]),
                                    name="live_end")
        return self._live_end

    def common_state(self, b: ir.IRBuilder) -> ir.Value:
        """The state all threads stopped in, or STATE_UNKNOWN: a vectorizable scan, cheaper
        here than in the scheduler."""
        states = b.bitcast(self.state, I32.as_pointer())
        first = b.load(states)
        n = b.zext(self.live_end(), I64) if self.prefix_run else self.nthreads64

        def body(b: ir.IRBuilder, t: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            return [b.or_(acc[0], b.xor(b.load(b.gep(states, [t])), first))]
        diff, = self.kc.counted_loop(b, n, [I32(0)], body, "scan")
        return b.select(b.icmp_unsigned("==", diff, I32(0)), first, I32(STATE_UNKNOWN))

    def emit_thread_loops(self, start: ir.Block, exit_bb: ir.Block, *, masked: bool) -> None:
        """for tz, ty, tx (tx innermost): run the segment for one CUDA thread; then, in a
        run of all threads, the segment's deferred `if`s (KernelCodegen.deferred_regions),
        each as a loop over the threads it selects."""
        whole = not masked and not self.prefix_run      # every thread of the block runs
        deferred = self.kc.deferred.get(self.resume, []) if whole else []
        rb = self.kc.range_branches.get(self.resume) if whole else None
        if rb is not None:
            start = self.emit_agreeing_copy(start, rb)
        if not deferred:
            self.emit_one_thread_loop(start, exit_bb, masked=masked)
            return
        after = self.fn.append_basic_block("deferred")
        self.skip_regions = {r.branch: r.join for r in deferred}
        self.emit_one_thread_loop(start, after, masked=False)
        self.skip_regions = {}
        last_state = self.last_state
        for k, region in enumerate(deferred):
            nxt = exit_bb if k == len(deferred) - 1 else self.fn.append_basic_block("deferred")
            self.emit_one_thread_loop(after, nxt, masked=False, region=region)
            after = nxt
        self.last_state = last_state

    def emit_agreeing_copy(self, start: ir.Block, rb: RangeBranch) -> ir.Block:
        """At `start`: whether every thread is inside the range branch's interval (its
        comparisons hold for the first and the last thread, and tx + u does not wrap in
        between); if so, a copy of the thread loop with the branch decided, which returns
        on its own (finish_run); if not, the block returned, where the usual loop goes.
        The `if (i < n)` of all blocks but the last runs without masks, and a grid-stride
        loop's passes but the last know that every thread goes on (no state per thread)."""
        b = self.builder
        fast = self.fn.append_basic_block("all_agree")
        some = self.fn.append_basic_block("some_differ")
        done = self.fn.append_basic_block("all_agree.done")
        b.position_at_end(start)
        b.cbranch(self.all_inside(b, rb), fast, some)
        saved = (self.next_sync, self.all_exit, self.convergent, self.uniform_stops)
        if rb.decided_convergent:
            self.next_sync, self.all_exit, self.convergent = \
                rb.decided_next, rb.decided_exit, True
        self.uniform_stops = {}
        self.known = {rb.branch.operands[0]: ir.Constant(I1, int(rb.inside))}
        try:
            self.emit_one_thread_loop(fast, done, masked=False)
            b.position_at_end(done)
            self.finish_run(b, self.uniform_stops, self.last_state)
        finally:
            self.known = {}
            self.next_sync, self.all_exit, self.convergent, self.uniform_stops = saved
        return some

    def all_inside(self, b: ir.IRBuilder, rb: RangeBranch) -> ir.Value:
        """With `b` (before the thread loops): whether every comparison of the range branch
        holds for every thread.  u is the value of tx + u in thread 0, the comparisons are
        made in 64 bits for threads 0 and blockDim.x - 1, and tx + u must not wrap."""
        last = self.kc.block_dims[0] - 1
        ok: ir.Value = ir.Constant(I1, 1)
        with self.at_range_branch(b, rb) as wide:
            for v, c, cmp, unsigned in rb.terms:
                first, bound = wide(v, unsigned), wide(c, unsigned)
                end = b.add(first, I64(last))
                op = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}[cmp]
                for x in (self.no_wrap(b, first, unsigned), b.icmp_signed(op, first, bound),
                          b.icmp_signed(op, end, bound)):
                    ok = b.and_(ok, x)
        return ok

    @contextmanager
    def at_range_branch(self, b: ir.IRBuilder, rb: RangeBranch
                        ) -> Iterator[Callable[[Value, bool], ir.Value]]:
        """Within: values computed with `b` as thread 0 sees them at the range branch
        (restored at the resume point, then set along the edges to it); yields
        wide(v, unsigned), the 32-bit v there extended to 64 bits."""
        with self.speculation(b):
            self.as_thread([I32(0), I32(0), I32(0)], 0)
            if self.resume:
                self.restore(self.kc.syncs[self.resume - 1])

            def value(v: Value) -> ir.Value:
                if isinstance(v, OpResult):
                    self.rematerialize(v)
                return self.vals[v]

            for edge in rb.edges:
                got = [value(v) for _, v in edge]      # a parallel copy
                for (arg, _), lv in zip(edge, got):
                    self.vals[arg] = lv

            def wide(v: Value, unsigned: bool) -> ir.Value:
                lv = self.coerce_bits(value(v), I32)
                return b.zext(lv, I64) if unsigned else b.sext(lv, I64)
            yield wide

    def no_wrap(self, b: ir.IRBuilder, first: ir.Value, unsigned: bool) -> ir.Value:
        """Whether tx + u, `first` (64 bits) in thread 0, stays within 32 bits up to the
        block's last thread."""
        top = I64(0xFFFFFFFF if unsigned else 0x7FFFFFFF)
        return b.icmp_signed("<=", b.add(first, I64(self.kc.block_dims[0] - 1)), top)

    def emit_one_thread_loop(self, start: ir.Block, exit_bb: ir.Block, *, masked: bool,
                             region: DeferredRegion | None = None) -> None:
        fn = self.fn
        b = self.builder
        self.block_map = {}
        self.pending = []
        names = ("tz", "ty", "tx")
        whole = not masked and not self.prefix_run      # every thread of the block runs
        if region is not None:
            ranges = region.ranges
        else:
            ranges = self.kc.thread_range.get(self.resume) if whole else None
        if ranges is None:
            starts, bounds, steps = (0, 0, 0), (self.ntid[2], self.ntid[1], self.ntid[0]), (1, 1, 1)
        else:       # z, y, x: only the threads that do something (thread_ranges)
            starts, stops, steps = zip(*reversed(ranges))
            bounds = tuple(I32(v) for v in stops)
        if self.prefix_run:     # the first live_end threads of a one-dimensional block
            bounds = (bounds[0], bounds[1], self.live_end())
        aligning = None if not whole or steps[2] != 1 or region is not None else \
            self.kc.aligning_store(self.resume)
        grouped = whole and region is None and ranges is None and aligning is None and \
            self.resume in self.kc.lane_groups
        if grouped:     # the x loop steps over groups of LANES threads (see below)
            steps = (steps[0], steps[1], self.kc.LANES)
        headers = [fn.append_basic_block(f"{n}.head") for n in names]
        bodies = [fn.append_basic_block(f"{n}.body") for n in names]
        latches = [fn.append_basic_block(f"{n}.latch") for n in names]
        phis = []
        b.position_at_end(start)
        rb = self.kc.range_branches.get(self.resume)
        self.interval_idle = {} if not whole or region is not None or rb is None else \
            self.interval_clamps(b, rb)
        b.branch(headers[0])
        shift = None
        for k in range(3):
            bound = bounds[k]
            if k == 2 and aligning is not None:
                # the row of threads starts `shift` threads early, so that the vectors of
                # the store fall on whole cache lines; the threads before the row's start do
                # nothing.  The loop counts from 0 (tx = counter + start - shift): a loop
                # from a negative start is one LLVM would not vectorize.
                b.position_before(bodies[1].terminator)
                shift = self.alignment_offset(aligning, starts[2], phis[1], phis[0])
                bound = b.add(b.sub(bound, I32(starts[2])), shift)
            b.position_at_end(headers[k])
            # The x loop counts in 64 bits, tx is its truncation (nuw nsw: < 1024).  With a
            # 32-bit counter, LLVM widens it to 64 bits for the addresses and every compare
            # on the thread index with it: AVX-512 masks built from two 8-lane 64-bit
            # compares each (pathfinder's phase 2.7 -> 2.3 ms).  Not for rows of fewer than
            # 32 threads (a 16 x 16 tile's row is one vector: matmul -6%), rows aligned to
            # cache lines, lane groups, interchanged grid-stride loops, or segments that
            # index memory with unsigned 32-bit arithmetic on the thread index
            # (`mul.wide.u32`: the zero extension of a sum that may wrap stays in the
            # address, which then is no longer affine), which all measured slower with it.
            wide = k == 2 and aligning is None and not grouped and not self.kc.lockstep and \
                self.resume not in self.kc.unsigned_indices and \
                (self.kc.block_dims is None or self.kc.block_dims[0] >= 32)
            ity = I64 if wide else I32
            phi = b.phi(ity, name=names[k] if shift is None else "row")
            phi.add_incoming(ir.Constant(ity, starts[k] if shift is None else 0), start if k == 0 else bodies[k - 1])
            b.cbranch(b.icmp_unsigned("<", phi, b.zext(bound, I64) if wide else bound), bodies[k], exit_bb if k == 0 else latches[k - 1])
            if k < 2:
                b.position_at_end(bodies[k])
                b.branch(headers[k + 1])
                phis.append(phi)
            else:
                b.position_at_end(bodies[k])
                if wide:
                    t32 = b.trunc(phi, I32, name="tx32")
                    t32.opname = "trunc nuw nsw"
                    phis.append(t32)
                else:
                    phis.append(phi)
            b.position_at_end(latches[k])
            nxt = b.add(phi, ir.Constant(ity, steps[k]), flags=["nuw"])
            back = b.branch(headers[k])
            if k == 2:
                dims = self.kc.block_dims
                # in lane groups, the group loop is a plain parallel loop (the lanes' loop
                # inside it is the one to vectorize)
                rows = dims is not None and dims[1] * dims[2] > 1
                unrolled = grouped and self.resume in self.kc.unrolled_lane_groups
                # the copy where all threads agree on a range branch stays a loop: without
                # its masks LLVM unrolled it fully, and the reduction's loads ran 15% slower
                # (scan's 7% faster; saxpy 5% slower)
                back.set_metadata("llvm.loop", self.mod.parallel_loop_id(
                    keep_loop=rows or grouped or bool(self.known),
                    no_vectorize=unrolled or self.kc.too_large_to_vectorize(self.resume)))
            phi.add_incoming(nxt, latches[k])
        self.lane_group = None
        if grouped:
            # the x loop runs over groups of LANES threads (its step), an inner loop over
            # the lanes of a group: the vectorizer takes the inner one, one vector
            lanes = self.kc.LANES
            group = phis[2]
            b.position_at_end(bodies[2])
            l_head = fn.append_basic_block("lane.head")
            l_body = fn.append_basic_block("lane.body")
            l_latch = fn.append_basic_block("lane.latch")
            b.branch(l_head)
            b.position_at_end(l_head)
            lane = b.phi(I32, name="lane")
            lane.add_incoming(I32(0), bodies[2])
            b.cbranch(b.icmp_unsigned("<", lane, I32(lanes)), l_body, latches[2])
            b.position_at_end(l_latch)
            lane_next = b.add(lane, I32(1), flags=["nuw"])
            lane.add_incoming(lane_next, l_latch)
            back = b.branch(l_head)
            unrolled = self.resume in self.kc.unrolled_lane_groups
            back.set_metadata("llvm.loop", self.mod.parallel_loop_id(
                keep_loop=not unrolled, unroll_full=unrolled,
                no_vectorize=unrolled or self.kc.too_large_to_vectorize(self.resume)))
            b.position_at_end(l_body)
            phis[2] = b.add(group, lane, name="tx", flags=["nuw", "nsw"])
            bodies[2] = l_body
            latches[2] = l_latch
            self.lane_group = (group, lane)
        if shift is not None:
            b.position_at_end(bodies[2])
            real = fn.append_basic_block("tx.run")
            b.cbranch(b.icmp_unsigned(">=", phis[2], shift), real, latches[2])
            b.position_at_end(real)
            phis[2] = b.add(b.sub(phis[2], shift), I32(starts[2]), name="tx", flags=["nuw"])
            bodies[2] = real
        self.tid = [phis[2], phis[1], phis[0]]       # x, y, z
        b.position_at_end(bodies[2])
        # < 1024: never wraps (the flags let LLVM see slot indices as affine)
        nw = ["nuw", "nsw"]
        self.linear_tid = b.add(b.mul(b.add(b.mul(phis[0], self.ntid[1], flags=nw), phis[1], flags=nw),
                                      self.ntid[0], flags=nw), phis[2], name="ltid", flags=nw)
        self.linear_tid64 = b.zext(self.linear_tid, I64)
        self.latch = latches[2]
        self.masked_loop = masked
        # A run of all threads of a convergent segment (every thread takes the same path):
        # each thread's stop is everyone's, so it goes to a variable, not to state[], and
        # the segment returns the last thread's (LLVM keeps it in a register)
        kc = self.kc
        self.last_state: ir.AllocaInstr | None = None
        if not masked and region is None and self.convergent and \
                self.next_sync is None and not self.all_exit:
            self.last_state = self.entry_builder.alloca(I32, name="last_state")
            self.entry_builder.store(I32(STATE_UNKNOWN), self.last_state)
        if self.kc.local_size:
            if self.local_alloca is not None:
                self.local_base = self.local_alloca
            else:
                self.local_base = b.gep(self.local_base_all,
                                        [b.mul(self.linear_tid64, I64(self.kc.local_size))], name="local")
        else:
            self.local_base = ir.Constant(PTR, None)
        if masked:
            # threads from live_end on have all exited (the block function found the last
            # live one): the run stops there
            live_end = self.live_end()
            limit = self.entry_builder.select(
                self.entry_builder.icmp_unsigned("==", live_end, I32(0)), self.nthreads, live_end)
            check = fn.append_basic_block("in_range")
            b.cbranch(b.icmp_unsigned("<", self.linear_tid, limit), check, exit_bb)
            b.position_at_end(check)
            run = fn.append_basic_block("run")
            st = b.load(self.state_ptr())
            b.cbranch(b.icmp_signed("==", st, I32(self.resume)), run, self.latch)
            b.position_at_end(run)
        self.reset_block()
        if self.resume == 0:
            start_block, start_pos = self.kc.region.entry, 0
        else:
            sp = self.kc.syncs[self.resume - 1]
            start_block, start_pos = sp.block, sp.position + 1
            self.restore(sp)
        if region is None:
            self.emit_ops(start_block, start_pos)
        else:
            # a deferred `if`: recompute what it uses, run it, and go on with the next thread
            for v in region.external:
                if isinstance(v, OpResult) and v.op.name != "upir.const":
                    self.rematerialize(v)
                    self.define(v, self.vals[v])
            self.block_map[region.join] = self.latch
            b.branch(self.block_for(region.entry))
        while self.pending:
            blk = self.pending.pop()
            b.position_at_end(self.block_map[blk])
            self.reset_block()
            for a in blk.args:
                self.vals[a] = b.load(self.slot_of(a))
            self.emit_ops(blk, 0)

    def alignment_offset(self, store: Operation, tx0: int, ty: ir.Value, tz: ir.Value) -> ir.Value:
        """How many threads before thread tx0 of this row the row's vectors should start
        for the vectors of `store` to fall on whole 64-byte lines: its addresses for threads
        tx0 and tx0 + 1 give the element stride and the misalignment; 0 when the stride is
        not a power of two up to 16 bytes or the address is not a multiple of it.  Stores
        that straddle two cache lines cost several times an aligned one, and NumPy puts
        large arrays 16 bytes after a page start: a transpose's rows ran 3x slower."""
        b = self.b
        addrs = []
        with self.speculation(b):
            for tx in (tx0, tx0 + 1):
                self.as_thread([I32(tx), ty, tz],
                               b.add(b.mul(b.add(b.mul(tz, self.ntid[1]), ty), self.ntid[0]), I32(tx)))
                if self.resume:
                    self.restore(self.kc.syncs[self.resume - 1])
                self.rematerialize(store.operands[0])
                addrs.append(b.ptrtoint(self.address(store, memory_space(store)), I64))
        stride = b.sub(addrs[1], addrs[0])
        ok = b.and_(b.and_(b.icmp_unsigned("<=", b.sub(stride, I64(1)), I64(15)),
                           b.icmp_unsigned("==", b.and_(stride, b.sub(stride, I64(1))), I64(0))),
                    b.icmp_unsigned("==", b.and_(addrs[0], b.sub(stride, I64(1))), I64(0)))
        cttz = self.mod.intrinsic("llvm.cttz.i64", I64, [I64, I1])
        log2 = b.call(cttz, [b.select(ok, stride, I64(1)), ir.Constant(I1, 1)])
        shift = b.lshr(b.and_(addrs[0], I64(63)), log2)
        return b.trunc(b.select(ok, shift, I64(0)), I32)

    def lane_bitwise(self, op: Operation) -> ir.Value | None:
        """`tid.x & m` or `tid.x ^ m` in a thread loop run in lane groups (tid.x = g + l, g
        a multiple of LANES, l < LANES): when m's low bits are all ones (and) or all zeros
        (xor), the result is `(g & m) + l` or `(g ^ m) + l`, affine in the lane; when m's
        low bits are all zeros (and), `g & m`, the same for the group.  A select on these
        block-uniform facts that LLVM unswitches: an index like bitonic's
        `2t - (t & (j - 1))` then reads and writes whole vectors for j >= LANES."""
        m = self.kc.lane_operands(op)
        if m is None or self.lane_group is None:
            return None
        b = self.b
        group, lane = self.lane_group
        c = _const_int(m)
        lowc = self.kc.LANES - 1
        if c is not None and (c & lowc) not in (0, lowc):
            # the group's part and the lane's part of the bits are disjoint (lane < LANES)
            if op.name == "ptx.and":
                return b.add(b.and_(group, I32(c & ~lowc & 0xFFFFFFFF)), b.and_(lane, I32(c & lowc)))
            return b.add(b.xor(group, I32(c & ~lowc & 0xFFFFFFFF)), b.xor(lane, I32(c & lowc)))
        mv = self.operand(m, "b32")
        t = self.tid[0]
        low = I32(self.kc.LANES - 1)
        low_bits = b.and_(mv, low)
        if op.name == "ptx.and":
            on_group = b.and_(group, mv)
            plain = b.and_(t, mv)
            v = b.select(b.icmp_unsigned("==", low_bits, low), b.add(on_group, lane, flags=["nuw"]),
                         b.select(b.icmp_unsigned("==", low_bits, I32(0)), on_group, plain))
        else:
            v = b.select(b.icmp_unsigned("==", low_bits, I32(0)),
                         b.add(b.xor(group, mv), lane), b.xor(t, mv))
        return v

    def interval_clamps(self, b: ir.IRBuilder, rb: RangeBranch) -> dict[Operation, ir.Value]:
        """With `b` (before a thread loop): for the shared loads through a clamped index
        (clamped_shared_load) that only threads inside the range branch's interval run,
        with the index's thread-dependent side tx + u, whether the clamp changes nothing
        for any thread of the interval, computed at its ends.  Pathfinder's neighbours
        `prev[max(tx - 1, validXmin)]` are read only by the threads computing a cell,
        `tx > i >= 0`: in interior blocks the clamps never act for them, and the loads
        need neither the bound's value (a load before the loop that waited for the last
        phase's masked stores) nor a blend."""
        kc = self.kc
        inside = rb.branch.successors[0 if rb.inside else 1]
        outside = rb.branch.successors[1 if rb.inside else 0]
        only_inside = set(kc.ops_from(inside, 0)) - set(kc.ops_from(outside, 0))
        leaves, derived = kc.uniform_at(self.resume)
        found: list[tuple[Operation, Operation, Value, Value]] = []
        for op in only_inside:
            if op.name != "ptx.ld" or memory_space(op) != "shared":
                continue
            sides = self.clamp_sides(op)
            if sides is None:
                continue
            _, clamp, x, u = sides
            if clamp.results[0].type != "i32" or not kc._tx_affine(x, leaves, derived, 0):
                continue
            found.append((op, clamp, x, u))
        if not found:
            return {}
        n = kc.block_dims[0]
        out: dict[Operation, ir.Value] = {}
        with self.at_range_branch(b, rb) as wide:
            # the interval [lo, hi] of thread indices, in 64 bits; tx + u must not wrap
            ok: ir.Value = ir.Constant(I1, 1)
            lo: ir.Value = I64(0)
            hi: ir.Value = I64(n - 1)
            for v, c, cmp, unsigned in rb.terms:
                v0 = wide(v, unsigned)
                bound = b.sub(wide(c, unsigned), v0)
                ok = b.and_(ok, self.no_wrap(b, v0, unsigned))
                if cmp in ("gt", "ge"):
                    t = b.add(bound, I64(1)) if cmp == "gt" else bound
                    lo = b.select(b.icmp_signed(">", t, lo), t, lo)
                else:
                    t = b.sub(bound, I64(1)) if cmp == "lt" else bound
                    hi = b.select(b.icmp_signed("<", t, hi), t, hi)
            for op, clamp, x, u in found:
                signed = any(m.startswith("s") for m in clamp.attributes.get("mods", []))
                x0, bound = wide(x, not signed), wide(u, not signed)
                flag = b.and_(ok, self.no_wrap(b, x0, not signed))
                if clamp.name == "ptx.max":     # max(x, u) is x when x(lo) >= u
                    flag = b.and_(flag, b.icmp_signed(">=", b.add(x0, lo), bound))
                else:                           # min(x, u) is x when x(hi) <= u
                    flag = b.and_(flag, b.icmp_signed("<=", b.add(x0, hi), bound))
                out[op] = flag
        return out

    def clamped_shared_load(self, op: Operation, lt: ir.Type, size: int) -> ir.Value | None:
        """A shared-memory load through an index clamped to a bound computed from block
        indices and parameters only (`s[max(tx - 1, lo)]`, pathfinder's and stencils'
        neighbours), as `tx - 1 >= lo ? s[tx - 1] : s[lo]`: the first a load only the
        lanes that take it do (a masked contiguous vector load when the index is affine in
        the thread index), the second one load before the thread loop, its index clamped
        into the shared buffer (its value is used only by lanes whose index was it).  A
        gather otherwise.  None when the address has no such min/max."""
        if self.masked_loop or self.lane_group is not None:
            return None
        sides = self.clamp_sides(op)
        if sides is None:
            return None
        chain, clamp, x, u = sides
        leaves = [o for c in chain if isinstance(c, OpResult) for o in c.op.operands
                  if o not in chain and o is not clamp.results[0]]
        if not all(self._entry_computable(o) or o is x for o in leaves):
            return None
        b = self.b
        xv = self.get(x)
        # the index with x standing for the clamp (shared-memory offsets do not wrap: with
        # `nsw` LLVM sees it as affine in the thread index)
        ix = self.shared_index(b, op, self._with_substitution(
            op.operands[0], chain, clamp.results[0], xv, no_wrap=True))
        idle = self.interval_idle.get(op)
        if idle is None:
            return self._clamped_load(op, lt, size, chain, clamp, xv, u, ix, self.entry_builder)
        # the clamp changes nothing for the threads that run this load in this block: a
        # plain load then; else the clamped load, in a block of its own (its load of the
        # bound's side then happens only where needed: LLVM unswitches the thread loop on
        # `idle` and hoists it out of the other copy)
        plain_bb = self.fn.append_basic_block("clamp.idle")
        clamped_bb = self.fn.append_basic_block("clamp.acts")
        join = self.fn.append_basic_block("clamp.join")
        b.cbranch(idle, plain_bb, clamped_bb)
        b.position_at_end(plain_bb)
        plain = self.shared_load_at(b, op, ix, lt, size)
        b.branch(join)
        b.position_at_end(clamped_bb)
        vals = dict(self.vals)
        clamped = self._clamped_load(op, lt, size, chain, clamp, xv, u, ix, b)
        clamped_end = b.block
        self.vals = vals
        b.branch(join)
        b.position_at_end(join)
        got = b.phi(lt)
        got.add_incoming(plain, plain_bb)
        got.add_incoming(clamped, clamped_end)
        return got

    def clamp_sides(self, op: Operation) -> tuple[set[Value], Operation, Value, Value] | None:
        """For a load whose address goes through one min/max: (the values between the
        address and the min/max, the min/max, its thread-dependent side x, its side u
        computable before the thread loop), or None."""
        chain, clamp = self._clamp_in_address(op.operands[0])
        if clamp is None:
            return None
        x, u = clamp.operands
        if self._entry_computable(x):
            x, u = u, x
        if self._entry_computable(x) or not self._entry_computable(u):
            return None
        return chain, clamp, x, u

    def shared_index(self, b: ir.IRBuilder, op: Operation, lv: ir.Value) -> ir.Value:
        """The 64-bit byte offset into shared (or local) memory of access `op` at address
        `lv`: sign-extended, as offsets are < 2^31 and, with `nsw` index arithmetic, LLVM
        then sees them as affine in the thread index."""
        if isinstance(lv.type, ir.PointerType):
            lv = b.ptrtoint(lv, I64)
        ix = lv if lv.type == I64 else b.sext(lv, I64)
        offset = op.attributes.get("offset", 0)
        return b.add(ix, I64(offset)) if offset else ix

    def shared_load_at(self, b: ir.IRBuilder, op: Operation, ix: ir.Value, lt: ir.Type,
                       size: int) -> ir.Instruction:
        """Load `op`'s value from shared-memory byte offset `ix`, tagged as its access."""
        got = b.load(b.bitcast(b.gep(self.shared, [ix]), lt.as_pointer()))
        got.align = size
        self.tag_shared_access(op, got)
        return got

    def _clamped_load(self, op: Operation, lt: ir.Type, size: int, chain: set[Value],
                      clamp: Operation, xv: ir.Value, u: Value, ix: ir.Value,
                      eb: ir.IRBuilder) -> ir.Value:
        """clamped_shared_load's select between the load at `ix` (x's side, for the lanes
        whose index x is) and the bound's side, loaded with `eb` (the entry block, or where
        the clamp may act)."""
        # the bound's side, once per segment
        saved_builder = self.builder
        self.builder = eb
        try:
            u_entry = self._in_entry(u)
            iu = self.shared_index(eb, op, self._with_substitution(
                op.operands[0], chain, clamp.results[0], u_entry, entry=True))
            limit = eb.sub(eb.add(I64(self.kc.shared.dynamic_offset), eb.zext(self.dyn_shared, I64)),
                           I64(size))
            iu = eb.select(eb.icmp_signed("<", iu, I64(0)), I64(0), iu)
            iu = eb.select(eb.icmp_signed(">", iu, limit), limit, iu)
            vu = eb.load(eb.bitcast(eb.gep(self.shared, [iu]), lt.as_pointer()))
            vu.align = size
        finally:
            self.builder = saved_builder
        b = self.b
        signed = any(m.startswith("s") for m in clamp.attributes.get("mods", []))
        cmp = b.icmp_signed if signed else b.icmp_unsigned
        take_x = cmp(">=" if clamp.name == "ptx.max" else "<=", xv, self.coerce_bits(u_entry, xv.type))
        read = self.fn.append_basic_block("clamp.read")
        done = self.fn.append_basic_block("clamp.done")
        before = b.block
        b.cbranch(take_x, read, done)
        b.position_at_end(read)
        vx = self.shared_load_at(b, op, ix, lt, size)
        b.branch(done)
        b.position_at_end(done)
        got = b.phi(lt)
        got.add_incoming(vx, read)
        got.add_incoming(ir.Constant(lt, ir.Undefined), before)
        return b.select(take_x, got, vu)

    #: special registers with the same value in every thread of a block
    _ENTRY_SPECIALS = ("%ctaid", "%nctaid", "%ntid")

    def idle_clamp(self, op: Operation) -> tuple[int, ir.Value] | None:
        """Block-wide idle clamps, in code specialized for a block shape: for an integer
        `min(a, u)` / `max(a, u)` (a clamp like `min(x, nx - 1)`) where `a` is monotone in
        the thread indices and built from the block index, and `u` is the same for the
        whole block: (the index of `a`, an i1 computed before the thread loop that holds
        when no clamp of the segment changes anything for any thread of the block); the
        caller then selects `a` under the flag.  Monotone, `a` takes its extremes at the
        block's first and last thread, so evaluating it there decides; each check also
        requires the two values in the order the structure says (an index that wraps
        around fails it).  One flag for the segment: LLVM unswitches the thread loop once
        into a copy without the clamps (a stencil's interior blocks: contiguous loads
        instead of gathers), not once per clamp.  None when `op` is no such clamp.

        (Guards like `if (i < n)` were tried the same way: they cost reduction 15%, as the
        compares at the corners let LLVM rewrite the loop's index arithmetic.)"""
        if self.speculating:
            return None
        if self.idle_flag is None:
            self.idle_flag = self._idle_clamps_flag()
        side = self.idle_sides.get(op)
        return None if side is None else (side, self.idle_flag)

    def _idle_clamps_flag(self) -> ir.Value:
        kc = self.kc
        flag: ir.Value = ir.Constant(I1, 1)
        if kc.block_dims is None:
            return flag
        for op in kc.ops_from(*kc.resume_point(self.resume)):
            if op.name not in ("ptx.min", "ptx.max") or op.results[0].type not in ("i32", "i64"):
                continue
            for side in (0, 1):
                a, u = op.operands[side], op.operands[1 - side]
                direction = _tid_direction(a, 12)
                # (a clamp of the block's own thread indices alone, `max(tx - 1, 0)`, acts
                # in every block: never idle, and one such clamp would keep the whole
                # segment in its slow copy)
                if direction in (1, -1) and self._entry_computable(u) and \
                        _pure_over(a, set(), self._CLAMP_SPECIALS, 12) and \
                        uses_special(a, "%ctaid", 12):
                    self.idle_sides[op] = side
                    flag = self.entry_builder.and_(flag, self._idle_flag(op, side, direction))
                    break
        return flag

    _CLAMP_SPECIALS = ("%tid", "%ctaid", "%nctaid", "%ntid")

    def _idle_flag(self, op: Operation, side: int, direction: int) -> ir.Value:
        """Whether clamp `op` changes nothing for any thread of the block (idle_clamp)."""
        dims = self.kc.block_dims
        assert dims is not None
        a, u = op.operands[side], op.operands[1 - side]
        b = self.entry_builder
        with self.speculation(b):
            ends = []
            for corner in ((0, 0, 0), (dims[0] - 1, dims[1] - 1, dims[2] - 1)):
                self.as_thread([I32(c) for c in corner],
                               corner[0] + dims[0] * (corner[1] + dims[1] * corner[2]))
                if isinstance(a, OpResult):
                    self.rematerialize(a)
                ends.append(self.get(a))
            bound = self._in_entry(u) if isinstance(u, OpResult) else self.get(u)
            t = next((m for m in op.attributes.get("mods", [])
                      if m[:1] in "sub" and m[1:].isdigit()), "b32")
            cmp = b.icmp_signed if t.startswith("s") else b.icmp_unsigned
            lo, hi = ends if direction == 1 else ends[::-1]
            flag = cmp("<=", lo, hi)
            for end in (lo, hi):
                flag = b.and_(flag, cmp("<=" if op.name == "ptx.min" else ">=", end, bound))
            return flag

    def prefetch_ahead(self, b: ir.IRBuilder) -> None:
        """After the thread loop of an interchanged loop's iteration, or of a segment of a
        loop with barriers (`b` there): prefetch the lines that the accesses
        KernelCodegen.iteration_prefetches chose will touch some iterations later
        (prefetch_advance; prefetchw for stores).  Their addresses are computed as at the
        resume point, for the probe threads, with the loop counter advanced; past the loop's
        end they are harmless, as a prefetch never faults.

        After the loop, not before it: computed in the entry block, the same address
        arithmetic as the thread loop's (without no-wrap flags) was merged with the loop's
        by GVN, and the vectorizer then turned the loop's contiguous loads into gathers
        (warp reduction 1.9 -> 2.6 ms instead of 1.65)."""
        dims = self.kc.block_dims
        ops = self.kc.prefetches.get(self.resume)
        if not ops or dims is None or self.resume == 0:
            return
        sp = self.kc.syncs[self.resume - 1]
        advance = self.kc.prefetch_advance(self.resume)
        fn = self.mod.intrinsic("llvm.prefetch.p0", ir.VoidType(), [PTR, I32, I32, I32])
        with self.speculation(b):
            for op, probes, writes in ops:
                # one address per row of probes, the row's other lines at constant offsets
                # from it (the probes assume contiguous accesses of access_size bytes, see
                # _row_probes): computed per probe, each was an add and a sign extension of
                # 32-bit index arithmetic LLVM could not fold into a displacement
                rows: dict[tuple[int, int], tuple[int, ir.Value]] = {}
                size = access_size(op)
                for x, y, z in probes:
                    if (y, z) not in rows:
                        self.as_thread([I32(x), I32(y), I32(z)], x + dims[0] * (y + dims[1] * z))
                        self.restore(sp, advance=advance)
                        if isinstance(op.operands[0], OpResult):
                            self.rematerialize(op.operands[0])
                        rows[(y, z)] = (x, self.address(op, "global"))
                    x0, base = rows[(y, z)]
                    addr = base if x == x0 else b.gep(base, [I64((x - x0) * size)])
                    b.call(fn, [addr, I32(int(writes)), I32(3), I32(1)])

    @contextmanager
    def speculation(self, b: ir.IRBuilder) -> Iterator[None]:
        """Emits with `b` values computed for other threads than the thread loop's (at
        fixed thread indices, see as_thread) or outside it; restores the builder, the
        values and the thread indices afterwards."""
        saved = (self.builder, self.vals, getattr(self, "tid", None),
                 getattr(self, "linear_tid", None), getattr(self, "linear_tid64", None),
                 self.speculating)
        self.builder = b
        self.speculating = True
        try:
            yield
        finally:
            (self.builder, self.vals, self.tid, self.linear_tid, self.linear_tid64,
             self.speculating) = saved

    def as_thread(self, tid: list[ir.Value], linear: int | ir.Value) -> None:
        """Within speculation(): compute values from here on as thread `tid` (x, y, z)
        whose linear index is `linear`, from scratch."""
        self.vals = {}
        self.tid = tid
        if isinstance(linear, int):
            self.linear_tid, self.linear_tid64 = I32(linear), I64(linear)
        else:
            self.linear_tid, self.linear_tid64 = linear, self.b.zext(linear, I64)

    def _entry_computable(self, v: Value) -> bool:
        """Whether v is pure arithmetic on constants, parameters and block indices (the
        same for every thread, computable before the thread loop)."""
        return _pure_over(v, set(), self._ENTRY_SPECIALS, 12)

    def _in_entry(self, v: Value) -> ir.Value:
        """v (entry-computable) emitted in the segment's entry block."""
        with self.speculation(self.entry_builder):
            self.vals = {}
            self.rematerialize(v)
            return self.vals[v]

    def _clamp_in_address(self, addr: Value) -> tuple[set[Value], Operation | None]:
        """(the values on the way from `addr` down to a min/max, that min/max) when addr is
        integer arithmetic (add, shift, multiply) over exactly one ptx.min/ptx.max."""
        chain: set[Value] = set()
        found: list[Operation] = []

        def walk(v: Value, depth: int) -> bool:
            if not isinstance(v, OpResult) or depth > 8:
                return False
            op = v.op
            if op.name in ("ptx.min", "ptx.max") and len(op.operands) == 2 and \
                    op.results[0].type in ("i32", "i64"):
                found.append(op)
                chain.add(v)
                return True
            if op.name not in ("ptx.add", "ptx.sub", "ptx.shl", "ptx.mul", "ptx.mad", "ptx.mov", "ptx.cvt"):
                return False
            hits = [walk(o, depth + 1) for o in op.operands]
            if any(hits):
                chain.add(v)
                return True
            return False

        walk(addr, 0)
        if len(found) != 1:
            return chain, None
        return chain - {found[0].results[0]}, found[0]

    def _with_substitution(self, v: Value, chain: set[Value], replaced: Value,
                           replacement: ir.Value, *, no_wrap: bool = False,
                           entry: bool = False) -> ir.Value:
        """v computed again with `replaced` standing for `replacement` (the ops on `chain`
        re-emitted; their results are not kept).  `no_wrap`: the integer arithmetic
        re-emitted is known not to wrap (flags it nsw).  `entry`: emitted in the entry
        block, where the other operands are computed afresh (see _entry_computable)."""
        with self.speculation(self.b):
            self.vals = dict(self.vals)

            def emit(x: Value) -> ir.Value:
                if x is replaced:
                    return replacement
                if x not in chain:
                    return self._in_entry(x) if entry else self.get(x)
                assert isinstance(x, OpResult)
                for o in x.op.operands:
                    self.vals[o] = emit(o)
                amount = _const_int(x.op.operands[1]) if x.op.name == "ptx.shl" else None
                if no_wrap and amount is not None and 0 <= amount < _width(IR_LLVM[x.type]):
                    # (the handler guards the shift amount with a select that hides the flag)
                    got = self.b.shl(self.coerce_bits(self.vals[x.op.operands[0]], IR_LLVM[x.type]),
                                     ir.Constant(IR_LLVM[x.type], amount), flags=["nsw"])
                    self.vals[x] = got
                    return got
                handler = HANDLERS.get(x.op.name) or PTX_HANDLERS[x.op.name]
                handler(self, x.op)
                got = self.vals[x]
                if no_wrap and isinstance(got, ir.Instruction) and \
                        got.opname in ("add", "sub", "mul", "shl") and "nsw" not in got.flags:
                    got.flags.append("nsw")
                return got
            return emit(v)

    def state_ptr(self) -> ir.Value:
        b = self.b
        sp = b.bitcast(self.state, I32.as_pointer())
        return b.gep(sp, [self.linear_tid64])

    def reset_block(self) -> None:
        self.vals = {}

    def slot_of(self, v: Value) -> ir.AllocaInstr:
        s = self.slots.get(v)
        if s is None:
            s = self.entry_builder.alloca(self.llvm_type(v), name="v")
            self.slots[v] = s
        return s

    def llvm_type(self, v: Value) -> ir.Type:
        if v in self.kc.pointers:
            return PTR
        return IR_LLVM[v.type]

    def get(self, v: Value) -> ir.Value:
        got = self.vals.get(v)
        if got is not None:
            return got
        if isinstance(v, OpResult) and v.op.name == "upir.const":
            c = self.constant(v)
            self.vals[v] = c
            return c
        # defined in another LLVM block: through its alloca
        got = self.b.load(self.slot_of(v))
        self.vals[v] = got
        return got

    def constant(self, v: OpResult) -> ir.Value:
        val = v.op.attributes["value"]
        t = IR_LLVM[v.type]
        if v.type.startswith("f"):
            if isinstance(val, int):
                return ir.Constant(t, _float_from_bits(val, v.type))
            return ir.Constant(t, float(val))
        c = ir.Constant(t, int(val) & ((1 << t.width) - 1))
        if v in self.kc.pointers:
            return c.inttoptr(PTR)
        return c

    def define(self, v: Value, lv: ir.Value) -> None:
        lv = self.known.get(v, lv)
        want = self.llvm_type(v)
        lv = self.coerce_bits(lv, want)
        self.vals[v] = lv
        if self.used_elsewhere(v) and not self.speculating:
            self.b.store(lv, self.slot_of(v))

    def used_elsewhere(self, v: Value) -> bool:
        if isinstance(v, BlockArgument):
            return True
        blk = v.op.parent if isinstance(v, OpResult) else None
        for u in v.uses:
            if u.parent is not blk:
                return True
        # also if a sync point in the same block separates def and use
        return bool(self.kc.syncs)

    def coerce_bits(self, lv: ir.Value, want: ir.Type) -> ir.Value:
        b = self.b
        have = lv.type
        if have == want:
            return lv
        if isinstance(want, ir.PointerType):
            if isinstance(have, ir.PointerType):
                return b.bitcast(lv, want)
            if isinstance(have, ir.IntType):
                return b.inttoptr(self.int_resize(lv, I64, False), want)
            return b.inttoptr(b.bitcast(lv, I64), want)
        if isinstance(have, ir.PointerType):
            lv = b.ptrtoint(lv, I64)
            have = I64
        if isinstance(want, ir.IntType) and isinstance(have, ir.IntType):
            return self.int_resize(lv, want, False)
        hw = _width(have)
        ww = _width(want)
        if hw == ww:
            return b.bitcast(lv, want)
        # float <-> int of another width: go through an int of the source width
        as_int = b.bitcast(lv, ir.IntType(hw)) if not isinstance(have, ir.IntType) else lv
        resized = self.int_resize(as_int, ir.IntType(ww), False)
        return b.bitcast(resized, want) if not isinstance(want, ir.IntType) else resized

    def int_resize(self, lv: ir.Value, want: ir.IntType, signed: bool) -> ir.Value:
        have = lv.type
        if have.width == want.width:
            return lv
        if have.width > want.width:
            return self.b.trunc(lv, want)
        return self.b.sext(lv, want) if signed else self.b.zext(lv, want)

    def operand(self, v: Value, t: str) -> ir.Value:
        """`v` read as PTX type `t` (register wider/narrower than the type is cut/extended)."""
        lv = self.get(v)
        want = ptx_llvm_type(t)
        if lv.type == want:
            return lv
        if isinstance(lv.type, ir.PointerType):
            lv = self.b.ptrtoint(lv, I64)
        if isinstance(want, ir.IntType) and isinstance(lv.type, ir.IntType):
            return self.int_resize(lv, want, is_signed(t))
        return self.coerce_bits(lv, want)

    def result(self, op: Operation, lv: ir.Value, t: str, index: int = 0) -> None:
        """Store `lv` (of PTX type t) into result `index`, extending like PTX does for wide
        destination registers (sign-extend for .s types)."""
        r = op.results[index]
        want = self.llvm_type(r)
        if isinstance(want, ir.IntType) and isinstance(lv.type, ir.IntType) and want.width > lv.type.width:
            lv = self.int_resize(lv, want, is_signed(t))
        self.define(r, lv)

    # ---- control flow within the segment
    def block_for(self, blk: Block) -> ir.Block:
        bb = self.block_map.get(blk)
        if bb is None:
            bb = self.fn.append_basic_block("bb")
            self.block_map[blk] = bb
            self.pending.append(blk)
        return bb

    def jump(self, succ: Block, args: list[Value]) -> ir.Block:
        b = self.b
        vals = [self.get(a) for a in args]
        for arg, v in zip(succ.args, vals):
            b.store(self.coerce_bits(v, self.llvm_type(arg)), self.slot_of(arg))
        return self.block_for(succ)

    def emit_ops(self, blk: Block, start: int) -> None:
        for op in blk.ops[start:]:
            if op in self.kc.sync_of_op:
                self.leave_at_sync(self.kc.sync_of_op[op])
                return
            handler = HANDLERS.get(op.name)
            if handler is None:
                handler = PTX_HANDLERS.get(op.name)
            if handler is None:
                self.kc.error(f"no code generation for '{op.name}'", op)
            handler(self, op)   # type: ignore[misc]
            if self.b.block.is_terminated:
                return

    def leave_at_sync(self, sp: SyncPoint) -> None:
        b = self.b
        op = sp.op
        # contributions of this thread to the collective
        tid = self.linear_tid64
        if op.operands:
            kind = op.attributes.get("kind")
            vals = list(op.operands)
            names: list[str]
            if op.name == "upir.barrier":
                names = ["xval"]
            elif kind == "shfl" and sp.index in self.kc.static_shuffles and not self.masked_loop \
                    and self.next_sync is sp:
                # every thread stops here and the next segment reads the source lanes from
                # the shuffle's own buffer: nothing else is needed
                names = []
            elif kind == "shfl":
                names = ["xval", "xb", "xc", "xmask"]
            elif kind in ("vote", "match", "redux"):
                names = ["xval", "xmask"]
            elif kind in ("syncwarp", "activemask"):
                names = ["xmask"]
            else:
                names = []
            for name, v in zip(names, vals):
                lv = self.get(v)
                if isinstance(lv.type, ir.PointerType):
                    lv = b.ptrtoint(lv, I64)
                if name == "xval":
                    if not isinstance(lv.type, ir.IntType):
                        lv = b.bitcast(lv, ir.IntType(_width(lv.type)))
                    lv = self.int_resize(lv, I64, False)
                    arr = b.bitcast(self.xarr[name], I64.as_pointer())
                else:
                    if not isinstance(lv.type, ir.IntType):
                        lv = b.bitcast(lv, ir.IntType(_width(lv.type)))
                    lv = self.int_resize(lv, I32, False)
                    arr = b.bitcast(self.xarr[name], I32.as_pointer())
                b.store(lv, b.gep(arr, [tid]))
            static = self.kc.static_shuffles.get(sp.index)
            if static is not None:
                # the value also goes to the shuffle's buffer, which a run of all threads
                # after it reads (read_static_shuffle)
                lv = self.get(vals[0])
                if isinstance(lv.type, ir.PointerType):
                    lv = b.ptrtoint(lv, I64)
                if not isinstance(lv.type, ir.IntType):
                    lv = b.bitcast(lv, ir.IntType(_width(lv.type)))
                b.store(self.int_resize(lv, I32, False), b.gep(self.static_buffer(static[3]), [tid]))
        for v in sp.live:
            if v in self.kc.lockstep and not self.speculating:
                # an interchanged loop's iteration counter: stored once, after the thread
                # loop (store_lockstep_counters), not by every thread
                self.lockstep_reached.add(v)
                continue
            value = self.coerce_bits(self.get(v), IR_LLVM[v.type])
            if v in self.kc.uniform:
                # the same value in every thread that stops here: each stores it to its own
                # element of the slot's array (a contiguous vector store; one address
                # written by every thread would keep the loop scalar); the next segment
                # reads element 0, which the thread loop's exit fills from a thread that
                # stopped here unless thread 0 certainly did (see gather_uniform_slots)
                b.store(value, b.gep(self.slot_address(v), [self.linear_tid64]))
                if self.masked_loop or not self.convergent:
                    self.uniform_stops.setdefault(sp.index, {})[v] = None
            else:
                b.store(value, self.slot_address(v))
        if self.last_state is not None:
            b.store(I32(STATE_WAIT | sp.index), self.last_state)
        elif self.masked_loop or self.next_sync is None:
            b.store(I32(STATE_WAIT | sp.index), self.state_ptr())
        b.branch(self.latch)

    def slot_address(self, v: Value, b: ir.IRBuilder | None = None) -> ir.Value:
        b = b or self.b
        off = self.kc.slot_offset[v]
        base = b.gep(self.slots_base, [b.mul(self.nthreads64, I64(off))])
        arr = b.bitcast(base, IR_LLVM[v.type].as_pointer())
        if v in self.kc.uniform:
            return arr          # one copy for the whole block
        return b.gep(arr, [self.linear_tid64])

    def restore(self, sp: SyncPoint, advance: int = 0) -> None:
        """The values live at `sp`, as the resumed thread sees them; with `advance`, as it
        will `advance` iterations later: of the interchanged loops at a soft barrier, else
        of the loops whose counters cross `sp` (prefetch_ahead)."""
        b = self.b
        soft = self.kc.sync_kind(sp) == SYNC_KINDS["soft"]
        for v in sp.live:
            if v in self.kc.uniform:
                # read once before the thread loop: threads of this segment may already
                # write the next value of the same slot
                e = self.entry_builder
                lv = e.load(self.slot_address(v, e))
                if v in self.kc.lockstep:
                    if advance:
                        lv = e.add(lv, ir.Constant(lv.type, advance))
                    else:
                        self.lockstep_entry[v] = lv
                elif advance and not soft and v in sp.steps:
                    lv = e.add(lv, ir.Constant(lv.type, advance * sp.steps[v]))
            else:
                lv = b.load(self.slot_address(v))
            self.define(v, lv)
        for v in sp.remat:
            self.rematerialize(v)
        for v, expr in sp.derived.items():
            self.rematerialize(expr)
            self.define(v, self.vals[expr])
        op = sp.op
        static = self.kc.static_shuffles.get(sp.index)
        if op.results and static is not None and not self.masked_loop:
            out, pred = self.read_static_shuffle(*static)
            self.define_collective_results(op, out, pred)
        elif op.results:
            tid = self.linear_tid64
            out = b.load(b.gep(b.bitcast(self.xarr["xout"], I64.as_pointer()), [tid]))
            pred = b.load(b.gep(b.bitcast(self.xarr["xpred"], I32.as_pointer()), [tid]))
            self.define_collective_results(op, out, pred)

    def define_collective_results(self, op: Operation, out: ir.Value, pred: ir.Value) -> None:
        """The results of a collective from its 64-bit value and its 32-bit predicate."""
        b = self.b
        first = op.results[0]
        if first.type == "i1" and op.name == "upir.barrier" or (first.type == "i1" and op.attributes.get("kind") == "vote"):
            self.define(first, b.icmp_unsigned("!=", out, I64(0)))
        else:
            self.define(first, self.coerce_bits(self.int_resize(out, ir.IntType(_width(IR_LLVM[first.type])), False), IR_LLVM[first.type]))
        if len(op.results) > 1:
            self.define(op.results[1], b.icmp_unsigned("!=", pred, I32(0)))

    def static_buffer(self, which: int, b: ir.IRBuilder | None = None) -> ir.Value:
        """Buffer 1 or 2 of static shuffles (KernelCodegen.plan_static_shuffles), as i32*:
        `shfl` moves 32-bit values (the exchange's xval holds 64 for votes and matches; the
        shuffles' own buffers with 64-bit elements took a zero extension per store and a
        truncation per load, and twice the bytes)."""
        b = b or self.b
        stride = self.kc.static_buffer_stride(b, self.nthreads64)
        base = b.gep(self.xarr["xval"], [b.mul(stride, I64(which))])
        return b.bitcast(base, I32.as_pointer())

    def read_static_shuffle(self, mode: str, lane_operand: int, clamp_word: int, which: int
                            ) -> tuple[ir.Value, ir.Value]:
        """(value, predicate) of a static shuffle (KernelCodegen.static_shuffle) for this
        thread, read from the buffer the block's threads stored: in a run of all threads
        every lane of every warp wrote its value.  The source lane is the thread's own lane
        plus, minus or xor a constant: a contiguous load, masked where the source is no
        lane of the warp (the thread's own value then)."""
        b = self.b
        t = self.linear_tid64
        xval = self.static_buffer(which)
        if self.speculating:
            # (another thread's values computed outside the thread loop, alignment_offset:
            # no branches here; the shuffle's result is not what they are after)
            return b.zext(b.load(b.gep(xval, [t])), I64), I32(0)
        base, j, pred = _shuffle_source(b, t, mode, I32(lane_operand & 31),
                                        I32(clamp_word & 0xFFFFFFFF))
        # the source thread's index (when `inside`), written so that LLVM sees it affine in
        # t for up and down: a contiguous (masked) load
        src = (b.add(t, I64(lane_operand & 31)) if mode == "down" else
               b.sub(t, I64(lane_operand & 31)) if mode == "up" else b.add(base, b.sext(j, I64)))
        inside = b.and_(pred, b.and_(b.icmp_unsigned("<", j, I32(32)),
                                     b.icmp_unsigned("<", src, self.nthreads64)))
        mine = b.load(b.gep(xval, [t]))
        if mode in ("up", "down"):
            # t -+ 31 at most: inside the guard zones around xval (XVAL_GUARD), so the load
            # needs no condition and stays one contiguous vector load
            other = b.load(b.gep(xval, [src]))
            return b.zext(b.select(inside, other, mine), I64), b.zext(pred, I32)
        read = self.fn.append_basic_block("shfl.read")
        done = self.fn.append_basic_block("shfl.done")
        before = b.block
        b.cbranch(inside, read, done)
        b.position_at_end(read)
        other = b.load(b.gep(xval, [src]))
        b.branch(done)
        b.position_at_end(done)
        got = b.phi(I32)
        got.add_incoming(mine, before)
        got.add_incoming(other, read)
        return b.zext(got, I64), b.zext(pred, I32)

    def rematerialize(self, v: Value) -> None:
        if v in self.vals:
            return
        assert isinstance(v, OpResult)
        op = v.op
        for o in op.operands:
            if isinstance(o, OpResult) and o.op.name != "upir.const":
                self.rematerialize(o)
        handler = HANDLERS.get(op.name) or PTX_HANDLERS[op.name]
        handler(self, op)

    # --- address computation
    def tag_parallel_accesses(self) -> None:
        """Puts the segment's loads and stores in the module's access group (see
        ModuleCodegen.parallel_loop_id), except volatile ones and `self.serial_accesses`."""
        if self.local_alloca is not None:
            return      # one local-memory buffer serves every iteration: not parallel
        group = self.mod.access_group
        for bb in self.fn.blocks:
            for instr in bb.instructions:
                if not isinstance(instr, (ir.LoadInstr, ir.StoreInstr)):
                    continue
                pointer = instr.operands[0 if isinstance(instr, ir.LoadInstr) else 1]
                # the segment's own allocas (values between its LLVM blocks) become
                # registers before vectorization; they are no thread's memory
                if isinstance(pointer, ir.AllocaInstr) or getattr(instr, "volatile", False) \
                        or instr in self.serial_accesses:
                    continue
                instr.set_metadata("llvm.access.group", group)

    def tag_shared_access(self, op: Operation, instr: ir.Instruction) -> None:
        """Marks a shared-memory load/store with the scope of the variable it accesses."""
        tags = self.kc.shared_alias_tags.get(op.operands[0])
        if tags is not None:
            instr.set_metadata("alias.scope", tags[0])
            instr.set_metadata("noalias", tags[1])

    def address(self, op: Operation, space: str) -> ir.Value:
        """Pointer for memory op `op` (address operand 0 plus its `offset` attribute)."""
        b = self.b
        base = op.operands[0]
        offset = op.attributes.get("offset", 0)
        lv = self.get(base)
        if space == "shared" or space == "local":
            root = self.shared if space == "shared" else self.local_base
            return b.gep(root, [self.shared_index(b, op, lv)])
        if space == "param":
            if isinstance(lv.type, ir.PointerType):
                p = lv
            else:
                p = b.inttoptr(self.int_resize(lv, I64, False), PTR)
            return b.gep(p, [I64(offset)]) if offset else p
        if not isinstance(lv.type, ir.PointerType):
            lv = b.inttoptr(self.int_resize(lv, I64, False), PTR)
        if offset:
            lv = b.gep(lv, [I64(offset)])
        return lv


#: Bytes kept free before and after the `xval` array (32 lanes of 8 bytes): a static
#: shuffle up or down reads the value `t -+ k` (k < 32) of every thread unconditionally
#: (SegmentEmitter.read_static_shuffle), and selects its own where that is no lane of its warp.
XVAL_GUARD = 256


def _shuffle_source(b: ir.IRBuilder, t: ir.Value, mode: str, bval: ir.Value, cword: ir.Value
                    ) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(first thread of the warp, source lane, whether it is within the segment) of shfl.sync
    `mode` for thread t (i64) with lane operand `bval` (< 32) and clamp word `cword` (PTX
    `c`: clamp value in bits 0-4, segment mask in bits 8-12), as the runtime's warp_exchange
    computes them."""
    lane = b.trunc(b.and_(t, I64(31)), I32)
    base = b.and_(t, I64(~31 & (2**64 - 1)))
    cval = b.and_(cword, I32(31))
    segmask = b.and_(b.lshr(cword, I32(8)), I32(31))
    notseg = b.xor(segmask, I32(-1))
    maxlane = b.or_(b.and_(lane, segmask), b.and_(cval, notseg))
    if mode == "up":
        j = b.sub(lane, bval)
        return base, j, b.icmp_signed(">=", j, maxlane)
    j = (b.add(lane, bval) if mode == "down" else b.xor(lane, bval) if mode == "bfly"
         else b.or_(b.and_(lane, segmask), b.and_(bval, notseg)))
    return base, j, b.icmp_signed("<=", j, maxlane)


def access_size(op: Operation) -> int:
    """Bytes one thread's ld/st `op` accesses (all its vector elements)."""
    n = len(op.results) if op.name == "ptx.ld" else len(op.operands) - 1
    return max(1, type_size(operand_type(op))) * max(1, n)


def _row_probes(width: int, size: int) -> list[int]:
    """The x thread indices whose addresses cover every 64-byte line of a row of `width`
    threads accessing `size` contiguous bytes each: one per line and the row's last."""
    step = max(1, 64 // size)
    return sorted(set(range(0, width, step)) | {width - 1})


def _depends_on(v: Value, leaf: Value, max_depth: int, depth: int = 0) -> bool:
    """Whether v is computed from `leaf` (through at most max_depth operations)."""
    if v is leaf:
        return True
    if depth > max_depth or not isinstance(v, OpResult):
        return False
    return any(_depends_on(o, leaf, max_depth, depth + 1) for o in v.op.operands)


def _thread_box(dims: tuple[int, int, int], dim: int, work: list[int]
                ) -> tuple[tuple[int, int, int], ...] | None:
    """(start, stop, step) for the x, y and z thread loops over the block `dims` where the
    indices along `dim` are `work` (sorted); None unless `work` is an arithmetic
    progression."""
    if not work:
        lo, hi, step = 0, 0, 1
    else:
        lo, step, hi = work[0], (work[1] - work[0] if len(work) > 1 else 1), work[-1] + 1
        if work != list(range(lo, hi, step)):
            return None
    ranges = [(0, d, 1) for d in dims]
    ranges[dim] = (lo, hi, step)
    return tuple(ranges)


def _pure_over(v: Value, leaves: set[Value], specials: tuple[str, ...] | None,
               max_depth: int, depth: int = 0) -> bool:
    """Whether v is pure computation over `leaves`, constants, parameters, variable
    addresses and special registers (only those whose name starts with one of `specials`,
    when given)."""
    if v in leaves:
        return True
    if depth > max_depth or not isinstance(v, OpResult) or not info(v.op).pure:
        return False
    op = v.op
    if op.name in ("upir.const", "upir.param", "upir.addressof"):
        return True
    if op.name == "upir.special":
        return specials is None or str(op.attributes.get("reg", "")).startswith(specials)
    if op.successors or not op.operands:
        return False
    return all(_pure_over(o, leaves, specials, max_depth, depth + 1) for o in op.operands)


_MONOTONE_OPS = ("ptx.add", "ptx.sub", "ptx.mul", "ptx.mad", "ptx.shl", "ptx.mov", "ptx.cvt",
                 "ptx.min", "ptx.max")


def _tid_direction(v: Value, depth: int) -> int | None:
    """How integer v moves as the thread indices grow: 1 never down, -1 never up, 0 the
    same for all threads (no thread index in it), None unknown.  Exact arithmetic: the
    caller checks the values at the ends against wrap-around."""
    if not isinstance(v, OpResult) or depth < 0:
        return None
    op = v.op
    if op.name == "upir.special":
        return 1 if str(op.attributes.get("reg", "")).startswith("%tid") else 0
    if op.name in ("upir.const", "upir.param", "upir.addressof"):
        return 0
    if op.name not in _MONOTONE_OPS:
        return None
    if op.name == "ptx.cvt" and any(m.startswith("f") for m in op.attributes.get("mods", [])):
        return None

    def combine(x: int | None, y: int | None) -> int | None:
        if x is None or y is None:
            return None
        if x == 0 or y == 0 or x == y:
            return x or y
        return None

    ds = [_tid_direction(o, depth - 1) for o in op.operands]
    if op.name in ("ptx.mov", "ptx.cvt"):
        return ds[0]
    if op.name in ("ptx.add", "ptx.min", "ptx.max"):
        return combine(ds[0], ds[1])
    if op.name == "ptx.sub":
        return combine(ds[0], None if ds[1] is None else -ds[1])
    if op.name == "ptx.shl":
        return ds[0] if ds[1] == 0 else None
    # mul / mad: a thread-dependent factor times a constant of known sign
    if ds[0] == 0 and ds[1] == 0:
        prod = 0
    else:
        k = next((_signed_const(o) for o, d in zip(op.operands[:2], ds) if d == 0), None)
        var = ds[0] if ds[1] == 0 else ds[1] if ds[0] == 0 else None
        if k is None or var is None:
            return None
        prod = 0 if k == 0 else var if k > 0 else -var
    return prod if op.name == "ptx.mul" else combine(prod, ds[2])


def _signed_const(v: Value) -> int | None:
    """An integer constant read as a signed number of its type's width."""
    k = _const_int(v)
    if k is None or v.type not in ("i8", "i16", "i32", "i64"):
        return k
    bits = int(v.type[1:])
    k &= (1 << bits) - 1
    return k - (1 << bits) if k >> (bits - 1) else k


def _const_int(v: Value) -> int | None:
    """The value of an integer constant (through moves), else None."""
    while isinstance(v, OpResult) and v.op.name == "ptx.mov" and len(v.op.operands) == 1:
        v = v.op.operands[0]
    if isinstance(v, OpResult) and v.op.name == "upir.const" and isinstance(v.op.attributes["value"], int):
        return int(v.op.attributes["value"])
    return None


def _forwards_to(block: Block, join: Block) -> bool:
    """Whether `block` is `join`, or leads to it through blocks that only jump there (an
    argument-less cf.br and nothing else)."""
    for _ in range(8):
        if block is join:
            return True
        if len(block.ops) != 1 or block.ops[0].name != "cf.br" or block.ops[0].successor_args[0]:
            return False
        block = block.ops[0].successors[0]
    return False


def _is_thread_x(v: Value) -> bool:
    """Whether v is threadIdx.x (through moves and same-width conversions)."""
    while isinstance(v, OpResult) and v.op.name in ("ptx.mov", "ptx.cvt") and len(v.op.operands) == 1:
        v = v.op.operands[0]
    return isinstance(v, OpResult) and v.op.name == "upir.special" and \
        v.op.attributes.get("reg") == "%tid.x"


def _float_from_bits(bits: int, t: str) -> float:
    if t == "f32":
        return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
    if t == "f64":
        return struct.unpack("<d", struct.pack("<Q", bits & (2**64 - 1)))[0]
    return float(bits)




# ---------------------------------------------------------------------------------------------
# upir / cf ops
# ---------------------------------------------------------------------------------------------

@handles("upir.const")
def _const(e: SegmentEmitter, op: Operation) -> None:
    e.vals[op.results[0]] = e.constant(op.results[0])


@handles("upir.param")
def _param(e: SegmentEmitter, op: Operation) -> None:
    # parameters never change during a launch: load once, before the thread loops, so
    # that stores through other pointers cannot force a reload per thread
    t = op.attributes["type"]
    is_ptr = op.results[0] in e.kc.pointers
    key = (op.attributes["offset"], t, is_ptr)
    v = e.param_cache.get(key)
    if v is None:
        b = e.entry_builder
        p = b.gep(e.params, [I64(op.attributes["offset"])])
        lt = PTR if is_ptr else ptx_llvm_type(t)
        v = b.load(b.bitcast(p, lt.as_pointer()))
        v.align = 1 if type_size(t) == 1 else min(type_size(t), 4)
        e.param_cache[key] = v
    if is_ptr:
        e.define(op.results[0], v)
    else:
        e.result(op, v, t)


@handles("upir.launch_store")
def _launch_store(e: SegmentEmitter, op: Operation) -> None:
    # a value the launch prologue hands to the grid, read there as a parameter
    v = op.operands[0]
    lv = e.get(v)
    p = e.b.gep(e.params, [I64(op.attributes["offset"])])
    e.b.store(lv, e.b.bitcast(p, lv.type.as_pointer()))


@handles("upir.special")
def _special(e: SegmentEmitter, op: Operation) -> None:
    reg: str = op.attributes["reg"]
    base, _, comp = reg.partition(".")
    k = "xyz".index(comp) if comp in ("x", "y", "z") else 0
    b = e.b
    if base == "%tid":
        v = e.tid[k]
    elif base == "%ntid":
        v = e.ntid[k]
    elif base == "%ctaid":
        v = e.ctaid[k]
    elif base == "%nctaid":
        v = e.nctaid[k]
    elif base == "%laneid":
        v = b.and_(e.linear_tid, I32(31))
    elif base == "%warpid":
        v = b.lshr(e.linear_tid, I32(5))
    elif base == "%nwarpid":
        v = b.lshr(b.add(e.nthreads, I32(31)), I32(5))
    elif base == "%warpsize":
        v = I32(32)
    elif base.startswith("%lanemask"):
        lane = b.and_(e.linear_tid, I32(31))
        one = b.shl(I32(1), lane)
        kind = base[len("%lanemask_"):]
        if kind == "eq":
            v = one
        elif kind == "lt":
            v = b.sub(one, I32(1))
        elif kind == "le":
            v = b.or_(one, b.sub(one, I32(1)))
        elif kind == "gt":
            v = b.not_(b.or_(one, b.sub(one, I32(1))))
        else:  # ge
            v = b.not_(b.sub(one, I32(1)))
    elif base in ("%smid", "%gridid"):
        v = I32(0)
    elif base == "%nsmid":
        v = I32(1)
    elif base == "%dynamic_smem_size":
        v = e.dyn_shared
    elif base in ("%total_smem_size", "%aggr_smem_size"):
        v = b.add(e.dyn_shared, I32(e.kc.shared.dynamic_offset))
    else:
        e.kc.error(f"special register '{reg}' is not supported", op)
        return
    e.result(op, v, "u32")


@handles("upir.clock")
def _clock(e: SegmentEmitter, op: Operation) -> None:
    fn = e.mod.intrinsic("llvm.readcyclecounter", I64, [])
    v = e.b.call(fn, [])
    e.result(op, v if op.results[0].type == "i64" else e.b.trunc(v, I32), "u64")


@handles("upir.addressof")
def _addressof(e: SegmentEmitter, op: Operation) -> None:
    sym = op.attributes["symbol"]
    space = op.attributes["space"]
    b = e.b
    if space == "shared":
        off = e.kc.shared.offsets.get(sym)
        if off is None:
            e.kc.error(f"unknown shared variable '{sym}'", op)
        e.result(op, I64(off), "u64")
    elif space == "local":
        off = e.kc.local_offsets.get(sym)
        if off is None:
            e.kc.error(f"local variable '{sym}' is not declared in this kernel", op)
        e.result(op, I64(off), "u64")
    elif space == "param":
        p = next((p for p in e.kc.kernel.params if p.name == sym), None)
        if p is None:
            e.kc.error(f"unknown parameter '{sym}'", op)
        assert p is not None
        e.define(op.results[0], b.gep(e.params, [I64(p.offset)]))
    else:
        g = e.mod.globals.get(sym)
        if g is None:
            e.kc.error(f"unknown global variable '{sym}'", op)
        e.define(op.results[0], b.bitcast(g, PTR))


@handles("cf.br")
def _br(e: SegmentEmitter, op: Operation) -> None:
    target = e.jump(op.successors[0], op.successor_args[0])
    e.b.branch(target)


@handles("cf.cond_br")
def _cond_br(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    join = e.skip_regions.get(op)
    if join is not None:        # a deferred `if`: runs after the thread loop
        b.branch(e.jump(join, []))
        return
    cond = e.get(op.operands[0])
    # evaluate both edges' arguments before storing any (parallel copy)
    t_bb = e.fn.append_basic_block("edge.t")
    f_bb = e.fn.append_basic_block("edge.f")
    b.cbranch(cond, t_bb, f_bb)
    saved = dict(e.vals)
    for bb, succ, args in ((t_bb, op.successors[0], op.successor_args[0]),
                           (f_bb, op.successors[1], op.successor_args[1])):
        b.position_at_end(bb)
        e.vals = dict(saved)
        target = e.jump(succ, args)
        b.branch(target)


@handles("upir.exit")
def _exit(e: SegmentEmitter, op: Operation) -> None:
    if e.last_state is not None:
        e.b.store(I32(STATE_EXITED), e.last_state)
    elif e.kc.syncs and (e.masked_loop or not e.all_exit):
        e.b.store(I32(STATE_EXITED), e.state_ptr())
    e.b.branch(e.latch)


@handles("upir.trap")
def _trap(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    code = ERR_ASSERT if op.attributes.get("assert") else ERR_TRAP
    b.store(I32(code), b.gep(e.ctx, [I32(0), I32(ctx_index("error"))]))
    b.ret(I32(STATE_UNKNOWN))


@handles("upir.fence", "upir.nanosleep")
def _fence(e: SegmentEmitter, op: Operation) -> None:
    if op.name == "upir.fence":
        e.b.fence("seq_cst")


@handles("upir.printf")
def _printf(e: SegmentEmitter, op: Operation) -> None:
    b = e.b
    fmt = e.get(op.operands[0])
    args = e.get(op.operands[1]) if len(op.operands) > 1 else I64(0)
    fmt_p = fmt if isinstance(fmt.type, ir.PointerType) else b.inttoptr(fmt, PTR)
    args_p = args if isinstance(args.type, ir.PointerType) else b.inttoptr(args, PTR)
    if op.attributes.get("assert"):
        fn = e.mod.intrinsic("cpuify_assert_message", VOID, [PTR])
        b.call(fn, [fmt_p])
        return
    fn = e.mod.intrinsic("cpuify_vprintf", I32, [PTR, PTR])
    r = b.call(fn, [fmt_p, args_p])
    if op.results:
        e.result(op, r, "s32")


@handles("upir.malloc")
def _malloc(e: SegmentEmitter, op: Operation) -> None:
    fn = e.mod.intrinsic("malloc", PTR, [I64])
    r = e.b.call(fn, [e.operand(op.operands[0], "u64")])
    e.define(op.results[0], r)


@handles("upir.free")
def _free(e: SegmentEmitter, op: Operation) -> None:
    fn = e.mod.intrinsic("free", VOID, [PTR])
    p = e.get(op.operands[0])
    e.b.call(fn, [p if isinstance(p.type, ir.PointerType) else e.b.inttoptr(p, PTR)])



del ptx_ops, math, PTXError
