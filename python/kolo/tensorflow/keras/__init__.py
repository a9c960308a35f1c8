"""kolo.tensorflow.keras: the same API under the module name Keras programs
import (`import kolo.tensorflow.keras as hvd`; callbacks as hvd.callbacks.X,
elastic training as hvd.elastic.X)."""

import importlib as _importlib

from kolo.tensorflow import *  # noqa: F401,F403
from kolo.tensorflow import init, callbacks, cross_rank, cross_size  # noqa: F401
from kolo.tensorflow.gradient_aggregation import PartialDistributedOptimizer  # noqa: F401

# The star import binds kolo.tensorflow.elastic here when that was imported
# first, and `from ... import elastic` alone would then keep it: importing
# the submodule by its full name binds this package's own.
_importlib.import_module(f"{__name__}.elastic")
from kolo.tensorflow.keras import elastic  # noqa: F401,E402
