"""Elastic training with kolo.torch.elastic, kolo.tensorflow.elastic and
kolo.tensorflow.keras.elastic under kolorun's elastic mode: a rank kills
itself with SIGKILL mid-training, the survivors reset and go on from the
last commit, kolorun restarts it as a joiner that syncs from rank 0, and
every rank ends with the same weights. Also ElasticSampler's re-sharding in
one process, the Keras callbacks' commits, TensorFlowState, and the elastic
Keras example.

Each launch runs kolorun with a private kolod (as conftest.run_ranks, plus
the elastic flags); the workers write $KOLO_TEST_OUT/rank<N>.json.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, fashion_mnist_file, kolorun_job, rank_records, worker

DATA = fashion_mnist_file("train-images-idx3-ubyte.gz")


class ElasticRun:
    def __init__(self, returncode, output, ranks):
        self.returncode = returncode
        self.output = output
        self.ranks = ranks  # final rank -> what the process wrote

    def why(self):
        return f"exit {self.returncode}\n--- output tail ---\n{self.output[-5000:]}"


def run_elastic(np_, min_np, script, args=(), timeout=180):
    """Runs `script` on np_ ranks under `kolorun --min-np min_np` with a
    private kolod; a rank that fails is restarted as a joiner."""
    code, output, ranks, _ = kolorun_job(np_, script, args, ["--min-np", str(min_np)],
                                         timeout=timeout, collect=rank_records)
    return ElasticRun(code, output, ranks)


_runs = {}


def cached(key, *args, **kwargs):
    """One launch per configuration, shared by the tests that read it."""
    if key not in _runs:
        _runs[key] = run_elastic(*args, **kwargs)
    return _runs[key]


def assert_recovered_from_a_death(run, size):
    """Every rank finished at `size` ranks; one of them is the restarted
    joiner, and each survivor reset at least once and trained at fewer ranks."""
    assert run.returncode == 0, run.why()
    assert sorted(run.ranks) == list(range(size)), run.why()
    joiners = [r for r, d in run.ranks.items() if d["joiner"]]
    assert len(joiners) == 1, f"joiners {joiners}\n{run.why()}"
    for r, d in run.ranks.items():
        assert d["size"] == size, (r, d["size"])
        if not d["joiner"]:
            assert d["resets"] >= 1, f"rank {r} never reset\n{run.why()}"
            assert size - 1 in d["sizes"], f"rank {r} sizes {d['sizes']}"


def assert_same_on_every_rank(run, key):
    first = run.ranks[0][key]
    for r, d in run.ranks.items():
        assert d[key] == first, f"{key} differs: rank 0 {first}, rank {r} {d[key]}"


# ------------------------------------------------------------------ PyTorch

TORCH_EPOCHS = 3


@pytest.fixture
def torch_death():
    pytest.importorskip("torch")
    return cached("torch-death", 3, 2, worker("elastic_torch_worker.py"),
                  ["--epochs", str(TORCH_EPOCHS), "--victim", "1", "--die-at", "5",
                   "--step-sleep", "0.05", "--final-size", "3"])


def test_torch_state_survives_a_killed_rank(torch_death):
    """TorchState: 3 ranks with a DistributedOptimizer, rank 1 SIGKILLed
    before step 5; the survivors reset to the last commit and finish with the
    restarted rank, every rank holding the same weights and momentum, though
    each process initialised its model differently (the syncs did that)."""
    run = torch_death
    assert_recovered_from_a_death(run, 3)
    assert_same_on_every_rank(run, "weights")
    assert_same_on_every_rank(run, "momentum")
    assert_same_on_every_rank(run, "steps")
    assert len({json.dumps(d["initial"]) for d in run.ranks.values()}) == 3
    # The loss after the first sync, on a rank that was there from the start
    # (a joiner's first sync is late in training).
    start = max(d["first_loss"] for d in run.ranks.values() if not d["joiner"])
    for r, d in run.ranks.items():
        assert d["epoch"] == TORCH_EPOCHS, (r, d["epoch"])
        assert d["final_loss"] < 0.01 * start, (r, start, d["final_loss"])


def test_elastic_sampler_covers_each_sample_once_per_epoch_across_a_reset(torch_death):
    """The committed training saw every sample of every epoch, the epoch of
    the death included, and no sample twice but for the padding of the last
    round (at most size - 1 samples, where the remainder does not divide)."""
    run = torch_death
    assert run.returncode == 0, run.why()
    assert_same_on_every_rank(run, "epoch_counts")
    counts = run.ranks[0]["epoch_counts"]
    assert len(counts) == TORCH_EPOCHS
    for epoch, c in enumerate(counts):
        assert min(c) >= 1, f"epoch {epoch}: samples never seen: {c}"
        assert sum(c) - len(c) <= 2, f"epoch {epoch}: samples seen twice: {c}"


def _deal(monkeypatch, sampler, rank, size):
    from kolo import _api

    monkeypatch.setattr(_api, "is_initialized", lambda: True)
    monkeypatch.setattr(_api, "rank", lambda: rank)
    monkeypatch.setattr(_api, "size", lambda: size)
    sampler.reset()
    return list(sampler)


def test_elastic_sampler_reshards_what_is_left(monkeypatch):
    """In one process, ranks faked: 3 ranks take 2 batches of 2 each and
    record them; the state moves to 2 ranks (load_state_dict), which deal
    exactly the rest; after set_epoch the next epoch is a new order."""
    pytest.importorskip("torch")
    from kolo import _api
    from kolo.torch.elastic import ElasticSampler

    monkeypatch.setattr(_api, "is_initialized", lambda: True)
    monkeypatch.setattr(_api, "rank", lambda: 0)
    monkeypatch.setattr(_api, "size", lambda: 3)
    data = list(range(30))
    samplers = [ElasticSampler(data, shuffle=True, seed=4) for _ in range(3)]
    shares = [_deal(monkeypatch, s, r, 3) for r, s in enumerate(samplers)]
    assert sorted(i for share in shares for i in share) == data
    done = []
    for r, s in enumerate(samplers):
        _deal(monkeypatch, s, r, 3)
        for b in range(2):
            done += s.get_indices(b, 2)
            s.record_batch(b, 2)
    assert len(set(done)) == 12
    state = samplers[0].state_dict()
    assert state == {"epoch": 0, "processed_num": 12}

    after = [ElasticSampler(data, shuffle=True, seed=4) for _ in range(2)]
    rest = []
    for r, s in enumerate(after):
        monkeypatch.setattr(_api, "rank", lambda r=r: r)
        monkeypatch.setattr(_api, "size", lambda: 2)
        s.load_state_dict(state)
        assert len(s) == 9
        rest += list(s)
    assert sorted(done + rest) == data, "each sample exactly once in the epoch"

    # 7 left over 2 ranks: one sample is dealt twice (padding), none missed.
    s = after[0]
    s.load_state_dict({"epoch": 0, "processed_num": 23})
    left = _deal(monkeypatch, s, 0, 2) + _deal(monkeypatch, s, 1, 2)
    assert len(left) == 8 and set(left) == set(s.remaining_indices)

    s.load_state_dict({"epoch": 0, "processed_num": 0})
    order0 = list(s.remaining_indices)
    s.set_epoch(1)
    assert s.state_dict() == {"epoch": 1, "processed_num": 0}
    assert len(s.remaining_indices) == 30 and s.remaining_indices != order0


# ------------------------------------------------------- TensorFlow / Keras

KERAS_EPOCHS = 3


@pytest.fixture
def keras_death():
    pytest.importorskip("tensorflow")
    return cached("keras-death", 3, 2, worker("elastic_tf_worker.py"),
                  ["--epochs", str(KERAS_EPOCHS), "--steps", "5", "--victim", "1",
                   "--die-at", "6", "--step-sleep", "0.05", "--final-size", "3"])


@pytest.fixture
def keras_plain():
    pytest.importorskip("tensorflow")
    return cached("keras-plain", 2, 1, worker("elastic_tf_worker.py"),
                  ["--epochs", "2", "--steps", "4", "--batches-per-commit", "2",
                   "--tensorflow-state"])


def test_keras_state_survives_a_killed_rank(keras_death):
    """KerasState with model.fit and the elastic callbacks: 3 ranks, rank 1
    SIGKILLed before its 6th batch; the survivors reset and finish with the
    restarted rank, every rank holding the same weights and optimizer
    variables (momentum, step count) and state.epoch at the end."""
    run = keras_death
    assert_recovered_from_a_death(run, 3)
    assert_same_on_every_rank(run, "weights")
    assert_same_on_every_rank(run, "optimizer")
    for r, d in run.ranks.items():
        assert (d["epoch"], d["batch"]) == (KERAS_EPOCHS, 0), (r, d["epoch"], d["batch"])
        assert d["final_loss"] < 0.05 * d["first_loss"], (r, d["first_loss"], d["final_loss"])


def test_keras_callbacks_commit_per_batch_and_at_each_epoch_end(keras_plain):
    """CommitStateCallback(batches_per_commit=2) after the Update callbacks:
    4 batches an epoch commit after batches 1 and 3 (state.batch the batch's
    index) and at the epoch's end (state.epoch advanced, state.batch 0)."""
    run = keras_plain
    assert run.returncode == 0, run.why()
    assert sorted(run.ranks) == [0, 1], run.why()
    expected = [[0, 1], [0, 3], [1, 0], [1, 1], [1, 3], [2, 0]]
    for r, d in run.ranks.items():
        assert d["commits"] == expected, (r, d["commits"])
        assert (d["epoch"], d["batch"], d["resets"]) == (2, 0, 0)
    assert_same_on_every_rank(run, "weights")


