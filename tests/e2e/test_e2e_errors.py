"""Error paths a user hits: bad arguments, bad launch configurations, compile errors, unknown
names, unsupported features and kernels that fail while running."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cpuify

SRC = r'''
extern "C" __global__ void scale(float *x, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

// Threads 0..15 wait at the barrier in the branch while threads 16.. wait at the next
// one.  (Without the second barrier, threads 16.. would exit, and exited threads are not
// waited for: that is legal on Volta and later, so it cannot be reported.)
extern "C" __global__ void divergent_barrier(int *x) {
    __shared__ int s[64];
    s[threadIdx.x] = threadIdx.x;
    if (threadIdx.x < 16)
        __syncthreads();
    __syncthreads();
    x[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

// only block 2 diverges
extern "C" __global__ void divergent_in_one_block(int *x) {
    if (blockIdx.x != 2 || threadIdx.x % 2 == 0)
        __syncthreads();
    __syncthreads();
    x[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

extern "C" __global__ void trap_in_block(int *x, int bad_block) {
    if (blockIdx.x == bad_block && threadIdx.x == 3) __trap();
    x[blockIdx.x * blockDim.x + threadIdx.x] = 7;
}

extern "C" __global__ void assert_positive(const int *x) {
    assert(x[blockIdx.x * blockDim.x + threadIdx.x] > 0);
}

extern "C" __global__ void uses_static_shared(float *out) {
    __shared__ float big[8192];          // 32 KiB of static shared memory
    big[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = big[blockDim.x - 1 - threadIdx.x];
}

template <typename T> __global__ void tmpl_kernel(T *x) { x[threadIdx.x] += T(1); }
template __global__ void tmpl_kernel<float>(float *);
'''


@pytest.fixture(scope="module")
def mod():
    return cpuify.RawModule(code=SRC)


@pytest.fixture
def scale(mod):
    return mod.get_function("scale")


def test_wrong_number_of_args(scale):
    x = np.ones(4, np.float32)
    with pytest.raises(TypeError, match="scale"):
        scale((1,), (4,), (x, np.int32(4)))
    with pytest.raises(TypeError, match="scale"):
        scale((1,), (4,), (x, np.int32(4), np.float32(2), np.float32(3)))


def test_float_for_int_param(scale):
    x = np.ones(4, np.float32)
    with pytest.raises(TypeError):
        scale((1,), (4,), (x, 4.0, np.float32(2)))
    with pytest.raises(TypeError):
        scale((1,), (4,), (x, np.float32(4), np.float32(2)))
    assert (x == 1).all()


def test_array_for_scalar_and_scalar_for_pointer(scale):
    x = np.ones(4, np.float32)
    with pytest.raises(TypeError):
        scale((1,), (4,), (x, np.int32(4), x))
    with pytest.raises(TypeError):
        scale((1,), (4,), (2.5, np.int32(4), np.float32(2)))


def test_out_of_range_int(scale):
    x = np.ones(4, np.float32)
    with pytest.raises(ValueError):
        scale((1,), (4,), (x, 2**40, np.float32(2)))
    with pytest.raises(ValueError):
        scale((1,), (4,), (x, -2**31 - 1, np.float32(2)))


def test_block_of_2048_threads(scale):
    x = np.ones(4096, np.float32)
    with pytest.raises(ValueError, match="scale"):
        scale((2,), (2048,), (x, np.int32(4096), np.float32(2)))
    with pytest.raises(ValueError):
        scale((1,), (32, 32, 2), (x, np.int32(4096), np.float32(2)))
    with pytest.raises(ValueError):
        scale((1,), (1, 1, 65), (x, np.int32(4096), np.float32(2)))
    assert (x == 1).all()


@pytest.mark.parametrize("grid", [0, (0,), (4, 0), (1, 1, 0), (2**31,), (1, 65536)])
def test_bad_grid(scale, grid):
    x = np.ones(4, np.float32)
    with pytest.raises(ValueError):
        scale(grid, (4,), (x, np.int32(4), np.float32(2)))


def test_zero_block_and_too_many_dims(scale):
    x = np.ones(4, np.float32)
    with pytest.raises(ValueError):
        scale((1,), 0, (x, np.int32(4), np.float32(2)))
    with pytest.raises(ValueError):
        scale((1, 1, 1, 1), (4,), (x, np.int32(4), np.float32(2)))


def test_shared_mem_over_48k_without_opt_in(mod):
    f = mod.get_function("uses_static_shared")
    out = np.zeros(64, np.float32)
    f((1,), (64,), (out,))
    np.testing.assert_array_equal(out, np.arange(64)[::-1])
    # 32 KiB static + 20 KiB dynamic > 48 KiB
    with pytest.raises(ValueError, match="uses_static_shared"):
        f((1,), (64,), (out,), shared_mem=20 * 1024)
    with pytest.raises(ValueError):
        mod.get_function("scale")((1,), (4,), (np.ones(4, np.float32), 4, 2.0), shared_mem=49 * 1024)


def test_barrier_reached_by_part_of_block(mod):
    x = np.zeros(64, np.int32)
    with pytest.raises(cpuify.LaunchError) as ei:
        mod.get_function("divergent_barrier")((1,), (64,), (x,))
    msg = str(ei.value)
    assert "divergent_barrier" in msg and "block" in msg


def test_barrier_divergence_names_the_block(mod):
    x = np.zeros(4 * 32, np.int32)
    with pytest.raises(cpuify.LaunchError) as ei:
        mod.get_function("divergent_in_one_block")((4,), (32,), (x,))
    msg = str(ei.value)
    assert "divergent_in_one_block" in msg
    assert re.search(r"block\D*\(?2\b", msg), msg


def test_trap_is_launch_error(mod):
    x = np.zeros(3 * 32, np.int32)
    with pytest.raises(cpuify.LaunchError) as ei:
        mod.get_function("trap_in_block")((3,), (32,), (x, np.int32(1)))
    assert "trap_in_block" in str(ei.value) and "block" in str(ei.value)
    # the module is still usable afterwards
    mod.get_function("trap_in_block")((3,), (32,), (x, np.int32(-1)))
    assert (x == 7).all()


def test_device_assert_is_launch_error(mod):
    x = np.ones(64, np.int32)
    mod.get_function("assert_positive")((2,), (32,), (x,))          # passes
    x[40] = 0
    with pytest.raises(cpuify.LaunchError) as ei:
        mod.get_function("assert_positive")((2,), (32,), (x,))
    assert "assert_positive" in str(ei.value)


def test_compile_error_has_nvrtc_log_with_line():
    src = ('extern "C" __global__ void broken(float *x) {\n'
           '    int i = threadIdx.x;\n'
           '    x[i] = i +;\n'
           '}\n')
    mod = cpuify.RawModule(code=src)          # compiled lazily, as CuPy does
    with pytest.raises(cpuify.CompileError) as ei:
        mod.compile()
    assert "kernel.cu(3)" in str(ei.value)
    assert "kernel.cu(3)" in ei.value.log


def test_compile_error_undeclared_identifier():
    src = 'extern "C" __global__ void k(float *x) {\n  x[0] = undefined_thing;\n}\n'
    with pytest.raises(cpuify.CompileError, match=r"kernel\.cu\(2\).*undefined_thing"):
        cpuify.RawModule(code=src).compile()


def test_get_function_unknown_name(mod):
    with pytest.raises(LookupError):
        mod.get_function("no_such_kernel")


def test_template_kernel_without_name_expressions(mod):
    with pytest.raises(LookupError):
        mod.get_function("tmpl_kernel<float>")
    with pytest.raises(LookupError):
        mod.get_function("tmpl_kernel")


def test_rawkernel_unknown_name_raises_lookup_error():
    with pytest.raises(LookupError, match="other_name"):
        k = cpuify.RawKernel('extern "C" __global__ void real_name(int *x) { x[0] = 1; }', "other_name")
        k((1,), (1,), (np.zeros(1, np.int32),))


# (textures were the example until cpuify implemented them, then a partial barrier: a bulk
# (TMA) copy group now)
UNSUPPORTED_SRC = r'''
extern "C" __global__ void tex_read(cudaTextureObject_t tex, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    asm volatile("cp.async.bulk.commit_group;");
    if (i < n) out[i] = tex1Dfetch<float>(tex, i);
}
'''


def test_unsupported_instruction_is_refused():
    # NVRTC accepts the inline PTX; cpuify must refuse the instruction by name
    with pytest.raises(cpuify.UnsupportedError) as ei:
        m = cpuify.RawModule(code=UNSUPPORTED_SRC)
        m.get_function("tex_read")
    msg = str(ei.value)
    assert "tex_read" in msg
    assert re.search(r"PTX line \d+", msg), msg
    assert isinstance(ei.value, cpuify.PTXError)


def test_unsupported_kernel_next_to_supported_one():
    src = UNSUPPORTED_SRC + r'''
    extern "C" __global__ void plain(float *out) { out[threadIdx.x] = 2.0f * threadIdx.x; }'''
    m = cpuify.RawModule(code=src)
    out = np.zeros(8, np.float32)
    m.get_function("plain")((1,), (8,), (out,))
    np.testing.assert_array_equal(out, 2 * np.arange(8))
    with pytest.raises(cpuify.UnsupportedError) as ei:
        m.get_function("tex_read")((1,), (8,), (0, out, np.int32(8)))
    assert "tex_read" in str(ei.value) and re.search(r"PTX line \d+", str(ei.value))


def test_formatted_surface_store_is_unsupported():
    # surf*write compiles to unformatted sust.b, which cpuify implements (test_textures_api);
    # the formatted sust.p is refused by name
    src = r'''
    extern "C" __global__ void surf_write(cudaSurfaceObject_t s, int n) {
        int i = threadIdx.x;
        if (i < n) asm volatile("sust.p.1d.b32.trap [%0, {%1}], {%2};" :: "l"(s), "r"(i * 4), "r"(i));
    }'''
    with pytest.raises(cpuify.UnsupportedError, match="surf_write") as ei:
        m = cpuify.RawModule(code=src)
        m.get_function("surf_write")
    assert "sust.p" in str(ei.value) or "'.p'" in str(ei.value)


def test_named_barrier_that_cannot_complete_fails():
    # named barriers run (tests/test_cooperative_groups.py); one that waits for more threads
    # than the block has is reported, not a hang
    src = r'''
    extern "C" __global__ void named_bar(int *x) {
        x[threadIdx.x] = 1;
        asm volatile("bar.sync 1, 64;");
        x[threadIdx.x] += 1;
    }'''
    m = cpuify.RawModule(code=src)
    x = np.zeros(64, np.int32)
    m.get_function("named_bar")((1,), (64,), (x,))
    np.testing.assert_array_equal(x, 2)
    with pytest.raises(cpuify.KernelFailure, match="named_bar.*named barrier"):
        m.get_function("named_bar")((1,), (32,), (np.zeros(32, np.int32),))


def test_ptx_module_round_trip_and_bad_ptx(mod):
    # a module can be built from PTX text, e.g. the PTX of another module
    m2 = cpuify.RawModule(ptx=mod.ptx)
    x = np.arange(8, dtype=np.float32)
    m2.get_function("scale")((1,), (8,), (x, np.int32(8), np.float32(3)))
    np.testing.assert_array_equal(x, np.arange(8) * 3)
    with pytest.raises(cpuify.PTXError):
        cpuify.RawModule(ptx=".version 7.0\n.target sm_75\n.address_size 64\n.visible .entry k(\n{\n  bogus.instr %r1;\n}\n").compile()


def test_recursion_runs():
    """(It was refused; recursive device functions run on a call stack per thread now, see
    tests/test_recursion.py.)"""
    src = r'''
    __device__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
    extern "C" __global__ void rec(int *o) { o[threadIdx.x] = fib(threadIdx.x); }'''
    o = np.zeros(8, np.int32)
    cpuify.RawModule(code=src).get_function("rec")((1,), (8,), (o,))
    np.testing.assert_array_equal(o, [0, 1, 1, 2, 3, 5, 8, 13])


def test_function_pointer_call_through_a_local_table():
    """(It was refused; calls through function pointers are switches over the candidates,
    see test_e2e_frontend_gaps.py.)"""
    src = r'''
    __device__ int inc(int v) { return v + 1; }
    __device__ int dbl(int v) { return v * 2; }
    typedef int (*op_t)(int);
    extern "C" __global__ void fnptr(int *o, int which) {
        op_t ops[2] = {inc, dbl};
        op_t f = ops[(which + threadIdx.x) & 1];
        o[threadIdx.x] = f(o[threadIdx.x]);
    }'''
    o = np.arange(8, dtype=np.int32)
    cpuify.RawModule(code=src).get_function("fnptr")((1,), (8,), (o, 0))
    t = np.arange(8)
    np.testing.assert_array_equal(o, np.where(t & 1, 2 * t, t + 1))


def test_grid_sync_needs_a_cooperative_launch():
    src = r'''
    #include <cooperative_groups.h>
    namespace cg = cooperative_groups;
    extern "C" __global__ void grid_sync(int *o) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        o[i] = i;
        cg::this_grid().sync();
        int other = o[(i + 8) % 16];       // written by the other block before the sync
        cg::this_grid().sync();
        o[i] += other;
    }'''
    m = cpuify.RawModule(code=src)
    # without the cooperative flag it traps, as on a GPU (no grid workspace), and says why
    with pytest.raises(cpuify.KernelFailure, match="grid_sync.*enable_cooperative_groups=True"):
        m.get_function("grid_sync")((2,), (8,), (np.zeros(16, np.int32),))
    o = np.zeros(16, np.int32)
    cpuify.RawModule(code=src, enable_cooperative_groups=True).get_function("grid_sync")(
        (2,), (8,), (o,))
    i = np.arange(16)
    np.testing.assert_array_equal(o, i + (i + 8) % 16)


def test_legacy_texture_reference_is_compile_error():
    # texture references were removed in CUDA 12: NVRTC itself rejects them
    src = ('texture<float, 1, cudaReadModeElementType> tref;\n'
           'extern "C" __global__ void legacy_tex(float *o) {\n'
           '    o[threadIdx.x] = tex1Dfetch(tref, threadIdx.x);\n'
           '}\n')
    with pytest.raises(cpuify.CompileError, match=r"kernel\.cu\(1\)"):
        cpuify.RawModule(code=src).compile()
