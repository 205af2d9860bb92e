"""Tests for cpuify.frontend.nvrtc (CUDA C++ -> PTX through NVRTC from the pip wheels)."""

from __future__ import annotations

import re
import threading

import pytest

from cpuify.errors import CompileError
from cpuify.frontend import nvrtc
from cpuify.frontend.nvrtc import DEFAULT_ARCH, PTXResult, compile_to_ptx

SAXPY = r'''
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
'''


def _target(ptx: str) -> str:
    m = re.search(r"^\.target\s+(\S+)", ptx, re.M)
    assert m, ptx[:500]
    return m.group(1)


def test_simple_kernel_compiles():
    r = compile_to_ptx(SAXPY)
    assert isinstance(r, PTXResult)
    assert ".visible .entry saxpy(" in r.ptx  # extern "C": unmangled entry name
    assert r.lowered_names == {}
    assert isinstance(r.log, str)


def test_default_target_sm75():
    assert DEFAULT_ARCH == "compute_75"
    assert _target(compile_to_ptx(SAXPY).ptx) == "sm_75"


@pytest.mark.parametrize("arch", ["compute_80", "sm_80", "80"])
def test_arch_keyword_override(arch):
    assert _target(compile_to_ptx(SAXPY, arch=arch).ptx) == "sm_80"


@pytest.mark.parametrize("opts", [
    ("--gpu-architecture=compute_80",),
    ("-arch=compute_80",),
    ("-arch", "compute_80"),
    (("-arch", "sm_80"),),
])
def test_arch_option_override(opts):
    assert _target(compile_to_ptx(SAXPY, options=opts).ptx) == "sm_80"


def test_conflicting_arch_is_an_error():
    with pytest.raises(CompileError, match="conflicting"):
        compile_to_ptx(SAXPY, arch="compute_80", options=("-arch=compute_86",))


MACRO = r'''
extern "C" __global__ void fill(int* p) {
    p[threadIdx.x] = N * 1000 + 7;
}
'''


def test_define_macro():
    r4 = compile_to_ptx(MACRO, options=("-DN=4",))
    r5 = compile_to_ptx(MACRO, options=["-D", "N=5"])          # split form
    r6 = compile_to_ptx(MACRO, options=[("-D", "N=6")])        # split pair form
    assert r4.ptx != r5.ptx != r6.ptx
    assert re.search(r"\b4007\b", r4.ptx)
    assert re.search(r"\b5007\b", r5.ptx)
    assert re.search(r"\b6007\b", r6.ptx)
    with pytest.raises(CompileError, match=r'identifier "N" is undefined'):
        compile_to_ptx(MACRO)


def test_passthrough_options():
    r = compile_to_ptx(SAXPY, options=("--use_fast_math", "-lineinfo"))
    assert ".visible .entry saxpy(" in r.ptx


def test_user_include_dir(tmp_path):
    (tmp_path / "myhdr.h").write_text("#define MYVAL 3\n")
    src = '#include "myhdr.h"\nextern "C" __global__ void k(int* p) { p[0] = MYVAL; }\n'
    assert ".entry k(" in compile_to_ptx(src, options=(f"-I{tmp_path}",)).ptx
    assert ".entry k(" in compile_to_ptx(src, options=("-I", str(tmp_path))).ptx


def test_std_option_not_duplicated():
    src = 'extern "C" __global__ void k(int* p) { p[0] = __cplusplus; }\n'
    r17 = compile_to_ptx(src)
    r14 = compile_to_ptx(src, options=("-std=c++14",))
    assert "201703" in r17.ptx
    assert "201402" in r14.ptx


def test_syntax_error_has_line_info():
    src = 'extern "C" __global__ void k(float* p) {\n    p[0] = ;\n}\n'
    with pytest.raises(CompileError) as ei:
        compile_to_ptx(src)
    msg = str(ei.value)
    assert msg.startswith("NVRTC failed to compile kernel.cu:")
    assert "kernel.cu(2)" in msg
    assert "expected an expression" in msg
    assert ei.value.log and "kernel.cu(2)" in ei.value.log
    assert ei.value.log.strip() in msg  # log is verbatim in the message


