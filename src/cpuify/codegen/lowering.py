"""The lowering table: LLVM types of IR types, and which function lowers each op.

Each op's lowering is a function `(emitter, op) -> None` registered with `@handles(name)`:
`upir.*`/`cf.*` ops in upir_ops.py; the PTX instructions whose semantics the instruction
table spells out (ir/ptx_table.py) in ptx_spec.py, which falls back to the `@hand_written`
code of their other forms; the rest in ptx_ops.py, ptx_tensor.py and ptx_texture.py.  The table sits below them, so
that none imports another to fill it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from llvmlite import ir

from cpuify.ir.core import Operation
from cpuify.ir.modifiers import type_size

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType(I8)     # llvmlite prints i8*; LLVM 15+ reads it as opaque ptr
VOID = ir.VoidType()

IR_LLVM = {"i1": I1, "i8": I8, "i16": I16, "i32": I32, "i64": I64, "f16": F16, "f32": F32, "f64": F64}


def ptx_llvm_type(t: str) -> ir.Type:
    if t == "pred":
        return I1
    if t in ("f32",):
        return F32
    if t == "f64":
        return F64
    if t in ("f16", "bf16"):
        return I16
    return ir.IntType(8 * type_size(t))


def is_signed(t: str) -> bool:
    return t.startswith("s")


def is_float(t: str) -> bool:
    return t in ("f32", "f64", "f16")


def _width(t: ir.Type) -> int:
    if isinstance(t, ir.IntType):
        return t.width
    if isinstance(t, ir.HalfType):
        return 16
    if isinstance(t, ir.FloatType):
        return 32
    if isinstance(t, ir.DoubleType):
        return 64
    if isinstance(t, ir.PointerType):
        return 64
    raise TypeError(t)


Handler = Callable[[Any, Operation], None]     # (SegmentEmitter, op)
HANDLERS: dict[str, Handler] = {}
PTX_HANDLERS: dict[str, Handler] = {}


def handles(*names: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        for n in names:
            (PTX_HANDLERS if n.startswith("ptx.") else HANDLERS)[n] = fn
        return fn
    return deco


#: the hand-written code of the `hand=True` forms of a table entry whose other forms are
#: spec-driven (ir/ptx_table.py): ptx_spec.py registers the entry's dispatcher in
#: PTX_HANDLERS, which calls this for the hand-written forms
HAND_LOWERINGS: dict[str, Handler] = {}


def hand_written(*names: str) -> Callable[[Handler], Handler]:
    """Register the hand-written forms of the `ptx.*` ops `names` (see HAND_LOWERINGS)."""
    def deco(fn: Handler) -> Handler:
        for n in names:
            HAND_LOWERINGS[n] = fn
        return fn
    return deco


def lowering_of(name: str) -> "Callable[[SegmentEmitter, Operation], None] | None":
    return HANDLERS.get(name) or PTX_HANDLERS.get(name)


def freeze(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """LLVM's `freeze` (llvmlite's builder has none)."""
    ins = ir.instructions.Instruction(b.block, v.type, "freeze", [v])
    b._insert(ins)
    return ins


class _OrderedLoad(ir.LoadInstr):
    """`load volatile` and `load atomic volatile ... <ordering>` (llvmlite's load has neither
    flag): a real memory read at its place in program order, which LLVM neither merges with
    another read nor hoists out of a loop."""

    def __init__(self, parent: ir.Block, ptr: ir.Value, typ: ir.Type, ordering: str | None,
                 align: int) -> None:
        super().__init__(parent, ptr, typ=typ)
        self.ordering = ordering
        self.align = align
        self.volatile = True

    def descr(self, buf: list[str]) -> None:
        [ptr] = self.operands
        atomic = "atomic " if self.ordering else ""
        order = f" {self.ordering}" if self.ordering else ""
        buf.append(f"load {atomic}volatile {self.type}, {ptr.type} {ptr.get_reference()}"
                   f"{order}, align {self.align}{self._stringify_metadata(leading_comma=True)}\n")


class _OrderedStore(ir.StoreInstr):
    """`store volatile` and `store atomic volatile ... <ordering>` (see _OrderedLoad)."""

    def __init__(self, parent: ir.Block, val: ir.Value, ptr: ir.Value, ordering: str | None,
                 align: int) -> None:
        super().__init__(parent, val, ptr)
        self.ordering = ordering
        self.align = align
        self.volatile = True

    def descr(self, buf: list[str]) -> None:
        val, ptr = self.operands
        atomic = "atomic " if self.ordering else ""
        order = f" {self.ordering}" if self.ordering else ""
        buf.append(f"store {atomic}volatile {val.type} {val.get_reference()}, {ptr.type} "
                   f"{ptr.get_reference()}{order}, align {self.align}"
                   f"{self._stringify_metadata(leading_comma=True)}\n")


def ordered_load(b: ir.IRBuilder, ptr: ir.Value, typ: ir.Type, ordering: str | None,
                 align: int) -> ir.LoadInstr:
    """A volatile load of `typ` at `ptr`; atomic with LLVM `ordering` (`monotonic`,
    `acquire`) when given, which needs the natural alignment."""
    ins = _OrderedLoad(b.block, ptr, typ, ordering, align)
    b._insert(ins)
    return ins


def ordered_store(b: ir.IRBuilder, val: ir.Value, ptr: ir.Value, ordering: str | None,
                  align: int) -> ir.StoreInstr:
    """A volatile store of `val` at `ptr`; atomic with `ordering` (`monotonic`, `release`)."""
    ins = _OrderedStore(b.block, val, ptr, ordering, align)
    b._insert(ins)
    return ins
