// Device kernels for fused buffers: scale a float32 array in place on a
// stream. Built by nvcc where the CUDA toolkit exists.
#pragma once

#include <cstddef>

namespace kolo::kernels::cuda {

// Launches `data[i] *= factor` for i < count on `stream` (a cudaStream_t);
// returns the launch's cudaError_t as an int (0 on success).
int ScaleFloat32Async(float* data, size_t count, float factor, void* stream);

}  // namespace kolo::kernels::cuda
