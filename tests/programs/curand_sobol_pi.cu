// A quasi Monte-Carlo estimate of pi with the device API's Sobol generators: the host reads
// the direction vectors of dimensions 0 and 1 (curandGetDirectionVectors32) and the scramble
// constants (curandGetScrambleConstants32), copies them to the device, and each thread takes
// POINTS consecutive points of the 2-dimensional sequence (curand_init at offset
// thread * POINTS).  Prints the estimates; writes the direction vectors used and every
// point's (x, y) as uniforms to argv[1]/sobol_pi_*.bin.
#include <cstdio>
#include <cstdlib>
#include <curand.h>
#include <curand_kernel.h>

#define POINTS 64
#define THREADS 128
#define BLOCKS 16

__global__ void pi_kernel(const curandDirectionVectors32_t *vectors, const unsigned *constants, int scrambled,
                          float *xy, unsigned *inside) {
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned count = 0;
    if (scrambled) {
        curandStateScrambledSobol32_t sx, sy;
        curand_init(const_cast<unsigned *>(vectors[0]), constants[0], t * POINTS, &sx);
        curand_init(const_cast<unsigned *>(vectors[1]), constants[1], t * POINTS, &sy);
        for (int i = 0; i < POINTS; i++) {
            float x = curand_uniform(&sx), y = curand_uniform(&sy);
            xy[2 * (t * POINTS + i)] = x;
            xy[2 * (t * POINTS + i) + 1] = y;
            count += x * x + y * y <= 1.0f;
        }
    } else {
        curandStateSobol32_t sx, sy;
        curand_init(const_cast<unsigned *>(vectors[0]), t * POINTS, &sx);
        curand_init(const_cast<unsigned *>(vectors[1]), t * POINTS, &sy);
        for (int i = 0; i < POINTS; i++) {
            float x = curand_uniform(&sx), y = curand_uniform(&sy);
            xy[2 * (t * POINTS + i)] = x;
            xy[2 * (t * POINTS + i) + 1] = y;
            count += x * x + y * y <= 1.0f;
        }
    }
    atomicAdd(inside, count);
}

static void dump(const char *dir, const char *name, const void *p, size_t bytes) {
    char path[4096];
    std::snprintf(path, sizeof path, "%s/sobol_pi_%s.bin", dir, name);
    FILE *f = std::fopen(path, "wb");
    if (!f || std::fwrite(p, 1, bytes, f) != bytes) { std::perror(path); std::exit(1); }
    std::fclose(f);
}

int main(int argc, char **argv) {
    if (argc < 2) { std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]); return 2; }
    const size_t n = (size_t)POINTS * THREADS * BLOCKS;
    for (int scrambled = 0; scrambled < 2; scrambled++) {
        curandDirectionVectors32_t *host_vectors;
        unsigned *host_constants;
        curandStatus_t s = curandGetDirectionVectors32(&host_vectors, scrambled ?
            CURAND_SCRAMBLED_DIRECTION_VECTORS_32_JOEKUO6 : CURAND_DIRECTION_VECTORS_32_JOEKUO6);
        if (s != CURAND_STATUS_SUCCESS) { std::printf("curandGetDirectionVectors32: %d\n", (int)s); return 1; }
        s = curandGetScrambleConstants32(&host_constants);
        if (s != CURAND_STATUS_SUCCESS) { std::printf("curandGetScrambleConstants32: %d\n", (int)s); return 1; }
        curandDirectionVectors32_t *vectors;
        unsigned *constants, *inside;
        float *xy;
        cudaMalloc(&vectors, 2 * sizeof(curandDirectionVectors32_t));
        cudaMalloc(&constants, 2 * sizeof(unsigned));
        cudaMalloc(&inside, sizeof(unsigned));
        cudaMalloc(&xy, 2 * n * sizeof(float));
        cudaMemcpy(vectors, host_vectors, 2 * sizeof(curandDirectionVectors32_t), cudaMemcpyHostToDevice);
        cudaMemcpy(constants, host_constants, 2 * sizeof(unsigned), cudaMemcpyHostToDevice);
        cudaMemset(inside, 0, sizeof(unsigned));
        pi_kernel<<<BLOCKS, THREADS>>>(vectors, constants, scrambled, xy, inside);
        unsigned count = 0;
        float *h = (float *)std::malloc(2 * n * sizeof(float));
        cudaMemcpy(&count, inside, sizeof count, cudaMemcpyDeviceToHost);
        cudaMemcpy(h, xy, 2 * n * sizeof(float), cudaMemcpyDeviceToHost);
        const char *tag = scrambled ? "scrambled" : "plain";
        char name[64];
        std::snprintf(name, sizeof name, "%s_vectors", tag);
        dump(argv[1], name, host_vectors, 2 * sizeof(curandDirectionVectors32_t));
        std::snprintf(name, sizeof name, "%s_constants", tag);
        dump(argv[1], name, host_constants, 2 * sizeof(unsigned));
        std::snprintf(name, sizeof name, "%s_xy", tag);
        dump(argv[1], name, h, 2 * n * sizeof(float));
        std::printf("%s inside %u of %zu pi %.8f\n", tag, count, n, 4.0 * count / n);
        std::free(h);
        cudaFree(vectors); cudaFree(constants); cudaFree(inside); cudaFree(xy);
    }
    return 0;
}
