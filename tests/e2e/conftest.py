"""Shared fixtures for the end-to-end tests: real CUDA kernels compiled by cpuify and run
on NumPy arrays.  Modules are compiled once per test module (module-scoped fixtures) and
cached on disk by cpuify itself ($CPUIFY_CACHE_DIR, default ~/.cache/cpuify)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
