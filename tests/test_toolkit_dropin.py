"""The CUDA-toolkit drop-in (`cpuify cuda-home`) and nvcc's command-line behaviour.

Small programs of our own are built through each route a real project takes (a Makefile
with CUDA_PATH, a Makefile calling plain `nvcc` from PATH, `cpuify nvcc -c` + `g++ -lcudart`,
CMake), and each executable is checked twice: its output against a hand computation, and
that it was built by cpuify (it carries cpuify's runtime and loads no other libcudart; the
machine may have a real nvcc on PATH and a real libcudart in the loader's cache)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cpuify.nvcc.cuda_home import (driver_api_names, driver_stub_source, error_values,
                                   is_foreign_cuda_include)
from cpuify.nvcc.driver import (UsageError, environment_args, expand_response_files,
                                parse_args)

CPUIFY = [sys.executable, "-m", "cpuify.cli.main"]
SRC = str(Path(__file__).resolve().parent.parent / "src")


def _have_toolchain() -> bool:
    try:
        from cpuify.nvcc.toolkit import find_toolkit
        find_toolkit()
    except Exception:
        return False
    return all(shutil.which(t) for t in ("g++", "gcc", "ld", "make", "ar", "nm"))


needs_toolchain = pytest.mark.skipif(not _have_toolchain(),
                                     reason="nvcc wheel (nvidia-cuda-nvcc), g++ or make missing")

# ------------------------------------------------------------------------------------------
# command line, without building anything


def test_response_files_expand_in_place(tmp_path: Path) -> None:
    inner = tmp_path / "inner.rsp"
    inner.write_text('-DB=2 "-I/dir with space"\n')
    outer = tmp_path / "outer.rsp"
    outer.write_text(f"-O2 @{inner}\n-Xcompiler -Wall,-Wextra\n")
    other = tmp_path / "other.rsp"
    other.write_text("-lm")
    args = expand_response_files(["-c", f"@{outer}", "a.cu", "--options-file", str(other),
                                  f"-optf={other}"])
    assert args == ["-c", "-O2", "-DB=2", "-I/dir with space", "-Xcompiler", "-Wall,-Wextra",
                    "a.cu", "-lm", "-lm"]
    with pytest.raises(UsageError, match="cannot read options file"):
        expand_response_files([f"@{tmp_path / 'missing.rsp'}"])
    loop = tmp_path / "loop.rsp"
    loop.write_text(f"@{loop}")
    with pytest.raises(UsageError, match="nest"):
        expand_response_files([f"@{loop}"])


def test_nvcc_environment_variables() -> None:
    env = {"NVCC_PREPEND_FLAGS": "-DFIRST", "NVCC_APPEND_FLAGS": "'-DLAST=a b'"}
    assert environment_args(["a.cu"], env) == ["-DFIRST", "a.cu", "-DLAST=a b"]


def test_host_compiler_from_ccbin_never_from_cc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "cpuify nvcc")
    monkeypatch.setenv("CXX", "cpuify nvcc")
    monkeypatch.delenv("NVCC_CCBIN", raising=False)
    assert parse_args(["a.cu"]).ccbin is None
    monkeypatch.setenv("NVCC_CCBIN", "/opt/gcc/bin/gcc-12")
    assert parse_args(["a.cu"]).ccbin == "/opt/gcc/bin/gcc-12"
    assert parse_args(["-ccbin", "clang", "a.cu"]).ccbin == "clang"      # the option wins
    assert parse_args(["--compiler-bindir=/usr/bin", "a.cu"]).ccbin == "/usr/bin"


def test_makefile_options_are_accepted() -> None:
    o = parse_args(["-c", "k.cu", "-o", "obj/k.o", "-MD", "-MF", "obj/k.d", "-MT", "obj/k.o",
                    "-MT", "k.stamp", "-MP", "-lcuda", "-gencode", "arch=compute_60,code=[sm_60,compute_60]",
                    "-gencode=arch=compute_80,code=sm_80", "--ptxas-options=-v", "--resource-usage",
                    "-lineinfo", "-G", "-Xptxas", "-dlcm=cg", "-Wno-deprecated-gpu-targets",
                    "-maxrregcount=32", "-use_fast_math", "-cudart", "shared", "-m64",
                    "-Xlinker", "--as-needed"])
    assert o.dep_mode == "-MD" and o.dep_file == "obj/k.d" and o.dep_targets == ["obj/k.o", "k.stamp"]
    assert o.dep_phony and o.cudart == "shared"
    assert "-lcuda" in o.link_opts and "-Wl,--as-needed" in o.link_opts
    assert max(o.archs) == 80
    # nothing unknown among them
    assert not [w for w in o.warnings if "unknown option" in w], o.warnings
    o = parse_args(["-MMD", "--run", "--run-args", "a,b", "x.cu"])
    assert o.dep_mode == "-MMD" and "-run" in o.flags and o.run_args == ["a", "b"]
    with pytest.raises(UsageError, match="-cudart"):
        parse_args(["-cudart", "dynamic", "x.cu"])


def test_foreign_cuda_include_is_recognized(tmp_path: Path) -> None:
    from cpuify.nvcc.toolkit import find_toolkit
    try:
        ours = find_toolkit().include
    except Exception:
        pytest.skip("nvcc wheel missing")
    other = tmp_path / "cuda" / "include"
    other.mkdir(parents=True)
    (other / "cuda_runtime.h").write_text("#error other\n")
    assert is_foreign_cuda_include(str(other), ours)
    assert not is_foreign_cuda_include(ours, ours)
    assert not is_foreign_cuda_include(str(tmp_path), ours)       # no cuda_runtime.h


CUDA_H = """
#define CUDAAPI
#define cuMemAlloc cuMemAlloc_v2
typedef enum cudaError_enum {
    /** ok */
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1, /* a comment = 5 */
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999
} CUresult;
CUresult CUDAAPI cuInit(unsigned int Flags);
CUresult CUDAAPI cuMemAlloc(unsigned long long *p, size_t n);
"""


def test_driver_stubs_cover_every_declared_name_and_the_error_table() -> None:
    names = driver_api_names(CUDA_H, ["CUresult cuInit(unsigned int Flags);\n"
                                      "CUresult cuMemAlloc_v2(unsigned long long *p, size_t n);\n"])
    assert names == {"cuInit", "cuMemAlloc", "cuMemAlloc_v2"}
    errors = error_values(CUDA_H)
    assert errors == {0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE",
                      801: "CUDA_ERROR_NOT_SUPPORTED", 999: "CUDA_ERROR_UNKNOWN"}
    src = driver_stub_source(names, {"cuInit"}, errors)
    assert "int cuMemAlloc_v2(void)" in src and "int cuMemAlloc(void)" in src
    assert "int cuInit(" not in src
    assert 'case 801: return "CUDA_ERROR_NOT_SUPPORTED";' in src
    assert "return 801;" in src


# ------------------------------------------------------------------------------------------
# building programs


KERNEL_CU = r"""
#include "square.h"
__global__ void square(const int *in, int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * in[i] + OFFSET;
}
extern "C" long run_square(int n) {
    int *h = new int[n], *d_in, *d_out;
    for (int i = 0; i < n; i++) h[i] = i;
    cudaMalloc(&d_in, n * sizeof(int));
    cudaMalloc(&d_out, n * sizeof(int));
    cudaMemcpy(d_in, h, n * sizeof(int), cudaMemcpyHostToDevice);
    square<<<(n + 127) / 128, 128>>>(d_in, d_out, n);
    cudaMemcpy(h, d_out, n * sizeof(int), cudaMemcpyDeviceToHost);
    long s = 0;
    for (int i = 0; i < n; i++) s += h[i];
    cudaFree(d_in);
    cudaFree(d_out);
    delete[] h;
    return s;
}
"""
HEADER = "#define OFFSET 3\n"
MAIN_CPP = r"""
#include <cstdio>
#include <cuda_runtime.h>
extern "C" long run_square(int n);
int main() {
    int devices = -1;
    cudaGetDeviceCount(&devices);
    printf("devices %d sum %ld\n", devices, run_square(1000));
    return 0;
}
"""
# sum over i < 1000 of i*i + 3
EXPECTED = f"devices 1 sum {sum(i * i + 3 for i in range(1000))}"


def write_program(d: Path, main_name: str = "main.cpp") -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "kernel.cu").write_text(KERNEL_CU)
    (d / "square.h").write_text(HEADER)
    (d / main_name).write_text(MAIN_CPP)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment with a fresh cache directory (the runtime and cuda-home built from
    scratch) and this checkout's cpuify."""
    if not _have_toolchain():
        pytest.skip("nvcc wheel (nvidia-cuda-nvcc), g++ or make missing")
    cache = tmp_path_factory.mktemp("cache")
    e = {**os.environ, "CPUIFY_CACHE_DIR": str(cache),
         "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for var in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN", "CUDA_PATH", "CUDA_HOME"):
        e.pop(var, None)
    return e


