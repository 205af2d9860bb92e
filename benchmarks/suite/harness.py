"""Harness of the cpuify benchmark suite: discovers the workloads, builds their OpenMP twins,
runs every implementation, checks it against NumPy, times it, and prints/writes the results.

    python -m benchmarks [--size small|default|large] [--only NAME ...] [--json OUT]
                         [--plots DIR] [--peers cpuify,omp,omp1,pocl,numba]

Each workload runs in a child process of its own (`--child`, internal), so that a workload
that crashes (a segfault in generated code), hangs (past --timeout) or leaks memory is
reported as failed and the suite goes on with the next one; `--no-isolate` runs everything
in this process instead (for debugging).  See benchmarks/README.md for what is measured."""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import importlib
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
import zlib
from collections import deque
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent          # benchmarks/suite
BENCH = HERE.parent                             # benchmarks
ROOT = BENCH.parent                             # repository root
WORKLOAD_DIR = HERE / "workloads"
BIN_DIR = BENCH / "bin" / "suite"
DEFAULT_OUT = BENCH / "bin" / "results"
if (ROOT / "src" / "cpuify").is_dir():          # measure this checkout, not an installed copy
    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# numba reads this when it is first imported: the numba peer is its CUDA *simulator*
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
os.environ.setdefault("PYOPENCL_COMPILER_OUTPUT", "0")

import numpy as np  # noqa: E402

from benchmarks.core import cpu_name  # noqa: E402
from benchmarks.suite.workload import Workload  # noqa: E402

PEERS = ["cpuify", "omp", "omp1", "pocl", "numba"]
SIZES = ["small", "default", "large"]
REPEATS = {"small": 5, "default": 5, "large": 3}
OMP_CFLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=gnu99"]
POCL_PLATFORM = "Portable Computing Language"
SEED = 12345


def peer_label(peer: str, nthreads: int) -> str:
    return {"cpuify": "cpuify", "omp": f"OpenMP {nthreads}t", "omp1": "OpenMP 1t",
            "pocl": "PoCL", "numba": "numba sim"}.get(peer, peer)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------
# discovery

def discover() -> list[str]:
    """Module names (file stems) of benchmarks/suite/workloads/*.py, sorted."""
    return sorted(p.stem for p in WORKLOAD_DIR.glob("*.py")
                  if not p.stem.startswith("_"))


def load_workload(stem: str) -> Workload:
    mod = importlib.import_module(f"benchmarks.suite.workloads.{stem}")
    w = getattr(mod, "WORKLOAD", None)
    if w is None:
        raise RuntimeError(f"benchmarks/suite/workloads/{stem}.py defines no WORKLOAD")
    if not getattr(w, "name", ""):
        w.name = stem
    return w


# ----------------------------------------------------------------------------------------
# peers: OpenMP builds, OpenCL context, numba simulator

class Unavailable(Exception):
    """A peer cannot run (missing package or driver): the message says why."""


def _cc() -> str:
    return os.environ.get("CC", "gcc")


_CC_VERSION: str | None = None


def cc_version() -> str:
    global _CC_VERSION
    if _CC_VERSION is None:
        try:
            _CC_VERSION = subprocess.run([_cc(), "--version"], capture_output=True, text=True,
                                         check=True).stdout.splitlines()[0]
        except (OSError, subprocess.CalledProcessError, IndexError) as e:
            _CC_VERSION = f"unavailable ({e})"
    return _CC_VERSION


