"""Tests of the native runtime (src/cpuify/runtime/cpuify_rt.c) through ctypes.

Block functions are Python ctypes callbacks; they hold the GIL, so blocks mostly serialize,
which is fine for checking the launch protocol."""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from cpuify.runtime import native
from cpuify.runtime.native import BLOCK_FN, Dims

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture(scope="module")
def rt():
    return native.load_runtime()


@pytest.fixture
def workers(rt):
    """Set the pool size for one test, restoring the default afterwards."""
    def set_(n):
        rt.cpuify_set_num_workers(n)
    yield set_
    rt.cpuify_set_num_workers(0)


def dims_of(grid, block=(1, 1, 1)):
    d = Dims()
    d.grid[:] = list(grid)
    d.block[:] = list(block)
    return d


def launch(rt, fn, params, dims, shared=0, scratch=0):
    err = (ctypes.c_uint32 * 3)()
    rc = rt.cpuify_launch(fn, params, ctypes.byref(dims), shared, scratch, err)
    return rc, tuple(err)


def int32_view(addr, shape):
    n = int(np.prod(shape))
    return np.ctypeslib.as_array((ctypes.c_int32 * n).from_address(addr)).reshape(shape)


# ---------------------------------------------------------------------------------------
# launch


@pytest.mark.parametrize("nworkers", [1, 2, 3, 4])
@pytest.mark.parametrize("grid", [(1, 1, 1), (5, 4, 3), (37, 1, 2), (1, 9, 1), (300, 7, 1)])
def test_every_block_called_once(rt, workers, nworkers, grid):
    workers(nworkers)
    assert rt.cpuify_num_workers() == nworkers
    gx, gy, gz = grid
    counts = np.zeros((gz, gy, gx), dtype=np.int32)
    seen_dims = []

    @BLOCK_FN
    def block(params, dims, bx, by, bz, shared, scratch):
        d = dims.contents
        seen_dims.append((tuple(d.grid), tuple(d.block)))
        if not (bx < d.grid[0] and by < d.grid[1] and bz < d.grid[2]):
            return 99
        c = int32_view(params, (gz, gy, gx))
        c[bz, by, bx] += 1
        return 0

    d = dims_of(grid, (32, 2, 1))
    rc, _ = launch(rt, block, counts.ctypes.data, d)
    assert rc == 0
    assert (counts == 1).all(), counts
    assert set(seen_dims) == {(grid, (32, 2, 1))}


def test_blocks_spread_over_workers(rt, workers):
    workers(3)
    threads = set()

    @BLOCK_FN
    def block(params, dims, bx, by, bz, shared, scratch):
        threads.add(threading.get_ident())
        time.sleep(0.002)  # releases the GIL so other workers get blocks
        return 0

    rc, _ = launch(rt, block, None, dims_of((24, 1, 1)))
    assert rc == 0
    assert threading.get_ident() in threads  # the caller works too
    assert len(threads) >= 2


def test_empty_grid_runs_nothing(rt):
    calls = []

    @BLOCK_FN
    def block(params, dims, bx, by, bz, shared, scratch):
        calls.append(1)
        return 0

    for grid in [(0, 1, 1), (4, 0, 1), (4, 4, 0)]:
        assert launch(rt, block, None, dims_of(grid))[0] == 0
    assert calls == []


@pytest.mark.parametrize("nworkers", [1, 2, 4])
@pytest.mark.parametrize("code", [native.CPUIFY_ERR_BARRIER_DIVERGENCE, native.CPUIFY_ERR_TRAP,
                                  native.CPUIFY_ERR_WARP_DIVERGENCE, native.CPUIFY_ERR_ASSERT])
def test_error_code_and_block(rt, workers, nworkers, code):
    workers(nworkers)

    @BLOCK_FN
    def block(params, dims, bx, by, bz, shared, scratch):
        return code if (bx, by, bz) == (2, 1, 3) else 0

    rc, err = launch(rt, block, None, dims_of((3, 4, 5)))
    assert rc == code
    assert err == (2, 1, 3)
    # the pool is fine afterwards
    ok = BLOCK_FN(lambda *a: 0)
    assert launch(rt, ok, None, dims_of((3, 4, 5)))[0] == 0


