"""Thread loops are emitted as parallel loops (`llvm.loop.parallel_accesses`): the accesses
that may carry a dependence between threads of one segment (shared-memory atomics, volatile
accesses, one local-memory buffer reused by every thread) stay out of the access group.
Results are checked against NumPy."""

from __future__ import annotations

import re

import llvmlite.binding as llvm
import numpy as np
import pytest

import cpuify
from cpuify.codegen.llvm_gen import ModuleCodegen
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.compiler import lift_and_optimize, lift_optimized, pipeline_options
from cpuify.transforms.pass_manager import PipelineOptions

SRC = r'''
// a 5-point stencil with halo loads under thread-dependent conditions
extern "C" __global__ void blur(const float *in, float *out, int n) {
    __shared__ float t[18];
    int x = blockIdx.x * 16 + threadIdx.x;
    int xc = min(x, n - 1);
    t[threadIdx.x + 1] = in[xc];
    if (threadIdx.x == 0) t[0] = in[max(xc - 1, 0)];
    if (threadIdx.x == 15) t[17] = in[min(xc + 1, n - 1)];
    __syncthreads();
    if (x < n) out[x] = 0.25f * t[threadIdx.x] + 0.5f * t[threadIdx.x + 1] + 0.25f * t[threadIdx.x + 2];
}
// every thread of a block adds into a few shared bins: the threads depend on each other
extern "C" __global__ void bins(const int *x, int *hist, int n) {
    __shared__ int s[8];
    if (threadIdx.x < 8) s[threadIdx.x] = 0;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&s[x[i] & 7], 1);
    __syncthreads();
    if (threadIdx.x < 8) atomicAdd(&hist[threadIdx.x], s[threadIdx.x]);
}
// a per-thread array indexed at run time, no barrier: local memory
extern "C" __global__ void reverse_digits(const int *x, int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int d[10];
    int v = x[i], k = 0;
    do { d[k++] = v % 10; v /= 10; } while (v && k < 10);
    int r = 0;
    for (int j = 0; j < k; j++) r = r * 10 + d[j];
    out[i] = r;
}
'''


@pytest.fixture(scope="module")
def ptx():
    return compile_to_ptx(SRC).ptx


def _llvm_text(ptx, name, block_dims=None):
    module = parse_ptx(ptx)
    gen = ModuleCodegen(module)
    gen.add_kernel(lift_optimized(module, module.functions[name], block_dims), block_dims)
    return gen.llvm_text()


def test_short_rows_of_2d_blocks_stay_loops(ptx):
    # specialized for 16x4 threads: the 16-thread rows must not be unrolled away
    text = _llvm_text(ptx, "blur", (16, 4, 1))
    assert "llvm.loop.unroll.disable" in text
    assert re.search(r'^(![0-9]+) = distinct !\{(![0-9]+), ![0-9]+, ![0-9]+\}$', text, re.M)
    llvm.parse_assembly(text).verify()
    # 1-D rows: only the copy that runs when every thread passes the `x < n` guard (a range
    # branch, see test_range_branches.py) is kept a loop: its two loops, the threads before
    # the first whose store starts a cache line and the rest (aligned rows, below)
    text = _llvm_text(ptx, "blur", (256, 1, 1))
    disabled = re.findall(r'^(![0-9]+) = !\{ ?!"llvm.loop.unroll.disable" ?\}$', text, re.M)
    assert len(disabled) == 1
    assert len(re.findall(rf'distinct !\{{![0-9]+, ![0-9]+, {disabled[0]}\}}', text)) == 2


def test_thread_loops_are_parallel_loops(ptx):
    text = _llvm_text(ptx, "blur")
    assert "llvm.loop.parallel_accesses" in text
    group = re.search(r'^(![0-9]+) = distinct !\{\}$', text, re.M)
    assert group is not None
    loop_ids = re.findall(r'^(![0-9]+) = distinct !\{(![0-9]+), ![0-9]+\}$', text, re.M)
    assert loop_ids and all(a == b for a, b in loop_ids)
    assert text.count("!llvm.access.group") > 5
    llvm.parse_assembly(text).verify()


def test_shared_atomics_stay_out_of_the_group(ptx):
    text = _llvm_text(ptx, "bins")
    # the emulated atomic's load and store (an add through a shared address) are untagged
    tagged = [l for l in text.splitlines() if "!llvm.access.group" in l]
    untagged_shared = [l for l in text.splitlines()
                       if ("load i32" in l or "store i32" in l) and "!llvm.access.group" not in l
                       and "%\"v" not in l and "alloca" not in l]
    assert tagged and untagged_shared


