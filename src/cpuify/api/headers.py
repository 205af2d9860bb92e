"""Headers the Python API hands to the CUDA compiler (in memory for NVRTC, beside the
source for nvcc), written for cpuify on top of libcu++ (`cuda/std/...`, from the
`nvidia-cuda-cccl` wheel):

* ``cupy/complex.cuh``: CuPy puts its headers on every kernel's include path, so CuPy
  kernels write ``#include <cupy/complex.cuh>`` and ``complex<double>``; here `complex`
  is ``cuda::std::complex`` (same layout: two values, aligned to their size).
* ``cpuify/cucomplex_bridge.h``: what ``translate_cucomplex=True`` includes instead of
  ``<cuComplex.h>``: ``cuFloatComplex``/``cuDoubleComplex``/``cuComplex`` are
  ``complex<float>``/``complex<double>``, and the cuComplex functions are templates over
  both (``cuCadd(cuComplex, cuComplex)`` works, as it does with CuPy's translation).
  ``cuCdiv`` divides as NumPy does (Smith's method, no fused multiply-adds) and
  ``cuCabs`` computes |z| as NumPy's `abs` does on CPUs with FMA.
* for ``jitify=True``: the C++ standard library headers a kernel may include
  (``<type_traits>``, ``<cstdint>``, ``<limits>``, ...), each the libcu++ header of the
  same name with its names visible in ``std`` (what Jitify's own headers provide)."""

from __future__ import annotations

import re

COMPLEX_CUH = r"""#pragma once
#include <cuda/std/complex>
#include <cuda/std/cmath>
namespace thrust { using cuda::std::complex; }
using cuda::std::complex;
// exp, abs, conj, ... of a complex are found by argument-dependent lookup in cuda::std
"""

CUCOMPLEX_BRIDGE = r"""#pragma once
#include <cupy/complex.cuh>
typedef complex<float> cuFloatComplex;
typedef complex<double> cuDoubleComplex;
typedef cuFloatComplex cuComplex;

template <class T> __host__ __device__ inline T cuCreal(complex<T> x) { return x.real(); }
template <class T> __host__ __device__ inline T cuCimag(complex<T> x) { return x.imag(); }
__host__ __device__ inline float cuCrealf(cuFloatComplex x) { return x.real(); }
__host__ __device__ inline float cuCimagf(cuFloatComplex x) { return x.imag(); }
__host__ __device__ inline cuFloatComplex make_cuFloatComplex(float r, float i) {
    return cuFloatComplex(r, i); }
__host__ __device__ inline cuDoubleComplex make_cuDoubleComplex(double r, double i) {
    return cuDoubleComplex(r, i); }
__host__ __device__ inline cuComplex make_cuComplex(float r, float i) { return cuComplex(r, i); }

template <class T> __host__ __device__ inline complex<T> cuConj(complex<T> x) {
    return complex<T>(x.real(), -x.imag()); }
template <class T> __host__ __device__ inline complex<T> cuCadd(complex<T> x, complex<T> y) {
    return complex<T>(x.real() + y.real(), x.imag() + y.imag()); }
template <class T> __host__ __device__ inline complex<T> cuCsub(complex<T> x, complex<T> y) {
    return complex<T>(x.real() - y.real(), x.imag() - y.imag()); }
template <class T> __host__ __device__ inline complex<T> cuCmul(complex<T> x, complex<T> y) {
    return complex<T>(x.real() * y.real() - x.imag() * y.imag(),
                      x.real() * y.imag() + x.imag() * y.real()); }
// products and sums rounded one at a time (never contracted to fma), as NumPy computes
#ifdef __CUDA_ARCH__
__device__ inline float cpuify_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double cpuify_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float cpuify_add(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double cpuify_add(double a, double b) { return __dadd_rn(a, b); }
#else
template <class T> inline T cpuify_mul(T a, T b) { volatile T p = a * b; return p; }
template <class T> inline T cpuify_add(T a, T b) { volatile T s = a + b; return s; }
#endif
// Smith's division with the reciprocal of the denominator's scale, the way NumPy divides
template <class T> __host__ __device__ inline complex<T> cuCdiv(complex<T> x, complex<T> y) {
    T a = x.real(), b = x.imag(), c = y.real(), d = y.imag();
    T ac = c < 0 ? -c : c, ad = d < 0 ? -d : d;
    if (ac >= ad) {
        if (ac == 0 && ad == 0) return complex<T>(a / ac, b / ad);
        T rat = d / c;
        T scl = T(1) / cpuify_add(c, cpuify_mul(d, rat));
        return complex<T>(cpuify_mul(cpuify_add(a, cpuify_mul(b, rat)), scl),
                          cpuify_mul(cpuify_add(b, -cpuify_mul(a, rat)), scl));
    }
    T rat = c / d;
    T scl = T(1) / cpuify_add(d, cpuify_mul(c, rat));
    return complex<T>(cpuify_mul(cpuify_add(cpuify_mul(a, rat), b), scl),
                      cpuify_mul(cpuify_add(cpuify_mul(b, rat), -a), scl));
}
// |z| as NumPy's abs computes it (its vector loops, on CPUs with FMA): the larger part
// times sqrt(fma(r, r, 1)), r the ratio of the smaller to the larger; within 1 ulp
template <class T> __host__ __device__ inline T cpuify_cabs(T re, T im) {
    T a = re < 0 ? -re : re, b = im < 0 ? -im : im;
    T l = a > b ? a : b, s = a > b ? b : a;
    if (isinf(a) || isinf(b)) return T(1) / T(0);
    if (isnan(a) || isnan(b)) return a + b;
    if (l == 0) return l;
    T r = s / l;
    return cpuify_mul(l, sqrt(fma(r, r, T(1))));
}
__host__ __device__ inline float cuCabs(cuFloatComplex x) { return cpuify_cabs(x.real(), x.imag()); }
__host__ __device__ inline double cuCabs(cuDoubleComplex x) { return cpuify_cabs(x.real(), x.imag()); }
template <class T> __host__ __device__ inline complex<T> cuCfma(complex<T> x, complex<T> y,
                                                                complex<T> d) {
    T re = x.real() * y.real() + d.real();
    re = -(x.imag() * y.imag()) + re;
    T im = x.real() * y.imag() + d.imag();
    im = x.imag() * y.real() + im;
    return complex<T>(re, im);
}
#define cuConjf cuConj
#define cuCaddf cuCadd
#define cuCsubf cuCsub
#define cuCmulf cuCmul
#define cuCdivf cuCdiv
#define cuCabsf cuCabs
#define cuCfmaf cuCfma
__host__ __device__ inline cuDoubleComplex cuComplexFloatToDouble(cuFloatComplex c) {
    return cuDoubleComplex(double(c.real()), double(c.imag())); }
__host__ __device__ inline cuFloatComplex cuComplexDoubleToFloat(cuDoubleComplex c) {
    return cuFloatComplex(float(c.real()), float(c.imag())); }
"""

