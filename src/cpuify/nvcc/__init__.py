"""Whole CUDA programs: `cpuify nvcc` (an nvcc-compatible driver) and `cpuify run`.

    toolkit.py   where nvcc (from the nvidia-cuda-nvcc wheel) and the CUDA headers are
    rtlib.py     builds libcpuify_cudart.a, the library programs link instead of libcudart
    device.py    PTX -> native object + registration table; PTX linking for -rdc; reading
                 the device code embedded in relocatable objects
    driver.py    the command line: compile, device-link, link, run
"""
