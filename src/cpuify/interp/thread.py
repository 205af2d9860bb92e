"""The reference interpreter's threads: one CUDA thread as a Python generator walking the
IR (`Thread.run` yields at block barriers and warp collectives), and the upir ops other than
control flow and sync points (`UPIR_OPS`).  The scheduler that runs a block's threads is
`block.py`; the module, kernels and launches are `machine.py` (its docstring has the
execution model)."""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from cpuify.errors import LaunchError, UnsupportedError
from cpuify.interp.memory import alloc, load, store
from cpuify.interp.ops import PTX_OPS, in_order_sum
from cpuify.interp.printf import device_assert_message, device_printf
from cpuify.interp.values import (
    coerce,
    from_bits,
    ir_type_of,
    mask,
    read_as,
    resize_int,
    to_bits,
    to_signed,
    width_of,
    write_as,
)
from cpuify.ir.core import Operation, Value
from cpuify.lifting.tensor_cores import parse_ldmatrix

if TYPE_CHECKING:
    from cpuify.interp.block import BlockRun

MAX_THREADS_PER_BLOCK = 1024
NULL_PAGE = 1 << 16
#: what a speculated shared load (the compiler's `speculative` attribute,
#: transforms/selected_loads.py) outside the window reads: zeros, enough for any access
SPECULATED_ZEROS = alloc(64, 64)
EXITED = None            # scheduler state of a thread that has exited
RESUMED = "resumed"      # ... of a thread whose warp collective has just been exchanged
#: loads that read what other threads write while a loop runs (a thread taking a backward
#: branch after one of these, an atomic or a nanosleep waits for other threads)
WAITING_MODS = frozenset(("volatile", "acquire", "relaxed", "mmio"))

#: warp collectives that move tensor-core matrix fragments
MATRIX_KINDS = ("mma", "ldmatrix", "stmatrix", "movmatrix")


class SpinPoint:
    """Scheduler state of a thread parked in a loop that waits for other threads (one per
    loop header, or the `upir.spin_wait` op itself): `line` is the waiting read's PTX line."""
    __slots__ = ("attributes", "name")

    def __init__(self, line: int) -> None:
        self.name = "spin"
        self.attributes = {"line": line}



@dataclass
class ChildLaunch:
    """A grid launched from device code: its parameter buffer, filled by the parent."""
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    params: Any                        # ctypes buffer
    launched: bool = False
    stream: int = 0

# --- the C library (device malloc/free) ----------------------------------------------------

LIBC = ctypes.CDLL(None)
LIBC.malloc.restype = ctypes.c_void_p
LIBC.malloc.argtypes = [ctypes.c_size_t]
LIBC.free.restype = None
LIBC.free.argtypes = [ctypes.c_void_p]


# --- threads -------------------------------------------------------------------------------------

