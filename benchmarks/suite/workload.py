"""The interface every workload of the benchmark suite implements.

A workload module is a file `benchmarks/suite/workloads/<name>.py` that defines
`WORKLOAD = SomeWorkload()`, an instance of a subclass of `Workload`.  The harness
(`benchmarks/suite/harness.py`) discovers it, builds its OpenMP twin, and for one size:

1. `inp = make_inputs(p, rng)`, `ref = reference(p, inp)`  (p = `sizes[size]`);
2. for each implementation (cpuify, OpenMP on all cores, OpenMP on 1 thread, PoCL, numba
   simulator): one untimed call whose output is checked against `ref` with `check`, then
   warm-up calls and timed calls (best and median of several), then the output of the last
   timed call is checked again (so an implementation that only works on the first call, e.g.
   forgets to clear an accumulator, is caught);
3. ratios peer_time / cpuify_time (> 1: cpuify is faster), GB/s from `bytes_moved`,
   GFLOP/s from `flops`.

All implementations get the *same* `inp` dict: a `run_*` method must not modify the input
arrays (copy them into a cached buffer first if the kernel works in place, e.g. a sort, and
keep that copy inside the timed call, for every implementation alike).  Keys starting with
"_" are caches owned by the `run_*` methods (`_cpuify_bufs`, `_omp_bufs`, `_cl_bufs`,
`_numba_bufs`); the harness ignores them.

Output dicts map names to NumPy arrays or scalars; every key of `reference`'s dict must be
present in each implementation's dict (extra keys are ignored by the default `check`).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

# ctypes types and converters for the OpenMP twins' arguments
FLOAT_P = ctypes.POINTER(ctypes.c_float)
INT_P = ctypes.POINTER(ctypes.c_int)


def float_ptr(a: np.ndarray) -> Any:
    """A float32 array as a `float *` argument."""
    return a.ctypes.data_as(FLOAT_P)


def aligned_empty(shape: tuple[int, ...], dtype: Any, align: int = 256) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts at a multiple of `align` bytes
    (256: what cudaMalloc guarantees).  NumPy's own start varies from process to process
    (a large np.empty lands 16 bytes past a page start in one run, 64-byte aligned in the
    next); where a kernel's rows are whole cache lines that decides, for every peer alike,
    whether each row access splits across two lines (lu_tile: 2x for both cpuify and the
    OpenMP twin), so work buffers a peer allocates for itself are aligned the same way."""
    dt = np.dtype(dtype)
    size = int(np.prod(shape)) * dt.itemsize
    raw = np.empty(size + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + size].view(dt).reshape(shape)


