"""`cpuify nvcc`: nvcc's command line, building programs that run on the CPU.

For each CUDA source, NVIDIA's nvcc (PyPI wheel) splits host and device code and compiles
the host code with the host C++ compiler (its stubs call the registration ABI); the PTX of
the device code goes through cpuify's pipeline to a native object with a registration
table; both end up in one relocatable object.  With -rdc/-dc the object carries its PTX
instead, and the link step links the PTX of all objects into one module.  Executables are
linked with libcpuify_cudart.a instead of libcudart: no Python, no GPU at run time.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cpuify.cache import cache_enabled, run_tool
from cpuify.errors import CpuifyError
from cpuify.nvcc import device, headers, launch_shapes, legacy_source, legacy_texture
from cpuify.nvcc.cuda_home import (INVOKED_AS, RUNTIME_LINK_LIBS, check_invoked_home,
                                   is_foreign_cuda_include, library_dirs, toolkit_home,
                                   verbose_environment)
from cpuify.nvcc.mathlibs import NAMES as MATH_LIBRARIES
from cpuify.nvcc.toolkit import find_toolkit

CUDA_SUFFIXES = (".cu",)
HOST_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".C")
OBJECT_SUFFIXES = (".o", ".obj", ".a", ".so", ".lo")
MIN_ARCH = 75

# options taking a value: canonical name -> spellings (value separate, joined, or after '=')
_VALUE_OPTS = {
    "-o": ("-o", "--output-file"),
    "-I": ("-I", "--include-path"),
    "-D": ("-D", "--define-macro"),
    "-U": ("-U", "--undefine-macro"),
    "-L": ("-L", "--library-path"),
    "-l": ("-l", "--library"),
    "-x": ("-x", "--x"),
    "-Xcompiler": ("-Xcompiler", "--compiler-options"),
    "-Xlinker": ("-Xlinker", "--linker-options"),
    "-Xptxas": ("-Xptxas", "--ptxas-options"),
    "-Xnvlink": ("-Xnvlink", "--nvlink-options"),
    "-Xarchive": ("-Xarchive", "--archive-options"),
    "-Xcudafe": ("-Xcudafe",),
    "-arch": ("-arch", "--gpu-architecture"),
    "-code": ("-code", "--gpu-code"),
    "-gencode": ("-gencode", "--generate-code"),
    "-ccbin": ("-ccbin", "--compiler-bindir"),
    "-std": ("-std", "--std"),
    "-include": ("-include", "--pre-include"),
    "-isystem": ("-isystem", "--system-include"),
    "-maxrregcount": ("-maxrregcount", "--maxrregcount"),
    "-rdc": ("-rdc", "--relocatable-device-code"),
    "-MF": ("-MF", "--dependency-output"),
    "-MT": ("-MT", "--dependency-target-name"),
    "-odir": ("-odir", "--output-directory"),
    "-default-stream": ("-default-stream", "--default-stream"),
    "-t": ("-t", "--threads"),
    "-O": ("-O", "--optimize"),
    "-Wno-deprecated-declarations": (),
    "-diag-suppress": ("-diag-suppress", "--diag-suppress"),
    "-ftz": ("-ftz", "--ftz"),
    "-prec-div": ("-prec-div", "--prec-div"),
    "-prec-sqrt": ("-prec-sqrt", "--prec-sqrt"),
    "-fmad": ("-fmad", "--fmad"),
    "-split-compile": ("-split-compile", "--split-compile"),
    "-Werror": ("-Werror", "--Werror"),
    "-keep-dir": ("-keep-dir", "--keep-dir"),
    "-dopt": ("-dopt", "--dopt"),
    "-Xfatbin": ("-Xfatbin", "--fatbin-options"),
    "-cudart": ("-cudart", "--cudart"),
    "-run-args": ("-run-args", "--run-args"),
    "-time": ("-time", "--time"),
}
# options that are only ever joined (-O3, -Dx) are covered by the joined-prefix rule below
_JOINABLE = {"-I", "-D", "-U", "-L", "-l", "-O", "-x", "-std", "-isystem", "-t"}   # -t4 as nvcc

# flags without a value: canonical -> spellings
_FLAGS = {
    "-c": ("-c", "--compile"),
    "-dc": ("-dc", "--device-c"),
    "-dw": ("-dw", "--device-w"),
    "-dlink": ("-dlink", "--device-link"),
    "-lib": ("-lib", "--lib"),
    "-ptx": ("-ptx", "--ptx"),
    "-E": ("-E", "--preprocess"),
    "-M": ("-M", "--generate-dependencies"),
    "-MM": ("-MM", "--generate-nonsystem-dependencies"),
    "-MD": ("-MD", "--generate-dependencies-with-compile"),
    "-MMD": ("-MMD", "--generate-nonsystem-dependencies-with-compile"),
    "-MP": ("-MP", "--generate-dependency-targets"),
    "-g": ("-g", "--debug"),
    "-G": ("-G", "--device-debug"),
    "-lineinfo": ("-lineinfo", "--generate-line-info"),
    "-use_fast_math": ("-use_fast_math", "--use_fast_math", "--use-fast-math"),
    "-shared": ("-shared", "--shared"),
    "-w": ("-w", "--disable-warnings"),
    "-v": ("-v", "--verbose"),
    "-V": ("-V", "--version"),
    "-h": ("-h", "--help"),
    "-expt-relaxed-constexpr": ("-expt-relaxed-constexpr", "--expt-relaxed-constexpr"),
    "-extended-lambda": ("-extended-lambda", "--extended-lambda", "-expt-extended-lambda",
                         "--expt-extended-lambda"),
    "-keep": ("-keep", "--keep"),
    "-dryrun": ("-dryrun", "--dryrun"),
    "-res-usage": ("-res-usage", "--resource-usage"),
    "-Wno-deprecated-gpu-targets": ("-Wno-deprecated-gpu-targets", "--Wno-deprecated-gpu-targets"),
    "-Wno-deprecated-declarations": ("-Wno-deprecated-declarations", "--Wno-deprecated-declarations"),
    "-pg": ("-pg", "--profile"),
    "-m64": ("-m64", "--machine=64"),
    "-cudart-static": (),
    "-src-in-ptx": ("-src-in-ptx", "--source-in-ptx"),
    "-restrict": ("-restrict", "--restrict"),
    "-forward-unknown-to-host-compiler": ("-forward-unknown-to-host-compiler",
                                          "--forward-unknown-to-host-compiler"),
    "-static-global-template-stub": (),
    "-cubin": ("-cubin", "--cubin"),
    "-fatbin": ("-fatbin", "--fatbin"),
    "-cuda": ("-cuda", "--cuda"),
    "-run": ("-run", "--run"),
    # cpuify's own: the legacy CUDA layer off (nvcc/headers.py); refused kernels fail at
    # launch instead of failing the build
    "--cpuify-no-legacy": ("--cpuify-no-legacy",),
    "--cpuify-defer-refused": ("--cpuify-defer-refused",),
    # distributed execution over MPI ranks (nvcc/distinfo.py, runtime/dist_main.c)
    "--distributed": ("--distributed", "--cpuify-distributed"),
}
_NO_EFFECT = {"-lineinfo", "-res-usage", "-Wno-deprecated-gpu-targets", "-m64", "-restrict",
              "-src-in-ptx", "-keep", "-w"}
# front-end only modes: nvcc itself does them (no device code is compiled)
_FRONT_END_MODES = ("-ptx", "-E", "-M", "-MM", "-cuda")
RESPONSE_FILE_OPTIONS = ("-optf", "--options-file")

_SPELLING: dict[str, tuple[str, bool]] = {}
for _canon, _spellings in _VALUE_OPTS.items():
    for _s in _spellings:
        _SPELLING[_s] = (_canon, True)
for _canon, _spellings in _FLAGS.items():
    for _s in _spellings:
        _SPELLING[_s] = (_canon, False)


class UsageError(CpuifyError):
    pass


@dataclass
class Options:
    inputs: list[tuple[str, str]] = field(default_factory=list)   # (path, language: cu|host|obj)
    output: str | None = None
    flags: set[str] = field(default_factory=set)
    host_opts: list[str] = field(default_factory=list)     # given to nvcc for host + device
    link_opts: list[str] = field(default_factory=list)     # given to the final link
    archs: list[int] = field(default_factory=list)
    rdc: bool = False
    ccbin: str | None = None
    warnings: list[str] = field(default_factory=list)
    odir: str | None = None
    dep_mode: str | None = None        # -MD / -MMD: a dependency file next to the compile
    dep_file: str | None = None        # -MF
    dep_targets: list[str] = field(default_factory=list)   # -MT (repeatable)
    dep_phony: bool = False            # -MP
    cudart: str = "static"             # -cudart static|shared|none
    run_args: list[str] = field(default_factory=list)      # --run-args
    threads: int | None = None         # -t/--threads: device-build processes (0: the CPUs)


def _arch_numbers(value: str) -> list[int]:
    if value in ("native", "all", "all-major"):
        return []
    return [int(n) for n in re.findall(r"(?:sm|compute|lto)_(\d+)", value)]


def expand_response_files(argv: list[str], _depth: int = 0) -> list[str]:
    """nvcc's `@file` and `--options-file`/`-optf file`: the file's words (shell quoting, any
    number per line) in place of the option, recursively."""
    if _depth > 16:
        raise UsageError("response files nest more than 16 deep (a file that includes itself?)")
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        path = None
        if a.startswith("@") and len(a) > 1:
            path = a[1:]
        elif a in RESPONSE_FILE_OPTIONS:
            if i + 1 >= len(argv):
                raise UsageError(f"option '{a}' needs a file")
            i += 1
            path = argv[i]
        elif a.split("=", 1)[0] in RESPONSE_FILE_OPTIONS and "=" in a:
            path = a.split("=", 1)[1]
        if path is None:
            out.append(a)
        else:
            for one in path.split(","):
                try:
                    text = Path(one).read_text()
                except OSError as exc:
                    raise UsageError(f"cannot read options file '{one}': {exc.strerror}") from None
                try:
                    words = shlex.split(text, comments=False)
                except ValueError as exc:
                    raise UsageError(f"options file '{one}': {exc}") from None
                out += expand_response_files(words, _depth + 1)
        i += 1
    return out


def environment_args(argv: list[str], env: dict[str, str] | os._Environ[str] = os.environ) -> list[str]:
    """The command line as nvcc sees it: NVCC_PREPEND_FLAGS, the arguments (response files
    expanded), NVCC_APPEND_FLAGS."""
    try:
        before = shlex.split(env.get("NVCC_PREPEND_FLAGS", ""))
        after = shlex.split(env.get("NVCC_APPEND_FLAGS", ""))
    except ValueError as exc:
        raise UsageError(f"NVCC_PREPEND_FLAGS/NVCC_APPEND_FLAGS: {exc}") from None
    return expand_response_files(before + argv + after)


def parse_args(argv: list[str]) -> Options:
    o = Options()
    lang: str | None = None
    i = 0

    def take(opt: str) -> str:
        nonlocal i
        if i + 1 >= len(argv):
            raise UsageError(f"option '{opt}' needs a value")
        i += 1
        return argv[i]

    while i < len(argv):
        a = argv[i]
        canon, value = None, None
        if a in _SPELLING:
            canon, has_value = _SPELLING[a]
            if has_value:
                value = take(a)
        elif a.startswith("-") and "=" in a and a.split("=", 1)[0] in _SPELLING:
            name, value = a.split("=", 1)
            canon, has_value = _SPELLING[name]
            if not has_value:
                if canon == "-m64":
                    canon, value = "-m64", None
                else:
                    raise UsageError(f"option '{name}' takes no value")
        elif a.startswith("-"):
            for p in sorted(_JOINABLE, key=len, reverse=True):
                if a.startswith(p) and len(a) > len(p):
                    canon, value = p, a[len(p):]
                    break
        if canon is None:
            if not a.startswith("-") or a == "-":
                path = a
                suffix = Path(path).suffix
                if lang == "cu" or (lang is None and suffix in CUDA_SUFFIXES):
                    o.inputs.append((path, "cu"))
                elif lang in ("c", "c++") or (lang is None and suffix in HOST_SUFFIXES):
                    o.inputs.append((path, "host"))
                elif suffix in OBJECT_SUFFIXES or re.search(r"\.so(\.\d+)*$", path):
                    o.inputs.append((path, "obj"))
                else:
                    raise UsageError(f"don't know what to do with input file '{path}' "
                                     "(expected .cu, .c/.cpp, .o or .a; use -x cu for CUDA sources "
                                     "with other suffixes)")
            elif a.startswith("-Wl,"):
                o.link_opts.append(a)
            elif a in _THIRTY_TWO_BIT:
                o.warnings.append(_THIRTY_TWO_BIT_WARNING.format(a))
            elif a.startswith(("-f", "-W", "-m", "-pthread", "-fopenmp")):
                # host compiler options nvcc itself would reject: forwarded, as with
                # --forward-unknown-to-host-compiler
                o.host_opts += ["-Xcompiler", a]
                o.link_opts.append(a)
                o.warnings.append(f"'{a}' is not an nvcc option; forwarded to the host compiler")
            else:
                o.warnings.append(f"unknown option '{a}' ignored")
            i += 1
            continue
        if canon == "-o":
            o.output = value
        elif canon == "-odir":
            o.odir = value
        elif canon in ("-I", "-D", "-U", "-isystem", "-include"):
            o.host_opts += [f"{canon}{value}" if canon in ("-I", "-D", "-U") else canon,
                            *([] if canon in ("-I", "-D", "-U") else [value])]   # type: ignore[list-item]
        elif canon == "-std":
            o.host_opts.append(f"-std={value}")
        elif canon == "-O":
            o.host_opts.append(f"-O{value}")
            o.link_opts.append(f"-O{value}")
        elif canon == "-x":
            lang = {"cu": "cu", "c": "c", "c++": "c++", "none": None}.get(value or "", "?")
            if lang == "?":
                raise UsageError(f"unsupported language '-x {value}' (expected cu, c, c++ or none)")
        elif canon == "-L":
            o.link_opts.append(f"-L{value}")
        elif canon == "-l":
            if value in ("cudart", "cudart_static", "cudadevrt"):
                pass     # cpuify's runtime replaces them
            elif value in ("nvToolsExt", "nvtx3interop"):
                pass     # NVTX v3 is header-only (nvtx3/nvToolsExt.h); without a tool it does nothing
            elif value in MATH_LIBRARIES or (value.endswith("_static") and value[:-7] in MATH_LIBRARIES):
                # cpuify's cuBLAS(Lt)/cuFFT/cuRAND (cpuify cuda-home), linked statically as the
                # runtime is
                o.link_opts.append(f"-l{value.removesuffix('_static')}_static")
            else:
                if value in ("cusparse", "cusolver", "nvrtc", "nppc"):
                    o.warnings.append(f"-l{value}: cpuify provides the CUDA runtime, cuBLAS, cuBLASLt, cuFFT and cuRAND only; linking "
                                      f"lib{value} as given (it will not run kernels on the CPU)")
                o.link_opts.append(f"-l{value}")
        elif canon == "-Xcompiler":
            flags = [f for f in value.split(",") if f]   # type: ignore[union-attr]
            for flag in [f for f in flags if f in _THIRTY_TWO_BIT]:
                o.warnings.append(_THIRTY_TWO_BIT_WARNING.format(f"-Xcompiler {flag}"))
            flags = [f for f in flags if f not in _THIRTY_TWO_BIT]
            if flags:
                o.host_opts += ["-Xcompiler", ",".join(flags)]
                o.link_opts += flags
        elif canon == "-Xlinker":
            o.link_opts += [f"-Wl,{value}"]
        elif canon in ("-Xptxas", "-Xnvlink", "-maxrregcount", "-dopt"):
            o.warnings.append(f"'{canon} {value}' has no effect on the CPU (no ptxas/nvlink); ignored")
        elif canon == "-Xcudafe":
            o.host_opts += ["-Xcudafe", value]     # type: ignore[list-item]
        elif canon == "-Xarchive":
            o.warnings.append(f"'-Xarchive {value}' ignored")
        elif canon in ("-arch", "-code"):
            o.archs += _arch_numbers(value or "")
        elif canon == "-gencode":
            o.archs += _arch_numbers(value or "")
        elif canon == "-ccbin":
            o.ccbin = value
        elif canon == "-rdc":
            o.rdc = (value or "").lower() in ("true", "1", "yes")
        elif canon == "-MF":
            o.dep_file = value
        elif canon == "-MT":
            o.dep_targets.append(value)            # type: ignore[arg-type]
        elif canon in ("-MD", "-MMD"):
            o.dep_mode = canon
        elif canon == "-MP":
            o.dep_phony = True
        elif canon == "-cudart":
            if value not in ("static", "shared", "none"):
                raise UsageError(f"-cudart {value}: expected static, shared or none")
            o.cudart = value
        elif canon == "-run-args":
            o.run_args += [a for a in (value or "").split(",") if a]
        elif canon in ("-Xfatbin", "-time"):
            o.warnings.append(f"'{canon} {value}' has no effect on the CPU; ignored")
        elif canon in ("-default-stream",):
            if value == "per-thread":
                o.warnings.append("--default-stream per-thread: cpuify runs every stream in issue "
                                  "order (a valid CUDA schedule); accepted")
            o.host_opts += ["--default-stream", value]   # type: ignore[list-item]
        elif canon in ("-ftz", "-prec-div", "-prec-sqrt", "-fmad"):
            o.host_opts.append(f"{canon}={value}")
        elif canon == "-t":
            if not (value or "").isdigit():
                raise UsageError(f"-t/--threads {value}: expected a number of threads (0: as many as "
                                 "there are CPUs)")
            o.threads = int(value)     # type: ignore[arg-type]
        elif canon in ("-split-compile", "-keep-dir", "-diag-suppress", "-Werror"):
            if canon in ("-diag-suppress", "-Werror"):
                o.host_opts.append(f"{canon}={value}")
        elif canon == "-g":
            o.host_opts.append("-g")
            o.link_opts.append("-g")
        elif canon == "-G":
            o.warnings.append("-G: device code is compiled optimized (no device debugging on the CPU); "
                              "host code gets -g")
            o.host_opts.append("-g")
        elif canon == "-use_fast_math":
            o.host_opts.append("--use_fast_math")
        elif canon == "-shared":
            o.flags.add("-shared")
            o.link_opts.append("-shared")
        elif canon == "-pg":
            o.host_opts.append("-pg")
            o.link_opts.append("-pg")
        elif canon in ("-expt-relaxed-constexpr", "-extended-lambda",
                       "-Wno-deprecated-declarations", "-forward-unknown-to-host-compiler",
                       "-static-global-template-stub"):
            o.host_opts.append(a.split("=")[0] if canon != "-extended-lambda" else "--extended-lambda")
        elif canon == "-cudart-static":
            pass
        elif canon in _NO_EFFECT:
            pass
        else:
            o.flags.add(canon)
        i += 1
    if "-dc" in o.flags:
        o.flags.add("-c")
        o.rdc = True
    if "-dlink" in o.flags and "-c" in o.flags:
        # as nvcc does (nvcc -dryrun shows it): -dlink with -c or -dc compiles the sources
        # as relocatable device code and links no device code (CMake projects pass
        # `-rdc=true -dlink` in a library's compile flags, Altis's mandelbrot)
        o.flags.discard("-dlink")
        o.rdc = True
    if o.ccbin is None and os.environ.get("NVCC_CCBIN"):
        o.ccbin = os.environ["NVCC_CCBIN"]
    return o


def ptx_arch(o: Options) -> int:
    arch = max(o.archs) if o.archs else MIN_ARCH
    return max(arch, MIN_ARCH)


def _shell_word(arg: str, after: str = "") -> str:
    """An argument as nvcc -v prints it: file names (the one after -o too), -I/-L paths and
    words with spaces in double quotes."""
    if (arg.startswith(("-I", "-L")) or after == "-o" or ("/" in arg and not arg.startswith("-"))
            or re.search(r"[\s\"'$`\\;&|<>()]", arg) or not arg):
        return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return arg


# nvcc's own environment variables: read by this driver, not passed on to NVIDIA's nvcc
NVCC_ENVIRONMENT = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN")
# a 32-bit build (old Makefiles ask for one): cpuify's kernels are 64-bit native code, so the
# host code must be 64-bit too; the option is dropped with a warning
_THIRTY_TWO_BIT = ("-m32", "--machine=32")
_THIRTY_TWO_BIT_WARNING = ("'{}' ignored: cpuify builds 64-bit programs only (the kernels are 64-bit "
                           "native code)")

# options kept in host_opts together with the value after them
_PAIRED_HOST_OPTS = ("-Xcompiler", "-Xcudafe", "-include", "--default-stream", "-isystem")


class Driver:
    def __init__(self, o: Options, *, verbose: bool = False) -> None:
        self.o = o
        self.tk = find_toolkit()
        # --dryrun: the commands are printed, not run (nor are kernels compiled)
        self.dry = "-dryrun" in o.flags
        self.verbose = (verbose or self.dry or "-v" in o.flags
                        or os.environ.get("CPUIFY_NVCC_VERBOSE", "") not in ("", "0"))
        self.arch = ptx_arch(o)
        # every file the preprocessor read for the sources built (for `cpuify run`'s key)
        self.dependencies: set[str] = set()
        self.env = {k: v for k, v in os.environ.items() if k not in NVCC_ENVIRONMENT}
        self._home: Path | None = None
        self._std_noted = False         # the note on a raised -std= is printed once
        self.std_raised = False         # -std=c++11/14 given as c++17 (legacy_standard)
        o.host_opts = self._without_foreign_includes(o.host_opts)
        # --distributed: kernels carry their access maps, executables start on MPI ranks
        self.distributed = "--distributed" in o.flags

    @property
    def jobs(self) -> int:
        """The processes one file's device code compiles in: CPUIFY_JOBS, else -t/--threads,
        else the default (device.build_jobs)."""
        return device.build_jobs(self.o.threads)

    @property
    def home(self) -> Path:
        """`cpuify cuda-home`: the runtime libraries executables link (built on first use)."""
        if self._home is None:
            self._home = toolkit_home()
        return self._home

    def _without_foreign_includes(self, opts: list[str]) -> list[str]:
        """Drops -I/-isystem directories of another CUDA installation: its headers would mix
        with the ones nvcc (and cpuify's runtime) use."""
        out: list[str] = []
        i = 0
        while i < len(opts):
            a = opts[i]
            if a.startswith("-I") and len(a) > 2:
                directory, n = a[2:], 1
            elif a == "-isystem" and i + 1 < len(opts):
                directory, n = opts[i + 1], 2
            elif a in _PAIRED_HOST_OPTS:
                out += opts[i:i + 2]
                i += 2
                continue
            else:
                out.append(a)
                i += 1
                continue
            if is_foreign_cuda_include(directory, self.tk.include):
                _warn(f"cpuify nvcc: warning: dropped '{' '.join(opts[i:i + n])}': another CUDA "
                      f"installation's headers (cpuify compiles against {self.tk.include})")
            else:
                out += opts[i:i + n]
            i += n
        return out

    def log(self, cmd: list[str]) -> None:
        if self.verbose:
            words = [cmd[0]] + [_shell_word(a, b) for b, a in itertools.pairwise(cmd)]
            print("#$ " + " ".join(words), file=sys.stderr)

    def run(self, cmd: list[str], what: str, *, quiet: bool = False,
            rewritten: legacy_source.Rewritten | None = None,
            retry: Callable[[str], set[str]] | None = None) -> None:
        """Runs a tool, its output passed on (with `rewritten`: the copies' paths in it
        replaced by the originals').  With `retry`: a failure for which retry(stderr) finds
        something raises _Retry with it, nothing printed."""
        self.log(cmd)
        if self.dry:
            return
        proc = run_tool(cmd, env=self.env)
        out, err = proc.stdout, proc.stderr
        if rewritten:
            out, err = legacy_source.restore_names(out, rewritten), legacy_source.restore_names(err, rewritten)
        if proc.returncode != 0 and not self.std_raised and _NEEDS_CXX17 in err \
                and headers.legacy_enabled(self.o.flags):
            # CUDA 13's headers (libcu++: cooperative_groups.h, Thrust, CUB) need C++17; a
            # program written for an older toolkit asks for C++11/14: once more with C++17.
            # Not before: C++17 breaks some such programs (`using namespace std` and a global
            # `data` are ambiguous with std::data, Altis's pathfinder)
            self.std_raised = True
            raised = [self.legacy_standard(c) for c in cmd]
            if raised != cmd:
                return self.run(raised, what, quiet=quiet, rewritten=rewritten, retry=retry)
        if proc.returncode != 0 and retry is not None and (found := retry(err)):
            raise _Retry(found)
        if out and not quiet:
            sys.stdout.write(out)
        if proc.returncode != 0:
            sys.stderr.write(err + legacy_source.removed_api_note(err))
            raise CompileFailed(f"{what} failed")
        if err:
            sys.stderr.write(err)

    def nvcc_base(self, rewritten: legacy_source.Rewritten | None = None) -> list[str]:
        cmd = [self.tk.nvcc, "-arch", f"compute_{self.arch}", "-code", f"compute_{self.arch}"]
        if self.o.ccbin:
            cmd += ["-ccbin", self.o.ccbin]
        # cpuify's headers ahead of the toolkit's, the legacy CUDA layer pre-included
        legacy = headers.legacy_enabled(self.o.flags)
        cmd += headers.include_options(self.tk, legacy=legacy)
        host_opts = self.o.host_opts
        if legacy and self.std_raised:
            host_opts = [self.legacy_standard(opt) for opt in host_opts]
        if rewritten:
            host_opts = rewritten.include_options(host_opts) + rewritten.options
        return cmd + host_opts

    def legacy_standard(self, opt: str) -> str:
        """`-std=c++11`/`c++14` (or gnu++) as `c++17` when the toolkit's headers need C++17
        (CUDA 13's libcu++, which cooperative_groups.h, Thrust and CUB include): programs
        and CMake projects written for CUDA <= 12 ask for the older standard.  Applied once
        a compile failed on libcu++'s C++17 requirement (run(), std_raised)."""
        m = re.fullmatch(r"-std=(c|gnu)\+\+(98|03|0x|11|1y|14)", opt)
        if not m:
            return opt
        try:
            major = int(self.tk.version().split(".")[0])
        except ValueError:
            return opt
        if major < 13:
            return opt
        if not self._std_noted:
            self._std_noted = True
            _warn(f"cpuify nvcc: note: {opt} taken as -std={m.group(1)}++17: CUDA {major}'s "
                  f"headers need C++17 ({headers.NO_LEGACY_FLAG} keeps {opt})")
        return f"-std={m.group(1)}++17"

    def dependency_opts(self, out: str) -> list[str]:
        """-MD/-MMD as nvcc does them: the file next to `out` (or -MF), naming `out` (or -MT)."""
        o = self.o
        if o.dep_mode is None:
            return []
        dep_file = o.dep_file or str(Path(out).with_suffix(".d"))
        # several -MT name several targets, as with gcc (nvcc itself keeps the last)
        opts = [o.dep_mode, "-MF", dep_file, "-MT", " ".join(o.dep_targets or [out])]
        return opts + (["-MP"] if o.dep_phony else [])

    def host_cc(self) -> str:
        """The host C compiler (-ccbin's C sibling, else gcc); never $CC."""
        cxx = self.host_cxx()
        base = os.path.basename(cxx)
        for cpp, c in (("g++", "gcc"), ("clang++", "clang"), ("c++", "cc")):
            if base.endswith(cpp):
                return os.path.join(os.path.dirname(cxx), base[:-len(cpp)] + c)
        return cxx

    def host_cxx(self) -> str:
        """The host C++ compiler: -ccbin / --compiler-bindir / NVCC_CCBIN, else g++ (as nvcc:
        never $CXX or $CC, which make exports and a Makefile may set to `cpuify nvcc`)."""
        cc = self.o.ccbin
        if cc:
            if os.path.isdir(cc):
                cand = os.path.join(cc, "g++")
                return cand if os.path.exists(cand) else os.path.join(cc, "clang++")
            base = os.path.basename(cc)
            if "gcc" in base:
                return os.path.join(os.path.dirname(cc), base.replace("gcc", "g++"))
            if base.startswith("clang") and "++" not in base:
                return os.path.join(os.path.dirname(cc), base.replace("clang", "clang++"))
            return cc
        return "g++"

    # --- one CUDA translation unit -> relocatable object ---
    def compile_cu(self, src: str, out: str, dep_target: str) -> None:
        with tempfile.TemporaryDirectory(prefix="cpuify-nvcc-") as tmp:
            host_o = os.path.join(tmp, "host.o")
            mode = "-dc" if self.o.rdc else "-c"
            compat = legacy_texture.pre_include(src, self.o.host_opts)
            rewritten = self.legacy_rewrite(src, tmp)
            deps = self.dependency_opts(dep_target)

            def nvcc(rewritten: legacy_source.Rewritten | None, retry: bool) -> None:
                # -lineinfo: .loc lines in the PTX let a refused kernel's error name the .cu line
                self.run(self.nvcc_base(rewritten) + compat + deps
                         + [mode, "-lineinfo", "-x", "cu", "--keep", "--keep-dir", tmp,
                            rewritten.source if rewritten else src, "-o", host_o],
                         f"nvcc ({src})", rewritten=rewritten,
                         retry=legacy_source.host_functions_called_from_device if retry else None)
            try:
                nvcc(rewritten, headers.legacy_enabled(self.o.flags))
            except _Retry as again:
                # legacy code calling functions without __device__ from kernels: once more,
                # with those functions marked __host__ __device__ (nvcc/legacy_source.py)
                rewritten = self.legacy_rewrite(src, tmp, again.found)
                nvcc(rewritten, False)
            if rewritten and deps and not self.dry:
                dep_file = Path(deps[deps.index("-MF") + 1])
                dep_file.write_text(legacy_source.restore_names(dep_file.read_text(), rewritten))
            if self.dry:
                print(f"# cpuify: the kernels of {src} (PTX, compute_{self.arch}) to native code",
                      file=sys.stderr)
                self.run(["ld", "-r", host_o, os.path.join(tmp, "device.o"), "-o", out],
                         "combining host and device objects")
                return
            read = preprocessed_files(tmp)
            if rewritten:
                read = {rewritten.originals.get(f, f) for f in read}
            self.dependencies |= read
            stem = Path(src).name
            stem = stem[:-len(Path(src).suffix)] if Path(src).suffix else stem
            ptx_files = [p for p in Path(tmp).glob("*.ptx")]
            if not ptx_files:
                raise CompileFailed(f"{src}: nvcc produced no PTX")
            ptx = max(ptx_files, key=lambda p: p.stat().st_mtime).read_text()
            if self.o.rdc:
                ids = list(Path(tmp).glob("*.module_id"))
                module_id = ids[0].read_text().strip() if ids else ""
                if not module_id:
                    raise CompileFailed(f"{src}: nvcc produced no module id for -rdc")
                blob = os.path.join(tmp, "rdc.bin")
                Path(blob).write_bytes(device.rdc_record(module_id, src, ptx,
                                                         self.launch_shapes(tmp)))
                self.run(["objcopy", f"--add-section={device.RDC_SECTION}={blob}",
                          f"--set-section-flags={device.RDC_SECTION}=noload,readonly", host_o, out],
                         "embedding device code")
                return
            fatbins = list(Path(tmp).glob("*.fatbin.c"))
            if not fatbins:
                raise CompileFailed(f"{src}: nvcc produced no fat binary")
            fb_hash = device.fatbin_hash(device.fatbin_bytes(fatbins[0].read_text()))
            dev_o = os.path.join(tmp, "device.o")
            if self.verbose:
                print(f"# cpuify: the kernels of {src} (PTX, compute_{self.arch}) to native code",
                      file=sys.stderr)
            launches = self.instance_launches(tmp)
            entries = device.entry_names(ptx)
            shapes = launch_shapes.kernel_shapes(launches.shapes, entries)
            device.build_device_object(ptx, dev_o, tmp, source=src, fatbin_hash_value=fb_hash,
                                       warn=_warn, shapes=shapes,
                                       defer=device.defer_refused(self.o.flags),
                                       distributed=self.distributed, jobs=self.jobs,
                                       covered=launch_shapes.covered_entries(launches, entries,
                                                                             shapes))
            self.run(["ld", "-r", host_o, dev_o, "-o", out], "combining host and device objects")

    def legacy_rewrite(self, src: str, tmp: str,
                       device_functions: set[str] = frozenset()) -> legacy_source.Rewritten | None:  # type: ignore[assignment]
        """Copies of `src` and its headers with the legacy spellings nvcc 13 rejects rewritten
        (nvcc/legacy_source.py), under `tmp`; None without the legacy layer or such code."""
        if not headers.legacy_enabled(self.o.flags):
            return None
        rewritten = legacy_source.prepare(src, self.o.host_opts, tmp, device_functions)
        if rewritten and self.verbose:
            print(f"# cpuify: legacy CUDA rewritten in copies of: "
                  f"{', '.join(sorted(set(rewritten.originals.values())))}", file=sys.stderr)
        return rewritten

    @staticmethod
    def launch_shapes(tmp: str) -> dict[str, list[tuple[int, int, int]]]:
        """Kernel name -> the constant block shapes the translation unit launches it with,
        read from nvcc's host translation (kernels get a block function specialized for
        each)."""
        hosts = list(Path(tmp).glob("*.cudafe1.cpp"))
        if not hosts:
            return {}
        found = launch_shapes.launch_shapes(hosts[0].read_text(errors="replace"))
        return {name: sorted(dims) for name, dims in found.items()}

    @staticmethod
    def instance_launches(tmp: str) -> launch_shapes.Launches:
        """The translation unit's launches by kernel instance (launch_shapes.Launches), read
        from nvcc's host translation."""
        hosts = list(Path(tmp).glob("*.cudafe1.cpp"))
        if not hosts:
            return launch_shapes.Launches()
        return launch_shapes.instance_launches(hosts[0].read_text(errors="replace"))

    def compile_host(self, src: str, out: str, lang: str, dep_target: str) -> None:
        # nvcc hands .c/.cpp files to the host compiler with the same flags
        deps = self.dependency_opts(dep_target)
        if deps or self.dry:
            self.run(self.nvcc_base() + deps + ["-c", src, "-o", out], f"host compile ({src})")
            if deps:
                self.dependencies |= depfile_files(deps[deps.index("-MF") + 1]) | {src}
            return
        with tempfile.TemporaryDirectory(prefix="cpuify-host-") as tmp:
            dep = os.path.join(tmp, "deps.d")
            self.run(self.nvcc_base() + ["-c", src, "-o", out, "-MD", "-MF", dep],
                     f"host compile ({src})")
            self.dependencies |= depfile_files(dep) | {src}

    # --- device link (-rdc) ---
    def device_link(self, objects: list[str], out: str, *, explicit: bool = False) -> bool:
        """Builds the device-link object for the -dc objects among `objects` into `out`.
        Returns False when there is nothing to link."""
        mods: list[device.RdcModule] = []
        done: set[str] = set()
        for obj in objects:
            m, linked = device.device_code_of(obj)
            mods += m
            done |= linked
        mods = [m for m in mods if m.module_id not in done]
        seen: set[str] = set()
        uniq = []
        for m in mods:
            if m.module_id not in seen:
                seen.add(m.module_id)
                uniq.append(m)
        if not uniq:
            return False
        ptx = device.link_ptx(uniq)
        ids = [m.module_id for m in uniq]
        with tempfile.TemporaryDirectory(prefix="cpuify-dlink-") as tmp:
            dev_o = os.path.join(tmp, "dlink.o")
            shapes: dict[str, list[tuple[int, int, int]]] = {}
            for m in mods:           # launches may sit in any object, kernels in another
                for name, dims in m.shapes.items():
                    shapes.setdefault(name, []).extend(dims)
            device.build_device_object(ptx, dev_o, tmp, source=" ".join(m.source for m in uniq),
                                       linked_ids=ids, warn=_warn,
                                       shapes=launch_shapes.kernel_shapes(
                                           shapes, device.entry_names(ptx)),
                                       defer=device.defer_refused(self.o.flags),
                                       distributed=self.distributed, jobs=self.jobs)
            if explicit:
                lst = os.path.join(tmp, "ids.txt")
                Path(lst).write_text("\n".join(ids) + "\n")
                self.run(["objcopy", f"--add-section={device.DLINK_SECTION}={lst}",
                          f"--set-section-flags={device.DLINK_SECTION}=noload,readonly", dev_o, out],
                         "marking the device-link object")
            else:
                shutil.copyfile(dev_o, out)
        return True

    def device_link_inputs(self, tmp: str, out: str) -> list[str]:
        """The objects of a -dlink step (without -c): the object files given, and the CUDA
        sources compiled as relocatable device code into `tmp` first (nvcc then writes the
        device-link object alone, not the sources' host code)."""
        objects = []
        for k, (path, lang) in enumerate(self.o.inputs):
            if lang == "obj":
                objects.append(path)
            elif lang == "host":
                _warn(f"cpuify nvcc: warning: {path}: a host source has no device code to link "
                      "(-dlink); ignored")
            else:
                if not os.path.isfile(path):
                    raise UsageError(f"{path}: no such file")
                obj = os.path.join(tmp, f"{k}_{Path(path).stem}.o")
                rdc, self.o.rdc = self.o.rdc, True
                try:
                    self.compile_cu(path, obj, out)
                finally:
                    self.o.rdc = rdc
                objects.append(obj)
        return objects

    def library_archives(self) -> list[str]:
        """The static libraries that -l names find in the -L directories (they may hold -dc
        objects)."""
        libdirs = [f[2:] for f in self.o.link_opts if f.startswith("-L")]
        return [os.path.join(d, f"lib{f[2:]}.a") for f in self.o.link_opts if f.startswith("-l")
                for d in libdirs if os.path.isfile(os.path.join(d, f"lib{f[2:]}.a"))]

    def link(self, objects: list[str], out: str) -> None:
        with tempfile.TemporaryDirectory(prefix="cpuify-link-") as tmp:
            extra = []
            dl = os.path.join(tmp, "cpuify_dlink.o")
            # static libraries named with -l may hold -dc objects too
            archives = self.library_archives()
            if not self.dry and self.device_link(objects + archives, dl):
                extra.append(dl)
            # cpuify's library directories first: -lcudart_static, -lcudart and -lcuda find
            # cpuify's, never another CUDA's that a -L of the command line names
            libs = {"static": RUNTIME_LINK_LIBS,
                    "shared": tuple("-lcudart" if f == "-lcudart_static" else f
                                    for f in RUNTIME_LINK_LIBS),
                    "none": tuple(f for f in RUNTIME_LINK_LIBS if f != "-lcudart_static")}
            shared_libs = {"-lcuda", "-lnvidia-ml"} & set(self.o.link_opts)
            if (self.o.cudart == "shared" or shared_libs) and not cache_enabled():
                raise UsageError("-cudart shared, -lcuda and -lnvidia-ml link libraries of the "
                                 "toolkit directory in the cache directory, and there is none (CPUIFY_NO_CACHE or an "
                                 "unusable directory): the executable would lose them at exit")
            if self.distributed and "-shared" in self.o.flags:
                _warn("cpuify nvcc: warning: --distributed has no effect on a shared library "
                      "(its kernels carry their access maps; link the executable with "
                      "--distributed)")
            elif self.distributed:
                # rank 0 runs main, the other ranks serve kernels (runtime/dist_main.c)
                extra += ["-Wl,--wrap=main", self.distributed_main(tmp)]
            # the output first, as nvcc <= 10 printed it: scripts parse `nvcc -dryrun`'s link
            # line (SHOC's configure takes what follows `-o "a.out"`, less the objects, as the
            # libraries a g++ link needs: cpuify's -L directories and -lcudart_static)
            cmd = [self.host_cxx(), "-o", out, *objects, *extra, *library_dirs(self.home),
                   *self.o.link_opts, *libs[self.o.cudart]]
            self.run(cmd, "link")

    def distributed_main(self, tmp: str) -> str:
        """The object defining __wrap_main for --distributed executables: runtime/dist_main.c
        with this Python's library, executable and module path (where cpuify and mpi4py are)
        baked in.  Programs calling cuBLAS/cuFFT (which work on rank 0's memory directly) run
        their kernels on rank 0 only."""
        import sysconfig

        from cpuify.nvcc.rtlib import RUNTIME_DIR
        libdir = sysconfig.get_config_var("LIBDIR") or ""
        libpython = None
        for n in (sysconfig.get_config_var("INSTSONAME"), sysconfig.get_config_var("LDLIBRARY")):
            if n and ".so" in n and os.path.isfile(os.path.join(libdir, n)):
                libpython = os.path.join(libdir, n)
                break
        if self.dry:
            libpython = libpython or "libpython.so"
        if libpython is None:
            raise UsageError("--distributed: this Python has no shared libpython (built without "
                             "--enable-shared), which a distributed program loads to run "
                             "cpuify's engine; use a Python that has one")
        paths = [os.path.abspath(p) for p in sys.path if p and os.path.isdir(p)]
        local_only = any(f.startswith(("-lcublas", "-lcufft", "-lcurand")) for f in self.o.link_opts)

        def c_str(text: str) -> str:
            return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        unit = os.path.join(tmp, "cpuify_dist_main.c")
        Path(unit).write_text(
            f"#define CPUIFY_DIST_LIBPYTHON {c_str(libpython)}\n"
            f"#define CPUIFY_DIST_PYTHON {c_str(sys.executable)}\n"
            f"#define CPUIFY_DIST_SYS_PATH {c_str(repr(paths))}\n"
            f"#define CPUIFY_DIST_LOCAL_ONLY {1 if local_only else 0}\n"
            f'#include "{RUNTIME_DIR / "dist_main.c"}"\n')
        obj = os.path.join(tmp, "cpuify_dist_main.o")
        self.run([self.host_cc(), "-O1", "-std=gnu11", "-c", unit, "-o", obj],
                 "compiling the distributed entry point")
        return obj

    # --- the whole command ---
    def output_for(self, src: str, suffix: str) -> str:
        name = Path(src).stem + suffix
        return os.path.join(self.o.odir, name) if self.o.odir else name

    def main(self) -> int:
        o = self.o
        for w in o.warnings:
            _warn(f"cpuify nvcc: warning: {w}")
        unsupported = o.flags & {"-cubin", "-fatbin", "-dw"}
        if unsupported:
            raise UsageError(f"{sorted(unsupported)[0]} is not supported by cpuify nvcc (there is no "
                             "GPU binary); use -c, -dc, -ptx or build an executable")
        if o.flags & set(_FRONT_END_MODES):
            # front-end only modes: nvcc does them itself
            extra = [f for f in _FRONT_END_MODES if f in o.flags]
            if "-cuda" in o.flags:
                _warn("cpuify nvcc: warning: -cuda writes nvcc's host translation (.cu.cpp.ii); an "
                      "object compiled from it has no CPU code for its kernels (build with -c)")
            if "-M" in o.flags or "-MM" in o.flags:
                extra += ["-MT", " ".join(o.dep_targets)] if o.dep_targets else []
                extra += ["-MP"] if o.dep_phony else []
                if o.dep_file and not o.output:
                    extra += ["-o", o.dep_file]
            for path, _ in o.inputs:
                compiles = "-ptx" in extra or "-E" in extra
                compat = legacy_texture.pre_include(path, o.host_opts) if compiles else []
                # -ptx of relocatable device code keeps extern __device__ declarations
                rdc = ["-rdc=true"] if o.rdc and "-ptx" in extra else []
                with tempfile.TemporaryDirectory(prefix="cpuify-front-") as tmp:
                    rewritten = self.legacy_rewrite(path, tmp) if compiles else None
                    cmd = self.nvcc_base(rewritten) + compat + extra + rdc
                    cmd.append(rewritten.source if rewritten else path)
                    if o.output:
                        cmd += ["-o", o.output]
                    elif rewritten and "-ptx" in extra:     # named after the source, here
                        cmd += ["-o", os.path.join(o.odir or ".", Path(path).stem + ".ptx")]
                    self.run(cmd, "nvcc", rewritten=rewritten)
            return 0
        if not o.inputs:
            raise UsageError("no input files")
        compile_only = "-c" in o.flags
        if "-dlink" in o.flags and not self.dry:
            out = o.output or "a_dlink.o"
            with tempfile.TemporaryDirectory(prefix="cpuify-dlink-") as tmp:
                objs = self.device_link_inputs(tmp, out)
                if not self.device_link(objs + self.library_archives(), out, explicit=True):
                    # nothing to link: an empty object keeps Makefiles working
                    c = os.path.join(tmp, "empty.c")
                    Path(c).write_text("static int cpuify_empty_dlink;\n")
                    self.run([self.host_cc(), "-c", c, "-o", out], "device link")
            return 0
        if compile_only and o.output and len([1 for _, lang in o.inputs if lang != "obj"]) > 1:
            raise UsageError("-o with -c and several input files (nvcc refuses this too)")
        with tempfile.TemporaryDirectory(prefix="cpuify-build-") as tmp:
            objects: list[str] = []
            for k, (path, lang) in enumerate(o.inputs):
                if lang == "obj":
                    objects.append(path)
                    continue
                if not os.path.isfile(path) and not self.dry:
                    raise UsageError(f"{path}: no such file")
                if compile_only:
                    out = o.output or self.output_for(path, ".o")
                    dep_target = out
                else:
                    out = os.path.join(tmp, f"{k}_{Path(path).stem}.o")
                    dep_target = o.output or "a.out"      # nvcc names the executable
                if lang == "cu":
                    self.compile_cu(path, out, dep_target)
                else:
                    self.compile_host(path, out, lang, dep_target)
                objects.append(out)
            if compile_only:
                return 0
            if "-lib" in o.flags:
                out = o.output or "a.a"
                if os.path.exists(out):
                    os.unlink(out)
                self.run(["ar", "rcs", out, *objects], "ar")
                return 0
            self.link(objects, o.output or "a.out")
        if "-run" in o.flags:
            exe = o.output or "a.out"
            sys.stdout.flush()
            cmd = [exe if os.path.dirname(exe) else os.path.join(".", exe), *o.run_args]
            self.log(cmd)
            if self.dry:
                return 0
            from cpuify import cache
            proc = subprocess.run(cmd, env=cache.outer_environment())   # the caller's TMPDIR
            return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        return 0


class CompileFailed(CpuifyError):
    """A tool failed; its diagnostics were already printed."""


#: libcu++'s #error for a standard before C++17 (cuda/std/__internal/cpp_dialect.h)
_NEEDS_CXX17 = "requires at least C++ 17"


class _Retry(Exception):
    """A tool failed in a way worth another try (`found` says with what); nothing printed."""

    def __init__(self, found: set[str]) -> None:
        super().__init__(", ".join(sorted(found)))
        self.found = found


# `# 12 "path" 1 3`: the line markers of preprocessed output name every file read
_LINE_MARKER = re.compile(rb'^# \d+ "((?:[^"\\]|\\.)*)"', re.MULTILINE)


def preprocessed_files(keep_dir: str) -> set[str]:
    """The files nvcc's preprocessor read, from the line markers of the preprocessed
    sources it kept (*.ii) in `keep_dir`; absolute paths."""
    raw: set[bytes] = set()
    for ii in Path(keep_dir).glob("*.ii"):
        try:
            data = ii.read_bytes()
        except OSError:
            continue
        # (thousands of markers name a few hundred files: each converted once)
        raw.update(_LINE_MARKER.findall(data))
    found: set[str] = set()
    for r in raw:
        name = r.decode("utf-8", "replace").replace('\\\\', '\\')
        if name.startswith("<") or not name:
            continue        # <built-in>, <command-line>
        found.add(os.path.abspath(name))
    return found


def depfile_files(path: str) -> set[str]:
    """The prerequisites of a make-style dependency file (-MD -MF), absolute paths."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return set()
    text = text.replace("\\\n", " ")
    _, _, prereqs = text.partition(":")
    names = re.findall(r"(?:\\ |[^\s])+", prereqs)
    return {os.path.abspath(n.replace("\\ ", " ")) for n in names}


def _warn(msg: str) -> None:
    print(msg, file=sys.stderr)


HELP = """usage: cpuify nvcc [nvcc options] files...

Builds CUDA programs that run on the CPU: a drop-in for nvcc in Makefiles
(make NVCC="cpuify nvcc", or make CUDA_PATH=$(cpuify cuda-home) / PATH=$(cpuify
cuda-home)/bin:$PATH make, and CMake with -DCMAKE_CUDA_COMPILER=$(cpuify cuda-home)/bin/nvcc).
Host code is compiled by the host C++ compiler through NVIDIA's nvcc (PyPI wheel); kernels
are compiled by cpuify to native code; executables link cpuify's CUDA runtime instead of
libcudart and need neither a GPU nor Python.

inputs: .cu (or any file after -x cu), .c/.cpp (host compiler), .o/.a/.so (linked)
modes:  (none) build an executable (-o, default a.out; --run [--run-args a,b] runs it) |
        -c objects | -dc / -rdc=true -c relocatable device code | -dlink device-link object
        (.cu inputs compiled -dc first; with -c or -dc, -dlink does nothing, as with nvcc) |
        -lib static library | -ptx / -E / -M / -MM / -cuda front-end only (done by nvcc)
options: -o -odir -I -D -U -L -l -O* -g -std= -include -isystem -x -Xcompiler (comma list)
        -Xlinker -ccbin/--compiler-bindir -arch/-code/-gencode (pick the PTX target,
        >= compute_75) --use_fast_math -rdc -MD/-MMD/-MF/-MT/-MP -shared -cudart
        static|shared|none --expt-relaxed-constexpr --extended-lambda --default-stream
        @file / --options-file/-optf file (response files) -v (commands, as nvcc -v);
        -t N / --threads N: processes compiling one file's kernels (0: one per CPU;
        CPUIFY_JOBS, when set, comes first);
        -G, -lineinfo, -Xptxas, --ptxas-options, -maxrregcount, --resource-usage are
        accepted (no effect on the CPU; a warning where a GPU build would differ);
        -cubin/-fatbin are refused.  -lcudart/-lcudart_static/-lcudadevrt link cpuify's
        runtime (kernels launching kernels: -rdc=true -lcudadevrt), -lcuda its driver API
        library, -lnvidia-ml its NVML, -lcublas/-lcufft/-lcurand cpuify's cuBLAS/cuFFT/cuRAND (cpuify
        cuda-home); an -I/-isystem to
        another CUDA installation's headers is dropped with a warning.
