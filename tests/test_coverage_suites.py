"""The Chai and GraphBIG recipes of benchmarks/coverage.py: the layouts are recognized, and
a Chai-shaped corpus of our own (a benchmark directory whose Makefile calls plain `nvcc` with
CHAI_CUDA_LIB/CHAI_CUDA_INC, a task-queue kernel whose thread 0 hands the next task over
with no barrier, and the suite's `Test Passed`/`Test failed` check) is built by cpuify, run
and judged: a right result passes, a wrong one is reported with the program's message."""

from __future__ import annotations

import json
import os
from pathlib import Path

from benchmarks import coverage

ROOT = Path(__file__).resolve().parents[1]

MAKEFILE = '''CXX=nvcc
ifndef CHAI_CUDA_LIB
    $(error CHAI_CUDA_LIB not defined)
endif
ifndef CHAI_CUDA_INC
    $(error CHAI_CUDA_INC not defined)
endif
all:
\t$(CXX) -std=c++11 main.cu -L$(CHAI_CUDA_LIB) -lm -I$(CHAI_CUDA_INC) -o {exe}
'''

# blocks take tasks from a counter; thread 0 fetches the next one right after its own work
MAIN = r'''#include <cstdio>
#include <cstdlib>
#include "cuda_runtime.h"
__global__ void tasks(int *counter, int ntasks, int *out, int reps) {
    __shared__ int cur;
    if (threadIdx.x == 0) cur = atomicAdd(counter, 1);
    __syncthreads();
    while (cur < ntasks) {
        for (int r = 0; r < reps; r++) out[cur * blockDim.x + threadIdx.x] += 2;
        out[cur * blockDim.x + threadIdx.x] += cur;
        if (threadIdx.x == 0) cur = atomicAdd(counter, 1);
        __syncthreads();
    }
}
int main() {
    const int n = 40, threads = 64, reps = 3;
    int *counter, *out;
    cudaMalloc(&counter, sizeof(int)); cudaMalloc(&out, n * threads * sizeof(int));
    cudaMemset(counter, 0, sizeof(int)); cudaMemset(out, 0, n * threads * sizeof(int));
    tasks<<<3, threads>>>(counter, n, out, reps);
    int h[n * threads];
    cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
    for (int i = 0; i < n * threads; i++)
        if (h[i] != 2 * reps + i / threads + OFFSET) { printf("Test failed\n"); exit(EXIT_FAILURE); }
    printf("Test Passed\n");
    return 0;
}
'''


def _chai_corpus(top: Path) -> None:
    for variant, name, offset in (("CUDA-D", "TQ", 0), ("CUDA-U", "TQW", 1)):
        d = top / variant / name
        (d / "support").mkdir(parents=True)
        (d / "support" / "cuda-setup.h").write_text("// marker of the layout\n")
        (d / "Makefile").write_text(MAKEFILE.format(exe=name.lower()))
        (d / "main.cu").write_text(MAIN.replace("OFFSET", str(offset)))


def test_layouts_are_recognized(tmp_path: Path) -> None:
    _chai_corpus(tmp_path / "chai")
    assert [r.name for r in coverage.detect(tmp_path / "chai")] == ["chai"]
    gb = tmp_path / "graphbig"
    (gb / "gpu_bench" / "cudalib").mkdir(parents=True)
    (gb / "gpu_bench" / "cudalib" / "cudaGraph.h").write_text("\n")
    assert [r.name for r in coverage.detect(gb)] == ["graphbig-gpu"]
    recipe = coverage.RECIPES["graphbig-gpu"]
    assert "compare.sh" in recipe.run_shell and recipe.copy_up == 2


def test_chai_shaped_corpus_built_run_and_judged(tmp_path: Path, monkeypatch) -> None:
    _chai_corpus(tmp_path / "chai")
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "result.json"
    assert coverage.main([str(tmp_path / "chai"), "--json", str(out), "--run-timeout", "120"]) == 0
    results = {r["program"]: r for r in json.loads(out.read_text())["results"]}
    good, bad = results["CUDA-D/TQ"], results["CUDA-U/TQW"]
    assert good["built"] and good["ran"] and good["passed"], good
    assert bad["built"] and bad["ran"] and not bad["passed"]
    assert "its check failed" in bad["first_error"] and "Test failed" in bad["first_error"]


