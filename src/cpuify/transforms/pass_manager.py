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
built by `cpuify nvcc`, from the environment (`CPUIFY_PASSES`, `CPUIFY_DISABLE_PASSES`).

Forms.  The block body is either a CFG (`cf.br`/`cf.cond_br` between blocks) or structured
(raise-structured-cf nested its reducible control flow into `upir.if`/`upir.while`/`upir.for`
ops).  Each pass class says which it works on in a `form` class attribute:

  * `"structured"`: structured ops (raise-structured-cf itself, and passes that work on
    loops and ifs as ops with regions);
  * `"cfg"` (the default, for a pass with no `form`): a CFG, all of it in the block body's
    blocks (the pass reads branches, block arguments, dominators);
  * `"any"`: either; the pass walks nested regions and follows values through structured
    ops as through branches (ir/structured.py `forwarded_values`).

An "any" pass may also lower the kernel itself when the rewrite it has to make is the
CFG's, only where a quick test on the structured form says it may fire
(`lower_for_cfg_rewrite`; narrow-induction-variables where a 64-bit merged value may narrow,
reroll-loops where nvcc's unrolled loops may be, the barrier passes where a barrier is,
split-in-order-sums where a loop of one block carries a float and stores, simd-collectives
where a warp collective is): the manager sees that and counts it as a lowering for that
pass.  The two loop interchanges rewrite `upir.for`/`upir.while` ops in place (their soft
barrier, iteration counter and exit stops put into the regions where the lowering puts the
loop's header and exits: transforms/interchange_structured.py) and lower only a kernel that
keeps a cycle of blocks in a region (what the raise left as CFG).  A "structured" pass may
say that it cannot fire on a kernel (a `may_fire(kernel)` method: split-row-streams without
a block shape or two global accesses): it is then skipped there, not raised for.

raise-structured-cf runs early; from there on the structured form is the pipeline's working
form.  The pass manager converts only at a transition: it lowers (ir/structured.py) before a
"cfg" pass that finds structured ops, raises again before a "structured" pass that finds a
CFG, and raises once more after the last pass when the pipeline's raise ran and a "cfg" pass
left a CFG, so the IR the pipeline hands on (printed, `explain`, MLIR export) is structured.
An "any" pass runs on the form it finds.  Code generation and the interpreter lower it."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence, TextIO

from cpuify.analysis.manager import AnalysisManager, cached
from cpuify.errors import CpuifyError
from cpuify.ir.core import Operation
from cpuify.ir.printer import print_op
from cpuify.ir.structured_shapes import region_has_structured_ops
from cpuify.ir.structured import has_structured_ops, lower_structured_control_flow
from cpuify.ir.verifier import verify


#: the forms a pass may declare (its class's `form`; none declared: "cfg")
FORMS = ("cfg", "structured", "any")
#: the pass that raises the CFG to structured ops (the pass manager runs it at transitions)
RAISE = "raise-structured-cf"


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
        access_streams, barriers, block_runs, canonicalize, flush, forwarding, ifconvert, interchange, licm, narrowing,
        prefetch_distance, progress, reroll, selected_loads, structured_cf, sum_split,
        thread_ranges, threads, tiles_in_place, warps,
    )


def default_pipeline() -> list[str]:
    _load_passes()
    return list(DEFAULT_ORDER)


