"""Op definitions: what each op name promises (traits, memory effects, verification).

Dialects:
  * `upir`  — the parallel structure: `upir.kernel` ▸ `upir.grid_parallel` ▸
    `upir.block_parallel` (each holding one region), kernel parameters, special registers,
    the block barrier and the warp collectives (which order memory of the spaces they name).
  * `ptx`   — one op per PTX instruction, SSA form: `ptx.add {mods = ["s32"]}`.  Memory
    ops (`ptx.ld`, `ptx.st`, `ptx.atom`, `ptx.red`) take an address value plus an
    immediate `offset` attribute; `space` attributes name the state space.
  * `cf`    — unstructured control flow inside the block body (`cf.br`, `cf.cond_br`),
    `upir.exit` ends a CUDA thread.  Where the CFG is reducible, raise-structured-cf
    (transforms/structured_cf.py) nests it into `upir.if`/`upir.while`/`upir.for` ops with
    `upir.yield`/`upir.condition` terminators (MLIR's scf ops); ir/structured.py lowers them
    back to the CFG for code generation and the interpreter.

Memory effects answer (kind, space) pairs; passes and code generation read them instead
of special-casing op names (a barrier is an op whose effects are read+write on
shared/global)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from cpuify.errors import IRError
from cpuify.ir.core import Operation
from cpuify.ir.loop_guard import DO_WHILE, guards_entry
from cpuify.ir.ptx_table import BY_IR_OP

READ, WRITE = "read", "write"
ALL_SPACES = ("global", "shared", "local", "const", "param")


@dataclass(frozen=True, slots=True)
class OpInfo:
    name: str
    terminator: bool = False
    pure: bool = False              # no memory effects, no side effects: may be removed/recomputed
    block_sync: bool = False        # all threads of the block meet here (bar.sync)
    warp_sync: bool = False         # the active threads of a warp meet here (shfl, vote, …)
    yield_sync: bool = False        # a thread stops here to let the others run (a spin-wait)
    effects: Callable[[Operation], list[tuple[str, str]]] | None = None
    verify: Callable[[Operation], None] | None = None
    regions: int = 0


REGISTRY: dict[str, OpInfo] = {}


def define(name: str, **kw: object) -> OpInfo:
    info = OpInfo(name, **kw)  # type: ignore[arg-type]
    REGISTRY[name] = info
    return info


def info(op: Operation) -> OpInfo:
    found = REGISTRY.get(op.name)
    if found is None:
        raise IRError(f"unknown op '{op.name}'")
    return found


def memory_effects(op: Operation) -> list[tuple[str, str]]:
    """[(READ|WRITE, space)] for `op`; pure ops have none."""
    i = info(op)
    if i.pure:
        return []
    if i.effects is not None:
        return i.effects(op)
    return [(READ, s) for s in ALL_SPACES] + [(WRITE, s) for s in ALL_SPACES]


def is_sync(op: Operation) -> bool:
    i = REGISTRY.get(op.name)
    return i is not None and (i.block_sync or i.warp_sync or i.yield_sync)


def _space_effect(kinds: tuple[str, ...]) -> Callable[[Operation], list[tuple[str, str]]]:
    def effects(op: Operation) -> list[tuple[str, str]]:
        # the state space: an attribute, or (PTX ops) one of the modifiers
        space = op.attributes.get("space") or next(
            (m for m in op.attributes.get("mods", ()) if m in ALL_SPACES), "generic")
        spaces = ALL_SPACES if space == "generic" else (space,)
        return [(k, s) for k in kinds for s in spaces]
    return effects


def _verify_results(n: int) -> Callable[[Operation], None]:
    def verify(op: Operation) -> None:
        if len(op.results) != n:
            raise IRError(f"'{op.name}' must have {n} result(s), has {len(op.results)}")
    return verify


def _verify_region(op: Operation) -> None:
    if len(op.regions) != 1:
        raise IRError(f"'{op.name}' must hold exactly one region")


# --- parallel structure -------------------------------------------------------------------
define("upir.module", regions=1, verify=_verify_region)
define("upir.global", pure=True)                 # a module-scope variable (attributes only)
define("upir.kernel", regions=1, verify=_verify_region)
define("upir.grid_parallel", regions=1, verify=_verify_region)
define("upir.block_parallel", regions=1, verify=_verify_region)
define("upir.launch_prologue", regions=1, verify=_verify_region)   # runs once per launch
define("upir.launch_store", effects=lambda op: [(WRITE, "param")])  # prologue -> grid value
define("upir.yield", terminator=True, pure=True)
define("upir.param", pure=True, verify=_verify_results(1))
define("upir.special", pure=True, verify=_verify_results(1))   # %tid.x, %ctaid.y, %laneid …
define("upir.const", pure=True, verify=_verify_results(1))
define("upir.addressof", pure=True, verify=_verify_results(1))  # address of a variable
_sync_effects = _space_effect((READ, WRITE))
define("upir.barrier", block_sync=True,
       effects=lambda op: [(k, s) for k in (READ, WRITE) for s in ("shared", "global")])
define("upir.warp_collective", warp_sync=True,
       effects=lambda op: [(k, s) for k in (READ, WRITE) for s in ("shared", "global")])
# the back edge of a loop that waits for memory other threads write (transforms/progress.py):
# a thread that goes round once more stops here, so that the threads and blocks it waits
# for run; nobody meets anybody.  It orders memory like a fence (what the waiting loop
# reads must be read again after it).
define("upir.spin_wait", yield_sync=True,
       effects=lambda op: [(k, s) for k in (READ, WRITE) for s in ("shared", "global")])
# %envreg<N> (the grid workspace of a cooperative launch, as nvcc's grid.sync() reads it): a
# value the launch sets, read when the thread runs, never hoisted out of the grid
define("upir.envreg", effects=lambda op: [], verify=_verify_results(1))
define("upir.exit", terminator=True, effects=lambda op: [])
define("upir.trap", terminator=True, effects=lambda op: [])
define("upir.printf", effects=lambda op: [(READ, "global"), (READ, "local"), (READ, "const")])
define("upir.fence", effects=lambda op: [(k, s) for k in (READ, WRITE) for s in ("shared", "global")])
define("upir.clock", effects=lambda op: [])
define("upir.nanosleep", effects=lambda op: [])
define("upir.malloc", effects=lambda op: [])
# the calling thread's call stack (recursive device functions): its base address and size
define("upir.call_stack", effects=lambda op: [])
# a kernel launched from device code: the child's parameter buffer (and a status), then the
# launch, which reads that buffer (global memory written by the parent)
define("upir.launch_buffer", effects=lambda op: [(WRITE, "global")])
define("upir.launch_device", effects=lambda op: [(READ, "global"), (WRITE, "global")])
define("upir.free", effects=lambda op: [])


def _verify_in_order_sum(op: Operation) -> None:
    types_ = [v.type for v in op.operands]
    result = [r.type for r in op.results]
    if types_ != ["i64", "i64", *result] or result not in (["f32"], ["f64"]):
        raise IRError("'upir.in_order_sum' takes (i64 start, i64 end, f32|f64 init) and "
                      "gives one value of init's type")
    step = op.attributes.get("step")
    elem = 4 if result == ["f32"] else 8
    if not isinstance(step, int) or step < elem or \
            not isinstance(op.attributes.get("offset", 0), int):
        raise IRError(f"'upir.in_order_sum' needs an integer 'step' of at least {elem} bytes "
                      "and an integer 'offset'")
    if "global" not in op.attributes.get("mods", ()):
        raise IRError("'upir.in_order_sum' reads global memory ('mods' names it)")


# a thread's in-order float sum of the values at start + offset, start + step + offset, ...
# below end + offset (`s = init; for (p = start; p < end; p += step) s = add(s, ld(p +
# offset))`, the add's rounding and `.ftz` in `mods`): split-in-order-sums' read-back of a
# row's stored terms (transforms/sum_split.py), which code generation lowers to a call whose
# vector variants transpose the rows of neighbouring threads (codegen/in_order_sums.py)
define("upir.in_order_sum", effects=lambda op: [(READ, "global")], verify=_verify_in_order_sum)

# --- control flow ----------------------------------------------------------------------------
define("cf.br", terminator=True, pure=True)
define("cf.cond_br", terminator=True, pure=True)


# --- structured control flow (MLIR's scf.if / scf.while / scf.for, transforms/structured_cf.py)
# Regions are single-entry CFGs whose entry has no predecessors; the blocks that leave the
# region end with `upir.yield` (values to the op's results, or to the next iteration) or, in
# a while's `before` region, with `upir.condition`.  ir/structured.py lowers them to cf.*.
STRUCTURED_OPS = ("upir.if", "upir.while", "upir.for")


def _region_exits(op: Operation, index: int, name: str) -> list[Operation]:
    """The terminators named `name` of the blocks of op's region `index` (not nested ones)."""
    return [b.ops[-1] for b in op.regions[index].blocks if b.ops and b.ops[-1].name == name]


