// Asynchronous kernel launches: the host goes on after kernel<<<...>>>() until a call that
// synchronizes.  argv[1] picks the case (see tests/test_async_launch.py).
#include "check.h"
#include <atomic>
#include <thread>
#include <unistd.h>

// Chai's shape (CUDA-U PAD): block b waits until the host set flags[b], then tells the host
// it got there through done[b]; the host sets flags[b + 1] only after done[b].
__global__ void fed(int *flags, int *done, int *out) {
    int b = blockIdx.x;
    __shared__ int seen;
    if (threadIdx.x == 0) {
        int v;
        while ((v = atomicAdd_system(&flags[b], 0)) == 0) {
        }
        seen = v;
        atomicAdd_system(&done[b], 1);
    }
    __syncthreads();
    out[b * blockDim.x + threadIdx.x] = seen * 1000 + threadIdx.x;
}

// Sets *started, then waits for the host's *stop.
__global__ void until_stopped(volatile int *started, int *stop, int *out) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        *started = 1;
        while (atomicAdd_system(stop, 0) == 0) {
        }
        *out = 7;
    }
}

// prints, lets the host know, waits for its answer, prints again
__global__ void chatty(volatile int *started, int *stop) {
    printf("device before the flag\n");
    *started = 1;
    while (atomicAdd_system(stop, 0) == 0) {
    }
    printf("device after the flag\n");
}

__global__ void add(int *p, int n, int by) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += by;
}

__global__ void scatter(int *p, int at) { p[at] = 1; }

__global__ void mark(int *p) { *p = 1; }

__global__ void slow_then_print(int *out, int iters) {
    float v = 0.0f;
    for (int k = 0; k < iters; k++) v = v * 0.5f + 1.0f;
    *out = 42 + (v > 3.0f);     // v tends to 2: 42
    printf("kernel done\n");
}

// counts itself after about `clocks` clock64() ticks of work
__global__ void tick(unsigned long long *count, long long clocks) {
    long long start = clock64();
    while (clock64() - start < clocks) {
    }
    atomicAdd(count, 1ULL);
}

static int *g_exit_out;
static void at_exit() { printf("atexit sees %d\n", *g_exit_out); }

