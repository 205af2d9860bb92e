"""NVML (`nvml.h`, `-lnvidia-ml`) in `cpuify cuda-home`: a program of our own that queries the
device through NVML and through the CUDA runtime, built with `cpuify nvcc ... -lnvidia-ml`
and with g++ against cuda-home, and checked against cudaGetDeviceProperties/cudaMemGetInfo
and against what /proc/cpuinfo and sysfs say (read here, independently of the library)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cpuify.nvcc.cuda_home import (nvml_api_names, nvml_error_text, nvml_return_values,
                                   nvml_stub_source)

CPUIFY = [sys.executable, "-m", "cpuify.cli.main"]
SRC = str(Path(__file__).resolve().parent.parent / "src")


def _nvml_header() -> str | None:
    try:
        from cpuify.nvcc.cuda_home import nvml_header
        from cpuify.nvcc.toolkit import find_toolkit
        return nvml_header(find_toolkit())
    except Exception:
        return None


needs_nvml = pytest.mark.skipif(
    not (_nvml_header() and all(shutil.which(t) for t in ("g++", "gcc", "nm"))),
    reason="nvml.h (the nvidia-nvml-dev wheel), the nvcc wheel or g++ missing")

NVML_H = """
typedef enum nvmlReturn_enum
{
    NVML_SUCCESS = 0,                   //!< The operation was successful
    NVML_ERROR_UNINITIALIZED = 1,       //!< NVML was not first initialized = 7
    NVML_ERROR_NOT_SUPPORTED = 3,       /* not available */
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;
nvmlReturn_t DECLDIR nvmlInit(void);
nvmlReturn_t DECLDIR nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp);
const DECLDIR char* nvmlErrorString(nvmlReturn_t result);
"""


def test_nvml_stubs_cover_every_declared_name_and_the_error_texts() -> None:
    names = nvml_api_names(NVML_H, ["nvmlReturn_t nvmlInit_v2(void);\n"])
    assert names == {"nvmlInit", "nvmlInit_v2", "nvmlDeviceGetTemperature"}
    returns = nvml_return_values(NVML_H)
    assert returns == {0: "NVML_SUCCESS", 1: "NVML_ERROR_UNINITIALIZED", 3: "NVML_ERROR_NOT_SUPPORTED",
                       15: "NVML_ERROR_GPU_IS_LOST", 999: "NVML_ERROR_UNKNOWN"}
    assert nvml_error_text("NVML_ERROR_NOT_SUPPORTED") == "Not Supported"
    assert nvml_error_text("NVML_ERROR_GPU_IS_LOST") == "GPU Is Lost"
    src = nvml_stub_source(names, {"nvmlInit", "nvmlInit_v2"}, returns)
    assert "int nvmlDeviceGetTemperature(void)" in src
    assert "int nvmlInit(" not in src and "int nvmlInit_v2(" not in src
    assert 'case 3: return "Not Supported";' in src and "return 3;" in src


PROGRAM = r"""
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>
#include <nvml.h>

__global__ void twice(int *x) { x[threadIdx.x] *= 2; }

#define SHOW(what, call) do { nvmlReturn_t r_ = (call); \
    printf("%s %d %s\n", what, (int)r_, nvmlErrorString(r_)); } while (0)

