"""PTX's approximate f32 transcendentals, ex2/lg2/sin/cos.approx{.ftz}.f32, compiled to inline
polynomials (cpuify.codegen.approx_math) instead of calls to libm's exp2f/log2f/sinf/cosf.

Each instruction runs as inline PTX in a kernel compiled by cpuify, on 2^20 inputs spread
evenly over the f32 bit patterns (both signs, subnormals, infinities, NaNs) plus the edges of
each function (overflow, underflow, the subnormal range, the polynomial's interval), and is
held against NumPy's float64 function rounded to f32 (the correctly rounded result, "CR"):

* ex2: within 1 ulp of CR everywhere (PTX documents 2 ulp), subnormal results included;
* lg2: within 1 ulp of CR, relative error below 2^-22.9, absolute error below 2^-23.9 on
  (0.5, 2) (PTX: 2^-22 relative, 2^-22 absolute on (0.5, 2));
* sin/cos: absolute error below 2^-23.5 for |x| < 2^17 (PTX: 2^-20.5 on [-2pi, 2pi],
  2^-14.7 on [-100pi, 100pi], best effort beyond), results in [-1, 1] for every finite x;
* special values as the PTX ISA tables give them, .ftz flushing subnormal inputs and results;
* the same bits from 16-wide, narrower and scalar thread loops (plain IR, no CPU-dependent
  estimates), and the reference interpreter (double-precision NumPy) within 1 ulp;
* the CUDA functions built on them (expf, exp2f, __expf, __logf, __sinf, ...) within the
  bounds CUDA documents, and no libm calls left in a vectorized expf loop.

The sweep over all 2^32 inputs is test_every_float (slow; a few minutes per instruction).
On the machine it was written on: ex2 and lg2 at most 1 ulp from CR (from the exact result:
ex2 0.952 ulp, lg2 1.057 ulp; lg2 relative error 2^-23.03, absolute 2^-23.99 on (0.5, 2)),
sin/cos absolute error 2^-23.74 / 2^-23.75 on [-100pi, 100pi], 2 ulp from CR at most where
the result is above 2^-10 and |x| < 2^17."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.codegen import jit
from cpuify.codegen.llvm_gen import ModuleCodegen
from cpuify.compiler import lift_optimized
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.interp import interpret_kernel

f32 = np.float32
OPS = [f"{fn}.approx{ftz}.f32" for fn in ("ex2", "lg2", "sin", "cos") for ftz in ("", ".ftz")]
CUDA_FUNCS = ["expf", "exp2f", "__expf", "__logf", "__log2f", "__sinf", "__cosf"]


def _kname(op: str) -> str:
    return op.replace(".", "_")


_ASM_KERNEL = r'''
extern "C" __global__ void NAME(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float r; asm("OP %0, %1;" : "=f"(r) : "f"(x[i])); y[i] = r; }
}'''
_CUDA_KERNEL = r'''
extern "C" __global__ void cuda_FN(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = FN(x[i]);
}'''
SRC = "\n".join([_ASM_KERNEL.replace("NAME", _kname(op)).replace("OP", op) for op in OPS]
                + [_CUDA_KERNEL.replace("FN", fn) for fn in CUDA_FUNCS])

REF = {"ex2": np.exp2, "lg2": np.log2, "sin": np.sin, "cos": np.cos}
TINY = 2.0 ** -126


@pytest.fixture(scope="module")
def ptx():
    return compile_to_ptx(SRC).ptx


@pytest.fixture(scope="module")
def mod(ptx):
    return cpuify.RawModule(ptx=ptx)


def _run(mod, name, x, block=256):
    x = np.ascontiguousarray(x, f32)
    y = np.full_like(x, np.nan)
    mod.get_function(name)(((x.size + block - 1) // block,), (block,), (x, y, np.int32(x.size)))
    return y


def _flush(v):
    v = np.array(v, copy=True)
    v[np.abs(v) < TINY] = 0.0
    return v


def _reference(op, x):
    """float64 result and its f32 rounding (CR), .ftz flushing input and result."""
    ftz = ".ftz" in op
    xi = _flush(x) if ftz else x
    with np.errstate(all="ignore"):
        ref = REF[op[:3]](xi.astype(np.float64))
        cr = ref.astype(f32)
    if ftz:
        cr = _flush(cr)
    return ref, cr


def _edges():
    """Each function's edges: overflow/underflow of ex2, the subnormal range, powers of 2,
    the ends of lg2's reduction interval, multiples of pi/4."""
    b = np.concatenate([
        np.arange(0, 1 << 12), np.arange(0x00800000 - 2048, 0x00800000 + 2048),   # subnormals
        np.arange(0x3F3504F3 - 2048, 0x3F3504F3 + 2048),                           # sqrt(1/2)
        np.arange(0x3F800000 - 4096, 0x3F800000 + 4096),                           # 1
        np.arange(0x7F7FF000, 0x7F800001), np.arange(0x7FC00000, 0x7FC00010),      # max, inf, NaN
    ]).astype(np.uint32)
    e = np.concatenate([b, b | np.uint32(0x80000000)]).view(f32)
    ex2 = np.concatenate([np.arange(-160, 160, 0.125), np.arange(-151, -147, 1 / 64),
                          np.arange(-127, -125, 1 / 256), np.arange(127, 128.01, 1 / 1024)])
    ex2 = np.concatenate([ex2, np.nextafter(f32(128), f32(0)) - np.arange(64) * f32(2 ** -17)])
    pi4 = np.arange(-4000, 4000) * (np.pi / 4)
    trig = np.concatenate([pi4, np.nextafter(pi4.astype(f32), f32(np.inf)),
                           np.nextafter(pi4.astype(f32), f32(-np.inf))])
    return np.concatenate([e, ex2.astype(f32), trig.astype(f32)])


