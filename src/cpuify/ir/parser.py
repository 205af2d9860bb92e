"""Parse the MLIR generic syntax that :mod:`cpuify.ir.printer` prints back into IR.

    op          ::= [value-id (`,` value-id)* `=`] string `(` [value-id (`,` value-id)*] `)`
                    [`[` block-id (`,` block-id)* `]`]
                    [`<{` [attr (`,` attr)*] `}>`]
                    [`(` region (`,` region)* `)`]
                    [`{` [attr (`,` attr)*] `}`]
                    `:` `(` [type (`,` type)*] `)` `->` (type | `(` [type (`,` type)*] `)`)
    region      ::= `{` op* (block-label op*)* `}`
    block-label ::= block-id [`(` value-id `:` type (`,` value-id `:` type)* `)`] `:`
    attr        ::= (bare-id | string) [`=` attr-value]          (no value: unit)
    attr-value  ::= number `:` type | (`inf` | `-inf` | `nan`) `:` type | string
                  | `true` | `false` | `unit` | `[` [attr-value (`,` attr-value)*] `]`
                  | `array<i32:` [integer (`,` integer)*] `>`

As in MLIR, successor arguments are operands of the terminator: the only property read is
`operandSegmentSizes` (the op's own operands, then each successor's); without it, an op
with one successor passes all its operands to it (`cf.br`).  A hex integer with a float
type is the float with that bit pattern (`0x7FF0000000000000 : f64` is +inf).  Strings
take MLIR's escapes (`\n`, `\t`, `\"`, `\\`, two hex digits).  :func:`parse_module`
reads a file of ops, in a `builtin.module` or not.

Values are resolved by name; a use before the textual definition (legal when the
defining block dominates but comes later in the region) is a forward reference that is
patched when the definition is parsed.  Block names are scoped to their region and may be
referenced before their label.  Any malformed text raises :class:`IRError` naming the line.

The parser checks syntax and types (an operand's type must match the op's signature, a
value's uses must agree on its type); structural rules such as dominance, terminators and
successor argument types are the verifier's job (:func:`cpuify.ir.verifier.verify`)."""

from __future__ import annotations

import re
import struct
from typing import Any

