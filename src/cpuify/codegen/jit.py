"""LLVM target machine, optimization, object emission and in-memory loading (llvmlite.binding).

Kept apart from IR construction (llvm_gen.py and its parts) as llvmlite separates `ir` from
`binding`.

Masked indices (a workaround for LLVM 22.1, llvmlite 0.46): the loop vectorizer takes
`s[(tid + 1) & 31]` for a consecutive access, and so reads `s[32]` in the last thread, when
another access of the thread loop needs a run-time "does not wrap" check on a wider index
(`out[gt * 7 + 5]` with 32-bit `gt`): LLVM treats that predicate as implying the one on the
narrow recurrence `zext(i5 {1,+,1})` that the mask makes, although the narrow one wraps first,
and emits no check for it (tests/test_fuzz_regressions.py shows it on a ten-line LLVM
function).  No LLVM option turns off just that.  cpuify hides the mask from LLVM (an empty
inline asm in the function's entry block gives its value; no instruction in the machine
code) only where the index can wrap inside the block: an `and` with a run of ones (`& 31`,
nvcc's `& 248` for `8 * ((t + 1) & 31)`) or a `rem.u` by a power of two (`% blockDim.x` in
code specialized for the block shape) of a value affine in a thread index with a part that is
not a multiple of the modulus (codegen.ptx_ops.masked_thread_index).  `tid & 31` and
every other index compile as before; the hidden index is a gather instead of a (wrong)
consecutive load."""

from __future__ import annotations

import functools
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading

import llvmlite.binding as llvm

from cpuify.codegen import llvm_worker, rsqrt_widths
from cpuify.errors import CpuifyError
from cpuify.forksafe import compile_section, hold_during_fork, renew_in_child

_lock = threading.Lock()
renew_in_child(globals(), "_lock", threading.Lock)
# llvmlite serializes every call into LLVM with one lock of its own: a fork takes it too
_llvmlite_lock = getattr(getattr(getattr(llvm, "ffi", None), "lib", None), "_lock", None)
if _llvmlite_lock is not None and hasattr(_llvmlite_lock, "_lock"):
    hold_during_fork(_llvmlite_lock._lock)

#: Instruction budget of LLVM's loop unswitching (see llvm_options).
UNSWITCH_THRESHOLD = 2000

#: Non-trivial unswitch candidates (branches on loop-invariant values) of one loop that
#: LLVM unswitches at the full UNSWITCH_THRESHOLD budget; beyond them each further candidate
#: halves the budget (LLVM's cost multiplier, `-unswitch-num-initial-unscaled-candidates`).
#: LLVM's default, 8, is kept.  With 1 (CPUIFY_UNSWITCH_UNSCALED_CANDIDATES=1) a generic
#: thread loop with several block-uniform branches (Parboil's stencil kernel) is no longer
#: copied for each combination of them: O3 2.4 -> 0.36 s and code generation 1.6 -> 0.34 s
#: for that kernel; but the suite's thermal pyramid ran slower with it (one-thread best
#: launch 45 and 57 ms against 3.1 and 32 ms with 8, two alternations on a loaded machine).
UNSWITCH_UNSCALED_CANDIDATES = 8

#: Masked vector memory operations (`llvm.masked.load/store/gather/scatter`) in one
#: function from which object emission skips loop strength reduction (see lsr_too_costly).
LSR_MAX_MASKED_ACCESSES = 512


@functools.lru_cache(maxsize=1)
def _init() -> None:
    with compile_section():
        _init_llvm()


def _init_llvm() -> None:
    try:
        llvm.initialize()
    except RuntimeError:
        pass   # llvmlite >= 0.45 initializes itself and refuses the call
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for option in llvm_options():
        llvm.set_option("cpuify", option)