def _sample(stride=4096):
    """2^32 / stride bit patterns evenly spread, plus the edges."""
    bits = np.arange(0, 1 << 32, stride, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([bits.view(f32), _edges()])


def _check_specials(y, cr, x):
    """Where CR is not finite (and for every NaN input) the result is the same, NaN == NaN."""
    nf = ~np.isfinite(cr) | np.isnan(x)
    same = (y[nf] == cr[nf]) | (np.isnan(y[nf]) & np.isnan(cr[nf]))
    assert same.all(), (x[nf][~same][:8], y[nf][~same][:8], cr[nf][~same][:8])
    return ~nf


def _ulps_from_cr(y, cr):
    return np.abs(y.astype(np.float64) - cr) / np.spacing(np.abs(cr)).astype(np.float64)


# --- ex2 --------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["ex2.approx.f32", "ex2.approx.ftz.f32"])
def test_ex2_within_one_ulp(mod, op):
    x = _sample()
    y = _run(mod, _kname(op), x)
    ref, cr = _reference(op, x)
    fin = _check_specials(y, cr, x)
    assert _ulps_from_cr(y[fin], cr[fin]).max() <= 1
    if ".ftz" not in op:      # below 1 ulp from the exact result (so never 2 from CR)
        err = np.abs(y[fin] - ref[fin]) / np.spacing(np.abs(cr[fin])).astype(np.float64)
        assert err.max() < 1


@pytest.mark.parametrize("ftz", [False, True])
def test_ex2_special_values_and_range(mod, ftz):
    op = "ex2.approx.ftz.f32" if ftz else "ex2.approx.f32"
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1.0, -1.0, 10.0, -126.0,
                  127.0, 127.99999, 128.0, 200.0, 3e38, -127.0, -149.0, -149.5, -150.0, -151.0,
                  -3e38, 0.5], f32)
    y = _run(mod, _kname(op), x)
    assert np.isnan(y[0]) and y[1] == np.inf
    assert y[2] == 0 and not np.signbit(y[2])                      # -inf -> +0
    assert (y[3:7] == 1.0).all()                                   # +-0, +-subnormal -> 1
    assert list(y[7:11]) == [2.0, 0.5, 1024.0, 2.0 ** -126]        # exact powers of 2
    assert y[11] == 2.0 ** 127 and np.isfinite(y[12]) and (y[13:16] == np.inf).all()
    if ftz:     # results below 2^-126 flush to +0
        assert (y[16:22] == 0).all() and not np.signbit(y[16:22]).any()
    else:       # subnormal results, rounded correctly: 2^-127, 2^-149, 2^-149.5 -> 2^-149 ...
        assert list(y[16:19]) == [2.0 ** -127, 2.0 ** -149, 2.0 ** -149]
        assert (y[19:22] == 0).all()                               # 2^-150 rounds to even (0)
    assert y[22] == f32(np.sqrt(2.0))


