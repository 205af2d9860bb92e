#include <cstdio>
#include "particles.h"
__global__ void step(Particle *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        p[i].v = clamp_velocity(p[i].v + 1.0f);
        p[i].x += p[i].v * g_dt;
        if (i == 0) atomicAdd(&g_steps, 1u);
    }
    if (i == n - 1) printf("step done (device, particles.cu)\n");
}
