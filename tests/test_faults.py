"""Faults and runaway kernels are contained (issue 17): a kernel that writes through NULL
or far out of bounds raises IllegalAddressError naming the kernel, block and address; a
spinning kernel is stopped by the watchdog (CPUIFY_KERNEL_TIMEOUT) or by Ctrl-C; a process
forked while another thread compiles can compile and launch.  Each test also checks that
the next launch runs and computes the right answer (against NumPy).

Tests whose failure mode would be a hang run in a child process with a timeout."""

from __future__ import annotations

import mmap
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import cpuify
from cpuify.errors import IllegalAddressError, KernelFailure, LaunchError, LaunchTimeoutError

SRC = Path(__file__).resolve().parents[1] / "src"

WRITER = r'''
extern "C" __global__ void iota_and_poke(int *out, unsigned long long poke, int poke_block, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 3 * i;
    if (blockIdx.x == poke_block && threadIdx.x == 5) *(int *)poke = 42;
}
extern "C" __global__ void far_index(int *out, long long far) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = i;
    if (blockIdx.x == 1 && threadIdx.x == 0) out[far] = 1;
}
'''


@pytest.fixture(scope="module")
def writer() -> cpuify.RawModule:
    return cpuify.RawModule(code=WRITER)


@pytest.fixture(params=[1, 4], ids=["one-worker", "pool"])
def workers(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """Both launch paths: the grid on the calling thread alone, and the worker pool."""
    cpuify.set_num_threads(request.param)
    yield request.param
    cpuify.set_num_threads(0)


def check_next_launch_works(mod: cpuify.RawModule) -> None:
    out = np.zeros(1000, np.int32)
    scratch = np.zeros(1, np.int32)
    mod.get_function("iota_and_poke")((4,), (256,), (out, np.uint64(scratch.ctypes.data),
                                                     np.int32(-1), np.int32(1000)))
    np.testing.assert_array_equal(out, 3 * np.arange(1000, dtype=np.int32))


@pytest.mark.parametrize("grid", [1, 8])
def test_write_through_null(writer: cpuify.RawModule, workers: int, grid: int) -> None:
    out = np.zeros(grid * 128, np.int32)
    fn = writer.get_function("iota_and_poke")
    with pytest.raises(IllegalAddressError) as info:
        fn((grid,), (128,), (out, np.uint64(0), np.int32(grid - 1), np.int32(out.size)))
    e = info.value
    assert e.status == 700 and e.kernel == "iota_and_poke"
    assert e.block == (grid - 1, 0, 0) and e.address == 0
    assert isinstance(e, LaunchError) and isinstance(e, cpuify.CUDADriverError)
    text = str(e)
    assert text.startswith("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered")
    assert f"kernel 'iota_and_poke' failed in block ({grid - 1}, 0, 0)" in text
    assert "writing address 0x0 (a NULL pointer)" in text
    check_next_launch_works(writer)


def test_write_far_out_of_bounds(writer: cpuify.RawModule, workers: int) -> None:
    out = np.zeros(4 * 64, np.int32)
    fn = writer.get_function("far_index")
    far = 1 << 42                       # 16 TiB past the array: not mapped
    with pytest.raises(IllegalAddressError) as info:
        fn((4,), (64,), (out, np.int64(far)))
    assert info.value.block == (1, 0, 0)
    assert info.value.address == out.ctypes.data + 4 * far
    check_next_launch_works(writer)
    # and the same kernel, in bounds, computes its answer
    fn((4,), (64,), (out, np.int64(3)))
    expected = np.arange(256, dtype=np.int32)
    expected[3] = 1
    np.testing.assert_array_equal(out, expected)


def test_write_into_read_only_mapping(writer: cpuify.RawModule) -> None:
    # a read-only mapping (as under a read-only np.memmap): the write faults, contained
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ)
    view = np.frombuffer(page, dtype=np.uint8)
    addr = view.__array_interface__["data"][0]
    out = np.zeros(512, np.int32)
    with pytest.raises(IllegalAddressError) as info:
        writer.get_function("iota_and_poke")((2,), (256,), (out, np.uint64(addr), np.int32(1),
                                                            np.int32(512)))
    assert info.value.address == addr and info.value.block == (1, 0, 0)
    assert "writing address" in str(info.value)
    assert view[0] == 0                     # untouched
    del view
    page.close()
    check_next_launch_works(writer)


