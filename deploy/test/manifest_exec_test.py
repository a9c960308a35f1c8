#!/usr/bin/env python3
"""Starts kolod exactly as each shipped manifest and flagfile says, and checks it serves.

Cases, each read from the file itself (no argument is copied into this test):
  systemd     the unit's ExecStart= line; files it reads are installed as the
              unit's own "install ... SRC DEST" comment lines say.
  docker      the Dockerfile's ENTRYPOINT + CMD; files from its COPY lines.
  kubernetes  each DaemonSet's kolod container: command (else the image's
              ENTRYPOINT, from the Dockerfile) + args, its env, $(VAR)
              expanded as the kubelet does, its volumes (ConfigMap data of the
              same manifest, hostPath and emptyDir directories, Secret files).
  flagfile    every *.flags file given: kolod --flagfile=FILE.

What the test changes, and only that (each change is printed):
  1. what the supervisor substitutes: $(HOST_IP) and other downward-API
     fields become 127.0.0.1 or fixed names;
  2. absolute paths in flag values move under a private directory per case
     (/run/kolo/kolod.sock -> TMP/case/run/kolo/kolod.sock), in the command
     line and inside every flagfile;
  3. listener addresses (--status_address, --peer_address,
     --metrics_address, given or defaulted) move to 127.0.0.1 and free ports,
     after checking that no two listeners of the case share a port;
  4. --socket_group names this machine's group when the named group does not
     exist here;
  5. nothing else: a flag the kolod under test does not define fails the
     case.
Secret material (the peer plane's TLS CA, certificate and key) is made with
openssl for the paths the flags name.

Then, per case: kolod creates its socket; `koloctl status` answers over it;
the admin token is written with mode 0600 (and, on Kubernetes, outside every
volume that holds the socket, since training pods mount that one); every
enabled listener answers (Status over gRPC, Peer over TCP and TLS when the TLS
flags are in force, metrics over HTTP), except a loopback --peer_address
without TLS or --peer_plaintext, where the Peer plane must be off (nothing
listens, and kolod's log says so); every exec probe or HEALTHCHECK of
the manifest succeeds; declared ports match listeners; SIGTERM makes kolod
exit 0 and remove its socket.

Usage (Bazel passes these; by hand, from the repository root):
  deploy/test/manifest_exec_test.py --kolod bazel-bin/daemon/kolod \\
    --koloctl bazel-bin/koloctl/koloctl --unit deploy/systemd/kolod.service \\
    --dockerfile deploy/docker/Dockerfile --docker_context deploy \\
    --kubernetes deploy/kubernetes/kolod-daemonset.yaml deploy/kolod.flags
"""

import argparse
import grp
import ipaddress
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import xml.sax.saxutils

try:
    import yaml  # noqa: F401  (manifest_sources reads the manifests with it)
except ImportError:
    sys.exit("FAIL: the Python module yaml is missing (Debian: python3-yaml, "
             "installed by scripts/install_deps.sh)")

# The sibling module (Bazel runs this file from its runfiles, beside it).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from manifest_sources import (  # noqa: E402
    CaseError, Source, docker_case, dockerfile_parse, expand, flagfile_lines, k8s_cases,
    kolod_flags, systemd_case,
)

LISTENERS = ("status_address", "peer_address", "metrics_address")
TLS_FLAGS = ("peer_tls_ca", "peer_tls_cert", "peer_tls_key")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEADLINE_S = 30


def note(msg):
    print(f"  note: {msg}", flush=True)


def ok(msg):
    print(f"  ok: {msg}", flush=True)


