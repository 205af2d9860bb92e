"""Inline device-function calls into their kernel, at the PTX statement level.

A kernel with `.func` calls becomes one flat statement list: callee registers and labels
are renamed per call site (`%r1` -> `%r1@c3`), callee `ret` branches to a label after the
call, and call-site parameter passing goes through `.param` pseudo-variables that lifting
turns into SSA values (see `ParamSlot` in ssa.py).  Barriers inside callees therefore end
up in the kernel's CFG like any other.  The functions of a recursive cycle cannot be
inlined into themselves: a call into the cycle becomes a *recursion engine*, the cycle's
functions emitted once with calls between them through a call stack per thread
(`_Inliner.run_engine`, recursion.py).  An indirect call (a virtual function, a
table of function pointers) becomes a switch over the functions whose address the module
takes and whose signature fits the call's prototype, each inlined in its case
(`_Inliner.indirect_call`); the addresses are numbers (`Module.function_addresses`).

Calls to `vprintf` become `Instruction('printf')`, `__assertfail` becomes `trap` with an
assert marker, `malloc`/`free` become `Instruction('malloc'/'free')`.  Calls of the CUDA
device runtime (dynamic parallelism: `cudaGetParameterBufferV2`, `cudaLaunchDeviceV2`,
device streams, `cudaGetLastError`, `cudaMalloc`) become `launch_buffer`/`launch_device`
and plain PTX (`_Inliner.device_runtime_call`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cpuify.errors import PTXError, UnsupportedError
from cpuify.frontend.ptx_ast import (
    Addr, CallArgs, Function, Imm, Instruction, Label, Module, Operand, Pair, Reg, Vec, VarDecl,
    type_size,
)
from cpuify.lifting.recursion import live_after, recursive_groups

BUILTIN_CALLS = ("vprintf", "__assertfail", "malloc", "free")
# what nvcc calls for a kernel launch, stream or sync inside device code (CUDA dynamic
# parallelism, in libcudadevrt): cudaGetParameterBuffer[V2], cudaLaunchDevice[V2],
# __cudaCDP2*, the device-side cudaDeviceSynchronize and stream functions
_DEVICE_LAUNCH = re.compile(r"^(?:__cudaCDP2\w*|cudaGetParameterBuffer\w*|cudaLaunchDevice\w*|"
                            r"cudaDeviceSynchronize\w*|cudaStream\w*|cudaEvent\w*)$")

# the device runtime functions cpuify runs (CUDA 12+ names them __cudaCDP2<name>) -> how many
# arguments they take
_DEVICE_RUNTIME = {"GetParameterBufferV2": 4, "LaunchDeviceV2": 2, "GetLastError": 0,
                   "PeekAtLastError": 0, "StreamCreateWithFlags": 2, "StreamDestroy": 1,
                   "Malloc": 2, "Free": 1}
_DEVICE_ERROR = "%__dperr"
_DEVICE_RUNTIME_REGS = {_DEVICE_ERROR: "u32", "%__dpstat": "u32", "%__dppred": "pred",
                        "%__dpaddr": "u64", "%__dpval": "u64"}
# the handle of a stream created in device code (all of a block's streams are one: launches
# into it run after the parent grid, in launch order, which CUDA allows)
_DEVICE_STREAM = 0x100


def _device_runtime_name(target: str) -> str:
    for prefix in ("__cudaCDP2", "cuda"):
        if target.startswith(prefix):
            return target[len(prefix):]
    return target


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


# registers of the recursion engines (one set per kernel): the call stack's base, size limit
# and top (byte offsets), and temporaries that are never live across a call
_STACK, _LIMIT, _TOP = "%__stk", "%__stklim", "%__sp"
_ENGINE_REGS = {_STACK: "u64", _LIMIT: "u64", _TOP: "u64", "%__sa": "u64", "%__sid": "u32",
                "%__spv": "u16", "%__sovf": "pred", "%__sdp": "pred", "%__sla": "u64"}
# instructions a recursion cannot contain: every thread of a block (warp) must reach them
# together, which a per-thread call stack cannot promise
_COLLECTIVES = {"bar", "barrier", "shfl", "vote", "match", "redux", "activemask"}
# how a register of each type is kept on the call stack
_STACK_TYPE = {"f16": "b16", "bf16": "b16", "f16x2": "b32", "bf16x2": "b32"}


@dataclass
class _Frame:
    """A function of a recursion engine while it is emitted."""
    func: Function
    suffix: str
    fp: str                                    # register: this activation's local frame
    local_size: int = 0
    local_offsets: dict[str, int] = field(default_factory=dict)   # renamed .local -> offset
    start: int = 0                             # where its body begins in the kernel's body

    def add_local(self, var: VarDecl) -> None:
        align = max(var.align or 1, 1)
        self.local_size = (self.local_size + align - 1) // align * align
        self.local_offsets[var.name] = self.local_size
        self.local_size += var.size


@dataclass
class _Engine:
    """The functions of one recursive cycle, emitted once for one call from outside it."""
    n: int
    group: frozenset[str]
    suffixes: dict[str, str]
    # return site -> (its placeholder's engine-site key, the callee, rets, args)
    sites: dict[int, tuple[Function, tuple[str, ...], tuple[str, ...], str]] = field(default_factory=dict)

    def entry(self, name: str) -> str:
        return f"$__rentry{self.suffixes[name]}"

    @property
    def dispatch(self) -> str:
        return f"$__rdispatch@r{self.n}"

    def return_site(self, k: int) -> str:
        return f"$__rsite{k}@r{self.n}"


class _Inliner:
    def __init__(self, module: Module, entry: Function) -> None:
        self.module = module
        self.entry = entry
        self.counter = 0
        self.out = InlinedKernel(entry, [], dict(entry.regs))
        self.recursive = recursive_groups(module)
        self.engines: list[_Engine] = []       # the recursion engines being emitted, innermost last
        self.frame: _Frame | None = None       # the recursive function being emitted

    def error(self, msg: str, line: int, cls: type[PTXError] = UnsupportedError) -> None:
        raise cls(msg, line=line, kernel=self.entry.name, source_line=self.module.source_line(line))

    def run(self) -> InlinedKernel:
        self.emit_function(self.entry, suffix="", stack=(self.entry.name,))
        if _DEVICE_ERROR in self.out.regs:
            # the thread's last device-runtime error (device-side cudaGetLastError)
            self.out.body.insert(0, Instruction("mov", ("u32",), (Reg(_DEVICE_ERROR), Imm(0)),
                                                self.entry.line, "(the device runtime's last error)"))
        return self.out

    def emit_function(self, func: Function, suffix: str, stack: tuple[str, ...],
                      frame: _Frame | None = None) -> None:
        """Emit `func`'s body with its registers, labels and variables renamed by `suffix`;
        with `frame`, as a function of a recursion engine (its locals on the call stack)."""
        for var in func.locals:
            renamed = VarDecl(var.space, var.type, var.name + suffix if var.space in ("local", "param") else var.name,
                              var.line, var.align, var.dims, var.init, var.linkage, var.vector)
            if var.space == "param":
                self.out.param_vars[renamed.name] = renamed
            elif var.space == "local" and frame is not None:
                frame.add_local(renamed)     # one copy per activation, on the call stack
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
        if frame is not None:
            self.frame_prologue(func, frame, in_memory)
        outer_frame = self.frame
        if frame is not None:
            self.frame = frame
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
            if self.engines:
                self.emit_in_engine(_rename_instruction(stmt, rename))
            else:
                self.out.body.append(_rename_instruction(stmt, rename))
        if suffix:
            self.out.body.append(Label(ret_label, func.end_line or func.line))
        if frame is not None:
            self.frame = outer_frame
            self.frame_epilogue(func, frame)

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
        if (callee is None or callee.body is None) and _device_runtime_name(target) in _DEVICE_RUNTIME:
            skip = None
            if guard is not None:
                self.counter += 1
                skip = f"$__skipcall@c{self.counter}"
                self.out.body.append(Instruction("bra", ("uni",), (Reg(skip),), stmt.line, stmt.text,
                                                 Reg(guard.name, not guard.negated)))
            self.device_runtime_call(stmt, _device_runtime_name(target), rets, args)
            if skip is not None:
                self.out.body.append(Label(skip, stmt.line))
            return
        if (callee is None or callee.body is None) and _DEVICE_LAUNCH.match(target):
            name = _device_runtime_name(target)
            if name.startswith("DeviceSynchronize"):
                self.error("cudaDeviceSynchronize() in device code (a parent grid waiting for its "
                           "child grids) is not supported: CUDA 12 removed it; child grids "
                           "complete before their parent grid counts as complete, so the host "
                           "sees their results after its own synchronization", stmt.line)
            self.error(f"the device runtime function '{target}' (dynamic parallelism) is not "
                       "supported by cpuify; supported in device code: kernel launches "
                       "(<<<...>>> into the NULL stream, a created stream, cudaStreamTailLaunch "
                       "or cudaStreamFireAndForget), cudaStreamCreateWithFlags/Destroy, "
                       "cudaGetLastError/PeekAtLastError, cudaMalloc/cudaFree", stmt.line)
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
        self.call_function(stmt, callee, rets, args, stack)
        if skip is not None:
            self.out.body.append(Label(skip, stmt.line))

    def call_function(self, stmt: Instruction, callee: Function, rets: tuple[str, ...],
                      args: tuple[str, ...], stack: tuple[str, ...]) -> None:
        """A call of `callee`: inlined, or for a function of a recursive cycle, a call on
        the call stack (inside the cycle's engine) or a new engine (from outside)."""
        group = self.recursive.get(callee.name)
        if group is None:
            self.inline_body(stmt, callee, rets, args, stack)
        elif self.engines and callee.name in self.engines[-1].group:
            self.recursive_call(stmt, callee, rets, args)
        else:
            self.run_engine(stmt, callee, group, rets, args, stack)

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

    # -- the device runtime (dynamic parallelism) --
    def device_runtime_call(self, stmt: Instruction, name: str, rets: tuple[str, ...],
                            args: tuple[str, ...]) -> None:
        """A call of the CUDA device runtime (cudadevrt): a kernel launch's parameter buffer
        and launch, streams, the last error, cudaMalloc/cudaFree."""
        for r, t in _DEVICE_RUNTIME_REGS.items():
            self.out.regs[r] = t
        want = _DEVICE_RUNTIME[name]
        if len(args) != want:
            self.error(f"call to the device runtime's '{name}' passes {len(args)} argument(s), "
                       f"it takes {want}", stmt.line, PTXError)
        err, stat, pred = Reg(_DEVICE_ERROR), Reg("%__dpstat"), Reg("%__dppred")

        def result(value: Operand) -> None:
            for r in rets[:1]:
                self.emit("st", ("param", "b32"), (Addr(r, 0), value), stmt)

        def note_error() -> None:
            # a failure becomes the thread's last error
            self.emit("setp", ("ne", "u32"), (pred, stat, Imm(0)), stmt)
            self.emit("mov", ("u32",), (err, stat), stmt, pred)

        if name == "GetParameterBufferV2":
            # (kernel, grid dim3, block dim3, dynamic shared bytes) -> the child's parameter
            # buffer, or null (an unknown kernel, a bad configuration: the status says which)
            self.out.body.append(Instruction("launch_buffer", (), (CallArgs(rets), CallArgs(args), stat),
                                             stmt.line, stmt.text))
            note_error()
        elif name == "LaunchDeviceV2":
            self.out.body.append(Instruction("launch_device", (), (CallArgs(rets), CallArgs(args)),
                                             stmt.line, stmt.text))
            for r in rets[:1]:
                self.emit("ld", ("param", "b32"), (stat, Addr(r, 0)), stmt)
                note_error()
        elif name in ("GetLastError", "PeekAtLastError"):
            result(err)
            if name == "GetLastError":
                self.emit("mov", ("u32",), (err, Imm(0)), stmt)
        elif name == "StreamCreateWithFlags":
            # a stream of the block: its launches run after the parent grid, in order
            self.emit("ld", ("param", "b64"), (Reg("%__dpaddr"), Addr(args[0], 0)), stmt)
            self.emit("mov", ("u64",), (Reg("%__dpval"), Imm(_DEVICE_STREAM)), stmt)
            self.emit("st", ("u64",), (Addr("%__dpaddr", 0), Reg("%__dpval")), stmt)
            result(Imm(0))
        elif name == "StreamDestroy":
            result(Imm(0))
        elif name == "Malloc":
            self.counter += 1
            slot = f"__dpmalloc@{self.counter}"
            self.out.param_vars[slot] = VarDecl("param", "b64", slot, stmt.line)
            self.out.body.append(Instruction("malloc", (), (CallArgs((slot,)), CallArgs(args[1:])),
                                             stmt.line, stmt.text))
            self.emit("ld", ("param", "b64"), (Reg("%__dpval"), Addr(slot, 0)), stmt)
            self.emit("ld", ("param", "b64"), (Reg("%__dpaddr"), Addr(args[0], 0)), stmt)
            self.emit("st", ("u64",), (Addr("%__dpaddr", 0), Reg("%__dpval")), stmt)
            self.emit("setp", ("eq", "u64"), (pred, Reg("%__dpval"), Imm(0)), stmt)
            self.emit("selp", ("u32",), (stat, Imm(2), Imm(0), pred), stmt)   # cudaErrorMemoryAllocation
            note_error()
            result(stat)
        elif name == "Free":
            self.out.body.append(Instruction("free", (), (CallArgs(()), CallArgs(args)),
                                             stmt.line, stmt.text))
            result(Imm(0))

    # -- recursion engines (see recursion.py) --
    def emit(self, opcode: str, modifiers: tuple[str, ...], operands: tuple[Operand, ...],
             stmt: Instruction, guard: Reg | None = None) -> None:
        self.out.body.append(Instruction(opcode, modifiers, operands, stmt.line, stmt.text, guard))

    def stack_check(self, stmt: Instruction) -> None:
        """Trap with a stack overflow when the call stack's top passed its limit."""
        self.emit("setp", ("gt", "u64"), (Reg("%__sovf"), Reg(_TOP), Reg(_LIMIT)), stmt)
        self.emit("trap", ("stack_overflow",), (), stmt, Reg("%__sovf"))

    def run_engine(self, stmt: Instruction, callee: Function, group: frozenset[str],
                   rets: tuple[str, ...], args: tuple[str, ...], stack: tuple[str, ...]) -> None:
        """A call from outside a recursive cycle into it: the cycle's functions, each once,
        run on the thread's call stack until the called function returns."""
        for member in sorted(group):
            f = self.module.functions[member]
            for p in list(f.params) + list(f.returns):
                if p.dims:
                    self.error(f"the recursive device function '{member}' passes a structure by "
                               "value (parameter or result): not supported in recursion", stmt.line)
        for r, t in _ENGINE_REGS.items():
            self.out.regs[r] = t
        self.counter += 1
        n = self.counter
        members = sorted(group)
        engine = _Engine(n, group, {m: f"@r{n}_{k}" for k, m in enumerate(members)})
        if not self.engines:
            # the outermost call: this thread's call stack starts empty
            self.emit("call_stack", (), (Reg(_STACK), Reg(_LIMIT)), stmt)
            self.emit("mov", ("u64",), (Reg(_TOP), Imm(0)), stmt)
        # the bottom frame: return site 0, back to this call
        self.emit("add", ("u64",), (Reg("%__sa"), Reg(_STACK), Reg(_TOP)), stmt)
        self.emit("add", ("u64",), (Reg(_TOP), Reg(_TOP), Imm(16)), stmt)
        self.stack_check(stmt)
        self.emit("mov", ("u32",), (Reg("%__sid"), Imm(0)), stmt)
        self.emit("st", ("u32",), (Addr("%__sa", 8), Reg("%__sid")), stmt)
        suffix = engine.suffixes[callee.name]
        for actual, formal in zip(args, callee.params):
            self.emit("param_copy", (), (Reg(formal.name + suffix), Reg(actual)), stmt)
        self.emit("bra", ("uni",), (Reg(engine.entry(callee.name)),), stmt)
        self.engines.append(engine)
        for member in members:
            f = self.module.functions[member]
            sfx = engine.suffixes[member]
            for p in list(f.params) + list(f.returns):
                self.out.param_vars[p.name + sfx] = VarDecl("param", p.type, p.name + sfx, p.line,
                                                            p.align, p.dims)
            self.out.body.append(Label(engine.entry(member), f.line))
            self.emit_function(f, sfx, stack + (member,), _Frame(f, sfx, f"%__fp{sfx}"))
        self.engines.pop()
        # a function of the cycle returned: back to the return site its frame names
        self.out.body.append(Label(engine.dispatch, stmt.line))
        self.emit("add", ("u64",), (Reg("%__sa"), Reg(_STACK), Reg(_TOP)), stmt)
        self.emit("ld", ("u32",), (Reg("%__sid"), Addr("%__sa", -8)), stmt)
        for k in engine.sites:
            self.emit("setp", ("eq", "u32"), (Reg("%__sdp"), Reg("%__sid"), Imm(k)), stmt)
            self.emit("bra", (), (Reg(engine.return_site(k)),), stmt, Reg("%__sdp"))
        self.emit("sub", ("u64",), (Reg(_TOP), Reg(_TOP), Imm(16)), stmt)
        if len(rets) != len(callee.returns):
            self.error(f"call to '{callee.name}' expects {len(rets)} result(s), the function "
                       f"returns {len(callee.returns)}", stmt.line, PTXError)
        for actual, formal in zip(rets, callee.returns):
            self.emit("param_copy", (), (Reg(actual), Reg(formal.name + suffix)), stmt)

    def recursive_call(self, stmt: Instruction, callee: Function, rets: tuple[str, ...],
                       args: tuple[str, ...]) -> None:
        """A call inside the recursive cycle: a placeholder, replaced by the push, jump and
        pop once the caller's body (and so what is live across the call) is known."""
        engine = self.engines[-1]
        if len(args) != len(callee.params) or len(rets) != len(callee.returns):
            self.error(f"call to '{callee.name}' passes {len(args)} argument(s), the function "
                       f"takes {len(callee.params)}", stmt.line, PTXError)
        k = len(engine.sites) + 1
        assert self.frame is not None
        engine.sites[k] = (callee, rets, args, self.frame.suffix)
        self.emit("__rcall", (str(engine.n), str(k)), (), stmt)

    def frame_prologue(self, func: Function, frame: _Frame, in_memory: set[str]) -> None:
        if in_memory:
            self.error(f"the recursive device function '{func.name}' takes the address of its "
                       "parameter: not supported in recursion", func.line)
        frame.local_size = (frame.local_size + 15) // 16 * 16
        frame.start = len(self.out.body)
        if frame.local_size:
            self.out.regs[frame.fp] = "u64"
            stmt = Instruction("mov", (), (), func.line, f"(the local frame of '{func.name}')")
            self.emit("add", ("u64",), (Reg(frame.fp), Reg(_STACK), Reg(_TOP)), stmt)
            self.emit("add", ("u64",), (Reg(_TOP), Reg(_TOP), Imm(frame.local_size)), stmt)
            self.stack_check(stmt)

    def frame_epilogue(self, func: Function, frame: _Frame) -> None:
        """After the body: pop the local frame and return; then replace the body's call
        placeholders by calls that keep what is live across them on the stack."""
        engine = self.engines[-1]
        stmt = Instruction("ret", (), (), func.end_line or func.line, f"(return from '{func.name}')")
        if frame.local_size:
            self.emit("sub", ("u64",), (Reg(_TOP), Reg(_TOP), Imm(frame.local_size)), stmt)
        self.emit("bra", ("uni",), (Reg(engine.dispatch),), stmt)
        start = frame.start
        body = self.out.body[start:]
        sites = [i for i, st in enumerate(body) if isinstance(st, Instruction)
                 and st.opcode == "__rcall" and st.modifiers[0] == str(engine.n)]
        if not sites:
            return
        params = {p.name + frame.suffix for p in func.params}
        live = live_after(body, sites, params)
        out: list[Instruction | Label] = []
        site_set = set(sites)
        for i, st in enumerate(body):
            if i not in site_set:
                out.append(st)
                continue
            assert isinstance(st, Instruction)
            mark = len(self.out.body)
            self.expand_recursive_call(st, engine, int(st.modifiers[1]), live[i], func)
            out.extend(self.out.body[mark:])
            del self.out.body[mark:]
        self.out.body[start:] = out

    def expand_recursive_call(self, stmt: Instruction, engine: _Engine, k: int, live: set[str],
                              func: Function) -> None:
        callee, rets, args, _ = engine.sites[k]
        # what the frame keeps: (register or parameter slot, PTX type to store it as, size)
        items: list[tuple[str, str, int]] = []
        for name in sorted(live):
            if name.startswith("param:"):
                t = name.rsplit(":", 1)[1]
                items.append((name, t, type_size(t)))
                continue
            if name in _ENGINE_REGS or name in _DEVICE_RUNTIME_REGS:
                continue        # (the device runtime's last error is the thread's, not a frame's)
            t = self.out.regs.get(name)
            if t is None:
                continue               # a special register
            if t == "pred":
                items.append((name, "u16", 2))
            elif t == "b128":
                self.error(f"a 128-bit register is live across the recursive call to "
                           f"'{callee.name}': not supported", stmt.line)
            else:
                t = _STACK_TYPE.get(t, t)
                items.append((name, t, type_size(t)))
        items.sort(key=lambda it: -it[2])
        offsets: list[int] = []
        off = 0
        for _, _, size in items:
            offsets.append(off)
            off += size
        # the return site's number in the frame's last 8 bytes, where the dispatch reads it
        size = ((off + 7) // 8 * 8 + 8 + 15) // 16 * 16
        id_off = size - 8
        sa = Reg("%__sa")

        def temp(t: str) -> Reg:
            name = f"%__stmp_{t}"
            self.out.regs[name] = t
            return Reg(name)

        self.emit("add", ("u64",), (sa, Reg(_STACK), Reg(_TOP)), stmt)
        self.emit("add", ("u64",), (Reg(_TOP), Reg(_TOP), Imm(size)), stmt)
        self.stack_check(stmt)         # (before the frame is written)
        for (name, t, _), o in zip(items, offsets):
            if name.startswith("param:"):
                base, rest = name[len("param:"):].rsplit("+", 1)
                poff = int(rest.split(":")[0])
                tmp = temp(t)
                self.emit("ld", ("param", t), (tmp, Addr(base, poff)), stmt)
                self.emit("st", (t,), (Addr(sa.name, o), tmp), stmt)
            elif self.out.regs[name] == "pred":
                self.emit("selp", ("u16",), (Reg("%__spv"), Imm(1), Imm(0), Reg(name)), stmt)
                self.emit("st", ("u16",), (Addr(sa.name, o), Reg("%__spv")), stmt)
            else:
                self.emit("st", (t,), (Addr(sa.name, o), Reg(name)), stmt)
        self.emit("mov", ("u32",), (Reg("%__sid"), Imm(k)), stmt)
        self.emit("st", ("u32",), (Addr(sa.name, id_off), Reg("%__sid")), stmt)
        csfx = engine.suffixes[callee.name]
        for actual, formal in zip(args, callee.params):
            self.emit("param_copy", (), (Reg(formal.name + csfx), Reg(actual)), stmt)
        self.emit("bra", ("uni",), (Reg(engine.entry(callee.name)),), stmt)
        self.out.body.append(Label(engine.return_site(k), stmt.line))
        self.emit("sub", ("u64",), (Reg(_TOP), Reg(_TOP), Imm(size)), stmt)
        self.emit("add", ("u64",), (sa, Reg(_STACK), Reg(_TOP)), stmt)
        for (name, t, _), o in zip(items, offsets):
            if name.startswith("param:"):
                base, rest = name[len("param:"):].rsplit("+", 1)
                poff = int(rest.split(":")[0])
                tmp = temp(t)
                self.emit("ld", (t,), (tmp, Addr(sa.name, o)), stmt)
                self.emit("st", ("param", t), (Addr(base, poff), tmp), stmt)
            elif self.out.regs[name] == "pred":
                self.emit("ld", ("u16",), (Reg("%__spv"), Addr(sa.name, o)), stmt)
                self.emit("setp", ("ne", "u16"), (Reg(name), Reg("%__spv"), Imm(0)), stmt)
            else:
                self.emit("ld", (t,), (Reg(name), Addr(sa.name, o)), stmt)
        for actual, formal in zip(rets, callee.returns):
            self.emit("param_copy", (), (Reg(actual), Reg(formal.name + csfx)), stmt)

    def emit_in_engine(self, stmt: Instruction) -> None:
        """An instruction of code that runs on the call stack: `.local` memory there is the
        stack (or a kernel-wide local variable), so local accesses and addresses become
        generic ones."""
        frame = self.frame
        where = f"the recursive device function '{frame.func.name}'" if frame else "a recursion"
        if stmt.opcode in _COLLECTIVES:
            self.error(f"'{stmt.full_opcode}' in {where} (or a function it calls): a barrier or "
                       "warp collective cannot be reached from a recursion (each thread runs its "
                       "recursion on its own call stack)", stmt.line)
        frame_locals = frame.local_offsets if frame else {}
        static_locals = {v.name for v in self.out.locals if v.space == "local"}

        def generic(name: str, offset: int) -> Operand | None:
            if frame is not None and name in frame_locals:
                if offset + frame_locals[name]:
                    self.emit("add", ("u64",), (Reg("%__sla"), Reg(frame.fp),
                                                Imm(frame_locals[name] + offset)), stmt)
                    return Reg("%__sla")
                return Reg(frame.fp)
            if name in static_locals:
                self.emit("mov", ("u64",), (Reg("%__sla"), Addr(name, offset) if offset else Reg(name)), stmt)
                self.emit("cvta", ("local", "u64"), (Reg("%__sla"), Reg("%__sla")), stmt)
                return Reg("%__sla")
            return None

        def local_names(o: Operand) -> bool:
            name = o.name if isinstance(o, Reg) else o.base if isinstance(o, Addr) else None
            return name is not None and (name in frame_locals or name in static_locals)

        mods = stmt.modifiers
        ops = list(stmt.operands)
        is_memory = stmt.opcode in ("ld", "st", "atom", "red", "prefetch", "ldu") and "local" in mods
        if not is_memory and not (stmt.opcode == "cvta" and "local" in mods) and \
                not any(local_names(o) for o in ops):
            self.out.body.append(stmt)
            return
        for i, o in enumerate(ops):
            if isinstance(o, Addr) and o.base and local_names(o):
                if is_memory:
                    g = generic(o.base, 0)
                    assert isinstance(g, Reg)
                    ops[i] = Addr(g.name, o.offset)
                else:
                    ops[i] = generic(o.base, o.offset) or o
            elif isinstance(o, Reg) and local_names(o):
                ops[i] = generic(o.name, 0) or o
        if is_memory:
            mods = tuple(m for m in mods if m != "local")
        opcode = stmt.opcode
        if opcode == "cvta" and "local" in mods:
            opcode, mods = "mov", tuple(m for m in mods if m not in ("local", "to"))
        self.out.body.append(Instruction(opcode, mods, tuple(ops), stmt.line, stmt.text, stmt.guard))

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
            self.call_function(stmt, f, rets, args, stack)
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
