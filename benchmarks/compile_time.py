#!/usr/bin/env python3
"""Compile time and memory of cpuify against kernel size.

    python -m benchmarks.compile_time [--sizes 1000,4000,16000,64000] [--json out.json]
                                      [--timeout 600] [--no-nvcc] [--no-check] [--profile DIR]
                                      [--if-every 8] [--experiment-novec-lines N]
                                      [--shape chain|rates]
    python -m benchmarks.compile_time --nvcc-ratio DIR [--include DIR...] [--flags "-O3"]
                                      [--only SUBSTR...] [--jobs N] [--json out.json]

Each size N is a generated CUDA program whose kernel is a chain of N integer statements on
three 32-bit variables (add / mul / xor / shift / rotate, every 8th statement under an `if`
on a data-dependent value that loads from a global array, so the kernel has real branches),
reading one global array and writing another so that nothing is dead.  For each size, in a
fresh subprocess with an empty compile cache: the PTX instruction count, the wall time per
stage (NVRTC, PTX parse, lift+codegen, LLVM: `CompiledModule.timings`), the peak RSS of the
process, the result checked against a NumPy evaluation of the same chain, and the growth
factor of the total time from the previous size.  NVIDIA's nvcc (from the PyPI wheels, found
by `cpuify.nvcc.toolkit`) compiles the same source with `-c` to an object for the ratio.

`--shape rates`: instead of the chain, a reaction-rate kernel of N statements
`RF[j*n + t] = RF[j*n + t] * C[a*n + t] * C[b*n + t]` (N rate arrays and 24 species arrays
packed at the grid's stride, as SHOC S3D lays them out), compiled generic and then for
128-thread blocks (what `cpuify nvcc` does for a program launching it so); total includes
both, the check runs both.

`--shape templates`: N is a number of kernels: a whole program whose kernels are N template
instantiations (a shared-memory smoothing stencil with a barrier and a halo, a flat
polynomial), each launched with a constant block shape, built by `cpuify nvcc -c` with an
empty cache (the generic module and one block-shape specialization per kernel) and by
NVIDIA's `nvcc -c`; wall, CPU and peak RSS of both, per CPUIFY_JOBS value (`--jobs`); the
program is linked and run, and its own check (a host loop per kernel) must print PASSED.

`--nvcc-ratio DIR`: every `.cu` file under DIR (a checkout of a public suite, read only)
compiled alone with `-c` by NVIDIA's nvcc and by `cpuify nvcc`, with the same flags (`--flags`,
`-I` the file's directory and each `--include`) in a scratch directory and an empty compile
cache (CPUIFY_NO_CACHE=1); per file the CPU seconds (user+sys of the build and all its
children: wall time means little on a shared machine) of both and their ratio, then the
geomean and the largest ratio.  A file nvcc itself cannot compile alone (a header-like `.cu`
included by another, a missing dependency) is listed as skipped; one cpuify fails on shows
its first error line.  `--jobs` sets CPUIFY_JOBS (default: cpuify's default).

`--profile DIR` writes a cProfile dump of each compile; `--if-every 0` makes straight-line
kernels; `--experiment-novec-lines N` shows what the compile would cost if the code generator
turned LLVM's loop vectorizer off for huge thread loops (its cost grows super-linearly with
the loop body: LLVM 20's VPlan type inference), by patching `jit.optimize` in the child.

A measurement tool: it never fails on a slow size; a crash or a timeout is reported as such.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

N_THREADS = 256          # threads launched for the correctness check (power of two)
KERNEL = "chain"


# ----------------------------------------------------------------------------------------
# the generated program

def gen_statements(n: int, seed: int = 1, if_every: int = 8) -> list[tuple]:
    """N statements as tuples, shared by the CUDA printer and the NumPy evaluator:
    ("op", dst, src, const) or ("if", cond_var, bit, dst, k) (every `if_every`th; 0: none)."""
    rnd = random.Random(seed)
    names = "xyz"
    out: list[tuple] = []
    for j in range(n):
        d = names[rnd.randrange(3)]
        s = names[(names.index(d) + 1 + rnd.randrange(2)) % 3]
        if if_every and j % if_every == if_every - 1:
            out.append(("if", s, rnd.randrange(32), d, rnd.randrange(1, 1 << 12)))
            continue
        kind = rnd.choice(("add", "mul", "xor", "shl", "shr", "rot", "sub"))
        if kind == "mul":
            c = rnd.randrange(1 << 31) * 2 + 1
        elif kind in ("shl", "shr", "rot"):
            c = rnd.randrange(1, 31)
        else:
            c = rnd.randrange(1 << 32)
        out.append((kind, d, s, c))
    return out


def cuda_source(stmts: list[tuple]) -> str:
    lines = [
        f'extern "C" __global__ void {KERNEL}(const unsigned *in, unsigned *out, unsigned mask) {{',
        "    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;",
        "    unsigned x = in[i], y = x * 0x9e3779b9u + 1u, z = i;",
    ]
    for st in stmts:
        if st[0] == "if":
            _, s, bit, d, k = st
            lines.append(f"    if (({s} >> {bit}) & 1u) {d} += in[({s} + {k}u) & mask];")
            continue
        kind, d, s, c = st
        expr = {
            "add": f"{d} + {s} + {c}u",
            "sub": f"{d} - ({s} ^ {c}u)",
            "mul": f"{d} * {c}u + {s}",
            "xor": f"{d} ^ ({s} + {c}u)",
            "shl": f"{d} + ({s} << {c})",
            "shr": f"{d} ^ ({s} >> {c})",
            "rot": f"(({d} << {c}) | ({d} >> {32 - c})) + {s}",
        }[kind]
        lines.append(f"    {d} = {expr};")
    lines.append("    out[i] = x ^ y ^ z;")
    lines.append("}")
    return "\n".join(lines) + "\n"


def reference(stmts: list[tuple], inp):  # type: ignore[no-untyped-def]
    """The kernel's output for input `inp` (uint32 array of a power-of-two length)."""
    import numpy as np
    n = len(inp)
    mask = np.uint32(n - 1)
    with np.errstate(over="ignore"):
        i = np.arange(n, dtype=np.uint32)
        v = {"x": inp.copy(), "y": inp * np.uint32(0x9E3779B9) + np.uint32(1), "z": i.copy()}
        for st in stmts:
            if st[0] == "if":
                _, s, bit, d, k = st
                cond = ((v[s] >> np.uint32(bit)) & np.uint32(1)) != 0
                v[d] = np.where(cond, v[d] + inp[(v[s] + np.uint32(k)) & mask], v[d])
                continue
            kind, d, s, c = st
            a, b, cc = v[d], v[s], np.uint32(c)
            if kind == "add":
                r = a + b + cc
            elif kind == "sub":
                r = a - (b ^ cc)
            elif kind == "mul":
                r = a * cc + b
            elif kind == "xor":
                r = a ^ (b + cc)
            elif kind == "shl":
                r = a + (b << cc)
            elif kind == "shr":
                r = a ^ (b >> cc)
            else:
                r = ((a << cc) | (a >> np.uint32(32 - c))) + b
            v[d] = r.astype(np.uint32)
    return v["x"] ^ v["y"] ^ v["z"]


