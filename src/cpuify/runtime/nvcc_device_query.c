/* bin/__nvcc_device_query of `cpuify cuda-home`.  NVIDIA's toolkit has a tool of this name
 * (what `nvcc -arch=native` asks; Makefiles such as llm.c's run it to pick their target):
 * it prints the compute capability of the machine's GPUs, as `90`.  This one prints what
 * cpuify's runtime reports for each of its devices (7.5 unless CPUIFY_COMPUTE_CAPABILITY
 * says otherwise: `75`; several devices comma-separated), so a Makefile that asks the GPU
 * compiles for the target cpuify runs.  Linked with cpuify's libcudart_static.a. */
#include <stdio.h>

#include <cuda_runtime_api.h>

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        fprintf(stderr, "__nvcc_device_query (cpuify): no device\n");
        return 1;
    }
    for (int d = 0; d < n; d++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
            fprintf(stderr, "__nvcc_device_query (cpuify): cannot read device %d\n", d);
            return 1;
        }
        printf("%s%d%d", d ? "," : "", p.major, p.minor);
    }
    printf("\n");
    return 0;
}
