#include <cstdio>
#include "particles.h"
int main() {
    const int n = 64;
    Particle *p;
    cudaMallocManaged(&p, n * sizeof(Particle));
    for (int i = 0; i < n; i++) p[i] = Particle{(float)i, (float)(i % 4)};
    set_dt(0.25f);
    for (int s = 0; s < 3; s++) step<<<1, n>>>(p, n);
    cudaDeviceSynchronize();
    unsigned steps = 0;
    cudaMemcpyFromSymbol(&steps, g_steps, sizeof(steps));
    printf("steps %u p0 %g %g p3 %g %g p63 %g %g\n", steps, p[0].x, p[0].v, p[3].x, p[3].v, p[63].x, p[63].v);
    printf("last error %s\n", cudaGetErrorName(cudaGetLastError()));
    return 0;
}
