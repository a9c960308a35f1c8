"""The fault matrix's sharing rows: a hostile party holds what it can of a
kolod (idle gRPC streams, handoff connections, Peer streams for jobs that do
not exist, oversized or wrongly keyed first messages) with fault_attacker,
and *while the attack goes on* a normal job of the same daemons must finish
its checked steps. Then the attacker stops, and the row checks what every row
does: the daemons alive, nothing leaked, the next job served.

On one node the attacker is another local user (uid 65534 through setpriv,
so kolod's per-uid shares are what protect the job); across nodes it runs in
the member node's namespace, so it comes from the address of a legitimate
member daemon. Rows skip, saying why, where that is not possible.
"""

import os
import re
import shutil
import signal
import subprocess
import time

from fault_processes import ADDR_A, PEER_PORT, Job, monotonic, wait_until

NOBODY = 65534
ATTACK_HOLD_S = 120  # the most an attack lasts; the row stops it sooner
JOB_STEPS = 100
ATTACK_SETTLE_S = 3
ANONYMOUS_DEADLINE_S = 5  # kolod's --anonymous_call_deadline_s default
UNKNOWN_JOB_WAIT_S = 10  # how long kolod holds a Hello for a job not started


class Attack:
    """One fault_attacker process and its report."""

    def __init__(self, ctx, name, argv, prefix=()):
        self.log = os.path.join(ctx.workdir, f"attack-{name}.log")
        with open(self.log, "w") as f:
            self.proc = subprocess.Popen(list(prefix) + argv, stdout=f, stderr=subprocess.STDOUT)

    def text(self):
        with open(self.log) as f:
            return f.read()

    def started(self, timeout=15):
        return wait_until(lambda: "FAULT_ATTACK started" in self.text() or
                          self.proc.poll() is not None, timeout) and \
            "FAULT_ATTACK started" in self.text()

    def stop(self):
        """Ends the attack; returns its tally {opened, refused, cut, held, codes}."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        m = re.search(r"FAULT_ATTACK done opened=(\d+) refused=(\d+) cut=(\d+) held=(\d+) "
                      r"codes=(\S*)", self.text())
        if not m:
            return None
        keys = ("opened", "refused", "cut", "held")
        tally = {k: int(v) for k, v in zip(keys, m.groups()[:4])}
        tally["codes"] = m.group(5)
        return tally


def attacker_for_nobody(ctx):
    """The attacker binary where uid 65534 can run it, or (None, why not)."""
    if os.geteuid() != 0:
        return None, "needs root to run the attacker as another user"
    if not shutil.which("setpriv"):
        return None, "needs setpriv (util-linux) to run the attacker as another user"
    probe = subprocess.run(as_nobody() + ["true"], capture_output=True, text=True)
    if probe.returncode != 0:  # a sandbox that maps no other user
        return None, f"cannot become uid {NOBODY} here: {probe.stderr.strip()}"
    path = os.path.join(ctx.workdir, "fault_attacker")
    if not os.path.exists(path):
        shutil.copy(ctx.args.attacker, path)
        os.chmod(path, 0o755)
    os.chmod(ctx.workdir, 0o711)  # the socket's folder: passable, not listable
    return path, None


def as_nobody():
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def attack_row(m, row, daemons, make_attack, expect_codes=None, warm_s=2):
    """Runs `make_attack(hold_s)` for `warm_s` first (gRPC's executor and
    timer threads grow once, to a fixed bound, the first time a flood meets
    them, its deadlines included: not a leak), then again for the row: a job
    of 2 ranks per daemon runs beside it, the attack stops, and the job, the
    tally and the daemons are checked."""
    warm = make_attack(warm_s)
    warm.started()
    warm.stop()
    attack = make_attack(ATTACK_HOLD_S)
    before = {d.name: d.sample() for d in daemons}
    shm_before = m.shm_entries()
    job = None
    tally = None
    try:
        if not attack.started():
            row.problems.append("the attack did not start: " + attack.text()[-300:])
            return row
        time.sleep(ATTACK_SETTLE_S)  # the attack reaches its share first
        t0 = monotonic()
        job = Job(m.ctx, m.ctx.job_name("alice"), daemons, 2, [f"--steps={JOB_STEPS}"])
        finished = job.wait_ended(job.ranks, 120)
        going = attack.proc.poll() is None
        bad = [k.rank for k in job.ranks if k.proc.returncode != 0]
        row.seconds = f"{monotonic() - t0:.1f} (job)"
        if not finished:
            row.problems.append("the job beside the attack did not finish in 120 s")
        elif bad:
            row.problems.append(f"ranks {bad} of the job beside the attack failed")
            row.notes.append(job.output())
        if not going:
            row.problems.append("the attack ended before the job did (it proves nothing)")
        tally = attack.stop()
    finally:
        if job is not None:
            job.end()
        if tally is None:
            tally = attack.stop()
    if tally is None:
        row.problems.append("the attacker printed no tally: " + attack.text()[-300:])
    else:
        row.observed = (f"job done beside the attack; attacker opened {tally['opened']}, "
                        f"refused {tally['refused']}, cut {tally['cut']}, held "
                        f"{tally['held']} (codes {tally['codes']})")
        if tally["refused"] + tally["cut"] == 0:
            row.problems.append("kolod neither refused nor cut any of the attacker's")
        # Ends that kolod made, not a connection the attacker never got.
        reached = [c for c in tally["codes"].split(",") if c and
                   c.split(":")[0] != "14" and not c.startswith("connect-")]
        if not reached:
            row.problems.append("the attacker never reached kolod (codes "
                                f"{tally['codes'] or 'none'})")
        if expect_codes and not any(f"{c}:" in tally["codes"] for c in expect_codes):
            row.problems.append(f"the attacker saw none of the codes {expect_codes}")
    m.finish_row(row, daemons, daemons, before, shm_before)
    return row


def single_node_sharing_rows(m, Row):
    """Another local user against the node's kolod, the job beside it."""
    d = m.single
    rows = [Row("mallory holds idle reflection streams", "1 node",
                "alice's 2-rank job finishes while uid 65534 holds and reopens 600 idle "
                "streams; they are refused or cut"),
            Row("mallory holds handoff connections", "1 node",
                "alice's 2-rank job finishes while uid 65534 holds and reopens 100 idle "
                "handoff connections; they are refused or cut")]
    attacker, why = attacker_for_nobody(m.ctx) if m.ctx.args.attacker else (None, "no attacker")
    if attacker is None:
        for r in rows:
            r.skipped = why
        return rows
    attack_row(m, rows[0], [d], lambda hold: Attack(m.ctx, "streams", [
        attacker, "streams", f"--target=unix:{d.socket}", "--streams=600", f"--hold_s={hold}"],
        prefix=as_nobody()), warm_s=ANONYMOUS_DEADLINE_S + 2)
    attack_row(m, rows[1], [d], lambda hold: Attack(m.ctx, "handoff", [
        attacker, "handoff", f"--path={d.socket}.handoff", "--conns=100", f"--hold_s={hold}"],
        prefix=as_nobody()))
    return rows