# a tutorial's shape: one program per .cu file, checked by assert() and a closing message
TUTORIAL = r'''#include <cassert>
#include <cstdio>
#include <vector>
__global__ void scale(int *v, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = v[i] * k + i % 7;
}
int main() {
    const int n = 1000;
    std::vector<int> h(n);
    for (int i = 0; i < n; i++) h[i] = i;
    int *d;
    cudaMalloc(&d, n * sizeof(int));
    cudaMemcpy(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice);
    scale<<<(n + 127) / 128, 128>>>(d, n, 3);
    cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; i++) assert(h[i] == i * 3 + i % 7 + OFFSET);
    printf("COMPLETED SUCCESSFULLY\n");
    return 0;
}
'''


def test_single_file_programs_built_run_and_judged(tmp_path: Path, monkeypatch) -> None:
    """Each .cu file is a program of its own (two in one directory): built with `nvcc x.cu -o
    x` by cpuify, run; a failed assert() is that program's check failing, not a crash."""
    d = tmp_path / "tutorial" / "01_scale"
    d.mkdir(parents=True)
    (d / "scale.cu").write_text(TUTORIAL.replace("OFFSET", "0"))
    (d / "scale_wrong.cu").write_text(TUTORIAL.replace("OFFSET", "1"))
    # checked by its asserts only, silent when they hold
    (d / "scale_quiet.cu").write_text(
        TUTORIAL.replace("OFFSET", "0").replace('printf("COMPLETED SUCCESSFULLY\\n");', ""))
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "result.json"
    assert coverage.main([str(tmp_path / "tutorial"), "--suite", "single-cu", "--json", str(out),
                          "--run-timeout", "120"]) == 0
    results = {r["program"]: r for r in json.loads(out.read_text())["results"]}
    assert set(results) == {"01_scale/scale.cu", "01_scale/scale_wrong.cu", "01_scale/scale_quiet.cu"}
    quiet = results["01_scale/scale_quiet.cu"]
    assert quiet["built"] and quiet["ran"] and quiet["passed"], quiet
    good, bad = results["01_scale/scale.cu"], results["01_scale/scale_wrong.cu"]
    assert good["built"] and good["ran"] and good["passed"], good
    assert good["executables"] == ["scale"]
    assert bad["built"] and bad["ran"] and not bad["passed"], bad
    assert "its check failed" in bad["first_error"] and "Assertion" in bad["first_error"]


def test_single_file_judge_reads_no_error_as_success(tmp_path: Path) -> None:
    """`cudaGetErrorString(cudaSuccess)` is "no error": OLCF's training programs print it
    after a launch, then their own verdict (hw12's tiled matmul: "no error", "Success!")."""
    assert coverage._single_file_judge("t.cu", tmp_path, "no error\nSuccess!\n") == (True, "")
    verdict, why = coverage._single_file_judge("t.cu", tmp_path, "no error\nMismatch at index: 3\n")
    assert verdict is False and "Mismatch" in why
    verdict, why = coverage._single_file_judge("t.cu", tmp_path, "Error: invalid argument\n")
    assert verdict is False and "invalid argument" in why


def test_gpumembench_judge() -> None:
    """constbench's own check (its sums, `ERROR: c was not N`) and its closing table; the
    other two programs of gpumembench print bandwidths only."""
    ok = "Kernel execution time\n...\nMemory throughput\n\tusing  32bit operations : 1.0 GB/sec\n"
    assert coverage._gpumembench_judge("constbench-cuda", ok) == (True, "")
    verdict, why = coverage._gpumembench_judge("constbench-cuda", "ERROR: c was not 8192 (0)!\n")
    assert verdict is False and "c was not 8192" in why
    assert coverage._gpumembench_judge("constbench-cuda", "Buffer size: 1MB\n")[0] is False
    assert coverage._gpumembench_judge("shmembench-cuda", ok)[0] is None
    assert [r.name for r in coverage.detect(ROOT / "tests")] == ["makefiles"]
    assert coverage.RECIPES["gpumembench"].copy_up == 1


