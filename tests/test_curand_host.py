"""cpuify's cuRAND host API (runtime/curand.c, `-lcurand`): tests/programs/curand_host.cpp,
built with `cpuify nvcc -lcurand`, fills buffers from the XORWOW, Philox4x32-10 and MRG32k3a
generators (device and host ones) with every distribution and dumps them.

References: Python implementations of the three generators from their published definitions
(test_runtime_api_programs.py has XORWOW's and Philox's) at the subsequence and draw that the
host layout assigns to each sampled result; NumPy for the statistics; with the nvidia-curand
wheel (`pip install 'cpuify[curand]'`: curand.h, curand_kernel.h), the device API run through
cpuify by tests/programs/curand_host_ref.cu (bit for bit for 32-bit draws and uniforms,
normals within 4e-6: the device's __sincosf is approximate), and, where the wheel's own libcurand
loads (it needs a libcudart.so.13), NVIDIA's host generators, byte for byte.  Without the
wheel the program is built against its own declarations (tests/programs/curand_api.h) and
the tests that need NVIDIA's code skip."""

from __future__ import annotations

import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

PROGRAMS = Path(__file__).parent / "programs"
CPUIFY = [sys.executable, "-m", "cpuify.cli.main"]
SEED, OFFSET = 20240607, 7
# curand.h's status values
SUCCESS, NOT_INITIALIZED, TYPE_ERROR, OUT_OF_RANGE, LENGTH_NOT_MULTIPLE = 0, 101, 103, 104, 105
LAUNCH_FAILURE = 201


def _toolchain() -> bool:
    try:
        from cpuify.nvcc.toolkit import find_toolkit
        find_toolkit()
    except Exception:  # noqa: BLE001 (no toolkit: skip)
        return False
    return all(shutil.which(t) for t in ("g++", "gcc", "ar", "nm"))


def _curand_include() -> str | None:
    from cpuify.nvcc.headers import curand_include
    from cpuify.nvcc.toolkit import find_toolkit
    return curand_include(find_toolkit())


pytestmark = pytest.mark.skipif(not _toolchain(), reason="nvcc wheel (nvidia-cuda-nvcc) or g++ missing")
INCLUDE = _curand_include() if _toolchain() else None
needs_wheel = pytest.mark.skipif(INCLUDE is None, reason="NVIDIA's cuRAND headers: pip install 'cpuify[curand]' "
                                                         "(nvidia-curand)")
OWN_DECLARATIONS = [] if INCLUDE else ["-DCURAND_HOST_OWN_DECLARATIONS"]

GENERATORS = {"xorwow": (0, 4096), "philox": (1, 65536), "mrg": (2, 81920), "mrg_legacy": (2, 4096)}
# two calls of each distribution (curand_host.cpp)
SIZES = {"bits": 300004, "uniform": 200004, "udouble": 90004, "normal": 160004, "ndouble": 90004}


