"""The pipeline: CUDA C++ -> PTX (NVRTC) -> PTX AST -> parallel IR -> LLVM -> native object,
with an on-disk cache of the result.

Compiled modules are entries of the on-disk cache (cpuify.cache: atomic writes, SHA-256
verified before use, JSON metadata and the native code, private permissions, LRU size
limit), one per key; the key covers the input text, the contents of the user headers it
includes, options, name expressions, the NVRTC version, cpuify's sources, the llvmlite/LLVM
version and the host CPU with its features."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import time
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import llvmlite
import llvmlite.binding as llvm_binding

from cpuify import __version__, cache
from cpuify.analysis.access import written_parameters
from cpuify.analysis.pointers import parameter_bases
from cpuify.codegen import jit
from cpuify.codegen.layout import ScratchLayout
from cpuify.codegen.llvm_gen import KernelInfo, ModuleCodegen
from cpuify.codegen.thread_loop_plan import next_block_prefetch_enabled
from cpuify.errors import CpuifyError, PTXError, UnsupportedError
from cpuify.frontend.ptx_parser import parse_ptx
from cpuify.ir.core import OpResult, Operation
from cpuify.ir.structure import KernelView
from cpuify.ir.verifier import verify
from cpuify.lifting import LiftedKernel, lift_kernel
from cpuify.transforms.pass_manager import PipelineOptions, PipelineResult, run_pipeline
from cpuify.transforms.tensor_cores import lower_warp_matrix_ops

#: the passes whose counts are barriers removed (compared between a launch-time variant
#: with `noalias_params` and the code without)
BARRIER_PASSES = ("barrier-elimination", "barrier-motion")

_CACHE_FORMAT = 2


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
    log: str = ""                         # the CUDA compiler's warnings (NVRTC or nvcc)
    #: the LLVM pipeline of the object (codegen.jit.LLVM_LEVELS): "fallback" for a whole
    #: program's generic block functions that only serve launches no specialization covers
    llvm_level: str = "O3"


def pipeline_options(options: Sequence[str] = ()) -> tuple[PipelineOptions, list[str]]:
    """The pass pipeline from the environment (CPUIFY_PASSES, CPUIFY_DISABLE_PASSES,
    CPUIFY_WARP_LOCKSTEP) and
    `options` (which win), and the options left for NVRTC."""
    env: list[str] = []
    if "CPUIFY_PASSES" in os.environ:
        env.append("--passes=" + os.environ["CPUIFY_PASSES"])
    if os.environ.get("CPUIFY_DISABLE_PASSES"):
        env.append("--disable-pass=" + os.environ["CPUIFY_DISABLE_PASSES"])
    if os.environ.get("CPUIFY_WARP_LOCKSTEP", "0") not in ("", "0"):
        env.append("--warp-lockstep")
    return PipelineOptions.parse(env + [str(o) for o in options])


def lift_optimized(module, entry,  # type: ignore[no-untyped-def]
                   block_dims: tuple[int, int, int] | None = None) -> LiftedKernel:
    """One kernel lifted and run through the default pipeline (what compile_ptx compiles;
    with `block_dims`, what compile_specialized compiles for that block shape)."""
    return lift_and_optimize(module, entry, PipelineOptions(), block_dims)[0]


def lift_and_optimize(module, entry, pipeline: PipelineOptions,  # type: ignore[no-untyped-def]
                      block_dims: tuple[int, int, int] | None = None,
                      noalias: Sequence[int] = (),
                      block_run: tuple[int, int] = (1, 1)) -> tuple[LiftedKernel, PipelineResult]:
    """One kernel of a parsed PTX module, lifted, verified and run through the pipeline.
    `block_dims`: the block shape the code is for (the kernel's `.reqntid` when it has
    one), recorded on the kernel op for the passes that depend on it; `noalias`: the byte
    offsets of the pointer parameters the code may take to point into memory no other
    pointer parameter reaches (the kernel's `noalias_params`); `block_run`: the run of
    blocks (x, y) the launch would run as one block (fuse-block-runs)."""
    return optimize_kernel(lift_kernel(module, entry).op, pipeline, block_dims, noalias,
                           block_run)


def optimize_kernel(kernel_op, pipeline: PipelineOptions,  # type: ignore[no-untyped-def]
                    block_dims: tuple[int, int, int] | None = None,
                    noalias: Sequence[int] = (),
                    block_run: tuple[int, int] = (1, 1)) -> tuple[LiftedKernel, PipelineResult]:
    """A `upir.kernel` op (lifted, or read from an MLIR file) verified and run through the
    pipeline, for `block_dims` (default: the kernel's `.reqntid`) and with `noalias` as its
    `noalias_params` (default: what the op says)."""
    verify(kernel_op)
    req = KernelView.from_op(kernel_op).directives.get("reqntid")
    if block_dims is None and req:
        block_dims = (tuple(req) + (1, 1, 1))[:3]  # type: ignore[assignment]
    if block_dims is not None:
        kernel_op.attributes["block_dims"] = list(block_dims)
    if noalias:
        kernel_op.attributes["noalias_params"] = sorted({int(x) for x in noalias})
    if block_dims is not None and tuple(block_run) != (1, 1):
        kernel_op.attributes["block_run_request"] = [int(x) for x in block_run]
    result = run_pipeline(kernel_op, pipeline)
    log = os.environ.get("CPUIFY_PASS_LOG")
    if log:
        _log_passes(log, kernel_op, block_dims, result)
    # warp-wide matrix instructions as code generation runs them (not optional)
    lower_warp_matrix_ops(kernel_op)
    # (passes may declare variables of their own: the kernel as its op now reads)
    return KernelView.from_op(kernel_op), result


def _log_passes(path: str, kernel_op, block_dims, result: PipelineResult) -> None:  # type: ignore[no-untyped-def]
    """CPUIFY_PASS_LOG=FILE: one JSON line per kernel compiled (appended): its name, the block
    shape, and the passes that touched it (changed it, or made the pass manager convert its
    form for them).  benchmarks/ablation.py reruns a workload with a pass off only where
    the pass touched one of its kernels."""
    touched = [n for n, c in result.counts.items() if c]
    touched += [n for _, n in result.transitions if n and n not in touched]
    line = json.dumps({"kernel": kernel_op.attributes.get("sym_name", "?"),
                       "block_dims": list(block_dims) if block_dims else None,
                       "touched": touched})
    try:
        with open(path, "a") as f:
            f.write(line + "\n")
    except OSError as e:
        raise CpuifyError(f"CPUIFY_PASS_LOG={path}: cannot append to it ({e.strerror})") from e


# --- the cache layer: keys, and compiled modules as verified entries (cpuify.cache) ---

def cache_dir(*subdirs: str) -> Path:
    """Where cached things go (cpuify.cache.cache_dir: the cache directory, or a private
    temporary directory of this process when there is no usable cache)."""
    return cache.cache_dir(*subdirs)


def cache_enabled() -> bool:
    return cache.cache_enabled()


def toolchain_key() -> str:
    """What every cached native result depends on besides its input: cpuify's own sources,
    llvmlite and LLVM with the options cpuify sets (jit.llvm_options), and the host CPU with
    its features."""
    cpu, features = jit.host_cpu()
    llvm_version = ".".join(map(str, llvm_binding.llvm_version_info))
    return "|".join((str(_CACHE_FORMAT), __version__, _source_fingerprint(), llvmlite.__version__,
                     llvm_version, cpu, features, " ".join(jit.llvm_options()),
                     f"next-block-prefetch={int(next_block_prefetch_enabled())}"))


def cache_key(kind: str, text: str, options: Sequence[str] = (), names: Sequence[str] = (),
              extra: str = "") -> str:
    h = hashlib.sha256()
    for part in (kind, text, "\0".join(options), "\0".join(names), extra, toolchain_key()):
        h.update(part.encode())
        h.update(b"\1")
    return h.hexdigest()


_FINGERPRINT: str | None = None


def _source_fingerprint() -> str:
    """Hash of the contents of the compiler's own sources (Python, C runtime and its
    headers), so that a changed cpuify never reuses old code.  Reading them all costs a
    fresh process several ms: the hash is kept in the cache under the sources' sizes and
    modification times, and recomputed when any of those changes."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        root = Path(__file__).parent
        files = sorted(p for pattern in ("*.py", "*.c", "*.h") for p in root.rglob(pattern))
        stamp = hashlib.sha256()
        for p in files:
            try:
                st = p.stat()
            except OSError:
                continue
            stamp.update(f"{p.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}\0".encode())
        name = f"fingerprint-{stamp.hexdigest()[:32]}"
        got = cache.read_entry(name) if cache.cache_enabled() else None
        if got is not None and isinstance(got[0].get("sources"), str):
            _FINGERPRINT = got[0]["sources"]
            return _FINGERPRINT
        h = hashlib.sha256()
        for p in files:
            try:
                data = p.read_bytes()
            except OSError:
                continue
            h.update(f"{p.relative_to(root)}:{len(data)}:".encode())
            h.update(data)
        _FINGERPRINT = h.hexdigest()[:16]
        if cache.cache_enabled():
            cache.write_entry(name, {"sources": _FINGERPRINT})
    return _FINGERPRINT


def _to_json(value: Any) -> Any:
    """A dataclass (nested dataclasses, lists, tuples, dicts, scalars) as JSON data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("dict keys must be strings")
        return {k: _to_json(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"cannot store a {type(value).__name__} in a cache entry")


@functools.lru_cache(maxsize=None)
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _from_json(tp: Any, value: Any) -> Any:
    """JSON data back into type `tp` (checked: a mismatch raises ValueError)."""
    if tp in (int, str, bool):
        if type(value) is not tp:
            raise ValueError(f"{value!r} is not a {tp.__name__}")
        return value
    if tp is float:
        if type(value) not in (float, int):
            raise ValueError(f"{value!r} is not a float")
        return float(value)
    if tp is bytes:                 # the native code (the entry's data)
        if type(value) is not bytes:
            raise ValueError("not bytes")
        return value
    if tp is Any:
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ValueError(f"{tp.__name__}: not an object")
        hints = _field_types(tp)
        args = {}
        for f in dataclasses.fields(tp):
            if f.name in value:
                args[f.name] = _from_json(hints[f.name], value[f.name])
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"{tp.__name__}.{f.name} missing")
        return tp(**args)
    origin, params = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        for option in params:
            try:
                return _from_json(option, value)
            except ValueError:
                continue
        raise ValueError(f"{value!r} is none of {tp}")
    if origin in (list, tuple) and not isinstance(value, list):
        raise ValueError("not a list")
    if origin is list:
        return [_from_json(params[0] if params else Any, v) for v in value]
    if origin is tuple:
        if len(params) == 2 and params[1] is Ellipsis:
            return tuple(_from_json(params[0], v) for v in value)
        if params and len(params) != len(value):
            raise ValueError("tuple of the wrong length")
        return tuple(_from_json(t, v) for t, v in zip(params, value)) if params else tuple(value)
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError("not an object")
        return {k: _from_json(params[1] if params else Any, v) for k, v in value.items()}
    if tp is type(None):
        if value is not None:
            raise ValueError("not null")
        return None
    raise ValueError(f"cannot read {tp} from a cache entry")


_T = typing.TypeVar("_T")


def _store(name: str, obj: Any) -> None:
    """A compiled object (a dataclass whose `object_code` is the native code) as an entry:
    the rest as JSON metadata, the code as its data."""
    try:
        meta = {f.name: _to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if f.name not in ("object_code", "from_cache")}
    except TypeError:
        return                        # a field type the cache cannot store: only costs a rebuild
    cache.write_entry(name, meta, obj.object_code)


def _load(name: str, cls: type[_T]) -> _T | None:
    got = cache.read_entry(name)
    if got is None:
        return None
    meta, code = got
    try:
        return typing.cast(_T, _from_json(cls, {**meta, "object_code": code}))
    except (ValueError, TypeError, KeyError) as exc:
        # verified bytes of an older layout cannot happen (the key covers cpuify's sources),
        # so this is damage the hash did not see: rebuild
        cache.drop_entry(name)
        cache._warn(f"cpuify: cache entry {name} does not decode ({exc}); rebuilding it")
        return None


def load_cached(key: str) -> CompiledModule | None:
    if not cache_enabled():
        return None
    entry = _load(f"{key}.bin", CompiledModule)
    if entry is not None:
        entry.from_cache = True
    return entry


def store_cached(key: str, module: CompiledModule) -> None:
    if cache_enabled():
        _store(f"{key}.bin", module)


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


@functools.lru_cache(maxsize=2)
def _parsed_ptx(ptx: str) -> Any:
    """parse_ptx(ptx), kept for the next call with the same text: a program's kernels are
    specialized one by one for their block shapes (nvcc/device.specialize, the API's second
    launch of a shape), and each of those compiles read the same module (SHOC S3D: 70k PTX
    lines, 2 s to parse, 54 kernels).  Lifting and code generation only read the module."""
    return parse_ptx(ptx)


def compile_ptx(ptx: str, *, lowered_names: dict[str, str] | None = None,
                pipeline: PipelineOptions | None = None, llvm_level: str = "O3") -> CompiledModule:
    """Compile PTX text to a native object (no caching here); `llvm_level`: the LLVM
    pipeline (codegen.jit.LLVM_LEVELS)."""
    pipeline = pipeline or PipelineOptions()
    counts: dict[str, dict[str, int]] = {}
    t0 = time.perf_counter()
    module = _parsed_ptx(ptx)
    t1 = time.perf_counter()
    triple, layout = jit.triple_and_layout()
    gen = ModuleCodegen(module, triple, layout)
    kernels: dict[str, KernelInfo] = {}
    refused: dict[str, str] = {}
    emitted: dict[str, set[str]] = {}                   # kernel -> the LLVM globals it added
    launches: dict[str, dict[str, int]] = {}            # kernel -> kernels it launches -> line
    progress = _Progress(len(module.entries))
    for entry in module.entries:
        progress.kernel(entry.name)
        before = set(gen.module.globals)
        try:
            kernel_op = lift_kernel(module, entry).op
            launches[entry.name] = device_launches(kernel_op)
            # before the passes move parameter loads (launch prologue): what the kernel
            # writes through, read by the API to refuse read-only arrays
            written = written_parameters(kernel_op)
            lifted, result = optimize_kernel(kernel_op, pipeline)
            counts[entry.name] = result.counts
            info = gen.add_kernel(lifted)
            info.written_params = tuple(i for i, p in enumerate(info.params) if p[2] in written)
            kernels[entry.name] = info
            emitted[entry.name] = set(gen.module.globals) - before
            gen.release_bodies()      # (printed now: one kernel's llvmlite objects at a time)
        except UnsupportedError as exc:
            # one kernel using an unsupported feature must not take its module down:
            # the error is raised when that kernel is asked for
            refused[entry.name] = str(exc)
            gen.forget(set(gen.module.globals) - before)
    # a kernel that launches one cpuify cannot run (dynamic parallelism) is refused too,
    # rather than its launches failing quietly at run time
    changed = True
    while changed:
        changed = False
        for name in list(kernels):
            child = next((c for c in launches.get(name, {}) if c in refused), None)
            if child is None:
                continue
            line = launches[name][child]
            why = refused[child].partition("\n")[0]
            refused[name] = str(UnsupportedError(
                f"it launches kernel '{child}' from device code, which cannot run on the CPU "
                f"({why})", line=line, kernel=name, source_line=module.source_line(line)))
            del kernels[name]
            gen.forget({g for g in emitted[name] if not g.startswith("cpuify_child_")})
            changed = True
    if not kernels and refused:
        err = UnsupportedError("no kernel of this module can run on the CPU:\n" + "\n".join(refused.values()))
        err.refused = refused       # type: ignore[attr-defined]  # kernel -> why, for cpuify nvcc
        raise err
    t2 = time.perf_counter()
    progress.stage("LLVM optimization and code generation")
    llvm_text = gen.llvm_text()
    try:
        opt = jit.optimize(llvm_text, level=llvm_level)
    except RuntimeError as exc:   # our codegen produced invalid LLVM IR: an internal error
        raise PTXError(f"internal error: generated LLVM IR does not verify: {exc}") from exc
    obj = jit.emit_object(opt, level=llvm_level)
    t3 = time.perf_counter()
    globals_: dict[str, GlobalInfo] = {}
    for v in module.variables:
        if v.space in ("global", "const"):
            globals_[v.name] = GlobalInfo(v.name, v.space, v.size, v.type)
    return CompiledModule(obj, kernels, globals_, ptx, dict(lowered_names or {}), refused,
                          {"parse": t1 - t0, "lift+codegen": t2 - t1, "llvm": t3 - t2},
                          passes=tuple(pipeline.pipeline()), pass_counts=counts,
                          llvm_level=llvm_level)


def device_launches(kernel_op: Operation) -> dict[str, int]:
    """The kernels `kernel_op` may launch from device code -> the PTX line of a launch (a
    launch whose kernel is not a constant may launch any kernel whose address is taken)."""
    out: dict[str, int] = {}
    for op in kernel_op.walk():
        if op.name != "upir.launch_buffer":
            continue
        names = dict(zip(op.attributes["addresses"], op.attributes["kernels"]))  # type: ignore[call-overload]
        func = op.operands[0]
        const = func.op if isinstance(func, OpResult) and func.op.name == "upir.const" else None
        if const is None and isinstance(func, OpResult) and func.op.name == "ptx.mov" and \
                isinstance(func.op.operands[0], OpResult) and func.op.operands[0].op.name == "upir.const":
            const = func.op.operands[0].op
        targets = [names[const.attributes["value"]]] if const is not None and \
            const.attributes["value"] in names else list(names.values())
        for t in targets:
            out.setdefault(str(t), int(op.attributes.get("line", 0)))
    return out


@dataclass
class SpecializedObject:
    """A kernel compiled for one block shape: its object code and the scratch memory its
    block function needs (passes may keep other values across barriers than in the
    generic code)."""
    object_code: bytes
    scratch: ScratchLayout
    #: the pointer parameters (byte offsets) whose non-overlap with the other pointer
    #: parameters would remove a barrier this code keeps: where the launch's arrays show
    #: it, a variant compiled with them as `noalias` is worth building
    noalias_candidates: tuple[int, ...] = ()
    #: the parameters some global access is based on (analysis.pointers.parameter_bases):
    #: those whose arguments the non-overlap check must see the extents of
    pointer_bases: tuple[int, ...] = ()
    #: the barriers the barrier passes removed in this code
    barriers_removed: int = 0
    #: the `noalias_params` this code was compiled with (a launch-time variant), or ()
    noalias_params: tuple[int, ...] = ()
    #: the blocks (x, y) its block function runs per call (fuse-block-runs; (1, 1): one)
    block_run: tuple[int, int] = (1, 1)
    #: why the run asked for was not fused, or would not be ("" when it was, or would be)
    block_run_refused: str = ""
    #: whether a launch asking for a run of blocks would get one (fuse-block-runs)
    block_runs_possible: bool = False


def compile_specialized(ptx: str, kernel: str, block_dims: tuple[int, int, int],
                        passes: Sequence[str] | None = None,
                        noalias: Sequence[int] = (),
                        block_run: tuple[int, int] = (1, 1)) -> SpecializedObject:
    """`kernel` compiled for one block shape only; its object declares the module's
    variables, so it must be loaded next to the module's own object (and reads the values
    of its launch prologue: `passes` must be the module's pipeline).  `noalias`: the
    variant for launches whose pointer arguments at these parameter offsets point into
    memory no other pointer argument reaches (its block function's symbol says so:
    kernel_abi.specialized_symbol).  `block_run`: run that many blocks (x, y) per call of
    the block function where the kernel allows it (fuse-block-runs; the result's
    `block_run` says what was fused: its symbol names it).  Cached."""
    pipeline = PipelineOptions(tuple(passes) if passes is not None else None)
    noalias = tuple(sorted({int(x) for x in noalias}))
    block_run = (int(block_run[0]), int(block_run[1]))
    key = cache_key("spec", ptx, extra=f"{kernel}|{block_dims}|{pipeline.key()}|{noalias}"
                    + ("" if block_run == (1, 1) else f"|run{block_run}"))
    if cache_enabled():
        got = _load(f"{key}.spec", SpecializedObject)
        if got is not None:
            return got
    module = _parsed_ptx(ptx)
    triple, layout = jit.triple_and_layout()
    gen = ModuleCodegen(module, triple, layout, define_globals=False)
    lifted, result = lift_and_optimize(module, module.functions[kernel], pipeline, block_dims,
                                       noalias, block_run)
    info = gen.add_kernel(lifted, block_dims)
    fused = lifted.op.attributes.get("block_run")
    run = (int(fused[0]), int(fused[1])) if fused else (1, 1)
    candidates = () if noalias else tuple(
        int(x) for x in lifted.op.attributes.get("noalias_candidates", ()))
    bases = tuple(sorted(parameter_bases(lifted.op))) if candidates or noalias else ()
    spec = SpecializedObject(jit.emit_object(jit.optimize(gen.llvm_text())), info.scratch,
                             candidates, bases,
                             sum(result.counts.get(p, 0) for p in BARRIER_PASSES), noalias,
                             run, str(lifted.op.attributes.get("block_run_refused", "")),
                             bool(lifted.op.attributes.get("block_runs_possible")))
    if cache_enabled():
        _store(f"{key}.spec", spec)
    return spec


def compile_cuda(source: str, *, options: Sequence[str] = (), name_expressions: Sequence[str] = (),
                 filename: str = "kernel.cu", arch: str | None = None, backend: str = "nvrtc",
                 headers: Mapping[str, str] | None = None) -> CompiledModule:
    """CUDA C++ source to a native object, through the cache.  `backend`: 'nvrtc' (NVRTC
    in-process) or 'nvcc' (`nvcc -ptx`, no name expressions); `headers`: include name ->
    text, found before the include paths."""
    from cpuify.frontend import includes, nvrtc
    pipeline, options = pipeline_options(options)
    # the headers the source includes from the user's directories are part of the input
    included = includes.dependency_digest(source, filename, list(options))
    header_key = "\0".join(f"{k}\1{v}" for k, v in sorted((headers or {}).items()))
    key = cache_key("cuda", source, [str(o) for o in options], list(name_expressions),
                    f"{filename}|{arch}|{nvrtc.nvrtc_version()}|{pipeline.key()}|{backend}|"
                    f"{included}|" + header_key)
    uncacheable = pipeline.print_after or included is includes.UNCACHEABLE
    cached = None if uncacheable else load_cached(key)
    if cached is not None:
        return cached
    t0 = time.perf_counter()
    if backend == "nvcc":
        from cpuify.frontend import nvcc_ptx
        if name_expressions:
            raise ValueError("name expressions need backend='nvrtc' (nvcc cannot report the "
                             "mangled names)")
        if arch is not None:
            options = [f"-arch={arch}", *options]
        res = nvcc_ptx.compile_to_ptx(source, filename=filename, options=options, headers=headers)
    else:
        res = nvrtc.compile_to_ptx(source, filename=filename, options=options,
                                   name_expressions=name_expressions, arch=arch, headers=headers)
    t1 = time.perf_counter()
    compiled = compile_ptx(res.ptx, lowered_names=res.lowered_names, pipeline=pipeline)
    compiled.log = res.log
    compiled.timings[backend] = t1 - t0
    if not uncacheable:
        store_cached(key, compiled)
    return compiled


def compile_ptx_cached(ptx: str, options: Sequence[str] = (), *,
                       llvm_level: str = "O3") -> CompiledModule:
    pipeline, _ = pipeline_options(options)
    key = cache_key("ptx", ptx, extra=pipeline.key() + ("" if llvm_level == "O3" else f"|{llvm_level}"))
    cached = None if pipeline.print_after else load_cached(key)
    if cached is not None:
        return cached
    compiled = compile_ptx(ptx, pipeline=pipeline, llvm_level=llvm_level)
    store_cached(key, compiled)
    return compiled
