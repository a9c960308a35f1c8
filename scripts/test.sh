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

python3 - <<'PY'
import glob, os, xml.etree.ElementTree as ET
passed = failed = skipped = 0
for path in glob.glob("bazel-testlogs/**/test.xml", recursive=True):
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        failed += 1
        continue
    cases = root.iter("testcase")
    found = False
    for case in cases:
        found = True
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.get("status") == "notrun" or case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    if not found:
        # A non-gtest test (e.g. a shell test): judge it by its report.
        errors = int(root.get("errors", "0") or 0) + int(root.get("failures", "0") or 0)
        if errors:
            failed += 1
        else:
            passed += 1
# Targets that never ran (build failures) leave no report: count them too.
with open(os.environ["KOLO_TEST_LOG"], errors="replace") as log:
    for l in log:
        if l.startswith("//") and ("FAILED TO BUILD" in l or "NO STATUS" in l):
            failed += 1
line = f"{passed} passed, {failed} failed"
if skipped:
    line += f", {skipped} skipped"
print(line)
PY
exit $rc
