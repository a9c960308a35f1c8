"""What manifest_exec_test reads from the shipped files: kolod's command line
and flagfiles as editable token lists, and each supervisor's case (the
systemd unit's ExecStart=, the Dockerfile's ENTRYPOINT + CMD, each
Kubernetes DaemonSet's kolod container with its env and volumes) as the
supervisor would start it."""

import json
import os
import re
import shlex
import subprocess

import yaml

# What the kubelet substitutes for downward-API fields in this test.
FIELD_VALUES = {"status.hostIP": "127.0.0.1", "status.podIP": "127.0.0.1",
                "status.hostIPs": "127.0.0.1", "status.podIPs": "127.0.0.1",
                "spec.nodeName": "test-node", "spec.serviceAccountName": "default"}

class CaseError(Exception):
    """A check of one case failed; the message says which and why."""


# --- Flags: argv and flagfiles as editable token lists --------------------------------


class Source:
    """The command line or one flagfile: tokens (argv) or lines (file) kept editable.

    Entries set to None are dropped when the source is written back.
    """

    def __init__(self, label, items, path=None):
        self.label, self.items, self.path = label, list(items), path

    def text(self):
        return "".join(line + "\n" for line in self.items if line is not None)


class Flag:
    """One --name=value occurrence: where it is, so that it can be rewritten."""

    def __init__(self, source, index, name, value):
        self.source, self.index, self.name, self.value = source, index, name, value

    def set(self, value):
        self.value = value
        self.source.items[self.index] = f"--{self.name}={value}"

    def drop(self):
        self.source.items[self.index] = None


def parse_flag(token):
    """'--name=value' -> (name, value); '--name' -> (name, None); else None."""
    m = re.fullmatch(r"--?([A-Za-z0-9_]+)(?:=(.*))?", token.strip())
    return (m.group(1), m.group(2)) if m else None


def flagfile_lines(text):
    # absl reads one flag per line; blank lines and lines starting with # are skipped.
    return [line.strip() for line in text.splitlines()]


def expand(argv_source, read_file):
    """Every flag in the order kolod applies them (flagfiles expanded in place).

    read_file(path) returns a flagfile's Source (the path as the flag gives it).
    """
    flags, seen = [], set()

    def walk(source, start):
        for i in range(start, len(source.items)):
            item = source.items[i]
            if item is None or item.startswith("#") or not item:
                continue
            parsed = parse_flag(item)
            if parsed is None:
                raise CaseError(f"{source.label}: '{item}' is not a --name=value flag")
            flag = Flag(source, i, *parsed)
            flags.append(flag)
            if flag.name == "flagfile":
                for path in (flag.value or "").split(","):
                    if path in seen:
                        raise CaseError(f"flagfile {path} is read twice")
                    seen.add(path)
                    walk(read_file(path), 0)

    walk(argv_source, 1)
    return flags


def kolod_flags(kolod):
    """{name: default} for every flag kolod defines, from `kolod --helpfull`."""
    out = subprocess.run([kolod, "--helpfull"], capture_output=True, text=True, timeout=30)
    text = out.stdout + out.stderr
    blocks = re.split(r"\n(?=\s{4}--[A-Za-z0-9_]+ \()", text)
    flags = {}
    for block in blocks:
        m = re.match(r"\s*--([A-Za-z0-9_]+) \(", block)
        if not m:
            continue
        d = re.search(r'default: ("(?:[^"\\]|\\.)*"|[^;]*);\s*$', block.strip() + "\n")
        default = d.group(1) if d else ""
        flags[m.group(1)] = default[1:-1] if default.startswith('"') else default
        flags.setdefault("_help_" + m.group(1), block)
    if "socket" not in flags:
        raise CaseError(f"`{kolod} --helpfull` lists no --socket flag:\n{text[:2000]}")
    return flags


# --- Supervisor semantics ----------------------------------------------------------------


