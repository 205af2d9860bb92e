"""The code generator's lowering of the address and move functions of the PTX instruction
table's expression language (ir/ptx_table.py: `to_generic`, `to_space`, `in_space`,
`concat`), a part of ptx_spec._SpecLowering.

Addresses.  A generic, global, constant or parameter address is the CPU address: an LLVM
`ptr` where the register is one (analysis.pointers says which), else an i64.  A shared or
local address is the byte offset into the block's shared memory (`e.shared`) or the thread's
local memory (`e.local_base`), which are the windows of those spaces in the generic space: a
generic address of one is a GEP on the window's base (so that LLVM sees which memory it is),
and back the difference of the two addresses.  Operands read as addresses are their LLVM
values as they are (ptx_spec.py), so a pointer stays a pointer through a cvta."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from cpuify.codegen.lowering import I64, PTR, _width
from cpuify.ir.modifiers import mods, type_size
from cpuify.ir.ptx_table import Fn, resolve_param, space_of

if TYPE_CHECKING:
    from cpuify.codegen.segment_emitter import SegmentEmitter
    from cpuify.ir.core import Operation

Typed = tuple[ir.Value, str]          # an LLVM value and its PTX type


class AddressLowering:
    """The address and move functions (a mixin of ptx_spec._SpecLowering)."""
    e: SegmentEmitter
    b: ir.IRBuilder
    op: Operation

    def type_of(self, symbol: str) -> str:
        raise NotImplementedError

    def _as_int64(self, v: ir.Value) -> ir.Value:
        return self.b.ptrtoint(v, I64) if isinstance(v.type, ir.PointerType) else \
            self.e.int_resize(v, I64, False)

    def _window(self, space: str) -> ir.Value:
        """The base of a space's window in the generic space (shared or local)."""
        return self.e.shared if space == "shared" else self.e.local_base

    def fn_to_generic(self, x: Fn, args: list[Typed]) -> Typed:
        (a, t), = args
        space = space_of(t)
        if space in ("shared", "local"):
            return self.b.gep(self._window(space), [self._as_int64(a)]), "addr.generic"
        return a, "addr.generic"

    def fn_to_space(self, x: Fn, args: list[Typed]) -> Typed:
        (a, _), = args
        want = self.type_of(x.type or "S")
        space = space_of(want)
        if space in ("shared", "local"):
            b = self.b
            p = a if isinstance(a.type, ir.PointerType) else \
                b.inttoptr(self.e.int_resize(a, I64, False), PTR)
            return b.sub(b.ptrtoint(p, I64), b.ptrtoint(self._window(space), I64)), want
        return a, want

    def fn_in_space(self, x: Fn, args: list[Typed]) -> Typed:
        """The offset from the window's base, unsigned, below the window's size (the
        launch's shared memory, static and dynamic; the thread's local memory); global,
        const and param: in neither window."""
        (a, _), = args
        b, e = self.b, self.e
        iv = self._as_int64(a)

        def inside(space: str) -> ir.Value:
            root = b.ptrtoint(self._window(space), I64)
            if space == "shared":
                size = b.add(I64(e.kc.shared.dynamic_offset), b.zext(e.dyn_shared, I64))
            else:
                size = I64(e.kc.local_size)
            return b.icmp_unsigned("<", b.sub(iv, root), size)

        space = resolve_param(x.param, mods(self.op))
        if space in ("shared", "local"):
            return inside(str(space)), "pred"
        return b.not_(b.or_(inside("shared"), inside("local"))), "pred"

    def fn_concat(self, x: Fn, args: list[Typed]) -> Typed:
        """Each register's bits cut to its part, shifted to its place, or'ed together."""
        b, e = self.b, self.e
        want = self.type_of(x.type or "T")
        w = type_size(want) * 8
        part = w // len(args)
        acc: ir.Value = ir.IntType(w)(0)
        for k, (v, _) in enumerate(args):
            pv = e.int_resize(e.coerce_bits(v, ir.IntType(_width(v.type))), ir.IntType(part), False)
            acc = b.or_(acc, b.shl(b.zext(pv, ir.IntType(w)), ir.IntType(w)(part * k)))
        return acc, want
