#!/usr/bin/env python3
"""Real-code coverage: build every program of a CUDA corpus with its own build files,
unchanged, through cpuify, run it, and report built / ran / passed its own check, with the
first error of each program that did not get through.

    python -m benchmarks.coverage CORPUS_DIR [--suite NAME] [--only SUBSTR...]
                                  [--json OUT] [--build-timeout S] [--run-timeout S]
                                  [--wall-factor F] [--program-flags REGEX=FLAGS] [--jobs N]

CORPUS_DIR is a checkout of a public suite (fetched by you; this script fetches nothing).
The suite is recognised by its layout, or named with --suite (`--list` shows the recipes).
Each program is copied to a scratch directory first, so the corpus stays untouched, and
built the way its README says, with the CUDA toolkit replaced by cpuify:
`PATH=<cuda-home>/bin:$PATH`, `CUDA_PATH`/`CUDA_HOME`/`CUDA_DIR`/`CUDA_INSTALL_PATH` set
to cpuify's toolkit directory (`cpuify cuda-home`) and `NVCC="cpuify nvcc"`.  A program
counts as built only when an executable appeared *and* cpuify built it (it carries cpuify's
runtime: the `cpuify_launch` symbol, no libcudart): a system nvcc on the PATH cannot hide a
failure.  "passed" means the program's own check said so (each recipe knows how its suite
reports success); a program that prints its success message over wrong results is exactly
what this is meant to catch, so recipes match the suite's *comparison* output, not a bare
"PASSED" where the suite prints a count of mismatches.

The timeouts are CPU-time limits (benchmarks/limits.py): a build may use --build-timeout
seconds of CPU (the shell, make, the compilers together), each run --run-timeout seconds,
with a wall-clock backstop of --wall-factor (10) times that for a command that waits without
computing; a program starved of CPU on a loaded machine is not counted as timed out.  Both
the CPU and the wall-clock seconds of every build and run are reported.

A measurement tool: it never fails because a program fails; the exit status is 0 unless the
tool itself is misused.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

try:
    from benchmarks import altis, ispass2009
    from benchmarks.limits import WALL_FACTOR, run_limited
except ImportError:          # run as a script from benchmarks/
    import altis  # type: ignore[no-redef]
    import ispass2009  # type: ignore[no-redef]
    from limits import WALL_FACTOR, run_limited  # type: ignore[no-redef]


@dataclass(frozen=True)
class Recipe:
    """How one suite is laid out, built, run and checked."""
    name: str
    marker: str                          # a path (glob) relative to the corpus that identifies it
    programs: str                        # glob of program directories relative to the corpus
    build: tuple[str, ...]               # shell commands run in the program's scratch copy
    exe_glob: str = "*"                  # which new executables are the program
    run_args: tuple[str, ...] = ()
    passed: str = r"(?i)\b(pass(ed)?|test passed|success)\b"
    failed: str = r"(?i)\b(fail(ed|ure)?|mismatch|incorrect|wrong)\b"
    copy_up: int = 0                     # copy this many parent levels (shared utilities)
    run: bool = True                     # False: the suite's inputs are not at hand; build only
    description: str = ""
    # suites configured once for all their programs (autoconf, CMake): the corpus is copied
    # once, `setup` runs at its top, and each program is built in that shared copy
    setup: tuple[str, ...] = ()
    skip: str = ""                       # program directories (relative paths) to leave out
    # a shell command run in the program's directory instead of `exe run_args` in the
    # executable's ($EXE: the executable), for suites that say how each program is run
    run_shell: str = ""
    # (program, its directory, its output) -> (passed, why): True a pass, False a wrong result,
    # None nothing to check; replaces the passed/failed patterns
    judge: Callable[[str, Path, str], tuple[bool | None, str]] | None = None
    # programs are single source files (`programs` globs files, not build files): each is its
    # own program, built alone in a copy of its directory ($SRC: the file's name)
    per_file: bool = False
    # extra compiler flags of some programs, as their READMEs say: (regular expression
    # searched in the program's path relative to the corpus, flags); the flags of every
    # matching entry, joined, are $FLAGS in the build commands (empty for the others)
    program_flags: tuple[tuple[str, str], ...] = ()
    # programs that check their results first and then benchmark for long (llm.c's dev/cuda):
    # a run stopped at the CPU-time limit is judged on what it printed before (its check),
    # and counts as passed only if that output says the check held
    judge_stopped_run: bool = False


# `nvcc x.cu -o x` with the CUDA libraries the file includes and the program's $FLAGS
_SINGLE_FILE_BUILD = ('L=""; for lib in cublas curand cufft cusparse; do '
                      'grep -q "#include *<$lib" "$SRC" && L="$L -l$lib"; done; '
                      'nvcc -O2 $FLAGS "$SRC" -o "${SRC%.cu}" $L')

# PolyBench-ACC prints its count of results that differ from its CPU run (two spellings)
PB_PASSED = r"(Non-Matching CPU-GPU Outputs Beyond Error Threshold of [\d.]+ Percent: 0\b|Number of misses: 0\b)"
PB_FAILED = r"(Non-Matching CPU-GPU Outputs Beyond Error Threshold of [\d.]+ Percent: [1-9]|Number of misses: [1-9])"

RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("polybench-acc", marker="CUDA/utilities/polybench.h", programs="CUDA/*/*/*/Makefile",
           build=("make",), exe_glob="*.exe", copy_up=3,
           passed=PB_PASSED, failed=PB_FAILED,
           description="PolyBench-ACC's CUDA versions: `make` calls plain `nvcc`; each program "
                       "compares its GPU result with its own CPU run"),
    Recipe("polybench-acc-2", marker="CUDA/utilities/polybench.h", programs="CUDA/*/*/Makefile",
           build=("make",), exe_glob="*.exe", copy_up=2,
           passed=PB_PASSED, failed=PB_FAILED,
           description="the PolyBench-ACC programs two levels deep (datamining, stencils)"),
    Recipe("parboil", marker="common/mk/Makefile", programs="benchmarks/*/src/cuda/Makefile",
           build=(
               # the setup step of Parboil's README: common/Makefile.conf names the toolkit
               'printf "CUDA_PATH=$CUDA_PATH\\nCUDA_LIB_PATH=$CUDA_PATH/lib64\\n" '
               '> "$TOP/common/Makefile.conf"',
               'mkdir -p "$TOP/common/lib" && make -C "$TOP/common/src" PARBOIL_ROOT="$TOP"',
               # what `./parboil compile BENCH cuda` runs (its driver is Python 2); the default
               # platform file hard-codes CUDAHOME=/usr/local/cuda, overridden on the command line
               'B=$(echo "$REL" | cut -d/ -f2); cd "$TOP/benchmarks/$B" && '
               'make -f "$TOP/common/mk/Makefile" SRCDIR=src/cuda BUILDDIR=build/cuda_default '
               'BIN=build/cuda_default/$B PARBOIL_ROOT="$TOP" PLATFORM=default BUILD=cuda '
               'HOST_PLATFORM=linux CUDAHOME="$CUDA_PATH" default'),
           exe_glob="*", copy_up=4, run=False,
           description="Parboil's CUDA versions, built as its driver does; its datasets are a "
                       "separate download, so programs are only built"),
    Recipe("shoc", marker="src/cuda/level1/spmv/Spmv.cu", programs="src/cuda/**/Makefile.in",
           # level0 is one directory of four programs; level1/level2 only recurse into theirs;
           # the MPI variants (epmpi, tpmpi) are not built without MPI
           skip=r"^src/cuda(/common|/level[12])?$|/(epmpi|tpmpi)$",
           setup=(
               # SHOC's README: configure (CUDA is on when -lcublas and -lcufft link), make
               ('./configure --without-opencl --without-mpi CPPFLAGS="-I$CUDA_PATH/include" '
                'LDFLAGS="-L$CUDA_PATH/lib64"'),
               "make -C src/common"),
           build=("make -k",), run_args=("-s", "1"),
           # most tests print `Passed` or `FAILED` after comparing with a CPU computation;
           # Stencil2D counts validation errors, MD5Hash prints ERROR only on a wrong key
           passed=r"\bPassed\b|\b0 validation errors", failed=r"(?i)\bfailed\b|\bmismatch|"
                                                            r"[1-9]\d* validation errors|ERROR:",
           description="SHOC (autoconf): configured once, each program's directory built with "
                       "`make -k`, run with `-s 1`; level0 programs and S3D have no check"),
    Recipe("altis", marker="src/cuda/common/main.cu", programs="src/cuda/level*/*/CMakeLists.txt",
           # level2/yolo's CMakeLists builds a library (darknetLib) that no executable links
           skip=r"/yolo$",
           setup=(
               # setup.sh: a deviceQuery of the suite's own writes cuda_device_attr.h, then CMake
               ("make -C config/cuda_device_attr_gen && "
                "(cd config/cuda_device_attr_gen && ./deviceQuery ../../src/cuda/common/ 0)"),
               # the toolkit named as CMake's CUDA compiler (docs/usage.md), not found on the PATH
               ('cmake -S . -B build -DCMAKE_CUDA_ARCHITECTURES=75 '
                '-DCMAKE_CUDA_COMPILER="$CUDA_PATH/bin/nvcc"')),
           # the executables are targets of the level's CMakeLists named after the directory
           # (cfd: cfd and cfd_double), each linking the directory's library
           build=(('B=$(basename "$REL"); make -k -C "$TOP/build" $(make -C "$TOP/build" help | '
                   'sed -n "s/^\\.\\.\\. \\($B[A-Za-z_]*\\)$/\\1/p" | grep -v "Lib$")'),),
           # run in the program's source directory as its README says (kmeans's default
           # input is ./inputs/...), one pass, the result written where benchmarks/altis.py
           # reads it
           exe_glob="*",
           run_shell=('"$EXE" -s 1 -n 1 -o "$PWD/altis-output-$(basename "$EXE").txt"'),
           # Sort compares with its CPU sort; nw is checked against a reference computed from
           # the same input; GUPS's verification (printed with -v) counts errors on every GPU
           # (the second, undoing pass is commented out): not a check
           judge=altis.judge,
           description="Altis (CMake, setup.sh's steps), run with `-s 1 -n 1` (one pass); Sort "
                       "checks its results, nw is checked against a reference of "
                       "benchmarks/altis.py: the others end as `ran`"),
    Recipe("ispass2009", marker="Makefile.ispass-2009", programs="*/README.GPGPU-Sim",
           # README.ISPASS-2009: CUDA_INSTALL_PATH and NVIDIA_COMPUTE_SDK_LOCATION set (here
           # cpuify's cuda-home and cuda-sdk), nvcc on the PATH; `make -f Makefile.ispass-2009`
           # links <suite>/../common to the SDK's C/common and runs each program's make with
           # these variables (ParMetis before DG; CP through Parboil's driver, whose Python 2
           # code runs `make` with SRCDIR/BUILDDIR/BIN/PARBOIL_ROOT: that make is run here).
           # Its step 2, "set the variables to suit your environment": OPENMPI_BINDIR is where
           # mpicc is.  DG's own CPU build (Makefiles/MakefileCPU3d) is made too: its result
           # is DG's reference
           setup=("make -f Makefile.ispass-2009 check_environment common",),
           build=(('M=$(command -v mpicc); export BINDIR="$TOP/bin/" '
                   'ROOTDIR="$NVIDIA_COMPUTE_SDK_LOCATION/C/src/" BINSUBDIR=release '
                   'BOOST_LIB=/usr/lib64 BOOST_ROOT=/usr/include BOOST_VER="" '
                   'OPENMPI_BINDIR="${M:+$(dirname "$M")/}" && '
                   'OPENMPI_BINDIR="${OPENMPI_BINDIR:-/usr/lib64/mpi/gcc/openmpi/bin/}" && '
                   'if [ "$REL" = CP ]; then export PARBOIL_ROOT="$PWD" && make -C common/src && '
                   'cd benchmarks/cp && make -f src/cuda_short/Makefile SRCDIR=src/cuda_short '
                   'BUILDDIR=build/cuda_short BIN=build/cuda_short/cp PARBOIL_ROOT="$PARBOIL_ROOT"; '
                   'else { [ "$REL" != DG ] || make noinline=0 -C 3rdParty/ParMetis-3.1; } && '
                   'make noinline=0 && { [ "$REL" != DG ] || make -f Makefiles/MakefileCPU3d N=6 '
                   'LDFLAGS="-I./include -L3rdParty/ParMetis-3.1 -O3" >/dev/null 2>&1 || true; }; fi'),),
           # the command line of README.GPGPU-Sim, with the executable that was built (STO's and
           # WP's name it three directories up; CP's names its build directory)
           run_shell=('eval "$(sed -E \'s#[^ ]*/bin/release/[A-Za-z]+#"$EXE"#\' README.GPGPU-Sim)"'),
           judge=ispass2009.judge,
           description="the GPGPU-Sim ISPASS 2009 benchmarks, built with their own Makefiles "
                       "against `cpuify cuda-sdk` (the GPU Computing SDK's common.mk and cutil) "
                       "and run as README.GPGPU-Sim says; checked by their own comparison or a "
                       "reference of benchmarks/ispass2009.py"),
    Recipe("chai", marker="CUDA-D/*/support/cuda-setup.h", programs="CUDA-[DU]/*/Makefile",
           # Chai's README: `make` in a benchmark's directory, with CHAI_CUDA_LIB/CHAI_CUDA_INC
           # naming the toolkit's lib and include directories and nvcc on the PATH; the
           # programs run with their defaults (inputs under input/) and compare with a CPU
           # computation or a file under output/ (BFS's and SSSP's road graphs are large
           # files some copies of the repository lack)
           build=('make CHAI_CUDA_LIB="$CUDA_PATH/lib64" CHAI_CUDA_INC="$CUDA_PATH/include"',),
           passed=r"\bTest Passed\b",
           failed=r"(?i)\btest failed\b|does not match|Error Reading",
           description="Chai's CUDA-D (discrete) and CUDA-U (unified memory, host threads "
                       "working with the running kernel) versions, run with their defaults"),
    Recipe("graphbig-gpu", marker="gpu_bench/cudalib/cudaGraph.h",
           programs="gpu_bench/gpu_*/Makefile", copy_up=2,
           # README: `make` in gpu_bench's program directories; `make verify` rebuilds with
           # OUTPUT=1 VERIFY=1, runs RUN_ARGS (the small dataset) and diffs with ref_output:
           # the same steps here, the comparison once, for the directory's TARGET
           build=("make OUTPUT=1 VERIFY=1 all",),
           run_shell=('[ "$(basename "$EXE")" = "$(sed -n "s/^TARGET=//p" Makefile)" ] || exit 0; '
                      'make run >/dev/null && bash ../../scripts/compare.sh output.log '
                      'ref_output output.diff'),
           passed=r"\bTEST PASSED\b", failed=r"\bTEST FAILED\b",
           description="GraphBIG's GPU benchmarks (gpu_bench), built with VERIFY=1 and checked "
                       "as `make verify` does, against ref_output on dataset/small"),
    Recipe("gpumembench", marker="shmembench-cuda/shmem_kernels.cu", programs="*-cuda/Makefile",
           # README: the Makefiles, with CUDA_INSTALL_PATH (common.mk) naming the toolkit; the
           # OpenCL twins (*-ocl) are not built. Each program runs without arguments
           build=('make CUDA_INSTALL_PATH="$CUDA_PATH"',), copy_up=1,
           judge=lambda program, directory, output: _gpumembench_judge(program, output),
           description="gpumembench's CUDA micro-benchmarks (cache, shared and constant "
                       "memory bandwidth), built with `make CUDA_INSTALL_PATH=...`; constbench "
                       "checks its sums, the others print bandwidths only"),
    Recipe("npb-gpu", marker="CUDA/config/make.def", programs="CUDA/[A-Z][A-Z]/Makefile",
           # NPB-GPU's README: `make BENCHMARK CLASS=...` in its CUDA directory (config/make.def
           # calls plain `nvcc`); class S, the smallest, on a CPU. Each program ends with NPB's
           # own verification against the class's reference norms
           build=('make -C .. "$(basename "$PROG")" CLASS=S',), copy_up=1, exe_glob="*.S",
           passed=r"Verification\s+=\s+SUCCESSFUL",
           failed=r"Verification\s+=\s+UNSUCCESSFUL|\bFAILURE\b",
           description="the NAS Parallel Benchmarks in CUDA (GMAP/NPB-GPU): `make BT CLASS=S` "
                       "in CUDA/, each program checked by NPB's own verification"),
    Recipe("xsbench", marker="cuda/XSbench_header.cuh", programs="cuda/Makefile",
           # the README: `make` in cuda/ (COMPILER=nvidia); the CUDA version has the
           # event-based method only. The checksum of the small problem with the default
           # lookups is the one io.cu compares with ("Valid"; its misspelt "INAVALID" else)
           build=("make",), exe_glob="XSBench", run_args=("-m", "event", "-s", "small"),
           passed=r"Verification checksum: \d+ \(Valid\)", failed=r"INAVALID|INVALID",
           description="XSBench's CUDA version (`make` in cuda/), run with `-m event -s small`: "
                       "its checksum of the results must be the published one"),
    Recipe("rsbench", marker="cuda/rsbench.cuh", programs="cuda/Makefile",
           build=("make",), exe_glob="rsbench", run_args=("-m", "event", "-s", "small"),
           passed=r"Verification checksum: \d+ \(Valid\)", failed=r"INAVALID|INVALID",
           description="RSBench's CUDA version (`make` in cuda/), run with `-m event -s small`: "
                       "its checksum of the results must be the published one"),
    Recipe("single-cu", marker="", programs="**/*.cu", per_file=True,
           # `nvcc x.cu -o x` as a tutorial's reader types it, with the CUDA libraries the file
           # includes; a failed assert (abort) or a nonzero exit status counts as a failure
           build=(_SINGLE_FILE_BUILD,),
           judge=lambda program, directory, output: _single_file_judge(program, directory, output),
           description="one program per .cu file (tutorials, textbook examples): `nvcc x.cu -o x` "
                       "with the libraries it includes, run without arguments; name it with "
                       "--suite"),
    Recipe("olcf-training", marker="exercises/hw11/run_no_mpi.sh", programs="exercises/**/*.cu",
           per_file=True, build=(_SINGLE_FILE_BUILD,),
           judge=lambda program, directory, output: _single_file_judge(program, directory, output),
           # hw11's README: "If you're running somewhere where you don't have MPI, you can
           # compile the application without MPI: nvcc -DNO_MPI -o test test.cu"
           program_flags=((r"(^|/)hw11/test\.cu$", "-DNO_MPI"),),
           description="OLCF's CUDA training series (exercises/hwN/*.cu): the single-cu recipe "
                       "with the flags its READMEs give (hw11: -DNO_MPI); `--only solution` "
                       "for the complete programs"),
    Recipe("pcuda", marker="examples/chapter10/crypt.legacy.cu", programs="examples/chapter*/*.cu",
           # Professional CUDA C Programming (deeperlearning/professional-cuda-c-programming):
           # one program per .cu file, built by its chapter's Makefile (`make NAME`, plain
           # `nvcc` with -arch=sm_20/30/35, -rdc for chapter 3, -lcublas/-lcufft/-lcurand in
           # chapter 8, -fopenmp in 6 and 10), run without arguments (the book's sizes)
           per_file=True, copy_up=1, build=('make "${SRC%.cu}"',),
           # chapter 9's MPI programs are .c files (not globbed); its .cu files need no MPI
           judge=lambda program, directory, output: _pcuda_judge(program, directory, output),
           description="Professional CUDA C Programming's examples (per chapter Makefile, "
                       "`make NAME`), run without arguments; their comparisons print "
                       "`Arrays match.`, or only on a mismatch"),
    Recipe("cudahandbook", marker="chLib/chError_cuda.h", programs="*/CMakeLists.txt",
           # The CUDA Handbook (ArchaeaSoftware/cudahandbook): CMake, configured once with the
           # toolkit named as CMake's CUDA compiler and the texturing samples on (they default
           # to on only when CMake identifies NVIDIA's nvcc); each chapter directory's targets
           # built with `make -k` (OpenGL's tex2d_opengl and NPP's mipmapGenNPP fail there)
           skip=r"^chLib$", setup=(
               'cmake -S . -B build -DCMAKE_CUDA_COMPILER="$CUDA_PATH/bin/nvcc" '
               '-DCUDAHANDBOOK_BUILD_TEXTURING=ON',),
           build=('make -k -C "$TOP/build/$REL"',), exe_glob="*",
           # run from the source directory (corr's programs read coins.pgm from there)
           run_shell='"$EXE"',
           judge=lambda program, directory, output: _handbook_judge(output),
           description="The CUDA Handbook's samples (CMake, configured once), each chapter "
                       "directory's executables run without arguments; most print only on a "
                       "failed check"),
    Recipe("llmc-dev", marker="dev/cuda/common.h", programs="dev/cuda/*.cu", per_file=True,
           # llm.c's kernel variants (karpathy/llm.c): `make NAME` in dev/cuda (its Makefile
           # with nvcc from PATH, -lcublas -lcublasLt), run without arguments: each checks the
           # GPU kernels against its CPU code ("All results match.", or "Mismatch of ..." and
           # exit status 1) and then benchmarks them for long; line-buffered, so that a run
           # stopped in its benchmark still shows its check
           build=('make "${SRC%.cu}"',), run_shell='stdbuf -oL "$EXE"', judge_stopped_run=True,
           judge=lambda program, directory, output: _llmc_judge(output),
           description="llm.c's dev/cuda kernels (`make NAME`), each run once without "
                       "arguments; judged on its check against its CPU reference, which comes "
                       "before its benchmark"),
    Recipe("makefiles", marker="", programs="**/Makefile", build=("make",),
           description="any directory with a Makefile and .cu files: `make`, then run each new "
                       "executable without arguments"),
)}


def program_flags(recipe: Recipe, program: str, extra: tuple[tuple[str, str], ...] = ()) -> str:
    """The extra flags of `program` (its path relative to the corpus): those of the recipe's
    program_flags entries and of `extra` (--program-flags) whose pattern it matches."""
    return " ".join(flags for pattern, flags in (*recipe.program_flags, *extra)
                    if re.search(pattern, program))


def _gpumembench_judge(program: str, output: str) -> tuple[bool | None, str]:
    """constbench checks each kernel's sum (`ERROR: c was not ...` and exit 1 otherwise) and
    then prints its throughput table; cachebench and shmembench have no check."""
    m = re.search(r"ERROR:.*", output)
    if m:
        return False, m.group(0).strip()[:200]
    if "constbench" in program:
        if "Memory throughput" in output:
            return True, ""
        return False, "did not reach its throughput table"
    return None, "prints bandwidths only"


def _around(text: str, m: re.Match[str]) -> str:
    """The words around a match of a judge's pattern, for the report."""
    return text[max(0, m.start() - 80):m.end() + 40].strip()


