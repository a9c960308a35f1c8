"""Loads kolo._core, the native extension over libkolo.

_core links the system's gRPC, protobuf and Abseil; TensorFlow carries its
own copies of gRPC, protobuf and Abseil and puts some of them (gRPC's C API
among them) in the process's global symbol scope. Three things keep the two
apart whichever is imported first:
  1. _core is loaded with RTLD_DEEPBIND, so it and the system libraries it
     brings in resolve their symbols in their own scope before the global one
     (without it, _core's gRPC calls land in TensorFlow's gRPC and crash);
  2. _core exports nothing but its entry point (core_module.lds), so nothing
     loaded later can bind to libkolo's copies;
  3. the TensorFlow op library does not link libkolo at all: it calls _core
     through a table of C function pointers (kolo_py_api.h).
"""

import os
import sys

_flags = sys.getdlopenflags()
try:
    # Resolve every symbol of _core and its libraries now, in their own scope
    # first, rather than lazily at first call.
    sys.setdlopenflags(os.RTLD_NOW | os.RTLD_LOCAL | os.RTLD_DEEPBIND)
    from kolo import _core as core  # noqa: E402
finally:
    sys.setdlopenflags(_flags)
