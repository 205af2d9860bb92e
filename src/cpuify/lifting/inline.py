"""Inline device-function calls into their kernel, at the PTX statement level.

A kernel with `.func` calls becomes one flat statement list: callee registers and labels
are renamed per call site (`%r1` -> `%r1@c3`), callee `ret` branches to a label after the
call, and call-site parameter passing goes through `.param` pseudo-variables that lifting
turns into SSA values (see `ParamSlot` in ssa.py).  Barriers inside callees therefore end
up in the kernel's CFG like any other.  Recursion is refused (CUDA allows it; the CPU
thread-loop model needs a bounded call tree).  An indirect call (a virtual function, a
table of function pointers) becomes a switch over the functions whose address the module
takes and whose signature fits the call's prototype, each inlined in its case
(`_Inliner.indirect_call`); the addresses are numbers (`Module.function_addresses`).

Calls to `vprintf` become `Instruction('printf')`, `__assertfail` becomes `trap` with an
assert marker, `malloc`/`free` become `Instruction('malloc'/'free')`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cpuify.errors import PTXError, UnsupportedError
from cpuify.frontend.ptx_ast import (
    Addr, CallArgs, Function, Imm, Instruction, Label, Module, Operand, Pair, Reg, Vec, VarDecl,
)

BUILTIN_CALLS = ("vprintf", "__assertfail", "malloc", "free")
# what nvcc calls for a kernel launch, stream or sync inside device code (CUDA dynamic
# parallelism, in libcudadevrt): cudaGetParameterBuffer[V2], cudaLaunchDevice[V2],
# __cudaCDP2*, the device-side cudaDeviceSynchronize and stream functions
_DEVICE_LAUNCH = re.compile(r"^(?:__cudaCDP2\w*|cudaGetParameterBuffer\w*|cudaLaunchDevice\w*|"
                            r"cudaDeviceSynchronize\w*|cudaStream\w*|cudaEvent\w*)$")


@dataclass
class InlinedKernel:
    entry: Function
    body: list[Instruction | Label]
    regs: dict[str, str]                       # register -> PTX type (renamed callee regs too)
    locals: list[VarDecl] = field(default_factory=list)   # .local/.shared declared in bodies
    param_vars: dict[str, VarDecl] = field(default_factory=dict)  # call-site .param variables
    # callee parameters whose address the callee takes (`mov.b64 %rd, f_param_0` for a
    # by-value struct it indexes dynamically): real local memory that the call stores into
    memory_params: set[str] = field(default_factory=set)


class _Inliner:
    def __init__(self, module: Module, entry: Function) -> None:
        self.module = module
        self.entry = entry
        self.counter = 0
        self.out = InlinedKernel(entry, [], dict(entry.regs))

    def error(self, msg: str, line: int, cls: type[PTXError] = UnsupportedError) -> None:
        raise cls(msg, line=line, kernel=self.entry.name, source_line=self.module.source_line(line))

    def run(self) -> InlinedKernel:
        self.emit_function(self.entry, suffix="", stack=(self.entry.name,))
        return self.out

    def emit_function(self, func: Function, suffix: str, stack: tuple[str, ...]) -> None:
        for var in func.locals:
            renamed = VarDecl(var.space, var.type, var.name + suffix if var.space in ("local", "param") else var.name,
                              var.line, var.align, var.dims, var.init, var.linkage, var.vector)
            if var.space == "param":
                self.out.param_vars[renamed.name] = renamed
            elif var.space == "shared" and any(v.name == var.name for v in self.out.locals):
                continue   # a demoted __shared__ of a function inlined twice is one variable
            else:
                self.out.locals.append(renamed)
        if suffix:
            for r, t in func.regs.items():
                self.out.regs[r + suffix] = t
        local_names = {v.name for v in func.locals if v.space in ("local", "param")}
        param_names = {p.name for p in func.params} | {p.name for p in func.returns}

        def rename(name: str) -> str:
            if not suffix:
                return name
            if name.startswith("%") and name in func.regs:
                return name + suffix
            if name in local_names or name in param_names or name in labels:
                return name + suffix
            return name

        labels = {s.name for s in func.body or [] if isinstance(s, Label)}
        ret_label = f"$__ret{suffix}" if suffix else ""
        in_memory = _address_taken_params(func) if suffix else set()
        for p in func.params:
            if p.name in in_memory:
                # PTX puts the address of a device function's .param in the local window
                self.out.locals.append(VarDecl("local", "b8", p.name + suffix, p.line,
                                               max(p.alignment, 1), (p.size,)))
                self.out.memory_params.add(p.name + suffix)
        for stmt in func.body or []:
            if isinstance(stmt, Label):
                self.out.body.append(Label(rename(stmt.name), stmt.line))
                continue
            if stmt.opcode == "call":
                self.expand_call(stmt, rename, stack, func)
                continue
            if suffix and stmt.opcode == "ret":
                self.out.body.append(Instruction("bra", ("uni",), (Reg(ret_label),), stmt.line,
                                                 stmt.text, _rename_guard(stmt.guard, rename)))
                continue
            if in_memory and stmt.opcode == "ld" and "param" in stmt.modifiers and \
                    isinstance(stmt.operands[1], Addr) and stmt.operands[1].base is not None and \
                    (stmt.operands[1].base in in_memory or stmt.operands[1].base.startswith("%")):
                # (through a register: the address of one of these parameters, the only
                # parameter memory a device function can point into)
                stmt = Instruction("ld", tuple("local" if m == "param" else m for m in stmt.modifiers),
                                   stmt.operands, stmt.line, stmt.text, stmt.guard)
            self.out.body.append(_rename_instruction(stmt, rename))
        if suffix:
            self.out.body.append(Label(ret_label, func.end_line or func.line))

    def expand_call(self, stmt: Instruction, rename, stack: tuple[str, ...],  # type: ignore[no-untyped-def]
                    caller: Function) -> None:
        ops = list(stmt.operands)
        rets: tuple[str, ...] = ()
        if ops and isinstance(ops[0], CallArgs):
            rets = ops.pop(0).names  # type: ignore[union-attr]
        if not ops or not isinstance(ops[0], Reg):
            self.error("malformed call", stmt.line, PTXError)
        target = ops.pop(0).name  # type: ignore[union-attr]
        args: tuple[str, ...] = ()
        if ops and isinstance(ops[0], CallArgs):
            args = ops.pop(0).names  # type: ignore[union-attr]
        rets = tuple(rename(r) for r in rets)
        args = tuple(rename(a) for a in args)
        guard = _rename_guard(stmt.guard, rename)
        if target.startswith("%"):
            prototype = ops[0].name if ops and isinstance(ops[0], Reg) else ""
            self.indirect_call(stmt, rename(target), caller.prototypes.get(prototype), rets, args,
                               guard, stack)
            return
        if ops:
            self.error("malformed call", stmt.line, PTXError)
        if target in BUILTIN_CALLS:
            op = {"vprintf": "printf", "__assertfail": "assertfail"}.get(target, target)
            self.out.body.append(Instruction(op, (), (CallArgs(rets), CallArgs(args)), stmt.line,
                                             stmt.text, guard))
            return
        callee = self.module.functions.get(target)
        if (callee is None or callee.body is None) and _DEVICE_LAUNCH.match(target):
            self.error(f"dynamic parallelism (a kernel launching a kernel: the call to '{target}') "
                       "is not supported by cpuify; launch the child kernel from the host",
                       stmt.line)
        if callee is None or callee.body is None:
            self.error(f"call to '{target}', which has no body in this PTX module "
                       "(external device functions need -rdc linking, which is not supported here)",
                       stmt.line)
        assert callee is not None
        skip = None
        if guard is not None:
            # a guarded call: branch around the inlined body
            self.counter += 1
            skip = f"$__skipcall@c{self.counter}"
            self.out.body.append(Instruction("bra", ("uni",), (Reg(skip),), stmt.line, stmt.text,
                                             Reg(guard.name, not guard.negated)))
        self.inline_body(stmt, callee, rets, args, stack)
        if skip is not None:
            self.out.body.append(Label(skip, stmt.line))

    def inline_body(self, stmt: Instruction, callee: Function, rets: tuple[str, ...],
                    args: tuple[str, ...], stack: tuple[str, ...]) -> None:
        """The callee's body in place of the call, its parameters copied in and out."""
        target = callee.name
        if target in stack:
            self.error(f"recursive call to '{target}' is not supported "
                       f"(call chain: {' -> '.join(stack + (target,))})", stmt.line)
        if len(args) != len(callee.params) or len(rets) != len(callee.returns):
            self.error(f"call to '{target}' passes {len(args)} argument(s), the function "
                       f"takes {len(callee.params)}", stmt.line, PTXError)
        self.counter += 1
        suffix = f"@c{self.counter}"
        for actual, formal in zip(args, callee.params):
            self.out.body.append(Instruction("param_copy", (), (Reg(formal.name + suffix), Reg(actual)),
                                             stmt.line, stmt.text))
        self.emit_function(callee, suffix, stack + (target,))
        for actual, formal in zip(rets, callee.returns):
            self.out.body.append(Instruction("param_copy", (), (Reg(actual), Reg(formal.name + suffix)),
                                             stmt.line, stmt.text))
        for formal in list(callee.params) + list(callee.returns):
            self.out.param_vars[formal.name + suffix] = VarDecl(
                "param", formal.type, formal.name + suffix, formal.line, formal.align, formal.dims)

    def indirect_call(self, stmt: Instruction, pointer: str,
                      prototype: tuple[tuple[int, ...], tuple[int, ...]] | None,
                      rets: tuple[str, ...], args: tuple[str, ...], guard: Reg | None,
                      stack: tuple[str, ...]) -> None:
        """`call (ret), %rd, (args), prototype;` (virtual functions, function-pointer
        tables): a switch over the functions that could be called, those whose address the
        module takes and whose signature fits the prototype, each inlined in its case.  A
        pointer to none of them traps."""
        if prototype is None:
            self.error("indirect call without a call prototype: the functions it may call "
                       "are not known", stmt.line)
        assert prototype is not None
        addresses = self.module.function_addresses()
        candidates = [f for name in addresses
                      if (f := self.module.functions[name]).body is not None
                      and tuple(p.size for p in f.returns) == prototype[0]
                      and tuple(p.size for p in f.params) == prototype[1]]
        self.counter += 1
        n = self.counter
        end = f"$__icall_end@{n}"
        pred = f"%__icall_p@{n}"
        self.out.regs[pred] = "pred"
        if guard is not None:
            self.out.body.append(Instruction("bra", ("uni",), (Reg(end),), stmt.line, stmt.text,
                                             Reg(guard.name, not guard.negated)))
        for k, f in enumerate(candidates):
            self.out.body.append(Instruction("setp", ("eq", "u64"),
                                             (Reg(pred), Reg(pointer), Imm(addresses[f.name])),
                                             stmt.line, stmt.text))
            self.out.body.append(Instruction("bra", (), (Reg(f"$__icall{k}@{n}"),), stmt.line,
                                             stmt.text, Reg(pred)))
        # a pointer to no function of this module that fits the call
        self.out.body.append(Instruction("trap", (), (), stmt.line, stmt.text))
        for k, f in enumerate(candidates):
            self.out.body.append(Label(f"$__icall{k}@{n}", stmt.line))
            self.inline_body(stmt, f, rets, args, stack)
            self.out.body.append(Instruction("bra", ("uni",), (Reg(end),), stmt.line, stmt.text))
        self.out.body.append(Label(end, stmt.line))