def _source_of(program: str, directory: Path) -> str:
    """The text of a single-file program's source (empty when it is not there)."""
    source = directory / Path(program).name
    return source.read_text(errors="replace") if source.is_file() else ""


def _pcuda_judge(program: str, directory: Path, output: str) -> tuple[bool | None, str]:
    """Professional CUDA C Programming: `Arrays match.` / `Arrays do not match.`, `Test
    failed!` (its reductions print sums and complain only when one differs), and the
    CHECK() macro of its common.h prints `Error: file:line` and carries on.  (Chapter 7's
    fmad and intrinsic-standard-comp print that device and host values differ: that is what
    they demonstrate, not a failed check.)"""
    m = re.search(r"(?i)arrays do not match|test failed|^Error\b.*", output, re.MULTILINE)
    if m:
        return False, _around(output, m)
    if re.search(r"Arrays match", output):
        return True, ""
    if re.search(r'"(Arrays do not match|Test failed)', _source_of(program, directory)):
        return True, ""     # its comparison speaks only on a mismatch: silent, it held
    return None, "prints no comparison (timings or a demonstration)"


def _llmc_judge(output: str) -> tuple[bool | None, str]:
    """llm.c's dev/cuda programs: `Mismatch of NAME at I: CPU_ref: ... vs GPU: ...` (then
    exit 1), else `All results match.` once every kernel variant was checked."""
    m = re.search(r"Mismatch of .*|^CUDA error.*|\[CUDA ERROR\].*", output, re.MULTILINE)
    if m:
        return False, _around(output, m)
    if "All results match" in output:
        return True, ""
    return None, "stopped before its check ended"


