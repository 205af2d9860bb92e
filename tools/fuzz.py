"""Differential fuzzer: random, well-defined CUDA kernels run three (four) ways.

    python tools/fuzz.py --count 10000 --seed 1 --jobs 2 --keep-failures /tmp/fuzz-fail
    python tools/fuzz.py --seed 1 --first 1200 --count 80     # kernels 1200..1279 of that run

Each generated kernel runs
  * natively with the default pass pipeline (the generic block function, first launch),
  * natively with the code specialized for its block shape (second launch; --no-specialized
    leaves it out),
  * natively with every pass off (`--passes=`),
  * in the reference interpreter (cpuify.interp),
and every output word must agree: integers bit-exactly, floats bit-exactly except that any
NaN equals any NaN (PTX's NaN payloads are not the CPU's), atomics' final values for the
commutative operations, and the values atomics return as multisets.

The kernels are well-defined CUDA (no data races except through atomics, no out-of-bounds
access, no C++ undefined behaviour: wrapping arithmetic is unsigned, divisions are guarded,
shift amounts masked, float->int conversions use the saturating intrinsics; barriers and
warp collectives only where the whole block / warp is converged, with the mask of the lanes
that exist), so any difference is a cpuify bug.  Generation is deterministic from
(--seed, kernel index).  Many kernels share one NVRTC compile (one module with many
`extern "C"` kernels).  The kernels themselves (model, generator, rendering) are in
tools/fuzz_kernels.py.  A failing kernel is minimized (statements deleted while it still
fails) and written to --keep-failures as a standalone .cu and a .json of its launch.

Batches (--batch kernels, one module) run in --jobs worker processes, polled together: a
worker prints each step (the module's compile, each kernel's runs) and each kernel's result
as it goes, and a step that uses more than its CPU-time limit (--timeout per kernel; the
start and the shared compile max(2 x --timeout, 3 s per kernel); ten times that in
wall-clock time without gaining CPU time) gets the worker killed.  The kernel it was on
counts as a crash, the results it printed are kept, and the rest of its batch runs again as
a new batch (one kernel per batch where the shared compile broke, to find the kernel that
breaks it); a worker that dies (a signal, an exit code) is handled the same way.  Meanwhile
the other slots keep working.

`--gpu-referee` writes each batch as a whole CUDA program (inputs built in, outputs written
to a file), builds it with `--nvcc` (default `nvcc`) and compares its outputs as a fourth
execution: with NVIDIA's nvcc on a GPU machine the GPU is the referee; with
`--nvcc "python -m cpuify.cli.main nvcc"` it checks cpuify's whole-program path instead."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


sys.path.insert(0, str(Path(__file__).resolve().parent))   # tools/fuzz_kernels.py beside it
from fuzz_pool import DONE, RESULT, STEP, WALL_FACTOR, _cpu_seconds, emit, run_pool  # noqa: E402
from fuzz_kernels import (  # noqa: E402
    ARCH, HALF_SHARE, N_GAT, N_GAT64, N_IN, PRELUDE, REUSE_SHARE, SIGNATURE, TICKET_SENTINEL, KernelSpec, Stmt,
    generate, nvrtc_options, render_kernel, render_module,
)


# --- inputs and comparison -----------------------------------------------------------------------

def _special_f32(rng: np.random.Generator, n: int) -> np.ndarray:
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-40, -1e-45, 3.4e38, 0.5,
                        16777217.0, 2.5, -2.5, 2147483648.0, 4294967296.0, 1e10, -1e-20], np.float32)
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float32)
    pick = rng.random(n) < 0.3
    x[pick] = rng.choice(special, int(pick.sum()))
    return x


def _special_f64(rng: np.random.Generator, n: int) -> np.ndarray:
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 5e-324, 1e-310, 1.7e308, 0.5,
                        9007199254740993.0, 2.5, -2.5, 9.3e18, 1.9e19, 4294967296.5, -2147483648.5])
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-5, 6, n)
    pick = rng.random(n) < 0.3
    x[pick] = rng.choice(special, int(pick.sum()))
    return x


def make_args(spec: KernelSpec) -> list[Any]:
    rng = np.random.default_rng(spec.seed)
    special = np.array([0, 1, 2, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, 31, 32, 33, 0xFFFF, 0x10000, 5], np.uint32)
    iu = rng.integers(0, 2**32, N_IN, dtype=np.uint64).astype(np.uint32)
    pick = rng.random(N_IN) < 0.3
    iu[pick] = rng.choice(special, int(pick.sum()))
    small = rng.random(N_IN) < 0.2
    iu[small] = rng.integers(0, 64, int(small.sum()), dtype=np.uint64).astype(np.uint32)
    total = spec.nthreads * spec.nblocks
    gat = np.zeros(N_GAT, np.uint32)
    for k, op in spec.gat_ops.items():
        gat[k] = {"Min": 0xFFFFFFF0, "SMin": 0x7FFFFFF0, "SMax": 0x80000010, "And": 0xFFFFFFFF,
                  "FAdd": 0, "CASMul": 1, "ticket_add": 0}.get(op, int(rng.integers(0, 2**32, dtype=np.uint64)))
    gat64 = rng.integers(0, 2**63, N_GAT64, dtype=np.uint64)
    for k, op in spec.gat64_ops.items():
        if op == "And":
            gat64[k] = np.uint64(0xFFFFFFFFFFFFFFFF)
    ifl, idb = _special_f32(rng, N_IN), _special_f64(rng, N_IN)
    # the reuse mode's global words: two layouts of K words per thread (drawn last: the
    # arrays above are what they were before the mode existed)
    scr = rng.integers(0, 2**32, total * 2 * max(spec.reuse_k, 1), dtype=np.uint64).astype(np.uint32)
    return [iu, ifl, idb,
            np.full(total * len(spec.variables), 0xA5A5A5A5A5A5A5A5, np.uint64), gat, gat64,
            np.full(total * max(spec.n_tickets, 1), TICKET_SENTINEL, np.uint32),
            np.int32(spec.p0), np.uint32(spec.p1), scr]


#: the arguments that are device arrays (the rest are scalars), and those a kernel writes
ARRAY_ARGS = (0, 1, 2, 3, 4, 5, 6, 9)
OUTPUT_ARGS = (3, 4, 5, 6, 9)


def outputs(args: list[Any]) -> dict[str, np.ndarray]:
    return {"out": args[3], "gat": args[4], "gat64": args[5], "tick": args[6], "scr": args[9]}


def compare(spec: KernelSpec, ref: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> str | None:
    """None when `got` agrees with `ref`; else what differs (first few places)."""
    nv = len(spec.variables)
    problems: list[str] = []
    if nv:
        a = ref["out"].reshape(-1, nv)
        b = got["out"].reshape(-1, nv)
        same = a == b
        for k, (n, t) in enumerate(spec.variables):
            if t == "f32":
                fa, fb = (a[:, k] & 0xFFFFFFFF).astype(np.uint32).view(np.float32), \
                    (b[:, k] & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
                same[:, k] |= np.isnan(fa) & np.isnan(fb) & ((a[:, k] >> 32) == (b[:, k] >> 32))
            elif t == "f64":
                same[:, k] |= np.isnan(a[:, k].view(np.float64)) & np.isnan(b[:, k].view(np.float64))
            elif t in ("h16", "h2", "b16"):      # each half: any NaN payload
                halves = 2 if t == "h2" else 1
                ok = (a[:, k] >> np.uint64(16 * halves)) == (b[:, k] >> np.uint64(16 * halves))
                for j in range(halves):
                    ha, hb = ((x[:, k] >> np.uint64(16 * j)) & np.uint64(0xFFFF) for x in (a, b))
                    ok &= (ha == hb) | (_half_nan(ha, t) & _half_nan(hb, t))
                same[:, k] |= ok
        for th, k in np.argwhere(~same)[:4]:
            n, t = spec.variables[k]
            problems.append(f"thread {th} {n} ({t}): expected {_show(a[th, k], t)}, got {_show(b[th, k], t)}")
        if (~same).sum() > 4:
            problems.append(f"... {(~same).sum()} values differ")
    exch = {w for kind, w in spec.ticket_kind.values() if kind == "exch"}
    for k in range(N_GAT):
        if k not in exch and ref["gat"][k] != got["gat"][k]:
            problems.append(f"gat[{k}] ({spec.gat_ops.get(k)}): expected {ref['gat'][k]:#x}, got {got['gat'][k]:#x}")
    for k in range(N_GAT64):
        if ref["gat64"][k] != got["gat64"][k]:
            problems.append(f"gat64[{k}] ({spec.gat64_ops.get(k)}): expected {ref['gat64'][k]:#x}, "
                            f"got {got['gat64'][k]:#x}")
    ntk = max(spec.n_tickets, 1)
    ta, tb = ref["tick"].reshape(-1, ntk), got["tick"].reshape(-1, ntk)
    for j, (kind, w) in spec.ticket_kind.items():
        ma, mb = list(ta[:, j]), list(tb[:, j])
        if kind == "exch":
            ma.append(ref["gat"][w])
            mb.append(got["gat"][w])
        if sorted(ma) != sorted(mb):
            problems.append(f"ticket {j} ({kind} on gat[{w}]): the multisets of returned values differ")
    if "scr" in ref and "scr" in got:
        for w in np.flatnonzero(ref["scr"] != got["scr"])[:4]:
            problems.append(f"scr[{w}]: expected {int(ref['scr'][w]):#x}, got {int(got['scr'][w]):#x}")
    return "; ".join(problems) or None


def _half_nan(h: np.ndarray, t: str = "h16") -> np.ndarray:
    e, m = (0x7F80, 0x7F) if t == "b16" else (0x7C00, 0x3FF)
    return ((h & np.uint64(e)) == np.uint64(e)) & ((h & np.uint64(m)) != np.uint64(0))


def _show(v: np.uint64, t: str) -> str:
    v = int(v)
    if t == "h16":
        return f"{np.uint16(v & 0xFFFF).view(np.float16)!r} ({v:#x})"
    if t == "b16":
        return f"{np.uint32((v & 0xFFFF) << 16).view(np.float32)!r} ({v:#x})"
    if t == "h2":
        lo, hi = (np.uint16(v >> s & 0xFFFF).view(np.float16) for s in (0, 16))
        return f"({lo!r}, {hi!r}) ({v:#x})"
    if t == "f32":
        return f"{np.uint32(v & 0xFFFFFFFF).view(np.float32)!r} ({v:#x})"
    if t == "f64":
        return f"{np.uint64(v).view(np.float64)!r} ({v:#x})"
    return f"{v:#x}"


# --- running ---------------------------------------------------------------------------------------

VARIANTS = ("interp", "native", "specialized", "no-passes")


def _copy(args: list[Any]) -> list[Any]:
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _setup_env() -> None:
    here = Path(__file__).resolve().parents[1] / "src"
    if str(here) not in sys.path:
        sys.path.insert(0, str(here))


#: what run_batch reports as it goes (a worker prints it, the parent applies its time limits):
#: progress("compile", [names of the module's kernels]) before NVRTC and the module builds,
#: progress("kernel", (name, variant)) before each execution of a kernel, and
#: progress("result", result) as soon as a kernel's result is final
Progress = Callable[[str, Any], None]


def run_batch(specs: list[KernelSpec], specialized: bool = True, progress: Progress | None = None
              ) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Every kernel of `specs` compiled in one module and run each way; one result per kernel:
    {"name", "status": "ok" | "mismatch" | "error" | "refused", "detail"}."""
    _setup_env()
    import cpuify
    from cpuify.frontend.nvrtc import compile_to_ptx
    from cpuify.interp import InterpModule

    def report(event: str, what: Any) -> None:
        if progress is not None:
            progress(event, what)

    def final(res: dict[str, Any]) -> list[dict[str, Any]]:
        report("result", res)
        return [res]

    def one_by_one() -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []
        for s in specs:
            results += run_batch([s], specialized, progress)[0]
        return results

    times: dict[str, float] = {}
    report("compile", [s.name for s in specs])
    t0 = time.perf_counter()
    try:
        ptx = compile_to_ptx(render_module(specs), filename="fuzz.cu", arch=ARCH,
                             options=nvrtc_options()).ptx
    except Exception as e:  # noqa: BLE001 (any failure is a finding)       # a generator bug: the kernels must be valid CUDA
        if len(specs) == 1:
            return final({"name": specs[0].name, "status": "error", "detail": f"NVRTC: {e}"}), times
        return one_by_one(), times
    t1 = time.perf_counter()
    times["nvrtc"] = t1 - t0
    modules: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for variant, options in (("native", ()), ("no-passes", ("--passes=",))):
        try:
            modules[variant] = cpuify.RawModule(ptx=ptx, options=options)
            modules[variant].compile()      # (lazy otherwise: in the first kernel's run and limit)
        except cpuify.UnsupportedError as e:
            if len(specs) == 1:
                return final({"name": specs[0].name, "status": "refused", "detail": str(e)}), times
            errors[variant] = f"{type(e).__name__}: {e}"
        except Exception as e:  # noqa: BLE001 (any failure is a finding)
            errors[variant] = f"{type(e).__name__}: {e}"
    t2 = time.perf_counter()
    times["compile"] = t2 - t1
    if errors and len(specs) > 1:      # find the kernel that breaks the module
        return one_by_one(), times
    interp = InterpModule(ptx)
    results = []
    times["run_native"] = times["interp"] = 0.0
    for spec in specs:
        if errors:
            res = {"name": spec.name, "status": "error",
                   "detail": "; ".join(f"{v}: {m}" for v, m in errors.items())}
        else:
            res = _run_kernel(spec, interp, modules, specialized, times, report)
        results += final(res)
    return results, times


