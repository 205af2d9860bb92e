"""Texture and surface objects from the Python API (cpuify.TextureObject/SurfaceObject):
compiled kernels (JIT) and the reference interpreter (its own sampler, cpuify.interp.texture)
against the NumPy model of CUDA's texture fetching in test_textures.py."""

from __future__ import annotations

import numpy as np
import pytest

import cpuify
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.interp import interpret_kernel
from test_textures import XS, YS, ZS, F, gather, sample

SOURCE = r'''
#define NC 10
__constant__ float xs[NC] = {-1.3f, -0.2f, 0.1f, 0.37f, 1.5f, 2.71f, 4.0f, 4.9f, 5.6f, 7.2f};
__constant__ float ys[NC] = {0.5f, -0.7f, 1.25f, 3.9f, 2.0f, 0.3f, 4.6f, 1.8f, -2.2f, 3.1f};
__constant__ float zs[NC] = {0.5f, 1.2f, -0.4f, 2.6f, 1.9f, 0.0f, 3.3f, 1.05f, 0.75f, 2.2f};
extern "C" __global__ void s2d(cudaTextureObject_t t, float sx, float sy, float *out) {
    int i = threadIdx.x;
    out[i] = tex2D<float>(t, xs[i] * sx, ys[i] * sy);
}
extern "C" __global__ void lod_grad(cudaTextureObject_t t, float *out) {
    // an explicit level or gradient: cpuify's textures have one level, level 0
    int i = threadIdx.x;
    out[i] = tex2DLod<float>(t, xs[i], ys[i], 1.5f);
    out[10 + i] = tex2DGrad<float>(t, xs[i], ys[i], make_float2(2, 0), make_float2(0, 2));
}
extern "C" __global__ void s1d4(cudaTextureObject_t t, float4 *out) {
    int i = threadIdx.x;
    out[i] = tex1D<float4>(t, xs[i]);
}
extern "C" __global__ void s3d(cudaTextureObject_t t, float *out) {
    int i = threadIdx.x;
    out[i] = tex3D<float>(t, xs[i], ys[i], zs[i]);
}
extern "C" __global__ void slayered(cudaTextureObject_t t, float *out) {
    int i = threadIdx.x;
    out[i] = tex2DLayered<float>(t, xs[i], ys[i], i % 3);
}
extern "C" __global__ void sgather(cudaTextureObject_t t, float4 *out) {
    int i = threadIdx.x;
    out[i] = tex2Dgather<float4>(t, xs[i], ys[i], 1);
}
extern "C" __global__ void fetch(cudaTextureObject_t t, int *out) {
    int i = threadIdx.x;
    out[i] = tex1Dfetch<int>(t, i - 3);
}
extern "C" __global__ void fetch4(cudaTextureObject_t t, float4 *out) {
    int i = threadIdx.x;
    out[i] = tex1Dfetch<float4>(t, 7 - i);
}
extern "C" __global__ void surf(cudaSurfaceObject_t s, int w) {
    int x = threadIdx.x, y = blockIdx.x;
    uchar2 v = surf2Dread<uchar2>(s, x * 2, y);
    surf2Dwrite(make_uchar2(v.y, (unsigned char)(v.x + x + 10 * y)), s, x * 2, y);
    if (x == 0) surf2Dwrite(make_uchar2(1, 2), s, w * 2 + 6, y, cudaBoundaryModeZero);
}
extern "C" __global__ void surf_neighbours(cudaSurfaceObject_t s, int *out) {
    // a barrier between surface stores and loads of other threads' elements must stay
    int i = threadIdx.x, n = blockDim.x;
    surf1Dwrite(i * i + 1, s, i * 4);
    __syncthreads();
    out[i] = surf1Dread<int>(s, ((i + 1) % n) * 4);
    __syncthreads();
    surf1Dwrite(-out[i], s, i * 4);
}
extern "C" __global__ void surf_trap(cudaSurfaceObject_t s) {
    surf1Dwrite(1.0f, s, -4);
}
'''

W, H, D = 5, 4, 3