def _handbook_judge(output: str) -> tuple[bool | None, str]:
    """The CUDA Handbook's samples print on a failed check only (`Incorrect sum computed!`,
    `Mismatch ...`, `... FAILED`), a few a verdict (corrFFT's `-> MATCH`)."""
    text = output.replace("(0 mismatches", "")       # (a count of none is a pass)
    m = re.search(r"(?i)\b(failed|failure|mismatch(es)?|incorrect|is wrong)\b|\bCUDA error\b|^Error\b",
                  text, re.MULTILINE)
    if m:
        return False, _around(text, m)
    if re.search(r"-> MATCH\b|\bPASSED\b|\bPassed\b|\(0 mismatches", output):
        return True, ""
    return None, "no verdict printed (timings, or a check that speaks only on failure)"


def _single_file_judge(program: str, directory: Path, output: str) -> tuple[bool | None, str]:
    """A tutorial program that exited with status 0: its message, or its assert()s held
    (a program that checks with assert and prints nothing, e.g. a histogram whose bins must
    add up to the input's size).  "no error" is not a failure: it is
    `cudaGetErrorString(cudaSuccess)`, which tutorials print after their kernels."""
    m = re.search(r"(?i)(?<!no )\b(fail(ed|ure)?|mismatch|incorrect|wrong|error)\b", output)
    if m:
        return False, _around(output, m)
    if re.search(r"(?i)\b(completed successfully|pass(ed)?|success|correct)\b", output):
        return True, ""
    text = _source_of(program, directory)
    if re.search(r"\bassert\s*\(", text):
        return True, ""
    # a comparison that speaks only when it fails (OLCF's streams exercises compare the
    # streamed result with the plain one and print "mismatch at ..."): silent, it held.  Words
    # of error handling (a CUDA error-check macro's "FAILED") are not a comparison
    if re.search(r'(?i)"[^"\n]*\b(mismatch|incorrect|wrong)', text):
        return True, ""
    return None, "no success message, no assert() and no comparison message"


