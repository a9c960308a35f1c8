"""The per-node daemon actor of kolo.ray: finds the node's kolod, or starts
one for the job and stops it at the end."""

import ctypes
import json
import os
import shutil
import signal
import socket as socketlib
import subprocess
import tempfile
import time

import ray

from kolo._binaries import find_binary

_SYSTEM_SOCKET = "/run/kolo/kolod.sock"


def _binary(env, name, *checkout_path):
    path = find_binary(env, name, *checkout_path)
    if path is None or not os.path.exists(path):
        raise FileNotFoundError(f"{name} not found (set {env}, put it on PATH, or build it)")
    return path


def _answers(path):
    s = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def _die_with_parent():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: the kolod ends with its actor


@ray.remote
class KoloDaemon:
    def __init__(self):
        self.proc = None
        self.folder = None
        self.socket = None

    def attach(self):
        """The socket of a kolod already answering on this node, or None."""
        for path in (os.environ.get("KOLO_SOCKET"), _SYSTEM_SOCKET):
            if path and _answers(path):
                self.socket = path
                return path
        return None

    def _peer_address(self, timeout_s):
        koloctl = _binary("KOLO_KOLOCTL", "koloctl", "koloctl", "koloctl")
        deadline = time.monotonic() + timeout_s
        while True:
            out = subprocess.run([koloctl, "--socket", self.socket, "--json", "status"],
                                 text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 timeout=timeout_s)
            if out.returncode == 0:
                return json.loads(out.stdout)["node"]["config"]["peer_address"]
            if time.monotonic() > deadline:
                raise RuntimeError(f"koloctl status on {self.socket}: {out.stdout}")
            time.sleep(0.1)

    def existing(self):
        """(socket, peer address) of the node's own kolod."""
        return self.socket, self._peer_address(30)

    def start(self, job_id, peer_host, args, timeout_s):
        """Starts a kolod for the job; (socket, peer address)."""
        self.folder = tempfile.mkdtemp(prefix=f"kolo-{job_id}-")
        self.socket = os.path.join(self.folder, "kolod.sock")
        node = ray.get_runtime_context().get_node_id()[:12]
        self.log = open(os.path.join(self.folder, "kolod.log"), "wb")
        self.proc = subprocess.Popen(
            [_binary("KOLO_KOLOD", "kolod", "daemon", "kolod"), "--socket", self.socket,
             f"--peer_address={peer_host}:0", "--status_address=127.0.0.1:0",
             f"--node_name=ray-{node}", *args],
            stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout_s
        while not _answers(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"kolod for {job_id} did not start")
            time.sleep(0.05)
        return self.socket, self._peer_address(timeout_s)

    def stop(self):
        """Stops the kolod this actor started (never a system one)."""
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
            self.log.close()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
