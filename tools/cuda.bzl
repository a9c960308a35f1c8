"""kolo_cuda_library: CUDA sources compiled by the system nvcc where the toolkit
exists (see third_party/cuda/cuda_configure.bzl), an empty library elsewhere."""

load("@local_cuda//:defs.bzl", "CUDA_FOUND", "NVCC")

# Hopper (sm_90) machine code plus compute_90 PTX for later GPUs.
_NVCC_FLAGS = [
    "-O3",
    "-std=c++20",
    "-Xcompiler=-fPIC",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
    "-I.",
]

def kolo_cuda_library(name, srcs, hdrs = [], deps = [], visibility = None):
    """A cc_library `name` of the objects of `srcs` (.cu). Where CUDA is absent
    it is an empty library and cuda_available(name) is False."""
    if not CUDA_FOUND:
        native.cc_library(name = name, hdrs = hdrs, deps = deps, visibility = visibility)
        return
    objs = []
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + hdrs,
            outs = [obj],
            # nvcc names its temporary files by a counter in $TMPDIR, so two
            # nvcc runs sharing /tmp (sandboxes do) can take each other's
            # files: each run gets a directory of its own.
            cmd = ("t=$$(mktemp -d) && TMPDIR=$$t %s %s -c $(location %s) -o $@; " +
                   "rc=$$?; rm -rf $$t; exit $$rc") % (NVCC, " ".join(_NVCC_FLAGS), src),
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda"],
        visibility = visibility,
    )
