"""The PTX abstract syntax tree: what the parser produces and lifting consumes.

Plain dataclasses; every statement remembers its 1-based PTX line so that diagnostics can
point at it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

# --- operands ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reg:
    """A register (`%r1`), a special register (`%tid.x`) or a parameter/variable name used
    as a value (`foo_param_0`, a global symbol in `mov.u64 %rd, g`)."""
    name: str
    negated: bool = False   # `!%p` as a predicate operand


@dataclass(frozen=True, slots=True)
class Imm:
    """An integer or floating-point immediate.  Floats keep their exact bits when written
    as `0f3F800000` / `0d...` (`bits` set), otherwise `value` is a Python float."""
    value: int | float
    is_float: bool = False
    bits: int | None = None       # exact IEEE bits for 0f/0d literals
    width: int | None = None      # 32 for 0f, 64 for 0d


@dataclass(frozen=True, slots=True)
class Addr:
    """A memory operand `[base+offset]`; base is a register or a symbol, or None for an
    absolute address `[1024]`."""
    base: str | None
    offset: int = 0


@dataclass(frozen=True, slots=True)
class Vec:
    """A vector operand `{%r1, %r2, _}`; `_` is a sink and appears as Reg('_')."""
    items: tuple[Operand, ...]


@dataclass(frozen=True, slots=True)
class Pair:
    """`%r10|%p1`: a second (predicate) destination."""
    first: Operand
    second: Operand


@dataclass(frozen=True, slots=True)
class CallArgs:
    """Parenthesized list of names in `call (ret), fn, (a, b)`."""
    names: tuple[str, ...]


Operand = Union[Reg, Imm, Addr, Vec, Pair, CallArgs]

# --- statements -------------------------------------------------------------------------


@dataclass(slots=True)
class Instruction:
    opcode: str                 # bare opcode: 'ld', 'add', 'bar'
    modifiers: tuple[str, ...]  # without dots: ('global', 'nc', 'f32')
    operands: tuple[Operand, ...]
    line: int
    text: str = ""
    guard: Reg | None = None    # `@%p` / `@!%p`

    @property
    def full_opcode(self) -> str:
        return ".".join((self.opcode, *self.modifiers))

    def has(self, *mods: str) -> bool:
        return any(m in self.modifiers for m in mods)


@dataclass(slots=True)
class Label:
    name: str
    line: int


@dataclass(slots=True)
class RegDecl:
    type: str          # 'b32', 'pred', 'f32' ...
    names: list[str]   # expanded: %r<3> -> %r0, %r1, %r2
    line: int


@dataclass(slots=True)
class VarDecl:
    """A `.global/.const/.shared/.local/.param` variable (module scope or function body)."""
    space: str                   # 'global' | 'const' | 'shared' | 'local' | 'param'
    type: str                    # element type: 'b8', 'f32', 'u64', ...
    name: str
    line: int
    align: int | None = None
    dims: tuple[int | None, ...] = ()   # () scalar; (None,) unsized extern array
    init: list[int | float | str] | None = None  # flattened initializer
    linkage: str = ""            # 'extern' | 'visible' | 'weak' | 'common' | ''
    vector: int = 1              # .v2/.v4 variables

    @property
    def elem_size(self) -> int:
        return type_size(self.type) * self.vector

    @property
    def size(self) -> int:
        n = 1
        for d in self.dims:
            n *= d if d is not None else 0
        return self.elem_size * n

    @property
    def alignment(self) -> int:
        return self.align or self.elem_size


@dataclass(slots=True)
class Param:
    name: str
    type: str
    line: int
    align: int | None = None
    dims: tuple[int, ...] = ()      # `.param .align 8 .b8 p[16]` for structs by value
    ptr_space: str | None = None    # `.ptr.global` attribute

    @property
    def size(self) -> int:
        n = type_size(self.type)
        for d in self.dims:
            n *= d
        return n

    @property
    def alignment(self) -> int:
        return self.align or type_size(self.type)


@dataclass(slots=True)
class Function:
    name: str
    kind: str                       # 'entry' | 'func'
    line: int
    linkage: str = ""               # 'visible' | 'extern' | 'weak' | ''
    params: list[Param] = field(default_factory=list)
    returns: list[Param] = field(default_factory=list)
    body: list[Instruction | Label] | None = None   # None: declaration only
    regs: dict[str, str] = field(default_factory=dict)   # register name -> type
    locals: list[VarDecl] = field(default_factory=list)  # .local/.shared/.param in body
    directives: dict[str, tuple[int, ...]] = field(default_factory=dict)  # .maxntid etc.
    end_line: int = 0
    # `prototype_0 : .callprototype (.param .b32 _) _ (.param .b64 _);`: the sizes in bytes
    # of an indirect call's (returns, parameters)
    prototypes: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)


@dataclass(slots=True)
class Module:
    version: str = ""
    target: tuple[str, ...] = ()
    address_size: int = 64
    variables: list[VarDecl] = field(default_factory=list)
    functions: dict[str, Function] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)   # the PTX text, for diagnostics
    _function_addresses: dict[str, int] | None = None

    @property
    def entries(self) -> list[Function]:
        return [f for f in self.functions.values() if f.kind == "entry" and f.body is not None]

    def function_addresses(self) -> dict[str, int]:
        """The value of the address of each device function whose address the module takes
        (in a variable's initializer, such as a vtable, or as an operand, `mov.u64 %rd, f`):
        cpuify inlines every call, so these are not code addresses but distinct numbers an
        indirect call dispatches on."""
        if self._function_addresses is None:
            taken: dict[str, int] = {}

            def note(name: str) -> None:
                fn = self.functions.get(name)
                if fn is not None and fn.kind == "func" and name not in taken:
                    taken[name] = FUNCTION_ADDRESS_BASE + 16 * len(taken)

            for var in self.variables:
                for v in var.init or ():
                    if isinstance(v, str):
                        note(v)
            for fn in self.functions.values():
                for stmt in fn.body or ():
                    if isinstance(stmt, Instruction) and stmt.opcode != "call":
                        for o in stmt.operands:
                            if isinstance(o, Reg):
                                note(o.name)
            self._function_addresses = taken
        return self._function_addresses

    def kernel_addresses(self) -> dict[str, int]:
        """The value of the address of each kernel (`.entry`) the module's code takes
        (`mov.u64 %rd, kernel`: a kernel launched from device code, dynamic parallelism):
        numbers a device launch finds the kernel by."""
        taken: dict[str, int] = {}
        for fn in self.functions.values():
            for stmt in fn.body or ():
                if isinstance(stmt, Instruction) and stmt.opcode != "call":
                    for o in stmt.operands:
                        if isinstance(o, Reg) and o.name not in taken:
                            k = self.functions.get(o.name)
                            if k is not None and k.kind == "entry":
                                taken[o.name] = KERNEL_ADDRESS_BASE + 16 * len(taken)
        return taken

    def source_line(self, line: int) -> str:
        if 1 <= line <= len(self.lines):
            return self.lines[line - 1]
        return ""


#: where the values of device-function addresses start (Module.function_addresses): not
#: null, aligned, and in no mapping a program could dereference
FUNCTION_ADDRESS_BASE = 0x7FF0_0000_0000
#: where the values of kernel addresses start (Module.kernel_addresses)
KERNEL_ADDRESS_BASE = 0x7FE0_0000_0000

_TYPE_SIZES = {
    "b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
    "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "tf32": 4,
    "b64": 8, "u64": 8, "s64": 8, "f64": 8, "pred": 1, "b128": 16,
}


def type_size(ptx_type: str) -> int:
    """Size in bytes of a PTX fundamental type."""
    return _TYPE_SIZES[ptx_type]


def is_ptx_type(word: str) -> bool:
    return word in _TYPE_SIZES