def _check_types(what: str, values: list[str], expected: list[str]) -> None:
    if values != expected:
        raise IRError(f"{what} has types ({', '.join(values)}), expected ({', '.join(expected)})")


def _verify_if(op: Operation) -> None:
    if len(op.operands) != 1 or op.operands[0].type != "i1":
        raise IRError("'upir.if' takes one i1 condition")
    results = [r.type for r in op.results]
    for k, which in enumerate(("then", "else")):
        region = op.regions[k]
        if region.blocks and region.entry.args:
            raise IRError(f"the {which} region's entry block takes no arguments")
        for y in _region_exits(op, k, "upir.yield"):
            _check_types(f"a yield of the {which} region", [v.type for v in y.operands], results)


def _verify_while(op: Operation) -> None:
    inits = [v.type for v in op.operands]
    results = [r.type for r in op.results]
    before, after = op.regions
    if before.blocks:
        _check_types("the before region's entry", [a.type for a in before.entry.args], inits)
    conditions = _region_exits(op, 0, "upir.condition")
    if not conditions:
        raise IRError("the before region has no 'upir.condition'")
    for c in conditions:
        if not c.operands or c.operands[0].type != "i1":
            raise IRError("'upir.condition' takes an i1 first")
        _check_types("a 'upir.condition'", [v.type for v in c.operands[1:]], results)
    if after.blocks:
        _check_types("the after region's entry", [a.type for a in after.entry.args], results)
    for y in _region_exits(op, 1, "upir.yield"):
        _check_types("a yield of the after region", [v.type for v in y.operands], inits)
    flags = op.attributes.get("exit_flags")       # (ir/structured.py EXIT_FLAGS)
    if flags is not None:
        block = op.parent
        if not (isinstance(flags, int) and 0 <= flags <= len(results)
                and all(t == "i1" for t in results[:flags])):
            raise IRError("'exit_flags' counts the i1 results that name a loop's exit target")
        if len(after.blocks) != 1 or len(after.entry.ops) != 1:
            raise IRError("a while with 'exit_flags' has an after region that only yields")
        if block is None or len(block.ops) < 2 or block.ops[-2] is not op or \
                block.ops[-1].name not in ("cf.br", "cf.cond_br"):
            raise IRError("a while with 'exit_flags' is followed by the branch to its exit "
                          "targets, last in its block")


