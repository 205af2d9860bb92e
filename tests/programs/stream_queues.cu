// Work that runs on its stream's queue besides kernels and plain copies: graph launches and
// copies to and from CUDA arrays.  argv[1] picks the case (see tests/test_stream_queues.py).
// Kernels spin on a flag in mapped host memory that the host sets only after it has issued
// everything: a call that waited for that work instead of queueing it would never return
// (the deadlock detector then ends the kernel with cudaErrorLaunchTimeout).
#include "check.h"
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <unistd.h>

static const char *name(cudaError_t e) { return cudaGetErrorName(e); }

static const int n = 256;

// a[i] = *flag + i once the host has set *flag (thread 0 spins, the block waits for it)
__global__ void fill_after_flag(int *flag, int *a, int count) {
    __shared__ int v;
    if (threadIdx.x == 0) {
        int f;
        while ((f = atomicAdd_system(flag, 0)) == 0) {
        }
        v = f;
    }
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) a[i] = v + i;
}

__global__ void twice(const int *a, int *b, int count) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) b[i] = 2 * a[i];
}

__global__ void plus(const int *b, int *out, int k, int count) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) out[i] = b[i] + k;
}

// out[y * w + x] = the texel (x, y) of a point-filtered, unnormalized 2D texture
__global__ void read_texture(cudaTextureObject_t t, float *out, int w, int h) {
    int x = threadIdx.x, y = blockIdx.x;
    if (x < w && y < h) out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f);
}

static std::atomic<int> g_host_nodes;
static float *g_src, *g_src3;   // the array case's copy sources (pinned)
static void CUDART_CB host_node(void *) { g_host_nodes.fetch_add(1); }

// Host functions that hold their stream until the host sets `*flag` (or 3 s pass: the host
// was itself held up, the old behaviour); *released says which.
struct hold_t {
    std::atomic<int> flag{0};
    int released = -1;
};
static void CUDART_CB hold(void *p) {
    hold_t *h = (hold_t *)p;
    int i = 0;
    while (!h->flag.load() && i++ < 3000) usleep(1000);
    h->released = h->flag.load();
}

// The graph: twice(a -> b), then an event record (e_in) and a copy b -> c; a memset of d
// (bytes 1) as a second root; a host node after the copy and the memset.
static cudaGraphExec_t make_exec(int *a, int *b, int *c, int *d, cudaEvent_t e_in) {
    static int count = n;
    static int *ka, *kb;
    ka = a;
    kb = b;
    static void *args[3] = {&ka, &kb, &count};
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaKernelNodeParams kp = {};
    kp.func = (void *)twice;
    kp.gridDim = dim3(1);
    kp.blockDim = dim3(n);
    kp.kernelParams = args;
    cudaGraphNode_t k, rec, cp, ms, host;
    CHECK(cudaGraphAddKernelNode(&k, g, nullptr, 0, &kp));
    CHECK(cudaGraphAddEventRecordNode(&rec, g, &k, 1, e_in));
    CHECK(cudaGraphAddMemcpyNode1D(&cp, g, &k, 1, c, b, n * sizeof(int), cudaMemcpyDeviceToDevice));
    cudaMemsetParams mp = {};
    mp.dst = d;
    mp.value = 1;
    mp.elementSize = 1;
    mp.width = n * sizeof(int);
    mp.height = 1;
    CHECK(cudaGraphAddMemsetNode(&ms, g, nullptr, 0, &mp));
    cudaHostNodeParams hp = {host_node, nullptr};
    cudaGraphNode_t after[2] = {cp, ms};
    CHECK(cudaGraphAddHostNode(&host, g, after, 2, &hp));
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    CHECK(cudaGraphDestroy(g));
    return x;
}

// the count of i < n where got[i] != want(i)
template <class F> static int wrong(const int *got, F want) {
    int bad = 0;
    for (int i = 0; i < n; i++) bad += got[i] != want(i);
    return bad;
}

