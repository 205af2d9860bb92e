// A ~300-line application with three kernels (histogram with shared-memory atomics, a 2D
// stencil with a shared tile, a warp-shuffle reduction) and host-side verification.
// Used by tools/bench_programs.py to measure the uncached build time of `cpuify nvcc`.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>
#include <algorithm>
#include <numeric>
#include <string>

#define CHECK(call)                                                                   \
    do {                                                                              \
        cudaError_t err_ = (call);                                                    \
        if (err_ != cudaSuccess) {                                                    \
            fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(err_),     \
                    __FILE__, __LINE__);                                              \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

namespace cfg {
constexpr int kBins = 64;
constexpr int kTile = 16;
constexpr int kRadius = 1;
constexpr int kReduceThreads = 256;
}  // namespace cfg

// ---------------------------------------------------------------------------------
// kernel 1: histogram of byte values, privatized in shared memory
__global__ void histogram(const unsigned char *data, size_t n, unsigned int *bins) {
    __shared__ unsigned int local[cfg::kBins];
    for (int i = threadIdx.x; i < cfg::kBins; i += blockDim.x) local[i] = 0;
    __syncthreads();
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride)
        atomicAdd(&local[data[i] % cfg::kBins], 1u);
    __syncthreads();
    for (int i = threadIdx.x; i < cfg::kBins; i += blockDim.x)
        if (local[i]) atomicAdd(&bins[i], local[i]);
}

// ---------------------------------------------------------------------------------
// kernel 2: 5-point stencil on a 2D grid using a shared tile with halo
__global__ void stencil(const float *in, float *out, int w, int h, float c0, float c1) {
    __shared__ float tile[cfg::kTile + 2 * cfg::kRadius][cfg::kTile + 2 * cfg::kRadius];
    int gx = blockIdx.x * cfg::kTile + threadIdx.x;
    int gy = blockIdx.y * cfg::kTile + threadIdx.y;
    int lx = threadIdx.x + cfg::kRadius, ly = threadIdx.y + cfg::kRadius;
    auto at = [&](int x, int y) -> float {
        x = min(max(x, 0), w - 1);
        y = min(max(y, 0), h - 1);
        return in[y * w + x];
    };
    tile[ly][lx] = at(gx, gy);
    if (threadIdx.x < cfg::kRadius) {
        tile[ly][lx - cfg::kRadius] = at(gx - cfg::kRadius, gy);
        tile[ly][lx + cfg::kTile] = at(gx + cfg::kTile, gy);
    }
    if (threadIdx.y < cfg::kRadius) {
        tile[ly - cfg::kRadius][lx] = at(gx, gy - cfg::kRadius);
        tile[ly + cfg::kTile][lx] = at(gx, gy + cfg::kTile);
    }
    __syncthreads();
    if (gx < w && gy < h) {
        float v = c0 * tile[ly][lx] +
                  c1 * (tile[ly][lx - 1] + tile[ly][lx + 1] + tile[ly - 1][lx] + tile[ly + 1][lx]);
        out[gy * w + gx] = v;
    }
}

// ---------------------------------------------------------------------------------
// kernel 3: sum of squares with warp shuffles, one atomic per block
__device__ __forceinline__ double warp_sum(double v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

__global__ void sum_squares(const float *x, size_t n, double *result) {
    __shared__ double partial[cfg::kReduceThreads / 32];
    double acc = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride)
        acc += (double)x[i] * x[i];
    acc = warp_sum(acc);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < blockDim.x / 32 ? partial[lane] : 0.0;
        acc = warp_sum(acc);
        if (lane == 0) atomicAdd(result, acc);
    }
}

// ---------------------------------------------------------------------------------
// host side

struct Timer {
    cudaEvent_t a, b;
    Timer() { cudaEventCreate(&a); cudaEventCreate(&b); }
    ~Timer() { cudaEventDestroy(a); cudaEventDestroy(b); }
    void start() { cudaEventRecord(a); }
    float stop() {
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        return ms;
    }
};

static std::vector<unsigned char> make_bytes(size_t n, unsigned seed) {
    std::vector<unsigned char> v(n);
    unsigned s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        v[i] = (unsigned char)(s >> 24);
    }
    return v;
}

static std::vector<float> make_field(int w, int h) {
    std::vector<float> f((size_t)w * h);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) f[(size_t)y * w + x] = sinf(x * 0.05f) * cosf(y * 0.03f);
    return f;
}

static bool check_histogram(const std::vector<unsigned char> &data, const unsigned *bins) {
    std::vector<unsigned> ref(cfg::kBins, 0);
    for (unsigned char c : data) ref[c % cfg::kBins]++;
    for (int i = 0; i < cfg::kBins; i++)
        if (ref[i] != bins[i]) {
            printf("histogram bin %d: got %u expected %u\n", i, bins[i], ref[i]);
            return false;
        }
    return true;
}

