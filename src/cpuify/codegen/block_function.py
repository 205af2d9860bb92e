"""Emission of a kernel: its segment functions (SegmentEmitter), and the block function
the runtime calls for each thread block, which runs the segments one after another while
every thread stops at the same plain barrier and hands the rest to the C scheduler, with
the exchange of a warp shuffle done in place when it can."""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from cpuify.codegen.helpers import const_int, shuffle_source
from cpuify.codegen.kernel_abi import (
    CTX_TYPE, DIMS_TYPE, SEGMENT_AREAS, XVAL_GUARD, KernelInfo, ctx_index, dynamic_smem_offset,
    specialized_symbol,
)
from cpuify.codegen.kernel_plan import KernelPlan
from cpuify.codegen.layout import (
    STATE_EXITED, STATE_UNKNOWN, STATE_WAIT, SYNC_KINDS, SYNC_STATIC, ScratchLayout,
)
from cpuify.codegen.lowering import I1, I32, I64, PTR
from cpuify.codegen.segment_emitter import SegmentEmitter
from cpuify.codegen.simd_collectives import simd_supported, vector_exchange


def wait_place(kernel: str, ptx: object, line: int) -> str:
    """`the loop at PTX line 681 (ld.acquire.gpu.u32 ...), gs.cu:12`: where a spin-wait loop
    of `kernel` is, with the CUDA source line when the PTX has `.loc` lines (-lineinfo).  (The
    messages that use it name the kernel, demangled in whole programs.)"""
    lines: list[str] = list(getattr(ptx, "lines", None) or [])
    text = lines[line - 1].strip() if 1 <= line <= len(lines) else ""
    out = f"the loop at PTX line {line}"
    if text:
        out += f" ({' '.join(text.split())[:80]})"
    files: dict[str, str] = {}
    for t in lines:
        parts = t.split()
        if len(parts) >= 3 and parts[0] == ".file":
            files[parts[1]] = parts[2].strip('",')
    for k in range(min(line, len(lines)) - 1, -1, -1):
        parts = lines[k].split()
        if len(parts) >= 3 and parts[0] == ".loc":
            name = files.get(parts[1], f"file {parts[1]}")
            out += f", {name}:{parts[2]}"
            break
        if parts and (parts[0].startswith(".entry") or parts[0].startswith(".func") or
                      (len(parts) > 1 and parts[1] in (".entry", ".func"))):
            break
    return out