# C++ standard headers served to jitify=True kernels from libcu++
_STD_FROM_LIBCUXX = (
    "algorithm", "array", "atomic", "bit", "bitset", "cassert", "cfloat", "climits",
    "cmath", "complex", "concepts", "cstddef", "cstdint", "cstdlib", "cstring", "ctime",
    "functional", "initializer_list", "iterator", "limits", "numbers", "numeric", "optional",
    "ratio", "span", "string_view", "tuple", "type_traits", "utility", "variant",
)
_STD_C_NAMES = {"stdint.h": "cstdint", "stddef.h": "cstddef", "limits.h": "climits",
                "float.h": "cfloat", "assert.h": "cassert"}


def _std_header(name: str) -> str:
    return (f"#pragma once\n#include <cuda/std/{name}>\n"
            "namespace cuda { namespace std {} }\nnamespace std { using namespace cuda::std; }\n")


def jitify_headers() -> dict[str, str]:
    """Include name -> text for the standard headers a jitify=True kernel may include."""
    out = {name: _std_header(name) for name in _STD_FROM_LIBCUXX}
    for c_name, cxx in _STD_C_NAMES.items():
        out[c_name] = f"#pragma once\n#include <{cxx}>\nusing namespace cuda::std;\n"
    out["cstdio"] = "#pragma once\nnamespace std { using ::printf; }\n"
    out["stdio.h"] = "#pragma once\n"
    return out


def cupy_headers() -> dict[str, str]:
    """The CuPy headers kernels may include (always on the include path, as in CuPy)."""
    return {"cupy/complex.cuh": COMPLEX_CUH, "cpuify/cucomplex_bridge.h": CUCOMPLEX_BRIDGE}


_CUCOMPLEX_INCLUDE = re.compile(r'#\s*include\s*[<"]cuComplex\.h[>"]')


def translate_cucomplex(source: str) -> str:
    """`translate_cucomplex=True`: `#include <cuComplex.h>` becomes the bridge header."""
    return _CUCOMPLEX_INCLUDE.sub("#include <cpuify/cucomplex_bridge.h>", source)


def headers_for(source: str, *, jitify: bool) -> dict[str, str]:
    """The headers to hand the compiler for `source`: the CuPy ones always (as CuPy puts
    its include directory on the path), the standard ones with jitify."""
    out = cupy_headers()
    if jitify:
        out.update(jitify_headers())
    return out
