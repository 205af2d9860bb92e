"""The differential fuzzer (tools/fuzz.py): a small always-on smoke run, the comparison and the
minimizer checked on their own, and the opt-in long run (`CPUIFY_FUZZ=N python -m pytest
tests/test_fuzz.py`: N kernels from seed `CPUIFY_FUZZ_SEED`, default 0, on all cores)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_fuzz():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("cpuify_tools_fuzz", ROOT / "tools" / "fuzz.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


fuzz = _load_fuzz()
sys.path.insert(0, str(ROOT / "tools"))     # (fuzz_pool, imported by fuzz.py)


def test_generation_is_deterministic_and_covers_the_features() -> None:
    a = [fuzz.render_kernel(fuzz.generate(7, i)) for i in range(60)]
    b = [fuzz.render_kernel(fuzz.generate(7, i)) for i in range(60)]
    assert a == b
    assert a != [fuzz.render_kernel(fuzz.generate(8, i)) for i in range(60)]
    text = "\n".join(a)
    for feature in ("__syncthreads();", "__shfl_", "__ballot_sync", "atomicAdd(&gat", "atomicCAS",
                    "tick[", "sh_u[lt]", "for (unsigned", "return;", "fmaf(", "fz_sdiv", "__double2",
                    "unsigned long long"):
        assert feature in text, feature
    shapes = {fuzz.generate(7, i).block for i in range(60)}
    assert any(x * y * z % 32 for x, y, z in shapes) and any(y > 1 for _, y, _ in shapes)


def test_reuse_mode_writes_and_reads_back_thread_owned_words() -> None:
    """The same-thread reuse mode: strided and interleaved words a thread owns in shared and
    global memory and a generic pointer to either, written then read at constant and
    run-time indices; on in every kernel with reuse=True (--reuse), in about REUSE_SHARE of
    an ordinary run's, and a kernel without it is the one the seed gave before the mode."""
    specs = [fuzz.generate(31, i, reuse=True) for i in range(40)]
    assert all(s.reuse_k in (2, 3, 4, 5, 8) for s in specs)
    text = "\n".join(fuzz.render_kernel(s) for s in specs)
    for shape in ("ru_s[lt * ", "ru_i[", " * nt + lt]", "scr[gt * ", "scr[NTOT * ", "rp[",
                  "unsigned *rp = ", "for (unsigned q_ = 0u; q_ < ", ") % "):
        assert shape in text, shape
    # the words are written before they are read: by the kernel's first lines (shared) or
    # by the host (scr, compared after the run like out)
    for s in specs:
        src = fuzz.render_kernel(s)
        for arr in ("ru_s", "ru_i"):
            if arr in src:
                assert src.index(f"for (unsigned q_ = 0u; q_ < {s.reuse_k}u; q_++) {arr}[") < \
                    src.index("const unsigned NTOT")
    ordinary = [fuzz.generate(31, i) for i in range(200)]
    share = sum(1 for s in ordinary if s.reuse_k) / len(ordinary)
    assert 0.1 < share < 0.3, share
    for i, s in enumerate(ordinary):
        if not s.reuse_k:       # the main stream is untouched by the mode
            assert fuzz.render_kernel(s) == fuzz.render_kernel(fuzz.generate(31, i, reuse=False))
            assert "scr[" not in fuzz.render_kernel(s) and "ru_s" not in fuzz.render_kernel(s)
    again = fuzz.KernelSpec.from_json(json.loads(json.dumps(specs[0].to_json())))
    assert again.reuse_k == specs[0].reuse_k and fuzz.render_kernel(again) == fuzz.render_kernel(specs[0])


def test_reuse_mode_compares_the_global_words() -> None:
    spec = fuzz.generate(31, 0, reuse=True)
    a = fuzz.make_args(spec)
    assert a[9].size == 2 * spec.reuse_k * spec.nthreads * spec.nblocks
    ref = fuzz.outputs(fuzz._copy(a))
    got = fuzz.outputs(fuzz._copy(a))
    assert fuzz.compare(spec, ref, got) is None
    got["scr"][5] ^= 1
    assert "scr[5]" in fuzz.compare(spec, ref, got)


