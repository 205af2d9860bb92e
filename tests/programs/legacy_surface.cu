// Legacy surface references (removed from CUDA 12's headers): surface<void, dim> variables
// bound to CUDA arrays with cudaBindSurfaceToArray, read and written with surf1D/2D/3D/
// 2DLayered read/write (both read forms), byte x coordinates, a zero-mode store past the end.
#include <cstdio>

surface<void, 1> line;
surface<void, 2> plane;
surface<void, cudaSurfaceType3D> box;
surface<void, cudaSurfaceType2DLayered> stack;

__global__ void planes(int w, int h) {
    int x = threadIdx.x, y = threadIdx.y;
    float v;
    surf2Dread(&v, plane, x * 4, y);                       // the pointer form
    surf2Dwrite(v * 3.0f + y, plane, x * 4, y);
    int s = surf1Dread<int>(line, x * 4) + y;               // the value form
    if (y == 0) surf1Dwrite(s * 2, line, x * 4);
    surf1Dwrite(99, line, (w + 5) * 4, cudaBoundaryModeZero); // past the end: dropped
    (void)h;
}

__global__ void volumes() {
    int x = threadIdx.x, y = threadIdx.y, z = threadIdx.z;
    uchar4 c = surf3Dread<uchar4>(box, x * 4, y, z);
    surf3Dwrite(make_uchar4(c.w, c.z, c.y, c.x + z), box, x * 4, y, z);
    short v = surf2DLayeredread<short>(stack, x * 2, y, z);
    surf2DLayeredwrite((short)(v - 100 * z), stack, x * 2, y, z);
}

int main() {
    const int W = 4, H = 3, D = 2;
    cudaChannelFormatDesc f = cudaCreateChannelDesc<float>(), i = cudaCreateChannelDesc<int>();
    cudaChannelFormatDesc c4 = cudaCreateChannelDesc<uchar4>(), s = cudaCreateChannelDesc<short>();
    cudaArray *a1, *a2, *a3, *a4;
    cudaMallocArray(&a1, &i, W, 0, cudaArraySurfaceLoadStore);
    cudaMallocArray(&a2, &f, W, H, cudaArraySurfaceLoadStore);
    cudaMalloc3DArray(&a3, &c4, make_cudaExtent(W, H, D), cudaArraySurfaceLoadStore);
    cudaMalloc3DArray(&a4, &s, make_cudaExtent(W, H, D), cudaArraySurfaceLoadStore | cudaArrayLayered);
    int hi[W];
    float hf[W * H];
    uchar4 hc[W * H * D];
    short hs[W * H * D];
    for (int k = 0; k < W; k++) hi[k] = 10 * k;
    for (int k = 0; k < W * H; k++) hf[k] = k * 0.5f;
    for (int k = 0; k < W * H * D; k++) { hc[k] = make_uchar4(k, k + 1, k + 2, k + 3); hs[k] = 7 * k; }
    cudaMemcpy2DToArray(a1, 0, 0, hi, sizeof hi, sizeof hi, 1, cudaMemcpyHostToDevice);
    cudaMemcpy2DToArray(a2, 0, 0, hf, W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice);
    cudaMemcpy3DParms p = {0};
    p.srcPtr = make_cudaPitchedPtr(hc, W * sizeof(uchar4), W, H);
    p.dstArray = a3;
    p.extent = make_cudaExtent(W, H, D);
    p.kind = cudaMemcpyHostToDevice;
    cudaMemcpy3D(&p);
    p.srcPtr = make_cudaPitchedPtr(hs, W * sizeof(short), W, H);
    p.dstArray = a4;
    cudaMemcpy3D(&p);
    cudaBindSurfaceToArray(line, a1);
    cudaBindSurfaceToArray(plane, a2, f);
    cudaBindSurfaceToArray(&box, a3, &c4);
    cudaBindSurfaceToArray(stack, a4);
    planes<<<1, dim3(W, H)>>>(W, H);
    volumes<<<1, dim3(W, H, D)>>>();
    cudaDeviceSynchronize();
    printf("status %s\n", cudaGetErrorString(cudaGetLastError()));
    cudaMemcpy2DFromArray(hi, sizeof hi, a1, 0, 0, sizeof hi, 1, cudaMemcpyDeviceToHost);
    cudaMemcpy2DFromArray(hf, W * sizeof(float), a2, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToHost);
    p = cudaMemcpy3DParms{0};
    p.srcArray = a3;
    p.dstPtr = make_cudaPitchedPtr(hc, W * sizeof(uchar4), W, H);
    p.extent = make_cudaExtent(W, H, D);
    p.kind = cudaMemcpyDeviceToHost;
    cudaMemcpy3D(&p);
    p.srcArray = a4;
    p.dstPtr = make_cudaPitchedPtr(hs, W * sizeof(short), W, H);
    cudaMemcpy3D(&p);
    printf("line");
    for (int k = 0; k < W; k++) printf(" %d", hi[k]);
    printf("\nplane");
    for (int k = 0; k < W * H; k++) printf(" %g", hf[k]);
    printf("\nbox");
    for (int k = 0; k < W * H * D; k++) printf(" %d,%d,%d,%d", hc[k].x, hc[k].y, hc[k].z, hc[k].w);
    printf("\nstack");
    for (int k = 0; k < W * H * D; k++) printf(" %d", hs[k]);
    printf("\n");
    return 0;
}