# --- lg2 --------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["lg2.approx.f32", "lg2.approx.ftz.f32"])
def test_lg2_within_one_ulp_and_ptx_bounds(mod, op):
    x = _sample()
    y = _run(mod, _kname(op), x)
    ref, cr = _reference(op, x)
    fin = _check_specials(y, cr, x)
    x, y, ref, cr = x[fin], y[fin], ref[fin], cr[fin]
    assert _ulps_from_cr(y, cr).max() <= 1
    err = np.abs(y - ref)
    near1 = (x > 0.5) & (x < 2)
    assert err[near1].max() <= 2.0 ** -23.9                        # PTX: 2^-22 absolute
    assert (err[~near1] / np.abs(ref[~near1])).max() <= 2.0 ** -22.9   # PTX: 2^-22 relative


@pytest.mark.parametrize("ftz", [False, True])
def test_lg2_special_values(mod, ftz):
    op = "lg2.approx.ftz.f32" if ftz else "lg2.approx.f32"
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, -1e-40, 1.0, 2.0, 0.25, 2.0 ** 127,
                  2.0 ** -126, 2.0 ** -149, 1e-40, 3.4028235e38], f32)
    y = _run(mod, _kname(op), x)
    assert np.isnan(y[0]) and y[1] == np.inf and np.isnan(y[2])
    assert y[3] == -np.inf and y[4] == -np.inf and np.isnan(y[5])
    assert list(y[7:12]) == [0.0, 1.0, -2.0, 127.0, -126.0]       # exact on powers of 2
    assert not np.signbit(y[7])
    if ftz:     # subnormal inputs are zeros: -inf, and -subnormal gives -inf too
        assert (y[12:14] == -np.inf).all() and y[6] == -np.inf
    else:
        assert np.isnan(y[6]) and y[12] == -149.0
        assert abs(y[13] - np.log2(1e-40)) <= np.spacing(f32(132.0))
    assert abs(y[14] - 128.0) <= np.spacing(f32(128.0))


# --- sin, cos ---------------------------------------------------------------------------------

@pytest.mark.parametrize("op", [o for o in OPS if o[:3] in ("sin", "cos")])
def test_sin_cos_absolute_error(mod, op):
    x = _sample()
    x = np.concatenate([x, np.random.default_rng(5).uniform(-100 * np.pi, 100 * np.pi, 1 << 18)
                        .astype(f32)])
    y = _run(mod, _kname(op), x)
    ref, cr = _reference(op, x)
    fin = _check_specials(y, cr, x)
    assert np.isnan(y[np.isinf(x)]).all()
    x, y, ref, cr = x[fin], y[fin], ref[fin], cr[fin]
    assert (np.abs(y) <= 1).all()
    err = np.abs(y - ref)
    a = np.abs(x)
    assert err[a <= 2 * np.pi].max() <= 2.0 ** -23.5               # PTX: 2^-20.5
    assert err[a <= 100 * np.pi].max() <= 2.0 ** -23.5             # PTX: 2^-14.7
    assert err[a < 2.0 ** 17].max() <= 2.0 ** -23.5
    # relative accuracy too, away from the zeros of the function
    big = (a < 2.0 ** 17) & (np.abs(ref) > 2.0 ** -10)
    assert _ulps_from_cr(y[big], cr[big]).max() <= 2