def _run_kernel(spec: KernelSpec, interp: Any, modules: dict[str, Any], specialized: bool,
                times: dict[str, float], report: Progress) -> dict[str, Any]:
    """One kernel of a compiled batch run each way and compared (run_batch)."""
    import warnings

    import cpuify
    res: dict[str, Any] = {"name": spec.name, "status": "ok", "detail": ""}
    args = make_args(spec)
    outs: dict[str, dict[str, np.ndarray]] = {}
    fails: list[str] = []
    ta = time.perf_counter()
    report("kernel", (spec.name, "interp"))
    try:
        a = _copy(args)
        interp.launch(spec.name, spec.grid, spec.block, a)
        outs["interp"] = outputs(a)
    except Exception as e:  # noqa: BLE001 (any failure is a finding)
        fails.append(f"interp: {type(e).__name__}: {e}")
    tb = time.perf_counter()
    times["interp"] += tb - ta
    refused = None
    for variant in ("native", "no-passes"):
        try:
            fn = modules[variant].get_function(spec.name)
        except cpuify.UnsupportedError as e:
            refused = str(e)
            continue
        runs = ["native", "specialized"] if variant == "native" and specialized else [variant]
        for run_as in runs:
            report("kernel", (spec.name, run_as))
            try:
                a = _copy(args)
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    fn(spec.grid, spec.block, a)
                outs[run_as] = outputs(a)
            except Exception as e:  # noqa: BLE001 (any failure is a finding)
                fails.append(f"{run_as}: {type(e).__name__}: {e}")
    times["run_native"] += time.perf_counter() - tb
    if refused is not None:
        res.update(status="refused", detail=refused)
    elif fails:
        res.update(status="error", detail="; ".join(fails))
    else:
        diffs = []
        for variant in VARIANTS[1:]:
            if variant in outs:
                d = compare(spec, outs["interp"], outs[variant])
                if d:
                    diffs.append(f"{variant} vs interp: {d}")
        if diffs:
            res.update(status="mismatch", detail=" | ".join(diffs))
    return res


