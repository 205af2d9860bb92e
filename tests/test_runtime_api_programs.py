"""The CUDA runtime API surface of `cpuify nvcc` programs (tests/programs/): legacy CUDA
(functions and cudaDeviceProp fields CUDA 13 removed), unimplemented functions, the profiler
API, NVTX, the cuRAND device API, the device properties cpuify reports, and kernels cpuify
refuses (a build error, or a launch error when deferred).

cuRAND's generators are checked against NumPy implementations written here from their
published definitions (Philox4x32-10: Salmon et al., SC'11; XORWOW: Marsaglia 2003 with
cuRAND's seeding and its 2^67-draw subsequence spacing, jumped with a GF(2) matrix power)."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

PROGRAMS = Path(__file__).parent / "programs"
CPUIFY = [sys.executable, "-m", "cpuify.cli.main"]


def _toolkit_include() -> Path | None:
    try:
        from cpuify.nvcc.toolkit import find_toolkit
        return Path(find_toolkit().include)
    except Exception:
        return None


INCLUDE = _toolkit_include()
pytestmark = pytest.mark.skipif(INCLUDE is None or shutil.which("g++") is None,
                                reason="nvcc wheel (nvidia-cuda-nvcc) or g++ missing")


def _have_header(rel: str) -> bool:
    from cpuify.nvcc.headers import _wheel_include_dirs
    from cpuify.nvcc.toolkit import find_toolkit
    tk = find_toolkit()
    return (Path(tk.include) / rel).is_file() or bool(_wheel_include_dirs(tk, rel))


def nvcc(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CPUIFY, "nvcc", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def build(tmp: Path, name: str, *flags: str, exe: str | None = None) -> Path:
    out = tmp / (exe or name)
    r = nvcc(*flags, f"-I{PROGRAMS}", str(PROGRAMS / f"{name}.cu"), "-o", str(out), cwd=tmp)
    assert r.returncode == 0, r.stderr
    return out


def run(exe: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stdout + r.stderr
    return r


@pytest.fixture(scope="module")
def legacy_exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("legacy"), "legacy")


def _original_prop_size(tmp: Path) -> int:
    """sizeof(struct cudaDeviceProp) in the toolkit's own, unmodified header."""
    src = tmp / "size.c"
    src.write_text("#include <stdio.h>\n#include <cuda_runtime_api.h>\n"
                   'int main(void) { printf("%zu\\n", sizeof(struct cudaDeviceProp)); return 0; }\n')
    subprocess.run(["cc", f"-I{INCLUDE}", str(src), "-o", str(tmp / "size")], check=True)
    return int(subprocess.run([str(tmp / "size")], check=True, capture_output=True, text=True).stdout)


def test_legacy_calls_and_removed_prop_fields(legacy_exe: Path, tmp_path: Path) -> None:
    r = run(legacy_exe)
    out = r.stdout.splitlines()
    # the removed fields live in the struct's reserved space: same size as NVIDIA's struct,
    # so code compiled against the unmodified header calls the same runtime
    assert out[0] == f"sizeof {_original_prop_size(tmp_path)}"
    assert out[1] == "cc 7.5"                     # cpuify nvcc's default PTX target
    # copies of a stream run while another stream's kernel runs (tests/test_streams.py)
    assert out[2] == "legacy fields clock 1 overlap 1 timeout 0 mode 0 memclock 1"
    # what cpuify does not do is not claimed (cooperative launch with grid sync it does;
    # kernels run one at a time; two streams' copies run at once: two copy engines)
    assert out[3] == "concurrent 0 cooperative 1 1 pools 0 0 async engines 2"
    # compute capability 7.5's limits per SM (CUDA programming guide)
    assert out[4] == "per SM threads 1024 blocks 16 shared 65536 optin 65536 regs 65536"
    assert out[5] == "heap 1048576 cache 1 double 2.5 banks 1"
    assert out[6:9] == ["ipc cudaErrorNotSupported", "ipc again cudaErrorNotSupported",
                        "last cudaErrorNotSupported"]
    assert out[9] == f"sum {sum(i + 1 for i in range(1000))}"        # p[i] = i + 1, summed
    assert out[10] == f"managed {sum(2 * i + i + 1 for i in range(1000))}"    # 2i, then + i + 1
    # the unimplemented function named once on stderr, whatever the number of calls
    named = [ln for ln in r.stderr.splitlines() if "cudaIpcGetMemHandle" in ln]
    assert len(named) == 1 and "not supported" in named[0]


def test_compute_capability_is_configurable(legacy_exe: Path) -> None:
    out = run(legacy_exe, env={"CPUIFY_COMPUTE_CAPABILITY": "8.6"}).stdout.splitlines()
    assert out[1] == "cc 8.6"
    assert out[4] == "per SM threads 1536 blocks 16 shared 102400 optin 101376 regs 65536"
    r = run(legacy_exe, env={"CPUIFY_COMPUTE_CAPABILITY": "banana"})
    assert r.stdout.splitlines()[1] == "cc 7.5"
    assert "CPUIFY_COMPUTE_CAPABILITY='banana'" in r.stderr