class KernelCodegen(KernelPlan):
    """Emits one kernel (its plan: KernelPlan) into the module's LLVM IR."""

    # --- top level ---
    def emit(self) -> KernelInfo:
        m = self.mod.module
        # the parameter buffer, shared memory and the scratch arrays are distinct memory
        # that kernel pointers never reach: passing them as noalias arguments spares the
        # vectorizer its runtime alias checks.  Not shared or local memory whose addresses
        # the kernel makes generic: such a pointer kept across a sync point (or stored and
        # loaded again) comes back from memory, not based on the argument, and LLVM would
        # take its accesses as independent of the area's (the fuzzer's fz_2805_92: a thread's
        # store through a generic pointer into shared memory not seen by its next load).
        reachable = self.generic_areas()
        # a segment returns where all threads stopped when that is known without looking
        # (STATE_UNKNOWN otherwise): see convergent_segments()
        seg_ty = ir.FunctionType(I32, [PTR, I32] + [PTR] * len(SEGMENT_AREAS))
        segments = []
        for r in range(len(self.syncs) + 1):
            fn = ir.Function(m, seg_ty, name=f"cpuify_seg_{self.name}_{r}")
            fn.linkage = "internal"
            fn.attributes.add("nounwind")
            for area, a in zip(SEGMENT_AREAS, fn.args[2:]):
                if area not in reachable:
                    a.add_attribute("noalias")
            segments.append(fn)
        for r, fn in enumerate(segments):
            emitter = SegmentEmitter(self, fn, r)
            emitter.emit()
            emitter.tag_parallel_accesses()
        block_fn = self.emit_block_function(segments)
        if self.hardware_flush:
            block_fn = self.wrap_flush_to_zero(block_fn)
        info = KernelInfo(
            name=self.name, symbol=block_fn.name, param_size=self.kernel.param_size,
            params=[(p.name, p.ptx_type, p.offset, p.size) for p in self.kernel.params],
            aggregate_params=[bool(p.dims) for p in self.kernel.params],
            scratch=ScratchLayout(bool(self.syncs), self.slot_bytes, self.local_size),
            shared_static=self.shared.dynamic_offset if self.shared.static_size else 0,
            has_sync=bool(self.syncs), num_sync=len(self.syncs),
            directives=self.kernel.directives,
            spin_waits=sum(1 for sp in self.syncs if sp.op.name == "upir.spin_wait"),
            reads_envreg=any(op.name == "upir.envreg" for blk in self.region.blocks
                             for op in blk.ops))
        self.mod.kernels.append(info)
        return info

    def generic_areas(self) -> set[str]:
        """The segment areas (SEGMENT_AREAS) that generic pointers of the kernel may reach."""
        return ({"shared"} if self.shared_escapes else set()) | ({"local"} if self.local_escapes else set())

    def emit_block_function(self, segments: list[ir.Function]) -> ir.Function:
        m = self.mod.module
        fty = ir.FunctionType(I32, [PTR, PTR, I32, I32, I32, PTR, PTR])
        name = (f"cpuify_block_{self.name}" if self.launch_dims is None
                else specialized_symbol(self.name, self.launch_dims, self.noalias,
                                      self.block_run))
        if self.hardware_flush:     # the public name is wrap_flush_to_zero's
            name += "__flushing"
        fn = ir.Function(m, fty, name=name)
        params, dims, bx, by, bz, shared, scratch = fn.args
        reachable = self.generic_areas()
        for a, areas in ((dims, ()), (shared, ("shared",)), (scratch, ("local",))):
            if not reachable.intersection(areas):
                a.add_attribute("noalias")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        ctx = b.alloca(CTX_TYPE, name="ctx")
        stored: list[tuple[str, ir.Value]] = []

        def setf(name: str, value: ir.Value) -> None:
            idx = ctx_index(name)
            p = b.gep(ctx, [I32(0), I32(idx)])
            b.store(value, p)
            stored.append((name, value))

        dims_p = b.bitcast(dims, DIMS_TYPE.as_pointer())
        if self.block_dims is not None:
            blk = [I32(d) for d in self.block_dims]
        else:       # the thread loops' extents: duplicate dimensions run once
            blk = [I32(1) if k in self.duplicate_dims else
                   b.load(b.gep(dims_p, [I32(0), I32(1), I32(k)])) for k in range(3)]
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
            # not inlined here: the block function's direct chain calls the same segments,
            # and LLVM inlined every segment into the dispatcher too (the path after the
            # scheduler and after a sync point the direct chain does not follow),
            # optimizing and emitting each a second time (Parboil stencil: the dispatcher
            # grew from 87 to 9,248 instructions; its generic and specialized modules' LLVM
            # time 6.1 -> 4.7 s of CPU without it).  One call per segment run costs nothing
            # beside the segment's thread loop (block reductions timed the same).
            db.ret(db.call(seg, [dctx, dmasked] + self.area_args(db, dctx_t), attrs=("noinline",)))
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
            if r == 0:
                self.unless_first_segment_ends_block(b, got, err_p, stored[:], setf)
            target = self.only_next.get(r)
            if target is not None and (self.sync_kind(target) in (SYNC_KINDS["barrier"],
                                                                  SYNC_KINDS["soft"],
                                                                  SYNC_KINDS["lockstep"])
                                       or target.index in self.static_shuffles):
                expected = I32(STATE_WAIT | target.index)
                b.cbranch(b.icmp_signed("==", got, expected), direct[target.index], returned)
            else:
                b.branch(returned)
            known.add_incoming(got, b.block)
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
        # (every live thread at one lockstep step: they all run it, as after a barrier)
        plain = b.or_(b.or_(b.icmp_signed("==", kind, I32(SYNC_KINDS["barrier"])),
                            b.icmp_signed("==", kind, I32(SYNC_KINDS["soft"]))),
                      b.icmp_signed("==", kind, I32(SYNC_KINDS["lockstep"])))
        # every live thread waits at one __syncwarp (the lowered tensor-core instructions
        # have two): nothing to exchange, so it is passed as a barrier is, unless threads
        # exited in the middle of a warp (the scheduler then checks the member masks)
        warp_only = b.icmp_signed("==", kind, I32(SYNC_KINDS["syncwarp"]))
        plain = b.or_(plain, b.and_(warp_only, b.or_(b.not_(some_exited), prefix)))
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
        run_from = self.mod.intrinsic("cpuify_run_block_from", I32, [PTR, PTR, PTR, I32, I32, PTR])
        b.ret(b.call(run_from, [ctx_i8, b.bitcast(disp, PTR), b.bitcast(kg, PTR),
                                I32(len(kinds)), handed, self.emit_wait_places(kinds)]))
        return fn

    @staticmethod
    def unless_first_segment_ends_block(b: ir.IRBuilder, got: ir.Value, err_p: ir.Value,
                                        stored: list[tuple[str, ir.Value]],
                                        setf: Callable[[str, ir.Value], None]) -> None:
        """After the entry segment's call (`got`, what it returned): where every thread
        exited, return (the error, if any); else (`b` there) store the block's context
        fields again before anything else reads them.  The context is built before the
        entry segment for the segment's own reads, which LLVM turns into arguments once it
        sees what the segment reads; the stores again on the way on leave the first ones
        read by nothing, and LLVM drops them: a block that ends in its entry segment (the
        in-place tile update, kernels whose barriers only a few blocks reach) does not
        build the context the scheduler and later segments need (lu_tile: 20 stores and
        a memset per block).  Segments write only the error field, never stored again."""
        fn = b.function
        exited = fn.append_basic_block("entry_segment_exited")
        on = fn.append_basic_block("entry_segment_stopped")
        b.cbranch(b.icmp_signed("==", got, I32(STATE_EXITED)), exited, on)
        b.position_at_end(exited)
        b.ret(b.load(err_p))
        b.position_at_end(on)
        for name, value in stored:
            if name != "error":
                setf(name, value)

    def wrap_flush_to_zero(self, inner: ir.Function) -> ir.Function:
        """The block function under its public name, running `inner` (internal)
        with MXCSR's DAZ and FTZ set and the caller's MXCSR restored after
        (codegen/denormals.py).  A fault that leaves the block midway is restored by the
        runtime (it puts MXCSR back when it takes the jump)."""
        m = self.mod.module
        name = inner.name.removesuffix("__flushing")
        inner.linkage = "internal"
        fn = ir.Function(m, inner.function_type, name=name)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        slot = b.alloca(I32, name="mxcsr")
        st = self.mod.intrinsic("llvm.x86.sse.stmxcsr", ir.VoidType(), [PTR])
        ld = self.mod.intrinsic("llvm.x86.sse.ldmxcsr", ir.VoidType(), [PTR])
        raw = b.bitcast(slot, PTR)
        b.call(st, [raw])
        saved = b.load(slot)
        b.store(b.or_(saved, I32(0x8040)), slot)      # FTZ (bit 15) | DAZ (bit 6)
        b.call(ld, [raw])
        r = b.call(inner, list(fn.args))
        b.store(saved, slot)
        b.call(ld, [raw])
        b.ret(r)
        return fn

    def emit_wait_places(self, kinds: list[int]) -> ir.Value:
        """For the runtime's message when a launch can make no progress: per sync point, a
        C string naming the kernel and the waiting loop of a yield point (NULL for the other
        sync points); a null pointer when the kernel has no yield points."""
        if SYNC_KINDS["yield"] not in kinds:
            return ir.Constant(PTR, None)
        m = self.mod.module
        entries = []
        for sp, k in zip(self.syncs, kinds):
            if k != SYNC_KINDS["yield"]:
                entries.append(ir.Constant(PTR, None))
                continue
            text = wait_place(self.name, self.mod.ptx, int(sp.op.attributes.get("line") or 0))
            data = bytearray(text.encode("utf-8", "replace")) + b"\0"
            st = ir.ArrayType(ir.IntType(8), len(data))
            g = ir.GlobalVariable(m, st, name=f"cpuify_wait_place_{self.name}_{sp.index}")
            g.initializer = ir.Constant(st, data)
            g.global_constant = True
            g.linkage = "internal"
            entries.append(g.bitcast(PTR))
        at = ir.ArrayType(PTR, len(entries))
        table = ir.GlobalVariable(m, at, name=f"cpuify_wait_places_{self.name}")
        table.initializer = ir.Constant(at, entries)
        table.global_constant = True
        table.linkage = "internal"
        return table.bitcast(PTR)

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
        # collectives the simd-collectives pass marked: vector code across each warp's lanes
        simd = {sp.index for sp in self.syncs if self.simd_collective(sp)}
        if not shuffles and not simd:
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
        scalar_of: dict[int, ir.Block] = {}      # simd shuffle -> its scalar fallback
        for index in sorted(simd):
            op = self.syncs[index - 1].op
            case = fn.append_basic_block(f"simd{index}")
            sw.add_case(I32(index), case)
            b.position_at_end(case)
            # whole warps, none exited (else: the scalar exchange below, or the scheduler)
            vector = fn.append_basic_block(f"simd{index}.warps")
            scalar = fn.append_basic_block(f"simd{index}.scalar")
            whole = b.and_(b.not_(some_exited),
                           b.icmp_unsigned("==", b.and_(n64, I64(31)), I64(0)))
            b.cbranch(whole, vector, scalar)
            b.position_at_end(vector)
            kind = op.attributes["kind"]
            mods = list(op.attributes.get("mods", []))
            consts = [const_int(o) for o in op.operands[1:3]] if kind == "shfl" else []
            if kind == "shfl":
                bval = I32(consts[0] & 31) if consts[0] is not None else b.load(xb)
                cword = I32(consts[1] & 0xFFFFFFFF) if consts[1] is not None else b.load(xc)
            else:
                bval = cword = None

            def warp_body(b: ir.IRBuilder, w: ir.Value, acc: list[ir.Value], kind: str = kind,
                          mods: list[str] = mods, bval: ir.Value | None = bval,
                          cword: ir.Value | None = cword) -> list[ir.Value]:
                vector_exchange(self.mod, b, kind, mods, xval, xout, xpred,
                                b.shl(w, I64(5)), bval, cword)
                return []
            self.counted_loop(b, b.lshr(n64, I64(5)), [], warp_body, f"simd{index}")
            b.ret(I32(1))
            b.position_at_end(scalar)
            scalar_of[index] = scalar
            if index not in dict(shuffles):
                b.ret(I32(0))       # a vote or redux: the scheduler
        for index, mode in shuffles:
            if index in scalar_of:
                case = scalar_of[index]
            else:
                case = fn.append_basic_block(f"shfl{index}")
                sw.add_case(I32(index), case)
            b.position_at_end(case)
            # operands that are constants in the kernel (`__shfl_down_sync(0xffffffff, v, 16)`)
            # are used as such: the source lane is then the thread's own index plus a
            # constant, a contiguous load rather than a gather
            consts = [const_int(o) for o in self.syncs[index - 1].op.operands[1:4]]
            consts += [None] * (3 - len(consts))

            def lane_body(b: ir.IRBuilder, t: ir.Value, acc: list[ir.Value], mode: str = mode,
                          consts: list[int | None] = consts) -> list[ir.Value]:
                cb, cc, cm = consts
                bval = I32(cb & 31) if cb is not None else b.and_(b.load(b.gep(xb, [t])), I32(31))
                cword = I32(cc & 0xFFFFFFFF) if cc is not None else b.load(b.gep(xc, [t]))
                base, j, pred = shuffle_source(b, t, mode, bval, cword)
                # outside the segment: the lane's own value; a source lane that does not
                # exist (a partial last warp) or has exited: 0 (what an H100 returns).  The
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
                other = b.select(live_src, b.load(b.gep(xval, [src])), I64(0))
                read_end = b.block
                b.branch(done)
                b.position_at_end(own)
                mine = b.select(pred, I64(0), b.load(b.gep(xval, [t])))
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

    def simd_collective(self, sp) -> bool:  # type: ignore[no-untyped-def]
        """Whether the exchange runs the collective at `sp` as vector code across lanes
        (marked by the simd-collectives pass, and of a form simd_supported handles)."""
        op = sp.op
        if op.name != "upir.warp_collective" or not op.attributes.get("simd"):
            return False
        kind = op.attributes.get("kind", "")
        consts = [const_int(o) for o in op.operands[1:3]] if kind == "shfl" else []
        return simd_supported(kind, list(op.attributes.get("mods", [])), consts)

    @staticmethod
    def area_args(b: ir.IRBuilder, ctx: ir.Value) -> list[ir.Value]:
        return [b.load(b.gep(ctx, [I32(0), I32(ctx_index(name))])) for name in SEGMENT_AREAS]
