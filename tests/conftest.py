"""Test options: `--runslow` runs the tests marked `slow` (long-running; skipped by default,
so that the README's test command stays quick).  Under pytest-xdist (`-n auto`), each worker
process compiles into a cache directory of its own: tests that count cache entries or
clear the cache must not see another worker's compiles."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        from cpuify import cache
        # (beside the cache, not inside it: its eviction owns what is inside)
        os.environ["CPUIFY_CACHE_DIR"] = str(cache.location().parent / f"cpuify-pytest-{worker}")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run the tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def run_twice():
    """run_twice(mod, kernel, grid, block, args, out): launches the kernel twice, `out` set to
    -1 before each launch; returns `out` after each (the first launch runs the generic code,
    the second the code specialized for `block`)."""
    def run(mod, name, grid, block, args, out):  # type: ignore[no-untyped-def]
        f = mod.get_function(name)
        results = []
        for _ in range(2):
            out[:] = -1
            f(grid, block, args)
            results.append(out.copy())
        return results
    return run