def nvcc(*args: str, cwd: Path) -> None:
    r = subprocess.run([*CPUIFY, "nvcc", *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("curand_host")
    nvcc(f"-I{PROGRAMS}", *OWN_DECLARATIONS, str(PROGRAMS / "curand_host.cpp"), "-o", str(tmp / "curand_host"),
         "-lcurand", cwd=tmp)
    out = tmp / "out"
    out.mkdir()
    r = subprocess.run([str(tmp / "curand_host"), str(out)], capture_output=True, text=True, timeout=600,
                       check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    (out / "stderr.txt").write_text(r.stderr)
    return out, r.stdout


def load(out: Path, name: str, dtype: str) -> np.ndarray:
    return np.fromfile(out / f"{name}.bin", dtype=dtype)


def place(gen: str, dist: str, i: int) -> tuple[int, int, int]:
    """(subsequence, first draw, index within what the device API call returns) of result i of
    `dist` from a generator at offset OFFSET: NVIDIA's host layout (runtime/curand.c)."""
    _, threads = GENERATORS[gen]
    if gen == "philox":
        g = OFFSET + i
        b, k = divmod(g, 4)
        row, t = divmod(b, threads)
        if dist in ("bits", "uniform"):
            return t, row * 4 + k, 0
        if dist == "normal":
            return t, row * 4, k
        return t, row * 8 + 4 * (k // 2), k % 2          # udouble: curand_uniform2_double
    per_group = 2 if dist == "normal" else 1
    draws = {"bits": 1, "uniform": 1, "normal": 2, "udouble": 2 if gen == "xorwow" else 1}[dist]
    j, k = divmod(i, per_group)
    row, t = divmod(OFFSET + j, threads)
    skipped = OFFSET // threads + (1 if t < OFFSET % threads else 0)    # rows the offset skipped
    return t, skipped + (row - skipped) * draws, k


def samples(n: int, threads: int) -> list[int]:
    rng = np.random.default_rng(5)
    picks = set(range(24)) | set(range(n - 8, n))
    for edge in (threads - OFFSET, 2 * threads - OFFSET, 4 * threads, 2 * 4 * threads):
        picks |= {e for e in range(edge - 6, edge + 6) if 0 <= e < n}
    picks |= {int(x) for x in rng.integers(0, n, 150)}
    return sorted(picks)


@pytest.fixture(scope="module")
def device_reference(dumps, tmp_path_factory: pytest.TempPathFactory):
    """For each (generator, distribution) of the default ordering: sampled result indices and
    the device API's values there."""
    tmp = tmp_path_factory.mktemp("curand_ref")
    nvcc(f"-I{PROGRAMS}", str(PROGRAMS / "curand_host_ref.cu"), "-o", str(tmp / "ref"), cwd=tmp)
    kinds = {"bits": 0, "uniform": 1, "normal": 2, "udouble": 3}
    queries, where = [], []
    for gen in ("xorwow", "philox", "mrg"):
        for dist, kind in kinds.items():
            for i in samples(SIZES[dist], GENERATORS[gen][1]):
                t, draw, k = place(gen, dist, i)
                queries.append(f"{GENERATORS[gen][0]} {kind} {t} {draw}")
                where.append((gen, dist, i, k))
    r = subprocess.run([str(tmp / "ref"), str(SEED)], input="\n".join(queries) + "\n", capture_output=True,
                       text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [[float(x) for x in line.split()] for line in r.stdout.splitlines()]
    assert len(rows) == len(where)
    ref: dict[tuple[str, str], tuple[list[int], list[float]]] = {}
    for (gen, dist, i, k), row in zip(where, rows):
        idx, vals = ref.setdefault((gen, dist), ([], []))
        idx.append(i)
        vals.append(row[k])
    return ref


@needs_wheel
@pytest.mark.parametrize("gen", ["xorwow", "philox", "mrg"])
@pytest.mark.parametrize("kind", ["host", "device"])
def test_host_api_is_the_device_api_in_nvidia_layout(dumps, device_reference, gen: str, kind: str) -> None:
    out, _ = dumps
    for dist, dtype in (("bits", "<u4"), ("uniform", "<f4"), ("udouble", "<f8"), ("normal", "<f4")):
        got = load(out, f"{gen}_{kind}_{dist}", dtype)
        assert len(got) == SIZES[dist]
        idx, vals = device_reference[(gen, dist)]
        if dist == "normal":
            # curand_host.cpp asks for mean 1.5, stddev 2; the device's __sincosf is approximate
            # (measured: ~92% equal, the rest at most 4.8e-7 apart)
            expect = np.float32(1.5) + np.float32(2.0) * np.array(vals, dtype=np.float32)
            np.testing.assert_allclose(got[idx], expect, rtol=0, atol=4e-6, err_msg=f"{gen} {kind} {dist}")
            assert np.mean(got[idx] == expect) > 0.8
        else:
            np.testing.assert_array_equal(got[idx], np.array(vals).astype(dtype), err_msg=f"{gen} {kind} {dist}")


@pytest.mark.parametrize("gen", ["xorwow", "philox", "mrg"])
def test_host_and_device_generators_agree(dumps, gen: str) -> None:
    out, _ = dumps
    for f in sorted(out.glob(f"{gen}_host_*.bin")):
        assert f.read_bytes() == (out / f.name.replace("_host_", "_device_")).read_bytes(), f.name


def test_statistics_against_numpy(dumps) -> None:
    """A million uniforms and a million normals: moments within 5 standard errors of NumPy's
    (the reference values), and Kolmogorov-Smirnov distances from the exact distributions no
    larger than those of NumPy's own samples of the same size allow (1.95 / sqrt(n): p = 0.001)."""
    import math
    out, _ = dumps
    u = load(out, "stats_uniform", "<f4").astype(np.float64)
    z = load(out, "stats_normal", "<f4").astype(np.float64)
    n = len(u)
    assert n == len(z) == 1_000_000
    rng = np.random.default_rng(1)
    ref_u, ref_z = rng.random(n), rng.standard_normal(n)
    assert u.min() > 0 and u.max() <= 1
    assert abs(u.mean() - ref_u.mean()) < 5 * np.sqrt(2 / 12 / n)
    assert abs(u.var() - ref_u.var()) < 5 * np.sqrt(2 / 180 / n)          # Var of (U - 1/2)^2: 1/180
    assert abs(z.mean() - ref_z.mean()) < 5 * np.sqrt(2 / n)
    assert abs(z.var() - ref_z.var()) < 5 * np.sqrt(2 * 2 / n)
    ks_bound = 1.95 / np.sqrt(n)
    s = np.sort(u)
    grid = np.arange(1, n + 1) / n
    assert np.max(np.abs(grid - s)) < ks_bound
    phi = np.array([0.5 * math.erfc(-x / math.sqrt(2)) for x in np.sort(z)])
    assert np.max(np.abs(grid - phi)) < ks_bound
    # every bit of the raw draws is used, and the other generators' normals have their moments
    bits = load(out, "philox_host_bits", "<u4")
    assert all(abs(np.mean((bits >> b) & 1) - 0.5) < 0.005 for b in (0, 15, 31))
    for name, mean, std in (("xorwow_host_normal", 1.5, 2.0), ("mrg_host_normal", 1.5, 2.0),
                            ("philox_host_ndouble", -0.5, 0.25)):
        x = load(out, name, "<f8" if "double" in name else "<f4").astype(np.float64)
        assert abs(x.mean() - mean) < 5 * std / np.sqrt(len(x)), name
        assert abs(x.std() / std - 1) < 0.01, name
    ln = load(out, "xorwow_host_lognormal", "<f4").astype(np.float64)
    assert abs(np.log(ln).mean() - 0.5) < 0.1 and abs(np.log(ln).std() - 0.75) < 0.05


@pytest.mark.parametrize("index,lam", [(0, 0.5), (1, 7.0), (2, 300.0), (3, 400000.0)])
def test_poisson_mean_and_variance(dumps, index: int, lam: float) -> None:
    out, _ = dumps
    x = load(out, f"poisson_{index}", "<u4").astype(np.float64)
    assert abs(x.mean() - lam) < 6 * np.sqrt(lam / len(x))
    assert abs(x.var() / lam - 1) < 0.03
    if lam < 10:          # the distribution itself, against NumPy's sampler
        ref = np.random.default_rng(2).poisson(lam, len(x))
        for k in range(4):
            assert abs(np.mean(x == k) - np.mean(ref == k)) < 0.006, k


def test_offsets_seeds_and_continuation(dumps) -> None:
    """The 16 draws after two calls of a distribution continue the sequence where they
    stopped; the default generator is XORWOW with seed 0, and a new seed keeps the position."""
    from test_runtime_api_programs import (
        _xorwow_jump_2_67,
        philox_stream,
        xorwow_stream,
    )
    out, _ = dumps
    for dist, n in SIZES.items():
        after = load(out, f"philox_host_{dist}_after", "<u4")
        # Philox counts results: the next draw is result OFFSET + n of the sequence
        want = [philox_stream(SEED, *place("philox", "bits", n + j)[:2], 1)[0] for j in range(16)]
        assert after.tolist() == want, dist
    after = load(out, "mrg_host_bits_after", "<u4")
    n = SIZES["bits"]
    assert after[:4].tolist() == [int(mrg32k3a_draw(SEED, *place("mrg", "bits", n + j)[:2]) * 1.000000048662)
                                  for j in range(4)]
    jump = _xorwow_jump_2_67()
    d = load(out, "default", "<u4").tolist()
    assert d[:4] == [xorwow_stream(0, t, 1, jump)[0] for t in range(4)]
    assert d[4:] == [xorwow_stream(99, t, 1, jump)[0] for t in range(4, 8)]


def test_statuses(dumps) -> None:
    _, stdout = dumps
    st = {m.group(1): int(m.group(2)) for m in re.finditer(r"^status (\w+) (-?\d+)$", stdout, re.MULTILINE)}
    assert st == {"normal_odd": LENGTH_NOT_MULTIPLE, "normal_double_odd": LENGTH_NOT_MULTIPLE,
                  "lognormal_odd": LENGTH_NOT_MULTIPLE, "long_long": TYPE_ERROR,
                  "dimensions_on_pseudo": TYPE_ERROR, "ordering_quasi": OUT_OF_RANGE,
                  "ordering_dynamic_host": OUT_OF_RANGE, "poisson_lambda_0": OUT_OF_RANGE, "poisson_lambda_400001": OUT_OF_RANGE,
                  "generate_none": SUCCESS, "set_stream": SUCCESS, "destroy_null": NOT_INITIALIZED,
                  "create_null": NOT_INITIALIZED, "create_bad_type": TYPE_ERROR, "version": SUCCESS,
                  "property_major": SUCCESS, "property_minor": SUCCESS, "philox_normal_odd": SUCCESS,
                  "philox_seeded": OUT_OF_RANGE, "bad_pointer": LAUNCH_FAILURE}
    assert "version 10405" in stdout and "property 10 4" in stdout
    stderr = (dumps[0] / "stderr.txt").read_text()
    assert "cpuify: curandGenerateUniform failed: illegal address" in stderr


def _nvidia_libcurand() -> tuple[str, str] | None:
    """The nvidia-curand wheel's libcurand.so.10 and the libcudart.so.13 it loads with, where
    it loads."""
    assert INCLUDE is not None
    for lib in sorted(glob.glob(os.path.join(os.path.dirname(INCLUDE), "lib", "libcurand.so*"))):
        try:
            ctypes.CDLL(lib)
        except OSError:
            continue
        maps = Path("/proc/self/maps").read_text()
        cudart = re.search(r"(/\S*libcudart\.so\.\d+\S*)$", maps, re.MULTILINE)
        if cudart:
            return lib, cudart.group(1)
    return None


@needs_wheel
def test_bit_identical_to_nvidia_host_generators(dumps, tmp_path: Path) -> None:
    libs = _nvidia_libcurand()
    if libs is None:
        pytest.skip("NVIDIA's libcurand (nvidia-curand wheel) does not load here (no libcudart.so.13)")
    from cpuify.nvcc.toolkit import find_toolkit
    exe = tmp_path / "nvidia"
    subprocess.run(["g++", "-O1", f"-I{INCLUDE}", f"-I{find_toolkit().include}", str(PROGRAMS / "curand_host.cpp"),
                    "-o", str(exe), *libs, *(f"-Wl,-rpath,{os.path.dirname(x)}" for x in libs)], check=True)
    nv = tmp_path / "out"
    nv.mkdir()
    r = subprocess.run([str(exe), str(nv), "host-only"], capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    ours, stdout = dumps
    # every status as NVIDIA's (but the bad pointer's, which crashes a host generator)
    assert r.stdout == "".join(ln for ln in stdout.splitlines(keepends=True) if "bad_pointer" not in ln)
    compared = 0
    for f in sorted(nv.glob("*.bin")):
        if not f.name.startswith("poisson_"):      # not NVIDIA's sequence (see runtime/curand.c)
            assert f.read_bytes() == (ours / f.name).read_bytes(), f.name
            compared += 1
    assert compared == 3 * 2 * 7 + 2 * 7 + 3


# --- Python references of the generators (curand_kernel.h's definitions) -------------------

MRG_M1, MRG_M2 = 4294967087, 4294944443
MRG_A1 = [[0, 1, 0], [0, 0, 1], [MRG_M1 - 810728, 1403580, 0]]
MRG_A2 = [[0, 1, 0], [0, 0, 1], [MRG_M2 - 1370589, 0, 527612]]


def _matpow(a: list[list[int]], e: int, m: int) -> list[list[int]]:
    r = [[int(i == j) for j in range(3)] for i in range(3)]
    while e:
        if e & 1:
            r = [[sum(r[i][k] * a[k][j] for k in range(3)) % m for j in range(3)] for i in range(3)]
        a = [[sum(a[i][k] * a[k][j] for k in range(3)) % m for j in range(3)] for i in range(3)]
        e >>= 1
    return r


def mrg32k3a_draw(seed: int, subsequence: int, draw: int) -> int:
    """curand_MRG32k3a's value (in [1, m1]) at `draw` of `subsequence` (2^76 draws apart)."""
    x1, x2 = (seed & 0xFFFFFFFF) ^ 0x55555555, (seed >> 32) ^ 0xAAAAAAAA
    s1 = [x1 * 12345 % MRG_M1, x2 * 12345 % MRG_M1, x1 * 12345 % MRG_M1]
    s2 = [x2 * 12345 % MRG_M2, x1 * 12345 % MRG_M2, x2 * 12345 % MRG_M2]
    e = (subsequence << 76) + draw
    p1, p2 = _matpow(MRG_A1, e, MRG_M1), _matpow(MRG_A2, e, MRG_M2)
    s1 = [sum(p1[i][k] * s1[k] for k in range(3)) % MRG_M1 for i in range(3)]
    s2 = [sum(p2[i][k] * s2[k] for k in range(3)) % MRG_M2 for i in range(3)]
    a = (1403580 * s1[1] - 810728 * s1[0]) % MRG_M1
    b = (527612 * s2[2] - 1370589 * s2[0]) % MRG_M2
    return a - b + MRG_M1 if a <= b else a - b


def _uniform(x: int) -> np.float32:
    return np.float32(x) * np.float32(2.0 ** -32) + np.float32(2.0 ** -33)


def test_draws_and_uniforms_against_python_references(dumps) -> None:
    """32-bit draws and uniform floats, bit for bit, at sampled places (XORWOW: the first 8
    subsequences, whose jumps are cheap in Python)."""
    from test_runtime_api_programs import (
        _xorwow_jump_2_67,
        philox_stream,
        xorwow_stream,
    )
    out, _ = dumps
    jump = _xorwow_jump_2_67()
    for dist in ("bits", "uniform"):
        xorwow = load(out, f"xorwow_host_{dist}", "<u4" if dist == "bits" else "<f4")
        for t in range(8):
            idx = [r * 4096 + t - OFFSET for r in (0, 1, 2, 40, 48) if r * 4096 + t >= OFFSET]
            draws = xorwow_stream(SEED, t, 50, jump)
            for i in idx:
                _, draw, _ = place("xorwow", dist, i)
                want = draws[draw] if dist == "bits" else _uniform(draws[draw])
                assert xorwow[i] == want, ("xorwow", dist, i)
        philox = load(out, f"philox_host_{dist}", "<u4" if dist == "bits" else "<f4")
        mrg = load(out, f"mrg_host_{dist}", "<u4" if dist == "bits" else "<f4")
        for i in samples(len(philox), 65536)[::3]:
            t, draw, _ = place("philox", dist, i)
            x = philox_stream(SEED, t, draw, 1)[0]
            assert philox[i] == (x if dist == "bits" else _uniform(x)), ("philox", dist, i)
        for i in samples(len(mrg), 81920)[::6]:
            t, draw, _ = place("mrg", dist, i)
            m = mrg32k3a_draw(SEED, t, draw)
            want = int(m * 1.000000048662) if dist == "bits" else np.float32(m * 2.3283065498378288e-10)
            assert mrg[i] == want, ("mrg", dist, i)


def test_cuda_home_library_with_gxx(dumps, tmp_path: Path) -> None:
    """A host-only program linked by g++ with `cpuify cuda-home`'s -lcurand gives the same
    values as the one `cpuify nvcc -lcurand` links."""
    from cpuify.nvcc.cuda_home import cuda_home
    home = cuda_home()
    assert (home / "lib64" / "libcurand.so").exists() and (home / "lib64" / "libcurand_static.a").exists()
    exe = tmp_path / "gxx"
    subprocess.run(["g++", "-O1", f"-I{home}/include", *OWN_DECLARATIONS, str(PROGRAMS / "curand_host.cpp"),
                    "-o", str(exe), f"-L{home}/lib64", "-lcurand", "-lcudart"], check=True)
    mine = tmp_path / "out"
    mine.mkdir()
    r = subprocess.run([str(exe), str(mine)], capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    ours, stdout = dumps
    assert r.stdout == stdout
    names = sorted(f.name for f in ours.glob("*.bin"))
    assert names == sorted(f.name for f in mine.glob("*.bin"))
    for name in names:
        assert (mine / name).read_bytes() == (ours / name).read_bytes(), name


def test_without_the_curand_wheel_the_build_error_names_the_extra(tmp_path: Path, monkeypatch) -> None:
    from cpuify.nvcc import headers
    from cpuify.nvcc.toolkit import find_toolkit
    monkeypatch.setattr(headers, "curand_include", lambda tk: None)
    opts = headers.include_options(find_toolkit(), legacy=False)
    assert str(headers.NO_CURAND_INCLUDE) in opts
    src = tmp_path / "a.cpp"
    src.write_text("#include <curand.h>\nint main() { return 0; }\n")
    r = subprocess.run(["g++", "-fsyntax-only", f"-I{headers.NO_CURAND_INCLUDE}", str(src)], capture_output=True,
                       text=True, check=False)
    assert r.returncode != 0 and "pip install 'cpuify[curand]'" in r.stderr and "a.cpp:1" in r.stderr


def test_nvcc_links_cpuify_curand() -> None:
    from cpuify.nvcc.driver import parse_args
    o = parse_args(["a.cu", "-lcurand", "-lcurand_static", "-o", "a"])
    assert o.link_opts == ["-lcurand_static", "-lcurand_static"]
    assert not any("curand" in w for w in o.warnings)


# --- the quasi-random generators (Sobol) and NVIDIA's tables, MTGP32 --------------------------
# tests/programs/curand_sobol_mtgp32.cpp: Sobol with 3 dimensions from offset 5, 20001 points
# each, then 5 dimensions and 7 points each that go on from point 5 + 20001; the direction
# vectors come from NVIDIA's libcurand at run time (runtime/curand_sobol.h), so these tests need
# it to load.  MTGP32: 2 * 192 * 256 + 1001 results, 30003 more, a new seed and 1000 more.

QUASI = {"sobol32": (32, False), "scrambled32": (32, True), "sobol64": (64, False), "scrambled64": (64, True)}
QUASI_FIRST, QUASI_SECOND = (3, 20001), (5, 7)


def needs_nvidia_libcurand() -> None:
    if INCLUDE is None:
        pytest.skip("NVIDIA's cuRAND headers: pip install 'cpuify[curand]' (nvidia-curand)")
    if _nvidia_libcurand() is None:
        pytest.skip("NVIDIA's libcurand (nvidia-curand wheel) does not load here (no libcudart.so.13): "
                    "it holds the Sobol direction vectors")


@pytest.fixture(scope="module")
def sobol_mtgp32_dumps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    needs_nvidia_libcurand()
    tmp = tmp_path_factory.mktemp("curand_quasi")
    nvcc(str(PROGRAMS / "curand_sobol_mtgp32.cpp"), "-o", str(tmp / "quasi"), "-lcurand", cwd=tmp)
    out = tmp / "out"
    out.mkdir()
    r = subprocess.run([str(tmp / "quasi"), str(out)], capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0 and r.stderr == "", r.stdout + r.stderr
    return out, r.stdout


def sobol_reference(vectors: np.ndarray, constant: int, index: np.ndarray, bits: int) -> np.ndarray:
    """Points `index` of one dimension: the gray code of the index selects the direction
    vectors XORed into the scramble constant (0 unscrambled)."""
    dtype = np.uint32 if bits == 32 else np.uint64
    index = index.astype(np.uint64) & np.uint64(2 ** bits - 1)
    gray = index ^ (index >> np.uint64(1))
    x = np.full(len(index), constant, dtype=dtype)
    for k in range(bits):
        x ^= np.where((gray >> np.uint64(k)) & np.uint64(1), vectors[k], 0).astype(dtype)
    return x


def quasi_reference_points(out: Path, gen: str) -> np.ndarray:
    """All points curand_sobol_mtgp32.cpp asks `gen` for, in its output order, from NumPy."""
    bits, scrambled = QUASI[gen]
    dtype = "<u4" if bits == 32 else "<u8"
    vectors = load(out, f"{'scrambled_' if scrambled else ''}vectors{bits}", dtype).reshape(64, bits)
    constants = load(out, f"constants{bits}", dtype) if scrambled else np.zeros(64, dtype=dtype)
    parts, start = [], 5
    for dims, per_dim in (QUASI_FIRST, QUASI_SECOND):
        index = np.arange(start, start + per_dim, dtype=np.uint64)
        parts += [sobol_reference(vectors[d], int(constants[d]), index, bits) for d in range(dims)]
        start += per_dim
    return np.concatenate(parts)


def test_quasi_points_and_uniforms_against_numpy_gray_code(sobol_mtgp32_dumps) -> None:
    """32- and 64-bit Sobol points (plain and scrambled, two calls with a change of dimensions
    between) against NumPy's gray-code construction from the direction vectors the program
    read; uniforms as the device API converts them; float normals are the inverse normal CDF
    of the same points (checked through math.erfc)."""
    import math
    out, _ = sobol_mtgp32_dumps
    for gen, (bits, _) in QUASI.items():
        want = quasi_reference_points(out, gen)
        got = load(out, f"{gen}_host_bits", "<u4" if bits == 32 else "<u8")
        np.testing.assert_array_equal(got, want, err_msg=gen)
        top = (want >> np.uint64(32)).astype(np.uint32) if bits == 64 else want
        uniform = top.astype(np.float32) * np.float32(2.0 ** -32) + np.float32(2.0 ** -33)
        np.testing.assert_array_equal(load(out, f"{gen}_host_uniform", "<f4"), uniform, err_msg=gen)
        if bits == 32:
            udouble = want.astype(np.float64) * 2.0 ** -32 + 2.0 ** -32
        else:
            udouble = (want >> np.uint64(11)).astype(np.float64) * 2.0 ** -53 + 2.0 ** -54
        np.testing.assert_array_equal(load(out, f"{gen}_host_udouble", "<f8"), udouble, err_msg=gen)
        # normal(1.5, 2): Phi((v - 1.5) / 2) is the point's top 32 bits as a probability,
        # x 2^-32 + 2^-33 (float: within rounding); the double ones use 53 bits of 64-bit points
        z = (load(out, f"{gen}_host_normal", "<f4").astype(np.float64) - 1.5) / 2.0
        phi = np.array([0.5 * math.erfc(-x / math.sqrt(2)) for x in z[::37]])
        p = top.astype(np.float64) * 2.0 ** -32 + 2.0 ** -33
        np.testing.assert_allclose(phi, p[::37], rtol=3e-6, atol=3e-7, err_msg=gen)
        zd = (load(out, f"{gen}_host_ndouble", "<f8") + 0.5) / 0.25
        phi = np.array([0.5 * math.erfc(-x / math.sqrt(2)) for x in zd[::37]])
        np.testing.assert_allclose(phi, (p if bits == 32 else udouble)[::37], rtol=1e-9, err_msg=gen)


def test_quasi_host_and_device_generators_agree(sobol_mtgp32_dumps) -> None:
    out, _ = sobol_mtgp32_dumps
    names = sorted(out.glob("*_host_*.bin"))
    assert len(names) == 4 * 7 + 6
    for f in names:
        assert f.read_bytes() == (out / f.name.replace("_host_", "_device_")).read_bytes(), f.name


def test_sobol_and_mtgp32_identical_to_nvidia_host_generators(sobol_mtgp32_dumps, tmp_path: Path) -> None:
    """Every status, table and result of the Sobol and MTGP32 generators as NVIDIA's libcurand
    host generators give them, byte for byte, but double-precision normals and log-normals:
    NVIDIA's erfcinv is a few ulps off the exact value and cpuify's is accurate (measured: 8 ulps
    at most, ~75% equal)."""
    libs = _nvidia_libcurand()
    assert libs is not None
    from cpuify.nvcc.toolkit import find_toolkit
    exe = tmp_path / "nvidia"
    subprocess.run(["g++", "-O1", f"-I{INCLUDE}", f"-I{find_toolkit().include}", str(PROGRAMS / "curand_sobol_mtgp32.cpp"),
                    "-o", str(exe), *libs, *(f"-Wl,-rpath,{os.path.dirname(x)}" for x in libs)], check=True)
    nv = tmp_path / "out"
    nv.mkdir()
    r = subprocess.run([str(exe), str(nv), "host-only"], capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    ours, stdout = sobol_mtgp32_dumps
    assert r.stdout == stdout
    assert "status dimensions_20001 104" in stdout and "status seed_on_quasi 103" in stdout
    assert "status mtgp32_offset 103" in stdout and "status mtgp32_normal_odd 0" in stdout
    exact = approximate = 0
    for f in sorted(nv.glob("*.bin")):
        if f.name.startswith("poisson_"):          # not NVIDIA's sequence (runtime/curand.c)
            continue
        if f.name.endswith(("_ndouble.bin", "_lndouble.bin")):
            a, b = np.fromfile(f, "<f8"), load(ours, f.name[:-4], "<f8")
            scale = 0.25 if "_ndouble" in f.name else np.abs(a)      # the stddev, or the value
            # 8 ulps of a normal value (|z| < 9), times the stddev or the log-normal value
            assert np.all(np.abs(a - b) <= 8 * np.spacing(16.0) * scale + 4 * np.spacing(np.abs(a))), f.name
            assert np.mean(a == b) > 0.6, f.name
            approximate += 1
        else:
            assert f.read_bytes() == (ours / f.name).read_bytes(), f.name
            exact += 1
    assert (exact, approximate) == (8 + 4 * 5 + 5, 4 * 2 + 1)


def test_device_api_sobol_pi_against_numpy(tmp_path: Path) -> None:
    """The device API's Sobol32 and scrambled Sobol32 generators, seeded from
    curandGetDirectionVectors32/curandGetScrambleConstants32 (a quasi Monte-Carlo pi): every
    point each thread drew equals NumPy's gray-code Sobol point from the same vectors, and the
    count inside the circle is NumPy's."""
    needs_nvidia_libcurand()
    nvcc(str(PROGRAMS / "curand_sobol_pi.cu"), "-o", str(tmp_path / "pi"), "-lcurand", cwd=tmp_path)
    r = subprocess.run([str(tmp_path / "pi"), str(tmp_path)], capture_output=True, text=True, timeout=600,
                       check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    libs = _nvidia_libcurand()
    assert libs is not None
    nvidia = ctypes.CDLL(libs[0])
    n = 64 * 128 * 16
    for tag, vector_set in (("plain", 101), ("scrambled", 102)):
        vectors = np.fromfile(tmp_path / f"sobol_pi_{tag}_vectors.bin", "<u4").reshape(2, 32)
        constants = np.fromfile(tmp_path / f"sobol_pi_{tag}_constants.bin", "<u4")
        table = ctypes.POINTER(ctypes.c_uint32)()                  # NVIDIA's own, for the first two
        assert nvidia.curandGetDirectionVectors32(ctypes.byref(table), vector_set) == 0
        np.testing.assert_array_equal(vectors.ravel(), np.ctypeslib.as_array(table, (64,)))
        scramble = constants if tag == "scrambled" else np.zeros(2, dtype=np.uint32)
        index = np.arange(n, dtype=np.uint64)
        xy = [sobol_reference(vectors[d], int(scramble[d]), index, 32).astype(np.float32) * np.float32(2.0 ** -32)
              + np.float32(2.0 ** -33) for d in range(2)]
        got = np.fromfile(tmp_path / f"sobol_pi_{tag}_xy.bin", "<f4").reshape(n, 2)
        np.testing.assert_array_equal(got[:, 0], xy[0], err_msg=tag)
        np.testing.assert_array_equal(got[:, 1], xy[1], err_msg=tag)
        inside = int(np.sum(xy[0] * xy[0] + xy[1] * xy[1] <= np.float32(1)))
        assert f"{tag} inside {inside} of {n} pi " in r.stdout
        assert abs(4 * inside / n - np.pi) < 1e-3          # quasi Monte-Carlo: error ~ log(n)^2 / n


@needs_wheel
def test_sobol_tables_unavailable_is_a_clear_error(tmp_path: Path) -> None:
    """Without NVIDIA's libcurand (here: CPUIFY_NVIDIA_LIBCURAND names no library), the tables'
    functions and creating a Sobol generator return CURAND_STATUS_INITIALIZATION_FAILED with one
    line that names the function and says what to install."""
    nvcc(str(PROGRAMS / "curand_sobol_pi.cu"), "-o", str(tmp_path / "pi"), "-lcurand", cwd=tmp_path)
    env = dict(os.environ, CPUIFY_NVIDIA_LIBCURAND=str(tmp_path / "no-libcurand.so.10"))
    r = subprocess.run([str(tmp_path / "pi"), str(tmp_path)], capture_output=True, text=True, timeout=600,
                       check=False, env=env)
    assert r.returncode == 1 and r.stdout == "curandGetDirectionVectors32: 203\n"
    assert r.stderr.count("cpuify: curandGetDirectionVectors32: the Sobol direction vectors") == 1, r.stderr
    assert "no-libcurand.so.10" in r.stderr and "pip install 'cpuify[curand]'" in r.stderr
    assert "CPUIFY_NVIDIA_LIBCURAND" in r.stderr


def mtgp32_parameters() -> list[dict[str, list[int] | int]]:
    """The 200 parameter sets of NVIDIA's curand_mtgp32dc_p_11213.h, read from the wheel."""
    assert INCLUDE is not None
    text = (Path(INCLUDE) / "curand_mtgp32dc_p_11213.h").read_text()
    body = re.sub(r"/\*.*?\*/", "", text[text.index("mtgp32dc_params_fast_11213[]"):], flags=re.DOTALL)
    numbers = [int(x, 0) for x in re.findall(r"0x[0-9a-fA-F]+|\b\d+\b", body[body.index("= {"):])]
    sets = []
    for i in range(200):      # mexp, pos, sh1, sh2, tbl[16], tmp_tbl[16], flt_tmp_tbl[16], mask, sha1[21]
        e = numbers[i * 74:(i + 1) * 74]
        sets.append({"pos": e[1], "sh1": e[2], "sh2": e[3], "tbl": e[4:20], "tmp": e[20:36], "mask": e[52]})
    assert sets[0]["pos"] == 88 and sets[199]["mask"] == 0xFFF80000
    return sets


def mtgp32_sequence(p: dict, seed: int, n: int) -> list[int]:
    """The first n values of one parameter set's sequence (curand_mtgp32_host.h's
    mtgp32_init_state, curand_mtgp32_kernel.h's para_rec and temper), in Python."""
    m = 0xFFFFFFFF
    hidden = (p["tbl"][4] ^ (p["tbl"][8] << 16)) & m
    fill = hidden
    fill = (fill + (fill >> 16)) & m
    fill = (fill + (fill >> 8)) & m
    x = [(fill & 0xFF) * 0x01010101] * 351
    x[0], x[1] = seed & m, hidden
    for i in range(1, 351):
        x[i] ^= (1812433253 * (x[i - 1] ^ (x[i - 1] >> 30)) + i) & m
    out = []
    for j in range(n):
        v = (x[j] & p["mask"]) ^ x[j + 1]
        v ^= (v << p["sh1"]) & m
        y = v ^ (x[j + p["pos"]] >> p["sh2"])
        x.append(y ^ p["tbl"][y & 0xF])
        t = x[j + p["pos"] - 1]
        t ^= t >> 16
        t ^= t >> 8
        out.append(x[-1] ^ p["tmp"][t & 0xF])
    return out


def test_mtgp32_against_python_reference(sobol_mtgp32_dumps) -> None:
    """MTGP32's 32-bit results against a Python MTGP32 from the header's parameter sets, in
    NVIDIA's host layout: result r is value (r / (192 * 256)) * 256 + r % 256 of set
    (r / 256) mod 192; a new seed starts every set's sequence again."""
    out, _ = sobol_mtgp32_dumps
    got = load(out, "mtgp32_host_bits", "<u4")
    n12 = 2 * 192 * 256 + 1001 + 30003
    assert len(got) == n12 + 1000
    params = mtgp32_parameters()
    seed = 20240607
    checked = 0
    for s in (0, 1, 3, 57, 190, 191):
        seq = mtgp32_sequence(params[s], seed + s + 1, 768)
        for row in range(3):
            for k in (0, 1, 100, 255):
                r = row * 192 * 256 + s * 256 + k
                if r < n12:
                    assert got[r] == seq[row * 256 + k], (s, row, k)
                    checked += 1
        after = mtgp32_sequence(params[s], (0x100000007 ^ 1) + s + 1, 256) if s < 4 else []
        for k in range(len(after)):
            if s * 256 + k < 1000:
                assert got[n12 + s * 256 + k] == after[k], ("after the new seed", s, k)
    assert checked == 6 * 3 * 4 - 2 * 4      # row 2 ends inside set 121's chunk: not 190, 191
    uniform = load(out, "mtgp32_host_uniform", "<f4")
    np.testing.assert_array_equal(uniform, _uniform(got.astype(np.int64)).astype(np.float32))


@pytest.mark.parametrize("gen", ["mtgp32", "sobol32"])
def test_sobol_and_mtgp32_poisson_distribution(sobol_mtgp32_dumps, gen: str) -> None:
    """Poisson values (lambda 5) by inversion of the CDF: the probabilities of 0..12 as the
    Poisson distribution's (math), the mean and variance 5 (Sobol's quasi-random points give
    frequencies far closer than random ones would)."""
    import math
    out, _ = sobol_mtgp32_dumps
    x = load(out, f"poisson_{gen}", "<u4").astype(np.int64)
    assert len(x) == 200000
    pmf = [math.exp(-5.0) * 5.0 ** k / math.factorial(k) for k in range(13)]
    tolerance = 5 * np.sqrt(0.25 / len(x)) if gen == "mtgp32" else 1e-4
    for k in range(13):
        assert abs(np.mean(x == k) - pmf[k]) < tolerance, k
    assert abs(x.mean() - 5.0) < 6 * np.sqrt(5.0 / len(x)) and abs(x.var() / 5.0 - 1) < 0.02


# --- MT19937 ------------------------------------------------------------------------------
# tests/programs/curand_mt19937.cpp: seed 20240607, device and host generators; 32-bit values
# from two calls (78 * 65536 + 1001, then 70001: past every sequence's first generation), each
# distribution from two calls (65539, then 1001); a new seed and orderings; Poisson values.

MT19937_SEED = 20240607
MT19937_BITS = 78 * 65536 + 1001 + 70001
MT19937_DISTRIBUTION = 65536 + 3 + 1001
MT19937_ROW, MT19937_ROWS = 65536, 78        # results of a row; rows of a generation


@pytest.fixture(scope="module")
def mt19937_dumps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("curand_mt19937")
    nvcc(f"-I{PROGRAMS}", *OWN_DECLARATIONS, str(PROGRAMS / "curand_mt19937.cpp"), "-o", str(tmp / "mt"),
         "-lcurand", cwd=tmp)
    out = tmp / "out"
    out.mkdir()
    r = subprocess.run([str(tmp / "mt"), str(out)], capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0 and r.stderr == "", r.stdout + r.stderr
    return out, r.stdout


def mt19937_index() -> list[list[int]]:
    """[row][column]: the value of a generation (624 values of one sequence) at each of its 78
    rows x 8 columns, as runtime/curand_mt19937.h describes NVIDIA's layout."""
    first_row = [0, 113, 170, 283, 340, 397, 510, 567]
    index = [[-1] * 8 for _ in range(MT19937_ROWS)]
    index[0] = first_row
    rest = [v for v in range(624) if v not in first_row]
    for k, v in enumerate(rest):
        block, within = divmod(k, 56)
        index[1 + 7 * block + within % 7][within // 7] = v
    return index


def test_mt19937_first_sequence_is_numpy_mt19937(mt19937_dumps) -> None:
    """Columns 0..7 of every row hold sequence 0, the plain MT19937 seeded by init_genrand
    (NumPy's RandomState), in NVIDIA's order; results counted across the two calls."""
    out, _ = mt19937_dumps
    got = load(out, "host_bits", "<u4")
    assert len(got) == MT19937_BITS
    plain = np.random.RandomState(MT19937_SEED).randint(0, 2 ** 32, 2 * 624, dtype=np.uint64)
    index = mt19937_index()
    checked = 0
    for row in range(len(got) // MT19937_ROW + 1):
        generation, r = divmod(row, MT19937_ROWS)
        for c in range(8):
            p = row * MT19937_ROW + c
            if p < len(got):
                assert got[p] == plain[generation * 624 + index[r][c]], (row, c)
                checked += 1
    assert checked == 80 * 8       # rows 0..79: the last one begins at 5,177,344


def test_mt19937_other_sequences_as_nvidia_gives_them(mt19937_dumps) -> None:
    """Values of sequences 1, 4096 and 8191 (jumps of 2^2048, 2^2060 and 8191 * 2^2048 values:
    no Python reference is fast enough), hard-coded from NVIDIA's libcurand 10.4.5 host
    generator (seed 20240607, curandGenerate): every sequence's first value and one of its
    second generation."""
    out, _ = mt19937_dumps
    got = load(out, "host_bits", "<u4")
    nvidia = {8: 244234913, 9: 1748304237, MT19937_ROW + 8: 3282536147, 8 * 4096: 2288183900,
              77 * MT19937_ROW + 8 * 4096 + 3: 6240827, MT19937_ROW - 8: 275231571,
              MT19937_ROW - 1: 1890883454, 78 * MT19937_ROW + 8: 1928923356,
              79 * MT19937_ROW - 1: 1787815414}
    assert {p: int(got[p]) for p in nvidia} == nvidia


def test_mt19937_distributions(mt19937_dumps) -> None:
    """Every distribution is made from the same 32-bit values x (one each): uniforms
    x 2^-32 + 2^-33 (floats: that double, rounded), normals by inversion (Phi of the value is
    the uniform), log-normals exp of normals; the statistics of 66,540 values as NumPy's; the
    device generator gives the host one's values."""
    import math
    out, _ = mt19937_dumps
    bits = load(out, "host_bits", "<u4")[:MT19937_DISTRIBUTION].astype(np.float64)
    u = bits * 2.0 ** -32 + 2.0 ** -33
    np.testing.assert_array_equal(load(out, "host_udouble", "<f8"), u)
    np.testing.assert_array_equal(load(out, "host_uniform", "<f4"), u.astype(np.float32))
    normal = load(out, "host_normal", "<f4").astype(np.float64)
    phi = np.array([0.5 * math.erfc(-(x - 1.5) / 2.0 / math.sqrt(2)) for x in normal[::41]])
    np.testing.assert_allclose(phi, u[::41], rtol=3e-6, atol=3e-7)
    ndouble = load(out, "host_ndouble", "<f8")
    phi = np.array([0.5 * math.erfc(-(x + 0.5) / 0.25 / math.sqrt(2)) for x in ndouble[::41]])
    np.testing.assert_allclose(phi, u[::41], rtol=1e-9)
    n = len(u)
    for values, mean, sd in ((u, 0.5, math.sqrt(1 / 12)), (normal, 1.5, 2.0), (ndouble, -0.5, 0.25)):
        assert abs(values.mean() - mean) < 5 * sd / math.sqrt(n)
        assert abs(values.std() / sd - 1) < 5 / math.sqrt(2 * n)
    lognormal = load(out, "host_lognormal", "<f4").astype(np.float64)
    assert abs(np.log(lognormal).mean() - 0.5) < 5 * 0.75 / math.sqrt(n)
    lndouble = load(out, "host_lndouble", "<f8")
    np.testing.assert_allclose(np.log(lndouble), 0.25 + 2 * (ndouble + 0.5), rtol=1e-12, atol=1e-12)
    for f in sorted(out.glob("host_*.bin")):
        assert f.read_bytes() == (out / f.name.replace("host_", "device_")).read_bytes(), f.name


def test_mt19937_statuses_and_restarts(mt19937_dumps) -> None:
    """NVIDIA's statuses (from its libcurand 10.4.5): offsets refused, only the default and
    legacy orderings, odd normal counts taken; a new seed (its low 32 bits) and a change of
    ordering start the sequence again, the ordering it has already goes on."""
    out, stdout = mt19937_dumps
    st = {m.group(1): int(m.group(2)) for m in re.finditer(r"^status (\w+) (-?\d+)$", stdout, re.MULTILINE)}
    assert st == {"reseed": SUCCESS, "ordering_legacy": SUCCESS, "ordering_legacy_again": SUCCESS,
                  "offset": TYPE_ERROR, "ordering_best": OUT_OF_RANGE, "ordering_seeded": OUT_OF_RANGE,
                  "ordering_dynamic": OUT_OF_RANGE, "ordering_default": SUCCESS, "dimensions": TYPE_ERROR,
                  "normal_odd": SUCCESS, "long_long": TYPE_ERROR, "poisson_lambda_0": OUT_OF_RANGE}
    got = load(out, "reseed_legacy", "<u4")
    first = load(out, "host_bits", "<u4")
    assert np.array_equal(got[:100], first[:100])
    again = got[100:1100]           # seed 0x100000007: init_genrand(7)'s sequence 0 in columns 0..7
    assert again[0] == np.random.RandomState(7).randint(0, 2 ** 32, 1, dtype=np.uint64)[0]
    assert np.array_equal(got[1100:2100], again)
    assert not np.array_equal(got[2100:3100], again)       # legacy again: goes on from 1000


def test_mt19937_poisson_distribution(mt19937_dumps) -> None:
    """Poisson values (lambda 5) by inversion of the CDF (not NVIDIA's sequence): the
    probabilities of 0..12, the mean and the variance."""
    import math
    out, _ = mt19937_dumps
    x = load(out, "poisson", "<u4").astype(np.int64)
    assert len(x) == 200000
    for k in range(13):
        pk = math.exp(-5.0) * 5.0 ** k / math.factorial(k)
        assert abs(np.mean(x == k) - pk) < 5 * np.sqrt(pk * (1 - pk) / len(x)), k
    assert abs(x.mean() - 5.0) < 5 * np.sqrt(5.0 / len(x)) and abs(x.var() / 5.0 - 1) < 0.02


def test_mt19937_identical_to_nvidia_host_generator(mt19937_dumps, tmp_path: Path) -> None:
    """Every status and result as NVIDIA's libcurand host generator gives them, byte for byte,
    but double-precision normals and log-normals (NVIDIA's erfcinv is a few ulps off, as for
    MTGP32) and Poisson values (not NVIDIA's sequence)."""
    needs_nvidia_libcurand()
    libs = _nvidia_libcurand()
    assert libs is not None
    from cpuify.nvcc.toolkit import find_toolkit
    exe = tmp_path / "nvidia"
    subprocess.run(["g++", "-O1", f"-I{INCLUDE}", f"-I{find_toolkit().include}", str(PROGRAMS / "curand_mt19937.cpp"),
                    "-o", str(exe), *libs, *(f"-Wl,-rpath,{os.path.dirname(x)}" for x in libs)], check=True)
    nv = tmp_path / "out"
    nv.mkdir()
    r = subprocess.run([str(exe), str(nv), "host-only"], capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    ours, stdout = mt19937_dumps
    assert r.stdout == stdout
    exact = approximate = 0
    for f in sorted(nv.glob("*.bin")):
        if f.name == "poisson.bin":
            continue
        if f.name.endswith(("_ndouble.bin", "_lndouble.bin")):
            a, b = np.fromfile(f, "<f8"), load(ours, f.name[:-4], "<f8")
            scale = 0.25 if "_ndouble" in f.name else 0.5 * np.abs(a)    # the stddev, or value x stddev
            assert np.all(np.abs(a - b) <= 8 * np.spacing(16.0) * scale + 4 * np.spacing(np.abs(a))), f.name
            assert np.mean(a == b) > 0.6, f.name
            approximate += 1
        else:
            assert f.read_bytes() == (ours / f.name).read_bytes(), f.name
            exact += 1
    assert (exact, approximate) == (6, 2)
