"""The pass manager: every transform of the parallel IR is a named pass, and a pipeline is a
list of pass names.

    cpuify ir kernel.cu --print-ir-after=all          # the IR after each pass
    cpuify explain kernel.cu --disable-pass=parallel-licm
    RawModule(code, options=("--disable-pass=interchange-uniform-loops",))

A pass is a small frozen dataclass with a `name` and a `run(kernel)` method that rewrites one
`upir.kernel` op in place and returns what it changed (a count, printed by `cpuify explain`).
What a pass decides and later stages need is recorded in the IR itself (attributes on the ops
it inserts), never handed over on the side: code generation reads only the IR.

Pipeline options come from the command line (`--passes`, `--disable-pass`, `--print-ir-after`,
`--verify-each`), from `RawModule(options=...)` (the same spellings) or, for whole programs
built by `cpuify nvcc`, from the environment (`CPUIFY_PASSES`, `CPUIFY_DISABLE_PASSES`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence, TextIO

from cpuify.analysis.manager import AnalysisManager
from cpuify.errors import CpuifyError
from cpuify.ir.core import Operation
from cpuify.ir.printer import print_op
from cpuify.ir.structured import has_structured_ops, lower_structured_control_flow
from cpuify.ir.verifier import verify


class KernelPass(Protocol):
    name: str

    def run(self, kernel: Operation, analyses: AnalysisManager | None = None) -> int:
        """Rewrite `kernel` (a `upir.kernel` op) in place; return how many changes were made
        (0: the IR is unchanged).  `analyses`: analyses of the kernel's regions shared with
        the other passes."""
        ...


#: name -> factory of the pass (registration order is the default pipeline's order)
REGISTRY: dict[str, Callable[[], KernelPass]] = {}
#: what each pass's count means, for `cpuify explain` and `--help`
DESCRIPTIONS: dict[str, str] = {}


def register(name: str, description: str) -> Callable[[Callable[[], KernelPass]], Callable[[], KernelPass]]:
    def deco(factory: Callable[[], KernelPass]) -> Callable[[], KernelPass]:
        REGISTRY[name] = factory
        DESCRIPTIONS[name] = description
        return factory
    return deco


def _load_passes() -> None:
    # importing the modules registers their passes (one module per pass family)
    from cpuify.transforms import (  # noqa: F401
        barriers, canonicalize, flush, forwarding, ifconvert, interchange, licm, narrowing,
        progress, reroll, structured_cf, sum_split,
        thread_ranges, threads, warps,
    )


def default_pipeline() -> list[str]:
    _load_passes()
    return list(DEFAULT_ORDER)


#: the default pipeline, in order: yield points in spin-wait loops (before anything moves
#: their loads: a wait must read memory again in every round), the lockstep steps of
#: warp-synchronous code (every later pass sees them as the warp sync points they are),
#: duplicate thread dimensions (what the thread loops
#: run), 64-bit loop arithmetic read only through its low half in 32 bits (cooperative
#: groups' grid-stride loops become the ones the interchange knows), canonical forms (selects that are min/max) and
#: if-conversions first (they make values recomputable and loops branch-free), nvcc's
#: unrolled remainder + main loops re-rolled into the simple strided loop (before anything
#: hoists or moves their code, and before the interchange that wants the simple loop), then
#: hoisting out of the grid (before barrier elimination, which
#: may differ between the generic code and code specialized for a block shape, while the
#: launch prologue both share must not), store-to-load forwarding across barriers (a round
#: trip through shared memory gone lets barrier elimination drop the barrier it crossed),
#: barrier elimination and motion, then the
#: interchanges that insert soft barriers (they must see the final loops and barriers; the
#: in-order float sums of row-per-thread loops split out just before the uniform one);
#: flushes left to the readers (it reads who reads each value in the final IR); the threads
#: each `if` on one thread index selects (on the final branches: the thread loops' bounds); the CFG
#: raised to structured if/while/for last, for the printed IR and `explain` (the other
#: passes and code generation work on the CFG: they lower it first, ir/structured.py)
DEFAULT_ORDER = ("spin-wait-yields", "warp-lockstep", "merge-duplicate-threads",
                 "narrow-induction-variables", "selects-to-min-max", "thread-index-outermost",
                 "if-convert-swaps", "select-if-phis", "reroll-loops", "parallel-licm", "store-forwarding",
                 "barrier-elimination",
                 "barrier-motion", "interchange-thread-strided-loops",
                 "split-in-order-sums", "interchange-uniform-loops", "min-cut-fission", "simd-collectives",
                 "flush-min-max-at-uses", "thread-index-ranges", "raise-structured-cf")


class PipelineError(CpuifyError):
    """A pipeline option names no pass, or a pass left IR that does not verify."""


@dataclass(frozen=True)
class PipelineOptions:
    """Which passes run, and what is printed or checked between them."""
    passes: tuple[str, ...] | None = None        # None: the default pipeline
    disabled: frozenset[str] = frozenset()
    print_after: frozenset[str] = frozenset()    # pass names, or {"all"}
    verify_each: bool = False
    # lockstep steps at every shared/generic access of every kernel (`--warp-lockstep`,
    # CPUIFY_WARP_LOCKSTEP=1): the warp-lockstep pass runs with all=true
    warp_lockstep_all: bool = False

    def pipeline(self) -> list[str]:
        """The passes that run, in order, each as `name` or `name{option=value,...}`."""
        _load_passes()
        specs = default_pipeline() if self.passes is None else list(self.passes)
        if self.warp_lockstep_all:
            specs = ["warp-lockstep{all=true}" if pass_name(s) == "warp-lockstep" else s
                     for s in specs]
        for spec in specs:
            make_pass(spec)             # unknown passes and options are errors now
        for n in sorted(self.disabled) + sorted(self.print_after - {"all"}):
            if n not in REGISTRY:
                raise PipelineError(f"unknown pass '{n}'; the passes are: {', '.join(REGISTRY)}")
        return [s for s in specs if pass_name(s) not in self.disabled]

    def key(self) -> str:
        """What distinguishes the generated code (for cache keys): the passes that run."""
        return ",".join(self.pipeline())

    @staticmethod
    def parse(options: Sequence[str]) -> tuple["PipelineOptions", list[str]]:
        """Split cpuify's pipeline options (`--passes=a,b`, `--disable-pass=a`,
        `--print-ir-after=a|all`, `--verify-each`, `--warp-lockstep`) from the rest (left for NVRTC/nvcc)."""
        passes: list[str] | None = None
        disabled: set[str] = set()
        print_after: set[str] = set()
        verify_each = False
        lockstep_all = False
        rest: list[str] = []
        for o in options:
            o = str(o)
            if o.startswith("--passes="):
                passes = split_pipeline(o.split("=", 1)[1])
            elif o.startswith("--disable-pass="):
                disabled.update(p for p in o.split("=", 1)[1].split(",") if p)
            elif o.startswith("--print-ir-after="):
                print_after.update(p for p in o.split("=", 1)[1].split(",") if p)
            elif o == "--verify-each":
                verify_each = True
            elif o == "--warp-lockstep":
                lockstep_all = True
            else:
                rest.append(o)
        opts = PipelineOptions(tuple(passes) if passes is not None else None, frozenset(disabled),
                               frozenset(print_after), verify_each, lockstep_all)
        opts.pipeline()     # unknown names are an error now, not at the first kernel
        return opts, rest


def split_pipeline(text: str) -> list[str]:
    """`a,b{x=1,y=true},c` -> ['a', 'b{x=1,y=true}', 'c'] (commas inside braces stay)."""
    out: list[str] = []
    depth = 0
    cur = ""
    for ch in text:
        if ch == "," and depth == 0:
            if cur.strip():
                out.append(cur.strip())
            cur = ""
            continue
        depth += (ch == "{") - (ch == "}")
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def pass_name(spec: str) -> str:
    return spec.split("{", 1)[0].strip()


def make_pass(spec: str) -> KernelPass:
    """The pass a pipeline entry names, with its options: `name{option=value,...}` (MLIR's
    spelling); options are the pass's dataclass fields, typed (bool: true/false, int)."""
    import dataclasses
    _load_passes()
    name = pass_name(spec)
    factory = REGISTRY.get(name)
    if factory is None:
        raise PipelineError(f"unknown pass '{name}'; the passes are: {', '.join(REGISTRY)}")
    options: dict[str, object] = {}
    body = spec[len(name):].strip()
    if body:
        if not (body.startswith("{") and body.endswith("}")):
            raise PipelineError(f"pass '{spec}': options are written name{{option=value,...}}")
        fields = {f.name: f for f in dataclasses.fields(factory) if f.name != "name"}  # type: ignore[arg-type]
        for item in split_pipeline(body[1:-1]):
            key, eq, value = item.partition("=")
            key = key.strip()
            f = fields.get(key)
            if f is None or not eq:
                known = ", ".join(f"{k}: {v.type}" for k, v in fields.items()) or "none"
                raise PipelineError(f"pass '{name}' has no option '{key}' (its options: {known})")
            value = value.strip()
            if f.type in (bool, "bool"):
                if value not in ("true", "false"):
                    raise PipelineError(f"pass '{name}': option '{key}' takes true or false")
                options[key] = value == "true"
            else:
                try:
                    options[key] = int(value)
                except ValueError:
                    raise PipelineError(f"pass '{name}': option '{key}' takes an integer") from None
    return factory(**options)


