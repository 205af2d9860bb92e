"""The printed IR is valid MLIR: a third-party parser (xDSL, with the `upir` and `ptx`
dialects unregistered and its own `builtin` and `cf` dialects loaded, so that `cf.br` and
`cf.cond_br` are checked against their real definitions) reads and verifies the IR of
every example kernel, every benchmark-suite kernel and a few test programs; cpuify's own
parser reads the same text back to the same text, and the parsed IR runs in the reference
interpreter with the results of the lifted IR."""

from __future__ import annotations

import importlib
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from cpuify.cli.main import main
from cpuify.errors import CompileError, IRError
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import InterpModule
from cpuify.ir.core import Block, Operation, Region
from cpuify.ir.parser import parse_module, parse_op
from cpuify.ir.printer import print_module, print_op
from cpuify.ir.verifier import verify
from cpuify.lifting import lift_kernel

ROOT = Path(__file__).resolve().parents[1]
xdsl_parser = pytest.importorskip("xdsl.parser")


def xdsl_parse(text: str):  # type: ignore[no-untyped-def]
    """Parse and verify `text` with xDSL; raises on anything it rejects."""
    from xdsl.context import Context
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.cf import Cf
    ctx = Context(allow_unregistered=True)
    ctx.load_dialect(Builtin)
    ctx.load_dialect(Cf)
    module = xdsl_parser.Parser(ctx, text).parse_module()
    module.verify()
    return module


def xdsl_name(op) -> str:  # type: ignore[no-untyped-def]
    """The op's name as written (xDSL calls every unregistered op `builtin.unregistered`)."""
    from xdsl.dialects.builtin import UnregisteredOp
    return op.op_name.data if isinstance(op, UnregisteredOp) else op.name


# --- the kernels -------------------------------------------------------------------------------

# what the examples and benchmarks may miss: warp collectives, atomics, constants with
# inf/NaN, local arrays, dynamic shared memory, printf, a device function with a barrier
MIXED_SRC = r"""
__constant__ float coef[4] = {1.5f, -2.0f, 0.25f, 8.0f};

__device__ float stage(float* s, int t, float v) {
    s[t] = v;
    __syncthreads();
    float r = s[(t + 1) % blockDim.x];
    __syncthreads();
    return r;
}

extern "C" __global__ void mixed(const float* x, float* out, int* hist, int n) {
    __shared__ float s[64];
    extern __shared__ int dyn[];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    float v = i < n ? x[i] : 0.0f;
    float local[8];
    for (int k = 0; k < 8; k++) local[k] = v * k + coef[k & 3];
    v = stage(s, t, local[t & 7]);
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffff, v, off);
    dyn[t] = __ballot_sync(0xffffffff, v > 0.0f) != 0;
    __syncthreads();
    const float inf = __int_as_float(0x7f800000), nan = __int_as_float(0x7fc00000);
    atomicAdd(&hist[dyn[t] + (fabsf(v) == inf ? 2 : 0)], 1);
    float w = v > 1e30f ? inf : (v != v ? nan : -0.0f);
    if (i < n) out[i] = v + (w == inf ? 1.0f : 0.0f);
}

extern "C" __global__ void say(const int* x) {
    printf("\"%d\"\t%5.2f|%s\n", x[threadIdx.x], 0.5 * threadIdx.x, threadIdx.x & 1 ? "odd" : "\xc3\xa9");
}
"""


def _example_sources() -> dict[str, str]:
    out = {}
    for path in sorted((ROOT / "examples").glob("*.py")):
        for k, m in enumerate(re.finditer(r'r?("""|\'\'\')(.*?)\1', path.read_text(), re.DOTALL)):
            if "__global__" in m.group(2):
                out[f"example:{path.stem}:{k}"] = m.group(2)
    return out


def _workload_sources() -> dict[str, tuple[str, tuple[str, ...]]]:
    out = {}
    for path in sorted((ROOT / "benchmarks" / "suite" / "workloads").glob("*.py")):
        w = importlib.import_module(f"benchmarks.suite.workloads.{path.stem}").WORKLOAD
        out[f"benchmark:{path.stem}"] = (w.cuda_source, tuple(getattr(w, "cuda_options", ())))
    return out


PROGRAMS = ("pipeline", "templates", "symbols", "printf")


def _sources() -> dict[str, tuple[str, tuple[str, ...]]]:
    out = {name: (src, ()) for name, src in _example_sources().items()}
    out.update(_workload_sources())
    out["test:mixed"] = (MIXED_SRC, ())
    return out


SOURCES = _sources()


def _ptx(name: str) -> str:
    if name.startswith("program:"):
        from cpuify.nvcc.toolkit import find_toolkit
        try:
            nvcc = find_toolkit().nvcc
        except CompileError as exc:       # no nvcc wheel: the other kernels still run
            pytest.skip(f"nvcc not available: {exc}")
        stem = name.split(":", 1)[1]
        cmd = [nvcc, "-ptx", "-arch=compute_75", f"-I{ROOT / 'tests' / 'programs'}",
               str(ROOT / "tests" / "programs" / f"{stem}.cu"), "-o", "-"]
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    src, options = SOURCES[name]
    return compile_to_ptx(src, options=list(options)).ptx


