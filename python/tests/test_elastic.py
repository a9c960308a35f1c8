"""Elastic training on one node, end to end through kolorun and a private kolod.

The job (workers/elastic_worker.py) is full-batch gradient descent with the
rows sharded over however many ranks an epoch has, so its result does not
depend on the membership: every rank must end with the weights of the same
descent run in one process, whatever died or joined on the way. That is the
"accuracy equal to an undisturbed run" criterion, checked to 1e-9.

What a membership change means for a program (test_process_sets_*): a reset
ends the old epoch's process sets (their ids answer NOT_FOUND, collectives on
them FAILED_PRECONDITION) and the ids start afresh, so sets are added again in
a reset callback, in the same order on every rank (joiners add theirs before
their first step).

Timing figures (death -> first step of the next epoch) are printed (pytest -s)
and only bounded generously: the test machines are small and shared.
"""

import json
import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

from conftest import WORKERS, kolorun_job, kolorun_path, rank_records, worker

pytest.importorskip("kolo")  # elastic_worker imports it.
sys.path.insert(0, WORKERS)
from elastic_worker import reference  # noqa: E402  (the workers folder is on the path now)

# Each launch ends well within this (a few seconds of steps); a hang fails it.
LAUNCH_TIMEOUT_S = 60
TOLERANCE = 1e-9


def koloctl_path():
    """koloctl beside kolorun (a folder of prebuilt binaries) or in bazel-bin."""
    candidates = [os.environ.get("KOLO_KOLOCTL", ""),
                  os.path.join(os.path.dirname(kolorun_path()), "koloctl"),
                  os.path.join(os.path.dirname(kolorun_path()), "..", "..", "koloctl", "koloctl")]
    for path in candidates:
        if path and os.path.exists(path):
            return os.path.abspath(path)
    pytest.skip(f"koloctl not built (looked at {candidates})")


class ElasticFiles:
    """What the processes of one launch wrote to $KOLO_TEST_OUT."""

    def __init__(self, out_dir):
        self.results = rank_records(out_dir)
        self.death_times = []
        path = os.path.join(out_dir, "death.time")
        if os.path.exists(path):
            with open(path) as f:
                self.death_times = [float(line) for line in f if line.strip()]


class ElasticRun:
    """The outcome of one elastic kolorun launch, its $KOLO_TEST_OUT read back."""

    def __init__(self, returncode, output, files, seconds):
        self.returncode = returncode
        self.output = output
        self.seconds = seconds
        self.results = files.results  # final rank -> the record its process wrote
        self.death_times = files.death_times

    def where(self):
        """Context for an assertion message: the exit status and output tail."""
        tail = self.output[-5000:]
        return f"\nkolorun exit status {self.returncode}\n--- output tail ---\n{tail}"

    def survivors(self):
        return [r for r in self.results.values() if not r["joiner"]]

    def joiners(self):
        return [r for r in self.results.values() if r["joiner"]]


def launch_elastic(np_, script, worker_args=(), kolorun_args=(), setup=None,
                   timeout=LAUNCH_TIMEOUT_S):
    """Runs `script` on np_ ranks under `kolorun -np np_ KOLORUN_ARGS` with a
    private kolod; `setup(out_dir)` may return more kolorun arguments (a
    discovery script written there)."""
    code, output, files, seconds = kolorun_job(
        np_, script, worker_args, kolorun_args, timeout=timeout, setup=setup,
        collect=ElasticFiles)
    return ElasticRun(code, output, files, seconds)


def assert_weights(run, steps, size):
    """Every rank of the final epoch finished every step with the same weights,
    those of the single-process descent."""
    assert sorted(run.results) == list(range(size)), \
        f"ranks that finished: {sorted(run.results)}, want 0..{size - 1}" + run.where()
    want = reference(steps)
    for rank, rec in sorted(run.results.items()):
        assert rec["steps"] == steps and rec["size"] == size, (rank, rec["steps"], rec["size"])
        w = np.array(rec["w"])
        err = float(np.max(np.abs(w - want)))
        assert err <= TOLERANCE, f"rank {rank}: max |w - reference| = {err:g}" + run.where()
        assert np.array_equal(w, np.array(run.results[0]["w"])), \
            f"rank {rank}'s weights differ from rank 0's" + run.where()


