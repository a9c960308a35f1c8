#!/usr/bin/env bash
# The soak in miniature, so that it cannot rot: a few hundred checked
# collectives in each of two jobs, ten short jobs, on one kolod (or, with
# the phase as the first argument, across two).
# Asserts only that every collective and job completed with the right result;
# the figures of so short a run are printed, not judged.
set -euo pipefail
SOAK_PRIVATE_SHM=0 exec scripts/soak.sh --phases="${1:-1}" --bin_dir="$PWD" --duration_s=2 --min_collectives=400 \
  --short_jobs=10 --max_elements=10000 --report_only