def unswitch_unscaled_candidates() -> int:
    """UNSWITCH_UNSCALED_CANDIDATES, or CPUIFY_UNSWITCH_UNSCALED_CANDIDATES where set."""
    text = os.environ.get("CPUIFY_UNSWITCH_UNSCALED_CANDIDATES", "").strip()
    if not text:
        return UNSWITCH_UNSCALED_CANDIDATES
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        from cpuify.errors import CpuifyError
        raise CpuifyError(f"CPUIFY_UNSWITCH_UNSCALED_CANDIDATES={text!r}: expected a number of "
                          f"unswitch candidates, 0 or more (cpuify's default "
                          f"{UNSWITCH_UNSCALED_CANDIDATES}, LLVM's 8)")
    return value


@functools.lru_cache(maxsize=1)
def llvm_options() -> tuple[str, ...]:
    """The LLVM command-line options cpuify sets once per process, before its first compile
    (part of the compile cache's key)."""
    return (
        # A segment's thread loop often holds a branch on a block-uniform value (the exit
        # test of an interchanged loop, a uniform `if`): unswitched, each copy of the loop
        # is straight-line code the vectorizer takes.  LLVM's default budget (50) stops
        # short of kernel-sized loop bodies; UNSWITCH_UNSCALED_CANDIDATES keeps a loop with
        # many such branches from being copied for every combination of them.
        f"-unswitch-threshold={UNSWITCH_THRESHOLD}",
        f"-unswitch-num-initial-unscaled-candidates={unswitch_unscaled_candidates()}",
        # Strided shared-memory accesses of a thread loop (`s[tid * 4 + k]`, CUB-style items
        # per thread) form interleaved groups; a group of stores with a gap (a store LLVM
        # dropped as storing the value just loaded) became scatters.  With masked
        # interleaved accesses it is shuffles and masked stores (scan +1-4%).
        "-enable-masked-interleaved-mem-accesses=1",
    )


@functools.lru_cache(maxsize=1)
def host_cpu() -> tuple[str, str]:
    """(cpu name, feature string) of this machine: part of the compile-cache key."""
    _init()
    name = llvm.get_host_cpu_name()
    try:
        features = llvm.get_host_cpu_features().flatten()
    except RuntimeError:
        features = ""
    return name, features


def has_avx512() -> bool:
    """Whether this machine has AVX-512F (its 14-bit reciprocal square root estimate)."""
    return "+avx512f" in host_cpu()[1].split(",")


def has_avx512vl() -> bool:
    """Whether this machine has AVX-512VL: AVX-512's instructions on 128- and 256-bit vectors."""
    return "+avx512vl" in host_cpu()[1].split(",")


def has_avx512fp16() -> bool:
    """Whether this machine has AVX512-FP16: IEEE binary16 arithmetic, an fma rounded once
    (vfmadd*sh/ph) among it, subnormals included."""
    return "+avx512fp16" in host_cpu()[1].split(",")


@functools.lru_cache(maxsize=1)
def target_machine() -> llvm.TargetMachine:
    """The shared machine for optimization and object emission (never given to an engine)."""
    return new_target_machine()


def new_target_machine() -> llvm.TargetMachine:
    _init()
    cpu, features = host_cpu()
    if has_avx512():
        # thread loops are long and regular: use the full 512-bit vectors the CPU has
        # (LLVM's default tuning for these CPUs stops at 256 bits)
        features += ",-prefer-256-bit"
    with compile_section():
        target = llvm.Target.from_default_triple()
        return target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="pic",
                                            codemodel="default")


@functools.lru_cache(maxsize=1)
def triple_and_layout() -> tuple[str, str]:
    # computed once: repeatedly creating TargetData views of the machine crashed LLVM
    tm = target_machine()
    return llvm.get_process_triple(), str(tm.target_data)


#: The LLVM pipeline of a module: "O3" (with loop and SLP vectorization, unrolling and
#: interleaving: the code that runs), or "fallback", for a whole program's generic block
#: functions when block-shape specializations cover every launch (nvcc/device.py): that
#: code runs only where a launch was not foreseen, so it gets only the clean-up of the code
#: generator's form (FALLBACK_PASSES: its allocas promoted to registers, its constants
#: folded, dead code removed; no inlining, loop or vectorizing pass) and no loop strength
#: reduction at emission.  SHOC Scan.cu's generic module (42k LLVM instructions): 0.07 s
#: of optimization against 0.99 s with O2 without vectorization (this level until
#: 2026-11-28) and 2-3 s at O3; its emission takes about as long as before (0.4 s).
LLVM_LEVELS = ("O3", "fallback")

