"""The pipeline: CUDA C++ -> PTX (NVRTC) -> PTX AST -> parallel IR -> LLVM -> native object,
with an on-disk cache of the result.

Cache entries live in `$CPUIFY_CACHE_DIR` (default `~/.cache/cpuify`), one file per key; the
key covers the input text, options, name expressions, the NVRTC and cpuify versions, the
llvmlite/LLVM version and the host CPU with its features.  Writes go to a temporary file
renamed into place (atomic, safe with concurrent processes); an entry that does not load is
rebuilt."""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import llvmlite

from cpuify import __version__
from cpuify.codegen import jit
from cpuify.codegen.layout import ScratchLayout
from cpuify.codegen.llvm_gen import KernelInfo, ModuleCodegen
from cpuify.errors import PTXError, UnsupportedError
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.structure import KernelView
from cpuify.ir.verifier import verify
from cpuify.lifting import LiftedKernel, lift_kernel
from cpuify.transforms.pass_manager import PipelineOptions, PipelineResult, run_pipeline

_CACHE_FORMAT = 1


@dataclass
class GlobalInfo:
    name: str
    space: str
    size: int
    ptx_type: str


@dataclass
class CompiledModule:
    object_code: bytes
    kernels: dict[str, KernelInfo]
    globals: dict[str, GlobalInfo]
    ptx: str
    lowered_names: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)     # kernel -> why it cannot run
    timings: dict[str, float] = field(default_factory=dict)
    from_cache: bool = False
    passes: tuple[str, ...] = ()          # the pass pipeline the kernels went through
    pass_counts: dict[str, dict[str, int]] = field(default_factory=dict)   # kernel -> pass -> n


def pipeline_options(options: Sequence[str] = ()) -> tuple[PipelineOptions, list[str]]:
    """The pass pipeline from the environment (CPUIFY_PASSES, CPUIFY_DISABLE_PASSES) and
    `options` (which win), and the options left for NVRTC."""
    env: list[str] = []
    if "CPUIFY_PASSES" in os.environ:
        env.append("--passes=" + os.environ["CPUIFY_PASSES"])
    if os.environ.get("CPUIFY_DISABLE_PASSES"):
        env.append("--disable-pass=" + os.environ["CPUIFY_DISABLE_PASSES"])
    return PipelineOptions.parse(env + [str(o) for o in options])


def lift_optimized(module, entry) -> LiftedKernel:  # type: ignore[no-untyped-def]
    """One kernel lifted and run through the default pipeline (what compile_ptx compiles)."""
    return lift_and_optimize(module, entry, PipelineOptions())[0]


def lift_and_optimize(module, entry, pipeline: PipelineOptions,  # type: ignore[no-untyped-def]
                      block_dims: tuple[int, int, int] | None = None
                      ) -> tuple[LiftedKernel, PipelineResult]:
    """One kernel of a parsed PTX module, lifted, verified and run through the pipeline.
    `block_dims`: the block shape the code is for (the kernel's `.reqntid` when it has
    one), recorded on the kernel op for the passes that depend on it."""
    return optimize_kernel(lift_kernel(module, entry).op, pipeline, block_dims)


def optimize_kernel(kernel_op, pipeline: PipelineOptions,  # type: ignore[no-untyped-def]
                    block_dims: tuple[int, int, int] | None = None
                    ) -> tuple[LiftedKernel, PipelineResult]:
    """A `upir.kernel` op (lifted, or read from an MLIR file) verified and run through the
    pipeline, for `block_dims` (default: the kernel's `.reqntid`)."""
    verify(kernel_op)
    req = KernelView.from_op(kernel_op).directives.get("reqntid")
    if block_dims is None and req:
        block_dims = (tuple(req) + (1, 1, 1))[:3]  # type: ignore[assignment]
    if block_dims is not None:
        kernel_op.attributes["block_dims"] = list(block_dims)
    result = run_pipeline(kernel_op, pipeline)
    # (passes may declare variables of their own: the kernel as its op now reads)
    return KernelView.from_op(kernel_op), result


