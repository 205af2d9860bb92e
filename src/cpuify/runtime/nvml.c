/* cpuify's libnvidia-ml.so (NVML, the NVIDIA Management Library) for `cpuify cuda-home`: the
 * queries that mean something on the CPU, compiled against the nvml.h of NVIDIA's
 * nvidia-nvml-dev wheel.  NVML sees the devices cpuify's CUDA runtime reports (one, or
 * CPUIFY_DEVICE_COUNT of them, all the one CPU; index i is CUDA device i): their
 * name, UUID, PCI location and memory come from cudaGetDeviceProperties/cudaMemGetInfo, the
 * memory clock from cudaDevAttrMemoryClockRate, the graphics/SM clocks from the CPU's
 * frequency (sysfs cpufreq, else /proc/cpuinfo; NVML_ERROR_NOT_SUPPORTED when neither says).
 * Every other function declared in nvml.h (temperature, power, utilization, ...) is generated
 * from the header (cpuify/nvcc/cuda_home.py): it prints one line naming itself, once, and
 * returns NVML_ERROR_NOT_SUPPORTED.
 *
 * The runtime is referenced weakly, as in cuda_driver.c: a program that links cpuify's
 * libcudart (static or shared) gets it; one that links only libnvidia-ml gets
 * NVML_ERROR_NOT_SUPPORTED from the device queries, with a line saying what to link. */

#define NVML_NO_UNVERSIONED_FUNC_DEFS /* define the old names (nvmlInit, ...) next to _v2 */
#include <nvml.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#pragma weak cudaGetDeviceProperties
#pragma weak cudaMemGetInfo
#pragma weak cudaDeviceGetAttribute
#pragma weak cudaGetDeviceCount

/* generated with the stubs: nvmlErrorString's text of an nvmlReturn_t, NULL when there is none */
extern const char *cpuify_nvml_error_text(int value);

static atomic_int g_init_count;          /* nvmlInit/nvmlShutdown pairs, as NVML counts them */
static char g_devices[64];               /* &g_devices[i] is device i's handle */
#define DEVICE(i) ((nvmlDevice_t)(void *)&g_devices[(i)])

/* the devices the runtime shows (CPUIFY_DEVICE_COUNT); one without the runtime */
static unsigned device_count(void) {
    int n = 1;
    if (cudaGetDeviceCount && cudaGetDeviceCount(&n) != cudaSuccess) n = 1;
    return (unsigned)n;
}

/* the index of a handle, -1 for none */
static int device_index(nvmlDevice_t device) {
    const char *c = (const char *)(void *)device;
    if (c < g_devices || c >= g_devices + device_count()) return -1;
    return (int)(c - g_devices);
}

#define NEED_INIT() do { if (atomic_load(&g_init_count) <= 0) return NVML_ERROR_UNINITIALIZED; } while (0)
/* declares `index`, the handle's device */
#define CHECK_HANDLE(d) int index = device_index(d); \
    do { if (index < 0) return NVML_ERROR_INVALID_ARGUMENT; (void)index; } while (0)

static nvmlReturn_t need_runtime(const char *fn, int present) {
    if (present) return NVML_SUCCESS;
    static atomic_int said;
    if (!atomic_exchange(&said, 1))
        fprintf(stderr, "cpuify: %s (NVML) needs cpuify's CUDA runtime: link the program with "
                        "-lcudart (returning NVML_ERROR_NOT_SUPPORTED)\n", fn);
    return NVML_ERROR_NOT_SUPPORTED;
}