def _worker_progress(event: str, what: Any) -> None:
    """A worker's progress lines (fuzz_pool reads them).  Test hooks: CPUIFY_FUZZ_TEST_HANG
    or CPUIFY_FUZZ_TEST_CRASH = NAME makes the worker spin or die (SIGKILL) when it starts
    kernel NAME's native run; = compile:NAME when it compiles a module holding kernel NAME."""
    if event == "result":
        emit(RESULT, what)
        return
    emit(STEP, [event, what])
    here = {f"compile:{n}" for n in what} if event == "compile" else \
        {what[0]} if what[1] == "native" else set()
    if os.environ.get("CPUIFY_FUZZ_TEST_HANG") in here:
        while True:
            pass
    if os.environ.get("CPUIFY_FUZZ_TEST_CRASH") in here:
        os.kill(os.getpid(), signal.SIGKILL)


def _worker_main(argv: list[str]) -> int:
    """`fuzz.py --worker SEED FIRST N [noSpec]`: runs kernels FIRST..FIRST+N-1, prints its
    progress and each result as it goes (fuzz_pool), then the JSON of all.
    `fuzz.py --check FILE.json`: runs the one kernel spec in FILE, prints its JSON result."""
    if argv[0] == "--check":
        spec = KernelSpec.from_json(json.loads(Path(argv[1]).read_text()))
        results, times = run_batch([spec], specialized=argv[2] == "1")
    else:
        seed, first, n = int(argv[1]), int(argv[2]), int(argv[3])
        specs = [generate(seed, i) for i in range(first, first + n)]
        results, times = run_batch(specs, specialized=argv[4] == "1", progress=_worker_progress)
    sys.stdout.write("\n" + DONE + json.dumps({"results": results, "times": times}) + "\n")
    sys.stdout.flush()
    return 0