def cache_dir() -> Path:
    env = os.environ.get("CPUIFY_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "cpuify"


def cache_enabled() -> bool:
    return os.environ.get("CPUIFY_NO_CACHE", "") in ("", "0")


def cache_key(kind: str, text: str, options: Sequence[str] = (), names: Sequence[str] = (),
              extra: str = "") -> str:
    h = hashlib.sha256()
    cpu, features = jit.host_cpu()
    for part in (str(_CACHE_FORMAT), __version__, kind, text, "\0".join(options), "\0".join(names),
                 extra, llvmlite.__version__, cpu, features, _source_fingerprint()):
        h.update(part.encode())
        h.update(b"\1")
    return h.hexdigest()


_FINGERPRINT: str | None = None


def _source_fingerprint() -> str:
    """Hash of the compiler's own sources, so that a changed cpuify never reuses old code."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        h = hashlib.sha256()
        root = Path(__file__).parent
        for p in sorted(root.rglob("*.py")) + sorted(root.rglob("*.c")):
            try:
                st = p.stat()
            except OSError:
                continue
            h.update(f"{p.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}".encode())
        _FINGERPRINT = h.hexdigest()[:16]
    return _FINGERPRINT


def load_cached(key: str) -> CompiledModule | None:
    if not cache_enabled():
        return None
    path = cache_dir() / f"{key}.bin"
    try:
        with open(path, "rb") as f:
            entry = pickle.load(f)
        if not isinstance(entry, CompiledModule):
            raise ValueError("not a cpuify cache entry")
    except FileNotFoundError:
        return None
    except Exception:
        # corrupted or from an incompatible version: rebuild
        try:
            path.unlink()
        except OSError:
            pass
        return None
    entry.from_cache = True
    return entry


def store_cached(key: str, module: CompiledModule) -> None:
    if not cache_enabled():
        return
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".bin")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(module, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, d / f"{key}.bin")
    except OSError:
        pass   # a read-only or full cache directory only costs recompilation


class _Progress:
    """Lines on stderr about a long build: once a module has taken PROGRESS_AFTER seconds,
    each kernel it starts and each stage (CPUIFY_QUIET=1: none)."""
    PROGRESS_AFTER = 5.0

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.start = time.perf_counter()
        self.quiet = os.environ.get("CPUIFY_QUIET", "") not in ("", "0")

    def _say(self, text: str) -> None:
        if not self.quiet and time.perf_counter() - self.start >= self.PROGRESS_AFTER:
            import sys
            print(f"cpuify: {text} ({time.perf_counter() - self.start:.0f} s)", file=sys.stderr,
                  flush=True)

    def kernel(self, name: str) -> None:
        self.done += 1
        self._say(f"kernel {self.done}/{self.total}: {name}")

    def stage(self, text: str) -> None:
        self._say(text)


def compile_ptx(ptx: str, *, lowered_names: dict[str, str] | None = None,
                pipeline: PipelineOptions | None = None) -> CompiledModule:
    """Compile PTX text to a native object (no caching here)."""
    pipeline = pipeline or PipelineOptions()
    counts: dict[str, dict[str, int]] = {}
    t0 = time.perf_counter()
    module = parse_ptx(ptx)
    t1 = time.perf_counter()
    triple, layout = jit.triple_and_layout()
    gen = ModuleCodegen(module, triple, layout)
    kernels: dict[str, KernelInfo] = {}
    refused: dict[str, str] = {}
    progress = _Progress(len(module.entries))
    for entry in module.entries:
        progress.kernel(entry.name)
        before = set(gen.module.globals)
        try:
            lifted, result = lift_and_optimize(module, entry, pipeline)
            counts[entry.name] = result.counts
            kernels[entry.name] = gen.add_kernel(lifted)
        except UnsupportedError as exc:
            # one kernel using an unsupported feature must not take its module down:
            # the error is raised when that kernel is asked for
            refused[entry.name] = str(exc)
            gen.forget(set(gen.module.globals) - before)
    if not kernels and refused:
        err = UnsupportedError("no kernel of this module can run on the CPU:\n" + "\n".join(refused.values()))
        err.refused = refused       # type: ignore[attr-defined]  # kernel -> why, for cpuify nvcc
        raise err
    t2 = time.perf_counter()
    progress.stage("LLVM optimization and code generation")
    llvm_text = gen.llvm_text()
    try:
        opt = jit.optimize(llvm_text)
    except RuntimeError as exc:   # our codegen produced invalid LLVM IR: an internal error
        raise PTXError(f"internal error: generated LLVM IR does not verify: {exc}") from exc
    obj = jit.emit_object(opt)
    t3 = time.perf_counter()
    globals_: dict[str, GlobalInfo] = {}
    for v in module.variables:
        if v.space in ("global", "const"):
            globals_[v.name] = GlobalInfo(v.name, v.space, v.size, v.type)
    return CompiledModule(obj, kernels, globals_, ptx, dict(lowered_names or {}), refused,
                          {"parse": t1 - t0, "lift+codegen": t2 - t1, "llvm": t3 - t2},
                          passes=tuple(pipeline.pipeline()), pass_counts=counts)


@dataclass
class SpecializedObject:
    """A kernel compiled for one block shape: its object code and the scratch memory its
    block function needs (passes may keep other values across barriers than in the
    generic code)."""
    object_code: bytes
    scratch: ScratchLayout


def compile_specialized(ptx: str, kernel: str, block_dims: tuple[int, int, int],
                        passes: Sequence[str] | None = None) -> SpecializedObject:
    """`kernel` compiled for one block shape only; its object declares the module's
    variables, so it must be loaded next to the module's own object (and reads the values
    of its launch prologue: `passes` must be the module's pipeline).  Cached."""
    pipeline = PipelineOptions(tuple(passes) if passes is not None else None)
    key = cache_key("spec", ptx, extra=f"{kernel}|{block_dims}|{pipeline.key()}")
    d = cache_dir() / f"{key}.spec"
    if cache_enabled():
        try:
            with open(d, "rb") as f:
                got = pickle.load(f)
            if isinstance(got, SpecializedObject):
                return got
        except Exception:
            pass                        # missing or damaged: rebuilt below
    module = parse_ptx(ptx)
    triple, layout = jit.triple_and_layout()
    gen = ModuleCodegen(module, triple, layout, define_globals=False)
    lifted, _ = lift_and_optimize(module, module.functions[kernel], pipeline, block_dims)
    info = gen.add_kernel(lifted, block_dims)
    spec = SpecializedObject(jit.emit_object(jit.optimize(gen.llvm_text())), info.scratch)
    if cache_enabled():
        try:
            d.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=d.parent, prefix=".tmp-", suffix=".spec")
            with os.fdopen(fd, "wb") as f:
                pickle.dump(spec, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, d)
        except OSError:
            pass
    return spec


