"""Narrow signed loads into 64-bit registers that hold addresses.

PTX extends a value loaded into a register wider than the load's type: sign-extends for
`.s` types (`ld.global.s32 %rd9, [..]` of -1 gives %rd9 = -1).  nvcc emits exactly that
for `int p = list[k]; if (p >= 0 && mask[p] == 0) ...`: the index is loaded as s32 straight
into the 64-bit register that is then added to `mask`, and the guard is `setp.lt.s64`.
Because the register flows into an address, the code generator gives it LLVM type `ptr`;
it used to widen such loads with a zero extension, so -1 became 2^32 - 1, the guard
passed, and the kernel read 4 GiB past `mask` (SHOC QTC's `trim_ungrouped_pnts_indr_array`
stopped with cudaErrorIllegalAddress that way; issue #16/#17).  Checked against NumPy and
the reference interpreter, in the generic code and the code specialized for the block shape.
"""

from __future__ import annotations

import numpy as np

import cpuify
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.interp import interpret_kernel

# one thread per list entry: -1/-5 entries (and entries whose sign comes from a 16-bit
# load) must fail the s64 guard; the others index `mask`.  `shift` (an ld.param.s32 into an
# address register, lifted as a 4-byte parameter and a sign extension) moves the index back
# by a negative amount: the parameter after it (`after`) must not leak into its upper half.
WIDE_LOADS = r"""
.version 8.0
.target sm_75
.address_size 64
.visible .entry wide(.param .u64 idx_p, .param .u64 idx16_p, .param .u64 mask_p,
                     .param .u64 out_p, .param .u32 shift, .param .u32 after) {
    .reg .pred %p<4>;
    .reg .b16 %rs<4>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<24>;
    ld.param.u64 %rd1, [idx_p];
    ld.param.u64 %rd2, [mask_p];
    ld.param.u64 %rd3, [out_p];
    ld.param.u64 %rd15, [idx16_p];
    cvta.to.global.u64 %rd4, %rd1;
    cvta.to.global.u64 %rd5, %rd2;
    cvta.to.global.u64 %rd6, %rd3;
    cvta.to.global.u64 %rd16, %rd15;
    mov.u32 %r1, %tid.x;
    mul.wide.s32 %rd7, %r1, 4;
    add.s64 %rd8, %rd4, %rd7;
    ld.global.s32 %rd9, [%rd8];
    mov.u32 %r2, 7;
    setp.lt.s64 %p1, %rd9, 0;
    @%p1 bra S16;
    add.s64 %rd10, %rd5, %rd9;
    ld.global.u8 %rs1, [%rd10];
    cvt.u32.u16 %r2, %rs1;
S16:
    mul.wide.s32 %rd17, %r1, 2;
    add.s64 %rd18, %rd16, %rd17;
    ld.global.s16 %rd19, [%rd18];
    mov.u32 %r3, 9;
    setp.lt.s64 %p2, %rd19, 0;
    @%p2 bra SHIFT;
    add.s64 %rd20, %rd5, %rd19;
    ld.global.u8 %rs2, [%rd20];
    cvt.u32.u16 %r3, %rs2;
SHIFT:
    ld.param.s32 %rd21, [shift];
    cvt.u64.u32 %rd22, %r1;
    add.s64 %rd12, %rd5, %rd22;
    add.s64 %rd13, %rd12, %rd21;
    mov.u32 %r4, 5;
    setp.lt.u32 %p3, %r1, 2;
    @%p3 bra DONE;
    ld.global.u8 %rs3, [%rd13];
    cvt.u32.u16 %r4, %rs3;
DONE:
    mul.lo.s32 %r5, %r3, 100;
    mad.lo.s32 %r6, %r4, 10000, %r5;
    add.s32 %r7, %r6, %r2;
    add.s64 %rd11, %rd6, %rd7;
    st.global.u32 [%rd11], %r7;
    ret;
}
"""


def _wide_expected(idx: np.ndarray, idx16: np.ndarray, mask: np.ndarray, shift: int) -> np.ndarray:
    t = np.arange(len(idx))
    mask = mask.astype(np.int64)
    a = np.where(idx < 0, 7, mask[np.maximum(idx, 0)])
    b = np.where(idx16 < 0, 9, mask[np.maximum(idx16, 0)])
    c = np.where(t < 2, 5, mask[np.maximum(t + shift, 0)])
    return (c * 10000 + b * 100 + a).astype(np.int32)