int main() {
    nvmlDevice_t dev = 0;
    unsigned count = 0, mhz = 0;
    SHOW("before_init", nvmlDeviceGetCount(&count));
    SHOW("init", nvmlInit());
    SHOW("count", nvmlDeviceGetCount(&count));
    printf("count_value %u\n", count);
    SHOW("index", nvmlDeviceGetHandleByIndex(0, &dev));
    SHOW("bad_index", nvmlDeviceGetHandleByIndex(1, &dev));
    SHOW("index", nvmlDeviceGetHandleByIndex(0, &dev));

    char name[NVML_DEVICE_NAME_BUFFER_SIZE];
    SHOW("name", nvmlDeviceGetName(dev, name, sizeof name));
    printf("nvml_name %s\n", name);
    char tiny[4];
    SHOW("name_tiny", nvmlDeviceGetName(dev, tiny, sizeof tiny));

    nvmlMemory_t mem;
    SHOW("memory", nvmlDeviceGetMemoryInfo(dev, &mem));
    printf("nvml_memory %llu %llu %llu\n", mem.total, mem.free, mem.used);
    nvmlMemory_v2_t mem2;
    mem2.version = nvmlMemory_v2;
    SHOW("memory_v2", nvmlDeviceGetMemoryInfo_v2(dev, &mem2));
    printf("nvml_memory_v2 %llu\n", mem2.total);

    SHOW("clock_mem", nvmlDeviceGetClockInfo(dev, NVML_CLOCK_MEM, &mhz));
    printf("nvml_clock_mem %u\n", mhz);
    mhz = 0;
    SHOW("clock_sm", nvmlDeviceGetClockInfo(dev, NVML_CLOCK_SM, &mhz));
    printf("nvml_clock_sm %u\n", mhz);
    mhz = 0;
    SHOW("max_clock_sm", nvmlDeviceGetMaxClockInfo(dev, NVML_CLOCK_SM, &mhz));
    printf("nvml_max_clock_sm %u\n", mhz);
    SHOW("clock_video", nvmlDeviceGetClockInfo(dev, NVML_CLOCK_VIDEO, &mhz));

    char uuid[NVML_DEVICE_UUID_BUFFER_SIZE];
    SHOW("uuid", nvmlDeviceGetUUID(dev, uuid, sizeof uuid));
    printf("nvml_uuid %s\n", uuid);
    nvmlPciInfo_t pci;
    SHOW("pci", nvmlDeviceGetPciInfo(dev, &pci));
    printf("nvml_pci %s\n", pci.busId);

    char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    SHOW("driver", nvmlSystemGetDriverVersion(driver, sizeof driver));
    int cuda_driver = 0;
    SHOW("cuda_driver_call", nvmlSystemGetCudaDriverVersion(&cuda_driver));
    printf("nvml_cuda_driver %d\n", cuda_driver);

    unsigned temp = 0, power = 0;
    nvmlUtilization_t util;
    SHOW("temperature", nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &temp));
    SHOW("temperature_again", nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &temp));
    SHOW("power", nvmlDeviceGetPowerUsage(dev, &power));
    SHOW("utilization", nvmlDeviceGetUtilizationRates(dev, &util));

    /* the device as the CUDA runtime reports it, and BabelStream's lookup by its PCI id */
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    int mem_khz = 0, driver_version = 0;
    cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0);
    cudaDriverGetVersion(&driver_version);
    printf("cuda_name %s\n", p.name);
    printf("cuda_memory %zu %zu %zu\n", (size_t)p.totalGlobalMem, total_b, free_b);
    printf("cuda_memory_clock_khz %d\n", mem_khz);
    printf("cuda_driver %d\n", driver_version);
    char bus[32];
    snprintf(bus, sizeof bus, "%04x:%02x:%02x.0", p.pciDomainID, p.pciBusID, p.pciDeviceID);
    nvmlDevice_t by_bus = 0;
    SHOW("by_bus", nvmlDeviceGetHandleByPciBusId(bus, &by_bus));
    printf("same_handle %d\n", by_bus == dev);
    SHOW("by_other_bus", nvmlDeviceGetHandleByPciBusId("0000:3b:00.0", &by_bus));
    SHOW("by_uuid", nvmlDeviceGetHandleByUUID(uuid, &by_bus));

    int *x;
    cudaMallocManaged(&x, 4 * sizeof(int));
    for (int i = 0; i < 4; i++) x[i] = i + 1;
    twice<<<1, 4>>>(x);
    cudaDeviceSynchronize();
    printf("kernel %d %d %d %d\n", x[0], x[1], x[2], x[3]);

    SHOW("shutdown", nvmlShutdown());
    SHOW("after_shutdown", nvmlDeviceGetCount(&count));
    SHOW("shutdown_again", nvmlShutdown());
    return 0;
}
"""


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{cmd}\n{r.stdout}\n{r.stderr}"
    return r


def _parse(stdout: str) -> dict[str, list[str]]:
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1].split(" ") for line in stdout.splitlines()
            if " " in line}


def _cpu_mhz(file: str) -> float | None:
    try:
        return int(Path(f"/sys/devices/system/cpu/cpu0/cpufreq/{file}").read_text()) / 1000
    except (OSError, ValueError):
        pass
    if file != "scaling_cur_freq":
        return None
    m = re.search(r"^cpu MHz\s*:\s*([\d.]+)", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
    return float(m.group(1)) if m else None


def _check(stdout: str, stderr: str) -> None:
    out = _parse(stdout)
    ok, uninit, invalid, not_supported, not_found, too_small = "0", "1", "2", "3", "6", "7"
    assert out["before_init"][0] == uninit
    assert out["init"] == [ok, "Success"]
    assert out["count_value"] == ["1"]
    assert out["bad_index"][0] == invalid and out["index"][0] == ok

    # the device is the one the CUDA runtime reports
    assert out["name"][0] == ok
    nvml_name = stdout.split("nvml_name ", 1)[1].split("\n", 1)[0]
    cuda_name = stdout.split("cuda_name ", 1)[1].split("\n", 1)[0]
    assert nvml_name == cuda_name[:63] and nvml_name
    assert out["name_tiny"][0] == too_small
    total, free, used = (int(v) for v in out["nvml_memory"])
    prop_total, rt_total, rt_free = (int(v) for v in out["cuda_memory"])
    assert total == prop_total == rt_total == int(out["nvml_memory_v2"][0])
    assert 0 < free <= total and used == total - free
    # the free memory moves between the two calls; the runtime's is the same kind of figure
    assert abs(free - rt_free) < total // 4
    assert out["clock_mem"][0] == ok
    assert int(out["nvml_clock_mem"][0]) == int(out["cuda_memory_clock_khz"][0]) // 1000 > 0

    # the CPU's clocks as sysfs / /proc/cpuinfo say, read here; a clock moves, so within 2x
    current = _cpu_mhz("scaling_cur_freq")
    if current is None:
        assert out["clock_sm"][0] == not_supported
    else:
        assert out["clock_sm"][0] == ok
        assert current / 2 <= int(out["nvml_clock_sm"][0]) <= current * 2
    highest = _cpu_mhz("cpuinfo_max_freq")
    if highest is None:
        assert out["max_clock_sm"][0] == not_supported
    else:
        assert out["max_clock_sm"][0] == ok and int(out["nvml_max_clock_sm"][0]) == round(highest)
    assert out["clock_video"][0] == not_supported

    assert out["uuid"][0] == ok
    assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
                        out["nvml_uuid"][0])
    # cpuify's cudaDeviceProp.uuid holds these 16 bytes (runtime/cudart.c)
    assert out["nvml_uuid"][0].replace("-", "")[3:] == b"cpuify-cpu-dev-0".hex()
    assert out["pci"][0] == ok and out["nvml_pci"] == ["00000000:00:00.0"]
    assert out["driver"][0] == ok
    assert out["cuda_driver_call"][0] == ok and out["nvml_cuda_driver"] == out["cuda_driver"]
    assert out["by_bus"][0] == ok and out["same_handle"] == ["1"]
    assert out["by_other_bus"][0] == not_found
    assert out["by_uuid"][0] == ok

    # what a CPU has no figure for: NOT_SUPPORTED, said once per function on stderr
    for query in ("temperature", "temperature_again", "power", "utilization"):
        assert out[query] == [not_supported, "Not", "Supported"], query
    assert stderr.count("nvmlDeviceGetTemperature (NVML) is not supported by cpuify") == 1
    assert "nvmlDeviceGetPowerUsage (NVML) is not supported" in stderr

    assert out["kernel"] == ["2", "4", "6", "8"]
    assert out["shutdown"][0] == ok
    assert out["after_shutdown"][0] == uninit and out["shutdown_again"][0] == uninit


@needs_nvml
def test_nvml_program_built_with_cpuify_nvcc(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "query.cu").write_text(PROGRAM)
    _run([*CPUIFY, "nvcc", "query.cu", "-o", "query", "-lnvidia-ml",
          "-Xcompiler", "-Wno-deprecated-declarations"], tmp_path, env)   # nvmlDeviceGetTemperature
    deps = subprocess.run(["ldd", str(tmp_path / "query")], capture_output=True, text=True).stdout
    nvml = [line for line in deps.splitlines() if "libnvidia-ml" in line]
    assert nvml and all("cpuify-cuda-home-" in line for line in nvml), deps
    r = subprocess.run([str(tmp_path / "query")], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    _check(r.stdout, r.stderr)


@needs_nvml
def test_nvml_without_the_runtime_says_what_to_link(tmp_path: Path, env: dict[str, str]) -> None:
    """A host program that links libnvidia-ml alone: NVML initializes and counts the device,
    and the queries that need cpuify's runtime say so instead of answering wrongly."""
    home = Path(_run([*CPUIFY, "cuda-home"], tmp_path, env).stdout.strip())
    (tmp_path / "alone.c").write_text(r"""
#include <stdio.h>
#include <nvml.h>
int main(void) {
    nvmlDevice_t dev;
    char name[NVML_DEVICE_NAME_BUFFER_SIZE];
    unsigned count = 0;
    printf("%d", (int)nvmlInit());
    printf(" %d", (int)nvmlDeviceGetCount(&count));
    printf(" %u", count);
    printf(" %d", (int)nvmlDeviceGetHandleByIndex(0, &dev));
    printf(" %d\n", (int)nvmlDeviceGetName(dev, name, sizeof name));
    return nvmlShutdown();
}
""")
    _run(["gcc", f"-I{home}/include", "alone.c", f"-L{home}/lib64", "-lnvidia-ml", "-o", "alone"],
         tmp_path, env)
    r = subprocess.run([str(tmp_path / "alone")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "0", "1", "0", "3"]
    assert "nvmlDeviceGetName (NVML) needs cpuify's CUDA runtime: link the program with -lcudart" \
        in r.stderr


@needs_nvml
def test_nvml_needs_the_cache_directory(tmp_path: Path, env: dict[str, str]) -> None:
    """Without a cache directory cuda-home is private to the build and goes at exit: linking
    its libnvidia-ml.so would leave an executable that cannot load it, so nvcc refuses."""
    (tmp_path / "query.cu").write_text(PROGRAM)
    r = subprocess.run([*CPUIFY, "nvcc", "query.cu", "-o", "query", "-lnvidia-ml"], cwd=tmp_path,
                       env={**env, "CPUIFY_NO_CACHE": "1"}, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode != 0
    assert "-lnvidia-ml link libraries of the toolkit directory in the cache directory" in r.stderr
    assert not (tmp_path / "query").exists()


@needs_nvml
@pytest.mark.skipif(not shutil.which("cmake"), reason="cmake missing (pip install cmake)")
def test_nvml_through_cmake_cuda_nvml_target(tmp_path: Path, env: dict[str, str]) -> None:
    """find_package(CUDAToolkit)'s CUDA::nvml and CUDA::cudart (the shared runtime) on a
    host-only C++ file compiled by g++: NVML reaches the runtime through libcudart.so."""
    home = Path(_run([*CPUIFY, "cuda-home"], tmp_path, env).stdout.strip())
    host = PROGRAM.replace("__global__ void twice(int *x) { x[threadIdx.x] *= 2; }", "")
    host = host.replace("twice<<<1, 4>>>(x);", "for (int i = 0; i < 4; i++) x[i] *= 2;")
    assert "<<<" not in host
    (tmp_path / "main.cpp").write_text(host)
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(q LANGUAGES CXX)\n"
        "find_package(CUDAToolkit REQUIRED)\nadd_executable(q main.cpp)\n"
        "target_link_libraries(q CUDA::cudart CUDA::nvml)\n")
    _run(["cmake", "-S", ".", "-B", "build", f"-DCUDAToolkit_ROOT={home}",
          "-DCMAKE_CXX_FLAGS=-Wno-deprecated-declarations"], tmp_path, env)
    _run(["cmake", "--build", "build"], tmp_path, env)
    deps = subprocess.run(["ldd", str(tmp_path / "build" / "q")], capture_output=True, text=True).stdout
    for lib in ("libnvidia-ml", "libcudart"):
        found = [line for line in deps.splitlines() if lib in line]
        # (the SONAME: the toolkit directory's own name, which `home` mirrors)
        own = (home / "lib64" / "libcudart_static.a").resolve().parent.parent
        assert found and all(str(own) in line for line in found), deps
    r = subprocess.run([str(tmp_path / "build" / "q")], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    _check(r.stdout, r.stderr)