cpuify's own: --cpuify-defer-refused  build even when a kernel cannot run on the CPU (its
        launches then fail; by default the build fails naming kernel and line);
        --cpuify-no-legacy  no legacy CUDA layer (cudaThreadSynchronize, the removed
        cudaDeviceProp fields, device-number cudaMemPrefetchAsync/cudaMemAdvise, -std=c++11/14
        taken as c++17 with CUDA 13's headers, ...: on by default);
        --distributed  runs across MPI ranks under mpiexec (mpiexec -n 4 ./app: rank 0 runs
        main, the others serve parts of each kernel's grid; give it when compiling and
        linking; without MPI the program runs as usual; docs/distributed.md).
host compiler: -ccbin, else $NVCC_CCBIN, else g++/gcc (never $CC/$CXX).
environment: NVCC_PREPEND_FLAGS / NVCC_APPEND_FLAGS as nvcc; CPUIFY_NVCC_VERBOSE=1 prints
        the commands; CPUIFY_DEFER_REFUSED=1 and CPUIFY_LEGACY=0 as the flags above;
        CPUIFY_SPECIALIZE=0: no block-shape specializations; CPUIFY_GENERIC_LEVEL=O3: the
        generic code at O3 even when the specializations cover every launch;
        kernels and the runtime library are cached in CPUIFY_CACHE_DIR (cpuify cache
        info|clear; CPUIFY_NO_CACHE=1: off); at run time CPUIFY_NUM_THREADS,
        CPUIFY_PROFILE=1 (an nvprof-like summary at exit), CPUIFY_COMPUTE_CAPABILITY=8.0
        (the compute capability reported; default: the compiled target);
        CPUIFY_DISTRIBUTED=0 (--distributed programs: every rank runs main on its own),
        CPUIFY_LIBPYTHON / CPUIFY_PYTHON (the Python a --distributed program embeds).
SIGTERM: exit status 143, temporary files removed.
"""


def print_version() -> None:
    """nvcc's --version text (build tools read its first line and the release), then ours."""
    from cpuify import __version__
    tk = find_toolkit()
    out = subprocess.run([tk.nvcc, "--version"], capture_output=True, text=True).stdout
    sys.stdout.write(out)
    print(f"cpuify nvcc {__version__}: NVIDIA's nvcc {tk.root} for host code, cpuify for the "
          f"kernels (run on the CPU); toolkit directory: cpuify cuda-home")


def nvcc_main(argv: list[str], *, dependencies: set[str] | None = None) -> int:
    """`cpuify nvcc argv`; the files the build read are added to `dependencies`."""
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(HELP)
        return 0 if argv else 1
    try:
        invoked_as = os.environ.pop(INVOKED_AS, "")
        note = check_invoked_home(invoked_as) if invoked_as else None
        if note:
            print(note, file=sys.stderr)
        argv = environment_args(argv)
        if {"-v", "--verbose", "-dryrun", "--dryrun"} & set(argv):
            # as nvcc -v: the toolkit's variables first (CMake reads TOP, LIBRARIES, ...), even
            # when the command line turns out to be wrong
            for line in verbose_environment(toolkit_home()):
                print("#$ " + line, file=sys.stderr)
        o = parse_args(argv)
        if "-V" in o.flags:
            print_version()
            return 0
        if "-h" in o.flags:
            sys.stdout.write(HELP)
            return 0
        driver = Driver(o)
        try:
            return driver.main()
        finally:
            if dependencies is not None:
                dependencies |= driver.dependencies
    except CompileFailed as exc:
        print(f"cpuify nvcc: error: {exc}", file=sys.stderr)
        return 1
    except device.RefusedKernels as exc:
        print(exc, file=sys.stderr)      # `file:line: error: ...` per kernel
        return 1
    except CpuifyError as exc:
        print(f"cpuify nvcc: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"cpuify nvcc: error: {exc}", file=sys.stderr)
        return 1


# ------------------------------------------------------------------------------------
# cpuify run


def _program_key(src: str, nvcc_args: list[str]) -> str:
    """What a program built by `cpuify run` depends on besides the headers it includes:
    its source and the other input files, options, cpuify's sources, the pass pipeline,
    the NVIDIA toolkit, the host compilers, LLVM and the host CPU."""
    from cpuify.compiler import pipeline_options, toolchain_key
    tk = find_toolkit()
    h = hashlib.sha256()
    # the command line as cpuify nvcc sees it: response files' contents, NVCC_PREPEND/APPEND_FLAGS
    args = environment_args(nvcc_args)
    o = parse_args(args)
    inputs = [path for path, _ in o.inputs]
    compilers = []
    for name in {o.ccbin or "g++", "cc"}:     # the host compiler (-ccbin/NVCC_CCBIN), the runtime's
        found = shutil.which(name)
        st = os.stat(found) if found else None
        compilers.append(f"{name}={found}:{st.st_size if st else 0}:{st.st_mtime_ns if st else 0}")
    for part in ("\0".join(args), os.getcwd(), os.path.abspath(src), pipeline_options()[0].key(),
                 toolchain_key(), tk.root, tk.version(), *sorted(compilers)):
        h.update(part.encode())
        h.update(b"\1")
    for path in [src, *inputs]:
        h.update(os.path.abspath(path).encode() + b"\0")
        h.update(Path(path).read_bytes())
        h.update(b"\1")
    return h.hexdigest()


def _files_digest(paths: list[str], before: float | None = None) -> str | None:
    """Digest of the contents of `paths` (None if one is missing, or, with `before`,
    was changed after that time: it may not be what the build read)."""
    h = hashlib.sha256()
    for p in sorted(paths):
        try:
            st = os.stat(p)
            data = Path(p).read_bytes()
        except OSError:
            return None
        if before is not None and st.st_mtime >= before:
            return None
        h.update(p.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def mpi_world_size(env: dict[str, str] | os._Environ[str] = os.environ) -> int:
    """The number of ranks of the MPI world this process was started in by mpiexec (MPICH's
    hydra, Open MPI, MVAPICH set these; runtime/dist_main.c reads the same), 0 outside."""
    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "PMIX_SIZE"):
        value = env.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def wants_distributed(env: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether `cpuify run` builds with --distributed: CPUIFY_DISTRIBUTED=1, or (unless it
    is 0) running under mpiexec with more than one rank."""
    setting = env.get("CPUIFY_DISTRIBUTED", "")
    if setting in ("0", "off", "no"):
        return False
    return setting in ("1", "on", "yes") or mpi_world_size(env) > 1


def run_main(src: str, args: list[str], nvcc_args: list[str]) -> int:
    """Builds `src` (cached: see _program_key, plus every header the build read) and runs it
    (under mpiexec with several ranks: built with --distributed, see wants_distributed)."""
    from cpuify import cache
    if wants_distributed() and not {"--distributed", "--cpuify-distributed"} & set(nvcc_args):
        nvcc_args = [*nvcc_args, "--distributed"]
    try:
        base = _program_key(src, nvcc_args)
    except (OSError, CpuifyError) as exc:
        print(f"cpuify run: error: {exc}", file=sys.stderr)
        return 1
    stem = re.sub(r"[^\w.+-]", "_", Path(src).stem) or "program"
    # the headers the last build of this program read, and their contents now
    deps_entry = f"programs/{stem}-{base[:16]}.deps"
    exe: Path | None = None
    got = cache.read_entry(deps_entry) if cache.cache_enabled() else None
    if got is not None and isinstance(got[0].get("files"), list):
        digest = _files_digest([str(f) for f in got[0]["files"]])
        if digest is not None:
            exe = cache.load_file(f"programs/{stem}-{_full_key(base, digest)[:16]}")
    if exe is not None:
        return _run_program(str(exe), args)
    with cache.temporary_directory(prefix="cpuify-run-") as tmp:
        out = os.path.join(tmp, stem)
        started = time.time()
        deps: set[str] = set()
        rc = nvcc_main([*nvcc_args, src, "-o", out], dependencies=deps)
        if rc != 0:
            return rc
        files = sorted(deps | {os.path.abspath(src)})
        digest = _files_digest(files, before=started)
        if digest is not None and cache.cache_enabled():
            cache.write_entry(deps_entry, {"files": files})
            exe = cache.store_file(f"programs/{stem}-{_full_key(base, digest)[:16]}", out,
                                   executable=True)
            return _run_program(str(exe), args)
        # no cache, or a header changed while building: run this build, keep nothing
        return _run_program(out, args)


def _full_key(base: str, headers: str) -> str:
    return hashlib.sha256(f"{base}|{headers}".encode()).hexdigest()


def _run_program(exe: str, args: list[str]) -> int:
    """Runs the built program in the caller's environment; SIGTERM is passed on to it."""
    import signal
    sys.stdout.flush()
    sys.stderr.flush()
    from cpuify.cache import outer_environment
    env = outer_environment()
    # under mpiexec (MPICH's hydra), the program is the MPI process: it needs the process
    # manager's descriptor this process was given
    pmi_fd = env.get("PMI_FD", "")
    keep = (int(pmi_fd),) if pmi_fd.isdigit() else ()
    proc = subprocess.Popen([exe, *args], env=env, pass_fds=keep)   # (not cpuify's TMPDIR)
    previous = None
    try:
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signum))
    except ValueError:          # not the main thread
        pass
    try:
        rc = proc.wait()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return rc if rc >= 0 else 128 - rc
