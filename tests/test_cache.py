"""The on-disk compile cache: hits, keys (headers included), verification and repair of
damaged entries, no code-executing formats, private permissions, untrusted and unwritable
directories, size limit with LRU eviction, `cpuify cache info|clear`, temporary files on
SIGTERM, concurrent writers."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import cpuify
from cpuify import cache as disk_cache
from cpuify import compiler
from cpuify.errors import CacheWarning

CPUIFY = [sys.executable, "-m", "cpuify.cli.main"]
ENV_PATH = str(Path(cpuify.__file__).parents[1])

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
    monkeypatch.delenv("CPUIFY_CACHE_MAX_BYTES", raising=False)
    return tmp_path


def _have_nvcc() -> bool:
    try:
        from cpuify.nvcc.toolkit import find_toolkit
        find_toolkit()
    except Exception:
        return False
    return shutil.which("g++") is not None and shutil.which("ld") is not None


needs_nvcc = pytest.mark.skipif(not _have_nvcc(), reason="nvcc wheel or g++ missing")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=ENV_PATH + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("CPUIFY_NO_CACHE", None)
    env.update(extra)
    return env


def _cli(*args: str, cwd: Path, env: dict[str, str], umask: int | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CPUIFY, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          preexec_fn=(lambda: os.umask(umask)) if umask is not None else None,
                          timeout=600)


PROGRAM = r'''
#include <cstdio>
#include "factor.h"
__global__ void fill(float *x) { x[threadIdx.x] = FACTOR * threadIdx.x; }
int main() {
    float *d, h[32];
    cudaMalloc(&d, sizeof h);
    fill<<<1, 32>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    printf("%g\n", h[5]);
    return 0;
}
'''


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


def _zero_middle(data: bytes) -> bytes:
    mid = len(data) // 2
    return data[:mid] + bytes(16) + data[mid + 16:]


@pytest.mark.parametrize("damage", [
    pytest.param(_zero_middle, id="16-bytes-zeroed"),        # was SIGABRT on the next run
    pytest.param(lambda d: d[:len(d) // 2], id="truncated"),
    pytest.param(lambda d: b"garbage that is not a cache entry", id="garbage"),
    pytest.param(lambda d: d[:-1] + bytes([d[-1] ^ 1]), id="one-bit-of-code"),
    pytest.param(lambda d: b"", id="empty"),
])
def test_damaged_entry_is_rebuilt_with_a_warning(cache, damage):
    compiler.compile_cuda(SRC)
    (entry,) = cache.glob("*.bin")
    entry.write_bytes(damage(entry.read_bytes()))
    with pytest.warns(CacheWarning, match="is damaged"):
        again = compiler.compile_cuda(SRC)
    assert not again.from_cache
    np.testing.assert_array_equal(_run_scale(cpuify.RawModule(code=SRC)), np.arange(100) * 3)
    assert compiler.compile_cuda(SRC).from_cache      # repaired


def test_damaged_specialized_kernel_is_rebuilt(cache):
    compiled = compiler.compile_cuda(SRC)
    first = compiler.compile_specialized(compiled.ptx, "scale", (128, 1, 1), compiled.passes)
    (spec,) = cache.glob("*.spec")
    spec.write_bytes(_zero_middle(spec.read_bytes()))
    with pytest.warns(CacheWarning, match="is damaged"):
        again = compiler.compile_specialized(compiled.ptx, "scale", (128, 1, 1), compiled.passes)
    assert again == first
    assert compiler.compile_specialized(compiled.ptx, "scale", (128, 1, 1), compiled.passes) == first


def test_entries_are_json_and_code_never_unpickled(cache, tmp_path_factory):
    compiler.compile_cuda(SRC)
    (entry,) = cache.glob("*.bin")
    raw = entry.read_bytes()
    header, _, body = raw.partition(b"\n")
    _magic, digest, meta_len, _code_len = header.split(b" ")
    import hashlib
    import json
    assert hashlib.sha256(body).hexdigest().encode() == digest
    doc = json.loads(body[:int(meta_len)])
    assert doc["key"] == entry.name and "scale" in doc["meta"]["kernels"]
    assert body[int(meta_len):].startswith(b"\x7fELF")
    # a planted pickle whose loading runs code: refused as damaged, never executed
    marker = tmp_path_factory.mktemp("planted") / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))
    entry.write_bytes(pickle.dumps(Payload()))
    with pytest.warns(CacheWarning, match="damaged"):
        compiler.compile_cuda(SRC)
    assert not marker.exists()


def test_rehashed_entry_for_another_key_is_refused(cache):
    """A valid entry copied under another key's name is not used for that key."""
    compiler.compile_cuda(SRC)
    other = SRC.replace("*= s", "*= s + 0.0f")
    compiler.compile_cuda(other)
    a, b = sorted(cache.glob("*.bin"), key=lambda p: p.stat().st_mtime)
    b.write_bytes(a.read_bytes())
    with pytest.warns(CacheWarning, match="another key"):
        compiler.compile_cuda(other)


