"""Finding the parallel structure of a `upir.kernel` op:

    upir.kernel @name {
      upir.launch_prologue { ... }     // optional: runs once per launch, before any block
      upir.grid_parallel {             // blocks of the grid
        upir.block_parallel { ... }    // threads of one block: the block body
      }
    }
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cpuify.errors import IRError
from cpuify.ir.core import Operation, Region, Value
from cpuify.ir.modifiers import type_size


def _child(parent: Operation, name: str) -> Operation | None:
    for op in parent.regions[0].entry.ops:
        if op.name == name:
            return op
    return None


def grid_parallel(kernel: Operation) -> Operation:
    grid = _child(kernel, "upir.grid_parallel")
    if grid is None:
        raise IRError(f"kernel '{kernel.attributes.get('sym_name')}' has no upir.grid_parallel")
    return grid


def block_parallel(kernel: Operation) -> Operation:
    block = _child(grid_parallel(kernel), "upir.block_parallel")
    if block is None:
        raise IRError(f"kernel '{kernel.attributes.get('sym_name')}' has no upir.block_parallel")
    return block


def block_body(kernel: Operation) -> Region:
    """The region the threads of a block run (a CFG)."""
    return block_parallel(kernel).regions[0]


def launch_prologue(kernel: Operation) -> Operation | None:
    """The `upir.launch_prologue` op: code hoisted out of the grid, run once per launch."""
    return _child(kernel, "upir.launch_prologue")


#: on the soft barriers split-row-streams inserts (one row of an array per pass): the
#: segment resuming at the last of those that follow the kernel's start one another is where
#: code generation prefetches the next block's lines (after the block's last rows are loaded)
ROW_STREAM = "row_stream"


def lockstep_counters(region: Region) -> set[Value]:
    """The iteration counters that interchange-thread-strided-loops recorded on its soft
    barriers (`lockstep`: indices of the header's arguments): the same in every thread
    resuming there."""
    out: set[Value] = set()
    for b in region.blocks:
        for op in b.ops:
            if op.name == "upir.barrier" and op.attributes.get("soft"):
                out.update(b.args[i] for i in op.attributes.get("lockstep", []))
    return out


# --- what a kernel declares: parameters, variables, directives (all in the IR) -------------

@dataclass(frozen=True)
class KernelParam:
    """A kernel parameter in the packed parameter buffer."""
    name: str
    ptx_type: str
    offset: int          # byte offset in the packed parameter buffer
    size: int
    align: int
    dims: tuple[int, ...] = ()


@dataclass
class Variable:
    """A variable a `upir.global` op declares (module-scope `.global/.const/.shared`, or a
    kernel's own `.shared`/`.local`).  `dims`: () for a scalar, None for the unsized
    dimension of an `extern __shared__` array."""
    space: str
    type: str
    name: str
    line: int = 0
    align: int | None = None
    dims: tuple[int | None, ...] = ()
    init: list | None = None  # type: ignore[type-arg]
    linkage: str = ""
    vector: int = 1

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


def variable_op(v: Any, functions: dict[str, int] | None = None) -> Operation:
    """The `upir.global` op declaring v (a Variable or anything with its fields); names of
    device functions in its initializer (vtables) become the numbers in `functions`."""
    attrs: dict[str, Any] = {"sym_name": v.name, "space": v.space, "type": v.type,
                             "line": v.line, "align": v.align or 0,
                             "dims": [-1 if d is None else d for d in v.dims],
                             "linkage": v.linkage, "vector": v.vector}
    if v.init is not None:
        attrs["init"] = [functions.get(x, x) if functions and isinstance(x, str) else x
                         for x in v.init]
    return Operation("upir.global", attributes=attrs)


def variable_of(op: Operation) -> Variable:
    a = op.attributes
    return Variable(a["space"], a["type"], a["sym_name"], int(a.get("line", 0)),
                    int(a.get("align", 0)) or None,
                    tuple(None if d == -1 else int(d) for d in a.get("dims", [])),
                    list(a["init"]) if "init" in a else None, a.get("linkage", ""),
                    int(a.get("vector", 1)))


@dataclass
class KernelView:
    """A kernel as code generation and the interpreter read it: everything comes from the
    `upir.kernel` op (attributes `sym_name`, `param_size`, `params`, `directives`, and the
    `upir.global` ops of its region), so a kernel printed and parsed back compiles alike."""
    name: str
    op: Operation
    params: list[KernelParam]
    param_size: int
    shared_vars: list[Variable]
    local_vars: list[Variable]
    directives: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @staticmethod
    def from_op(op: Operation) -> "KernelView":
        a = op.attributes
        params = [KernelParam(str(p[0]), str(p[1]), int(p[2]), int(p[3]), int(p[4]),
                              tuple(int(d) for d in p[5])) for p in a.get("params", [])]
        variables = [variable_of(o) for o in op.regions[0].entry.ops if o.name == "upir.global"]
        directives = {str(k): tuple(int(x) for x in vs) for k, vs in a.get("directives", [])}
        return KernelView(str(a["sym_name"]), op, params, int(a.get("param_size", 0)),
                          [v for v in variables if v.space == "shared"],
                          [v for v in variables if v.space == "local"], directives)


def describe_kernel(op: Operation, params: list[KernelParam], variables: list[Any],
                    directives: dict[str, tuple[int, ...]]) -> None:
    """Record a kernel's parameters, own variables and directives in its op."""
    op.attributes["params"] = [[p.name, p.ptx_type, p.offset, p.size, p.align, list(p.dims)]
                               for p in params]
    op.attributes["directives"] = [[k, list(v)] for k, v in directives.items()]
    top = op.regions[0].entry
    for i, v in enumerate(variables):
        decl = variable_op(v)
        decl.parent = top
        top.ops.insert(i, decl)


@dataclass
class ModuleView:
    """A module as code generation reads it: its module-scope variables (`upir.global` ops
    at the top level) and its kernels (`upir.kernel` ops), e.g. an MLIR file `cpuify ir
    --mlir` printed and parse_module read back."""
    variables: list[Variable]
    kernels: list[KernelView]

    @staticmethod
    def from_ops(ops: list[Operation]) -> "ModuleView":
        return ModuleView([variable_of(op) for op in ops if op.name == "upir.global"],
                          [KernelView.from_op(op) for op in ops if op.name == "upir.kernel"])
