"""Attacks on a running job from a process without the job secret (issue 11).

Every loop is bounded in count and time and aims at 127.0.0.1 only. The job keeps running, its
results stay right, and rank 0's memory stays flat.
"""

import os
import random
import socket
import struct
import subprocess
import sys
import textwrap
import time

import pytest

from tfring.launch.addresses import free_port
from tfring_dev.testing import QUIET_ENV
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

NONCE = 16

# Allreduces until the test asks to stop; the stop flag travels in the allreduce itself, so every
# rank stops after the same step.
VICTIM = r'''
import os, sys, time
import numpy as np, tensorflow as tf, tfring
tfring.init()
rank, stop_file = tfring.rank(), sys.argv[1]
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
print("READY", rss_mb(), flush=True)
steps = wrong = 0
while True:
    flag = float(os.path.exists(stop_file))
    out = tfring.ops.allreduce([tf.constant([flag, rank + 1.0]), tf.fill([4099], float(rank))], op="sum").__iter__()
    head, body = [t.numpy() for t in out]
    wrong += int(head[1] != 3.0 or not np.all(body == 1.0))
    steps += 1
    if head[0] > 0:
        break
    time.sleep(0.02)
print("DONE", steps, wrong, rss_mb(), flush=True)
'''


def _start_victim(tmp_path):
    script = tmp_path / "victim.py"
    script.write_text(VICTIM)
    stop = tmp_path / "stop"
    port = free_port()
    env = dict(os.environ, **QUIET_ENV)
    proc = subprocess.Popen([sys.executable, "-m", "tfring", "run", "-np", "2", sys.executable, str(script), str(stop)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    return proc, stop


def _wait_ready(proc):
    """Waits for rank 0's READY line; returns the memory (MB) it reported."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("[0] READY"):
            return float(line.split()[-1])
        assert line or proc.poll() is None, proc.stderr.read()
    raise AssertionError("the job did not start")


def _connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.settimeout(5)
    return s


def _closed_within(sock, seconds):
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def _listening_ports(pid):
    """TCP ports `pid` listens on, from /proc (the attacker needs nothing from the job)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    with open("/proc/net/tcp") as f:
        for row in f.readlines()[1:]:
            cols = row.split()
            if cols[3] == "0A" and cols[9] in inodes:
                ports.add(int(cols[1].split(":")[1], 16))
    return ports


def _rank0_pid(launcher_pid):
    with open(f"/proc/{launcher_pid}/task/{launcher_pid}/children") as f:
        for pid in f.read().split():
            with open(f"/proc/{pid}/environ", "rb") as env:
                if b"\0TFRING_RANK=0\0" in b"\0" + env.read():
                    return int(pid)
    raise AssertionError("no rank 0 among the launcher's children")


def _finish(proc, stop):
    stop.write_text("stop")
    out, err = proc.communicate(timeout=120)
    done = [line.split() for line in out.splitlines() if line.startswith("[0] DONE")]
    assert proc.returncode == 0 and done, (out[-2000:], err[-3000:])
    _, _, steps, wrong, rss = done[0]
    return int(steps), int(wrong), float(rss), err


def _store_port(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
    return int(env[b"TFRING_STORE_ADDR"].rsplit(b":", 1)[1])


def test_job_survives_churn_idle_huge_frames_bad_macs_and_fuzz(tmp_path):
    proc, stop = _start_victim(tmp_path)
    try:
        rss_before = _wait_ready(proc)
        store_port = _store_port(_rank0_pid(proc.pid))
        # Up to 40,000 connect/close cycles, for at most 90 s. How many fit depends on the machine:
        # rank 0's store took ~1,200 a second here under TensorFlow 2.17 and ~280 under 2.21 (with
        # this job idle in both; the cause is not known yet), so the bound is on the attack's
        # volume, not its speed: what matters below is that the job survives it.
        deadline, cycles = time.monotonic() + 90, 0
        while cycles < 40000 and time.monotonic() < deadline:
            with socket.create_connection(("127.0.0.1", store_port), timeout=5):
                cycles += 1
        assert cycles >= 10000, f"only {cycles} connections in 90 s"
        # 200 idle connections, held while the job goes on.
        idle = [_connect(store_port) for _ in range(200)]
        time.sleep(1.0)
        for s in idle:
            s.close()
        # A small frame with a wrong HMAC and one announcing 1 GiB: both dropped at once. (Refusals
        # are logged at most once a second: wait for a fresh line.)
        time.sleep(1.5)
        for frame in (struct.pack("<I", 9) + b"A" * 9 + os.urandom(32), struct.pack("<I", 1 << 30)):
            s = _connect(store_port)
            s.recv(NONCE)
            s.sendall(frame)
            assert _closed_within(s, 3.0), frame[:8]
            s.close()
        # Random bytes: a few thousand frames, some with small plausible lengths.
        rng = random.Random(11)
        deadline = time.monotonic() + 60
        for i in range(3000):
            if time.monotonic() > deadline:
                break
            junk = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 120)))
            if i % 2 and len(junk) > 4:
                junk = struct.pack("<I", len(junk) - 4 - 32 if len(junk) > 36 else 0) + junk[4:]
            try:
                with _connect(store_port) as s:
                    s.sendall(junk)
            except OSError:
                pass
        steps, wrong, rss_after, err = _finish(proc, stop)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    print(f"{cycles} cycles; {steps} steps, {wrong} wrong; rank 0 memory {rss_before:.0f} -> {rss_after:.0f} MB")
    assert wrong == 0 and steps > 10
    assert rss_after - rss_before < 50, (rss_before, rss_after)
    assert "refused a connection from 127.0.0.1:" in err and "bad or missing job secret" in err


