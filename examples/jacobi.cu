// A whole CUDA program: 2D Jacobi iterations on a square grid, two device buffers swapped
// every step.  Runs as is (cpuify run examples/jacobi.cu), or over MPI ranks:
//   cpuify nvcc --distributed examples/jacobi.cu -o /tmp/jacobi && mpiexec -n 2 /tmp/jacobi
// The checksum printed is the same either way.
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void jacobi(const float *in, float *out, int n) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= 1 && x < n - 1 && y >= 1 && y < n - 1)
        out[y * n + x] = 0.25f * (in[y * n + x - 1] + in[y * n + x + 1]
                                  + in[(y - 1) * n + x] + in[(y + 1) * n + x]);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1024, steps = argc > 2 ? atoi(argv[2]) : 100;
    std::vector<float> h(n * n, 0.0f);
    for (int x = 0; x < n; x++) h[x] = 1.0f;            // a hot top edge
    float *a, *b;
    cudaMalloc(&a, n * n * sizeof(float));
    cudaMalloc(&b, n * n * sizeof(float));
    cudaMemcpy(a, h.data(), n * n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(b, h.data(), n * n * sizeof(float), cudaMemcpyHostToDevice);
    dim3 block(16, 16), grid((n + 15) / 16, (n + 15) / 16);
    for (int s = 0; s < steps; s++) {
        jacobi<<<grid, block>>>(a, b, n);
        float *t = a; a = b; b = t;
    }
    cudaMemcpy(h.data(), a, n * n * sizeof(float), cudaMemcpyDeviceToHost);
    if (cudaGetLastError() != cudaSuccess) { printf("CUDA error\n"); return 1; }
    double sum = 0;
    for (float v : h) sum += v;
    printf("jacobi %dx%d, %d steps: checksum %.6f\n", n, n, steps, sum);
    cudaFree(a);
    cudaFree(b);
    return 0;
}
