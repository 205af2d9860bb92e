/* cpuify: on the include path only while NVIDIA's cuRAND headers are not installed. */
#error "curand_kernel.h: cpuify's cuRAND (host API: -lcurand; device API: curand_kernel.h) compiles against NVIDIA's cuRAND headers, which are not installed: pip install 'cpuify[curand]' (the nvidia-curand wheel)"