@pytest.fixture(scope="module")
def mod() -> cpuify.RawModule:
    return cpuify.RawModule(code=SOURCE)


@pytest.fixture(scope="module")
def ptx() -> str:
    return compile_to_ptx(SOURCE).ptx


def both(mod, ptx, name, block, args, out) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    """The kernel's output compiled and interpreted."""
    results = []
    for runner in ("jit", "interp"):
        out[...] = -7
        if runner == "jit":
            mod.get_function(name)((1,), block, args)
        else:
            interpret_kernel(ptx, name, (1,), block, args)
        results.append(out.copy())
    return results


def close(got: np.ndarray, want) -> None:  # type: ignore[no-untyped-def]
    np.testing.assert_allclose(got.ravel(), np.asarray(want, np.float64).ravel(), rtol=2e-6, atol=2e-7)


@pytest.mark.parametrize("filt", ["point", "linear"])
@pytest.mark.parametrize("mode", ["wrap", "mirror", "border"])
def test_2d_normalized(mod, ptx, filt: str, mode: str) -> None:  # type: ignore[no-untyped-def]
    img = ((np.arange(W * H) * 37 % 101).astype(F) / F(7)).reshape(H, W)
    tex = cpuify.TextureObject(img, filter_mode=filt, address_mode=mode, normalized_coords=True,
                               border_color=(0.25, 0, 0, 0))
    out = np.zeros(10, F)
    sx, sy = F(1) / F(W), F(1) / F(H)
    want = [sample(img[..., None], [F(x * sx), F(y * sy)], filt, mode, True)[0] if mode != "border"
            else _border(img, F(x * sx), F(y * sy), filt) for x, y in zip(XS, YS)]
    for got in both(mod, ptx, "s2d", (10,), (tex.handle, sx, sy, out), out):
        close(got, want)


def _border(img, x, y, filt):  # type: ignore[no-untyped-def]
    from test_textures import BORDER
    assert BORDER[0] == F(0.25)
    return sample(img[..., None], [x, y], filt, "border", True)[0]


def test_level_and_gradient_read_level_0(mod, ptx, run_twice) -> None:  # type: ignore[no-untyped-def]
    img = ((np.arange(W * H) * 37 % 101).astype(F) / F(7)).reshape(H, W)
    tex = cpuify.TextureObject(img, filter_mode="linear")
    want = [sample(img[..., None], [x, y], "linear", "clamp", False)[0] for x, y in zip(XS, YS)]
    out = np.zeros(20, F)
    # twice: the generic code, then the code specialized for the block shape
    for got in run_twice(mod, "lod_grad", (1,), (10,), (tex.handle, out), out):
        close(got, want + want)
    interpret_kernel(ptx, "lod_grad", (1,), (10,), (tex.handle, out))
    close(out, want + want)


TXQ_PTX = """
.version 8.0
.target sm_75
.address_size 64
.visible .entry query(.param .u64 t, .param .u64 out)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [t];
    ld.param.u64 %rd2, [out];
    cvta.to.global.u64 %rd3, %rd2;
    txq.width.b32 %r1, [%rd1];
    txq.height.b32 %r2, [%rd1];
    txq.depth.b32 %r3, [%rd1];
    txq.normalized_coords.b32 %r4, [%rd1];
    txq.filter_mode.b32 %r5, [%rd1];
    txq.addr_mode_1.b32 %r6, [%rd1];
    txq.array_size.b32 %r7, [%rd1];
    st.global.v4.u32 [%rd3], {%r1, %r2, %r3, %r4};
    st.global.v2.u32 [%rd3+16], {%r5, %r6};
    st.global.u32 [%rd3+24], %r7;
    ret;
}
"""


def test_txq() -> None:
    lay = np.zeros((3, H, W), F)
    tex = cpuify.TextureObject(lay, layered=True, filter_mode="linear",
                               address_mode=("clamp", "mirror", "wrap"), normalized_coords=True)
    # width, height, depth, normalized, filter (1 linear), address mode 1 (2 mirror), layers
    want = [W, H, 1, 1, 1, 2, 3]
    out = np.zeros(7, np.int32)
    cpuify.RawModule(ptx=TXQ_PTX).get_function("query")((1,), (1,), (tex.handle, out))
    assert list(out) == want
    out[:] = 0
    interpret_kernel(TXQ_PTX, "query", (1,), (1,), (tex.handle, out))
    assert list(out) == want