RANK = textwrap.dedent(r'''
    import time, tfring
    tfring.init()
    print("JOINED", flush=True)
''')


def test_idle_connections_to_a_data_port_do_not_delay_the_start(tmp_path):
    port, secret = free_port(), "hostile-test-secret"
    env = dict(os.environ, **QUIET_ENV, TFRING_SIZE="2", TFRING_LOCAL_SIZE="2", TFRING_STORE_ADDR=f"127.0.0.1:{port}",
               TFRING_SECRET=secret, TFRING_JOB_ID=f"h{port}", TFRING_RENDEZVOUS_TIMEOUT="60")
    ranks = [subprocess.Popen([sys.executable, "-c", RANK], env=dict(env, TFRING_RANK="0", TFRING_LOCAL_RANK="0"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    idle = []
    try:
        deadline = time.monotonic() + 60
        data_ports = set()
        while not data_ports and time.monotonic() < deadline:
            data_ports = _listening_ports(ranks[0].pid) - {port}
            time.sleep(0.05)
        assert data_ports, "rank 0 never opened its data port"
        idle = [_connect(p) for p in data_ports for _ in range(13)]  # 13 x 10 s stalled the start before
        start = time.monotonic()
        ranks.append(subprocess.Popen([sys.executable, "-c", RANK], env=dict(env, TFRING_RANK="1", TFRING_LOCAL_RANK="1"),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = [r.communicate(timeout=120) for r in ranks]
        took = time.monotonic() - start
    finally:
        for s in idle:
            s.close()
        for r in ranks:
            r.kill()
            r.wait()
    assert all("JOINED" in out for out, _ in outs), outs
    # Rank 1 imports TensorFlow first (a few seconds here); one handshake deadline is 5 s more.
    assert took < 30, took


LISTENERS = r"""
import os, tfring
tfring.init()
links = []
for fd in os.listdir("/proc/self/fd"):
    try:
        links.append(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        pass  # the descriptor listdir itself used
mine = {link[8:-1] for link in links if link.startswith("socket:[")}
with open("/proc/self/net/tcp") as f:
    rows = [r.split() for r in f.readlines()[1:]]
print("LISTEN", sorted(r[1].split(":")[0] for r in rows if r[3] == "0A" and r[9] in mine))
"""


def test_a_one_host_job_listens_on_loopback_only():
    proc = run_job(2, LISTENERS, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # After init only rank 0's store listens (data ports close once the ring is linked). 0100007F: 127.0.0.1.
    assert "[0] LISTEN ['0100007F']" in proc.stdout and "[1] LISTEN []" in proc.stdout, proc.stdout
