"""GPU ground truth for warp semantics: partial-mask shuffles and legacy warp-synchronous code.
Writes warp.npz (per case: out[lane] per launch) and warp.txt."""
import sys
import numpy as np
import cupy as cp

SRC = r'''
extern "C" __global__ void shfl_cases(int *out, int which) {
    int lane = threadIdx.x & 31;
    int v = lane * 10 + 100;
    int w = lane * 1000 + 7;
    int r = -1;
    switch (which) {
    case 0: // all active; two halves each shuffle with its own half-mask, src in the other half
        if (lane < 16) r = __shfl_sync(0x0000ffffu, v, lane + 16);
        else r = __shfl_sync(0xffff0000u, w, lane - 16);
        break;
    case 1: // only lanes < 16 active; src lane + 16 is inactive (exited)
        if (lane >= 16) return;
        r = __shfl_sync(0x0000ffffu, v, lane + 16);
        break;
    case 2: // only lanes < 16 active, shfl_down by 8: lanes 8..15 read 16..23 (inactive)
        if (lane >= 16) return;
        r = __shfl_down_sync(0x0000ffffu, v, 8);
        break;
    case 3: // only lanes >= 16 active, shfl_up by 4: lanes 16..19 read 12..15 (inactive)
        if (lane < 16) return;
        r = __shfl_up_sync(0xffff0000u, v, 4);
        break;
    case 4: // only even lanes active, xor 1: source odd lanes inactive
        if (lane & 1) return;
        r = __shfl_xor_sync(0x55555555u, v, 1);
        break;
    case 5: // all active, even/odd in two branches, each reads a lane of the other branch
        if (lane & 1) r = __shfl_sync(0xaaaaaaaau, w, lane - 1);
        else r = __shfl_sync(0x55555555u, v, lane + 1);
        break;
    case 6: // only lanes < 16 active; width 8 shuffle idx 5 (src in own segment, active)
        if (lane >= 16) return;
        r = __shfl_sync(0x0000ffffu, v, 5, 8);
        break;
    case 7: // lanes < 16 active; width 16 shfl_down 4: lanes 12..15 keep own (segment end)
        if (lane >= 16) return;
        r = __shfl_down_sync(0x0000ffffu, v, 4, 16);
        break;
    case 8: // all lanes active but mask names only lanes 0..7; lanes 0..7 read lanes 8..15 (active, not in mask)
        if (lane < 8) r = __shfl_sync(0x000000ffu, v, lane + 8);
        else { r = __shfl_sync(0xffffff00u, w, lane); }
        break;
    case 9: // lanes < 20 active; full-width shfl idx 25 with mask of active lanes
        if (lane >= 20) return;
        r = __shfl_sync(0x000fffffu, v, 25);
        break;
    case 10: // ballot/any/all with partial masks, lanes < 16 active, predicate lane odd
        if (lane >= 16) return;
        r = (int)__ballot_sync(0x0000ffffu, lane & 1);
        break;
    case 11: // activemask in divergent code
        if (lane % 3 == 0) r = (int)__activemask(); else r = (int)__activemask() + 1;
        break;
    }
    out[threadIdx.x] = r;
}

// legacy warp-synchronous reduction (no __syncwarp in the last warp)
extern "C" __global__ void reduce_legacy(const float *in, float *out, int n) {
    __shared__ float sdata[256];
    unsigned tid = threadIdx.x;
    unsigned i = blockIdx.x * 512 + tid;
    float s = 0.f;
    if (i < n) s += in[i];
    if (i + 256 < n) s += in[i + 256];
    sdata[tid] = s;
    __syncthreads();
    for (unsigned k = 128; k > 32; k >>= 1) {
        if (tid < k) sdata[tid] += sdata[tid + k];
        __syncthreads();
    }
    if (tid < 32) {
        volatile float *v = sdata;
        v[tid] += v[tid + 32]; v[tid] += v[tid + 16]; v[tid] += v[tid + 8];
        v[tid] += v[tid + 4]; v[tid] += v[tid + 2]; v[tid] += v[tid + 1];
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

// legacy warp scan through volatile shared memory (inclusive), one scan per warp
extern "C" __global__ void scan_legacy(const int *in, int *out) {
    __shared__ int s[2 * 256];
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    volatile int *p = s + warp * 64;
    p[lane] = 0;
    int idx = 32 + lane;
    p[idx] = in[blockIdx.x * blockDim.x + tid];
    p[idx] += p[idx - 1]; p[idx] += p[idx - 2]; p[idx] += p[idx - 4];
    p[idx] += p[idx - 8]; p[idx] += p[idx - 16];
    out[blockIdx.x * blockDim.x + tid] = p[idx];
}

// legacy: lane 0 writes, other lanes read without sync (broadcast through volatile)
extern "C" __global__ void bcast_legacy(const int *in, int *out) {
    __shared__ volatile int s[8];
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (lane == 0) s[warp] = in[blockIdx.x * 8 + warp] * 3;
    out[blockIdx.x * blockDim.x + tid] = s[warp] + lane;
}
'''

def main():
    mod = cp.RawModule(code=SRC, options=("-arch=sm_90",))
    res, txt = {}, []
    f = mod.get_function("shfl_cases")
    for which in range(12):
        out = cp.full(32, -1, dtype=cp.int32)
        f((1,), (32,), (out, np.int32(which)))
        cp.cuda.runtime.deviceSynchronize()
        res[f"shfl_{which}"] = out.get()
        txt.append(f"shfl case {which}: {out.get().tolist()}")
    rng = np.random.default_rng(5)
    x = rng.integers(-50, 50, 512 * 40 + 77).astype(np.float32)
    out = cp.zeros(41, dtype=cp.float32)
    mod.get_function("reduce_legacy")((41,), (256,), (cp.asarray(x), out, np.int32(x.size)))
    res["reduce_in"] = x; res["reduce_out"] = out.get()
    exp = np.array([x[b*512:(b+1)*512].sum() for b in range(41)], np.float32)
    txt.append(f"reduce_legacy equal to numpy: {np.array_equal(out.get(), exp)}")
    xi = rng.integers(-100, 100, 256 * 8).astype(np.int32)
    oi = cp.zeros_like(cp.asarray(xi))
    mod.get_function("scan_legacy")((8,), (256,), (cp.asarray(xi), oi))
    res["scan_in"] = xi; res["scan_out"] = oi.get()
    exp = np.cumsum(xi.reshape(-1, 32), axis=1).ravel()
    txt.append(f"scan_legacy equal to numpy: {np.array_equal(oi.get(), exp)}")
    xb = rng.integers(-100, 100, 4 * 8).astype(np.int32)
    ob = cp.zeros(4 * 256, dtype=cp.int32)
    mod.get_function("bcast_legacy")((4,), (256,), (cp.asarray(xb), ob))
    res["bcast_in"] = xb; res["bcast_out"] = ob.get()
    t = np.arange(1024); exp = xb[(t // 256) * 8 + (t % 256) // 32] * 3 + (t & 31)
    txt.append(f"bcast_legacy equal to expected: {np.array_equal(ob.get(), exp)}")
    np.savez(sys.argv[1] + "/warp.npz", **res)
    open(sys.argv[1] + "/warp.txt", "w").write("\n".join(txt) + "\n")
    print("\n".join(txt))

main()