def systemd_case(unit_path):
    """argv, env, directories and installed files of the unit."""
    text = open(unit_path).read()
    execs = [l for l in text.splitlines() if l.startswith("ExecStart=")]
    if len(execs) != 1:
        raise CaseError(f"{unit_path}: want one ExecStart= line, found {len(execs)}")
    line = execs[0][len("ExecStart="):].lstrip("@-:+!")
    if "%" in line or "$" in line:
        raise CaseError(f"{unit_path}: ExecStart= uses specifiers or variables, "
                        f"which this test does not substitute: {line}")
    argv = shlex.split(line)
    env = {}
    for m in re.finditer(r"^Environment=(.*)$", text, re.M):
        for assignment in shlex.split(m.group(1)):
            k, _, v = assignment.partition("=")
            env[k] = v
    dirs = {}
    for key, base in (("RuntimeDirectory", "/run"), ("StateDirectory", "/var/lib"),
                      ("ConfigurationDirectory", "/etc")):
        mode = re.search(rf"^{key}Mode=(\d+)$", text, re.M)
        for m in re.finditer(rf"^{key}=(.*)$", text, re.M):
            for d in m.group(1).split():
                dirs[f"{base}/{d}"] = int(mode.group(1), 8) if mode else 0o755
    # The unit's install steps: "#   install -m 0644 deploy/kolod.flags /etc/kolo/kolod.flags".
    files = {}
    for m in re.finditer(r"^#\s+install\s+(?:-m\s+(\d+)\s+)?(\S+)\s+(/\S+)\s*$", text, re.M):
        mode, src, dest = m.groups()
        if os.path.isfile(src) and not dest.endswith("/"):
            files[dest] = (open(src, "rb").read(), int(mode or "644", 8))
    return {"argv": argv, "env": env, "dirs": dirs, "files": files, "probes": [],
            "ports": [], "mounts": []}


def dockerfile_parse(path, context):
    """ENTRYPOINT, CMD, ENV, COPY'd files, created directories and HEALTHCHECK."""
    text = re.sub(r"\\\n", " ", open(path).read())
    out = {"entrypoint": [], "cmd": [], "env": {}, "files": {}, "dirs": {}, "probes": []}
    for line in text.splitlines():
        words = line.strip().split(None, 1)
        if not words or words[0].startswith("#"):
            continue
        op, rest = words[0].upper(), (words[1] if len(words) > 1 else "")
        if op in ("ENTRYPOINT", "CMD"):
            if not rest.startswith("["):
                raise CaseError(f"{path}: {op} must use the JSON (exec) form: {rest}")
            out[op.lower()] = json.loads(rest)
        elif op == "ENV":
            k, _, v = rest.partition("=")
            out["env"][k.strip()] = v.strip().strip('"')
        elif op == "VOLUME":
            for d in json.loads(rest) if rest.startswith("[") else rest.split():
                out["dirs"][d] = 0o755
        elif op == "RUN":
            for m in re.finditer(r"install -d (?:-m \d+ )?(?:-[og] \S+ )*((?:/\S+\s*)+)", rest):
                for d in m.group(1).split():
                    out["dirs"].setdefault(d, 0o755)
        elif op == "COPY":
            parts = [p for p in rest.split() if not p.startswith("--")]
            srcs, dest = parts[:-1], parts[-1]
            for src in srcs:
                full = os.path.join(context, src)
                if src.startswith("docker/bin/") or not os.path.isfile(full):
                    continue  # the binaries under test stand in for docker/bin/*
                target = dest + os.path.basename(src) if dest.endswith("/") else dest
                out["files"][target] = (open(full, "rb").read(), 0o644)
        elif op == "HEALTHCHECK":
            m = re.search(r"CMD\s+(\[.*\])", rest)
            if m:
                out["probes"].append(("HEALTHCHECK", json.loads(m.group(1))))
    return out


def docker_case(image):
    return {"argv": image["entrypoint"] + image["cmd"], "env": dict(image["env"]),
            "dirs": dict(image["dirs"]), "files": dict(image["files"]),
            "probes": list(image["probes"]), "ports": [], "mounts": []}


