// Streams that run independently: copy/compute overlap, per-stream order, events and queries.
// argv[1] picks the case (see tests/test_streams.py).
#include "check.h"
#include <atomic>
#include <chrono>
#include <thread>
#include <unistd.h>

static const char *name(cudaError_t e) { return cudaGetErrorName(e); }

// out[i] = in_a[i] * 3 + in_b[i] + chunk: one chunk of a pipelined computation
__global__ void combine(const int *a, const int *b, int *out, int n, int chunk) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] * 3 + b[i] + chunk;
}

// Waits (thread 0 of block 0) until *flag is nonzero, then writes *out = *flag + 100.
__global__ void wait_for_flag(int *flag, int *out) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        int v;
        while ((v = atomicAdd_system(flag, 0)) == 0) {
        }
        *out = v + 100;
    }
}

// The shape of "CUDA by Example"'s stream samples (our own code): a host array processed in
// chunks, each chunk copied in, computed and copied out on a stream; with two streams the
// chunks alternate between them, issued breadth-first.
static int pipeline(int nstreams) {
    const int chunk = 1 << 14, chunks = 8, full = chunk * chunks;
    int *ha, *hb, *hc;
    CHECK(cudaHostAlloc(&ha, full * sizeof(int), cudaHostAllocDefault));
    CHECK(cudaHostAlloc(&hb, full * sizeof(int), cudaHostAllocDefault));
    CHECK(cudaHostAlloc(&hc, full * sizeof(int), cudaHostAllocDefault));
    for (int i = 0; i < full; i++) {
        ha[i] = i % 1000;
        hb[i] = (i * 7) % 13;
        hc[i] = -1;
    }
    cudaStream_t s[2];
    int *da[2], *db[2], *dc[2];
    for (int k = 0; k < nstreams; k++) {
        CHECK(cudaStreamCreate(&s[k]));
        CHECK(cudaMalloc(&da[k], chunk * sizeof(int)));
        CHECK(cudaMalloc(&db[k], chunk * sizeof(int)));
        CHECK(cudaMalloc(&dc[k], chunk * sizeof(int)));
    }
    for (int c = 0; c < chunks; c += nstreams) {
        for (int k = 0; k < nstreams; k++)
            CHECK(cudaMemcpyAsync(da[k], ha + (c + k) * chunk, chunk * sizeof(int),
                                  cudaMemcpyHostToDevice, s[k]));
        for (int k = 0; k < nstreams; k++)
            CHECK(cudaMemcpyAsync(db[k], hb + (c + k) * chunk, chunk * sizeof(int),
                                  cudaMemcpyHostToDevice, s[k]));
        for (int k = 0; k < nstreams; k++)
            combine<<<chunk / 256, 256, 0, s[k]>>>(da[k], db[k], dc[k], chunk, c + k);
        for (int k = 0; k < nstreams; k++)
            CHECK(cudaMemcpyAsync(hc + (c + k) * chunk, dc[k], chunk * sizeof(int),
                                  cudaMemcpyDeviceToHost, s[k]));
    }
    for (int k = 0; k < nstreams; k++) CHECK(cudaStreamSynchronize(s[k]));
    int wrong = 0;
    for (int i = 0; i < full; i++)
        if (hc[i] != ha[i] * 3 + hb[i] + i / chunk) wrong++;
    for (int k = 0; k < nstreams; k++) {
        CHECK(cudaStreamDestroy(s[k]));
        CHECK(cudaFree(da[k]));
        CHECK(cudaFree(db[k]));
        CHECK(cudaFree(dc[k]));
    }
    CHECK(cudaFreeHost(ha));
    CHECK(cudaFreeHost(hb));
    CHECK(cudaFreeHost(hc));
    return wrong;
}

// Polls `done` for up to 5 s (a host function on another stream sets it).
static int wait_host_flag(std::atomic<int> *done) {
    for (int i = 0; i < 5000 && !done->load(); i++) usleep(1000);
    return done->load();
}