@pytest.mark.parametrize("ftz", [False, True])
def test_sin_cos_special_values(mod, ftz):
    sfx = ".ftz" if ftz else ""
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1e-20, -3e38, 3e38], f32)
    s = _run(mod, _kname(f"sin.approx{sfx}.f32"), x)
    c = _run(mod, _kname(f"cos.approx{sfx}.f32"), x)
    assert np.isnan(s[:3]).all() and np.isnan(c[:3]).all()
    assert s[3] == 0 and not np.signbit(s[3]) and s[4] == 0 and np.signbit(s[4])
    assert (c[3:8] == 1.0).all()
    if ftz:
        assert s[5] == 0 and s[6] == 0 and np.signbit(s[6])
    else:
        assert s[5] == f32(1e-40) and s[6] == f32(-1e-40)
    assert s[7] == f32(1e-20)
    assert (np.abs(s[8:]) <= 1).all() and (np.abs(c[8:]) <= 1).all()   # best effort, bounded


# --- all of them ------------------------------------------------------------------------------

@pytest.mark.parametrize("block", [100, 7, 1])
def test_same_bits_in_every_loop_width(mod, block):
    """Plain IR, no CPU-dependent estimates: 16-wide, narrower and scalar loops agree."""
    x = _sample(stride=1 << 14)
    for op in OPS:
        a, b = _run(mod, _kname(op), x, 256), _run(mod, _kname(op), x, block)
        assert (a.view(np.uint32) == b.view(np.uint32)).all(), op


