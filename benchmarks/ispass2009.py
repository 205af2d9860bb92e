"""Checks of the GPGPU-Sim ISPASS 2009 benchmarks' results, for benchmarks/coverage.py.

Most of these programs print timings and write their results without checking them.  Where a
program compares with its own CPU version, that comparison is the check (STO's "Test PASSED",
LPS's rms error against its gold code, NQU's CPU and GPU solution counts, which must also be
the known number of solutions); where it does not, the result is compared with a reference
computed here, independently of the program and of cpuify:

- AES: the encrypted file against AES-128/256 in ECB mode with PKCS#7 padding from the
  `cryptography` package (skipped, the program then only "ran", without it);
- BFS: result.txt against a breadth-first search in Python over the same graph file;
- LIB: the portfolio value v and its sensitivity Lb against the same LIBOR Monte Carlo path
  and portfolio computed in double precision (every path is the same: z = 0.3, L = 0.05);
- DG: the field Ez it prints against the suite's own CPU version of the solver
  (Makefiles/MakefileCPU3d, built by the recipe next to the CUDA one), run here;
- CP: Parboil's own check, run here as its driver would: the program run again with
  `-o FILE`, compared with the suite's output/short/ref.txt by the rules of its
  tools/compare-output (the first line verbatim, the checksum within 0.5 %, each value within
  0.005 or 0.5 %).

`judge(program, directory, output)` returns (True, "") for a pass, (False, why) for a wrong
result and (None, why) when there is no check to make.
"""

from __future__ import annotations

import math
import re
import tempfile
from collections import deque
from pathlib import Path

try:
    from benchmarks.limits import run_limited
except ImportError:          # run as a script from benchmarks/
    from limits import run_limited  # type: ignore[no-redef]

#: CPU seconds a reference run (DG's CPU version, CP's second run) may use
REFERENCE_CPU_LIMIT = 600.0

# the number of ways to place n queens, n = 1..15 (OEIS A000170)
QUEENS = [1, 0, 0, 2, 10, 4, 40, 92, 352, 724, 2680, 14200, 73712, 365596, 2279184]


def bfs_costs(graph_file: Path) -> list[int]:
    """The BFS level of every node of a graph in the benchmark's format (node count; per node
    its first edge and edge count; the source; the edge count; per edge its node and cost),
    -1 for nodes the source does not reach."""
    numbers = [int(t) for t in graph_file.read_text().split()]
    n = numbers[0]
    starts = numbers[1:1 + 2 * n:2]
    counts = numbers[2:2 + 2 * n:2]
    source = numbers[1 + 2 * n]
    edges = numbers[3 + 2 * n::2][:numbers[2 + 2 * n]]
    cost = [-1] * n
    cost[source] = 0
    queue = deque([source])
    while queue:
        u = queue.popleft()
        for v in edges[starts[u]:starts[u] + counts[u]]:
            if cost[v] < 0:
                cost[v] = cost[u] + 1
                queue.append(v)
    return cost


def libor_reference() -> tuple[float, float]:
    """(v, Lb) of LIB: the swaption portfolio's value along one LIBOR path and the reverse-mode
    sensitivity to the last rate, with the program's constants, in double precision."""
    n_rates, n_mat, delta = 80, 40, 0.25
    maturities = [4, 4, 4, 8, 8, 8, 20, 20, 20, 28, 28, 28, 40, 40, 40]
    swaprates = [.045, .05, .055] * 5
    lam = [0.2] * n_rates
    z = [0.3] * n_rates
    rates = [0.05] * n_rates
    path = [rates[:]]                      # the rates after each step n (L2 in the program)
    for n in range(n_mat):
        sqez = math.sqrt(delta) * z[n]
        v = 0.0
        for i in range(n + 1, n_rates):
            con1 = delta * lam[i - n - 1]
            v += con1 * rates[i] / (1.0 + delta * rates[i])
            rates[i] *= math.exp(con1 * v + lam[i - n - 1] * (sqez - 0.5 * con1))
        path.append(rates[:])
    # the portfolio and its adjoint with respect to the final rates
    count = n_rates - n_mat
    bonds, sums = [], []
    b, s = 1.0, 0.0
    for m in range(count):
        b /= 1.0 + delta * rates[m + n_mat]
        s += delta * b
        bonds.append(b)
        sums.append(s)
    value = 0.0
    bonds_b, sums_b = [0.0] * count, [0.0] * count
    for k in range(len(maturities)):
        m = maturities[k] - 1
        swapval = bonds[m] + swaprates[k] * sums[m] - 1.0
        if swapval < 0:
            value += -100 * swapval
            sums_b[m] += -100 * swaprates[k]
            bonds_b[m] += -100
    rates_b = [0.0] * n_rates
    for m in range(count - 1, -1, -1):
        n = m + n_mat
        bonds_b[m] += delta * sums_b[m]
        rates_b[n] = -bonds_b[m] * bonds[m] * delta / (1.0 + delta * rates[n])
        if m > 0:
            sums_b[m - 1] += sums_b[m]
            bonds_b[m - 1] += bonds_b[m] / (1.0 + delta * rates[n])
    discount = 1.0
    for n in range(n_mat):
        discount /= 1.0 + delta * rates[n]
    value *= discount
    for n in range(n_mat):
        rates_b[n] = -value * delta / (1.0 + delta * rates[n])
    for n in range(n_mat, n_rates):
        rates_b[n] *= discount
    # back along the path (path_calc_b2)
    for n in range(n_mat - 1, -1, -1):
        v1 = 0.0
        for i in range(n_rates - 1, n, -1):
            v1 += lam[i - n - 1] * path[n + 1][i] * rates_b[i]
            faci = delta / (1.0 + delta * path[n][i])
            rates_b[i] = rates_b[i] * path[n + 1][i] / path[n][i] + v1 * lam[i - n - 1] * faci * faci
    return value, rates_b[n_rates - 1]