static int graph_case() {
    // s1: a kernel waiting for the host, the graph, an event, a kernel reading the graph's b;
    // s2 waits for the event and copies b; s3 launches the same graph again (ordered behind
    // the first launch)
    int *flag, *a, *b, *c, *d, *out, *hb, *hc, *hd, *hout;
    CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
    *flag = 0;
    for (int **p : {&a, &b, &c, &d, &out}) {
        CHECK(cudaMalloc(p, n * sizeof(int)));
        CHECK(cudaMemset(*p, 0, n * sizeof(int)));
    }
    for (int **p : {&hb, &hc, &hd, &hout}) CHECK(cudaMallocHost(p, n * sizeof(int)));
    cudaStream_t s1, s2, s3;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking));
    cudaEvent_t e_in, e_after;
    CHECK(cudaEventCreate(&e_in));
    CHECK(cudaEventCreate(&e_after));
    cudaGraphExec_t x = make_exec(a, b, c, d, e_in);

    fill_after_flag<<<1, n, 0, s1>>>(flag, a, n);
    cudaError_t launched = cudaGraphLaunch(x, s1);
    CHECK(cudaEventRecord(e_after, s1));
    plus<<<1, n, 0, s1>>>(b, out, 1000, n);
    CHECK(cudaMemcpyAsync(hout, out, n * sizeof(int), cudaMemcpyDeviceToHost, s1));
    CHECK(cudaStreamWaitEvent(s2, e_after, 0));
    CHECK(cudaMemcpyAsync(hb, b, n * sizeof(int), cudaMemcpyDeviceToHost, s2));
    cudaError_t again = cudaGraphLaunch(x, s3);
    usleep(20000);
    printf("launch %s %s; before the flag: e_in %s e_after %s s2 %s s3 %s host nodes %d\n",
           name(launched), name(again), name(cudaEventQuery(e_in)), name(cudaEventQuery(e_after)),
           name(cudaStreamQuery(s2)), name(cudaStreamQuery(s3)), g_host_nodes.load());
    reinterpret_cast<std::atomic<int> *>(flag)->store(7);
    CHECK(cudaStreamSynchronize(s2));
    printf("s2 after e_after: b wrong %d\n", wrong(hb, [](int i) { return 2 * (7 + i); }));
    CHECK(cudaStreamSynchronize(s1));
    CHECK(cudaStreamSynchronize(s3));
    CHECK(cudaMemcpy(hc, c, n * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hd, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    printf("after: out wrong %d c wrong %d d wrong %d e_in %s host nodes %d\n",
           wrong(hout, [](int i) { return 2 * (7 + i) + 1000; }),
           wrong(hc, [](int i) { return 2 * (7 + i); }), wrong(hd, [](int) { return 0x01010101; }),
           name(cudaEventQuery(e_in)), g_host_nodes.load());
    CHECK(cudaGraphExecDestroy(x));
    return 0;
}

static int graph_legacy_case() {
    // a graph launched on the legacy stream waits for a blocking stream's kernel; a
    // non-blocking stream goes on meanwhile
    int *flag, *a, *b, *c, *d, *hb, *scratch, *hs;
    CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
    *flag = 0;
    for (int **p : {&a, &b, &c, &d, &scratch}) {
        CHECK(cudaMalloc(p, n * sizeof(int)));
        CHECK(cudaMemset(*p, 0, n * sizeof(int)));
    }
    CHECK(cudaMallocHost(&hb, n * sizeof(int)));
    CHECK(cudaMallocHost(&hs, n * sizeof(int)));
    cudaStream_t blocking, free_running;
    CHECK(cudaStreamCreate(&blocking));
    CHECK(cudaStreamCreateWithFlags(&free_running, cudaStreamNonBlocking));
    cudaEvent_t e_in;
    CHECK(cudaEventCreate(&e_in));
    cudaGraphExec_t x = make_exec(a, b, c, d, e_in);
    fill_after_flag<<<1, n, 0, blocking>>>(flag, a, n);
    cudaError_t launched = cudaGraphLaunch(x, 0);
    CHECK(cudaMemsetAsync(scratch, 3, n * sizeof(int), free_running));
    CHECK(cudaMemcpyAsync(hs, scratch, n * sizeof(int), cudaMemcpyDeviceToHost, free_running));
    CHECK(cudaStreamSynchronize(free_running));
    printf("launch %s; before the flag: legacy %s free-running done %d\n", name(launched),
           name(cudaStreamQuery(0)), wrong(hs, [](int) { return 0x03030303; }) == 0);
    reinterpret_cast<std::atomic<int> *>(flag)->store(5);
    CHECK(cudaMemcpy(hb, b, n * sizeof(int), cudaMemcpyDeviceToHost));
    printf("after: b wrong %d\n", wrong(hb, [](int i) { return 2 * (5 + i); }));
    return 0;
}

static int graph_wait_case() {
    // a graph whose first node waits for an event recorded on another stream after a kernel
    // that waits for the host; the graph's kernel reads that kernel's result
    int *flag, *a, *b, *hb;
    CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
    *flag = 0;
    CHECK(cudaMalloc(&a, n * sizeof(int)));
    CHECK(cudaMalloc(&b, n * sizeof(int)));
    CHECK(cudaMemset(a, 0, n * sizeof(int)));
    CHECK(cudaMemset(b, 0, n * sizeof(int)));
    CHECK(cudaMallocHost(&hb, n * sizeof(int)));
    for (int i = 0; i < n; i++) hb[i] = -1;
    cudaStream_t producer, consumer;
    CHECK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
    cudaEvent_t ready;
    CHECK(cudaEventCreate(&ready));
    static int count = n;
    static int *ka, *kb;
    ka = a;
    kb = b;
    void *args[3] = {&ka, &kb, &count};
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t wait, k;
    CHECK(cudaGraphAddEventWaitNode(&wait, g, nullptr, 0, ready));
    cudaKernelNodeParams kp = {};
    kp.func = (void *)twice;
    kp.gridDim = dim3(1);
    kp.blockDim = dim3(n);
    kp.kernelParams = args;
    CHECK(cudaGraphAddKernelNode(&k, g, &wait, 1, &kp));
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    fill_after_flag<<<1, n, 0, producer>>>(flag, a, n);
    CHECK(cudaEventRecord(ready, producer));
    cudaError_t launched = cudaGraphLaunch(x, consumer);
    CHECK(cudaMemcpyAsync(hb, b, n * sizeof(int), cudaMemcpyDeviceToHost, consumer));
    usleep(20000);
    printf("launch %s; before the flag: consumer %s b[1] %d\n", name(launched),
           name(cudaStreamQuery(consumer)), hb[1]);
    reinterpret_cast<std::atomic<int> *>(flag)->store(3);
    CHECK(cudaStreamSynchronize(consumer));
    printf("after: b wrong %d\n", wrong(hb, [](int i) { return 2 * (3 + i); }));
    return 0;
}

static int array_case() {
    // s1: a host function that holds the stream until the host sets its flag and then
    // writes the copy's source, the async copies to two CUDA arrays (2D, and 3D with
    // cudaMemcpyDefault), texture reads of both, the results copied back; `busy` (another
    // stream) is held by a host function meanwhile
    const int w = 16, h = 8;
    float *src, *src3, *out, *hout;
    CHECK(cudaMallocHost(&src, w * h * sizeof(float)));
    CHECK(cudaMallocHost(&src3, w * h * sizeof(float)));
    CHECK(cudaMallocHost(&hout, 2 * w * h * sizeof(float)));
    CHECK(cudaMalloc(&out, 2 * w * h * sizeof(float)));
    for (int i = 0; i < w * h; i++) src[i] = src3[i] = -1.0f;
    g_src = src;
    g_src3 = src3;
    cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
    cudaArray_t arr, arr3;
    CHECK(cudaMallocArray(&arr, &fd, w, h));
    CHECK(cudaMalloc3DArray(&arr3, &fd, make_cudaExtent(w, h, 0)));
    cudaTextureObject_t tex[2];
    for (int k = 0; k < 2; k++) {
        cudaResourceDesc r = {};
        r.resType = cudaResourceTypeArray;
        r.res.array.array = k ? arr3 : arr;
        cudaTextureDesc td = {};
        td.filterMode = cudaFilterModePoint;
        td.readMode = cudaReadModeElementType;
        CHECK(cudaCreateTextureObject(&tex[k], &r, &td, nullptr));
    }
    cudaStream_t s1, busy;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking));
    static hold_t held, other;
    CHECK(cudaLaunchHostFunc(busy, hold, &other));
    CHECK(cudaLaunchHostFunc(s1, hold, &held));
    CHECK(cudaLaunchHostFunc(s1, [](void *) {
        // (runs after `hold`: the copies below must read these values)
        for (int i = 0; i < 16 * 8; i++) {
            g_src[i] = i * 0.5f;
            g_src3[i] = 100.0f + i;
        }
    }, nullptr));
    CHECK(cudaMemcpy2DToArrayAsync(arr, 0, 0, src, w * sizeof(float), w * sizeof(float), h,
                                   cudaMemcpyHostToDevice, s1));
    cudaMemcpy3DParms p = {};
    p.srcPtr = make_cudaPitchedPtr(src3, w * sizeof(float), w, h);
    p.dstArray = arr3;
    p.extent = make_cudaExtent(w, h, 1);
    p.kind = cudaMemcpyDefault;
    CHECK(cudaMemcpy3DAsync(&p, s1));
    read_texture<<<h, w, 0, s1>>>(tex[0], out, w, h);
    read_texture<<<h, w, 0, s1>>>(tex[1], out + w * h, w, h);
    CHECK(cudaMemcpyAsync(hout, out, 2 * w * h * sizeof(float), cudaMemcpyDeviceToHost, s1));
    printf("issued: s1 %s busy %s\n", name(cudaStreamQuery(s1)), name(cudaStreamQuery(busy)));
    held.flag.store(1);
    CHECK(cudaStreamSynchronize(s1));
    int bad = 0;
    for (int i = 0; i < w * h; i++) bad += hout[i] != i * 0.5f || hout[w * h + i] != 100.0f + i;
    printf("s1 held until the host went on %d; texels wrong %d; busy %s\n", held.released, bad,
           name(cudaStreamQuery(busy)));
    other.flag.store(1);
    CHECK(cudaStreamSynchronize(busy));

    // the synchronous copies follow the legacy stream's order: cudaMemcpy2DFromArray waits
    // for a blocking stream's copy to the array (released by another host thread)
    cudaStream_t blocking;
    CHECK(cudaStreamCreate(&blocking));
    static hold_t held2;
    for (int i = 0; i < w * h; i++) src[i] = 7.0f * i;
    CHECK(cudaLaunchHostFunc(blocking, hold, &held2));
    CHECK(cudaMemcpyToArrayAsync(arr, 0, 0, src, w * h * sizeof(float), cudaMemcpyHostToDevice,
                                 blocking));
    std::thread releaser([] {
        usleep(100000);
        held2.flag.store(1);
    });
    float back[16 * 8];
    CHECK(cudaMemcpy2DFromArray(back, w * sizeof(float), arr, 0, 0, w * sizeof(float), h,
                                cudaMemcpyDeviceToHost));
    releaser.join();
    bad = 0;
    for (int i = 0; i < w * h; i++) bad += back[i] != 7.0f * i;
    printf("legacy copy from the array after the blocking stream's: wrong %d released %d\n", bad,
           held2.released);
    return 0;
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "graph";
    if (!strcmp(what, "graph")) return graph_case();
    if (!strcmp(what, "graph_legacy")) return graph_legacy_case();
    if (!strcmp(what, "graph_wait")) return graph_wait_case();
    if (!strcmp(what, "array")) return array_case();
    printf("unknown case %s\n", what);
    return 2;
}
