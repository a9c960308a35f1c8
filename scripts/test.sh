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

python3 - <<'PY'
# Counts test cases from the reports of the targets this run tested; a target
# without a report (it failed to build, or the build stopped) counts as one
# failure, and so does a build that never started.
import os, re, xml.etree.ElementTree as ET
passed = failed = skipped = 0
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
if build_failed and not targets:
    failed += 1
# pytest's JUnit report: its cases, or one failure when it wrote none.
pyxml = os.environ.get("KOLO_PYTEST_XML")
if pyxml:
    try:
        for case in ET.parse(pyxml).getroot().iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            elif case.find("skipped") is not None:
                skipped += 1
            else:
                passed += 1
    except (OSError, ET.ParseError):
        failed += 1
line = f"{passed} passed, {failed} failed"
if skipped:
    line += f", {skipped} skipped"
print(line)
PY
exit $rc
