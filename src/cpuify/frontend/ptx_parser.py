"""Parser for the PTX that nvcc and NVRTC emit.

A hand-written tokenizer plus a statement-level recursive-descent parser.  Statements are
split at `;` (and `{`/`}`/labels); every statement keeps the line it started on."""

from __future__ import annotations

import re
import struct

from cpuify.errors import PTXError
from cpuify.frontend.ptx_ast import (
    Addr, CallArgs, Function, Imm, Instruction, Label, Module, Operand, Pair, Param, Reg,
    Vec, VarDecl, is_ptx_type, type_size,
)

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r]+)
  | (?P<nl>\n)
  | (?P<lcomment>//[^\n]*)
  | (?P<bcomment>/\*.*?\*/)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<float>0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16})
  | (?P<number>(?:0[xX][0-9a-fA-F]+|0[bB][01]+|\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+)U?)
  | (?P<ident>[%$._A-Za-z](?:[%$.\w]|::(?=\w))*)
  | (?P<punct>[{}\[\]();,:+\-@!|<>=*])
""", re.VERBOSE | re.DOTALL)

_SPACES = ("global", "const", "shared", "local", "param")


class _Tok:
    __slots__ = ("kind", "text", "line")

    def __init__(self, kind: str, text: str, line: int) -> None:
        self.kind, self.text, self.line = kind, text, line

    def __repr__(self) -> str:
        return f"{self.kind}:{self.text}@{self.line}"


def tokenize(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    line = 1
    pos = 0
    n = len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise PTXError(f"unexpected character {text[pos]!r}", line=line,
                           source_line=text.splitlines()[line - 1] if text else "")
        kind = m.lastgroup or ""
        tok = m.group()
        if kind == "nl":
            line += 1
        elif kind == "bcomment":
            line += tok.count("\n")
        elif kind not in ("ws", "lcomment"):
            toks.append(_Tok(kind, tok, line))
        pos = m.end()
    return toks


def _parse_int(text: str) -> int:
    t = text.rstrip("U")
    if t[:2] in ("0x", "0X"):
        return int(t, 16)
    if t[:2] in ("0b", "0B"):
        return int(t, 2)
    if len(t) > 1 and t[0] == "0" and t.isdigit():
        return int(t, 8)
    return int(t)


def _float_imm(text: str, negative: bool = False) -> Imm:
    bits = int(text[2:], 16)
    if text[1] in "fF":
        value = struct.unpack("<f", struct.pack("<I", bits))[0]
        if negative:
            bits ^= 0x80000000
            value = -value
        return Imm(value, True, bits, 32)
    value = struct.unpack("<d", struct.pack("<Q", bits))[0]
    if negative:
        bits ^= 1 << 63
        value = -value
    return Imm(value, True, bits, 64)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = tokenize(text)
        self.i = 0
        self.module = Module(lines=text.splitlines())
        self.func: Function | None = None

    # -- token helpers --
    def peek(self, k: int = 0) -> _Tok | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def next(self) -> _Tok:
        tok = self.peek()
        if tok is None:
            last = self.toks[-1].line if self.toks else 1
            self.error("unexpected end of PTX", last)
        self.i += 1
        return tok  # type: ignore[return-value]

    def at(self, text: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.text == text

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.i += 1
            return True
        return False

    def expect(self, text: str) -> _Tok:
        tok = self.next()
        if tok.text != text:
            self.error(f"expected '{text}', found '{tok.text}'", tok.line)
        return tok

    def error(self, message: str, line: int) -> None:
        raise PTXError(message, line=line, kernel=self.func.name if self.func else None,
                       source_line=self.module.source_line(line))

    # -- module level --
    def parse(self) -> Module:
        while self.peek() is not None:
            self.top_level()
        return self.module

    def top_level(self) -> None:
        tok = self.peek()
        assert tok is not None
        t = tok.text
        if t == ".version":
            self.next()
            self.module.version = self.next().text
        elif t == ".target":
            self.next()
            targets = [self.next().text]
            while self.accept(","):
                targets.append(self.next().text)
            self.module.target = tuple(targets)
        elif t == ".address_size":
            self.next()
            self.module.address_size = int(self.next().text)
        elif t in (".file", ".loc", ".pragma", ".section"):
            self.skip_directive()
        elif t in (".visible", ".extern", ".weak", ".common", ".entry", ".func",
                   ".global", ".const", ".shared", ".local", ".alias"):
            self.declaration()
        else:
            self.error(f"unexpected '{t}' at module scope", tok.line)

    def skip_directive(self) -> None:
        first = self.next()
        if first.text == ".section":
            # debug sections: skip the braced body
            while not self.at("{"):
                self.next()
            depth = 0
            while True:
                tok = self.next()
                if tok.text == "{":
                    depth += 1
                elif tok.text == "}":
                    depth -= 1
                    if depth == 0:
                        return
        line = first.line
        while self.peek() is not None and self.peek().line == line and not self.at(";"):  # type: ignore[union-attr]
            self.next()
        self.accept(";")

    def declaration(self) -> None:
        linkage = ""
        while self.peek() is not None and self.peek().text in (".visible", ".extern", ".weak", ".common"):  # type: ignore[union-attr]
            linkage = self.next().text[1:]
        tok = self.peek()
        assert tok is not None
        if tok.text in (".entry", ".func"):
            self.function(linkage)
        elif tok.text == ".alias":
            self.skip_directive()
        else:
            var = self.var_decl(linkage)
            self.module.variables.append(var)

    def var_decl(self, linkage: str = "") -> VarDecl:
        space_tok = self.next()
        space = space_tok.text[1:]
        if space not in _SPACES:
            self.error(f"unknown state space '{space_tok.text}'", space_tok.line)
        align = None
        vector = 1
        vtype = None
        ptr_space = None
        while True:
            tok = self.peek()
            if tok is None:
                self.error("unexpected end in declaration", space_tok.line)
            assert tok is not None
            if tok.text == ".align":
                self.next()
                align = _parse_int(self.next().text)
            elif tok.text in (".v2", ".v4", ".v8"):
                self.next()
                vector = int(tok.text[2:])
            elif tok.text.startswith(".") and is_ptx_type(tok.text[1:]):
                self.next()
                vtype = tok.text[1:]
            elif tok.text == ".ptr":
                self.next()
                while self.peek() is not None and self.peek().text.startswith(".") and not is_ptx_type(self.peek().text[1:]):  # type: ignore[union-attr]
                    t = self.next().text[1:]
                    if t in _SPACES:
                        ptr_space = t
            elif tok.text in (".attribute",):
                self.next()
                self.skip_parens()
            else:
                break
        del ptr_space
        name_tok = self.next()
        if vtype is None:
            self.error(f"declaration of '{name_tok.text}' has no type", name_tok.line)
        dims: list[int | None] = []
        while self.accept("["):
            if self.accept("]"):
                dims.append(None)
            else:
                dims.append(_parse_int(self.next().text))
                self.expect("]")
        init = None
        if self.accept("="):
            init = self.initializer()
        self.expect(";")
        return VarDecl(space=space, type=vtype, name=name_tok.text, line=space_tok.line,  # type: ignore[arg-type]
                       align=align, dims=tuple(dims), init=init, linkage=linkage, vector=vector)

    def skip_parens(self) -> None:
        self.expect("(")
        depth = 1
        while depth:
            t = self.next().text
            depth += t == "("
            depth -= t == ")"

    def initializer(self) -> list[int | float | str]:
        out: list[int | float | str] = []

        def value() -> None:
            if self.accept("{"):
                if not self.at("}"):
                    value()
                    while self.accept(","):
                        value()
                self.expect("}")
                return
            neg = self.accept("-")
            tok = self.next()
            if tok.kind == "float":
                out.append(_float_imm(tok.text, neg).value)
            elif tok.kind == "number":
                if "." in tok.text or ("e" in tok.text.lower() and not tok.text.lower().startswith("0x")):
                    v: int | float = float(tok.text)
                else:
                    v = _parse_int(tok.text)
                out.append(-v if neg else v)
            elif tok.kind == "ident":
                # address of another symbol, possibly `generic(sym)` or `sym+4`
                name = tok.text
                if name == "generic" and self.accept("("):
                    name = self.next().text
                    self.expect(")")
                if self.accept("+"):
                    name += "+" + self.next().text
                out.append(name)
            else:
                self.error(f"bad initializer token '{tok.text}'", tok.line)

        value()
        return out

    def param_list(self, prefix_space: str = "param") -> list[Param]:
        params: list[Param] = []
        self.expect("(")
        if self.accept(")"):
            return params
        while True:
            start = self.next()
            if start.text not in (".param", ".reg"):
                self.error(f"expected .param in parameter list, found '{start.text}'", start.line)
            align = None
            ptype = None
            ptr_space = None
            while self.peek() is not None and self.peek().text.startswith("."):  # type: ignore[union-attr]
                t = self.next().text
                if t == ".align":
                    align = _parse_int(self.next().text)
                elif is_ptx_type(t[1:]):
                    ptype = t[1:]
                elif t == ".ptr":
                    continue
                elif t[1:] in _SPACES:
                    ptr_space = t[1:]
            name = self.next()
            dims: list[int] = []
            while self.accept("["):
                dims.append(_parse_int(self.next().text))
                self.expect("]")
            if ptype is None:
                self.error(f"parameter '{name.text}' has no type", name.line)
            params.append(Param(name.text, ptype, start.line, align, tuple(dims), ptr_space))  # type: ignore[arg-type]
            if self.accept(")"):
                return params
            self.expect(",")

    def function(self, linkage: str) -> None:
        kind_tok = self.next()
        kind = kind_tok.text[1:]
        returns: list[Param] = []
        if kind == "func" and self.at("("):
            returns = self.param_list()
        name = self.next()
        func = Function(name=name.text, kind=kind, line=kind_tok.line, linkage=linkage,
                        returns=returns)
        self.func = func
        if self.at("("):
            func.params = self.param_list()
        while self.peek() is not None and self.peek().text.startswith("."):  # type: ignore[union-attr]
            d = self.next().text
            vals: list[int] = []
            while self.peek() is not None and self.peek().kind == "number":  # type: ignore[union-attr]
                vals.append(_parse_int(self.next().text))
                if not self.accept(","):
                    break
            func.directives[d[1:]] = tuple(vals)
        if self.accept(";"):
            func.body = None
        else:
            self.body(func)
        existing = self.module.functions.get(func.name)
        if existing is None or existing.body is None:
            self.module.functions[func.name] = func
        self.func = None

    # -- function bodies --
    def body(self, func: Function) -> None:
        self.expect("{")
        func.body = []
        depth = 1
        while True:
            tok = self.peek()
            if tok is None:
                self.error(f"unterminated body of '{func.name}'", func.line)
            assert tok is not None
            t = tok.text
            if t == "{":
                self.next()
                depth += 1
                continue
            if t == "}":
                self.next()
                depth -= 1
                if depth == 0:
                    func.end_line = tok.line
                    return
                continue
            if t == ";":
                self.next()
                continue
            if t == ".reg" or t.startswith(".reg."):
                self.reg_decl(func, depth)
            elif t in (".local", ".shared", ".param", ".global", ".const"):
                var = self.var_decl()
                if t == ".param" and depth > 1:
                    self._rename_scoped_param(func, var)
                func.locals.append(var)
            elif t in (".loc", ".file", ".pragma"):
                self.skip_directive()
            elif t in (".maxntid", ".reqntid", ".minnctapersm", ".maxnreg", ".maxnctapersm"):
                self.skip_directive()
            elif tok.kind == "ident" and (nxt := self.peek(1)) is not None and nxt.text == ":" \
                    and (after := self.peek(2)) is not None and after.text == ".callprototype":
                # `prototype_0 : .callprototype (...) _ (...);` describes an indirect call's
                # signature (lifting dispatches the call over the functions that fit it)
                self.next()
                self.next()
                self.next()
                func.prototypes[t] = self.call_prototype()
            elif tok.kind == "ident" and (nxt := self.peek(1)) is not None and nxt.text == ":" \
                    and not t.startswith("%"):
                self.next()
                self.next()
                func.body.append(Label(t, tok.line))
            else:
                func.body.append(self.instruction(func))

    def call_prototype(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The sizes of (returns, parameters) of `.callprototype (ret) _ (params);`."""
        groups: list[list[int]] = []
        while not self.accept(";"):
            tok = self.next()
            if tok.text == "_":
                if not groups:
                    groups.append([])             # no return value
                continue
            if tok.text != "(":
                self.error(f"unexpected '{tok.text}' in a call prototype", tok.line)
            sizes: list[int] = []
            size = 0
            while True:
                t = self.next()
                if t.text in (")", ","):
                    if size:
                        sizes.append(size)
                    size = 0
                    if t.text == ")":
                        break
                elif t.text.startswith(".") and is_ptx_type(t.text[1:]):
                    size = type_size(t.text[1:])
                elif t.text == "[":
                    size *= _parse_int(self.next().text)
                    self.expect("]")
                elif t.text == ".align":
                    self.next()
            groups.append(sizes)
        rets = groups[0] if len(groups) > 1 else []
        params = groups[-1] if groups else []
        return tuple(rets), tuple(params)

    def _rename_scoped_param(self, func: Function, var: VarDecl) -> None:
        """Call sites declare `.param` variables in nested `{ }` scopes, and nvcc reuses the
        names (`param0` of a float call and of a printf call): give a redeclared name a
        unique one for the rest of its scope, so that each has its own type."""
        if not any(v.space == "param" and v.name == var.name for v in func.locals):
            return
        old = var.name
        var.name = f"{old}$s{len(func.locals)}"
        self._rename_in_scope({old: var.name})

    def reg_decl(self, func: Function, depth: int = 1) -> None:
        start = self.next()
        rtype = None
        for t in start.text.split(".")[2:]:       # `.reg.b16 hl;` (one token in inline asm)
            if is_ptx_type(t):
                rtype = t
        while self.peek() is not None and self.peek().text.startswith(".") :  # type: ignore[union-attr]
            t = self.next().text[1:]
            if is_ptx_type(t):
                rtype = t
            elif t in ("v2", "v4"):
                self.error("vector registers are not supported", start.line)
        if rtype is None:
            self.error("register declaration without a type", start.line)
        declared: list[str] = []
        while True:
            name_tok = self.next()
            name = name_tok.text
            if self.accept("<"):
                count = _parse_int(self.next().text)
                self.expect(">")
                declared += [f"{name}{k}" for k in range(count)]
            else:
                declared.append(name)
            if not self.accept(","):
                break
        self.expect(";")
        renames: dict[str, str] = {}
        for name in declared:
            if depth > 1 and name in func.regs:
                # a nested `{ .reg ... }` scope (inline asm, libdevice's Payne-Hanek
                # reduction) redeclares a name: the inner register shadows the outer one
                # until the scope closes, so it gets a name of its own
                renames[name] = f"{name}$s{len(func.regs)}"
                name = renames[name]
            func.regs[name] = rtype  # type: ignore[assignment]
        if renames:
            self._rename_in_scope(renames)

    def _rename_in_scope(self, renames: dict[str, str]) -> None:
        """Rename the tokens from here to the end of the current `{ }` scope."""
        depth = 0
        toks = self.toks
        for j in range(self.i, len(toks)):
            tok = toks[j]
            if tok.text == "{":
                depth += 1
            elif tok.text == "}":
                depth -= 1
                if depth < 0:
                    break
            else:
                new = renames.get(tok.text)
                if new is not None:
                    tok.text = new

    def instruction(self, func: Function) -> Instruction:
        first = self.peek()
        assert first is not None
        line = first.line
        guard = None
        if self.accept("@"):
            neg = self.accept("!")
            guard = Reg(self.next().text, neg)
        op_tok = self.next()
        if op_tok.kind != "ident":
            self.error(f"expected an instruction, found '{op_tok.text}'", op_tok.line)
        parts = op_tok.text.split(".")
        # `.shared::cta` is `.shared` (PTX 7.8); other `a::b` qualifiers (`.L2::128B`,
        # `.shared::cluster`) stay whole modifiers
        opcode, mods = parts[0], tuple("shared" if p == "shared::cta" else p for p in parts[1:])
        operands: list[Operand] = []
        if not self.at(";"):
            while True:
                operands.append(self.operand())
                if not self.accept(","):
                    break
        end = self.expect(";")
        text = " ".join(self.module.lines[line - 1:end.line]).strip() if self.module.lines else ""
        return Instruction(opcode, mods, tuple(operands), line, text, guard)

    def operand(self) -> Operand:
        tok = self.peek()
        assert tok is not None
        if tok.text == "[":
            self.next()
            return self.address()
        if tok.text == "{":
            self.next()
            items: list[Operand] = []
            while not self.accept("}"):
                items.append(self.operand())
                self.accept(",")
            return Vec(tuple(items))
        if tok.text == "(":
            self.next()
            names: list[str] = []
            while not self.accept(")"):
                names.append(self.next().text)
                self.accept(",")
            return CallArgs(tuple(names))
        neg = False
        if tok.text == "!":
            self.next()
            neg = True
            tok = self.peek()
            assert tok is not None
        if tok.text == "-":
            self.next()
            nt = self.next()
            if nt.kind == "float":
                return _float_imm(nt.text, True)
            if nt.kind == "number":
                return self.number(nt, negate=True)
            self.error(f"bad operand '-{nt.text}'", nt.line)
        tok = self.next()
        if tok.kind == "float":
            return _float_imm(tok.text)
        if tok.kind == "number":
            return self.number(tok)
        if tok.kind == "ident":
            first: Operand = Reg(tok.text, neg)
            if self.accept("|"):
                return Pair(first, self.operand())
            if self.at("+") and not tok.text.startswith("%"):
                # symbol+offset used as a value (mov.u64 %rd, sym+8)
                self.next()
                off = _parse_int(self.next().text)
                return Addr(tok.text, off)
            return first
        self.error(f"unexpected operand '{tok.text}'", tok.line)
        raise AssertionError

    def number(self, tok: _Tok, negate: bool = False) -> Imm:
        t = tok.text
        if "." in t or (("e" in t or "E" in t) and not t[:2].lower() == "0x"):
            v = float(t)
            return Imm(-v if negate else v, True)
        v_int = _parse_int(t)
        return Imm(-v_int if negate else v_int)

    def address(self) -> Operand:
        base: str | None = None
        offset = 0
        if self.peek(1) is not None and self.peek(1).text == ",":  # type: ignore[union-attr]
            # texture/surface coordinates `[tex, {x, y}]`: kept as a vector operand; the
            # instructions that use them are refused when lifted
            items: list[Operand] = []
            while not self.accept("]"):
                items.append(self.operand())
                self.accept(",")
            return Vec(tuple(items))
        tok = self.next()
        if tok.kind == "ident":
            base = tok.text
        elif tok.kind == "number":
            offset = _parse_int(tok.text)
        else:
            self.error(f"bad address operand '{tok.text}'", tok.line)
        while not self.accept("]"):
            sign = self.next()
            if sign.text not in ("+", "-"):
                self.error(f"bad address operand near '{sign.text}'", sign.line)
            negative = sign.text == "-"
            if self.accept("-"):       # `[%r1+-4]`
                negative = not negative
            num = self.next()
            v = _parse_int(num.text)
            offset += -v if negative else v
        return Addr(base, offset)


def parse_ptx(text: str) -> Module:
    """Parse PTX text into a :class:`Module`.  Raises :class:`PTXError` with the line."""
    return _Parser(text).parse()