def test_reuse_smoke_run_agrees() -> None:
    """A few reuse-mode kernels through the interpreter, generic, specialized and no-passes
    code (the mode found LLVM's interleaved groups moved past same-thread accesses)."""
    specs = [fuzz.generate(20241, i, reuse=True) for i in range(6)]
    results, _ = fuzz.run_batch(specs, specialized=True)
    bad = [r for r in results if r["status"] != "ok"]
    assert not bad, bad


def test_half_mode_adds_half_arithmetic_and_leaves_other_kernels_alone() -> None:
    """The half-precision mode: __half/__half2/__nv_bfloat16 variables and their arithmetic (the
    operators' unrounded mul + add, fmas, saturation, min/max, roundings, conversions both
    ways) in every kernel with half=True (--half), in about HALF_SHARE of an ordinary run's;
    a kernel without it is the one the seed gave before the mode."""
    specs = [fuzz.generate(33, i, half=True) for i in range(40)]
    text = "\n".join(fuzz.render_kernel(s) for s in specs)
    for shape in ("__half h0 = ", "__half2 q0 = ", " * ", "__hfma", "__hmax", "__float2half_r",
                  "__half2int_r", "fz_hbits(", "__hfma2", "__halves2half2(", "__nv_bfloat16 g0 = ",
                  "__float2bfloat16_r", "__bfloat162int_r", "fz_bbits("):
        assert shape in text, shape
    assert all(any(t == "h16" for _, t in s.variables) for s in specs)
    ordinary = [fuzz.generate(33, i) for i in range(200)]
    share = sum(1 for s in ordinary if any(t == "h16" for _, t in s.variables)) / len(ordinary)
    assert 0.1 < share < 0.3, share
    for i, s in enumerate(ordinary):
        if not any(t == "h16" for _, t in s.variables):
            assert fuzz.render_kernel(s) == fuzz.render_kernel(fuzz.generate(33, i, half=False))


def test_half_smoke_run_agrees() -> None:
    """A few half-mode kernels through the interpreter, generic, specialized and no-passes
    code (the mode's first run found the readers' NaN payloads differing: fz_hbits)."""
    specs = [fuzz.generate(4242, i, half=True) for i in range(4)]
    results, _ = fuzz.run_batch(specs, specialized=True)
    bad = [r for r in results if r["status"] != "ok"]
    assert not bad, bad


def test_half_mode_kernels_found() -> None:
    """Kernels the half mode found: seed 4243's 69 (select-if-phis selected a packed half2),
    574 (LLVM's min.NaN missed a signaling NaN) and seed 4244's 64 (the first fix of 574,
    llvm.canonicalize, crashed LLVM's x86 instruction selection once vectorized to two
    floats) and 642 (the structured select-if-phis put a select between a while with exit
    flags and its branch: IR that does not verify), through the interpreter and generic,
    specialized and no-passes code."""
    specs = [fuzz.generate(4243, 69, half=True), fuzz.generate(4243, 574, half=True),
             fuzz.generate(4244, 64, half=True), fuzz.generate(4244, 642, half=True)]
    results, _ = fuzz.run_batch(specs, specialized=True)
    bad = [r for r in results if r["status"] != "ok"]
    assert not bad, bad


def test_half_slots_compare_any_nan_payload() -> None:
    spec = fuzz.KernelSpec("k", 1, (1, 1, 1), (1, 1, 1), "free", [("h0", "h16"), ("q0", "h2")],
                           [], [], [], 0, {}, {}, {}, 0, 0)
    ref = {"out": np.array([0x7FFF, 0x3C00_7E00], np.uint64), "gat": np.zeros(16, np.uint32),
           "gat64": np.zeros(4, np.uint64), "tick": np.zeros(1, np.uint32)}
    same = dict(ref, out=np.array([0x7E01, 0x3C00_FE00], np.uint64))
    assert fuzz.compare(spec, ref, same) is None
    other = dict(ref, out=np.array([0x7FFF, 0x3C01_7E00], np.uint64))
    assert "q0 (h2)" in fuzz.compare(spec, ref, other)


def test_spec_round_trips_through_json() -> None:
    spec = fuzz.generate(3, 5)
    again = fuzz.KernelSpec.from_json(spec.to_json())
    assert fuzz.render_kernel(again) == fuzz.render_kernel(spec)
    assert again.grid == spec.grid and again.block == spec.block