@pytest.mark.parametrize("n", [1, 16, 1000])
def test_blur_matches_numpy(ptx, n):
    x = np.random.default_rng(n).random(n, dtype=np.float32)
    f = cpuify.RawModule(ptx=ptx).get_function("blur")
    p = np.concatenate([x[:1], x, x[-1:]])
    ref = 0.25 * p[:-2] + 0.5 * p[1:-1] + 0.25 * p[2:]
    for _ in range(3):
        out = np.zeros(n, np.float32)
        f(((n + 15) // 16,), (16,), (x, out, np.int32(n)))
        np.testing.assert_allclose(out, ref, rtol=1e-6)


@pytest.mark.parametrize("block", [64, 256, 1024])
def test_shared_atomic_bins_exact(ptx, block):
    n = 100_000
    x = np.random.default_rng(block).integers(0, 1 << 20, n, dtype=np.int32)
    f = cpuify.RawModule(ptx=ptx).get_function("bins")
    for _ in range(3):
        hist = np.zeros(8, np.int32)
        f(((n + block - 1) // block,), (block,), (x, hist, np.int32(n)))
        np.testing.assert_array_equal(hist, np.bincount(x & 7, minlength=8))


def test_local_array_per_thread(ptx):
    n = 5000
    x = np.random.default_rng(3).integers(1, 10**9, n, dtype=np.int32)
    out = np.zeros(n, np.int32)
    cpuify.RawModule(ptx=ptx).get_function("reverse_digits")(((n + 255) // 256,), (256,),
                                                             (x, out, np.int32(n)))
    ref = np.array([int(str(v)[::-1]) for v in x], np.int64)
    np.testing.assert_array_equal(out, ref.astype(np.int32))


TREE_SRC = r'''
#define BLOCK 256
// a shared-memory tree: each step only threads below k work, the rest go to the barrier
extern "C" __global__ void tree_sum(const float *x, float *out) {
    __shared__ float s[BLOCK];
    unsigned t = threadIdx.x;
    s[t] = x[blockIdx.x * BLOCK + t];
    __syncthreads();
    for (unsigned k = BLOCK / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
// the same, but every thread stores before the test: the loop must not be narrowed
extern "C" __global__ void tree_sum_all_write(const float *x, float *out, float *mark) {
    __shared__ float s[BLOCK];
    unsigned t = threadIdx.x;
    s[t] = x[blockIdx.x * BLOCK + t];
    __syncthreads();
    for (unsigned k = BLOCK / 2; k > 0; k >>= 1) {
        mark[blockIdx.x * BLOCK + t] += 1.0f;
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
'''


def test_tree_steps_narrow_the_thread_loop():
    from cpuify.codegen.llvm_gen import KernelCodegen
    module = parse_ptx(compile_to_ptx(TREE_SRC).ptx)
    kc = KernelCodegen(ModuleCodegen(module), lift_optimized(module, module.functions["tree_sum"], (256, 1, 1)),
                       (256, 1, 1))
    x_stops = sorted((r[0][1] for r in kc.thread_range.values()), reverse=True)
    assert x_stops[:3] == [128, 64, 32] and x_stops[-1] == 1     # the last: if (t == 0)
    generic = KernelCodegen(ModuleCodegen(module), lift_optimized(module, module.functions["tree_sum"]))
    assert generic.thread_range == {}         # only code specialized for the block shape
    kc2 = KernelCodegen(ModuleCodegen(module),
                        lift_optimized(module, module.functions["tree_sum_all_write"], (256, 1, 1)), (256, 1, 1))
    # the tree steps store `mark` in every thread: only the final `if (t == 0)` is narrowed
    assert list(kc2.thread_range.values()) == [((0, 1, 1), (0, 1, 1), (0, 1, 1))]


def test_tree_sums_match_numpy():
    mod = cpuify.RawModule(code=TREE_SRC)
    nb = 37
    x = np.random.default_rng(5).integers(-100, 100, nb * 256).astype(np.float32)
    ref = x.reshape(nb, 256).sum(axis=1)
    for _ in range(3):                  # generic, then specialized (narrowed) code
        out = np.zeros(nb, np.float32)
        mod.get_function("tree_sum")((nb,), (256,), (x, out))
        np.testing.assert_array_equal(out, ref)
        out2 = np.zeros(nb, np.float32)
        mark = np.zeros(nb * 256, np.float32)
        mod.get_function("tree_sum_all_write")((nb,), (256,), (x, out2, mark))
        np.testing.assert_array_equal(out2, ref)
        np.testing.assert_array_equal(mark, 8.0)


# Rodinia backprop's layer: phases guarded by conditions on one thread index of a 2-D block
ROWS_SRC = r'''
extern "C" __global__ void layer(const float *in, const float *w, float *part, float *keep) {
    __shared__ float node[16];
    __shared__ float m[16][16];
    int tx = threadIdx.x, ty = threadIdx.y, by = blockIdx.x;
    if (tx == 0) node[ty] = in[by * 16 + ty];
    __syncthreads();
    m[ty][tx] = w[(by * 16 + ty) * 16 + tx] * node[ty];
    float mine = m[ty][tx] * 2.0f;          // kept across the tree steps, per thread
    __syncthreads();
    for (int p = 2; p <= 16; p *= 2) {
        if (ty % p == 0) m[ty][tx] += m[ty + p / 2][tx];
        __syncthreads();
    }
    if (ty > 13) keep[(by * 16 + ty) * 16 + tx] = mine;
    __syncthreads();
    if (tx == 0) part[by * 16 + ty] = m[0][ty];
}
'''


def test_thread_index_conditions_narrow_2d_thread_loops():
    from cpuify.codegen.llvm_gen import KernelCodegen
    module = parse_ptx(compile_to_ptx(ROWS_SRC).ptx)
    from cpuify.compiler import lift_and_optimize
    from cpuify.transforms.pass_manager import PipelineOptions, default_pipeline
    # (barrier-elimination by the paper's rule: the default one, comparing the two intervals
    # beside a barrier, removes the barrier after `if (ty > 13)`, which then guards no
    # whole interval)
    options = PipelineOptions(passes=tuple(
        "barrier-elimination{adjacent_intervals=false}" if p == "barrier-elimination" else p
        for p in default_pipeline()))
    lifted, _ = lift_and_optimize(module, module.functions["layer"], options, (16, 16, 1))
    kc = KernelCodegen(ModuleCodegen(module), lifted, (16, 16, 1))
    ranges = set(kc.thread_range.values())
    assert ((0, 1, 1), (0, 16, 1), (0, 1, 1)) in ranges          # if (tx == 0)
    for step in (2, 4, 8):                                       # if (ty % p == 0)
        assert ((0, 16, 1), (0, 16 - step + 1, step), (0, 1, 1)) in ranges
    assert ((0, 16, 1), (14, 16, 1), (0, 1, 1)) in ranges         # if (ty > 13), keeps `mine`
    kc = KernelCodegen(ModuleCodegen(module), lift_optimized(module, module.functions["layer"], (16, 16, 1)),
                       (16, 16, 1))
    assert ((0, 1, 1), (0, 16, 1), (0, 1, 1)) in set(kc.thread_range.values())


def test_thread_index_conditions_match_numpy():
    mod = cpuify.RawModule(code=ROWS_SRC)
    nb = 9
    rng = np.random.default_rng(2)
    x = rng.random(nb * 16, dtype=np.float32)
    w = rng.random(nb * 256, dtype=np.float32)
    prod = w.reshape(nb, 16, 16) * x.reshape(nb, 16, 1)
    for _ in range(3):                  # generic, then specialized (narrowed) code
        part = np.zeros(nb * 16, np.float32)
        keep = np.zeros(nb * 256, np.float32)
        mod.get_function("layer")((nb,), (16, 16), (x, w, part, keep))
        np.testing.assert_allclose(part.reshape(nb, 16), prod.sum(axis=1), rtol=1e-5)
        k = keep.reshape(nb, 16, 16)
        np.testing.assert_array_equal(k[:, 14:], prod[:, 14:] * 2)
        assert not k[:, :14].any()


# The copy of the thread loop that every thread of the block runs is plain vector loads and
# stores, whatever the alignment of the arrays.  (Rows shifted to start on whole cache lines
# of their first store, threads before the row masked off, made every load and store of the
# loop a masked one: the triad a = b + s*c 1.8x slower on one thread of an AMD EPYC.)  Rows
# of 32 threads or more are split instead: the threads before the first whose store starts
# a cache line run as a loop of their own, then the rest, whose vector stores then fall on
# whole lines (NumPy puts large arrays 16 bytes after a page start; straddling stores made
# a transpose 2x slower on an Intel Xeon).
ROW_SRC = r"""
extern "C" __global__ void transpose32(float *out, const float *in, int n) {
    __shared__ float tile[32][33];
    int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * n + x];
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x;
    y = blockIdx.x * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8) out[(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}
extern "C" __global__ void scale(double *out, const double *in, int n, double s) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * s;
}
extern "C" __global__ void triad(float *__restrict__ a, const float *__restrict__ b,
                                 const float *__restrict__ c, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = b[i] + s * c[i];
}
extern "C" __global__ void axpy(float *__restrict__ y, const float *__restrict__ x, float a,
                                int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
// a tile of 4 rows of 256 per block, reversed within each row through shared memory; the
// last thread writes the tile's first value (an `if` run after the thread loop)
extern "C" __global__ void tile_rows(const int *in, int *out, int *firsts, int n) {
    __shared__ int s[1024];
    int base = blockIdx.x * 1024;
    for (int k = 0; k < 4; k++) {
        int i = base + k * 256 + threadIdx.x;
        s[k * 256 + threadIdx.x] = i < n ? in[i] : -1;
    }
    __syncthreads();
    for (int k = 0; k < 4; k++) {
        int i = base + k * 256 + threadIdx.x;
        if (i < n) out[i] = s[k * 256 + 255 - threadIdx.x] * 2;
    }
    if (threadIdx.x == 255) firsts[blockIdx.x] = s[0];
}
"""


def _misaligned(n: int, dtype, shift_bytes: int) -> np.ndarray:
    item = np.dtype(dtype).itemsize
    buf = np.zeros(n + 64, dtype)
    start = (-(buf.ctypes.data // item)) % (64 // item) + shift_bytes // item
    return buf[start:start + n]


def test_streaming_rows_are_unmasked_vector_loops():
    from cpuify.codegen import jit
    module = parse_ptx(compile_to_ptx(ROW_SRC).ptx)
    gen = ModuleCodegen(module, *jit.triple_and_layout())
    gen.add_kernel(lift_optimized(module, module.functions["triad"], (256, 1, 1)), (256, 1, 1))
    text = str(jit.optimize(gen.llvm_text()))
    # the copy for blocks whose threads all pass `i < n`: plain vector loads and a store
    bodies = [blk for blk in text.split("\n\n") if re.match(r"vector\.body[0-9]*:", blk)
              and re.search(r"br i1 [^\n]*!llvm\.loop", blk)]
    assert bodies
    plain = [b for b in bodies if "llvm.masked" not in b]
    assert plain, "no unmasked vector loop:\n" + text
    assert any(re.search(r"load <[0-9]+ x float>", b) and re.search(r"store <[0-9]+ x float>", b)
               for b in plain)


def _specialized_llvm(name: str, block: tuple[int, int, int], disabled: frozenset[str] = frozenset()
                      ) -> str:
    module = parse_ptx(compile_to_ptx(ROW_SRC).ptx)
    gen = ModuleCodegen(module)
    options = PipelineOptions(disabled=disabled)
    gen.add_kernel(lift_and_optimize(module, module.functions[name], options, block)[0], block)
    return gen.llvm_text()


def test_rows_split_at_the_first_cache_line_of_a_store():
    # the triad stores to an array it does not read: its rows are split (both copies of the
    # all-threads loop: the one for blocks that pass `i < n` everywhere and the other)
    assert len(re.findall(r"^aligned_rows[.0-9]*:", _specialized_llvm("triad", (256, 1, 1)),
                          re.M)) == 2
    assert "aligned_rows:" in _specialized_llvm("transpose32", (32, 8, 1))
    # tile_rows' four output rows: one pass over the threads each (split-row-streams' soft
    # barriers), which are not split; without that pass, one pass over all four, split
    assert "aligned_rows:" not in _specialized_llvm("tile_rows", (256, 1, 1))
    assert "aligned_rows:" in _specialized_llvm("tile_rows", (256, 1, 1),
                                                frozenset({"split-row-streams"}))


def test_rows_not_split_where_it_does_not_pay():
    # an update in place (its lines were just loaded), rows of 16 threads (one vector), and
    # code for any block shape
    assert "aligned_rows:" not in _specialized_llvm("axpy", (256, 1, 1))
    assert "aligned_rows:" not in _specialized_llvm("triad", (16, 16, 1))
    assert "aligned_rows:" not in _specialized_llvm("triad", None)


def test_split_rows_match_numpy_at_every_alignment():
    mod = cpuify.RawModule(code=ROW_SRC)
    n = 5 * 1024 + 300
    src = np.random.default_rng(5).integers(-1000, 1000, n, dtype=np.int32)
    nb = (n + 1023) // 1024
    padded = np.full(nb * 1024, -1, np.int32)
    padded[:n] = src
    want = padded.reshape(nb, 4, 256)[:, :, ::-1].reshape(-1)[:n] * 2
    for shift in (0, 4, 16, 36, 60):
        x = _misaligned(n, np.int32, (shift * 3) % 64)
        x[:] = src
        for _ in range(2):              # generic, then specialized for the block shape
            out = _misaligned(n, np.int32, shift)
            firsts = _misaligned(nb, np.int32, shift)
            mod.get_function("tile_rows")((nb,), (256,), (x, out, firsts, np.int32(n)))
            np.testing.assert_array_equal(out, want)
            np.testing.assert_array_equal(firsts, padded[::1024])
            _assert_untouched_around(out)
        m = 1000
        y0 = np.random.default_rng(shift).random(m, dtype=np.float32)
        xs = _misaligned(m, np.float32, (shift * 5) % 64)
        xs[:] = np.arange(m, dtype=np.float32)
        for _ in range(2):
            y = _misaligned(m, np.float32, shift)
            y[:] = y0
            mod.get_function("axpy")(((m + 255) // 256,), (256,), (y, xs, np.float32(2), np.int32(m)))
            np.testing.assert_allclose(y, 2 * np.arange(m, dtype=np.float32) + y0, rtol=1e-6)


def test_rows_match_numpy_at_every_alignment():
    mod = cpuify.RawModule(code=ROW_SRC)
    n = 96
    a = np.random.default_rng(3).random((n, n), dtype=np.float32)
    for shift in (0, 4, 16, 36, 60):
        src = _misaligned(n * n, np.float32, shift)
        src[:] = a.reshape(-1)
        for _ in range(2):              # generic, then specialized for the block shape
            out = _misaligned(n * n, np.float32, (shift * 3) % 64)
            mod.get_function("transpose32")((n // 32, n // 32), (32, 8), (out, src, np.int32(n)))
            np.testing.assert_array_equal(out.reshape(n, n), a.T)
            _assert_untouched_around(out)
        m = 1000
        x = _misaligned(m, np.float64, shift & ~7)
        x[:] = np.arange(m)
        for _ in range(2):
            y = _misaligned(m, np.float64, (shift * 5) & 56)
            mod.get_function("scale")(((m + 127) // 128,), (128,), (y, x, np.int32(m), np.float64(0.5)))
            np.testing.assert_array_equal(y, np.arange(m) * 0.5)
            _assert_untouched_around(y)
        bc = _misaligned(2 * m, np.float32, (shift * 7) % 64)
        bc[:] = np.random.default_rng(shift).random(2 * m, dtype=np.float32)
        b, c = bc[:m], bc[m:]
        for _ in range(2):
            t = _misaligned(m, np.float32, shift)
            mod.get_function("triad")(((m + 255) // 256,), (256,), (t, b, c, np.float32(3), np.int32(m)))
            np.testing.assert_allclose(t, b.astype(np.float64) + 3.0 * c, rtol=1e-6)
            _assert_untouched_around(t)


def _assert_untouched_around(view: np.ndarray) -> None:
    """Threads outside the grid's range must not store: the buffer around is 0."""
    buf = view.base
    first = (view.ctypes.data - buf.ctypes.data) // view.itemsize
    assert not buf[:first].any() and not buf[first + view.size:].any()


# `if`s on one thread index at the end of a segment (halo loads) run after the thread loop
HALO_SRC = r'''
extern "C" __global__ void blur(const float *in, float *out, int nx, int ny) {
    __shared__ float t[8 + 2][16 + 2];
    int tx = threadIdx.x, ty = threadIdx.y;
    int x = blockIdx.x * 16 + tx, y = blockIdx.y * 8 + ty;
    int xc = min(x, nx - 1), yc = min(y, ny - 1);
    const float *row = in + yc * nx;
    t[ty + 1][tx + 1] = row[xc];
    if (tx == 0)  t[ty + 1][0]  = row[max(xc - 1, 0)];
    if (tx == 15) t[ty + 1][17] = row[min(xc + 1, nx - 1)];
    if (ty == 0)  t[0][tx + 1]  = in[max(yc - 1, 0) * nx + xc];
    if (ty == 7)  t[9][tx + 1]  = in[min(yc + 1, ny - 1) * nx + xc];
    __syncthreads();
    if (x < nx && y < ny)
        out[y * nx + x] = t[ty + 1][tx + 1] * 4.0f - t[ty][tx + 1] - t[ty + 2][tx + 1]
                          - t[ty + 1][tx] - t[ty + 1][tx + 2];
}
// a data-dependent `if` first (stays in the loop), then the block total by the last thread
extern "C" __global__ void tail_after_data_if(const int *x, int *out, int *totals, int n) {
    __shared__ int s[64];
    int i = blockIdx.x * 64 + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0;
    __syncthreads();
    if (i < n) out[i] = s[63 - threadIdx.x];
    if (threadIdx.x == 63) totals[blockIdx.x] = s[0] + s[63];
}
// nvcc lays this `if` out as `@%p bra THEN; bra.uni JOIN; THEN: ...`: the way to the join
// goes through a block that only jumps
extern "C" __global__ void load_then_node(const float *in, const float *node_in, float *out) {
    __shared__ float node[8];
    __shared__ float w[8][16];
    int tx = threadIdx.x, ty = threadIdx.y;
    w[ty][tx] = in[(blockIdx.x * 8 + ty) * 17 + tx + 1];
    if (tx == 0) node[ty] = node_in[blockIdx.x * 8 + ty];
    __syncthreads();
    out[(blockIdx.x * 8 + ty) * 16 + tx] = w[ty][tx] * node[ty];
}
// a store after the `if`: the `if` stays in the thread loop
extern "C" __global__ void not_at_end(float *a, float *b) {
    int i = blockIdx.x * 32 + threadIdx.x;
    if (threadIdx.x == 0) a[blockIdx.x] = 1.0f;
    b[i] = 2.0f;
}
'''


def test_thread_index_ifs_at_the_end_of_a_segment_are_deferred():
    from cpuify.codegen.llvm_gen import KernelCodegen
    module = parse_ptx(compile_to_ptx(HALO_SRC).ptx)
    kc = KernelCodegen(ModuleCodegen(module), lift_optimized(module, module.functions["blur"], (16, 8, 1)),
                       (16, 8, 1))
    assert [r.ranges for r in kc.deferred[0]] == [
        ((0, 1, 1), (0, 8, 1), (0, 1, 1)), ((15, 16, 1), (0, 8, 1), (0, 1, 1)),
        ((0, 16, 1), (0, 1, 1), (0, 1, 1)), ((0, 16, 1), (7, 8, 1), (0, 1, 1))]
    other = KernelCodegen(ModuleCodegen(module), lift_optimized(module, module.functions["not_at_end"], (32, 1, 1)),
                          (32, 1, 1))
    assert other.deferred == {}
    # (without tiles-in-place, which reads its guarded tile `s` in place, in a second version
    # of the body with segments of its own)
    no_tiles = pipeline_options(("--disable-pass=tiles-in-place",))[0]
    tail = KernelCodegen(ModuleCodegen(module),
                         lift_and_optimize(module, module.functions["tail_after_data_if"], no_tiles,
                                           (64, 1, 1))[0], (64, 1, 1))
    assert [r.ranges for r in tail.deferred[1]] == [((63, 64, 1), (0, 1, 1), (0, 1, 1))]
    text = compile_to_ptx(HALO_SRC).ptx
    body = text[text.index("load_then_node("):]
    assert re.search(r"@%p\d+ bra\s+(\S+);\s+bra.uni", body)     # the layout above
    node = KernelCodegen(ModuleCodegen(module),
                         lift_and_optimize(module, module.functions["load_then_node"], no_tiles,
                                           (16, 8, 1))[0], (16, 8, 1))
    assert [r.ranges for r in node.deferred[0]] == [((0, 1, 1), (0, 8, 1), (0, 1, 1))]


def _blur_ref(a: np.ndarray) -> np.ndarray:
    p = np.pad(a, 1, mode="edge")
    return 4 * a - p[:-2, 1:-1] - p[2:, 1:-1] - p[1:-1, :-2] - p[1:-1, 2:]


def test_deferred_halo_loads_match_numpy_and_interpreter():
    ptx = compile_to_ptx(HALO_SRC).ptx
    mod = cpuify.RawModule(ptx=ptx)
    for ny, nx in ((16, 32), (21, 37)):
        a = np.random.default_rng(nx).random((ny, nx), dtype=np.float32)
        for _ in range(2):              # generic, then specialized (deferred) code
            out = np.zeros_like(a)
            mod.get_function("blur")(((nx + 15) // 16, (ny + 7) // 8), (16, 8),
                                     (a, out, np.int32(nx), np.int32(ny)))
            np.testing.assert_allclose(out, _blur_ref(a), rtol=1e-5, atol=1e-5)
    from cpuify.interp import interpret_kernel
    a = np.random.default_rng(1).random((8, 16), dtype=np.float32)
    ref = np.zeros_like(a)
    interpret_kernel(ptx, "blur", (1, 1), (16, 8), (a, ref, np.int32(16), np.int32(8)))
    out = np.zeros_like(a)
    mod.get_function("blur")((1, 1), (16, 8), (a, out, np.int32(16), np.int32(8)))
    np.testing.assert_array_equal(out, ref)
    n = 150
    x = np.arange(n, dtype=np.int32) * 3 + 1
    xp = np.zeros(192, np.int32)
    xp[:n] = x
    for _ in range(2):
        out, totals = np.zeros(n, np.int32), np.zeros(3, np.int32)
        mod.get_function("tail_after_data_if")((3,), (64,), (x, out, totals, np.int32(n)))
        tiles = xp.reshape(3, 64)
        np.testing.assert_array_equal(out, tiles[:, ::-1].reshape(-1)[:n])
        np.testing.assert_array_equal(totals, tiles[:, 0] + tiles[:, 63])
    w_in = np.arange(3 * 8 * 17, dtype=np.float32) * 0.5
    node_in = np.arange(3 * 8, dtype=np.float32) + 1
    want = w_in.reshape(24, 17)[:, 1:] * node_in[:, None]
    for _ in range(2):
        got = np.zeros((24, 16), np.float32)
        mod.get_function("load_then_node")((3,), (16, 8), (w_in, node_in, got))
        np.testing.assert_array_equal(got, want)
    a2, b2 = np.zeros(3, np.float32), np.zeros(96, np.float32)
    for _ in range(2):
        mod.get_function("not_at_end")((3,), (32,), (a2, b2))
    assert (a2 == 1).all() and (b2 == 2).all()


# Partner indices `t & m`, `t ^ m` of sorting networks: thread loops run in lane groups of 16
NETWORK_SRC = r'''
extern "C" __global__ void bitonic_tile(int *keys, int stages) {
    __shared__ int s[256];
    unsigned t = threadIdx.x, base = blockIdx.x * 256;
    s[t] = keys[base + t];
    s[t + 128] = keys[base + t + 128];
    for (unsigned k = 2; k <= (1u << stages); k <<= 1)
        for (unsigned j = k >> 1; j > 0; j >>= 1) {
            __syncthreads();
            unsigned pos = 2 * t - (t & (j - 1));
            bool up = ((base + pos) & k) == 0;
            int a = s[pos], b = s[pos + j];
            if ((a > b) == up) { s[pos] = b; s[pos + j] = a; }
        }
    __syncthreads();
    keys[base + t] = s[t];
    keys[base + t + 128] = s[t + 128];
}
extern "C" __global__ void butterfly(const int *x, int *out, int m) {
    __shared__ int s[128];
    unsigned t = threadIdx.x;
    s[t] = x[blockIdx.x * 128 + t];
    __syncthreads();
    out[blockIdx.x * 128 + t] = s[t ^ m] * 1000 + s[t & m];
}
'''


def test_partner_indices_run_in_lane_groups():
    from cpuify.codegen.llvm_gen import KernelCodegen
    module = parse_ptx(compile_to_ptx(NETWORK_SRC).ptx)
    kc = KernelCodegen(ModuleCodegen(module), lift_optimized(module, module.functions["bitonic_tile"], (128, 1, 1)),
                       (128, 1, 1))
    assert kc.lane_groups
    generic = KernelCodegen(ModuleCodegen(module),
                            lift_optimized(module, module.functions["bitonic_tile"]))
    assert not generic.lane_groups            # specialized code only


def test_lane_groups_match_numpy():
    mod = cpuify.RawModule(code=NETWORK_SRC)
    rng = np.random.default_rng(4)
    keys0 = rng.integers(-1000, 1000, 256 * 6).astype(np.int32)
    for stages in (8, 5):
        ref = keys0.reshape(6, 256).copy()
        k = 1 << stages
        for tile in range(6):           # each run of k keys sorted, direction by (index & k)
            for r in range(0, 256, k):
                run = np.sort(ref[tile, r:r + k])
                ref[tile, r:r + k] = run if ((tile * 256 + r) & k) == 0 else run[::-1]
        for _ in range(2):              # generic, then specialized (lane groups) code
            keys = keys0.copy()
            mod.get_function("bitonic_tile")((6,), (128,), (keys, np.int32(stages)))
            np.testing.assert_array_equal(keys.reshape(6, 256), ref)
    x = rng.integers(0, 1000, 3 * 128).astype(np.int32)
    t = np.arange(128)
    for m in (0, 1, 15, 16, 48, 63, 127):
        ref = (x.reshape(3, 128)[:, t ^ m] * 1000 + x.reshape(3, 128)[:, t & m]).reshape(-1)
        for _ in range(2):
            out = np.zeros_like(x)
            mod.get_function("butterfly")((3,), (128,), (x, out, np.int32(m)))
            np.testing.assert_array_equal(out, ref)


# Shared-memory neighbours through indices clamped to bounds set per block (pathfinder)
CLAMP_SRC = r'''
extern "C" __global__ void neighbours(const int *x, int *out, int n) {
    __shared__ int s[128];
    int t = threadIdx.x, base = blockIdx.x * 120 - 4;
    int lo = base < 0 ? -base : 0;
    int hi = base + 127 >= n ? n - 1 - base : 127;
    int g = min(max(base + t, 0), n - 1);
    s[t] = x[g];
    __syncthreads();
    int w = max(t - 1, lo), e = min(t + 1, hi);
    if (t >= 4 && t < 124 && base + t < n) out[base + t] = s[w] * 10000 + s[t] * 100 + s[e];
}
'''


def test_clamped_shared_indices_match_numpy():
    mod = cpuify.RawModule(code=CLAMP_SRC)
    for n in (120, 250, 361):
        x = np.arange(n, dtype=np.int32) % 97
        i = np.arange(n)
        ref = x[np.maximum(i - 1, 0)] * 10000 + x * 100 + x[np.minimum(i + 1, n - 1)]
        for _ in range(2):              # generic, then specialized code
            out = np.zeros(n, np.int32)
            mod.get_function("neighbours")(((n + 119) // 120,), (128,), (x, out, np.int32(n)))
            np.testing.assert_array_equal(out, ref)


ITEMS_SRC = r'''
// each thread scans 4 consecutive items of a shared tile (CUB-style items per thread):
// the first item's store writes back the value just loaded, so LLVM drops it and the
// stores of the other three form an interleaved group with a gap
extern "C" __global__ void scan_items(const int *in, int *out) {
    __shared__ int s[1024];
    const int base = blockIdx.x * 1024;
    for (int k = 0; k < 4; k++)
        s[k * blockDim.x + threadIdx.x] = in[base + k * blockDim.x + threadIdx.x];
    __syncthreads();
    int acc = 0;
    for (int k = 0; k < 4; k++) {
        acc += s[threadIdx.x * 4 + k];
        s[threadIdx.x * 4 + k] = acc;
    }
    __syncthreads();
    for (int k = 0; k < 4; k++)
        out[base + k * blockDim.x + threadIdx.x] = s[k * blockDim.x + threadIdx.x];
}
'''


def test_items_per_thread_with_a_gap_match_numpy():
    f = cpuify.RawModule(code=ITEMS_SRC).get_function("scan_items")
    x = np.random.default_rng(5).integers(-100, 100, 8 * 1024).astype(np.int32)
    ref = np.cumsum(x.reshape(-1, 4), axis=1).reshape(-1)
    for _ in range(3):                  # generic code, then the code specialized for 256
        out = np.zeros_like(x)
        f((8,), (256,), (x, out))
        np.testing.assert_array_equal(out, ref)


def test_items_per_thread_store_without_scatters():
    from cpuify.codegen import jit
    if not jit.has_avx512():
        pytest.skip("the scatters in question are AVX-512's")
    module = parse_ptx(compile_to_ptx(ITEMS_SRC).ptx)
    gen = ModuleCodegen(module)
    gen.add_kernel(lift_optimized(module, module.functions["scan_items"], (256, 1, 1)), (256, 1, 1))
    asm = jit.emit_assembly(jit.optimize(gen.llvm_text()))
    assert "vpscatter" not in asm
