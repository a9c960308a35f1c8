"""kolo.tensorflow.keras: the same API under the module name Keras programs
import (`import kolo.tensorflow.keras as hvd`; callbacks as hvd.callbacks.X)."""

from kolo.tensorflow import *  # noqa: F401,F403
from kolo.tensorflow import init, callbacks, cross_rank, cross_size  # noqa: F401
from kolo.tensorflow.gradient_aggregation import PartialDistributedOptimizer  # noqa: F401
