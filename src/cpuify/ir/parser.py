"""Parse the MLIR generic syntax that :mod:`cpuify.ir.printer` prints back into IR.

    op          ::= [value-id (`,` value-id)* `=`] string `(` [value-id (`,` value-id)*] `)`
                    [`[` successor (`,` successor)* `]`]
                    [`(` region (`,` region)* `)`]
                    [`{` [attr (`,` attr)*] `}`]
                    `:` `(` [type (`,` type)*] `)` `->` (type | `(` [type (`,` type)*] `)`)
    successor   ::= block-id [`(` value-id `:` type (`,` value-id `:` type)* `)`]
    region      ::= `{` op* (block-label op*)* `}`
    block-label ::= block-id [`(` value-id `:` type (`,` value-id `:` type)* `)`] `:`
    attr        ::= (bare-id | string) [`=` attr-value]          (no value: unit)
    attr-value  ::= number `:` type | (`inf` | `-inf` | `nan`) `:` type | string
                  | `true` | `false` | `unit` | `[` [attr-value (`,` attr-value)*] `]`

Values are resolved by name; a use before the textual definition (legal when the
defining block dominates but comes later in the region) is a forward reference that is
patched when the definition is parsed.  Block names are scoped to their region and may be
referenced before their label.  Any malformed text raises :class:`IRError` naming the line.

The parser checks syntax and types (an operand's type must match the op's signature, a
successor argument's type must match what was written); structural rules such as
dominance and terminators are the verifier's job (:func:`cpuify.ir.verifier.verify`)."""

from __future__ import annotations

import json
import re
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
  | (?P<punct>[()\[\]{},:=\-])
""", re.VERBOSE)


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
        name = json.loads(name_tok.text)
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
        succ_args: list[list[Value]] = []
        if self.accept("["):
            while True:
                btok = self.expect_kind("block", "a successor block")
                successors.append(self.block_ref(btok))
                args: list[Value] = []
                if self.accept("("):
                    while True:
                        vtok = self.expect_kind("value", "a successor argument")
                        self.expect(":")
                        args.append(self.use(vtok, self.type_()))
                        if not self.accept(","):
                            break
                    self.expect(")")
                succ_args.append(args)
                if not self.accept(","):
                    break
            self.expect("]")

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
                key = json.loads(tok.text)
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
            try:
                return json.loads(tok.text)
            except ValueError as exc:
                raise self.error(f"bad string literal {tok.text}: {exc}", tok.line) from None
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
            type_ = self.type_()
        elif float_only:
            type_ = "f64"
        if type_.startswith("f"):
            try:
                return float(text)
            except ValueError:
                raise self.error(f"bad float literal '{text}'", line) from None
        if float_only:
            raise self.error(f"'{text}' is not a valid {type_} value", line)
        try:
            return int(text, 0) if text.lstrip("-")[:2].lower() == "0x" else int(text)
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


def parse_op(text: str) -> Operation:
    """Parse one operation (with everything nested in it) from MLIR generic syntax, as
    printed by :func:`cpuify.ir.printer.print_op`.  Raises :class:`IRError` with the line
    number on malformed text."""
    return _Parser(text).parse()


__all__ = ["parse_op"]
