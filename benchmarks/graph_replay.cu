// Graph replay overhead per kernel node against plain launches (issue 18): a captured graph
// of NODES tiny kernels replayed REPLAYS times, against NODES * REPLAYS launches with <<<>>>
// and with cudaLaunchKernel.  Every kernel adds 1 to a counter, checked at the end.
//   cpuify run benchmarks/graph_replay.cu            (or: cpuify nvcc ... && ./a.out [nodes replays])
#include <chrono>
#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                     \
    do {                                                                                \
        cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess) {                                                        \
            printf("CUDA error %s at line %d\n", cudaGetErrorName(e_), __LINE__);      \
            return 1;                                                                   \
        }                                                                               \
    } while (0)

__global__ void tick(int *counter, int by) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *counter += by;
}

static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int main(int argc, char **argv) {
    const int nodes = argc > 1 ? atoi(argv[1]) : 1000, replays = argc > 2 ? atoi(argv[2]) : 100;
    const long total = (long)nodes * replays;
    int *counter, h = 0;
    CHECK(cudaMalloc(&counter, sizeof(int)));
    CHECK(cudaMemset(counter, 0, sizeof(int)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    // warm-up (pool threads, caches)
    for (int i = 0; i < 1000; i++) tick<<<1, 32, 0, s>>>(counter, 1);

    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < nodes; i++) tick<<<1, 32, 0, s>>>(counter, 1);
    CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    CHECK(cudaGraphLaunch(x, s));   // warm-up replay

    // the best of 3 rounds of each, interleaved (other processes share the cores)
    const int rounds = 3;
    double plain = 1e30, api = 1e30, graph = 1e30;
    int by = 1;
    void *args[] = {&counter, &by};
    for (int round = 0; round < rounds; round++) {
        auto t0 = std::chrono::steady_clock::now();
        for (long i = 0; i < total; i++) tick<<<1, 32, 0, s>>>(counter, 1);
        CHECK(cudaStreamSynchronize(s));
        double t = seconds_since(t0);
        plain = t < plain ? t : plain;

        t0 = std::chrono::steady_clock::now();
        for (long i = 0; i < total; i++) CHECK(cudaLaunchKernel((const void *)tick, dim3(1), dim3(32), args, 0, s));
        CHECK(cudaStreamSynchronize(s));
        t = seconds_since(t0);
        api = t < api ? t : api;

        t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < replays; r++) CHECK(cudaGraphLaunch(x, s));
        CHECK(cudaStreamSynchronize(s));
        t = seconds_since(t0);
        graph = t < graph ? t : graph;
    }

    CHECK(cudaMemcpy(&h, counter, sizeof h, cudaMemcpyDeviceToHost));
    long want = 1000 + 3L * rounds * total + nodes;
    printf("counter %d expected %ld %s\n", h, want, h == want ? "ok" : "WRONG");
    printf("<<<>>> launch:       %8.3f us per launch (%ld launches)\n", plain * 1e6 / total, total);
    printf("cudaLaunchKernel:    %8.3f us per launch\n", api * 1e6 / total);
    printf("graph kernel node:   %8.3f us per node (%d nodes x %d replays)\n", graph * 1e6 / total, nodes, replays);
    printf("node / <<<>>> launch: %.2f\n", graph / plain);
    return h == want ? 0 : 1;
}