#: the default pipeline, in order: runs of blocks fused into one block when the launch asks
#: for them (it rewrites the thread and block indices every later pass reads); yield points in spin-wait loops (before anything moves
#: their loads: a wait must read memory again in every round), the lockstep steps of
#: warp-synchronous code (every later pass sees them as the warp sync points they are), both
#: on the CFG lifting made (they insert blocks and barriers on its edges); the CFG raised to
#: structured if/while/for, the working form from here on ("cfg" passes get it lowered, see
#: Forms above); duplicate thread dimensions (what the thread loops
#: run), 64-bit loop arithmetic read only through its low half in 32 bits (cooperative
#: groups' grid-stride loops become the ones the interchange knows), canonical forms (selects that are min/max) and
#: if-conversions first (they make values recomputable and loops branch-free; a swap's
#: selects pick the smaller and larger key, which selects-to-min-max would make min/max:
#: if-convert-swaps after it keeps them selects; every pass after the raise takes the
#: structured form, those whose rewrite is the CFG's lowering it only where they may fire),
#: nvcc's
#: unrolled remainder + main loops re-rolled into the simple strided loop (before anything
#: hoists or moves their code, and before the interchange that wants the simple loop), then
#: hoisting out of the grid (before barrier elimination, which
#: may differ between the generic code and code specialized for a block shape, while the
#: launch prologue both share must not), shared tiles that only stage global data read in
#: place in a version of the body without their stores (before the barrier passes, which
#: then find that version's barrier ordering nothing), store-to-load forwarding across barriers (a round
#: trip through shared memory gone lets barrier elimination drop the barrier it crossed),
#: barrier elimination and motion, then the
#: interchanges that insert soft barriers (they must see the final loops and barriers; the
#: in-order float sums of row-per-thread loops split out just before the uniform one), then
#: soft barriers between rows of one array in a barrier interval (split-row-streams: one row
#: per pass; before the min-cut, which plans what crosses every barrier);
#: flushes left to the readers (it reads who reads each value in the final IR); the threads
#: each `if` on one thread index selects (on the final branches: the thread loops' bounds);
#: how far ahead the loops with barriers prefetch (it reads the final loops and barriers);
#: last, the kernels whose generic thread loops may be flat (it only marks the kernel)
DEFAULT_ORDER = ("fuse-block-runs", "spin-wait-yields", "warp-lockstep", RAISE, "merge-duplicate-threads",
                 "narrow-induction-variables", "selects-to-min-max", "speculate-selected-loads",
                 "thread-index-outermost",
                 "if-convert-swaps", "select-if-phis", "reroll-loops", "parallel-licm", "tiles-in-place", "store-forwarding",
                 "barrier-elimination",
                 "barrier-motion", "interchange-thread-strided-loops",
                 "split-in-order-sums", "interchange-uniform-loops", "split-row-streams", "min-cut-fission", "simd-collectives",
                 "flush-min-max-at-uses", "thread-index-ranges", "stream-prefetch-distance",
                 "flat-thread-loops")


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


def pass_form(p: KernelPass) -> str:
    """The form `p` works on (its class's `form`; "cfg" when it declares none)."""
    form = getattr(p, "form", "cfg")
    if form not in FORMS:
        raise PipelineError(f"pass '{p.name}' declares form {form!r}; the forms are "
                            f"{', '.join(FORMS)}")
    return str(form)


@dataclass
class PipelineResult:
    """What each pass changed (pass name -> count), in pipeline order."""
    counts: dict[str, int] = field(default_factory=dict)
    analyses_computed: int = 0
    #: the conversions the pass manager made between passes, in order: ("lower" | "raise",
    #: the pass they were made for, or "" after the last), only those that changed the IR
    transitions: list[tuple[str, str]] = field(default_factory=list)