def test_keras_epoch_callback_counts_from_initial_epoch():
    """In one process, with a stand-in state: fit(initial_epoch=1, epochs=3)
    (Keras numbers the epochs 1 and 2) ends with state.epoch 3, as
    fit(epochs=2) from state.epoch 1 does; commits after every 2nd batch and
    at each epoch's end."""
    pytest.importorskip("tensorflow")
    import keras
    import numpy as np
    from kolo.tensorflow.keras import elastic

    class Recorder:
        def __init__(self):
            self.epoch, self.batch, self.commits = 1, 0, []

        def commit(self):
            self.commits.append((self.epoch, self.batch))

    x = np.zeros((8, 2), np.float32)
    for fit_args in ({"initial_epoch": 1, "epochs": 3}, {"epochs": 2}):
        state = Recorder()
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(x, x[:, :1], batch_size=2, verbose=0, shuffle=False, **fit_args,
                  callbacks=[elastic.UpdateBatchStateCallback(state),
                             elastic.UpdateEpochStateCallback(state),
                             elastic.CommitStateCallback(state, batches_per_commit=2)])
        assert (state.epoch, state.batch) == (3, 0), fit_args
        assert state.commits == [(1, 1), (1, 3), (2, 0), (2, 1), (2, 3), (3, 0)], fit_args


