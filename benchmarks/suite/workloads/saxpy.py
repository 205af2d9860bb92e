"""SAXPY y = a*x + y, in place, on float32 vectors (kind: bandwidth).

* CUDA: one thread per element, grid ceil(n/256) blocks of 256 threads (the main variant,
  timed).  The source also holds `saxpy_gs`, the grid-stride alternative (any grid covers
  all n elements; launched with a fixed grid, e.g. 32 blocks per worker): not timed here,
  benchmarks/core.py compares the two launch styles on vadd/triad.
* OpenMP: `#pragma omp parallel for simd schedule(static)`.
* OpenCL: the same one-work-item-per-element kernel, local size 256.

In place, like BLAS saxpy (two streams, one of them read and written, unlike the triad's
three): every implementation owns a copy of y, made once outside the timed calls, and
counts its calls; after k calls its y must equal y0 + k*a*x.  The check computes that in
float64 and allows |y - y_ref| <= 1e-5 |y_ref| + k * 1e-6 (k float32 roundings of a value
of magnitude <= 1 + k*a).

Traffic: 12 bytes per element (read x and y, write y; no write-allocate).
"""

from __future__ import annotations

import ctypes

import numpy as np

from benchmarks.suite.workload import Workload

BLOCK = 256

CUDA_SRC = r"""
// one thread per element: grid = ceil(n / 256) blocks of 256 threads
extern "C" __global__ void saxpy(int n, float a, const float *__restrict__ x,
                                 float *__restrict__ y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
// the grid-stride alternative (not timed here)
extern "C" __global__ void saxpy_gs(int n, float a, const float *__restrict__ x,
                                    float *__restrict__ y) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}
"""

OMP_SRC = r"""
void saxpy(long n, float a, const float *restrict x, float *restrict y)
{
#pragma omp parallel for simd schedule(static)
    for (long i = 0; i < n; i++)
        y[i] = a * x[i] + y[i];
}
"""

OPENCL_SRC = r"""
__kernel void saxpy(int n, float a, __global const float *restrict x,
                    __global float *restrict y) {
    int i = get_global_id(0);
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

_vp = ctypes.c_void_p


class _State:
    """One implementation's copy of y and the number of saxpy calls applied to it (read at
    check time, so a check always sees the count that matches the buffer's contents)."""

    def __init__(self, y: np.ndarray) -> None:
        self.y = y
        self.calls = 0


class Saxpy(Workload):
    name = "saxpy"
    kind = "bandwidth"
    description = "SAXPY y = a*x + y in place, float32, one thread per element"
    sizes = {
        "small": {"n": 1 << 20},
        "default": {"n": 1 << 25},
        "large": {"n": 1 << 27},
    }
    cuda_source = CUDA_SRC
    omp_source = OMP_SRC
    opencl_source = OPENCL_SRC
    numba_reason = "no Python port"

    A = 0.5

    def make_inputs(self, p, rng):
        n = p["n"]
        return {"x": rng.random(n, dtype=np.float32), "y": rng.random(n, dtype=np.float32),
                "a": np.float32(self.A)}

    def reference(self, p, inp):
        # y after one call; check() scales the a*x term by the actual number of calls
        return {"y": inp["y"].astype(np.float64),
                "ax": float(inp["a"]) * inp["x"].astype(np.float64)}

    def check(self, p, out, ref):
        st = out.get("_state")
        if not isinstance(st, _State):
            return False, "no _state in the output"
        k = st.calls
        y = np.asarray(out["y"], np.float64)
        if y.shape != ref["y"].shape:
            return False, f"shape {y.shape}, expected {ref['y'].shape}"
        exp = ref["y"] + k * ref["ax"]
        err = np.abs(y - exp)
        tol = 1e-5 * np.abs(exp) + k * 1e-6
        bad = int(np.count_nonzero(~(err <= tol)))
        if bad:
            i = int(np.argmax(err - tol))
            return False, (f"after {k} calls: {bad}/{y.size} elements differ (first worst at "
                           f"{i}: {y[i]!r} vs {exp[i]!r})")
        return True, f"after {k} calls: max abs err {float(err.max()):.2g}"

    def _state(self, inp, key):
        st = inp.get(key)
        if st is None:
            st = inp[key] = _State(inp["y"].copy())
        return st

    def run_cpuify(self, p, inp, mod):
        n = p["n"]
        st = self._state(inp, "_cpuify_bufs")
        if not hasattr(st, "f"):
            st.f = mod.get_function("saxpy")
        st.f(((n + BLOCK - 1) // BLOCK,), (BLOCK,), (np.int32(n), inp["a"], inp["x"], st.y))
        st.calls += 1
        return {"y": st.y, "_state": st}

    def run_omp(self, p, inp, lib):
        n = p["n"]
        st = self._state(inp, "_omp_bufs")
        if st.calls == 0:
            lib.saxpy.argtypes = [ctypes.c_long, ctypes.c_float, _vp, _vp]
            lib.saxpy.restype = None
        lib.saxpy(n, float(inp["a"]), inp["x"].ctypes.data, st.y.ctypes.data)
        st.calls += 1
        return {"y": st.y, "_state": st}

    def run_opencl(self, p, inp, cl, ctx, queue, prg):
        # timed: the kernel and the blocking read of y into a host array
        n = p["n"]
        st = inp.get("_cl_bufs")
        if st is None:
            mf = cl.mem_flags
            st = inp["_cl_bufs"] = _State(np.empty(n, np.float32))
            st.dx = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=inp["x"])
            st.dy = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=inp["y"])
            st.k = cl.Kernel(prg, "saxpy")
            st.k.set_args(np.int32(n), inp["a"], st.dx, st.dy)
        gsize = (n + BLOCK - 1) // BLOCK * BLOCK
        cl.enqueue_nd_range_kernel(queue, st.k, (gsize,), (BLOCK,))
        cl.enqueue_copy(queue, st.y, st.dy, is_blocking=True)
        st.calls += 1
        return {"y": st.y, "_state": st}

    def bytes_moved(self, p):
        return 12.0 * p["n"]


WORKLOAD = Saxpy()
