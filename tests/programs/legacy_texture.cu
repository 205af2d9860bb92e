// Texture references as CUDA 11 code wrote them (no longer in CUDA 12+ headers): built
// unchanged through cpuify's compatibility header.  tests/test_textures.py checks the output.
#include <cstdio>
#include <cuda_runtime.h>
#include "check.h"
#include "legacy_texture.h"

texture<int2, 1> pair_tex;                                         // default read mode
texture<unsigned char, 2, cudaReadModeNormalizedFloat> image;      // bound to an array
texture<float, 2> pitched(0, cudaFilterModeLinear, cudaAddressModeClamp);
texture<float, cudaTextureType2DLayered> layers;

texture<unsigned char, 2, cudaReadModeNormalizedFloat> &image_ref(void) { return image; }

__global__ void gather(const int *idx, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int2 p = tex1Dfetch(pair_tex, i);
        out[i] = tex1Dfetch(vec_tex, idx[i]) + p.x * 1000 + p.y;
    }
}

__global__ void past_end(float *out, int n) {
    ((int2 *)out)[0] = tex1Dfetch(pair_tex, n);
    ((int2 *)out)[1] = tex1Dfetch(pair_tex, n + 5);
}

__global__ void sample(float *out) {
    int i = threadIdx.x;
    float x = i * 0.7f - 1.0f, y = i * 0.45f;
    out[i] = tex2D(image, x, y);
    out[16 + i] = tex2D(pitched, x, y);
    out[32 + i] = tex2DLayered(layers, x, y, i % 2);
    float4 g = tex2Dgather(pitched, x, y);
    out[48 + i] = g.x + 10 * g.y + 100 * g.z + 1000 * g.w;
}

int main() {
    const int n = 1000;
    float h_vec[n];
    int h_idx[n], h_pairs[2 * n];
    for (int i = 0; i < n; i++) {
        h_vec[i] = i * 0.5f;
        h_idx[i] = (i * 7) % n;
        h_pairs[2 * i] = i % 13;
        h_pairs[2 * i + 1] = -i;
    }
    float *d_vec, *d_out;
    int *d_idx, *d_pairs;
    CHECK(cudaMalloc(&d_vec, sizeof h_vec));
    CHECK(cudaMalloc(&d_idx, sizeof h_idx));
    CHECK(cudaMalloc(&d_pairs, sizeof h_pairs));
    CHECK(cudaMalloc(&d_out, n * sizeof(float)));
    CHECK(cudaMemcpy(d_vec, h_vec, sizeof h_vec, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_idx, h_idx, sizeof h_idx, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_pairs, h_pairs, sizeof h_pairs, cudaMemcpyHostToDevice));
    cudaChannelFormatDesc fdesc = cudaCreateChannelDesc<float>();
    size_t offset = 1;
    CHECK(cudaBindTexture(&offset, vec_tex, d_vec, fdesc, n * sizeof(float)));
    CHECK(cudaBindTexture(0, pair_tex, d_pairs));   // the default size: the whole allocation
    gather<<<(n + 127) / 128, 128>>>(d_idx, d_out, n);
    float h_out[n];
    CHECK(cudaMemcpy(h_out, d_out, sizeof h_out, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < n; i++)
        if (h_out[i] != h_vec[h_idx[i]] + (i % 13) * 1000 - i) bad++;
    printf("gather offset %zu mismatches %d\n", offset, bad);
    past_end<<<1, 1>>>(d_out, n);                   // pairs n and n + 5: zeros
    int2 past[2];
    CHECK(cudaMemcpy(past, d_out, sizeof past, cudaMemcpyDeviceToHost));
    printf("past_end %d %d %d %d\n", past[0].x, past[0].y, past[1].x, past[1].y);
    CHECK(cudaUnbindTexture(vec_tex));
    CHECK(cudaUnbindTexture(pair_tex));

    // a 6x4 image of bytes in an array, bound through a function returning the reference
    const int W = 6, H = 4;
    unsigned char px[H][W];
    for (int i = 0; i < W * H; i++) px[i / W][i % W] = (unsigned char)(i * 41 % 256);
    cudaChannelFormatDesc u8 = cudaCreateChannelDesc<unsigned char>();
    cudaArray_t arr;
    CHECK(cudaMallocArray(&arr, &u8, W, H));
    CHECK(cudaMemcpyToArray(arr, 0, 0, px, sizeof px, cudaMemcpyHostToDevice));
    image_ref().addressMode[0] = cudaAddressModeWrap;
    image_ref().addressMode[1] = cudaAddressModeMirror;
    image_ref().filterMode = cudaFilterModeLinear;
    image_ref().normalized = false;
    CHECK(cudaBindTextureToArray(image_ref(), arr));

    // the same bytes as floats in pitched memory (cudaBindTexture2D)
    float fpx[H][W];
    for (int i = 0; i < W * H; i++) fpx[i / W][i % W] = px[i / W][i % W];
    float *d_img;
    size_t pitch;
    CHECK(cudaMallocPitch((void **)&d_img, &pitch, W * sizeof(float), H));
    CHECK(cudaMemcpy2D(d_img, pitch, fpx, W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
    CHECK(cudaBindTexture2D(0, pitched, d_img, fdesc, W, H, pitch));

    // two layers: the floats and their negatives
    float lay[2][H][W];
    for (int i = 0; i < W * H; i++) {
        lay[0][i / W][i % W] = fpx[i / W][i % W];
        lay[1][i / W][i % W] = -fpx[i / W][i % W];
    }
    cudaArray_t larr;
    CHECK(cudaMalloc3DArray(&larr, &fdesc, make_cudaExtent(W, H, 2), cudaArrayLayered));
    cudaMemcpy3DParms p = {};
    p.srcPtr = make_cudaPitchedPtr(lay, W * sizeof(float), W, H);
    p.dstArray = larr;
    p.extent = make_cudaExtent(W, H, 2);
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
    CHECK(cudaBindTextureToArray(layers, larr));

    sample<<<1, 16>>>(d_out);
    CHECK(cudaMemcpy(h_out, d_out, 64 * sizeof(float), cudaMemcpyDeviceToHost));
    const char *names[] = {"image", "pitched", "layers", "gathered"};
    for (int k = 0; k < 4; k++) {
        printf("%s", names[k]);
        for (int i = 0; i < 16; i++) printf(" %.9g", h_out[16 * k + i]);
        printf("\n");
    }
    CHECK(cudaUnbindTexture(image));
    CHECK(cudaUnbindTexture(pitched));
    CHECK(cudaUnbindTexture(layers));
    CHECK(cudaFreeArray(arr));
    CHECK(cudaFreeArray(larr));
    printf("done\n");
    return 0;
}