def test_tensorflow_state_syncs_commits_and_restores(keras_plain):
    """TensorFlowState over two tf.Variables that start at rank + 1 and
    10 * (rank + 1): run's sync gives every rank rank 0's values; 3 steps of
    w -= 0.5 * sum(rank + 1), b += 1; restore() brings the last commit back
    after the variables and state.step were overwritten."""
    run = keras_plain
    assert run.returncode == 0, run.why()
    for r, d in run.ranks.items():
        s = d["tensorflow_state"]
        assert s["after_sync"] == [[1.0, 1.0, 1.0], 10.0], (r, s)
        assert s["trained"] == [[-3.5, -3.5, -3.5], 13.0], (r, s)
        assert s["restored"] == s["trained"] and s["restored_step"] == 3, (r, s)


def test_tensorflow_state_in_a_tf1_graph_with_a_session():
    """TensorFlowState(session=...): the variable starts at rank + 1 on each
    rank; after run's sync it is rank 0's, 3 committed steps add [3, 30],
    and restore() undoes a fourth step that was not committed."""
    pytest.importorskip("tensorflow")
    run = run_elastic(2, 1, worker("elastic_tf_worker.py"), ["--tf1-graph"])
    assert run.returncode == 0, run.why()
    assert sorted(run.ranks) == [0, 1], run.why()
    for r, d in run.ranks.items():
        s = d["tf1_graph"]
        assert s["after_sync"] == [1.0, 0.0], (r, s)
        assert s["trained"] == [4.0, 30.0], (r, s)
        assert s["restored"] == [4.0, 30.0] and s["restored_step"] == 3, (r, s)


