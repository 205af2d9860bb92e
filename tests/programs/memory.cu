// Pinned, mapped, managed, pitched and 3D memory; memset variants; pointer attributes.
#include "check.h"

__global__ void add_one(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}

__global__ void fill_pitched(float *p, size_t pitch, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) ((float *)((char *)p + y * pitch))[x] = y * 1000 + x;
}

__global__ void fill_3d(cudaPitchedPtr p, int w, int h, int d) {
    int x = threadIdx.x, y = blockIdx.x, z = blockIdx.y;
    if (x < w && y < h && z < d) {
        char *slice = (char *)p.ptr + z * p.pitch * h;
        ((int *)(slice + y * p.pitch))[x] = z * 100 + y * 10 + x;
    }
}

int main() {
    const int n = 1000;
    // pinned host memory
    int *pinned;
    CHECK(cudaMallocHost(&pinned, n * sizeof(int)));
    for (int i = 0; i < n; i++) pinned[i] = i;
    int *d;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    CHECK(cudaMemcpy(d, pinned, n * sizeof(int), cudaMemcpyHostToDevice));
    add_one<<<4, 256>>>(d, n);
    CHECK(cudaMemcpy(pinned, d, n * sizeof(int), cudaMemcpyDefault));
    printf("pinned %d %d\n", pinned[0], pinned[999]);

    // mapped host memory used directly by a kernel
    int *mapped, *mapped_dev;
    CHECK(cudaHostAlloc(&mapped, n * sizeof(int), cudaHostAllocMapped));
    for (int i = 0; i < n; i++) mapped[i] = 2 * i;
    CHECK(cudaHostGetDevicePointer((void **)&mapped_dev, mapped, 0));
    add_one<<<4, 256>>>(mapped_dev, n);
    CHECK(cudaDeviceSynchronize());
    unsigned flags = 0;
    CHECK(cudaHostGetFlags(&flags, mapped));
    printf("mapped %d %d flags %u\n", mapped[0], mapped[999], flags);

    // managed memory
    int *m;
    CHECK(cudaMallocManaged(&m, n * sizeof(int)));
    for (int i = 0; i < n; i++) m[i] = 3 * i;
    add_one<<<4, 256>>>(m, n);
    CHECK(cudaDeviceSynchronize());
    printf("managed %d %d\n", m[0], m[999]);

    // pointer attributes
    cudaPointerAttributes a;
    CHECK(cudaPointerGetAttributes(&a, d));
    int t_dev = a.type;
    CHECK(cudaPointerGetAttributes(&a, pinned));
    int t_host = a.type;
    CHECK(cudaPointerGetAttributes(&a, m + 10));
    int t_man = a.type;
    int stack_var = 0;
    CHECK(cudaPointerGetAttributes(&a, &stack_var));
    printf("attr device=%d host=%d managed=%d unregistered=%d\n", t_dev == cudaMemoryTypeDevice,
           t_host == cudaMemoryTypeHost, t_man == cudaMemoryTypeManaged,
           a.type == cudaMemoryTypeUnregistered);

    // memset
    CHECK(cudaMemset(d, 0x01, n * sizeof(int)));
    CHECK(cudaMemcpy(pinned, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    printf("memset 0x%08x\n", pinned[500]);

    // pitched 2D: kernel fill, 2D copy out of a sub-rectangle, memset2D
    const int w = 70, h = 5;
    float *pd;
    size_t pitch;
    CHECK(cudaMallocPitch((void **)&pd, &pitch, w * sizeof(float), h));
    fill_pitched<<<dim3(1, h), 128>>>(pd, pitch, w, h);
    float sub[3][4];
    CHECK(cudaMemcpy2D(sub, 4 * sizeof(float), (char *)pd + pitch + 2 * sizeof(float), pitch,
                       4 * sizeof(float), 3, cudaMemcpyDeviceToHost));
    printf("pitch_ok %d sub %g %g %g\n", pitch >= w * sizeof(float) && pitch % 256 == 0,
           sub[0][0], sub[0][3], sub[2][1]);
    CHECK(cudaMemset2D(pd, pitch, 0, 2 * sizeof(float), h));
    CHECK(cudaMemcpy2D(sub, 4 * sizeof(float), pd, pitch, 4 * sizeof(float), 3, cudaMemcpyDeviceToHost));
    printf("memset2d %g %g %g\n", sub[1][0], sub[1][1], sub[1][2]);
    printf("bad pitch %s\n", cudaGetErrorName(cudaMemcpy2D(sub, 2, pd, pitch, 4, 1, cudaMemcpyDeviceToHost)));

    // 3D
    cudaExtent ext = make_cudaExtent(6 * sizeof(int), 4, 3);
    cudaPitchedPtr p3;
    CHECK(cudaMalloc3D(&p3, ext));
    CHECK(cudaMemset3D(p3, 0, ext));
    fill_3d<<<dim3(4, 3), 32>>>(p3, 6, 4, 3);
    int host3[3][4][6];
    cudaMemcpy3DParms parms = {0};
    parms.srcPtr = p3;
    parms.dstPtr = make_cudaPitchedPtr(host3, 6 * sizeof(int), 6, 4);
    parms.extent = ext;
    parms.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&parms));
    printf("3d %d %d %d\n", host3[0][0][0], host3[1][2][3], host3[2][3][5]);

    size_t freeb, total;
    CHECK(cudaMemGetInfo(&freeb, &total));
    printf("meminfo %d\n", total > 0 && freeb <= total);

    CHECK(cudaFreeHost(pinned));
    CHECK(cudaFreeHost(mapped));
    CHECK(cudaFree(m));
    CHECK(cudaFree(d));
    CHECK(cudaFree(pd));
    CHECK(cudaFree(p3.ptr));
    return 0;
}
