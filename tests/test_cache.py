"""The on-disk compile cache: hits, keys, corruption recovery, concurrent writers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import cpuify
from cpuify import compiler

SRC = r'''
extern "C" __global__ void scale(float *x, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}
'''


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CPUIFY_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CPUIFY_NO_CACHE", raising=False)
    return tmp_path


def _run_scale(mod: cpuify.RawModule) -> np.ndarray:
    x = np.arange(100, dtype=np.float32)
    mod.get_function("scale")((1,), (128,), (x, np.float32(3), np.int32(100)))
    return x


def test_second_compile_is_a_cache_hit(cache):
    first = compiler.compile_cuda(SRC)
    assert not first.from_cache
    entries = list(cache.glob("*.bin"))
    assert len(entries) == 1
    second = compiler.compile_cuda(SRC)
    assert second.from_cache
    assert second.object_code == first.object_code
    np.testing.assert_array_equal(_run_scale(cpuify.RawModule(code=SRC)), np.arange(100) * 3)


def test_key_depends_on_options_and_source(cache):
    compiler.compile_cuda(SRC)
    compiler.compile_cuda(SRC, options=("-DUNUSED=1",))
    compiler.compile_cuda(SRC.replace("*= s", "*= s * 1.0f"))
    assert len(list(cache.glob("*.bin"))) == 3


def test_corrupted_entry_is_rebuilt(cache):
    compiler.compile_cuda(SRC)
    (entry,) = cache.glob("*.bin")
    entry.write_bytes(b"garbage that is not a pickle")
    again = compiler.compile_cuda(SRC)
    assert not again.from_cache
    np.testing.assert_array_equal(_run_scale(cpuify.RawModule(code=SRC)), np.arange(100) * 3)
    assert compiler.compile_cuda(SRC).from_cache


def test_truncated_entry_is_rebuilt(cache):
    compiler.compile_cuda(SRC)
    (entry,) = cache.glob("*.bin")
    entry.write_bytes(entry.read_bytes()[:100])
    assert not compiler.compile_cuda(SRC).from_cache


def test_cache_can_be_disabled(cache, monkeypatch):
    monkeypatch.setenv("CPUIFY_NO_CACHE", "1")
    assert not compiler.compile_cuda(SRC).from_cache
    assert not compiler.compile_cuda(SRC).from_cache
    assert list(cache.glob("*.bin")) == []


def test_unwritable_cache_dir_still_compiles(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("CPUIFY_CACHE_DIR", str(blocker / "sub"))
    np.testing.assert_array_equal(_run_scale(cpuify.RawModule(code=SRC)), np.arange(100) * 3)


def test_ptx_input_is_cached_too(cache):
    from cpuify.frontend.nvrtc import compile_to_ptx
    ptx = compile_to_ptx(SRC).ptx
    assert not compiler.compile_ptx_cached(ptx).from_cache
    assert compiler.compile_ptx_cached(ptx).from_cache


def test_concurrent_processes_share_the_cache(cache):
    script = textwrap.dedent(f'''
        import numpy as np, cpuify
        src = {SRC!r}
        m = cpuify.RawModule(code=src)
        x = np.arange(100, dtype=np.float32)
        m.get_function("scale")((1,), (128,), (x, np.float32(3), np.int32(100)))
        assert (x == np.arange(100) * 3).all()
        print("ok")
    ''')
    env = dict(os.environ, CPUIFY_CACHE_DIR=str(cache),
               PYTHONPATH=str(Path(cpuify.__file__).parents[1]) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert out.strip() == "ok"
    assert len(list(cache.glob("*.bin"))) == 1
    assert not list(cache.glob(".tmp-*"))