def _communicate(p: subprocess.Popen[str], limit: float) -> tuple[str, str] | None:
    """The worker's (stdout, stderr), or None (and the worker killed) once it has used `limit`
    seconds of CPU time, or WALL_FACTOR times that in wall-clock time: on a loaded machine
    (two cores shared by many processes) wall-clock time said a slow compile had hung."""
    start = time.perf_counter()
    while True:
        try:
            return p.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:
            if _cpu_seconds(p.pid) > limit or time.perf_counter() - start > WALL_FACTOR * limit:
                p.kill()
                p.communicate()
                return None


def _spawn(args: list[str], timeout: float) -> dict[str, Any]:
    """Runs a worker in its own process (a crash or a hang takes only the worker down)."""
    cmd = [sys.executable, str(Path(__file__).resolve())] + args
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    got = _communicate(p, timeout)
    if got is None:
        return {"crash": f"timed out after {timeout:.0f} s of CPU time"}
    stdout, stderr = got
    marker = stdout.rfind(DONE)
    if p.returncode != 0 or marker < 0:
        tail = (stderr or stdout)[-1500:]
        return {"crash": f"worker exited with {p.returncode}: {tail}"}
    return json.loads(stdout[marker + len(DONE):])


def check_spec(spec: KernelSpec, specialized: bool, timeout: float = 300) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec.to_json(), f)
    try:
        got = _spawn(["--check", f.name, "1" if specialized else "0"], timeout)
    finally:
        os.unlink(f.name)
    if "crash" in got:
        return {"name": spec.name, "status": "crash", "detail": got["crash"]}
    return got["results"][0]