def test_compare_is_bitwise_except_for_nan_payloads() -> None:
    spec = fuzz.KernelSpec("k", 1, (1, 1, 1), (2, 1, 1), "free", [("u0", "u32"), ("f0", "f32"), ("d0", "f64")],
                           [], [], [], 1, {0: ("add", 3)}, {3: "ticket_add"}, {}, 0, 0)
    nan32 = np.array([0x7FC00000, 0xFFC00001], np.uint32)
    nan64 = np.array([0x7FF8000000000000, 0xFFF0000000000001], np.uint64)

    def outs(u: int, f: int, d: int, tick: list[int], g3: int = 2) -> dict:
        out = np.array([u, f, d, 1, 2, 3], np.uint64)
        gat = np.zeros(fuzz.N_GAT, np.uint32)
        gat[3] = g3
        return {"out": out, "gat": gat, "gat64": np.zeros(fuzz.N_GAT64, np.uint64),
                "tick": np.array(tick, np.uint32)}
    ref = outs(5, int(nan32[0]), int(nan64[0]), [0, 1])
    assert fuzz.compare(spec, ref, outs(5, int(nan32[1]), int(nan64[1]), [1, 0])) is None
    assert "u0" in fuzz.compare(spec, ref, outs(4, int(nan32[0]), int(nan64[0]), [0, 1]))
    assert "f0" in fuzz.compare(spec, ref, outs(5, 0x3F800000, int(nan64[0]), [0, 1]))
    # -0.0 and +0.0 differ bitwise
    assert "d0" in fuzz.compare(spec, outs(5, 0, 0, [0, 1]), outs(5, 0, 1 << 63, [0, 1]))
    assert "ticket 0" in fuzz.compare(spec, ref, outs(5, int(nan32[0]), int(nan64[0]), [0, 0]))
    assert "gat[3]" in fuzz.compare(spec, ref, outs(5, int(nan32[0]), int(nan64[0]), [0, 1], g3=7))


def test_minimizer_keeps_what_the_failure_needs() -> None:
    spec = fuzz.generate(11, 2)
    paths = fuzz._paths(spec.body)
    assert len(paths) > 3
    needle = spec.body[-1]

    def failing(s) -> bool:  # type: ignore[no-untyped-def]
        return needle in s.body
    small = fuzz.minimize(spec, failing, lambda _: None)
    assert small.body == [needle]


def test_worker_limits_are_cpu_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker is given up after its CPU-time limit (a loop that never ends), or after
    WALL_FACTOR times it in wall-clock time (a deadlock spends none); one that finishes in
    time gives its output, however long it waited for a core."""
    import subprocess
    import time
    monkeypatch.setattr(fuzz, "WALL_FACTOR", 4.0)

    def run(code: str) -> tuple[object, float, float]:
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        t0 = time.perf_counter()
        got = fuzz._communicate(p, 1.0)
        return got, time.perf_counter() - t0, fuzz._cpu_seconds(os.getpid())
    got, _, _ = run("print('done')")
    assert got is not None and got[0].strip() == "done"
    got, _, _ = run("while True: pass")
    assert got is None
    got, wall, _ = run("import time; time.sleep(60)")
    assert got is None and 3.9 < wall < 30
    assert fuzz._cpu_seconds(os.getpid()) > 0


_FAKE_WORKER = r"""
import json, os, sys
first, n = int(sys.argv[1]), int(sys.argv[2])
def emit(kind, payload):
    print("\n" + kind + json.dumps(payload), flush=True)
sys.stderr.write("x" * (1 << 20))       # more than a pipe holds: nobody reads it meanwhile
sys.stdout.write("y" * (1 << 20))
emit("@@FUZZ-STEP@@", ["compile", [f"k{i}" for i in range(first, first + n)]])
for i in range(first, first + n):
    emit("@@FUZZ-STEP@@", ["kernel", [f"k{i}", "native"]])
    if i == 1:
        while True:
            pass
    if i == 4:
        os.kill(os.getpid(), 9)
    emit("@@FUZZ-RESULT@@", {"name": f"k{i}", "status": "ok", "detail": ""})