static const char *name(cudaError_t e) { return cudaGetErrorName(e); }

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "feed";
    if (!strcmp(what, "feed")) {
        const int blocks = 16, threads = 64;
        int *flags, *done, *out;
        CHECK(cudaMallocManaged(&flags, blocks * sizeof(int)));
        CHECK(cudaHostAlloc(&done, blocks * sizeof(int), cudaHostAllocMapped));
        CHECK(cudaMalloc(&out, blocks * threads * sizeof(int)));
        memset(flags, 0, blocks * sizeof(int));
        memset(done, 0, blocks * sizeof(int));
        fed<<<blocks, threads>>>(flags, done, out);
        printf("launch %s\n", name(cudaGetLastError()));   // does not wait for the kernel
        std::thread host([&] {
            for (int b = 0; b < blocks; b++) {
                reinterpret_cast<std::atomic<int> *>(&flags[b])->store(b + 1);
                while (reinterpret_cast<std::atomic<int> *>(&done[b])->load() == 0) {
                }
            }
        });
        CHECK(cudaDeviceSynchronize());
        host.join();
        int h[blocks * threads];
        CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
        long sum = 0;
        for (int i = 0; i < blocks * threads; i++) sum += h[i];
        printf("fed blocks %d sum %ld out[70] %d\n", blocks, sum, h[70]);
    } else if (!strcmp(what, "overlap")) {
        // the host sees the kernel start, does its own work while it runs, then stops it
        int *started, *stop, *out;
        CHECK(cudaHostAlloc(&started, sizeof(int), 0));
        CHECK(cudaMallocManaged(&stop, sizeof(int)));
        CHECK(cudaMalloc(&out, sizeof(int)));
        *started = 0;
        *stop = 0;
        until_stopped<<<1, 32>>>(started, stop, out);
        while (!reinterpret_cast<volatile int *>(started)[0]) {
        }
        printf("kernel running: %s\n", name(cudaStreamQuery(0)));
        long host_sum = 0;                      // host work while the kernel runs
        for (int i = 0; i < 1000000; i++) host_sum += i % 7;
        usleep(argc > 2 ? atoi(argv[2]) * 1000 : 0);
        reinterpret_cast<std::atomic<int> *>(stop)->store(1);
        CHECK(cudaDeviceSynchronize());
        printf("after sync: %s\n", name(cudaStreamQuery(0)));
        int h = 0;
        CHECK(cudaMemcpy(&h, out, sizeof h, cudaMemcpyDeviceToHost));
        printf("host %ld kernel %d\n", host_sum, h);
    } else if (!strcmp(what, "printf")) {
        // device printf reaches stdout at the next synchronizing call, after the host's
        int *started, *stop;
        CHECK(cudaHostAlloc(&started, sizeof(int), 0));
        CHECK(cudaMallocManaged(&stop, sizeof(int)));
        *started = 0;
        *stop = 0;
        chatty<<<1, 1>>>(started, stop);
        while (!reinterpret_cast<volatile int *>(started)[0]) {
        }
        printf("host sees the kernel running\n");
        reinterpret_cast<std::atomic<int> *>(stop)->store(1);
        CHECK(cudaDeviceSynchronize());
        printf("host after sync\n");
    } else if (!strcmp(what, "order")) {
        // copies and launches on streams keep issue order
        const int n = 4096;
        cudaStream_t s1, s2;
        CHECK(cudaStreamCreate(&s1));
        CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
        int *h, *a, *b;
        CHECK(cudaMallocHost(&h, n * sizeof(int)));
        CHECK(cudaMalloc(&a, n * sizeof(int)));
        CHECK(cudaMalloc(&b, n * sizeof(int)));
        for (int i = 0; i < n; i++) h[i] = i;
        CHECK(cudaMemcpyAsync(a, h, n * sizeof(int), cudaMemcpyHostToDevice, s1));
        for (int r = 0; r < 50; r++) add<<<n / 256, 256, 0, s1>>>(a, n, 1);    // a = i + 50
        // s2 is non-blocking: only the event orders its copy after the fifty launches
        cudaEvent_t fifty;
        CHECK(cudaEventCreateWithFlags(&fifty, cudaEventDisableTiming));
        CHECK(cudaEventRecord(fifty, s1));
        CHECK(cudaStreamWaitEvent(s2, fifty, 0));
        CHECK(cudaMemcpyAsync(b, a, n * sizeof(int), cudaMemcpyDeviceToDevice, s2));
        // and s1 writes a again only after s2 has read it
        cudaEvent_t read;
        CHECK(cudaEventCreateWithFlags(&read, cudaEventDisableTiming));
        CHECK(cudaEventRecord(read, s2));
        CHECK(cudaStreamWaitEvent(s1, read, 0));
        add<<<n / 256, 256, 0, s2>>>(b, n, 1000);                              // b = i + 1050
        CHECK(cudaMemsetAsync(a, 0, sizeof(int), s1));                         // a[0] = 0
        add<<<n / 256, 256, 0, s1>>>(a, n, 3);                                 // a = i + 53, a[0] = 3
        CHECK(cudaMemcpyAsync(h, a, n * sizeof(int), cudaMemcpyDeviceToHost, s1));
        CHECK(cudaStreamSynchronize(s1));
        CHECK(cudaStreamSynchronize(s2));   // (the legacy stream's cudaMemcpy does not wait for it)
        int b5 = 0;
        CHECK(cudaMemcpy(&b5, b + 5, sizeof b5, cudaMemcpyDeviceToHost));
        printf("a[0] %d a[9] %d b[5] %d\n", h[0], h[9], b5);
    } else if (!strcmp(what, "fail")) {
        // a kernel that faults: the launch succeeds, the next synchronizing call reports it;
        // a kernel queued after it does not run
        int *d, *flag;
        CHECK(cudaMalloc(&d, 16 * sizeof(int)));
        CHECK(cudaMallocManaged(&flag, sizeof(int)));
        *flag = 0;
        void *args[] = {&d, &flag};
        int at = 1 << 28;
        args[1] = &at;
        cudaError_t launched = cudaLaunchKernel((const void *)scatter, dim3(1), dim3(1), args, 0, 0);
        mark<<<1, 1>>>(flag);
        cudaError_t copied = cudaMemcpy(d, d + 1, sizeof(int), cudaMemcpyDeviceToDevice);
        printf("launch %s memcpy %s\n", name(launched), name(copied));
        cudaError_t last = cudaGetLastError();   // (two statements: the order printf's
        cudaError_t then = cudaGetLastError();   // arguments are evaluated in is unspecified)
        printf("last %s then %s\n", name(last), name(then));
        printf("sync %s later kernel ran %d\n", name(cudaDeviceSynchronize()), *flag);
    } else if (!strcmp(what, "spin")) {
        // waits for a flag nobody sets: ended by CPUIFY_KERNEL_TIMEOUT or Ctrl-C
        int *started, *stop, *out;
        CHECK(cudaHostAlloc(&started, sizeof(int), 0));
        CHECK(cudaMallocManaged(&stop, sizeof(int)));
        CHECK(cudaMalloc(&out, sizeof(int)));
        *started = 0;
        *stop = 0;
        until_stopped<<<1, 32>>>(started, stop, out);
        while (!reinterpret_cast<volatile int *>(started)[0]) {
        }
        printf("launched, host goes on\n");
        fflush(stdout);
        printf("sync %s\n", name(cudaDeviceSynchronize()));
        printf("then %s\n", name(cudaMemset(out, 0, 4)));
    } else if (!strcmp(what, "launchers")) {
        // two host threads launch into streams of their own as fast as they can while the
        // main thread allocates and frees (each free waits for the work issued before it)
        unsigned long long *count;
        CHECK(cudaMallocManaged(&count, sizeof *count));
        *count = 0;
        std::atomic<bool> go(true);
        std::atomic<long> launched(0);
        std::atomic<int> ready(0);
        auto launcher = [&] {
            cudaStream_t s;
            CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
            for (bool first = true; go.load(); first = false) {
                tick<<<1, 1, 0, s>>>(count, 20000);
                launched++;
                if (first) ready++;
            }
            CHECK(cudaStreamSynchronize(s));
            CHECK(cudaStreamDestroy(s));
        };
        std::thread a(launcher), b(launcher);
        while (ready.load() < 2) {
        }
        int frees = 0;
        for (int i = 0; i < 20; i++) {
            int *p;
            CHECK(cudaMalloc(&p, sizeof(int)));
            CHECK(cudaFree(p));
            frees++;
        }
        go = false;
        a.join();
        b.join();
        CHECK(cudaDeviceSynchronize());
        printf("frees %d kernels counted %s\n", frees, *count == (unsigned long long)launched.load() ? "all" : "not all");
    } else if (!strcmp(what, "exit")) {
        // returns from main with a launch in flight: the kernel completes first
        CHECK(cudaMallocManaged(&g_exit_out, sizeof(int)));
        *g_exit_out = 0;
        atexit(at_exit);
        slow_then_print<<<1, 1>>>(g_exit_out, argc > 2 ? atoi(argv[2]) : 20000000);
        printf("main returns\n");
    }
    return 0;
}