static nvmlReturn_t device_properties(const char *fn, int index, struct cudaDeviceProp *p) {
    nvmlReturn_t r = need_runtime(fn, cudaGetDeviceProperties != 0);
    if (r != NVML_SUCCESS) return r;
    return cudaGetDeviceProperties(p, index) == cudaSuccess ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

static nvmlReturn_t copy_string(char *out, unsigned int length, const char *text) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, text, strlen(text) + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;     /* NVML_INIT_FLAG_NO_GPUS / NO_ATTACH: nothing to attach on the CPU */
    atomic_fetch_add(&g_init_count, 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    int n = atomic_load(&g_init_count);
    do {
        if (n <= 0) return NVML_ERROR_UNINITIALIZED;
    } while (!atomic_compare_exchange_weak(&g_init_count, &n, n - 1));
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    const char *text = cpuify_nvml_error_text((int)result);
    return text ? text : "Unknown Error";
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = CUDA_VERSION;            /* what cuDriverGetVersion says */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    return nvmlSystemGetCudaDriverVersion(version);
}

/* NVIDIA's driver versions read "580.95.05"; cpuify's says it is cpuify's */
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    NEED_INIT();
    char text[64];
    snprintf(text, sizeof text, "%d.%d (cpuify)", CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
    return copy_string(version, length, text);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    char text[64];
    snprintf(text, sizeof text, "%d.%d (cpuify)", CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
    return copy_string(version, length, text);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    NEED_INIT();
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = device_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    NEED_INIT();
    if (!device || index >= device_count()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = DEVICE(index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    NEED_INIT();
    int i = device_index(device);
    if (i < 0 || !index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)i;
    return NVML_SUCCESS;
}

/* "domain:bus:device.function" in hex, with or without the domain (NVML accepts both) */
static int parse_bus_id(const char *text, unsigned *domain, unsigned *bus, unsigned *dev) {
    unsigned fn = 0;
    char end;
    if (sscanf(text, "%x:%x:%x.%x%c", domain, bus, dev, &fn, &end) == 4) return 1;
    *domain = 0;
    return sscanf(text, "%x:%x.%x%c", bus, dev, &fn, &end) == 3;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) {
    NEED_INIT();
    if (!pciBusId || !device) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned domain, bus, dev;
    if (!parse_bus_id(pciBusId, &domain, &bus, &dev)) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < device_count(); i++) {
        struct cudaDeviceProp p;
        nvmlReturn_t r = device_properties("nvmlDeviceGetHandleByPciBusId", (int)i, &p);
        if (r != NVML_SUCCESS) return r;
        if (domain == (unsigned)p.pciDomainID && bus == (unsigned)p.pciBusID &&
            dev == (unsigned)p.pciDeviceID) {
            *device = DEVICE(i);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* the UUID cudaDeviceProp.uuid holds, written as NVML writes one: GPU-8-4-4-4-12 hex digits */
static void uuid_text(const struct cudaDeviceProp *p, char *out, size_t n) {
    const unsigned char *b = (const unsigned char *)p->uuid.bytes;
    char hex[33];
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", b[i]);
    snprintf(out, n, "GPU-%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16, hex + 20);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    NEED_INIT();
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < device_count(); i++) {
        struct cudaDeviceProp p;
        nvmlReturn_t r = device_properties("nvmlDeviceGetHandleByUUID", (int)i, &p);
        if (r != NVML_SUCCESS) return r;
        char ours[NVML_DEVICE_UUID_BUFFER_SIZE];
        uuid_text(&p, ours, sizeof ours);
        if (strcasecmp(uuid, ours) == 0) {
            *device = DEVICE(i);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    NEED_INIT();
    CHECK_HANDLE(device);
    struct cudaDeviceProp p;
    nvmlReturn_t r = device_properties("nvmlDeviceGetUUID", index, &p);
    if (r != NVML_SUCCESS) return r;
    char text[NVML_DEVICE_UUID_BUFFER_SIZE];
    uuid_text(&p, text, sizeof text);
    return copy_string(uuid, length, text);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    NEED_INIT();
    CHECK_HANDLE(device);
    struct cudaDeviceProp p;
    nvmlReturn_t r = device_properties("nvmlDeviceGetName", index, &p);
    if (r != NVML_SUCCESS) return r;
    /* NVML names fit NVML_DEVICE_NAME_BUFFER_SIZE; a long CPU model name is cut to fit */
    char text[NVML_DEVICE_NAME_BUFFER_SIZE];
    snprintf(text, sizeof text, "%.*s", (int)sizeof text - 1, p.name);
    return copy_string(name, length, text);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    NEED_INIT();
    CHECK_HANDLE(device);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    struct cudaDeviceProp p;
    nvmlReturn_t r = device_properties("nvmlDeviceGetPciInfo", index, &p);
    if (r != NVML_SUCCESS) return r;
    memset(pci, 0, sizeof *pci);
    pci->domain = (unsigned)p.pciDomainID;
    pci->bus = (unsigned)p.pciBusID;
    pci->device = (unsigned)p.pciDeviceID;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
             pci->domain, pci->bus, pci->device);
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT,
             pci->domain, pci->bus, pci->device);
    return NVML_SUCCESS;     /* pciDeviceId/pciSubSystemId 0: no PCI vendor or device */
}

static nvmlReturn_t memory_info(const char *fn, unsigned long long *total,
                                unsigned long long *free_bytes) {
    nvmlReturn_t r = need_runtime(fn, cudaMemGetInfo != 0);
    if (r != NVML_SUCCESS) return r;
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) return NVML_ERROR_UNKNOWN;
    *total = t;
    *free_bytes = f;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    NEED_INIT();
    CHECK_HANDLE(device);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = memory_info("nvmlDeviceGetMemoryInfo", &memory->total, &memory->free);
    if (r == NVML_SUCCESS) memory->used = memory->total - memory->free;
    return r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    NEED_INIT();
    CHECK_HANDLE(device);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t r = memory_info("nvmlDeviceGetMemoryInfo_v2", &memory->total, &memory->free);
    if (r == NVML_SUCCESS) {
        memory->reserved = 0;
        memory->used = memory->total - memory->free;
    }
    return r;
}

/* the CPU's frequency in MHz: sysfs cpufreq (`file` is scaling_cur_freq or cpuinfo_max_freq,
 * in kHz), else /proc/cpuinfo's "cpu MHz" for the current one; 0 when neither says */
static unsigned cpu_mhz(const char *file) {
    char path[128];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cpufreq/%s", file);
    FILE *f = fopen(path, "r");
    unsigned long khz = 0;
    if (f) {
        if (fscanf(f, "%lu", &khz) != 1) khz = 0;
        fclose(f);
        if (khz) return (unsigned)((khz + 500) / 1000);
    }
    if (strcmp(file, "scaling_cur_freq") != 0) return 0;
    f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    char line[512];
    double mhz = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "cpu MHz", 7) == 0) {
            const char *c = strchr(line, ':');
            if (c) mhz = strtod(c + 1, NULL);
            break;
        }
    fclose(f);
    return mhz > 0 ? (unsigned)(mhz + 0.5) : 0;
}

static nvmlReturn_t clock_mhz(const char *fn, nvmlClockType_t type, int max, unsigned *mhz) {
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
        *mhz = cpu_mhz(max ? "cpuinfo_max_freq" : "scaling_cur_freq");
        return *mhz ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
    case NVML_CLOCK_MEM: {
        /* the figure cudaDeviceProp.memoryClockRate reports (kHz), so that programs which
         * combine it with memoryBusWidth (BabelStream's peak bandwidth) see one device */
        nvmlReturn_t r = need_runtime(fn, cudaDeviceGetAttribute != 0);
        if (r != NVML_SUCCESS) return r;
        int khz = 0;
        if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, 0) != cudaSuccess || khz <= 0)
            return NVML_ERROR_NOT_SUPPORTED;
        *mhz = (unsigned)khz / 1000;
        return NVML_SUCCESS;
    }
    default:                 /* NVML_CLOCK_VIDEO: a CPU has no video engine */
        return type < NVML_CLOCK_COUNT ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
    }
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    NEED_INIT();
    CHECK_HANDLE(device);
    if (!clock) return NVML_ERROR_INVALID_ARGUMENT;
    return clock_mhz("nvmlDeviceGetClockInfo", type, 0, clock);
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    NEED_INIT();
    CHECK_HANDLE(device);
    if (!clock) return NVML_ERROR_INVALID_ARGUMENT;
    return clock_mhz("nvmlDeviceGetMaxClockInfo", type, 1, clock);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    NEED_INIT();
    CHECK_HANDLE(device);
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    struct cudaDeviceProp p;
    nvmlReturn_t r = device_properties("nvmlDeviceGetCudaComputeCapability", index, &p);
    if (r != NVML_SUCCESS) return r;
    *major = p.major;
    *minor = p.minor;
    return NVML_SUCCESS;
}