print("\n@@FUZZ@@" + json.dumps({"results": [], "times": {"run_native": 1.0}}), flush=True)
"""


def test_worker_pool_polls_every_worker_and_keeps_finished_results() -> None:
    """fuzz_pool.run_pool with fake workers: batch 0..2 spins in kernel 1, batch 3..5 dies
    (SIGKILL) in kernel 4.  The second slot keeps working while the first spins: 3..5 and
    the rest of it (5) are collected before 0..2 is given up; each killed or crashed
    worker keeps the results it printed (k0, k3), its kernel counts as a crash naming the
    step, and only the kernels after it run again (k2, k5), each exactly once."""
    import fuzz_pool
    order: list[int] = []
    got: dict[str, dict] = {}

    def command(first: int, n: int) -> list[str]:
        return [sys.executable, "-c", _FAKE_WORKER, str(first), str(n)]
    for first, results, times, crashed in fuzz_pool.run_pool([(0, 3), (3, 3)], 2, command, lambda i: f"k{i}",
                                                             kernel_timeout=2.0, log=lambda _: None):
        order.append(first)
        for r in results:
            assert r["name"] not in got, r
            got[r["name"]] = r
        assert (times == {"run_native": 1.0}) == (crashed is None)
    assert sorted(got) == [f"k{i}" for i in range(6)]
    assert {k for k, r in got.items() if r["status"] == "ok"} == {"k0", "k2", "k3", "k5"}
    assert "CPU time" in got["k1"]["detail"] and "in its native run" in got["k1"]["detail"]
    assert "SIGKILL" in got["k4"]["detail"] and "in its native run" in got["k4"]["detail"]
    assert order.index(5) < order.index(0), order       # k5 ran while k1 was still spinning
    assert order.index(0) < order.index(2), order


def test_worker_pool_gives_up_a_worker_that_gains_no_cpu_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deadlocked worker (it sleeps: no CPU time) is killed once it has gained none for
    WALL_FACTOR times its step's limit, and its kernel counts as a crash."""
    import fuzz_pool
    monkeypatch.setattr(fuzz_pool, "WALL_FACTOR", 2.0)
    script = ("import json, time; print('\\n@@FUZZ-STEP@@' + json.dumps(['kernel', ['k0', 'interp']]), "
              "flush=True); time.sleep(120)")
    (got,) = fuzz_pool.run_pool([(0, 1)], 1, lambda first, n: [sys.executable, "-c", script], lambda i: f"k{i}",
                                kernel_timeout=1.0, log=lambda _: None)
    first, results, _, crashed = got
    assert first == 0 and crashed and results[0]["status"] == "crash", got
    assert "stalled" in results[0]["detail"] and "in its interp run" in results[0]["detail"], results


def test_worker_pool_counts_and_kills_the_workers_children(tmp_path: Path) -> None:
    """CPU time spent in a worker's child process (a compiler running LLVM in one) counts
    against the step's limit, and giving the worker up ends the child too."""
    import time

    import fuzz_pool
    pid_file = tmp_path / "child"
    script = ("import json, subprocess, sys; print('\\n@@FUZZ-STEP@@' + json.dumps(['kernel', ['k0', 'native']]), "
              "flush=True); c = subprocess.Popen([sys.executable, '-c', 'while True: pass']); "
              f"open({str(pid_file)!r}, 'w').write(str(c.pid)); c.wait()")
    (got,) = fuzz_pool.run_pool([(0, 1)], 1, lambda first, n: [sys.executable, "-c", script], lambda i: f"k{i}",
                                kernel_timeout=1.0, log=lambda _: None)
    detail = got[1][0]["detail"]
    assert "CPU time" in detail and "in its native run" in detail, detail
    child = int(pid_file.read_text())
    for _ in range(100):        # (killed; init reaps it)
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state in ("Z", "X"):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the worker's child {child} still runs")


