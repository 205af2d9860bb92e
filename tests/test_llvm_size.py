"""What code generation hands LLVM (issue #15, compile time): no code that can never run,
and the profile tool (tools/llvm_profile.py) that measures it."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cpuify
from cpuify.codegen import jit
from cpuify.codegen.llvm_gen import ModuleCodegen
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.lifting.lift import lift_kernel

ROOT = Path(__file__).resolve().parents[1]

# threads past n exit before the first barrier: the later segments run only the threads
# still waiting in the last block (the scheduler's masked runs)
SRC = r'''
extern "C" __global__ void neighbours(const int *x, int *out, int n) {
  __shared__ int s[256];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  if (i >= n) return;
  s[t] = x[i] * 3;
  __syncthreads();
  int live = min((int)blockDim.x, n - (int)(blockIdx.x * blockDim.x));
  int v = s[(t + 1) % live];
  __syncthreads();
  s[t] = v + s[t];
  __syncthreads();
  out[i] = s[(t + live - 1) % live];
}
'''


def _functions(text: str) -> dict[str, str]:
    out = {}
    for chunk in text.split("\ndefine ")[1:]:
        m = re.search(r'@"?([\w.]+)"?\(', chunk)
        assert m
        out[m.group(1)] = chunk.split("\n}\n", 1)[0]
    return out


@pytest.mark.parametrize("block", [None, (64, 1, 1)])
def test_entry_segment_has_no_masked_copy(block):
    """Only threads waiting at a sync point are resumed alone: the copy of a thread loop
    for some threads exists in every segment but the kernel's entry segment."""
    ptx = parse_ptx(compile_to_ptx(SRC).ptx)
    gen = ModuleCodegen(ptx, *jit.triple_and_layout())
    gen.add_kernel(lift_kernel(ptx, ptx.functions["neighbours"]), block)
    segments = {name: body for name, body in _functions(gen.llvm_text()).items()
                if name.startswith("cpuify_seg_neighbours_")}
    assert len(segments) >= 3
    for name, body in segments.items():
        masked = "some_threads:" in body
        assert masked == (not name.endswith("_0")), name


@pytest.mark.parametrize("n,block", [(1000, 64), (256, 64), (70, 32), (5, 32)])
def test_masked_runs_after_exits(n, block, run_twice):
    rng = np.random.default_rng(n)
    grid = (n + block - 1) // block
    x = rng.integers(-1000, 1000, n).astype(np.int32)
    out = np.zeros(n, np.int32)
    a = 3 * x
    want = np.empty(n, np.int64)
    for b in range(grid):
        blk = a[b * block:(b + 1) * block]
        want[b * block:b * block + len(blk)] = blk + np.roll(blk, 1)
    mod = cpuify.RawModule(code=SRC)
    for got in run_twice(mod, "neighbours", (grid,), (block,), (x, out, np.int32(n)), out):
        np.testing.assert_array_equal(got, want.astype(np.int32))


# every thread reaches every barrier (the window loop's bound is block-uniform, the `if`s
# on the thread index join again before the next barrier): no segment ever runs for some
# threads only (SegmentPaths.plan_masked_runs), as in SHOC's bottom_scan
SCAN = r"""
extern "C" __global__ void window_scan(const float *x, float *out, int n) {
  __shared__ float s[2 * 128];
  __shared__ float seed;
  int t = threadIdx.x;
  int per = (n + gridDim.x - 1) / gridDim.x;
  int start = blockIdx.x * per, stop = min(n, start + per);
  if (t == 0) seed = 0.0f;
  __syncthreads();
  for (int w = start; w < stop; w += blockDim.x) {
    int i = w + t;
    float v = i < stop ? x[i] : 0.0f;
    s[t] = 0.0f;
    s[t + blockDim.x] = v;
    __syncthreads();
    for (int d = 1; d < blockDim.x; d *= 2) {
      float u = s[t + blockDim.x - d];
      __syncthreads();
      s[t + blockDim.x] += u;
      __syncthreads();
    }
    float inclusive = s[t + blockDim.x] + seed;
    if (i < stop) out[i] = inclusive;
    __syncthreads();
    if (t == blockDim.x - 1) seed = inclusive;
    __syncthreads();
  }
}
"""