/* /dev/nvidiaN's N: the index */
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
    NEED_INIT();
    CHECK_HANDLE(device);
    if (!minorNumber) return NVML_ERROR_INVALID_ARGUMENT;
    *minorNumber = (unsigned)index;
    return NVML_SUCCESS;
}

/* any two devices reach each other's memory (it is the CPU's, as cudaDeviceCanAccessPeer
 * says): reads, writes and atomics; there is no NVLink, and no PCI link either.  A device and
 * itself: NVML_P2P_STATUS_NOT_SUPPORTED for every capability, as NVML answers on a GPU */
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                    nvmlGpuP2PCapsIndex_t p2pIndex, nvmlGpuP2PStatus_t *p2pStatus) {
    NEED_INIT();
    if (device_index(device1) < 0 || device_index(device2) < 0 || !p2pStatus)
        return NVML_ERROR_INVALID_ARGUMENT;
    switch (p2pIndex) {
    case NVML_P2P_CAPS_INDEX_READ:
    case NVML_P2P_CAPS_INDEX_WRITE:
    case NVML_P2P_CAPS_INDEX_ATOMICS:
        *p2pStatus = device1 != device2 ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
        break;
    case NVML_P2P_CAPS_INDEX_NVLINK:
    case NVML_P2P_CAPS_INDEX_PCI: *p2pStatus = NVML_P2P_STATUS_NOT_SUPPORTED; break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}