@pytest.fixture(scope="module")
def home(env: dict[str, str]) -> Path:
    """cpuify cuda-home, asked for by two processes at once in a fresh cache directory."""
    procs = [subprocess.Popen([*CPUIFY, "cuda-home"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    paths = {out.strip() for out, _ in outs}
    assert len(paths) == 1, paths
    path = Path(paths.pop())
    assert path.is_dir()
    # the stable path: a mirror, in the cache's cuda-home/, of the toolkit directory
    assert path.parent.name == "cuda-home" and (path / ".cpuify-mirror-of").is_file()
    for d in (path.parent, toolkit_directory(path).parent):
        leftovers = [p.name for p in d.iterdir() if ".tmp-" in p.name]
        assert not leftovers, leftovers
    return path


def toolkit_directory(home: Path) -> Path:
    """The toolkit directory the stable path `home` mirrors (its own name, in the SONAMEs)."""
    return (home / "lib64" / "libcudart_static.a").resolve().parent.parent


def run(cmd: list[str] | str, cwd: Path, env: dict[str, str], **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                       shell=isinstance(cmd, str), **kw)
    assert r.returncode == 0, f"{cmd}\n{r.stdout}\n{r.stderr}"
    return r


def built_by_cpuify(exe: Path) -> None:
    """The executable carries cpuify's runtime, statically or as cuda-home's libcudart.so,
    and loads no other libcudart."""
    symbols = subprocess.run(["nm", str(exe)], capture_output=True, text=True).stdout
    deps = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
    cudart = [line for line in deps.splitlines() if "libcudart" in line]
    assert all("cpuify-cuda-home-" in line for line in cudart), cudart
    assert "cpuify_launch" in symbols or cudart, "no cpuify runtime in " + str(exe)


def check_output(exe: Path, env: dict[str, str]) -> None:
    r = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == EXPECTED
    built_by_cpuify(exe)


@needs_toolchain
def test_cuda_home_layout(home: Path, env: dict[str, str]) -> None:
    import json
    for rel in ("bin/nvcc", "include/cuda_runtime.h", "include/cpuify_cudart.h", "lib64/libcudart.so",
                "lib64/libcudart_static.a", "lib64/libcuda.so", "lib64/stubs/libcuda.so",
                "lib64/libcudadevrt.a", "lib/libcudart.so", "nvvm/libdevice"):
        assert os.path.exists(home / rel), rel
    version = json.loads((home / "version.json").read_text())["cuda"]["version"]
    assert (home / "version.txt").read_text().strip() == f"CUDA Version {version}"
    # the shared libraries name themselves by absolute path: no system libcudart replaces them
    soname = subprocess.run(["readelf", "-d", str(home / "lib64/libcudart.so")],
                            capture_output=True, text=True).stdout
    assert str(toolkit_directory(home) / "lib64") in soname
    # bin/nvcc is cpuify's, with this checkout's code whatever PYTHONPATH says
    r = run([str(home / "bin/nvcc"), "--version"], home, {**env, "PYTHONPATH": ""})
    assert "Cuda compilation tools, release" in r.stdout and "cpuify nvcc" in r.stdout
    # asked again: the same directory, not rebuilt
    assert run([*CPUIFY, "cuda-home"], home, env).stdout.strip() == str(home)


@needs_toolchain
def test_makefile_with_cuda_path(tmp_path: Path, home: Path, env: dict[str, str]) -> None:
    write_program(tmp_path)
    # the usual shape: NVCC from the toolkit variable, the host compiler for .cpp files,
    # the link by g++ with the toolkit's library directory
    (tmp_path / "Makefile").write_text(textwrap.dedent("""\
        CUDA_PATH ?= /usr/local/cuda
        NVCC := $(CUDA_PATH)/bin/nvcc
        app: kernel.o main.o
        \tg++ -o $@ $^ -L$(CUDA_PATH)/lib64 -lcudart
        kernel.o: kernel.cu square.h
        \t$(NVCC) -O2 -arch=sm_70 -c $< -o $@
        main.o: main.cpp
        \tg++ -O2 -I$(CUDA_PATH)/include -c $< -o $@
        """))
    run(["make", f"CUDA_PATH={home}"], tmp_path, env)
    check_output(tmp_path / "app", env)


@needs_toolchain
def test_makefile_calling_plain_nvcc_from_path(tmp_path: Path, home: Path, env: dict[str, str]) -> None:
    write_program(tmp_path, "main.cu")
    (tmp_path / "Makefile").write_text(
        "app: kernel.cu main.cu square.h\n\tnvcc -O3 -o app kernel.cu main.cu\n")
    path_env = {**env, "PATH": f"{home}/bin{os.pathsep}{env['PATH']}"}
    run(["make"], tmp_path, path_env)
    check_output(tmp_path / "app", env)


@needs_toolchain
def test_compile_with_cpuify_link_with_gxx(tmp_path: Path, home: Path, env: dict[str, str]) -> None:
    write_program(tmp_path)
    run([*CPUIFY, "nvcc", "-c", "kernel.cu", "-o", "kernel.o"], tmp_path, env)
    run(["g++", "-c", f"-I{home}/include", "main.cpp", "-o", "main.o"], tmp_path, env)
    # shared runtime: the executable finds cuda-home's libcudart.so with no LD_LIBRARY_PATH
    run(["g++", "kernel.o", "main.o", f"-L{home}/lib64", "-lcudart", "-o", "app_shared"], tmp_path, env)
    check_output(tmp_path / "app_shared", {k: v for k, v in env.items() if k != "LD_LIBRARY_PATH"})
    deps = subprocess.run(["ldd", str(tmp_path / "app_shared")], capture_output=True, text=True).stdout
    assert str(toolkit_directory(home) / "lib64") in deps   # (the SONAME: the directory's own)
    # static runtime, as nvcc links by default
    run(["gcc", "kernel.o", "main.o", f"-L{home}/lib64", "-lcudart_static", "-lstdc++", "-lpthread",
         "-ldl", "-lrt", "-lm", "-o", "app_static"], tmp_path, env)
    check_output(tmp_path / "app_static", env)


@needs_toolchain
def test_host_files_see_the_legacy_layer(tmp_path: Path, home: Path,
                                                     env: dict[str, str]) -> None:
    # a host file compiled by the host compiler against cuda-home's headers reads the
    # cudaDeviceProp fields CUDA 13 removed, filled by cpuify's runtime
    _write(tmp_path / "props.cpp", r"""
#include <cuda_runtime.h>
#include <cstdio>
int main() {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return 2;
    printf("clock %d overlap %d\n", p.clockRate > 0, p.deviceOverlap);
    // and the runtime functions CUDA 13 removed (SHOC's GEMM.cpp, compiled by g++, calls it)
    return cudaThreadSynchronize() == cudaSuccess ? 0 : 3;
}
""")
    run(["g++", f"-I{home}/include", "props.cpp", f"-L{home}/lib64", "-lcudart", "-o", "props"],
        tmp_path, env)
    out = subprocess.run([str(tmp_path / "props")], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.startswith("clock 1 overlap "), out.stdout + out.stderr


@needs_toolchain
def test_make_exporting_cc_as_cpuify_nvcc(tmp_path: Path, env: dict[str, str]) -> None:
    """make CC="cpuify nvcc": make exports CC (and here CXX) to the recipes; the driver and
    its runtime build must not take them for the host compiler."""
    write_program(tmp_path, "main.cu")
    (tmp_path / "Makefile").write_text("app: kernel.cu main.cu\n\t$(CC) -o app kernel.cu main.cu\n")
    cpuify_nvcc = " ".join([sys.executable, "-m", "cpuify.cli.main", "nvcc"])
    fresh = {**env, "CPUIFY_CACHE_DIR": str(tmp_path / "fresh-cache")}     # runtime built anew
    run(["make", f"CC={cpuify_nvcc}", f"CXX={cpuify_nvcc}"], tmp_path, fresh)
    check_output(tmp_path / "app", fresh)


@needs_toolchain
def test_foreign_cuda_headers_and_libraries_are_not_used(tmp_path: Path, env: dict[str, str]) -> None:
    """-I/-isystem to another CUDA's include/ is dropped with a warning; -L to its lib64 does
    not replace cpuify's runtime."""
    write_program(tmp_path, "main.cu")
    other = tmp_path / "other-cuda"
    (other / "include").mkdir(parents=True)
    (other / "include" / "cuda_runtime.h").write_text('#error "the other CUDA\'s header was used"\n')
    (other / "lib64").mkdir()
    # libraries that would give a different answer if they were linked
    fake = other / "fake.c"
    fake.write_text("int cudaGetDeviceCount(int *n) { *n = 42; return 0; }\n")
    run(["gcc", "-shared", "-fPIC", str(fake), "-o", str(other / "lib64" / "libcudart.so")], tmp_path, env)
    run(["gcc", "-c", "-fPIC", str(fake), "-o", str(other / "fake.o")], tmp_path, env)
    run(["ar", "rcs", str(other / "lib64" / "libcudart_static.a"), str(other / "fake.o")], tmp_path, env)
    r = run([*CPUIFY, "nvcc", f"-I{other}/include", "-isystem", f"{other}/include",
             f"-L{other}/lib64", "-lcudart", "kernel.cu", "main.cu", "-o", "app"], tmp_path, env)
    assert r.stderr.count("another CUDA installation's headers") == 2, r.stderr
    check_output(tmp_path / "app", env)


@needs_toolchain
def test_dependency_files(tmp_path: Path, env: dict[str, str]) -> None:
    write_program(tmp_path)
    (tmp_path / "obj").mkdir()
    run([*CPUIFY, "nvcc", "-c", "kernel.cu", "-o", "obj/kernel.o", "-MD"], tmp_path, env)
    text = (tmp_path / "obj" / "kernel.d").read_text()          # next to the object, as nvcc
    assert text.startswith("obj/kernel.o :") and "square.h" in text and "kernel.cu" in text
    (tmp_path / "deps").mkdir()
    run([*CPUIFY, "nvcc", "-c", "kernel.cu", "-o", "obj/k2.o", "-MMD", "-MF", "deps/k2.dep",
         "-MT", "obj/k2.o", "-MT", "stamp", "-MP"], tmp_path, env)
    text = (tmp_path / "deps" / "k2.dep").read_text()
    first = text.splitlines()[0]
    assert first.startswith("obj/k2.o stamp :") or first.startswith("obj/k2.o stamp:"), first
    assert "/usr/include/stdio.h" not in text                     # -MMD: no system headers
    assert "\nsquare.h:" in text or "\nsquare.h :" in text        # -MP: a phony target per header
    # -odir: the object and its dependency file in that directory
    run([*CPUIFY, "nvcc", "-c", "kernel.cu", "-odir", "deps", "-MD"], tmp_path, env)
    assert (tmp_path / "deps" / "kernel.o").is_file()
    assert (tmp_path / "deps" / "kernel.d").read_text().startswith("deps/kernel.o :")
    # -E: the preprocessed source on stdout
    r = run([*CPUIFY, "nvcc", "-E", "kernel.cu"], tmp_path, env)
    assert "out[i] = in[i] * in[i] + 3;" in r.stdout
    # -cuda: nvcc's host translation, with a warning that it has no CPU code for kernels
    r = run([*CPUIFY, "nvcc", "-cuda", "kernel.cu"], tmp_path, env)
    assert (tmp_path / "kernel.cu.cpp.ii").is_file() and "no CPU code" in r.stderr
    # -M alone: only the dependencies, nothing compiled
    r = run([*CPUIFY, "nvcc", "-M", "kernel.cu", "-MT", "custom"], tmp_path, env)
    assert r.stdout.startswith("custom :") and "square.h" in r.stdout
    # a Makefile rebuilds when the header changes
    (tmp_path / "Makefile").write_text(textwrap.dedent(f"""\
        NVCC := {" ".join(CPUIFY)} nvcc
        obj/kernel.o: kernel.cu
        \t$(NVCC) -c $< -o $@ -MD
        -include obj/kernel.d
        """))
    assert "up to date" in run(["make"], tmp_path, env).stdout
    os.utime(tmp_path / "square.h")
    assert "nvcc" in run(["make"], tmp_path, env).stdout


@needs_toolchain
def test_response_files_compiler_lists_and_run(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "inc dir").mkdir()
    (tmp_path / "inc dir" / "greeting.h").write_text('#define GREETING "hello"\n')
    (tmp_path / "prog.cu").write_text(textwrap.dedent(r"""
        #include <cstdio>
        #include "greeting.h"
        __global__ void add(int *v) { v[threadIdx.x] += A + B; }
        int main(int argc, char **argv) {
            int h[4] = {1, 2, 3, 4}, *d;
            cudaMalloc(&d, sizeof h);
            cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
            add<<<1, 4>>>(d);
            cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
            printf("%s %s %d %d %d %d %s\n", GREETING, WHO, h[0], h[1], h[2], h[3],
                   argc > 2 ? argv[2] : "-");
            return 7;
        }
        """))
    (tmp_path / "flags.rsp").write_text('"-Iinc dir" -Xcompiler -DA=10,-DB=20\n')
    (tmp_path / "more.rsp").write_text("'-DWHO=\"world\"'\n")
    r = subprocess.run([*CPUIFY, "nvcc", "@flags.rsp", "--options-file", "more.rsp", "prog.cu",
                        "-o", "prog", "--run", "--run-args", "x,y"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    # --run: the program's output and exit status
    assert r.returncode == 7, r.stderr
    assert r.stdout.strip() == "hello world 31 32 33 34 y"      # h[i] + 10 + 20


@needs_toolchain
def test_ptx_of_relocatable_device_code(tmp_path: Path, env: dict[str, str]) -> None:
    # -ptx with -rdc=true (or -dc) is relocatable PTX, as nvcc's: a __device__ variable is
    # .visible (another file's PTX may name it), without -rdc it is private to the module
    (tmp_path / "unit.cu").write_text(textwrap.dedent("""
        extern __device__ int twice(int x);
        __device__ int offset;
        __global__ void apply(int *v) { v[threadIdx.x] = twice(v[threadIdx.x]) + offset; }
        """))
    for flags, visible in ((["-rdc=true"], True), (["-dc"], True), ([], False)):
        out = tmp_path / "unit.ptx"
        run([*CPUIFY, "nvcc", "-ptx", *flags, "unit.cu", "-o", str(out)], tmp_path, env)
        ptx = out.read_text()
        assert ".extern .func" in ptx and ".entry _Z5applyPi" in ptx
        assert (".visible .global .align 4 .u32 offset" in ptx) == visible, flags
        out.unlink()


@needs_toolchain
def test_older_cxx_standard_with_cuda13_headers(tmp_path: Path, env: dict[str, str]) -> None:
    # CMake projects for CUDA <= 12 pass -std=c++11 (CMAKE_CXX_STANDARD 11); CUDA 13's
    # cooperative_groups.h (libcu++) needs C++17: the legacy layer raises the standard
    (tmp_path / "groups.cu").write_text(textwrap.dedent("""
        #include <cstdio>
        #include <cooperative_groups.h>
        namespace cg = cooperative_groups;
        __global__ void total(const int *v, int *out) {
            cg::thread_block b = cg::this_thread_block();
            __shared__ int s[64];
            s[b.thread_rank()] = v[b.thread_rank()];
            b.sync();
            if (b.thread_rank() == 0) { int t = 0; for (int i = 0; i < 64; i++) t += s[i]; *out = t; }
        }
        int main() {
            int h[64], *d, *o, r = 0;
            for (int i = 0; i < 64; i++) h[i] = i * i;
            cudaMalloc(&d, sizeof h); cudaMalloc(&o, sizeof(int));
            cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
            total<<<1, 64>>>(d, o);
            cudaMemcpy(&r, o, sizeof r, cudaMemcpyDeviceToHost);
            printf("%d\\n", r);
            return 0;
        }
        """))
    from cpuify.nvcc.toolkit import find_toolkit
    if int(find_toolkit().version().split(".")[0]) < 13:
        pytest.skip("the toolkit's headers accept C++11")
    r = run([*CPUIFY, "nvcc", "-std=c++11", "groups.cu", "-o", "groups"], tmp_path, env)
    assert "-std=c++11 taken as -std=c++17" in r.stderr
    out = subprocess.run([str(tmp_path / "groups")], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == str(sum(i * i for i in range(64)))
    r = subprocess.run([*CPUIFY, "nvcc", "--cpuify-no-legacy", "-std=c++11", "groups.cu", "-o", "x"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "C++ 17" in r.stderr


@needs_toolchain
def test_older_cxx_standard_kept_where_the_program_needs_no_cxx17(tmp_path: Path,
                                                                    env: dict[str, str]) -> None:
    # Altis's pathfinder: `using namespace std` and a global `data`, built with -std=c++11;
    # under C++17 `data` is ambiguous with std::data.  The standard is raised only after a
    # compile failed on libcu++'s C++17 requirement (the test above), so this one builds as
    # asked, with no note
    (tmp_path / "data.cu").write_text(textwrap.dedent("""
        #include <cstdio>
        #include <vector>
        using namespace std;
        int *data;
        __global__ void fill(int *x) { x[threadIdx.x] = 3 * (int)threadIdx.x; }
        int main() {
            int h[32];
            cudaMalloc(&data, sizeof h);
            fill<<<1, 32>>>(data);
            cudaMemcpy(h, data, sizeof h, cudaMemcpyDeviceToHost);
            int t = 0;
            for (int i = 0; i < 32; i++) t += h[i];
            printf("%d\\n", t);
            return 0;
        }
        """))
    r = run([*CPUIFY, "nvcc", "-std=c++11", "data.cu", "-o", "data"], tmp_path, env)
    assert "taken as" not in r.stderr
    out = subprocess.run([str(tmp_path / "data")], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == str(3 * sum(range(32)))


@needs_toolchain
def test_verbose_output_names_the_toolkit(tmp_path: Path, home: Path, env: dict[str, str]) -> None:
    """nvcc -v: what CMake reads (TOP=, LIBRARIES=, a link line containing LIBRARIES and
    -lcudart_static, -arch compute_XX)."""
    write_program(tmp_path, "main.cu")
    r = run([str(home / "bin/nvcc"), "-v", "kernel.cu", "main.cu", "-o", "app"], tmp_path, env)
    lines = r.stderr.splitlines()
    assert f"#$ TOP={home}" in lines
    libraries = next(line for line in lines if line.startswith("#$ LIBRARIES=")).split("=", 1)[1].strip()
    link = [line for line in lines if libraries in line and "-lcudart_static" in line]
    assert len(link) == 1 and link[0].startswith("#$ g++ ")
    assert any("-arch compute_75" in line for line in lines)
    check_output(tmp_path / "app", env)
    # the variables come first even for a command line nvcc refuses (CMake's first probe)
    r = subprocess.run([str(home / "bin/nvcc"), "-v", "__cmake_determine_cuda"], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and f"#$ TOP={home}" in r.stderr
    # --dryrun: the same lines, nothing run or written, no source needed (SHOC's configure
    # reads the link line of `nvcc -dryrun bogus.cu`)
    r = run([str(home / "bin/nvcc"), "-dryrun", "-cudart", "shared", "bogus.cu", "-o", "never"],
            tmp_path, env)
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("#$ g++ ") and libraries in last and "-lcudart " in last
    assert not (tmp_path / "never").exists()
    # the output first, as nvcc <= 10 printed it: a configure script (SHOC's) takes what
    # follows `-o "a.out"`, less the quoted objects, as the libraries its g++ link line needs
    r = run([str(home / "bin/nvcc"), "-dryrun", "bogus.cu"], tmp_path, env)
    last = r.stderr.strip().splitlines()[-1]
    libs = re.sub(r'"[a-zA-Z0-9./_-]*\.o"', "", re.sub(r'^.*-o "a\.out"', "", last)).split()
    assert libs[:2] == [f'"-L{home}/lib64/stubs"', f'"-L{home}/lib64"']
    assert "-lcudart_static" in libs and not any(p.endswith('.o"') for p in libs)


DRIVER_API_CU = r"""
#include <cstdio>
#include <cuda.h>
__device__ double table[6];
__global__ void where(const char **file, double **entry) { *file = "drv.cu:7"; *entry = &table[4]; }
int main() {
    int count = 0, major = 0, version = 0;
    CUdevice dev;
    char name[64];
    if (cuDeviceGetCount(&count) != CUDA_ERROR_NOT_INITIALIZED) return 1;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&count) || cuDeviceGet(&dev, 0)) return 2;
    if (cuDeviceGet(&dev, 1) != CUDA_ERROR_INVALID_DEVICE) return 3;
    cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    cuDriverGetVersion(&version);
    if (cuDeviceGetName(name, sizeof name, dev)) return 4;
    CUdeviceptr p;
    int in[3] = {5, 6, 7}, out[3] = {0, 0, 0};
    if (cuMemAlloc(&p, sizeof in) || cuMemcpyHtoD(p, in, sizeof in) ||
        cuMemcpyDtoH(out, p, sizeof out) || cuCtxSynchronize()) return 5;
    // the allocation holding an address inside it; a host stack address is in none
    CUdeviceptr base = 0;
    size_t size = 0, size_only = 0;
    CUresult inside = cuMemGetAddressRange(&base, &size, p + 8);
    CUresult no_base = cuMemGetAddressRange(NULL, &size_only, p + 11);
    CUresult host = cuMemGetAddressRange(&base, NULL, (CUdeviceptr)(size_t)out);
    if (cuMemFree(p)) return 5;
    CUresult freed = cuMemGetAddressRange(NULL, &size_only, p);
    printf("range %d %d %d %d %d %zu %zu\n", (int)inside, (int)no_base, (int)host, (int)freed,
           base == p, size, size_only);
    // module globals (printf-alternative's shape: a device string literal's length)
    void **found, *got[2];
    char text[16] = {0};
    size_t text_size = 0, table_size = 0;
    cudaMalloc(&found, sizeof got);
    where<<<1, 1>>>((const char **)found, (double **)found + 1);
    cudaMemcpy(got, found, sizeof got, cudaMemcpyDeviceToHost);
    CUresult r_text = cuMemGetAddressRange(NULL, &text_size, (CUdeviceptr)got[0]);
    cuMemcpyDtoH(text, (CUdeviceptr)got[0], text_size);
    CUresult r_table = cuMemGetAddressRange(&base, &table_size, (CUdeviceptr)got[1]);
    printf("globals %d %zu %s %d %zu %d\n", (int)r_text, text_size, text, (int)r_table, table_size,
           (char *)got[1] - (char *)base);
    const char *err = 0;
    cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &err);
    CUmodule m;
    CUresult r1 = cuModuleLoad(&m, "kernels.cubin"), r2 = cuModuleLoad(&m, "kernels.cubin");
    printf("count %d major %d version %d copied %d %d %d err %s load %d %d named %d\n", count,
           major, version > 0, out[0], out[1], out[2], err, (int)r1, (int)r2, name[0] != 0);
    return 0;
}
"""


def _driver_program(tmp_path: Path, env: dict[str, str], name: str, source: str) -> subprocess.CompletedProcess[str]:
    """`source` built with `cpuify nvcc NAME.cu -lcuda` and run; it must exit with 0."""
    (tmp_path / f"{name}.cu").write_text(source)
    run([*CPUIFY, "nvcc", f"{name}.cu", "-o", name, "-lcuda"], tmp_path, env)
    r = subprocess.run([str(tmp_path / name)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


@needs_toolchain
def test_driver_api_library(tmp_path: Path, home: Path, env: dict[str, str]) -> None:
    r = _driver_program(tmp_path, env, "drv", DRIVER_API_CU)
    rt = subprocess.run([*CPUIFY, "run", str(tmp_path / "drv.cu"), "-lcuda"], env=env,
                        capture_output=True, text=True, timeout=600)
    assert rt.stdout == r.stdout            # cpuify run builds it the same way
    # the device cpuify's runtime describes (compute capability 7.5 unless configured)
    props = subprocess.run([str(home / "bin/nvcc"), "--run", "-o", str(tmp_path / "cc"),
                            str(_write(tmp_path / "cc.cu", CC_CU))], env=env, capture_output=True,
                           text=True, timeout=600)
    major = props.stdout.split()[0]
    # cuMemGetAddressRange: the 12-byte allocation from inside it (twice); a host address and
    # a freed allocation are in none (CUDA_ERROR_NOT_FOUND = 500)
    # and the string literal (9 bytes with its NUL) and __device__ array holding an address
    assert r.stdout.splitlines() == ["range 0 0 500 500 1 12 12", "globals 0 9 drv.cu:7 0 48 32",
                                     f"count 1 major {major} version 1 copied 5 6 7 err "
                                     "CUDA_ERROR_INVALID_VALUE load 801 801 named 1"]
    # one line for the unsupported function, however often it is called
    assert r.stderr.count("cuModuleLoad") == 1, r.stderr
    deps = subprocess.run(["ldd", str(tmp_path / "drv")], capture_output=True, text=True).stdout
    assert str(toolkit_directory(home) / "lib64" / "libcuda.so.1") in deps


RUNTIME_FIRST_CU = r"""
#include <cstdio>
#include <cuda.h>
int main() {
    CUdevice dev = -1;
    int warp = 0;
    CUresult before = cuCtxGetDevice(&dev);   // nothing initialized the driver yet
    cudaFree(0);                               // the runtime's first call initializes it
    CUresult after = cuCtxGetDevice(&dev);
    CUresult attr = cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev);
    printf("before %d after %d device %d attribute %d warp %d\n", (int)before, (int)after, dev,
           (int)attr, warp);
    // a copy staged through pinned memory on two streams ordered by an event, all by the
    // driver API (The CUDA Handbook's peer2peerMemcpyDrv shape)
    int *in, *out, *staging, *dst;
    cudaMallocHost(&in, 4 * sizeof(int));
    cudaMallocHost(&out, 4 * sizeof(int));
    cudaMallocHost(&staging, 4 * sizeof(int));
    cudaMalloc(&dst, 4 * sizeof(int));
    for (int i = 0; i < 4; i++) { in[i] = 10 * (i + 1); out[i] = 0; }
    cudaStream_t s1, s2;
    cudaEvent_t copied;
    cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    cudaEventCreate(&copied);
    CUresult r1 = cuMemcpyHtoDAsync((CUdeviceptr)dst, in, 4 * sizeof(int), (CUstream)s1);
    CUresult r2 = cuEventRecord((CUevent)copied, (CUstream)s1);
    CUresult r3 = cuStreamWaitEvent((CUstream)s2, (CUevent)copied, 0);
    CUresult r4 = cuMemcpyDtoHAsync(staging, (CUdeviceptr)dst, 4 * sizeof(int), (CUstream)s2);
    cudaStreamSynchronize(s2);
    printf("async %d %d %d %d copied %d %d %d %d\n", (int)r1, (int)r2, (int)r3, (int)r4,
           staging[0], staging[1], staging[2], staging[3]);
}
"""


@needs_toolchain
def test_runtime_call_initializes_the_driver_api(tmp_path: Path, home: Path, env: dict[str, str]) -> None:
    # NVIDIA's cuda-vmm blog sample's shape: `cudaFree(0)` and then driver calls without a
    # cuInit of the program's own, which CUDA's runtime makes on its first call (cpuify's
    # libcuda returned CUDA_ERROR_NOT_INITIALIZED = 3; the asynchronous driver copies, event
    # records and waits returned CUDA_ERROR_NOT_SUPPORTED = 801)
    r = _driver_program(tmp_path, env, "first", RUNTIME_FIRST_CU)
    # and its asynchronous copies, event records and waits go through the runtime's streams
    assert r.stdout.splitlines() == ["before 3 after 0 device 0 attribute 0 warp 32",
                                     "async 0 0 0 0 copied 10 20 30 40"]


CC_CU = r"""
#include <cstdio>
int main() { cudaDeviceProp p; cudaGetDeviceProperties(&p, 0); printf("%d\n", p.major); }
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _cmake() -> str | None:
    try:
        import cmake  # type: ignore[import-not-found]   # the PyPI wheel
        exe = os.path.join(cmake.CMAKE_BIN_DIR, "cmake")
        if os.access(exe, os.X_OK):
            return exe
    except ImportError:
        pass
    return shutil.which("cmake")


@needs_toolchain
@pytest.mark.skipif(_cmake() is None, reason="cmake not installed (pip install cmake)")
def test_cmake_project(tmp_path: Path, home: Path, env: dict[str, str]) -> None:
    """project(... LANGUAGES CXX CUDA) (CMake's enable_language(CUDA): compiler identification
    from nvcc -v), find_package(CUDAToolkit) + CUDA::cudart (the shared runtime), and a target
    of .cu files only, linked by CMake's CUDA rule (the static runtime nvcc -v names)."""
    cmake = _cmake()
    assert cmake is not None
    write_program(tmp_path)
    (tmp_path / "main.cu").write_text(MAIN_CPP)
    (tmp_path / "CMakeLists.txt").write_text(textwrap.dedent("""\
        cmake_minimum_required(VERSION 3.18)
        project(dropin LANGUAGES CXX CUDA)
        find_package(CUDAToolkit REQUIRED)
        add_executable(app main.cpp kernel.cu)
        target_link_libraries(app CUDA::cudart)
        add_executable(app_cuda main.cu kernel.cu)
        """))
    # a real nvcc may sit on PATH: the compiler named here must be the one used
    run([cmake, "-S", ".", "-B", "build", f"-DCMAKE_CUDA_COMPILER={home}/bin/nvcc"], tmp_path, env)
    cache = (tmp_path / "build" / "CMakeCache.txt").read_text()
    assert f"CUDAToolkit_BIN_DIR:PATH={home}/bin" in cache or f"{home}/bin" in cache
    # CUDA::cublas, CUDA::cufft and CUDA::curand resolve to cpuify's libraries
    # (tests/test_cuda_libs.py, tests/test_curand_host.py)
    for lib in ("cublas", "cufft", "curand"):
        assert f"CUDA_{lib}_LIBRARY:FILEPATH={home}/lib64/lib{lib}.so" in cache
    run([cmake, "--build", "build"], tmp_path, env)
    check_output(tmp_path / "build" / "app", env)
    check_output(tmp_path / "build" / "app_cuda", env)


@needs_toolchain
def test_without_a_cache_directory(tmp_path: Path, env: dict[str, str]) -> None:
    """CPUIFY_NO_CACHE=1: `cpuify cuda-home` says why it cannot give a lasting directory;
    cpuify nvcc still links the static runtime (from a private copy), and refuses the shared
    libraries an executable would load from that copy after it is gone."""
    write_program(tmp_path, "main.cu")
    nocache = {**env, "CPUIFY_NO_CACHE": "1"}
    r = subprocess.run([*CPUIFY, "cuda-home"], env=nocache, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and "CPUIFY_NO_CACHE" in r.stderr and "Traceback" not in r.stderr
    run([*CPUIFY, "nvcc", "-c", "kernel.cu", "main.cu"], tmp_path, nocache)
    run([*CPUIFY, "nvcc", "kernel.o", "main.o", "-o", "app"], tmp_path, nocache)
    check_output(tmp_path / "app", env)
    r = subprocess.run([*CPUIFY, "nvcc", "-cudart", "shared", "kernel.o", "main.o", "-o", "app2"],
                       cwd=tmp_path, env=nocache, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and "-cudart shared" in r.stderr and not (tmp_path / "app2").exists()


@needs_toolchain
def test_stable_path_through_upgrades(tmp_path: Path, home: Path, env: dict[str, str]) -> None:
    """A build configured with `cpuify cuda-home`'s path keeps working with the cpuify that
    runs it: when the toolkit directory changes (cpuify, its runtime or the wheels upgraded),
    bin/nvcc moves the stable path's links to the current one before it compiles.  A build
    configured with a toolkit directory's own name that is no longer current is told so."""
    write_program(tmp_path, "main.cu")
    current = toolkit_directory(home)
    # an "earlier" toolkit directory: a copy of the current one under another key
    old = current.with_name("cpuify-cuda-home-" + "0" * 16)
    shutil.copytree(current, old, symlinks=True)
    try:
        # the stable path left pointing at the earlier directory, as after an upgrade
        for link in (home / "lib64").iterdir():
            if not link.is_symlink():
                continue
            target = os.readlink(link)
            if os.path.isabs(target):
                os.unlink(link)
                os.symlink(target.replace(str(current), str(old)), link)
        (home / ".cpuify-mirror-of").write_text(old.name)
        assert toolkit_directory(home) == old
        run([str(home / "bin/nvcc"), "kernel.cu", "main.cu", "-o", "app"], tmp_path, env)
        assert toolkit_directory(home) == current
        assert (home / ".cpuify-mirror-of").read_text() == current.name
        check_output(tmp_path / "app", env)
        # run from the earlier directory's own bin/nvcc: it builds, and says what to do
        r = run([str(old / "bin/nvcc"), "kernel.cu", "main.cu", "-o", "app2"], tmp_path, env)
        assert f"from the toolkit directory {old}" in r.stderr and "cpuify cuda-home" in r.stderr
        check_output(tmp_path / "app2", env)
        # from the current one's: nothing to say
        r = run([str(current / "bin/nvcc"), "kernel.cu", "main.cu", "-o", "app3"], tmp_path, env)
        assert "note" not in r.stderr
    finally:
        shutil.rmtree(old, ignore_errors=True)