#: The function passes of the "fallback" level, in order (llvmlite's add_<name>_pass).
FALLBACK_PASSES = ("sroa", "instruction_combine", "simplify_cfg", "dead_code_elimination")


#: LLVM's own loop-unswitching options, for a module whose O3 with cpuify's (llvm_options) ran
#: past its CPU-time limit (llvm_worker): the budget of 50 instructions LLVM ships with.
DEFAULT_UNSWITCH_OPTIONS = ("-unswitch-threshold=50",
                            "-unswitch-num-initial-unscaled-candidates=8")


def optimize(module_text: str, *, pass_timings: list[str] | None = None,
             level: str = "O3") -> llvm.ModuleRef:
    """Parse, verify and run the `level` pipeline (LLVM_LEVELS) for the host CPU.
    `pass_timings`: append LLVM's report of the time each pass took (tools/llvm_profile.py).

    O3 runs in a worker process under a CPU-time limit (llvm_worker); over it, again with
    DEFAULT_UNSWITCH_OPTIONS, and over it once more, the "bounded" pipeline here (O2 without
    vectorization: it does no non-trivial unswitching, the pass that has no bound of its
    own).  A worker that LLVM itself ends (an assertion, a crash) gives the "fallback" passes
    at once, with a warning: run here, O3 would end this process the same way."""
    if level not in LLVM_LEVELS:
        raise ValueError(f"unknown LLVM pipeline level {level!r} (expected one of {LLVM_LEVELS})")
    limit = llvm_worker.cpu_limit(len(module_text))
    if level != "O3" or pass_timings is not None or not limit:
        return _optimize_here(module_text, pass_timings=pass_timings, level=level)
    payload = module_text.encode()
    for options in ((), DEFAULT_UNSWITCH_OPTIONS):
        try:
            # (this process's options, read from its environment when it first compiled)
            answer = llvm_worker.request({"cpu": limit, "options": [*llvm_options(), *options]},
                                         payload)
        except llvm_worker.OverLimit:
            continue
        except llvm_worker.Crashed as crash:
            # (an assertion of LLVM's own, seen in its loop vectorizer on NPB-GPU's SP: O3
            # here would end this process the same way; the bounded pipeline still runs the
            # loop vectorizer pass (on loops with vectorize hints), the fallback passes run no
            # loop pass: correct code, only slower)
            _warn_crash(crash)
            return _optimize_here(module_text, level="fallback")
        if answer is None:      # no worker here
            return _optimize_here(module_text, level=level)
        header, bitcode = answer
        if "error" in header:
            raise RuntimeError(header["error"])
        _init()
        with compile_section():
            mod = llvm.parse_bitcode(bitcode)
        return for_code_generation(mod)
    return _optimize_here(module_text, level="bounded")


def _warn_crash(crash: llvm_worker.Crashed) -> None:
    print(f"cpuify: warning: LLVM's O3 failed on a kernel module ({crash}; LLVM's own "
          "message is above); this module is optimized with the fallback passes instead "
          "(SROA, instcombine, simplifycfg, DCE: correct, slower code)", file=sys.stderr)


def _serve_request(header: dict, payload: bytes) -> tuple[dict, bytes]:
    """llvm_worker's request: O3 of the module text `payload` with the LLVM options
    header["options"] (the caller's llvm_options, then any that override them for this
    request); the answer is the optimized module's bitcode."""
    for option in header.get("options") or ():
        llvm.set_option("cpuify", option)
    mod = _optimize_here(payload.decode(), level="O3", minmax=False)
    return {}, mod.as_bitcode()