# 1 of 3 ranks dies at step 20. Steps are slowed so that the replacement
# (restarted after kolorun's 1 s back-off, then a Python start) joins well
# before the end: 80 steps after the death at 0.05 s each.
KILL_STEPS, KILL_AT = 100, 20


@pytest.fixture(scope="module")
def kill_one_run():
    return launch_elastic(
        3, worker("elastic_worker.py"),
        ["--steps", str(KILL_STEPS), "--victim", "1", "--die-at", str(KILL_AT),
         "--step-sleep", "0.05", "--koloctl", koloctl_path()],
        ["--min-np", "2"])


@pytest.fixture(scope="module")
def undisturbed_run():
    return launch_elastic(3, worker("elastic_worker.py"), ["--steps", str(KILL_STEPS)])


def test_killed_rank_survivors_go_on_and_a_replacement_joins(kill_one_run):
    run = kill_one_run
    assert run.returncode == 0, "the job should succeed despite the death" + run.where()
    assert len(run.death_times) == 1, run.death_times
    assert_weights(run, KILL_STEPS, 3)

    # The survivors are the processes that started in epoch 1: they went on
    # in their own processes, through a reset into epoch 2 (2 ranks) and one
    # into epoch 3 (the replacement joining).
    survivors = run.survivors()
    assert len(survivors) == 2, [(r["rank"], r["pid"], r["joiner"]) for r in run.results.values()]
    for rec in survivors:
        epochs = rec["epochs"]
        assert sorted(epochs, key=int) == ["1", "2", "3"], (rec["rank"], epochs)
        assert epochs["1"]["size"] == 3 and epochs["2"]["size"] == 2 \
            and epochs["3"]["size"] == 3, epochs
        # Epoch 2 resumed from the last commit before the death.
        assert epochs["2"]["step"] == KILL_AT + 1, epochs
        assert rec["resets"] == 2, rec["resets"]
        assert re.search(rf"attached \(pid {rec['pid']}, [^)]*epoch 1\)", run.output), \
            f"pid {rec['pid']} not attached in epoch 1" + run.where()
        assert re.search(rf"attached \(pid {rec['pid']}, [^)]*epoch 3\)", run.output), \
            f"pid {rec['pid']} not attached in epoch 3" + run.where()

    # kolorun restarted the dead rank once, as a joiner; it took part from a
    # commit of epoch 3 on, with the state synced from rank 0.
    joiners = run.joiners()
    assert len(joiners) == 1, run.where()
    joiner = joiners[0]
    assert list(joiner["epochs"]) == ["3"] and joiner["resets"] == 0, joiner["epochs"]
    assert joiner["epochs"]["3"]["step"] > KILL_AT + 1, joiner["epochs"]
    assert joiner["pid"] not in {r["pid"] for r in survivors}
    assert run.output.count("as a joiner") == 2, run.where()  # "restarting ... as" + "started"
    assert "process [1] killed by signal SIGKILL" in run.output, run.where()
    assert "started process [3] as a joiner" in run.output, run.where()


def test_result_equals_an_undisturbed_run(kill_one_run, undisturbed_run):
    assert undisturbed_run.returncode == 0, undisturbed_run.where()
    assert_weights(undisturbed_run, KILL_STEPS, 3)
    # Not elastic: no epochs, no resets.
    assert all(list(r["epochs"]) == ["0"] and r["resets"] == 0
               for r in undisturbed_run.results.values())
    disturbed = np.array(kill_one_run.results[0]["w"])
    calm = np.array(undisturbed_run.results[0]["w"])
    err = float(np.max(np.abs(disturbed - calm)))
    assert err <= TOLERANCE, f"disturbed vs undisturbed: max |dw| = {err:g}"


