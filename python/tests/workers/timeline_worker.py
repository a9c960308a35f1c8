"""A job that records its timeline and is checked from outside once its
ranks are gone (test_torch.py):
  env-shutdown   KOLO_TIMELINE alone: init() starts it, shutdown() writes it
  env-exit       the same without shutdown(): interpreter exit writes it
  explicit PATH  start_timeline(PATH) / stop_timeline() around the work
"""

import sys

import torch

import kolo.torch as hvd

mode = sys.argv[1]
hvd.init()
R, N = hvd.rank(), hvd.size()
if mode == "explicit":
    hvd.start_timeline(sys.argv[2])
for i in range(3):
    got = hvd.allreduce(torch.full([4], float(R)), op=hvd.Sum, name=f"timeline.{i}")
    assert got.tolist() == [float(N * (N - 1) / 2)] * 4, got
if mode == "explicit":
    hvd.stop_timeline()
if mode != "env-exit":
    hvd.shutdown()