@dataclass
class Result:
    program: str
    built: bool = False
    ran: bool = False
    passed: bool = False
    build_s: float = 0.0             # wall-clock seconds
    run_s: float = 0.0
    build_cpu_s: float = 0.0         # CPU seconds (user + system, every process)
    run_cpu_s: float = 0.0
    executables: list[str] = field(default_factory=list)
    first_error: str = ""


def cuda_home() -> tuple[str, str]:
    """(toolkit directory, bin directory holding an `nvcc` that is cpuify's)."""
    cli = [sys.executable, "-m", "cpuify.cli.main"]
    try:
        r = run_limited([*cli, "cuda-home"], cpu_limit=600)
        if r.returncode == 0 and r.stdout.strip():
            home = r.stdout.strip().splitlines()[-1]
            return home, os.path.join(home, "bin")
    except (OSError, subprocess.SubprocessError):
        pass
    # an older cpuify without `cuda-home`: a bin directory with an nvcc that runs cpuify nvcc
    shim = Path(tempfile.mkdtemp(prefix="cpuify-coverage-bin-"))
    (shim / "nvcc").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cpuify.cli.main nvcc "$@"\n')
    (shim / "nvcc").chmod(0o755)
    return str(shim.parent), str(shim)


def built_by_cpuify(exe: Path) -> bool:
    """True when `exe` carries cpuify's runtime and does not load NVIDIA's libcudart."""
    nm = subprocess.run(["nm", "-D", "--defined-only", str(exe)], capture_output=True, text=True)
    nm_static = subprocess.run(["nm", "--defined-only", str(exe)], capture_output=True, text=True)
    has_rt = "cpuify_launch" in nm.stdout + nm_static.stdout
    ldd = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
    foreign = [line for line in ldd.splitlines() if "libcudart" in line and "cpuify" not in line]
    if not has_rt:       # linked against a shared libcudart: is it cpuify's?
        has_rt = any("libcudart" in line and "cpuify" in line for line in ldd.splitlines())
        foreign = []
    return has_rt and not foreign


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if re.search(r"(?i)\berror\b|undefined reference|no such file|not supported|refused|"
                     r"segmentation fault|core dumped|unsupported|: not found$|command not found",
                     line):
            return line.strip()[:300]
    tail = [line for line in text.splitlines() if line.strip()]
    return tail[-1].strip()[:300] if tail else ""


