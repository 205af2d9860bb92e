"""Warp-level passes: lockstep steps for legacy warp-synchronous code (`warp-lockstep`), and
the collectives code generation may run as vector operations across a warp's lanes
(`simd-collectives`).

`warp-lockstep`.  Code written for GPUs before Volta finishes a reduction or a scan inside
one warp through `volatile` shared memory with no `__syncwarp`, relying on the 32 lanes
executing each instruction together:

    if (tid < 32) { volatile float *s = sdata; s[tid] += s[tid + 32]; s[tid] += s[tid + 16]; ... }
    if (lane >= 1) s[i] += s[i - 1]; if (lane >= 2) s[i] += s[i - 2]; ...   // a warp scan

Run one thread after another between sync points, lane 0 does every step before lane 1
starts, and reads values the other lanes have not written yet.  This pass makes each
volatile access a warp-level step (COX's hierarchical collapsing at warp level): it inserts
a `upir.warp_collective {kind = "lockstep"}` before each group of volatile shared loads,
before each volatile shared store and after it, so the lanes of a warp that are at the same
step run it together (all their loads of a statement, then all their stores) and a lane
that went past a step waits until the lanes behind it catch up (the runtime schedules the
lowest pending step of a warp first, which makes the lanes that skipped a branch wait at
its end, as the reconvergence of a pre-Volta warp does).

A kernel gets steps when it has both volatile shared loads and volatile shared stores and
one of them has an address that depends on the thread (automatic detection: what lanes
write, other lanes read), or, with the pass option `all=true` (`CPUIFY_WARP_LOCKSTEP=1`,
the `--warp-lockstep` option), every kernel at each of its shared and generic loads and
stores, volatile or not: for warp-synchronous code the detection misses (no `volatile`).

`simd-collectives`.  A warp collective whose member mask is the full warp and whose lane
operands are the same in every thread (`__shfl_down_sync(0xffffffff, v, offset)` in a loop
over `offset`, votes, `__reduce_*_sync`) is marked `simd`: when every thread of the block
waits there and no thread has exited, the generated block function exchanges the values of
each warp with vector instructions on a `<32 x i32>` of its lanes' values (a shuffle, a
compare and bitcast for a ballot, a vector reduction for redux) and runs the next segment
for all threads, instead of the C scheduler's lane-by-lane exchange and a masked run.
Disable it (`--disable-pass=simd-collectives`) for the scalar lowering."""

from __future__ import annotations

from dataclasses import dataclass

from cpuify.analysis.manager import AnalysisManager, cached
from cpuify.analysis.uniformity import uniform_values
from cpuify.ir.core import Operation, OpResult, Region, Value
from cpuify.ir.dialects import info
from cpuify.ir.structure import block_body
from cpuify.transforms.pass_manager import register

LOCKSTEP = "lockstep"
_SPACES = ("global", "shared", "local", "const", "param", "tex")


def _space(op: Operation) -> str:
    """The state space of a load or store: `shared`, `global`, ... or `generic`."""
    for m in op.attributes.get("mods", ()):
        base = m.split("::")[0]
        if base in _SPACES:
            return base
    return "generic"


def _is_volatile(op: Operation) -> bool:
    return "volatile" in op.attributes.get("mods", ())


def lockstep_accesses(region: Region, all_accesses: bool = False,
                      uniform: set[Value] | None = None) -> set[Operation]:
    """The loads and stores of a block body that become warp-level steps: its volatile
    shared accesses when the kernel communicates between lanes through them (it both loads
    and stores volatile shared memory, at an address that depends on the thread), or, with
    `all_accesses`, every shared and generic load and store."""
    accesses = [op for b in region.blocks for op in b.ops if op.name in ("ptx.ld", "ptx.st")]
    if all_accesses:
        return {op for op in accesses if _space(op) in ("shared", "generic")}
    volatile = [op for op in accesses if _is_volatile(op) and _space(op) == "shared"]
    loads = [op for op in volatile if op.name == "ptx.ld"]
    stores = [op for op in volatile if op.name == "ptx.st"]
    if not loads or not stores:
        return set()
    if uniform is None:
        uniform = uniform_values(region)
    if all(op.operands[0] in uniform for op in volatile):
        return set()        # one address for every thread: a flag, not lanes' data
    return set(volatile)


def _step(line: object) -> Operation:
    attrs: dict[str, object] = {"kind": LOCKSTEP}
    if line is not None:
        attrs["line"] = line
    return Operation("upir.warp_collective", [], [], attrs)


def _is_step(op: Operation | None) -> bool:
    return op is not None and op.name == "upir.warp_collective" and \
        op.attributes.get("kind") == LOCKSTEP


