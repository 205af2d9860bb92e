"""Textures and surfaces in whole programs (tests/programs/textures.cu, legacy_texture.cu),
checked against a NumPy model of CUDA's texture fetching (the CUDA programming guide's
texture fetching appendix): address modes on texel indices, point sampling at floor(x),
linear filtering between floor(x - 0.5) and the next texel with the fraction in 9-bit fixed
point (8 fractional bits), lerps in single precision, normalized-float reads."""

from __future__ import annotations

import numpy as np
import pytest

from test_programs import _have_nvcc, build, lines, run  # noqa: F401  (the build fixture)

pytestmark = pytest.mark.skipif(not _have_nvcc(), reason="nvcc wheel (nvidia-cuda-nvcc) or g++ missing")

F = np.float32
XS = np.array([-1.3, -0.2, 0.1, 0.37, 1.5, 2.71, 4.0, 4.9, 5.6, 7.2], F)
YS = np.array([0.5, -0.7, 1.25, 3.9, 2.0, 0.3, 4.6, 1.8, -2.2, 3.1], F)
ZS = np.array([0.5, 1.2, -0.4, 2.6, 1.9, 0.0, 3.3, 1.05, 0.75, 2.2], F)
W, H, D = 5, 4, 3
BORDER = np.array([0.25, 0, 0, 0], F)


def address(i: int, n: int, mode: str, normalized: bool) -> int | None:
    if not normalized and mode in ("wrap", "mirror"):
        mode = "clamp"             # CUDA: wrap and mirror need normalized coordinates
    if mode == "wrap":
        return i % n
    if mode == "mirror":
        m = i % (2 * n)
        return m if m < n else 2 * n - 1 - m
    if mode == "border":
        return i if 0 <= i < n else None
    return min(max(i, 0), n - 1)


def texel(data: np.ndarray, idx: tuple[int, ...], mode: str, normalized: bool) -> np.ndarray:
    """data: (..., [depth,] [height,] width, channels); idx: (x, [y, [z]])."""
    dims = len(idx)
    sizes = data.shape[-2:-2 - dims:-1]
    pos = []
    for i, n in zip(idx, sizes):
        a = address(i, n, mode, normalized)
        if a is None:
            return BORDER[:data.shape[-1]]
        pos.append(a)
    return data[tuple(reversed(pos))]


def weight(frac: np.float32) -> np.float32:
    return F(np.floor(F(F(frac * F(256)) + F(0.5)))) / F(256)


def lerp(a: np.float32, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return (F(1) - a) * lo + a * hi


def sample(data: np.ndarray, coords: list[np.float32], filt: str, mode: str,
           normalized: bool) -> np.ndarray:
    """CUDA's tex1D/2D/3D on float data (already converted: normalized reads applied)."""
    dims = len(coords)
    sizes = data.shape[-2:-2 - dims:-1]
    x = [F(c * F(n)) if normalized else F(c) for c, n in zip(coords, sizes)]
    if filt == "point":
        return texel(data, tuple(int(np.floor(v)) for v in x), mode, normalized)
    xb = [F(v - F(0.5)) for v in x]
    i = [int(np.floor(v)) for v in xb]
    w = [weight(F(v - F(np.floor(v)))) for v in xb]

    def t(*off: int) -> np.ndarray:
        return texel(data, tuple(a + o for a, o in zip(i, off)), mode, normalized).astype(F)
    if dims == 1:
        return lerp(w[0], t(0), t(1))
    if dims == 2:
        return lerp(w[1], lerp(w[0], t(0, 0), t(1, 0)), lerp(w[0], t(0, 1), t(1, 1)))
    lo = lerp(w[1], lerp(w[0], t(0, 0, 0), t(1, 0, 0)), lerp(w[0], t(0, 1, 0), t(1, 1, 0)))
    hi = lerp(w[1], lerp(w[0], t(0, 0, 1), t(1, 0, 1)), lerp(w[0], t(0, 1, 1), t(1, 1, 1)))
    return lerp(w[2], lo, hi)


def gather(data: np.ndarray, x: np.float32, y: np.float32, comp: int) -> np.ndarray:
    xb, yb = F(x - F(0.5)), F(y - F(0.5))
    i, j = int(np.floor(xb)), int(np.floor(yb))
    order = [(0, 1), (1, 1), (1, 0), (0, 0)]
    return np.array([texel(data, (i + a, j + b), "clamp", False)[comp] for a, b in order], F)


def parse(out: list[str]) -> dict[str, np.ndarray]:
    """`name v0 v1 ...` lines as arrays of numbers (a word that is not one is kept as is)."""
    def value(v: str) -> object:
        try:
            return float(v)
        except ValueError:
            return v
    return {ln.split()[0]: np.array([value(v) for v in ln.split()[1:]]) for ln in out
            if ln.split() and ln.split()[0] != "done"}


def image() -> np.ndarray:
    return (np.arange(W * H) * 37 % 101).astype(F).reshape(H, W, 1) / F(7)


def close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, np.asarray(want, np.float64).ravel(), rtol=2e-6, atol=2e-7)


