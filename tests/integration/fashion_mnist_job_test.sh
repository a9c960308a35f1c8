#!/usr/bin/env bash
# Runs the main job end to end on a subset of the data and checks that every
# rank finished with identical weights and a sane accuracy.
set -euo pipefail
data=/usr/share/datasets/fashion-mnist
if [[ ! -f $data/train-images-idx3-ubyte.gz ]]; then
  echo "SKIP: $data is missing (Debian package dataset-fashion-mnist)"
  exit 0
fi
out="$TEST_TMPDIR/job.log"
client/kolorun/kolorun -np 2 --private_daemon --kolod daemon/kolod -- \
  examples/fashion_mnist/fashion_mnist --data "$data" --epochs 2 --limit_train 12000 \
  >"$out" 2>&1 || { cat "$out"; echo "FAIL: the job failed"; exit 1; }
cat "$out"
sums=$(grep -o 'fnv1a64=[0-9a-f]*' "$out" | sort -u)
count=$(grep -c 'fnv1a64=' "$out")
[[ $count -eq 2 ]] || { echo "FAIL: expected 2 checksums, got $count"; exit 1; }
[[ $(echo "$sums" | wc -l) -eq 1 ]] || { echo "FAIL: ranks disagree: $sums"; exit 1; }
acc=$(grep -o 'test_accuracy [0-9.]*' "$out" | tail -1 | awk '{print $2}')
python3 -c "import sys; sys.exit(0 if float('$acc') >= 0.75 else 1)" || {
  echo "FAIL: accuracy $acc below 0.75"; exit 1; }
echo "PASS: identical weights on both ranks, accuracy $acc"