def _optimize_here(module_text: str, *, pass_timings: list[str] | None = None,
                   level: str = "O3", minmax: bool = True) -> llvm.ModuleRef:
    """optimize() in this process, with no bound on its time; `minmax`: replace the
    minimumnum/maximumnum intrinsics (without_minmax_num), as the module's user needs.
    `level`: LLVM_LEVELS, or "bounded" (O2 without vectorization or unrolling, which does
    no non-trivial loop unswitching: O3's stand-in for a module whose O3 ran past its CPU
    limit, the code that runs)."""
    _init()
    tm = target_machine()
    full = level == "O3"
    with compile_section():
        mod = llvm.parse_assembly(module_text)
        mod.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=3 if full else 2)
        pto.loop_vectorization = full
        pto.slp_vectorization = full
        pto.loop_unrolling = full
        pto.loop_interleaving = full
        pb = llvm.create_pass_builder(tm, pto)
        if pass_timings is not None:
            pb.start_pass_timing()
        if level == "fallback":
            mpm = llvm.create_new_module_pass_manager()
            for name in FALLBACK_PASSES:
                getattr(mpm, f"add_{name}_pass")()
        else:
            mpm = pb.getModulePassManager()
        mpm.run(mod, pb)
        if pass_timings is not None:
            pass_timings.append(pb.finish_pass_timing())
        if minmax:
            mod = for_code_generation(mod)
    return mod


def for_code_generation(mod: llvm.ModuleRef) -> llvm.ModuleRef:
    """The optimized module with what must (without_minmax_num) or should (refined rsqrt
    estimates at the width they were vectorized to: rsqrt_widths) change before code
    generation.  Must hold the compile section."""
    mod = without_minmax_num(mod)
    if not has_avx512() or not any(f.name.startswith("llvm.sqrt.") and f.name.endswith("f32")
                                   for f in mod.functions):
        return mod
    text = rsqrt_widths.lean_rsqrt_estimates(str(mod), vector_lengths=has_avx512vl())
    if text is None:
        return mod
    lean = llvm.parse_assembly(text)
    lean.verify()
    # (the scaled estimate and the third-order step it replaces are left unused)
    mpm = llvm.create_new_module_pass_manager()
    mpm.add_dead_code_elimination_pass()
    mpm.run(lean, llvm.create_pass_builder(target_machine(), llvm.create_pipeline_tuning_options(speed_level=0)))
    return lean


#: a call's callee llvm.minimumnum/maximumnum.<type> (scalar or vector), and the vector
#: reductions the loop vectorizer makes of them, llvm.vector.reduce.fmin/fmax.<type>
_MINMAX_NUM = re.compile(r"@llvm\.(minimumnum|maximumnum|vector\.reduce\.fmin|vector\.reduce\.fmax)"
                         r"\.((?:v(\d+))?(f16|bf16|f32|f64))\b")
_MINMAX_NUM_DECLARATION = re.compile(
    r"^declare [^\n]*@llvm\.(?:minimumnum|maximumnum|vector\.reduce\.fmin|vector\.reduce\.fmax)\.[^\n]*\n",
    re.M)
_FLOAT_TYPES = {"f16": "half", "bf16": "bfloat", "f32": "float", "f64": "double"}


