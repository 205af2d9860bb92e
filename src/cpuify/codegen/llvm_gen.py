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
original CFG, so the segment's CFG is not the kernel's).

This module emits a PTX module's globals and kernels (ModuleCodegen); the rest of the
compiler, the API and the CLI import code generation from here.  The parts, bottom up:

    kernel_abi        what generated code shares with the runtime and the API (KernelInfo)
    helpers           facts about IR values the planning and the emission share
    approx_math       inline IR for PTX's approximate f32 ex2/lg2/sin/cos (used by
                      ptx_spec_arith)
    ptx_ops           the helpers the PTX instructions' lowerings share, and the memory ones
    ptx_spec_arith, ptx_spec_convert, ptx_spec_address
                      parts of ptx_spec: the arithmetic and math functions, the conversions,
                      the addresses and moves
    upir_ops, ptx_spec
                      the lowerings of the ops (upir/cf; the PTX instructions the table
                      spells out: arithmetic with its roundings, bitwise, bit fields and
                      bytes, comparisons and selects, math functions, conversions, moves,
                      address conversions), registered in lowering's table
    segment_paths, thread_loop_plan, kernel_plan
                      a kernel's plan (KernelPlan): sync points, slots, thread-loop shapes
    segment_values, sync_crossing, speculation, segment_emitter
                      one segment's thread loops (SegmentEmitter)
    block_function    a kernel's segments and its block function (KernelCodegen)"""

from __future__ import annotations

import re
import struct
from dataclasses import replace

from llvmlite import ir

from cpuify.codegen.block_function import KernelCodegen
from cpuify.codegen.helpers import access_size
from cpuify.codegen.kernel_abi import (
    CTX_TYPE, DIMS_TYPE, SEGMENT_AREAS, XVAL_GUARD, KernelInfo, ctx_index, dynamic_smem_offset,
    specialized_symbol,
)
from cpuify.codegen.layout import SharedLayout, align_up
from cpuify.codegen.lowering import HANDLERS, I8, I32, I64, PTR, PTX_HANDLERS
from cpuify.codegen.segment_emitter import SegmentEmitter
from cpuify.codegen.thread_loop_plan import DeferredRegion, RangeBranch
from cpuify.errors import UnsupportedError
from cpuify.frontend.ptx_ast import Module as PTXModule, VarDecl, type_size
from cpuify.ir.structure import launch_prologue
from cpuify.lifting.lift import LiftedKernel

# what other packages (the compiler, the API, the CLI, the tests) import from here
__all__ = [
    "CTX_TYPE", "DIMS_TYPE", "HANDLERS", "PTX_HANDLERS", "SEGMENT_AREAS", "XVAL_GUARD",
    "DeferredRegion", "KernelCodegen", "KernelInfo", "ModuleCodegen", "RangeBranch",
    "SegmentEmitter", "access_size", "ctx_index", "dynamic_smem_offset", "specialized_symbol",
]

