"""LLVM's O3 in a worker process under a CPU-time limit (codegen/llvm_worker.py): the same
code as in this process, a module over the limit optimized again with LLVM's own unswitching
budget, and the fuzzer's fz_2809_6391 (an exponential unswitching blow-up) built and run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cpuify.codegen import jit, llvm_worker
from cpuify.errors import CpuifyError

ROOT = Path(__file__).resolve().parents[1]

#: a thread loop whose body branches on a loop-invariant flag: unswitched at O3
_LOOP = """
define void @f(ptr noalias %out, ptr noalias %in, i32 %n, i1 %flag) {
entry:
  %cmp0 = icmp sgt i32 %n, 0
  br i1 %cmp0, label %loop, label %exit
loop:
  %i = phi i32 [ 0, %entry ], [ %next, %latch ]
  %idx = sext i32 %i to i64
  %p = getelementptr float, ptr %in, i64 %idx
  %v = load float, ptr %p
  br i1 %flag, label %then, label %latch
then:
  %w = fmul float %v, 2.0
  %q = getelementptr float, ptr %out, i64 %idx
  store float %w, ptr %q
  br label %latch
latch:
  %next = add i32 %i, 1
  %cmp = icmp slt i32 %next, %n
  br i1 %cmp, label %loop, label %exit
exit:
  ret void
}
"""


def _module(name: str = "m") -> str:
    triple, layout = jit.triple_and_layout()
    return f'target triple = "{triple}"\ntarget datalayout = "{layout}"\n' + _LOOP


def test_worker_gives_the_code_this_process_gives() -> None:
    text = _module()
    assert llvm_worker.cpu_limit(len(text)) > 0
    here, there = str(jit._optimize_here(text)), str(jit.optimize(text))
    assert _code(there) == _code(here)
    assert "vector.body" in there


def _code(module: str) -> list[str]:
    """The module's lines without comments (the `; preds = ...` lists are in another order
    after the bitcode's round trip) and without the module id."""
    return [line.split(";")[0].rstrip() for line in module.splitlines()
            if not line.startswith("; ModuleID")]


def test_worker_reports_a_module_llvm_rejects() -> None:
    with pytest.raises(RuntimeError):
        jit.optimize(_module() + "define void @g() {\n  ret i32 0\n}\n")
    assert "vector.body" in str(jit.optimize(_module()))     # and serves the next one


def test_no_worker_with_limit_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CPUIFY_LLVM_CPU_LIMIT", "0")
    assert llvm_worker.cpu_limit(10**6) == 0.0
    calls = []
    monkeypatch.setattr(llvm_worker, "request", lambda *a: calls.append(a))
    assert "vector.body" in str(jit.optimize(_module()))
    assert calls == []


def test_limit_must_be_a_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CPUIFY_LLVM_CPU_LIMIT", "soon")
    with pytest.raises(CpuifyError, match="CPUIFY_LLVM_CPU_LIMIT"):
        jit.optimize(_module())


def test_over_the_limit_twice_falls_back_to_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []

    def over(header, payload):  # type: ignore[no-untyped-def]
        asked.append(header["options"])
        raise llvm_worker.OverLimit
    monkeypatch.setattr(llvm_worker, "request", over)
    text = str(jit.optimize(_module()))
    base = list(jit.llvm_options())
    assert asked == [base, base + list(jit.DEFAULT_UNSWITCH_OPTIONS)]
    assert "vector.body" not in text        # the bounded pipeline: no vectorization


def test_a_forked_child_starts_its_own_worker() -> None:
    jit.optimize(_module())                 # this process's worker is running
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                            # pragma: no cover (the child)
        try:
            ok = "vector.body" in str(jit.optimize(_module()))
            os.write(w, b"ok" if ok else b"no")
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 10)
    os.close(r)
    os.waitpid(pid, 0)
    assert got == b"ok"
    assert "vector.body" in str(jit.optimize(_module()))