def test_uchar4_normalized_linear(mod, ptx) -> None:  # type: ignore[no-untyped-def]
    px = (np.arange(24) * 53 % 256).astype(np.uint8).reshape(6, 4)
    tex = cpuify.TextureObject(px, channels=4, filter_mode="linear", read_mode="normalized_float")
    out = np.zeros((10, 4), F)
    want = [sample(px.astype(F) / F(255), [x], "linear", "clamp", False) for x in XS]
    for got in both(mod, ptx, "s1d4", (10,), (tex.handle, out), out):
        close(got, want)


def test_3d_layered_gather_fetch(mod, ptx) -> None:  # type: ignore[no-untyped-def]
    vol = ((np.arange(W * H * D) * 41 % 97).astype(F) * F(0.5)).reshape(D, H, W)
    tex = cpuify.TextureObject(vol, filter_mode="linear")
    out = np.zeros(10, F)
    want = [sample(vol[..., None], [x, y, z], "linear", "clamp", False)[0] for x, y, z in zip(XS, YS, ZS)]
    for got in both(mod, ptx, "s3d", (10,), (tex.handle, out), out):
        close(got, want)

    lay = (np.arange(W * H * 3) * 19 % 53).astype(np.float16).reshape(3, H, W)
    tex = cpuify.TextureObject(lay, layered=True, filter_mode="linear", address_mode="wrap")
    want = [sample(lay[i % 3].astype(F)[..., None], [x, y], "linear", "wrap", False)[0]
            for i, (x, y) in enumerate(zip(XS, YS))]
    for got in both(mod, ptx, "slayered", (10,), (tex.handle, out), out):
        close(got, want)

    rg = (np.arange(W * H * 2) * 7 % 23).astype(np.int16).reshape(H, W, 2)
    tex = cpuify.TextureObject(rg, channels=2, read_mode="normalized_float")
    out4 = np.zeros((10, 4), F)
    data = rg.astype(F) / F(32767)
    for got in both(mod, ptx, "sgather", (10,), (tex.handle, out4), out4):
        close(got, [gather(data, x, y, 1) for x, y in zip(XS, YS)])

    ints = (np.arange(6) * -12345).astype(np.int32)
    tex = cpuify.TextureObject(ints, linear=True)
    outi = np.zeros(10, np.int32)
    for got in both(mod, ptx, "fetch", (10,), (tex.handle, outi), outi):
        assert list(got) == [ints[i - 3] if 0 <= i - 3 < 6 else 0 for i in range(10)]


def test_fetch_float4(mod, ptx) -> None:  # type: ignore[no-untyped-def]
    # 32-bit channels of a linear resource are read inline by compiled code: 4 channels,
    # indices 7 .. -2 over 5 elements (zeros outside)
    v = (np.arange(20, dtype=F) * F(1.5) - F(3)).reshape(5, 4)
    tex = cpuify.TextureObject(v, linear=True, channels=4)
    out = np.zeros((10, 4), F)
    want = [v[7 - i] if 0 <= 7 - i < 5 else np.zeros(4, F) for i in range(10)]
    for got in both(mod, ptx, "fetch4", (10,), (tex.handle, out), out):
        np.testing.assert_array_equal(got, want)