# --- minimization ----------------------------------------------------------------------------------

def _paths(body: list[Stmt], prefix: tuple[int, ...] = ()) -> list[tuple[int, ...]]:
    """Paths of every statement (outer before inner): (i,) top level, (i, b, j) statement j of
    body b of statement i, ..."""
    out = []
    for i, s in enumerate(body):
        out.append(prefix + (i,))
        for b, sub in enumerate(s.bodies):
            out += _paths(sub, prefix + (i, b))
    return out


def _without(body: list[Stmt], path: tuple[int, ...]) -> list[Stmt]:
    body = [Stmt(s.kind, s.text, [list(b) for b in s.bodies]) for s in body]
    if len(path) == 1:
        del body[path[0]]
        return body
    i, b = path[0], path[1]
    body[i].bodies[b] = _without(body[i].bodies[b], path[2:])
    return body


def _hoisted(body: list[Stmt], path: tuple[int, ...]) -> list[Stmt] | None:
    """The compound statement at `path` replaced by its first body (an if by its then-branch,
    a loop by one pass of its body)."""
    body = [Stmt(s.kind, s.text, [list(b) for b in s.bodies]) for s in body]
    if len(path) == 1:
        s = body[path[0]]
        if not s.bodies or any(x.kind == "code" and x.text in ("break;", "continue;") for x in s.bodies[0]):
            return None
        if s.kind == "for":
            return None      # (its counter would be undeclared)
        return body[:path[0]] + s.bodies[0] + body[path[0] + 1:]
    i, b = path[0], path[1]
    inner = _hoisted(body[i].bodies[b], path[2:])
    if inner is None:
        return None
    body[i].bodies[b] = inner
    return body


def _with_body(spec: KernelSpec, body: list[Stmt]) -> KernelSpec:
    return KernelSpec.from_json({**spec.to_json(), "body": [s.to_json() for s in body]})