def test_koloctl_lists_the_epochs(kill_one_run):
    run = kill_one_run
    assert 0 in run.results, run.where()
    shown = run.results[0].get("koloctl", {})
    text, raw = shown.get("text", ""), shown.get("json", "")
    assert "epochs (elastic; now epoch 3)" in text, text
    rows = {}
    for line in text[text.index("epochs (elastic"):].splitlines()[2:]:
        if not line.strip():
            break
        cells = line.split(None, 5)
        rows[int(cells[0])] = {"size": int(cells[2]), "joined": cells[3], "left": int(cells[4]),
                               "why": cells[5] if len(cells) > 5 else ""}
    assert rows[1] == {"size": 3, "joined": "-", "left": 0, "why": "started"}, text
    assert rows[2]["size"] == 2 and rows[2]["joined"] == "-" and rows[2]["left"] == 1, text
    assert rows[2]["why"].startswith("rank 1 died"), text
    assert rows[3]["size"] == 3 and rows[3]["joined"] == "2" and rows[3]["left"] == 0, text
    assert rows[3]["why"], text

    job = json.loads(raw)["job"]
    epochs = {int(e["epoch"]): e for e in job["epochs"]}
    assert epochs[2]["left"] == 1 and epochs[2].get("joined", []) == [], epochs
    assert "died" in epochs[2]["reason"], epochs
    assert epochs[3]["joined"] == [2], epochs
    assert 0 < epochs[2]["at_s"] < epochs[3]["at_s"], epochs


def test_recovery_time_from_death_to_next_epoch(kill_one_run):
    run = kill_one_run
    assert run.death_times and run.survivors(), run.where()
    death = run.death_times[0]
    first_step = min(r["epochs"]["2"]["first_step_done"] for r in run.survivors())
    joined = min(r["epochs"]["3"]["first_step_done"] for r in run.results.values())
    recovery, rejoin = first_step - death, joined - death
    figure = (f"death -> first step of epoch 2 (survivors): {recovery:.3f} s; "
              f"death -> first step of epoch 3 (with the replacement, after kolorun's 1 s "
              f"back-off): {rejoin:.3f} s")
    print(f"\n[elastic figure] {figure}")
    assert 0 < recovery <= 10, figure
    assert recovery < rejoin <= 30, figure


@pytest.mark.parametrize("case", ["rank0_dies", "joiner_dies_too"])
def test_other_failures_above_min_np_still_give_the_reference(case):
    """Rank 0 (the root the state is synced from) dying; or the replacement
    dying right after it joined, which blocklists the machine (2 failures):
    the 2 ranks left are still --min-np, so the job finishes with them."""
    if case == "rank0_dies":
        worker_args, kolorun_args, final_size, deaths = \
            ["--victim", "0"], [], 3, 1
    else:
        worker_args, kolorun_args, final_size, deaths = \
            ["--victim", "1", "--die-again"], ["--max-failures-per-host", "2"], 2, 2
    run = launch_elastic(
        3, worker("elastic_worker.py"),
        ["--steps", str(KILL_STEPS), "--die-at", str(KILL_AT), "--step-sleep", "0.05",
         *worker_args],
        ["--min-np", "2", *kolorun_args])
    assert run.returncode == 0, run.where()
    assert len(run.death_times) == deaths, run.death_times
    assert_weights(run, KILL_STEPS, final_size)
    assert len(run.survivors()) == 2, run.where()
    if case == "joiner_dies_too":
        assert "blocklisting it" in run.output, run.where()
        # Epochs 1 (3 ranks), 2 (2), 3 (the joiner, which died), 4 (2 again).
        for rec in run.survivors():
            assert rec["epochs"]["4"]["size"] == 2, rec["epochs"]


@pytest.mark.parametrize("case", ["joiner_dies_again", "blocklisted_at_once"])
def test_below_min_np_ends_the_job_with_a_clear_error(case):
    if case == "joiner_dies_again":
        # The victim dies, its replacement dies at once too: the second
        # failure blocklists the machine and leaves 1 rank of --min-np 2.
        np_, kolorun_args, extra, deaths = 2, ["--min-np", "2", "--max-failures-per-host", "2"], \
            ["--die-again"], 2
    else:
        np_, kolorun_args, extra, deaths = 3, ["--min-np", "3", "--max-failures-per-host", "1"], \
            [], 1
    run = launch_elastic(
        np_, worker("elastic_worker.py"),
        ["--steps", "400", "--victim", "1", "--die-at", "5", "--step-sleep", "0.02", *extra],
        # A long --grace_s: the ranks left below --min-np cannot finish (kolod
        # forms no epoch for them), so kolorun must not wait it out.
        [*kolorun_args, "--grace_s", "60", "--kill_grace_s", "2"])
    # The status of the last failed rank: 128 + SIGKILL.
    assert run.returncode == 137, run.where()
    assert run.seconds < 40, f"took {run.seconds:.1f} s: waited out --grace_s?" + run.where()
    assert "sending SIGTERM to" in run.output, run.where()
    assert len(run.death_times) == deaths, run.death_times
    assert not run.results, "no rank should have finished its steps" + run.where()
    min_np = kolorun_args[1]
    assert re.search(rf"\d+ rank\(s\) remain, fewer than --min-np {min_np}; ending the job",
                     run.output), run.where()
    assert "blocklisting it" in run.output, run.where()


