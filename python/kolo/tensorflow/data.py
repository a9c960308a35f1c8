"""horovod.tensorflow.data: Horovod's tf.data service helpers (compute
workers that serve a dataset to the training ranks). Kolo moves tensors
between ranks, not datasets: use tf.data.experimental.service directly (a
dispatcher and workers, and `distribute` on each rank's dataset), or shard
the input with tf.data.Dataset.shard(kolo.tensorflow.size(), rank())."""

_WHY = ("Kolo has no tf.data service of its own: use tf.data.experimental.service "
        "(dispatcher, workers, Dataset.distribute), or Dataset.shard(size(), rank())")


class TfDataServiceConfig:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(_WHY)


def compute_worker(*args, **kwargs):
    raise NotImplementedError(_WHY)


def send_to_data_service(*args, **kwargs):
    raise NotImplementedError(_WHY)