# ----------------------------------------------------------------------------------------
# a second shape: many arrays indexed at a grid stride (chemistry-kernel style)

RATES = "rates"


def rates_statements(n: int, species: int = 24, seed: int = 2) -> list[tuple[int, int, int]]:
    """N updates `RF(j) *= C(a) * C(b)` (j, a, b) of a reaction-rate kernel: every thread
    reads and writes its own element of each of `n` rate arrays and `species` concentration
    arrays, all packed at a stride of the grid's thread count (SHOC S3D's layout)."""
    rnd = random.Random(seed)
    return [(j, rnd.randrange(species), rnd.randrange(species)) for j in range(n)]


def rates_source(stmts: list[tuple[int, int, int]]) -> str:
    lines = [
        f'extern "C" __global__ void {RATES}(const float *C, float *RF) {{',
        "    const unsigned n = blockDim.x * gridDim.x, t = blockIdx.x * blockDim.x + threadIdx.x;",
    ]
    for j, a, b in stmts:
        lines.append(f"    RF[{j}u * n + t] = RF[{j}u * n + t] * C[{a}u * n + t] * C[{b}u * n + t];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def rates_reference(stmts: list[tuple[int, int, int]], c, rf):  # type: ignore[no-untyped-def]
    """RF after the kernel, for C of shape (species, threads) and RF of (len(stmts), threads)
    (float32, multiplied left to right as the kernel does)."""
    out = rf.copy()
    for j, a, b in stmts:
        out[j] = out[j] * c[a] * c[b]
    return out


# ----------------------------------------------------------------------------------------
# one measurement (runs in a child process)

_CHILD = r"""
import json, os, resource, sys, time
sys.setrecursionlimit(int(os.environ.get("CT_RECURSION", "1000")))
sys.path.insert(0, {root!r})
from benchmarks.compile_time import gen_statements, cuda_source, reference, N_THREADS, KERNEL
from benchmarks.compile_time import rates_statements, rates_source, rates_reference, RATES
n = int(sys.argv[1]); profile = sys.argv[2] if len(sys.argv) > 2 else ""
IF_EVERY = int(os.environ.get("CT_IF_EVERY", "8"))
NOVEC = int(os.environ.get("CT_NOVEC_LINES", "0"))
if NOVEC:
    # experiment: what compile time would be if code generation turned LLVM's loop
    # vectorizer off for huge thread loops (its VPlan type inference is super-linear in the
    # loop body): every loop id of a module over NOVEC lines gets vectorize.enable=false
    import re as _re
    from cpuify.codegen import jit as _jit
    _optimize = _jit.optimize
    def _novec(text):
        if text.count("\n") > NOVEC:
            ids = [int(x) for x in _re.findall(r"^!(\d+) = ", text, _re.M)]
            if ids:
                node = f"!{{max(ids) + 1}}"
                text, k = _re.subn(r"^(!\d+) = distinct !\{{\1((?:, [^}}]*)?)\}}$",
                                   lambda m: f"{{m.group(1)}} = distinct !{{{{{{m.group(1)}}{{m.group(2)}}, {{node}}}}}}",
                                   text, flags=_re.M)
                if k:
                    text += f'\n{{node}} = !{{{{!"llvm.loop.vectorize.enable", i1 false}}}}\n'
        return _optimize(text)
    _jit.optimize = _novec
SHAPE = os.environ.get("CT_SHAPE", "chain")
src = cuda_source(gen_statements(n, if_every=IF_EVERY)) if SHAPE == "chain" else \
    rates_source(rates_statements(n))
t0 = time.perf_counter()
import numpy as np
import cpuify
from cpuify.compiler import compile_cuda
t_import = time.perf_counter() - t0
if profile:
    import cProfile
    prof = cProfile.Profile(); prof.enable()
t0 = time.perf_counter()
m = compile_cuda(src)
if SHAPE == "rates":
    # what a program launching it with 128-thread blocks compiles too (nvcc/device.specialize)
    from cpuify.compiler import compile_specialized
    ts = time.perf_counter()
    compile_specialized(m.ptx, RATES, (128, 1, 1), m.passes)
    m.timings["specialize"] = time.perf_counter() - ts
total = time.perf_counter() - t0
if profile:
    prof.disable(); prof.dump_stats(profile)
ptx_instrs = sum(1 for line in m.ptx.splitlines()
                 if line.strip() and not line.strip().startswith(("//", ".", "{{", "}}", "$", ")"))
                 and not line.strip().endswith(":") and line.strip().endswith(";"))
rss_compile = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ok = None
if os.environ.get("CT_CHECK", "1") == "1" and SHAPE == "rates":
    stmts = rates_statements(n)
    rng = np.random.default_rng(1)
    c = rng.uniform(0.5, 1.5, (24, 2 * 128)).astype(np.float32)
    rf = rng.uniform(0.5, 1.5, (n, 2 * 128)).astype(np.float32)
    want = rates_reference(stmts, c, rf)
    k = cpuify.RawModule(code=src).get_function(RATES)
    ok = True
    for _ in range(2):     # the second launch runs the block-shape specialized code
        got = rf.copy()
        k((2,), (128,), (c, got))
        ok = ok and bool((got == want).all())
elif os.environ.get("CT_CHECK", "1") == "1":
    mod = cpuify.RawModule(code=src)
    k = mod.get_function(KERNEL)
    inp = (np.arange(N_THREADS, dtype=np.uint64) * 2654435761 % (1 << 32)).astype(np.uint32)
    out = np.zeros_like(inp)
    k((1,), (N_THREADS,), (inp, out, np.uint32(N_THREADS - 1)))
    ok = bool((out == reference(gen_statements(n, if_every=IF_EVERY), inp)).all())
print("RESULT " + json.dumps({{"timings": m.timings, "total": total, "import": t_import,
                             "ptx_instrs": ptx_instrs, "ptx_lines": len(m.ptx.splitlines()),
                             "peak_rss_mb": rss_compile / 1024, "correct": ok,
                             "from_cache": m.from_cache}}))
"""


def _run_measured(cmd: list[str], timeout: float, env: dict[str, str] | None = None,
                  cwd: str | None = None) -> tuple[int, float, float, str]:
    """Run cmd; returns (exit status, wall seconds, peak RSS of the child in MB, output)."""
    with tempfile.TemporaryFile("w+") as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        deadline = t0 + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                p.kill()
                pid, status, ru = os.wait4(p.pid, 0)
                status = 124 << 8     # reported as a timeout
                break
            time.sleep(0.01)
        wall = time.perf_counter() - t0
        p.returncode = 0   # reaped by wait4 ourselves
        out.seek(0)
        text = out.read()
    if os.WIFSIGNALED(status):
        rc = -os.WTERMSIG(status)
    else:
        rc = os.WEXITSTATUS(status)
    return rc, wall, ru.ru_maxrss / 1024, text


def measure_cpuify(n: int, timeout: float, check: bool, profile: str = "",
                   recursion: int = 1000, if_every: int = 8, novec_lines: int = 0,
                   shape: str = "chain") -> dict:
    env = dict(os.environ)
    env["CT_SHAPE"] = shape
    env["CT_NOVEC_LINES"] = str(novec_lines)
    env["CT_IF_EVERY"] = str(if_every)
    # a fresh, empty cache: the timed compile is cold, the correctness check then loads it
    env.pop("CPUIFY_NO_CACHE", None)
    cache = tempfile.mkdtemp(prefix="cpuify-ct-")
    env["CPUIFY_CACHE_DIR"] = cache
    env["CT_CHECK"] = "1" if check else "0"
    env["CT_RECURSION"] = str(recursion)
    code = _CHILD.format(root=str(ROOT))
    cmd = [sys.executable, "-c", code, str(n)] + ([profile] if profile else [])
    try:
        rc, wall, rss, text = _run_measured(cmd, timeout, env)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    res: dict = {"n": n, "rc": rc, "wall": wall, "child_peak_rss_mb": rss}
    m = re.search(r"^RESULT (.*)$", text, re.M)
    if rc == 0 and m:
        res.update(json.loads(m.group(1)))
    else:
        res["error"] = ("timeout" if rc == 124 else f"exit {rc}") + ": " + text[-1500:]
    return res


def measure_nvcc(n: int, timeout: float, if_every: int = 8, shape: str = "chain") -> dict:
    try:
        from cpuify.nvcc.toolkit import find_toolkit
        nvcc = find_toolkit().nvcc
    except Exception as exc:     # noqa: BLE001
        return {"error": f"no nvcc: {exc}"}
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "chain.cu"
        src.write_text(cuda_source(gen_statements(n, if_every=if_every)) if shape == "chain"
                       else rates_source(rates_statements(n)))
        rc, wall, rss, text = _run_measured([nvcc, "-c", str(src), "-o", str(Path(d) / "chain.o")],
                                            timeout, cwd=d)
    if rc != 0:
        return {"error": f"exit {rc}: {text[-800:]}", "wall": wall}
    return {"wall": wall, "peak_rss_mb": rss}


# ----------------------------------------------------------------------------------------
# a third shape: a whole program with N template instantiations, each launched with a
# constant block shape (Altis kmeans' 258 kernels), built by `cpuify nvcc -c` as make would

def templates_source(n: int) -> str:
    """A CUDA program with n kernels: distinct instantiations (the last template argument is
    the kernel's number) of a shared-memory smoothing template (radius R, block B: a
    barrier, a halo) and of a flat polynomial template (degree P), each launched once with
    its constant block shape; the host checks every result against its own loop and prints
    PASSED or FAILED."""
    combos = []
    for i in range(n):
        if i % 2 == 0:
            combos.append(("smooth", 1 + (i // 2) % 4, (32, 64, 128, 256)[(i // 8) % 4], i))
        else:
            combos.append(("poly", 2 + i % 23, (64, 128, 256)[i % 3], i))
    out = [r"""#include <cstdio>
#include <cmath>
#include <vector>
template <int R, int B, int salt>
__global__ void smooth(const float *x, float *y, int n) {
    __shared__ float tile[B + 2 * R];
    int i = blockIdx.x * B + threadIdx.x;
    tile[threadIdx.x + R] = i < n ? x[i] : 0.0f;
    if (threadIdx.x < R) {
        tile[threadIdx.x] = (i >= R && i - R < n) ? x[i - R] : 0.0f;
        tile[threadIdx.x + B + R] = i + B < n ? x[i + B] : 0.0f;
    }
    __syncthreads();
    if (i < n) {
        float s = 0.0f;
        for (int k = -R; k <= R; k++) s += tile[threadIdx.x + R + k] * (float)(k + R + 1 + salt % 3);
        y[i] = s;
    }
}
template <int P, int salt>
__global__ void poly(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i], acc = 0.0f;
        for (int k = 0; k < P; k++) acc = acc * v + (float)((k + salt) % 5);
        y[i] = acc;
    }
}
static int check(const char *what, const std::vector<float> &got, const std::vector<float> &want) {
    for (size_t i = 0; i < got.size(); i++)
        if (std::fabs(got[i] - want[i]) > 1e-4f * (1.0f + std::fabs(want[i]))) {
            std::printf("FAILED %s at %zu: %g != %g\n", what, i, got[i], want[i]);
            return 1;
        }
    return 0;
}
int main() {
    const int n = 1000;
    std::vector<float> x(n), y(n), want(n);
    for (int i = 0; i < n; i++) x[i] = 0.5f + 0.25f * std::sin(0.1f * i);
    float *dx, *dy;
    cudaMalloc(&dx, n * sizeof(float));
    cudaMalloc(&dy, n * sizeof(float));
    cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    int bad = 0;
"""]
    for kind, a, b, i in combos:
        if kind == "smooth":
            out.append(f"""    smooth<{a}, {b}, {i}><<<(n + {b} - 1) / {b}, {b}>>>(dx, dy, n);
    for (int j = 0; j < n; j++) {{ float s = 0.0f; for (int k = -{a}; k <= {a}; k++) {{
        int t = j + k; s += (t >= 0 && t < n ? x[t] : 0.0f) * (float)(k + {a} + 1 + {i} % 3); }} want[j] = s; }}
""")
        else:
            out.append(f"""    poly<{a}, {i}><<<(n + {b} - 1) / {b}, {b}>>>(dx, dy, n);
    for (int j = 0; j < n; j++) {{ float acc = 0.0f; for (int k = 0; k < {a}; k++)
        acc = acc * x[j] + (float)((k + {i}) % 5); want[j] = acc; }}
""")
        out.append(f"""    cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost);
    bad |= check("{kind}<{a}> #{i}", y, want);
""")
    out.append("""    std::printf(bad ? "FAILED\\n" : "PASSED\\n");
    return bad;
}
""")
    return "".join(out)


def _child_cpu(ru) -> float:  # type: ignore[no-untyped-def]
    return ru.ru_utime + ru.ru_stime


def measure_program(n: int, timeout: float, jobs: str, nvcc_too: bool, check: bool) -> dict:
    """`cpuify nvcc -c` of templates_source(n) with an empty cache and CPUIFY_JOBS=jobs
    ("" = the default), against NVIDIA's `nvcc -c` (the same wheel): wall, CPU (user+sys of
    the build and its children), peak RSS of the largest process; then (check) the program
    linked by cpuify and run."""
    res: dict = {"n": n, "jobs": jobs or "default"}
    with tempfile.TemporaryDirectory(prefix="cpuify-ct-prog-") as d:
        src = Path(d) / "templates.cu"
        src.write_text(templates_source(n))
        env = dict(os.environ, CPUIFY_CACHE_DIR=str(Path(d) / "cache"), CPUIFY_QUIET="1")
        env.pop("CPUIFY_NO_CACHE", None)
        if jobs:
            env["CPUIFY_JOBS"] = jobs
        cli = [sys.executable, "-m", "cpuify.cli.main", "nvcc"]
        rc, wall, rss, cpu, text = _run_measured_cpu([*cli, "-c", str(src), "-o", "t.o"],
                                                     timeout, env, d)
        res.update(rc=rc, wall=wall, cpu=cpu, peak_rss_mb=rss)
        if rc != 0:
            res["error"] = text[-1500:]
            return res
        if check:
            rc2, _, _, _, text2 = _run_measured_cpu([*cli, "t.o", "-o", "t"], timeout, env, d)
            if rc2 == 0:
                rc2, _, _, _, text2 = _run_measured_cpu([str(Path(d) / "t")], timeout, env, d)
            res["correct"] = rc2 == 0 and "PASSED" in text2
            if not res["correct"]:
                res["check_output"] = text2[-800:]
        if nvcc_too:
            try:
                from cpuify.nvcc.toolkit import find_toolkit
                nvcc = find_toolkit().nvcc
            except Exception as exc:     # noqa: BLE001
                res["nvcc"] = {"error": f"no nvcc: {exc}"}
                return res
            rc, wall, rss, cpu, text = _run_measured_cpu([nvcc, "-c", str(src), "-o", "n.o"],
                                                         timeout, None, d)
            res["nvcc"] = {"wall": wall, "cpu": cpu, "peak_rss_mb": rss} if rc == 0 else \
                {"error": text[-800:]}
    return res


def _run_measured_cpu(cmd: list[str], timeout: float, env: dict[str, str] | None,
                      cwd: str | None) -> tuple[int, float, float, float, str]:
    """_run_measured, also returning the CPU seconds of the command and its children."""
    before = os.times()
    rc, wall, rss, text = _run_measured(cmd, timeout, env, cwd)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return rc, wall, rss, cpu, text


def main_program(args: argparse.Namespace) -> int:
    rows = []
    print(f"{'kernels':>8} {'jobs':>7} {'wall s':>7} {'CPU s':>7} {'RSS MB':>7} "
          f"{'nvcc wall':>9} {'nvcc CPU':>8} {'x wall':>7} {'x CPU':>6} {'ok':>3}")
    for n in [int(s) for s in args.sizes.split(",") if s.strip()]:
        for jobs in args.jobs.split(","):
            r = measure_program(n, args.timeout, jobs.strip(), not args.no_nvcc, not args.no_check)
            rows.append(r)
            if "error" in r:
                print(f"{n:>8} {r['jobs']:>7} FAILED: {r['error'].strip().splitlines()[-1][:100]}")
                continue
            nv = r.get("nvcc", {})
            ok = {True: "yes", False: "NO", None: "-"}[r.get("correct")]
            xw = r["wall"] / nv["wall"] if "wall" in nv else None
            xc = r["cpu"] / nv["cpu"] if nv.get("cpu") else None
            print(f"{n:>8} {r['jobs']:>7} {r['wall']:>7.1f} {r['cpu']:>7.1f} {r['peak_rss_mb']:>7.0f} "
                  f"{_fmt(nv.get('wall'), '.1f'):>9} {_fmt(nv.get('cpu'), '.1f'):>8} "
                  f"{_fmt(xw, '.1f'):>7} {_fmt(xc, '.1f'):>6} {ok:>3}", flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"rows": rows, "shape": "templates"}, indent=1))
    return 0


# ----------------------------------------------------------------------------------------
# per-file ratio to NVIDIA's nvcc over a corpus directory (--nvcc-ratio)

def _first_line(text: str) -> str:
    for line in text.splitlines():
        if re.search(r"(?i)\berror\b", line):
            return line.strip()[:160]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:160] if lines else "(no output)"


def measure_file(src: Path, flags: list[str], includes: list[str], timeout: float,
                 nvcc: str, jobs: str) -> dict:
    """CPU seconds of `nvcc -c` and `cpuify nvcc -c` on one file (empty cpuify cache)."""
    res: dict = {"file": str(src)}
    inc = [f"-I{src.parent}", *(f"-I{d}" for d in includes)]
    with tempfile.TemporaryDirectory(prefix="cpuify-ct-ratio-") as d:
        rc, wall, rss, cpu, text = _run_measured_cpu([nvcc, "-c", str(src), "-o", "n.o", *flags, *inc],
                                                     timeout, None, d)
        if rc != 0:
            res["skipped"] = f"nvcc failed: {_first_line(text)}"
            return res
        res["nvcc"] = {"wall": wall, "cpu": cpu, "peak_rss_mb": rss}
        env = dict(os.environ, CPUIFY_NO_CACHE="1", CPUIFY_QUIET="1",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"),
                                                            os.environ.get("PYTHONPATH", "")])))
        if jobs:
            env["CPUIFY_JOBS"] = jobs
        cli = [sys.executable, "-m", "cpuify.cli.main", "nvcc"]
        rc, wall, rss, cpu, text = _run_measured_cpu([*cli, "-c", str(src), "-o", "c.o", *flags, *inc],
                                                     timeout, env, d)
        if rc != 0:
            res["error"] = "timeout" if rc == 124 else _first_line(text)
            return res
        res["cpuify"] = {"wall": wall, "cpu": cpu, "peak_rss_mb": rss}
        res["ratio"] = cpu / res["nvcc"]["cpu"] if res["nvcc"]["cpu"] > 0 else None
    return res


