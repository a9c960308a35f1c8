"""The PyTorch example programs on 2 ranks: examples/torch_mnist.py on a
subset of Fashion-MNIST, and examples/bench/torch_ddp_compare.py (kolo.torch
against DistributedDataParallel on gloo) for a couple of steps, checking its
output, not its speed."""

import os
import re

import pytest

from conftest import REPO, fashion_mnist_file

pytest.importorskip("torch")

# Where the example reads Fashion-MNIST (its --data-dir default).
DATA = fashion_mnist_file("train-images-idx3-ubyte.gz")


@pytest.mark.skipif(not os.path.exists(DATA), reason="dataset-fashion-mnist not installed")
def test_torch_mnist_example(launch):
    run = launch(2, os.path.join(REPO, "examples", "torch_mnist.py"),
                 args=["--epochs", "1", "--samples", "4096"], timeout=300)
    assert run.returncode == 0, run.output[-3000:]
    lines = re.findall(r"rank (\d)/2: weights sha256 (\w+) train accuracy ([\d.]+) "
                       r"test accuracy ([\d.]+)", run.output)
    assert len(lines) == 2, run.output[-3000:]
    assert {line[0] for line in lines} == {"0", "1"}, lines
    assert lines[0][1] == lines[1][1], f"weights differ across ranks: {lines}"
    assert float(lines[0][3]) > 0.5, f"test accuracy too low: {lines}"


def test_torch_ddp_compare_benchmark(launch):
    pytest.importorskip("torch.distributed")
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this torch has no gloo backend")
    run = launch(2, os.path.join(REPO, "examples", "bench", "torch_ddp_compare.py"),
                 args=["--steps", "2", "--warmup", "1"], timeout=300)
    assert run.returncode == 0, run.output[-3000:]
    results = re.findall(r"RESULT zero_grad=(\w+) kolo_ms=([\d.]+) ddp_gloo_ms=([\d.]+) "
                         r"ratio=([\d.]+) exchange_ratio=([-\d.inf]+) equal_gradients=(\d)",
                         run.output)
    assert [r[0] for r in results] == ["none", "zeros"], run.output[-3000:]
    for mode, kolo_ms, ddp_ms, _, _, equal in results:
        assert float(kolo_ms) > 0 and float(ddp_ms) > 0, results
        assert equal == "1", f"kolo and DDP gradients differ:\n{run.output[-3000:]}"
    assert re.search(r"equal results .*: True .*equal to the expected average: True",
                     run.output), run.output[-3000:]
