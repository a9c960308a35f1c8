"""Loads the Kolo TensorFlow op library and hands it kolo._core's table.

The op library is built against the installed TensorFlow only (its Abseil and
protobuf); it reaches libkolo through a table of C function pointers from
kolo._core, so the two libraries never bind to each other's C++ symbols.
"""

import ctypes
import os

import tensorflow as tf

from kolo._native import core

_LIB_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_kolo_tf_ops.so")

if not os.path.exists(_LIB_PATH):
    raise ImportError(
        f"{_LIB_PATH} is missing: build it with scripts/install_python.sh")

ops = tf.load_op_library(_LIB_PATH)
# Same path, so dlopen returns the library TensorFlow just loaded.
_lib = ctypes.CDLL(_LIB_PATH, mode=os.RTLD_NOW | os.RTLD_LOCAL)
_lib.kolo_tf_bind.argtypes = [ctypes.c_void_p]
_lib.kolo_tf_bind.restype = ctypes.c_int
if _lib.kolo_tf_bind(ctypes.c_void_p(core._api_table())) != 0:
    raise ImportError(
        f"{_LIB_PATH} was built for another version of kolo._core "
        f"(table version {core.API_VERSION}); rebuild with scripts/install_python.sh")