def test_compute_capability_follows_the_compiled_target(tmp_path: Path) -> None:
    exe = build(tmp_path, "legacy", "-arch=sm_80")
    out = run(exe).stdout.splitlines()
    assert out[1] == "cc 8.0"
    assert out[4] == "per SM threads 2048 blocks 32 shared 167936 optin 166912 regs 65536"


def test_legacy_layer_can_be_turned_off(tmp_path: Path) -> None:
    r = nvcc("--cpuify-no-legacy", f"-I{PROGRAMS}", str(PROGRAMS / "legacy.cu"), "-o", "x", cwd=tmp_path)
    assert r.returncode != 0
    assert "cudaThreadSynchronize" in r.stderr
    r = nvcc(f"-I{PROGRAMS}", str(PROGRAMS / "legacy.cu"), "-o", "x", cwd=tmp_path,
             env={"CPUIFY_LEGACY": "0"})
    assert r.returncode != 0 and "clockRate" in r.stderr


def test_refused_kernel_fails_the_build(tmp_path: Path) -> None:
    r = nvcc(str(PROGRAMS / "refused.cu"), "-o", "refused", cwd=tmp_path)
    assert r.returncode == 1
    assert not (tmp_path / "refused").exists()
    first = r.stderr.splitlines()[0]
    # the .cu line of the call (the file as named on the command line), the kernel, the
    # construct, then the PTX line
    assert first.startswith(f"{PROGRAMS}/refused.cu:5: error: kernel 'apply(int*)' cannot run on "
                            "the CPU: 'bar.sync' in the recursive device function '_Z5depthi'"), r.stderr
    assert "(PTX line " in r.stderr and "fill" not in r.stderr
    assert "--cpuify-defer-refused" in r.stderr


