// CUDA graphs by stream capture: a kernel/memcpy/memset/host-function chain replayed, a
// fork/join capture over two streams, an unjoined fork, and calls CUDA refuses during a
// capture (tests/test_graphs.py checks the output against a hand computation).
#include "check.h"
#include <thread>

__global__ void axpb(float *y, const float *x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}

__global__ void add_to(float *y, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

static float seen[8];
static int host_calls = 0;
static void CUDART_CB on_host(void *p) { seen[host_calls++] = ((const float *)p)[3]; }

static const char *status_name(cudaStreamCaptureStatus s) {
    return s == cudaStreamCaptureStatusNone ? "none" : s == cudaStreamCaptureStatusActive ? "active" : "invalidated";
}

static cudaStreamCaptureStatus status_of(cudaStream_t s) {
    cudaStreamCaptureStatus st;
    CHECK(cudaStreamIsCapturing(s, &st));
    return st;
}

int main() {
    const int n = 1000, B = 256, G = (n + B - 1) / B;
    const size_t bytes = n * sizeof(float);
    float *x_h, *out_h, *x, *y, *acc;
    CHECK(cudaMallocHost(&x_h, bytes));
    CHECK(cudaMallocHost(&out_h, bytes));
    CHECK(cudaMalloc(&x, bytes));
    CHECK(cudaMalloc(&y, bytes));
    CHECK(cudaMalloc(&acc, bytes));
    for (int i = 0; i < n; i++) x_h[i] = 0.5f * i;
    CHECK(cudaMemset(acc, 0, bytes));

    // A: a chain captured on one stream, then replayed; the kernel arguments are the values
    // at capture time, the copies read host memory as it is at replay time
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaGraph_t chain;
    float a = 2.0f;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    printf("capturing %s\n", status_name(status_of(s)));
    CHECK(cudaMemcpyAsync(x, x_h, bytes, cudaMemcpyHostToDevice, s));
    axpb<<<G, B, 0, s>>>(y, x, a, 1.0f, n);
    a = 100.0f;
    add_to<<<G, B, 0, s>>>(acc, y, n);
    CHECK(cudaMemsetAsync(y, 0, bytes, s));
    CHECK(cudaMemcpyAsync(out_h, acc, bytes, cudaMemcpyDeviceToHost, s));
    CHECK(cudaLaunchHostFunc(s, on_host, out_h));
    CHECK(cudaStreamEndCapture(s, &chain));
    printf("after capture %s host_calls %d\n", status_name(status_of(s)), host_calls);
    size_t nn = 0;
    CHECK(cudaGraphGetNodes(chain, nullptr, &nn));
    cudaGraphNode_t nodes[8];
    CHECK(cudaGraphGetNodes(chain, nodes, &nn));
    printf("chain nodes %zu types", nn);
    for (size_t i = 0; i < nn; i++) {
        cudaGraphNodeType t;
        CHECK(cudaGraphNodeGetType(nodes[i], &t));
        printf(" %d", (int)t);
    }
    printf("\n");
    cudaKernelNodeParams kp;
    CHECK(cudaGraphKernelNodeGetParams(nodes[1], &kp));
    printf("kernel node a %g grid %u block %u stub %d\n", *(float *)kp.kernelParams[2], kp.gridDim.x,
           kp.blockDim.x, kp.func == (void *)axpb);
    cudaGraphExec_t chain_exec;
    CHECK(cudaGraphInstantiate(&chain_exec, chain, 0));
    CHECK(cudaGraphDestroy(chain));   // the exec keeps what it needs
    const int replays = 5;
    for (int r = 0; r < replays; r++) {
        CHECK(cudaGraphLaunch(chain_exec, s));
        CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < n; i++) x_h[i] += 1.0f;
    }
    printf("host_calls %d seen", host_calls);
    for (int r = 0; r < host_calls; r++) printf(" %g", seen[r]);
    printf("\n");
    double sum = 0;
    for (int i = 0; i < n; i++) sum += out_h[i];
    printf("acc 0 %g 999 %g sum %.1f\n", out_h[0], out_h[999], sum);
    CHECK(cudaMemcpy(out_h, y, bytes, cudaMemcpyDeviceToHost));
    int nonzero = 0;
    for (int i = 0; i < n; i++) nonzero += out_h[i] != 0.0f;
    printf("y zeroed %d\n", nonzero == 0);
    CHECK(cudaGraphExecDestroy(chain_exec));

    // B: fork/join over two streams with events
    cudaStream_t s2;
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    float *p, *q, *r;
    CHECK(cudaMalloc(&p, bytes));
    CHECK(cudaMalloc(&q, bytes));
    CHECK(cudaMalloc(&r, bytes));
    for (int i = 0; i < n; i++) x_h[i] = (float)i;
    CHECK(cudaMemcpy(p, x_h, bytes, cudaMemcpyHostToDevice));
    cudaGraph_t fj;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    axpb<<<G, B, 0, s>>>(p, p, 3.0f, 0.0f, n);          // p = 3p
    CHECK(cudaEventRecord(fork, s));
    CHECK(cudaStreamWaitEvent(s2, fork, 0));
    printf("forked stream %s\n", status_name(status_of(s2)));
    axpb<<<G, B, 0, s2>>>(q, p, 1.0f, 5.0f, n);         // q = p + 5   (on s2)
    axpb<<<G, B, 0, s>>>(r, p, 2.0f, 0.0f, n);          // r = 2p      (on s)
    CHECK(cudaEventRecord(join, s2));
    CHECK(cudaStreamWaitEvent(s, join, 0));
    cudaStreamCaptureStatus st;
    unsigned long long id1 = 0, id2 = 0;
    size_t ndeps = 0;
    CHECK(cudaStreamGetCaptureInfo(s, &st, &id1, nullptr, nullptr, nullptr, &ndeps));
    CHECK(cudaStreamGetCaptureInfo(s2, &st, &id2, nullptr, nullptr, nullptr, nullptr));
    printf("capture info same id %d deps %zu\n", id1 == id2 && id1 != 0, ndeps);
    add_to<<<G, B, 0, s>>>(r, q, n);                     // r += q
    CHECK(cudaStreamEndCapture(s, &fj));
    size_t ne = 0, nr = 0;
    CHECK(cudaGraphGetNodes(fj, nullptr, &nn));
    CHECK(cudaGraphGetEdges(fj, nullptr, nullptr, nullptr, &ne));
    CHECK(cudaGraphGetRootNodes(fj, nullptr, &nr));
    printf("fork/join nodes %zu edges %zu roots %zu s2 %s\n", nn, ne, nr, status_name(status_of(s2)));
    cudaGraphExec_t fj_exec;
    CHECK(cudaGraphInstantiateWithFlags(&fj_exec, fj, 0));
    CHECK(cudaGraphLaunch(fj_exec, s));
    CHECK(cudaGraphLaunch(fj_exec, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(out_h, r, bytes, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < n; i++) bad += out_h[i] != 27.0f * i + 5.0f;   // p: i -> 3i -> 9i
    printf("fork/join r 1 %g 999 %g bad %d\n", out_h[1], out_h[999], bad);

    // C: a fork whose work is not joined back
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    axpb<<<G, B, 0, s>>>(p, p, 1.0f, 0.0f, n);
    CHECK(cudaEventRecord(fork, s));
    CHECK(cudaStreamWaitEvent(s2, fork, 0));
    axpb<<<G, B, 0, s2>>>(q, p, 1.0f, 0.0f, n);
    cudaGraph_t g = (cudaGraph_t)1;
    cudaError_t e = cudaStreamEndCapture(s, &g);
    printf("unjoined %s graph %d s2 %s\n", cudaGetErrorName(e), g != nullptr, status_name(status_of(s2)));
    cudaGetLastError();

    // D: calls CUDA refuses during a capture
    // a synchronous copy (legacy stream) while a blocking stream captures
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    axpb<<<G, B, 0, s>>>(p, p, 0.0f, 0.0f, n);
    e = cudaMemcpy(out_h, p, bytes, cudaMemcpyDeviceToHost);
    printf("sync copy %s status %s\n", cudaGetErrorName(e), status_name(status_of(s)));
    axpb<<<G, B, 0, s>>>(p, p, 0.0f, 0.0f, n);
    printf("launch after %s\n", cudaGetErrorName(cudaGetLastError()));
    g = (cudaGraph_t)1;
    e = cudaStreamEndCapture(s, &g);
    printf("end %s graph %d\n", cudaGetErrorName(e), g != nullptr);
    cudaGetLastError();
    // cudaMalloc: refused in global mode, allowed in relaxed mode or after the thread
    // exchanged its mode for relaxed
    void *m = nullptr;
    const cudaStreamCaptureMode modes[3] = {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal,
                                            cudaStreamCaptureModeRelaxed};
    for (int k = 0; k < 3; k++) {
        CHECK(cudaStreamBeginCapture(s2, modes[k]));
        e = cudaMalloc(&m, 64);
        if (!e) CHECK(cudaFree(m));
        cudaError_t end = cudaStreamEndCapture(s2, &g);
        printf("malloc mode %d %s end %s\n", k, cudaGetErrorName(e), cudaGetErrorName(end));
        if (!end) CHECK(cudaGraphDestroy(g));
        cudaGetLastError();
    }
    CHECK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    e = cudaMalloc(&m, 64);
    if (!e) CHECK(cudaFree(m));
    CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    printf("exchanged %s back from relaxed %d\n", cudaGetErrorName(e), mode == cudaStreamCaptureModeRelaxed);
    // synchronizing the capturing stream itself, and an event recorded in the capture
    e = cudaStreamSynchronize(s2);
    printf("sync capturing %s status %s\n", cudaGetErrorName(e), status_name(status_of(s2)));
    e = cudaStreamEndCapture(s2, &g);
    printf("end %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    CHECK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeRelaxed));
    CHECK(cudaEventRecord(fork, s2));
    e = cudaEventQuery(fork);
    printf("query captured event %s end %s\n", cudaGetErrorName(e), cudaGetErrorName(cudaStreamEndCapture(s2, &g)));
    cudaGetLastError();
    // another thread: its cudaMalloc (in its default global mode) breaks a global capture, not
    // a thread-local one; a capture not begun in relaxed mode ends in the thread that began it
    for (int k = 0; k < 2; k++) {
        CHECK(cudaStreamBeginCapture(s2, modes[k]));
        cudaError_t other = cudaSuccess;
        std::thread t([&] {
            void *mm = nullptr;
            other = cudaMalloc(&mm, 64);
            if (!other) cudaFree(mm);
        });
        t.join();
        cudaError_t end = cudaStreamEndCapture(s2, &g);
        printf("other thread malloc mode %d %s end %s\n", k, cudaGetErrorName(other), cudaGetErrorName(end));
        if (!end) CHECK(cudaGraphDestroy(g));
        cudaGetLastError();
    }
    CHECK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal));
    axpb<<<G, B, 0, s2>>>(p, p, 0.0f, 0.0f, n);
    std::thread ender([&] { e = cudaStreamEndCapture(s2, &g); });
    ender.join();
    printf("end in other thread %s status %s\n", cudaGetErrorName(e), status_name(status_of(s2)));
    printf("begin legacy %s\n", cudaGetErrorName(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal)));
    printf("end not capturing %s\n", cudaGetErrorName(cudaStreamEndCapture(s, &g)));
    cudaGetLastError();

    // E: events as nodes of the graph (cudaEventWaitExternal, cudaEventRecordExternal)
    cudaEvent_t before, after;
    CHECK(cudaEventCreate(&before));
    CHECK(cudaEventCreate(&after));
    CHECK(cudaEventRecord(before, s2));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaStreamWaitEvent(s, before, cudaEventWaitExternal));   // no isolation error
    axpb<<<G, B, 0, s>>>(q, p, 1.0f, 0.0f, n);
    CHECK(cudaEventRecordWithFlags(after, s, cudaEventRecordExternal));
    CHECK(cudaStreamEndCapture(s, &g));
    nn = 8;
    CHECK(cudaGraphGetNodes(g, nodes, &nn));
    printf("external event nodes %zu types", nn);
    for (size_t i = 0; i < nn; i++) {
        cudaGraphNodeType t;
        CHECK(cudaGraphNodeGetType(nodes[i], &t));
        printf(" %d", (int)t);
    }
    cudaGraphExec_t ev_exec;
    CHECK(cudaGraphInstantiate(&ev_exec, g, 0));
    CHECK(cudaGraphLaunch(ev_exec, s));
    CHECK(cudaStreamSynchronize(s));
    float ms = -1.0f;
    CHECK(cudaEventElapsedTime(&ms, before, after));
    printf(" query %s elapsed ok %d\n", cudaGetErrorName(cudaEventQuery(after)), ms >= 0.0f);

    // the program goes on: nothing captured ran, ordinary work runs
    CHECK(cudaMemcpy(x, x_h, bytes, cudaMemcpyHostToDevice));
    axpb<<<G, B>>>(y, x, 2.0f, 1.0f, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(out_h, y, bytes, cudaMemcpyDeviceToHost));
    printf("after y 10 %g\n", out_h[10]);
    CHECK(cudaMemcpy(out_h, p, bytes, cudaMemcpyDeviceToHost));
    printf("p 1 %g\n", out_h[1]);
    printf("last %s\n", cudaGetErrorName(cudaGetLastError()));
    return 0;
}
