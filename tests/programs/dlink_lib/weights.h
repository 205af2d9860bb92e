#pragma once
// in the library (weights.cu): launches a kernel that calls weight(), defined in main.cu
void fill_weights(int *d, int n);