def compile_cuda(source: str, *, options: Sequence[str] = (), name_expressions: Sequence[str] = (),
                 filename: str = "kernel.cu", arch: str | None = None) -> CompiledModule:
    """CUDA C++ source to a native object, through the cache."""
    from cpuify.frontend import nvrtc
    pipeline, options = pipeline_options(options)
    key = cache_key("cuda", source, [str(o) for o in options], list(name_expressions),
                    f"{filename}|{arch}|{nvrtc.nvrtc_version()}|{pipeline.key()}")
    cached = None if pipeline.print_after else load_cached(key)
    if cached is not None:
        return cached
    t0 = time.perf_counter()
    res = nvrtc.compile_to_ptx(source, filename=filename, options=options,
                               name_expressions=name_expressions, arch=arch)
    t1 = time.perf_counter()
    compiled = compile_ptx(res.ptx, lowered_names=res.lowered_names, pipeline=pipeline)
    compiled.timings["nvrtc"] = t1 - t0
    store_cached(key, compiled)
    return compiled


def compile_ptx_cached(ptx: str, options: Sequence[str] = ()) -> CompiledModule:
    pipeline, _ = pipeline_options(options)
    key = cache_key("ptx", ptx, extra=pipeline.key())
    cached = None if pipeline.print_after else load_cached(key)
    if cached is not None:
        return cached
    compiled = compile_ptx(ptx, pipeline=pipeline)
    store_cached(key, compiled)
    return compiled