def main_nvcc_ratio(args: argparse.Namespace) -> int:
    from cpuify.nvcc.toolkit import find_toolkit
    nvcc = find_toolkit().nvcc
    root = Path(args.nvcc_ratio).resolve()
    files = sorted(p for p in root.rglob("*.cu")
                   if not args.only or any(o in str(p) for o in args.only))
    flags = args.flags.split()
    rows = []
    print(f"{'file':<48} {'nvcc CPU':>8} {'cpuify CPU':>10} {'ratio':>6}")
    for src in files:
        r = measure_file(src, flags, args.include, args.timeout, nvcc, args.jobs)
        rows.append(r)
        name = str(src.relative_to(root))
        name = name if len(name) <= 48 else "..." + name[-45:]
        if "skipped" in r:
            print(f"{name:<48} skipped ({r['skipped'][:70]})", flush=True)
        elif "error" in r:
            print(f"{name:<48} {r['nvcc']['cpu']:>8.2f} cpuify FAILED: "
                  f"{r['error'][:60]}", flush=True)
        else:
            print(f"{name:<48} {r['nvcc']['cpu']:>8.2f} {r['cpuify']['cpu']:>10.2f} "
                  f"{_fmt(r['ratio'], '.1f'):>6}", flush=True)
    ratios = [r["ratio"] for r in rows if r.get("ratio")]
    if ratios:
        import math
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"{len(ratios)} files: geomean {geo:.2f}x, max {max(ratios):.2f}x "
              f"(cpuify CPU / nvcc CPU; {sum(r['ratio'] > 3 for r in rows if r.get('ratio'))} over 3x)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"rows": rows, "flags": flags, "corpus": str(root)},
                                              indent=1))
    return 0


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,4000,16000,64000")
    ap.add_argument("--json", default="")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per size and tool")
    ap.add_argument("--no-nvcc", action="store_true")
    ap.add_argument("--no-check", action="store_true", help="skip running the compiled kernel")
    ap.add_argument("--profile", default="", help="directory for cProfile dumps (prof-N.out)")
    ap.add_argument("--if-every", type=int, default=8,
                    help="every K-th statement is under an `if` (default 8; 0: straight-line)")
    ap.add_argument("--experiment-novec-lines", type=int, default=0, metavar="N",
                    help="experiment: turn LLVM's loop vectorizer off for loops of LLVM modules "
                         "over N lines of text (emulates a proposed code generator change)")
    ap.add_argument("--shape", choices=("chain", "rates", "templates"), default="chain",
                    help="chain: the integer statement chain (default); rates: N rate arrays "
                         "updated at a grid stride, also compiled for 128-thread blocks; "
                         "templates: a whole program of N template kernels, each launched with "
                         "a constant block shape, built by `cpuify nvcc -c` (see --jobs)")
    ap.add_argument("--jobs", default=",1",
                    help="templates: CPUIFY_JOBS values to build with, comma-separated ('' = "
                         "the default: the CPUs; default ',1': parallel, then serial)")
    ap.add_argument("--nvcc-ratio", default="", metavar="DIR",
                    help="per-file CPU time of `cpuify nvcc -c` against NVIDIA's `nvcc -c` for "
                         "every .cu file under DIR (see --flags, --include, --only)")
    ap.add_argument("--flags", default="-O3", help="--nvcc-ratio: flags given to both (default -O3)")
    ap.add_argument("--include", action="append", default=[], metavar="DIR",
                    help="--nvcc-ratio: an include directory for both (repeatable)")
    ap.add_argument("--only", nargs="*", default=[],
                    help="--nvcc-ratio: only files whose path contains one of these")
    ap.add_argument("--recursion-limit", type=int, default=1000,
                    help="sys.setrecursionlimit in the child (default: Python's 1000)")
    args = ap.parse_args(argv)
    if args.nvcc_ratio:
        if args.jobs == ",1":
            args.jobs = ""
        return main_nvcc_ratio(args)
    if args.shape == "templates":
        return main_program(args)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    rows = []
    prev = None
    for n in sizes:
        prof = ""
        if args.profile:
            os.makedirs(args.profile, exist_ok=True)
            prof = os.path.join(args.profile, f"prof-{n}.out")
        r = measure_cpuify(n, args.timeout, not args.no_check, prof, args.recursion_limit,
                           args.if_every, args.experiment_novec_lines, args.shape)
        r["nvcc"] = {} if args.no_nvcc else measure_nvcc(n, args.timeout, args.if_every,
                                                         args.shape)
        if prev is not None and "total" in r and "total" in prev:
            r["growth"] = r["total"] / prev["total"]
            r["size_step"] = n / prev["n"]
        if "total" in r and "wall" in r["nvcc"] and "error" not in r["nvcc"]:
            r["ratio_vs_nvcc"] = (r["total"] + r.get("import", 0.0)) / r["nvcc"]["wall"]
        rows.append(r)
        prev = r
        _print_row(r)
    _print_table(rows)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"rows": rows, "python": sys.version,
                                               "if_every": args.if_every,
                                               "shape": args.shape,
                                               "experiment_novec_lines": args.experiment_novec_lines,
                                               "threads_checked": N_THREADS}, indent=1))
    return 0