def minimize(spec: KernelSpec, failing: Callable[[KernelSpec], bool], log: Callable[[str], None]) -> KernelSpec:
    """Deletes statements (whole chunks first, then one at a time, outer before inner) and
    flattens ifs while `failing` still holds; then drops unused variables."""
    steps = 0
    changed = True
    while changed:
        changed = False
        top = len(spec.body)
        chunk = max(top // 2, 1)
        while chunk >= 1:         # ddmin-style: top-level chunks
            i = 0
            while i < len(spec.body):
                cand = _with_body(spec, spec.body[:i] + spec.body[i + chunk:])
                steps += 1
                if cand.body != spec.body and failing(cand):
                    spec, changed = cand, True
                else:
                    i += chunk
            chunk //= 2
        for path in reversed(_paths(spec.body)):
            for make in (_without, _hoisted):
                try:
                    new = make(spec.body, path)
                except (IndexError, KeyError):
                    continue
                if new is None:
                    continue
                cand = _with_body(spec, new)
                steps += 1
                if failing(cand):
                    spec, changed = cand, True
                    break
    log(f"  minimized in {steps} steps to {len(_paths(spec.body))} statements")
    return spec


# --- the GPU referee ---------------------------------------------------------------------------------

def render_program(specs: list[KernelSpec], out_file: str) -> str:
    """A whole CUDA program that runs every kernel of `specs` on its inputs (built in) and
    writes the outputs, kernel by kernel, to `out_file` (raw bytes in argument order)."""
    parts = ["#include <cstdio>\n#include <cstdlib>\n#include <climits>\n", PRELUDE]
    parts += [render_kernel(s) for s in specs]
    main = ["int main() {", f'  FILE *f = fopen("{out_file}", "wb"); if (!f) return 2;',
            "  void *d[10]; size_t sz[10];"]
    for s in specs:
        args = make_args(s)
        main.append("  {")
        for k in ARRAY_ARGS:
            a = args[k]
            data = ",".join(str(b) for b in a.view(np.uint8).tolist())
            main.append(f"    static const unsigned char h{k}[] = {{{data}}}; sz[{k}] = {a.nbytes};")
            main.append(f"    cudaMalloc(&d[{k}], sz[{k}]); cudaMemcpy(d[{k}], h{k}, sz[{k}], cudaMemcpyHostToDevice);")
        main.append(f"    {s.name}<<<dim3({s.grid[0]},{s.grid[1]},{s.grid[2]}), dim3({s.block[0]},{s.block[1]},"
                    f"{s.block[2]})>>>((const unsigned *)d[0], (const float *)d[1], (const double *)d[2], "
                    f"(unsigned long long *)d[3], (unsigned *)d[4], (unsigned long long *)d[5], (unsigned *)d[6], "
                    f"{s.p0}, {s.p1}u, (unsigned *)d[9]);")
        main.append('    cudaError_t e = cudaDeviceSynchronize(); if (e != cudaSuccess) { '
                    f'fprintf(stderr, "{s.name}: %s\\n", cudaGetErrorString(e)); return 1; }}')
        main.append(f"    for (int k : {{{', '.join(map(str, OUTPUT_ARGS))}}}) {{ void *h = malloc(sz[k]); "
                    "cudaMemcpy(h, d[k], sz[k], cudaMemcpyDeviceToHost); fwrite(h, 1, sz[k], f); free(h); }")
        main.append(f"    for (int k : {{{', '.join(map(str, ARRAY_ARGS))}}}) cudaFree(d[k]);")
        main.append("  }")
    main += ["  fclose(f);", "  return 0;", "}"]
    return "\n".join(parts) + "\n" + "\n".join(main) + "\n"


def program_outputs(blob: bytes, pos: int, args: list[Any]) -> tuple[dict[str, np.ndarray], int]:
    """One kernel's outputs in what a render_program program wrote (OUTPUT_ARGS, raw, in
    order, starting at `pos`), as outputs() gives them; and where the next kernel's start."""
    host = list(args)
    for k in OUTPUT_ARGS:
        n = args[k].nbytes
        host[k] = np.frombuffer(blob[pos:pos + n], dtype=args[k].dtype).copy()
        pos += n
    return outputs(host), pos


def gpu_referee(specs: list[KernelSpec], nvcc: str, workdir: Path, results: list[dict[str, Any]]) -> None:
    """Builds and runs the batch as a program with `nvcc`; each kernel's outputs are compared
    with the interpreter's (a kernel whose other executions already failed is skipped)."""
    _setup_env()
    from cpuify.frontend.nvrtc import compile_to_ptx
    from cpuify.interp import InterpModule
    src, exe, data = workdir / "referee.cu", workdir / "referee", workdir / "referee.bin"
    src.write_text(render_program(specs, str(data)))
    build = subprocess.run(shlex.split(nvcc) + ["-arch=sm_80", *nvrtc_options(), "-o", str(exe), str(src)],
                           capture_output=True, text=True, check=False)
    if build.returncode != 0:
        for r in results:
            r.update(status="error", detail=f"referee build failed: {build.stderr[-800:]}")
        return
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600, check=False)
    if run.returncode != 0:
        for r in results:
            r.update(status="error", detail=f"referee run failed: {run.stderr[-800:]}")
        return
    blob = data.read_bytes()
    pos = 0
    interp = InterpModule(compile_to_ptx(render_module(specs), filename="fuzz.cu", arch=ARCH,
                                         options=nvrtc_options()).ptx)
    for spec, res in zip(specs, results):
        args = make_args(spec)
        got, pos = program_outputs(blob, pos, args)
        if res["status"] != "ok":
            continue
        a = _copy(args)
        interp.launch(spec.name, spec.grid, spec.block, a)
        d = compare(spec, outputs(a), got)
        res["refereed"] = True
        if d:
            res.update(status="mismatch", detail=f"referee vs interp: {d}")


# --- the command line ------------------------------------------------------------------------------

