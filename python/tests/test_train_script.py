"""scripts/train.sh --keras and --torch: the Python SDK's example programs one
command away (the script installs the SDK, then runs 2 ranks through
kolod)."""

import os
import re
import subprocess

import pytest

from conftest import REPO, fashion_mnist_file

DATA = fashion_mnist_file("train-images-idx3-ubyte.gz")


@pytest.mark.skipif(not os.path.exists(DATA), reason="dataset-fashion-mnist not installed")
@pytest.mark.parametrize("mode", ["--keras", "--torch"])
def test_train_script_runs_the_python_example(mode):
    env = dict(os.environ, KOLO_NP="2", TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([os.path.join(REPO, "scripts", "train.sh"), mode, "--epochs", "1",
                          "--samples", "2048"], cwd=REPO, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:]
    lines = re.findall(r"rank (\d)/2: weights sha256 (\w+) ", out.stdout)
    assert sorted(r for r, _ in lines) == ["0", "1"], out.stdout[-3000:]
    assert lines[0][1] == lines[1][1], f"weights differ across ranks: {lines}"
