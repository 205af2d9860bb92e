"""Whole programs across MPI ranks: `cpuify nvcc --distributed app.cu -o app`, then
`mpiexec -n N ./app` (rank 0 runs main, the others serve kernel partitions).

Each program prints a digest of its results; it must be the same, bit for bit, without MPI
(no engine at all), with one rank and with 2 and 3 ranks.  The front is tested with the
stand-in engine tests/dist_fake_engine.py (really runs the launches over the ranks); with
the real engine (cpuify.distributed.engine) when it is installed.  Every mpiexec has a
timeout: a failing server must never hang the suite."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cpuify.nvcc import driver
from cpuify.nvcc.distinfo import KernelDistInfo, decode, encode, rank0_reason

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"
MPI_TIMEOUT = 120


def _mpiexec() -> str | None:
    """The mpich wheel's mpiexec beside this Python, else the PATH's."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.access(here, os.X_OK) else shutil.which("mpiexec")


MPIEXEC = _mpiexec()
needs_mpi = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None or MPIEXEC is None,
    reason="distributed execution needs mpi4py and mpiexec (pip install mpi4py mpich)")

# a digest of n bytes, printed by every program: FNV-1a 64
DIGEST = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
static unsigned long long digest(const void *p, size_t n) {
    const unsigned char *b = (const unsigned char *)p;
    unsigned long long h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ull; }
    return h;
}
#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    printf("%s: %s\n", #x, cudaGetErrorName(e_)); return 1; } } while (0)
"""

SAXPY = DIGEST + r"""
__constant__ float bias;
__global__ void saxpy(int n, float a, const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i] + bias;
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100000;
    size_t bytes = n * sizeof(float);
    float *x = (float *)malloc(bytes), *y = (float *)malloc(bytes);
    for (int i = 0; i < n; i++) { x[i] = i * 0.25f; y[i] = 1.0f / (i + 1); }
    float *dx, *dy;
    CHECK(cudaMalloc(&dx, bytes));
    CHECK(cudaMalloc(&dy, bytes));
    CHECK(cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice));
    for (int it = 0; it < 4; it++) {
        float b = 0.5f * it;          /* a new constant before each launch */
        CHECK(cudaMemcpyToSymbol(bias, &b, sizeof b));
        saxpy<<<(n + 127) / 128, 128>>>(n, 1.5f, dx, dy);
    }
    CHECK(cudaMemcpy(y, dy, bytes, cudaMemcpyDeviceToHost));
    /* a part of the result again, through a device-to-device copy */
    float *dz;
    CHECK(cudaMalloc(&dz, 64 * sizeof(float)));
    CHECK(cudaMemcpy(dz, dy + n / 2, 64 * sizeof(float), cudaMemcpyDeviceToDevice));
    float z[64];
    CHECK(cudaMemcpy(z, dz, sizeof z, cudaMemcpyDeviceToHost));
    printf("saxpy %016llx %016llx y[n-1]=%a\n", digest(y, bytes), digest(z, sizeof z), y[n - 1]);
    CHECK(cudaFree(dx)); CHECK(cudaFree(dy)); CHECK(cudaFree(dz));
    return 0;
}
"""

STENCIL = DIGEST + r"""
__global__ void jacobi(int w, int h, const float *in, float *out) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    if (x == 0 || y == 0 || x == w - 1 || y == h - 1) { out[y * w + x] = in[y * w + x]; return; }
    out[y * w + x] = 0.2f * (in[y * w + x] + in[y * w + x - 1] + in[y * w + x + 1]
                             + in[(y - 1) * w + x] + in[(y + 1) * w + x]);
}
int main() {
    const int w = 200, h = 150, iters = 12;
    size_t bytes = w * h * sizeof(float);
    float *grid = (float *)malloc(bytes);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) grid[y * w + x] = (float)((x * 7 + y * 13) % 17);
    float *a, *b;
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMemset(b, 0, bytes));
    /* rows with a pitch: the host writes every other byte range of the buffer */
    CHECK(cudaMemcpy2D(a, w * sizeof(float), grid, w * sizeof(float), w * sizeof(float), h,
                       cudaMemcpyHostToDevice));
    dim3 block(16, 8), blocks((w + 15) / 16, (h + 7) / 8);
    for (int it = 0; it < iters; it++) {
        jacobi<<<blocks, block>>>(w, h, a, b);
        float *t = a; a = b; b = t;
    }
    CHECK(cudaDeviceSynchronize());
    /* the middle rows only, as a pitched copy */
    float *mid = (float *)malloc(10 * 32 * sizeof(float));
    CHECK(cudaMemcpy2D(mid, 32 * sizeof(float), a + 70 * w + 50, w * sizeof(float),
                       32 * sizeof(float), 10, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(grid, a, bytes, cudaMemcpyDeviceToHost));
    printf("stencil %016llx %016llx c=%a\n", digest(grid, bytes), digest(mid, 320 * sizeof(float)),
           grid[75 * w + 100]);
    return 0;
}
"""

# the histogram kernel has "local" in its name: the stand-in engine gives it no access (it
# could not merge atomics), so it runs on rank 0 after every buffer is gathered
HISTOGRAM = DIGEST + r"""
__global__ void fill(int n, unsigned *data) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] = (i * 2654435761u) >> 7;
}
__global__ void histogram_local(int n, const unsigned *data, unsigned *bins) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&bins[data[i] % 64], 1u);
}
__global__ void scale(int nbins, const unsigned *bins, float *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < nbins) out[i] = bins[i] * 0.5f;
}
int main() {
    const int n = 50000;
    unsigned *data, *bins;
    float *out;
    CHECK(cudaMalloc(&data, n * sizeof(unsigned)));
    CHECK(cudaMalloc(&bins, 64 * sizeof(unsigned)));
    CHECK(cudaMalloc(&out, 64 * sizeof(float)));
    CHECK(cudaMemset(bins, 0, 64 * sizeof(unsigned)));
    fill<<<(n + 255) / 256, 256>>>(n, data);
    histogram_local<<<(n + 255) / 256, 256>>>(n, data, bins);
    scale<<<1, 64>>>(64, bins, out);
    unsigned h[64];
    float o[64];
    CHECK(cudaMemcpy(h, bins, sizeof h, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(o, out, sizeof o, cudaMemcpyDeviceToHost));
    unsigned total = 0;
    for (int i = 0; i < 64; i++) total += h[i];
    printf("histogram total=%u %016llx %016llx\n", total, digest(h, sizeof h), digest(o, sizeof o));
    return 0;
}
"""

MANAGED = DIGEST + r"""
__global__ void twice(int n, float *v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = 2.0f * v[i] + 1.0f;
}
int main() {
    const int n = 30000;
    float *v;
    CHECK(cudaMallocManaged(&v, n * sizeof(float)));
    for (int i = 0; i < n; i++) v[i] = (float)(i % 101);      /* the host writes it directly */
    twice<<<(n + 255) / 256, 256>>>(n, v);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i += 3) v[i] -= 1.0f;              /* ... reads and writes it again */
    twice<<<(n + 255) / 256, 256>>>(n, v);
    CHECK(cudaDeviceSynchronize());
    printf("managed %016llx v[1]=%a v[n-1]=%a\n", digest(v, n * sizeof(float)), v[1], v[n - 1]);
    CHECK(cudaFree(v));
    return 0;
}
"""

# a CUDA graph: its kernel nodes go to the engine, its memcpy node reads through the hooks
GRAPH = DIGEST + r"""
__global__ void add(int n, float *v, float d) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] += d * i;
}
int main() {
    const int n = 4096;
    float *v, h[n];
    CHECK(cudaMalloc(&v, n * sizeof(float)));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaGraph_t g;
    cudaGraphExec_t e;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    add<<<n / 128, 128, 0, s>>>(n, v, 0.5f);
    add<<<n / 128, 128, 0, s>>>(n, v, 0.25f);
    CHECK(cudaMemcpyAsync(h, v, sizeof h, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&e, g, 0));
    CHECK(cudaMemset(v, 0, n * sizeof(float)));
    for (int r = 0; r < 3; r++) CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    printf("graph %016llx %a\n", digest(h, sizeof h), h[n - 1]);
    return 0;
}
"""

# separate compilation: the maps of the linked device code are computed at the link
RDC_KERNEL = r"""
__device__ float scale(float x) { return 3.0f * x; }
__global__ void kern(int n, float *v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = scale(v[i]) + i;
}
"""
RDC_MAIN = DIGEST + r"""
__global__ void kern(int n, float *v);
int main() {
    const int n = 3000;
    float h[n], *v;
    for (int i = 0; i < n; i++) h[i] = i % 7;
    CHECK(cudaMalloc(&v, sizeof h));
    CHECK(cudaMemcpy(v, h, sizeof h, cudaMemcpyHostToDevice));
    kern<<<(n + 63) / 64, 64>>>(n, v);
    kern<<<(n + 63) / 64, 64>>>(n, v);
    CHECK(cudaMemcpy(h, v, sizeof h, cudaMemcpyDeviceToHost));
    printf("rdc %016llx\n", digest(h, sizeof h));
    return 0;
}
"""

# a fault in the last block (run by the last rank): the error shows on rank 0 as without MPI
FAULT = DIGEST + r"""
__global__ void poke(int n, int *p, int *bad) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = i;
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) *bad = 1;
}
int main() {
    int *p;
    CHECK(cudaMalloc(&p, 1024 * sizeof(int)));
    poke<<<8, 128>>>(1024, p, (int *)0);
    printf("sync: %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    return 0;
}
"""

# exit() in the middle of main: the servers are shut down (atexit), the status is kept
EXITS = DIGEST + r"""
__global__ void one(int *p) { p[blockIdx.x] = blockIdx.x; }
int main() {
    int *p;
    CHECK(cudaMalloc(&p, 4 * sizeof(int)));
    one<<<4, 1>>>(p);
    int h[4];
    CHECK(cudaMemcpy(h, p, sizeof h, cudaMemcpyDeviceToHost));
    printf("exits %d %d %d %d\n", h[0], h[1], h[2], h[3]);
    fflush(stdout);
    exit(3);
}
"""


def build(tmp_path: Path, name: str, source: str, *extra: str) -> Path:
    src = tmp_path / f"{name}.cu"
    src.write_text(source)
    exe = tmp_path / name
    rc = driver.nvcc_main(["--distributed", *extra, str(src), "-o", str(exe)])
    assert rc == 0
    return exe


def environment(tmp_path: Path, fake: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "OMPI_", "MV2_", "PMIX_", "CPUIFY_DIST"))}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(TESTS), env.get("PYTHONPATH", "")])
    if fake:
        env["CPUIFY_DIST_ENGINE"] = "dist_fake_engine"
        env["CPUIFY_FAKE_ENGINE_LOG"] = str(tmp_path / "engine.log")
    return env


def run(cmd: list[str], env: dict[str, str], ranks: int = 0) -> subprocess.CompletedProcess[str]:
    if ranks:
        cmd = [str(MPIEXEC), "-n", str(ranks), *cmd]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=MPI_TIMEOUT, check=False)


def engine_log(tmp_path: Path) -> list[list]:
    path = tmp_path / "engine.log"
    if not path.exists():
        return []
    events = [json.loads(line) for line in path.read_text().splitlines()]
    path.unlink()
    return events


# ------------------------------------------------------------------------------------
# without MPI: nothing to do with distribution


def test_records_round_trip() -> None:
    recs = [KernelDistInfo("_Z1kPf", [("_Z1kPf_param_0", "u64", 0, 8)], "maps text", ""),
            KernelDistInfo("_Z1gv", [], None, "no access maps (why)")]
    # two objects' sections, concatenated with padding as the linker may
    data = encode(recs[:1], "a.cu") + b"\0" * 5 + encode(recs[1:], "b.cu")
    got = decode(data)
    assert got["_Z1kPf"].access == "maps text" and got["_Z1kPf"].params == [("_Z1kPf_param_0", "u64", 0, 8)]
    assert got["_Z1gv"].reason == "no access maps (why)" and got["_Z1gv"].access is None


def test_rank0_constructs() -> None:
    assert rank0_reason("\ttex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f6}];") != ""
    assert rank0_reason("\tcall.uni (retval0), malloc, (param0);") != ""
    assert rank0_reason("\tld.global.f32 %f1, [%rd4];\n\tst.global.f32 [%rd5], %f1;") == ""


def test_wants_distributed() -> None:
    assert driver.mpi_world_size({"PMI_SIZE": "3", "PMI_RANK": "1"}) == 3
    assert driver.wants_distributed({"OMPI_COMM_WORLD_SIZE": "2"})
    assert not driver.wants_distributed({"PMI_SIZE": "1"})
    assert not driver.wants_distributed({})
    assert driver.wants_distributed({"CPUIFY_DISTRIBUTED": "1"})
    assert not driver.wants_distributed({"CPUIFY_DISTRIBUTED": "0", "PMI_SIZE": "4"})


def test_program_without_mpi_is_unchanged(tmp_path: Path) -> None:
    """--distributed changes nothing outside mpiexec: the same output as a plain build, and
    the records are in the executable."""
    exe = build(tmp_path, "saxpy", SAXPY)
    src = tmp_path / "plain.cu"
    src.write_text(SAXPY)
    plain = tmp_path / "plain"
    assert driver.nvcc_main([str(src), "-o", str(plain)]) == 0
    env = environment(tmp_path)
    a, b = run([str(exe), "5000"], env), run([str(plain), "5000"], env)
    assert a.returncode == b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout and a.stdout.startswith("saxpy ")
    from cpuify.distributed.native import program_info
    info = program_info(str(exe))
    assert list(info) == ["_Z5saxpyifPKfPf"]
    assert [p[1] for p in info["_Z5saxpyifPKfPf"].params] == ["u32", "f32", "u64", "u64"]
    assert program_info(str(plain)) == {}


# ------------------------------------------------------------------------------------
# under mpiexec


def check_ranks(tmp_path: Path, exe: Path, args: list[str] = (), ranks: tuple[int, ...] = (1, 2, 3),
                fake: bool = True) -> dict[int, list[list]]:
    """The program's output is the same without MPI and with each number of ranks; returns
    the engine's log per number of ranks."""
    env = environment(tmp_path, fake)
    reference = run([str(exe), *args], env)
    assert reference.returncode == 0, reference.stdout + reference.stderr
    logs = {}
    for n in ranks:
        got = run([str(exe), *args], env, n)
        assert got.returncode == 0, f"{n} ranks:\n{got.stdout}{got.stderr}"
        assert got.stdout == reference.stdout, f"{n} ranks"
        logs[n] = engine_log(tmp_path)
    return logs


@needs_mpi
def test_saxpy_over_ranks(tmp_path: Path) -> None:
    exe = build(tmp_path, "saxpy", SAXPY)
    logs = check_ranks(tmp_path, exe, ["30000"])
    assert logs[1] == []                       # one rank: no engine at all
    events = logs[3]
    launches = [e for e in events if e[0] == "launch"]
    assert len(launches) == 4 and launches[0][1:] == ["_Z5saxpyifPKfPf", [235, 1, 1], [128, 1, 1], 2]
    allocs = {e[1]: e[2] for e in events if e[0] == "alloc"}
    assert sorted(allocs.values()) == [256, 120000, 120000]
    # the host wrote x and y whole before the first launch; the D2H copy read y whole; the
    # D2D copy read 256 bytes of y from the middle and wrote dz
    assert ["host_wrote", 1, 0, 120000] in events and ["host_wrote", 2, 0, 120000] in events
    assert ["host_read", 2, 0, 120000] in events
    assert ["host_read", 2, 60000, 60256] in events and ["host_wrote", 3, 0, 256] in events
    assert events[-4:] == [["free", 1], ["free", 2], ["free", 3], ["shutdown"]]
    # the constant changed before the 2nd, 3rd and 4th launches (it starts as 0)
    assert [e for e in events if e[0] == "global"] == [["global", 0, 4]] * 3


@needs_mpi
def test_stencil_with_swapped_buffers(tmp_path: Path) -> None:
    exe = build(tmp_path, "stencil", STENCIL)
    logs = check_ranks(tmp_path, exe, ranks=(2, 3))
    events = logs[2]
    assert len([e for e in events if e[0] == "launch"]) == 12
    # the memset wrote b whole; the pitched 2D copy (no gaps: pitch == width) wrote a whole
    assert ["host_wrote", 2, 0, 120000] in events and ["host_wrote", 1, 0, 120000] in events
    # the pitched D2H copy of the middle rows read their span: rows 70..79, columns 50..81
    lo = (70 * 200 + 50) * 4
    assert ["host_read", 1, lo, lo + 9 * 800 + 128] in events


@needs_mpi
def test_histogram_kernel_on_rank0(tmp_path: Path) -> None:
    """A kernel without access maps goes to the engine as one to run whole on rank 0."""
    exe = build(tmp_path, "histogram", HISTOGRAM)
    logs = check_ranks(tmp_path, exe, ranks=(2, 3))
    events = logs[3]
    launches = [e for e in events if e[0].startswith("launch")]
    assert launches == [["launch", "_Z4filliPj", [196, 1, 1], [256, 1, 1], 1],
                        ["launch_rank0", "_Z15histogram_localiPKjPj", "no access"],
                        ["launch", "_Z5scaleiPKjPf", [1, 1, 1], [64, 1, 1], 2]]


@needs_mpi
def test_managed_memory_gathered_after_each_launch(tmp_path: Path) -> None:
    exe = build(tmp_path, "managed", MANAGED)
    logs = check_ranks(tmp_path, exe, ranks=(2, 3))
    events = logs[2]
    assert events[0] == ["alloc", 1, 120000, "managed"]
    around = [e[0] for e in events if e[0] in ("host_wrote", "host_read", "launch")]
    assert around == ["host_wrote", "launch", "host_read"] * 2


HAVE_ENGINE = importlib.util.find_spec("cpuify.distributed.engine") is not None
ENGINES = [True, pytest.param(False, marks=pytest.mark.skipif(
    not HAVE_ENGINE, reason="the distributed engine (cpuify.distributed.engine) is not there yet"))]


@needs_mpi
@pytest.mark.parametrize("fake", ENGINES, ids=["stand-in", "engine"])
def test_kernel_fault_on_a_server(tmp_path: Path, fake: bool) -> None:
    """A kernel failing in a server's blocks: rank 0's program sees the sticky error, the
    server says what failed; no hang."""
    exe = build(tmp_path, "fault", FAULT)
    env = environment(tmp_path, fake)
    alone = run([str(exe)], env)
    assert alone.stdout == "sync: cudaErrorIllegalAddress\n"
    got = run([str(exe)], env, 2)
    assert got.returncode == 0, got.stderr
    assert got.stdout == alone.stdout
    assert "kernel 'poke(int, int*, int*)' failed in block (7, 0, 0)" in got.stderr


@needs_mpi
@pytest.mark.parametrize("fake", ENGINES, ids=["stand-in", "engine"])
def test_exit_inside_main(tmp_path: Path, fake: bool) -> None:
    exe = build(tmp_path, "exits", EXITS)
    env = environment(tmp_path, fake)
    got = run([str(exe)], env, 2)
    assert got.stdout == "exits 0 1 2 3\n"
    assert got.returncode == 3
    if fake:
        assert engine_log(tmp_path)[-1] == ["shutdown"]


@needs_mpi
def test_broken_engine_stops_the_job(tmp_path: Path) -> None:
    """A Python error while the ranks start: the whole job ends with an error (MPI abort),
    it does not hang."""
    exe = build(tmp_path, "exits", EXITS)
    env = environment(tmp_path)
    env["CPUIFY_DIST_ENGINE"] = "no_such_engine_module"
    got = run([str(exe)], env, 2)
    assert got.returncode != 0
    assert "No module named 'no_such_engine_module'" in got.stderr
    assert "cpuify: distributed execution failed (starting rank" in got.stderr


@needs_mpi
@pytest.mark.parametrize("fake", ENGINES, ids=["stand-in", "engine"])
def test_switched_on_with_one_rank(tmp_path: Path, fake: bool) -> None:
    """CPUIFY_DISTRIBUTED=1 without mpiexec: the engine with one rank (its overhead)."""
    exe = build(tmp_path, "saxpy", SAXPY)
    env = environment(tmp_path, fake)
    alone = run([str(exe), "3000"], env)
    env["CPUIFY_DISTRIBUTED"] = "1"
    env["CPUIFY_DIST_VERBOSE"] = "1"
    got = run([str(exe), "3000"], env)
    assert got.returncode == 0, got.stderr
    assert got.stdout == alone.stdout
    if fake:
        assert len([e for e in engine_log(tmp_path) if e[0] == "launch"]) == 4
    else:
        assert "LaunchStats(launches=4" in got.stderr


@needs_mpi
def test_switched_off_every_rank_runs_main(tmp_path: Path) -> None:
    exe = build(tmp_path, "exits", EXITS)
    env = environment(tmp_path)
    env["CPUIFY_DISTRIBUTED"] = "0"
    got = run([str(exe)], env, 2)
    assert got.stdout == "exits 0 1 2 3\n" * 2


@needs_mpi
def test_cpuify_run_under_mpiexec(tmp_path: Path) -> None:
    """`mpiexec -n 2 cpuify run app.cu` builds with --distributed by itself."""
    src = tmp_path / "saxpy.cu"
    src.write_text(SAXPY)
    env = environment(tmp_path)
    cli = [sys.executable, "-m", "cpuify.cli.main", "run", str(src), "--", "3000"]
    alone = run(cli, env)
    assert alone.returncode == 0, alone.stderr
    got = run(cli, env, 2)
    assert got.returncode == 0, got.stderr
    assert got.stdout == alone.stdout
    assert len([e for e in engine_log(tmp_path) if e[0] == "launch"]) == 4


@needs_mpi
@pytest.mark.skipif(not HAVE_ENGINE, reason="the distributed engine (cpuify.distributed.engine) "
                    "is not there yet")
@pytest.mark.parametrize("name", ["saxpy", "stencil", "histogram", "managed"])
def test_with_the_engine(tmp_path: Path, name: str) -> None:
    """The real engine: the same output with 2 and 3 ranks, and every launch split (the
    histogram's atomics as per-rank partials), with no more bytes moved than the minimum
    the maps give."""
    source = {"saxpy": SAXPY, "stencil": STENCIL, "histogram": HISTOGRAM, "managed": MANAGED}[name]
    exe = build(tmp_path, name, source)
    check_ranks(tmp_path, exe, ranks=(2, 3), fake=False)
    env = environment(tmp_path, fake=False)
    env["CPUIFY_DIST_VERBOSE"] = "1"
    env["CPUIFY_DISTRIBUTED_STATS"] = "1"      # (the engine counts the exact minimum)
    got = run([str(exe)], env, 3)
    assert got.returncode == 0, got.stderr
    stats = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", got.stderr.split("LaunchStats(")[1])}
    # (the histogram's last kernel has a grid of one block: nothing to split)
    launches, whole = {"saxpy": (4, 0), "stencil": (12, 0), "histogram": (3, 1), "managed": (2, 0)}[name]
    assert stats["launches"] == launches and stats["whole_on_rank0"] == whole, got.stderr
    assert stats["distributed"] == launches - whole
    if name != "histogram":
        assert stats["bytes_moved"] == stats["bytes_minimum"], got.stderr


@needs_mpi
def test_graph_over_ranks(tmp_path: Path) -> None:
    exe = build(tmp_path, "graph", GRAPH)
    events = check_ranks(tmp_path, exe, ranks=(2,))[2]
    assert [e[0] for e in events if e[0] in ("launch", "host_read")] == ["launch", "launch", "host_read"] * 3


@needs_mpi
def test_separate_compilation(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(RDC_KERNEL)
    (tmp_path / "m.cu").write_text(RDC_MAIN)
    for name in ("k", "m"):
        assert driver.nvcc_main(["--distributed", "-dc", str(tmp_path / f"{name}.cu"),
                                 "-o", str(tmp_path / f"{name}.o")]) == 0
    exe = tmp_path / "app"
    assert driver.nvcc_main(["--distributed", str(tmp_path / "k.o"), str(tmp_path / "m.o"),
                             "-o", str(exe)]) == 0
    from cpuify.distributed.native import program_info
    assert list(program_info(str(exe))) == ["_Z4kerniPf"]
    events = check_ranks(tmp_path, exe, ranks=(2,))[2]
    assert len([e for e in events if e[0] == "launch"]) == 2


@needs_mpi
def test_cublas_programs_stay_on_rank0(tmp_path: Path) -> None:
    """cuBLAS/cuFFT work on rank 0's memory directly: a program linking them runs every
    kernel on rank 0, the servers only wait for the end."""
    exe = build(tmp_path, "saxpy", SAXPY, "-lcublas")
    env = environment(tmp_path)
    alone = run([str(exe), "2000"], env)
    got = run([str(exe), "2000"], env, 2)
    assert got.returncode == 0, got.stderr
    assert got.stdout == alone.stdout
    assert "its kernels run on rank 0 only" in got.stderr
    assert engine_log(tmp_path) == [["shutdown"]]