def _print_row(r: dict) -> None:
    if "error" in r:
        print(f"N={r['n']}: cpuify FAILED ({r['error'][:300]!r})", flush=True)
    else:
        print(f"N={r['n']}: {r['total']:.2f} s, {r['peak_rss_mb']:.0f} MB, "
              f"nvcc {_fmt(r['nvcc'].get('wall'))} s", flush=True)


def _print_table(rows: list[dict]) -> None:
    hdr = (f"{'N stmts':>8} {'PTX ins':>8} {'nvrtc':>7} {'parse':>7} {'lift+cg':>8} {'llvm':>8} "
           f"{'total':>8} {'growth':>7} {'RSS MB':>7} {'nvcc s':>7} {'x nvcc':>7} {'ok':>3}")
    print()
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        if "error" in r:
            print(f"{r['n']:>8} {'FAILED: ' + r['error'].splitlines()[0][:80]}")
            continue
        t = r["timings"]
        g = f"{r['growth']:.1f}x" if "growth" in r else "-"
        ok = {True: "yes", False: "NO", None: "-"}[r.get("correct")]
        print(f"{r['n']:>8} {r['ptx_instrs']:>8} {_fmt(t.get('nvrtc')):>7} {_fmt(t.get('parse')):>7} "
              f"{_fmt(t.get('lift+codegen')):>8} {_fmt(t.get('llvm')):>8} {r['total']:>8.2f} {g:>7} "
              f"{r['peak_rss_mb']:>7.0f} {_fmt(r['nvcc'].get('wall')):>7} "
              f"{_fmt(r.get('ratio_vs_nvcc'), '.1f'):>7} {ok:>3}")
    print("(times in seconds; total = compile_cuda wall time without the import; "
          "x nvcc = (total + import) / nvcc -c wall time)")


if __name__ == "__main__":
    sys.exit(main())
