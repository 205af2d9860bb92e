"""`fuse-block-runs`: a run of adjacent thread blocks executed as one wider block (the
Polygeist paper's flat vs per-block mapping, section IV-D).

A 2D block of 32 x 8 threads that marches up a z column (`for (k = 1; k < nz - 1; k++)`,
the laplace3d workload) has its uniform loop interchanged with the thread loop: each pass
runs the block's 8 rows of 32 threads, 8 rows of 128 bytes a row apart, then jumps a whole
plane.  The hardware prefetchers do not follow such short runs; the OpenMP version of the
same stencil streams whole rows.  When the blocks of the grid cannot see each other (no
barrier, shared memory, atomic, warp collective, grid sync, volatile or ordered access,
printf or device launch: plain loads and stores only), running the blocks
blockIdx.x = b..b+Rx-1 and blockIdx.y = c..c+Ry-1 together, as one block of Rx * ntid.x by
Ry * ntid.y threads, is a schedule CUDA allows, and the thread loop inside the uniform loop
then walks rows of Rx * 32 threads: whole rows of the array when Rx covers the grid's x.

The pass runs only when the code is specialized for a block shape (`block_dims`) and the
launch asks for runs (the kernel's `block_run_request = [Rx, Ry]`: the Python API picks them
from the grid, cpuify.api.block_runs), and only where it pays: the kernel's loops access
memory consecutive across threadIdx.x and none strided across it (a row per thread: more
streams at once, no longer runs).  In code for a block shape without a request it records
whether it would fuse (`block_runs_possible`, or `block_run_refused` with the reason), so
the launcher compiles no variant in vain.  It rewrites the block body for the fused block
(on a copy first, kept only where the access analysis still sees every loop access it saw
consecutive; else x alone is tried): with T the fused thread index of a dimension and B its
block size,

    threadIdx = T % B,   blockIdx = run * R + T / B,   blockDim = B (a constant),

threads whose blockIdx is past gridDim (the grid's last, partial run) exit at once, and the
global index `blockIdx * B + threadIdx` (shl/mul + add, mad, or in 64 bits mul.wide +
cvt + add) becomes `run * R * B + T`,
which is the same number, so the access analysis still sees addresses consecutive across
threads.  It records `block_run = [Rx, Ry]` and the fused shape in `block_dims`; the code
generator names the block function for the run (kernel_abi.specialized_symbol) and the
launcher runs a grid of ceil(gridDim.x / Rx) x ceil(gridDim.y / Ry) runs (the kernel still
reads the real gridDim).  Warp ids are untouched by the rule: no warp-level operation may
appear.  A dimension whose threadIdx the kernel never reads is not fused
(merge-duplicate-threads runs its threads once instead)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cpuify.analysis.cfg import incoming_values
from cpuify.analysis.loop_order import CONSECUTIVE, STRIDED, loop_order
from cpuify.analysis.manager import AnalysisManager
from cpuify.errors import CpuifyError
from cpuify.analysis.uniformity import uniform_values
from cpuify.ir.core import Block, Operation, OpResult, Region, Value, natural_loops, replace_all_uses
from cpuify.ir.dialects import STRUCTURED_OPS, info
from cpuify.ir.parser import parse_op
from cpuify.ir.printer import print_op
from cpuify.ir.structure import block_body
from cpuify.ir.structured import nested_blocks
from cpuify.transforms.pass_manager import register
from cpuify.ir.modifiers import ORDERED as _ORDERED

REQUEST = "block_run_request"
ATTRIBUTE = "block_run"

#: ops with effects that blocks run together perform as they would one block at a time
_PLAIN_EFFECTS = frozenset({"ptx.ld", "ptx.ldu", "ptx.st", "ptx.prefetch", "ptx.prefetchu",
                            "upir.exit", "upir.param", "upir.special", "upir.clock"})
#: special registers whose value depends on the block's threads beyond tid/ctaid/ntid
_REFUSED_SPECIALS = ("%laneid", "%warpid", "%nwarpid", "%lanemask", "%cluster", "%envreg",
                     "%dynamic_smem", "%total_smem")


def refusal(kernel: Operation) -> str | None:
    """Why the blocks of `kernel` may not run fused (None: they may)."""
    body = block_body(kernel)
    for block in nested_blocks(body):
        for op in block.ops:
            if op.name in STRUCTURED_OPS:
                continue
            if op.regions:
                return f"{op.name} at PTX line {op.attributes.get('line', '?')}"
            mods = [str(m) for m in op.attributes.get("mods", ())]
            if "shared" in mods or op.attributes.get("space") == "shared":
                return f"shared memory (PTX line {op.attributes.get('line', '?')})"
            if op.name == "upir.special":
                reg = str(op.attributes.get("reg", ""))
                if reg.startswith(_REFUSED_SPECIALS) or reg in ("%tid", "%ctaid", "%ntid"):
                    return f"it reads {reg}"
                continue
            i = info(op)
            if i.block_sync or i.warp_sync or i.yield_sync:
                return f"{op.name} at PTX line {op.attributes.get('line', '?')}"
            if i.pure or (i.terminator and op.name.startswith("cf.")):
                continue
            if op.name not in _PLAIN_EFFECTS:
                return f"{op.name} at PTX line {op.attributes.get('line', '?')}"
            if any(m in _ORDERED for m in mods):
                return f"a {'.'.join(mods)} access at PTX line {op.attributes.get('line', '?')}"
    return None


def unprofitable(kernel: Operation) -> str | None:
    """Why running the blocks of `kernel` fused would not pay (None: it would).  Runs pay
    where a loop's accesses are consecutive across threadIdx.x (analysis.loop_order): the
    fused rows are longer runs of memory.  Where threads walk memory of their own, apart
    from each other (a row per thread, the row softmax: `cols` elements apart), a wider
    block only means more streams at once (the row softmax ran 28% slower), and a kernel
    without loops gains nothing."""
    consecutive, why = _loop_accesses(kernel)
    return why or (None if consecutive else "no loop with accesses consecutive across threadIdx.x")


def _loop_accesses(kernel: Operation) -> tuple[int, str | None]:
    """(the loop accesses consecutive across threadIdx.x, why fusing would not pay: an
    access strided across it, or None)."""
    body = block_body(kernel)
    uniform = uniform_values(body)
    incoming = incoming_values(body)
    consecutive = 0
    for header, (blocks, _) in natural_loops(body).items():
        for access in loop_order(header, blocks, uniform, incoming).accesses:
            if access.across == STRIDED:
                return consecutive, (f"the access at PTX line "
                                     f"{access.op.attributes.get('line', '?')} in a loop is "
                                     "strided across threadIdx.x")
            consecutive += access.across == CONSECUTIVE
    return consecutive, None


def _strip_moves(v: Value) -> Value:
    while isinstance(v, OpResult) and v.op.name == "ptx.mov" and len(v.op.operands) == 1:
        v = v.op.operands[0]
    return v


def _const(v: Value) -> int | None:
    v = _strip_moves(v)
    if isinstance(v, OpResult) and v.op.name == "upir.const" and \
            isinstance(v.op.attributes.get("value"), int):
        return int(v.op.attributes["value"]) & 0xFFFFFFFF
    return None


class _Builder:
    """Appends ops to one block."""

    def __init__(self, block: Block) -> None:
        self.block = block

    def op(self, name: str, operands: list[Value], mods: list[str], type_: str = "i32",
           **attrs: object) -> Value:
        o = Operation(name, operands, [type_], {**({"mods": mods} if mods else {}), **attrs,
                                                "line": 0})
        return self.block.append(o).result

    def const(self, value: int) -> Value:
        return self.block.append(Operation("upir.const", [], ["i32"], {"value": value})).result

    def special(self, reg: str) -> Value:
        return self.block.append(Operation("upir.special", [], ["i32"],
                                           {"reg": reg, "line": 0})).result


def _global_index(op: Operation, dims: dict[Value, tuple[Value, int, Value, Value]]
                  ) -> tuple[Value, Value, int, bool] | None:
    """For `blockIdx * B + threadIdx` of one fused dimension (`add(shl(b, log2 B), t)`,
    `add(mul.lo(b, B), t)`, `mad.lo(b, B, t)`, or in 64 bits `add(mul.wide(b, B), cvt(t))`,
    through moves, with b and t the rewritten blockIdx and threadIdx; `dims`: threadIdx ->
    (blockIdx, B, run * R, T)): (run * R, T, B, wide), whose `run * R * B + T` it equals."""
    def scaled(v: Value) -> tuple[Value, int, bool] | None:      # b * k: (b, k, wide)
        v = _strip_moves(v)
        if not isinstance(v, OpResult):
            return None
        o = v.op
        m = o.attributes.get("mods", ())
        if o.name == "ptx.shl" and (s := _const(o.operands[1])) is not None and s < 32 and \
                v.type == "i32":
            return _strip_moves(o.operands[0]), 1 << s, False
        if o.name == "ptx.mul" and ("lo" in m or ("wide" in m and ("u32" in m or "s32" in m))):
            for a, k in ((0, 1), (1, 0)):
                if (c := _const(o.operands[k])) is not None:
                    return _strip_moves(o.operands[a]), c, "wide" in m
        return None

    def match(prod: tuple[Value, int, bool] | None, t: Value
              ) -> tuple[Value, Value, int, bool] | None:
        if prod is None:
            return None
        t = _strip_moves(t)
        if prod[2]:         # 64 bits: the thread index widened (it is below 2^31)
            if not (isinstance(t, OpResult) and t.op.name == "ptx.cvt" and
                    list(t.op.attributes.get("mods", ())) in (["u64", "u32"], ["s64", "s32"])):
                return None
            t = _strip_moves(t.op.operands[0])
        if t not in dims:
            return None
        blk, size, first, fused_t = dims[t]
        return (first, fused_t, size, prod[2]) if prod[:2] == (blk, size) else None

    if op.name == "ptx.add" and len(op.operands) == 2:
        a, b = op.operands
        return match(scaled(a), b) or match(scaled(b), a)
    if op.name == "ptx.mad" and "lo" in op.attributes.get("mods", ()) and len(op.operands) == 3:
        a, b, t = op.operands
        for x, y in ((a, b), (b, a)):
            if (c := _const(y)) is not None and (got := match((_strip_moves(x), c, False), t)):
                return got
    return None


def fuse_block_runs(kernel: Operation, run: tuple[int, int],
                    block_dims: tuple[int, int, int]) -> tuple[int, int]:
    """Rewrites `kernel`'s block body to run `run` = (Rx, Ry) blocks as one (see the module
    docstring); returns the run actually fused ((1, 1): nothing changed)."""
    body = block_body(kernel)
    specials: dict[str, list[Operation]] = {}
    for block in nested_blocks(body):
        for op in block.ops:
            if op.name == "upir.special":
                specials.setdefault(str(op.attributes.get("reg")), []).append(op)
    # only the dimensions whose threadIdx the kernel reads (else their threads are duplicates)
    lengths = [r if r > 1 and f"%tid.{d}" in specials else 1 for r, d in zip(run, "xy")]
    if lengths == [1, 1]:
        return (1, 1)
    region: Region = body
    old_entry = region.entry
    entry = Block()
    entry.parent = region
    region.blocks.insert(0, entry)
    b = _Builder(entry)
    dead: Value | None = None
    rewritten: dict[Value, Value] = {}
    index_of: dict[Value, tuple[Value, int, Value, Value]] = {}   # threadIdx -> (blockIdx, B, base, T)
    for k, (length, d) in enumerate(zip(lengths, "xy")):
        if length == 1:
            continue
        size = block_dims[k]
        fused_t = b.special(f"%tid.{d}")
        first_run = b.special(f"%ctaid.{d}")
        bsize = b.const(size)
        thread = b.op("ptx.rem", [fused_t, bsize], ["u32"])
        cb = b.op("ptx.mul", [first_run, b.const(length)], ["lo", "u32"])
        blk = b.op("ptx.add", [cb, b.op("ptx.div", [fused_t, bsize], ["u32"])], ["u32"])
        left = b.op("ptx.min", [b.op("ptx.sub", [b.special(f"%nctaid.{d}"), cb], ["u32"]),
                                b.const(length)], ["u32"])
        past = b.op("ptx.setp", [fused_t, b.op("ptx.mul", [left, bsize], ["lo", "u32"])],
                    ["ge", "u32"], "i1")
        dead = past if dead is None else b.op("ptx.or", [dead, past], ["pred"], "i1")
        for old in specials.get(f"%tid.{d}", []):
            rewritten[old.result] = thread
        for old in specials.get(f"%ctaid.{d}", []):
            rewritten[old.result] = blk
        for old in specials.get(f"%ntid.{d}", []):
            rewritten[old.result] = bsize
        index_of[thread] = (blk, size, cb, fused_t)
    # the threads past the grid go to the kernel's own exit when it is a block of its own
    # (the join of an early `return` and the end: the branch then raises to an `if`)
    exits = [blk for blk in region.blocks
             if len(blk.ops) == 1 and blk.ops[0].name == "upir.exit" and not blk.args]
    if len(exits) == 1:
        exit_block = exits[0]
    else:
        exit_block = Block()
        region.add_block(exit_block)
        exit_block.append(Operation("upir.exit", [], [], {"line": 0}))
    assert dead is not None
    entry.append(Operation("cf.cond_br", [dead], [], {"line": 0},
                           successors=[exit_block, old_entry]))
    for old, new in rewritten.items():
        replace_all_uses(old, new)
        op = old.op
        assert op.parent is not None
        op.parent.ops.remove(op)
    # the global index of a fused dimension: `run * R * B + T`
    for block in list(nested_blocks(body)):
        for op in list(block.ops):
            if op.name not in ("ptx.add", "ptx.mad") or not op.results:
                continue
            got = _global_index(op, index_of)
            if got is None:
                continue
            first, fused_t, size, wide = got
            line = op.attributes.get("line", 0)
            bsize = Operation("upir.const", [], ["i32"], {"value": size})
            if wide:        # (run * R) * B and T widened: the same 64-bit sum, exactly
                scaled = Operation("ptx.mul", [first, bsize.result], ["i64"],
                                   {"mods": ["wide", "u32"], "line": line})
                thread = Operation("ptx.cvt", [fused_t], ["i64"], {"mods": ["u64", "u32"],
                                                                   "line": line})
                new_ops = [bsize, scaled, thread]
            else:
                scaled = Operation("ptx.mul", [first, bsize.result], ["i32"],
                                   {"mods": ["lo", "u32"], "line": line})
                new_ops = [bsize, scaled]
            mods = [m for m in op.attributes.get("mods", ()) if m != "lo"]
            new_ops.append(Operation("ptx.add", [scaled.result, new_ops[-1].result if wide
                                                 else fused_t],
                                     [op.results[0].type], {"mods": mods, "line": line}))
            at = block.ops.index(op) + 1
            for k, o in enumerate(new_ops):
                o.parent = block
                block.ops.insert(at + k, o)
            replace_all_uses(op.results[0], new_ops[-1].result)
            op.drop_uses()
            block.ops.remove(op)
    return (lengths[0], lengths[1])


@register("fuse-block-runs",
          "thread blocks run together as one wider block (Rx x Ry blocks; code specialized "
          "for a block shape, when the launch asks for runs)")
@dataclass(frozen=True)
class FuseBlockRuns:
    """Pass: runs the launch's requested run of blocks (`block_run_request`) as one block
    when the kernel's blocks cannot see each other; records `block_run` and the fused shape
    in `block_dims`, or `block_run_refused` (the reason) when it may not."""
    name: str = "fuse-block-runs"
    form: ClassVar[str] = "cfg"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of blocks run as one (0: none fused)."""
        request = kernel.attributes.get(REQUEST)
        dims = kernel.attributes.get("block_dims")
        if dims is None or kernel.attributes.get(ATTRIBUTE):
            return 0
        # (also without a request: the code for the shape says whether asking would pay,
        # so that the launcher compiles no variant only to find it refused)
        bx, by, bz = (int(x) for x in dims)
        rx, ry = (int(x) for x in request or (1, 1))
        why = refusal(kernel) or unprofitable(kernel)
        trial = None
        if why is None:
            # rewritten on a copy first: where the kernel reads its indices other than in
            # `blockIdx * blockDim + threadIdx`, the fused ones (T % B, run * R + T / B)
            # may hide from the access analysis that its loops' accesses stay consecutive;
            # then x alone is tried (a row index built as (threadIdx.y + r) + blockIdx.y *
            # blockDim.y: fused in y, the loop's accesses would look unknown across x)
            before, _ = _loop_accesses(kernel)
            asked = (rx, ry) if rx * ry > 1 else (2, 2)
            for run in (asked, (asked[0], 1)) if asked[1] > 1 and asked[0] > 1 else (asked,):
                try:
                    trial = parse_op(print_op(kernel))
                except (CpuifyError, ValueError) as e:   # (no copy: no runs, as ever)
                    trial, why = None, f"its IR does not print and parse back ({e})"
                    break
                fx, fy = fuse_block_runs(trial, run, (bx, by, bz))
                after, why = _loop_accesses(trial)
                if fx * fy == 1:
                    why = "it reads neither threadIdx.x nor threadIdx.y"
                elif why is None and after < before:
                    why = (f"fused, {before - after} of the {before} loop accesses consecutive "
                           "across threadIdx.x would not be (it reads its indices other than "
                           "as blockIdx * blockDim + threadIdx)")
                if why is None:
                    break
        if why is not None or trial is None:
            kernel.attributes["block_run_refused"] = why
            return 0
        kernel.attributes["block_runs_possible"] = True
        if rx * ry <= 1:
            return 0
        regions = list(trial.regions)
        trial.regions = []
        kernel.regions = []
        for region in regions:
            kernel.add_region(region)
        kernel.attributes[ATTRIBUTE] = [fx, fy]
        kernel.attributes["block_dims"] = [bx * fx, by * fy, bz]
        return fx * fy
