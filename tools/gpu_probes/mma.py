"""GPU ground truth for tensor-core ops.
mma.sync / ldmatrix: each lane's input registers come from a buffer (in[lane][reg], raw bits),
the instruction runs, each lane's output registers are written raw (layout-free check: an
implementation given the same per-lane registers must give the same per-lane outputs).
wmma: fragments loaded from matrices whose elements are their own index are dumped per lane
(frag.x[e]), which shows the fragment layout the GPU uses; plus one mma_sync per shape.
Writes mma.npz and mma.txt."""
import sys
import numpy as np
import cupy as cp
import os, shutil
_NV = shutil.which("nvcc")
INC = ("-I" + os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(_NV))), "include"),) if _NV else ()

# name: (instruction, nA, nB, nC, reg kind of A/B ('r' or 'd'), reg kind of C/D ('f','r','d'), nD)
MMA = {
    "m16n8k8_f32_f16": ("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32", 2, 1, 4, "r", "f", 4),
    "m16n8k16_f32_f16": ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 4, 2, 4, "r", "f", 4),
    "m16n8k16_f16_f16": ("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", 4, 2, 2, "r", "r", 2),
    "m16n8k8_f16_f16": ("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16", 2, 1, 2, "r", "r", 2),
    "m16n8k16_f32_bf16": ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 4, 2, 4, "r", "f", 4),
    "m16n8k8_f32_bf16": ("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32", 2, 1, 4, "r", "f", 4),
    "m16n8k4_f32_tf32": ("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32", 2, 1, 4, "r", "f", 4),
    "m16n8k8_f32_tf32": ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", 4, 2, 4, "r", "f", 4),
    "m8n8k4_f64": ("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64", 1, 1, 2, "d", "d", 2),
    "m16n8k16_s32_s8": ("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32", 2, 1, 4, "r", "r", 4),
    "m16n8k32_s32_s8": ("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", 4, 2, 4, "r", "r", 4),
    "m16n8k32_s32_u8": ("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32", 4, 2, 4, "r", "r", 4),
    "m16n8k32_s32_s8_u8": ("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32", 4, 2, 4, "r", "r", 4),
    "m16n8k32_s32_s8_sat": ("mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32", 4, 2, 4, "r", "r", 4),
    "m8n8k16_s32_s8": ("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32", 1, 1, 2, "r", "r", 2),
    "m8n8k4_f32_f16": ("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32", 2, 2, 8, "r", "f", 8),
    "m8n8k4_f32_f16_rr": ("mma.sync.aligned.m8n8k4.row.row.f32.f16.f16.f32", 2, 2, 8, "r", "f", 8),
}


def mma_kernel(name, spec):
    instr, na, nb, nc, ab, cd, nd = spec
    abt = "unsigned long long" if ab == "d" else "unsigned"
    cdt = "unsigned long long" if cd == "d" else "unsigned"
    lines = [f'extern "C" __global__ void {name}(const {abt} *a, const {abt} *b, const {cdt} *c, {cdt} *d) {{',
             "  int l = threadIdx.x;"]
    def val(kind, expr):
        return {"r": expr, "f": f"__uint_as_float({expr})", "d": f"__longlong_as_double((long long)({expr}))"}[kind]
    ctype = {"r": "unsigned", "f": "float", "d": "double"}
    for i in range(na): lines.append(f"  {ctype[ab]} a{i} = {val(ab, f'a[l*{na}+{i}]')};")
    for i in range(nb): lines.append(f"  {ctype[ab]} b{i} = {val(ab, f'b[l*{nb}+{i}]')};")
    for i in range(nc): lines.append(f"  {ctype[cd]} c{i} = {val(cd, f'c[l*{nc}+{i}]')};")
    lines.append(f"  {ctype[cd]} " + ", ".join(f"d{i}" for i in range(nd)) + ";")
    k = 0

    def group(n):
        nonlocal k
        s = "{" + ",".join(f"%{k + i}" for i in range(n)) + "}"
        k += n
        return s
    dg = group(nd); ag = group(na); bg = group(nb); cg = group(nc)
    outs = ", ".join(f'"={cd}"(d{i})' for i in range(nd))
    ins = ", ".join([f'"{ab}"(a{i})' for i in range(na)] + [f'"{ab}"(b{i})' for i in range(nb)] +
                    [f'"{cd}"(c{i})' for i in range(nc)])
    lines.append(f'  asm volatile("{instr} {dg}, {ag}, {bg}, {cg};" : {outs} : {ins});')
    for i in range(nd):
        if cd == "f": lines.append(f"  d[l*{nd}+{i}] = __float_as_uint(d{i});")
        elif cd == "d": lines.append(f"  d[l*{nd}+{i}] = (unsigned long long)__double_as_longlong(d{i});")
        else: lines.append(f"  d[l*{nd}+{i}] = d{i};")
    lines.append("}")
    return "\n".join(lines)


