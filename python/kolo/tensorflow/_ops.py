"""Loads the Kolo TensorFlow op library and hands it kolo._core's table.

The op library is built against the installed TensorFlow only (its Abseil and
protobuf); it reaches libkolo through a table of C function pointers from
kolo._core, so the two libraries never bind to each other's C++ symbols.

`ops` holds the generated op functions. Called eagerly, a collective op waits
up to EAGER_WAIT_INLINE_US for its result on the calling thread (which waits
for it anyway), and on to the end once every rank has submitted it (a large
tensor sent in parts, once its first part is done), before handing the wait
to a thread of its own; in a graph the op never blocks TensorFlow's threads.
"""

import ctypes
import os

import tensorflow as tf

from kolo._native import core

_LIB_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_kolo_tf_ops.so")

# Long enough for any collective whose peers are ready (an 8-byte allreduce
# takes microseconds); a longer one not yet under way, or one that waits for
# a slower rank, finishes on the op's own thread. (Eager ops still complete
# in the order they were called: ranks must call them in the same order, in
# TensorFlow's synchronous and asynchronous eager modes alike.)
EAGER_WAIT_INLINE_US = 2000

if not os.path.exists(_LIB_PATH):
    raise ImportError(
        f"{_LIB_PATH} is missing: build it with scripts/install_python.sh")

_lib_ops = tf.load_op_library(_LIB_PATH)
# Same path, so dlopen returns the library TensorFlow just loaded.
_lib = ctypes.CDLL(_LIB_PATH, mode=os.RTLD_NOW | os.RTLD_LOCAL)
_lib.kolo_tf_bind.argtypes = [ctypes.c_void_p]
_lib.kolo_tf_bind.restype = ctypes.c_int
if _lib.kolo_tf_bind(ctypes.c_void_p(core._api_table())) != 0:
    raise ImportError(
        f"{_LIB_PATH} was built for another version of kolo._core "
        f"(table version {core.API_VERSION}); rebuild with scripts/install_python.sh")

_WAITING_OPS = ("kolo_allreduce", "kolo_grouped_allreduce", "kolo_broadcast", "kolo_allgather",
                "kolo_grouped_allgather", "kolo_reducescatter", "kolo_grouped_reducescatter",
                "kolo_alltoall")


def _eager_inline(fn):
    def call(*args, **kwargs):
        if "wait_inline_us" not in kwargs and tf.executing_eagerly():
            kwargs["wait_inline_us"] = EAGER_WAIT_INLINE_US
        return fn(*args, **kwargs)

    call.__name__ = fn.__name__
    call.__doc__ = fn.__doc__
    return call


class _Ops:
    """The op library's functions; the waiting collectives wait inline when
    called eagerly."""

    def __init__(self, lib):
        self._lib = lib
        for name in _WAITING_OPS:
            setattr(self, name, _eager_inline(getattr(lib, name)))

    def __getattr__(self, name):
        return getattr(self._lib, name)


ops = _Ops(_lib_ops)
