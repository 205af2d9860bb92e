"""Checks of the Altis benchmarks' results, for benchmarks/coverage.py.

Altis's programs print timings; only Sort compares its result with a CPU computation (its
`Passed`/`Failed` is the check here too).  Where a program writes its result with `-o FILE`
and builds its input from the C library's `rand()` after a fixed `srand()`, the result is
compared with a reference computed here from the same input (glibc's `rand()` called through
ctypes), independently of the program and of cpuify:

- nw (Needleman-Wunsch): the traceback values it writes against the score matrix of the same
  two sequences computed in Python, traced back by the program's own rules.  As on a GPU,
  the program's kernels fill only the whole 16x16 tiles of the matrix (96 of its 100 rows at
  `-s 1`); the rest keeps its initial zeros, and the reference does the same.

- lavamd: the forces it writes to result.txt (with -o) against the same particle system
  computed in NumPy in double precision (its `fp`), each home box with its 26 neighbours.

`judge(program, directory, output)` returns (True, "") for a pass, (False, why) for a wrong
result and (None, why) when there is no check to make.  The recipe runs each program with
`-o altis-output-<executable>.txt` in its directory.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import numpy as np

NW_SEED = 7              # needle.cu's SEED
NW_LIMIT = -999          # needle.cu's LIMIT
NW_BLOCK = 16            # needle.h's BLOCK_SIZE


def output_file(directory: Path, executable: str) -> Path:
    return directory / f"altis-output-{executable}.txt"


def glibc_rand(seed: int, count: int) -> list[int]:
    """The first `count` values of glibc's rand() after srand(seed)."""
    libc = ctypes.CDLL("libc.so.6")
    libc.srand(ctypes.c_uint(seed))
    return [libc.rand() for _ in range(count)]


def blosum62(source: str) -> list[list[int]]:
    """The 24x24 table `int blosum62[24][24] = {...}` of the program's own source."""
    m = re.search(r"blosum62\s*\[24\]\s*\[24\]\s*=\s*\{(.*?)\};", source, re.S)
    if not m:
        raise ValueError("no blosum62 table in needle.cu")
    values = [int(v) for v in re.findall(r"-?\d+", m.group(1))]
    if len(values) != 24 * 24:
        raise ValueError(f"blosum62 has {len(values)} values, not 576")
    return [values[r * 24:(r + 1) * 24] for r in range(24)]


def nw_traceback(dim: int, penalty: int, table: list[list[int]]) -> list[int]:
    """What needle.cu writes with -o for a `dim` x `dim` problem: the score at (dim-1, dim-1),
    then the value of each step of its traceback to (0, 0)."""
    n = dim + 1                                    # max_rows = max_cols
    rand = glibc_rand(NW_SEED, 2 * dim)
    seq_a = [0] + [r % 10 + 1 for r in rand[:dim]]
    seq_b = [0] + [r % 10 + 1 for r in rand[dim:]]
    # the reference matrix's row and column 0 are never written (malloc'd, read by the
    # traceback only against LIMIT): zero, as fresh heap memory is
    ref = [[0] * n for _ in range(n)]
    for i in range(1, n):
        for j in range(1, n):
            ref[i][j] = table[seq_a[i]][seq_b[j]]
    score = [[0] * n for _ in range(n)]
    for i in range(n):
        score[i][0] = -i * penalty
        score[0][i] = -i * penalty
    filled = (n - 1) // NW_BLOCK * NW_BLOCK         # the whole tiles the kernels cover
    for i in range(1, filled + 1):
        for j in range(1, filled + 1):
            score[i][j] = max(score[i - 1][j - 1] + ref[i][j],
                              score[i][j - 1] - penalty, score[i - 1][j] - penalty)
    out = []
    i = j = n - 2
    out.append(score[i][j])
    while not (i == 0 and j == 0):
        if i > 0 and j > 0:
            nw, w, nn = score[i - 1][j - 1], score[i][j - 1], score[i - 1][j]
        elif i == 0:
            nw = nn = NW_LIMIT
            w = score[i][j - 1]
        else:
            nw = w = NW_LIMIT
            nn = score[i - 1][j]
        new_nw, new_w, new_n = nw + ref[i][j], w - penalty, nn - penalty
        # the program's own steps: each test compares the value the previous one may have
        # replaced (a neighbour's score), not the maximum
        value = max(new_nw, new_w, new_n)
        if value == new_nw:
            value = nw
        if value == new_w:
            value = w
        if value == new_n:
            value = nn
        out.append(value)
        if value == nw:
            i, j = i - 1, j - 1
        elif value == w:
            j -= 1
        elif value == nn:
            i -= 1
        if i < 0 or j < 0:
            break
    return out