# runtime/cpuify_rt.h: cpuify_child_kernel (block function, prologue, prologue scratch,
# parameter buffer bytes, dynamic shared size offset, static shared bytes, scratch bytes per
# thread and extra, most threads per block, name)
CHILD_KERNEL_TYPE = ir.LiteralStructType([PTR, PTR, I64, I32, I32, I32, I32, I32, I32, PTR])


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
        # kernels launched from device code -> their descriptor (cpuify_child_kernel)
        self._children: dict[str, ir.GlobalVariable] = {}
        self._access_group: ir.Value | None = None
        self._loop_ids = 0
        # set by code that wants LLVM's reciprocal square root estimate unrefined (it
        # refines it itself: approx_math.rsqrt_f32)
        self.rsqrt_estimates = False
        # functions printed and emptied by release_bodies(): name -> their definition's text
        self._printed: dict[str, str] = {}
        self.emit_globals()

    # --- thread loops are parallel loops ---
    # Between two sync points the threads of a block do not communicate through memory in
    # a race-free CUDA program (that needs a barrier, a warp collective or an atomic), so
    # no memory access of one iteration of a thread loop depends on another iteration: what
    # `#pragma omp simd` asserts.  Thread loops carry `llvm.loop.parallel_accesses` and
    # their loads and stores an access group; LLVM then vectorizes them without dependence
    # analysis or runtime alias checks.  Volatile accesses and the load/store pairs of
    # shared-memory atomics stay out of the group (LLVM then analyses that loop as usual),
    # and so do accesses of one thread that depend on each other where LLVM could reorder
    # them (local memory; strided shared/global words written and accessed again:
    # codegen.thread_order).
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

    def child_descriptor(self, name: str) -> ir.GlobalVariable:
        """The descriptor of kernel `name` for launches from device code (runtime/cpuify_rt.h:
        cpuify_child_kernel), filled in once every kernel is compiled (llvm_text)."""
        g = self._children.get(name)
        if g is None:
            g = ir.GlobalVariable(self.module, CHILD_KERNEL_TYPE, name=f"cpuify_child_{name}")
            g.align = 8
            self._children[name] = g
        return g

    def _define_child_descriptors(self) -> None:
        for name, g in self._children.items():
            if not self.define_globals or g.initializer is not None:
                continue
            info = next((k for k in self.kernels if k.name == name), None)
            label = bytearray(name.encode() + b"\0")
            text = ir.GlobalVariable(self.module, ir.ArrayType(I8, len(label)), name=f"cpuify_child_name_{name}")
            text.initializer = ir.Constant(text.type.pointee, label)
            text.global_constant = True
            text.linkage = "internal"
            null = ir.Constant(PTR, None)
            if info is None:        # refused (or not a kernel of this module)
                fields = [null, null, I64(0)] + [I32(0)] * 5 + [I32(1024), text.bitcast(PTR)]
            else:
                limit = 1024
                maxntid = info.directives.get("maxntid")
                if maxntid:
                    limit = 1
                    for d in maxntid:
                        limit *= max(int(d), 1)
                prologue = self.module.globals.get(info.prologue_symbol) if info.prologue_symbol else None
                fields = [self.module.globals[info.symbol].bitcast(PTR),
                          prologue.bitcast(PTR) if prologue is not None else null,
                          I64(info.prologue_scratch),
                          I32(info.buffer_size()), I32(dynamic_smem_offset(info.param_size)),
                          I32(info.shared_static), I32(info.scratch.per_thread()),
                          I32(info.scratch.scratch_bytes(0)), I32(limit), text.bitcast(PTR)]
            g.initializer = ir.Constant(CHILD_KERNEL_TYPE, fields)

    def release_bodies(self) -> None:
        """Prints the functions defined so far and drops their bodies (llvmlite objects,
        about 1 KB per instruction), keeping their prototypes for later calls: a module of
        many large kernels then holds one kernel's instructions at a time instead of all
        (mixbench's 141 kernels, 51 MB of LLVM assembly: 1.7 GB).  llvm_text() is the
        same text, byte for byte, as without it."""
        for value in self.module.globals.values():
            if isinstance(value, ir.Function) and value.blocks:
                self._printed[value.name] = str(value)
                value.blocks = []

    def _module_text(self) -> str:
        """str(self.module), with the definitions release_bodies() kept in their places."""
        if not self._printed:
            return str(self.module)
        m = self.module
        lines = [f'; ModuleID = "{m.name}"', f'target triple = "{m.triple}"',
                 f'target datalayout = "{m.data_layout}"', ""]
        lines += [t.get_declaration() for t in m.get_identified_types().values()]
        lines += [self._printed[v.name] if isinstance(v, ir.Function) and not v.blocks
                  and v.name in self._printed else str(v) for v in m.globals.values()]
        lines += m._get_metadata_lines()
        return "\n".join(lines)

    def llvm_text(self) -> str:
        """The module as LLVM assembly, with the access group and the thread-loop ids made
        `distinct` (a loop id's first operand is itself)."""
        self._define_child_descriptors()
        text = self._module_text()
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
        # (a module read back from MLIR has the numbers in its initializers already)
        functions = self.ptx.function_addresses() if isinstance(self.ptx, PTXModule) else {}
        for v in var.init:
            if isinstance(v, str) and v in functions:
                v = functions[v]            # a vtable or a table of function pointers
            if isinstance(v, str):
                raise UnsupportedError(f"initializer of '{var.name}' takes the address of '{v}'; "
                                       "initializers with addresses of variables are not "
                                       "supported", line=var.line)
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
            self._printed.pop(name, None)

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