class Thread:
    """One CUDA thread: its SSA environment, ids and local memory; `run()` is a generator
    that yields the sync op (barrier / warp collective) it waits at."""

    def __init__(self, blk: "BlockRun", tid: tuple[int, int, int], linear: int) -> None:
        self.blk = blk
        self.launch = blk.launch
        self.kernel = blk.launch.kernel
        self.tid = tid
        self.linear = linear
        self.env: dict[Value, Any] = {}
        # what this thread contributes to / gets from its current collective
        self.xval = self.xb = self.xc = self.xmask = 0
        self.xregs: list[int] = []           # tensor-core collectives: registers in and out
        self.xregs_out: list[int] = []
        self.xout = 0
        self.xpred = 1
        size = self.kernel.local_size
        if size:
            self.local, self.local_base = alloc(size, 16)
        else:
            self.local, self.local_base = None, 0

    # -- values
    def get(self, v: Value) -> Any:
        return self.env[v]

    def src(self, op: Operation, i: int, ptx_type: str) -> Any:
        """Operand i read as PTX type `ptx_type`."""
        v = op.operands[i]
        return read_as(self.env[v], v.type, ptx_type)

    def bits(self, v: Value) -> int:
        return to_bits(self.env[v], v.type)

    def src_bits(self, op: Operation, i: int, ptx_type: str, width: int) -> int:
        t = ir_type_of(ptx_type)
        return resize_int(to_bits(self.src(op, i, ptx_type), t), width_of(t), width, False)

    def set(self, op: Operation, value: Any, ptx_type: str, index: int = 0) -> None:
        """Result `index` := value computed in PTX type `ptx_type`."""
        r = op.results[index]
        self.env[r] = write_as(value, ptx_type, r.type)

    # -- errors
    def unsupported(self, message: str, op: Operation) -> None:
        line = op.attributes.get("line")
        module = self.launch.module.module
        raise UnsupportedError(f"interpreter: {message}", line=line, kernel=self.launch.name,
                               source_line=module.source_line(line) if line else None)

    def fail(self, message: str, op: Operation | None = None) -> None:
        line = op.attributes.get("line") if op is not None else None
        where = f" (PTX line {line}, thread {self.tid})" if line else f" (thread {self.tid})"
        raise LaunchError(f"kernel '{self.launch.name}' failed in block {self.blk.ctaid}: "
                          f"{message}{where}")

    # -- memory
    def window_base(self, space: str) -> int:
        return self.blk.shared_base if space == "shared" else self.local_base

    def window_size(self, space: str) -> int:
        if space == "shared":
            return self.blk.shared_size
        return self.kernel.local_size

    def address(self, op: Operation, space: str, nbytes: int) -> int:
        """Real address accessed by memory op `op` (address operand + `offset`)."""
        base = op.operands[0]
        iv = resize_int(to_bits(self.env[base], base.type), width_of(base.type), 64, False)
        off = op.attributes.get("offset", 0)
        if space in ("shared", "local"):
            rel = (iv + off) & mask(64)
            if rel + nbytes > self.window_size(space):
                if "speculative" in op.attributes and op.name == "ptx.ld":
                    # (a load the compiler speculated, whose value the thread does not
                    # use here: any value will do; zeros, from a buffer of our own)
                    return SPECULATED_ZEROS[1]
                self.fail(f"{space} memory access out of bounds: offset {to_signed(rel, 64)}, "
                          f"{nbytes} byte(s), window of {self.window_size(space)} bytes", op)
            return self.window_base(space) + rel
        addr = (iv + off) & mask(64)
        if addr < NULL_PAGE:
            self.fail(f"{space} memory access at address {addr:#x} (null pointer?)", op)
        return addr

    # -- execution
    def run(self) -> Iterator[Operation]:
        env = self.env
        kernel = self.kernel
        block = kernel.region.entry
        sync = kernel.sync_index
        steps = kernel.steps
        position = kernel.block_index
        waited = 0          # PTX line of a waiting read since the last backward branch
        while True:
            for op in block.ops:
                handler = PTX_OPS.get(op.name)
                if handler is not None:
                    if op in steps:
                        yield op            # a warp step: the lanes of the warp meet here
                    if (op.name == "ptx.atom" or op.name == "ptx.mbarrier" or
                            op.name == "ptx.ld" and
                            WAITING_MODS.intersection(op.attributes.get("mods", ()))):
                        waited = op.attributes.get("line") or -1
                    handler(self, op)
                    continue
                name = op.name
                if name == "cf.br" or name == "cf.cond_br":
                    k = 0 if name == "cf.br" or env[op.operands[0]] else 1
                    args = op.successor_args[k]
                    succ = op.successors[k]
                    vals = [(env[v], v.type) for v in args]     # parallel copy
                    for arg, (val, vt) in zip(succ.args, vals):
                        env[arg] = coerce(val, vt, arg.type)
                    if position[succ] <= position[block]:
                        if waited:          # round a loop that waits for other threads
                            spin = kernel.spin_points.get(succ)
                            if spin is None:
                                spin = kernel.spin_points[succ] = SpinPoint(max(waited, 0))
                            yield spin      # type: ignore[misc]
                        waited = 0
                    block = succ
                    break
                if name == "upir.spin_wait":    # (optimized IR: the compiler's yield point)
                    yield op
                    waited = 0
                    continue
                if name == "upir.nanosleep":
                    waited = op.attributes.get("line") or -1
                if op in sync:
                    self.contribute(op)
                    yield op
                    self.receive(op)
                    continue
                if name == "upir.exit":
                    return
                if name == "upir.trap":
                    self.fail("a device-side assert() failed" if op.attributes.get("assert")
                              else "stack overflow: a recursion outgrew the thread's call stack "
                              f"({CALL_STACK_SIZE} bytes)" if op.attributes.get("stack_overflow")
                              else "the kernel executed a trap instruction", op)
                upir = UPIR_OPS.get(name)
                if upir is None:
                    if name == "upir.warp_matrix":
                        self.unsupported("'upir.warp_matrix' is code generation's form of a "
                                         "tensor-core instruction (after the pipeline); the "
                                         "interpreter runs them as lifted: give it the IR "
                                         "printed by --print-ir-after", op)
                    self.unsupported(f"no semantics for '{name}'", op)
                upir(self, op)  # type: ignore[misc]
            else:
                self.fail("basic block without terminator", None)

    def contribute(self, op: Operation) -> None:
        """This thread's inputs to the collective (codegen's leave_at_sync)."""
        def as64(v: Value) -> int:
            return resize_int(to_bits(self.env[v], v.type), width_of(v.type), 64, False)

        def as32(v: Value) -> int:
            return as64(v) & mask(32)

        vals = op.operands
        if op.name == "upir.barrier":
            # bar.red: the predicate is the last operand (`bar.red.popc.u32 d, a, {!}p`)
            self.xval = as64(vals[-1]) if vals else 0
            return
        kind = op.attributes["kind"]
        if kind in MATRIX_KINDS:
            # every lane's registers (ld/stmatrix: first its row address, as a real address)
            self.xmask = 0xFFFFFFFF
            self.xregs = [self.bits(v) for v in vals]
            if kind in ("ldmatrix", "stmatrix"):
                spec = parse_ldmatrix(tuple(op.attributes["mods"]), kind)
                assert not isinstance(spec, str)
                if spec.space == "shared":
                    self.xregs[0] = self.blk.shared_base + self.xregs[0]
            return
        if kind == "shfl":
            self.xval, self.xb, self.xc, self.xmask = as64(vals[0]), as32(vals[1]), as32(vals[2]), as32(vals[3])
        elif kind in ("vote", "match", "redux"):
            self.xval = as64(vals[0])
            if len(vals) > 1:
                self.xmask = as32(vals[1])
        elif kind == "named_barrier":
            self.xb, self.xc = as32(vals[0]), as32(vals[1])
        elif vals:                        # syncwarp (activemask has no operand)
            self.xmask = as32(vals[0])

    def receive(self, op: Operation) -> None:
        """The collective's results (codegen's restore)."""
        if not op.results:
            return
        if op.name == "upir.warp_collective" and op.attributes["kind"] in MATRIX_KINDS:
            for r, bits in zip(op.results, self.xregs_out):
                self.env[r] = from_bits(bits, r.type)
            return
        first = op.results[0]
        if first.type == "i1" and (op.name == "upir.barrier" or op.attributes.get("kind") == "vote"):
            self.env[first] = int(self.xout != 0)
        else:
            w = width_of(first.type)
            self.env[first] = coerce(self.xout & mask(w), f"i{w}", first.type)
        if len(op.results) > 1:
            self.env[op.results[1]] = int(self.xpred != 0)