from cpuify.errors import IRError
from cpuify.ir.core import TYPES, Block, Operation, Region, Value

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r]+)
  | (?P<nl>\n)
  | (?P<comment>//[^\n]*)
  | (?P<value>%[A-Za-z0-9_$.\-#]+)
  | (?P<block>\^[A-Za-z0-9_$.\-]+)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<number>-?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?))
  | (?P<ident>[A-Za-z_][\w$.]*)
  | (?P<arrow>->)
  | (?P<punct>[()\[\]{},:=\-<>])
""", re.VERBOSE)


_ESCAPES = {"n": b"\n", "t": b"\t", '"': b'"', "\\": b"\\"}
_HEX = "0123456789abcdefABCDEF"


def _string_value(text: str) -> str:
    """The contents of an MLIR string literal token (quotes included)."""
    out = bytearray()
    body = text[1:-1]
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        esc = body[i + 1:i + 2]
        if esc in _ESCAPES:
            out += _ESCAPES[esc]
            i += 2
        elif len(body) >= i + 3 and body[i + 1] in _HEX and body[i + 2] in _HEX:
            out.append(int(body[i + 1:i + 3], 16))
            i += 3
        else:
            raise ValueError(f"bad escape sequence '\\{esc}'")
    return out.decode("utf-8")


class _Tok:
    __slots__ = ("kind", "text", "line")

    def __init__(self, kind: str, text: str, line: int) -> None:
        self.kind, self.text, self.line = kind, text, line

    def __repr__(self) -> str:
        return f"{self.kind}:{self.text}@{self.line}"


def _tokenize(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    line = 1
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise IRError(f"line {line}: unexpected character {text[pos]!r}")
        kind = m.lastgroup or ""
        if kind == "nl":
            line += 1
        elif kind not in ("ws", "comment"):
            toks.append(_Tok(kind, m.group(), line))
        pos = m.end()
    return toks


class _Forward(Value):
    """A placeholder for a value used before its definition."""
    __slots__ = ("line",)

    def __init__(self, type_: str, line: int) -> None:
        super().__init__(type_)
        self.line = line


class _RegionScope:
    __slots__ = ("region", "blocks", "defined", "first_use")

    def __init__(self, region: Region) -> None:
        self.region = region
        self.blocks: dict[str, Block] = {}
        self.defined: set[str] = set()
        self.first_use: dict[str, int] = {}


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokenize(text)
        self.i = 0
        self.values: dict[str, Value] = {}
        self.forward: dict[str, _Forward] = {}
        self.scopes: list[_RegionScope] = []

    # -- token helpers --
    def peek(self) -> _Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def line(self) -> int:
        tok = self.peek()
        if tok is not None:
            return tok.line
        return self.toks[-1].line if self.toks else 1

    def error(self, message: str, line: int | None = None) -> IRError:
        return IRError(f"line {self.line() if line is None else line}: {message}")

    def next(self) -> _Tok:
        tok = self.peek()
        if tok is None:
            raise self.error("unexpected end of input")
        self.i += 1
        return tok

    def at(self, text: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.text == text and tok.kind != "string"

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.i += 1
            return True
        return False

    def expect(self, text: str) -> _Tok:
        tok = self.peek()
        if tok is None:
            raise self.error(f"expected '{text}', found end of input")
        if tok.text != text or tok.kind == "string":
            raise self.error(f"expected '{text}', found '{tok.text}'")
        self.i += 1
        return tok

    def expect_kind(self, kind: str, what: str) -> _Tok:
        tok = self.peek()
        if tok is None:
            raise self.error(f"expected {what}, found end of input")
        if tok.kind != kind:
            raise self.error(f"expected {what}, found '{tok.text}'")
        self.i += 1
        return tok

    def string(self, tok: _Tok) -> str:
        try:
            return _string_value(tok.text)
        except ValueError as exc:        # UnicodeDecodeError too
            raise self.error(f"bad string literal {tok.text}: {exc}", tok.line) from None

    def type_(self) -> str:
        tok = self.peek()
        if tok is None or tok.kind != "ident":
            raise self.error(f"expected a type, found '{tok.text if tok else 'end of input'}'")
        if tok.text not in TYPES:
            raise self.error(f"unknown type '{tok.text}' (expected one of {', '.join(TYPES)})")
        self.i += 1
        return tok.text

    def type_list(self) -> list[str]:
        self.expect("(")
        types: list[str] = []
        if not self.accept(")"):
            types.append(self.type_())
            while self.accept(","):
                types.append(self.type_())
            self.expect(")")
        return types

    # -- values --
    def use(self, tok: _Tok, type_: str) -> Value:
        """The value named by `tok`, which the context says has type `type_`."""
        v = self.values.get(tok.text)
        if v is None:
            v = self.forward.get(tok.text)
            if v is None:
                v = _Forward(type_, tok.line)
                self.forward[tok.text] = v
        if v.type != type_:
            raise self.error(f"'{tok.text}' has type {v.type}, used as {type_}", tok.line)
        return v

    def define(self, tok: _Tok, v: Value) -> None:
        name = tok.text
        if name in self.values:
            raise self.error(f"redefinition of value '{name}'", tok.line)
        fwd = self.forward.pop(name, None)
        if fwd is not None:
            if fwd.type != v.type:
                raise self.error(f"'{name}' is defined with type {v.type} but was used as "
                                 f"{fwd.type} (line {fwd.line})", tok.line)
            for user in list(fwd.uses):
                user.operands = [v if x is fwd else x for x in user.operands]
                user.successor_args = [[v if x is fwd else x for x in args]
                                       for args in user.successor_args]
                v.uses.append(user)
            fwd.uses.clear()
        self.values[name] = v

    # -- blocks --
    def block_ref(self, tok: _Tok) -> Block:
        if not self.scopes:
            raise self.error(f"successor '{tok.text}' outside of any region", tok.line)
        scope = self.scopes[-1]
        b = scope.blocks.get(tok.text)
        if b is None:
            b = Block()
            scope.blocks[tok.text] = b
        scope.first_use.setdefault(tok.text, tok.line)
        return b

    # -- grammar --
    def op(self) -> Operation:
        start = self.line()
        result_toks: list[_Tok] = []
        if self.peek() is not None and self.peek().kind == "value":  # type: ignore[union-attr]
            result_toks.append(self.next())
            while self.accept(","):
                result_toks.append(self.expect_kind("value", "a result name"))
            self.expect("=")
        name_tok = self.expect_kind("string", "an operation name in quotes")
        name = self.string(name_tok)
        if not name:
            raise self.error("empty operation name", name_tok.line)

        self.expect("(")
        operand_toks: list[_Tok] = []
        if not self.accept(")"):
            operand_toks.append(self.expect_kind("value", "an operand"))
            while self.accept(","):
                operand_toks.append(self.expect_kind("value", "an operand"))
            self.expect(")")

        successors: list[Block] = []
        if self.accept("["):
            while True:
                btok = self.expect_kind("block", "a successor block")
                successors.append(self.block_ref(btok))
                if self.at("("):
                    raise self.error("successor arguments are operands of the op in MLIR's "
                                     "generic form: \"cf.br\"(%x) [^bb1] : (i32) -> ()")
                if not self.accept(","):
                    break
            self.expect("]")

        segments: list[int] | None = None
        if self.at("<"):
            segments = self.properties()

        regions: list[Region] = []
        if self.accept("("):
            regions.append(self.region())
            while self.accept(","):
                regions.append(self.region())
            self.expect(")")

        attrs: dict[str, Any] = {}
        if self.at("{"):
            attrs = self.attr_dict()

        self.expect(":")
        operand_types = self.type_list()
        self.expect("->")
        if self.at("("):
            result_types = self.type_list()
        else:
            result_types = [self.type_()]
        if len(operand_types) != len(operand_toks):
            raise self.error(f"'{name}' has {len(operand_toks)} operand(s) but its type lists "
                             f"{len(operand_types)}", start)
        if len(result_types) != len(result_toks):
            raise self.error(f"'{name}' has {len(result_types)} result type(s) but binds "
                             f"{len(result_toks)} name(s)", start)
        operands = [self.use(t, ty) for t, ty in zip(operand_toks, operand_types)]
        succ_args: list[list[Value]] = [[] for _ in successors]
        if segments is not None:
            if len(segments) != 1 + len(successors) or sum(segments) != len(operands):
                raise self.error(f"'{name}': operandSegmentSizes {segments} does not split "
                                 f"{len(operands)} operand(s) among the op and its "
                                 f"{len(successors)} successor(s)", start)
            pos = segments[0]
            own = operands[:pos]
            for k, n in enumerate(segments[1:]):
                succ_args[k] = operands[pos:pos + n]
                pos += n
            operands = own
        elif len(successors) == 1:
            succ_args[0], operands = operands, []
        op = Operation(name, operands, result_types, attrs, regions, successors, succ_args)
        for tok, r in zip(result_toks, op.results):
            self.define(tok, r)
        return op

    def region(self) -> Region:
        open_tok = self.expect("{")
        region = Region()
        scope = _RegionScope(region)
        self.scopes.append(scope)
        block: Block | None = None
        while not self.accept("}"):
            tok = self.peek()
            if tok is None:
                raise self.error(f"region opened on line {open_tok.line} is not closed")
            if tok.kind == "block":
                block = self.block_label()
                region.add_block(block)
                continue
            if block is None:          # ops before any label: the unlabeled entry block
                block = region.add_block(Block())
            block.append(self.op())
        for name, b in scope.blocks.items():
            if name not in scope.defined:
                raise self.error(f"use of undefined block '{name}'", scope.first_use[name])
        self.scopes.pop()
        return region

    def block_label(self) -> Block:
        scope = self.scopes[-1]
        tok = self.next()
        if tok.text in scope.defined:
            raise self.error(f"redefinition of block '{tok.text}'", tok.line)
        scope.defined.add(tok.text)
        block = scope.blocks.get(tok.text)
        if block is None:
            block = Block()
            scope.blocks[tok.text] = block
        if self.accept("("):
            while True:
                vtok = self.expect_kind("value", "a block argument")
                self.expect(":")
                self.define(vtok, block.add_arg(self.type_()))
                if not self.accept(","):
                    break
            self.expect(")")
        self.expect(":")
        return block

    def properties(self) -> list[int]:
        """`<{operandSegmentSizes = array<i32: ...>}>`, the only property the IR has."""
        start = self.expect("<")
        self.expect("{")
        segments: list[int] | None = None
        if not self.accept("}"):
            while True:
                tok = self.next()
                key = self.string(tok) if tok.kind == "string" else tok.text
                if key != "operandSegmentSizes" or segments is not None:
                    raise self.error(f"unsupported property '{key}' (only operandSegmentSizes)",
                                     tok.line)
                self.expect("=")
                segments = self.i32_array()
                if self.accept("}"):
                    break
                self.expect(",")
        self.expect(">")
        if segments is None:
            raise self.error("empty properties: expected operandSegmentSizes", start.line)
        return segments

    def i32_array(self) -> list[int]:
        """`array<i32: 1, 2, 0>` (dense array of non-negative sizes)."""
        tok = self.expect_kind("ident", "array<i32: ...>")
        if tok.text != "array":
            raise self.error(f"expected array<i32: ...>, found '{tok.text}'", tok.line)
        self.expect("<")
        if self.type_() != "i32":
            raise self.error("operandSegmentSizes must be an array<i32: ...>", tok.line)
        values: list[int] = []
        if self.accept(":"):
            while True:
                num = self.expect_kind("number", "a segment size")
                if not num.text.isdigit():
                    raise self.error(f"bad segment size '{num.text}'", num.line)
                values.append(int(num.text))
                if not self.accept(","):
                    break
        self.expect(">")
        return values

    def attr_dict(self) -> dict[str, Any]:
        self.expect("{")
        attrs: dict[str, Any] = {}
        if self.accept("}"):
            return attrs
        while True:
            tok = self.next()
            if tok.kind == "ident":
                key = tok.text
            elif tok.kind == "string":
                key = self.string(tok)
            else:
                raise self.error(f"expected an attribute name, found '{tok.text}'", tok.line)
            if key in attrs:
                raise self.error(f"duplicate attribute '{key}'", tok.line)
            attrs[key] = self.attr_value() if self.accept("=") else None
            if self.accept("}"):
                return attrs
            self.expect(",")

    def attr_value(self) -> Any:
        tok = self.next()
        if tok.kind == "string":
            return self.string(tok)
        if tok.text == "[":
            items: list[Any] = []
            if self.accept("]"):
                return items
            items.append(self.attr_value())
            while self.accept(","):
                items.append(self.attr_value())
            self.expect("]")
            return items
        if tok.kind == "ident" and tok.text in ("true", "false"):
            return tok.text == "true"
        if tok.kind == "ident" and tok.text == "unit":
            return None
        if tok.text == "-" and self.at("inf"):
            self.next()
            return self.typed_number("-inf", tok.line, float_only=True)
        if tok.kind == "ident" and tok.text in ("inf", "nan"):
            return self.typed_number(tok.text, tok.line, float_only=True)
        if tok.kind == "number":
            return self.typed_number(tok.text, tok.line)
        raise self.error(f"expected an attribute value, found '{tok.text}'", tok.line)

    def typed_number(self, text: str, line: int, float_only: bool = False) -> int | float:
        type_ = "i64"
        if self.accept(":"):
            tok = self.peek()
            if tok is not None and tok.kind == "ident" and re.fullmatch(r"i(?:128|[1-9]\d?)", tok.text):
                type_ = self.next().text      # an integer attribute may be wider than a value
            else:
                type_ = self.type_()
        elif float_only:
            type_ = "f64"
        is_hex = text.lstrip("-")[:2].lower() == "0x"
        if type_.startswith("f"):
            if is_hex and not float_only:
                width = int(type_[1:])
                bits = int(text, 16)
                if text.startswith("-") or bits >> width:
                    raise self.error(f"'{text}' is no {type_} bit pattern", line)
                fmt = {16: "<e", 32: "<f", 64: "<d"}[width]
                return float(struct.unpack(fmt, bits.to_bytes(width // 8, "little"))[0])
            try:
                return float(text)
            except ValueError:
                raise self.error(f"bad float literal '{text}'", line) from None
        if float_only:
            raise self.error(f"'{text}' is not a valid {type_} value", line)
        try:
            return int(text, 0) if is_hex else int(text)
        except ValueError:
            raise self.error(f"'{text}' is not an integer (a float needs ': f64')", line) from None

    def parse(self) -> Operation:
        if not self.toks:
            raise self.error("empty input: expected an operation")
        op = self.op()
        tok = self.peek()
        if tok is not None:
            raise self.error(f"unexpected '{tok.text}' after the operation")
        if self.forward:
            name, fwd = min(self.forward.items(), key=lambda kv: kv[1].line)
            raise self.error(f"use of undefined value '{name}'", fwd.line)
        return op

    def parse_all(self) -> list[Operation]:
        ops: list[Operation] = []
        while self.peek() is not None:
            ops.append(self.op())
        if self.forward:
            name, fwd = min(self.forward.items(), key=lambda kv: kv[1].line)
            raise self.error(f"use of undefined value '{name}'", fwd.line)
        return ops


def parse_op(text: str) -> Operation:
    """Parse one operation (with everything nested in it) from MLIR generic syntax, as
    printed by :func:`cpuify.ir.printer.print_op`.  Raises :class:`IRError` with the line
    number on malformed text."""
    return _Parser(text).parse()


def parse_module(text: str) -> list[Operation]:
    """The top-level ops of an MLIR file (as :func:`cpuify.ir.printer.print_module`
    prints): the ops of its `builtin.module`, or the ops of the file when they are not in
    one.  Raises :class:`IRError` with the line number on malformed text."""
    ops = _Parser(text).parse_all()
    if len(ops) == 1 and ops[0].name == "builtin.module":
        module = ops[0]
        if len(module.regions) != 1 or len(module.regions[0].blocks) > 1 or module.operands \
                or module.results or module.successors:
            raise IRError("line 1: 'builtin.module' must hold one region of one block")
        inner = module.regions[0].blocks[0].ops if module.regions[0].blocks else []
        for op in inner:
            op.parent = None
        return list(inner)
    return ops


__all__ = ["parse_module", "parse_op"]
