/* cpuify: the NVTX v2 header name; NVTX v3 (header-only, `pip install nvidia-nvtx`) has
 * the same API under nvtx3/.  Without a profiler attached the calls do nothing. */
#if __has_include(<nvtx3/nvToolsExtSync.h>)
#include <nvtx3/nvToolsExtSync.h>
#else
#error "cpuify: NVTX headers not found: pip install nvidia-nvtx"
#endif
