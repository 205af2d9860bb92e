"""Entry segments prefetch the next block's lines (ThreadLoopPlans.next_block_prefetches,
SegmentEmitter.prefetch_next_block): in code specialized for a block shape, a kernel with
barriers whose global accesses are addressed from thread and block indices, parameters and
constants prefetches, after its entry segment's thread loop, the lines those accesses will
touch in block blockIdx.x + 1 (prefetchw for stores), which the worker usually runs next.
Checked: which accesses are chosen (and where not), the calls in the LLVM IR, the switch,
and multi-level scans (the suite's scan workload, ints and floats) against NumPy, with
prefetches running past the arrays' ends."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.codegen.llvm_gen import KernelCodegen, ModuleCodegen
from cpuify.compiler import lift_and_optimize
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.transforms.pass_manager import PipelineOptions

# the suite's tile scan (benchmarks/suite/workloads/scan.py), for a type T
SCAN = r'''
#define THREADS 256
#define ITEMS 4
#define TILE (THREADS * ITEMS)
extern "C" __global__ void scan_tiles(const T *__restrict__ in, T *__restrict__ out,
                                      T *__restrict__ tile_sums, int n) {
    __shared__ T s[TILE];
    __shared__ T t[THREADS];
    const int tid = threadIdx.x;
    const int base = blockIdx.x * TILE;
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {
        int i = base + k * THREADS + tid;
        s[k * THREADS + tid] = i < n ? in[i] : 0;
    }
    __syncthreads();
    T acc = 0;
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {
        acc += s[tid * ITEMS + k];
        s[tid * ITEMS + k] = acc;
    }
    t[tid] = acc;
    __syncthreads();
    for (int off = 1; off < THREADS; off <<= 1) {
        T v = tid >= off ? t[tid - off] : 0;
        __syncthreads();
        t[tid] += v;
        __syncthreads();
    }
    const T excl = tid > 0 ? t[tid - 1] : 0;
#pragma unroll
    for (int k = 0; k < ITEMS; k++)
        s[tid * ITEMS + k] += excl;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {
        int i = base + k * THREADS + tid;
        if (i < n) out[i] = s[k * THREADS + tid];
    }
    if (tid == THREADS - 1) tile_sums[blockIdx.x] = t[THREADS - 1];
}
extern "C" __global__ void add_offsets(T *__restrict__ out, const T *__restrict__ scanned_sums,
                                       int n) {
    const int b = blockIdx.x + 1;
    const T off = scanned_sums[b - 1];
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {
        int i = b * TILE + k * THREADS + threadIdx.x;
        if (i < n) out[i] += off;
    }
}
'''

OTHERS = r'''
// a column of blocks: the addresses follow blockIdx.y only
extern "C" __global__ void by_rows(const float *x, float *y, int w) {
    __shared__ float row[128];
    row[threadIdx.x] = x[blockIdx.y * w + threadIdx.x];
    __syncthreads();
    y[blockIdx.y * w + threadIdx.x] = row[127 - threadIdx.x];
}
// an address read from memory, and a volatile one
extern "C" __global__ void through_index(const int *idx, const float *x, volatile float *y) {
    __shared__ float v[128];
    v[threadIdx.x] = x[idx[blockIdx.x * 128 + threadIdx.x]];
    __syncthreads();
    y[blockIdx.x * 128 + threadIdx.x] = v[127 - threadIdx.x];
}
// a block-uniform loop with barriers: its loads follow the counter (the loop's own
// prefetches, test_prefetch.py); the store after it is the block's
extern "C" __global__ void tiles(const float *a, float *c, int steps) {
    __shared__ float t[128];
    float s = 0.0f;
    for (int k = 0; k < steps; k++) {
        t[threadIdx.x] = a[(k * gridDim.x + blockIdx.x) * 128 + threadIdx.x];
        __syncthreads();
        s += t[127 - threadIdx.x];
        __syncthreads();
    }
    c[blockIdx.x * 128 + threadIdx.x] = s;
}
'''


def _ptx(src):
    return parse_ptx(compile_to_ptx(src).ptx)


@pytest.fixture(scope="module")
def scan_ptx():
    return _ptx("#define T int\n" + SCAN)


@pytest.fixture(scope="module")
def others_ptx():
    return _ptx(OTHERS)


def _chosen(ptx, kernel, block):
    """[(op name, PTX line, probe threads, for writing)] the kernel specialized for `block`
    (None: generic code) prefetches for the next block."""
    lifted = lift_and_optimize(ptx, ptx.functions[kernel], PipelineOptions())[0]
    kc = KernelCodegen(ModuleCodegen(ptx), lifted, block)
    return [(op.name, op.attributes.get("line"), len(p), w) for op, p, w in kc.block_prefetches]


def test_scan_tiles_prefetches_its_loads_and_stores(scan_ptx):
    found = _chosen(scan_ptx, "scan_tiles", (256, 1, 1))
    # in[i] for the 4 items (256 ints: 16 lines, probed at every 16th thread and the
    # last, as the row may straddle a line), out[i] for writing, tile_sums[blockIdx.x] once
    assert [(name, n, w) for name, _, n, w in found] == \
        [("ptx.ld", 17, False)] * 4 + [("ptx.st", 17, True)] * 4 + [("ptx.st", 1, True)]
    assert sum(n for _, _, n, _ in found) <= KernelCodegen.NEXT_BLOCK_MAX_PREFETCHES


def test_where_nothing_is_prefetched_for_the_next_block(scan_ptx, others_ptx):
    # generic code (no block shape), a kernel without barriers (its rows are streamed)
    assert _chosen(scan_ptx, "scan_tiles", None) == []
    assert _chosen(scan_ptx, "add_offsets", (256, 1, 1)) == []
    # addresses following blockIdx.y only
    assert _chosen(others_ptx, "by_rows", (128, 1, 1)) == []
    # a block whose traffic is not all known ahead: an address loaded from memory; loads
    # following a loop's counter (the loop's own prefetches, test_prefetch.py)
    assert _chosen(others_ptx, "through_index", (128, 1, 1)) == []
    assert _chosen(others_ptx, "tiles", (128, 1, 1)) == []


def test_switched_off(scan_ptx, monkeypatch):
    monkeypatch.setenv("CPUIFY_NEXT_BLOCK_PREFETCH", "0")
    assert _chosen(scan_ptx, "scan_tiles", (256, 1, 1)) == []
    from cpuify.compiler import toolchain_key
    off = toolchain_key()
    monkeypatch.delenv("CPUIFY_NEXT_BLOCK_PREFETCH")
    assert toolchain_key() != off       # not the cached code of the other setting


def _segment(llvm_text, name):
    out, inside = [], False
    for line in llvm_text.splitlines():
        if line.startswith("define") and (f'@"{name}"(' in line or f"@{name}(" in line):
            inside = True
        elif inside and line.startswith("}"):
            break
        elif inside:
            out.append(line)
    return out


@pytest.mark.parametrize("split, segment", [(True, 3), (False, 0)])
def test_entry_segment_calls_prefetch_for_the_next_block(tmp_path, capsys, split, segment):
    """Raw LLVM IR: the segment that loads the tile's last row issues 68 read prefetches
    (in) and 69 prefetchw (out, tile_sums), from blockIdx.x + 1, after each of its two
    thread loops (the copy where the range branches are decided, the general one); no other
    segment prefetches.  With split-row-streams the tile's four rows are loaded in four
    passes (soft barriers 1-3): the last one, segment 3, prefetches, after the block's own
    loads, not between them; without it, the entry segment."""
    from cpuify.cli.main import main
    src = tmp_path / "scan.cu"
    src.write_text("#define T int\n" + SCAN)
    off = [] if split else ["--disable-pass=split-row-streams"]
    assert main(["llvm", "--raw", "--block", "256", "--kernel", "scan_tiles", *off, str(src)]) == 0
    text = capsys.readouterr().out
    entry = _segment(text, f"cpuify_seg_scan_tiles_{segment}")
    calls = [ln for ln in entry if "call" in ln and "llvm.prefetch.p0" in ln]
    assert sum(", i32 0, i32 3, i32 1)" in c for c in calls) == 2 * 68
    assert sum(", i32 1, i32 3, i32 1)" in c for c in calls) == 2 * 69
    assert any(ln.strip().endswith("= add i32 %\"bx\", 1") for ln in entry)
    assert text.count('@"llvm.prefetch.p0"(') - 1 == len(calls)    # (one declaration)
    assert main(["explain", "--block", "256", "--kernel", "scan_tiles", *off, str(src)]) == 0
    out = capsys.readouterr().out
    assert "prefetches 137 line(s) of the accesses" in out
    where = "the kernel's start" if segment == 0 else f"sync {segment}"
    line = next(ln for ln in out.splitlines() if "for the next block" in ln)
    assert f"segment from {where}:" in line


def _levels(n, tile=1024):
    lv = [n]
    while lv[-1] > tile:
        lv.append((lv[-1] + tile - 1) // tile)
    return lv


def _scan(mod, x):
    """The suite's multi-level scan (run_cpuify) of x."""
    scan, add = mod.get_function("scan_tiles"), mod.get_function("add_offsets")
    lv = _levels(len(x))
    outs = [np.empty(m, x.dtype) for m in lv]
    sums = [np.empty((m + 1023) // 1024, x.dtype) for m in lv]
    src = x
    for j, m in enumerate(lv):
        scan(((m + 1023) // 1024,), (256,), (src, outs[j], sums[j], np.int32(m)))
        src = sums[j]
    for j in range(len(lv) - 2, -1, -1):
        tiles = (lv[j] + 1023) // 1024
        if tiles > 1:
            add((tiles - 1,), (256,), (outs[j], outs[j + 1], np.int32(lv[j])))
    return outs[0], sums[0]


@pytest.mark.parametrize("n", [1, 1000, 1024, 5000, 1 << 20, 3_000_001])
def test_int_scan_matches_cumsum(n):
    mod = cpuify.RawModule(code="#define T int\n" + SCAN)
    x = np.random.default_rng(n).integers(-8, 8, n, dtype=np.int32)
    for _ in range(2):              # generic code, then the code for 256-thread blocks
        y, tile_sums = _scan(mod, x)
        np.testing.assert_array_equal(y, np.cumsum(x, dtype=np.int32))
        pad = np.zeros(len(tile_sums) * 1024, np.int32)
        pad[:n] = x
        np.testing.assert_array_equal(tile_sums, pad.reshape(-1, 1024).sum(1, dtype=np.int32))


def _tile_scan_f32(x):
    """One tile of the kernel's float scan, in its order: each thread's 4 items in turn,
    Hillis-Steele over the 256 thread totals, each item plus the sum of the threads before."""
    s = np.zeros(1024, np.float32)
    s[:len(x)] = x
    items = s.reshape(256, 4).copy()
    for k in range(1, 4):
        items[:, k] = items[:, k - 1] + items[:, k]
    t = items[:, 3].copy()
    off = 1
    while off < 256:
        v = np.zeros(256, np.float32)
        v[off:] = t[:-off]
        t = t + v
        off *= 2
    excl = np.concatenate([np.zeros(1, np.float32), t[:-1]])
    return (items + excl[:, None]).reshape(-1)[:len(x)], t[-1]


@pytest.mark.parametrize("n", [700, 1024 * 3 + 5])
def test_float_tiles_match_the_kernels_order(n):
    """Floats: each tile bit for bit as the kernel's order computes it."""
    mod = cpuify.RawModule(code="#define T float\n" + SCAN)
    x = np.random.default_rng(n).random(n, dtype=np.float32)
    f = mod.get_function("scan_tiles")
    tiles = (n + 1023) // 1024
    for _ in range(2):
        out = np.empty(n, np.float32)
        sums = np.empty(tiles, np.float32)
        f((tiles,), (256,), (x, out, sums, np.int32(n)))
        for b in range(tiles):
            want, total = _tile_scan_f32(x[b * 1024:(b + 1) * 1024])
            np.testing.assert_array_equal(out[b * 1024:(b + 1) * 1024], want)
            assert sums[b] == total


IN_PLACE = r'''
// in place: each block sorts its 256-key tile of d (odd-even transposition, a barrier per
// phase); loads and stores address the same elements
extern "C" __global__ void sort_tiles(int *d) {
    __shared__ int s[256];
    const unsigned t = threadIdx.x, base = blockIdx.x * 256;
    s[t] = d[base + t];
    for (int phase = 0; phase < 256; phase++) {
        __syncthreads();
        const unsigned i = 2 * (t / 2) + (phase & 1);
        int a = 0, b = 0;
        if ((t & 1) == 0 && i + 1 < 256) { a = s[i]; b = s[i + 1]; }
        __syncthreads();
        if ((t & 1) == 0 && i + 1 < 256 && a > b) { s[i] = b; s[i + 1] = a; }
    }
    __syncthreads();
    d[base + t] = s[t];
}
// not in place: the tile is written one element further on
extern "C" __global__ void shift_tiles(int *d) {
    __shared__ int s[128];
    s[threadIdx.x] = d[blockIdx.x * 128 + threadIdx.x];
    __syncthreads();
    d[blockIdx.x * 128 + threadIdx.x + 1] = s[127 - threadIdx.x];
}
// in place, and one more store elsewhere: the other array's lines are not the block's
extern "C" __global__ void negate_and_count(float *x, int *count) {
    __shared__ float s[128];
    s[threadIdx.x] = x[blockIdx.x * 128 + threadIdx.x];
    __syncthreads();
    x[blockIdx.x * 128 + threadIdx.x] = -s[127 - threadIdx.x];
    if (threadIdx.x == 0) count[blockIdx.x] = 128;
}
'''


@pytest.fixture(scope="module")
def in_place_ptx():
    return _ptx(IN_PLACE)


def test_in_place_updates_are_not_prefetched(in_place_ptx):
    """A kernel whose global stores write exactly the elements its loads read (the access
    analysis' affine addresses): no next-block prefetch, and the plan says why."""
    lifted = lift_and_optimize(in_place_ptx, in_place_ptx.functions["sort_tiles"],
                               PipelineOptions())[0]
    kc = KernelCodegen(ModuleCodegen(in_place_ptx), lifted, (256, 1, 1))
    assert kc.block_prefetches == [] and kc.in_place_update


def test_other_updates_keep_their_prefetches(in_place_ptx):
    # stores one element further on: 128 ints are 8 or 9 lines, loads and stores apart
    found = _chosen(in_place_ptx, "shift_tiles", (128, 1, 1))
    assert [(name, n, w) for name, _, n, w in found] == [("ptx.ld", 9, False), ("ptx.st", 9, True)]
    # in place, but with a store to another array
    found = _chosen(in_place_ptx, "negate_and_count", (128, 1, 1))
    assert [(name, n, w) for name, _, n, w in found] == \
        [("ptx.ld", 9, True), ("ptx.st", 1, True)]


def test_in_place_explained_and_sorted(tmp_path, capsys):
    """explain says why the entry segment prefetches nothing; the tiles are sorted (vs
    NumPy), on blocks of the specialized code (the kernel runs twice with one shape)."""
    from cpuify.cli.main import main
    src = tmp_path / "inplace.cu"
    src.write_text(IN_PLACE)
    assert main(["explain", "--block", "256", "--kernel", "sort_tiles", str(src)]) == 0
    text = capsys.readouterr().out
    assert "no prefetches for the next block: the kernel's global stores write the " \
           "elements its global loads read (an in-place update)" in text
    assert "for the next block (blockIdx.x + 1)" not in text
    f = cpuify.RawModule(code=IN_PLACE).get_function("sort_tiles")
    for blocks in (1, 7):
        for _ in range(2):
            d = np.random.default_rng(blocks).integers(-1000, 1000, blocks * 256, dtype=np.int32)
            want = np.sort(d.reshape(blocks, 256), axis=1).reshape(-1)
            f((blocks,), (256,), (d,))
            np.testing.assert_array_equal(d, want)


# the suite's hotspot stencil: halo columns and rows loaded under `if`s on one thread index
HOTSPOT = r'''
extern "C" __global__ void hotspot(const float *tin, const float *power, float *tout, int nx,
                                   int ny) {
    __shared__ float t[18][18];
    int tx = threadIdx.x, ty = threadIdx.y;
    int x = blockIdx.x * 16 + tx, y = blockIdx.y * 16 + ty;
    int xc = min(x, nx - 1), yc = min(y, ny - 1);
    const float *row = tin + (size_t)yc * nx;
    t[ty + 1][tx + 1] = row[xc];
    if (tx == 0)  t[ty + 1][0]  = row[max(xc - 1, 0)];
    if (tx == 15) t[ty + 1][17] = row[min(xc + 1, nx - 1)];
    if (ty == 0)  t[0][tx + 1]  = tin[(size_t)max(yc - 1, 0) * nx + xc];
    if (ty == 15) t[17][tx + 1] = tin[(size_t)min(yc + 1, ny - 1) * nx + xc];
    __syncthreads();
    if (x < nx && y < ny) {
        float c = t[ty + 1][tx + 1];
        size_t i = (size_t)y * nx + x;
        tout[i] = c + 0.2f * (power[i] + t[ty][tx + 1] + t[ty + 2][tx + 1] + t[ty + 1][tx]
                              + t[ty + 1][tx + 2] - 4.0f * c);
    }
}
'''


@pytest.mark.parametrize("disabled", [(), ("thread-index-ranges",)])
def test_halo_accesses_probe_only_their_threads(disabled):
    ptx = _ptx(HOTSPOT)
    lifted = lift_and_optimize(ptx, ptx.functions["hotspot"], PipelineOptions(disabled=frozenset(disabled)),
                               (16, 16, 1))[0]
    kc = KernelCodegen(ModuleCodegen(ptx), lifted, (16, 16, 1))
    found = [(op.name, len(p), w) for op, p, w in kc.block_prefetches]
    if not disabled:
        # the tile (16 rows, two probes each: 64 bytes may straddle a line), the column under
        # tx == 0 and the one under tx == 15 (one thread a row), the rows under ty == 0 and
        # ty == 15 (one row), then power[i] and tout[i] (for writing): 132 lines of 160
        assert found == [("ptx.ld", 32, False), ("ptx.ld", 16, False), ("ptx.ld", 16, False),
                         ("ptx.ld", 2, False), ("ptx.ld", 2, False), ("ptx.ld", 32, False),
                         ("ptx.st", 32, True)]
    else:
        # without the marks the halo accesses are probed for every thread and take the
        # budget: power[i] and tout[i] get none
        assert found == [("ptx.ld", 32, False)] * 5
    assert sum(n for _, n, _ in found) <= KernelCodegen.NEXT_BLOCK_MAX_PREFETCHES


@pytest.mark.parametrize("nx,ny", [(40, 24), (33, 50)])
def test_hotspot_matches_numpy(nx, ny):
    # partial edge blocks; the last blocks' prefetches run past the arrays' ends
    rng = np.random.default_rng(nx * ny)
    tin = rng.random((ny, nx), dtype=np.float32)
    power = rng.random((ny, nx), dtype=np.float32)
    tp = np.pad(tin.astype(np.float64), 1, mode="edge")
    c = tp[1:-1, 1:-1]
    ref = c + 0.2 * (power + tp[:-2, 1:-1] + tp[2:, 1:-1] + tp[1:-1, :-2] + tp[1:-1, 2:] - 4.0 * c)
    f = cpuify.RawModule(code=HOTSPOT).get_function("hotspot")
    for _ in range(2):          # the second launch runs the code specialized for the shape
        out = np.zeros((ny, nx), np.float32)
        f((-(-nx // 16), -(-ny // 16)), (16, 16), (tin, power, out, np.int32(nx), np.int32(ny)))
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


# warp-striped loads (CUB's BlockLoad: a warp's items contiguous, `tid & ~31` and `tid & 31`):
# the entry segment runs its threads in lane groups, and the next block's addresses are
# computed for probe threads outside that loop (they referenced the lane loop's variables:
# LLVM's verifier refused the specialized module, "Instruction does not dominate all uses")
WARP_STRIPED = r'''
extern "C" __global__ void warp_striped(const int *in, int *out) {
    __shared__ int s[256 * 9];
    int tid = threadIdx.x;
    int warp = tid & ~31, lane = tid & 31;
    const int *base = in + blockIdx.x * 256 * 9;
    for (int k = 0; k < 9; k++) s[warp * 9 + lane + k * 32] = base[warp * 9 + lane + k * 32];
    __syncthreads();
    int acc = 0;
    for (int k = 0; k < 9; k++) acc += s[tid * 9 + k];
    out[blockIdx.x * 256 + tid] = acc;
}
'''


def test_warp_striped_loads_in_lane_groups(run_twice):
    blocks = 37
    x = np.random.default_rng(7).integers(-1000, 1000, blocks * 256 * 9).astype(np.int32)
    out = np.empty(blocks * 256, np.int32)
    mod = cpuify.RawModule(code=WARP_STRIPED)
    generic, specialized = run_twice(mod, "warp_striped", (blocks,), (256,), (x, out), out)
    want = x.reshape(-1, 9).sum(axis=1)
    np.testing.assert_array_equal(generic, want)
    np.testing.assert_array_equal(specialized, want)
