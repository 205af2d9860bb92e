// printf, FILE and assert without <stdio.h> or <assert.h>, as CUDA <= 12 allowed in .cu files
__global__ void k(float *p) {
    assert(p[0] >= 0);
    p[0] = sqrtf(p[0]);
    if (threadIdx.x == 0) printf("device %g\n", p[0]);
}
int main() {
    float *h = (float *)malloc(4); h[0] = 16; float *d;
    cudaMalloc(&d, 4); cudaMemcpy(d, h, 4, cudaMemcpyHostToDevice);
    k<<<1, 1>>>(d); cudaMemcpy(h, d, 4, cudaMemcpyDeviceToHost);
    FILE *f = fopen("/dev/null", "w"); fprintf(f, "x"); fclose(f);
    assert(h[0] == 4);
    printf("host %g\n", h[0]);
    return 0;
}
