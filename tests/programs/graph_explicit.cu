// CUDA graphs built node by node: a diamond, a child graph, exec-level parameter changes and
// cudaGraphExecUpdate, a cycle, 2-byte memsets, event nodes and cudaGraphDebugDotPrint
// (tests/test_graphs.py checks the output against a hand computation).
#include "check.h"
#include <cstring>

__global__ void affine(int *out, const int *in, int k, int c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * k + c;
}

__global__ void add(int *out, const int *a, const int *b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

static int host_seen = -1;
static void CUDART_CB on_host(void *p) { host_seen = ((const int *)p)[7]; }

static const int n = 300;

static cudaKernelNodeParams affine_params(void **args, int **out, int **in, int *k, int *c) {
    static int count = n;
    args[0] = out;
    args[1] = in;
    args[2] = k;
    args[3] = c;
    args[4] = &count;
    cudaKernelNodeParams p = {};
    p.func = (void *)affine;
    p.gridDim = dim3((n + 127) / 128);
    p.blockDim = dim3(128);
    p.kernelParams = args;
    return p;
}

static int first(const int *d) {
    int v;
    CHECK(cudaMemcpy(&v, d, sizeof v, cudaMemcpyDeviceToHost));
    return v;
}

static int all_equal(const int *d, int want) {
    static int h[n];
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (h[i] != want) return 0;
    return 1;
}

int main(int argc, char **argv) {
    const size_t bytes = n * sizeof(int);
    int *a, *b, *c, *d, *e, *f, *h_out;
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMalloc(&c, bytes));
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMalloc(&e, bytes));
    CHECK(cudaMalloc(&f, bytes));
    CHECK(cudaMallocHost(&h_out, bytes));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));

    // diamond: memset a = 7 -> (b = 2a + 1, c = 3a) -> d = b + c -> copy to host -> host fn
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t M, Bn, Cn, Dn, H, Hf;
    cudaMemsetParams ms = {};
    ms.dst = a;
    ms.value = 7;
    ms.elementSize = 4;
    ms.width = n;
    ms.height = 1;
    CHECK(cudaGraphAddMemsetNode(&M, g, nullptr, 0, &ms));
    void *argsB[5], *argsC[5];
    int kB = 2, cB = 1, kC = 3, cC = 0;
    cudaKernelNodeParams pB = affine_params(argsB, &b, &a, &kB, &cB);
    cudaKernelNodeParams pC = affine_params(argsC, &c, &a, &kC, &cC);
    CHECK(cudaGraphAddKernelNode(&Bn, g, &M, 1, &pB));
    CHECK(cudaGraphAddKernelNode(&Cn, g, &M, 1, &pC));
    kB = 1000;   // the node copied the arguments
    int count = n;
    void *argsD[4] = {&d, &b, &c, &count};
    cudaKernelNodeParams pD = {};
    pD.func = (void *)add;
    pD.gridDim = dim3((n + 127) / 128);
    pD.blockDim = dim3(128);
    pD.kernelParams = argsD;
    cudaGraphNode_t bc[2] = {Bn, Cn};
    CHECK(cudaGraphAddKernelNode(&Dn, g, bc, 2, &pD));
    CHECK(cudaGraphAddMemcpyNode1D(&H, g, &Dn, 1, h_out, d, bytes, cudaMemcpyDeviceToHost));
    cudaHostNodeParams hp = {on_host, h_out};
    CHECK(cudaGraphAddHostNode(&Hf, g, &H, 1, &hp));
    size_t nn, ne, nr, nd;
    CHECK(cudaGraphGetNodes(g, nullptr, &nn));
    CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &ne));
    CHECK(cudaGraphGetRootNodes(g, nullptr, &nr));
    CHECK(cudaGraphNodeGetDependencies(Dn, nullptr, nullptr, &nd));
    printf("diamond nodes %zu edges %zu roots %zu deps of d %zu\n", nn, ne, nr, nd);
    printf("duplicate edge %s self edge %s\n",
           cudaGetErrorName(cudaGraphAddDependencies(g, &M, &Bn, nullptr, 1)),
           cudaGetErrorName(cudaGraphAddDependencies(g, &M, &M, nullptr, 1)));
    cudaGetLastError();
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
    printf("diamond d %d all %d host %d\n", h_out[0], all_equal(d, 36), host_seen);

    // exec-level parameters: the exec changes, the graph does not
    kB = 5;
    CHECK(cudaGraphExecKernelNodeSetParams(x, Bn, &pB));
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
    cudaKernelNodeParams got;
    CHECK(cudaGraphKernelNodeGetParams(Bn, &got));
    printf("exec set d %d graph k %d\n", first(d), *(int *)got.kernelParams[2]);
    ms.value = 4;
    CHECK(cudaGraphExecMemsetNodeSetParams(x, M, &ms));
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
    printf("exec memset d %d\n", first(d));   // b = 5*4+1, c = 12

    // cudaGraphExecUpdate: a copy of the graph with other parameters
    cudaGraph_t g2;
    CHECK(cudaGraphClone(&g2, g));
    cudaGraphNode_t C2;
    CHECK(cudaGraphNodeFindInClone(&C2, Cn, g2));
    kC = 10;
    CHECK(cudaGraphKernelNodeSetParams(C2, &pC));
    cudaGraphExecUpdateResultInfo info;
    cudaError_t err = cudaGraphExecUpdate(x, g2, &info);
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
    printf("update %s result %d d %d\n", cudaGetErrorName(err), (int)info.result, first(d));  // 15 + 70
    cudaGraphNode_t extra;
    CHECK(cudaGraphAddEmptyNode(&extra, g2, nullptr, 0));
    err = cudaGraphExecUpdate(x, g2, &info);
    printf("update topology %s result %d\n", cudaGetErrorName(err), (int)info.result);
    cudaGetLastError();
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
    printf("still d %d\n", first(d));

    // a cycle is found at instantiation
    cudaGraphNode_t Hf2, M2;
    CHECK(cudaGraphNodeFindInClone(&Hf2, Hf, g2));
    CHECK(cudaGraphNodeFindInClone(&M2, M, g2));
    CHECK(cudaGraphAddDependencies(g2, &Hf2, &M2, nullptr, 1));
    cudaGraphExec_t bad;
    cudaGraphInstantiateParams ip = {};
    err = cudaGraphInstantiateWithParams(&bad, g2, &ip);
    printf("cycle %s result %d\n", cudaGetErrorName(err), (int)ip.result_out);
    cudaGetLastError();

    // a child graph: e = d + 100, then f = 2e; the node owns a copy of the child
    cudaGraph_t child, parent;
    CHECK(cudaGraphCreate(&child, 0));
    cudaGraphNode_t ce, pm, pc, pf;
    void *argsE[5], *argsF[5];
    int one = 1, hundred = 100, two = 2, zero = 0;
    cudaKernelNodeParams pE = affine_params(argsE, &e, &d, &one, &hundred);
    CHECK(cudaGraphAddKernelNode(&ce, child, nullptr, 0, &pE));
    CHECK(cudaGraphCreate(&parent, 0));
    ms.dst = d;
    ms.value = 1;
    CHECK(cudaGraphAddMemsetNode(&pm, parent, nullptr, 0, &ms));
    CHECK(cudaGraphAddChildGraphNode(&pc, parent, &pm, 1, child));
    cudaGraphNode_t later;
    CHECK(cudaGraphAddMemsetNode(&later, child, &ce, 1, &ms));   // not part of the node's copy
    cudaKernelNodeParams pF = affine_params(argsF, &f, &e, &two, &zero);
    CHECK(cudaGraphAddKernelNode(&pf, parent, &pc, 1, &pF));
    cudaGraph_t inner;
    CHECK(cudaGraphChildGraphNodeGetGraph(pc, &inner));
    size_t inner_n;
    CHECK(cudaGraphGetNodes(inner, nullptr, &inner_n));
    cudaGraphNodeType t;
    CHECK(cudaGraphNodeGetType(pc, &t));
    cudaGraphExec_t px;
    CHECK(cudaGraphInstantiate(&px, parent, 0));
    CHECK(cudaGraphLaunch(px, s));
    CHECK(cudaStreamSynchronize(s));
    printf("child type %d copy nodes %d f %d all %d e %d\n", (int)t, (int)inner_n, first(f), all_equal(f, 202),
           first(e));
    if (argc > 1) CHECK(cudaGraphDebugDotPrint(parent, argv[1], cudaGraphDebugDotFlagsVerbose));

    // 2-byte memsets over rows of a pitched buffer, and event nodes
    unsigned char *buf, hb[64];
    CHECK(cudaMalloc(&buf, 64));
    CHECK(cudaMemset(buf, 0x11, 64));
    cudaGraph_t g3;
    CHECK(cudaGraphCreate(&g3, 0));
    cudaEvent_t ev0, ev1;
    CHECK(cudaEventCreate(&ev0));
    CHECK(cudaEventCreate(&ev1));
    cudaGraphNode_t r0, m2, r1, w;
    CHECK(cudaGraphAddEventRecordNode(&r0, g3, nullptr, 0, ev0));
    cudaMemsetParams m16 = {};
    m16.dst = buf + 1;   // not aligned to the element size: refused, as by CUDA
    m16.pitch = 16;
    m16.value = 0xABCD;
    m16.elementSize = 2;
    m16.width = 3;
    m16.height = 2;
    printf("misaligned memset %s\n", cudaGetErrorName(cudaGraphAddMemsetNode(&m2, g3, &r0, 1, &m16)));
    cudaGetLastError();
    m16.dst = buf + 2;
    m16.pitch = 16;
    m16.value = 0xABCD;
    m16.elementSize = 2;
    m16.width = 3;
    m16.height = 2;
    CHECK(cudaGraphAddMemsetNode(&m2, g3, &r0, 1, &m16));
    CHECK(cudaGraphAddEventRecordNode(&r1, g3, &m2, 1, ev1));
    CHECK(cudaGraphAddEventWaitNode(&w, g3, &r1, 1, ev0));
    cudaGraphExec_t x3;
    CHECK(cudaGraphInstantiate(&x3, g3, 0));
    CHECK(cudaGraphLaunch(x3, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(hb, buf, 64, cudaMemcpyDeviceToHost));
    printf("memset16");
    for (int i = 0; i < 24; i++) printf(" %02x", hb[i]);
    printf("\n");
    float ms_elapsed = -1;
    CHECK(cudaEventElapsedTime(&ms_elapsed, ev0, ev1));
    printf("events %s elapsed ok %d\n", cudaGetErrorName(cudaEventQuery(ev1)), ms_elapsed >= 0.0f);

    // the generic node API: a memset and a kernel node through cudaGraphAddNode
    cudaGraph_t g4;
    CHECK(cudaGraphCreate(&g4, 0));
    cudaGraphNodeParams np = {};
    np.type = cudaGraphNodeTypeMemset;
    np.memset.dst = a;
    np.memset.value = 3;
    np.memset.elementSize = 4;
    np.memset.width = n;
    np.memset.height = 1;
    cudaGraphNode_t gm, gk;
    CHECK(cudaGraphAddNode(&gm, g4, nullptr, nullptr, 0, &np));
    void *args4[5];
    int k4 = 4, c4 = -2;
    cudaKernelNodeParams p4 = affine_params(args4, &b, &a, &k4, &c4);
    cudaGraphNodeParams nk = {};
    nk.type = cudaGraphNodeTypeKernel;
    nk.kernel.func = p4.func;
    nk.kernel.gridDim = p4.gridDim;
    nk.kernel.blockDim = p4.blockDim;
    nk.kernel.kernelParams = p4.kernelParams;
    CHECK(cudaGraphAddNode(&gk, g4, &gm, nullptr, 1, &nk));
    cudaGraphExec_t x4;
    CHECK(cudaGraphInstantiate(&x4, g4, 0));
    CHECK(cudaGraphLaunch(x4, s));
    CHECK(cudaStreamSynchronize(s));
    int b1 = first(b);
    np.memset.value = 5;
    CHECK(cudaGraphExecNodeSetParams(x4, gm, &np));
    CHECK(cudaGraphLaunch(x4, s));
    CHECK(cudaStreamSynchronize(s));
#if CUDART_VERSION >= 13050
    cudaGraphNodeParams back = {};
    CHECK(cudaGraphNodeGetParams(gk, &back));
    int back_type = (int)back.type, back_k = *(int *)back.kernel.kernelParams[2];
#else   // (CUDA 13.0 has no cudaGraphNodeGetParams)
    cudaGraphNodeType back_t;
    CHECK(cudaGraphNodeGetType(gk, &back_t));
    cudaKernelNodeParams back;
    CHECK(cudaGraphKernelNodeGetParams(gk, &back));
    int back_type = (int)back_t, back_k = *(int *)back.kernelParams[2];
#endif
    printf("generic b %d then %d type %d k %d\n", b1, first(b), back_type, back_k);
    CHECK(cudaGraphExecDestroy(x4));
    CHECK(cudaGraphDestroy(g4));

    // a node of the exec disabled, then enabled again
    CHECK(cudaMemset(d, 0, bytes));
    CHECK(cudaGraphNodeSetEnabled(x, Dn, 0));
    unsigned enabled = 1;
    CHECK(cudaGraphNodeGetEnabled(x, Dn, &enabled));
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
    int d_off = first(d);
    CHECK(cudaGraphNodeSetEnabled(x, Dn, 1));
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
    printf("disabled d %d enabled %u then d %d\n", d_off, enabled, first(d));

    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphExecDestroy(px));
    CHECK(cudaGraphExecDestroy(x3));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaGraphDestroy(g2));
    CHECK(cudaGraphDestroy(g3));
    CHECK(cudaGraphDestroy(child));
    CHECK(cudaGraphDestroy(parent));
    printf("last %s\n", cudaGetErrorName(cudaGetLastError()));
    return 0;
}