def run_pipeline(kernel: Operation, options: PipelineOptions | None = None,
                 out: TextIO | None = None) -> PipelineResult:
    """Run the pipeline's passes over one `upir.kernel` op, in place, converting between the
    CFG and the structured form where a pass needs the other (module doc: Forms)."""
    options = options or PipelineOptions()
    out = out or sys.stderr
    result = PipelineResult()
    name_attr = kernel.attributes.get("sym_name", "?")
    analyses = AnalysisManager()
    specs = options.pipeline()
    # the form the IR is in: structured once raised (or read so from an MLIR file)
    structured = has_structured_ops(kernel)
    # the form the pipeline hands on: structured once its raise ran, else the CFG
    working_structured = False
    for spec in specs:
        p = make_pass(spec)
        name = p.name
        form = pass_form(p)
        skip = False
        if form == "cfg" and structured:
            if lower_structured_control_flow(kernel):
                analyses.invalidate()
                result.transitions.append(("lower", name))
            structured = False
        elif form == "structured" and not structured and name != RAISE:
            if getattr(p, "may_fire", lambda k: True)(kernel):
                if _raise(kernel, analyses):
                    result.transitions.append(("raise", name))
                structured = True
            else:
                skip = True     # (it cannot fire on this kernel: not raised for it)
        # (structured ops before an "any" pass: a kernel with none is in both forms at once)
        had_structured_ops = form == "any" and structured and has_structured_ops(kernel)
        result.counts[name] = 0 if skip else p.run(kernel, analyses)
        if result.counts[name]:
            analyses.invalidate()       # the IR changed: analyses are recomputed on demand
        if had_structured_ops and not has_structured_ops(kernel):
            # (an "any" pass may lower the kernel itself where it must rewrite the CFG:
            # narrow-induction-variables; counted as the transition it is)
            analyses.invalidate()
            result.transitions.append(("lower", name))
            structured = False
        if name == RAISE:
            structured = working_structured = True
        if options.verify_each:
            _verify(kernel, name_attr, name)
        if name in options.print_after or "all" in options.print_after:
            out.write(f"// -----// IR of kernel '{name_attr}' after {name} //----- //\n")
            out.write(print_op(kernel))
    if working_structured and not structured:
        # a "cfg" pass ran last: the IR is handed on in the working form
        if _raise(kernel, analyses):
            result.transitions.append(("raise", ""))
    elif working_structured:
        # never lowered since the raise: what passes on the regions changed is recounted
        from cpuify.transforms.structured_cf import recount_structure
        recount_structure(kernel)
    elif not working_structured and any(t == "raise" for t, _ in result.transitions):
        # (the raise is not in the pipeline, `--disable-pass=raise-structured-cf`: the CFG
        # is the working form, structured only for the passes that needed it; what the
        # raises at the transitions recorded goes too: explain shows no structure)
        from cpuify.transforms.structured_cf import forget_structure
        forget_structure(kernel)
        if structured and lower_structured_control_flow(kernel):
            result.transitions.append(("lower", ""))
    if options.verify_each and result.transitions and result.transitions[-1][1] == "":
        _verify(kernel, name_attr, f"the final {result.transitions[-1][0]}")
    result.analyses_computed = analyses.computed
    return result


def structured_now(kernel: Operation, analyses: AnalysisManager | None) -> bool:
    """Whether the kernel holds structured ops (cached with the analyses: the quick tests
    of the "any" passes ask before each pass, and a scan of a large CFG is not free)."""
    if not kernel.regions:
        return has_structured_ops(kernel)
    return cached(analyses, region_has_structured_ops, kernel.regions[0])


def lower_for_cfg_rewrite(kernel: Operation, analyses: AnalysisManager | None) -> None:
    """For an "any" pass whose analysis and rewrite are the CFG's, where its quick test on
    the structured form says it may fire: the kernel lowered (the manager counts it as the
    pass's lowering) and what was cached of the structured form dropped."""
    if lower_structured_control_flow(kernel) and analyses is not None:
        analyses.invalidate()


def _raise(kernel: Operation, analyses: AnalysisManager) -> int:
    """raise-structured-cf at a transition (its records on the kernel updated too)."""
    made = make_pass(RAISE).run(kernel, analyses)
    if made:
        analyses.invalidate()
    return made


def _verify(kernel: Operation, kernel_name: str, after: str) -> None:
    try:
        verify(kernel)
    except CpuifyError as exc:
        raise PipelineError(f"kernel '{kernel_name}': the IR after pass '{after}' does not "
                            f"verify: {exc}") from None