def _kernels(ptx: str) -> list[Operation]:
    module = parse_ptx(ptx)
    return [lift_kernel(module, entry).op for entry in module.entries]


@pytest.mark.parametrize("name", list(SOURCES) + [f"program:{p}" for p in PROGRAMS])
def test_module_is_valid_mlir_and_round_trips(name):
    kernels = _kernels(_ptx(name))
    assert kernels, name
    text = print_module(kernels)
    module = xdsl_parse(text)
    # xDSL saw every kernel and checked every branch against cf's own op definitions
    assert [xdsl_name(op) for op in module.ops] == ["upir.kernel"] * len(kernels)
    names = {op.name for k in kernels for op in k.walk()}
    seen = {xdsl_name(op) for op in module.walk()}
    assert names <= seen
    parsed = parse_module(text)
    assert print_module(parsed) == text
    for op in parsed:
        verify(op)
        # one kernel alone is MLIR too (a top-level op: MLIR and xDSL put it in a module)
        alone = print_op(op)
        assert print_op(parse_op(alone)) == alone
    xdsl_parse(print_op(parsed[0]))


@pytest.mark.parametrize("name", [n for n in SOURCES if n.startswith("benchmark:")])
def test_cli_ir_after_the_default_passes_is_valid_mlir(name, tmp_path, capsys):
    """`cpuify ir --mlir` prints the IR after the default pass pipeline: still MLIR."""
    src, options = SOURCES[name]
    cu = tmp_path / "k.cu"
    cu.write_text(src)
    assert main(["ir", "--mlir", str(cu)] + [o for o in options if o.startswith(("-D", "-I"))]) == 0
    text = capsys.readouterr().out
    module = xdsl_parse(text)
    parsed = parse_module(text)
    assert print_module(parsed) == text
    # the structured control flow raise-structured-cf made (regions with results, block
    # arguments, upir.condition) is read by xDSL op for op
    ours = {op.name for k in parsed for op in k.walk()}
    assert ours <= {xdsl_name(op) for op in module.walk()}
    if name == "benchmark:row_softmax":
        # nvcc's guarded do-while loops as upir.for (their `do_while` attribute too)
        assert "upir.for" in ours and "do_while = [" in text


def test_interpreter_runs_the_structured_ir_after_the_default_passes():
    """The IR after the default pipeline (its last pass raises if/while/for), printed as MLIR
    that xDSL reads and parsed back, runs in the interpreter with the lifted IR's results."""
    from cpuify.transforms.pass_manager import PipelineOptions, run_pipeline
    ptx = compile_to_ptx(MIXED_SRC).ptx
    n = 100
    x = np.linspace(-3, 5, n).astype(np.float32)
    results = []
    for optimized in (False, True):
        mod = InterpModule(ptx)
        if optimized:
            (op,) = parse_module(print_module([mod.kernel("mixed").lifted.op]))
            run_pipeline(op, PipelineOptions(verify_each=True))
            text = print_module([op])
            assert '"upir.if"' in text and '"cf.cond_br"' not in text
            xdsl_parse(text)
            (op,) = parse_module(text)
            mod.use_ir("mixed", op)
        out, hist = np.zeros(n, np.float32), np.zeros(4, np.int32)
        mod.launch("mixed", 2, 64, (x, out, hist, np.int32(n)), shared_mem=64 * 4)
        results.append((out, hist))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_interpreter_runs_parsed_ir_with_the_same_results():
    ptx = compile_to_ptx(MIXED_SRC).ptx
    n = 100
    x = np.linspace(-3, 5, n).astype(np.float32)
    x[7] = 3e38
    results = []
    for reparse in (False, True):
        mod = InterpModule(ptx)
        if reparse:
            (op,) = parse_module(print_module([mod.kernel("mixed").lifted.op]))
            mod.use_ir("mixed", op)
            assert mod.kernel("mixed").lifted.op is op
        out, hist = np.zeros(n, np.float32), np.zeros(4, np.int32)
        mod.launch("mixed", 2, 64, (x, out, hist, np.int32(n)), shared_mem=64 * 4)
        results.append((out, hist))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
    assert results[0][1].sum() == 128


