"""Print IR in MLIR's generic syntax: text that MLIR tools and xDSL parse (with the
`upir` and `ptx` dialects unregistered).

    %3 = "ptx.add"(%1, %2) {mods = ["s32"]} : (i32, i32) -> i32
    "cf.br"(%3) [^bb1] : (i32) -> ()
    "cf.cond_br"(%4, %3, %5) [^bb1, ^bb2] <{operandSegmentSizes = array<i32: 1, 1, 1>}> : (i1, i32, i32) -> ()
    "upir.kernel"() ({
      ...
    ^bb1(%7: i32):
      ...
    }) {sym_name = "k"} : () -> ()

As in MLIR, the values a terminator passes to its successors' block arguments are
operands of the terminator: an op with one successor and no operands of its own
(`cf.br`) lists them as its operands; any other op with successors gives the split in
the `operandSegmentSizes` property (its own operands, then each successor's), which is
what MLIR's and xDSL's `cf.cond_br` expect.

Attributes are MLIR attributes: integers `5 : i64`, floats `2.5 : f64` (infinities and
NaNs as the hex bit pattern `0x7FF0000000000000 : f64`), strings with MLIR escapes,
`true`/`false`, `unit` (None) and arrays `[...]`.

Values are numbered `%0, %1, ...` across the whole printed op (in order of first
appearance); blocks are numbered `^bb0, ^bb1, ...` per region, in region order.  The
entry block's label is printed only when it has arguments, is a branch target or is empty.
:func:`print_module` wraps ops in a `builtin.module`, one complete MLIR file.  The output
is parsed back by :mod:`cpuify.ir.parser`."""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable
from typing import Any

from cpuify.ir.core import Block, Operation, Region, Value

_BARE_KEY = re.compile(r"[A-Za-z_][\w$.]*\Z")
_KEYWORDS = ("true", "false", "unit")
SEGMENT_SIZES = "operandSegmentSizes"


def format_string(text: str) -> str:
    """An MLIR string literal: printable ASCII as is, `"` and `\\` and every other byte
    (of the UTF-8 encoding) as a two-digit hex escape."""
    out = []
    for byte in text.encode("utf-8"):
        if 0x20 <= byte < 0x7F and byte not in (0x22, 0x5C):
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:02X}")
    return '"' + "".join(out) + '"'


def format_float(value: float) -> str:
    """An MLIR float literal (always with a `.`); infinities and NaNs as the bits of the
    f64, which MLIR reads as the float with that bit pattern."""
    if math.isnan(value) or math.isinf(value):
        return f"0x{struct.unpack('<Q', struct.pack('<d', value))[0]:016X}"
    text = repr(value)
    mantissa, e, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + e + exponent


def format_attr(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if -2**63 <= value < 2**64:
            return f"{value} : i64"
        if -2**127 <= value < 2**128:
            return f"{value} : i128"
        raise TypeError(f"cannot print integer attribute {value}: wider than 128 bits")
    if isinstance(value, float):
        return f"{format_float(value)} : f64"
    if isinstance(value, str):
        return format_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    if value is None:
        return "unit"
    raise TypeError(f"cannot print attribute {value!r}")


def format_attr_key(key: str) -> str:
    return key if _BARE_KEY.match(key) and key not in _KEYWORDS else format_string(key)


def flat_operands(op: Operation) -> tuple[list[Value], list[int] | None]:
    """The operands of `op` in MLIR's form (its own, then each successor's arguments) and
    the operand segment sizes to print, or None when none are needed."""
    if not op.successors:
        return list(op.operands), None
    if len(op.successors) == 1 and not op.operands:
        return list(op.successor_args[0]), None
    flat = list(op.operands)
    for args in op.successor_args:
        flat.extend(args)
    return flat, [len(op.operands)] + [len(a) for a in op.successor_args]


class Printer:
    def __init__(self) -> None:
        self.names: dict[Value, str] = {}
        self.block_names: dict[Block, str] = {}
        self.lines: list[str] = []
        self.foreign = 0

    def value(self, v: Value) -> str:
        name = self.names.get(v)
        if name is None:
            name = f"%{len(self.names)}"
            self.names[v] = name
        return name

    def block(self, b: Block) -> str:
        name = self.block_names.get(b)
        if name is None:
            # a successor outside the region being printed (invalid IR): still printable
            self.foreign += 1
            name = f"^foreign{self.foreign}"
            self.block_names[b] = name
        return name

    def op(self, op: Operation, indent: int) -> None:
        pad = "  " * indent
        head = ""
        if op.results:
            head = ", ".join(self.value(r) for r in op.results) + " = "
        operands, segments = flat_operands(op)
        text = f'{pad}{head}{format_string(op.name)}(' + ", ".join(self.value(v) for v in operands) + ")"
        if op.successors:
            text += " [" + ", ".join(self.block(b) for b in op.successors) + "]"
        if segments is not None:
            text += f" <{{{SEGMENT_SIZES} = array<i32: " + ", ".join(map(str, segments)) + ">}>"
        if op.regions:
            text += " ("
            for region in op.regions:
                self.lines.append(text + "{")
                self.region(region, indent + 1)
                text = f"{pad}}}, "
            text = f"{pad}}})"
        if op.attributes:
            text += " {" + ", ".join(f"{format_attr_key(k)} = {format_attr(v)}"
                                     for k, v in op.attributes.items()) + "}"
        text += " : (" + ", ".join(v.type for v in operands) + ") -> "
        if len(op.results) == 1:
            text += op.results[0].type
        else:
            text += "(" + ", ".join(r.type for r in op.results) + ")"
        self.lines.append(text)

    def region(self, region: Region, indent: int) -> None:
        """The blocks of `region`; ops at `indent`, block labels one level out."""
        pad = "  " * (indent - 1)
        saved = self.block_names
        self.block_names = dict(saved)
        for i, b in enumerate(region.blocks):
            self.block_names[b] = f"^bb{i}"
        targets = {s for b in region.blocks for op in b.ops for s in op.successors}
        for i, b in enumerate(region.blocks):
            if i > 0 or b.args or b in targets or not b.ops:
                args = ", ".join(f"{self.value(a)}: {a.type}" for a in b.args)
                self.lines.append(f"{pad}{self.block(b)}" + (f"({args})" if b.args else "") + ":")
            for op in b.ops:
                self.op(op, indent)
        self.block_names = saved


def print_op(op: Operation) -> str:
    """The generic-syntax text of `op` and everything nested in it (a valid MLIR file by
    itself: MLIR tools put a top-level op that is not a module into one)."""
    p = Printer()
    p.op(op, 0)
    return "\n".join(p.lines) + "\n"


def print_ops(ops: Iterable[Operation]) -> str:
    """Several top-level ops, values numbered across all of them: a valid MLIR file (MLIR
    tools put the ops into one module; SSA names are scoped by file, not by op)."""
    p = Printer()
    for op in ops:
        p.op(op, 0)
    return "\n".join(p.lines) + "\n" if p.lines else ""


def print_module(ops: Iterable[Operation]) -> str:
    """`ops` (e.g. the `upir.kernel` ops of a PTX module) inside one `builtin.module`: the
    MLIR file `cpuify ir --mlir` prints.  Values are numbered across the whole module."""
    p = Printer()
    p.lines.append('"builtin.module"() ({')
    n = len(p.lines)
    for op in ops:
        p.op(op, 1)
    if len(p.lines) == n:
        p.lines.append("^bb0:")           # a module's region has one block, maybe empty
    p.lines.append("}) : () -> ()")
    return "\n".join(p.lines) + "\n"