static std::atomic<int> g_s2_host_fn;
static void CUDART_CB s2_host_fn(void *) { g_s2_host_fn.store(1); }
static int g_order[8];
static std::atomic<int> g_norder;
static void CUDART_CB note(void *data) { g_order[g_norder.fetch_add(1)] = (int)(size_t)data; }

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "books";
    if (!strcmp(what, "books")) {
        cudaDeviceProp p;
        CHECK(cudaGetDeviceProperties(&p, 0));
        int overlap = 0, engines = 0, concurrent = -1;
        CHECK(cudaDeviceGetAttribute(&overlap, cudaDevAttrGpuOverlap, 0));
        CHECK(cudaDeviceGetAttribute(&engines, cudaDevAttrAsyncEngineCount, 0));
        CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentKernels, 0));
        printf("deviceOverlap %d attr %d asyncEngineCount %d attr %d concurrentKernels %d\n",
               p.deviceOverlap, overlap, p.asyncEngineCount, engines, concurrent);
        printf("one stream wrong %d\n", pipeline(1));
        printf("two streams wrong %d\n", pipeline(2));
        return 0;
    }
    if (!strcmp(what, "copy_feeds_kernel")) {
        // the kernel on `compute` can only end once the copy on `copy` has run: the copy must
        // run while the kernel runs (a copy that waits for the kernel never comes)
        int *flag, *out, *one;
        CHECK(cudaMalloc(&flag, sizeof(int)));
        CHECK(cudaMalloc(&out, sizeof(int)));
        CHECK(cudaMallocHost(&one, sizeof(int)));
        CHECK(cudaMemset(flag, 0, sizeof(int)));
        *one = 5;
        cudaStream_t compute, copy;
        CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
        CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
        wait_for_flag<<<1, 32, 0, compute>>>(flag, out);
        cudaError_t e = cudaMemcpyAsync(flag, one, sizeof(int), cudaMemcpyHostToDevice, copy);
        cudaError_t s = cudaStreamSynchronize(compute);
        int r = 0;
        CHECK(cudaMemcpy(&r, out, sizeof(int), cudaMemcpyDeviceToHost));
        printf("copy %s sync %s kernel read %d\n", name(e), name(s), r);
        return 0;
    }
    if (!strcmp(what, "states")) {
        // s1 (blocking): e0, a kernel that waits for the host, e1, a host function; s2
        // (non-blocking) goes on meanwhile; s3 waits for e1 and copies the kernel's result
        int *stop, *out, *scratch, *h;
        CHECK(cudaHostAlloc(&stop, sizeof(int), cudaHostAllocMapped));
        CHECK(cudaMalloc(&out, sizeof(int)));
        CHECK(cudaMalloc(&scratch, 64 * sizeof(int)));
        CHECK(cudaMallocHost(&h, 64 * sizeof(int)));
        *stop = 0;
        CHECK(cudaMemset(out, 0, sizeof(int)));
        for (int i = 0; i < 64; i++) h[i] = -1;
        cudaStream_t s1, s2, s3;
        CHECK(cudaStreamCreate(&s1));
        CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
        CHECK(cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking));
        cudaEvent_t e0, e1, e2;
        CHECK(cudaEventCreate(&e0));
        CHECK(cudaEventCreate(&e1));
        CHECK(cudaEventCreate(&e2));
        CHECK(cudaEventRecord(e0, s1));
        wait_for_flag<<<1, 32, 0, s1>>>(stop, out);
        CHECK(cudaEventRecord(e1, s1));
        CHECK(cudaLaunchHostFunc(s1, note, (void *)1));
        CHECK(cudaStreamWaitEvent(s3, e1, 0));
        CHECK(cudaMemcpyAsync(h, out, sizeof(int), cudaMemcpyDeviceToHost, s3));
        CHECK(cudaLaunchHostFunc(s3, note, (void *)3));
        printf("while waiting: s1 %s e0 %s e1 %s s3 %s legacy %s elapsed %s\n",
               name(cudaStreamQuery(s1)), name(cudaEventQuery(e0)), name(cudaEventQuery(e1)),
               name(cudaStreamQuery(s3)), name(cudaStreamQuery(0)), name([&] {
                   float ms;
                   return cudaEventElapsedTime(&ms, e0, e1);
               }()));
        // s2 is not held up by s1's kernel: its memset, copy, record and host function run
        CHECK(cudaMemsetAsync(scratch, 0, 64 * sizeof(int), s2));
        CHECK(cudaMemcpyAsync(h + 1, scratch, 4 * sizeof(int), cudaMemcpyDeviceToHost, s2));
        CHECK(cudaEventRecord(e2, s2));
        CHECK(cudaLaunchHostFunc(s2, s2_host_fn, nullptr));
        CHECK(cudaEventSynchronize(e2));
        printf("s2 done while s1 waits: e2 %s host fn %d copied %d s1 %s\n", name(cudaEventQuery(e2)),
               wait_host_flag(&g_s2_host_fn), h[1] + h[4], name(cudaStreamQuery(s1)));
        usleep(30000);
        CHECK(cudaLaunchHostFunc(s2, note, (void *)2));   // s2's note comes before 1 and 3
        CHECK(cudaStreamSynchronize(s2));
        reinterpret_cast<std::atomic<int> *>(stop)->store(9);
        CHECK(cudaStreamSynchronize(s3));
        float t01 = 0, t02 = 0;
        CHECK(cudaEventElapsedTime(&t01, e0, e1));
        CHECK(cudaEventElapsedTime(&t02, e0, e2));
        printf("after: s3 copied %d e2 before e1 %d waited >= 30ms %d\n", h[0], t02 < t01,
               t01 >= 30.0f);
        CHECK(cudaDeviceSynchronize());
        // (1 on s1 and 3 on s3 both come after e1, in either order)
        int lo = g_order[1] < g_order[2] ? g_order[1] : g_order[2];
        int hi = g_order[1] < g_order[2] ? g_order[2] : g_order[1];
        printf("host functions %d: %d then %d %d\n", g_norder.load(), g_order[0], lo, hi);
        printf("end: s1 %s s3 %s e1 %s\n", name(cudaStreamQuery(s1)), name(cudaStreamQuery(s3)),
               name(cudaEventQuery(e1)));
        return 0;
    }
    if (!strcmp(what, "legacy")) {
        // the legacy stream waits for blocking streams and they for it; a non-blocking stream
        // waits for neither
        int *stop, *out, *h;
        CHECK(cudaHostAlloc(&stop, sizeof(int), cudaHostAllocMapped));
        CHECK(cudaMalloc(&out, 4 * sizeof(int)));
        CHECK(cudaMallocHost(&h, 4 * sizeof(int)));
        *stop = 0;
        CHECK(cudaMemset(out, 0, 4 * sizeof(int)));
        cudaStream_t blocking, free_running;
        CHECK(cudaStreamCreate(&blocking));
        CHECK(cudaStreamCreateWithFlags(&free_running, cudaStreamNonBlocking));
        wait_for_flag<<<1, 32, 0, blocking>>>(stop, out);          // out[0] = 9 + 100 later
        CHECK(cudaMemsetAsync(out + 1, 1, sizeof(int), 0));       // legacy: after the kernel
        CHECK(cudaMemsetAsync(out + 2, 2, sizeof(int), blocking)); // after the legacy memset
        CHECK(cudaMemsetAsync(out + 3, 3, sizeof(int), free_running));
        CHECK(cudaMemcpyAsync(h + 3, out + 3, sizeof(int), cudaMemcpyDeviceToHost, free_running));
        CHECK(cudaStreamSynchronize(free_running));
        printf("free-running %s done: out[3] %#x legacy %s blocking %s\n",
               name(cudaStreamQuery(free_running)), h[3], name(cudaStreamQuery(0)),
               name(cudaStreamQuery(blocking)));
        reinterpret_cast<std::atomic<int> *>(stop)->store(9);
        CHECK(cudaMemcpy(h, out, 4 * sizeof(int), cudaMemcpyDeviceToHost));  // waits for both
        printf("after: %d %#x %#x %#x\n", h[0], h[1], h[2], h[3]);
        return 0;
    }
    if (!strcmp(what, "destroy")) {
        // destroying a stream or an event with work pending returns at once; the work still
        // runs (the event's record too), and a stream created later works
        int *stop, *out, *x, *h;
        CHECK(cudaHostAlloc(&stop, sizeof(int), cudaHostAllocMapped));
        CHECK(cudaMalloc(&out, sizeof(int)));
        CHECK(cudaMalloc(&x, 64 * sizeof(int)));
        CHECK(cudaMallocHost(&h, 64 * sizeof(int)));
        *stop = 0;
        cudaStream_t s, s2, s3;
        cudaEvent_t e, gone;
        CHECK(cudaStreamCreate(&s));
        CHECK(cudaEventCreate(&e));
        CHECK(cudaEventCreate(&gone));
        wait_for_flag<<<1, 32, 0, s>>>(stop, out);
        CHECK(cudaEventRecord(gone, s));
        CHECK(cudaEventRecord(e, s));
        cudaError_t ds = cudaStreamDestroy(s), de = cudaEventDestroy(gone);
        cudaError_t q = cudaEventQuery(e);
        CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
        CHECK(cudaMemsetAsync(x, 7, sizeof(int), s2));
        CHECK(cudaMemcpyAsync(h, x, sizeof(int), cudaMemcpyDeviceToHost, s2));
        CHECK(cudaStreamSynchronize(s2));
        printf("destroy %s %s query %s other stream %#x\n", name(ds), name(de), name(q), h[0]);
        reinterpret_cast<std::atomic<int> *>(stop)->store(9);
        CHECK(cudaEventSynchronize(e));
        CHECK(cudaStreamCreate(&s3));
        CHECK(cudaMemcpyAsync(h + 1, out, sizeof(int), cudaMemcpyDeviceToHost, s3));
        CHECK(cudaStreamSynchronize(s3));
        printf("after %d\n", h[1]);
        CHECK(cudaStreamDestroy(s2));
        CHECK(cudaStreamDestroy(s3));
        CHECK(cudaEventDestroy(e));
        return 0;
    }
    if (!strcmp(what, "per_thread")) {
        // built with --default-stream per-thread: stream 0 is each host thread's own, so
        // another thread's copy on its stream 0 runs while this thread's kernel waits for it
        int *flag, *out, *one, *x;
        CHECK(cudaMalloc(&flag, sizeof(int)));
        CHECK(cudaMalloc(&out, sizeof(int)));
        CHECK(cudaMalloc(&x, sizeof(int)));
        CHECK(cudaMallocHost(&one, sizeof(int)));
        CHECK(cudaMemset(flag, 0, sizeof(int)));
        *one = 4;
        wait_for_flag<<<1, 32>>>(flag, out);
        cudaError_t mine = cudaStreamQuery(0);
        cudaError_t theirs = cudaErrorUnknown, copied = cudaErrorUnknown, synced = cudaErrorUnknown;
        cudaError_t plain = cudaErrorUnknown;
        std::thread other([&] {
            theirs = cudaStreamQuery(0);
            // a synchronous copy in this thread's stream 0's order, not the kernel's
            plain = cudaMemcpy(x, one, sizeof(int), cudaMemcpyHostToDevice);
            copied = cudaMemcpyAsync(flag, one, sizeof(int), cudaMemcpyHostToDevice, 0);
            synced = cudaStreamSynchronize(0);
        });
        other.join();
        cudaError_t s = cudaStreamSynchronize(0);
        int r = 0;
        CHECK(cudaMemcpy(&r, out, sizeof(int), cudaMemcpyDeviceToHost));
        printf("mine %s theirs %s copy %s %s %s sync %s kernel read %d\n", name(mine), name(theirs),
               name(plain), name(copied), name(synced), name(s), r);
        return 0;
    }
    printf("unknown case %s\n", what);
    return 2;
}