def _verify_for(op: Operation) -> None:
    if len(op.operands) < 3:
        raise IRError("'upir.for' takes a lower bound, an upper bound and a step")
    lb, ub, step = (v.type for v in op.operands[:3])
    if not (lb == ub == step) or lb not in ("i16", "i32", "i64"):
        raise IRError(f"'upir.for' bounds and step must be one integer type, got {lb}, {ub}, {step}")
    if not isinstance(op.attributes.get("predicate"), list) or \
            not isinstance(op.attributes.get("increment"), list):
        raise IRError("'upir.for' needs its 'predicate' (the setp modifiers that test iv against "
                      "the bound) and 'increment' (the add modifiers)")
    inits = [v.type for v in op.operands[3:]]
    _check_types("'upir.for' results", [r.type for r in op.results], inits)
    body = op.regions[0]
    if body.blocks:
        _check_types("the body's entry", [a.type for a in body.entry.args], [lb] + inits)
    yields = _region_exits(op, 0, "upir.yield")
    for y in yields:
        _check_types("a yield of the body", [v.type for v in y.operands], inits)
    where = op.attributes.get(DO_WHILE)
    if where is not None:
        if not (isinstance(where, list) and len(where) == 3 and all(isinstance(x, int) for x in where)
                and 0 <= where[0] <= len(inits) and len(yields) == 1):
            raise IRError("'upir.for' 'do_while' is [the induction variable's place among the "
                          "header's arguments, the add's and the compare's places from the end "
                          "of the block], for a body with one yield")
        if not guards_entry(op, list(op.attributes["predicate"]), op.operands[0], op.operands[1]):
            raise IRError("a 'upir.for' lowered as a do-while ('do_while') must sit in an arm of "
                          "a 'upir.if' whose condition there is its first test, lb <predicate> ub")