def test_single_file_judge_silent_comparison(tmp_path: Path) -> None:
    """A program whose comparison prints only on a mismatch (OLCF's hw7/hw10 streams
    exercises) passes when it exits quietly; an error-check macro's "FAILED" string is not a
    comparison, so a program with only that stays unchecked."""
    (tmp_path / "s.cu").write_text('if (a != b) std::cout << "mismatch at " << i;\n')
    (tmp_path / "e.cu").write_text('fprintf(stderr, "*** FAILED - ABORTING\\n");\n')
    assert coverage._single_file_judge("s.cu", tmp_path, "elapsed time: 1.5\n") == (True, "")
    assert coverage._single_file_judge("s.cu", tmp_path, "mismatch at 7\n")[0] is False
    assert coverage._single_file_judge("e.cu", tmp_path, "A[0] = 1.0\n")[0] is None


# an NPB-GPU-shaped corpus of our own: CUDA/config/make.def names nvcc, the top Makefile
# builds `make XX CLASS=S` into CUDA/bin/xx.S, and each program prints NPB's verification line
NPB_TOP_MAKEFILE = '''include config/make.def
.PHONY: XX YY
XX YY:
\tmkdir -p bin && $(NVCC) -O2 $@/main.cu -o bin/$(shell echo $@ | tr A-Z a-z).$(CLASS)
'''

NPB_MAIN = r'''#include <cstdio>
__global__ void square(double *v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = v[i] * v[i];
}
int main() {
    const int n = 300;
    double h[n], *d, sum = 0.0;
    for (int i = 0; i < n; i++) h[i] = i;
    cudaMalloc(&d, sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    square<<<(n + 63) / 64, 64>>>(d, n);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; i++) sum += h[i];
    bool ok = sum == (n - 1.0) * n * (2 * n - 1) / 6 + OFFSET;
    printf(" Verification    =               %s\n", ok ? "SUCCESSFUL" : "UNSUCCESSFUL");
    return 0;
}
'''


def test_npb_gpu_shaped_corpus_built_run_and_judged(tmp_path: Path, monkeypatch) -> None:
    top = tmp_path / "npb"
    (top / "CUDA" / "config").mkdir(parents=True)
    (top / "CUDA" / "config" / "make.def").write_text("NVCC = nvcc\n")
    (top / "CUDA" / "Makefile").write_text(NPB_TOP_MAKEFILE)
    for name, offset in (("XX", 0), ("YY", 1)):
        (top / "CUDA" / name).mkdir()
        (top / "CUDA" / name / "Makefile").write_text("# built from CUDA/\n")
        (top / "CUDA" / name / "main.cu").write_text(NPB_MAIN.replace("OFFSET", str(offset)))
    assert [r.name for r in coverage.detect(top)] == ["npb-gpu"]
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "result.json"
    assert coverage.main([str(top), "--json", str(out), "--run-timeout", "120"]) == 0
    results = {r["program"]: r for r in json.loads(out.read_text())["results"]}
    good, bad = results["CUDA/XX"], results["CUDA/YY"]
    assert good["built"] and good["ran"] and good["passed"], good
    assert good["executables"] == ["bin/xx.S"]
    assert bad["built"] and bad["ran"] and not bad["passed"]
    assert "UNSUCCESSFUL" in bad["first_error"]


def test_xsbench_and_rsbench_recipes_read_their_checksum_line(tmp_path: Path) -> None:
    for name, header in (("xsbench", "XSbench_header.cuh"), ("rsbench", "rsbench.cuh")):
        (tmp_path / name / "cuda").mkdir(parents=True)
        (tmp_path / name / "cuda" / header).write_text("\n")
        assert [r.name for r in coverage.detect(tmp_path / name)] == [name]
        recipe = coverage.RECIPES[name]
        assert recipe.run_args == ("-m", "event", "-s", "small")
        valid = "Verification checksum: 945990 (Valid)\n"
        invalid = "Verification checksum: 12345 (WARNING - INAVALID CHECKSUM!)\n"
        import re
        assert re.search(recipe.passed, valid) and not re.search(recipe.failed, valid)
        assert re.search(recipe.failed, invalid) and not re.search(recipe.passed, invalid)


