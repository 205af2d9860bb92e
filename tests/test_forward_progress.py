"""Forward progress (transforms/progress.py, the block scheduler's yield points, blocks as
fibers in the runtime) and grid-wide synchronization (cooperative launches).

  * IR tests of spin-wait-yields: it fires on loops that wait for memory other threads write
    (volatile flags, CAS locks, grid.sync()'s acquire loop, nanosleep back-off) and not on
    counted loops, array walks, binary searches or volatile accesses in counted loops;
  * threads of one block that wait for each other (producer/consumer through a volatile flag);
  * blocks that wait for the block before them (a chained scan) with more blocks than
    workers, and with a single worker;
  * grid.sync(): a Jacobi solver from Python (enable_cooperative_groups=True) and from a
    whole program (cudaLaunchCooperativeKernel, cudaLaunchKernelEx, the occupancy API),
    against NumPy; the grid_group API; the errors of launches that are too large or not
    cooperative;
  * a kernel that waits for a flag nobody writes fails within seconds, naming the loop.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import cpuify
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.structure import block_body
from cpuify.transforms.pass_manager import PipelineOptions


def _spin_waits(source: str, name: str, passes: tuple[str, ...] = ("spin-wait-yields",)) -> int:
    ptx = compile_to_ptx(source, filename=f"{name}.cu").ptx
    module = parse_ptx(ptx)
    lifted, _ = lift_and_optimize(module, module.functions[name], PipelineOptions(passes=passes))
    return sum(1 for b in block_body(lifted.op).blocks for op in b.ops
               if op.name == "upir.spin_wait")


# loops that wait for another thread: one yield point each
SPINS = {
    "volatile_flag": r'''
extern "C" __global__ void volatile_flag(volatile int *flag, int *out) {
    while (flag[0] == 0) { }
    out[threadIdx.x] = flag[1];
}''',
    "cas_lock": r'''
extern "C" __global__ void cas_lock(int *lock, int *counter) {
    while (atomicCAS(lock, 0, 1) != 0) { }
    *counter += 1;
    __threadfence();
    atomicExch(lock, 0);
}''',
    "grid_sync": r'''
#include <cooperative_groups.h>
extern "C" __global__ void grid_sync(float *x) {
    cooperative_groups::this_grid().sync();
    x[threadIdx.x] = 1.0f;
}''',
    "backoff": r'''
extern "C" __global__ void backoff(int *flag, int *out) {
    int tries = 0;
    while (atomicAdd(flag, 0) == 0 && tries < 1000000) { __nanosleep(100); tries++; }
    out[threadIdx.x] = tries;
}''',
    "poll_or_zero": r'''
extern "C" __global__ void poll_or_zero(unsigned *flag, int *out) {
    while (atomicOr(flag, 0u) == 0) { }
    out[threadIdx.x] = 1;
}''',
    "acquire_atomic_ref": r'''
#include <cuda/atomic>
extern "C" __global__ void acquire_atomic_ref(int *flag, int *out) {
    cuda::atomic_ref<int, cuda::thread_scope_device> f(*flag);
    while (f.load(cuda::memory_order_acquire) == 0) { }
    out[threadIdx.x] = 1;
}''',
}

# loops that do not wait for anybody: no yield point
NOT_SPINS = {
    "counted": r'''
extern "C" __global__ void counted(const float *in, float *out, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += in[i];
    out[threadIdx.x] = s;
}''',
    "array_walk": r'''
extern "C" __global__ void array_walk(const int *a, int *out, int x) {
    int i = 0;
    while (a[i] < x) i++;
    out[threadIdx.x] = i;
}''',
    "binary_search": r'''
extern "C" __global__ void binary_search(const float *a, int n, const float *keys, int *out) {
    float key = keys[threadIdx.x];
    int lo = 0, hi = n;
    while (lo < hi) { int mid = (lo + hi) / 2; if (a[mid] < key) lo = mid + 1; else hi = mid; }
    out[threadIdx.x] = lo;
}''',
    "linked_list": r'''
struct Node { int value; Node *next; };
extern "C" __global__ void linked_list(const Node *head, int *out) {
    int s = 0;
    for (const Node *p = head; p; p = p->next) s += p->value;
    out[threadIdx.x] = s;
}''',
    "volatile_reduce": r'''
extern "C" __global__ void volatile_reduce(float *out) {
    __shared__ float s[64];
    volatile float *v = s;
    v[threadIdx.x] = threadIdx.x;
    __syncthreads();
    for (int k = 32; k > 0; k >>= 1) if (threadIdx.x < k) v[threadIdx.x] += v[threadIdx.x + k];
    out[0] = v[0];
}''',
    "work_queue": r'''
extern "C" __global__ void work_queue(int *next, const float *in, float *out, int n) {
    for (;;) {                               // persistent threads: atomicAdd moves on by itself
        int i = atomicAdd(next, 1);
        if (i >= n) break;
        out[i] = 2 * in[i];
    }
}''',
    "atomic_histogram": r'''
extern "C" __global__ void atomic_histogram(const int *in, int *hist, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) atomicAdd(&hist[in[i] & 15], 1);
}''',
}


@pytest.mark.parametrize("name", sorted(SPINS))
def test_pass_fires_on_spin_loops(name: str) -> None:
    assert _spin_waits(SPINS[name], name) == 1
    # and it can be switched off
    assert _spin_waits(SPINS[name], name, passes=("merge-duplicate-threads",)) == 0


@pytest.mark.parametrize("name", sorted(NOT_SPINS))
def test_pass_leaves_other_loops_alone(name: str) -> None:
    assert _spin_waits(NOT_SPINS[name], name) == 0


def test_the_loop_named_is_the_same_in_every_run() -> None:
    """The read a yield point names (its `line`, in the runtime's message when a launch
    makes no progress) is found in the loop's block order, not in a set's: the same in
    every compile (it was one of four loads of nvcc's unrolled loop, by object addresses,
    and the module's LLVM text with it)."""
    source = r'''
extern "C" __global__ void unrolled_wait(const int *x, int *out, int m) {
    int acc = 0;
    for (int k = 0; k < m; k++) {
        if (x[threadIdx.x] < 0) __trap();
        acc += x[k];
        __syncthreads();
    }
    out[threadIdx.x] = acc;
}'''
    module = parse_ptx(compile_to_ptx(source, filename="unrolled_wait.cu").ptx)
    lines = set()
    for _ in range(6):
        lifted, _ = lift_and_optimize(module, module.functions["unrolled_wait"],
                                      PipelineOptions(passes=("spin-wait-yields",)))
        waits = [op for b in block_body(lifted.op).blocks for op in b.ops
                 if op.name == "upir.spin_wait"]
        assert waits
        lines.add(tuple(op.attributes["line"] for op in waits))
    assert len(lines) == 1


def test_print_ir_after_shows_the_yield_point(capsys: pytest.CaptureFixture[str]) -> None:
    mod = cpuify.RawModule(code=SPINS["volatile_flag"],
                           options=("--print-ir-after=spin-wait-yields",))
    mod.compile()
    err = capsys.readouterr().err
    assert '"upir.spin_wait"() {line =' in err and 'reason = "ld"' in err


PRODUCER_CONSUMER = r'''
extern "C" __global__ void pc(int *out, volatile int *flag, int *data) {
    int t = threadIdx.x;
    if (t == 0) {                                   // consumer: waits for the last thread
        while (flag[blockIdx.x] == 0) { }
        out[blockIdx.x] = data[blockIdx.x] + 1;
    } else if (t == blockDim.x - 1) {               // producer
        data[blockIdx.x] = 41 + blockIdx.x;
        __threadfence();
        flag[blockIdx.x] = 1;
    }
    __syncthreads();                                // reached by the others while t 0 spins
    if (t == 1) out[gridDim.x + blockIdx.x] = out[blockIdx.x];
}'''


def test_producer_consumer_inside_a_block() -> None:
    nb = 5
    out = np.zeros(2 * nb, np.int32)
    flag = np.zeros(nb, np.int32)
    data = np.zeros(nb, np.int32)
    cpuify.RawKernel(PRODUCER_CONSUMER, "pc")((nb,), (96,), (out, flag, data))
    expect = 42 + np.arange(nb)
    np.testing.assert_array_equal(out, np.concatenate([expect, expect]))


CHAINED_SCAN = r'''
extern "C" __global__ void chain(const int *in, int *out, volatile int *flags, int n) {
    __shared__ int s;
    int b = blockIdx.x;
    if (threadIdx.x == 0) s = 0;
    __syncthreads();
    int i = b * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&s, in[i]);
    __syncthreads();
    if (threadIdx.x == 0) {                  // look back: wait for the block before
        int prev = 0;
        if (b > 0) {
            while (flags[b - 1] == 0) { }
            prev = out[b - 1];
        }
        out[b] = prev + s;
        __threadfence();
        flags[b] = 1;
    }
}'''


@pytest.mark.parametrize("workers", [1, 0])
def test_blocks_waiting_for_the_block_before(workers: int) -> None:
    """More blocks than workers, each waiting for its predecessor's flag."""
    cpuify.set_num_threads(workers)
    try:
        nb, bs = 300, 64
        rng = np.random.default_rng(1)
        inp = rng.integers(0, 10, nb * bs).astype(np.int32)
        out = np.zeros(nb, np.int32)
        flags = np.zeros(nb, np.int32)
        cpuify.RawKernel(CHAINED_SCAN, "chain")((nb,), (bs,), (inp, out, flags, np.int32(nb * bs)))
        np.testing.assert_array_equal(out, np.cumsum(inp.reshape(nb, bs).sum(1)))
    finally:
        cpuify.set_num_threads(0)


JACOBI = r'''
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
// 1-D Poisson problem (-x[i-1] + 2 x[i] - x[i+1] = b[i]), Jacobi sweeps with a grid-wide
// barrier between them; x0 holds the result (iters even)
extern "C" __global__ void jacobi(const float *b, float *x0, float *x1, int n, int iters) {
    cg::grid_group g = cg::this_grid();
    float *src = x0, *dst = x1;
    for (int it = 0; it < iters; it++) {
        for (int i = g.thread_rank(); i < n; i += g.size()) {
            float l = i > 0 ? src[i - 1] : 0.0f, r = i < n - 1 ? src[i + 1] : 0.0f;
            dst[i] = 0.5f * (b[i] + l + r);
        }
        g.sync();
        float *t = src; src = dst; dst = t;
    }
}
extern "C" __global__ void grid_info(unsigned long long *info) {
    cg::grid_group g = cg::this_grid();
    if (g.thread_rank() == 0) {
        info[0] = g.is_valid(); info[1] = g.size(); info[2] = g.num_blocks();
        info[3] = g.dim_blocks().x; info[4] = g.num_threads();
    }
    if (threadIdx.x == 0) info[8 + g.block_rank()] = g.block_rank();
    g.sync();
    if (g.thread_rank() == g.size() - 1) info[5] = info[8 + g.num_blocks() - 1] + 1;
}'''


def jacobi_reference(b: np.ndarray, iters: int) -> np.ndarray:
    x = np.zeros_like(b)
    for _ in range(iters):
        left = np.concatenate([[np.float32(0)], x[:-1]])
        right = np.concatenate([x[1:], [np.float32(0)]])
        x = np.float32(0.5) * (b + left + right)
    return x


def test_grid_sync_jacobi_from_python() -> None:
    n, iters = 5000, 40
    b = np.random.default_rng(2).random(n).astype(np.float32)
    x0 = np.zeros(n, np.float32)
    x1 = np.zeros(n, np.float32)
    k = cpuify.RawKernel(JACOBI, "jacobi", enable_cooperative_groups=True)
    k((6,), (128,), (b, x0, x1, np.int32(n), np.int32(iters)))
    np.testing.assert_allclose(x0, jacobi_reference(b, iters), rtol=1e-6)


def test_grid_group_api() -> None:
    mod = cpuify.RawModule(code=JACOBI)
    info = np.zeros(8 + 7, np.uint64)
    cpuify.RawKernel(JACOBI, "grid_info", enable_cooperative_groups=True)((7,), (96,), (info,))
    assert list(info[:6]) == [1, 7 * 96, 7, 7, 7 * 96, 7]
    assert list(info[8:]) == list(range(7))
    # a plain launch of a kernel that synchronizes the grid: CUDA's error (the kernel traps)
    with pytest.raises(cpuify.KernelFailure, match="enable_cooperative_groups=True"):
        mod.get_function("grid_info")((2,), (32,), (info,))


def test_cooperative_launch_too_large() -> None:
    k = cpuify.RawKernel(JACOBI, "grid_info", enable_cooperative_groups=True)
    info = np.zeros(8, np.uint64)
    with pytest.raises(cpuify.CUDADriverError, match="COOPERATIVE_LAUNCH_TOO_LARGE") as e:
        k((100000,), (1024,), (info,))
    assert e.value.status == 720


DEADLOCK = r'''
extern "C" __global__ void stuck(volatile int *flag, int *out) {
    out[threadIdx.x] = 1;
    if (threadIdx.x == 3)
        while (flag[0] == 0) { }             // nobody ever sets it
    __syncthreads();
}'''


def test_deadlock_fails_within_seconds_naming_the_loop() -> None:
    flag = np.zeros(1, np.int32)
    out = np.zeros(64, np.int32)
    t0 = time.monotonic()
    with pytest.raises(cpuify.DeadlockError) as e:
        cpuify.RawKernel(DEADLOCK, "stuck")((3,), (64,), (flag, out))
    assert time.monotonic() - t0 < 30
    msg = str(e.value)
    assert "kernel 'stuck'" in msg and "thread 3" in msg and "PTX line" in msg
    assert "ld.volatile" in msg and "no running thread writes" in msg
    assert e.value.status == 702
    # the runtime is fine afterwards
    flag[0] = 1
    cpuify.RawKernel(DEADLOCK, "stuck")((3,), (64,), (flag, out))
    assert (out == 1).all()


def test_too_few_resident_blocks_is_reported() -> None:
    """Block 0 waits for the last block, which cannot start: every resident block waits."""
    src = r'''
    extern "C" __global__ void last_first(volatile int *flag) {
        if (blockIdx.x == gridDim.x - 1) { if (threadIdx.x == 0) flag[0] = 1; }
        else if (threadIdx.x == 0) while (flag[0] == 0) { }
    }'''
    cpuify.set_num_threads(1)
    try:
        with pytest.raises(cpuify.DeadlockError, match="could not start.*more blocks running"):
            cpuify.RawKernel(src, "last_first")((100,), (1024,), (np.zeros(1, np.int32),))
    finally:
        cpuify.set_num_threads(0)


# --- whole programs ------------------------------------------------------------------------

PROGRAM = r'''
#include <cstdio>
#include <cstdlib>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__global__ void jacobi(const float *b, float *x0, float *x1, int n, int iters) {
    cg::grid_group g = cg::this_grid();
    float *src = x0, *dst = x1;
    for (int it = 0; it < iters; it++) {
        for (int i = g.thread_rank(); i < n; i += g.size()) {
            float l = i > 0 ? src[i - 1] : 0.0f, r = i < n - 1 ? src[i + 1] : 0.0f;
            dst[i] = 0.5f * (b[i] + l + r);
        }
        g.sync();
        float *t = src; src = dst; dst = t;
    }
}

__global__ void stuck(volatile int *flag) {
    if (threadIdx.x == 5) while (flag[0] == 0) { }
    __syncthreads();
}

int main(int argc, char **argv) {
    if (argc > 3) {
        // a wait nobody ends: an error within seconds (sticky, as a GPU's launch timeout)
        int *flag;
        cudaMallocManaged(&flag, sizeof(int));
        *flag = 0;
        stuck<<<3, 64>>>(flag);
        printf("stuck %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
        return 0;
    }
    int n = atoi(argv[1]), iters = atoi(argv[2]);
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    int attr = 0;
    cudaDeviceGetAttribute(&attr, cudaDevAttrCooperativeLaunch, 0);
    int per = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, jacobi, 128, 0);
    printf("coop %d %d per %d sms %d\n", p.cooperativeLaunch, attr, per, p.multiProcessorCount);
    float *b, *x0, *x1;
    cudaMallocManaged(&b, n * sizeof(float));
    cudaMallocManaged(&x0, n * sizeof(float));
    cudaMallocManaged(&x1, n * sizeof(float));
    for (int i = 0; i < n; i++) { b[i] = (float)((i * 37) % 101) / 101.0f; x0[i] = x1[i] = 0; }
    int blocks = per * p.multiProcessorCount;
    void *args[] = {&b, &x0, &x1, &n, &iters};
    cudaError_t e = cudaLaunchCooperativeKernel((void *)jacobi, blocks, 128, args, 0, 0);
    cudaError_t s = cudaDeviceSynchronize();
    printf("launch %d %d\n", (int)e, (int)s);
    for (int i = 0; i < n; i++) printf("%.9g\n", x0[i]);
    // too many blocks for one cooperative launch
    e = cudaLaunchCooperativeKernel((void *)jacobi, blocks + 1, 128, args, 0, 0);
    printf("too large %s\n", cudaGetErrorName(e));
    // cudaLaunchKernelEx with the cooperative attribute
    for (int i = 0; i < n; i++) x0[i] = x1[i] = 0;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(128);
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeCooperative;
    at[0].val.cooperative = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    e = cudaLaunchKernelEx(&cfg, jacobi, (const float *)b, x0, x1, n, iters);
    cudaDeviceSynchronize();
    printf("ex %d %.9g\n", (int)e, x0[n / 2]);
    // a plain launch of a kernel that synchronizes the grid: CUDA's error, not a hang
    jacobi<<<2, 128>>>(b, x0, x1, n, iters);
    printf("plain %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    return 0;
}
'''


def _have_nvcc() -> bool:
    try:
        from cpuify.nvcc.toolkit import find_toolkit
        find_toolkit()
        return shutil.which("g++") is not None
    except Exception:
        return False


@pytest.mark.skipif(not _have_nvcc(), reason="nvcc wheel (nvidia-cuda-nvcc) or g++ missing")
def test_grid_sync_whole_program(tmp_path: Path) -> None:
    src = tmp_path / "jacobi.cu"
    src.write_text(PROGRAM)
    exe = tmp_path / "jacobi"
    r = subprocess.run([sys.executable, "-m", "cpuify.cli.main", "nvcc", str(src), "-o", str(exe)], check=False,
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    n, iters = 3000, 30
    r = subprocess.run([str(exe), str(n), str(iters)], check=False, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "CPUIFY_NUM_THREADS": "2"})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    head = lines[0].split()
    assert head[:3] == ["coop", "1", "1"]
    per, sms = int(head[4]), int(head[6])
    assert per >= 1 and sms == 2
    assert lines[1] == "launch 0 0"
    x = np.array([float(v) for v in lines[2:2 + n]], np.float32)
    b = np.array([((i * 37) % 101) / 101.0 for i in range(n)], np.float32)
    ref = jacobi_reference(b, iters)
    np.testing.assert_allclose(x, ref, rtol=1e-6)
    rest = lines[2 + n:]
    assert rest[0] == "too large cudaErrorCooperativeLaunchTooLarge"
    ex = rest[1].split()
    assert ex[:2] == ["ex", "0"] and np.isclose(float(ex[2]), ref[n // 2], rtol=1e-6)
    assert rest[2] == "plain cudaErrorLaunchFailure"
    assert "this_grid().sync()" in r.stderr and "cudaLaunchCooperativeKernel" in r.stderr
    r = subprocess.run([str(exe), "0", "0", "stuck"], check=False, capture_output=True,
                       text=True, timeout=120, env={**os.environ, "CPUIFY_DEADLOCK_TIMEOUT": "0.5"})
    assert r.returncode == 0 and r.stdout == "stuck cudaErrorLaunchTimeout\n", r.stdout + r.stderr
    assert "kernel 'stuck(int volatile*)'" in r.stderr and "thread 5 waits in the loop at PTX" \
        " line" in r.stderr and "jacobi.cu:" in r.stderr and "no running thread writes" in r.stderr


# --- the reference interpreter ---------------------------------------------------------------

def _interp(source: str):  # type: ignore[no-untyped-def]
    from cpuify.interp import InterpModule
    return InterpModule(compile_to_ptx(source).ptx)


def test_interpreter_runs_waiting_threads_and_blocks() -> None:
    nb = 3
    out = np.zeros(2 * nb, np.int32)
    flag = np.zeros(nb, np.int32)
    data = np.zeros(nb, np.int32)
    _interp(PRODUCER_CONSUMER).launch("pc", (nb,), (40,), (out, flag, data))
    expect = 42 + np.arange(nb)
    np.testing.assert_array_equal(out, np.concatenate([expect, expect]))
    nb, bs = 6, 32
    inp = np.arange(nb * bs, dtype=np.int32) % 7
    out = np.zeros(nb, np.int32)
    flags = np.zeros(nb, np.int32)
    _interp(CHAINED_SCAN).launch("chain", (nb,), (bs,), (inp, out, flags, np.int32(nb * bs)))
    np.testing.assert_array_equal(out, np.cumsum(inp.reshape(nb, bs).sum(1)))


def test_interpreter_grid_sync_agrees_with_compiled_code() -> None:
    n, iters = 300, 6
    b = np.random.default_rng(3).random(n).astype(np.float32)
    x0, x1 = np.zeros(n, np.float32), np.zeros(n, np.float32)
    _interp(JACOBI).launch("jacobi", (3,), (32,), (b, x0, x1, np.int32(n), np.int32(iters)),
                           cooperative=True)
    y0, y1 = np.zeros(n, np.float32), np.zeros(n, np.float32)
    cpuify.RawKernel(JACOBI, "jacobi", enable_cooperative_groups=True)(
        (3,), (32,), (b, y0, y1, np.int32(n), np.int32(iters)))
    np.testing.assert_array_equal(x0, y0)
    np.testing.assert_allclose(x0, jacobi_reference(b, iters), rtol=1e-6)


def test_interpreter_reports_a_deadlock() -> None:
    from cpuify.errors import LaunchError
    with pytest.raises(LaunchError, match="no progress.*thread 3.*PTX line"):
        _interp(DEADLOCK).launch("stuck", (2,), (8,), (np.zeros(1, np.int32), np.zeros(8, np.int32)))


# --- fault containment and the watchdog with blocks as fibers --------------------------------

FAULTY = r'''
extern "C" __global__ void faulty(volatile int *flags, int *bad) {
    int b = blockIdx.x;
    if (threadIdx.x == 0) {
        if (b > 0) while (flags[b - 1] == 0) { }
        if (b == 5) bad[0] = 1;                 // NULL: block 5 faults, blocks 6.. wait
        flags[b] = 1;
    }
}'''


def test_fault_in_a_fiber_is_contained() -> None:
    k = cpuify.RawKernel(FAULTY, "faulty")
    flags = np.zeros(40, np.int32)
    with pytest.raises(cpuify.IllegalAddressError, match=r"block \(5, 0, 0\).*NULL"):
        k((40,), (64,), (flags, 0))
    flags[:] = 0
    bad = np.zeros(1, np.int32)
    k((40,), (64,), (flags, bad))               # and the next launch runs normally
    assert flags.all() and bad[0] == 1


def test_kernel_timeout_stops_spinning_fibers(tmp_path: Path) -> None:
    script = (
        "import numpy as np, cpuify\n"
        "src = r'''extern \"C\" __global__ void spin(volatile int *f, int *n) {\n"
        "  while (f[0] == 0) { atomicAdd(n, 1); } }'''\n"
        "try:\n"
        "    cpuify.RawKernel(src, 'spin')((4,), (32,), (np.zeros(1, np.int32), np.zeros(1, np.int32)))\n"
        "except cpuify.LaunchTimeoutError as e:\n"
        "    print(type(e).__name__, e)\n")
    env = {**os.environ, "CPUIFY_KERNEL_TIMEOUT": "1", "CPUIFY_DEADLOCK_TIMEOUT": "60",
           "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True,
                       timeout=120, env=env, cwd=tmp_path)
    assert r.stdout.startswith("LaunchTimeoutError"), r.stdout + r.stderr
    assert "CPUIFY_KERNEL_TIMEOUT" in r.stdout


# --- asynchronous barriers: cuda::barrier (software on sm_75, mbarrier on sm_80) ------------

BARRIER = r'''
#include <cuda/barrier>
extern "C" __global__ void cb(int *out) {
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    __shared__ int s[256];
    int t = threadIdx.x, n = blockDim.x;
    if (t == 0) init(&bar, n);
    __syncthreads();
    s[t] = t * 2;
    bar.arrive_and_wait();
    int v = s[(t + 1) % n];
    bar.arrive_and_wait();
    s[t] = 7 + t;
    auto token = bar.arrive();                  // split arrive / wait
    bar.wait(std::move(token));
    out[blockIdx.x * n + t] = v + s[(t + 3) % n];
    if (t >= n / 2) bar.arrive_and_drop();      // half the block leaves the barrier
    else { bar.arrive_and_wait(); s[t] = 1; bar.arrive_and_wait(); }
}'''


@pytest.mark.parametrize("arch", ["compute_75", "compute_80"])
def test_cuda_barrier(arch: str) -> None:
    ptx = compile_to_ptx(BARRIER, options=(f"--gpu-architecture={arch}",)).ptx
    assert ("mbarrier.arrive" in ptx) == (arch == "compute_80")
    nb, n = 3, 128
    t = np.arange(n)
    expect = np.tile((t + 1) % n * 2 + 7 + (t + 3) % n, nb)
    out = np.zeros(nb * n, np.int32)
    cpuify.RawModule(code=BARRIER, options=(f"--gpu-architecture={arch}",)).get_function("cb")(
        (nb,), (n,), (out,))
    np.testing.assert_array_equal(out, expect)
    from cpuify.interp import InterpModule
    out[:] = 0
    InterpModule(ptx).launch("cb", (nb,), (n,), (out,))
    np.testing.assert_array_equal(out, expect)


MBARRIER = r'''
// mbarrier in PTX directly: phases, parity waits, expect_tx/complete_tx, pending_count
extern "C" __global__ void mb(unsigned *out) {
    __shared__ unsigned long long bar;
    unsigned a = (unsigned)__cvta_generic_to_shared(&bar);
    int t = threadIdx.x;
    if (t == 0) asm volatile("mbarrier.init.shared.b64 [%0], %1;" :: "r"(a), "r"(blockDim.x));
    __syncthreads();
    unsigned long long st;
    for (int phase = 0; phase < 3; phase++) {
        asm volatile("mbarrier.arrive.shared.b64 %0, [%1];" : "=l"(st) : "r"(a));
        unsigned done = 0;
        while (!done)
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2;"
                         " selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(a), "r"(phase & 1));
        unsigned pending;
        asm volatile("mbarrier.pending_count.b64 %0, %1;" : "=r"(pending) : "l"(st));
        atomicAdd(&out[phase], pending);         // n + (n - 1) + ... + 1, in any order
    }
    // a transaction count: the phase completes when the bytes have "arrived" too
    if (t == 0) asm volatile("mbarrier.expect_tx.shared.b64 [%0], 64;" :: "r"(a));
    __syncthreads();
    asm volatile("mbarrier.arrive.shared.b64 %0, [%1];" : "=l"(st) : "r"(a));
    unsigned early;
    asm volatile("{ .reg .pred p; mbarrier.test_wait.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(early) : "r"(a), "l"(st));
    __syncthreads();
    if (t == 0) out[3] = early;                  // not complete: 64 bytes still pending
    __syncthreads();
    if (t == 0) asm volatile("mbarrier.complete_tx.shared.b64 [%0], 64;" :: "r"(a));
    __syncthreads();
    unsigned late;
    asm volatile("{ .reg .pred p; mbarrier.test_wait.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(late) : "r"(a), "l"(st));
    out[4 + t] = late;
}'''


def test_mbarrier_phases_and_transactions() -> None:
    opts = ("--gpu-architecture=compute_90",)
    n = 64
    out = np.zeros(4 + n, np.uint32)
    cpuify.RawModule(code=MBARRIER, options=opts).get_function("mb")((2,), (n,), (out,))
    total = n * (n + 1) // 2 * 2                # (two blocks)
    assert list(out[:4]) == [total, total, total, 0] and (out[4:] == 1).all()
    from cpuify.interp import InterpModule
    out2 = np.zeros_like(out)
    InterpModule(compile_to_ptx(MBARRIER, options=opts).ptx).launch("mb", (2,), (n,), (out2,))
    np.testing.assert_array_equal(out2, out)


# --- a thread-strided loop inside a loop of steps, entered right after a barrier -------------

NESTED_STRIDED = r'''
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void jacobi_ix(const float *b, float *x0, float *x1, int n, int iters) {
    cg::grid_group g = cg::this_grid();
    float *src = x0, *dst = x1;
    for (int it = 0; it < iters; it++) {
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
            float l = i > 0 ? src[i - 1] : 0.0f, r = i < n - 1 ? src[i + 1] : 0.0f;
            dst[i] = 0.5f * (b[i] + l + r);
        }
        g.sync();
        float *t = src; src = dst; dst = t;
    }
}
// smoothing steps on one block's row, __syncthreads() between steps (a holds the result)
extern "C" __global__ void smooth(float *a, float *c, int n, int steps) {
    a += blockIdx.x * n;
    c += blockIdx.x * n;
    for (int t = 0; t < steps; t++) {
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            c[i] = (a[i > 0 ? i - 1 : i] + a[i] + a[i < n - 1 ? i + 1 : i]) * (1.0f / 3);
        __syncthreads();
        float *tmp = a; a = c; c = tmp;
    }
}
// no barrier in the outer loop: threads re-enter the strided loop at different times
extern "C" __global__ void no_barrier(float *x, int n, int reps) {
    for (int r = 0; r < reps; r++)
        for (int i = threadIdx.x; i < n; i += blockDim.x) x[blockIdx.x * n + i] += i + r;
}'''


def _interchanged(name: str) -> int:
    ptx = compile_to_ptx(NESTED_STRIDED).ptx
    module = parse_ptx(ptx)
    _, result = lift_and_optimize(module, module.functions[name], PipelineOptions())
    return result.counts.get("interchange-thread-strided-loops", 0)


def test_strided_loop_after_a_barrier_is_interchanged() -> None:
    assert _interchanged("jacobi_ix") == 1
    assert _interchanged("smooth") == 1
    assert _interchanged("no_barrier") == 0
    # results: against NumPy, with the interchange and without it
    n, iters = 3000, 12
    b = np.random.default_rng(4).random(n).astype(np.float32)
    outs = []
    for opts in ((), ("--disable-pass=interchange-thread-strided-loops",)):
        x0, x1 = np.zeros(n, np.float32), np.zeros(n, np.float32)
        cpuify.RawModule(code=NESTED_STRIDED, options=opts, enable_cooperative_groups=True
                         ).get_function("jacobi_ix")((4,), (64,), (b, x0, x1, np.int32(n), np.int32(iters)))
        outs.append(x0)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], jacobi_reference(b, iters), rtol=1e-6)
    m, steps, nb = 500, 7, 3
    data = np.random.default_rng(5).random(nb * m).astype(np.float32)
    ref = data.reshape(nb, m).copy()
    for _ in range(steps):
        left = np.concatenate([ref[:, :1], ref[:, :-1]], axis=1)
        right = np.concatenate([ref[:, 1:], ref[:, -1:]], axis=1)
        ref = (left + ref + right) * np.float32(1 / 3)
    a, c = data.copy(), np.zeros(nb * m, np.float32)
    cpuify.RawKernel(NESTED_STRIDED, "smooth")((nb,), (96,), (a, c, np.int32(m), np.int32(steps)))
    np.testing.assert_allclose((c if steps % 2 else a).reshape(nb, m), ref, rtol=1e-5)
    x = np.zeros(2 * 100, np.float32)
    cpuify.RawKernel(NESTED_STRIDED, "no_barrier")((2,), (32,), (x, np.int32(100), np.int32(3)))
    np.testing.assert_array_equal(x.reshape(2, 100), np.tile(3 * np.arange(100) + 3, (2, 1)))
