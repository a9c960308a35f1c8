"""Objects as bytes for broadcast_object and allgather_object: with
cloudpickle where installed (lambdas and locally defined classes travel too,
as in Horovod), else with pickle (every importable object)."""

import io
import pickle

try:
    import cloudpickle
except ImportError:  # optional: pickle serves every object that is importable
    cloudpickle = None


def dumps(obj):
    buf = io.BytesIO()
    (cloudpickle or pickle).dump(obj, buf, protocol=pickle.HIGHEST_PROTOCOL)
    return buf.getvalue()


def loads(data):
    """The object `data` (bytes) holds; cloudpickle's output loads with pickle."""
    return pickle.loads(data)