@pytest.fixture(scope="module")
def textures(build) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]  # noqa: F811
    return parse(lines(run(build("textures"))))


def test_arrays_and_copies(textures) -> None:  # type: ignore[no-untyped-def]
    # cudaArrayGetInfo/cudaGetChannelDesc of a W x H float array: (32,0,0,0, kind float = 2)
    assert list(textures["info"]) == [32, 0, 0, 0, 2, W, H, 0, 0]
    assert textures["roundtrip"][0] == 1 and textures["legacy_roundtrip"][0] == 1
    assert textures["roundtrip3d"][0] == 1
    assert list(textures["descs"]) == [1, 1, 1]
    # a compute capability 7.5 GPU's texture limits (programs check sizes against them)
    assert list(textures["limits"]) == [131072, 131072, 65536, 2048]


@pytest.mark.parametrize("filt", ["point", "linear"])
@pytest.mark.parametrize("mode", ["wrap", "clamp", "mirror", "border"])
@pytest.mark.parametrize("norm", [0, 1])
def test_filter_and_address_modes(textures, filt: str, mode: str, norm: int) -> None:  # type: ignore[no-untyped-def]
    img = image()
    sx, sy = (F(1) / F(W), F(1) / F(H)) if norm else (F(1), F(1))
    want = [sample(img, [F(x * sx), F(y * sy)], filt, mode, bool(norm))[0] for x, y in zip(XS, YS)]
    close(textures[f"a2d_{filt}_{mode}_{norm}"], want)


def test_read_modes_and_formats(textures) -> None:  # type: ignore[no-untyped-def]
    px = (np.arange(24) * 53 % 256).reshape(6, 4)
    want = [sample(px.astype(F) / F(255), [x], "linear", "clamp", False) for x in XS]
    close(textures["u8x4_norm_linear"], want)

    hs = (np.arange(12) * 1111 - 7000).astype(np.int16)
    pairs = hs.reshape(6, 2)
    want_i = [pairs[i - 2] if 0 <= i - 2 < 6 else (0, 0) for i in range(10)]   # zeros outside
    assert list(textures["s16x2_fetch"]) == list(np.ravel(want_i))
    close(textures["s16_norm_fetch"], np.maximum(hs.astype(F) / F(32767), F(-1)))

    hc = ((np.arange(W * H) * 29 % 256) - 128).astype(np.int8).reshape(H, W, 1)
    norm = np.maximum(hc.astype(F) / F(127), F(-1))
    want = [sample(norm, [F(x * (F(1) / F(W))), F(y * (F(1) / F(H)))], "linear", "wrap", True)[0]
            for x, y in zip(XS, YS)]
    close(textures["s8_pitch_norm_linear_wrap"], want)

    hh = ((np.arange(W * H) * 13 % 17).astype(F) * F(0.375) - F(2)).astype(np.float16)
    data = hh.astype(F).reshape(H, W, 1)
    want = [sample(data, [F(x * (F(1) / F(W))), F(y * (F(1) / F(H)))], "linear", "mirror", True)[0]
            for x, y in zip(XS, YS)]
    close(textures["f16_linear_mirror"], want)

    hi = (np.arange(W * H, dtype=np.int64) * 100003 - 900000).reshape(H, W, 1)
    want_int = [sample(hi, [x, y], "point", "clamp", False)[0] for x, y in zip(XS, YS)]
    assert list(textures["s32_point_clamp"]) == want_int
    assert list(textures["int_linear"]) == ["cudaErrorInvalidValue"]
    assert list(textures["three_channels"]) == ["cudaErrorInvalidChannelDescriptor"]


def test_3d_layered_and_gather(textures) -> None:  # type: ignore[no-untyped-def]
    vol = ((np.arange(W * H * D) * 41 % 97).astype(F) * F(0.5)).reshape(D, H, W, 1)
    want = [sample(vol, [x, y, z], "linear", "clamp", False)[0] for x, y, z in zip(XS, YS, ZS)]
    close(textures["f32_3d_linear_clamp"], want)

    lay = (np.arange(W * H * 3) * 19 % 53).astype(F).reshape(3, H, W, 1)
    want2 = [sample(lay[i % 3], [x, y], "linear", "border", False)[0]
             for i, (x, y) in enumerate(zip(XS, YS))]
    close(textures["layered2d_linear_border"], want2)
    want1 = [sample(lay[i % 3, 0], [x], "linear", "border", False)[0] for i, x in enumerate(XS)]
    close(textures["layered1d_linear_border"], want1)

    close(textures["gather_clamp"], [gather(image(), x, y, 0) for x, y in zip(XS, YS)])