# --- upir ops (everything but control flow and sync points) ---------------------------------------

def _const(th: Thread, op: Operation) -> None:
    r = op.results[0]
    val = op.attributes["value"]
    if r.type in ("f32", "f64"):
        np_t = np.float32 if r.type == "f32" else np.float64
        th.env[r] = from_bits(val, r.type) if isinstance(val, int) else np_t(float(val))
    else:
        th.env[r] = int(val) & mask(width_of(r.type))


def _param(th: Thread, op: Operation) -> None:
    t = op.attributes["type"]
    th.set(op, load(th.launch.params + op.attributes["offset"], t), t)


_STORE_TYPE = {"i8": "b8", "i16": "b16", "i32": "b32", "i64": "b64", "f32": "f32", "f64": "f64"}


def _launch_store(th: Thread, op: Operation) -> None:
    v = op.operands[0]
    store(th.launch.params + op.attributes["offset"], _STORE_TYPE[v.type], th.get(v))


def _special(th: Thread, op: Operation) -> None:
    reg: str = op.attributes["reg"]
    base, _, comp = reg.partition(".")
    k = "xyz".index(comp) if comp in ("x", "y", "z") else 0
    launch = th.launch
    lin = th.linear
    nthreads = launch.block[0] * launch.block[1] * launch.block[2]
    lane = lin & 31
    one = 1 << lane
    values = {
        "%tid": lambda: th.tid[k], "%ntid": lambda: launch.block[k],
        "%ctaid": lambda: th.blk.ctaid[k], "%nctaid": lambda: launch.grid[k],
        "%laneid": lambda: lane, "%warpid": lambda: lin >> 5,
        "%nwarpid": lambda: (nthreads + 31) >> 5, "%warpsize": lambda: 32,
        "%lanemask_eq": lambda: one, "%lanemask_lt": lambda: one - 1,
        "%lanemask_le": lambda: one | (one - 1), "%lanemask_gt": lambda: ~(one | (one - 1)),
        "%lanemask_ge": lambda: ~(one - 1), "%smid": lambda: 0, "%gridid": lambda: 0,
        "%nsmid": lambda: 1, "%dynamic_smem_size": lambda: launch.dyn_shared,
        "%total_smem_size": lambda: launch.dyn_shared + th.kernel.shared.dynamic_offset,
        "%aggr_smem_size": lambda: launch.dyn_shared + th.kernel.shared.dynamic_offset,
    }
    fn = values.get(base)
    if fn is None:
        th.unsupported(f"special register '{reg}' is not supported", op)
    th.set(op, fn() & mask(32), "u32")  # type: ignore[misc]


def _clock(th: Thread, op: Operation) -> None:
    th.set(op, time.perf_counter_ns() & mask(64), "u64")