def test_cache_can_be_disabled(cache, monkeypatch):
    monkeypatch.setenv("CPUIFY_NO_CACHE", "1")
    assert not compiler.compile_cuda(SRC).from_cache
    assert not compiler.compile_cuda(SRC).from_cache
    assert list(cache.glob("*.bin")) == []


def test_unwritable_cache_dir_still_compiles(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("CPUIFY_CACHE_DIR", str(blocker / "sub"))
    monkeypatch.delenv("CPUIFY_NO_CACHE", raising=False)
    with pytest.warns(CacheWarning, match="cannot be created.*Caching is off"):
        np.testing.assert_array_equal(_run_scale(cpuify.RawModule(code=SRC)), np.arange(100) * 3)
    assert not compiler.compile_cuda(SRC).from_cache


def _refused(cache_path: Path, match: str) -> None:
    with pytest.warns(CacheWarning, match=match) as record:
        np.testing.assert_array_equal(_run_scale(cpuify.RawModule(code=SRC)), np.arange(100) * 3)
        assert not compiler.compile_cuda(SRC).from_cache
    assert len([w for w in record if issubclass(w.category, CacheWarning)]) == 1   # one warning
    assert str(cache_path) in str(record[0].message)
    assert list(cache_path.iterdir()) == []          # nothing written into it


def test_world_writable_cache_dir_is_refused(cache):
    os.chmod(cache, 0o777)
    _refused(cache, "writable by group and others.*chmod 700")


def test_foreign_cache_dir_is_refused(cache, monkeypatch):
    if os.geteuid() == 0:
        os.chown(cache, 12345, 12345)
    else:      # only root can give a directory away: be someone else instead
        uid = os.geteuid() + 1
        monkeypatch.setattr(os, "geteuid", lambda: uid)
    _refused(cache, "owned by another user")


def test_cache_dir_created_private_under_umask_000(tmp_path, monkeypatch):
    root = tmp_path / "a" / "cache"
    monkeypatch.setenv("CPUIFY_CACHE_DIR", str(root))
    monkeypatch.delenv("CPUIFY_NO_CACHE", raising=False)
    old = os.umask(0)
    try:
        compiler.compile_cuda(SRC)
        spec_dir = disk_cache.cache_dir("sub", "dir")
    finally:
        os.umask(old)
    for d in (root.parent, root, spec_dir.parent, spec_dir):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    (entry,) = root.glob("*.bin")
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600


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


def test_header_change_invalidates_rawmodule(cache, tmp_path_factory):
    from cpuify.api import headers as api_headers       # what RawModule hands the compiler
    inc = tmp_path_factory.mktemp("inc")
    (inc / "factor.h").write_text("#define FACTOR 3.0f\n")
    src = SRC.replace("x[i] *= s;", "x[i] *= s * FACTOR;").replace("extern", '#include "factor.h"\nextern')

    def run() -> np.ndarray:
        x = np.ones(100, dtype=np.float32)
        cpuify.RawModule(code=src, options=("-I", str(inc))).get_function("scale")(
            (1,), (128,), (x, np.float32(2), np.int32(100)))
        return x
    np.testing.assert_array_equal(run(), np.full(100, 6.0))
    # (RawModule appends -ftz=true, as CuPy does)
    assert compiler.compile_cuda(src, options=("-I", str(inc), "-ftz=true"),
                                 headers=api_headers.headers_for(src, jitify=False)).from_cache
    (inc / "factor.h").write_text("#define FACTOR 5.0f\n")       # same session, same size
    np.testing.assert_array_equal(run(), np.full(100, 10.0))
    # a header that now shadows the included one (earlier on the search path) counts too
    first = tmp_path_factory.mktemp("first")
    (first / "factor.h").write_text("#define FACTOR 7.0f\n")
    x = np.ones(100, dtype=np.float32)
    cpuify.RawModule(code=src, options=(f"-I{first}", f"-I{inc}")).get_function("scale")(
        (1,), (128,), (x, np.float32(1), np.int32(100)))
    np.testing.assert_array_equal(x, np.full(100, 7.0))


def test_lru_eviction_keeps_the_cache_under_its_limit(cache, monkeypatch):
    sources = [SRC.replace("*= s", f"*= s + {k}.0f") for k in range(4)]
    compiler.compile_cuda(sources[0])
    (entry,) = cache.glob("*.bin")
    size = entry.stat().st_size
    monkeypatch.setenv("CPUIFY_CACHE_MAX_BYTES", str(3 * size + size // 2))   # room for 3
    now = time.time()
    for k, src in enumerate(sources[1:3], 1):
        compiler.compile_cuda(src)
    for k, p in enumerate(sorted(cache.glob("*.bin"), key=lambda p: p.stat().st_mtime_ns)):
        os.utime(p, (now - 100 + k, now - 100 + k))          # distinct ages: 0 oldest
    assert compiler.compile_cuda(sources[0]).from_cache      # used: now the newest
    compiler.compile_cuda(sources[3])                        # over the limit: evict one
    assert sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()) <= 3 * size + size // 2
    assert len(list(cache.glob("*.bin"))) == 3
    assert compiler.compile_cuda(sources[0]).from_cache      # recently used: kept
    assert not compiler.compile_cuda(sources[1]).from_cache  # least recently used: evicted


def test_max_bytes_parsing(monkeypatch):
    for text, value in (("1000", 1000), ("500M", 500 << 20), ("2G", 2 << 30), ("1.5KiB", 1536),
                        ("64MB", 64 << 20), ("", disk_cache.DEFAULT_MAX_BYTES)):
        monkeypatch.setenv("CPUIFY_CACHE_MAX_BYTES", text)
        assert disk_cache.max_bytes() == value, text
    monkeypatch.setenv("CPUIFY_CACHE_MAX_BYTES", "lots")
    with pytest.warns(CacheWarning, match="not a size"):
        assert disk_cache.max_bytes() == disk_cache.DEFAULT_MAX_BYTES


def test_cache_info_and_clear(cache, capsys, monkeypatch):
    from cpuify.cli.main import main
    compiler.compile_cuda(SRC)
    monkeypatch.setenv("CPUIFY_CACHE_MAX_BYTES", "64M")
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert f"location: {cache}" in out and "state:    enabled" in out
    assert "entries:  1" in out and "kernel modules: 1" in out and "limit:    64.0 MiB" in out
    os.chmod(cache, 0o755)
    assert main(["cache", "clear"]) == 0
    assert "removed" in capsys.readouterr().out
    assert list(cache.iterdir()) == [] and stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert main(["cache", "info"]) == 0
    assert "entries:  0" in capsys.readouterr().out
    assert not compiler.compile_cuda(SRC).from_cache
    monkeypatch.setenv("CPUIFY_NO_CACHE", "1")
    assert main(["cache", "info"]) == 0
    assert "disabled (CPUIFY_NO_CACHE=1)" in capsys.readouterr().out


def test_api_sigterm_removes_private_temporary_dir(tmp_path):
    """Without a cache the API builds in a private temporary directory; SIGTERM (default
    action kept: the process dies of it) removes it first."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        import numpy as np, cpuify
        from cpuify import cache
        m = cpuify.RawModule(code={SRC!r})
        x = np.arange(100, dtype=np.float32)
        m.get_function("scale")((1,), (128,), (x, np.float32(3), np.int32(100)))
        d = cache.cache_dir()
        assert d.is_dir() and str(d.parent) == {str(tmp_path)!r}, d
        print(d, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        print("still alive", flush=True)
    """)
    env = _env(CPUIFY_NO_CACHE="1", TMPDIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == -signal.SIGTERM, r.stderr
    assert "still alive" not in r.stdout
    assert list(tmp_path.iterdir()) == []


@needs_nvcc
def test_cpuify_run_and_nvcc_programs(tmp_path):
    """`cpuify run`: an included header's change rebuilds; entries private under umask 000;
    a damaged executable or runtime archive is rebuilt with a warning."""
    (tmp_path / "app.cu").write_text(PROGRAM)
    (tmp_path / "factor.h").write_text("#define FACTOR 3.0f\n")
    root = tmp_path / "cache"
    env = _env(CPUIFY_CACHE_DIR=str(root))
    r = _cli("run", "app.cu", cwd=tmp_path, env=env, umask=0)
    assert r.returncode == 0 and r.stdout.strip() == "15", r.stderr
    # private whatever the umask: directories and executables 0700, other files 0600
    # (the toolkit directory of `cpuify cuda-home` that linking uses has executables of its
    # own, bin/nvcc and lib64's shared libraries, and symlinks, which have no modes)
    for p in [root, *root.rglob("*")]:
        if p.is_symlink():
            continue
        mode = stat.S_IMODE(p.lstat().st_mode)
        if p.is_dir():
            assert mode == 0o700, p
        else:
            assert mode in (0o600, 0o700), (p, oct(mode))
            top = p.relative_to(root).parts[0]
            toolkit = top.startswith("cpuify-cuda-home-") or top == "cuda-home"
            assert mode == 0o600 or os.access(p, os.X_OK) and (p.parent.name == "programs"
                                                              or toolkit), p
    (exe,) = [p for p in (root / "programs").iterdir() if p.suffix not in (".ref", ".deps")]
    assert stat.S_IMODE(exe.stat().st_mode) == 0o700
    r = _cli("run", "app.cu", cwd=tmp_path, env=env)
    assert r.stdout.strip() == "15" and exe.exists()
    # the included header changes (same size): rebuilt
    (tmp_path / "factor.h").write_text("#define FACTOR 4.0f\n")
    r = _cli("run", "app.cu", cwd=tmp_path, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "20", r.stderr
    # a damaged executable: warning, rebuilt, right answer
    (new,) = [p for p in (root / "programs").iterdir()
              if p.suffix not in (".ref", ".deps") and p != exe]
    new.write_bytes(_zero_middle(new.read_bytes()))
    r = _cli("run", "app.cu", cwd=tmp_path, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "20", r.stderr
    assert "is damaged" in r.stderr and "Traceback" not in r.stderr
    # a damaged runtime archive: warning, rebuilt, links
    (archive,) = root.glob("libcpuify_cudart-*.*.a")
    archive.write_bytes(archive.read_bytes()[:1000])
    r = _cli("nvcc", "app.cu", "-o", "app", cwd=tmp_path, env=env)
    assert r.returncode == 0 and "is damaged" in r.stderr, r.stderr
    assert subprocess.run([str(tmp_path / "app")], capture_output=True, text=True).stdout.strip() == "20"


@needs_nvcc
@pytest.mark.parametrize("no_cache", ["0", "1"])
def test_nvcc_with_unwritable_cache_dir(tmp_path, no_cache):
    """Used to fail even with CPUIFY_NO_CACHE=1 (the runtime library had nowhere to go)."""
    (tmp_path / "app.cu").write_text(PROGRAM)
    (tmp_path / "factor.h").write_text("#define FACTOR 2.0f\n")
    (tmp_path / "file").write_text("not a directory")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = _env(CPUIFY_CACHE_DIR=str(tmp_path / "file" / "cache"), CPUIFY_NO_CACHE=no_cache,
               TMPDIR=str(tmp))
    r = _cli("nvcc", "app.cu", "-o", "app", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.count("Caching is off") == (1 if no_cache == "0" else 0), r.stderr
    assert subprocess.run([str(tmp_path / "app")], capture_output=True, text=True).stdout.strip() == "10"
    r = _cli("run", "app.cu", cwd=tmp_path, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "10", r.stderr
    assert list(tmp.iterdir()) == []                  # private build directories removed


@needs_nvcc
def test_sigterm_during_nvcc_leaves_no_temporary_files(tmp_path):
    (tmp_path / "app.cu").write_text(PROGRAM)
    (tmp_path / "factor.h").write_text("#define FACTOR 2.0f\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = _env(CPUIFY_CACHE_DIR=str(tmp_path / "cache"), TMPDIR=str(tmp))
    proc = subprocess.Popen([*CPUIFY, "nvcc", "app.cu", "-o", "app"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # mid-build: once nvcc has started writing its intermediate files
    deadline = time.time() + 120
    while time.time() < deadline and not any(p.suffix == ".ii" for p in tmp.rglob("*")):
        time.sleep(0.02)
    assert any(p.suffix == ".ii" for p in tmp.rglob("*")), "the build never started"
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    assert list(tmp.iterdir()) == []
    assert not (tmp_path / "app").exists()
    assert not list((tmp_path / "cache").rglob(".tmp-*"))


@needs_nvcc
def test_concurrent_cpuify_run(tmp_path):
    (tmp_path / "app.cu").write_text(PROGRAM)
    (tmp_path / "factor.h").write_text("#define FACTOR 2.0f\n")
    env = _env(CPUIFY_CACHE_DIR=str(tmp_path / "cache"))
    procs = [subprocess.Popen([*CPUIFY, "run", "app.cu"], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == "10", err
        assert "damaged" not in err
    r = _cli("run", "app.cu", cwd=tmp_path, env=env)
    assert r.stdout.strip() == "10" and "damaged" not in r.stderr
    assert not list((tmp_path / "cache").rglob(".tmp-*"))


def test_a_limit_smaller_than_one_entry_never_breaks_a_build(cache, monkeypatch, tmp_path_factory):
    """What was just stored stays until it has been used (linked, run), whatever the limit."""
    monkeypatch.setenv("CPUIFY_CACHE_MAX_BYTES", "1")
    src = tmp_path_factory.mktemp("blob") / "tool"
    src.write_bytes(b"\x7fELF" + bytes(5000))
    path = disk_cache.store_file("programs/tool", src, executable=True)
    assert path.read_bytes() == src.read_bytes()
    assert disk_cache.load_file("programs/tool") == path
    np.testing.assert_array_equal(_run_scale(cpuify.RawModule(code=SRC)), np.arange(100) * 3)
    # once they are no longer fresh, the next store evicts them
    old = time.time() - 60
    for p in cache.rglob("*"):
        if p.is_file():
            os.utime(p, (old, old))
    compiler.compile_cuda(SRC.replace("*= s", "*= s * 2.0f"))
    assert not path.exists() and not list(cache.glob("*.bin"))[1:]


def test_include_scan_covers_nested_shadowing_and_computed_includes(tmp_path):
    from cpuify.frontend.includes import UNCACHEABLE, dependency_digest
    a, b = tmp_path / "a", tmp_path / "b"
    (b / "sub").mkdir(parents=True)
    a.mkdir()
    (b / "top.h").write_text('#include "sub/nested.h"\n')
    (b / "sub" / "nested.h").write_text("#define N 1\n")
    src = '#include <top.h>\n#include <cuda_fp16.h>\n'
    opts = [f"-I{a}", "-I", str(b)]
    first = dependency_digest(src, str(tmp_path / "k.cu"), opts)
    assert first and first == dependency_digest(src, str(tmp_path / "k.cu"), opts)
    (b / "sub" / "nested.h").write_text("#define N 2\n")          # nested header edited
    second = dependency_digest(src, str(tmp_path / "k.cu"), opts)
    assert second != first
    (a / "top.h").write_text("#define N 3\n")                     # a shadowing header appears
    assert dependency_digest(src, str(tmp_path / "k.cu"), opts) != second
    assert dependency_digest("__global__ void k() {}", "k.cu", opts) == ""
    assert dependency_digest("#include <cuda_fp16.h>\n", "k.cu", []) == ""
    assert dependency_digest("#define H <top.h>\n#include H\n", "k.cu", opts) is UNCACHEABLE


def test_forked_child_keeps_its_parents_temporaries(tmp_path, monkeypatch):
    """A child forked while the parent holds the cache's lock can still use the cache, and
    removes only its own temporary directories at exit."""
    monkeypatch.setenv("CPUIFY_NO_CACHE", "1")
    parent_dir = disk_cache.private_dir()
    r, w = os.pipe()
    with disk_cache._lock:                   # another thread mid-operation at the fork
        pid = os.fork()
        if pid == 0:                         # child
            try:
                os.close(r)
                child_dir = disk_cache.private_dir()
                ok = child_dir != parent_dir and child_dir.is_dir()
                disk_cache.remove_temporaries()
                ok = ok and not child_dir.exists() and parent_dir.is_dir()
                os.write(w, b"ok" if ok else b"no")
            finally:
                os._exit(0)
    os.close(w)
    assert os.read(r, 2) == b"ok"
    os.waitpid(pid, 0)
    assert parent_dir.is_dir()


def test_eviction_leaves_other_subdirectories_whole(cache, monkeypatch):
    """A tree of files another part of cpuify keeps in the cache (cache_dir("name"), e.g. a
    CUDA-toolkit-shaped directory) is never thinned out file by file."""
    tree = disk_cache.cache_dir("tree", "lib")
    (tree / "libx.so").write_bytes(bytes(10000))
    old = time.time() - 600
    os.utime(tree / "libx.so", (old, old))
    monkeypatch.setenv("CPUIFY_CACHE_MAX_BYTES", "1")
    compiler.compile_cuda(SRC)
    assert (tree / "libx.so").exists()


def _fake_cuda_home(root: Path, key: str, nbytes: int, age: float) -> Path:
    """A directory named as `cpuify cuda-home` names its toolkit directories: a file of
    `nbytes` in lib64/, a symlink (not counted), last used `age` seconds ago."""
    home = root / f"{disk_cache.CUDA_HOME_PREFIX}{key}"
    (home / "lib64").mkdir(parents=True)
    (home / "lib64" / "libcudart.so").write_bytes(bytes(nbytes))
    (home / "lib").symlink_to("lib64")
    t = time.time() - age
    os.utime(home, (t, t))
    return home


def test_cache_info_counts_cuda_home_directories_and_clear_removes_them(cache, capsys):
    from cpuify.cli.main import main
    compiler.compile_cuda(SRC)
    for k in range(3):
        _fake_cuda_home(cache, f"{k:016x}", 1000 * (k + 1), 100 * k)
    i = disk_cache.info()
    label = "toolkit directories (cpuify cuda-home)"
    assert i["kinds"][label] == 3 and i["kind_bytes"][label] == 6000
    assert i["entries"] == 4 and i["kinds"]["kernel modules"] == 1     # not one per file
    assert "other" not in i["kinds"]
    assert main(["cache", "info"]) == 0
    assert f"  {label}: 3 (" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert list(cache.iterdir()) == []


def test_eviction_removes_old_cuda_home_directories_least_recently_used_first(cache, monkeypatch):
    # four toolkit directories of 10000 bytes: `current` used by this process, `newest` the
    # most recently used (another cpuify's, perhaps); the two others are evicted oldest
    # first, whole, until the cache fits
    oldest = _fake_cuda_home(cache, "0" * 16, 10000, 4000)
    current = _fake_cuda_home(cache, "1" * 16, 10000, 3000)
    older = _fake_cuda_home(cache, "2" * 16, 10000, 2000)
    newest = _fake_cuda_home(cache, "3" * 16, 10000, 1000)
    monkeypatch.setattr(disk_cache, "_homes_in_use", set())
    disk_cache.use_directory(current)
    os.utime(current, (time.time() - 3000,) * 2)      # used long ago, but by this process
    assert disk_cache.evict(limit=25000) == 20000
    assert not oldest.exists() and not older.exists()
    assert current.is_dir() and newest.is_dir()
    assert [p.name for p in cache.iterdir() if p.name.startswith(".")] == []   # nothing left aside
    # neither is ever evicted, even over the limit
    assert disk_cache.evict(limit=1) == 0
    assert (current / "lib64" / "libcudart.so").exists() and (newest / "lib64").is_dir()
    # without `current` in use, the least recently used of the two goes
    monkeypatch.setattr(disk_cache, "_homes_in_use", set())
    assert disk_cache.evict(limit=1) == 10000
    assert not current.exists() and newest.is_dir()


def test_stale_cuda_home_builds_are_removed(cache):
    left = cache / f".{disk_cache.CUDA_HOME_PREFIX}{'4' * 16}.tmp-abc"
    fresh = cache / f".{disk_cache.CUDA_HOME_PREFIX}{'5' * 16}.tmp-def"
    for d in (left, fresh):
        (d / "bin").mkdir(parents=True)
    old = time.time() - 2 * 3600
    os.utime(left, (old, old))
    disk_cache.evict()
    assert not left.exists() and fresh.is_dir()         # a build under way is left alone