def build_omp(name: str, source: str, extra_flags: tuple[str, ...] = ()) -> Path:
    """Compiles an OpenMP twin into benchmarks/bin/suite/<name>-<hash>.so; the hash covers
    the source, the flags and the compiler version, so a cached build is reused only when
    all three match.  Safe against concurrent runs (build into a temporary file, rename)."""
    flags = OMP_CFLAGS + list(extra_flags)
    key = hashlib.sha256("\0".join([source, " ".join(flags), _cc(), cc_version()])
                         .encode()).hexdigest()[:16]
    BIN_DIR.mkdir(parents=True, exist_ok=True)
    lib = BIN_DIR / f"{name}-{key}.so"
    if lib.is_file():
        return lib
    src = BIN_DIR / f"{name}-{key}.c"
    tmp_src = src.with_suffix(f".c.{os.getpid()}")
    tmp_src.write_text(source)
    os.replace(tmp_src, src)
    tmp = BIN_DIR / f".{name}-{key}.{os.getpid()}.so"
    proc = subprocess.run([_cc(), *flags, "-o", str(tmp), str(src), "-lm"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"gcc failed for {src.name}:\n{proc.stderr.strip()}")
    os.replace(tmp, lib)
    return lib


_GOMP: Any = None


def omp_set_threads(n: int) -> None:
    """Sets the thread count of the next OpenMP parallel regions started from this thread
    (the libgomp the twins are linked against is loaded once per process)."""
    global _GOMP
    if _GOMP is None:
        _GOMP = ctypes.CDLL("libgomp.so.1", mode=ctypes.RTLD_GLOBAL)
        _GOMP.omp_set_num_threads.argtypes = [ctypes.c_int]
        _GOMP.omp_set_num_threads.restype = None
    _GOMP.omp_set_num_threads(int(n))


def _omp_copy_lib() -> Any:
    src = r"""
#include <stddef.h>
#include <string.h>
#include <omp.h>
/* copy n floats with all threads: each thread memcpy's one contiguous chunk */
void par_copy(float *restrict dst, const float *restrict src, long n) {
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        long chunk = (n + nt - 1) / nt, lo = t * chunk, hi = lo + chunk < n ? lo + chunk : n;
        if (lo < hi) memcpy(dst + lo, src + lo, (size_t)(hi - lo) * sizeof(float));
    }
}
"""
    lib = ctypes.CDLL(str(build_omp("_copy_bw", src)))
    lib.par_copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
    lib.par_copy.restype = None
    return lib


_OPENCL: tuple | None = None


def opencl_env() -> tuple[Any, Any, Any, Any]:
    """(pyopencl, context, queue, device) on the PoCL CPU device, or raises Unavailable."""
    global _OPENCL
    if _OPENCL is not None:
        return _OPENCL
    try:
        import pyopencl as cl
    except Exception as e:                                     # noqa: BLE001
        raise Unavailable(f"pyopencl not importable ({type(e).__name__}: {e}); "
                          "run benchmarks/setup.sh") from None
    try:
        platforms = cl.get_platforms()
    except Exception as e:                                     # noqa: BLE001
        raise Unavailable(f"no OpenCL platform ({type(e).__name__}: {e}); install "
                          "pocl-opencl-icd (benchmarks/setup.sh)") from None
    pocl = [p for p in platforms if POCL_PLATFORM in p.name]
    if not pocl:
        raise Unavailable(f"no PoCL platform among {[p.name for p in platforms]}; install "
                          "pocl-opencl-icd (benchmarks/setup.sh)")
    devs = pocl[0].get_devices()
    if not devs:
        raise Unavailable("the PoCL platform has no device")
    ctx = cl.Context(devs[:1])
    queue = cl.CommandQueue(ctx)
    warnings.filterwarnings("ignore", module="pyopencl")
    _OPENCL = (cl, ctx, queue, devs[0])
    return _OPENCL


def opencl_info() -> dict[str, Any]:
    try:
        cl, _ctx, _q, dev = opencl_env()
    except Unavailable as e:
        return {"available": False, "reason": str(e)}
    return {"available": True, "platform": dev.platform.name,
            "platform_version": dev.platform.version, "device": dev.name,
            "compute_units": dev.max_compute_units, "pyopencl": cl.VERSION_TEXT}


def numba_check() -> dict[str, Any]:
    try:
        import numba
        from numba import cuda
        if not cuda.is_available():
            return {"available": False, "reason": "numba.cuda simulator not available"}
        return {"available": True, "numba": numba.__version__,
                "numba_cuda": _dist_version("numba-cuda")}
    except Exception as e:                                     # noqa: BLE001
        return {"available": False, "reason": f"numba-cuda not importable "
                f"({type(e).__name__}: {e}); run benchmarks/setup.sh"}


def _dist_version(dist: str) -> str:
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:                                          # noqa: BLE001
        return "?"


# ----------------------------------------------------------------------------------------
# timing (the method of benchmarks/core.py: warm-up, blocks round-robin over rounds with a
# pause before each block, samples of >= 5 ms, best and median)

class Contender:
    def __init__(self, fn: Callable[[], Any], before: Callable[[], None] | None = None) -> None:
        self.fn = fn
        self.before = before


def bench(cont: dict[str, Contender], repeats: int, warmup: int = 2, rounds: int = 3,
          min_sample_s: float = 0.005, gap_s: float = 0.15, max_block_s: float = 4.0,
          warmup_s: float = 0.06, max_preempted: int = 8
          ) -> tuple[dict[str, dict[str, Any]], dict[str, Any], dict[str, str]]:
    """Times each contender `repeats` times.  Returns (stats, last output, errors).

    Contenders run in blocks, round-robin over `rounds` rounds (A A A B B B C C C, A A A ...),
    so that slow drifts of a noisy machine hit all of them alike; before each block we sleep
    `gap_s` so that the idle threads of the previous contender's pool (libgomp spins for a
    while after a parallel region) do not steal cores.  Each block starts with warm-up calls
    (`warmup` in the first round, 1 later) that go on until they have run for `warmup_s`:
    after the pause this VM needs 20-30 ms of load before its cores run at full speed again
    (a 2 ms call takes 8-10 ms right after the pause), so a fixed count of warm-up calls timed
    the ramp-up of short calls, not the code.  A sample runs the callable `inner` times, inner
    chosen (from the last warm-up call) so that a sample lasts at least min_sample_s.  A block
    stops early, after at least one sample, once it has run for max_block_s (slow
    contenders).  A sample during which the process was preempted (its involuntary context
    switches, getrusage, went up: another process ran on a core this one needed) is taken
    again, up to `max_preempted` times: on a loaded machine a 3 ms call preempted for a
    40 ms time slice of another process measured 10x its CPU time, in every sample of some
    runs (the thermal pyramid read 3.1 ms in one run, 36 ms in the next; stats' "preempted"
    counts the samples taken again).  "cpu_best" is the least process CPU time (all
    threads) per call of a sample: the time of one-thread runs that does not depend on the
    machine's load.  A contender that raises is dropped and its error returned."""
    names = list(cont)
    rounds = max(1, min(rounds, repeats)) if len(names) > 1 else 1
    per_round = [repeats // rounds + (1 if r < repeats % rounds else 0) for r in range(rounds)]
    samples: dict[str, list[float]] = {k: [] for k in names}
    inner: dict[str, int] = {}
    preempted: dict[str, int] = {k: 0 for k in names}
    cpu_samples: dict[str, list[float]] = {k: [] for k in names}
    last: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for r in range(rounds):
        for name in names:
            if name in errors:
                continue
            c = cont[name]
            try:
                if len(names) > 1:
                    time.sleep(gap_s)
                if c.before is not None:
                    c.before()
                dt = 0.0
                warm_t0 = time.perf_counter()
                calls = 0
                while (calls < (warmup if r == 0 else 1)
                       or time.perf_counter() - warm_t0 < min(warmup_s, max_block_s)):
                    t0 = time.perf_counter()
                    last[name] = c.fn()
                    dt = time.perf_counter() - t0
                    calls += 1
                if name not in inner:
                    inner[name] = max(1, math.ceil(min_sample_s / max(dt, 1e-9)))
                k = inner[name]
                block_t0 = time.perf_counter()
                for i in range(per_round[r]):
                    if i > 0 and time.perf_counter() - block_t0 > max_block_s:
                        break
                    for attempt in range(max_preempted + 1):
                        n0, c0 = _involuntary_switches(), time.process_time()
                        t0 = time.perf_counter()
                        for _ in range(k):
                            last[name] = c.fn()
                        dt = (time.perf_counter() - t0) / k
                        if _involuntary_switches() == n0 or attempt == max_preempted or \
                                time.perf_counter() - block_t0 > max_block_s:
                            break
                        preempted[name] += 1
                    samples[name].append(dt)
                    cpu_samples[name].append((time.process_time() - c0) / k)
            except Exception as e:                             # noqa: BLE001
                errors[name] = _short_exc(e)
                _log(traceback.format_exc())
    stats = {}
    for k, v in samples.items():
        if v and k not in errors:
            stats[k] = {"best": min(v), "median": statistics.median(v), "n": len(v),
                        "inner": inner.get(k, 1), "preempted": preempted[k],
                        "cpu_best": min(cpu_samples[k])}
    return stats, last, errors


def _involuntary_switches() -> int:
    """Involuntary context switches of this process so far (all its threads)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


def _short_exc(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    first = msg[0] if msg else ""
    if len(msg) > 1:
        first += " …"
    return f"{type(e).__name__}: {first}"[:300]


# ----------------------------------------------------------------------------------------
# one workload (runs in the child process)

def _fingerprint(inp: dict) -> dict[str, int]:
    """crc32 per input array (a strided sample of big ones): detects run_* methods that
    modify their inputs, which would corrupt the runs of the implementations after them."""
    fp = {}
    for k, v in inp.items():
        if k.startswith("_") or not isinstance(v, np.ndarray):
            continue
        a = v.reshape(-1) if v.flags.c_contiguous else np.ascontiguousarray(v).reshape(-1)
        if a.nbytes > (16 << 20):
            a = np.ascontiguousarray(a[::max(1, a.size // (1 << 20))])
        fp[k] = zlib.crc32(a.view(np.uint8))
    return fp


def _check(w: Workload, p: dict, out: Any, ref: dict) -> tuple[bool, str]:
    try:
        ok, msg = w.check(p, out, ref)
        return bool(ok), str(msg)
    except Exception as e:                                     # noqa: BLE001
        return False, f"check raised {_short_exc(e)}"


def run_workload(stem: str, size: str, peers: list[str], repeats: int, scaling: bool,
                 seed: int = SEED) -> dict[str, Any]:
    """Runs one workload at one size with the requested peers; returns a JSON-able dict."""
    res: dict[str, Any] = {"module": stem, "name": stem, "size": size, "peers": {},
                           "status": "ok"}
    t_start = time.perf_counter()
    try:
        w = load_workload(stem)
        res["name"] = w.name
        res["kind"] = getattr(w, "kind", "other")
        res["description"] = getattr(w, "description", "") or (
            (type(w).__doc__ or sys.modules[type(w).__module__].__doc__ or "")
            .strip().splitlines() or [""])[0]
        if size not in w.sizes:
            raise RuntimeError(f"workload has no size {size!r} (has {sorted(w.sizes)})")
        p = dict(w.sizes[size])
        res["params"] = p
        _run_peers(w, p, size, peers, repeats, scaling, seed, res)
    except Exception as e:                                     # noqa: BLE001
        res["status"] = "failed"
        res["error"] = _short_exc(e)
        res["traceback"] = traceback.format_exc()
        _log(res["traceback"])
    res["wall_s"] = time.perf_counter() - t_start
    return res


def _na(reason: str) -> dict[str, Any]:
    return {"status": "n/a", "reason": reason}


def _err(phase: str, e: BaseException | str) -> dict[str, Any]:
    msg = e if isinstance(e, str) else _short_exc(e)
    d = {"status": "error", "reason": f"{phase}: {msg}"}
    if not isinstance(e, str):
        d["traceback"] = traceback.format_exc()
        _log(d["traceback"])
    return d


def _run_peers(w: Workload, p: dict, size: str, peers: list[str], repeats: int,
               scaling: bool, seed: int, res: dict[str, Any]) -> None:
    import cpuify

    nthreads = cpuify.num_threads()
    res["threads"] = nthreads
    try:
        res["bytes_moved"] = w.bytes_moved(p)
        res["flops"] = w.flops(p)
    except Exception as e:                                     # noqa: BLE001
        res["bytes_moved"] = res["flops"] = None
        _log(f"bytes_moved/flops raised {_short_exc(e)}")

    t0 = time.perf_counter()
    inp = w.make_inputs(p, np.random.default_rng(seed))
    ref = w.reference(p, inp)
    res["setup_s"] = time.perf_counter() - t0
    fp0 = _fingerprint(inp)
    out: dict[str, dict[str, Any]] = res["peers"]
    cont: dict[str, Contender] = {}

    def set_cpuify(n: int) -> Callable[[], None]:
        return lambda: cpuify.set_num_threads(n)

    def set_omp(n: int) -> Callable[[], None]:
        return lambda: omp_set_threads(n)

    # --- cpuify
    want_cpuify = "cpuify" in peers or "numba" in peers
    mod = None
    if want_cpuify:
        try:
            t0 = time.perf_counter()
            mod = cpuify.RawModule(code=w.cuda_source,
                                   options=tuple(getattr(w, "cuda_options", ()) or ()))
            mod.compile()                                     # (compilation is lazy)
            res["cpuify_compile_s"] = time.perf_counter() - t0
            res["cpuify_from_cache"] = bool(getattr(mod._compiled, "from_cache", False))
        except Exception as e:                                 # noqa: BLE001
            out["cpuify"] = _err("compile", e)
    if mod is not None and "cpuify" in peers:
        cont["cpuify"] = Contender(lambda: w.run_cpuify(p, inp, mod), set_cpuify(nthreads))

    # --- OpenMP
    lib = None
    want_omp = [x for x in ("omp", "omp1") if x in peers]
    if want_omp or scaling:
        try:
            if not getattr(w, "omp_source", ""):
                raise Unavailable("no OpenMP twin")
            lib = ctypes.CDLL(str(build_omp(w.name, w.omp_source,
                                            tuple(getattr(w, "omp_cflags", ()) or ()))))
        except Unavailable as e:
            for x in want_omp:
                out[x] = _na(str(e))
        except Exception as e:                                 # noqa: BLE001
            for x in want_omp:
                out[x] = _err("build", e)
    if lib is not None:
        if "omp" in peers:
            cont["omp"] = Contender(lambda: w.run_omp(p, inp, lib), set_omp(nthreads))
        if "omp1" in peers:
            cont["omp1"] = Contender(lambda: w.run_omp(p, inp, lib), set_omp(1))

    # --- OpenCL on PoCL
    if "pocl" in peers:
        if w.opencl_source is None:
            out["pocl"] = _na(w.opencl_reason or "no OpenCL twin")
        else:
            try:
                cl, ctx, queue, _dev = opencl_env()
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    prg = cl.Program(ctx, w.opencl_source).build(
                        options=getattr(w, "opencl_options", "") or "")
                res["pocl_build_s"] = time.perf_counter() - t0
                cont["pocl"] = Contender(lambda: w.run_opencl(p, inp, cl, ctx, queue, prg))
            except Unavailable as e:
                out["pocl"] = _na(str(e))
            except Exception as e:                             # noqa: BLE001
                out["pocl"] = _err("build", e)

    # --- thread scaling: cpuify and OpenMP at 1, 2, 4, ... threads below nthreads
    scale_counts = sorted({1, nthreads} | {1 << i for i in range(1, 16) if (1 << i) < nthreads})
    if scaling:
        for k in scale_counts:
            if mod is not None and not (k == nthreads and "cpuify" in cont):
                cont[f"cpuify@{k}"] = Contender(lambda: w.run_cpuify(p, inp, mod), set_cpuify(k))
            if lib is not None and not (k == nthreads and "omp" in cont) \
                    and not (k == 1 and "omp1" in cont):
                cont[f"omp@{k}"] = Contender(lambda: w.run_omp(p, inp, lib), set_omp(k))

    # --- correctness run (also the first warm-up) of every contender
    checked: dict[str, tuple[bool, str]] = {}
    for name in list(cont):
        c = cont[name]
        try:
            if c.before:
                c.before()
            t0 = time.perf_counter()
            o = c.fn()
            first_s = time.perf_counter() - t0
        except Exception as e:                                 # noqa: BLE001
            del cont[name]
            out[name] = _err("run", e)
            continue
        checked[name] = _check(w, p, o, ref)
        out[name] = {"status": "ok", "first_call_s": first_s}
        fp = _fingerprint(inp)
        if fp != fp0:
            changed = [k for k in fp0 if fp.get(k) != fp0[k]]
            out[name]["inputs_modified"] = changed
            checked[name] = (False, f"modified its inputs {changed}; " + checked[name][1])
            _log(f"{w.name}: {name} modified its inputs {changed}; regenerating them")
            inp2 = w.make_inputs(p, np.random.default_rng(seed))
            for k in changed:
                np.copyto(inp[k], inp2[k])
            del inp2
        _log(f"  {w.name} {name}: first call {first_s * 1e3:.1f} ms, "
             f"{'ok' if checked[name][0] else 'WRONG'} ({checked[name][1][:150]})")

    # --- timing
    stats, last, errors = bench(cont, repeats)
    for name in cont:
        d = out[name]
        if name in errors:
            out[name] = _err("timing", errors[name])
            continue
        d.update(stats[name])
        ok2, msg2 = _check(w, p, last[name], ref)
        ok1, msg1 = checked[name]
        d["correct"] = ok1 and ok2
        d["check"] = msg1 if not ok1 else (msg2 if not ok2 else msg1)
        if ok1 and not ok2:
            d["check"] = "first call correct, last timed call wrong: " + msg2
    del last

    # --- numba simulator
    if "numba" in peers:
        out["numba"] = _run_numba(w, p, size, inp, ref, mod, repeats, seed)

    # collect scaling data
    if scaling:
        sc: dict[str, dict[str, float]] = {"cpuify": {}, "omp": {}}
        for name, d in out.items():
            if d.get("status") != "ok" or "best" not in d or not d.get("correct"):
                continue
            if name == "cpuify":
                sc["cpuify"][str(nthreads)] = d["best"]
            elif name == "omp":
                sc["omp"][str(nthreads)] = d["best"]
            elif name == "omp1":
                sc["omp"]["1"] = d["best"]
            elif "@" in name:
                impl, k = name.split("@")
                sc[impl][k] = d["best"]
        res["scaling"] = sc
        # scaling-only contenders are not peers of the table
        for name in [n for n in out if "@" in n]:
            res.setdefault("scaling_runs", {})[name] = out.pop(name)


def _run_numba(w: Workload, p: dict, size: str, inp: dict, ref: dict, mod: Any, repeats: int,
               seed: int) -> dict[str, Any]:
    if getattr(w, "numba_reason", "no Python port"):
        return _na(w.numba_reason)
    info = numba_check()
    if not info["available"]:
        return _na(info["reason"])
    over = getattr(w, "numba_size", None)
    if over is None and size != "small":
        return _na("the numba simulator runs each CUDA thread as a Python thread: "
                   "run only at --size small")
    pn = {**p, **(over or {})}
    d: dict[str, Any] = {"status": "ok"}
    cpuify_here = None
    if pn != p:
        d["params"] = pn
        inp = w.make_inputs(pn, np.random.default_rng(seed))
        ref = w.reference(pn, inp)
        if mod is not None:            # cpuify at the same parameters, for the ratio
            try:
                o = w.run_cpuify(pn, inp, mod)
                okc, msgc = _check(w, pn, o, ref)
                st, _last, errs = bench({"c": Contender(lambda: w.run_cpuify(pn, inp, mod))},
                                        repeats)
                if "c" in st:
                    cpuify_here = {**st["c"], "correct": okc, "check": msgc}
            except Exception as e:                             # noqa: BLE001
                cpuify_here = _err("run at numba size", e)
        d["cpuify_at_params"] = cpuify_here
    try:
        t0 = time.perf_counter()
        o = w.run_numba(pn, inp)
        first = time.perf_counter() - t0
    except NotImplementedError:
        return _na("no Python port (run_numba not implemented)")
    except Exception as e:                                     # noqa: BLE001
        return _err("run", e)
    ok1, msg1 = _check(w, pn, o, ref)
    _log(f"  {w.name} numba: first call {first:.2f} s, {'ok' if ok1 else 'WRONG'} ({msg1[:150]})")
    # the simulator does not compile: the first call was the warm-up; up to 3 more samples
    samples = [first]
    try:
        t_all = time.perf_counter()
        while len(samples) < 1 + min(3, repeats) and time.perf_counter() - t_all < 10.0:
            t0 = time.perf_counter()
            o = w.run_numba(pn, inp)
            samples.append(time.perf_counter() - t0)
    except Exception as e:                                     # noqa: BLE001
        return _err("timing", e)
    timed = samples[1:] or samples
    ok2, msg2 = _check(w, pn, o, ref)
    d.update({"best": min(timed), "median": statistics.median(timed), "n": len(timed),
              "first_call_s": first, "correct": ok1 and ok2,
              "check": msg1 if not ok1 else msg2})
    return d


# ----------------------------------------------------------------------------------------
# parent: copy bandwidth, children, table, JSON, plots

def measure_copy_bandwidth(nthreads: int, mib: int = 256) -> dict[str, Any]:
    """Memory copy bandwidth, counted as read + write (2 x size, no write-allocate), best of
    5: np.copyto (one thread) and an OpenMP memcpy on all threads.  The larger is the
    reference of the 'of copy' percentages."""
    n = mib * (1 << 20) // 4
    src = np.ones(n, np.float32)
    dst = np.zeros(n, np.float32)
    out: dict[str, Any] = {"bytes": 2 * src.nbytes}
    st, _, _ = bench({"np": Contender(lambda: np.copyto(dst, src))}, 5, warmup=1)
    out["numpy_copyto_GBs"] = 2 * src.nbytes / st["np"]["best"] / 1e9
    try:
        lib = _omp_copy_lib()
        omp_set_threads(nthreads)
        time.sleep(0.15)
        st, _, _ = bench({"omp": Contender(
            lambda: lib.par_copy(dst.ctypes.data, src.ctypes.data, n))}, 5, warmup=1)
        out["omp_copy_GBs"] = 2 * src.nbytes / st["omp"]["best"] / 1e9
        out["omp_threads"] = nthreads
    except Exception as e:                                     # noqa: BLE001
        out["omp_copy_error"] = _short_exc(e)
    out["reference_GBs"] = max(out["numpy_copyto_GBs"], out.get("omp_copy_GBs", 0.0))
    del src, dst
    time.sleep(0.15)
    return out


def run_child(stem: str, args: argparse.Namespace, peers: list[str]) -> dict[str, Any]:
    """Runs one workload in a fresh interpreter; a crash, a hang past args.timeout or a
    non-JSON exit becomes a 'failed' result with the tail of its stderr."""
    fd, tmp = tempfile.mkstemp(prefix=f"cpuify-suite-{stem}-", suffix=".json")
    os.close(fd)
    env = dict(os.environ)
    pp = [str(ROOT / "src")] if (ROOT / "src" / "cpuify").is_dir() else []
    env["PYTHONPATH"] = os.pathsep.join(pp + [str(ROOT)] + [x for x in [env.get("PYTHONPATH")] if x])
    if env.get("CPUIFY_PASS_LOG_DIR"):
        # (benchmarks/ablation.py: which passes touched this workload's kernels)
        env["CPUIFY_PASS_LOG"] = os.path.join(env["CPUIFY_PASS_LOG_DIR"], f"{stem}.jsonl")
    cmd = [sys.executable, "-m", "benchmarks.suite.harness", "--child", stem, "--size", args.size,
           "--peers", ",".join(peers), "--repeats", str(args.repeats), "--out", tmp]
    if args.no_scaling:
        cmd.append("--no-scaling")
    tail: deque[str] = deque(maxlen=40)
    proc = subprocess.Popen(cmd, cwd=str(ROOT), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, errors="replace")

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            tail.append(line.rstrip("\n"))
            if args.verbose:
                print("    | " + line.rstrip("\n"), file=sys.stderr, flush=True)

    th = threading.Thread(target=pump, daemon=True)
    th.start()
    t0 = time.perf_counter()
    timed_out = False
    try:
        proc.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()
        proc.wait()
    th.join(timeout=5)
    try:
        with open(tmp) as f:
            text = f.read()
        res = json.loads(text) if text.strip() else None
    except (OSError, json.JSONDecodeError):
        res = None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    if res is None or proc.returncode != 0 or timed_out:
        why = (f"timed out after {args.timeout:.0f} s" if timed_out else
               f"child process died ({_rc_text(proc.returncode)})")
        if res is None:
            res = {"module": stem, "name": stem, "size": args.size, "peers": {}}
        res["status"] = "failed"
        res["error"] = why + ("; last stderr line: " + tail[-1][:200] if tail else "")
        res["stderr_tail"] = list(tail)
    res["wall_s"] = time.perf_counter() - t0
    return res


def _rc_text(rc: int | None) -> str:
    if rc is None:
        return "no exit status"
    if rc < 0:
        import signal
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


def _fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} us"


def _fmt_num(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        return str(v)
    v = int(v)
    if v >= 1024 and v & (v - 1) == 0:
        return f"2^{v.bit_length() - 1}"
    if v >= 10_000_000 and v % 1_000_000 == 0:
        return f"{v // 1_000_000}M"
    if v >= 10_000 and v % 1000 == 0:
        return f"{v // 1000}k"
    return str(v)


def _fmt_ratio(r: float) -> str:
    return f"{r:.0f}" if r >= 100 else f"{r:.1f}" if r >= 10 else f"{r:.2f}"


def fmt_params(p: dict | None, width: int = 28) -> str:
    if not p:
        return ""
    s = " ".join(f"{k}={_fmt_num(v)}" for k, v in p.items())
    return s if len(s) <= width else s[:width - 1] + "…"


def _marks() -> tuple[str, str, str]:
    enc = (getattr(sys.stdout, "encoding", None) or "ascii").lower()
    try:
        "✓✗×…".encode(enc)
        return "✓", "✗", "×"
    except (UnicodeEncodeError, LookupError):
        return "ok", "X", "x"


def summarize(results: list[dict[str, Any]], peers: list[str], copy_bw: dict[str, Any] | None
              ) -> dict[str, Any]:
    """Adds ratios, rates and per-peer geomeans."""
    ref_bw = (copy_bw or {}).get("reference_GBs")
    geo: dict[str, list[float]] = {x: [] for x in peers if x != "cpuify"}
    for r in results:
        pr = r.get("peers", {})
        c = pr.get("cpuify", {})
        c_ok = c.get("status") == "ok" and c.get("correct") and "best" in c
        for peer, d in pr.items():
            if d.get("status") != "ok" or "best" not in d:
                continue
            if r.get("bytes_moved") and "params" not in d:
                d["GB/s"] = r["bytes_moved"] / d["best"] / 1e9
                if ref_bw:
                    d["of_copy_bw"] = d["GB/s"] / ref_bw
            if r.get("flops") and "params" not in d:
                d["GFLOP/s"] = r["flops"] / d["best"] / 1e9
            if peer == "cpuify":
                continue
            base = c if "params" not in d else (d.get("cpuify_at_params") or {})
            base_ok = (c_ok if "params" not in d else
                       bool(base.get("correct")) and "best" in base)
            if "best" in base and base.get("best"):
                d["ratio"] = d["best"] / base["best"]
                if base_ok and d.get("correct") and peer in geo:
                    geo[peer].append(d["ratio"])
    out = {}
    for peer, xs in geo.items():
        out[peer] = {"geomean": math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None,
                     "n": len(xs)}
    return out


def print_table(results: list[dict[str, Any]], peers: list[str], geo: dict[str, Any],
                copy_bw: dict[str, Any] | None, nthreads: int) -> None:
    ok_m, bad_m, times = _marks()
    notes: dict[str, int] = {}

    def note(text: str) -> str:
        if text not in notes:
            notes[text] = len(notes) + 1
        return f"[{notes[text]}]"

    header = ["workload", "size"] + [peer_label(x, nthreads) for x in peers] + ["cpuify rate"]
    rows: list[list[str]] = []
    for r in results:
        row = [r.get("name", r.get("module", "?")), fmt_params(r.get("params"))]
        if r.get("status") == "failed" and not r.get("peers"):
            row += [f"FAILED {note(r['name'] + ': ' + r.get('error', '?'))}"] + [""] * len(peers)
            rows.append(row)
            continue
        for peer in peers:
            d = r.get("peers", {}).get(peer)
            if d is None:
                if r.get("status") == "failed":
                    row.append(f"FAILED {note(r['name'] + ': ' + r.get('error', '?'))}")
                else:
                    row.append("-")
                continue
            st = d.get("status")
            if st == "n/a":
                row.append(f"n/a {note(f'{peer_label(peer, nthreads)}: ' + d['reason'])}")
            elif st == "error":
                row.append(f"error {note(r['name'] + ', ' + peer_label(peer, nthreads) + ': ' + d['reason'])}")
            elif "best" not in d:
                row.append("?")
            else:
                cell = _fmt_time(d["best"])
                if peer != "cpuify":
                    cell += f" {_fmt_ratio(d['ratio'])}{times}" if d.get("ratio") else " -"
                cell += " " + (ok_m if d.get("correct") else bad_m)
                if not d.get("correct"):
                    cell += " " + note(f"{r['name']}, {peer_label(peer, nthreads)} wrong: "
                                       f"{d.get('check', '')[:300]}")
                if "params" in d:
                    cell += " " + note(f"{peer_label(peer, nthreads)} on {r['name']} ran at "
                                       f"{fmt_params(d['params'], 80)}; ratio against cpuify "
                                       "at the same parameters")
                row.append(cell)
        c = r.get("peers", {}).get("cpuify", {})
        rate = ""
        if "GB/s" in c and r.get("kind") != "compute":
            rate = f"{c['GB/s']:.1f} GB/s"
            if "of_copy_bw" in c:
                rate += f" {100 * c['of_copy_bw']:.0f}%"
        elif "GFLOP/s" in c:
            rate = f"{c['GFLOP/s']:.1f} GFLOP/s"
        row.append(rate)
        if r.get("status") == "failed":
            row[2] += f" FAILED {note(r['name'] + ': ' + r.get('error', '?'))}"
        rows.append(row)
    geo_row = ["geomean peer/cpuify", ""]
    for peer in peers:
        if peer == "cpuify":
            geo_row.append("1")
        else:
            g = geo.get(peer, {})
            geo_row.append(f"{_fmt_ratio(g['geomean'])}{times} (n={g['n']})"
                           if g.get("geomean") else "-")
    geo_row.append("")
    widths = [max(len(str(x[i])) for x in [header, geo_row] + rows) for i in range(len(header))]

    def fmt(row: list[str]) -> str:
        return "  ".join(str(c).ljust(w) if i < 2 else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(row, widths)))

    print(fmt(header))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(fmt(row))
    print("  ".join("-" * w for w in widths))
    print(fmt(geo_row))
    print(f"\n  times: best of the timed calls; ratio = peer time / cpuify time "
          f"(> 1: cpuify faster); {ok_m}/{bad_m}: output matches the NumPy reference; geomean "
          "over workloads where both ran and were correct.")
    if copy_bw:
        print(f"  cpuify rate: GB/s (bytes_moved / best time) and its % of the measured copy "
              f"bandwidth {copy_bw['reference_GBs']:.1f} GB/s (np.copyto "
              f"{copy_bw['numpy_copyto_GBs']:.1f} GB/s on 1 thread, OpenMP memcpy "
              f"{copy_bw.get('omp_copy_GBs', float('nan')):.1f} GB/s on "
              f"{copy_bw.get('omp_threads', '?')} threads, read + write counted); GFLOP/s for "
              "compute-bound workloads.")
    if notes:
        print()
        for text, i in notes.items():
            print(f"  [{i}] {text}")


def make_plots(results: list[dict[str, Any]], peers: list[str], nthreads: int, outdir: Path,
               title: str) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir.mkdir(parents=True, exist_ok=True)
    files = []
    others = [x for x in peers if x != "cpuify"]
    names = [r["name"] for r in results]
    colors = {"omp": "tab:blue", "omp1": "tab:cyan", "pocl": "tab:orange", "numba": "tab:green"}

    # 1. ratio peer / cpuify per workload (log scale)
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(names) + 2), 5))
    width = 0.8 / max(1, len(others))
    for j, peer in enumerate(others):
        xs, ys, bad = [], [], []
        for i, r in enumerate(results):
            d = r.get("peers", {}).get(peer, {})
            if d.get("ratio"):
                xs.append(i + (j - (len(others) - 1) / 2) * width)
                ys.append(d["ratio"])
                bad.append(not d.get("correct"))
        bars = ax.bar(xs, ys, width, label=peer_label(peer, nthreads),
                      color=colors.get(peer, None))
        for b, is_bad in zip(bars, bad):
            if is_bad:
                b.set_hatch("xx")
                b.set_edgecolor("red")
    ax.axhline(1.0, color="black", lw=1)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=40, ha="right")
    ax.set_ylabel("peer time / cpuify time  (> 1: cpuify faster)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    f1 = outdir / "ratios.png"
    fig.savefig(f1, dpi=110)
    plt.close(fig)
    files.append(str(f1))

    # 2. thread scaling: speedup T(1)/T(n) for cpuify and OpenMP
    sc = [(r["name"], r["scaling"]) for r in results if r.get("scaling")]
    if sc:
        # the speedup-vs-threads lines only say more than the bars with >= 3 thread counts
        lines = any(len(s.get(impl, {})) >= 3 for _n, s in sc for impl in ("cpuify", "omp"))
        if lines:
            fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(12, 0.7 * len(sc) + 8), 5))
        else:
            fig, ax2 = plt.subplots(figsize=(max(8, 0.7 * len(sc) + 2), 5))
            ax1 = None
        cmap = plt.get_cmap("tab20")
        maxk = 1
        for i, (name, s) in enumerate(sc if ax1 is not None else []):
            for impl, ls in (("cpuify", "-"), ("omp", "--")):
                pts = {int(k): v for k, v in s.get(impl, {}).items()}
                if 1 in pts and len(pts) > 1:
                    ks = sorted(pts)
                    maxk = max(maxk, ks[-1])
                    ax1.plot(ks, [pts[1] / pts[k] for k in ks], ls, marker="o",
                             color=cmap(i % 20), label=f"{name} ({impl})")
        if ax1 is not None:
            ax1.plot([1, maxk], [1, maxk], ":", color="gray", label="ideal")
            ax1.set_xlabel("threads")
            ax1.set_ylabel("speedup over 1 thread")
            ax1.set_title("thread scaling: cpuify (solid), OpenMP (dashed)", fontsize=9)
            ax1.legend(fontsize=6, ncol=2)
            ax1.grid(alpha=0.3)
        xs = np.arange(len(sc))
        for j, (impl, col) in enumerate((("cpuify", "tab:red"), ("omp", "tab:blue"))):
            ys = []
            for _name, s in sc:
                pts = {int(k): v for k, v in s.get(impl, {}).items()}
                top = max(pts) if pts else 0
                ys.append(pts[1] / pts[top] if 1 in pts and top > 1 else 0.0)
            ax2.bar(xs + (j - 0.5) * 0.4, ys, 0.4, color=col,
                    label=f"{'cpuify' if impl == 'cpuify' else 'OpenMP'}")
        ax2.axhline(nthreads, color="gray", ls=":", lw=1)
        ax2.set_xticks(xs)
        ax2.set_xticklabels([n for n, _ in sc], rotation=40, ha="right")
        ax2.set_ylabel(f"speedup 1 -> {nthreads} threads")
        ax2.set_title(f"thread scaling: speedup 1 -> {nthreads} threads (dotted: ideal); "
                      f"{title}", fontsize=8)
        ax2.legend(fontsize=8)
        ax2.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        f2 = outdir / "scaling.png"
        fig.savefig(f2, dpi=110)
        plt.close(fig)
        files.append(str(f2))
    return files


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="cpuify benchmark suite: CUDA workloads through cpuify vs C+OpenMP, "
                    "OpenCL on PoCL and the numba CUDA simulator, checked against NumPy.")
    ap.add_argument("--size", choices=SIZES, default="default")
    ap.add_argument("--only", nargs="+", action="extend", metavar="NAME",
                    help="run only these workloads (module or workload names; repeatable)")
    ap.add_argument("--json", metavar="OUT",
                    help=f"write all results to this JSON file (default "
                         f"{DEFAULT_OUT.relative_to(ROOT)}/suite-<size>.json)")
    ap.add_argument("--plots", metavar="DIR",
                    help=f"directory for the PNG plots (default {DEFAULT_OUT.relative_to(ROOT)})")
    ap.add_argument("--no-plots", action="store_true", help="draw no plots")
    ap.add_argument("--peers", default=",".join(PEERS),
                    help=f"comma-separated subset of {','.join(PEERS)} (default: all)")
    ap.add_argument("--repeats", type=int, help="timed calls per implementation (default "
                    + ", ".join(f"{k} {v}" for k, v in REPEATS.items()) + ")")
    ap.add_argument("--no-scaling", action="store_true",
                    help="skip the extra thread-scaling runs (cpuify and OpenMP at 1..N-1 "
                         "threads)")
    ap.add_argument("--timeout", type=float, default=900.0,
                    help="seconds per workload before its process is killed (default 900)")
    ap.add_argument("--no-isolate", action="store_true",
                    help="run the workloads in this process (a crash ends the suite)")
    ap.add_argument("--list", action="store_true", help="list the workloads and exit")
    ap.add_argument("-v", "--verbose", action="store_true", help="show the workloads' progress")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.repeats is None:
        args.repeats = REPEATS[args.size]
    return args


def _peers(args: argparse.Namespace) -> list[str]:
    peers = [x.strip() for x in args.peers.split(",") if x.strip()]
    bad = [x for x in peers if x not in PEERS]
    if bad:
        raise SystemExit(f"unknown peer(s) {bad}; choose from {PEERS}")
    return [x for x in PEERS if x in peers]            # canonical order


def child_main(args: argparse.Namespace) -> int:
    res = run_workload(args.child, args.size, _peers(args), args.repeats, not args.no_scaling)
    text = json.dumps(res, default=_json_default)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    return repr(o)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child_main(args)
    peers = _peers(args)
    if "cpuify" not in peers:
        peers.insert(0, "cpuify")      # the baseline of every ratio
    import cpuify

    stems = discover()
    if args.list:
        for s in stems:
            try:
                w = load_workload(s)
                print(f"{s:16s} {w.kind:10s} " + "  ".join(
                    f"{k}: {fmt_params(v, 60)}" for k, v in w.sizes.items()))
            except Exception as e:                             # noqa: BLE001
                print(f"{s:16s} FAILED to import: {_short_exc(e)}")
        return 0
    import_errors: dict[str, str] = {}
    if args.only:
        wanted = set(args.only)
        names: dict[str, str] = {}
        for s in stems:
            try:
                names[s] = load_workload(s).name
            except Exception as e:                             # noqa: BLE001
                import_errors[s] = _short_exc(e)
                names[s] = s
        sel = [s for s in stems if s in wanted or names[s] in wanted]
        missing = wanted - set(sel) - {names[s] for s in sel}
        if missing:
            raise SystemExit(f"unknown workload(s) {sorted(missing)}; have {stems}")
        stems = sel

    nthreads = cpuify.num_threads()
    load = _loadavg()
    info: dict[str, Any] = {
        "size": args.size, "repeats": args.repeats, "peers": peers, "python":
        platform.python_version(), "numpy": np.__version__, "cpuify": cpuify.__version__,
        "cpu": cpu_name(), "cores": os.cpu_count(), "threads": nthreads,
        "cc": cc_version(), "omp_cflags": OMP_CFLAGS, "loadavg_start": load,
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    peer_status: dict[str, Any] = {}
    if "pocl" in peers:
        peer_status["pocl"] = opencl_info()
        _OPENCL_reset()
    if "numba" in peers:
        peer_status["numba"] = numba_check()
    info["peer_status"] = peer_status
    print(f"cpuify {cpuify.__version__} benchmark suite, size={args.size}: {info['cpu']}, "
          f"{info['cores']} cores, cpuify {nthreads} threads, OpenMP {nthreads} and 1 thread "
          f"({info['cc']}, {' '.join(OMP_CFLAGS[:3])}), NumPy {np.__version__}, "
          f"load average {' '.join(map(str, load)) if load else 'n/a'}")
    for peer, st in peer_status.items():
        if st.get("available"):
            desc = (f"{st['platform_version']}, device {st['device']} ({st['compute_units']} CUs)"
                    if peer == "pocl" else f"numba {st['numba']}, numba-cuda {st['numba_cuda']}, "
                    "NUMBA_ENABLE_CUDASIM=1")
            print(f"  {peer_label(peer, nthreads)}: {desc}")
        else:
            print(f"  {peer_label(peer, nthreads)}: UNAVAILABLE - {st['reason']}")
    if load and load[0] > 0.7:
        print("  warning: the machine is busy (1-minute load average > 0.7); other processes "
              "compete for the cores and the numbers below will be noisy")
    sys.stdout.flush()

    _log("measuring copy bandwidth ...")
    try:
        copy_bw = measure_copy_bandwidth(nthreads)
    except Exception as e:                                     # noqa: BLE001
        copy_bw = None
        _log(f"copy bandwidth measurement failed: {_short_exc(e)}")

    results: list[dict[str, Any]] = []
    t_suite = time.perf_counter()
    for i, stem in enumerate(stems):
        _log(f"[{i + 1}/{len(stems)}] {stem} ...")
        if stem in import_errors:
            r = {"module": stem, "name": stem, "size": args.size, "peers": {},
                 "status": "failed", "error": "import: " + import_errors[stem]}
        elif args.no_isolate:
            r = run_workload(stem, args.size, peers, args.repeats, not args.no_scaling)
        else:
            r = run_child(stem, args, peers)
        _log(f"[{i + 1}/{len(stems)}] {stem}: {r.get('status')} in {r.get('wall_s', 0):.1f} s"
             + (f" - {r.get('error')}" if r.get("status") == "failed" else ""))
        results.append(r)
    info["loadavg_end"] = _loadavg()
    info["suite_wall_s"] = time.perf_counter() - t_suite
    geo = summarize(results, peers, copy_bw)

    print()
    print_table(results, peers, geo, copy_bw, nthreads)

    json_path = Path(args.json) if args.json else DEFAULT_OUT / f"suite-{args.size}.json"
    doc = {"info": info, "copy_bandwidth": copy_bw, "geomean": geo, "workloads": results}
    if not args.no_plots:
        try:
            title = (f"cpuify suite, size={args.size}, {info['cpu']}, {nthreads} threads "
                     f"({info['time']})")
            plot_dir = Path(args.plots) if args.plots else DEFAULT_OUT
            doc["plots"] = make_plots(results, peers, nthreads, plot_dir, title)
        except Exception as e:                                 # noqa: BLE001
            doc["plots_error"] = _short_exc(e)
            print(f"  plots failed: {_short_exc(e)}")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1, default=_json_default)
    print(f"\n  results: {json_path}" + (f"; plots: {', '.join(doc['plots'])}"
                                          if doc.get("plots") else ""))
    return 0


def _OPENCL_reset() -> None:
    """The parent only probes PoCL; the children create their own contexts."""
    global _OPENCL
    _OPENCL = None


if __name__ == "__main__":
    sys.exit(main())
