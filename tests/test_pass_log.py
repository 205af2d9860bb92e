"""CPUIFY_PASS_LOG: one JSON line per kernel compiled, naming the passes that touched it
(benchmarks/ablation.py reruns a workload with a pass off only where the pass touched it)."""

from __future__ import annotations

import json

import pytest

from cpuify.compiler import lift_and_optimize, pipeline_options
from cpuify.errors import CpuifyError
from cpuify.frontend.nvrtc import compile_to_ptx
from cpuify.frontend.ptx_parser import parse_ptx

# every thread calls sum(in, n): parallel-licm hoists the sum out of the thread loop
NORMALIZE = r"""
__device__ float sum(const float *in, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += in[i];
    return s;
}
extern "C" __global__ void normalize(float *out, const float *in, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    float total = sum(in, n);
    if (tid < n) out[tid] = in[tid] / total;
}
"""


def _compile(options: tuple[str, ...] = ()) -> None:
    module = parse_ptx(compile_to_ptx(NORMALIZE).ptx)
    lift_and_optimize(module, module.functions["normalize"], pipeline_options(options)[0], (128, 1, 1))


def test_log_names_the_passes_that_touched_the_kernel(tmp_path, monkeypatch) -> None:
    log = tmp_path / "passes.jsonl"
    monkeypatch.setenv("CPUIFY_PASS_LOG", str(log))
    _compile()
    _compile(("--disable-pass=parallel-licm",))
    first, second = (json.loads(line) for line in log.read_text().splitlines())
    assert first["kernel"] == "normalize" and first["block_dims"] == [128, 1, 1]
    assert "parallel-licm" in first["touched"]
    assert "parallel-licm" not in second["touched"]
    # a pass that does not fire on it is not named (no barrier: nothing to eliminate)
    assert "barrier-elimination" not in first["touched"]


def test_unwritable_log_is_an_error_naming_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CPUIFY_PASS_LOG", str(tmp_path / "missing" / "passes.jsonl"))
    with pytest.raises(CpuifyError, match="CPUIFY_PASS_LOG=.*missing"):
        _compile()
