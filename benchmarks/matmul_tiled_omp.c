/* The tiled 16x16 shared-memory matrix multiply of the CUDA samples (matrixMul), written
 * by hand for the CPU with OpenMP: the reference that benchmarks/core.py compares cpuify's
 * compiled CUDA kernel against.
 *
 * Same algorithm as the CUDA kernel: C (n x n) is cut into TILE x TILE output tiles; for each
 * output tile, loop over the n/TILE tiles of A's row band and B's column band, copy one tile
 * of each into local arrays As/Bs (the CUDA __shared__ tiles), and accumulate
 * Csub[ty][tx] += As[ty][k] * Bs[k][tx] for k = 0..TILE-1.
 *
 * Written the way an experienced OpenMP programmer would: output tiles are distributed over
 * threads with `collapse(2)`; the per-tile arrays live on each thread's stack (L1-resident);
 * the loop order over one tile is ty, k, tx so the innermost loop runs over tx with unit
 * stride (one 16-float AVX-512 vector, or two AVX2 vectors), the row of Csub being summed is
 * held in a local acc[] (registers: the CUDA kernel's per-thread Csub), restrict pointers.
 * The tx loops carry `#pragma omp simd`: without it GCC 12 fully unrolls them and
 * SLP-vectorizes the k reduction instead, with shuffles, and runs ~10x slower (3 GFLOP/s
 * per core instead of ~35 on AVX-512 hardware).
 *
 * Build (done by core.py): gcc -O3 -march=native -fopenmp -shared -fPIC -o bin/... this.c
 * Requires n to be a multiple of TILE (as the CUDA sample does).
 */
#include <stddef.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define TILE 16

void matmul_tiled(const float *restrict A, const float *restrict B, float *restrict C, int n)
{
    const int tiles = n / TILE;
#pragma omp parallel for collapse(2) schedule(static)
    for (int by = 0; by < tiles; by++) {
        for (int bx = 0; bx < tiles; bx++) {
            float Csub[TILE][TILE] __attribute__((aligned(64))) = {{0}};
            for (int t = 0; t < tiles; t++) {
                float As[TILE][TILE] __attribute__((aligned(64)));
                float Bs[TILE][TILE] __attribute__((aligned(64)));
                const float *restrict a = A + (size_t)(by * TILE) * n + (size_t)t * TILE;
                const float *restrict b = B + (size_t)(t * TILE) * n + (size_t)bx * TILE;
                for (int ty = 0; ty < TILE; ty++) {
#pragma omp simd
                    for (int tx = 0; tx < TILE; tx++) {
                        As[ty][tx] = a[(size_t)ty * n + tx];
                        Bs[ty][tx] = b[(size_t)ty * n + tx];
                    }
                }
                for (int ty = 0; ty < TILE; ty++) {
                    float acc[TILE] __attribute__((aligned(64)));
#pragma omp simd
                    for (int tx = 0; tx < TILE; tx++)
                        acc[tx] = Csub[ty][tx];
                    for (int k = 0; k < TILE; k++) {
                        const float av = As[ty][k];
#pragma omp simd
                        for (int tx = 0; tx < TILE; tx++)
                            acc[tx] += av * Bs[k][tx];
                    }
#pragma omp simd
                    for (int tx = 0; tx < TILE; tx++)
                        Csub[ty][tx] = acc[tx];
                }
            }
            float *restrict c = C + (size_t)(by * TILE) * n + (size_t)bx * TILE;
            for (int ty = 0; ty < TILE; ty++)
#pragma omp simd
                for (int tx = 0; tx < TILE; tx++)
                    c[(size_t)ty * n + tx] = Csub[ty][tx];
        }
    }
}

/* The same, written plainly: no `omp simd`, no acc[] (informational second reference, to show
 * what GCC 12 makes of the obvious loops). */
void matmul_tiled_plain(const float *restrict A, const float *restrict B, float *restrict C,
                        int n)
{
    const int tiles = n / TILE;
#pragma omp parallel for collapse(2) schedule(static)
    for (int by = 0; by < tiles; by++) {
        for (int bx = 0; bx < tiles; bx++) {
            float Csub[TILE][TILE] __attribute__((aligned(64))) = {{0}};
            for (int t = 0; t < tiles; t++) {
                float As[TILE][TILE] __attribute__((aligned(64)));
                float Bs[TILE][TILE] __attribute__((aligned(64)));
                const float *restrict a = A + (size_t)(by * TILE) * n + (size_t)t * TILE;
                const float *restrict b = B + (size_t)(t * TILE) * n + (size_t)bx * TILE;
                for (int ty = 0; ty < TILE; ty++)
                    for (int tx = 0; tx < TILE; tx++) {
                        As[ty][tx] = a[(size_t)ty * n + tx];
                        Bs[ty][tx] = b[(size_t)ty * n + tx];
                    }
                for (int ty = 0; ty < TILE; ty++)
                    for (int k = 0; k < TILE; k++)
                        for (int tx = 0; tx < TILE; tx++)
                            Csub[ty][tx] += As[ty][k] * Bs[k][tx];
            }
            float *restrict c = C + (size_t)(by * TILE) * n + (size_t)bx * TILE;
            for (int ty = 0; ty < TILE; ty++)
                for (int tx = 0; tx < TILE; tx++)
                    c[(size_t)ty * n + tx] = Csub[ty][tx];
        }
    }
}

int matmul_num_threads(void)
{
    int n = 1;
#ifdef _OPENMP
#pragma omp parallel
#pragma omp single
    n = omp_get_num_threads();
#endif
    return n;
}
