#!/usr/bin/env bash
# Installs what the cpuify benchmark suite (`python -m benchmarks`) needs besides cpuify itself:
#   * PoCL, the Portable Computing Language CPU OpenCL driver, from Debian (pocl-opencl-icd),
#     the ICD loader and headers (ocl-icd-libopencl1, ocl-icd-opencl-dev) and clinfo;
#   * pyopencl, numba-cuda (for the numba CUDA simulator peer) and matplotlib from PyPI;
#   * gcc with OpenMP (the C+OpenMP twins are compiled with gcc -O3 -march=native -fopenmp).
#
# Idempotent: packages already present are not fetched again.  Run as root or with sudo.
#
#   bash benchmarks/setup.sh                  # uses $PYTHON, else `python`, else `python3`
#   PYTHON=/path/to/venv/bin/python bash benchmarks/setup.sh
set -euo pipefail

PY="${PYTHON:-$(command -v python || command -v python3)}"
if [ -z "$PY" ]; then
    echo "setup.sh: no python found (set PYTHON=...)" >&2
    exit 1
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "setup.sh: not root and no sudo: install the apt packages by hand" >&2
    fi
fi

# --- system packages (Debian / Ubuntu) ---------------------------------------------------
APT_PKGS=(pocl-opencl-icd ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-headers clinfo gcc libgomp1)
if command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    missing=()
    for p in "${APT_PKGS[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
            missing+=("$p")
        fi
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "setup.sh: apt-get install ${missing[*]}"
        $SUDO apt-get update
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
    else
        echo "setup.sh: apt packages already installed (${APT_PKGS[*]})"
    fi
else
    echo "setup.sh: not a Debian-like system; install PoCL (an OpenCL CPU ICD) and gcc with" \
         "OpenMP yourself" >&2
fi

# --- Python packages ------------------------------------------------------------------------
# numba-cuda pulls numba, which pins llvmlite to its own minor release; cpuify needs
# llvmlite>=0.44, so pip only installs a numba that matches the llvmlite already present.
PY_PKGS=(pyopencl numba-cuda matplotlib)
if "$PY" -c "import pyopencl, numba.cuda, matplotlib" >/dev/null 2>&1; then
    echo "setup.sh: Python packages already installed (${PY_PKGS[*]})"
else
    echo "setup.sh: $PY -m pip install ${PY_PKGS[*]}"
    "$PY" -m pip install "${PY_PKGS[@]}"
fi

# --- check ----------------------------------------------------------------------------------
"$PY" - <<'EOF'
import os
try:
    import pyopencl as cl
    plats = [p.name for p in cl.get_platforms()]
    pocl = [p for p in plats if "Portable Computing Language" in p]
    print("setup.sh: OpenCL platforms:", plats, "-> PoCL OK" if pocl else "-> PoCL NOT FOUND")
except Exception as e:                                   # noqa: BLE001
    print("setup.sh: pyopencl check failed:", type(e).__name__, e)
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
try:
    import numba
    from numba import cuda
    print(f"setup.sh: numba {numba.__version__}, CUDA simulator available: {cuda.is_available()}")
except Exception as e:                                   # noqa: BLE001
    print("setup.sh: numba CUDA simulator check failed:", type(e).__name__, e)
EOF