def test_fault_in_a_thread_other_than_main(writer: cpuify.RawModule) -> None:
    import threading
    caught: list[BaseException] = []

    def body() -> None:
        out = np.zeros(256, np.int32)
        try:
            writer.get_function("iota_and_poke")((2,), (128,), (out, np.uint64(8), np.int32(0),
                                                                np.int32(256)))
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            caught.append(e)
    t = threading.Thread(target=body)
    t.start()
    t.join(60)
    assert len(caught) == 1 and isinstance(caught[0], IllegalAddressError)
    assert caught[0].address == 8
    check_next_launch_works(writer)


def run_python(code: str, env: dict[str, str] | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter (its own runtime, environment read at start)."""
    # (the spinning kernels here wait for memory nobody writes: the no-progress detector
    # must not end them before the watchdog or Ctrl-C under test does, on a loaded machine)
    full_env = {**os.environ, "PYTHONPATH": str(SRC), "CPUIFY_DEADLOCK_TIMEOUT": "120",
                **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=False,
                          capture_output=True, text=True, timeout=timeout, env=full_env,
                          preexec_fn=default_sigint)


def default_sigint() -> None:
    """SIGINT's default action in a child: a test run started in the background of a
    shell ignores SIGINT, children inherit that, and Python then installs no
    KeyboardInterrupt handler (the Ctrl-C tests would wait for ever)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


SPIN = '''
import signal, threading, time, os, sys
import numpy as np
import cpuify
src = r"""
extern "C" __global__ void spin(volatile int *flag, int *out) {
    if (blockIdx.x == 1 && threadIdx.x == 0) { while (flag[0] == 0) { } }
    out[blockIdx.x * blockDim.x + threadIdx.x] = blockIdx.x + 1;
}
"""
k = cpuify.RawKernel(src, "spin")
k.compile()     # (before any clock starts: a signal during a long compile is not the point)
flag = np.zeros(1, np.int32)
out = np.zeros(4 * 64, np.int32)
def again():
    flag[0] = 1
    out[:] = 0
    k((4,), (64,), (flag, out))
    assert (out == np.repeat(np.arange(1, 5), 64)).all(), out
    print("next launch ok")
'''


@pytest.mark.parametrize("threads", ["1", "3"])
def test_watchdog_stops_a_spinning_kernel(threads: str) -> None:
    r = run_python(SPIN + '''
t0 = time.perf_counter()
try:
    k((4,), (64,), (flag, out))
except cpuify.LaunchTimeoutError as e:
    print("stopped after %.1f s" % (time.perf_counter() - t0))
    print(e.status, e.kernel, e)
again()
''', env={"CPUIFY_KERNEL_TIMEOUT": "0.3", "CPUIFY_NUM_THREADS": threads})
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith("stopped after ")
    assert float(out[0].split()[2]) < 20
    assert out[1].startswith("702 spin CUDA_ERROR_LAUNCH_TIMEOUT: the launch timed out and was "
                             "terminated: kernel 'spin' ran longer than CPUIFY_KERNEL_TIMEOUT=0.3 s")
    assert "in block (1, 0, 0)" in out[1]
    assert out[2] == "next launch ok"


def test_launch_timeout_error_is_a_kernel_failure() -> None:
    assert issubclass(LaunchTimeoutError, KernelFailure)
    assert issubclass(IllegalAddressError, KernelFailure)


def test_bad_watchdog_setting_is_reported() -> None:
    r = run_python(SPIN + "again()\n", env={"CPUIFY_KERNEL_TIMEOUT": "soon"})
    assert r.returncode == 0, r.stderr
    assert "CPUIFY_KERNEL_TIMEOUT=soon is not a number of seconds" in r.stderr


@pytest.mark.parametrize("how", ["pthread_kill", "os.kill", "replaced-handler", "other-thread"])
def test_ctrl_c_stops_a_spinning_kernel(how: str) -> None:
    r = run_python(SPIN + f'''
how = {how!r}
if how == "replaced-handler":
    # as ipykernel does around each cell: Python's handler installed again after ours
    signal.signal(signal.SIGINT, signal.default_int_handler)
def interrupt():
    if how == "pthread_kill":
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
    else:
        os.kill(os.getpid(), signal.SIGINT)
threading.Timer(0.5, interrupt).start()
result = []
def launch():
    try:
        k((4,), (64,), (flag, out))
        result.append("returned")
    except KeyboardInterrupt as e:
        result.append("KeyboardInterrupt " + str(e))
    done.set()
done = threading.Event()
if how == "other-thread":
    # (an Event, not join: a join that KeyboardInterrupt broke leaves the Thread unusable)
    threading.Thread(target=launch).start()
    try:
        done.wait()
    except KeyboardInterrupt:
        print("main thread: KeyboardInterrupt")
        done.wait()
else:
    launch()
print(result[0])
again()
''')
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    if how == "other-thread":
        assert out[0] == "main thread: KeyboardInterrupt"
        out = out[1:]
    assert out[0].startswith("KeyboardInterrupt")
    if how == "other-thread":
        # (the main thread got Python's KeyboardInterrupt; the launching one says where)
        assert out[0] == "KeyboardInterrupt kernel 'spin' was stopped in block (1, 0, 0)"
    assert out[1] == "next launch ok"


def test_ctrl_c_just_before_a_launch_stops_it() -> None:
    # A SIGINT that lands between Python's last look at its signals and the launch: the
    # launch stops at once instead of running (here: spinning) to its end.  The program's
    # own handler (set before cpuify loads) raises nothing, so only the runtime can stop it;
    # a timer ends the spin after 30 s should it not.
    r = run_python('import signal\nsignal.signal(signal.SIGINT, lambda s, f: None)\n' + SPIN + '''
flag[0] = 1
k((4,), (64,), (flag, out))          # (the runtime is loaded, its handler in front)
flag[0] = 0
threading.Timer(30, lambda: flag.__setitem__(0, 1)).start()
signal.raise_signal(signal.SIGINT)   # as if Ctrl-C came just before the launch
t0 = time.perf_counter()
try:
    k((4,), (64,), (flag, out))
    print("returned")
except KeyboardInterrupt:
    print("KeyboardInterrupt")
print("after %.1f s" % (time.perf_counter() - t0), file=sys.stderr)
time.sleep(0.3)                      # a Ctrl-C long past does not stop a later launch
again()
''')
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[:2] == ["KeyboardInterrupt", "next launch ok"], r.stdout


def test_launch_after_a_caught_keyboard_interrupt_runs() -> None:
    # Ctrl-C while no kernel runs, KeyboardInterrupt caught, a launch in the except clause:
    # the program saw the interrupt, so that launch must not be stopped by it
    r = run_python(SPIN + '''
flag[0] = 1
k((4,), (64,), (flag, out))
try:
    signal.raise_signal(signal.SIGINT)
    time.sleep(5)
except KeyboardInterrupt:
    print("caught")
    again()
''')
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["caught", "next launch ok"], r.stdout


def test_fault_stops_the_blocks_still_running() -> None:
    # block 0 faults while block 1 spins on a flag nobody sets: the fault ends the launch
    r = run_python('''
import numpy as np, cpuify
src = r"""
extern "C" __global__ void k(volatile int *flag, int *out, unsigned long long poison) {
    if (blockIdx.x == 1) { while (flag[0] == 0) { } }
    if (poison && blockIdx.x == 0 && threadIdx.x == 3) { out = (int *)poison; }
    out[blockIdx.x * blockDim.x + threadIdx.x] = blockIdx.x + 1;
}
"""
f = cpuify.RawKernel(src, "k")
flag = np.zeros(1, np.int32); out = np.zeros(128, np.int32)
try:
    f((2,), (64,), (flag, out, np.uint64(64)))
except cpuify.IllegalAddressError as e:
    print("caught", e.block, e.address)
flag[0] = 1
out[:] = 0
f((2,), (64,), (flag, out, np.uint64(0)))
print((out == np.repeat([1, 2], 64)).all())
''', env={"CPUIFY_NUM_THREADS": "4"}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["caught (0, 0, 0) 76", "True"]


def test_host_faults_still_crash() -> None:
    # a fault outside any kernel is not cpuify's to contain: the process dies as it would
    r = run_python(SPIN + '''
again()
import ctypes
ctypes.string_at(8)
print("unreachable")
''')
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stderr)
    assert "unreachable" not in r.stdout


def test_fork_while_compiling_then_compile_and_launch_in_child() -> None:
    r = run_python('''
import os, threading, time, sys
import numpy as np
import cpuify
def kernel_src(i):
    body = "".join(f"    x = x * 1.0001f + {j}.0f + sinf(x * {i + 1}.0f);\\n" for j in range(40))
    return ('extern "C" __global__ void k%d(float *a, int n) {\\n'
            '    int t = blockIdx.x * blockDim.x + threadIdx.x;\\n'
            '    if (t >= n) return;\\n    float x = a[t];\\n%s    a[t] = x;\\n}\\n') % (i, body)
# (one compile first: a fork while another thread imports a module for the first time can
# deadlock in CPython's import machinery, whatever the module)
cpuify.RawModule(code=kernel_src(999)).compile()      # (compiles lazily otherwise)
stop = False
def compile_loop():
    i = 0
    while not stop:
        cpuify.RawModule(code=kernel_src(i) + f"// {time.time()}").compile()
        i += 1
src = r"""
extern "C" __global__ void axpy(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
parent_kernel = cpuify.RawKernel(src, "axpy")
def launch_loop():
    # the worker pool exists and is busy (or between launches) when the forks happen
    x = np.arange(1 << 16, dtype=np.float32)
    while not stop:
        y = np.zeros_like(x)
        parent_kernel((256,), (256,), (np.float32(3), x, y, np.int32(x.size)))
        assert np.array_equal(y, 3 * x)
threads = [threading.Thread(target=body, daemon=True) for body in (compile_loop, launch_loop)]
for t in threads:
    t.start()
time.sleep(0.3)
kids = []
for round in range(3):
    pid = os.fork()
    if pid == 0:
        try:
            k = cpuify.RawKernel(src + f"// child {round}", "axpy")
            x = np.arange(1000, dtype=np.float32); y = np.ones(1000, np.float32)
            k((4,), (256,), (np.float32(2), x, y, np.int32(1000)))
            ok = np.array_equal(y, 2 * x + 1)
            os._exit(0 if ok else 3)
        except BaseException as e:
            print("child failed:", repr(e), file=sys.stderr, flush=True)
            os._exit(4)
    kids.append(pid)
    time.sleep(0.2)
for pid in kids:
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status))
stop = True
for t in threads:
    t.join()
''', env={"CPUIFY_NO_CACHE": "1", "CPUIFY_NUM_THREADS": "3"}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["child 0"] * 3, r.stderr


def test_watchdog_stop_inside_printf_and_malloc_leaves_them_usable() -> None:
    # the kernel spends its time in printf and malloc/free, which hold locks (stdout's, the
    # heap's): a stop must not leave one held, or the next printf/allocation would hang
    r = run_python('''
import sys
import numpy as np, cpuify
src = r"""
extern "C" __global__ void busy(volatile int *flag, int tag) {
    while (flag[0] == 0) {
        int *p = (int *)malloc(64);
        p[0] = tag;
        printf("%d", p[0]);
        free(p);
    }
    if (threadIdx.x == 0) printf("\\nagain %d\\n", tag);
}
"""
k = cpuify.RawKernel(src, "busy")
flag = np.zeros(1, np.int32)
for round in range(3):
    try:
        k((2,), (4,), (flag, np.int32(1)))
    except cpuify.LaunchTimeoutError:
        print("\\nstopped", round, flush=True)
flag[0] = 1
k((1,), (1,), (flag, np.int32(7)))
print(int(np.ones(1 << 20).sum()))
''', env={"CPUIFY_KERNEL_TIMEOUT": "0.2", "CPUIFY_NUM_THREADS": "2"})
    assert r.returncode == 0, r.stderr
    tail = [line for line in r.stdout.splitlines() if line and set(line) != {"1"}]
    assert tail[-5:] == ["stopped 0", "stopped 1", "stopped 2", "again 7", "1048576"], tail[-6:]


def test_fault_handler_installed_later_hands_kernel_faults_on() -> None:
    # faulthandler enabled after the runtime loaded sees the fault first, reports it and
    # re-raises it: still contained (the address is then unknown)
    r = run_python(SPIN + '''
again()
import faulthandler
faulthandler.enable()
poke = cpuify.RawKernel(r"""extern "C" __global__ void poke(unsigned long long p) { *(int *)p = 1; }""", "poke")
try:
    poke((1,), (1,), (np.uint64(16),))
except cpuify.IllegalAddressError as e:
    print("contained", e.address, e.block)
    print(e)
again()
''')
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "next launch ok" and out[1] == "contained None (0, 0, 0)"
    assert "invalid memory access accessing an unknown address" in out[2]
    assert out[3] == "next launch ok"
    assert "Fatal Python error: Segmentation fault" in r.stderr
