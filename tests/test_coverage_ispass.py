"""The ISPASS 2009 recipe of benchmarks/coverage.py and its result checks
(benchmarks/ispass2009.py), on inputs small enough to check by hand."""

from __future__ import annotations

from pathlib import Path

from benchmarks import coverage, ispass2009


def test_the_suite_is_recognized(tmp_path: Path) -> None:
    (tmp_path / "Makefile.ispass-2009").write_text("default:\n")
    assert [r.name for r in coverage.detect(tmp_path)] == ["ispass2009"]
    recipe = coverage.RECIPES["ispass2009"]
    assert recipe.judge is ispass2009.judge and "README.GPGPU-Sim" in recipe.run_shell


def test_bfs_levels_and_the_race_diagnosis(tmp_path: Path) -> None:
    # 0 - 1, 0 - 2, 1 - 3, 2 - 3, 3 - 4; node 5 unreachable
    adjacency = [[1, 2], [0, 3], [0, 3], [1, 2, 4], [3], []]
    starts, edges = [], []
    for nbrs in adjacency:
        starts.append(len(edges))
        edges += nbrs
    lines = [str(len(adjacency))] + [f"{s} {len(n)}" for s, n in zip(starts, adjacency)]
    lines += ["", "0", "", str(len(edges))] + [f"{e} 1" for e in edges]
    (tmp_path / "g.txt").write_text("\n".join(lines) + "\n")
    assert ispass2009.bfs_costs(tmp_path / "g.txt") == [0, 1, 1, 2, 3, -1]
    (tmp_path / "README.GPGPU-Sim").write_text("../bin/release/BFS g.txt\n")

    def result(costs: list[int]) -> None:
        (tmp_path / "result.txt").write_text("".join(f"{i}) cost:{c}\n" for i, c in enumerate(costs)))
    result([0, 1, 1, 2, 3, -1])
    assert ispass2009.judge("BFS", tmp_path, "") == (True, "")
    result([0, 1, 2, 3, 4, -1])                  # longer paths: what the kernel's race gives
    ok, why = ispass2009.judge("BFS", tmp_path, "")
    assert ok is False and "3 of 6 nodes" in why and "the program's race" in why
    result([0, 1, 1, 1, 3, -1])                  # below a BFS level: no schedule gives that
    ok, why = ispass2009.judge("BFS", tmp_path, "")
    assert ok is False and "1 nodes below their BFS level" in why


def test_lib_nqu_lps_sto_checks(tmp_path: Path) -> None:
    v, lb = ispass2009.libor_reference()
    good = f"v  = {v:15.8f}\nTime : 1 msec\nv  = {v:15.8f}\nLb = {lb:15.8f}\n"
    assert ispass2009.judge("LIB", tmp_path, good) == (True, "")
    ok, why = ispass2009.judge("LIB", tmp_path, good.replace(f"{lb:15.8f}", f"{lb * 1.001:15.8f}"))
    assert ok is False and why.startswith("Lb = ")
    assert ispass2009.judge("NQU", tmp_path, "CPU: 8 queen = 92  t\nGPU: 8 queen = 92  t\n")[0] is True
    assert ispass2009.judge("NQU", tmp_path, "CPU: 8 queen = 91  t\nGPU: 8 queen = 91  t\n")[0] is False
    assert ispass2009.judge("NQU", tmp_path, "CPU: 9 queen = 352\nGPU: 9 queen = 351\n")[0] is False
    assert ispass2009.judge("LPS", tmp_path, " rms error = 0.000000 \n")[0] is True
    assert ispass2009.judge("LPS", tmp_path, " rms error = 0.001000 \n")[0] is False
    assert ispass2009.judge("STO", tmp_path, "Test PASSED\nTest FAILED\n")[0] is False
    assert ispass2009.judge("RAY", tmp_path, "anything")[0] is None
