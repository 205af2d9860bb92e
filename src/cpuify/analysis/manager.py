"""Analyses computed once per kernel and shared by the passes, until a pass changes the IR.

    analyses = AnalysisManager()
    uniform = analyses.get(uniform_values, region)     # computed on the first request
    ...                                                # a pass that changed the IR:
    analyses.invalidate()                              # everything is recomputed on demand

The pass manager owns one per kernel and invalidates it after every pass that reports a
change (a pass returning 0 changed nothing), so a pipeline of passes that do not fire
computes uniformity, dominators and post-dominators once instead of once per pass."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from cpuify.ir.core import Region

T = TypeVar("T")


class AnalysisManager:
    def __init__(self) -> None:
        self._cache: dict[tuple[Callable[..., Any], int], tuple[Region, Any]] = {}
        self.computed = 0                # how many analyses ran (for tests)

    def get(self, analysis: Callable[[Region], T], region: Region) -> T:
        key = (analysis, id(region))
        got = self._cache.get(key)
        if got is not None and got[0] is region:
            return got[1]  # type: ignore[no-any-return]
        result = analysis(region)
        self.computed += 1
        self._cache[key] = (region, result)
        return result

    def invalidate(self) -> None:
        self._cache.clear()


def cached(analyses: AnalysisManager | None, analysis: Callable[[Region], T], region: Region) -> T:
    """analysis(region), through `analyses` when there is one."""
    return analyses.get(analysis, region) if analyses is not None else analysis(region)
