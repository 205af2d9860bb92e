#include "particles.h"
__device__ float g_dt = 0.5f;
__device__ unsigned int g_steps = 0;
__device__ float clamp_velocity(float v) { return v > 4.0f ? 4.0f : v; }
void set_dt(float dt) { cudaMemcpyToSymbol(g_dt, &dt, sizeof(float)); }
