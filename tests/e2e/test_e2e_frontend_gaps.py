"""Frontend gaps seen on real CUDA code (issue 16, items 7-13), each with a regression test:
NVRTC-compiled kernels or hand-written PTX run through the Python API and through the
reference interpreter, checked against NumPy."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import cpuify
from cpuify.interp import interpret_kernel


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.abs(got - want) / np.spacing(np.abs(want).astype(want.dtype))


# --- item 7: warpSize ---------------------------------------------------------------------------

def test_warp_size_in_arithmetic_and_comparisons():
    k = cpuify.RawKernel(r'''
    extern "C" __global__ void k(int *o) {
        int t = threadIdx.x;
        o[t] = (t & (warpSize - 1)) + 100 * (t / warpSize) + (t < warpSize ? 10000 : 0);
    }''', "k")
    o = np.zeros(96, np.int32)
    k((1,), (96,), (o,))
    t = np.arange(96)
    np.testing.assert_array_equal(o, t % 32 + 100 * (t // 32) + np.where(t < 32, 10000, 0))


# --- item 9: nested register scopes -------------------------------------------------------------

TRIG_SRC = r'''
extern "C" __global__ void trig(const double *x, double *s, double *c, double *t, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { s[i] = sin(x[i]); c[i] = cos(x[i]); t[i] = tan(x[i]); }
}'''

HUGE = np.array([2.0 ** 31, -2.0 ** 31 - 3.5, 3e9, 1e10, 123456789012.5, -5e15, 1e22, 2.0 ** 70,
                 1e100, -1e200, 1e300, 1.7976931348623157e308, 0.5, -2.0, 1e5, 6.0e7],
                np.float64)


def test_double_trig_of_huge_arguments_payne_hanek():
    """libdevice reduces |x| >= 2^31 with the Payne-Hanek algorithm, whose PTX declares
    `.reg .u32 %r0, %r1, ...` in a nested scope that shadows the function's own %r1: the
    inner registers must not overwrite the outer ones (it crashed the process)."""
    m = cpuify.RawModule(code=TRIG_SRC)
    n = len(HUGE)
    s, c, t = (np.zeros(n) for _ in range(3))
    m.get_function("trig")((1,), (32,), (HUGE, s, c, t, np.int32(n)))
    # CUDA's bound for double sin/cos/tan is 2 ulp
    assert _ulps(s, np.sin(HUGE)).max() <= 2
    assert _ulps(c, np.cos(HUGE)).max() <= 2
    assert _ulps(t, np.tan(HUGE)).max() <= 2


def test_double_trig_of_huge_arguments_interpreted():
    m = cpuify.RawModule(code=TRIG_SRC)
    x = HUGE[:6]
    n = len(x)
    s, c, t = (np.zeros(n) for _ in range(3))
    interpret_kernel(m.ptx, "trig", (1,), (8,), (x, s, c, t, np.int32(n)))
    assert _ulps(s, np.sin(x)).max() <= 2
    assert _ulps(c, np.cos(x)).max() <= 2
    assert _ulps(t, np.tan(x)).max() <= 2


SCOPED_PTX = r'''
.version 8.0
.target sm_75
.address_size 64

.visible .entry scoped(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, 7;
    {
    .reg .b32 %r1, %r2;
    .reg .b64 %t;
    mov.u32 %r1, 1000;
    add.s32 %r2, %r1, %r1;
    mov.b64 %t, {%r1, %r2};
    {
    .reg .b32 %r1;
    mov.u32 %r1, 5;
    add.s32 %r2, %r2, %r1;
    }
    add.s32 %r3, %r2, %r1;
    }
    {
    .reg .b16 %r2;
    mov.u16 %r2, 9;
    }
    mad.lo.s32 %r3, %r1, %r2, %r3;
    mul.wide.u32 %rd1, %r1, 4;
    add.s64 %rd2, %rd2, %rd1;
    st.global.u32 [%rd2], %r3;
    ret;
}
'''


def test_nested_scopes_shadow_outer_registers():
    """An inner `.reg` of the same name is a different register until its scope closes;
    a sibling scope may even give the name another type."""
    # inner: r1 = 1000, r2 = 2000 + 5, r3 = 2005 + 1000; outer: out = tid * 7 + 3005
    want = np.arange(8, dtype=np.int32) * 7 + 3005
    o = np.zeros(8, np.int32)
    cpuify.RawModule(ptx=SCOPED_PTX).get_function("scoped")((1,), (8,), (o,))
    np.testing.assert_array_equal(o, want)
    o[:] = 0
    interpret_kernel(SCOPED_PTX, "scoped", (1,), (8,), (o,))
    np.testing.assert_array_equal(o, want)


# --- item 8: dynamic indexing into by-value struct parameters -----------------------------------

STRUCT_SRC = r'''
struct Big { int v[8100]; };            // 32,400 bytes (CUDA 12.1+ allows 32,764)
struct Mid { double s; int v[300]; };
__device__ __noinline__ int pick(Mid m, int i) { return m.v[i] + (int)m.s; }
extern "C" __global__ void big(Big p, const int *idx, int *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = p.v[idx[i]];
}
extern "C" __global__ void mid(Mid m, const int *idx, int *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = pick(m, idx[i]) - m.v[(idx[i] + 1) % 300];
}'''

BIG = np.dtype([("v", np.int32, 8100)])
MID = np.dtype([("s", np.float64), ("v", np.int32, 300)], align=True)


@pytest.fixture(scope="module")
def struct_mod():
    return cpuify.RawModule(code=STRUCT_SRC)


def _struct_args(rng):
    p = np.zeros((), BIG)
    p["v"] = rng.integers(-10**6, 10**6, 8100)
    m = np.zeros((), MID)
    m["s"] = 7.0
    m["v"] = rng.integers(-1000, 1000, 300)
    idx = rng.integers(0, 8100, 1000).astype(np.int32)
    return p, m, idx


def test_large_struct_parameter_dynamic_index(struct_mod, rng):
    """`p.v[i]` with i from memory: the kernel takes the parameter's address and loads
    through it (it failed with "use of undeclared register '%rd9+0'")."""
    p, _, idx = _struct_args(rng)
    o = np.zeros(1000, np.int32)
    struct_mod.get_function("big")((8,), (128,), (p, idx, o, np.int32(1000)))
    np.testing.assert_array_equal(o, p["v"][idx])
    o[:] = 0
    interpret_kernel(struct_mod.ptx, "big", (2,), (32,), (p, idx, o, np.int32(64)))
    np.testing.assert_array_equal(o[:64], p["v"][idx[:64]])


def test_struct_parameter_of_device_function_indexed(struct_mod, rng):
    """A by-value struct passed on to a device function that indexes it: PTX puts the
    function parameter's address in the local window, so the call stores the argument."""
    _, m, idx = _struct_args(rng)
    idx %= 300
    o = np.zeros(1000, np.int32)
    want = m["v"][idx] + 7 - m["v"][(idx + 1) % 300]
    struct_mod.get_function("mid")((8,), (128,), (m, idx, o, np.int32(1000)))
    np.testing.assert_array_equal(o, want)
    o[:] = 0
    interpret_kernel(struct_mod.ptx, "mid", (1,), (32,), (m, idx, o, np.int32(32)))
    np.testing.assert_array_equal(o[:32], want[:32])