def test_worker_is_forked_from_this_process_when_no_other_thread_runs() -> None:
    """A process with one thread forks its worker (Python, llvmlite and LLVM's targets are
    loaded already: starting `python -m` took about 0.1 s of CPU per build); with another
    thread running, it starts one with `python -m` (a fork would wait for that thread's
    compile sections).  Both give the code this process gives."""
    import threading
    text = _module()
    here = _code(str(jit._optimize_here(text)))
    for other_thread in (False, True):
        with llvm_worker._lock:
            if llvm_worker._worker is not None:
                llvm_worker._worker.close()
            llvm_worker._worker = None
        stop = threading.Event()
        t = threading.Thread(target=stop.wait) if other_thread else None
        if t is not None:
            t.start()
        try:
            if not other_thread and threading.active_count() > 1:
                continue                    # (a thread of the test run's own)
            assert _code(str(jit.optimize(text))) == here
            forked = isinstance(llvm_worker._worker.proc, llvm_worker._ForkedProcess)
            assert forked is not other_thread
        finally:
            stop.set()
            if t is not None:
                t.join()


def test_fz_2809_6391_exponential_unswitching_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fuzzer's fz_2809_6391 (seed 2809): specialized for its 7-thread block, LLVM's
    non-trivial unswitching (at cpuify's budget) copied its loop nest exponentially, more
    than 12 minutes of CPU.  Now its O3 stops at the limit (3 s here) and is redone with
    LLVM's own budget; the kernel's results match the reference interpreter."""
    monkeypatch.setenv("CPUIFY_LLVM_CPU_LIMIT", "3")
    monkeypatch.setenv("CPUIFY_NO_CACHE", "1")
    from test_fuzz import fuzz      # tools/fuzz.py, loaded once
    spec = fuzz.KernelSpec.from_json(json.loads((ROOT / "tests" / "data" / "fuzz" / "fz_2809_6391.json").read_text()))
    results, _ = fuzz.run_batch([spec], specialized=True)
    assert results[0]["status"] == "ok", results[0]["detail"]


def test_an_unresolved_library_call_is_an_error_not_a_call_of_address_0() -> None:
    """MCJIT gives a symbol no loaded library defines the address 0; a call of it faulted
    far from the cause (f64 -> f16 on CPUs without AVX512-FP16 was libgcc's __truncdfhf2).
    The loader names it instead.  A name the process has (libm's sin, cpuify's runtime)
    loads as before."""
    llvm = jit.llvm
    jit._init()

    def obj_of(text: str) -> bytes:
        return jit.target_machine().emit_object(llvm.parse_assembly(text))

    missing = obj_of("declare double @cpuify_no_such_function(double)\n"
                     "define double @f(double %x) {\n"
                     "  %r = call double @cpuify_no_such_function(double %x)\n"
                     "  ret double %r\n}\n")
    assert jit.undefined_symbols(missing) == ["cpuify_no_such_function"]
    with pytest.raises(CpuifyError, match="cpuify_no_such_function"):
        jit.LoadedObject(missing)
    present = obj_of("declare double @sin(double)\n"
                     "define double @f(double %x) {\n"
                     "  %r = call double @sin(double %x)\n"
                     "  ret double %r\n}\n")
    assert jit.undefined_symbols(present) == ["sin"]
    loaded = jit.LoadedObject(present)
    assert loaded.function_address("f")


def test_a_worker_that_llvm_aborts_gives_the_fallback_passes(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """An assertion of LLVM's own ends the worker with SIGABRT (NPB-GPU's SP: the loop
    vectorizer's "VPlan cost model and legacy cost model disagreed" in llvmlite's LLVM,
    which is built with assertions).  O3 in this process would end it the same way: the
    module gets the fallback passes (no loop pass: the bounded pipeline's vectorizer still runs on
    loops with vectorize hints), with one warning, and the next module a fresh worker."""
    def abort_in_worker(header, payload):  # type: ignore[no-untyped-def]
        os.abort()                          # (runs in the forked worker)
    with llvm_worker._lock:
        if llvm_worker._worker is not None:
            llvm_worker._worker.close()
        llvm_worker._worker = None
    monkeypatch.setattr(llvm_worker, "fork_handler", abort_in_worker)
    import threading
    if threading.active_count() > 1:
        pytest.skip("a thread of the test run's own: the worker would not be forked")
    text = str(jit.optimize(_module()))
    assert "vector.body" not in text        # the fallback passes: no vectorization
    assert "define void @f" in text
    assert "LLVM's O3 failed on a kernel module" in capfd.readouterr().err
    assert llvm_worker._worker is None and not llvm_worker._unavailable
    monkeypatch.undo()
    assert "vector.body" in str(jit.optimize(_module()))   # a fresh worker: O3 again