def test_a_hanging_kernel_is_a_crash_and_its_batch_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real worker with the CPUIFY_FUZZ_TEST_HANG hook: kernel 1 of batch 0..2 spins in
    its native run; it is given up after its own --timeout (not the batch's), reported as a
    crash, kernel 0 keeps its result, kernel 2 runs in a new batch, and batch 3..5 completes
    in the other slot meanwhile."""
    monkeypatch.setenv("CPUIFY_FUZZ_TEST_HANG", "fz_5_1")
    lines: list[str] = []
    summary = fuzz.fuzz(6, 5, jobs=2, batch=3, minimize_failures=False, log=lines.append, kernel_timeout=6.0)
    assert summary["counts"]["ok"] == 5 and summary["counts"]["crash"] == 1, summary
    (f,) = summary["failures"]
    assert f["index"] == 1 and "in its native run" in f["detail"], f
    text = "\n".join(lines)
    assert "kernels 2..2 run again" in text
    assert text.index("[3/6]") < text.index("kernel 1 (fz_5_1): crash"), text


def test_a_crash_in_the_shared_compile_reruns_the_batch_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPUIFY_FUZZ_TEST_CRASH=compile:NAME kills the worker while it compiles a module that
    holds kernel NAME: the batch's kernels run one by one, and only NAME is a crash."""
    monkeypatch.setenv("CPUIFY_FUZZ_TEST_CRASH", "compile:fz_5_1")
    lines: list[str] = []
    summary = fuzz.fuzz(3, 5, jobs=2, batch=3, minimize_failures=False, log=lines.append, kernel_timeout=20.0)
    assert summary["counts"]["ok"] == 2 and summary["counts"]["crash"] == 1, summary
    (f,) = summary["failures"]
    assert f["index"] == 1 and "SIGKILL" in f["detail"] and "compiling a module of 1 kernel" in f["detail"], f
    assert any("run again one by one" in line for line in lines), lines


def test_help_prints() -> None:
    """--help prints every option (a '%' in a help string broke argparse's formatting)."""
    import subprocess
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "fuzz.py"), "--help"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())      # (argparse wraps the lines)
    assert "--reuse" in text and "% of the kernels" in text


def test_smoke_run_agrees_three_ways() -> None:
    """A dozen kernels through NVRTC, the interpreter, the default pipeline and no passes."""
    specs = [fuzz.generate(20240, i) for i in range(12)]
    results, _ = fuzz.run_batch(specs, specialized=False)
    assert [r["name"] for r in results] == [s.name for s in specs]
    bad = [r for r in results if r["status"] != "ok"]
    assert not bad, bad


@pytest.mark.skipif(not os.environ.get("CPUIFY_FUZZ"), reason="opt-in: set CPUIFY_FUZZ=N to fuzz N kernels")
def test_fuzz_opt_in() -> None:
    count = int(os.environ["CPUIFY_FUZZ"])
    seed = int(os.environ.get("CPUIFY_FUZZ_SEED", "0"))
    summary = fuzz.fuzz(count, seed, jobs=os.cpu_count() or 1, minimize_failures=True, log=lambda _: None)
    assert summary["counts"]["ok"] + summary["counts"]["refused"] == count, summary["failures"]


@pytest.mark.slow
def test_gpu_referee_harness_through_cpuify_nvcc(tmp_path: Path) -> None:
    """The --gpu-referee program (inputs built in, outputs to a file), built with `cpuify nvcc`
    in place of NVIDIA's nvcc: every kernel is compared and agrees."""
    specs = [fuzz.generate(5, i) for i in range(2)]
    results = [{"name": s.name, "status": "ok", "detail": ""} for s in specs]
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = str(ROOT / "src") + (os.pathsep + env_path if env_path else "")
    try:
        fuzz.gpu_referee(specs, f"{sys.executable} -m cpuify.cli.main nvcc", tmp_path, results)
    finally:
        os.environ["PYTHONPATH"] = env_path
    assert all(r.get("refereed") and r["status"] == "ok" for r in results), results