@dataclass
class PipelineResult:
    """What each pass changed (pass name -> count), in pipeline order."""
    counts: dict[str, int] = field(default_factory=dict)
    analyses_computed: int = 0


def run_pipeline(kernel: Operation, options: PipelineOptions | None = None,
                 out: TextIO | None = None) -> PipelineResult:
    """Run the pipeline's passes over one `upir.kernel` op, in place."""
    options = options or PipelineOptions()
    out = out or sys.stderr
    result = PipelineResult()
    name_attr = kernel.attributes.get("sym_name", "?")
    analyses = AnalysisManager()
    structured = has_structured_ops(kernel)     # (read from an MLIR file, or raised below)
    for spec in options.pipeline():
        p = make_pass(spec)
        name = p.name
        if structured and not getattr(p, "structured", False):
            # a pass after raise-structured-cf works on the CFG, as code generation does
            if lower_structured_control_flow(kernel):
                analyses.invalidate()
            structured = False
        result.counts[name] = p.run(kernel, analyses)
        if result.counts[name]:
            analyses.invalidate()       # the IR changed: analyses are recomputed on demand
            structured = structured or getattr(p, "structured", False)
        if options.verify_each:
            try:
                verify(kernel)
            except CpuifyError as exc:
                raise PipelineError(f"kernel '{name_attr}': the IR after pass '{name}' does not "
                                    f"verify: {exc}") from None
        if name in options.print_after or "all" in options.print_after:
            out.write(f"// -----// IR of kernel '{name_attr}' after {name} //----- //\n")
            out.write(print_op(kernel))
    result.analyses_computed = analyses.computed
    return result