def test_surfaces(mod, ptx) -> None:  # type: ignore[no-untyped-def]
    start = (np.arange(W * H * 2) * 11 % 256).astype(np.uint8).reshape(H, W, 2)
    want = start.copy()
    for y in range(H):
        for x in range(W):
            want[y, x] = (start[y, x, 1], (int(start[y, x, 0]) + x + 10 * y) % 256)
    for runner in ("jit", "interp"):
        arr = start.copy()
        s = cpuify.SurfaceObject(arr, channels=2)
        if runner == "jit":
            mod.get_function("surf")((H,), (W,), (s.handle, np.int32(W)))
        else:
            interpret_kernel(ptx, "surf", (H,), (W,), (s.handle, np.int32(W)))
        np.testing.assert_array_equal(arr, want)
    s = cpuify.SurfaceObject(np.zeros(4, F))
    with pytest.raises(cpuify.LaunchError, match="trap"):
        mod.get_function("surf_trap")((1,), (1,), (s.handle,))
    with pytest.raises(cpuify.LaunchError, match="trap mode"):
        interpret_kernel(ptx, "surf_trap", (1,), (1,), (s.handle,))


def test_barrier_orders_surface_accesses(mod, ptx, run_twice) -> None:  # type: ignore[no-untyped-def]
    n = 64
    want = (np.arange(1, n + 1) % n) ** 2 + 1
    arr = np.zeros(n, np.int32)
    s = cpuify.SurfaceObject(arr)
    out = np.zeros(n, np.int32)
    for got in run_twice(mod, "surf_neighbours", (1,), (n,), (s.handle, out), out):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(arr, -want)
    interpret_kernel(ptx, "surf_neighbours", (1,), (n,), (s.handle, out))
    np.testing.assert_array_equal(out, want)


def test_bad_handle_and_arguments(mod, ptx) -> None:  # type: ignore[no-untyped-def]
    out = np.zeros(10, F)
    surface = cpuify.SurfaceObject(np.zeros((H, W), F))
    with pytest.raises(cpuify.LaunchError, match="trap"):       # a surface used as a texture
        mod.get_function("s2d")((1,), (10,), (surface.handle, F(1), F(1), out))
    with pytest.raises(cpuify.LaunchError, match="invalid texture object handle"):
        interpret_kernel(ptx, "s2d", (1,), (10,), (surface.handle, F(1), F(1), out))
    with pytest.raises(cpuify.LaunchError, match="null texture object handle"):
        interpret_kernel(ptx, "s2d", (1,), (10,), (0, F(1), F(1), out))
    with pytest.raises(cpuify.LaunchError, match="trap"):       # a null handle: no crash
        mod.get_function("s2d")((1,), (10,), (0, F(1), F(1), out))
    outi = np.zeros(10, np.int32)
    with pytest.raises(cpuify.LaunchError, match="trap"):       # tex1Dfetch's inline path too
        mod.get_function("fetch")((1,), (10,), (0, outi))
    with pytest.raises(cpuify.LaunchError, match="trap"):
        mod.get_function("fetch")((1,), (10,), (surface.handle, outi))
    with pytest.raises(ValueError, match="linear filtering"):
        cpuify.TextureObject(np.zeros(4, np.int32), filter_mode="linear")
    with pytest.raises(ValueError, match="address_mode"):
        cpuify.TextureObject(np.zeros(4, F), address_mode="repeat")


def test_three_channels_are_refused() -> None:
    with pytest.raises(ValueError, match="1, 2 or 4"):
        cpuify.TextureObject(np.zeros((4, 3), F), channels=3)


def test_missing_channels_read_zero(mod, ptx) -> None:  # type: ignore[no-untyped-def]
    # a 1-channel texture fetched as float4, with a border color in all four channels:
    # the channels the format lacks read 0, out of range as well
    v = np.arange(6, dtype=F) + F(1)
    tex = cpuify.TextureObject(v, filter_mode="linear", address_mode="border",
                               border_color=(0.25, 0.5, 0.75, 1.0))
    out = np.zeros((10, 4), F)
    data = v[:, None]
    want = []
    for x in XS:
        xb = F(x - F(0.5))
        i = int(np.floor(xb))
        w = F(np.floor(F(F(F(xb - F(np.floor(xb))) * F(256)) + F(0.5)))) / F(256)
        t = [data[j, 0] if 0 <= j < 6 else F(0.25) for j in (i, i + 1)]
        want.append([(F(1) - w) * t[0] + w * t[1], 0, 0, 0])
    for got in both(mod, ptx, "s1d4", (10,), (tex.handle, out), out):
        close(got, want)