def without_minmax_num(mod: llvm.ModuleRef) -> llvm.ModuleRef:
    """The optimized module with each llvm.minimumnum/maximumnum (PTX's min/max: a NaN
    operand ignored, -0 below +0) replaced by the NaN-propagating llvm.minimum/maximum and
    a select of the other operand where one is NaN, and each llvm.vector.reduce.fmin/fmax
    by a tree of those.

    The optimizer keeps the `num` intrinsics: its loop vectorizer knows them as reductions
    (a running fmaxf over a row).  But LLVM 22's x86 backend miscompiles them whenever it
    can prove one operand never NaN (a constant, an integer converted to float, ceil of
    one, another min/max): it drops the other operand's NaN check and returns the NaN
    (minimumnum(ceil((double)i), NaN) gives NaN; the fuzzer's fz_400_170, fz_2615_1978,
    fz_2619_931).  What LLVM can prove depends on everything the optimizer did, so no
    pattern of the code generator's can avoid it.  And the vectorizer ends a maximumnum
    reduction with llvm.vector.reduce.fmax, which orders no zeros (a row of -0 and +0 gave
    -0).  After optimization, the backend sees neither.  Must hold the compile section."""
    # (a call names a function the module declares: its list, not the module's text of
    # megabytes, says whether there is anything to replace)
    if not any("imumnum." in f.name or f.name.startswith("llvm.vector.reduce.fm")
               for f in mod.functions):
        return mod
    text = str(mod)
    found = sorted(set(_MINMAX_NUM.findall(text)))
    text = _MINMAX_NUM_DECLARATION.sub("", text)
    text = _MINMAX_NUM.sub(lambda m: f"@cpuify.{m[1].replace('.', '_')}.{m[2]}", text)
    definitions: list[str] = []

    def declare(line: str) -> None:
        name = line.split("@", 1)[1].split("(", 1)[0]
        if not re.search(rf"^declare [^\n]*@{re.escape(name)}\(", text, re.M) and \
                line not in definitions:
            definitions.append(line)

    def min_max(kind: str, t: str, suffix: str, lanes: str) -> str:
        """The helper for llvm.<kind>num.<suffix> (kind: minimum, maximum), defined once."""
        c = "i1" if not lanes else f"<{lanes} x i1>"
        name = f"@cpuify.{kind}num.{suffix}"
        declare(f"declare {t} @llvm.{kind}.{suffix}({t}, {t})")
        body = f"""define internal {t} {name}({t} %a, {t} %b) alwaysinline {{
  %m = call {t} @llvm.{kind}.{suffix}({t} %a, {t} %b)
  %b.nan = fcmp uno {t} %b, %b
  %s = select {c} %b.nan, {t} %a, {t} %m
  %a.nan = fcmp uno {t} %a, %a
  %r = select {c} %a.nan, {t} %b, {t} %s
  ret {t} %r
}}"""
        if body not in definitions:
            definitions.append(body)
        return name

    for kind, suffix, lanes, scalar in found:
        e = _FLOAT_TYPES[scalar]
        t = e if not lanes else f"<{lanes} x {e}>"
        if not kind.startswith("vector"):
            min_max(kind[:-3], t, suffix, lanes)
            continue
        # a reduction: halve the vector until one lane is left, combining the halves (lane
        # by lane in order, where the width is no power of two)
        which = "minimum" if kind.endswith("fmin") else "maximum"
        n = int(lanes)
        lines, v = [], "%v"
        if n & (n - 1):
            f = min_max(which, e, scalar, "")
            lines.append(f"  %x0 = extractelement {t} %v, i32 0")
            for i in range(1, n):
                lines += [f"  %x{i}.in = extractelement {t} %v, i32 {i}",
                          f"  %x{i} = call {e} {f}({e} %x{i - 1}, {e} %x{i}.in)"]
            v, n = f"%x{n - 1}", 1
        while n > 1:
            h = n // 2
            half = f"<{h} x {e}>"
            f = min_max(which, half if h > 1 else e, f"v{h}{scalar}" if h > 1 else scalar,
                        str(h) if h > 1 else "")
            lo = ", ".join(f"i32 {i}" for i in range(h))
            hi = ", ".join(f"i32 {i}" for i in range(h, n))
            if h > 1:
                lines += [f"  %lo{n} = shufflevector <{n} x {e}> {v}, <{n} x {e}> poison, <{h} x i32> <{lo}>",
                          f"  %hi{n} = shufflevector <{n} x {e}> {v}, <{n} x {e}> poison, <{h} x i32> <{hi}>"]
            else:
                lines += [f"  %lo{n} = extractelement <2 x {e}> {v}, i32 0",
                          f"  %hi{n} = extractelement <2 x {e}> {v}, i32 1"]
            lines.append(f"  %r{n} = call {half if h > 1 else e} {f}({half if h > 1 else e} %lo{n}, "
                         f"{half if h > 1 else e} %hi{n})")
            v, n = f"%r{n}", h
        if int(lanes) == 1:
            lines.append(f"  %x0 = extractelement <1 x {e}> %v, i32 0")
            v = "%x0"
        definitions.append(f"define internal {e} @cpuify.{kind.replace('.', '_')}.{suffix}({t} %v) alwaysinline {{\n"
                           + "\n".join(lines) + f"\n  ret {e} {v}\n}}")
    fixed = llvm.parse_assembly(text + "\n".join(definitions) + "\n")
    fixed.verify()
    pb = llvm.create_pass_builder(target_machine(), llvm.create_pipeline_tuning_options(speed_level=0))
    pb.getModulePassManager().run(fixed, pb)        # O0: the always-inliner only
    return fixed


