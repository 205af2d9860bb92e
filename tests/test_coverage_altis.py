"""benchmarks/altis.py: the checks the Altis recipe of benchmarks/coverage.py makes where the
suite has none.  glibc's rand() is the input generator the programs use; the Needleman-Wunsch
reference is checked on cases worked by hand, and the judge must reject a wrong traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import altis, coverage


def test_glibc_rand_is_the_c_library_sequence() -> None:
    # glibc's documented first values after srand(1) (the TYPE_3 additive generator)
    assert altis.glibc_rand(1, 3) == [1804289383, 846930886, 1681692777]


def _needle(directory: Path, value: int) -> None:
    table = ",".join([str(value)] * 576)
    (directory / "needle.cu").write_text(f"int blosum62[24][24] = {{{table}}};\n")


def test_nw_reference_by_hand() -> None:
    zeros = [[0] * 24 for _ in range(24)]
    # no substitution score: the best path is the diagonal, every score on it 0
    assert altis.nw_traceback(16, 10, zeros) == [0] * 16
    # 20 is not a multiple of the 16-wide tiles: rows and columns 17-20 keep their zeros
    assert altis.nw_traceback(20, 10, zeros) == [0] * 20
    # every pair scores +1: score[i][j] = min(i, j) - 10 |i - j| inside the tiles; the path
    # is still the diagonal, its values 14, 13, ..., 0 after the start's 15
    ones = [[1] * 24 for _ in range(24)]
    assert altis.nw_traceback(16, 10, ones) == list(range(15, -1, -1))


@pytest.mark.parametrize("wrong", [False, True])
def test_nw_judge(tmp_path: Path, wrong: bool) -> None:
    _needle(tmp_path, 1)
    values = list(range(15, -1, -1))
    if wrong:
        values[7] += 1
    altis.output_file(tmp_path, "nw").write_text(
        "Print traceback value GPU to x:\n" + " ".join(map(str, values)) + " ")
    output = "Running Needleman-Wunsch\nMax Rows x Cols: 16x16\nPenalty: 10\n"
    verdict, why = altis.judge("src/cuda/level2/nw", tmp_path, output)
    if wrong:
        assert verdict is False and "step 7" in why
    else:
        assert verdict is True, why
    # without its output file there is nothing to check
    altis.output_file(tmp_path, "nw").unlink()
    assert altis.judge("src/cuda/level2/nw", tmp_path, output)[0] is None


def test_sort_and_unchecked_programs() -> None:
    assert altis.judge("src/cuda/level1/sort", Path("."), "Test Passed\n") == (True, "")
    assert altis.judge("src/cuda/level1/sort", Path("."), "Sort Failed\n")[0] is False
    assert altis.judge("src/cuda/level2/where", Path("."), "Done.\n")[0] is None
    recipe = coverage.RECIPES["altis"]
    assert recipe.judge is altis.judge and "-o" in recipe.run_shell
    assert "CMAKE_CUDA_COMPILER" in " ".join(recipe.setup)


def test_lavamd_reference_and_judge(tmp_path: Path) -> None:
    import math
    fv = altis.lavamd_forces(1)
    # particle 0 by the kernel's formulas, one pair at a time (one box: its own 100)
    r = altis.glibc_rand(7, 500)
    rv = [[(r[4 * i + c] % 10 + 1) / 10.0 for c in range(4)] for i in range(100)]
    qv = [(r[400 + i] % 10 + 1) / 10.0 for i in range(100)]
    f = [0.0] * 4
    for j in range(100):
        r2 = rv[0][0] + rv[j][0] - sum(rv[0][c] * rv[j][c] for c in (1, 2, 3))
        vij = math.exp(-0.5 * r2)
        f[0] += qv[j] * vij
        for c in (1, 2, 3):
            f[c] += qv[j] * 2 * vij * (rv[0][c] - rv[j][c])
    assert fv[0].tolist() == pytest.approx(f, rel=1e-12)
    lines = ["%f, %f, %f, %f" % tuple(row) for row in fv]
    (tmp_path / "result.txt").write_text("\n".join(lines) + "\n")
    output = "Running LavaMD\nConfiguration used: boxes1d = 1\n"
    assert altis.judge("src/cuda/level2/lavamd", tmp_path, output) == (True, "")
    lines[42] = "%f, %f, %f, %f" % (fv[42][0], fv[42][1] + 1e-3, fv[42][2], fv[42][3])
    (tmp_path / "result.txt").write_text("\n".join(lines) + "\n")
    verdict, why = altis.judge("src/cuda/level2/lavamd", tmp_path, output)
    assert verdict is False and "particle 42" in why