def k8s_expand(value, env):
    """$(VAR) -> env[VAR] when defined, $$ -> $, as the kubelet expands command and args."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, value)


def k8s_env(container, configmaps, pod_meta, notes):
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = k8s_expand(str(e["value"]), env)
            continue
        src = e.get("valueFrom", {})
        if "fieldRef" in src:
            field = src["fieldRef"]["fieldPath"]
            if field in FIELD_VALUES:
                env[e["name"]] = FIELD_VALUES[field]
                notes.append(f"env {e['name']} (fieldRef {field}) = {FIELD_VALUES[field]}")
            elif field.startswith("metadata."):
                env[e["name"]] = str(pod_meta.get(field.split(".", 1)[1], "kolod-test"))
            else:
                raise CaseError(f"env {e['name']}: no test value for fieldRef {field}")
        elif "configMapKeyRef" in src:
            ref = src["configMapKeyRef"]
            env[e["name"]] = configmaps[ref["name"]]["data"][ref["key"]]
        else:
            raise CaseError(f"env {e['name']}: this test does not provide {list(src)}")
    return env


def k8s_volume_files(volume, mount, configmaps):
    """Files and directories one volume puts under its mount path."""
    files, secret_paths = {}, []
    base = mount["mountPath"].rstrip("/")

    def from_configmap(ref, default_mode):
        cm = configmaps.get(ref["name"])
        if cm is None:
            raise CaseError(f"volume {volume['name']}: ConfigMap {ref['name']} "
                            "is not in the manifest")
        data = cm.get("data", {})
        items = ref.get("items") or [{"key": k, "path": k} for k in data]
        for it in items:
            if it["key"] not in data:
                raise CaseError(f"ConfigMap {ref['name']} has no key {it['key']}")
            files[f"{base}/{it['path']}"] = (data[it["key"]].encode(),
                                              it.get("mode", default_mode))

    def from_secret(ref):
        items = ref.get("items")
        if not items:
            raise CaseError(f"volume {volume['name']}: list the Secret's items so the "
                            "files kolod reads are named in the manifest")
        secret_paths.extend(f"{base}/{it['path']}" for it in items)

    if "configMap" in volume:
        from_configmap(volume["configMap"], volume["configMap"].get("defaultMode", 0o644))
    elif "secret" in volume:
        from_secret(volume["secret"])
    elif "projected" in volume:
        mode = volume["projected"].get("defaultMode", 0o644)
        for src in volume["projected"]["sources"]:
            if "configMap" in src:
                from_configmap(src["configMap"], mode)
            elif "secret" in src:
                from_secret(src["secret"])
            else:
                raise CaseError(f"volume {volume['name']}: unsupported source {list(src)}")
    elif not ("hostPath" in volume or "emptyDir" in volume):
        raise CaseError(f"volume {volume['name']}: unsupported type {list(volume)}")
    return files, secret_paths


def k8s_cases(path, image):
    """One case per DaemonSet in the manifest: its kolod container as the kubelet runs it."""
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    configmaps = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ConfigMap"}
    cases = []
    for ds in (d for d in docs if d.get("kind") == "DaemonSet"):
        pod = ds["spec"]["template"]
        spec = pod["spec"]
        containers = spec["containers"]
        c = next((c for c in containers if c["name"] == "kolod"), containers[0])
        notes = []
        env = k8s_env(c, configmaps, pod.get("metadata", {}), notes)
        if "command" in c:
            argv = list(c["command"]) + list(c.get("args", []))
        else:
            argv = image["entrypoint"] + list(c.get("args", image["cmd"]))
        argv = [k8s_expand(str(a), env) for a in argv]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        files = dict(image["files"])  # the image's files, unless a mount hides them
        dirs = dict(image["dirs"])
        secret_paths, mounts = [], []
        for m in c.get("volumeMounts", []):
            v = volumes[m["name"]]
            mp = m["mountPath"].rstrip("/")
            files = {p: f for p, f in files.items() if not p.startswith(mp + "/")}
            dirs[mp] = 0o755
            vf, sp = k8s_volume_files(v, m, configmaps)
            files.update(vf)
            secret_paths += sp
            mounts.append({"name": m["name"], "path": mp,
                           "host": v.get("hostPath", {}).get("path")})
        probes = []
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            probe = c.get(kind)
            if probe and "exec" in probe:
                probes.append((kind, list(probe["exec"]["command"])))
            elif probe:
                port = next(p.get("port") for p in probe.values() if isinstance(p, dict))
                probes.append((kind, int(port)))
        ports = [(f"containerPort {p.get('name', '')}", int(p["containerPort"]))
                 for p in c.get("ports", [])]
        ann = pod.get("metadata", {}).get("annotations", {})
        if "prometheus.io/port" in ann:
            ports.append(("prometheus.io/port", int(ann["prometheus.io/port"])))
        cases.append({"name": f"kubernetes:{ds['metadata']['name']}", "argv": argv,
                      "env": env, "dirs": dirs, "files": files, "probes": probes,
                      "ports": ports, "mounts": mounts, "secret_paths": secret_paths,
                      "notes": notes})
    if not cases:
        raise CaseError(f"{path}: no DaemonSet")
    return cases