def vectorizer_remarks(module_text: str) -> list[str]:
    """What LLVM's loop vectorizer said while optimizing `module_text` (`vectorized loop
    (vectorization width: 16, interleaved count: 4)`, `loop not vectorized: <why>`), for
    `cpuify explain`: LLVM prints its remarks to the process's stderr, read back here."""
    _init()
    with compile_section(), _lock, tempfile.TemporaryFile() as f:
        for kind in ("", "-missed", "-analysis"):
            llvm.set_option("cpuify", f"-pass-remarks{kind}=loop-vectorize")
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(f.fileno(), 2)
        try:
            _optimize_here(module_text)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            for kind in ("", "-missed", "-analysis"):
                llvm.set_option("cpuify", f"-pass-remarks{kind}=^$")   # (no pass is named so)
        f.seek(0)
        text = f.read().decode(errors="replace")
    return [line.split(": ", 2)[-1].strip() for line in text.splitlines() if line.startswith("remark:")]


_MASKED_CALL = re.compile(r"call [^\n@]*@llvm\.masked\.")


def lsr_too_costly(module_text: str) -> bool:
    """Whether loop strength reduction (LSR, which the code generator runs before
    instruction selection) would cost far more than it could give on this optimized module:
    a function with at least LSR_MAX_MASKED_ACCESSES masked vector accesses.

    LSR builds candidate formulae for every pair of address uses of a loop that differ by
    a constant; a thread loop that tail-folded hundreds of accesses (SHOC S3D's reaction
    kernels specialized for their block shape: 660-800 masked loads, each `rf[k * n + tid]`
    in 32-bit arithmetic) took 6-25 s of CPU in LSR alone, against 0.1 s for the rest of
    the code generator, and LSR's own cost model then found its solution no better (the
    object is half the size without it).  The benchmark suite's kernels stay below 430
    masked accesses per function and keep LSR."""
    for function in module_text.split("\ndefine ")[1:]:
        body = function.split("\n}\n", 1)[0]
        if len(_MASKED_CALL.findall(body)) >= LSR_MAX_MASKED_ACCESSES:
            return True
    return False


def _emit(mod: llvm.ModuleRef, emit, lsr: bool = True):  # type: ignore[no-untyped-def]
    """emit(mod), with LSR off where lsr_too_costly or not `lsr`: an LLVM option, set and
    reset under the module lock that every emission takes, so no other emission sees it."""
    with compile_section(), _lock:
        if lsr:
            # (masked accesses call llvm.masked.* intrinsics, which the module then declares)
            if not any(f.name.startswith("llvm.masked.") for f in mod.functions) or \
                    not lsr_too_costly(str(mod)):
                return emit(mod)
        llvm.set_option("cpuify", "-disable-lsr=1")
        try:
            return emit(mod)
        finally:
            llvm.set_option("cpuify", "-disable-lsr=0")


def emit_object(mod: llvm.ModuleRef, *, pass_timings: list[str] | None = None,
                level: str = "O3") -> bytes:
    """The module's native object (`level`: the LLVM_LEVELS it was optimized at; the
    fallback level emits without loop strength reduction).  `pass_timings`: append LLVM's
    report of the time each code generation pass took (tools/llvm_profile.py)."""
    tm = target_machine()
    lsr = level == "O3"
    if pass_timings is None:
        return _emit(mod, tm.emit_object, lsr)
    with compile_section():     # (the timers are global: a profiling tool's, one thread)
        llvm.set_time_passes(True)
        try:
            obj = _emit(mod, tm.emit_object, lsr)
        finally:
            pass_timings.append(llvm.report_and_reset_timings())
            llvm.set_time_passes(False)
    return obj


def emit_assembly(mod: llvm.ModuleRef) -> str:
    tm = target_machine()
    return _emit(mod, tm.emit_assembly)