def _aes(directory: Path, output: str) -> tuple[bool | None, str]:
    try:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    except ImportError:
        return None, "no reference: the `cryptography` package is not installed"
    command = (directory / "README.GPGPU-Sim").read_text().split()
    mode, bits, source, key_file = command[1:5]
    if mode != "e":
        return None, "no reference for decryption runs"
    key = bytes(int(t, 16) for t in (directory / key_file).read_text().split())
    if len(key) * 8 != int(bits):
        return False, f"the key file holds {len(key)} bytes, not {bits} bits"
    plain = (directory / source).read_bytes()
    pad = 16 - len(plain) % 16                         # PKCS#7, a whole block when aligned
    encryptor = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    expected = encryptor.update(plain + bytes([pad]) * pad) + encryptor.finalize()
    written = directory / "output_0.dat"
    if not written.exists():
        return False, "no output_0.dat"
    got = written.read_bytes()
    if got != expected:
        blocks = [i // 16 for i in range(0, max(len(got), len(expected)), 16)
                  if got[i:i + 16] != expected[i:i + 16]]
        return False, (f"output_0.dat differs from AES-{bits} ECB in {len(blocks)} of "
                       f"{len(expected) // 16} blocks (the first: {blocks[0]})")
    return True, ""


def _bfs(directory: Path, output: str) -> tuple[bool | None, str]:
    command = (directory / "README.GPGPU-Sim").read_text().split()
    expected = bfs_costs(directory / command[1])
    result = directory / "result.txt"
    if not result.exists():
        return False, "no result.txt"
    got = [int(m) for m in re.findall(r"^\d+\) cost:(-?\d+)$", result.read_text(), re.MULTILINE)]
    if got != expected:
        wrong = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
        first = wrong[0] if wrong else min(len(got), len(expected))
        # the kernel races: a thread may give a node of the current frontier, whose own thread
        # has not run yet, a cost one higher (and put it in the frontier again); a schedule
        # that runs threads one after another in a launch turns that into long chains.  Costs
        # above the BFS level are what the race can produce, costs below it are not.
        below = sum(1 for a, b in zip(got, expected) if a < b or (b < 0 <= a) or (a < 0 <= b))
        why = ("every cost is at least the node's BFS level: the program's race between threads "
               "of one launch" if not below else f"{below} nodes below their BFS level: wrong")
        return False, (f"result.txt: {len(wrong)} of {len(expected)} nodes not at their BFS "
                       f"level (node {first}"
                       f"{f': {got[first]}, level {expected[first]}' if wrong else ''}); {why}")
    return True, ""


def _lib(directory: Path, output: str) -> tuple[bool | None, str]:
    values = [float(x) for x in re.findall(r"^v\s*=\s*(\S+)", output, re.MULTILINE)]
    lbs = [float(x) for x in re.findall(r"^Lb\s*=\s*(\S+)", output, re.MULTILINE)]
    if len(values) != 2 or len(lbs) != 1:
        return False, "the output has no two values of v and one of Lb"
    v, lb = libor_reference()
    # single precision with __expf and __fdividef over 40 steps: 1e-4 relative is generous
    bad = [f"{name} = {got} (expected {want:.8f})" for name, got, want in
           (("v", values[0], v), ("v (Greeks)", values[1], v), ("Lb", lbs[0], lb))
           if not math.isclose(got, want, rel_tol=1e-4)]
    return (False, "; ".join(bad)) if bad else (True, "")


def _lps(directory: Path, output: str) -> tuple[bool | None, str]:
    m = re.search(r"rms error = (\S+)", output)
    if not m:
        return False, "no rms error printed"
    return (True, "") if float(m.group(1)) < 1e-5 else (False, f"rms error {m.group(1)} against its gold code")


