"""Print IR in MLIR's generic syntax.

    %3 = "ptx.add"(%1, %2) {mods = ["s32"]} : (i32, i32) -> i32
    "cf.cond_br"(%4) [^bb1(%3 : i32), ^bb2] : (i1) -> ()
    "upir.kernel"() ({
      ...
    ^bb1(%7: i32):
      ...
    }) {sym_name = "k"} : () -> ()

Successor arguments are printed inside the successor list, as MLIR's `cf` ops do.  Values
are numbered `%0, %1, ...` across the whole printed op (in order of first appearance);
blocks are numbered `^bb0, ^bb1, ...` per region, in region order.  The entry block's
label is printed only when it has arguments, is a branch target or is empty.  The output is parsed
back by :func:`cpuify.ir.parser.parse_op`."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from cpuify.ir.core import Block, Operation, Region, Value

_BARE_KEY = re.compile(r"[A-Za-z_][\w$.]*\Z")


def format_attr(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value} : i64"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan : f64"
        return f"{value!r} : f64"      # repr gives 'inf' / '-inf' for infinities
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    if value is None:
        return "unit"
    raise TypeError(f"cannot print attribute {value!r}")


def format_attr_key(key: str) -> str:
    return key if _BARE_KEY.match(key) and key not in ("true", "false", "unit") else json.dumps(key)


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
        text = f'{pad}{head}"{op.name}"(' + ", ".join(self.value(v) for v in op.operands) + ")"
        if op.successors:
            succ = []
            for b, args in zip(op.successors, op.successor_args):
                s = self.block(b)
                if args:
                    s += "(" + ", ".join(f"{self.value(a)} : {a.type}" for a in args) + ")"
                succ.append(s)
            text += " [" + ", ".join(succ) + "]"
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
        text += " : (" + ", ".join(v.type for v in op.operands) + ") -> "
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
    """The generic-syntax text of `op` and everything nested in it."""
    p = Printer()
    p.op(op, 0)
    return "\n".join(p.lines) + "\n"
