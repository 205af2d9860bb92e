// What the cuRAND host-API test programs (curand_host.cpp, curand_mt19937.cpp,
// curand_sobol_mtgp32.cpp) share: each call's status goes to stdout ("status NAME VALUE"),
// each buffer to a file NAME.bin in `dir` (argv[1]), from host memory or copied back from the
// device.  Include it after curand.h (or curand_api.h) and cuda_runtime.h.
#ifndef CPUIFY_TEST_CURAND_HARNESS_H
#define CPUIFY_TEST_CURAND_HARNESS_H
#include <cstdio>
#include <cstdlib>

static const char *dir;

static void status(const char *name, curandStatus_t s) { std::printf("status %s %d\n", name, (int)s); }

static void dump(const char *name, const void *p, size_t bytes) {
    char path[4096];
    std::snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    FILE *f = std::fopen(path, "wb");
    if (!f || std::fwrite(p, 1, bytes, f) != bytes) { std::perror(path); std::exit(1); }
    std::fclose(f);
}

#define CHECK(call) do { curandStatus_t s_ = (call); if (s_ != CURAND_STATUS_SUCCESS) { \
    std::printf("%s:%d: %s -> %d\n", __FILE__, __LINE__, #call, (int)s_); std::exit(1); } } while (0)

// n elements of T in host memory (host) or device memory
template <typename T> static T *buffer(bool host, size_t n) {
    void *p = nullptr;
    if (host) p = std::malloc(n * sizeof(T));
    else if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) p = nullptr;
    if (!p) { std::printf("allocation failed\n"); std::exit(1); }
    return static_cast<T *>(p);
}

// writes the n elements of a buffer() to PREFIX_WHAT.bin and frees it
template <typename T> static void save(const char *prefix, const char *what, bool host, T *p, size_t n) {
    char name[256];
    std::snprintf(name, sizeof name, "%s_%s", prefix, what);
    if (host) { dump(name, p, n * sizeof(T)); std::free(p); return; }
    T *h = static_cast<T *>(std::malloc(n * sizeof(T)));
    cudaMemcpy(h, p, n * sizeof(T), cudaMemcpyDeviceToHost);
    dump(name, h, n * sizeof(T));
    std::free(h);
    cudaFree(p);
}
#endif