def _executables(d: Path, pattern: str, before: set[Path]) -> list[Path]:
    out = []
    for p in d.rglob(pattern):
        if p in before or not p.is_file() or not os.access(p, os.X_OK) or p.suffix in (
                ".sh", ".py", ".pl", ".o", ".a", ".so", ".cu", ".c", ".cpp", ".h"):
            continue
        with open(p, "rb") as f:
            if f.read(4) != b"\x7fELF":
                continue
        out.append(p)
    return sorted(out)


def setup_shared(recipe: Recipe, corpus: Path, env: dict[str, str], timeout: float,
                 keep: Path | None, wall_factor: float = WALL_FACTOR) -> tuple[Path, str]:
    """One scratch copy of the whole corpus with the recipe's setup run at its top (each step
    under a limit of `timeout` seconds of CPU time): (the copy, the first error of a setup
    step that failed, or "")."""
    scratch = Path(tempfile.mkdtemp(prefix="cpuify-coverage-", dir=keep))
    top_copy = scratch / corpus.name
    shutil.copytree(corpus, top_copy, symlinks=True)
    for cmd in recipe.setup:
        r = run_limited(cmd, shell=True, cwd=top_copy, env={**env, "TOP": str(top_copy)},
                        cpu_limit=timeout, wall_factor=wall_factor)
        if r.stopped:
            return top_copy, r.why(f"setup `{cmd}`", timeout, wall_factor)
        if r.returncode != 0:
            return top_copy, f"setup `{cmd}` failed: {_first_error(r.stdout + r.stderr)}"
    return top_copy, ""


