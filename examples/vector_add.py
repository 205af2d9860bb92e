"""The first example: a CUDA kernel, compiled for the CPU, run on NumPy arrays."""
import numpy as np

import cpuify

source = r"""
extern "C" __global__ void saxpy(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

n = 1 << 20
x = np.random.rand(n).astype(np.float32)
y = np.random.rand(n).astype(np.float32)
expected = 2.0 * x + y

saxpy = cpuify.RawKernel(source, "saxpy")
saxpy(((n + 255) // 256,), (256,), (np.float32(2.0), x, y, np.int32(n)))

print("max error:", float(np.abs(y - expected).max()))
assert np.allclose(y, expected)
print("saxpy on", cpuify.num_threads(), "CPU threads: OK")