def _addressof(th: Thread, op: Operation) -> None:
    sym = op.attributes["symbol"]
    space = op.attributes["space"]
    k = th.kernel
    if space == "shared":
        addr = k.shared.offsets.get(sym)
    elif space == "local":
        addr = k.local_offsets.get(sym)
    elif space == "param":
        p = next((p for p in k.lifted.params if p.name == sym), None)
        addr = th.launch.params + p.offset if p is not None else None
    else:
        g = th.launch.module.globals.get(sym)
        addr = g[1] if g is not None else None
    if addr is None:
        th.unsupported(f"unknown {space} variable '{sym}'", op)
    th.set(op, addr, "u64")


def _nop(th: Thread, op: Operation) -> None:
    pass


def _printf(th: Thread, op: Operation) -> None:
    fmt = th.bits(op.operands[0])
    if op.attributes.get("assert"):
        device_assert_message(fmt)
        return
    args = th.bits(op.operands[1]) if len(op.operands) > 1 else 0
    n = device_printf(fmt, args)
    if op.results:
        th.set(op, n & mask(32), "s32")


def _malloc(th: Thread, op: Operation) -> None:
    size = th.src(op, 0, "u64")
    th.set(op, LIBC.malloc(size) or 0, "u64")


#: bytes of the call stack of each thread (recursive device functions; CUDA's default
#: cudaLimitStackSize); set it to run a deeper recursion
CALL_STACK_SIZE = 1024


def _call_stack(th: Thread, op: Operation) -> None:
    # a call stack of this thread's own
    stack = getattr(th, "call_stack", None)
    if stack is None:
        stack = th.call_stack = alloc(CALL_STACK_SIZE, 16)  # type: ignore[attr-defined]
    th.set(op, stack[1], "u64", 0)
    th.set(op, CALL_STACK_SIZE, "u64", 1)


def _launch_buffer(th: Thread, op: Operation) -> None:
    """cudaGetParameterBufferV2: a buffer for a child grid's parameters, or 0 and a status."""
    func = th.src(op, 0, "u64")
    dims = [th.src(op, i, "u32") for i in range(1, 8)]
    names = dict(zip(op.attributes["addresses"], op.attributes["kernels"]))  # type: ignore[call-overload]
    module = th.launch.module
    status, address = 0, 0
    name = names.get(func)
    if name is None:
        status = 98                      # cudaErrorInvalidDeviceFunction
    else:
        try:
            k = module.kernel(name)
        except UnsupportedError:
            status = 801                 # cudaErrorNotSupported
        else:
            g, b, smem = tuple(dims[0:3]), tuple(dims[3:6]), dims[6]
            req = k.lifted.directives.get("maxntid") or k.lifted.directives.get("reqntid")
            limit = min(int(np.prod(req)), MAX_THREADS_PER_BLOCK) if req else MAX_THREADS_PER_BLOCK
            if 0 in g or 0 in b or b[0] > 1024 or b[1] > 1024 or b[2] > 64 or \
                    b[0] * b[1] * b[2] > limit or g[1] > 65535 or g[2] > 65535:
                status = 9                   # cudaErrorInvalidConfiguration
            else:
                child = ChildLaunch(name, g, b, smem, ctypes.create_string_buffer(k.buffer_size))  # type: ignore[arg-type]
                module.children.append(child)
                address = ctypes.addressof(child.params)
    th.set(op, address, "u64", 0)
    th.set(op, status, "u32", 1)


def _launch_device(th: Thread, op: Operation) -> None:
    """cudaLaunchDeviceV2: the grid whose buffer this is runs after the parent grid."""
    address = th.bits(op.operands[0])
    for child in th.launch.module.children:
        if ctypes.addressof(child.params) == address:
            child.launched = True
            child.stream = th.src(op, 1, "u64")
            th.set(op, 0, "u32")
            return
    th.set(op, 1, "u32")                 # cudaErrorInvalidValue


def _free(th: Thread, op: Operation) -> None:
    addr = th.bits(op.operands[0])
    if addr:
        LIBC.free(addr)


def _envreg(th: Thread, op: Operation) -> None:
    w = th.launch.workspace
    reg = op.attributes.get("reg", "")
    th.set(op, (w >> 32) if reg == "%envreg1" else (w & 0xFFFFFFFF) if reg == "%envreg2" else 0,
           "u32")


UPIR_OPS = {
    "upir.const": _const, "upir.param": _param, "upir.special": _special,
    "upir.envreg": _envreg,
    "upir.launch_store": _launch_store,
    "upir.clock": _clock, "upir.addressof": _addressof, "upir.fence": _nop,
    "upir.nanosleep": _nop, "upir.printf": _printf, "upir.malloc": _malloc, "upir.free": _free,
    "upir.call_stack": _call_stack, "upir.in_order_sum": in_order_sum,
    "upir.launch_buffer": _launch_buffer, "upir.launch_device": _launch_device,
}
