// Multi-kernel pipeline: scale -> block-wise shared-memory reduction -> final reduction,
// plus a 2D kernel; checks the results on the host.
#include "check.h"

__global__ void scale(const float *in, float *out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * in[i];
}

__global__ void block_sum(const float *in, float *partial, int n) {
    extern __shared__ float buf[];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    buf[t] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) buf[t] += buf[t + s];
        __syncthreads();
    }
    if (t == 0) partial[blockIdx.x] = buf[0];
}

__global__ void transpose(const int *in, int *out, int rows, int cols) {
    __shared__ int tile[16][17];
    int x = blockIdx.x * 16 + threadIdx.x, y = blockIdx.y * 16 + threadIdx.y;
    if (x < cols && y < rows) tile[threadIdx.y][threadIdx.x] = in[y * cols + x];
    __syncthreads();
    int tx = blockIdx.y * 16 + threadIdx.x, ty = blockIdx.x * 16 + threadIdx.y;
    if (tx < rows && ty < cols) out[ty * rows + tx] = tile[threadIdx.x][threadIdx.y];
}

int main() {
    const int n = 100000, threads = 256, blocks = (n + threads - 1) / threads;
    float *h = (float *)malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) h[i] = (float)(i % 100);   // sum = 1000 * 4950 = 4950000
    float *d_in, *d_scaled, *d_partial, *d_total;
    CHECK(cudaMalloc(&d_in, n * sizeof(float)));
    CHECK(cudaMalloc(&d_scaled, n * sizeof(float)));
    CHECK(cudaMalloc(&d_partial, blocks * sizeof(float)));
    CHECK(cudaMalloc(&d_total, sizeof(float)));
    CHECK(cudaMemcpy(d_in, h, n * sizeof(float), cudaMemcpyHostToDevice));
    scale<<<blocks, threads>>>(d_in, d_scaled, 2.0f, n);
    block_sum<<<blocks, threads, threads * sizeof(float)>>>(d_scaled, d_partial, n);
    block_sum<<<1, 512, 512 * sizeof(float)>>>(d_partial, d_total, blocks);
    CHECK(cudaGetLastError());
    float total = 0;
    CHECK(cudaMemcpy(&total, d_total, sizeof(float), cudaMemcpyDeviceToHost));
    printf("sum %.1f\n", total);

    const int rows = 37, cols = 53;
    int *hm = (int *)malloc(rows * cols * sizeof(int)), *ht = (int *)malloc(rows * cols * sizeof(int));
    for (int i = 0; i < rows * cols; i++) hm[i] = i;
    int *dm, *dt;
    CHECK(cudaMalloc(&dm, rows * cols * sizeof(int)));
    CHECK(cudaMalloc(&dt, rows * cols * sizeof(int)));
    CHECK(cudaMemcpy(dm, hm, rows * cols * sizeof(int), cudaMemcpyHostToDevice));
    transpose<<<dim3((cols + 15) / 16, (rows + 15) / 16), dim3(16, 16)>>>(dm, dt, rows, cols);
    CHECK(cudaMemcpy(ht, dt, rows * cols * sizeof(int), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int y = 0; y < rows; y++)
        for (int x = 0; x < cols; x++)
            if (ht[x * rows + y] != hm[y * cols + x]) bad++;
    printf("transpose mismatches %d, out[1] %d, out[%d] %d\n", bad, ht[1], rows, ht[rows]);
    CHECK(cudaFree(d_in)); CHECK(cudaFree(d_scaled)); CHECK(cudaFree(d_partial));
    CHECK(cudaFree(d_total)); CHECK(cudaFree(dm)); CHECK(cudaFree(dt));
    free(h); free(hm); free(ht);
    return 0;
}