def test_example_saxpy_runs_from_parsed_ir():
    (src,) = [s for k, s in _example_sources().items() if "saxpy" in s]
    ptx = compile_to_ptx(src).ptx
    x = np.arange(50, dtype=np.float32)
    outs = []
    for reparse in (False, True):
        mod = InterpModule(ptx)
        if reparse:
            mod.use_ir("saxpy", parse_op(print_op(mod.kernel("saxpy").lifted.op)))
        y = np.ones(50, np.float32)
        mod.launch("saxpy", 2, 32, (np.float32(2), x, y, np.int32(50)))
        outs.append(y)
    np.testing.assert_array_equal(outs[1], 2 * x + 1)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_cli_ir_mlir(tmp_path, capsys):
    cu = tmp_path / "k.cu"
    cu.write_text(MIXED_SRC)
    assert main(["ir", "--mlir", str(cu)]) == 0
    text = capsys.readouterr().out
    assert text.startswith('"builtin.module"() ({\n  "upir.global"() {sym_name = "coef"')
    ops = parse_module(text)
    # the module-scope variables first (the file compiles on its own), then the kernels
    kernels = [op for op in ops if op.name == "upir.kernel"]
    assert [op.attributes["sym_name"] for op in kernels] == ["mixed", "say"]
    assert {op.name for op in ops} == {"upir.global", "upir.kernel"}
    xdsl_parse(text)
    assert main(["ir", str(cu)]) == 0     # without --mlir: the kernels alone, no module
    plain = capsys.readouterr().out
    assert plain.startswith('"upir.kernel"()')
    assert [op.attributes["sym_name"] for op in parse_module(plain)] == ["mixed", "say"]
    globals_ = [op for op in ops if op.name == "upir.global"]
    assert print_module(globals_ + parse_module(plain)) == text
    xdsl_parse(plain)                     # values numbered across the file: MLIR too


# --- the syntax of successors and properties ---------------------------------------------------

def _branches() -> Operation:
    """entry -> cond_br(loop(i32, i32) with two values, exit) ; loop -> br(loop or exit)."""
    entry, loop, exit_ = Block(), Block(["i32", "i32"]), Block()
    c = Operation("upir.const", [], ["i32"], {"value": 3})
    p = Operation("upir.const", [], ["i1"], {"value": 1})
    entry.append(c)
    entry.append(p)
    entry.append(Operation("cf.cond_br", [p.result], successors=[loop, exit_],
                           successor_args=[[c.result, c.result], []]))
    loop.append(Operation("cf.cond_br", [p.result], successors=[exit_, loop],
                          successor_args=[[], [loop.args[1], loop.args[0]]]))
    exit_.append(Operation("upir.exit"))
    return Operation("upir.block_parallel", regions=[Region([entry, loop, exit_])])


def test_successor_operands_in_mlir_form():
    top = _branches()
    text = print_op(top)
    assert ('"cf.cond_br"(%1, %0, %0) [^bb1, ^bb2] <{operandSegmentSizes = array<i32: 1, 2, 0>}>'
            ' : (i1, i32, i32) -> ()') in text
    assert '^bb1(%2: i32, %3: i32):\n  "cf.cond_br"(%1, %3, %2) [^bb2, ^bb1] <{operandSegmentSizes = array<i32: 1, 0, 2>}>' in text
    xdsl_parse(text)
    parsed = parse_op(text)
    verify(parsed)
    assert print_op(parsed) == text
    entry, loop, _ = parsed.regions[0].blocks
    assert entry.ops[-1].operands == [entry.ops[1].result]
    assert entry.ops[-1].successor_args == [[entry.ops[0].result] * 2, []]
    assert loop.ops[-1].successor_args == [[], [loop.args[1], loop.args[0]]]
    # cf.br: no operands of its own, so no segment sizes: all operands go to the successor
    br = parse_op('"a.b"() ({\n  %0 = "c.c"() : () -> i32\n  "cf.br"(%0, %0) [^bb1] : (i32, i32) -> ()\n'
                  '^bb1(%1: i32, %2: i32):\n  "upir.exit"() : () -> ()\n}) : () -> ()')
    op = br.regions[0].blocks[0].ops[1]
    assert op.operands == [] and len(op.successor_args[0]) == 2


@pytest.mark.parametrize("text, message", [
    (('"a.b"() ({\n  %0 = "c.c"() : () -> i1\n  "cf.cond_br"(%0) [^bb1, ^bb1] '
      '<{operandSegmentSizes = array<i32: 1, 1, 0>}> : (i1) -> ()\n^bb1:\n}) : () -> ()'),
     "does not split 1 operand(s)"),
    ('"a.b"() <{foo = 1 : i64}> : () -> ()', "unsupported property 'foo'"),
    ('"a.b"() <{operandSegmentSizes = array<i64: 0>}> : () -> ()', "array<i32"),
    ('"a.b"() {s = "\\q"} : () -> ()', "bad string literal"),
    ('"a.b"() {x = 0x1FFFFFFFF : f32} : () -> ()', "no f32 bit pattern"),
])
def test_mlir_syntax_errors(text, message):
    with pytest.raises(IRError, match=re.escape(message)):
        parse_op(text)


def test_float_and_string_attributes_as_mlir_reads_them():
    import math
    op = parse_op('"t.t"() {a = 0x7F800000 : f32, b = 0xFFF0000000000000 : f64, '
                  'c = 0x7FF8000000000000 : f64, d = 1.0e-05 : f64, e = "\\C3\\A9\\n\\22"} : () -> ()')
    a = op.attributes
    assert a["a"] == math.inf and a["b"] == -math.inf and math.isnan(a["c"]) and a["d"] == 1e-05
    assert a["e"] == 'é\n"'
    text = print_op(op)
    assert 'd = 1.0e-05 : f64' in text and 'a = 0x7FF0000000000000 : f64' in text
    xdsl_parse(text)
