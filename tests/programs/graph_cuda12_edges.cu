// CUDA 12's spellings of the graph-edge functions (no edge-data argument), which CUDA 13's
// headers no longer declare, next to CUDA 13's in the same program (cpuify nvcc's legacy layer:
// C++ overloads); Altis's particlefilter_float calls cudaGraphAddDependencies with four
// arguments. Each kernel appends a digit to *x, so the result shows the order the graph ran.
#include <cstdio>
#include "check.h"

__global__ void append(int *x, int digit) { *x = *x * 10 + digit; }

static cudaGraphNode_t add_append(cudaGraph_t g, int *x, int *digit, void **args) {
    args[0] = &x;           // the node copies the arguments when it is added
    args[1] = digit;
    cudaKernelNodeParams p = {};
    p.func = (void *)append;
    p.gridDim = dim3(1);
    p.blockDim = dim3(1);
    p.kernelParams = args;
    cudaGraphNode_t node;
    CHECK(cudaGraphAddKernelNode(&node, g, nullptr, 0, &p));
    return node;
}

int main() {
    int *x;
    CHECK(cudaMalloc(&x, sizeof(int)));
    CHECK(cudaMemset(x, 0, sizeof(int)));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));

    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    int digits[4] = {1, 2, 3, 4};
    void *args[4][2];
    cudaGraphNode_t n[4];
    for (int i = 0; i < 4; i++) n[i] = add_append(g, x, &digits[i], args[i]);
    CHECK(cudaGraphAddDependencies(g, &n[0], &n[1], 1));                  // CUDA 12
    CHECK(cudaGraphAddDependencies(g, &n[1], &n[2], nullptr, 1));         // CUDA 13
    cudaGraphNode_t from[2] = {n[2], n[0]}, to[2] = {n[3], n[3]};
    CHECK(cudaGraphAddDependencies(g, from, to, 2));
    size_t edges = 0, deps = 4, dependents = 0;     // deps: the room in got[] on the way in
    CHECK(cudaGraphGetEdges(g, nullptr, nullptr, &edges));
    cudaGraphNode_t got[4];
    CHECK(cudaGraphNodeGetDependencies(n[3], got, &deps));
    CHECK(cudaGraphNodeGetDependentNodes(n[0], nullptr, &dependents));
    printf("edges %zu, into the last %zu (%d %d), out of the first %zu\n", edges, deps,
           got[0] == n[2] || got[1] == n[2], got[0] == n[0] || got[1] == n[0], dependents);
    CHECK(cudaGraphRemoveDependencies(g, &n[0], &n[3], 1));
    CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &edges));       // CUDA 13
    printf("after removing one: %zu\n", edges);

    // CUDA 12.2's generic node API: a memset of *x to 0 before the chain
    cudaGraphNodeParams np = {};
    np.type = cudaGraphNodeTypeMemset;
    np.memset.dst = x;
    np.memset.value = 0;
    np.memset.elementSize = 4;
    np.memset.width = 1;
    np.memset.height = 1;
    cudaGraphNode_t zero;
    CHECK(cudaGraphAddNode(&zero, g, nullptr, 0, &np));
    CHECK(cudaGraphAddDependencies(g, &zero, &n[0], 1));

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    int h = 0;
    CHECK(cudaMemcpy(&h, x, sizeof h, cudaMemcpyDeviceToHost));
    printf("graph ran %d\n", h);

    // capture: CUDA 12's cudaStreamGetCaptureInfo (six arguments, the count last) and
    // cudaStreamUpdateCaptureDependencies (no edge data)
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    append<<<1, 1, 0, s>>>(x, 5);
    cudaStreamCaptureStatus status;
    unsigned long long id = 0;
    cudaGraph_t capturing;
    const cudaGraphNode_t *frontier = nullptr;
    size_t nfrontier = 0;
    CHECK(cudaStreamGetCaptureInfo(s, &status, &id, &capturing, &frontier, &nfrontier));
    cudaGraphNode_t last = frontier[0];
    CHECK(cudaStreamUpdateCaptureDependencies(s, &last, 1, cudaStreamSetCaptureDependencies));
    CHECK(cudaStreamUpdateCaptureDependencies(s, &last, 1));
    append<<<1, 1, 0, s>>>(x, 6);
    cudaGraph_t captured;
    CHECK(cudaStreamEndCapture(s, &captured));
    printf("capture status %d frontier %zu\n", (int)status, nfrontier);
    cudaGraphExec_t exec2;
    CHECK(cudaGraphInstantiate(&exec2, captured, 0));
    CHECK(cudaGraphLaunch(exec2, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(&h, x, sizeof h, cudaMemcpyDeviceToHost));
    printf("captured ran %d\n", h);
    return 0;
}
