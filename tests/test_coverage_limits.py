"""The coverage tool's limits and per-program flags (benchmarks/limits.py,
benchmarks/coverage.py): builds and runs are limited by the CPU time of every process they
start, with a wall-clock backstop, and both times are reported; a recipe (or
--program-flags) gives some programs extra compiler flags, as OLCF's hw11 needs -DNO_MPI."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from benchmarks import coverage
from benchmarks.limits import run_limited

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
# about `s` seconds of CPU time, whatever share of a CPU the process gets
BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def test_waiting_is_not_a_timeout_and_the_backstop_stops_it() -> None:
    """A command that uses little CPU (here it sleeps, as a starved program waits) runs past
    its CPU-time limit in wall-clock time and is not stopped; one that waits past the
    backstop (wall_factor x the limit) is."""
    r = run_limited("sleep 2; echo done", shell=True, cpu_limit=1.0, wall_factor=100)
    assert (r.stopped, r.returncode, r.stdout) == ("", 0, "done\n")
    assert r.wall_s >= 2.0 and r.cpu_s < 1.0
    t0 = time.perf_counter()
    r = run_limited("sleep 60", shell=True, cpu_limit=0.2, wall_factor=5)
    assert r.stopped == "wall" and r.returncode is None
    assert time.perf_counter() - t0 < 30
    assert "wall-clock backstop of 1 s" in r.why("build", 0.2, 5)


def test_cpu_time_of_children_counts_and_the_session_is_killed(tmp_path: Path) -> None:
    """The CPU time of the children a shell started counts, the finished ones' and the running
    ones'; at the limit the whole session goes, not only the shell at its top."""
    busy = tmp_path / "busy.py"
    busy.write_text(BUSY.format(s=0.3))
    r = run_limited(f"{PY} {busy}; {PY} {busy}", shell=True, cpu_limit=30, wall_factor=100)
    assert r.returncode == 0 and not r.stopped
    assert r.cpu_s >= 0.55, r.cpu_s          # both children's 0.3 s
    forever = tmp_path / "forever.py"
    forever.write_text(f"import os\nopen({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid()))\n"
                       "while True: pass\n")
    # the loop runs in a grandchild: sh -> sh -> python
    r = run_limited(f"sh -c '{PY} {forever}; echo never'", shell=True, cpu_limit=0.5,
                    wall_factor=400)
    assert r.stopped == "cpu" and r.cpu_s > 0.5 and "never" not in r.stdout
    assert r.why("build", 0.5).startswith("build used more than 0.5 s of CPU time")
    pid = int((tmp_path / "pid").read_text())
    time.sleep(0.5)
    try:           # gone, or a zombie until init reaps it
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z"), state


def test_program_flags_are_recipe_data() -> None:
    olcf = coverage.RECIPES["olcf-training"]
    assert coverage.program_flags(olcf, "exercises/hw11/test.cu") == "-DNO_MPI"
    assert coverage.program_flags(olcf, "exercises/hw1/hello.cu") == ""
    single = coverage.RECIPES["single-cu"]
    assert coverage.program_flags(single, "a/b.cu", ((r"/b\.cu$", "-DX=1"), ("^a/", "-O3"))) == "-DX=1 -O3"
    assert all("$FLAGS" in cmd for cmd in single.build + olcf.build)


# hw11's shape: MPI unless NO_MPI is defined (here: no MPI at all, so NO_MPI is needed)
HW11 = r'''#ifndef NO_MPI
#include <mpi_that_is_not_here.h>
#endif
#include <cstdio>
#include <unistd.h>
__global__ void twice(int *v) { v[threadIdx.x] = 2 * threadIdx.x + SHIFT; }
int main() {
    int *d, h[32];
    cudaMalloc(&d, sizeof h);
    twice<<<1, 32>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    sleep(WAIT);            // waiting uses no CPU time: not a timeout
    for (int i = 0; i < 32; i++)
        if (h[i] != 2 * i + SHIFT) { printf("mismatch at %d\n", i); return 1; }
    printf("Success!\n");
    return 0;
}
'''