@pytest.mark.parametrize("nworkers", [1, 2, 4])
def test_error_stops_handing_out_blocks(rt, workers, nworkers):
    workers(nworkers)
    ran = []

    @BLOCK_FN
    def block(params, dims, bx, by, bz, shared, scratch):
        ran.append(bx)
        return native.CPUIFY_ERR_TRAP if bx == 0 else 0

    n = 4000
    rc, err = launch(rt, block, None, dims_of((n, 1, 1)))
    assert rc == native.CPUIFY_ERR_TRAP and err == (0, 0, 0)
    # More workers than cores: the worker that ran block 0 may wait for a core (and the
    # GIL) while the others run blocks (1,413 of 4,000 once, on a loaded 2-core machine);
    # the error must still stop the launch before its end.
    assert len(ran) < (n // 4 if nworkers <= (os.cpu_count() or 1) else n)
    if nworkers == 1:
        assert ran == [0]


def test_first_error_wins(rt, workers):
    workers(2)

    @BLOCK_FN
    def block(params, dims, bx, by, bz, shared, scratch):
        return 1 + bx % 4

    rc, err = launch(rt, block, None, dims_of((64, 1, 1)))
    assert rc in (1, 2, 3, 4)
    assert rc == 1 + err[0] % 4 and err[1:] == (0, 0)


@pytest.mark.parametrize("nworkers", [1, 3])
def test_shared_and_scratch_buffers(rt, workers, nworkers):
    workers(nworkers)
    problems = []
    in_use = set()
    lock = threading.Lock()

    def make(shared_bytes, scratch_bytes):
        @BLOCK_FN
        def block(params, dims, bx, by, bz, shared, scratch):
            if not shared or not scratch:
                problems.append("NULL buffer")
                return 99
            if shared % 64 or scratch % 64:
                problems.append(f"misaligned {shared:#x} {scratch:#x}")
            # the whole area must be writable
            ctypes.memset(shared, 0xAB, shared_bytes)
            ctypes.memset(scratch, 0xCD, scratch_bytes)
            with lock:
                if shared in in_use or scratch in in_use:
                    problems.append("buffer shared by two running blocks")
                in_use.update((shared, scratch))
            time.sleep(0.0005)
            if ctypes.string_at(shared, shared_bytes) != b"\xab" * shared_bytes:
                problems.append("shared memory clobbered by another block")
            with lock:
                in_use.difference_update((shared, scratch))
            return 0
        return block

    for sh, sc in [(0, 0), (1000, 12345), (48 * 1024, 1 << 20), (100, 64)]:
        fn = make(sh, sc)
        assert launch(rt, fn, None, dims_of((6, 2, 1)), sh, sc)[0] == 0
    assert problems == []


def test_concurrent_launches_are_serialized(rt, workers):
    workers(2)
    results = []

    @BLOCK_FN
    def block(params, dims, bx, by, bz, shared, scratch):
        c = int32_view(params, (dims.contents.grid[0],))
        c[bx] += 1
        return 0

    def body():
        for _ in range(30):
            counts = np.zeros(50, dtype=np.int32)
            rc, _ = launch(rt, block, counts.ctypes.data, dims_of((50, 1, 1)))
            results.append(rc == 0 and (counts == 1).all())

    ts = [threading.Thread(target=body) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(results) == 90 and all(results)


def test_nested_launch_runs_inline(rt, workers):
    workers(2)
    inner_counts = np.zeros(8, dtype=np.int32)

    @BLOCK_FN
    def inner(params, dims, bx, by, bz, shared, scratch):
        int32_view(params, (8,))[bx] += 1
        return 0

    @BLOCK_FN
    def outer(params, dims, bx, by, bz, shared, scratch):
        rc, _ = launch(rt, inner, inner_counts.ctypes.data, dims_of((8, 1, 1)), 16, 16)
        return rc

    rc, _ = launch(rt, outer, None, dims_of((4, 1, 1)))
    assert rc == 0
    assert (inner_counts == 4).all()


# ---------------------------------------------------------------------------------------
# a box of blocks of a grid (cpuify_launch_range)


def launch_range(rt, fn, params, dims, lo, hi, flags=0, max_resident=0, shared=0, scratch=0):
    err = (ctypes.c_uint32 * 3)()
    lo_a = None if lo is None else (ctypes.c_uint32 * 3)(*lo)
    hi_a = None if hi is None else (ctypes.c_uint32 * 3)(*hi)
    rc = rt.cpuify_launch_range(fn, params, ctypes.byref(dims), shared, scratch, err, flags,
                                max_resident, lo_a and ctypes.addressof(lo_a),
                                hi_a and ctypes.addressof(hi_a))
    return rc, tuple(err)


@pytest.mark.parametrize("nworkers", [1, 3])
@pytest.mark.parametrize("flags", [0, native.CPUIFY_LAUNCH_FIBERS])
@pytest.mark.parametrize("grid,lo,hi", [((5, 4, 3), (1, 2, 0), (4, 4, 2)),
                                        ((300, 7, 1), (17, 3, 0), (300, 6, 1)),
                                        ((6, 1, 9), (0, 0, 8), (6, 1, 9)),
                                        ((8, 8, 1), (3, 5, 0), (4, 6, 1))])
def test_range_runs_each_block_of_the_box_once(rt, workers, nworkers, flags, grid, lo, hi):
    """Only the blocks of the box run, each once; the block function sees the whole grid."""
    workers(nworkers)
    gx, gy, gz = grid
    counts = np.zeros((gz, gy, gx), dtype=np.int32)
    seen_dims = set()

    @BLOCK_FN
    def block(params, dims, bx, by, bz, shared, scratch):
        seen_dims.add(tuple(dims.contents.grid))
        int32_view(params, (gz, gy, gx))[bz, by, bx] += 1
        return 0

    rc, _ = launch_range(rt, block, counts.ctypes.data, dims_of(grid, (32, 1, 1)), lo, hi,
                         flags, 4)
    assert rc == 0
    want = np.zeros_like(counts)
    want[lo[2]:hi[2], lo[1]:hi[1], lo[0]:hi[0]] = 1
    np.testing.assert_array_equal(counts, want)
    assert seen_dims == {grid}


def test_range_null_box_is_the_whole_grid_and_empty_box_runs_nothing(rt):
    calls = []

    @BLOCK_FN
    def block(params, dims, bx, by, bz, shared, scratch):
        calls.append((bx, by, bz))
        return 0

    assert launch_range(rt, block, None, dims_of((3, 2, 1)), None, None)[0] == 0
    assert sorted(calls) == [(x, y, 0) for x in range(3) for y in range(2)]
    calls.clear()
    for lo, hi in [((1, 0, 0), (1, 2, 1)), ((0, 2, 0), (3, 2, 1)), ((0, 0, 1), (3, 2, 1))]:
        assert launch_range(rt, block, None, dims_of((3, 2, 1)), lo, hi)[0] == 0
    assert calls == []


@pytest.mark.parametrize("lo,hi", [((0, 0, 0), (4, 2, 1)),    # beyond gridDim.x
                                   ((2, 0, 0), (1, 2, 1)),    # lo > hi
                                   ((0, 0, 0), (3, 2, 2))])   # beyond gridDim.z
def test_range_outside_the_grid_is_refused(rt, lo, hi):
    calls = []

    @BLOCK_FN
    def block(params, dims, bx, by, bz, shared, scratch):
        calls.append(1)
        return 0

    rc, err = launch_range(rt, block, None, dims_of((3, 2, 1)), lo, hi)
    assert rc == native.CPUIFY_ERR_INVALID_BOX and err == (0xFFFFFFFF,) * 3
    assert calls == []


def test_range_of_a_cooperative_launch_must_be_the_whole_grid(rt):
    ran = []

    @BLOCK_FN
    def block(params, dims, bx, by, bz, shared, scratch):
        ran.append(bx)
        return 0

    coop = native.CPUIFY_LAUNCH_COOPERATIVE
    rc, _ = launch_range(rt, block, None, dims_of((4, 1, 1)), (1, 0, 0), (4, 1, 1), coop)
    assert rc == native.CPUIFY_ERR_INVALID_BOX and ran == []
    assert launch_range(rt, block, None, dims_of((4, 1, 1)), (0, 0, 0), (4, 1, 1), coop)[0] == 0
    assert sorted(ran) == [0, 1, 2, 3]


@pytest.mark.parametrize("nworkers", [1, 3])
@pytest.mark.parametrize("flags", [0, native.CPUIFY_LAUNCH_FIBERS])
def test_range_error_names_the_absolute_block(rt, workers, nworkers, flags):
    workers(nworkers)

    @BLOCK_FN
    def block(params, dims, bx, by, bz, shared, scratch):
        return native.CPUIFY_ERR_TRAP if (bx, by, bz) == (5, 3, 1) else 0

    rc, err = launch_range(rt, block, None, dims_of((8, 6, 3)), (4, 2, 1), (8, 5, 3), flags, 8)
    assert rc == native.CPUIFY_ERR_TRAP and err == (5, 3, 1)
    # a box without that block runs clean
    assert launch_range(rt, block, None, dims_of((8, 6, 3)), (0, 0, 0), (5, 6, 3), flags, 8)[0] == 0


def test_nested_range_launch_runs_its_box_inline(rt, workers):
    workers(2)
    inner_counts = np.zeros((2, 8), dtype=np.int32)

    @BLOCK_FN
    def inner(params, dims, bx, by, bz, shared, scratch):
        int32_view(params, (2, 8))[by, bx] += 1
        return 0

    @BLOCK_FN
    def outer(params, dims, bx, by, bz, shared, scratch):
        return launch_range(rt, inner, inner_counts.ctypes.data, dims_of((8, 2, 1)),
                            (2, 1, 0), (6, 2, 1))[0]

    assert launch(rt, outer, None, dims_of((3, 1, 1)))[0] == 0
    want = np.zeros_like(inner_counts)
    want[1, 2:6] = 3
    np.testing.assert_array_equal(inner_counts, want)


def test_raw_function_address_is_accepted(rt):
    counts = np.zeros(3, dtype=np.int32)

    @BLOCK_FN
    def block(params, dims, bx, by, bz, shared, scratch):
        int32_view(params, (3,))[bx] += 1
        return 0

    addr = ctypes.cast(block, ctypes.c_void_p).value
    assert launch(rt, addr, counts.ctypes.data, dims_of((3, 1, 1)))[0] == 0
    assert (counts == 1).all()


# ---------------------------------------------------------------------------------------
# workers


def _default_workers():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count()


def _workers_in_subprocess(value):
    env = dict(os.environ)
    env.pop("CPUIFY_NUM_THREADS", None)
    if value is not None:
        env["CPUIFY_NUM_THREADS"] = value
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    code = ("from cpuify.runtime.native import load_runtime\n"
            "print(load_runtime().cpuify_num_workers())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True)
    return int(out.stdout.strip())


def test_num_workers_env():
    assert _workers_in_subprocess("3") == 3
    assert _workers_in_subprocess("1") == 1
    assert _workers_in_subprocess(None) == _default_workers()
    assert _workers_in_subprocess("0") == _default_workers()
    assert _workers_in_subprocess("lots") == _default_workers()


_GAPS_CODE = """
import ctypes, threading, time
from cpuify.runtime import native
from cpuify.runtime.native import BLOCK_FN, Dims
rt = native.load_runtime()
rt.cpuify_set_num_workers(3)
d = Dims(); d.grid[:] = [16, 1, 1]; d.block[:] = [1, 1, 1]
seen = []
@BLOCK_FN
def block(params, dims, bx, by, bz, shared, scratch):
    seen.append((bx, threading.get_ident()))
    time.sleep(0.0005)     # releases the GIL: the other workers get blocks
    return 0
err = (ctypes.c_uint32 * 3)()
helped = 0
for gap in [0, 0.0002, 0.001, 0.004, 0.0002, 0.0002, 0.03, 0, 0.0005] * 3:
    time.sleep(gap)
    seen.clear()
    assert rt.cpuify_launch(block, None, ctypes.byref(d), 0, 0, err) == 0
    assert sorted(b for b, _ in seen) == list(range(16)), seen
    helped += len({t for _, t in seen}) > 1
print(helped)
"""


@pytest.mark.parametrize("spin", [None, "0", "50"])
def test_launches_after_idle_gaps(spin):
    """Launches after gaps shorter and longer than the workers' idle spin (adaptive by
    default, fixed by CPUIFY_SPIN_US): every block runs once, and the workers, spinning or
    woken from sleep, join the launches."""
    env = dict(os.environ)
    env.pop("CPUIFY_SPIN_US", None)
    if spin is not None:
        env["CPUIFY_SPIN_US"] = spin
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", _GAPS_CODE], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) > 0


def test_set_num_workers(rt, workers):
    default = rt.cpuify_num_workers()
    workers(5)
    assert rt.cpuify_num_workers() == 5
    counts = np.zeros(40, dtype=np.int32)

    @BLOCK_FN
    def block(params, dims, bx, by, bz, shared, scratch):
        int32_view(params, (40,))[bx] += 1
        return 0

    for n in [5, 2, 6, 1, 3, 0]:
        workers(n)
        counts[:] = 0
        assert launch(rt, block, counts.ctypes.data, dims_of((40, 1, 1)))[0] == 0
        assert (counts == 1).all()
    assert rt.cpuify_num_workers() == default


# ---------------------------------------------------------------------------------------
# printf


def pack_args(*args):
    """Packs (kind, value) pairs like CUDA's printf argument buffer.  Returns the buffer
    and a list of objects to keep alive."""
    buf = bytearray()
    keep = []
    for kind, value in args:
        fmt = {"i": "<i", "I": "<I", "q": "<q", "Q": "<Q", "d": "<d", "s": "<Q", "p": "<Q"}[kind]
        if kind == "s":
            if value is None:
                value = 0
            else:
                cs = ctypes.create_string_buffer(value.encode())
                keep.append(cs)
                value = ctypes.addressof(cs)
        size = struct.calcsize(fmt)
        while len(buf) % size:
            buf.append(0)
        buf += struct.pack(fmt, value)
    cbuf = ctypes.create_string_buffer(bytes(buf), max(len(buf), 1))
    keep.append(cbuf)
    return cbuf, keep


def cprintf(rt, fmt, *args):
    if args:
        buf, keep = pack_args(*args)
        rc = rt.cpuify_vprintf(fmt.encode(), buf)
        del keep
    else:
        rc = rt.cpuify_vprintf(fmt.encode(), None)
    return rc


PRINTF_CASES = [
    ("hello, world\n", [], "hello, world\n"),
    ("100%% done %%d\n", [], "100% done %d\n"),
    ("%d %i %u\n", [("i", -5), ("i", 7), ("I", 4000000000)], "-5 7 4000000000\n"),
    ("%ld %lld %lu %llx\n", [("q", -(1 << 40)), ("q", 1 << 62), ("Q", (1 << 64) - 1),
                             ("Q", 0xDEADBEEFCAFE)],
     f"{-(1 << 40)} {1 << 62} {(1 << 64) - 1} deadbeefcafe\n"),
    ("%f %.3f [%5.2f] [%-8.2f] %e %g %G\n",
     [("d", 1.5), ("d", 3.14159), ("d", 2.5), ("d", -1.25), ("d", 12345.678),
      ("d", 0.0001), ("d", 1e20)],
     "%f %.3f [%5.2f] [%-8.2f] %e %g %G\n" % (1.5, 3.14159, 2.5, -1.25, 12345.678, 0.0001,
                                              1e20)),
    ("%s and %s, %5s|%-5s|%.2s\n",
     [("s", "alpha"), ("s", "beta"), ("s", "ab"), ("s", "cd"), ("s", "xyz")],
     "alpha and beta,    ab|cd   |xy\n"),
    ("%x %X %#x %08x %o %#o\n",
     [("I", 255), ("I", 0xABCDEF), ("I", 16), ("I", 0x1F), ("I", 8), ("I", 8)],
     "ff ABCDEF 0x10 0000001f 10 010\n"),
    ("%c%c%c|%3c\n", [("i", ord("a")), ("i", ord("b")), ("i", ord("c")), ("i", ord("z"))],
     "abc|  z\n"),
    # mixed sizes: int at 0, double at 8, int at 16, pointer at 24, long long at 32
    ("%d %.1f %d %s %lld\n", [("i", 1), ("d", 2.0), ("i", 3), ("s", "four"), ("q", 5)],
     "1 2.0 3 four 5\n"),
    ("%hd %hhu %+d % d\n", [("i", 70000), ("i", 300), ("i", 5), ("i", 6)],
     "4464 44 +5  6\n"),
    ("%zu %jd\n", [("Q", 123), ("q", -9)], "123 -9\n"),
    ("%s\n", [("s", None)], "(null)\n"),
    ("%*d and %.*f stay literal; %d\n", [("i", 42)], "%*d and %.*f stay literal; 42\n"),
    ("trailing %", [], "trailing %"),
    ("bad %y conversion\n", [], "bad %y conversion\n"),
]


@pytest.mark.parametrize("fmt,args,expected", PRINTF_CASES)
def test_vprintf(rt, capfd, fmt, args, expected):
    capfd.readouterr()
    n = cprintf(rt, fmt, *args)
    rt.cpuify_flush()
    out = capfd.readouterr().out
    assert out == expected
    assert n == len(expected.encode())


def test_vprintf_long_output(rt, capfd):
    capfd.readouterr()
    long = "x" * 5000
    n = cprintf(rt, "<%s>|%2000d|\n", ("s", long), ("i", 7))
    rt.cpuify_flush()
    out = capfd.readouterr().out
    expected = "<" + long + ">|" + " " * 1999 + "7|\n"
    assert out == expected and n == len(expected)


def test_vprintf_lines_do_not_interleave(rt, workers, capfd):
    workers(4)
    capfd.readouterr()
    line = "block %d: " + "abcdefghij" * 20 + " %f\n"

    @BLOCK_FN
    def block(params, dims, bx, by, bz, shared, scratch):
        for i in range(5):
            cprintf(rt, line, ("i", bx), ("d", i + 0.5))
        return 0

    assert launch(rt, block, None, dims_of((16, 1, 1)))[0] == 0
    rt.cpuify_flush()
    lines = capfd.readouterr().out.splitlines()
    assert len(lines) == 80
    body = "abcdefghij" * 20
    assert all(ln.startswith("block ") and body in ln for ln in lines)
    assert sorted(lines) == sorted(f"block {b}: {body} {i + 0.5:f}"
                                   for b in range(16) for i in range(5))


# ---------------------------------------------------------------------------------------
# loader


def test_runtime_path_and_symbols(rt):
    path = native.runtime_path()
    assert os.path.isfile(path)
    assert native.load_runtime() is rt
    assert rt.cpuify_runtime_abi_version() == native.ABI_VERSION
    # RTLD_GLOBAL: the symbols resolve process-wide (JIT code finds them by name)
    glob = ctypes.CDLL(None)
    assert ctypes.cast(glob.cpuify_vprintf, ctypes.c_void_p).value == \
        ctypes.cast(rt.cpuify_vprintf, ctypes.c_void_p).value
    import llvmlite.binding as llvm
    assert llvm.address_of_symbol("cpuify_launch")


@pytest.mark.skipif(shutil.which(os.environ.get("CC") or "cc") is None,
                    reason="no C compiler")
def test_compile_on_demand(tmp_path, monkeypatch):
    monkeypatch.setenv("CPUIFY_CACHE_DIR", str(tmp_path))
    p = native._compile_runtime()
    assert p.parent == tmp_path and p.name.startswith("runtime-") and p.suffix == ".so"
    assert p.stat().st_mode & 0o777 == 0o700
    ino = p.stat().st_ino
    assert native._compile_runtime() == p and p.stat().st_ino == ino  # cached
    # the library and the entry naming it with its SHA-256; no temp files left
    assert sorted(q.name for q in tmp_path.iterdir()) == sorted([p.name, p.name.split(".")[0] + ".so.ref"])
    assert native._abi_ok(p)