# --- item 10: volatile and ordered accesses -----------------------------------------------------

VOLATILE_SRC = r'''
// the spins are bounded: if a load were hoisted out of the loop, LLVM would run the counter
// to the bound at once and the kernel would report it instead of hanging
#define LIMIT (1LL << 60)
extern "C" __global__ void spin_on_host(volatile int *flag, long long *spins, int *out) {
    long long k = 0;
    while (flag[0] == 0 && k < LIMIT) k++;
    spins[threadIdx.x] = k;
    out[threadIdx.x] = flag[0] + threadIdx.x;
}
extern "C" __global__ void publish_and_wait(volatile int *flag, int *data, long long *spins) {
    // block 0 publishes; every other block waits for it (blocks start in order, so the
    // wait ends whether or not the two run on different workers)
    if (blockIdx.x == 0) {
        if (threadIdx.x == 0) { data[0] = 42; __threadfence(); *flag = 1; }
    } else if (threadIdx.x == 0) {
        long long k = 0;
        while (*flag == 0 && k < LIMIT) k++;
        spins[blockIdx.x] = k;
        data[blockIdx.x] = data[0] + (int)blockIdx.x;
    }
}
__device__ unsigned ld_acquire(const unsigned *p) {
    unsigned v; asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v;
}
__device__ unsigned ld_relaxed(const unsigned *p) {
    unsigned v; asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v;
}
__device__ void st_release(unsigned *p, unsigned v) {
    asm volatile("st.release.gpu.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
extern "C" __global__ void acquire_spin(unsigned *flag, long long *spins, unsigned *out) {
    long long k = 0;
    while (ld_acquire(flag) == 0u && k < LIMIT) k++;
    spins[threadIdx.x] = k;
    st_release(out + threadIdx.x, ld_relaxed(flag) * 2u + threadIdx.x);
}
'''