def test_surfaces(textures, build) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    img = image()[..., 0]
    # v * 10 + 1 as one fma (nvcc contracts it): exact in double, rounded once
    close(textures["surface_written"], (img.astype(np.float64) * 10 + 1).astype(F))
    # zero mode: 0 (and the store dropped); clamp: the row's last element, the row's first,
    # the last row
    close(textures["surface_bounds"], [0, img[1, W - 1], img[2, 0], img[H - 1, 1]])
    r = run(build("textures"), "trap")
    assert r.returncode == 0
    assert "trap cudaErrorLaunchFailure" in r.stdout
    assert "surface store out of range in trap mode" in r.stderr


def test_legacy_texture_references(build) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """texture<...> references, cudaBindTexture/2D/ToArray and cudaUnbindTexture (removed
    from CUDA 12+ headers) build unchanged through the compatibility header."""
    out = parse(lines(run(build("legacy_texture"))))
    assert [str(v) for v in out["gather"]] == ["offset", "0.0", "mismatches", "0.0"]
    assert list(out["past_end"]) == [0, 0, 0, 0]
    w, h = 6, 4
    px = (np.arange(w * h) * 41 % 256).astype(F).reshape(h, w, 1)
    i = np.arange(16, dtype=F)
    xs, ys = i * F(0.7) - F(1), i * F(0.45)
    # unnormalized coordinates: the wrap/mirror modes the program sets act as clamp
    close(out["image"], [sample(px / F(255), [x, y], "linear", "clamp", False)[0] for x, y in zip(xs, ys)])
    # declared `texture<float, 2> pitched(0, cudaFilterModeLinear, cudaAddressModeClamp)`
    close(out["pitched"], [sample(px, [x, y], "linear", "clamp", False)[0] for x, y in zip(xs, ys)])
    close(out["layers"], [(1 - 2 * (k % 2)) * sample(px, [x, y], "point", "clamp", False)[0]
                          for k, (x, y) in enumerate(zip(xs, ys))])
    g = [gather(px, x, y, 0) for x, y in zip(xs, ys)]
    close(out["gathered"], [v[0] + 10 * v[1] + 100 * v[2] + 1000 * v[3] for v in g])


def test_texture_reference_detection(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from cpuify.nvcc.legacy_texture import uses_texture_references
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "refs.h").write_text("texture<float, 1> t;\n")
    (tmp_path / "angled.cu").write_text("#include <refs.h>\n#include <cstdio>\n")
    (tmp_path / "quoted.cu").write_text('#include "inc/refs.h"\n')
    (tmp_path / "binds.cu").write_text("void f() { cudaUnbindTexture(t); }\n")
    (tmp_path / "plain.cu").write_text("#include <cstdio>\n// a texture is mentioned\nint texture = 1;\n")
    assert uses_texture_references(str(tmp_path / "angled.cu"), [str(inc)])
    assert not uses_texture_references(str(tmp_path / "angled.cu"), [])   # not found: not ours
    assert uses_texture_references(str(tmp_path / "quoted.cu"), [])
    assert uses_texture_references(str(tmp_path / "binds.cu"), [])
    assert not uses_texture_references(str(tmp_path / "plain.cu"), [str(inc)])
    (tmp_path / "surf.cu").write_text("surface<void, cudaSurfaceType2D> s;\n")
    (tmp_path / "bind.cu").write_text("void f() { cudaBindSurfaceToArray(s, a); }\n")
    assert uses_texture_references(str(tmp_path / "surf.cu"), [])
    assert uses_texture_references(str(tmp_path / "bind.cu"), [])


def test_legacy_surface_references(build) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """surface<void, dim> references and cudaBindSurfaceToArray (removed from CUDA 12+
    headers) build unchanged through the compatibility header; results by hand."""
    out = lines(run(build("legacy_surface")))
    assert out[0] == "status no error"
    W, H, D = 4, 3, 2
    # line: 10 k read by every row y, then row 0 writes (10 k + 0) * 2; the store past the
    # end is dropped (zero mode)
    assert out[1].split()[1:] == [str(20 * k) for k in range(W)]
    # plane: v * 3 + y with v = 0.5 (y W + x)
    assert [float(v) for v in out[2].split()[1:]] == [
        (y * W + x) * 0.5 * 3 + y for y in range(H) for x in range(W)]
    # box: (k, k+1, k+2, k+3) becomes (w, z, y, x + z) = (k+3, k+2, k+1, k + z)
    assert out[3].split()[1:] == [f"{k + 3},{k + 2},{k + 1},{k + k // (W * H)}" for k in range(W * H * D)]
    # stack: 7 k - 100 layer
    assert [int(v) for v in out[4].split()[1:]] == [7 * k - 100 * (k // (W * H)) for k in range(W * H * D)]