@pytest.mark.parametrize("op", OPS)
def test_interpreter_agrees(ptx, mod, op):
    """The reference interpreter rounds NumPy's float64 function: within 1 ulp of the
    compiled result (sin/cos: where the result is above 2^-10, else 2^-23.5 absolute)."""
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.integers(0, 1 << 32, 2048, dtype=np.uint64).astype(np.uint32).view(f32),
                        rng.uniform(-30, 30, 1024).astype(f32), _edges()[::64]])
    x = np.ascontiguousarray(x)
    y = _run(mod, _kname(op), x)
    yi = np.zeros_like(x)
    interpret_kernel(ptx, _kname(op), ((x.size + 127) // 128,), (128,), [x, yi, np.int32(x.size)])
    fin = _check_specials(y, yi, x)
    y, yi, x = y[fin], yi[fin], x[fin]
    if op[:3] in ("sin", "cos"):
        small = (np.abs(yi) <= 2.0 ** -10) | (np.abs(x) >= 2.0 ** 17)
        assert np.abs(y[small & (np.abs(x) < 2.0 ** 17)].astype(np.float64)
                      - yi[small & (np.abs(x) < 2.0 ** 17)]).max(initial=0) <= 2.0 ** -23.5
        y, yi = y[~small], yi[~small]
    assert _ulps_from_cr(y, yi).max() <= 1


@pytest.mark.parametrize("fn", CUDA_FUNCS)
def test_cuda_functions_within_cuda_bounds(mod, fn):
    """The bounds the CUDA C Programming Guide gives (expf/exp2f 2 ulp, __expf 2 + |1.16 x|
    ulp, __logf/__log2f 2^-21.41 absolute on [0.5, 2], __sinf/__cosf 2^-21.41 on [-pi, pi])."""
    rng = np.random.default_rng(7)
    if fn in ("__logf", "__log2f"):
        x = np.concatenate([rng.uniform(0.5, 2, 1 << 16), 2.0 ** rng.uniform(-126, 127, 1 << 16)])
    elif fn in ("__sinf", "__cosf"):
        x = rng.uniform(-np.pi, np.pi, 1 << 17)
    else:
        # normal, finite results (the bounds are for those)
        x = rng.uniform(-87, 88, 1 << 17) if fn != "exp2f" else rng.uniform(-126, 127.9, 1 << 17)
    x = x.astype(f32)
    y = _run(mod, "cuda_" + fn, x).astype(np.float64)
    xd = x.astype(np.float64)
    ref = {"expf": np.exp, "__expf": np.exp, "exp2f": np.exp2, "__logf": np.log,
           "__log2f": np.log2, "__sinf": np.sin, "__cosf": np.cos}[fn](xd)
    ulp = np.spacing(np.abs(ref.astype(f32))).astype(np.float64)
    if fn in ("expf", "exp2f"):
        assert (np.abs(y - ref.astype(f32)) / ulp).max() <= 2
    elif fn == "__expf":
        assert (np.abs(y - ref) / ulp <= 2 + np.floor(np.abs(1.16 * xd))).all()
    elif fn in ("__logf", "__log2f"):
        near1 = (x >= 0.5) & (x <= 2)
        assert np.abs(y - ref)[near1].max() <= 2.0 ** -21.41
        assert (np.abs(y - ref) / np.abs(ref))[~near1].max() <= 2.0 ** -21
    else:
        assert np.abs(y - ref).max() <= 2.0 ** -21.41


def test_no_libm_calls_in_vectorized_loop():
    src = r'''
    extern "C" __global__ void ex(const float *x, float *y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = expf(x[i]) + __logf(x[i]) + __sinf(x[i]) * __cosf(x[i]);
    }'''
    module = parse_ptx(compile_to_ptx(src, options=("--use_fast_math",)).ptx)
    gen = ModuleCodegen(module)
    gen.add_kernel(lift_optimized(module, module.functions["ex"], (256, 1, 1)), (256, 1, 1))
    text = str(jit.optimize(gen.llvm_text()))
    for name in ("exp2f", "log2f", "sinf", "cosf", "llvm.exp2", "llvm.log2", "llvm.sin",
                 "llvm.cos"):
        assert name not in text, name
    width = 16 if jit.has_avx512() else 8
    assert f"<{width} x float> @llvm.fma.v{width}f32" in text


# --- .ftz results flushed by a compare of the input (approx_math.exp2_f32) -------------------

_EX2_FTZ_BESIDE_F64 = r"""
extern "C" __global__ void ex2_ftz_beside_f64(const float *x, float *y, double *d, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float r; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x[i])); y[i] = r;
        d[i] = d[i] * 0.5;      // f64 keeps subnormals: this kernel flushes in code
    }
}"""


def _around_minus_126():
    """-126 and its float neighbours on both sides (the f32 below -126 is -126 - 2^-17),
    the band [-127, -125] finely, and what flushes from further away."""
    near = f32(-126.0) + np.arange(-64, 65).astype(f32) * f32(2.0 ** -17)
    band = np.arange(-127, -125, 2.0 ** -12)
    far = [-126.5, -127.0, -149.0, -1e30, -np.inf, np.nan, 0.0, 1e-40, -1e-40, 3.0]
    return np.concatenate([near, band, far]).astype(f32)


def test_ex2_ftz_zero_exactly_below_minus_126(ptx, mod):
    """ex2.approx.ftz gives +0 exactly where x < -126 (its result below 2^-126) and a normal
    result from x = -126 up, the same bits whether the kernel runs with the CPU's FTZ/DAZ
    (hardware_flush) or flushes in code (an f64 operation beside it), within 1 ulp of the
    interpreter and of the correctly rounded, flushed result."""
    from cpuify.codegen.denormals import hardware_flush
    x = _around_minus_126()
    side = parse_ptx(compile_to_ptx(_EX2_FTZ_BESIDE_F64).ptx)
    assert not hardware_flush(lift_optimized(side, side.functions["ex2_ftz_beside_f64"]).op)
    alone = parse_ptx(ptx)
    assert hardware_flush(lift_optimized(alone, alone.functions["ex2_approx_ftz_f32"]).op)
    in_hardware = _run(mod, "ex2_approx_ftz_f32", x)
    in_code = np.full_like(x, np.nan)
    d = np.full(x.size, 1e-310)
    cpuify.RawModule(code=_EX2_FTZ_BESIDE_F64).get_function("ex2_ftz_beside_f64")(
        ((x.size + 127) // 128,), (128,), (x, in_code, d, np.int32(x.size)))
    np.testing.assert_array_equal(d, np.full(x.size, 1e-310) * 0.5)       # (kept subnormal)
    np.testing.assert_array_equal(in_hardware.view(np.uint32), in_code.view(np.uint32))
    below = x < -126
    assert (in_code[below] == 0).all() and not np.signbit(in_code[below]).any()
    fin = ~below & ~np.isnan(x)
    assert (in_code[fin] >= TINY).all() and in_code[x == -126][0] == TINY
    assert np.isnan(in_code[np.isnan(x)]).all()
    _, cr = _reference("ex2.approx.ftz.f32", x)
    assert _ulps_from_cr(in_code[fin], cr[fin]).max() <= 1
    yi = np.zeros_like(x)
    interpret_kernel(ptx, "ex2_approx_ftz_f32", ((x.size + 127) // 128,), (128,),
                     [x, yi, np.int32(x.size)])
    np.testing.assert_array_equal(yi[below], 0.0)
    assert _ulps_from_cr(in_code[fin], yi[fin]).max() <= 1


def test_expf_under_ftz_flushes_nothing_in_code():
    """CuPy-style (-ftz=true) expf and __expf in a kernel run with the CPU's FTZ/DAZ: the
    fma.rm of expf's rounding trick lies in [2^23, 2^24) and ex2.approx.ftz flushes by a
    compare of its input, so no result is flushed in code (a copysign and a select each);
    the values: within CUDA's 2 ulp of NumPy's exp where that is normal, +0 where it is
    below 2^-126 (away from the edge by more than the 2 ulp), the interpreter within 1 ulp."""
    from cpuify.compiler import lift_and_optimize
    from cpuify.transforms.pass_manager import PipelineOptions
    src = r"""
    extern "C" __global__ void ex(const float *x, float *y, float *z, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) { y[i] = expf(x[i]); z[i] = __expf(x[i]); }
    }"""
    ptx_ftz = compile_to_ptx(src, options=("-ftz=true",)).ptx
    module = parse_ptx(ptx_ftz)
    lifted, _ = lift_and_optimize(module, module.entries[0], PipelineOptions(), (128, 1, 1))
    gen = ModuleCodegen(module, *jit.triple_and_layout())
    gen.add_kernel(lifted, (128, 1, 1))
    assert "copysign" not in str(jit.optimize(gen.llvm_text()))
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(-110, 89, 1 << 15), np.arange(-90, -85, 1 / 512),
                        [-np.inf, np.inf, np.nan, 0.0, -1e-40, 88.7, 89.0, -1e30]]).astype(f32)
    y, z = np.full_like(x, 7), np.full_like(x, 7)
    f = cpuify.RawModule(code=src).get_function("ex")     # -ftz=true, as CuPy compiles
    for _ in range(2):              # generic code, then the code specialized for the block
        f(((x.size + 127) // 128,), (128,), (x, y, z, np.int32(x.size)))
    with np.errstate(all="ignore"):
        ref = np.exp(x.astype(np.float64))
    normal = (ref >= TINY * 1.001) & (ref < np.finfo(f32).max)
    ulp = np.spacing(ref[normal].astype(f32)).astype(np.float64)
    assert (np.abs(y[normal] - ref[normal]) / ulp).max() <= 2
    tiny = ref < TINY * 0.999
    assert (y[tiny] == 0).all() and not np.signbit(y[tiny]).any()
    assert (z[tiny & (x < -88)] == 0).all()
    assert y[x == np.inf][0] == np.inf and np.isnan(y[np.isnan(x)]).all()
    yi, zi = np.zeros_like(x), np.zeros_like(x)
    interpret_kernel(ptx_ftz, "ex", ((x.size + 127) // 128,), (128,),
                     [x, yi, zi, np.int32(x.size)])
    fin = np.isfinite(yi) & (yi != 0)
    np.testing.assert_array_equal(y[~fin & ~np.isnan(x)], yi[~fin & ~np.isnan(x)])
    assert _ulps_from_cr(y[fin], yi[fin]).max() <= 1
    assert _ulps_from_cr(z[fin & (zi != 0)], zi[fin & (zi != 0)]).max() <= 1


@pytest.mark.skipif(not jit.has_avx512(), reason="llvm.ldexp is vscalefps with AVX-512 only")
@pytest.mark.parametrize("ftz", [False, True])
def test_ex2_scalef_same_bits_as_two_multiplications(ftz):
    """ex2's scaling by 2^n as llvm.ldexp (vscalefps, used on AVX-512 CPUs) rounds once, as
    the two multiplications by 2^(n/2) and 2^(n - n/2) do: the same bits for the sampled
    f32 patterns and the edges (overflow, subnormal results, specials), both lowerings
    compiled side by side in one module; and the vector loop calls no libm ldexpf."""
    import ctypes

    from llvmlite import ir

    from cpuify.codegen.approx_math import exp2_f32
    module = ir.Module(name="ex2_scalef")
    module.triple, module.data_layout = jit.triple_and_layout()
    declared: dict[str, ir.Function] = {}

    def intrinsic(name, ret, args):
        if name not in declared:
            declared[name] = ir.Function(module, ir.FunctionType(ret, args), name=name)
        return declared[name]

    f32p = ir.PointerType(ir.FloatType())
    for name, scalef in (("with_scalef", True), ("with_multiplications", False)):
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [f32p, f32p, ir.IntType(64)]),
                         name=name)
        x, y, n = fn.args
        x.add_attribute("noalias")
        y.add_attribute("noalias")
        entry, loop, done = (fn.append_basic_block(k) for k in ("entry", "loop", "done"))
        b = ir.IRBuilder(entry)
        b.cbranch(b.icmp_signed(">", n, n.type(0)), loop, done)
        b.position_at_end(loop)
        i = b.phi(n.type)
        v = b.load(b.gep(x, [i]))
        b.store(exp2_f32(b, intrinsic, v, ftz=ftz, scalef=scalef), b.gep(y, [i]))
        i1 = b.add(i, n.type(1))
        i.add_incoming(n.type(0), entry)
        i.add_incoming(i1, loop)
        b.cbranch(b.icmp_signed("<", i1, n), loop, done)
        ir.IRBuilder(done).ret_void()
    optimized = jit.optimize(str(module))
    assert "vscalefps" in jit.emit_assembly(optimized) and "ldexpf" not in jit.emit_assembly(optimized)
    loaded = jit.LoadedObject(jit.emit_object(optimized))
    x = _sample(stride=2048)
    outs = []
    for name in ("with_scalef", "with_multiplications"):
        y = np.full_like(x, 7)
        ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
            loaded.function_address(name))(x.ctypes.data, y.ctypes.data, x.size)
        outs.append(y)
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    assert np.isnan(outs[0][np.isnan(x)]).all() and (outs[0][x == np.inf] == np.inf).all()


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
def test_every_float(mod, op):
    worst_ulp, worst_abs = 0.0, 0.0
    for lo in range(0, 1 << 32, 1 << 24):
        x = np.arange(lo, lo + (1 << 24), dtype=np.uint64).astype(np.uint32).view(f32)
        y = _run(mod, _kname(op), x)
        ref, cr = _reference(op, x)
        fin = _check_specials(y, cr, x)
        if op[:3] in ("sin", "cos"):
            sel = fin & (np.abs(x) < 2.0 ** 17)
            assert (np.abs(y[fin]) <= 1).all()
            worst_abs = max(worst_abs, float(np.abs(y[sel] - ref[sel]).max(initial=0)))
        else:
            worst_ulp = max(worst_ulp, float(_ulps_from_cr(y[fin], cr[fin]).max(initial=0)))
    assert worst_ulp <= 1 and worst_abs <= 2.0 ** -23.5