# a textbook's shape (Professional CUDA C Programming): a chapter Makefile whose pattern rule
# calls plain `nvcc`, the book's common.h one level up, a comparison printing `Arrays match.`
BOOK_MAKEFILE = '''APPS=addOne addOneWrong quiet
all: ${APPS}
%: %.cu
\tnvcc -O2 -arch=sm_20 -o $@ $<
'''
BOOK_PROGRAM = r'''#include "../common/common.h"
#include <cstdio>
__global__ void addOne(float *v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] += 1.0f + OFFSET;
}
int main() {
    const int n = 300;
    float h[n], ref[n], *d;
    for (int i = 0; i < n; i++) { h[i] = i * 0.5f; ref[i] = h[i] + 1.0f; }
    CHECK(cudaMalloc(&d, sizeof h));
    CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
    addOne<<<3, 128>>>(d, n);
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (h[i] != ref[i]) { printf("Arrays do not match!\n"); return 0; }
    MATCHED
    return 0;
}
'''


def test_textbook_shaped_corpus_built_run_and_judged(tmp_path: Path, monkeypatch) -> None:
    top = tmp_path / "book"
    (top / "examples" / "common").mkdir(parents=True)
    (top / "examples" / "common" / "common.h").write_text(
        '#define CHECK(call) { cudaError_t e = (call); if (e != cudaSuccess) '
        'fprintf(stderr, "Error: %s:%d\\n", __FILE__, __LINE__); }\n')
    (top / "examples" / "chapter10").mkdir()
    ch = top / "examples" / "chapter02"
    ch.mkdir()
    (ch / "Makefile").write_text(BOOK_MAKEFILE)
    (ch / "addOne.cu").write_text(BOOK_PROGRAM.replace("OFFSET", "0")
                                  .replace("MATCHED", 'printf("Arrays match.\\n\\n");'))
    (ch / "addOneWrong.cu").write_text(BOOK_PROGRAM.replace("OFFSET", "1")
                                       .replace("MATCHED", 'printf("Arrays match.\\n\\n");'))
    (ch / "quiet.cu").write_text(BOOK_PROGRAM.replace("OFFSET", "0").replace("MATCHED", ""))
    (top / "examples" / "chapter10" / "crypt.legacy.cu").write_text(
        "int main() { return 0; }\n")
    (top / "examples" / "chapter10" / "Makefile").write_text(
        "%: %.cu\n\tnvcc -O2 -o $@ $<\n")
    assert [r.name for r in coverage.detect(top)] == ["pcuda"]
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "result.json"
    assert coverage.main([str(top), "--only", "chapter02", "--json", str(out),
                          "--run-timeout", "120"]) == 0
    results = {r["program"]: r for r in json.loads(out.read_text())["results"]}
    good = results["examples/chapter02/addOne.cu"]
    bad = results["examples/chapter02/addOneWrong.cu"]
    quiet = results["examples/chapter02/quiet.cu"]
    assert good["built"] and good["ran"] and good["passed"], good
    assert good["executables"] == ["chapter02/addOne"]
    assert quiet["passed"], quiet         # its comparison speaks only on a mismatch
    assert bad["built"] and bad["ran"] and not bad["passed"], bad
    assert "Arrays do not match" in bad["first_error"]


def test_textbook_judges() -> None:
    judge = coverage._pcuda_judge
    assert judge("x.cu", Path("/nonexistent"), "Arrays match.\n") == (True, "")
    assert judge("x.cu", Path("/nonexistent"), "gpu_sum: 1\nTest failed!\n")[0] is False
    assert judge("x.cu", Path("/nonexistent"), "Error: x.cu:12, code: 2\nArrays match.\n")[0] is False
    assert judge("x.cu", Path("/nonexistent"), "elapsed 0.1 sec\n")[0] is None
    assert judge("x.cu", Path("/nonexistent"), "The device output a different value")[0] is None
    hb = coverage._handbook_judge
    assert hb("peak (100,82) vs planted (100,82) -> MATCH\n") == (True, "")
    assert hb("Correctness: PASS  (0 mismatches of 4096)\n") == (True, "")
    assert hb("Incorrect sum computed!\n")[0] is False
    assert hb("Sum is wrong: 0x00000001 should be 0x00000002\n")[0] is False
    assert hb("Done: FAILED (3 mismatches)\n")[0] is False
    assert hb("Mismatch at i==3, k==1 (4 should be 5)\n")[0] is False
    assert hb("1024\t2.3 GB/s\n")[0] is None
    assert coverage.RECIPES["cudahandbook"].marker == "chLib/chError_cuda.h"
