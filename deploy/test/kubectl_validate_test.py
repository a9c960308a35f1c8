#!/usr/bin/env python3
"""Validates Kubernetes manifests offline with kubectl: no cluster is needed.

`kubectl apply|create --dry-run=client` still asks a server for its API
groups, so it cannot run without a cluster. What kubectl does offline:
  1. `kubectl annotate --local -f FILE K=V -o json` reads every document of
     the file: YAML syntax, apiVersion/kind/metadata of each object.
  2. `kubectl set env --local -f OBJECT -o json` decodes each object that has
     a pod template into its typed Go struct (the same code path a server's
     decoder uses): a field of the wrong type (a port as a string, a user as a
     name) fails here.
     A Kubeflow PyTorchJob (a custom resource kubectl has no type for)
     is checked through its replicas' pod templates, each decoded as a Pod.
  3. The typed object is compared with the input: a field the typed struct
     dropped is unknown to Kubernetes (a typo such as `hostPIDD`, a field at
     the wrong level). kubectl older than MIN_MINOR predates fields the
     manifests use; this step is skipped, with a note, for such a kubectl.
Skipped, with the reason printed (and recorded as skipped in the test
report), when kubectl is not installed. Debian ships kubectl as
kubernetes-client; scripts/install_deps.sh installs it where no kubectl is.

Usage: kubectl_validate_test.py MANIFEST...
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

# appArmorProfile (securityContext) is a field since Kubernetes 1.30.
MIN_MINOR = 30
MARK = "kolo.test/validated"
POD_TEMPLATE_KINDS = {"DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "Job", "Pod"}


def write_junit(name, skipped_reason=None, failure=None):
    path = os.environ.get("XML_OUTPUT_FILE")
    if not path:
        return
    from xml.sax.saxutils import quoteattr as q
    body = ""
    if skipped_reason:
        body = f"<skipped message={q(skipped_reason)}/>"
    elif failure:
        body = f"<failure message={q(failure)}/>"
    with open(path, "w") as out:
        out.write('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites><testsuite '
                  f'name="kubectl_validate_test" tests="1"><testcase name={q(name)}>{body}'
                  "</testcase></testsuite></testsuites>\n")


def kubectl(env, *args):
    out = subprocess.run(["kubectl", *args], capture_output=True, text=True, env=env, timeout=120)
    return out.returncode, out.stdout, out.stderr


def client_minor(env):
    rc, out, _ = kubectl(env, "version", "--client", "-o", "json")
    try:
        return int(re.match(r"\d+", json.loads(out)["clientVersion"]["minor"]).group(0))
    except (ValueError, KeyError, AttributeError):
        return None


def lost_fields(given, typed, path=""):
    """Paths present in `given` but missing or different in `typed`."""
    if isinstance(given, dict):
        if not isinstance(typed, dict):
            return [path or "/"]
        lost = []
        for k, v in given.items():
            if k not in typed:
                lost.append(f"{path}.{k}")
            else:
                lost += lost_fields(v, typed[k], f"{path}.{k}")
        return lost
    if isinstance(given, list):
        if not isinstance(typed, list) or len(typed) < len(given):
            return [path]
        return [p for i, v in enumerate(given) for p in lost_fields(v, typed[i], f"{path}[{i}]")]
    if given != typed and str(given) != str(typed):
        return [f"{path} ({given!r} became {typed!r})"]
    return []


def strip_mark(obj, name):
    """Removes what step 1 and 2 added, so only the manifest's own fields are compared."""
    ann = obj.get("metadata", {}).get("annotations", {})
    ann.pop(MARK, None)
    if not ann:
        obj.get("metadata", {}).pop("annotations", None)
    spec = obj.get("spec", {}).get("template", {}).get("spec", obj.get("spec", {}))
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        c["env"] = [e for e in c.get("env", []) if e.get("name") != name]
        if not c["env"]:
            del c["env"]


def replica_pods(obj):
    """The pod templates of a PyTorchJob's replicas, each as a Pod."""
    if obj.get("kind") != "PyTorchJob":
        return []
    pods = []
    for role, replica in obj.get("spec", {}).get("pytorchReplicaSpecs", {}).items():
        template = replica.get("template", {})
        metadata = dict(template.get("metadata", {}))
        metadata["name"] = f"{obj['metadata']['name']}-{role.lower()}"
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                     "spec": template.get("spec", {})})
    return pods


def validate(path, env, minor, tmp):
    rc, out, err = kubectl(env, "annotate", "--local", "-f", path, f"{MARK}=yes", "-o", "json")
    if rc:
        raise AssertionError(f"kubectl cannot read {path}:\n{err}")
    objects, decoder, pos = [], json.JSONDecoder(), 0
    while out[pos:].strip():  # one JSON document per object, back to back
        pos += len(out[pos:]) - len(out[pos:].lstrip())
        obj, pos = decoder.raw_decode(out, pos)
        objects += obj["items"] if obj.get("kind") == "List" else [obj]
    print(f"ok: {path}: " + ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in objects))
    objects = [pod for o in objects for pod in replica_pods(o)] + objects
    for i, obj in enumerate(objects):
        if obj["kind"] not in POD_TEMPLATE_KINDS:
            continue
        strip_mark(obj, "")
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        single = os.path.join(tmp, f"object{i}.json")
        with open(single, "w") as f:
            json.dump(obj, f)
        rc, out, err = kubectl(env, "set", "env", "--local", "-f", single,
                               "KOLO_VALIDATE=1", "-o", "json")
        if rc:
            raise AssertionError(f"{path}: {name} does not decode as a {obj['kind']}:\n{err}")
        print(f"ok: {name} decodes into the typed {obj['kind']}")
        if minor is None or minor < MIN_MINOR:
            print(f"SKIP: unknown-field check of {name}: kubectl 1.{minor} predates fields "
                  f"the manifest uses (need 1.{MIN_MINOR} or later)")
            continue
        typed = json.loads(out)
        strip_mark(typed, "KOLO_VALIDATE")
        lost = lost_fields(obj, typed)
        if lost:
            raise AssertionError(f"{path}: {name}: fields Kubernetes does not know (dropped "
                                 "by the typed decode): " + ", ".join(lost))
        print(f"ok: {name}: every field is known to Kubernetes 1.{minor}")


def main():
    manifests = sys.argv[1:]
    if not manifests:
        sys.exit("usage: kubectl_validate_test.py MANIFEST...")
    if shutil.which("kubectl") is None:
        reason = ("kubectl is not installed; install it (Debian: apt-get install "
                  "kubernetes-client, which scripts/install_deps.sh does) to validate "
                  + ", ".join(manifests))
        print(f"SKIP: {reason}")
        write_junit("kubectl", skipped_reason=reason)
        return 0
    tmp = tempfile.mkdtemp(prefix="kolo-kubectl.")
    # No cluster and no user configuration: an empty kubeconfig, a private home.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp,
           "KUBECONFIG": os.path.join(tmp, "kubeconfig")}
    open(env["KUBECONFIG"], "w").close()
    minor = client_minor(env)
    print(f"kubectl client 1.{minor}")
    try:
        for m in manifests:
            validate(m, env, minor, tmp)
    except AssertionError as e:
        print(f"FAIL: {e}")
        write_junit("kubectl", failure=str(e))
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_junit("kubectl")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
