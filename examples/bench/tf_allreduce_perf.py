"""tf_allreduce_perf: allreduce through kolo.tensorflow's op, eagerly, as a
training script calls it (`hvd.allreduce(tensor, op=hvd.Sum)` on a TF tensor).

Run one process per rank under kolorun:

    kolorun -np 2 -- python examples/bench/tf_allreduce_perf.py [--csv]

It measures, per rank, the latency of an 8-byte allreduce (p50/p90/p99 over
--latency_iters calls after --latency_warmup) and the time of a
--bytes allreduce (median of --iters after --warmup), checks one result of
each, and prints (rank 0) the maximum over ranks of each figure, as
allreduce_perf does: the slowest rank bounds a synchronous step. busbw =
size / time * 2(n-1)/n.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kolo.tensorflow as hvd  # noqa: E402


def percentile(times, q):
    s = sorted(times)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def timed(tensor, name, warmup, iters):
    for _ in range(warmup):
        hvd.allreduce(tensor, op=hvd.Sum, name=name)
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        hvd.allreduce(tensor, op=hvd.Sum, name=name)
        times.append((time.perf_counter() - start) * 1e6)
    return times


def checked(tensor, name, size):
    """Wrong elements of one allreduce of (rank + 1) * tensor."""
    out = hvd.allreduce(tensor * (hvd.rank() + 1), op=hvd.Sum, name=name).numpy()
    want = tensor.numpy() * (size * (size + 1) // 2)
    return int(np.count_nonzero(out != want))


def max_over_ranks(values, name):
    return hvd.allreduce(tf.constant(values, tf.float64), op=hvd.Max, name=name).numpy()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bytes", type=int, default=64 << 20, help="bandwidth message size")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--latency_iters", type=int, default=5000)
    p.add_argument("--latency_warmup", type=int, default=500)
    p.add_argument("--csv", action="store_true", help="one CSV header and row")
    a = p.parse_args()
    hvd.init()
    n = hvd.size()

    small = tf.ones([2], tf.float32)
    lat = timed(small, "tfperf/latency", a.latency_warmup, a.latency_iters)
    lat_wrong = checked(small, "tfperf/latency", n)

    big = tf.ones([a.bytes // 4], tf.float32)
    bw = timed(big, "tfperf/bw", a.warmup, a.iters)
    bw_wrong = checked(big, "tfperf/bw", n)

    stats = max_over_ranks([percentile(lat, 0.5), percentile(lat, 0.9), percentile(lat, 0.99),
                            percentile(bw, 0.5), lat_wrong, bw_wrong], "tfperf/stats")
    p50, p90, p99, bw_us, lat_wrong, bw_wrong = stats
    busbw = a.bytes / (bw_us * 1e-6) * (2 * (n - 1) / n if n > 1 else 1) / 1e9
    if hvd.rank() == 0:
        ok = "OK" if lat_wrong == 0 and bw_wrong == 0 else "FAIL"
        if a.csv:
            print("ranks,lat_p50_us,lat_p90_us,lat_p99_us,bw_bytes,bw_time_us,busbw_gbps,check")
            print("%d,%.2f,%.2f,%.2f,%d,%.1f,%.3f,%s" % (n, p50, p90, p99, a.bytes, bw_us, busbw,
                                                         ok))
        else:
            print("# kolo.tensorflow eager allreduce, float32 sum, %d ranks" % n)
            print("8 B latency: p50 %.1f us, p90 %.1f us, p99 %.1f us" % (p50, p90, p99))
            print("%d B: %.1f us, busbw %.3f GB/s" % (a.bytes, bw_us, busbw))
            print("check: %s" % ok)
        sys.stdout.flush()
    hvd.shutdown()
    return 0 if lat_wrong == 0 and bw_wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
