#pragma once
struct Particle { float x, v; };
extern __device__ float g_dt;                     // defined in util.cu
extern __device__ unsigned int g_steps;           // defined in util.cu
__device__ float clamp_velocity(float v);         // defined in util.cu
__global__ void step(Particle *p, int n);         // defined in particles.cu
void set_dt(float dt);                            // host helper in util.cu