@pytest.mark.parametrize("host", ["localhost", "hostname"])
def test_discovery_adds_a_rank(host):
    name = socket.gethostname() if host == "hostname" else "localhost"

    def setup(out_dir):
        script = os.path.join(out_dir, "discover.sh")
        grow = os.path.join(out_dir, "grow")
        with open(script, "w") as f:
            f.write(f"#!/bin/sh\nif [ -e '{grow}' ]; then echo '{name}:3'; "
                    f"else echo '{name}:2'; fi\n")
        os.chmod(script, 0o755)
        return ["--host-discovery-script", script, "--discovery-interval-s", "0.5"]

    steps, grow_at = 100, 10
    run = launch_elastic(
        2, worker("elastic_worker.py"),
        ["--steps", str(steps), "--grow-at", str(grow_at), "--step-sleep", "0.05"],
        ["--min-np", "2", "--max-np", "3"], setup=setup)
    assert run.returncode == 0, run.where()
    assert_weights(run, steps, 3)
    assert f"hosts now {name}:3 (were {name}:2)" in run.output, run.where()
    joiners = run.joiners()
    assert len(joiners) == 1 and len(run.survivors()) == 2, run.where()
    assert list(joiners[0]["epochs"]) == ["2"], joiners[0]
    assert joiners[0]["epochs"]["2"]["step"] > grow_at + 1, joiners[0]
    for rec in run.survivors():
        assert rec["epochs"]["1"]["size"] == 2 and rec["epochs"]["2"]["size"] == 3, rec["epochs"]
    # One machine, one private kolod: the discovered name is this machine.
    assert run.output.count("serving on") == 1, run.where()
    assert "ignor" not in run.output, run.where()


def test_process_sets_and_grouped_collectives_across_a_death():
    steps, die_at = 60, 12
    run = launch_elastic(
        3, worker("elastic_sets_worker.py"),
        ["--steps", str(steps), "--victim", "1", "--die-at", str(die_at), "--step-sleep", "0.05"],
        ["--min-np", "2"])
    assert run.returncode == 0, run.where()
    assert_weights(run, steps, 3)
    bad = [(rank, e) for rank, r in run.results.items() for e in r["steps_log"] if not e[3]]
    assert not bad, f"wrong results: {bad[:5]}"
    for rec in run.survivors():
        by_step = {(e[0], e[1]): e for e in rec["steps_log"]}
        # Right before the death (epoch 1, 3 ranks) and right after (epoch
        # 2, the survivors renumbered 0 and 1, both in the re-added set).
        before, after = by_step[(1, die_at)], by_step[(2, die_at + 1)]
        assert before[2] == 3 and after[2] == 2, (before, after)
        assert "pair set" in after[4] and "[1.0]" in after[4], after
        # The old epoch's set is gone after each reset; re-adding reuses id 1.
        assert len(rec["old_set_probes"]) == 2, rec["old_set_probes"]
        for probe in rec["old_set_probes"]:
            assert "NOT_FOUND" in probe["size"], probe
            # The old epoch's ProcessSet object says so instead of silently
            # addressing a new set that reuses its id.
            assert "ValueError" in probe["object"] and "epoch that ended" in probe["object"], probe
            assert "FAILED_PRECONDITION" in probe["allreduce"] \
                and "does not exist" in probe["allreduce"], probe
        assert [ps for _, ps in rec["set_ids"]] == [1, 1, 1], rec["set_ids"]
    joiner = run.joiners()
    assert len(joiner) == 1 and joiner[0]["steps_log"][0][0] == 3, run.where()


@pytest.mark.parametrize("flags,message", [
    (["-np", "3", "--min-np", "5"], "--min-np 5 is more than -np 3"),
    (["-np", "3", "--max-np", "2"], "--max-np 2 is less than -np 3"),
    (["-np", "2", "--min-np", "0"], "--min-np must be at least 1"),
])
def test_wrong_elastic_flags_are_a_usage_error(flags, message):
    proc = subprocess.run([kolorun_path(), *flags, "--", "true"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=30)
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stdout, proc.stdout