def _nqu(directory: Path, output: str) -> tuple[bool | None, str]:
    cpu = re.search(r"CPU: (\d+) queen = (\d+)", output)
    gpu = re.search(r"GPU: (\d+) queen = (\d+)", output)
    if not (cpu and gpu):
        return False, "no CPU and GPU solution counts printed"
    n = int(gpu.group(1))
    known = QUEENS[n - 1] if 0 < n <= len(QUEENS) else None
    if gpu.group(2) != cpu.group(2) or (known is not None and int(gpu.group(2)) != known):
        return False, f"{n} queens: GPU {gpu.group(2)}, CPU {cpu.group(2)}, known {known}"
    return True, ""


def _sto(directory: Path, output: str) -> tuple[bool | None, str]:
    if "Test FAILED" in output:
        return False, "Test FAILED"
    return (True, "") if "Test PASSED" in output else (False, "no Test PASSED")


def _ez_values(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"^(-?\d\.\d+e[-+]\d+)$", text, re.MULTILINE)]


def _dg(directory: Path, output: str) -> tuple[bool | None, str]:
    cpu = directory / "MaxwellsCPU3d"
    if not cpu.exists():
        return None, "its CPU version (Makefiles/MakefileCPU3d) did not build: no reference"
    command = (directory / "README.GPGPU-Sim").read_text().split()
    ref = run_limited([str(cpu), *command[1:]], cwd=directory, cpu_limit=REFERENCE_CPU_LIMIT)
    if ref.stopped:
        return None, ref.why("its CPU version", REFERENCE_CPU_LIMIT) + ": no reference"
    expected, got = _ez_values(ref.stdout), _ez_values(output)
    if not expected:
        return None, "its CPU version printed no field: no reference"
    if len(got) != len(expected):
        return False, f"{len(got)} values of Ez, its CPU version prints {len(expected)}"
    worst = max(abs(a - b) for a, b in zip(got, expected))
    scale = max(abs(b) for b in expected)
    # single precision on the GPU side, printed with 7 digits
    if worst > 1e-5 * max(scale, 1.0):
        return False, f"Ez differs from its CPU version by up to {worst:.3g} (values up to {scale:.3g})"
    return True, ""


def _cp(directory: Path, output: str) -> tuple[bool | None, str]:
    exe = directory / "benchmarks/cp/build/cuda_short/cp"
    reference = directory / "benchmarks/cp/output/short/ref.txt"
    with tempfile.TemporaryDirectory() as tmp:
        written = Path(tmp) / "cp.txt"
        run = run_limited([str(exe), "-o", str(written)], cwd=directory,
                          cpu_limit=REFERENCE_CPU_LIMIT)
        if run.stopped:
            return None, run.why("`cp -o FILE`", REFERENCE_CPU_LIMIT)
        if run.returncode != 0 or not written.exists():
            return False, f"`cp -o FILE` wrote no output (exit status {run.returncode})"
        got = written.read_text().splitlines()
    expected = reference.read_text().splitlines()
    if len(got) != len(expected) or got[:1] != expected[:1]:
        return False, (f"the output's first line {got[:1]} or its {len(got)} lines differ from "
                       f"ref.txt's {expected[:1]}, {len(expected)} lines")
    checksum, want = float(got[1]), float(expected[1])
    if abs(checksum - want) > 0.005 * abs(want):
        return False, f"checksum {checksum} differs from ref.txt's {want} by more than 0.5 %"
    for number, (line, ref_line) in enumerate(zip(got[2:], expected[2:]), start=3):
        values, refs = [float(x) for x in line.split()], [float(x) for x in ref_line.split()]
        bad = [(c, r) for c, r in zip(values, refs) if not (abs(r - c) < 0.005 or abs(r - c) < 0.005 * abs(r))]
        if len(values) != len(refs) or bad:
            return False, f"line {number}: {len(bad)} values differ from ref.txt (first: {bad[:1]})"
    return True, ""


def _nn(directory: Path, output: str) -> tuple[bool | None, str]:
    m = re.search(r"FAIL! (.*NOT FOUND!)", output)
    if m:       # the MNIST test images are not part of the repository
        return False, f"its input is missing: {m.group(1)}"
    return None, "the program checks nothing and there is no reference for it here"


JUDGES = {"CP": _cp, "DG": _dg, "NN": _nn, "AES": _aes, "BFS": _bfs, "LIB": _lib, "LPS": _lps, "NQU": _nqu, "STO": _sto}


def judge(program: str, directory: Path, output: str) -> tuple[bool | None, str]:
    check = JUDGES.get(Path(program).name)
    if check is None:
        return None, "the program checks nothing and there is no reference for it here"
    try:
        return check(directory, output)
    except (OSError, ValueError, IndexError) as exc:
        return False, f"cannot check the result: {exc}"