def run_program(recipe: Recipe, corpus: Path, makefile: Path, env: dict[str, str],
                build_timeout: float, run_timeout: float, keep: Path | None,
                shared: Path | None = None, wall_factor: float = WALL_FACTOR,
                extra_flags: tuple[tuple[str, str], ...] = ()) -> Result:
    """Builds, runs and judges one program; build_timeout is the CPU seconds its build
    commands may use together, run_timeout those of each run."""
    prog_dir = makefile.parent
    rel = str(prog_dir.relative_to(corpus))
    res = Result(str(makefile.relative_to(corpus)) if recipe.per_file else rel)
    scratch = Path(tempfile.mkdtemp(prefix="cpuify-coverage-", dir=keep))
    try:
        if shared is not None:          # built in the suite's configured copy
            top = corpus
            top_copy = shared
        else:
            top = prog_dir
            for _ in range(recipe.copy_up):
                top = top.parent
            shutil.copytree(top, scratch / top.name, symlinks=True)
            top_copy = scratch / top.name
        work = top_copy / prog_dir.relative_to(top)
        before = set(_executables(top_copy, "*", set()))
        env = {**env, "TOP": str(top_copy), "PROG": str(work),
               "REL": str(prog_dir.relative_to(top)), "SRC": makefile.name,
               "FLAGS": program_flags(recipe, res.program, extra_flags)}
        log = ""
        for cmd in recipe.build:
            r = run_limited(cmd, shell=True, cwd=work, env=env, wall_factor=wall_factor,
                            cpu_limit=max(build_timeout - res.build_cpu_s, 0.0))
            res.build_s += r.wall_s
            res.build_cpu_s += r.cpu_s
            if r.stopped:
                res.first_error = r.why("build", build_timeout, wall_factor)
                return res
            log += r.stdout + r.stderr
            if r.returncode != 0:
                break
        exes = _executables(top_copy, recipe.exe_glob, before)
        ours = [e for e in exes if built_by_cpuify(e)]
        res.executables = [str(e.relative_to(top_copy)) for e in exes]
        if not ours:
            res.first_error = (_first_error(log) if not exes else
                               f"{exes[0].name} was not built by cpuify (no cpuify runtime in it)")
            return res
        res.built = True
        if not recipe.run:
            return res
        outputs = []
        for exe in ours:
            if recipe.run_shell:
                r = run_limited(recipe.run_shell, shell=True, cwd=work, env={**env, "EXE": str(exe)},
                                cpu_limit=run_timeout, wall_factor=wall_factor)
            else:
                r = run_limited([str(exe), *recipe.run_args], cwd=exe.parent, env=env,
                                cpu_limit=run_timeout, wall_factor=wall_factor)
            res.run_s += r.wall_s
            res.run_cpu_s += r.cpu_s
            if r.stopped and recipe.judge_stopped_run and recipe.judge is not None:
                # its check came before the benchmark the limit stopped
                verdict, why = recipe.judge(res.program, work, r.stdout + r.stderr)
                res.ran = verdict is not None
                res.passed = verdict is True
                stopped = r.why(f"{exe.name}: run", run_timeout, wall_factor)
                res.first_error = (f"its check held; {stopped}" if verdict
                                   else f"its check failed: {why}" if verdict is False else stopped)
                return res
            if r.stopped:
                res.first_error = r.why(f"{exe.name}: run", run_timeout, wall_factor)
                return res
            assert r.returncode is not None
            out = r.stdout + r.stderr
            outputs.append(out)
            if r.returncode == -6 and "Assertion" in out:     # its own assert() failed
                m = re.search(r".*Assertion.*", out)
                res.ran = True
                res.first_error = f"its check failed: {m.group(0).strip()[:300] if m else ''}"
                return res
            if r.returncode != 0 and r.returncode < 0:
                res.first_error = f"{exe.name}: killed by signal {-r.returncode}: {_first_error(out)}"
                return res
            if r.returncode != 0 and recipe.per_file:    # a tutorial's check is its exit status
                res.ran = True
                res.first_error = f"{exe.name}: exit status {r.returncode}: {_first_error(out)}"
                return res
        res.ran = True
        text = "\n".join(outputs)
        if recipe.judge is not None:
            verdict, why = recipe.judge(res.program, work, text)
            res.passed = verdict is True
            if verdict is False:
                res.first_error = f"its check failed: {why}"
            elif verdict is None:
                res.first_error = f"not checked: {why}"
        elif re.search(recipe.failed, text):
            m = re.search(recipe.failed, text)
            res.first_error = f"its check failed: {text[max(0, m.start() - 80):m.end() + 40].strip()}"
        elif re.search(recipe.passed, text):
            res.passed = True
        else:
            res.first_error = f"no success message: {_first_error(text)}"
        return res
    finally:
        if keep is None:
            shutil.rmtree(scratch, ignore_errors=True)


