"""`flush-min-max-at-uses`: a `min/max.ftz.f32` whose result is only ever read through a
flush leaves the flush to its readers.

Code compiled with `-ftz=true` (every CuPy-style compile) carries `.ftz` on each f32 `min`
and `max`: subnormal operands and results are flushed to zeros of the same sign.  The CPU's
DAZ/FTZ switches do not flush min/max exactly (codegen/denormals.py), so the code generator
flushes their operands and result in code: a compare and a select each.  In a running
maximum (`m = fmaxf(m, x[c])`) those selects sit on the loop-carried value, LLVM no longer
sees a max reduction, and the loop stays scalar (row_softmax: 35 -> 300 ms).

Flushing (ftz) is monotone and idempotent, and PTX's min/max are the min/max of the total
order with -0 below +0 (NaN operands ignored, or propagated with `.NaN`); so

    max.ftz(a, b) = ftz(max(a, b))          ftz(max(ftz(u), v)) = ftz(max(u, v))

and a min/max whose result reaches only readers that flush it themselves (f32 `.ftz`
arithmetic and comparisons, another such min/max, moves and branch arguments into values
read the same way) may skip all its flushes: its readers see exactly what the GPU computes.
The pass finds those values (the greatest set closed under "read only through a flush")
and marks the min/max ops with `flush_at_uses = true`; the code generator then emits the
plain `llvm.maximumnum` (a reduction the vectorizer knows).  The op keeps its `.ftz`, so the
reference interpreter still flushes, and the kernel's hardware-flush decision is unchanged.

Must not fire on a min/max whose result is stored, converted, compared without `.ftz`,
moved to an integer register or used by anything else that sees a subnormal -- except that
a running min/max (one whose result comes back to it through a loop's block argument) read
that way gets a flush of its own in front of such a reader first: `cvt.ftz.f32.f32`, which
gives the reader exactly the flushed value the min/max.ftz gave it, so that the loop's max
stays a reduction (`m = fmaxf(m, x[c]); ... out[row] = m;` under -ftz: the flush once
after the loop instead of twice per element, 2^16 rows x 784 columns: 580 -> ~15 ms)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cpuify.analysis.manager import AnalysisManager
from cpuify.ir.core import Operation, OpResult, Value
from cpuify.ir.modifiers import mods
from cpuify.ir.structured import forwarded_values
from cpuify.transforms.pass_manager import register

ATTRIBUTE = "flush_at_uses"

#: f32 ops that flush every operand when they carry `.ftz` (codegen: ptx_ops.fsrc on each)
_FLUSHING_READERS = frozenset({"ptx.add", "ptx.sub", "ptx.mul", "ptx.fma", "ptx.div",
                               "ptx.setp", "ptx.cvt"})
_MIN_MAX = frozenset({"ptx.min", "ptx.max"})
#: modifiers a min/max may carry and still be the plain min/max of the total order
_MIN_MAX_MODS = frozenset({"f32", "ftz", "NaN"})
_BRANCHES = frozenset({"cf.br", "cf.cond_br"})


def _is_f32_min_max(op: Operation) -> bool:
    m = mods(op)
    return op.name in _MIN_MAX and "f32" in m and set(m) <= _MIN_MAX_MODS


def _reads_flushed(use: Operation, value: Value, read_flushed: set[Value]) -> bool:
    """Whether `use` reads `value` only through a flush (given the values in
    `read_flushed` are themselves read only through one)."""
    name = use.name
    if name in _FLUSHING_READERS:
        m = mods(use)
        return "ftz" in m and m[-1] == "f32" and value in use.operands
    if name in _MIN_MAX:
        # ftz(max(a, b)) = max(ftz(a), ftz(b)): a min/max read only through a flush reads
        # its operands only through one (with or without .ftz of its own)
        return _is_f32_min_max(use) and use.results[0] in read_flushed
    if name == "ptx.mov":
        return mods(use) == ["f32"] and use.results[0] in read_flushed
    passed = forwarded_values(use)
    if passed is not None:
        # a branch or a structured op's edge: read through the values it becomes
        if value in _read_operands(use, passed):
            return False
        return all(to in read_flushed for v, to in passed if v is value)
    return False


def _read_operands(use: Operation, passed: list[tuple[Value, Value]]) -> list[Value]:
    """The operands `use` reads itself (a branch's condition, a for's bounds), not only
    passes on (`passed`: forwarded_values(use))."""
    if use.name in _BRANCHES:
        return use.operands
    kept = {id(v) for v, _ in passed}
    return [v for v in use.operands if id(v) not in kept]


def read_only_through_flush(kernel: Operation) -> set[Value]:
    """The f32 values (min/max and move results, block arguments) whose every reader flushes
    them: the greatest such set, found by removing values with another reader until none
    is left."""
    candidates: set[Value] = set()
    # block argument (or structured op's result) -> the values passed into it
    incoming: dict[Value, list[Value]] = {}
    for op in kernel.walk():
        if _is_f32_min_max(op) or (op.name == "ptx.mov" and mods(op) == ["f32"]):
            candidates.add(op.results[0])
        for region in op.regions:
            for block in region.blocks:
                candidates.update(a for a in block.args if a.type == "f32")
        for value, param in forwarded_values(op) or ():
            incoming.setdefault(param, []).append(value)
            if param.type == "f32":
                candidates.add(param)       # (a structured op's result: a merge, as an argument)
    work = list(candidates)
    while work:
        v = work.pop()
        if v not in candidates:
            continue
        if all(_reads_flushed(u, v, candidates) for u in v.uses):
            continue
        candidates.discard(v)
        # whoever passed values into v (its operands, or the branch arguments of a block
        # argument) may now have a reader that no longer flushes
        sources = incoming[v] if v in incoming else \
            v.op.operands if isinstance(v, OpResult) else []
        work.extend(x for x in sources if x in candidates)
    return candidates


def _transparent_results(use: Operation, value: Value) -> list[Value] | None:
    """The values `use` passes `value` on to unchanged (a min/max of it, a move, the block
    arguments a branch passes it into), or None when `use` is another kind of reader."""
    if _is_f32_min_max(use) and "ftz" in mods(use):
        return [use.results[0]]
    if use.name == "ptx.mov" and mods(use) == ["f32"]:
        return [use.results[0]]
    passed = forwarded_values(use)
    if passed is not None and value not in _read_operands(use, passed):
        return [to for v, to in passed if v is value]
    return None


def flush_before_other_readers(kernel: Operation) -> int:
    """Put a `cvt.ftz.f32.f32` in front of each reader that does not flush (a store, a
    conversion, a comparison without .ftz, ...) of a running min/max.ftz: a chain of f32
    min/max.ftz ops, moves and block arguments that leads back to one of its own operands
    (a loop's max).  Returns the number of flushes inserted."""
    inserted = 0
    for op in list(kernel.walk()):
        if not (_is_f32_min_max(op) and "ftz" in mods(op)):
            continue
        # the chain the result flows through, and whether it comes back to the op
        chain: list[Value] = [op.results[0]]
        seen = set(chain)
        loops_back = False
        i = 0
        while i < len(chain):
            v = chain[i]
            i += 1
            for use in v.uses:
                if use is op:
                    loops_back = True
                nexts = _transparent_results(use, v)
                for n in nexts or ():
                    if n not in seen:
                        seen.add(n)
                        chain.append(n)
        if not loops_back:
            continue
        for v in chain:
            for use in list(v.uses):
                if _transparent_results(use, v) is not None or _reads_flushed(use, v, set()):
                    continue
                block = use.parent
                if block is None:
                    continue
                flush = Operation("ptx.cvt", [v], ["f32"],
                                  {"mods": ["ftz", "f32", "f32"], "line": use.attributes.get("line")})
                flush.parent = block
                block.ops.insert(block.ops.index(use), flush)
                for k, operand in enumerate(use.operands):
                    if operand is v:
                        use.set_operand(k, flush.results[0])
                inserted += 1
    return inserted


@register("flush-min-max-at-uses",
          "f32 min/max.ftz ops whose results are read only through a flush (their flushes "
          "left to the readers: a running max stays a vectorizable reduction)")
@dataclass(frozen=True)
class FlushMinMaxAtUses:
    """Pass: mark `min/max.ftz.f32` ops read only through a flush `flush_at_uses`."""
    name: str = "flush-min-max-at-uses"
    #: it follows values through branches and structured ops alike (forwarded_values)
    form: ClassVar[str] = "any"

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Returns the number of min/max ops marked."""
        flush_before_other_readers(kernel)
        flushed = read_only_through_flush(kernel)
        count = 0
        for op in kernel.walk():
            if _is_f32_min_max(op) and "ftz" in mods(op) and op.results[0] in flushed \
                    and not op.attributes.get(ATTRIBUTE):
                op.attributes[ATTRIBUTE] = True
                count += 1
        return count
