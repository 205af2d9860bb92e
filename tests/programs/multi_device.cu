// A program written for several GPUs (OLCF's training hw7, CUDA by Example's multi-device
// samples): one slice of the work per device, chosen with cudaSetDevice in a loop.
#include <cstdio>
#include <cstring>
#include <thread>

__global__ void affine(const float *x, float *y, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}

int main() {
    int count = -1;
    cudaGetDeviceCount(&count);
    printf("devices: %d\n", count);
    const int n = 1000;
    float *x[8], *y[8];
    float h[n];
    for (int d = 0; d < count && d < 8; d++) {
        cudaSetDevice(d);
        cudaMalloc(&x[d], n * sizeof(float));
        cudaMalloc(&y[d], n * sizeof(float));
        for (int i = 0; i < n; i++) h[i] = (float)(i + d);
        cudaMemcpy(x[d], h, sizeof h, cudaMemcpyHostToDevice);
        affine<<<(n + 255) / 256, 256>>>(x[d], y[d], 2.0f, (float)d, n);
    }
    cudaDeviceSynchronize();
    int bad = 0;
    for (int d = 0; d < count && d < 8; d++) {
        cudaSetDevice(d);
        cudaMemcpy(h, y[d], sizeof h, cudaMemcpyDeviceToHost);
        for (int i = 0; i < n; i++) bad += h[i] != 2.0f * (float)(i + d) + (float)d;
    }
    printf("mismatches: %d\n", bad);
    int cur = -1;
    cudaGetDevice(&cur);
    printf("current: %d\n", cur);
    int other = -1;                     // the current device is each host thread's own
    std::thread([&] { cudaGetDevice(&other); }).join();
    printf("new host thread: %d\n", other);
    printf("cudaSetDevice(count): %s\n", cudaGetErrorName(cudaSetDevice(count)));
    cudaGetLastError();
    cudaDeviceProp p0, pl;
    cudaError_t e0 = cudaGetDeviceProperties(&p0, 0);
    cudaError_t el = cudaGetDeviceProperties(&pl, count - 1);
    printf("properties: %s %s, uuids %s\n", cudaGetErrorName(e0), cudaGetErrorName(el),
           count == 1 || memcmp(p0.uuid.bytes, pl.uuid.bytes, 16) != 0 ? "distinct" : "same");
    if (count > 1) {
        float v = -1.0f;
        cudaMemcpyPeer(x[0], 0, y[count - 1], count - 1, sizeof(float));
        cudaMemcpy(&v, x[0], sizeof v, cudaMemcpyDeviceToHost);
        printf("peer copy: %g\n", v);
        // peer access: any two distinct devices (they share the CPU's memory)
        const int last = count - 1;
        int can = -1, self = -1;
        cudaDeviceCanAccessPeer(&can, 0, last);
        cudaDeviceCanAccessPeer(&self, last, last);
        printf("can access peer: %d, itself: %d\n", can, self);
        cudaSetDevice(0);
        cudaError_t on = cudaDeviceEnablePeerAccess(last, 0);
        cudaError_t twice = cudaDeviceEnablePeerAccess(last, 0);
        cudaError_t own = cudaDeviceEnablePeerAccess(0, 0);
        cudaError_t flags = cudaDeviceEnablePeerAccess(1, 1);
        cudaError_t off = cudaDeviceDisablePeerAccess(last);
        cudaError_t off_twice = cudaDeviceDisablePeerAccess(last);
        printf("enable: %s %s %s %s, disable: %s %s\n", cudaGetErrorName(on),
               cudaGetErrorName(twice), cudaGetErrorName(own), cudaGetErrorName(flags),
               cudaGetErrorName(off), cudaGetErrorName(off_twice));
        cudaGetLastError();
        // a kernel of the last device reads device 0's memory (y[0]) once access is enabled
        cudaSetDevice(last);
        cudaDeviceEnablePeerAccess(0, 0);
        affine<<<(n + 255) / 256, 256>>>(y[0], x[last], 1.0f, 1.0f, n);
        cudaMemcpy(h, x[last], sizeof h, cudaMemcpyDeviceToHost);
        int wrong = 0;
        for (int i = 0; i < n; i++) wrong += h[i] != 2.0f * (float)i + 1.0f;
        printf("peer kernel: %d wrong\n", wrong);
        int rank = -1, access = -1, atomics = -1;
        cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, 0, last);
        cudaDeviceGetP2PAttribute(&access, cudaDevP2PAttrAccessSupported, 0, last);
        cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, last, 0);
        cudaError_t same = cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrAccessSupported, 1, 1);
        printf("p2p attributes: rank %d access %d atomics %d, same device %s\n", rank, access,
               atomics, cudaGetErrorName(same));
        cudaGetLastError();
        // each device on its own PCI bus, all on one board
        char bus[32] = "";
        int found = -1, attr = -1;
        cudaDeviceGetPCIBusId(bus, sizeof bus, last);
        cudaDeviceGetByPCIBusId(&found, bus);
        cudaDeviceGetAttribute(&attr, cudaDevAttrPciBusId, last);
        printf("pci: %s -> %d, bus ids %d %d (attribute %d), board %d %d group %d %d\n", bus,
               found, p0.pciBusID, pl.pciBusID, attr, p0.isMultiGpuBoard, pl.isMultiGpuBoard,
               p0.multiGpuBoardGroupID, pl.multiGpuBoardGroupID);
        char tiny[5];                  // cut to fit, and an error, as CUDA 13.0 does
        cudaError_t cut = cudaDeviceGetPCIBusId(tiny, sizeof tiny, last);
        printf("pci id in 5 bytes: %s '%s'\n", cudaGetErrorName(cut), tiny);
        cudaGetLastError();
        // an allocation belongs to the device current when it was made
        cudaPointerAttributes a0, al;
        cudaPointerGetAttributes(&a0, y[0]);
        cudaPointerGetAttributes(&al, x[last]);
        printf("pointer devices: %d %d\n", a0.device, al.device);
    }
    return 0;
}