def detect(corpus: Path) -> list[Recipe]:
    found = [r for r in RECIPES.values() if r.marker and list(corpus.glob(r.marker))]
    return found or [RECIPES["makefiles"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.coverage", description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", nargs="?", type=Path)
    ap.add_argument("--suite", action="append", choices=sorted(RECIPES))
    ap.add_argument("--only", nargs="*", default=[], help="programs whose path contains one of these")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--build-timeout", type=float, default=900,
                    help="CPU seconds a program's build may use (all its processes; default 900)")
    ap.add_argument("--run-timeout", type=float, default=600,
                    help="CPU seconds each run of a program may use (default 600)")
    ap.add_argument("--wall-factor", type=float, default=WALL_FACTOR,
                    help="wall-clock backstop: stop a build or run after this many times its "
                         f"CPU-time limit in wall-clock seconds (default {WALL_FACTOR:g})")
    ap.add_argument("--program-flags", action="append", default=[], metavar="REGEX=FLAGS",
                    help="extra compiler flags ($FLAGS of the single-file recipes) for the "
                         "programs whose path matches REGEX; repeatable")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--keep", type=Path, help="keep the scratch copies under this directory")
    ap.add_argument("--list", action="store_true", help="list the suite recipes")
    a = ap.parse_args(argv)
    if a.list:
        for r in RECIPES.values():
            print(f"{r.name:16s} {r.description}")
        return 0
    if a.corpus is None or not a.corpus.is_dir():
        ap.error("give a corpus directory (a checkout of a CUDA suite)")
    extra_flags = []
    for item in a.program_flags:
        pattern, eq, flags = item.partition("=")
        try:
            re.compile(pattern)
        except re.error as e:
            ap.error(f"--program-flags {item!r}: {pattern!r} is not a regular expression ({e})")
        if not eq or not pattern:
            ap.error(f"--program-flags {item!r}: give REGEX=FLAGS")
        extra_flags.append((pattern, flags))
    corpus = a.corpus.resolve()
    recipes = [RECIPES[n] for n in a.suite] if a.suite else detect(corpus)
    home, bindir = cuda_home()
    env = dict(os.environ)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    for var in ("CUDA_PATH", "CUDA_HOME", "CUDA_DIR", "CUDA_INSTALL_PATH", "CUDA_ROOT"):
        env[var] = home
    sdk = os.path.join(home, "sdk")
    if os.path.isdir(sdk):          # `cpuify cuda-sdk`: for SDK-era Makefiles
        env["NVIDIA_COMPUTE_SDK_LOCATION"] = sdk
    env["NVCC"] = os.path.join(bindir, "nvcc")
    if a.keep:
        a.keep.mkdir(parents=True, exist_ok=True)
    jobs = []
    for recipe in recipes:
        for mk in sorted(corpus.glob(recipe.programs)):
            if recipe.name == "makefiles" and not list(mk.parent.glob("*.cu")):
                continue
            rel = str((mk if recipe.per_file else mk.parent).relative_to(corpus))
            if a.only and not any(s in rel for s in a.only):
                continue
            if recipe.skip and re.search(recipe.skip, rel):
                continue
            jobs.append((recipe, mk))
    print(f"corpus {corpus}: {len(jobs)} programs ({', '.join(r.name for r in recipes)}); "
          f"toolkit {home}", flush=True)
    results: list[Result] = []
    shared: dict[str, tuple[Path, str]] = {}
    for recipe in {job[0] for job in jobs if job[0].setup}:
        print(f"setting up {recipe.name} once: {'; '.join(recipe.setup)}", flush=True)
        shared[recipe.name] = setup_shared(recipe, corpus, env, a.build_timeout, a.keep,
                                           a.wall_factor)

    def one(job: tuple[Recipe, Path]) -> Result:
        top_copy, setup_error = shared.get(job[0].name, (None, ""))
        if setup_error:
            r = Result(str(job[1].parent.relative_to(corpus)), first_error=setup_error)
        else:
            r = run_program(job[0], corpus, job[1], env, a.build_timeout, a.run_timeout, a.keep,
                            top_copy, a.wall_factor, tuple(extra_flags))
        state = "passed" if r.passed else "ran" if r.ran else "built" if r.built else "FAILED"
        print(f"  {r.program:50s} {state:7s} build {r.build_cpu_s:6.1f} s CPU {r.build_s:6.1f} s wall"
              f"  run {r.run_cpu_s:6.1f} s CPU {r.run_s:6.1f} s wall"
              f"{'  ' + r.first_error if r.first_error else ''}", flush=True)
        return r
    # programs of a shared copy are told apart by the executables that appear while each is
    # built: one at a time
    workers = 1 if shared else max(1, a.jobs)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(one, jobs))
    if a.keep is None:
        for top_copy, _ in shared.values():
            shutil.rmtree(top_copy.parent, ignore_errors=True)
    n = len(results)
    built = sum(r.built for r in results)
    ran = sum(r.ran for r in results)
    passed = sum(r.passed for r in results)
    print(f"\n{n} programs: {built} built, {ran} ran, {passed} passed their own check")
    if a.json:
        a.json.write_text(json.dumps({"corpus": str(corpus), "recipes": [r.name for r in recipes],
                                      "programs": n, "built": built, "ran": ran, "passed": passed,
                                      "limits": {"build_cpu_s": a.build_timeout,
                                                 "run_cpu_s": a.run_timeout,
                                                 "wall_factor": a.wall_factor},
                                      "results": [asdict(r) for r in results]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
