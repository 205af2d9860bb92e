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

`judge(program, directory, output)` returns (True, "") for a pass, (False, why) for a wrong
result and (None, why) when there is no check to make.  The recipe runs each program with
`-o altis-output-<executable>.txt` in its directory.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

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


def _sort(directory: Path, output: str) -> tuple[bool | None, str]:
    if re.search(r"(?i)\bfailed\b", output):
        return False, output[output.lower().find("failed") - 80:][:160].strip()
    return (True, "") if re.search(r"\bPassed\b", output) else (None, "no Passed/Failed")


JUDGES = {"nw": _nw, "sort": _sort}


def judge(program: str, directory: Path, output: str) -> tuple[bool | None, str]:
    check = JUDGES.get(Path(program).name)
    if check is None:
        if re.search(r"(?i)\bfailed\b", output):
            return False, "the program says it failed"
        return None, "the program has no check of its own"
    return check(directory, output)