@pytest.fixture(scope="module")
def volatile_mod():
    return cpuify.RawModule(code=VOLATILE_SRC)


def _set_later(array: np.ndarray, value: int, delay: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        array[0] = value
    t = threading.Thread(target=run)
    t.start()
    return t


@pytest.mark.parametrize("kernel", ["spin_on_host", "acquire_spin"])
def test_spin_sees_a_flag_the_host_sets_during_the_launch(volatile_mod, kernel):
    dtype = np.int32 if kernel == "spin_on_host" else np.uint32
    flag = np.zeros(1, dtype)
    spins = np.zeros(4, np.int64)
    out = np.zeros(4, dtype)
    setter = _set_later(flag, 5, 0.2)
    volatile_mod.get_function(kernel)((1,), (4,), (flag, spins, out))
    setter.join()
    assert (spins < 1 << 60).all() and spins[0] > 0
    want = 5 if kernel == "spin_on_host" else 10
    np.testing.assert_array_equal(out, want + np.arange(4))


def test_blocks_wait_for_a_flag_another_block_sets(volatile_mod):
    for _ in range(3):
        flag = np.zeros(1, np.int32)
        data = np.zeros(16, np.int32)
        spins = np.zeros(16, np.int64)
        volatile_mod.get_function("publish_and_wait")((16,), (32,), (flag, data, spins))
        assert (spins < 1 << 60).all()
        np.testing.assert_array_equal(data, 42 + np.arange(16) * (np.arange(16) > 0))


def test_volatile_and_ordered_accesses_stay_in_llvm(volatile_mod):
    """Every volatile access is an LLVM volatile access; `.acquire`/`.relaxed`/`.release`
    are atomic ones with that ordering (after LLVM's optimizations)."""
    from cpuify.codegen.llvm_gen import ModuleCodegen
    from cpuify.compiler import lift_optimized
    from cpuify.frontend.ptx_parser import parse_ptx
    module = parse_ptx(volatile_mod.ptx)
    texts = {}
    for name in ("spin_on_host", "acquire_spin"):
        gen = ModuleCodegen(module)
        gen.add_kernel(lift_optimized(module, module.functions[name]), None)
        texts[name] = gen.llvm_text()
    assert texts["spin_on_host"].count("load volatile i32") == 2
    assert "load atomic volatile i32" in texts["acquire_spin"] and " acquire, align 4" in texts["acquire_spin"]
    assert " monotonic, align 4" in texts["acquire_spin"]
    assert "store atomic volatile i32" in texts["acquire_spin"] and " release, align 4" in texts["acquire_spin"]