def test_first_starts_the_run_at_a_kernel_index(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    seen = {}

    def fake(count, seed, *args, first=0, **kwargs):  # type: ignore[no-untyped-def]
        seen.update(count=count, seed=seed, first=first)
        return {"count": count, "seconds": 0.0, "kernels_per_second": 0.0, "counts": {}, "times": {},
                "refusals": {}, "failures": []}
    monkeypatch.setattr(fuzz, "fuzz", fake)
    # main turns the cache off in os.environ (for the tool's processes); undone after the test
    monkeypatch.setenv("CPUIFY_NO_CACHE", "1")
    fuzz.main(["--seed", "3", "--first", "1200", "--count", "80"])
    assert seen == {"count": 80, "seed": 3, "first": 1200}
    fuzz.main(["--seed", "3", "--reproduce", "7"])
    assert seen == {"count": 1, "seed": 3, "first": 7}


def test_fz_2801_1669_index_modulo_the_block_after_a_join() -> None:
    """The fuzzer's fz_2801_1669 (seed 2801), kept as its generated spec: nvcc takes the
    `% nt` of two `if` arms (`(lt + 1) % nt` and `(lt * 7 + 10) % nt`) once, after the join;
    in code specialized for 128 threads the mask of the merged index was not hidden from
    LLVM (codegen.ptx_ops.masked_thread_index looked only at the value itself) and thread
    127 read past the shared array (see test_fuzz_regressions.py's fz_300_16)."""
    spec = fuzz.KernelSpec.from_json(json.loads((ROOT / "tests" / "data" / "fuzz" / "fz_2801_1669.json").read_text()))
    results, _ = fuzz.run_batch([spec], specialized=True)
    assert results[0]["status"] == "ok", results[0]["detail"]


def test_fz_2805_92_generic_pointer_into_shared_memory_kept_across_a_barrier() -> None:
    """The fuzzer's fz_2805_92 (seed 2805, its same-thread reuse mode), kept as its
    generated spec: `rp = (lt & 1) ? &s[lt * 4] : &scr[gt * 4]` is made before a barrier and
    used after it, where a thread stores `rp[2]` and loads `s[lt * 4 + k]` again.  The
    segment functions took shared memory as a noalias argument, and the pointer kept across
    the barrier comes back from the slots, not based on that argument: LLVM took the load as
    independent of the store (every build: generic, specialized, no passes)."""
    spec = fuzz.KernelSpec.from_json(json.loads((ROOT / "tests" / "data" / "fuzz" / "fz_2805_92.json").read_text()))
    results, _ = fuzz.run_batch([spec], specialized=True)
    assert results[0]["status"] == "ok", results[0]["detail"]


def test_fz_2806_1018_directed_fma_on_constants_just_below_a_power_of_two() -> None:
    """The fuzzer's fz_2806_1018, kept as its generated spec:
    `__fsqrt_ru(__fmaf_rd(1.17549435e-38f, -2147483904.0f, 16777216.0f))` gave 4095.9998
    instead of 4096: the fma's constant bounds were summed in f64, a binade too high, and
    the floor on that binade's grid lost one (test_quantized_fma.py has the hand check)."""
    spec = fuzz.KernelSpec.from_json(json.loads((ROOT / "tests" / "data" / "fuzz" / "fz_2806_1018.json").read_text()))
    results, _ = fuzz.run_batch([spec], specialized=True)
    assert results[0]["status"] == "ok", results[0]["detail"]


def test_fz_2807_2107_a_thread_stride_nvcc_computes_with_a_negative_constant() -> None:
    """The fuzzer's fz_2807_2107 (its reuse mode), kept as its generated spec: a thread
    stores `scr[gt * 4 + 3]`, loads `scr[gt * 4 + u % 4]`, then stores the other three
    words.  NVRTC computes gt * 4 as gt * 37 + gt * -33, and codegen/thread_order read the
    32-bit -33 as 4294967263: a step of 4 + 2^32 per thread, no group member, so the store
    kept the access group and LLVM's interleaved group of the four stores sank below the
    load (every build)."""
    spec = fuzz.KernelSpec.from_json(json.loads((ROOT / "tests" / "data" / "fuzz" / "fz_2807_2107.json").read_text()))
    results, _ = fuzz.run_batch([spec], specialized=True)
    assert results[0]["status"] == "ok", results[0]["detail"]


def test_fz_2807_2538_a_selected_shared_load_after_the_join_of_its_select() -> None:
    """The fuzzer's fz_2807_2538 (reuse mode), kept as its generated spec: in the `else`
    arm of an early-return `if`, `s[2] = u0 - min(u0, 2^31)` (a selp) feeds a wrapping
    unsigned sum u1; after the join, a load of `s[lt * 5 + u1 % 5]` was split per side
    of that selp (speculation.selected_shared_load), recomputing the sum from operands
    whose slots the `else` arm never wrote: undefined values, a branch on them, and LLVM
    dropped every even block's path (its threads ran past their `return`)."""
    spec = fuzz.KernelSpec.from_json(json.loads((ROOT / "tests" / "data" / "fuzz" / "fz_2807_2538.json").read_text()))
    results, _ = fuzz.run_batch([spec], specialized=True)
    assert results[0]["status"] == "ok", results[0]["detail"]
