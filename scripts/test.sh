#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds everything and runs
# every test (GPU-tagged tests are filtered out by .bazelrc unless
# --config=gpu is given). Ends with the line "N passed, N failed", counting
# test cases from the test reports.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh || exit 1

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bazel test //... "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
export KOLO_TEST_LOG="$log"

# The Python SDK's tests (python/tests), in the venv scripts/install_python.sh
# builds; their cases count in the summary below through the JUnit report.
pyxml=$(mktemp --suffix=.xml)
rm -f "$pyxml"
trap 'rm -f "$log" "$pyxml"' EXIT
if scripts/install_python.sh; then
  "${KOLO_VENV:-.venv}/bin/python" -m pytest -q python/tests --junitxml="$pyxml" || rc=1
else
  rc=1
fi
export KOLO_PYTEST_XML="$pyxml"

# CI only (.ci/run sets KOLO_CI=1): the fuzz targets for a short budget, and
# ASan+UBSan over the code that reads untrusted input (the whole suite under
# ASan takes about half an hour more on two cores; scripts/sanitize.sh runs
# it). Each builds in its own output base; their verdicts count below.
extra_log=$(mktemp)
trap 'rm -f "$log" "$pyxml" "$extra_log"' EXIT
# kolod's folders depend one way (tools/check_layers.sh): one case.
if tools/check_layers.sh 2>&1 | tee -a "$extra_log"; then
  echo "layers ok" >>"$extra_log"
else
  rc=1
  echo "layers FAILED" >>"$extra_log"
fi
if [[ "${KOLO_CI:-}" == 1 ]]; then
  KOLO_BAZEL_FLAGS="${KOLO_BAZEL_FLAGS:---jobs=2}" \
    scripts/fuzz.sh "${KOLO_CI_FUZZ_SECONDS:-10}" 2>&1 | tee -a "$extra_log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { rc=1; echo "EXTRA_STAGE_FAILED fuzz" >>"$extra_log"; }
  read -r -a asan_targets <<<"${KOLO_CI_ASAN_TARGETS:-//common/... //daemon/session/... //daemon/negotiation/... //daemon/wire/... //daemon/coordinator/... //daemon/elastic/... //daemon/transport/... //daemon/backend/cpu/... //daemon:config_test}"
  scripts/sanitize.sh asan "${asan_targets[@]}" 2>&1 | sed 's/^\(\/\/[^ ]*\)/asan \1/' | tee -a "$extra_log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { rc=1; echo "EXTRA_STAGE_FAILED asan" >>"$extra_log"; }
fi
export KOLO_EXTRA_LOG="$extra_log"

python3 - <<'PY'
# Counts test cases from the reports of the targets this run tested; a target
# without a report (it failed to build, or the build stopped) counts as one
# failure, and so does a build that never started.
import os, re, xml.etree.ElementTree as ET
passed = failed = skipped = 0
failures = []  # what failed, named once each before the summary line
targets = {}
build_failed = False
with open(os.environ["KOLO_TEST_LOG"], errors="replace") as log:
    for line in log:
        m = re.match(r"^(//\S+)\s+(\(cached\) )?(PASSED|FAILED|FLAKY|TIMEOUT|NO STATUS|FAILED TO BUILD|SKIPPED)", line)
        if m:
            targets[m.group(1)] = m.group(3)
        if "Build did NOT complete successfully" in line or "Couldn't start the build" in line:
            build_failed = True
for target, verdict in targets.items():
    if verdict == "SKIPPED":
        skipped += 1
        continue
    pkg, name = target[2:].split(":")
    path = os.path.join("bazel-testlogs", pkg, name, "test.xml")
    counted = False
    if verdict in ("PASSED", "FAILED", "FLAKY", "TIMEOUT") and os.path.exists(path):
        try:
            root = ET.parse(path).getroot()
            for case in root.iter("testcase"):
                counted = True
                if case.find("failure") is not None or case.find("error") is not None:
                    failed += 1
                    failures.append(f"{target} {case.get('name')}")
                elif case.get("status") == "notrun" or case.find("skipped") is not None:
                    skipped += 1
                else:
                    passed += 1
        except ET.ParseError:
            pass
    if not counted or (verdict != "PASSED" and verdict != "FLAKY" and failed == 0):
        if verdict in ("PASSED", "FLAKY"):
            passed += 1
        else:
            failed += 1
            failures.append(f"{target} ({verdict})")
if build_failed and not targets:
    failed += 1
    failures.append("bazel build (did not complete)")
# pytest's JUnit report: its cases, or one failure when it wrote none.
pyxml = os.environ.get("KOLO_PYTEST_XML")
if pyxml:
    try:
        for case in ET.parse(pyxml).getroot().iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
                failures.append(f"pytest {case.get('classname')}::{case.get('name')}")
            elif case.find("skipped") is not None:
                skipped += 1
            else:
                passed += 1
    except (OSError, ET.ParseError):
        failed += 1
        failures.append("pytest (no report)")
# The layer check (one case), and the CI stages: one case per fuzz target ("//t  ok: ...") and per target
# under ASan ("asan //t  PASSED"); a stage that failed without naming a
# target (its build broke) counts as one failure.
extra = os.environ.get("KOLO_EXTRA_LOG")
if extra and os.path.exists(extra):
    named = set()
    with open(extra, errors="replace") as f:
        for line in f:
            m = re.match(r"^(//\S+)\s+(ok|FAILED)\b", line)
            if m:
                named.add("fuzz")
                if m.group(2) == "ok":
                    passed += 1
                else:
                    failed += 1
                    failures.append(f"fuzz {m.group(1)}")
                continue
            m = re.match(r"^asan (//\S+)\s+(\(cached\) )?(PASSED|FLAKY|FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD|INCOMPLETE)", line)
            if m:
                named.add("asan")
                if m.group(3) in ("PASSED", "FLAKY"):
                    passed += 1
                else:
                    failed += 1
                    failures.append(f"asan {m.group(1)} ({m.group(3)})")
                continue
            m = re.match(r"^layers (ok|FAILED)$", line)
            if m:
                if m.group(1) == "ok":
                    passed += 1
                else:
                    failed += 1
                    failures.append("layers")
                continue
            m = re.match(r"^EXTRA_STAGE_FAILED (\w+)", line)
            if m and m.group(1) not in named:
                failed += 1
                failures.append(f"{m.group(1)} stage (no target named)")
for what in failures:
    print(f"FAILED: {what}")
line = f"{passed} passed, {failed} failed"
if skipped:
    line += f", {skipped} skipped"
print(line)
PY
exit $rc
