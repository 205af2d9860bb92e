// Faults and runaway kernels in a whole program: each must become CUDA's error, and the
// program must go on (a GPU reports them from the next synchronizing call).
//   fault far      a write far outside the allocation (block 3)
//   fault null     a write through NULL (block 1)
//   fault memcpy   cudaMemcpy from/to pointers that are no memory at all
//   fault spin     a kernel spinning forever (run with CPUIFY_KERNEL_TIMEOUT)
//   fault fork     fork while another thread allocates and launches; the children compute
#include <atomic>
#include <cstdio>
#include <cstring>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

__global__ void scatter(int *p, int stride) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (blockIdx.x == 3) p[(size_t)i * stride] = i;   // far outside the allocation
    else p[i] = i;
}

__global__ void through_null(int *p, int *null_ptr) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    p[i] = i;
    if (blockIdx.x == 1 && threadIdx.x == 7) *null_ptr = 1;
}

__global__ void spin(volatile int *flag) {
    if (blockIdx.x == 2)
        while (*flag == 0) { }
}

__global__ void iota(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = 2 * i;
}

// allocates, launches and copies back; returns the number of wrong elements
static int compute(int n) {
    int *d = nullptr;
    if (cudaMalloc(&d, n * sizeof(int)) != cudaSuccess) return -1;
    iota<<<(n + 255) / 256, 256>>>(d, n);
    int *h = new int[n];
    cudaError_t e = cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost);
    int bad = e == cudaSuccess ? 0 : -1;
    for (int i = 0; bad >= 0 && i < n; i++) bad += h[i] != 2 * i;
    delete[] h;
    cudaFree(d);
    return bad;
}

static int fork_test() {
    std::atomic<bool> stop{false};
    // the other thread keeps the runtime's locks busy: allocations, launches, copies
    std::thread busy([&] {
        for (int i = 0; !stop; i++) {
            void *p;
            cudaMalloc(&p, 64);
            cudaFree(p);
            if (i % 64 == 0) compute(1 << 12);
        }
    });
    int ok = 0;
    for (int round = 0; round < 20; round++) {
        pid_t pid = fork();
        if (pid == 0) _exit(compute(100000) == 0 ? 0 : 3);
        int status = 0;
        waitpid(pid, &status, 0);
        ok += WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    stop = true;
    busy.join();
    printf("children ok: %d of 20\n", ok);
    return ok == 20 ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "far";
    if (!strcmp(mode, "fork")) return fork_test();
    int *d;
    cudaMalloc(&d, 1024 * sizeof(int));
    printf("before the launch\n");
    if (!strcmp(mode, "memcpy")) {
        int host[4] = {1, 2, 3, 4};
        int *bogus = (int *)(1ull << 46);   // unmapped: neither device nor host memory
        printf("from bogus: %s\n", cudaGetErrorName(cudaMemcpy(host, bogus, 16, cudaMemcpyDeviceToHost)));
        printf("to bogus: %s\n", cudaGetErrorName(cudaMemcpy(bogus, host, 16, cudaMemcpyHostToDevice)));
        printf("memset bogus: %s\n", cudaGetErrorName(cudaMemset(bogus, 0, 16)));
        printf("2D from bogus: %s\n", cudaGetErrorName(
            cudaMemcpy2D(host, 8, bogus, 64, 8, 2, cudaMemcpyDeviceToHost)));
        printf("last error: %s\n", cudaGetErrorName(cudaGetLastError()));
        // not sticky: the next copy works
        cudaError_t e = cudaMemcpy(d, host, 16, cudaMemcpyHostToDevice);
        int back[4] = {0, 0, 0, 0};
        cudaError_t e2 = cudaMemcpy(back, d, 16, cudaMemcpyDeviceToHost);
        printf("after: %s %s %d %d %d %d\n", cudaGetErrorName(e), cudaGetErrorName(e2), back[0],
               back[1], back[2], back[3]);
        return 0;
    }
    if (!strcmp(mode, "spin")) {
        int *flag;
        cudaMalloc(&flag, sizeof(int));
        cudaMemset(flag, 0, sizeof(int));
        spin<<<4, 32>>>(flag);
    } else if (!strcmp(mode, "null")) {
        through_null<<<4, 256>>>(d, nullptr);
    } else {
        scatter<<<4, 256>>>(d, 1 << 24);
    }
    cudaError_t e = cudaDeviceSynchronize();
    printf("after the kernel: %s\n", cudaGetErrorName(e));
    // sticky, as on a GPU
    printf("then cudaMalloc: %s\n", cudaGetErrorName(cudaMalloc(&d, 16)));
    return e == cudaSuccess ? 0 : 1;
}
