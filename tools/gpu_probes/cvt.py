"""GPU ground truth for float -> integer conversions (cvt.{rni,rzi,rmi,rpi}.{s8..u64}.{f16,f32,f64})
of special and boundary values.  Writes cvt.npz: for src in f16/f32/f64: in_<src> (raw bits) and
out_<src> [n inputs, 32 combos] (raw bits of the destination, zero-extended to 64), combos in
the order of COMBOS."""
import sys
import numpy as np

RND = ["rni", "rzi", "rmi", "rpi"]
DST = [("s8", "h", 16), ("u8", "h", 16), ("s16", "h", 16), ("u16", "h", 16),
       ("s32", "r", 32), ("u32", "r", 32), ("s64", "l", 64), ("u64", "l", 64)]
COMBOS = [(r, d) for r in RND for d in DST]
SRC = {"f16": ("h", "unsigned short", np.uint16), "f32": ("f", "float", np.uint32),
       "f64": ("d", "double", np.uint64)}


def kernel(src):
    cons, ctype, _ = SRC[src]
    lines = [f'extern "C" __global__ void cvt_{src}(const {ctype} *in, unsigned long long *out, int n) {{',
             "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;",
             f"  {ctype} x = in[i];"]
    for j, (r, (d, dc, bits)) in enumerate(COMBOS):
        t = {"h": "unsigned short", "r": "unsigned", "l": "unsigned long long"}[dc]
        lines.append(f'  {{ {t} y; asm("cvt.{r}.{d}.{src} %0, %1;" : "={dc}"(y) : "{cons}"(x)); '
                     f'out[i * 32 + {j}] = (unsigned long long)y; }}')
    lines.append("}")
    return "\n".join(lines)


def inputs():
    f32 = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5,
                    127.5, 128.0, -128.5, -129.0, 255.5, 256.0, 32767.5, 32768.0, -32768.5, 65535.5,
                    65536.0, 2147483520.0, 2147483648.0, -2147483648.0, -2147483904.0, 4294967040.0,
                    4294967296.0, 9.2233715e18, 9.223372e18, -9.223372e18, -9.2233730e18,
                    1.8446743e19, 1e30, -1e30, 1e-45, -1e-45, -1.0, 0.99999994], np.float32).view(np.uint32)
    f32 = np.concatenate([f32, np.array([0x7fc00001, 0xff800001, 0x7f800001, 0xffffffff], np.uint32)])
    f64 = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5,
                    127.5, 128.0, -128.5, -129.0, 255.5, 256.0, 32767.5, 32768.0, -32768.5, 65535.5,
                    65536.0, 2147483647.4, 2147483647.5, 2147483648.0, -2147483648.4, -2147483648.5,
                    -2147483649.0, 4294967295.4, 4294967295.5, 4294967296.0, 9223372036854774784.0,
                    9223372036854775808.0, -9223372036854775808.0, -9223372036854777856.0,
                    18446744073709549568.0, 18446744073709551616.0, 1e300, -1e300, 5e-324, -5e-324,
                    -1.0], np.float64).view(np.uint64)
    f64 = np.concatenate([f64, np.array([0x7ff8000000000001, 0xfff0000000000001, 0xffffffffffffffff], np.uint64)])
    f16 = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, 127.5, 128.0,
                    -128.5, 255.5, 256.0, 32767.0, 32768.0, 65504.0, -65504.0, 6e-8, -1.0], np.float16).view(np.uint16)
    f16 = np.concatenate([f16, np.array([0x7e01, 0xfc01], np.uint16)])
    return {"f16": f16, "f32": f32, "f64": f64}


def main(outdir):
    import cupy as cp
    res = {}
    for src, x in inputs().items():
        mod = cp.RawModule(code=kernel(src), options=("-arch=sm_90",))
        out = cp.zeros((x.size, 32), dtype=cp.uint64)
        mod.get_function(f"cvt_{src}")((1,), (64,), (cp.asarray(x), out, np.int32(x.size)))
        cp.cuda.runtime.deviceSynchronize()
        res[f"in_{src}"] = x
        res[f"out_{src}"] = out.get()
    np.savez(outdir + "/cvt.npz", **res)
    print("cvt ok", {k: v.shape for k, v in res.items()})


if __name__ == "__main__":
    main(sys.argv[1])
