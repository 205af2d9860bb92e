/* cpuify's CUDA runtime: what concerns several devices (CPUIFY_DEVICE_COUNT=N shows N, all
 * of them the one CPU and its memory: cudart.c).  Peer access: any device can access any
 * other's memory (it is the same memory), so cudaDeviceCanAccessPeer answers 1 for any two
 * distinct devices, and cudaDeviceEnablePeerAccess/DisablePeerAccess keep CUDA's state and
 * errors (enabling twice: cudaErrorPeerAccessAlreadyEnabled; disabling what was not
 * enabled: cudaErrorPeerAccessNotEnabled) although nothing needs mapping.  PCI bus ids:
 * device d is on bus d of domain 0 (cudaGetDeviceProperties' pciBusID). */

#include <stdio.h>

#include "cudart_internal.h"

#define fail cpuify_cudart_fail

static int valid_device(int device) {
    return device >= 0 && device < cpuify_cudart_device_count();
}

/* bit p of g_peers[d]: device d has enabled access to device p's memory */
static _Atomic uint64_t g_peers[CPUIFY_MAX_DEVICES];

void cpuify_cudart_forget_peers(int device) {
    if (!valid_device(device)) return;
    atomic_store(&g_peers[device], 0);
    for (int d = 0; d < CPUIFY_MAX_DEVICES; d++)
        atomic_fetch_and(&g_peers[d], ~(UINT64_C(1) << device));
}

cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice) {
    if (!canAccessPeer) return fail(cudaErrorInvalidValue);
    if (!valid_device(device) || !valid_device(peerDevice)) return fail(cudaErrorInvalidDevice);
    *canAccessPeer = device != peerDevice;   /* (a device is not its own peer, as in CUDA) */
    return cpuify_cudart_sticky_now();
}

/* the errors and their order as CUDA 13.0 gives them (H200): flags first, then the peer;
 * the current device itself is not a peer (cudaErrorPeerAccessUnsupported) */
cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
    if (flags != 0) return fail(cudaErrorInvalidValue);      /* no flags are defined */
    int device = 0;
    cudaGetDevice(&device);
    if (!valid_device(peerDevice)) return fail(cudaErrorInvalidDevice);
    if (peerDevice == device) return fail(cudaErrorPeerAccessUnsupported);
    uint64_t bit = UINT64_C(1) << peerDevice;
    if (atomic_fetch_or(&g_peers[device], bit) & bit) return fail(cudaErrorPeerAccessAlreadyEnabled);
    return cpuify_cudart_sticky_now();
}

cudaError_t cudaDeviceDisablePeerAccess(int peerDevice) {
    int device = 0;
    cudaGetDevice(&device);
    if (!valid_device(peerDevice)) return fail(cudaErrorInvalidDevice);
    uint64_t bit = UINT64_C(1) << peerDevice;
    if (!(atomic_fetch_and(&g_peers[device], ~bit) & bit)) return fail(cudaErrorPeerAccessNotEnabled);
    return cpuify_cudart_sticky_now();
}

/* the link between two devices is the CPU's own memory: the best rank, every access, native
 * atomics (they are the CPU's), CUDA arrays (host memory too) */
cudaError_t cudaDeviceGetP2PAttribute(int *value, enum cudaDeviceP2PAttr attr, int srcDevice,
                                      int dstDevice) {
    if (!value) return fail(cudaErrorInvalidValue);
    if (!valid_device(srcDevice) || !valid_device(dstDevice) || srcDevice == dstDevice)
        return fail(cudaErrorInvalidDevice);
    switch ((int)attr) {
    case cudaDevP2PAttrPerformanceRank: *value = 0; break;
    case cudaDevP2PAttrAccessSupported: *value = 1; break;
    case cudaDevP2PAttrNativeAtomicSupported: *value = 1; break;
    case cudaDevP2PAttrCudaArrayAccessSupported: *value = 1; break;
    case 5: *value = 0; break;     /* cudaDevP2PAttrOnlyPartialNativeAtomicSupported: all are */
    default: return fail(cudaErrorInvalidValue);
    }
    return cpuify_cudart_sticky_now();
}

/* "domain:bus:device.function" in hex, as CUDA writes it ("0000:01:00.0"); one that does
 * not fit in len bytes is cut to fit and cudaErrorInvalidValue returned, as CUDA 13.0 does */
cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) {
    if (!pciBusId || len <= 0) return fail(cudaErrorInvalidValue);
    if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
    int n = snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.0", 0u, (unsigned)device, 0u);
    if (n >= len) return fail(cudaErrorInvalidValue);
    return cpuify_cudart_sticky_now();
}

/* accepts "domain:bus:device.function" and "bus:device.function" (hex) */
cudaError_t cudaDeviceGetByPCIBusId(int *device, const char *pciBusId) {
    if (!device || !pciBusId) return fail(cudaErrorInvalidValue);
    unsigned domain = 0, bus, dev, fn;
    char end;
    if (sscanf(pciBusId, "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn, &end) != 4) {
        domain = 0;
        if (sscanf(pciBusId, "%x:%x.%x%c", &bus, &dev, &fn, &end) != 3) return fail(cudaErrorInvalidValue);
    }
    if (domain != 0 || dev != 0 || fn != 0 || !valid_device((int)bus)) return fail(cudaErrorInvalidDevice);
    *device = (int)bus;
    return cpuify_cudart_sticky_now();
}