def f16_words(rng, n, exact):
    if exact:
        v = rng.integers(-32, 33, n * 2).astype(np.float16) / np.float16(8)
    else:
        v = rng.standard_normal(n * 2).astype(np.float16)
    return v.astype(np.float16).view(np.uint32)


def bf16_words(rng, n, exact):
    v = (rng.integers(-32, 33, n * 2) / 8.0) if exact else rng.standard_normal(n * 2)
    b = (np.asarray(v, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return b.view(np.uint32)


def inputs(name, spec, rng, exact):
    instr, na, nb, nc, ab, cd, nd = spec
    def ab_words(n):
        if ".f16.f16" in instr and "bf16" not in instr: return f16_words(rng, n, exact)
        if "bf16" in instr: return bf16_words(rng, n, exact)
        if "tf32" in instr:
            v = (rng.integers(-64, 65, n) / 16.0) if exact else rng.standard_normal(n)
            return np.asarray(v, np.float32).view(np.uint32)
        if "f64" in instr:
            v = (rng.integers(-64, 65, n) / 16.0) if exact else rng.standard_normal(n)
            return np.asarray(v, np.float64).view(np.uint64)
        return rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    a = ab_words(32 * na); b = ab_words(32 * nb)
    if cd == "f":
        c = (np.asarray(rng.integers(-64, 65, 32 * nc) / 4.0 if exact else rng.standard_normal(32 * nc), np.float32)).view(np.uint32)
    elif cd == "d":
        c = np.asarray(rng.integers(-64, 65, 32 * nc) / 4.0 if exact else rng.standard_normal(32 * nc), np.float64).view(np.uint64)
    elif ".f16.f16.f16.f16" in instr:
        c = f16_words(rng, 32 * nc, exact)
    else:
        c = rng.integers(-2**20, 2**20, 32 * nc).astype(np.int32).view(np.uint32)
        if "satfinite" in instr:
            c[::3] = np.uint32(0x7ffffff0); c[1::3] = np.uint32(0x80000010)
    return a, b, c


LDMATRIX = r'''
extern "C" __global__ void ldmatrix_all(unsigned *out) {
    __shared__ unsigned short m[4 * 64];
    int l = threadIdx.x;
    for (int i = l; i < 256; i += 32) m[i] = (unsigned short)i;
    __syncwarp();
    // lane l gives the address of row (l % 8) of matrix (l / 8): rows of 8 b16, matrices contiguous
    unsigned addr = (unsigned)__cvta_generic_to_shared(&m[(l / 8) * 64 + (l % 8) * 8]);
    unsigned r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r0) : "r"(addr));
    out[l * 16 + 0] = r0;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(addr));
    out[l * 16 + 1] = r0; out[l * 16 + 2] = r1;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
    out[l * 16 + 3] = r0; out[l * 16 + 4] = r1; out[l * 16 + 5] = r2; out[l * 16 + 6] = r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r0) : "r"(addr));
    out[l * 16 + 7] = r0;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
    out[l * 16 + 8] = r0; out[l * 16 + 9] = r1; out[l * 16 + 10] = r2; out[l * 16 + 11] = r3;
}
'''

WMMA_HEAD = r'''
#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
using namespace nvcuda;
'''

# (name, fragment use, M, N, K, element type, layout or None, value type for dump)
WMMA = []
for (M, N, K) in ((16, 16, 16), (32, 8, 16), (8, 32, 16)):
    for t, tn in (("half", "f16"), ("__nv_bfloat16", "bf16"), ("unsigned char", "u8"), ("signed char", "s8")):
        for use in ("matrix_a", "matrix_b"):
            for lay in ("row_major", "col_major"):
                WMMA.append((f"w_{use}_{M}_{N}_{K}_{tn}_{lay}", use, M, N, K, t, lay))
    for t, tn in (("float", "f32"), ("half", "f16"), ("int", "s32")):
        for lay in ("mem_row_major", "mem_col_major"):
            WMMA.append((f"w_acc_{M}_{N}_{K}_{tn}_{lay}", "accumulator", M, N, K, t, lay))
for use in ("matrix_a", "matrix_b"):
    for lay in ("row_major", "col_major"):
        WMMA.append((f"w_{use}_16_16_8_tf32_{lay}", use, 16, 16, 8, "wmma::precision::tf32", lay))
        WMMA.append((f"w_{use}_8_8_4_f64_{lay}", use, 8, 8, 4, "double", lay))
for lay in ("mem_row_major", "mem_col_major"):
    WMMA.append((f"w_acc_16_16_8_f32_{lay}", "accumulator", 16, 16, 8, "float", lay))
    WMMA.append((f"w_acc_8_8_4_f64_{lay}", "accumulator", 8, 8, 4, "double", lay))


def mem_type(t):
    return {"wmma::precision::tf32": "float"}.get(t, t)


def wmma_kernel(name, use, M, N, K, t, lay):
    rows, cols = {"matrix_a": (M, K), "matrix_b": (K, N), "accumulator": (M, N)}[use]
    mt = mem_type(t)
    if use == "accumulator":
        frag = f"wmma::fragment<wmma::accumulator, {M}, {N}, {K}, {t}> f;"
        load = f"wmma::load_matrix_sync(f, m, {cols if lay == 'mem_row_major' else rows}, wmma::{lay});"
    else:
        frag = f"wmma::fragment<wmma::{use}, {M}, {N}, {K}, {t}, wmma::{lay}> f;"
        load = f"wmma::load_matrix_sync(f, m, {cols if lay == 'row_major' else rows});"
    return f'''
extern "C" __global__ void {name}(const {mt} *m, double *out, int *num) {{
    {frag}
    {load}
    int l = threadIdx.x;
    if (l == 0) *num = f.num_elements;
    for (int e = 0; e < f.num_elements; e++) out[l * 64 + e] = (double)(float)f.x[e];
}}'''


WMMA_GEMM = r'''
extern "C" __global__ void wmma_gemm_16(const half *a, const half *b, const float *c, float *d) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
}
extern "C" __global__ void wmma_gemm_tf32(const float *a, const float *b, float *d) {
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a, 8);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
}
'''


def main(outdir):
    res, txt = {}, []
    rng = np.random.default_rng(123)
    src = "\n".join(mma_kernel(n, s) for n, s in MMA.items())
    try:
        mod = cp.RawModule(code=src, options=("-arch=sm_90",))
    except Exception as e:
        txt.append(f"mma module failed: {e}")
        mod = None
    if mod is not None:
        for name, spec in MMA.items():
            for exact in (True, False):
                key = f"{name}_{'exact' if exact else 'rand'}"
                try:
                    a, b, c = inputs(name, spec, rng, exact)
                    nd = spec[6]
                    d = cp.zeros(32 * nd, dtype=c.dtype)
                    mod.get_function(name)((1,), (32,), (cp.asarray(a), cp.asarray(b), cp.asarray(c), d))
                    cp.cuda.runtime.deviceSynchronize()
                    res[key + "_a"], res[key + "_b"], res[key + "_c"], res[key + "_d"] = a, b, c, d.get()
                    txt.append(f"{key}: ok ({spec[0]})")
                except Exception as e:
                    txt.append(f"{key}: FAILED {e}")
    try:
        lm = cp.RawModule(code=LDMATRIX, options=("-arch=sm_90",))
        out = cp.zeros(32 * 16, dtype=cp.uint32)
        lm.get_function("ldmatrix_all")((1,), (32,), (out,))
        res["ldmatrix"] = out.get().reshape(32, 16)
        txt.append("ldmatrix: ok (columns: x1 r0 | x2 r0 r1 | x4 r0..r3 | x1.trans r0 | x4.trans r0..r3); "
                   "shared m[i] = i (b16), lane l addresses row l%8 of matrix l/8 (rows of 8, matrices of 64)")
    except Exception as e:
        txt.append(f"ldmatrix: FAILED {e}")
    for w in WMMA:
        name = w[0]
        try:
            m = cp.RawModule(code=WMMA_HEAD + wmma_kernel(*w), options=("-arch=sm_90", "-std=c++17") + INC)
            use, M, N, K, t = w[1], w[2], w[3], w[4], w[5]
            rows, cols = {"matrix_a": (M, K), "matrix_b": (K, N), "accumulator": (M, N)}[use]
            n = rows * cols
            idx = np.arange(n)
            mt = mem_type(t)
            if mt == "half": arr = idx.astype(np.float16)
            elif mt == "__nv_bfloat16":
                arr = (idx.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # exact for idx < 256
            elif mt in ("unsigned char",): arr = (idx & 0xff).astype(np.uint8)
            elif mt in ("signed char",): arr = (idx & 0x7f).astype(np.int8)
            elif mt == "int": arr = idx.astype(np.int32)
            elif mt == "double": arr = idx.astype(np.float64)
            else: arr = idx.astype(np.float32)
            out = cp.full(32 * 64, -1.0, dtype=cp.float64)
            num = cp.zeros(1, dtype=cp.int32)
            m.get_function(name)((1,), (32,), (cp.asarray(arr), out, num))
            cp.cuda.runtime.deviceSynchronize()
            k = int(num.get()[0])
            res[name] = out.get().reshape(32, 64)[:, :k]
            txt.append(f"{name}: num_elements={k}")
        except Exception as e:
            txt.append(f"{name}: FAILED {str(e)[:300]}")
    try:
        g = cp.RawModule(code=WMMA_HEAD + WMMA_GEMM, options=("-arch=sm_90", "-std=c++17") + INC)
        a = rng.standard_normal((16, 16)).astype(np.float16)
        b = rng.standard_normal((16, 16)).astype(np.float16)
        c = rng.standard_normal((16, 16)).astype(np.float32)
        d = cp.zeros((16, 16), dtype=cp.float32)
        g.get_function("wmma_gemm_16")((1,), (32,), (cp.asarray(a), cp.asarray(b.T.copy()), cp.asarray(c), d))
        res["gemm16_a"], res["gemm16_b"], res["gemm16_c"], res["gemm16_d"] = a, b, c, d.get()
        ref = a.astype(np.float64) @ b.astype(np.float64) + c
        txt.append(f"wmma_gemm_16 max |gpu - float64 ref| = {np.abs(d.get() - ref).max():.3g}")
        a = rng.standard_normal((16, 8)).astype(np.float32)
        b = rng.standard_normal((8, 16)).astype(np.float32)
        d = cp.zeros((16, 16), dtype=cp.float32)
        g.get_function("wmma_gemm_tf32")((1,), (32,), (cp.asarray(a), cp.asarray(b), d))
        res["gemmtf32_a"], res["gemmtf32_b"], res["gemmtf32_d"] = a, b, d.get()
        def trunc(x): return (x.view(np.uint32) & np.uint32(0xffffe000)).view(np.float32).astype(np.float64)
        def rna(x):
            u = x.view(np.uint32).astype(np.uint64); u = ((u + 0x1000) & 0xffffe000).astype(np.uint32)
            return u.view(np.float32).astype(np.float64)
        for nm, f in (("trunc", trunc), ("rna", rna), ("none", lambda x: x.astype(np.float64))):
            txt.append(f"wmma_gemm_tf32 max |gpu - ref({nm})| = {np.abs(d.get() - f(a) @ f(b)).max():.3g}")
    except Exception as e:
        txt.append(f"wmma gemm: FAILED {str(e)[:300]}")
    np.savez(outdir + "/mma.npz", **res)
    open(outdir + "/mma.txt", "w").write("\n".join(txt) + "\n")
    print("\n".join(txt))


main(sys.argv[1])
