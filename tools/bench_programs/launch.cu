// Launch overhead of an empty kernel from C host code, and cudaMemcpy bandwidth vs memcpy.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

__global__ void empty() {}

static double now() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int launches = argc > 1 ? atoi(argv[1]) : 200000;
    for (int i = 0; i < 1000; i++) empty<<<1, 32>>>();
    cudaDeviceSynchronize();
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        for (int i = 0; i < launches; i++) empty<<<1, 32>>>();
        cudaDeviceSynchronize();
        double t = (now() - t0) / launches;
        if (t < best) best = t;
    }
    printf("launch_us %.3f\n", best * 1e6);
    // many blocks: the launch wakes the worker pool
    best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        for (int i = 0; i < launches / 10; i++) empty<<<64, 256>>>();
        cudaDeviceSynchronize();
        double t = (now() - t0) / (launches / 10);
        if (t < best) best = t;
    }
    printf("launch_pool_us %.3f\n", best * 1e6);

    size_t bytes = (size_t)256 << 20;
    char *h = (char *)malloc(bytes), *h2 = (char *)malloc(bytes), *d;
    cudaMalloc(&d, bytes);
    memset(h, 1, bytes); memset(h2, 2, bytes); cudaMemset(d, 3, bytes);   // touch every page
    double t_memcpy = 1e9, t_h2d = 1e9, t_d2h = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now(); memcpy(h2, h, bytes); double t1 = now();
        cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice); double t2 = now();
        cudaMemcpy(h2, d, bytes, cudaMemcpyDeviceToHost); double t3 = now();
        if (t1 - t0 < t_memcpy) t_memcpy = t1 - t0;
        if (t2 - t1 < t_h2d) t_h2d = t2 - t1;
        if (t3 - t2 < t_d2h) t_d2h = t3 - t2;
    }
    printf("memcpy_GBps %.2f h2d_GBps %.2f d2h_GBps %.2f\n", bytes / t_memcpy / 1e9, bytes / t_h2d / 1e9,
           bytes / t_d2h / 1e9);
    return h2[12345] == 1 ? 0 : 1;
}
