"""C++ targets that exist only where @local_cuda found CUDA (and NCCL).

Where the toolkit is absent the macros declare nothing, so `bazel build //...`
leaves the GPU code out cleanly. (Used by common/cuda, the NCCL backend, the client's CUDA code and the GPU tests.)"""

load("@local_cuda//:defs.bzl", "CUDA_FOUND", "NCCL_FOUND")

def cuda_cc_library(**kwargs):
    if CUDA_FOUND:
        native.cc_library(**kwargs)

def cuda_cc_test(**kwargs):
    if CUDA_FOUND:
        native.cc_test(**kwargs)

def cuda_cc_binary(**kwargs):
    if CUDA_FOUND:
        native.cc_binary(**kwargs)

def nccl_cc_library(**kwargs):
    if CUDA_FOUND and NCCL_FOUND:
        native.cc_library(**kwargs)

def nccl_cc_test(**kwargs):
    if CUDA_FOUND and NCCL_FOUND:
        native.cc_test(**kwargs)

def nccl_cc_binary(**kwargs):
    if CUDA_FOUND and NCCL_FOUND:
        native.cc_binary(**kwargs)