def test_olcf_corpus_with_recipe_and_command_line_flags(tmp_path: Path, monkeypatch) -> None:
    """An OLCF-shaped corpus is recognized; hw11's test.cu builds with the recipe's -DNO_MPI
    (it cannot without), another program with flags from --program-flags; a run that sleeps
    past its CPU-time limit (1 s) is not a timeout; the CPU and wall-clock seconds of builds
    and runs are reported."""
    top = tmp_path / "olcf"
    (top / "exercises" / "hw11").mkdir(parents=True)
    (top / "exercises" / "hw11" / "run_no_mpi.sh").write_text("#!/bin/sh\n")
    (top / "exercises" / "hw11" / "test.cu").write_text(HW11.replace("SHIFT", "0").replace("WAIT", "2"))
    (top / "exercises" / "hw3").mkdir()
    (top / "exercises" / "hw3" / "shift.cu").write_text(
        "#ifndef SHIFT\n#error give -DSHIFT\n#endif\n" + HW11.replace("#ifndef NO_MPI", "#if 0")
        .replace("WAIT", "0"))
    assert [r.name for r in coverage.detect(top)] == ["olcf-training"]
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "result.json"
    assert coverage.main([str(top), "--json", str(out), "--run-timeout", "1", "--wall-factor", "100",
                          "--program-flags", r"hw3/shift\.cu$=-DSHIFT=5"]) == 0
    report = json.loads(out.read_text())
    assert report["limits"] == {"build_cpu_s": 900, "run_cpu_s": 1, "wall_factor": 100}
    results = {r["program"]: r for r in report["results"]}
    for name in ("exercises/hw11/test.cu", "exercises/hw3/shift.cu"):
        r = results[name]
        assert r["built"] and r["ran"] and r["passed"], r
        assert 0 < r["build_cpu_s"] and 0 < r["run_cpu_s"] < 1 and r["build_s"] > 0
    assert results["exercises/hw11/test.cu"]["run_s"] >= 2          # its sleep(2)


LLMC_MAKEFILE = '''NVCC := $(shell which nvcc 2>/dev/null)
%: %.cu
\t$(NVCC) -O3 -std=c++17 $< -o $@
'''

# llm.c's shape: the kernel checked against the CPU code first, then a benchmark that runs
# long (here: forever); OFFSET 1 makes the kernel wrong
LLMC_PROGRAM = r'''#include <cstdio>
#include <cstdlib>
#include "common.h"
__global__ void scale(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = 2 * x[i] + OFFSET; }
int main() {
    const int n = 1000;
    float h[n], *d;
    for (int i = 0; i < n; i++) h[i] = i;
    cudaMalloc(&d, sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    scale<<<4, 256>>>(d, n);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; i++)
        if (h[i] != 2.0f * i) { printf("Mismatch of out at %d: CPU_ref: %f vs GPU: %f\n", i, 2.0f * i, h[i]); exit(1); }
    printf("All results match. Starting benchmarks.\n\n");
    for (volatile unsigned long spin = 0;; spin++) {}
}
'''


def test_llmc_run_stopped_in_its_benchmark_is_judged_on_its_check(tmp_path: Path, monkeypatch) -> None:
    """llm.c's dev/cuda programs check their kernels and then benchmark them for long: a run
    that the CPU limit stops after "All results match." passed (and says it was stopped), a
    "Mismatch of ..." is a failed check."""
    d = tmp_path / "llmc" / "dev" / "cuda"
    d.mkdir(parents=True)
    (d / "common.h").write_text("#include <cuda_runtime.h>\n")
    (d / "Makefile").write_text(LLMC_MAKEFILE)
    (d / "scale_forward.cu").write_text(LLMC_PROGRAM.replace("OFFSET", "0"))
    (d / "scale_backward.cu").write_text(LLMC_PROGRAM.replace("OFFSET", "1"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "result.json"
    assert coverage.main([str(tmp_path / "llmc"), "--json", str(out), "--run-timeout", "2",
                          "--wall-factor", "60"]) == 0        # recognized by dev/cuda/common.h
    results = {r["program"]: r for r in json.loads(out.read_text())["results"]}
    good, bad = results["dev/cuda/scale_forward.cu"], results["dev/cuda/scale_backward.cu"]
    assert good["built"] and good["ran"] and good["passed"], good
    assert good["first_error"].startswith("its check held; scale_forward: run used more than 2 s"), good
    assert bad["built"] and bad["ran"] and not bad["passed"], bad
    assert "Mismatch of out at 0" in bad["first_error"], bad