def test_framework_elastic_modules_have_horovods_names():
    """The names horovod.{tensorflow,tensorflow.keras,torch}.elastic have;
    kolo.tensorflow.keras, now a package, keeps its names, and its `elastic`
    is its own even when kolo.tensorflow.elastic was imported first."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("torch")
    code = (
        "import kolo.elastic as ke\n"
        "import kolo.tensorflow.elastic\n"  # before the Keras package, on purpose
        "import kolo.tensorflow.keras as hvdk\n"
        "import kolo.tensorflow as hvd\n"
        "from kolo.tensorflow.keras import DistributedOptimizer, callbacks, elastic\n"
        "import kolo.torch.elastic as te\n"
        "for m in (hvd.elastic, hvdk.elastic, te):\n"
        "    assert m.State is ke.State and m.ObjectState is ke.ObjectState\n"
        "    assert m.HostsUpdatedInterrupt is ke.HostsUpdatedInterrupt\n"
        "    assert callable(m.run)\n"
        "assert issubclass(hvd.elastic.TensorFlowKerasState, ke.ObjectState)\n"
        "assert issubclass(hvd.elastic.TensorFlowState, ke.ObjectState)\n"
        "assert hvdk.elastic is elastic and hvd.elastic is not elastic\n"
        "assert issubclass(elastic.KerasState, hvd.elastic.TensorFlowKerasState)\n"
        "for n in ('CommitStateCallback', 'UpdateBatchStateCallback',"
        " 'UpdateEpochStateCallback'):\n"
        "    assert hasattr(elastic, n), n\n"
        "assert issubclass(te.TorchState, ke.ObjectState) and te.ElasticSampler\n"
        "assert hvdk.callbacks.BroadcastGlobalVariablesCallback and DistributedOptimizer\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=120,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout[-3000:]


@pytest.mark.skipif(not os.path.exists(DATA), reason="dataset-fashion-mnist not installed")
def test_keras_mnist_elastic_example():
    """examples/keras_mnist_elastic.py under kolorun -np 2 --min-np 1 on a
    subset: both ranks finish the epoch with the same weights."""
    pytest.importorskip("tensorflow")
    run = run_elastic(2, 1, os.path.join(REPO, "examples", "keras_mnist_elastic.py"),
                      ["--epochs", "1", "--samples", "2048", "--steps-per-epoch", "6",
                       "--batches-per-commit", "3"])
    assert run.returncode == 0, run.why()
    lines = re.findall(r"rank (\d)/2: epoch (\d+) weights sha256 (\w+) ", run.output)
    assert sorted(r for r, _, _ in lines) == ["0", "1"], run.why()
    assert {e for _, e, _ in lines} == {"1"}, lines
    assert lines[0][2] == lines[1][2], f"weights differ across ranks: {lines}"


def test_torch_optimizer_of_a_one_rank_elastic_job_is_ready_to_grow(tmp_path):
    """An elastic job may start with one rank and grow: its
    DistributedOptimizer hooks every gradient from the start, and a step on
    one rank leaves the gradient as backward computed it."""
    pytest.importorskip("torch")
    script = tmp_path / "one_rank.py"
    script.write_text(
        "import json, os, torch, kolo.torch as hvd\n"
        "hvd.init()\n"
        "model = torch.nn.Linear(3, 1)\n"
        "opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),\n"
        "                               named_parameters=model.named_parameters())\n"
        "for _ in range(2):\n"
        "    opt.zero_grad()\n"
        "    model(torch.ones(4, 3)).sum().backward()\n"
        "    want = [p.grad.clone() for p in model.parameters()]\n"
        "    opt.step()\n"
        "    same = all(torch.equal(p.grad, w) for p, w in zip(model.parameters(), want))\n"
        "out = {'hooked': len(opt._hook_handles) > 0, 'same': same, 'size': hvd.size()}\n"
        "with open(os.path.join(os.environ['KOLO_TEST_OUT'], 'rank0.json'), 'w') as f:\n"
        "    json.dump(out, f)\n")
    run = run_elastic(1, 1, str(script))
    assert run.returncode == 0, run.why()
    assert run.ranks[0] == {"hooked": True, "same": True, "size": 1}, run.why()


def test_torch_state_keeps_every_module_optimizer_and_scheduler_by_state_dict():
    """More models, optimizers and schedulers as keyword arguments stay the
    same objects and are rolled back by restore(), as the model is."""
    torch = pytest.importorskip("torch")
    from kolo.torch.elastic import TorchState

    model, disc = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    disc_opt = torch.optim.SGD(disc.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    state = TorchState(model, opt, disc=disc, disc_opt=disc_opt, sched=sched, epoch=3)
    assert state.disc is disc and state.disc_opt is disc_opt and state.sched is sched
    before = [p.detach().clone() for p in disc.parameters()]
    with torch.no_grad():
        for p in disc.parameters():
            p.add_(1.0)
    opt.step()
    sched.step()
    state.epoch = 4
    state.restore()
    assert all(torch.equal(p, b) for p, b in zip(disc.parameters(), before))
    assert sched.last_epoch == 0 and sched.optimizer is opt
    assert state.disc is disc and state.epoch == 3
