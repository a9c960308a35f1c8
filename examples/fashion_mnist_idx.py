"""Reads Fashion-MNIST as Debian's dataset-fashion-mnist installs it (idx
files, gzip), for the example programs; no download."""

import gzip
import os

import numpy as np

DEFAULT_DIR = os.environ.get("KOLO_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")


def load_idx(data_dir, name):
    """The array in idx file `name` (e.g. "train-images-idx3-ubyte.gz")."""
    with gzip.open(os.path.join(data_dir, name), "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
