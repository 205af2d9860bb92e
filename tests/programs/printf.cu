// Device printf interleaved with host output, in program order.
#include <cstdio>

__global__ void hello(int round) {
    printf("device round %d thread %d\n", round, threadIdx.x);
}

int main() {
    for (int r = 0; r < 3; r++) {
        printf("host before %d\n", r);
        hello<<<1, 2>>>(r);
        cudaDeviceSynchronize();
        printf("host after %d\n", r);
    }
    return 0;
}
