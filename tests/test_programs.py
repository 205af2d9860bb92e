"""Whole CUDA programs built with `cpuify nvcc` (tests/programs/) and checked by their output.

The expected values are computed by hand (comments next to them) or with NumPy."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

PROGRAMS = Path(__file__).parent / "programs"
CPUIFY = [sys.executable, "-m", "cpuify.cli.main"]


def _have_nvcc() -> bool:
    try:
        from cpuify.nvcc.toolkit import find_toolkit
        find_toolkit()
    except Exception:
        return False
    return shutil.which("g++") is not None and shutil.which("ld") is not None


pytestmark = pytest.mark.skipif(not _have_nvcc(), reason="nvcc wheel (nvidia-cuda-nvcc) or g++ missing")


def _bad_launch_error() -> str:
    """CUDA 13's runtime (seen on an H100 with CUDA 13.0) answers a bad launch configuration
    with cudaErrorInvalidValue, CUDA 12 and before with cudaErrorInvalidConfiguration;
    cpuify's runtime follows the headers it is built against."""
    try:
        from cpuify.nvcc.toolkit import find_toolkit
        major = int(find_toolkit().version().split(".")[0])
    except Exception:
        return "cudaErrorInvalidValue"
    return "cudaErrorInvalidValue" if major >= 13 else "cudaErrorInvalidConfiguration"


BAD_LAUNCH = _bad_launch_error()


def nvcc(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CPUIFY, "nvcc", *args], cwd=cwd, capture_output=True, text=True)


def build_program(out: Path, name: str, *flags: str) -> Path:
    """tests/programs/NAME.cu built with `cpuify nvcc` into out/NAME (FLAGS before the source;
    -I tests/programs added)."""
    exe = out / name
    r = nvcc(*flags, f"-I{PROGRAMS}", str(PROGRAMS / f"{name}.cu"), "-o", str(exe), cwd=out)
    assert r.returncode == 0, r.stderr
    return exe


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("programs")
    return lambda name, *flags: build_program(out, name, *flags)