def _keep(keep: Path, spec: KernelSpec, result: dict[str, Any], suffix: str = "") -> None:
    """Writes `spec` as a standalone kernel (.cu) and its launch and failure (.json)."""
    keep.mkdir(parents=True, exist_ok=True)
    (keep / f"{spec.name}{suffix}.cu").write_text(PRELUDE + render_kernel(spec))
    launch = {"kernel": spec.name, "grid": list(spec.grid), "block": list(spec.block),
              "arch": ARCH, "signature": SIGNATURE, "p0": spec.p0, "p1": spec.p1,
              "arguments": "make_args(spec) in tools/fuzz.py (seeded by spec.seed)",
              "status": result["status"], "detail": result["detail"], "spec": spec.to_json()}
    (keep / f"{spec.name}{suffix}.json").write_text(json.dumps(launch, indent=1))


def _share_runtime() -> None:
    """Finds (or builds, once) the native runtime here and hands it to the workers through
    $CPUIFY_RUNTIME_LIB: in a checkout without the built extension (a git worktree) and
    with CPUIFY_NO_CACHE=1, every worker compiled cpuify_rt.c with cc again (a child
    process: invisible to py-spy and to the worker's times)."""
    if os.environ.get("CPUIFY_RUNTIME_LIB"):
        return
    _setup_env()
    from cpuify.runtime import native
    os.environ["CPUIFY_RUNTIME_LIB"] = native.runtime_path()   # (lives as long as this process)