def cross_sharing_rows(m, Row):
    """A peer at the member node's address against the coordinator's Peer port,
    a two-node job beside it."""
    where = "2 nodes"
    rows = [Row("peer holds Hellos for jobs that do not exist", where,
                "a 2-node job starts and finishes while nodeB's address holds and reopens "
                "200 Peer streams for unknown jobs; they are refused or cut"),
            Row("peer sends 8 MiB first messages", where,
                "a 2-node job finishes while nodeB's address sends 8 MiB Hellos on 32 "
                "streams; each is refused before kolod reads it"),
            Row("peer retries a wrong job token", where,
                "a 2-node job finishes while nodeB's address says Hello for it with a wrong "
                "token on 64 streams, again and again; refused")]
    if m.ns_reason or not m.ctx.args.attacker:
        for r in rows:
            r.skipped = m.ns_reason or "no attacker"
        return rows
    ns = m.ns
    prefix = ["ip", "netns", "exec", ns.b]
    target = f"--target={ADDR_A}:{PEER_PORT}"
    a = m.ctx.args.attacker
    attack_row(m, rows[0], [m.a, m.b], lambda hold: Attack(m.ctx, "hellos", [
        a, "hellos", target, "--streams=200", f"--hold_s={hold}"], prefix=prefix),
        warm_s=UNKNOWN_JOB_WAIT_S + 2)
    attack_row(m, rows[1], [m.a, m.b], lambda hold: Attack(m.ctx, "big", [
        a, "hellos", target, "--streams=32", "--hello_bytes=8388608", f"--hold_s={hold}"],
        prefix=prefix))
    # The job the attacker names is the one the row is about to start.
    name = f"fm-{m.ctx.jobs + 1}-alice"
    attack_row(m, rows[2], [m.a, m.b], lambda hold: Attack(m.ctx, "token", [
        a, "hellos", target, "--streams=64", f"--job={name}", "--token=" + "0" * 32,
        f"--hold_s={hold}"], prefix=prefix))
    return rows