def test_signed_narrow_loads_into_address_registers() -> None:
    rng = np.random.default_rng(3)
    n = 40
    mask = rng.integers(0, 100, 64).astype(np.int8)
    idx = rng.integers(0, 64, n).astype(np.int32)
    idx[::3] = -1
    idx[1::7] = -5
    idx16 = rng.integers(0, 64, n).astype(np.int16)
    idx16[::4] = -1
    idx16[2::5] = -300
    shift, after = -2, 0x7FFFFFFF
    ref = _wide_expected(idx, idx16, mask, shift)

    def args(out: np.ndarray) -> tuple:
        return (idx, idx16, mask, out, np.int32(shift), np.uint32(after))

    f = cpuify.RawModule(ptx=WIDE_LOADS).get_function("wide")
    for _ in range(2):              # generic code, then the specialized block shape
        out = np.zeros(n, np.int32)
        f((1,), (n,), args(out))
        np.testing.assert_array_equal(out, ref)
    out = np.zeros(n, np.int32)
    interpret_kernel(WIDE_LOADS, "wide", (1,), (n,), args(out))
    np.testing.assert_array_equal(out, ref)


# the shape of a QT-clustering step (our own kernel): per seed, the block scans the seed's
# neighbour list (padded with -1) in a loop whose trip count depends on the thread, skips
# neighbours already taken, and reduces the nearest one through shared memory and barriers
NEAREST_FREE = r"""
extern "C" __global__ void nearest_free(const int *nbrs, const char *taken, const float *dist,
                                        int *best, int max_degree, int n)
{
    __shared__ float sd[64];
    __shared__ int si[64];
    int tid = threadIdx.x;
    for (int seed = blockIdx.x; seed < n; seed += gridDim.x) {
        float mind = 1e30f;
        int mini = -1;
        for (int i = 0; i + tid < max_degree; i += blockDim.x) {
            int p = nbrs[seed * max_degree + i + tid];
            if (p >= 0 && 0 == taken[p]) {
                float d = dist[seed * n + p];
                if (d < mind || (d == mind && p < mini)) { mind = d; mini = p; }
            }
        }
        sd[tid] = mind;
        si[tid] = mini;
        __syncthreads();
        if (tid == 0) {
            for (int j = 1; j < blockDim.x; j++)
                if (si[j] >= 0 && (mini < 0 || sd[j] < mind || (sd[j] == mind && si[j] < mini))) {
                    mind = sd[j];
                    mini = si[j];
                }
            best[seed] = mini;
        }
        __syncthreads();
    }
}
"""


def _nearest_free_case(n: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    pts = rng.random((n, 2))
    dist = np.sqrt(((pts[:, None, :] - pts[None, :, :]) ** 2).sum(-1)).astype(np.float32)
    near = [np.nonzero((dist[i] <= 0.5) & (np.arange(n) != i))[0] for i in range(n)]
    max_degree = max(len(x) for x in near) + 5          # every list ends in -1s
    nbrs = -np.ones((n, max_degree), np.int32)
    for i, x in enumerate(near):
        nbrs[i, :len(x)] = rng.permutation(x)
    taken = (rng.random(n) < 0.3).astype(np.int8)
    ref = np.full(n, -1, np.int32)
    for i, x in enumerate(near):
        free = [p for p in x if not taken[p]]
        if free:
            ref[i] = min(free, key=lambda p: (dist[i, p], p))
    return nbrs, taken, dist, max_degree, ref


def test_neighbour_lists_padded_with_minus_one() -> None:
    ptx = compile_to_ptx(NEAREST_FREE).ptx
    assert "ld.global.s32 \t%rd" in ptx or "ld.global.s32 %rd" in ptx   # the pattern nvcc emits
    n = 160
    nbrs, taken, dist, max_degree, ref = _nearest_free_case(n, 11)
    assert max_degree > 64                   # the loop runs a second, partial round
    f = cpuify.RawModule(ptx=ptx).get_function("nearest_free")
    for _ in range(2):
        best = np.full(n, -7, np.int32)
        f((8,), (64,), (nbrs, taken, dist, best, np.int32(max_degree), np.int32(n)))
        np.testing.assert_array_equal(best, ref)
    m = 24                                   # the interpreter on a smaller case
    nbrs, taken, dist, max_degree, ref = _nearest_free_case(m, 12)
    best = np.full(m, -7, np.int32)
    interpret_kernel(ptx, "nearest_free", (4,), (64,),
                     (nbrs, taken, dist, best, np.int32(max_degree), np.int32(m)))
    np.testing.assert_array_equal(best, ref)