def wait_for(what, predicate, seconds=DEADLINE_S):
    """Polls predicate every 0.1 s until it is true; raises after `seconds`."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise CaseError(f"timed out after {seconds} s waiting for {what}")
        time.sleep(0.1)


# --- One case ------------------------------------------------------------------------------


class Run:
    """One case: its private root, rewritten flags, the kolod process and the checks."""

    def __init__(self, case, tools, workdir):
        self.case, self.tools = case, tools
        self.root = tempfile.mkdtemp(prefix="c", dir=workdir)
        self.sources = {}
        self.proc = None
        self.log = os.path.join(self.root, "kolod.log")
        self.port_map = {}

    def host(self, path):
        return self.root + path if path.startswith("/") else path

    # 1. Lay out what the supervisor provides: directories and files.
    def materialise(self):
        for d, mode in sorted(self.case["dirs"].items()):
            os.makedirs(self.host(d), exist_ok=True)
            os.chmod(self.host(d), mode)
        for p, (content, mode) in self.case["files"].items():
            os.makedirs(os.path.dirname(self.host(p)), exist_ok=True)
            with open(self.host(p), "wb") as f:
                f.write(content)
            os.chmod(self.host(p), mode)

    def read_flagfile(self, path):
        if path not in self.sources:
            try:
                text = open(self.host(path)).read()
            except OSError as e:
                raise CaseError(f"--flagfile={path}: the {self.case['kind']} provides no such "
                                f"file ({e.strerror})")
            self.sources[path] = Source(path, flagfile_lines(text), path)
        return self.sources[path]

    # 2. Rewrite what must differ on this machine; check the listeners first.
    def rewrite(self):
        argv = self.case["argv"]
        for n in self.case.get("notes", []):
            note(n)
        print(f"  runs: {shlex.join(argv)}")
        self.argv = Source("command line", argv)
        flags = expand(self.argv, self.read_flagfile)
        self.check_defined(flags)
        flags = [f for f in flags if f.source.items[f.index] is not None]
        self.effective = {f.name: f for f in flags}
        # The values as the manifest gives them, before this test moves anything.
        self.given = {f.name: f.value for f in flags}
        self.check_inputs(flags)
        self.rewrite_listeners()
        self.rewrite_group()
        if self.case.get("parent_dirs"):
            for f in flags:
                if f.name != "flagfile" and (f.value or "").startswith("/"):
                    os.makedirs(os.path.dirname(self.host(f.value)), exist_ok=True)
            note("created the directories the flagfile's paths name")
        for f in flags:
            if f.value and f.value.startswith("/"):
                f.set(",".join(self.host(p) for p in f.value.split(",")))
        for src in self.sources.values():
            target = self.host(src.path)
            os.chmod(target, 0o644)
            with open(target, "w") as out:
                out.write(src.text())
        self.argv.items[0] = self.tools.kolod
        return [a for a in self.argv.items if a is not None]

    def check_defined(self, flags):
        for f in flags:
            name = f.name
            if name not in self.tools.defined and name.startswith("no"):
                name = name[2:]
            if name not in self.tools.defined:
                raise CaseError(f"--{f.name} ({f.source.label}) is not a kolod flag")

    def value(self, name):
        """The flag's value as the manifest gives it, else kolod's default."""
        if name in self.given:
            return self.given[name] or ""
        return self.tools.defined.get(name, "")

    def socket_path(self):
        if self.given.get("socket"):
            return self.given["socket"]
        if "KOLO_SOCKET" in self.case["env"]:
            return self.case["env"]["KOLO_SOCKET"]
        m = re.search(r"default (/\S+?)\)", self.tools.defined["_help_socket"])
        return m.group(1)

    def token_path(self):
        # kolod's rule when --admin_token_file is unset: admin.token beside the socket.
        return self.value("admin_token_file") or os.path.join(
            os.path.dirname(self.socket_path()), "admin.token")

    def check_inputs(self, flags):
        """Files kolod reads exist in the case (TLS ones are made here, if provided)."""
        secret_paths = self.case.get("secret_paths")
        for name in TLS_FLAGS:
            path = self.given.get(name)
            if path and secret_paths is not None and path not in secret_paths:
                raise CaseError(f"--{name}={path}: no volume of the pod provides it "
                                f"(Secret files: {secret_paths})")
        tls = {n: self.given[n] for n in TLS_FLAGS if n in self.given}
        if tls:
            if len(tls) != len(TLS_FLAGS):
                raise CaseError(f"the TLS flags come together; only {sorted(tls)} given")
            self.tls = make_tls(self.root, {n: self.host(p) for n, p in tls.items()})
            ok("test CA, certificate and key made for " + ", ".join(sorted(tls.values())))
        else:
            self.tls = None

    def rewrite_listeners(self):
        enabled = {}
        for name in LISTENERS:
            addr = self.value(name)
            if addr:
                host, _, port = addr.rpartition(":")
                enabled[name] = (host, int(port))
        print("  listeners: " + ", ".join(f"--{n}={h}:{p}" + ("" if n in self.effective
                                                               else " (default)")
                                           for n, (h, p) in enabled.items()))
        by_port = {}
        for name, (host, port) in enabled.items():
            if port and port in by_port:
                raise CaseError(f"--{by_port[port]} and --{name} both use port {port}: "
                                "kolod cannot bind both")
            by_port[port] = name
        ok("no two listeners share a port")
        self.check_declared_ports(by_port)
        free = free_ports(len(enabled))
        self.listeners = {}
        for (name, (host, port)), new_port in zip(enabled.items(), free):
            new = f"127.0.0.1:{new_port}"
            if not is_loopback(host):
                note(f"--{name}: {host} -> 127.0.0.1 (loopback only in tests)")
            self.port_map[port] = new_port
            self.listeners[name] = new
            if name in self.effective:
                self.effective[name].set(new)
            else:
                self.argv.items.append(f"--{name}={new}")
        if self.listeners:
            note("listener ports -> free ports: " + ", ".join(
                f"{p}->{q}" for p, q in self.port_map.items()))

    def check_declared_ports(self, by_port):
        for what, port in self.case["ports"]:
            if port not in by_port:
                raise CaseError(f"{what} {port} is no listener's port (listeners: {by_port})")
        for what, probe in self.case["probes"]:
            if isinstance(probe, int) and probe not in by_port:
                raise CaseError(f"{what} probes port {probe}, which no listener uses")
        if self.case["ports"]:
            ok("declared ports are listeners: " + ", ".join(
                f"{w} {p} (--{by_port[p]})" for w, p in self.case["ports"]))

    def rewrite_group(self):
        f = self.effective.get("socket_group")
        if f and f.value:
            try:
                grp.getgrnam(f.value)
            except KeyError:
                mine = grp.getgrgid(os.getgid()).gr_name
                note(f"--socket_group={f.value}: no such group here, using {mine}")
                f.set(mine)

    # 3. Start kolod; check; stop it.
    def start(self, argv):
        env = {"PATH": DEFAULT_PATH}
        env.update(self.case["env"])
        print(f"  starting: {shlex.join(argv)}", flush=True)
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                     stdout=open(self.log, "wb"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        sock = self.host(self.socket_path())
        wait_for(f"the socket {sock}",
                 lambda: os.path.exists(sock) or self.proc.poll() is not None)
        if self.proc.poll() is not None:
            raise CaseError(f"kolod exited with status {self.proc.returncode} before serving")
        ok(f"kolod serves {sock}")
        return sock

    def koloctl(self, *args):
        out = subprocess.run([self.tools.koloctl, "--timeout_s", "5", *args],
                             capture_output=True, text=True, timeout=30)
        return out.returncode, out.stdout + out.stderr

    def check(self, sock):
        rc, out = self.koloctl("--socket", sock, "status")
        if rc:
            raise CaseError(f"koloctl --socket {sock} status exited {rc}:\n{out}")
        ok("koloctl status over the socket: " + out.splitlines()[0])
        self.check_token(sock)
        for name, addr in self.listeners.items():
            getattr(self, "check_" + name)(addr)
        for what, probe in self.case["probes"]:
            if isinstance(probe, list):
                self.run_probe(what, probe)

    def check_token(self, sock):
        token = self.token_path()
        wait_for(f"the admin token {token}", lambda: os.path.exists(self.host(token)), 10)
        mode = os.stat(self.host(token)).st_mode & 0o777
        if mode != 0o600:
            raise CaseError(f"admin token {token} has mode {mode:o}, want 600")
        ok(f"admin token {token}, mode 0600")
        mounts = self.case["mounts"]
        if mounts:
            sock_m, token_m = mount_of(mounts, self.socket_path()), mount_of(mounts, token)
            if sock_m and token_m and (sock_m["name"] == token_m["name"] or shares_host_dir(
                    sock_m, token_m)):
                raise CaseError(f"the admin token {token} is in the volume {token_m['name']}, "
                                f"which also holds the socket: training pods mount it")
            ok(f"admin token's volume ({token_m and token_m['name']}) is not the socket's "
               f"({sock_m and sock_m['name']})")

    def check_status_address(self, addr):
        rc, out = self.koloctl("--address", addr, "status")
        if rc:
            raise CaseError(f"koloctl --address {addr} status exited {rc}:\n{out}")
        ok(f"--status_address {addr}: koloctl status answers")

    def check_peer_address(self, addr):
        host, _, port = addr.rpartition(":")
        if self.peer_plane_off(host):
            # kolod leaves the Peer plane off on a loopback address without
            # TLS or --peer_plaintext: nothing listens, and its log says so.
            try:
                with socket.create_connection((host, int(port)), timeout=5):
                    pass
            except ConnectionRefusedError:
                pass
            else:
                raise CaseError(f"--peer_address {addr}: loopback without TLS or "
                                f"--peer_plaintext, yet something listens there")
            if "the Peer plane is off" not in open(self.log).read():
                raise CaseError("kolod's log does not say that the Peer plane is off")
            ok(f"--peer_address {addr}: loopback without TLS, the Peer plane is off")
            return
        with socket.create_connection((host, int(port)), timeout=5):
            pass
        if self.tls is None or "peer_tls_ca" not in self.effective:
            ok(f"--peer_address {addr}: accepts TCP connections")
            return
        cmd = ["openssl", "s_client", "-connect", addr, "-alpn", "h2", "-verify_return_error",
               "-CAfile", self.tls["ca"], "-cert", self.tls["client_cert"],
               "-key", self.tls["client_key"]]
        # After the handshake the server's first HTTP/2 frames are printed as
        # they come: binary, so undecodable bytes are replaced.
        out = subprocess.run(cmd, input="", capture_output=True, text=True, errors="replace",
                             timeout=30)
        # The exit status also reflects how the server closed the connection
        # after the handshake; the handshake's verdict is the line checked.
        if "Verify return code: 0 (ok)" not in out.stdout:
            raise CaseError(f"--peer_address {addr}: no TLS handshake with a certificate "
                            f"of the test CA:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
        ok(f"--peer_address {addr}: TLS, server certificate verified by the test CA")

    def peer_plane_off(self, host):
        """Whether kolod leaves the Peer plane off (see ResolvePeerPlane)."""
        if "peer_tls_ca" in self.effective:
            return False
        plaintext = self.effective.get("peer_plaintext")
        if plaintext is not None and (plaintext.value is None or
                                      plaintext.value.lower() in ("true", "t", "yes", "y", "1")):
            return False
        return is_loopback(host)

    def check_metrics_address(self, addr):
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
            body = r.read()
            if r.status != 200 or not body:
                raise CaseError(f"GET http://{addr}/metrics: status {r.status}, "
                                f"{len(body)} bytes")
        ok(f"--metrics_address {addr}: /metrics answers ({len(body)} bytes)")

    def run_probe(self, what, command):
        args = []
        for i, a in enumerate(command):
            if i == 0 and os.path.basename(a) == "koloctl":
                a = self.tools.koloctl
            elif i == 0 and os.path.basename(a) == "kolod":
                a = self.tools.kolod
            elif a.startswith("/"):
                a = self.host(a)
            elif re.fullmatch(r"[^:]+:\d+", a) and int(a.rsplit(":", 1)[1]) in self.port_map:
                a = f"127.0.0.1:{self.port_map[int(a.rsplit(':', 1)[1])]}"
            args.append(a)
        out = subprocess.run(args, capture_output=True, text=True, timeout=30)
        if out.returncode:
            raise CaseError(f"{what} {shlex.join(command)} exited {out.returncode}:\n"
                            f"{out.stdout}{out.stderr}")
        ok(f"{what} ({shlex.join(command)}) succeeds")

    def stop(self, sock):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(DEADLINE_S)
        except subprocess.TimeoutExpired:
            raise CaseError(f"kolod still running {DEADLINE_S} s after SIGTERM")
        if rc != 0:
            raise CaseError(f"kolod exited with status {rc} after SIGTERM, want 0")
        if os.path.exists(sock):
            raise CaseError(f"kolod left its socket {sock} behind")
        ok("SIGTERM: exit 0, socket removed")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def show_log(self):
        try:
            print("  ----- kolod log -----\n" + open(self.log).read() + "  ---------------------")
        except OSError:
            pass

    def run(self):
        self.materialise()
        argv = self.rewrite()
        sock = self.start(argv)
        self.check(sock)
        self.stop(sock)


def mount_of(mounts, path):
    best = None
    for m in mounts:
        if path == m["path"] or path.startswith(m["path"] + "/"):
            if best is None or len(m["path"]) > len(best["path"]):
                best = m
    return best


def shares_host_dir(a, b):
    if not a["host"] or not b["host"]:
        return False
    x, y = a["host"].rstrip("/") + "/", b["host"].rstrip("/") + "/"
    return x.startswith(y) or y.startswith(x)


def is_loopback(host):
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def make_tls(root, paths):
    """A test CA, a server certificate and key for 127.0.0.1 at paths, and a client pair."""
    d = os.path.join(root, "test-ca")
    os.makedirs(d)

    def ossl(*args):
        out = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60)
        if out.returncode:
            raise CaseError(f"openssl {' '.join(args)}: {out.stderr}")

    ca_key, ca = f"{d}/ca.key", f"{d}/ca.crt"
    ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=kolo test CA")
    pairs = {}
    for who in ("server", "client"):
        key, csr, crt = f"{d}/{who}.key", f"{d}/{who}.csr", f"{d}/{who}.crt"
        ext = f"{d}/{who}.ext"
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                    "extendedKeyUsage=serverAuth,clientAuth\n")
        ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", key, "-out", csr, "-subj", f"/CN=kolod {who}")
        ossl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
             "-out", crt, "-days", "2", "-extfile", ext)
        pairs[who] = (crt, key)
    for name, src, mode in (("peer_tls_ca", ca, 0o444), ("peer_tls_cert", pairs["server"][0],
                                                          0o444),
                            ("peer_tls_key", pairs["server"][1], 0o400)):
        os.makedirs(os.path.dirname(paths[name]), exist_ok=True)
        with open(src, "rb") as s, open(paths[name], "wb") as t:
            t.write(s.read())
        os.chmod(paths[name], mode)
    return {"ca": ca, "client_cert": pairs["client"][0], "client_key": pairs["client"][1]}


# --- Driver ---------------------------------------------------------------------------------


def check_all_flagfiles_given(flagfiles):
    """Fails when deploy/ or examples/ hold a *.flags file this test was not given."""
    given = {os.path.realpath(f) for f in flagfiles}
    first = flagfiles[0]
    real = os.path.realpath(first)
    rel = os.path.normpath(first)
    if os.path.isabs(rel) or not real.endswith("/" + rel):
        print(f"note: cannot find the source tree from {first}; not looking for other flagfiles")
        return
    top = real[:-len(rel) - 1]
    missing = []
    for sub in ("deploy", "examples"):
        for d, dirnames, names in os.walk(os.path.join(top, sub)):
            dirnames[:] = [n for n in dirnames if not n.startswith(("bazel-", "."))]
            missing += [os.path.join(d, n) for n in names
                        if n.endswith(".flags") and os.path.join(d, n) not in given]
    if missing:
        sys.exit("FAIL: flagfiles this test is not given (add them to its data and args): "
                 + ", ".join(os.path.relpath(m, top) for m in missing))


def write_junit(results):
    path = os.environ.get("XML_OUTPUT_FILE")
    if not path:
        return
    q = xml.sax.saxutils.quoteattr
    failed = sum(1 for _, err in results if err)
    with open(path, "w") as out:
        out.write(f'<?xml version="1.0" encoding="UTF-8"?>\n<testsuites>'
                  f'<testsuite name="manifest_exec_test" tests="{len(results)}" '
                  f'failures="{failed}">\n')
        for name, err in results:
            out.write(f"  <testcase name={q(name)}>")
            if err:
                out.write(f"<failure message={q(err)}/>")
            out.write("</testcase>\n")
        out.write("</testsuite></testsuites>\n")


class Tools:
    def __init__(self, kolod, koloctl):
        self.kolod, self.koloctl = os.path.abspath(kolod), os.path.abspath(koloctl)
        self.defined = kolod_flags(self.kolod)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kolod", required=True)
    p.add_argument("--koloctl", required=True)
    p.add_argument("--unit", required=True)
    p.add_argument("--dockerfile", required=True)
    p.add_argument("--docker_context", required=True)
    p.add_argument("--kubernetes", action="append", default=[])
    p.add_argument("flagfiles", nargs="+")
    a = p.parse_args()
    check_all_flagfiles_given(a.flagfiles)
    tools = Tools(a.kolod, a.koloctl)

    cases = []
    unit = systemd_case(a.unit)
    cases.append(dict(unit, name=f"systemd:{os.path.basename(a.unit)}", kind="unit"))
    image = dockerfile_parse(a.dockerfile, a.docker_context)
    cases.append(dict(docker_case(image), name="docker:Dockerfile", kind="image"))
    for k in a.kubernetes:
        cases += [dict(c, kind="pod") for c in k8s_cases(k, image)]
    for f in a.flagfiles:
        # A flagfile on its own: kolod --flagfile=FILE, with the directories its
        # paths name created (no supervisor creates them here).
        cases.append({"name": f"flagfile:{f}", "kind": "flagfile", "argv": [
            "kolod", f"--flagfile=/flagfile/{os.path.basename(f)}"], "env": {},
            "dirs": {}, "files": {f"/flagfile/{os.path.basename(f)}": (open(f, "rb").read(),
                                                                       0o644)},
            "probes": [], "ports": [], "mounts": [], "parent_dirs": True})

    workdir = tempfile.mkdtemp(prefix="kolo-manifests.", dir="/tmp")  # short socket paths
    results = []
    for case in cases:
        print(f"=== {case['name']}", flush=True)
        run = Run(case, tools, workdir)
        err = None
        try:
            run.run()
        except (CaseError, OSError, subprocess.SubprocessError) as e:
            err = str(e)
            print(f"  FAIL: {err}", flush=True)
            run.show_log()
        finally:
            run.kill()
        results.append((case["name"], err))
    subprocess.run(["rm", "-rf", workdir])
    write_junit(results)
    failed = sum(1 for _, err in results if err)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