def run(exe: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def lines(r: subprocess.CompletedProcess[str]) -> list[str]:
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.splitlines()


def test_multi_kernel_pipeline(build) -> None:  # type: ignore[no-untyped-def]
    out = lines(run(build("pipeline")))
    h = (np.arange(100000) % 100).astype(np.float64)
    assert out[0] == f"sum {2 * h.sum():.1f}"                 # 9900000.0
    # transpose of a 37x53 iota: out[1] = in[1][0] = 53, out[37] = in[0][1] = 1
    assert out[1] == "transpose mismatches 0, out[1] 53, out[37] 1"


def test_pinned_managed_pitched_3d_memory(build) -> None:  # type: ignore[no-untyped-def]
    out = lines(run(build("memory")))
    assert out == [
        "pinned 1 1000",
        "mapped 1 1999 flags 2",                                # cudaHostAllocMapped == 2
        "managed 1 2998",
        "attr device=1 host=1 managed=1 unregistered=1",
        "memset 0x01010101",
        "pitch_ok 1 sub 1002 1005 3003",                        # rows 1..3, columns 2..5
        "memset2d 0 0 1002",
        "bad pitch cudaErrorInvalidValue",                     # as CUDA 13.0 on a GPU
        "3d 0 123 235",                                         # z*100 + y*10 + x
        "meminfo 1",
    ]


def test_streams_events_callbacks(build) -> None:  # type: ignore[no-untyped-def]
    out = lines(run(build("streams")))
    assert out == [
        "s1 65545 65546 s2 11 14 7",          # d1 = i + 1 + 10; d2 = i + 2, first 4 from d1
        "callbacks 3 in order 1",
        "query cudaSuccess cudaSuccess",
        "elapsed >= 20ms 1, < 10s 1",
        "unrecorded cudaErrorInvalidResourceHandle",
        "no timing cudaErrorInvalidResourceHandle",
        "priority 1",
    ]


def test_constant_and_device_symbols(build) -> None:  # type: ignore[no-untyped-def]
    out = lines(run(build("symbols")))
    x = np.arange(300, dtype=np.float32) * np.float32(0.01)
    y = 1 + x * (2 + x * (3 + x * np.float32(0.5)))
    assert out[0] == f"y[0] {y[0]:.4f} y[100] {y[100]:.4f} y[299] {y[299]:.4f} count 300"
    assert out[1:] == ["table 2 8 16", "address read 12 size 32", "offset read 14 16",
                       "too big cudaErrorInvalidValue"]


def test_templates_functors_structs(build) -> None:  # type: ignore[no-untyped-def]
    out = lines(run(build("templates")))
    assert out == [
        "float 16 749.5",               # 1 + 3 * 0.5 * i
        "int 61 2995",                  # 1 + 3 * 2 * i
        "double 8.5 375.25",            # 1 + 3 * 0.25 * i
        "functors -2.25 -4 -9 -16",
        "struct 105 106.5",             # (t + 10) * 0.5 + 100
    ]


def test_launch_configuration_limits(build) -> None:  # type: ignore[no-untyped-def]
    """Each of CUDA's launch limits (threads per block, each block dimension, grid y/z,
    zero dimensions) gives the launch-configuration error of the CUDA version the program is
    built against (BAD_LAUNCH), through <<<>>> and cudaLaunchKernel, not sticky; a launch at
    the limits runs."""
    out = lines(run(build("launch_limits")))
    cases = ["block 4096", "block x 1025", "block y 1025", "block z 65", "block 32x32x2",
             "block x 0", "grid y 65536", "grid z 65536", "grid x 0", "grid x 2^31"]
    assert out == [f"{c}: {BAD_LAUNCH} {BAD_LAUNCH} then cudaSuccess" for c in cases] + [
        f"cudaLaunchKernel block z 65: {BAD_LAUNCH}, last {BAD_LAUNCH}",
        f"good launch counted {2 * 65535 * 64}",       # and none of the refused ones ran
    ]


def test_launch_api_attributes_occupancy(build) -> None:  # type: ignore[no-untyped-def]
    out = lines(run(build("launch_api")))
    assert out == [
        "saxpy 1 8992",                 # three launches of y += 3 x
        "default max dynamic shared 49152",
        f"without opt-in {BAD_LAUNCH}",
        f"big shared sum {sum(range(16384))}",
        "bounded max threads 128",
        f"over bounds {BAD_LAUNCH}",
        "occupancy 4 block 1024",       # compute capability 7.5: 1024 threads per SM
    ]


def test_error_codes(build) -> None:  # type: ignore[no-untyped-def]
    r = run(build("errors"))
    assert lines(r) == [
        f"launch 2048 threads: {BAD_LAUNCH}",
        "after reading: cudaSuccess",                           # not sticky
        f"grid y 70000: peek {BAD_LAUNCH}, get {BAD_LAUNCH}, then cudaSuccess",
        "good launch: cudaSuccess",
        "cudaFree(e) -> cudaSuccess",
        "cudaFree(e) -> cudaErrorInvalidValue",
        "cudaMemcpyToSymbol(not_a_symbol, &v, sizeof(int)) -> cudaErrorInvalidSymbol",
        "cudaMemcpyToSymbol(dev_var, &v, sizeof(int)) -> cudaSuccess",
        "cudaMemcpy(d, &v, 4, (cudaMemcpyKind)42) -> cudaErrorInvalidMemcpyDirection",
        "cudaSetDevice(3) -> cudaErrorInvalidDevice",
        "cudaIpcGetEventHandle(&ipc, nullptr) -> cudaErrorNotSupported",  # (IPC: not implemented)
        "string: invalid configuration argument",
        "cudaDeviceSynchronize() -> cudaErrorAssert",           # sticky from here on
        "cudaMalloc(&e, 16) -> cudaErrorAssert",
        "cudaGetLastError() -> cudaErrorAssert",
        "cudaGetLastError() -> cudaSuccess",                    # cleared from the last-error slot
        "cudaDeviceReset() -> cudaSuccess",
        "cudaMalloc(&e, 16) -> cudaErrorDevicesUnavailable",    # no recovery after a kernel failure
    ]
    assert "cudaIpcGetEventHandle is not supported" in r.stderr
    assert "kernel 'check_positive(int const*)' failed in block (0, 0, 0)" in r.stderr


def test_out_of_bounds_write_names_kernel_and_block(build) -> None:  # type: ignore[no-untyped-def]
    # As on a GPU the program goes on: the launch reports cudaErrorIllegalAddress from the
    # next synchronizing call, sticky from there on.
    r = run(build("fault"))
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines() == ["before the launch", "after the kernel: cudaErrorIllegalAddress",
                        "then cudaMalloc: cudaErrorIllegalAddress"]
    assert "kernel 'scatter(int*, int)' failed in block (3, 0, 0): invalid memory access " \
        "writing address 0x" in r.stderr
    assert "(cudaErrorIllegalAddress)" in r.stderr


def test_null_write_is_contained(build) -> None:  # type: ignore[no-untyped-def]
    r = run(build("fault"), "null")
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines() == ["before the launch", "after the kernel: cudaErrorIllegalAddress",
                        "then cudaMalloc: cudaErrorIllegalAddress"]
    assert "kernel 'through_null(int*, int*)' failed in block (1, 0, 0): invalid memory access " \
        "writing address 0 (a NULL pointer)" in r.stderr.replace("0x0 ", "0 ")


def test_memcpy_of_bogus_pointers_is_invalid_value(build) -> None:  # type: ignore[no-untyped-def]
    r = run(build("fault"), "memcpy")
    assert lines(r) == ["before the launch",
                        "from bogus: cudaErrorInvalidValue", "to bogus: cudaErrorInvalidValue",
                        "memset bogus: cudaErrorInvalidValue", "2D from bogus: cudaErrorInvalidValue",
                        "last error: cudaErrorInvalidValue",
                        "after: cudaSuccess cudaSuccess 1 2 3 4"]
    assert "cudaMemcpy(dst=" in r.stderr


def test_watchdog_stops_a_spinning_kernel(build) -> None:  # type: ignore[no-untyped-def]
    r = run(build("fault"), "spin", env={"CPUIFY_KERNEL_TIMEOUT": "0.3"})
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines() == ["before the launch", "after the kernel: cudaErrorLaunchTimeout",
                        "then cudaMalloc: cudaErrorLaunchTimeout"]
    assert "kernel 'spin(int volatile*)' failed in block (2, 0, 0): ran longer than " \
        "CPUIFY_KERNEL_TIMEOUT" in r.stderr


def test_fork_while_other_threads_allocate_and_launch(build) -> None:  # type: ignore[no-untyped-def]
    r = run(build("fault"), "fork")
    assert lines(r) == ["children ok: 20 of 20"]


def test_ctrl_c_ends_a_spinning_program(build) -> None:  # type: ignore[no-untyped-def]
    # whole programs keep the default SIGINT action: the process ends, it does not hang
    import signal
    import time
    # (the spin waits for memory nobody writes: the no-progress detector would end the
    # launch after CPUIFY_DEADLOCK_TIMEOUT seconds, which a loaded machine may reach first)
    env = {**os.environ, "CPUIFY_DEADLOCK_TIMEOUT": "120"}
    p = subprocess.Popen([str(build("fault")), "spin"], stdout=subprocess.DEVNULL, env=env,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        time.sleep(1.0)                     # (spinning by then; if not, SIGINT ends it too)
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == -signal.SIGINT
    finally:
        p.kill()
        p.wait()


def test_printf_order(build) -> None:  # type: ignore[no-untyped-def]
    expected = []
    for r in range(3):
        expected += [f"host before {r}", f"device round {r} thread 0", f"device round {r} thread 1",
                     f"host after {r}"]
    assert lines(run(build("printf"))) == expected


def test_device_properties_and_args(build) -> None:  # type: ignore[no-untyped-def]
    out = lines(run(build("device"), "1000"))
    assert out[0].startswith("devices 1 current 0 warp 32 maxThreads 1024 maxGridY 65535 sms_match 1 managed 1")
    assert out[1] == "runtime version >= 12000: 1"
    assert out[2] == f"n 1000 sum {sum(range(1000))}"


def test_profile_summary(build) -> None:  # type: ignore[no-untyped-def]
    r = run(build("pipeline"), env={"CPUIFY_PROFILE": "1"})
    assert r.returncode == 0
    assert "cpuify profiling result" in r.stderr
    rows = {line.split()[-1] if "[" not in line else line[line.index("["):line.index("]") + 1]: line
            for line in r.stderr.splitlines() if "%" in line}
    assert any("block_sum" in line and " 2 " in line for line in r.stderr.splitlines())
    assert "[CUDA memcpy HtoD]" in rows and "[CUDA memcpy DtoH]" in rows
    assert "cpuify profiling" not in run(build("pipeline")).stderr


def test_rdc_makefile(tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.skip("make missing")
    src = tmp_path / "rdc"
    shutil.copytree(PROGRAMS / "rdc", src)
    nvcc_cmd = f"{sys.executable} -m cpuify.cli.main nvcc"
    r = subprocess.run(["make", f"NVCC={nvcc_cmd}"], cwd=src, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    out = lines(run(src / "app"))
    assert out == ["step done (device, particles.cu)"] * 3 + [
        # v: i%4 -> +1 per step, clamped at 4; x += v * 0.25
        "steps 3 p0 1.5 3 p3 6 4 p63 66 4",
        "last error cudaSuccess",
    ]


def test_separate_steps_dlink_and_host_cpp(tmp_path: Path) -> None:
    """-dc objects, an explicit -dlink step and a plain C++ file linked by g++-style steps."""
    src = PROGRAMS / "rdc"
    for f in ("main", "particles", "util"):
        r = nvcc("-dc", f"-I{src}", str(src / f"{f}.cu"), "-o", f"{f}.o", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    r = nvcc("-dlink", "main.o", "particles.o", "util.o", "-o", "dlink.o", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (tmp_path / "extra.cpp").write_text("int extra_value() { return 42; }\n")
    r = nvcc("-c", "extra.cpp", "-o", "extra.o", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = nvcc("main.o", "particles.o", "util.o", "dlink.o", "extra.o", "-o", "app", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = run(tmp_path / "app", env={"CPUIFY_PROFILE": "1"})
    assert lines(r)[-2] == "steps 3 p0 1.5 3 p3 6 4 p63 66 4"
    # main.cu launches step<<<1, n>>> with const n = 64; the kernel is in particles.cu: the
    # shape travels in main.o's device-code record to the device link
    assert any("step(" in line and "(3 specialized for their block shape)" in line
               for line in r.stderr.splitlines()), r.stderr


def test_dlink_with_c_in_a_library_build(tmp_path: Path) -> None:
    """A CMake project's separable-compilation library compiled with `-rdc=true -dlink` among
    its compile flags next to `-c` (Altis's mandelbrot): as with nvcc, that compiles relocatable
    device code (no device link); the executable's device link (`-shared -dlink` over its
    objects and the library, as CMake writes it) and a g++ link then give a working program.
    A -dlink step given a CUDA source compiles it first and writes the device-link object."""
    src = PROGRAMS / "dlink_lib"
    r = nvcc("-forward-unknown-to-host-compiler", "-std=c++17",
             "--generate-code=arch=compute_75,code=[compute_75,sm_75]", "-w", "-rdc=true", "-dlink",
             "-MD", "-MT", "weights.cu.o", "-MF", "weights.cu.o.d", "-x", "cu", "-rdc=true", "-c",
             str(src / "weights.cu"), "-o", "weights.cu.o", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "weights.cu" in (tmp_path / "weights.cu.o.d").read_text()
    subprocess.run(["ar", "qc", "libweights.a", "weights.cu.o"], cwd=tmp_path, check=True)
    r = nvcc("-rdc=true", "-c", str(src / "main.cu"), "-o", "main.cu.o", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = nvcc("-Xcompiler=-fPIC", "-Wno-deprecated-gpu-targets", "-shared", "-dlink", "main.cu.o",
             "-o", "device_link.o", "libweights.a", "-lcudadevrt", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    home = subprocess.run([*CPUIFY, "cuda-home"], capture_output=True, text=True, check=True).stdout.strip()
    runtime = [f"-L{home}/lib64", "libweights.a", "-lcudart_static", "-lrt", "-lpthread", "-ldl"]
    subprocess.run(["g++", "main.cu.o", "device_link.o", "-o", "app", *runtime], cwd=tmp_path, check=True)
    # 2 * (3 i + 1) summed over i < 100; h[7] = 2 * 22
    assert lines(run(tmp_path / "app")) == ["sum 29900 h[7] 44"]
    # -dlink given the library's source: compiled as -dc first; the device-link object alone
    r = nvcc("-dlink", "main.cu.o", str(src / "weights.cu"), "-o", "device_link2.o", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    subprocess.run(["g++", "main.cu.o", "device_link2.o", "-o", "app2", *runtime], cwd=tmp_path, check=True)
    assert lines(run(tmp_path / "app2")) == ["sum 29900 h[7] 44"]


def test_nvcc_threads_option_reaches_the_device_build(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`--threads 3` (nvcc's -t) is the process count the device build of each file gets,
    for a -c compile and for a -dlink step; CPUIFY_JOBS set in the environment comes first."""
    from cpuify.nvcc import device
    from cpuify.nvcc.driver import nvcc_main
    seen: list[int | None] = []
    original = device.compile_device_parallel

    def recording(*args, **kw):  # type: ignore[no-untyped-def]
        seen.append(args[4] if len(args) > 4 else kw.get("jobs"))
        return original(*args, **kw)
    monkeypatch.setattr(device, "compile_device_parallel", recording)
    monkeypatch.delenv("CPUIFY_JOBS", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.cu").write_text("__global__ void k(int *p) { p[threadIdx.x] = 1; }\n")
    assert nvcc_main(["--threads", "3", "-c", "k.cu", "-o", "k.o"]) == 0
    # (-rdc: the kernels are compiled at the device link)
    assert nvcc_main(["-rdc=true", "-c", "k.cu", "-o", "k_rdc.o"]) == 0
    assert nvcc_main(["-t", "2", "-dlink", "k_rdc.o", "-o", "dl.o"]) == 0
    monkeypatch.setenv("CPUIFY_JOBS", "1")
    assert nvcc_main(["-t", "4", "-c", "k.cu", "-o", "k2.o"]) == 0
    assert seen == [3, 2, 1]


def test_launch_shape_specialization(build) -> None:  # type: ignore[no-untyped-def]
    """Kernels launched with block shapes known at build time run a block function
    compiled for the shape; a shape known only at run time runs the generic one; results
    are the same either way."""
    exe = build("shapes")
    for threads in ("64", "256", "1024"):
        r = run(exe, threads, env={"CPUIFY_PROFILE": "1"})
        # sum of i % 7 for i < 10000: 1428 full cycles of 21, then 0..3
        assert lines(r) == ["sums 29994 29994 expect 29994", "blur mismatches 0"]
        stderr = r.stderr.splitlines()
        # block_sum: 256 (a const) and 128 (literals) are specialized, argv's shape only
        # when it equals one of them
        want = "3" if threads == "256" else "2"
        assert any("block_sum" in line and f"({want} specialized" in line for line in stderr), r.stderr
        assert any("stencil::blur<float>" in line and "(1 specialized" in line for line in stderr), r.stderr


def test_launch_shapes_declared_together(build) -> None:  # type: ignore[no-untyped-def]
    """Block shapes of declarations with several declarators (`dim3 grid(2, 1), block(16, 16);`,
    `dim3 one, flat = dim3(64), pair{8, 4};`, `const int width = 32, n = width * 16, quarter =
    n / 4;`) are found at build time: every launch of the program runs specialized code."""
    r = run(build("shape_declarators"), env={"CPUIFY_PROFILE": "1"})
    # (x + 1000 y) * 2 * 3 * 5 * 7; h[33] is x = 1, y = 1
    assert lines(r) == ["mismatches 0 h[33] 210210"]
    stderr = r.stderr.splitlines()
    # tile: (16, 16); scale: (64), (8, 4), (128) and dim3's default (1, 1, 1)
    assert any("tile(" in line and "(1 specialized" in line for line in stderr), r.stderr
    assert any("scale(" in line and "(4 specialized" in line for line in stderr), r.stderr


def test_launch_shape_specialization_off(tmp_path: Path) -> None:
    env = {**os.environ, "CPUIFY_SPECIALIZE": "0"}
    r = subprocess.run([*CPUIFY, "nvcc", f"-I{PROGRAMS}", str(PROGRAMS / "shapes.cu"), "-o", "s"],
                       cwd=tmp_path, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    r = run(tmp_path / "s", "512", env={"CPUIFY_PROFILE": "1"})
    assert lines(r) == ["sums 29994 29994 expect 29994", "blur mismatches 0"]
    assert "specialized" not in r.stderr


def test_cpuify_run_and_flags(tmp_path: Path) -> None:
    env = {**os.environ, "CPUIFY_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [*CPUIFY, "run", str(PROGRAMS / "device.cu"), f"-I{PROGRAMS}", "--", "50"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == f"n 50 sum {sum(range(50))}"
    # second run: cached executable
    # (the executable, the entry naming it with its SHA-256, the headers its build read)
    programs = list((tmp_path / "cache" / "programs").iterdir())
    assert len([p for p in programs if p.suffix not in (".ref", ".deps")]) == 1
    r = subprocess.run(cmd[:-1] + ["7"], capture_output=True, text=True, env=env)
    assert r.stdout.splitlines()[-1] == "n 7 sum 21"
    # unknown and no-effect flags warn; -cubin is refused with a message
    r = nvcc("-c", "-Xptxas", "-v", "--bogus-flag", f"-I{PROGRAMS}", str(PROGRAMS / "printf.cu"),
             "-o", "p.o", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "'-Xptxas -v' has no effect" in r.stderr and "unknown option '--bogus-flag'" in r.stderr
    r = nvcc("-cubin", str(PROGRAMS / "printf.cu"), cwd=tmp_path)
    assert r.returncode == 1 and "-cubin is not supported" in r.stderr
    assert "Traceback" not in r.stderr
    r = nvcc(str(tmp_path / "missing.cu"), cwd=tmp_path)
    assert r.returncode == 1 and "missing.cu: no such file" in r.stderr
    r = subprocess.run([*CPUIFY, "nvcc", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "make NVCC=" in r.stdout


def test_nvcc_compile_error_is_reported(tmp_path: Path) -> None:
    (tmp_path / "bad.cu").write_text("__global__ void k() { undeclared_thing(); }\nint main() {}\n")
    r = nvcc("bad.cu", "-o", "bad", cwd=tmp_path)
    assert r.returncode == 1
    assert "undeclared_thing" in r.stderr and "Traceback" not in r.stderr


def test_several_devices_on_request(build) -> None:  # type: ignore[no-untyped-def]
    """CPUIFY_DEVICE_COUNT=3: a program that gives each of 3 devices a slice of work (OLCF's
    training hw7 wants 4) runs; results match the host's computation; peer access between
    any two devices, with CUDA's errors; distinct PCI bus ids; by default one device, and
    device 1 is an invalid ordinal."""
    exe = build("multi_device")
    assert lines(run(exe, env={"CPUIFY_DEVICE_COUNT": "3"})) == [
        "devices: 3", "mismatches: 0", "current: 2", "new host thread: 0",
        "cudaSetDevice(count): cudaErrorInvalidDevice",
        "properties: cudaSuccess cudaSuccess, uuids distinct",
        "peer copy: 6",                 # y[2][0] = 2 * (0 + 2) + 2
        "can access peer: 1, itself: 0",
        # enabling twice fails as in CUDA; a device is not its own peer; no flags exist (the
        # errors CUDA 13.0 gives on an H200 for the device itself and for flags)
        "enable: cudaSuccess cudaErrorPeerAccessAlreadyEnabled cudaErrorPeerAccessUnsupported "
        "cudaErrorInvalidValue, disable: cudaSuccess cudaErrorPeerAccessNotEnabled",
        "peer kernel: 0 wrong",          # x[2][i] = 1 * y[0][i] + 1 = 2 i + 1
        "p2p attributes: rank 0 access 1 atomics 1, same device cudaErrorInvalidDevice",
        "pci: 0000:02:00.0 -> 2, bus ids 0 2 (attribute 2), board 1 1 group 0 0",
        "pci id in 5 bytes: cudaErrorInvalidValue '0000'",
        "pointer devices: 0 2",
    ]
    assert lines(run(exe))[:3] == ["devices: 1", "mismatches: 0", "current: 0"]
    r = run(exe, env={"CPUIFY_DEVICE_COUNT": "0"})
    assert lines(r)[0] == "devices: 1" and "CPUIFY_DEVICE_COUNT=0" in r.stderr


def _have_nvml_header() -> bool:
    try:
        from cpuify.nvcc.cuda_home import nvml_header
        from cpuify.nvcc.toolkit import find_toolkit
        return nvml_header(find_toolkit()) is not None
    except Exception:
        return False


@pytest.mark.skipif(not _have_nvml_header(), reason="nvml.h (the nvidia-nvml-dev wheel) missing")
def test_several_devices_in_the_driver_api_and_nvml(tmp_path: Path) -> None:
    """CPUIFY_DEVICE_COUNT=3 as the driver API and NVML see it: the same 3 devices as the
    runtime, a primary context per device that moves the runtime's current device (and
    follows cudaSetDevice), peer access whose state the runtime shares, PCI bus ids and UUIDs
    that tell the devices apart; one device by default."""
    r = nvcc(f"-I{PROGRAMS}", str(PROGRAMS / "multi_device_driver.cu"), "-o", "drv", "-lcuda",
             "-lnvidia-ml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = run(tmp_path / "drv", env={"CPUIFY_DEVICE_COUNT": "3"})
    assert lines(out) == [
        "driver: 3 devices, last 2, past the end 101",          # CUDA_ERROR_INVALID_DEVICE
        "pci bus 2 0000:02:00.0 -> 2, uuids distinct",
        "contexts distinct, current device 2 (runtime 2)",
        "after cudaSetDevice(1): context device 1",
        "push: runtime 0, pop: c0, runtime 1",
        "create: 0, runtime 2, after destroy 1",
        "kernel on device 2: 20 21 22 23",                      # 10 * 2 + threadIdx.x
        # 704 CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, 217 CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
        # 705 CUDA_ERROR_PEER_ACCESS_NOT_ENABLED
        "peer: can 1 itself 0 access 1, enable 0 704 (runtime cudaErrorPeerAccessAlreadyEnabled) "
        "own 217, disable 0 705",
        "nvml: 3 devices, past the end 2, last index 2 minor 2",  # NVML_ERROR_INVALID_ARGUMENT
        "nvml pci 00000000:02:00.0 (found 1), uuids distinct (found 1)",
        # NVML_P2P_STATUS_OK, NVML_P2P_STATUS_NOT_SUPPORTED (for a device and itself too, as
        # NVML answers on an H200)
        "nvml p2p read 0 nvlink 5 itself 5",
    ]
    one = lines(run(tmp_path / "drv"))
    assert one[0] == "driver: 1 devices, last 0, past the end 101"
    assert one[8].startswith("nvml: 1 devices, past the end 2, last index 0")