def _address_taken_params(func: Function) -> set[str]:
    """The parameters of `func` used as values (their address taken), not only loaded."""
    names = {p.name for p in func.params}
    taken: set[str] = set()

    def visit(o: Operand) -> None:
        if isinstance(o, Reg) and o.name in names:
            taken.add(o.name)
        elif isinstance(o, Vec):
            for item in o.items:
                visit(item)
        elif isinstance(o, Pair):
            visit(o.first)
            visit(o.second)

    for stmt in func.body or []:
        if isinstance(stmt, Instruction):
            for o in stmt.operands:
                if isinstance(o, Addr) and o.base in names and stmt.opcode not in ("ld", "st"):
                    taken.add(o.base)     # `mov.u64 %rd, f_param_0+8`
                visit(o)
    return taken


def _rename_guard(guard: Reg | None, rename) -> Reg | None:  # type: ignore[no-untyped-def]
    if guard is None:
        return None
    return Reg(rename(guard.name), guard.negated)


def _rename_operand(op: Operand, rename) -> Operand:  # type: ignore[no-untyped-def]
    if isinstance(op, Reg):
        return Reg(rename(op.name), op.negated)
    if isinstance(op, Addr):
        return Addr(rename(op.base) if op.base else None, op.offset)
    if isinstance(op, Vec):
        return Vec(tuple(_rename_operand(o, rename) for o in op.items))
    if isinstance(op, Pair):
        return Pair(_rename_operand(op.first, rename), _rename_operand(op.second, rename))
    if isinstance(op, CallArgs):
        return CallArgs(tuple(rename(n) for n in op.names))
    return op


def _rename_instruction(stmt: Instruction, rename) -> Instruction:  # type: ignore[no-untyped-def]
    return Instruction(stmt.opcode, stmt.modifiers,
                       tuple(_rename_operand(o, rename) for o in stmt.operands),
                       stmt.line, stmt.text, _rename_guard(stmt.guard, rename))


def inline_calls(module: Module, entry: Function) -> InlinedKernel:
    return _Inliner(module, entry).run()
