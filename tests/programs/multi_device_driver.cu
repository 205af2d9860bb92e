// CPUIFY_DEVICE_COUNT=N seen through the CUDA driver API and NVML as through the runtime:
// device ordinals, one primary context per device that is also the runtime's current
// device, peer access (its state shared with the runtime's), PCI bus ids and UUIDs.
// Built with -lcuda -lnvidia-ml; run with CPUIFY_DEVICE_COUNT=3.
#include <cstdio>
#include <cstring>
#include <cuda.h>
#include <nvml.h>

__global__ void fill(int *x, int v) { x[threadIdx.x] = v + threadIdx.x; }

static int runtime_device() {
    int d = -1;
    cudaGetDevice(&d);
    return d;
}

int main() {
    cuInit(0);
    int count = -1;
    CUdevice dev = -1;
    cuDeviceGetCount(&count);
    CUresult past = cuDeviceGet(&dev, count);
    cuDeviceGet(&dev, count - 1);
    printf("driver: %d devices, last %d, past the end %d\n", count, (int)dev, (int)past);

    int bus_attr = -1;
    cuDeviceGetAttribute(&bus_attr, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev);
    char bus[32] = "";
    CUdevice by_bus = -1;
    cuDeviceGetPCIBusId(bus, sizeof bus, dev);
    cuDeviceGetByPCIBusId(&by_bus, bus);
    CUuuid u0, ul;
    cuDeviceGetUuid(&u0, 0);
    cuDeviceGetUuid(&ul, dev);
    printf("pci bus %d %s -> %d, uuids %s\n", bus_attr, bus, (int)by_bus,
           memcmp(u0.bytes, ul.bytes, 16) ? "distinct" : "same");

    // contexts: device d's primary context; making it current sets the runtime's device
    CUcontext c0, cl, cur = 0, popped = 0;
    cuDevicePrimaryCtxRetain(&c0, 0);
    cuDevicePrimaryCtxRetain(&cl, dev);
    cuCtxSetCurrent(cl);
    CUdevice ctx_dev = -1;
    cuCtxGetDevice(&ctx_dev);
    printf("contexts %s, current device %d (runtime %d)\n", c0 != cl ? "distinct" : "same",
           (int)ctx_dev, runtime_device());
    cudaSetDevice(1);                   // the runtime's device changes the current context
    cuCtxGetCurrent(&cur);
    cuCtxGetDevice(&ctx_dev);
    printf("after cudaSetDevice(1): context device %d\n", (int)ctx_dev);
    cuCtxPushCurrent(c0);
    int pushed = runtime_device();
    cuCtxPopCurrent(&popped);
    printf("push: runtime %d, pop: %s, runtime %d\n", pushed, popped == c0 ? "c0" : "other",
           runtime_device());
    CUcontext created = 0;
    CUresult made = cuCtxCreate(&created, NULL, 0, 2);
    int in_created = runtime_device();
    cuCtxDestroy(created);
    printf("create: %d, runtime %d, after destroy %d\n", (int)made, in_created, runtime_device());

    // a launch while device 2's context is current, on memory of the driver API
    cuCtxSetCurrent(cl);
    CUdeviceptr p;
    int h[4] = {0, 0, 0, 0};
    cuMemAlloc(&p, sizeof h);
    fill<<<1, 4>>>((int *)p, 10 * runtime_device());
    cuMemcpyDtoH(h, p, sizeof h);
    printf("kernel on device %d: %d %d %d %d\n", runtime_device(), h[0], h[1], h[2], h[3]);

    // peers: any two distinct devices; the state is the runtime's
    int can = -1, itself = -1, access = -1;
    cuDeviceCanAccessPeer(&can, 0, dev);
    cuDeviceCanAccessPeer(&itself, 0, 0);
    cuDeviceGetP2PAttribute(&access, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, dev);
    cuCtxSetCurrent(c0);
    CUresult on = cuCtxEnablePeerAccess(cl, 0), twice = cuCtxEnablePeerAccess(cl, 0);
    cudaError_t runtime_twice = cudaDeviceEnablePeerAccess((int)dev, 0);
    CUresult own = cuCtxEnablePeerAccess(c0, 0);
    CUresult off = cuCtxDisablePeerAccess(cl), off_twice = cuCtxDisablePeerAccess(cl);
    printf("peer: can %d itself %d access %d, enable %d %d (runtime %s) own %d, disable %d %d\n",
           can, itself, access, (int)on, (int)twice, cudaGetErrorName(runtime_twice), (int)own,
           (int)off, (int)off_twice);
    cudaGetLastError();

    // NVML: index i is CUDA device i
    unsigned n = 0, index = 99, minor = 99;
    nvmlDevice_t h0, hl, found;
    nvmlInit();
    nvmlDeviceGetCount(&n);
    nvmlReturn_t bad = nvmlDeviceGetHandleByIndex(n, &hl);
    nvmlDeviceGetHandleByIndex(0, &h0);
    nvmlDeviceGetHandleByIndex(n - 1, &hl);
    nvmlDeviceGetIndex(hl, &index);
    nvmlDeviceGetMinorNumber(hl, &minor);
    printf("nvml: %u devices, past the end %d, last index %u minor %u\n", n, (int)bad, index, minor);
    nvmlPciInfo_t pci;
    nvmlDeviceGetPciInfo(hl, &pci);
    nvmlReturn_t by_pci = nvmlDeviceGetHandleByPciBusId(pci.busId, &found);
    int same_pci = by_pci == NVML_SUCCESS && found == hl;
    char uuid0[96], uuidl[96];
    nvmlDeviceGetUUID(h0, uuid0, sizeof uuid0);
    nvmlDeviceGetUUID(hl, uuidl, sizeof uuidl);
    nvmlReturn_t by_uuid = nvmlDeviceGetHandleByUUID(uuidl, &found);
    printf("nvml pci %s (found %d), uuids %s (found %d)\n", pci.busId, same_pci,
           strcmp(uuid0, uuidl) ? "distinct" : "same", by_uuid == NVML_SUCCESS && found == hl);
    nvmlGpuP2PStatus_t read = NVML_P2P_STATUS_UNKNOWN, nvlink = NVML_P2P_STATUS_UNKNOWN;
    nvmlDeviceGetP2PStatus(h0, hl, NVML_P2P_CAPS_INDEX_READ, &read);
    nvmlDeviceGetP2PStatus(h0, hl, NVML_P2P_CAPS_INDEX_NVLINK, &nvlink);
    nvmlGpuP2PStatus_t own_status = NVML_P2P_STATUS_UNKNOWN;
    nvmlDeviceGetP2PStatus(h0, h0, NVML_P2P_CAPS_INDEX_READ, &own_status);
    printf("nvml p2p read %d nvlink %d itself %d\n", (int)read, (int)nvlink, (int)own_status);
    nvmlShutdown();
    return 0;
}
