"""GPU ground truth: min/max of signed zeros and NaNs, rcp/div/sqrt with directed rounding on
special values, and whether ptxas fuses unrounded mul + add/sub into fma.  Writes fp.npz."""
import sys
import numpy as np

SPEC64 = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-310, 2.0, 0.1])
SPEC32 = SPEC64.astype(np.float32)
SPEC32[7], SPEC32[8], SPEC32[9] = np.float32(1e-45), np.float32(-1e-45), np.float32(1e-39)

BIN = ["min.f{w}", "max.f{w}", "min.NaN.f{w}", "max.NaN.f{w}"]
UN = ["rcp.rn.f{w}", "rcp.rz.f{w}", "rcp.rm.f{w}", "rcp.rp.f{w}", "sqrt.rn.f{w}", "sqrt.rz.f{w}",
      "sqrt.rm.f{w}", "sqrt.rp.f{w}", "neg.f{w}", "abs.f{w}"]
DIV = ["div.rn.f{w}", "div.rz.f{w}", "div.rm.f{w}", "div.rp.f{w}"]


def kernels():
    out = []
    for w, t, c in ((32, "float", "f"), (64, "double", "d")):
        body = [f'extern "C" __global__ void bin{w}(const {t} *x, {t} *o, int n) {{',
                "  int i = threadIdx.x, j = blockIdx.x; if (i >= n || j >= n) return;",
                f"  {t} a = x[j], b = x[i]; {t} r; int k = (j * n + i) * {len(BIN) + len(DIV)};"]
        for q, ins in enumerate(BIN + DIV):
            if "NaN" in ins and w == 64:
                body.append(f"  o[k + {q}] = 0;")
                continue
            body.append(f'  asm("{ins.format(w=w)} %0, %1, %2;" : "={c}"(r) : "{c}"(a), "{c}"(b)); o[k + {q}] = r;')
        body.append("}")
        body += [f'extern "C" __global__ void un{w}(const {t} *x, {t} *o, int n) {{',
                 f"  int i = threadIdx.x; if (i >= n) return; {t} a = x[i], r;"]
        for q, ins in enumerate(UN):
            if ins.startswith("sqrt.r") and ins != "sqrt.rn.f{w}" and w == 32:
                pass
            body.append(f'  asm("{ins.format(w=w)} %0, %1;" : "={c}"(r) : "{c}"(a)); o[i * {len(UN)} + {q}] = r;')
        body.append("}")
        # contraction: t = a*b (unrounded mul) feeding add/sub in various shapes
        body += [f'extern "C" __global__ void fuse{w}(const {t} *a, const {t} *b, const {t} *c, {t} *o, int n) {{',
                 f"  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return; {t} x = a[i], y = b[i], z = c[i], r, s;",
                 f'  asm("{{ .reg .f{w} t; mul.f{w} t, %1, %2; add.f{w} %0, t, %3; }}" : "={c}"(r) : "{c}"(x), "{c}"(y), "{c}"(z)); o[i * 8 + 0] = r;',
                 f'  asm("{{ .reg .f{w} t; mul.f{w} t, %1, %2; sub.f{w} %0, t, %3; }}" : "={c}"(r) : "{c}"(x), "{c}"(y), "{c}"(z)); o[i * 8 + 1] = r;',
                 f'  asm("{{ .reg .f{w} t; mul.f{w} t, %1, %2; sub.f{w} %0, %3, t; }}" : "={c}"(r) : "{c}"(x), "{c}"(y), "{c}"(z)); o[i * 8 + 2] = r;',
                 f'  asm("{{ .reg .f{w} t; mul.f{w} t, %2, %3; add.f{w} %0, t, %4; add.f{w} %1, t, %4; add.f{w} %1, %1, %1; }}" : "={c}"(r), "={c}"(s) : "{c}"(x), "{c}"(y), "{c}"(z)); o[i * 8 + 3] = r; o[i * 8 + 4] = s;',
                 f'  asm("{{ .reg .f{w} t; mul.rn.f{w} t, %1, %2; add.f{w} %0, t, %3; }}" : "={c}"(r) : "{c}"(x), "{c}"(y), "{c}"(z)); o[i * 8 + 5] = r;',
                 f'  asm("{{ .reg .f{w} t; mul.f{w} t, %1, %2; add.rn.f{w} %0, t, %3; }}" : "={c}"(r) : "{c}"(x), "{c}"(y), "{c}"(z)); o[i * 8 + 6] = r;',
                 f'  asm("{{ .reg .f{w} t; mul.f{w} t, %2, %3; add.f{w} %0, t, %4; mov.f{w} %1, t; }}" : "={c}"(r), "={c}"(s) : "{c}"(x), "{c}"(y), "{c}"(z)); o[i * 8 + 7] = r + 0 * s; }}']
        out.append("\n".join(body))
    return "\n".join(out)


def fuse_inputs(dt, n=256):
    rng = np.random.default_rng(7)
    a = rng.standard_normal(n).astype(dt)
    b = rng.standard_normal(n).astype(dt)
    c = -(a * b) + (rng.standard_normal(n) * 1e-3).astype(dt) * (a * b)
    return a, b, c.astype(dt)


def main(outdir):
    import cupy as cp
    mod = cp.RawModule(code=kernels(), options=("-arch=sm_90", "--fmad=true"))
    res = {}
    for w, dt, spec in ((32, np.float32, SPEC32), (64, np.float64, SPEC64)):
        n = spec.size
        o = cp.zeros(n * n * (len(BIN) + len(DIV)), dtype=dt)
        mod.get_function(f"bin{w}")((n,), (n,), (cp.asarray(spec), o, np.int32(n)))
        res[f"bin{w}"] = o.get().reshape(n, n, -1)
        o = cp.zeros(n * len(UN), dtype=dt)
        mod.get_function(f"un{w}")((1,), (n,), (cp.asarray(spec), o, np.int32(n)))
        res[f"un{w}"] = o.get().reshape(n, -1)
        a, b, c = fuse_inputs(dt)
        o = cp.zeros(a.size * 8, dtype=dt)
        mod.get_function(f"fuse{w}")((1,), (a.size,), (cp.asarray(a), cp.asarray(b), cp.asarray(c), o, np.int32(a.size)))
        res[f"fuse{w}"] = o.get().reshape(a.size, 8)
        res[f"fuse{w}_in"] = np.stack([a, b, c])
        res[f"spec{w}"] = spec
    np.savez(outdir + "/fp.npz", **res)
    print("fp ok", {k: v.shape for k, v in res.items()})


if __name__ == "__main__":
    main(sys.argv[1])
