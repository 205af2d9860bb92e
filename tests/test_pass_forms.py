"""The pass manager's forms (transforms/pass_manager.py, Forms): each pass says whether it
works on the CFG, on structured ops or on either; the manager lowers and raises only where
the next pass needs the other form, and hands on the structured form once the pipeline's
raise ran.  Passes of form "any" on structured input: they reach the ops in the regions of
`upir.if`/`upir.while`/`upir.for` and follow values through them as through branches, and
decide as they do on the CFG (IR-in/IR-out, and the same IR whichever form they ran on)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterator

import pytest

from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.core import Operation
from cpuify.ir.parser import parse_op
from cpuify.ir.printer import print_op
from cpuify.ir.structured import has_structured_ops, lower_structured_control_flow
from cpuify.ir.verifier import verify
from cpuify.transforms import pass_manager
from cpuify.transforms.pass_manager import (
    FORMS, REGISTRY, PipelineOptions, default_pipeline, make_pass, pass_form, run_pipeline,
)
from cpuify.transforms.structured_cf import structure_summary
from test_ir import filecheck
from test_structured_cf import BODIES, PROLOGUE, kernel

#: the forms the probes found the IR in, in order
SEEN: list[tuple[str, bool]] = []


@dataclass(frozen=True)
class _Probe:
    """A pass that changes nothing and records whether it found structured ops."""
    name: str = "probe"

    def run(self, kernel: Operation, analyses: object = None) -> int:
        SEEN.append((self.name, has_structured_ops(kernel)))
        return 0


@dataclass(frozen=True)
class _CfgProbe(_Probe):
    name: str = "probe-cfg"


@dataclass(frozen=True)
class _StructuredProbe(_Probe):
    name: str = "probe-structured"
    form: ClassVar[str] = "structured"


@dataclass(frozen=True)
class _AnyProbe(_Probe):
    name: str = "probe-any"
    form: ClassVar[str] = "any"


@pytest.fixture
def probes() -> Iterator[None]:
    for cls in (_CfgProbe, _StructuredProbe, _AnyProbe):
        REGISTRY[cls.name] = cls
        pass_manager.DESCRIPTIONS[cls.name] = "probe"
    SEEN.clear()
    yield
    for cls in (_CfgProbe, _StructuredProbe, _AnyProbe):
        REGISTRY.pop(cls.name)
        pass_manager.DESCRIPTIONS.pop(cls.name)


def _nested() -> Operation:
    op = parse_op(kernel(BODIES["nested"]))
    verify(op)
    return op


def test_every_pass_declares_a_form() -> None:
    default_pipeline()
    forms = {name: pass_form(make_pass(name)) for name in REGISTRY}
    assert set(forms.values()) <= set(FORMS)
    assert forms["raise-structured-cf"] == "structured"
    for name in ("selects-to-min-max", "merge-duplicate-threads", "flush-min-max-at-uses",
                 "thread-index-outermost", "narrow-induction-variables", "parallel-licm",
                 "select-if-phis", "reroll-loops", "speculate-selected-loads"):
        assert forms[name] == "any", name


def test_raise_right_after_the_passes_on_the_lifted_cfg() -> None:
    order = default_pipeline()
    assert order.index("raise-structured-cf") == 3
    assert order[:3] == ["fuse-block-runs", "spin-wait-yields", "warp-lockstep"]


def test_transitions_only_where_the_form_changes(probes: None) -> None:
    op = _nested()
    result = run_pipeline(op, PipelineOptions(passes=(
        "raise-structured-cf", "probe-any", "probe-structured", "probe-cfg", "probe-cfg",
        "probe-any", "probe-structured", "probe-cfg"), verify_each=True))
    assert SEEN == [("probe-any", True), ("probe-structured", True), ("probe-cfg", False),
                    ("probe-cfg", False), ("probe-any", False), ("probe-structured", True),
                    ("probe-cfg", False)]
    # lowered for the first cfg pass only, raised for the structured one, and at the end
    assert result.transitions == [("lower", "probe-cfg"), ("raise", "probe-structured"),
                                  ("lower", "probe-cfg"), ("raise", "")]
    assert has_structured_ops(op)        # the working form is handed on
    text = print_op(op)
    assert 'structured_cf = [["if", ' in text and '"upir.while"' in text


def test_no_raise_in_the_pipeline_hands_on_the_cfg(probes: None) -> None:
    """`--disable-pass=raise-structured-cf`: a structured pass still gets the structured
    form, and the IR is the CFG again after it."""
    op = _nested()
    result = run_pipeline(op, PipelineOptions(passes=("probe-cfg", "probe-structured")))
    assert SEEN == [("probe-cfg", False), ("probe-structured", True)]
    assert result.transitions == [("raise", "probe-structured"), ("lower", "")]
    assert not has_structured_ops(op)
    # (nor what the raise for the structured pass recorded: explain shows no structure)
    assert structure_summary(op) == []
    op = _nested()
    result = run_pipeline(op, PipelineOptions(disabled=frozenset({"raise-structured-cf"})))
    assert not has_structured_ops(op) and structure_summary(op) == []
    # (a structured pass followed by a cfg one: lowered before the cfg pass, and the records
    # go all the same; the passes after it take either form, lowering the kernel for the CFG
    # only where they may fire: barrier-elimination, for the kernel's barrier)
    assert result.transitions[:2] == [("raise", "if-convert-swaps"), ("lower", "barrier-elimination")]


def test_default_pipeline_hands_on_structured_ir() -> None:
    op = _nested()
    result = run_pipeline(op, PipelineOptions(verify_each=True))
    assert has_structured_ops(op)
    # every pass takes the structured form, but those whose rewrite is the CFG's lower the
    # kernel where they may fire (narrow-induction-variables a kernel with a 64-bit merged
    # value to narrow, reroll-loops one with nvcc's unrolled loops, the barrier passes one
    # with a barrier, ...): one lowering, for barrier-elimination (the kernel has a
    # barrier; no block shape: store-forwarding and split-row-streams do nothing, and the
    # latter, a structured pass, says so: no raise for it), and the raise at the end
    assert result.transitions == [("lower", "barrier-elimination"), ("raise", "")]


def test_any_pass_that_lowers_is_counted(probes: None) -> None:
    """An "any" pass may lower the kernel itself (narrow-induction-variables where it must
    rewrite the CFG): the manager records that lowering for it and raises again before the
    next structured pass; a kernel with no structured ops at all is not lowered by anyone."""
    @dataclass(frozen=True)
    class Lowering(_Probe):
        name: str = "probe-lowering"
        form: ClassVar[str] = "any"

        def run(self, kernel: Operation, analyses: object = None) -> int:
            lower_structured_control_flow(kernel)
            return 0
    REGISTRY["probe-lowering"] = Lowering
    try:
        op = _nested()
        result = run_pipeline(op, PipelineOptions(passes=(
            "raise-structured-cf", "probe-lowering", "probe-any", "probe-structured")))
        assert result.transitions == [("lower", "probe-lowering"), ("raise", "probe-structured")]
        assert SEEN == [("probe-any", False), ("probe-structured", True)]
        flat = parse_op(kernel(PROLOGUE + '  "upir.exit"() : () -> ()'))
        result = run_pipeline(flat, PipelineOptions(passes=("raise-structured-cf", "probe-lowering")))
        assert result.transitions == []
    finally:
        REGISTRY.pop("probe-lowering")


def test_unknown_form_is_an_error(probes: None) -> None:
    @dataclass(frozen=True)
    class Bad(_Probe):
        name: str = "probe-bad"
        form: ClassVar[str] = "ssa"
    REGISTRY["probe-bad"] = Bad
    try:
        with pytest.raises(pass_manager.PipelineError, match="declares form 'ssa'"):
            run_pipeline(_nested(), PipelineOptions(passes=("probe-bad",)))
    finally:
        REGISTRY.pop("probe-bad")


# --- passes of form "any" on structured input ------------------------------------------------

#: a select that is a max, inside an if inside a counted loop (a for)
SELECT_IN_LOOP = PROLOGUE + '''
  %b = "ptx.ld"(%p) {mods = ["global", "s32"], offset = 0 : i64} : (i64) -> i32
  "cf.br"(%zero) [^bb1] : (i32) -> ()
^bb1(%i: i32):
  %c = "ptx.setp"(%i, %b) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%c) [^bb2, ^bb5] <{operandSegmentSizes = array<i32: 1, 0, 0>}> : (i1) -> ()
^bb2:
  %d = "ptx.setp"(%t, %i) {mods = ["lt", "s32"]} : (i32, i32) -> i1
  "cf.cond_br"(%d) [^bb3, ^bb4] <{operandSegmentSizes = array<i32: 1, 0, 0>}> : (i1) -> ()
^bb3:
  %g = "ptx.setp"(%t, %zero) {mods = ["gt", "s32"]} : (i32, i32) -> i1
  %m = "ptx.selp"(%t, %zero, %g) {mods = ["b32"], line = 31 : i64} : (i32, i32, i1) -> i32
  "ptx.st"(%p, %m) {mods = ["global", "s32"], offset = 4 : i64} : (i64, i32) -> ()
  "cf.br"() [^bb4] : () -> ()
^bb4:
  %i2 = "ptx.load_add_placeholder"(%i) : (i32) -> i32
  "cf.br"(%i2) [^bb1] : (i32) -> ()
^bb5:
  "upir.exit"() : () -> ()'''.replace(
    '"ptx.load_add_placeholder"(%i) : (i32) -> i32',
    '"ptx.add"(%i, %one) {mods = ["s32"]} : (i32, i32) -> i32')


def _structured(body: str) -> Operation:
    op = parse_op(kernel(body))
    verify(op)
    run_pipeline(op, PipelineOptions(passes=("raise-structured-cf",)))
    assert has_structured_ops(op)
    return op


def _same_on_both_forms(body: str, pass_name: str) -> str:
    """The pass run on the structured form and on the CFG (then raised): the same IR;
    returns it."""
    on_structured = _structured(body)
    make_pass(pass_name).run(on_structured)        # (the pass itself, on the regions)
    verify(on_structured)
    assert has_structured_ops(on_structured)
    on_cfg = _structured(body)           # (the raise's records first, as the pipeline has them)
    lower_structured_control_flow(on_cfg)
    run_pipeline(on_cfg, PipelineOptions(passes=(pass_name, "raise-structured-cf"),
                                         verify_each=True))
    assert print_op(on_structured) == print_op(on_cfg)
    return print_op(on_structured)


def test_selects_to_min_max_in_nested_regions() -> None:
    text = _same_on_both_forms(SELECT_IN_LOOP, "selects-to-min-max")
    filecheck(text, r'''
    CHECK: "upir.for"
    CHECK: "upir.if"
    CHECK-NOT: "ptx.selp"
    CHECK: "ptx.max"(%{{\w+}}, %{{\w+}}) {mods = ["s32"], line = 31 : i64}
    CHECK: "ptx.st"
    ''')


def test_selects_to_min_max_must_not_fire_in_nested_regions() -> None:
    # the compare is of other values than the select picks from: no max
    body = SELECT_IN_LOOP.replace('%m = "ptx.selp"(%t, %zero, %g)', '%m = "ptx.selp"(%t, %one, %g)')
    text = _same_on_both_forms(body, "selects-to-min-max")
    assert '"ptx.selp"' in text and '"ptx.max"' not in text


def test_merge_duplicate_threads_reads_nested_regions() -> None:
    # only tid.x read, in and out of the loop: y and z are duplicates
    text = _same_on_both_forms(SELECT_IN_LOOP, "merge-duplicate-threads")
    assert "duplicate_thread_dims = [1 : i64, 2 : i64]" in text
    # tid.y read inside the if inside the loop: y is no duplicate
    body = SELECT_IN_LOOP.replace(
        '%g = "ptx.setp"(%t, %zero)',
        '%ty = "upir.special"() {reg = "%tid.y"} : () -> i32\n  %g = "ptx.setp"(%ty, %zero)')
    text = _same_on_both_forms(body, "merge-duplicate-threads")
    assert "duplicate_thread_dims = [2 : i64]" in text
    # a barrier inside the loop: threads may see each other, nothing is merged
    body = SELECT_IN_LOOP.replace('^bb2:\n', '^bb2:\n  "upir.barrier"() {mods = ["sync"]} : () -> ()\n')
    text = _same_on_both_forms(body, "merge-duplicate-threads")
    assert "duplicate_thread_dims" not in text


FLUSH_SOURCE = r'''
extern "C" __global__ void extremes(const float *x, float *scaled, float *stored, int cols,
                                    float s) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    const float *row = x + (size_t)r * cols;
    float m = -3.402823466e38f, k = -3.402823466e38f;
    for (int c = 0; c < cols; c++) {
        m = fmaxf(m, row[c]);
        if (row[c] > 0.0f)
            k = fmaxf(k, row[c] * s);
    }
    scaled[r] = m * s;
    stored[r] = k;
}
'''


def _flush_kernel(on_structured: bool) -> str:
    """The kernel raised, flush-min-max-at-uses run on the structured form (or on the CFG,
    then raised again)."""
    ptx = compile_to_ptx(FLUSH_SOURCE, options=["-ftz=true"]).ptx
    module = parse_ptx(ptx)
    lifted, _ = lift_and_optimize(module, module.entries[0],
                                  PipelineOptions(passes=("raise-structured-cf",)))
    op = lifted.op
    assert has_structured_ops(op)
    if not on_structured:
        lower_structured_control_flow(op)
    make_pass("flush-min-max-at-uses").run(op)
    if not on_structured:
        make_pass("raise-structured-cf").run(op)
    verify(op)
    return print_op(op)


def test_no_transition_around_an_any_pass() -> None:
    op = _structured(SELECT_IN_LOOP)
    result = run_pipeline(op, PipelineOptions(passes=(
        "selects-to-min-max", "merge-duplicate-threads", "flush-min-max-at-uses")))
    assert result.transitions == [] and has_structured_ops(op)
    assert result.counts["selects-to-min-max"] == 1


def test_flush_at_uses_follows_values_through_structured_ops() -> None:
    """The running max read only through a multiply is marked, through the for's yield and
    results; the conditional one (through an if's results) is stored as it is: it gets its
    flush in front of the store.  The same IR as on the CFG."""
    structured = _flush_kernel(True)
    on_cfg = _flush_kernel(False)
    assert structured == on_cfg
    assert '"upir.for"' in structured or '"upir.while"' in structured
    maxes = [line for line in structured.splitlines() if '"ptx.max"' in line]
    assert len(maxes) >= 2 and all("flush_at_uses = true" in line for line in maxes)
    filecheck(structured, r'''
    CHECK: "ptx.cvt"({{%\w+}}) {mods = ["ftz", "f32", "f32"]
    CHECK-NEXT: "ptx.st"
    ''')
    # the stored max must not be read unflushed: one flush, in front of its store only
    assert structured.count('mods = ["ftz", "f32", "f32"]') == 1
    op = parse_op(structured)
    lower_structured_control_flow(op)
    verify(op)
    assert print_op(op).count("flush_at_uses = true") == len(maxes)


# --- thread-index-outermost and narrow-induction-variables on structured input ---------------

def _cuda_on_both_forms(source: str, name: str, pass_name: str) -> tuple[int, int, str]:
    """The kernel through the default pipeline up to `pass_name` (structured from the raise
    on), then the pass on the structured form, and on the CFG with a raise after it: the
    same IR.  Returns the pass's counts on both and the IR."""
    module = parse_ptx(compile_to_ptx(source, filename=f"{name}.cu").ptx)
    order = default_pipeline()
    before = tuple(order[:order.index(pass_name)])
    texts, counts = [], []
    for on_structured in (True, False):
        lifted, _ = lift_and_optimize(module, module.functions[name],
                                      PipelineOptions(passes=before))
        op = lifted.op
        assert has_structured_ops(op)
        if not on_structured:
            lower_structured_control_flow(op)
        counts.append(make_pass(pass_name).run(op))
        if not has_structured_ops(op):
            make_pass("raise-structured-cf").run(op)
        verify(op)
        texts.append(print_op(op))
    assert texts[0] == texts[1]
    return counts[0], counts[1], texts[0]


#: index sums inside an if (a region): `(row0 + ty) * n + (col0 + tx)`, the tile update's
TILE_ROWS = r'''
extern "C" __global__ void tile_rows(float *a, int n, int offset) {
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = offset + 16 + blockIdx.y * 16;
    const int col0 = offset + 16 + blockIdx.x * 16;
    if (row0 < n && col0 < n)
        a[(row0 + ty) * n + col0 + tx] -= a[(offset + ty) * n + col0 + tx];
}
extern "C" __global__ void stored_sums(int *out, int base, int n, int steps) {
    for (int s = 0; s < steps; s++)
        out[blockIdx.x * blockDim.x + threadIdx.x + s] = (base + s + (int)threadIdx.x) + n;
}
'''


def test_thread_index_outermost_in_nested_regions() -> None:
    """The sums in the if's region are reassociated on the regions as on the CFG (uniformity
    from the structured analysis, no-wrap indices read in nested blocks)."""
    on_regions, on_cfg, text = _cuda_on_both_forms(TILE_ROWS, "tile_rows", "thread-index-outermost")
    assert on_regions == on_cfg > 0
    # (the loads and their index sums are in the if's region)
    assert '"upir.if"' in text and text.index('"upir.if"') < text.index('"ptx.ld"')
    # must not fire: a sum stored as a value (no nsw), in a loop
    on_regions, on_cfg, _ = _cuda_on_both_forms(TILE_ROWS, "stored_sums", "thread-index-outermost")
    assert on_regions == on_cfg == 0


def test_narrowing_lowers_only_where_it_may_narrow() -> None:
    """narrow-induction-variables on the structured form: a cooperative-groups grid-stride
    loop (a 64-bit counter read through its low half) is narrowed, on the CFG the pass
    lowers to (one transition, counted for the pass); a kernel with no such value keeps the
    structured form (no transition) and is left as it is."""
    from test_gridsync_loops import SRC as CG_LOOPS
    on_regions, on_cfg, text = _cuda_on_both_forms(CG_LOOPS, "cg_axpy", "narrow-induction-variables")
    assert on_regions == on_cfg == 1
    module = parse_ptx(compile_to_ptx(CG_LOOPS, filename="cg.cu").ptx)
    order = default_pipeline()
    upto = tuple(order[:order.index("narrow-induction-variables") + 1])
    for name, lowered in (("cg_axpy", True), ("jacobi_ids", False)):
        lifted, result = lift_and_optimize(module, module.functions[name],
                                           PipelineOptions(passes=upto))
        # (lowered for the rewrite, then raised again to hand on the working form)
        assert result.transitions == ([("lower", "narrow-induction-variables"), ("raise", "")]
                                      if lowered else []), name
        assert has_structured_ops(lifted.op)
        assert result.counts["narrow-induction-variables"] == int(lowered)
