"""The `horovodrun` entry point (kolo._horovodrun): --config-file's YAML as
flags, the command line passed on unchanged, --check-build, and a 2-rank job
started through it."""

import os
import subprocess
import sys
import tempfile

import pytest

from conftest import REPO, kolod_path, kolorun_path

sys.path.insert(0, os.path.join(REPO, "python"))
from kolo import _horovodrun  # noqa: E402

HOROVOD_CONFIG = """\
# Horovod's own example config
controller: gloo

params:
  fusion_threshold_mb: 32
  cycle_time_ms: 10
  cache_capacity: 2048
  hierarchical_allreduce: true
  hierarchical_allgather: false

autotune:
  enabled: true
  log_file: 'horovod_autotune_log.txt'
  warmup_samples: 5
  steps_per_sample: 20
  bayes_opt_max_samples: 30
  gaussian_process_noise: 0.8

timeline:
  filename: "horovod timeline.json"   # quoted, with a space
  mark_cycles: true

stall_check:
  enabled: true
  warning_time_seconds: 120
  shutdown_time_seconds: 240

library_options:
  num_nccl_streams: 2

logging:
  level: INFO
"""


def test_command_line_passes_unchanged():
    argv = ["-np", "2", "-H", "a:1,b:1", "--verbose", "-p", "2222", "python", "t.py",
            "--config-file", "not-ours", "--check-build"]
    args, notes, check_build = _horovodrun.translate(argv)
    assert args == argv
    assert notes == [] and not check_build


def test_config_file_becomes_flags_before_the_command_lines_own():
    files = {"c.yaml": HOROVOD_CONFIG}
    args, notes, _ = _horovodrun.translate(
        ["-np", "2", "--config-file", "c.yaml", "--fusion-threshold-mb", "8", "python", "t.py"],
        read_file=files.__getitem__)
    assert args == [
        "--gloo",
        "--fusion-threshold-mb", "32", "--cycle-time-ms", "10", "--cache-capacity", "2048",
        "--hierarchical-allreduce",
        "--autotune", "--autotune-log-file", "horovod_autotune_log.txt",
        "--autotune-warmup-samples", "5", "--autotune-steps-per-sample", "20",
        "--autotune-bayes-opt-max-samples", "30", "--autotune-gaussian-process-noise", "0.8",
        "--timeline-filename", "horovod timeline.json", "--timeline-mark-cycles",
        "--stall-check-warning-time-seconds", "120", "--stall-check-shutdown-time-seconds", "240",
        "--log-level", "INFO",
        "-np", "2", "--fusion-threshold-mb", "8", "python", "t.py"]
    assert len(notes) == 1
    assert "library_options.num_nccl_streams" in notes[0]


def test_config_stall_check_disabled_and_equals_spelling():
    files = {"c": "stall_check:\n  enabled: false\n"}
    args, _, _ = _horovodrun.translate(["--config-file=c", "x"], read_file=files.__getitem__)
    assert args == ["--no-stall-check", "x"]


def test_minimal_reader_matches_the_layout():
    data = _horovodrun.parse_config(HOROVOD_CONFIG)
    assert data["controller"] == "gloo"
    assert data["params"]["hierarchical_allgather"] in (False, "false")
    assert data["timeline"]["filename"] == "horovod timeline.json"


@pytest.mark.parametrize("text, error", [
    ("params:\n  fusion_threshold: 3\n", "params.fusion_threshold is not a Horovod setting"),
    ("controller: nccl\n", "want gloo or mpi"),
    # The small reader finds the key outside a section; PyYAML (installed
    # with Lightning) reads a top-level key that is not a section.
    ("  orphan: 1\n", "outside a section|orphan: want a section of keys"),
])
def test_config_errors(text, error):
    with pytest.raises(_horovodrun.UsageError, match=error):
        _horovodrun.translate(["--config-file", "c", "x"], read_file={"c": text}.__getitem__)
    with pytest.raises(_horovodrun.UsageError):
        _horovodrun.translate(["--config-file", "/nonexistent/c.yaml", "x"])


def _horovodrun_cmd(*args):
    return [sys.executable, "-c",
            "import sys; from kolo._horovodrun import main; sys.exit(main())", *args]


def _env():
    env = dict(os.environ)
    env["KOLO_KOLORUN"] = kolorun_path()
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(REPO, "python")] + [p for p in [env.get("PYTHONPATH")] if p])
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def test_check_build():
    proc = subprocess.run(_horovodrun_cmd("--check-build"), env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout
    assert "Available Frameworks" in proc.stdout
    assert "PyTorch" in proc.stdout and "TensorFlow" in proc.stdout
    assert "[X] kolod" in proc.stdout
    assert "kolorun cannot see the Python package" not in proc.stdout
    assert proc.stdout.count("Available Frameworks") == 1


def test_two_ranks_through_horovodrun():
    program = ("import numpy, kolo; kolo.init(); "
               "r = kolo.allreduce(numpy.full(3, kolo.rank() + 1.0), op=kolo.Sum); "
               "print('sum', kolo.rank(), kolo.size(), r.tolist())")
    with tempfile.TemporaryDirectory(prefix="kolo-horovodrun-") as tmp:
        extra = ["--kolod", kolod_path()] if os.path.exists(kolod_path()) else []
        proc = subprocess.run(
            _horovodrun_cmd("-np", "2", "--socket", os.path.join(tmp, "kolod.sock"), *extra,
                            "--fusion-threshold-mb", "16", "--cycle-time-ms", "1",
                            sys.executable, "-c", program),
            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=120)
    assert proc.returncode == 0, proc.stdout
    for rank in (0, 1):
        assert f"[{rank}] sum {rank} 2 [3.0, 3.0, 3.0]" in proc.stdout, proc.stdout
    assert "KOLO_FUSION_THRESHOLD=16777216 for every rank" in proc.stdout
    assert "--cycle-time-ms 1: changes nothing here" in proc.stdout