# the same with a warp shuffle: the scheduler exchanges the lanes' values, and may run
# segments for some threads
SHUFFLE = r"""
extern "C" __global__ void warp_sums(const int *x, int *out, int n) {
  __shared__ int s[128];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  int v = i < n ? x[i] : 0;
  v += __shfl_down_sync(0xffffffffu, v, 1);
  s[t] = v;
  __syncthreads();
  if (i < n) out[i] = s[t] + s[t ^ 1];
}
"""


def _segments(src: str, name: str, block: tuple[int, int, int] | None) -> dict[str, str]:
    ptx = parse_ptx(compile_to_ptx(src).ptx)
    gen = ModuleCodegen(ptx, *jit.triple_and_layout())
    gen.add_kernel(lift_kernel(ptx, ptx.functions[name]), block)
    return {n: body for n, body in _functions(gen.llvm_text()).items()
            if n.startswith(f"cpuify_seg_{name}_")}


@pytest.mark.parametrize("block", [None, (128, 1, 1)])
def test_convergent_barrier_kernel_has_no_masked_copies(block):
    """A kernel whose threads all stop at the same plain barrier after every segment is
    never handed to the scheduler: none of its segments gets the copy of its thread loop
    for some threads (SHOC's scan: half of its LLVM IR and time).  A shuffle keeps them."""
    segments = _segments(SCAN, "window_scan", block)
    assert len(segments) >= 5
    assert not [n for n, body in segments.items() if "some_threads:" in body]
    shuffled = _segments(SHUFFLE, "warp_sums", block)
    assert [n for n, body in shuffled.items() if "some_threads:" in body]


@pytest.mark.parametrize("n,grid", [(1000, 3), (128, 1), (77, 2), (5000, 7)])
def test_convergent_barrier_kernel_matches_numpy(n, grid, run_twice):
    rng = np.random.default_rng(n)
    x = rng.integers(-8, 8, n).astype(np.float32)      # small integers: sums are exact
    per = (n + grid - 1) // grid
    want = np.concatenate([np.cumsum(x[b * per:(b + 1) * per]) for b in range(grid)])
    out = np.zeros(n, np.float32)
    mod = cpuify.RawModule(code=SCAN)
    for got in run_twice(mod, "window_scan", (grid,), (128,), (x, out, np.int32(n)), out):
        np.testing.assert_array_equal(got, want.astype(np.float32))