def test_custom_filename_in_error():
    with pytest.raises(CompileError) as ei:
        compile_to_ptx("__global__ void k() { undefined_thing(); }", filename="my_kernels.cu")
    msg = str(ei.value)
    assert "NVRTC failed to compile my_kernels.cu:" in msg
    assert "my_kernels.cu(1)" in msg
    assert "undefined_thing" in msg


def test_warnings_in_log():
    r = compile_to_ptx('__global__ void k(float* p) { int unused_var; p[0] = 1; }')
    assert "unused_var" in r.log


TEMPLATE = r'''
template<int N> __global__ void k(float* p) { p[threadIdx.x] = N; }
'''


def test_name_expressions_template():
    r = compile_to_ptx(TEMPLATE, name_expressions=["k<4>", "k<8>"])
    assert set(r.lowered_names) == {"k<4>", "k<8>"}
    mangled = r.lowered_names["k<4>"]
    assert mangled == "_Z1kILi4EEvPf"
    # template instantiations are emitted as weak entries
    assert re.search(rf"^\.(weak|visible) \.entry {mangled}\(", r.ptx, re.M)
    assert f".entry {r.lowered_names['k<8>']}(" in r.ptx


@pytest.mark.parametrize("bad", ["nope", "k<4"])
def test_unknown_name_expression(bad):
    with pytest.raises(CompileError) as ei:
        compile_to_ptx(TEMPLATE, name_expressions=["k<2>", bad])
    assert repr(bad) in str(ei.value).splitlines()[0]


def test_cooperative_groups_header():
    src = r'''
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void k(float* p) {
    cg::thread_block b = cg::this_thread_block();
    p[b.thread_rank()] = 1.0f;
    b.sync();
}
'''
    assert ".visible .entry k(" in compile_to_ptx(src).ptx


def test_fp16_header():
    src = r'''
#include <cuda_fp16.h>
extern "C" __global__ void k(__half* p) { p[0] = __hadd(p[0], __float2half(1.0f)); }
'''
    assert ".visible .entry k(" in compile_to_ptx(src).ptx


def test_cccl_header():
    src = r'''
#include <cuda/std/limits>
extern "C" __global__ void k(int* p) { p[0] = cuda::std::numeric_limits<int>::max(); }
'''
    r = compile_to_ptx(src)
    assert "2147483647" in r.ptx


def test_include_dirs_and_version():
    dirs = nvrtc.include_dirs()
    assert len(dirs) >= 2
    assert any(d.rstrip("/").endswith("cccl") for d in dirs)
    major, minor = nvrtc.nvrtc_version()
    assert major >= 12 and minor >= 0


def test_result_is_not_shared_between_calls():
    a = compile_to_ptx(TEMPLATE, name_expressions=["k<3>"])
    a.lowered_names.clear()
    b = compile_to_ptx(TEMPLATE, name_expressions=["k<3>"])
    assert b.lowered_names == {"k<3>": "_Z1kILi3EEvPf"}


def test_threads():
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            results[i] = compile_to_ptx(MACRO, options=(f"-DN={100 + i}",)).ptx
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(results.values())) == 6


def test_missing_nvrtc_message(monkeypatch):
    monkeypatch.setattr(nvrtc, "_toolkit", None)
    monkeypatch.setattr(nvrtc, "_find_in_wheels", lambda: None)
    monkeypatch.delenv("CPUIFY_CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    with pytest.raises(CompileError, match="pip install nvidia-cuda-nvrtc nvidia-cuda-runtime "
                                           "nvidia-cuda-crt nvidia-cuda-cccl"):
        nvrtc.include_dirs()


def test_cuda_home_fallback_layout(monkeypatch, tmp_path):
    (tmp_path / "lib64").mkdir()
    (tmp_path / "lib64" / "libnvrtc.so.12").write_bytes(b"")
    (tmp_path / "include" / "cccl").mkdir(parents=True)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setenv("CPUIFY_CUDA_HOME", str(tmp_path))
    tk = nvrtc._find_in_cuda_home()
    assert tk is not None
    assert tk.libnvrtc == str(tmp_path / "lib64" / "libnvrtc.so.12")
    assert tk.include_dirs == (str(tmp_path / "include"), str(tmp_path / "include" / "cccl"))
