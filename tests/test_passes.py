"""The pass manager (transforms/pass_manager.py) and parallel-licm (transforms/licm.py).

IR-in/IR-out checks on printed IR (where a pass must fire and where it must not), pipeline
options from the CLI and from RawModule options, and end-to-end results with the pass on
and off against NumPy, through the Python API and a whole program."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cpuify
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.printer import print_op
from cpuify.ir.structure import block_body, launch_prologue
from cpuify.ir.verifier import verify
from cpuify.transforms.pass_manager import PipelineError, PipelineOptions, default_pipeline, run_pipeline

SUM = "__device__ float sum(const float *d, int n) { float t = 0; for (int i = 0; i < n; i++) t += d[i]; return t; }\n"

NORMALIZE = SUM + r'''
extern "C" __global__ void normalize(float *out, const float *in, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    float val = sum(in, n);
    if (tid < n) out[tid] = in[tid] / val;
}'''

# kernels where parallel-licm must not fire, each for one reason
NOT_HOISTED = {
    # a store before the loop: the loop might read what it wrote
    "store_before": SUM + r'''
extern "C" __global__ void store_before(float *out, float *in, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    in[tid] = 1.0f;
    float val = sum(in, n);
    if (tid < n) out[tid] = val;
}''',
    # the loop's trip count depends on the thread
    "thread_dependent": SUM + r'''
extern "C" __global__ void thread_dependent(float *out, const float *in, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    float val = sum(in, tid % 7);
    if (tid < n) out[tid] = val;
}''',
    # only some threads run the loop: hoisting would run its loads speculatively
    "guarded": SUM + r'''
extern "C" __global__ void guarded(float *out, const float *in, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid < n) out[tid] = in[tid] / sum(in, n);
}''',
    # volatile loads are observable: each thread must perform them
    "volatile_loads": r'''
extern "C" __global__ void volatile_loads(float *out, volatile float *in, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    float t = 0;
    for (int i = 0; i < n; i++) t += in[i];
    if (tid < n) out[tid] = t;
}''',
    # the loop reads shared memory (per block, written by the block's threads)
    "shared_reads": r'''
extern "C" __global__ void shared_reads(float *out, int n) {
    __shared__ float s[64];
    float t = 0;
    for (int i = 0; i < n; i++) t += s[i & 63];
    out[blockIdx.x * blockDim.x + threadIdx.x] = t;
}''',
    # an atomic in the loop
    "atomics": r'''
extern "C" __global__ void atomics(int *out, int *counter, int n) {
    int t = 0;
    for (int i = 0; i < n; i++) t += atomicAdd(counter, 1);
    out[blockIdx.x * blockDim.x + threadIdx.x] = t;
}''',
    # a loop of a fixed trip count: cheap per thread, not worth a prologue or a barrier
    "fixed_trip": r'''
extern "C" __global__ void fixed_trip(const float *w, float *y, int n) {
    float acc = 0.0f;
    #pragma unroll 1
    for (int k = 0; k < 8; k++) acc += w[k];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = acc * i;
}''',
    # straight-line invariant code: no loop, nothing worth a prologue
    "no_loop": r'''
extern "C" __global__ void no_loop(float *out, const float *in, int n) {
    float v = in[0] * in[1];
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid < n) out[tid] = v;
}''',
}


def _kernel(source: str, name: str, options: PipelineOptions | None = None):  # type: ignore[no-untyped-def]
    ptx = compile_to_ptx(source, filename=f"{name}.cu").ptx
    module = parse_ptx(ptx)
    lifted, result = lift_and_optimize(module, module.functions[name], options or PipelineOptions())
    return lifted, result


def test_normalize_prefix_is_hoisted() -> None:
    lifted, result = _kernel(NORMALIZE, "normalize")
    assert result.counts["parallel-licm"] > 0
    prologue = launch_prologue(lifted.op)
    assert prologue is not None
    text = print_op(lifted.op)
    # the prologue holds the loop's loads and hands the sum to the grid...
    prologue_text = text[:text.index('"upir.grid_parallel"')]
    assert prologue_text.count('"ptx.ld"') >= 1
    assert '"upir.launch_store"' in prologue_text
    # ...which reads it like a parameter, and loads only its own element
    grid_text = text[text.index('"upir.grid_parallel"'):]
    assert "hoisted = true" in grid_text
    assert grid_text.count('"ptx.ld"') == 1
    assert "%tid.x" in grid_text and "%tid.x" not in prologue_text
    verify(lifted.op)


@pytest.mark.parametrize("name", sorted(NOT_HOISTED))
def test_licm_does_not_fire(name: str) -> None:
    lifted, result = _kernel(NOT_HOISTED[name], name)
    assert result.counts["parallel-licm"] == 0
    assert launch_prologue(lifted.op) is None


def test_pipeline_options() -> None:
    opts, rest = PipelineOptions.parse(["-DN=3", "--disable-pass=parallel-licm", "--verify-each"])
    assert rest == ["-DN=3"]
    assert "parallel-licm" not in opts.pipeline() and opts.verify_each
    assert PipelineOptions.parse(["--passes="])[0].pipeline() == []
    with pytest.raises(PipelineError, match="unknown pass 'no-such-pass'"):
        PipelineOptions.parse(["--disable-pass=no-such-pass"])
    lifted, result = _kernel(NORMALIZE, "normalize", opts)
    assert "parallel-licm" not in result.counts and launch_prologue(lifted.op) is None


def test_print_ir_after() -> None:
    ptx = compile_to_ptx(NORMALIZE, filename="n.cu").ptx
    module = parse_ptx(ptx)
    from cpuify.lifting import lift_kernel
    lifted = lift_kernel(module, module.functions["normalize"])
    out = io.StringIO()
    run_pipeline(lifted.op, PipelineOptions(print_after=frozenset({"parallel-licm"})), out)
    text = out.getvalue()
    assert text.startswith("// -----// IR of kernel 'normalize' after parallel-licm")
    assert '"upir.launch_prologue"' in text


@pytest.mark.parametrize("licm", [True, False])
def test_normalize_results(licm: bool) -> None:
    options = () if licm else ("--disable-pass=parallel-licm",)
    k = cpuify.RawKernel(NORMALIZE, "normalize", options=options)
    rng = np.random.default_rng(5)
    for n in (1, 31, 1000, 4099):
        x = rng.random(n, dtype=np.float32) + np.float32(0.5)
        out = np.zeros(n, np.float32)
        for _ in range(2):      # the second launch runs the code specialized for the block
            k(((n + 31) // 32,), (32,), (out, x, np.int32(n)))
            # each thread sums sequentially in float32, as on the GPU
            total = np.float32(0)
            for v in x:
                total = np.float32(total + v)
            np.testing.assert_array_equal(out, x / total)


def test_prologue_values_are_per_launch() -> None:
    """The hoisted sum is recomputed by each launch (the input changes between launches)."""
    k = cpuify.RawKernel(NORMALIZE, "normalize")
    out = np.zeros(64, np.float32)
    for scale in (1, 2, 4):
        x = np.full(64, scale, np.float32)
        k((2,), (32,), (out, x, np.int32(64)))
        np.testing.assert_array_equal(out, np.full(64, 1 / 64, np.float32))


def test_licm_in_a_whole_program(tmp_path: Path) -> None:
    src = tmp_path / "norm.cu"
    src.write_text("#include <cstdio>\n" + NORMALIZE.replace('extern "C" ', "") + r'''
int main() {
    const int n = 3000;
    float h[n], o[n], s = 0;
    for (int i = 0; i < n; i++) { h[i] = (float)(i % 5) + 1; s += h[i]; }
    float *din, *dout;
    cudaMalloc(&din, sizeof h); cudaMalloc(&dout, sizeof o);
    cudaMemcpy(din, h, sizeof h, cudaMemcpyHostToDevice);
    normalize<<<(n + 31) / 32, 32>>>(dout, din, n);
    cudaMemcpy(o, dout, sizeof o, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < n; i++) bad += o[i] != h[i] / s;
    printf("bad %d\n", bad);
    return bad != 0;
}''')
    exe = tmp_path / "norm"
    build = subprocess.run([sys.executable, "-m", "cpuify.cli.main", "nvcc", str(src), "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0 and "bad 0" in run.stdout, run.stdout + run.stderr


def test_cli_pipeline_flags(tmp_path: Path) -> None:
    src = tmp_path / "norm.cu"
    src.write_text(NORMALIZE)
    cli = [sys.executable, "-m", "cpuify.cli.main"]
    on = subprocess.run(cli + ["explain", str(src)], capture_output=True, text=True)
    assert on.returncode == 0, on.stderr
    assert "launch prologue:" in on.stdout and "parallel-licm" in on.stdout
    off = subprocess.run(cli + ["explain", str(src), "--disable-pass", "parallel-licm"],
                         capture_output=True, text=True)
    assert off.returncode == 0 and "launch prologue" not in off.stdout
    bad = subprocess.run(cli + ["ir", str(src), "--disable-pass", "nope"], capture_output=True, text=True)
    assert bad.returncode == 1 and "unknown pass 'nope'" in bad.stderr
    lifted = subprocess.run(cli + ["ir", str(src), "--passes="], capture_output=True, text=True)
    assert lifted.returncode == 0 and "launch_prologue" not in lifted.stdout
    printed = subprocess.run(cli + ["ir", str(src), "--print-ir-after=all", "--verify-each"],
                             capture_output=True, text=True)
    assert printed.returncode == 0
    assert printed.stderr.count("// -----// IR of kernel") == len(default_pipeline())


def test_block_body_unchanged_when_nothing_hoisted() -> None:
    lifted, _ = _kernel(NOT_HOISTED["guarded"], "guarded")
    # (nested in the structured ops raise-structured-cf made of the CFG)
    ops = [op.name for op in block_body(lifted.op).parent.walk()]
    assert ops.count("ptx.ld") >= 2          # the loop's load and the element's load stay


def test_code_generation_reads_only_the_ir() -> None:
    """A kernel's IR after the pipeline, printed and parsed back, generates the same LLVM
    IR as the kernel itself: parameters, variables, directives and everything the passes
    decided are in the printed IR (only module-scope variables come from the module)."""
    import importlib
    import pkgutil

    import benchmarks.suite.workloads as workloads
    from cpuify.codegen.llvm_gen import ModuleCodegen
    from cpuify.ir.parser import parse_op
    from cpuify.ir.structure import KernelView
    sources = [NORMALIZE]
    for info in pkgutil.iter_modules(workloads.__path__):
        mod = importlib.import_module(f"benchmarks.suite.workloads.{info.name}")
        sources += [v for v in vars(mod).values() if isinstance(v, str) and "__global__" in v]
    checked = 0
    for source in sources:
        module = parse_ptx(compile_to_ptx(source, filename="k.cu").ptx)
        for entry in module.entries:
            lifted, _ = lift_and_optimize(module, entry, PipelineOptions())
            parsed = KernelView.from_op(parse_op(print_op(lifted.op)))
            texts = []
            for kernel in (lifted, parsed):
                gen = ModuleCodegen(module)
                gen.add_kernel(kernel)
                texts.append(gen.llvm_text())
            assert texts[0] == texts[1], entry.name
            checked += 1
    assert checked >= 20


def test_long_builds_report_progress(monkeypatch, capsys) -> None:
    """A module that takes long prints each kernel and stage on stderr (here: at once)."""
    from cpuify import compiler
    monkeypatch.setattr(compiler._Progress, "PROGRESS_AFTER", 0.0)
    ptx = compile_to_ptx(NORMALIZE + NOT_HOISTED["no_loop"].replace(SUM, ""), filename="p.cu").ptx
    compiler.compile_ptx(ptx)
    err = capsys.readouterr().err
    assert "cpuify: kernel 1/2: normalize" in err and "cpuify: kernel 2/2: no_loop" in err
    assert "LLVM optimization" in err
    monkeypatch.setenv("CPUIFY_QUIET", "1")
    compiler.compile_ptx(ptx)
    assert capsys.readouterr().err == ""


def test_warp_size_constant() -> None:
    """`warpSize` compiles to PTX's WARP_SZ constant (it was refused as an unknown symbol)."""
    k = cpuify.RawKernel(r'''extern "C" __global__ void lanes(int *out) {
        out[threadIdx.x] = threadIdx.x % warpSize + 100 * (threadIdx.x / warpSize) + warpSize;
    }''', "lanes")
    out = np.zeros(96, np.int32)
    k((1,), (96,), (out,))
    t = np.arange(96)
    np.testing.assert_array_equal(out, t % 32 + 100 * (t // 32) + 32)


ROW_NORMALIZE = r'''
extern "C" __global__ void row_normalize(const float *x, float *y, int cols) {
    const float *row = x + (size_t)blockIdx.x * cols;   // the block's row
    float s = 0.0f;
    for (int j = 0; j < cols; j++) s += row[j];          // the same in every thread of a block
    for (int j = threadIdx.x; j < cols; j += blockDim.x)
        y[(size_t)blockIdx.x * cols + j] = row[j] / s;
}'''


def test_block_invariant_prefix() -> None:
    """A prefix depending on blockIdx runs on thread 0 of each block; the others read its
    value from shared memory after a barrier."""
    lifted, result = _kernel(ROW_NORMALIZE, "row_normalize")
    assert result.counts["parallel-licm"] > 0 and launch_prologue(lifted.op) is None
    assert any(v.name.startswith("__cpuify_hoisted_") for v in lifted.shared_vars)
    body = block_body(lifted.op)
    # one block barrier after thread 0's prefix (the grid-stride loop's soft barrier aside)
    assert sum(op.name == "upir.barrier" and not op.attr("soft") for b in body.blocks for op in b.ops) == 1
    verify(lifted.op)
    rng = np.random.default_rng(9)
    for opts in ((), ("--disable-pass=parallel-licm",)):
        k = cpuify.RawKernel(ROW_NORMALIZE, "row_normalize", options=opts)
        for rows, cols, threads in ((3, 1000, 128), (5, 7, 32), (1, 1, 64)):
            x = rng.random((rows, cols), dtype=np.float32)
            y = np.zeros_like(x)
            for _ in range(2):
                k((rows,), (threads,), (x, y, np.int32(cols)))
                s = np.zeros(rows, np.float32)
                for j in range(cols):                   # sequential float32 sums, as on a GPU
                    s = (s + x[:, j]).astype(np.float32)
                np.testing.assert_array_equal(y, x / s[:, None])


def test_compile_from_mlir(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`cpuify ir --mlir` prints a self-contained module (module-scope variables with their
    initializers included) that `cpuify llvm file.mlir` compiles to the same LLVM IR as the
    CUDA source."""
    src = tmp_path / "mod.cu"
    src.write_text(r'''
__constant__ float coef[4] = {0.5f, 1.5f, -2.0f, 4.0f};
__device__ int launches;
extern "C" __global__ void poly(const float *x, float *y, int n) {
    extern __shared__ float tile[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    float v = tile[(threadIdx.x + 1) % blockDim.x];
    if (i < n) y[i] = coef[0] + v * (coef[1] + v * (coef[2] + v * coef[3]));
    if (i == 0) atomicAdd(&launches, 1);
}''' + NORMALIZE)
    cli = [sys.executable, "-m", "cpuify.cli.main"]
    mlir = subprocess.run(cli + ["ir", "--mlir", str(src)], capture_output=True, text=True)
    assert mlir.returncode == 0, mlir.stderr
    assert '"upir.global"() {sym_name = "coef"' in mlir.stdout
    (tmp_path / "mod.mlir").write_text(mlir.stdout)
    from_mlir = subprocess.run(cli + ["llvm", str(tmp_path / "mod.mlir"), "--passes="],
                               capture_output=True, text=True)
    from_cu = subprocess.run(cli + ["llvm", str(src)], capture_output=True, text=True)
    assert from_mlir.returncode == 0 and from_cu.returncode == 0, from_mlir.stderr + from_cu.stderr
    assert from_mlir.stdout == from_cu.stdout


def test_pass_options() -> None:
    """Passes take typed options in MLIR's spelling: name{option=value,...}."""
    opts, _ = PipelineOptions.parse(["--passes=parallel-licm{block_level=false},min-cut-fission"])
    assert opts.pipeline() == ["parallel-licm{block_level=false}", "min-cut-fission"]
    lifted, result = _kernel(ROW_NORMALIZE, "row_normalize", opts)
    assert result.counts["parallel-licm"] == 0          # block-invariant: not hoisted now
    lifted, result = _kernel(ROW_NORMALIZE, "row_normalize",
                             PipelineOptions.parse(["--passes=parallel-licm"])[0])
    assert result.counts["parallel-licm"] > 0
    for bad, why in (("parallel-licm{nope=1}", "has no option 'nope'"),
                     ("parallel-licm{block_level=2}", "takes true or false"),
                     ("interchange-uniform-loops{min_ops=many}", "takes an integer")):
        with pytest.raises(PipelineError, match=why):
            PipelineOptions.parse([f"--passes={bad}"])
    # the options are part of what the cache key distinguishes
    a = PipelineOptions.parse(["--passes=interchange-uniform-loops{min_ops=10}"])[0].key()
    b = PipelineOptions.parse(["--passes=interchange-uniform-loops"])[0].key()
    assert a != b


def test_analyses_are_shared_between_passes() -> None:
    """The pass manager computes an analysis once for the passes that ask for it, until a
    pass changes the IR."""
    source = r'''
    extern "C" __global__ void tile(const float *x, float *y) {
        __shared__ float s[64];
        s[threadIdx.x] = x[blockIdx.x * 64 + threadIdx.x];
        __syncthreads();
        y[blockIdx.x * 64 + threadIdx.x] = s[63 - threadIdx.x];
    }'''
    _, result = _kernel(source, "tile")
    assert not any(result.counts.values())          # no pass changes this kernel
    # uniformity, dominators, post-dominators, loop blocks, shared variables, whether the
    # kernel holds structured ops (the quick tests of the passes that lower only where they
    # may fire): once each (barrier-elimination, both interchanges and min-cut-fission ask
    # for several)
    assert result.analyses_computed <= 6
