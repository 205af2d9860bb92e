"""The code generator's lowering of the memory functions of the PTX instruction table's
expression language (ir/ptx_table.py: `at`, `element`, `load`, `store`, `atomic`), a part of
ptx_spec._SpecLowering: ld, ldu, st, atom and red are table forms made of them.

An address of the shared or local space becomes a GEP on the block's shared memory or the
thread's local memory (SegmentEmitter.address), any other one a `ptr`; elements of a
vector are GEPs on the first.  Loads and stores in shared and global memory carry the
alias scopes of the variable or parameter they access, local ones are noted as the thread's
private accesses (SegmentEmitter.tag_parallel_accesses).  Ordering (ptx_table.memory_order):
.acquire/.release as named, .relaxed monotonic, .volatile a volatile access, others plain.
Atomics are read-modify-writes with the ordering they name (.acquire, .release, .acq_rel;
monotonic when .relaxed or unqualified, as PTX's default is relaxed), in shared memory plain
updates (one worker runs a whole block, one CUDA thread at a time), on halves a
compare-and-swap loop."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.codegen.lowering import (
    I64, is_float, is_signed, ordered_load, ordered_store, ptx_llvm_type,
)
from cpuify.codegen.ptx_ops import half_atomic_add, rmw_value
from cpuify.ir.modifiers import mods, type_size
from cpuify.ir.ptx_table import Fn, memory_order, space_of

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter
    from cpuify.ir.core import Operation

Typed = tuple[ir.Value, str]          # an LLVM value and its PTX type

#: memory_order -> the LLVM atomic ordering (None: not atomic)
_LLVM_ORDER = {"acquire": "acquire", "release": "release", "relaxed": "monotonic"}
#: an atom/red's ordering qualifier -> the LLVM ordering of its read-modify-write, and of a
#: compare-and-swap that fails (no release part: nothing is written)
_RMW_ORDER = {"acq_rel": ("acq_rel", "acquire"), "acquire": ("acquire", "acquire"),
              "release": ("release", "monotonic")}
_RMW = {"add": "add", "and": "and", "or": "or", "xor": "xor", "exch": "xchg",
        "inc": "uinc_wrap", "dec": "udec_wrap"}


class MemoryLowering:
    """The memory functions (a mixin of ptx_spec._SpecLowering)."""
    e: SegmentEmitter
    b: ir.IRBuilder
    op: Operation

    def type_of(self, symbol: str) -> str:
        raise NotImplementedError

    def fn_at(self, x: Fn, args: list[Typed]) -> Typed:
        """The op's address operand (args[0]) plus its offset."""
        (_, t), = args
        return self.e.address(self.op, space_of(t)), t

    def fn_element(self, x: Fn, args: list[Typed]) -> Typed:
        (p, t), = args
        k = int(x.param or 0)
        if not k:
            return p, t
        return self.b.gep(p, [I64(k * type_size(self.type_of("T")))]), t

    def _alignment(self, space: str, size: int) -> int:
        return size if space in ("shared", "local") else min(size, 4) if size > 1 else 1

    def _note_access(self, space: str, instr: ir.Instruction) -> None:
        e = self.e
        if space in ("shared", "global", "generic"):
            e.tag_shared_access(self.op, instr)
        if space == "local" or space == "generic" and e.kc.local_escapes:
            e.private_accesses.append(instr)

    def _access(self, p: ir.Value, at: str, t: str, kind: str
                ) -> tuple[str, ir.Value, bool, str | None, int]:
        """What a load or store (`kind`) of type `t` at address `p` (of address type `at`)
        needs: its state space, `p` as a pointer to `t`, whether it is a weak access, the
        LLVM atomic ordering of an acquire/release/relaxed one (None otherwise) and its
        alignment (an atomic's is its size)."""
        space = space_of(at)
        lt = ptx_llvm_type(t)
        size = type_size(t)
        order = memory_order(mods(self.op), kind)
        ordering = _LLVM_ORDER.get(order)
        align = size if ordering else self._alignment(space, size)
        return space, self.b.bitcast(p, lt.as_pointer()), order == "weak", ordering, align

    def fn_load(self, x: Fn, args: list[Typed]) -> Typed:
        (p, at), = args
        b = self.b
        t = self.type_of(x.type or "T")
        space, ptr, weak, ordering, align = self._access(p, at, t, "load")
        if not weak:
            # a real read in program order: a spin on a flag another block, the host or an
            # earlier kernel writes must see the write
            v = ordered_load(b, ptr, ptx_llvm_type(t), ordering, align)
        else:
            v = b.load(ptr)
            v.align = align
        self._note_access(space, v)
        return v, t

    def fn_store(self, x: Fn, args: list[Typed]) -> Typed:
        (p, at), (val, t) = args
        b = self.b
        space, ptr, weak, ordering, align = self._access(p, at, t, "store")
        if not weak:
            s = ordered_store(b, val, ptr, ordering, align)
        else:
            s = b.store(val, ptr)
            s.align = align
        self._note_access(space, s)
        return s, "none"

    def fn_atomic(self, x: Fn, args: list[Typed]) -> Typed:
        (p, at), (val, t), *rest = args
        e, b = self.e, self.b
        space = space_of(at)
        kind = str(x.param)
        ordering, failure = next((o for m, o in _RMW_ORDER.items() if m in mods(self.op)),
                                 ("monotonic", "monotonic"))
        ptr = b.bitcast(p, ptx_llvm_type(t).as_pointer())
        if t in ("f16", "bf16", "f16x2", "bf16x2"):
            return half_atomic_add(e, self.op, ptr, val, t, space), t
        if kind == "cas":
            if is_float(t):
                e.kc.error("atom.cas on floating-point types is not supported", self.op)
            res = b.cmpxchg(ptr, val, rest[0][0], ordering, failure)
            return b.extract_value(res, 0), t
        if kind in ("min", "max"):
            op = ("f" + kind) if is_float(t) else ("" if is_signed(t) else "u") + kind
        elif kind == "add" and is_float(t):
            op = "fadd"
        else:
            op = _RMW[kind]
        if space == "shared":
            # a block runs on one worker, one CUDA thread at a time: no CPU atomic needed
            old = b.load(ptr)
            old.align = type_size(t)
            st = b.store(rmw_value(e, op, old, val), ptr)
            st.align = type_size(t)
            e.serial_accesses.update((old, st))
            return old, t
        return b.atomic_rmw(op, ptr, val, ordering), t