def _nw(directory: Path, output: str) -> tuple[bool | None, str]:
    dims = re.search(r"Max Rows x Cols: (\d+)x(\d+)", output)
    pen = re.search(r"Penalty: (\d+)", output)
    result = output_file(directory, "nw")
    if not (dims and pen and result.is_file()):
        return None, "no problem size, penalty or output file to check"
    text = result.read_text()
    got = [int(v) for v in re.findall(r"-?\d+", text.split(":", 1)[-1])]
    want = nw_traceback(int(dims.group(1)), int(pen.group(1)),
                        blosum62((directory / "needle.cu").read_text()))
    if got != want:
        first = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b),
                     min(len(got), len(want)))
        return False, (f"traceback differs from the reference at step {first} of {len(want)} "
                       f"(got {got[first:first + 3]}, want {want[first:first + 3]})")
    return True, ""


LAVAMD_SEED = 7           # lavaMD.h's SEED
LAVAMD_PER_BOX = 100      # NUMBER_PAR_PER_BOX
LAVAMD_ALPHA = 0.5        # par_cpu.alpha


def lavamd_forces(boxes1d: int) -> np.ndarray:
    """fv (v, x, y, z per particle) of lavaMD's run on a boxes1d^3 grid of boxes."""
    n = boxes1d ** 3 * LAVAMD_PER_BOX
    rand = np.array(glibc_rand(LAVAMD_SEED, 5 * n), dtype=np.int64)
    rv = ((rand[:4 * n] % 10 + 1) / 10.0).reshape(n, 4)          # v, x, y, z
    qv = (rand[4 * n:] % 10 + 1) / 10.0
    a2 = 2.0 * LAVAMD_ALPHA * LAVAMD_ALPHA
    fv = np.zeros((n, 4))
    for z in range(boxes1d):
        for y in range(boxes1d):
            for x in range(boxes1d):
                home = (z * boxes1d + y) * boxes1d + x
                a = slice(home * LAVAMD_PER_BOX, (home + 1) * LAVAMD_PER_BOX)
                near = [((z + dz) * boxes1d + y + dy) * boxes1d + x + dx
                        for dz in (-1, 0, 1) for dy in (-1, 0, 1) for dx in (-1, 0, 1)
                        if 0 <= z + dz < boxes1d and 0 <= y + dy < boxes1d
                        and 0 <= x + dx < boxes1d]
                for box in near:                # the home box is one of them
                    b = slice(box * LAVAMD_PER_BOX, (box + 1) * LAVAMD_PER_BOX)
                    ra, rb = rv[a], rv[b]
                    r2 = ra[:, None, 0] + rb[None, :, 0] - ra[:, 1:] @ rb[:, 1:].T
                    vij = np.exp(-a2 * r2)
                    q = qv[b][None, :]
                    fv[a, 0] += (q * vij).sum(axis=1)
                    for c in (1, 2, 3):
                        d = ra[:, None, c] - rb[None, :, c]
                        fv[a, c] += (q * 2 * vij * d).sum(axis=1)
    return fv


def _lavamd(directory: Path, output: str) -> tuple[bool | None, str]:
    m = re.search(r"boxes1d = (\d+)", output)
    result = directory / "result.txt"
    if not (m and result.is_file()):
        return None, "no box count or result.txt to check"
    got = np.array([[float(v) for v in line.split(",")]
                    for line in result.read_text().splitlines() if line.strip()])
    want = lavamd_forces(int(m.group(1)))
    if got.shape != want.shape:
        return False, f"result.txt has {got.shape[0]} particles, not {want.shape[0]}"
    # printed with %f: 6 decimals
    bad = np.abs(got - want) > 1e-6 * np.abs(want) + 2e-6
    if bad.any():
        k = int(np.argmax(bad.any(axis=1)))
        return False, (f"{int(bad.any(axis=1).sum())} of {len(want)} particles' forces differ "
                       f"from the reference (particle {k}: {got[k].tolist()} vs "
                       f"{[round(v, 6) for v in want[k]]})")
    return True, ""


def _sort(directory: Path, output: str) -> tuple[bool | None, str]:
    if re.search(r"(?i)\bfailed\b", output):
        return False, output[output.lower().find("failed") - 80:][:160].strip()
    return (True, "") if re.search(r"\bPassed\b", output) else (None, "no Passed/Failed")


JUDGES = {"nw": _nw, "lavamd": _lavamd, "sort": _sort}


def judge(program: str, directory: Path, output: str) -> tuple[bool | None, str]:
    check = JUDGES.get(Path(program).name)
    if check is None:
        if re.search(r"(?i)\bfailed\b", output):
            return False, "the program says it failed"
        return None, "the program has no check of its own"
    return check(directory, output)