def test_refused_kernel_deferred_to_launch(tmp_path: Path) -> None:
    r = nvcc("--cpuify-defer-refused", str(PROGRAMS / "refused.cu"), "-o", "refused", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"{PROGRAMS}/refused.cu:5: warning: kernel 'apply(int*)'" in r.stderr
    res = run(tmp_path / "refused")
    assert res.stdout.splitlines() == ["fill cudaSuccess", "apply cudaErrorNotSupported", "h[5] 5"]
    assert "kernel 'apply(int*)' cannot run on the CPU" in res.stderr


def test_refused_kernel_message_once_per_kernel(tmp_path: Path) -> None:
    # every launch of the refused kernel returns the error; the reason is printed once
    r = nvcc("--cpuify-defer-refused", str(PROGRAMS / "refused_thrice.cu"), "-o", "x", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    res = run(tmp_path / "x")
    assert res.stdout.splitlines() == ["scale cudaErrorNotSupported", "count cudaSuccess"] * 3 + ["h[7] 3"]
    assert res.stderr.count("kernel 'scale(int*)' cannot run on the CPU") == 1, res.stderr


def _depth(n: int) -> int:
    r = 0
    for k in range(1, n + 1):
        r = (r * 3 + k) & 0xFFFFFFFF
    return r - 2**32 if r >= 2**31 else r


def test_recursion_and_the_stack_size_limit(tmp_path: Path) -> None:
    exe = build(tmp_path, "recursion")
    fact20 = math.factorial(20)
    assert run(exe).stdout.splitlines() == ["stack 1024", "launch cudaSuccess",
                                            f"depth {_depth(20)} fact(20) {fact20}"]
    # too deep for the default 1 KB: a launch error naming the kernel, not a crash
    r = subprocess.run([str(exe), "100000"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # (an H100 reports a stack overflow as an illegal address too)
    assert r.stdout.splitlines()[:2] == ["stack 1024", "launch cudaErrorIllegalAddress"]
    assert "kernel 'run(int*, long long*, int)' failed in block (0, 0, 0): stack overflow" in r.stderr
    assert "cudaLimitStackSize" in r.stderr
    # with a larger stack it runs
    assert run(exe, "100000", str(8 << 20)).stdout.splitlines() == [
        f"stack {8 << 20}", "launch cudaSuccess", f"depth {_depth(100000)} fact(20) {fact20}"]


def test_dynamic_parallelism(tmp_path: Path) -> None:
    exe = build(tmp_path, "dynamic_parallelism", "-rdc=true", "-lcudadevrt")
    # children: p[32 t] = 2 t + 1, p[32 t + k] = 1; grandchildren: p[1024 + 4 i + t] = 100 i + t
    children = sum(2 * t + 1 + 31 for t in range(8))
    grandchildren = sum(100 * i + t for i in range(8) for t in range(4))
    assert run(exe).stdout.splitlines() == [
        "cudaSuccess", f"p[32] 3 p[33] 1 p[1024+4*3+2] 302 total {children + grandchildren}"]


@pytest.mark.skipif(not _have_header("nvtx3/nvToolsExt.h"), reason="pip install nvidia-nvtx")
def test_nvtx_annotations(tmp_path: Path) -> None:
    exe = build(tmp_path, "nvtx", "-lnvToolsExt")
    assert run(exe).stdout.splitlines() == ["h[255] 510"]


# ------------------------------------------------------------------------------------
# cuRAND device API against NumPy

M32 = 0xFFFFFFFF


def philox4x32_10(ctr: list[int], key: list[int]) -> list[int]:
    c, k = list(ctr), list(key)
    for rnd in range(10):
        if rnd:
            k = [(k[0] + 0x9E3779B9) & M32, (k[1] + 0xBB67AE85) & M32]
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & M32, (p0 >> 32) ^ c[3] ^ k[1], p0 & M32]
    return c


def philox_stream(seed: int, subsequence: int, offset: int, n: int) -> list[int]:
    """cuRAND's Philox4_32_10 draws: the 128-bit counter holds the subsequence in its upper
    64 bits and the block index (4 draws per block) in its lower 64 bits."""
    key = [seed & M32, seed >> 32 & M32]
    out = []
    for i in range(offset, offset + n):
        ctr = (subsequence << 64) + i // 4
        out.append(philox4x32_10([ctr >> (32 * w) & M32 for w in range(4)], key)[i % 4])
    return out


def _xorwow_step(v: list[int]) -> list[int]:
    t = v[0] ^ (v[0] >> 2)
    return [v[1], v[2], v[3], v[4], (v[4] ^ (v[4] << 4) ^ t ^ (t << 1)) & M32]


def _bits(v: list[int]) -> np.ndarray:
    return np.array([(v[w] >> b) & 1 for w in range(5) for b in range(32)], dtype=np.int64)


def _words(bits: np.ndarray) -> list[int]:
    return [sum(int(bits[w * 32 + b]) << b for b in range(32)) for w in range(5)]


def _xorwow_jump_2_67() -> np.ndarray:
    """The GF(2) matrix of 2^67 XORWOW steps (the state update is linear in the 160 bits)."""
    m = np.zeros((160, 160), dtype=np.int64)
    for j in range(160):
        e = [0] * 5
        e[j // 32] = 1 << (j % 32)
        m[:, j] = _bits(_xorwow_step(e))
    for _ in range(67):
        m = (m @ m) % 2
    return m


def xorwow_stream(seed: int, subsequence: int, n: int, jump: np.ndarray) -> list[int]:
    s0, s1 = (seed & M32) ^ 0xAAD26B49, (seed >> 32) ^ 0xF7DCEFDD
    t0, t1 = (1099087573 * s0) & M32, (2591861531 * s1) & M32
    d = (6615241 + t1 + t0) & M32
    v = [(123456789 + t0) & M32, 362436069 ^ t0, (521288629 + t1) & M32, 88675123 ^ t1,
         (5783321 + t0) & M32]
    bits = _bits(v)
    for _ in range(subsequence):        # the Weyl counter d moves by 362437 * 2^67 = 0 mod 2^32
        bits = (jump @ bits) % 2
    v = _words(bits)
    out = []
    for _ in range(n):
        v = _xorwow_step(v)
        d = (d + 362437) & M32
        out.append((v[4] + d) & M32)
    return out


def uniform(x: int) -> float:
    """curand_uniform: x * 2^-32 + 2^-33 in single precision, in (0, 1]."""
    return float(np.float32(x) * np.float32(2.0 ** -32) + np.float32(2.0 ** -33))


def box_muller(x: int, y: int) -> tuple[float, float]:
    u = uniform(x)
    v = (y * 2.0 ** -32 + 2.0 ** -33) * 2 * math.pi
    s = math.sqrt(-2 * math.log(u))
    return s * math.sin(v), s * math.cos(v)


@pytest.mark.skipif(not _have_header("curand_kernel.h"),
                    reason="cuRAND headers: pip install 'cpuify[curand]' (nvidia-curand)")
def test_curand_device_api_matches_reference(tmp_path: Path) -> None:
    exe = build(tmp_path, "curand_device", "-lcurand")
    seed = 987654321123
    rows = [ln.split() for ln in run(exe, str(seed)).stdout.splitlines()]
    assert len(rows) == 8
    jump = _xorwow_jump_2_67()
    for name, t, *vals in rows:
        thread = int(t)
        raw = [int(x) for x in vals[:6]]
        uni, n0, n1 = (float(x) for x in vals[6:])
        if name == "xorwow":
            ref = xorwow_stream(seed, thread, 11, jump)
        else:
            ref = philox_stream(seed, thread, 5, 11)
        assert raw == ref[:6], (name, thread)
        assert uni == pytest.approx(uniform(ref[6]), abs=1e-7)
        # __sincosf and logf on the GPU are approximate: a few ulps apart
        r0, r1 = box_muller(ref[7], ref[8])
        assert (n0, n1) == pytest.approx((r0, r1), abs=2e-5)


def _legacy_shuffles_reference(h: list[int]) -> list[list[float]]:
    """What the legacy shuffles of legacy_shuffles.cu give, lane by lane, with the semantics
    of their _sync forms over the lanes active at the call: a source lane that is not active
    (past the partial warp's end, in the other way of the branch) gives 0, one outside the
    width segment or past the warp's edge the lane's own value."""
    n = len(h)
    warps = [list(range(w, min(w + 32, n))) for w in range(0, n, 32)]
    ints, floats, doubles, u64 = [0] * n, [0.0] * n, [0.0] * n, [0] * n
    for lanes in warps:
        base, active = lanes[0], len(lanes)

        def src(values, lane, s, active_lanes):        # the value lane reads from lane s
            return values[base + s] if s in active_lanes else 0
        v = {i: h[base + i] for i in range(active)}
        for o in (16, 8, 4, 2, 1):
            v = {i: v[i] + (v[i + o] if i + o < 32 and i + o < active else (v[i] if i + o >= 32 else 0))
                 for i in range(active)}
        for i in range(active):
            ints[base + i] = v[0]
            f = [h[base + j] * 0.5 for j in range(active)]
            seg = i // 8 * 8
            up = f[i - 1] if i - 1 >= seg else f[i]
            xor = f[i ^ 1] if (i ^ 1) < active else 0.0
            floats[base + i] = xor + up
            s = (i ^ 3) % 16 + i // 16 * 16
            doubles[base + i] = h[base + s] * 0.25 if s < active else 0.0
            w = h[base + i] << 33
            if i < 16:
                w = (h[base + i + 2] << 33) if i + 2 < 16 and i + 2 < active else (w if i + 2 >= 32 else 0)
            u64[base + i] = w
        del src
    return [ints, floats, doubles, u64]


@pytest.mark.parametrize("home_include", [False, True])
def test_legacy_warp_shuffles(tmp_path: Path, home_include: bool) -> None:
    # with -I$(cpuify cuda-home)/include, as Makefiles pass it, cuda_runtime_api.h includes
    # the legacy header before the _sync shuffles are declared (Parboil broke on that once)
    flags = []
    if home_include:
        home = subprocess.run([*CPUIFY, "cuda-home"], capture_output=True, text=True, check=True)
        flags = [f"-I{home.stdout.strip()}/include"]
    out = run(build(tmp_path, "legacy_shuffles", *flags)).stdout.splitlines()
    h = [(i * 7) % 11 + 1 for i in range(40)]
    want = _legacy_shuffles_reference(h)
    assert [int(x) for x in out[0].split()] == want[0]
    assert [float(x) for x in out[1].split()] == want[1]
    assert [float(x) for x in out[2].split()] == want[2]
    assert [int(x) for x in out[3].split()] == want[3]


def test_printf_and_assert_without_their_headers(tmp_path: Path) -> None:
    # CUDA <= 12's cuda_runtime.h gave .cu files <stdio.h> and assert; nvcc 13 alone says
    # "identifier printf is undefined"
    r = run(build(tmp_path, "legacy_no_stdio"))
    assert r.stdout.splitlines() == ["device 4", "host 4"]          # sqrt(16) on the device
    off = nvcc(f"-I{PROGRAMS}", str(PROGRAMS / "legacy_no_stdio.cu"), "-o", str(tmp_path / "off"),
               cwd=tmp_path, env={"CPUIFY_LEGACY": "0"})
    assert off.returncode != 0 and 'identifier "printf" is undefined' in off.stderr


def test_shared_memory_reads_zero_at_the_first_launch(tmp_path: Path) -> None:
    # a shared variable read before any thread wrote it: 0, not what the heap held
    exe = build(tmp_path, "shared_first_read")
    r = run(exe)
    assert r.stdout.split() == ["nonzero", "0", "of", "2048"], r.stdout


def test_small_overrun_past_a_device_array_stays_in_its_pages(tmp_path: Path) -> None:
    """Device memory is page-granular as on a GPU: a kernel writing up to a block past the end
    of its array (no bounds check; the CUDA Handbook's scanFan) leaves the C heap intact (it
    aborted with "double free or corruption" in a later malloc/free) and the in-bounds
    results right."""
    exe = build(tmp_path, "overrun")
    assert run(exe).stdout.split() == ["no", "error", "0"]
