"""Finds the CUDA toolkit and NCCL, and describes them as the repository @local_cuda.

@local_cuda//:defs.bzl exports CUDA_FOUND; @local_cuda//:cuda is a cc_library of
the CUDA runtime and @local_cuda//:nccl adds NCCL (both empty where CUDA is
absent), so CUDA targets can be built where the toolkit exists and left out
cleanly where it does not. Only kolod's NCCL backend links NCCL: libkolo (and
so kolo._core in a training process) must not, or the process would bind the
NCCL its framework loads (PyTorch's, a newer one) to this one by soname.
"""

def _cuda_configure_impl(ctx):
    root = ctx.os.environ.get("KOLO_CUDA_PATH", "/usr/local/cuda")
    nvcc = ctx.path(root + "/bin/nvcc")
    found = nvcc.exists and ctx.path(root + "/include/cuda_runtime.h").exists
    nccl = found and (ctx.path(root + "/include/nccl.h").exists or ctx.path("/usr/include/nccl.h").exists)
    ctx.file("defs.bzl", "CUDA_FOUND = %s\nNCCL_FOUND = %s\nCUDA_ROOT = %r\nNVCC = %r\n" % (
        found,
        nccl,
        root,
        str(nvcc) if found else "",
    ))
    if found:
        ctx.symlink(root + "/include", "include")
        build = """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "cuda",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh"], allow_empty = True),
    includes = ["include"],
    linkopts = ["-L{root}/lib64", "-Wl,-rpath,{root}/lib64", "-lcudart"],
)
cc_library(
    name = "nccl",
    linkopts = [{nccl}],
    deps = [":cuda"],
)
""".format(root = root, nccl = '"-lnccl"' if nccl else "")
    else:
        build = """
package(default_visibility = ["//visibility:public"])
cc_library(name = "cuda")
cc_library(name = "nccl")
"""
    ctx.file("BUILD.bazel", build)

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["KOLO_CUDA_PATH"],
    local = True,
)
