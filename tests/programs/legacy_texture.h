// declared in a header, as legacy code often does (the driver finds it through the include)
#pragma once
texture<float, 1, cudaReadModeElementType> vec_tex;
texture<unsigned char, 2, cudaReadModeNormalizedFloat> &image_ref(void);