class LoadedObject:
    """A native object file loaded into this process; symbol addresses by name."""

    def __init__(self, obj: bytes) -> None:
        _init()
        from cpuify.runtime.native import load_runtime
        load_runtime()      # JIT code calls cpuify_* functions by symbol
        with compile_section(), _lock:
            # the engine takes ownership of (and frees) its target machine: give it its own
            self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), new_target_machine())
            self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
            self.engine.finalize_object()
        _check_resolved(obj, self.engine)
        self._perf_map(obj)

    def add(self, obj: bytes) -> None:
        """Load another object into the same engine (it may use this one's symbols)."""
        with compile_section(), _lock:
            self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
            self.engine.finalize_object()
        _check_resolved(obj, self.engine)
        self._perf_map(obj)

    def _perf_map(self, obj: bytes) -> None:
        """With CPUIFY_PERF_MAP=1, append the object's functions to /tmp/perf-<pid>.map,
        where `perf report` finds the names of JIT code (the segment functions too)."""
        if os.environ.get("CPUIFY_PERF_MAP", "0") in ("", "0") or not shutil.which("nm"):
            return
        with tempfile.NamedTemporaryFile(suffix=".o") as f:
            f.write(obj)
            f.flush()
            out = subprocess.run(["nm", "-S", "--defined-only", f.name], check=False,
                                 capture_output=True, text=True).stdout
        syms = []
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[2] in "TtWw":     # (W: linkonce_odr helpers)
                syms.append((int(parts[0], 16), int(parts[1], 16), parts[2], parts[3]))
        # the text section is loaded in one piece: locals sit at the same distance from a
        # global function as in the object
        base = None
        for off, _, kind, name in syms:
            if kind == "T":
                try:
                    base = self.function_address(name) - off
                    break
                except KeyError:
                    continue
        if base is None:
            return
        with open(f"/tmp/perf-{os.getpid()}.map", "a") as m:
            for off, size, _, name in syms:
                m.write(f"{base + off:x} {size:x} {name}\n")

    def function_address(self, name: str) -> int:
        addr = self.engine.get_function_address(name)
        if not addr:
            raise KeyError(name)
        return addr

    def global_address(self, name: str) -> int:
        addr = self.engine.get_global_value_address(name)
        if not addr:
            raise KeyError(name)
        return addr


def undefined_symbols(obj: bytes) -> list[str]:
    """The names an ELF64 relocatable object uses but does not define (its symbol table's
    entries in no section)."""
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        return []           # (not a little-endian ELF64 object: nothing to check here)
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize)
                for i in range(shnum)]
    names = []
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 2 or not entsize:            # SHT_SYMTAB
            continue
        strtab = sections[link][4]
        for at in range(offset + entsize, offset + size, entsize):      # (entry 0 is null)
            name, _, _, shndx = struct.unpack_from("<IBBH", obj, at)
            if shndx == 0 and name:
                names.append(obj[strtab + name:obj.index(b"\0", strtab + name)].decode())
    return names


def _check_resolved(obj: bytes, engine: llvm.ExecutionEngine) -> None:
    """MCJIT gives a symbol it cannot find the address 0, and a call through it faults far
    from the cause (LLVM's libcalls, such as libgcc's __truncdfhf2 for an f64 -> f16
    conversion on CPUs without AVX512-FP16, are in no library of this process): a name
    neither the process nor an object of the engine defines is an error here."""
    missing = [n for n in undefined_symbols(obj) if not llvm.address_of_symbol(n)
               and not engine.get_global_value_address(n)]
    if missing:
        raise CpuifyError(
            f"the generated code calls {', '.join(sorted(set(missing)))}, which no library "
            "loaded in this process defines (an LLVM library call cpuify does not provide "
            "on this CPU); please report it with the kernel")


# (a worker forked from this process serves with it)
llvm_worker.fork_handler = _serve_request


if __name__ == "__main__" and sys.argv[1:] == [llvm_worker.SERVE_FLAG]:
    _init()
    sys.exit(llvm_worker.serve(_serve_request))