def _verify_condition(op: Operation) -> None:
    region = op.parent.parent if op.parent is not None else None
    owner = region.parent if region is not None else None
    if owner is None or owner.name != "upir.while" or owner.regions[0] is not region:
        raise IRError("'upir.condition' ends a block of a 'upir.while' op's before region only")


def _nested_effects(op: Operation) -> list[tuple[str, str]]:
    """The memory effects of a structured op: those of the ops it holds."""
    seen: set[tuple[str, str]] = set()
    for inner in op.walk():
        if inner is not op:
            seen.update(memory_effects(inner))
    return sorted(seen)


define("upir.if", regions=2, verify=_verify_if, effects=_nested_effects)
define("upir.while", regions=2, verify=_verify_while, effects=_nested_effects)
define("upir.for", regions=1, verify=_verify_for, effects=_nested_effects)
define("upir.condition", terminator=True, pure=True, verify=_verify_condition)
# a value no path reads (MLIR's ub.poison): what a multi-exit while's `upir.condition` passes
# in the slots of the exits it does not take; the lowering leaves none behind
define("upir.undef", pure=True, verify=_verify_results(1))

# --- PTX instructions --------------------------------------------------------------------------
# one `ptx.*` op per entry of the instruction table (ir/ptx_table.py): pure, or the memory
# effects the entry declares ("$space": the state space the op names, all spaces when generic)
def _table_effects(effects: tuple[tuple[str, str], ...]) -> Callable[[Operation], list[tuple[str, str]]]:
    if any(space == "$space" for _, space in effects):
        return _space_effect(tuple(kind for kind, _ in effects))
    fixed = [(kind, space) for kind, space in effects if kind != "none"]
    return lambda op: list(fixed)


def _verify_selp(op: Operation) -> None:
    """The two values a selp chooses between have the result's type (a pass that looks
    through a move to a value of another type, or through an unpacking move to the packed
    value, breaks this)."""
    if op.results and len(op.operands) == 3 and \
            any(v.type != op.results[0].type for v in op.operands[:2]):
        raise IRError(f"selects between {op.operands[0].type} and {op.operands[1].type} "
                      f"into {op.results[0].type}")


_TABLE_VERIFY = {"ptx.selp": _verify_selp}
for _entry in BY_IR_OP.values():
    if _entry.pure_ir_op:
        define(_entry.ir_name, pure=True, verify=_TABLE_VERIFY.get(_entry.ir_name))
    else:
        define(_entry.ir_name, effects=_table_effects(_entry.effects),
               verify=_TABLE_VERIFY.get(_entry.ir_name))
PURE_PTX = tuple(e.opcode for e in BY_IR_OP.values() if e.pure_ir_op)
# ops that are not one PTX instruction: wmma.load/store (one thread's fragment,
# tensor_cores.py); ldmatrix/mma lowered for code generation to local-memory records of the
# warp's lanes (transforms/tensor_cores.py)
define("ptx.wmma_load", effects=_space_effect((READ,)))
define("ptx.wmma_store", effects=_space_effect((WRITE,)))
define("upir.warp_matrix", effects=lambda op: [(READ, s) for s in ALL_SPACES])


def verify_op(op: Operation) -> None:
    i = info(op)
    if i.regions and len(op.regions) != i.regions:
        raise IRError(f"'{op.name}' must hold {i.regions} region(s)")
    if i.verify is not None:
        i.verify(op)


@dataclass(slots=True)
class Counts:
    """What a pass changed, printed by `cpuify explain`."""
    values: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, n: int = 1) -> None:
        self.values[key] = self.values.get(key, 0) + n