class Workload:
    name: str = ""                      # "triad"
    kind: str = "other"                 # "bandwidth" | "compute" | "other"
    sizes: dict[str, dict] = {}         # {"small": {...}, "default": {...}, "large": {...}}
    cuda_source: str = ""               # CUDA C++ (extern "C" kernels)
    omp_source: str = ""                # C99 + OpenMP; exported functions called via ctypes
    opencl_source: str | None = None    # OpenCL C kernels, or None (then opencl_reason says why)
    opencl_reason: str = ""
    numba_reason: str = "no Python port"    # set to "" when run_numba is implemented

    # Optional extras (the harness reads them with getattr; defaults shown):
    description: str = ""               # one line for the README / JSON
    cuda_options: tuple[str, ...] = ()  # RawModule(code=cuda_source, options=cuda_options)
    omp_cflags: tuple[str, ...] = ()    # extra gcc flags (after -O3 -march=native -fopenmp)
    opencl_options: str = ""            # Program.build(options=...)
    numba_size: dict | None = None      # parameter overrides for the numba simulator peer
    #   (it runs every CUDA thread as a Python thread, so only tiny problems are feasible);
    #   when given, numba runs at {**p, **numba_size} at every --size, and the harness also
    #   times cpuify at those parameters for the ratio.  When None, numba runs only at
    #   --size small, with the small parameters.

    # ------------------------------------------------------------------------------------
    def make_inputs(self, p: dict, rng: np.random.Generator) -> dict:
        """NumPy arrays / scalars for the parameters p."""
        raise NotImplementedError

    def reference(self, p: dict, inp: dict) -> dict:
        """The expected outputs, computed with NumPy."""
        raise NotImplementedError

    def run_cpuify(self, p: dict, inp: dict, mod: Any) -> dict:
        """mod = cpuify.RawModule(code=cuda_source, options=cuda_options).  Allocates its own
        outputs (cache them in inp["_cpuify_bufs"]: the harness calls this repeatedly)."""
        raise NotImplementedError

    def run_omp(self, p: dict, inp: dict, lib: Any) -> dict:
        """lib = ctypes.CDLL of the compiled omp_source (set argtypes/restype here, or pass
        arrays as `a.ctypes.data_as(ctypes.c_void_p)`).  The harness sets the OpenMP thread
        count (omp_set_num_threads) before calling; do not set it here."""
        raise NotImplementedError

    def run_opencl(self, p: dict, inp: dict, cl: Any, ctx: Any, queue: Any, prg: Any) -> dict:
        """cl = the pyopencl module, ctx/queue on the PoCL CPU device, prg = the built
        opencl_source.  Copy inputs to device buffers once (cache them in inp["_cl_bufs"]);
        a call then times the kernel launches plus the readback of the results into host
        arrays, and must have finished (blocking copy / queue.finish()) when it returns."""
        raise NotImplementedError

    def run_numba(self, p: dict, inp: dict) -> dict:
        """Optional: the kernel ported to numba.cuda, run by the CUDA simulator
        (NUMBA_ENABLE_CUDASIM=1 is set by the harness before numba is imported)."""
        raise NotImplementedError

    def check(self, p: dict, out: dict, ref: dict) -> tuple[bool, str]:
        """Default: np.allclose(rtol=1e-4, atol=1e-5) per key for floating-point arrays,
        exact equality for integers and booleans."""
        return default_check(out, ref)

    def bytes_moved(self, p: dict) -> float | None:
        """Bytes read + written by one run (no write-allocate), for GB/s."""
        return None

    def flops(self, p: dict) -> float | None:
        """Floating-point operations of one run, for GFLOP/s."""
        return None


def default_check(out: dict, ref: dict, rtol: float = 1e-4, atol: float = 1e-5
                  ) -> tuple[bool, str]:
    """Compares out against ref key by key; returns (ok, message)."""
    if not isinstance(out, dict):
        return False, f"run returned {type(out).__name__}, expected a dict"
    msgs = []
    ok = True
    for key, r in ref.items():
        if key not in out:
            return False, f"missing output {key!r}"
        o = np.asarray(out[key])
        r = np.asarray(r)
        if o.shape != r.shape and o.size == r.size:
            o = o.reshape(r.shape)
        if o.shape != r.shape:
            return False, f"{key}: shape {o.shape}, expected {r.shape}"
        if np.issubdtype(r.dtype, np.floating) or np.issubdtype(r.dtype, np.complexfloating):
            o64 = o.astype(np.float64 if np.issubdtype(r.dtype, np.floating) else np.complex128)
            r64 = r.astype(o64.dtype)
            good = np.isclose(o64, r64, rtol=rtol, atol=atol, equal_nan=True)
            bad = int(np.size(good) - np.count_nonzero(good))
            if bad:
                ok = False
                idx = np.unravel_index(int(np.argmin(good.reshape(-1) if good.ndim else good)),
                                       good.shape) if good.ndim else ()
                msgs.append(f"{key}: {bad}/{good.size} elements differ "
                            f"(first at {tuple(int(i) for i in idx)}: "
                            f"{o64[idx]!r} vs {r64[idx]!r})")
            else:
                err = float(np.max(np.abs(o64 - r64))) if o64.size else 0.0
                msgs.append(f"{key}: max abs err {err:.2g}")
        else:
            eq = o == r
            bad = int(np.size(eq) - np.count_nonzero(eq))
            if bad:
                ok = False
                idx = np.unravel_index(int(np.argmin(eq.reshape(-1))), eq.shape) if eq.ndim else ()
                msgs.append(f"{key}: {bad}/{eq.size} elements differ "
                            f"(first at {tuple(int(i) for i in idx)}: {o[idx]!r} vs {r[idx]!r})")
            else:
                msgs.append(f"{key}: exact")
    return ok, "; ".join(msgs)
