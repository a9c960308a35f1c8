"""Finds a Python interpreter's headers and pybind11, as the repository @local_python.

The interpreter is $KOLO_PYTHON, else `python3` on PATH. pybind11 comes from
that interpreter's `pybind11` package when it has one, else from Debian's
pybind11-dev (/usr/include/pybind11).

@local_python//:defs.bzl exports PYTHON_FOUND; @local_python//:headers is a
cc_library of Python.h and pybind11 (empty where either is missing), so the
extension is built where both exist and left out cleanly where they do not.
"""

_PROBE = """
import sysconfig, sys
print(sysconfig.get_paths()["include"])
print(sysconfig.get_config_var("EXT_SUFFIX") or ".so")
print("%d.%d" % sys.version_info[:2])
try:
    import pybind11
    print(pybind11.get_include())
except Exception:
    print("")
"""

def _python_configure_impl(ctx):
    python = ctx.os.environ.get("KOLO_PYTHON", "")
    if not python:
        found = ctx.which("python3")
        python = str(found) if found else ""
    include = ""
    ext_suffix = ".so"
    version = ""
    pybind_include = ""
    if python:
        res = ctx.execute([python, "-c", _PROBE], quiet = True)
        if res.return_code == 0:
            lines = res.stdout.strip().split("\n")
            if len(lines) >= 3:
                include, ext_suffix, version = lines[0], lines[1], lines[2]
            if len(lines) >= 4:
                pybind_include = lines[3]
    has_python = include != "" and ctx.path(include + "/Python.h").exists
    if not pybind_include or not ctx.path(pybind_include + "/pybind11/pybind11.h").exists:
        pybind_include = "/usr/include" if ctx.path("/usr/include/pybind11/pybind11.h").exists else ""
    found = has_python and pybind_include != ""

    ctx.file("defs.bzl", "PYTHON_FOUND = %s\nPYTHON = %r\nPYTHON_VERSION = %r\nEXT_SUFFIX = %r\n" % (
        found,
        python,
        version,
        ext_suffix,
    ))
    if found:
        ctx.symlink(include, "python_include")
        ctx.symlink(pybind_include + "/pybind11", "pybind11_include/pybind11")
        build = """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "headers",
    hdrs = glob(["python_include/**/*.h", "pybind11_include/**/*.h"]),
    includes = ["python_include", "pybind11_include"],
)
"""
    else:
        build = """
package(default_visibility = ["//visibility:public"])
cc_library(name = "headers")
"""
    ctx.file("BUILD.bazel", build)

python_configure = repository_rule(
    implementation = _python_configure_impl,
    environ = ["KOLO_PYTHON"],
    local = True,
)