@pytest.fixture(scope="module")
def profile_tool():
    spec = importlib.util.spec_from_file_location("cpuify_tools_llvm_profile",
                                                  ROOT / "tools" / "llvm_profile.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


LOOP = """
define void @"scale"(ptr %p, i64 %n) {
entry:
  br label %head
head:
  %i = phi i64 [0, %entry], [%j, %body]
  %c = icmp ult i64 %i, %n
  br i1 %c, label %body, label %done
body:
  %a = getelementptr float, ptr %p, i64 %i
  %v = load float, ptr %a
  %w = fmul float %v, 2.0
  store float %w, ptr %a
  %j = add i64 %i, 1
  br label %head
done:
  ret void
}
"""


def test_profile_counts_and_pass_timings(profile_tool):
    assert profile_tool.function_sizes(LOOP) == {"scale": 11}
    reports: list[str] = []
    mod = jit.optimize(LOOP, pass_timings=reports)
    assert len(reports) == 1 and "InstCombinePass" in reports[0]
    assert "vector.body" in str(mod)            # the pipeline is the usual one: vectorized
    assert profile_tool.pass_seconds(reports[0])["LoopVectorizePass"] >= 0
    assert "LoopVectorizePass" in profile_tool.pass_seconds(reports[0])
    emitted: list[str] = []
    obj = jit.emit_object(mod, pass_timings=emitted)
    assert obj and "Instruction Selection" in emitted[0]
    assert jit.emit_object(mod) == obj          # (untimed, the same object)


def test_profile_tool_runs(profile_tool, tmp_path, capsys, monkeypatch):
    # the tool turns the cache off in os.environ; undone after the test (later tests in this
    # process need `cpuify cuda-home`, which lives in the cache)
    monkeypatch.setenv("CPUIFY_NO_CACHE", "1")
    # and it wraps jit.optimize/emit_object for good (a command line tool): restored after
    # the test too, or later tests in this process would run the profiling (in-process) path
    monkeypatch.setattr(jit, "optimize", jit.optimize)
    monkeypatch.setattr(jit, "emit_object", jit.emit_object)
    src = tmp_path / "k.cu"
    src.write_text(SRC)
    assert profile_tool.main([str(src), "--block", "64", "--top", "5"]) == 0
    out = capsys.readouterr().out
    assert "1 kernels and 1 specializations" in out
    assert re.search(r"module 0 \(O3\): optimize [\d.]+ s, emit [\d.]+ s; instructions \d+ -> \d+", out)
    assert re.search(r"\d+ -> +\d+  cpuify_seg_neighbours_1", out)
    assert "optimization passes" in out and "code generation passes" in out


def test_pass_seconds_reads_reports_without_a_system_column(profile_tool):
    """LLVM leaves the System and User+System columns out of a timing report whose total is
    zero there (a fast module on a quiet machine): the fresh-clone CI once got such a report
    and read no pass at all."""
    three = ("   0.0004 ( 70.0%)   0.0004 ( 70.0%)   0.0005 ( 70.0%)  LoopVectorizePass on scale\n"
             "   0.0006 (100.0%)   0.0006 (100.0%)   0.0006 (100.0%)  Total\n")
    four = ("   0.0004 ( 70.0%)   0.0001 ( 70.0%)   0.0005 ( 70.0%)   0.0007 ( 70.0%)  "
            "LoopVectorizePass #2\n")
    assert profile_tool.pass_seconds(three) == {"LoopVectorizePass": 0.0004}
    assert profile_tool.pass_seconds(four) == {"LoopVectorizePass": 0.0005}


# A z-marching stencil over a shared tile with halo loads under `if`s on the thread index:
# in the generic code (block shape unknown) the thread loops carry several branches on
# block-uniform values
STENCIL_SRC = r'''
extern "C" __global__ void stencil7(float c0, float c1, const float* A, float* B,
                                    int nx, int ny, int nz)
{
    extern __shared__ float tile[];
    int w = blockDim.x + 2;
    int tx = threadIdx.x + 1, ty = threadIdx.y + 1;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    int plane = nx * ny;
    for (int k = 1; k < nz - 1; ++k) {
        int at = k * plane + j * nx + i;
        if (i < nx && j < ny) {
            tile[ty * w + tx] = A[at];
            if (threadIdx.x == 0 && i > 0) tile[ty * w] = A[at - 1];
            if (threadIdx.x == blockDim.x - 1 && i + 1 < nx) tile[ty * w + tx + 1] = A[at + 1];
            if (threadIdx.y == 0 && j > 0) tile[tx] = A[at - nx];
            if (threadIdx.y == blockDim.y - 1 && j + 1 < ny) tile[(ty + 1) * w + tx] = A[at + nx];
        }
        __syncthreads();
        if (i > 0 && i < nx - 1 && j > 0 && j < ny - 1)
            B[at] = c1 * (tile[ty * w + tx - 1] + tile[ty * w + tx + 1] + tile[(ty - 1) * w + tx]
                          + tile[(ty + 1) * w + tx] + A[at - plane] + A[at + plane])
                    - c0 * tile[ty * w + tx];
        __syncthreads();
    }
}
'''


def _optimized_instructions(src: Path, env: dict[str, str]) -> int:
    """Instructions of `cpuify llvm SRC` (after LLVM's optimization) in a fresh process:
    the LLVM options are set once per process."""
    r = subprocess.run([sys.executable, "-m", "cpuify.cli.main", "llvm", str(src)],
                       env=dict(os.environ, CPUIFY_NO_CACHE="1", **env,
                                PYTHONPATH=os.pathsep.join(filter(None, [
                                    str(ROOT / "src"), os.environ.get("PYTHONPATH")]))),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return sum(1 for line in r.stdout.splitlines() if re.match(r"^  [^ ;]", line))


def test_unswitching_bounded_for_many_uniform_branches(tmp_path):
    """CPUIFY_UNSWITCH_UNSCALED_CANDIDATES=1: LLVM unswitches a loop's first invariant branch
    at the full budget and scales the cost of each further one, so the generic stencil's
    thread loops are not copied for every combination of their block-uniform branches (the
    default, LLVM's 8 unscaled candidates: 11.6k optimized instructions here, 8.1k with 1).
    The results stay those of NumPy."""
    src = tmp_path / "stencil.cu"
    src.write_text(STENCIL_SRC)
    scaled = _optimized_instructions(src, {"CPUIFY_UNSWITCH_UNSCALED_CANDIDATES": "1"})
    default = _optimized_instructions(src, {})
    assert scaled < 0.8 * default, (scaled, default)

    nx, ny, nz, bx, by = 37, 21, 6, 16, 8
    rng = np.random.default_rng(3)
    a = rng.standard_normal((nz, ny, nx)).astype(np.float32)
    b = np.zeros_like(a)
    mod = cpuify.RawModule(code=STENCIL_SRC)
    k = mod.get_function("stencil7")
    c0, c1 = np.float32(0.5), np.float32(0.25)
    k(((nx + bx - 1) // bx, (ny + by - 1) // by, 1), (bx, by, 1),
      (c0, c1, a, b, np.int32(nx), np.int32(ny), np.int32(nz)),
      shared_mem=(bx + 2) * (by + 2) * 4)
    want = np.zeros_like(a)
    c = a[1:-1, 1:-1, 1:-1]
    want[1:-1, 1:-1, 1:-1] = c1 * (a[1:-1, 1:-1, :-2] + a[1:-1, 1:-1, 2:] + a[1:-1, :-2, 1:-1]
                                   + a[1:-1, 2:, 1:-1] + a[:-2, 1:-1, 1:-1] + a[2:, 1:-1, 1:-1]) - c0 * c
    np.testing.assert_allclose(b, want, rtol=1e-5, atol=1e-5)


def test_unswitch_option_in_cache_key_and_checked(monkeypatch):
    """The LLVM options cpuify sets are part of the compile cache's key; a bad
    CPUIFY_UNSWITCH_UNSCALED_CANDIDATES is an error that names it."""
    from cpuify.errors import CpuifyError
    assert f"-unswitch-num-initial-unscaled-candidates={jit.UNSWITCH_UNSCALED_CANDIDATES}" \
        in jit.llvm_options()
    from cpuify.compiler import toolchain_key
    assert " ".join(jit.llvm_options()) in toolchain_key()
    monkeypatch.setenv("CPUIFY_UNSWITCH_UNSCALED_CANDIDATES", "many")
    with pytest.raises(CpuifyError, match="CPUIFY_UNSWITCH_UNSCALED_CANDIDATES='many'"):
        jit.unswitch_unscaled_candidates()
    monkeypatch.setenv("CPUIFY_UNSWITCH_UNSCALED_CANDIDATES", "3")
    assert jit.unswitch_unscaled_candidates() == 3