def fuzz(count: int, seed: int, jobs: int = 1, batch: int = 40, keep: Path | None = None,
         specialized: bool = True, minimize_failures: bool = True, referee: str | None = None,
         max_minimize: int = 10, log: Callable[[str], None] = print, first: int = 0,
         kernel_timeout: float = 60.0) -> dict[str, Any]:
    """Runs kernels first..first+count-1 of `seed`; returns the counts and the failures."""
    t0 = time.perf_counter()
    _share_runtime()
    end = first + count
    batches = [(k, min(batch, end - k)) for k in range(first, end, batch)]
    counts = {"ok": 0, "mismatch": 0, "error": 0, "refused": 0, "crash": 0}
    failures: list[dict[str, Any]] = []
    refusals: dict[str, int] = {}
    times: dict[str, float] = {}

    def command(first: int, n: int) -> list[str]:
        return [sys.executable, str(Path(__file__).resolve()), "--worker", str(seed), str(first), str(n),
                "1" if specialized else "0"]

    done = 0
    for first_, results, batch_times, crashed in run_pool(batches, jobs, command, lambda i: generate(seed, i).name,
                                                          kernel_timeout, log):
        if crashed:
            counts["batch_crashes"] = counts.get("batch_crashes", 0) + 1
        for k, v in batch_times.items():
            times[k] = times.get(k, 0.0) + v
        span = range(first_, first_ + len(results))
        if referee and results:
            with tempfile.TemporaryDirectory() as tmp:
                gpu_referee([generate(seed, i) for i in span], referee, Path(tmp), results)
        for i, res in zip(span, results):
            counts[res["status"]] = counts.get(res["status"], 0) + 1
            if res.get("refereed"):
                counts["refereed"] = counts.get("refereed", 0) + 1
            if res["status"] == "refused":
                why = res["detail"].split(":")[0][:100]
                refusals[why] = refusals.get(why, 0) + 1
            elif res["status"] != "ok":
                log(f"kernel {i} ({res['name']}): {res['status']}: {res['detail'][:600]}")
                failures.append({"index": i, **res})
                if keep is not None:    # kept now as generated (minimized at the end of the run)
                    _keep(keep, generate(seed, i), res, suffix=".generated")
        done += len(results)
        rate = done / (time.perf_counter() - t0)
        log(f"[{done}/{count}] {counts} ({rate:.1f} kernels/s)")
    failures.sort(key=lambda f: f["index"])
    elapsed = time.perf_counter() - t0
    for n_failure, f in enumerate(failures):
        spec = generate(seed, f["index"])
        if minimize_failures and n_failure < max_minimize and not f["detail"].startswith("NVRTC"):
            log(f"minimizing kernel {f['index']} ...")
            want = f["status"]
            if want == "mismatch":      # in this process: the kernel neither crashed nor hung
                def still(s: KernelSpec, want: str = want) -> bool:
                    return run_batch([s], specialized)[0][0]["status"] == want
            else:
                def still(s: KernelSpec, want: str = want) -> bool:
                    return check_spec(s, specialized, timeout=max(120.0, kernel_timeout))["status"] == want
            spec = minimize(spec, still, log)
            f["minimized"] = check_spec(spec, specialized)
        f["spec"] = spec.to_json()
        if keep is not None:
            _keep(keep, spec, f.get("minimized", f))
            log(f"  wrote {keep / (spec.name + '.cu')}")
    return {"count": count, "seed": seed, "counts": counts, "seconds": elapsed,
            "kernels_per_second": count / elapsed if elapsed else 0.0, "times": times,
            "refusals": refusals, "failures": failures}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # fuzz kernels would only fill the cache (set here, for this tool's processes: a test
    # calling run_batch in-process keeps its cache settings)
    os.environ.setdefault("CPUIFY_NO_CACHE", "1")
    if argv and argv[0] in ("--worker", "--check"):
        return _worker_main(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=next(p for p in __doc__.split("\n\n") if p.startswith("Batches")),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=100, help="how many kernels (default 100)")
    ap.add_argument("--seed", type=int, default=0, help="the run's seed (kernel i is the same for a seed)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--batch", type=int, default=40, help="kernels per NVRTC module (default 40)")
    ap.add_argument("--keep-failures", type=Path, default=None, metavar="DIR",
                    help="write each minimized failing kernel as DIR/NAME.cu and DIR/NAME.json")
    ap.add_argument("--no-specialized", action="store_true",
                    help="skip the block-shape-specialized native run (one LLVM compile per kernel)")
    ap.add_argument("--no-minimize", action="store_true", help="report failures as generated")
    ap.add_argument("--kernel", type=int, default=None, metavar="I", help="print kernel I's source and launch")
    ap.add_argument("--reproduce", type=int, default=None, metavar="I",
                    help="run only kernel I (minimized and kept if it fails)")
    ap.add_argument("--ftz", action="store_true",
                    help="compile every kernel with -ftz=true (CuPy's mode: f32 subnormals flush)")
    ap.add_argument("--reuse", action="store_true",
                    help="every kernel in the same-thread reuse mode (a thread writes words it owns in "
                         "shared/global memory and reads them back before the next barrier; by default "
                         f"{REUSE_SHARE * 100:.0f}%% of the kernels)")
    ap.add_argument("--half", action="store_true",
                    help="every kernel with __half/__half2 variables and arithmetic (by default "
                         f"{HALF_SHARE * 100:.0f}%% of the kernels)")
    ap.add_argument("--gpu-referee", action="store_true",
                    help="also build each batch as a program with --nvcc and compare its outputs")
    ap.add_argument("--nvcc", default="nvcc", help="the compiler for --gpu-referee (default nvcc)")
    ap.add_argument("--first", type=int, default=0, metavar="I",
                    help="start at kernel I of the seed (kernels I..I+count-1; default 0): a range "
                         "around a finding, or a run continued")
    ap.add_argument("--json", type=Path, default=None, help="write the summary as JSON")
    ap.add_argument("--timeout", type=float, default=60.0, metavar="S",
                    help="CPU seconds each kernel's runs may take before the kernel counts as a crash "
                         "(default 60; a batch's start and shared compile get max(2 x S, 3 s per kernel); "
                         "a worker that gains no CPU time for 10 times its step's limit is given up too)")
    a = ap.parse_args(argv)
    if a.ftz:
        os.environ["CPUIFY_FUZZ_FTZ"] = "1"
    if a.reuse:
        os.environ["CPUIFY_FUZZ_REUSE"] = "1"      # (inherited by the workers)
    if a.half:
        os.environ["CPUIFY_FUZZ_HALF"] = "1"
    if a.kernel is not None:
        spec = generate(a.seed, a.kernel)
        print(PRELUDE + render_kernel(spec))
        print(f"// launch: grid {spec.grid} block {spec.block} p0={spec.p0} p1={spec.p1}")
        return 0
    if a.reproduce is not None:
        a.count, a.batch = 1, 1
    summary = fuzz(a.count, a.seed, a.jobs, a.batch, a.keep_failures, not a.no_specialized,
                   not a.no_minimize, a.nvcc if a.gpu_referee else None,
                   first=a.reproduce if a.reproduce is not None else a.first,
                   kernel_timeout=a.timeout)
    print(f"{summary['count']} kernels in {summary['seconds']:.1f} s "
          f"({summary['kernels_per_second']:.2f} kernels/s): {summary['counts']}")
    if summary["times"]:
        print("time in: " + ", ".join(f"{k} {v:.1f} s" for k, v in summary["times"].items()))
    for why, n in summary["refusals"].items():
        print(f"refused ({n}): {why}")
    if a.json:
        a.json.write_text(json.dumps(summary, indent=1, default=str))
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
