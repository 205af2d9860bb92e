// Streams, events with real elapsed time, callbacks and host functions in stream order.
#include "check.h"
#include <unistd.h>

__global__ void inc(int *p, int n, int by) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += by;
}

__global__ void busy(float *p, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = p[i];
        for (int k = 0; k < iters; k++) v = v * 0.999f + 0.001f;
        p[i] = v;
    }
}

static int order[16], norder = 0;
static void CUDART_CB callback(cudaStream_t, cudaError_t status, void *data) {
    order[norder++] = (int)(size_t)data * (status == cudaSuccess ? 1 : -1);
}
static void CUDART_CB host_fn(void *data) { order[norder++] = (int)(size_t)data; }

int main() {
    const int n = 1 << 16;
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    int *h, *d1, *d2;
    CHECK(cudaMallocHost(&h, n * sizeof(int)));
    CHECK(cudaMalloc(&d1, n * sizeof(int)));
    CHECK(cudaMalloc(&d2, n * sizeof(int)));
    for (int i = 0; i < n; i++) h[i] = i;
    CHECK(cudaMemcpyAsync(d1, h, n * sizeof(int), cudaMemcpyHostToDevice, s1));
    CHECK(cudaMemcpyAsync(d2, h, n * sizeof(int), cudaMemcpyHostToDevice, s2));
    inc<<<n / 256, 256, 0, s1>>>(d1, n, 1);
    CHECK(cudaStreamAddCallback(s1, callback, (void *)1, 0));
    inc<<<n / 256, 256, 0, s2>>>(d2, n, 2);
    CHECK(cudaLaunchHostFunc(s2, host_fn, (void *)2));
    inc<<<n / 256, 256, 0, s1>>>(d1, n, 10);
    CHECK(cudaLaunchHostFunc(s1, host_fn, (void *)3));

    cudaEvent_t e;
    CHECK(cudaEventCreate(&e));
    CHECK(cudaEventRecord(e, s1));
    CHECK(cudaStreamWaitEvent(s2, e, 0));
    CHECK(cudaMemcpyAsync(d2, d1, sizeof(int) * 4, cudaMemcpyDeviceToDevice, s2));
    CHECK(cudaStreamSynchronize(s1));
    CHECK(cudaStreamSynchronize(s2));
    int r1[2], r2[8];
    CHECK(cudaMemcpy(r1, d1 + n - 2, sizeof(r1), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(r2, d2, sizeof(r2), cudaMemcpyDeviceToHost));
    printf("s1 %d %d s2 %d %d %d\n", r1[0], r1[1], r2[0], r2[3], r2[5]);
    // order within each stream is issue order; 1 before 3 (stream s1)
    int pos1 = -1, pos3 = -1;
    for (int i = 0; i < norder; i++) {
        if (order[i] == 1) pos1 = i;
        if (order[i] == 3) pos3 = i;
    }
    printf("callbacks %d in order %d\n", norder, pos1 >= 0 && pos3 > pos1);
    printf("query %s %s\n", cudaGetErrorName(cudaStreamQuery(s1)), cudaGetErrorName(cudaEventQuery(e)));

    // timing: a kernel that takes measurable time, and a host sleep between two events
    float *f;
    CHECK(cudaMalloc(&f, n * sizeof(float)));
    CHECK(cudaMemset(f, 0, n * sizeof(float)));
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    CHECK(cudaEventRecord(start, 0));
    usleep(20000);
    busy<<<n / 256, 256>>>(f, n, 200);
    CHECK(cudaEventRecord(stop, 0));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    printf("elapsed >= 20ms %d, < 10s %d\n", ms >= 20.0f, ms < 10000.0f);
    cudaEvent_t unrec, notiming;
    CHECK(cudaEventCreate(&unrec));
    CHECK(cudaEventCreateWithFlags(&notiming, cudaEventDisableTiming));
    CHECK(cudaEventRecord(notiming, s1));
    printf("unrecorded %s\n", cudaGetErrorName(cudaEventElapsedTime(&ms, start, unrec)));
    printf("no timing %s\n", cudaGetErrorName(cudaEventElapsedTime(&ms, start, notiming)));
    cudaGetLastError();
    int lo, hi;
    CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    cudaStream_t sp;
    CHECK(cudaStreamCreateWithPriority(&sp, cudaStreamNonBlocking, hi));
    int prio;
    CHECK(cudaStreamGetPriority(sp, &prio));
    printf("priority %d\n", prio == hi);
    CHECK(cudaStreamDestroy(sp));
    CHECK(cudaEventDestroy(e)); CHECK(cudaEventDestroy(start)); CHECK(cudaEventDestroy(stop));
    CHECK(cudaEventDestroy(unrec)); CHECK(cudaEventDestroy(notiming));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
    CHECK(cudaDeviceSynchronize());
    return 0;
}