static bool check_stencil(const std::vector<float> &in, const std::vector<float> &out, int w, int h,
                          float c0, float c1) {
    auto at = [&](int x, int y) {
        x = std::min(std::max(x, 0), w - 1);
        y = std::min(std::max(y, 0), h - 1);
        return in[(size_t)y * w + x];
    };
    double max_err = 0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            float ref = c0 * at(x, y) + c1 * (at(x - 1, y) + at(x + 1, y) + at(x, y - 1) + at(x, y + 1));
            max_err = std::max(max_err, (double)fabsf(ref - out[(size_t)y * w + x]));
        }
    if (max_err > 1e-4) {
        printf("stencil max error %g\n", max_err);
        return false;
    }
    return true;
}

static double host_sum_squares(const std::vector<float> &x) {
    double s = 0;
    for (float v : x) s += (double)v * v;
    return s;
}

struct Options {
    size_t bytes = 1 << 20;
    int w = 512, h = 384;
    int iterations = 4;
    bool verbose = false;
};

static Options parse(int argc, char **argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "-v") o.verbose = true;
        else if (a == "-n" && i + 1 < argc) o.bytes = strtoull(argv[++i], nullptr, 10);
        else if (a == "-w" && i + 1 < argc) o.w = atoi(argv[++i]);
        else if (a == "-h" && i + 1 < argc) o.h = atoi(argv[++i]);
        else if (a == "-i" && i + 1 < argc) o.iterations = atoi(argv[++i]);
    }
    return o;
}

int main(int argc, char **argv) {
    Options o = parse(argc, argv);
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    if (o.verbose) printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    int blocks = prop.multiProcessorCount * 4;
    bool ok = true;
    Timer timer;

    // histogram
    std::vector<unsigned char> bytes = make_bytes(o.bytes, 7);
    unsigned char *d_bytes;
    unsigned *d_bins;
    CHECK(cudaMalloc(&d_bytes, o.bytes));
    CHECK(cudaMalloc(&d_bins, cfg::kBins * sizeof(unsigned)));
    CHECK(cudaMemcpy(d_bytes, bytes.data(), o.bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(d_bins, 0, cfg::kBins * sizeof(unsigned)));
    timer.start();
    histogram<<<blocks, 256>>>(d_bytes, o.bytes, d_bins);
    CHECK(cudaGetLastError());
    float t_hist = timer.stop();
    std::vector<unsigned> bins(cfg::kBins);
    CHECK(cudaMemcpy(bins.data(), d_bins, cfg::kBins * sizeof(unsigned), cudaMemcpyDeviceToHost));
    ok &= check_histogram(bytes, bins.data());

    // stencil, iterated
    std::vector<float> field = make_field(o.w, o.h), result((size_t)o.w * o.h);
    float *d_a, *d_b;
    size_t fbytes = field.size() * sizeof(float);
    CHECK(cudaMalloc(&d_a, fbytes));
    CHECK(cudaMalloc(&d_b, fbytes));
    CHECK(cudaMemcpy(d_a, field.data(), fbytes, cudaMemcpyHostToDevice));
    dim3 tb(cfg::kTile, cfg::kTile), grid((o.w + cfg::kTile - 1) / cfg::kTile, (o.h + cfg::kTile - 1) / cfg::kTile);
    const float c0 = 0.6f, c1 = 0.1f;
    timer.start();
    for (int it = 0; it < o.iterations; it++) {
        stencil<<<grid, tb>>>(d_a, d_b, o.w, o.h, c0, c1);
        std::swap(d_a, d_b);
    }
    CHECK(cudaGetLastError());
    float t_stencil = timer.stop();
    // verify one step on the host from the state before the last step
    std::vector<float> before((size_t)o.w * o.h);
    CHECK(cudaMemcpy(before.data(), d_b, fbytes, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(result.data(), d_a, fbytes, cudaMemcpyDeviceToHost));
    ok &= check_stencil(before, result, o.w, o.h, c0, c1);

    // reduction
    double *d_sum, sum = 0;
    CHECK(cudaMalloc(&d_sum, sizeof(double)));
    CHECK(cudaMemset(d_sum, 0, sizeof(double)));
    timer.start();
    sum_squares<<<blocks, cfg::kReduceThreads>>>(d_a, result.size(), d_sum);
    CHECK(cudaGetLastError());
    float t_sum = timer.stop();
    CHECK(cudaMemcpy(&sum, d_sum, sizeof(double), cudaMemcpyDeviceToHost));
    double ref = host_sum_squares(result);
    if (fabs(sum - ref) > 1e-6 * fabs(ref) + 1e-9) {
        printf("sum of squares: got %.10g expected %.10g\n", sum, ref);
        ok = false;
    }

    if (o.verbose)
        printf("histogram %.3f ms, stencil %.3f ms (%d steps), reduction %.3f ms\n", t_hist,
               t_stencil, o.iterations, t_sum);
    CHECK(cudaFree(d_bytes));
    CHECK(cudaFree(d_bins));
    CHECK(cudaFree(d_a));
    CHECK(cudaFree(d_b));
    CHECK(cudaFree(d_sum));
    printf("%s\n", ok ? "PASSED" : "FAILED");
    return ok ? 0 : 1;
}