def insert_lockstep_steps(region: Region, accesses: set[Operation]) -> int:
    """A step before each run of loads among `accesses`, before each store and after it
    (the next access then sees every lane's store).  Returns the number of steps added."""
    added = 0
    for block in region.blocks:
        out: list[Operation] = []
        after_load = False          # the last op out is a stepped load (a run of loads)
        for op in block.ops:
            if op in accesses:
                is_load = op.name == "ptx.ld"
                if not (is_load and after_load) and not _is_step(out[-1] if out else None):
                    step = _step(op.attributes.get("line"))
                    step.parent = block
                    out.append(step)
                    added += 1
                out.append(op)
                after_load = is_load
                if not is_load:
                    step = _step(op.attributes.get("line"))
                    step.parent = block
                    out.append(step)
                    added += 1
                continue
            # pure ops between the loads of one statement keep the run going
            if info(op).pure and not info(op).terminator:
                out.append(op)
                continue
            after_load = False
            out.append(op)
        block.ops = out
    return added


@register("warp-lockstep",
          "warp-level steps inserted around the volatile shared accesses of legacy "
          "warp-synchronous code (all=true: around every shared/generic access)")
@dataclass(frozen=True)
class WarpLockstep:
    """Pass: lockstep steps (`upir.warp_collective {kind = "lockstep"}`) around the accesses
    lockstep_accesses() picks; the kernel op records `warp_lockstep = <steps>`."""
    name: str = "warp-lockstep"
    all: bool = False

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of steps inserted."""
        region = block_body(kernel)
        if any(_is_step(op) for b in region.blocks for op in b.ops):
            return 0            # (already done: a pipeline naming the pass twice)
        uniform = None if self.all else cached(analyses, uniform_values, region)
        accesses = lockstep_accesses(region, self.all, uniform)
        if not accesses:
            return 0
        added = insert_lockstep_steps(region, accesses)
        if added:
            kernel.attributes["warp_lockstep"] = added
        return added


#: collectives the vector exchange implements (kind -> the mode modifiers it handles)
_SIMD_KINDS = {"shfl": ("up", "down", "bfly", "idx"), "vote": ("all", "any", "uni", "ballot"),
               "redux": ("add", "min", "max", "and", "or", "xor")}
FULL_MASK = 0xFFFFFFFF


def _const(v: Value) -> int | None:
    """An integer constant's value (through moves), else None."""
    while isinstance(v, OpResult) and v.op.name == "ptx.mov" and len(v.op.operands) == 1:
        v = v.op.operands[0]
    if isinstance(v, OpResult) and v.op.name == "upir.const":
        c = v.op.attributes.get("value")
        return c if isinstance(c, int) else None
    return None


def simd_collective(op: Operation, uniform: set[Value]) -> bool:
    """Whether the vector exchange can do `op` for a whole block: a shuffle, vote or redux
    over the full warp (a constant member mask 0xffffffff) whose other operands (lane
    offset, clamp) are the same in every thread, on values of at most 32 bits."""
    if op.name != "upir.warp_collective":
        return False
    kind = op.attributes.get("kind")
    modes = _SIMD_KINDS.get(kind)  # type: ignore[arg-type]
    mods = op.attributes.get("mods", ())
    if modes is None or not any(m in modes for m in mods) or "b64" in mods:
        return False
    operands = op.operands
    if kind == "shfl":
        if len(operands) != 4:
            return False
        mask, lane_operands = operands[3], operands[1:3]
    else:
        if len(operands) != 2:
            return False
        mask, lane_operands = operands[1], []
    c = _const(mask)
    if c is None or c & FULL_MASK != FULL_MASK:
        return False
    return all(v in uniform for v in lane_operands) and \
        all(v.type in ("i32", "f32", "i16", "i8", "i1") for v in operands[:1])


@register("simd-collectives",
          "warp shuffles, votes and reductions over the full warp with block-uniform "
          "operands, marked for the vector exchange across lanes")
@dataclass(frozen=True)
class SimdCollectives:
    """Pass: marks `upir.warp_collective` ops `simd = true` (simd_collective)."""
    name: str = "simd-collectives"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of collectives marked."""
        region = block_body(kernel)
        ops = [op for b in region.blocks for op in b.ops if op.name == "upir.warp_collective"]
        if not ops:
            return 0
        uniform = cached(analyses, uniform_values, region)
        marked = 0
        for op in ops:
            if simd_collective(op, uniform) and not op.attributes.get("simd"):
                op.attributes["simd"] = True
                marked += 1
        return marked
