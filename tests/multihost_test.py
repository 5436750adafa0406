"""tfring across hosts: `tfring run -H` over real ssh into emulated hosts (network namespaces).

Each host is a network namespace with its own address, hostname and sshd (tfring_dev.emulated_hosts);
the launcher runs in the root namespace and reaches them as it would other machines. Needs root,
iproute2 and openssh-server (.ci/run installs them); skipped, saying why, without them.
"""

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np
import pytest

from collectives_test import CHECK_EVERYTHING
from ring_strategy_test import FIT
from ring_strategy_test import _single
from tfring_dev import emulated_hosts
from tfring_dev.testing import QUIET_ENV
from tfring_dev.testing import rank_lines

pytestmark = [pytest.mark.multiprocess, pytest.mark.emulated_hosts]


def _hosts(count):
    ok, reason = emulated_hosts.available()
    if not ok:
        pytest.skip(reason)
    return emulated_hosts.EmulatedHosts(count)


@pytest.fixture(scope="module")
def two_hosts():
    with _hosts(2) as hosts:
        yield hosts


@pytest.fixture(scope="module")
def three_hosts():
    with _hosts(3) as hosts:
        yield hosts


def _script(source):
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False, dir="/tmp") as f:
        f.write(textwrap.dedent(source))
    return f.name


def launcher_argv(hosts, layout, script, env=None, args=()):
    """`tfring run` across `hosts` with `layout` (ranks per host), every variable in `env` exported."""
    hosts_arg = ",".join(f"{name}:{n}" for name, n in zip(hosts.names, layout))
    exports = [arg for k, v in {**QUIET_ENV, **(env or {})}.items() for arg in ("-x", f"{k}={v}")]
    return ([sys.executable, "-m", "tfring", "run", "-H", hosts_arg, "--rsh", " ".join(hosts.ssh_command),
             "--all-output"] + exports + list(args) + [sys.executable, script])


def launch(hosts, layout, source, env=None, args=(), timeout=300):
    script = _script(source)
    try:
        return subprocess.run(launcher_argv(hosts, layout, script, env, args), capture_output=True, text=True,
                              timeout=timeout)
    finally:
        os.unlink(script)


def _no_ranks_left(hosts, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = {i: hosts.pids(i) for i in range(len(hosts.names))}
        if not any(left.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"processes left on the emulated hosts: {left}")


@pytest.mark.parametrize("layout,algorithm", [
    pytest.param((2, 2), "auto", id="2x2-hierarchical"),
    pytest.param((2, 2), "ring", id="2x2-ring", marks=pytest.mark.extended),
    pytest.param((1, 1, 1), "auto", id="3x1", marks=pytest.mark.extended)])
def test_collectives_equal_numpy_across_hosts(request, layout, algorithm):
    hosts = request.getfixturevalue("two_hosts" if len(layout) == 2 else "three_hosts")
    proc = launch(hosts, layout, CHECK_EVERYTHING, env={"TFRING_ALLREDUCE": algorithm})
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(sum(layout)):
        lines = rank_lines(proc.stdout, r)
        assert "FAILURES 0" in lines, "\n".join(lines)
    # One ring over mixed links: shared memory to the neighbour on the same host, TCP across hosts;
    # by default allreduces also reduce inside each host first (the hierarchical rings).
    transports = [line for line in rank_lines(proc.stdout, 0) if line.startswith("TRANSPORT")]
    if layout == (1, 1, 1):
        assert transports == ["TRANSPORT tcp"], transports
    else:
        assert transports[0].startswith("TRANSPORT shm") and "to rank 1, tcp from rank 3" in transports[0], transports
        hierarchical = "allreduce hierarchical: shm (single-copy) inside a host, tcp across 2 hosts" in transports[0]
        assert hierarchical == (algorithm == "auto"), transports
    _no_ranks_left(hosts)


PROCESS_SETS = """
import tensorflow as tf
import tfring
from tfring import ops

r = tfring.rank()
across = [ops.add_process_set([0, 2]), ops.add_process_set([1, 3])]  # host a's rank with host b's: TCP
inside = ops.add_process_set([0, 1])  # host a's two ranks: shared memory
mine = across[r % 2]
x = tf.fill([300000], float(r + 1))  # over the gathered allreduce's budget: the set's ring
print("SUM", ops.allreduce(x, process_set=mine).numpy()[[0, -1]].tolist())
print("ROOT", ops.broadcast(x, root_rank=r % 2 + 2, process_set=mine).numpy()[0])
print("GATHER", ops.allgather(tf.constant([r]), process_set=mine).numpy().tolist())
if r < 2:
    print("INSIDE", ops.allreduce(x, process_set=inside).numpy()[0])
print("WHOLE", ops.allreduce(tf.constant([1.0])).numpy()[0])
"""


def test_process_sets_across_hosts_and_inside_one(two_hosts):
    proc = launch(two_hosts, (2, 2), PROCESS_SETS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(4):
        partner = (r + 2) % 4
        expected = [f"SUM {[float(r + partner + 2)] * 2}", f"ROOT {float(r % 2 + 3)}",
                    f"GATHER {sorted([r, partner])}"]
        expected += ["INSIDE 3.0"] if r < 2 else []
        assert rank_lines(proc.stdout, r) == expected + ["WHOLE 4.0"], proc.stdout[-3000:]
    _no_ranks_left(two_hosts)


def test_fit_across_hosts_equals_one_process(two_hosts, tmp_path):
    env = {"OPT": "adam", "INPUT": "dataset", "OUT": str(tmp_path)}
    _single(tmp_path, env)
    proc = launch(two_hosts, (2, 2), FIT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one = np.load(tmp_path / "w0of1.npy")
    ranks = [np.load(tmp_path / f"w{r}of4.npy") for r in range(4)]
    assert all(np.array_equal(ranks[0], w) for w in ranks[1:]), "ranks differ"
    assert np.max(np.abs(ranks[0] - one)) <= 1e-5, np.max(np.abs(ranks[0] - one))


@pytest.mark.extended
def test_hostfile_and_host_identity(three_hosts, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# three emulated hosts\n" + "".join(f"{n} slots=1\n" for n in three_hosts.names))
    code = "import socket, tfring; tfring.init(); print('AT', socket.gethostname(), tfring.local_rank(), tfring.local_size())"
    script = _script(code)
    try:
        argv = launcher_argv(three_hosts, (1, 1, 1), script)
        argv[argv.index("-H"):argv.index("-H") + 2] = ["--hostfile", str(hostfile)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r, name in enumerate(three_hosts.names):
        assert rank_lines(proc.stdout, r) == [f"AT {name} 0 1"]


def test_an_unknown_host_fails_the_start_naming_it(two_hosts):
    argv = launcher_argv(two_hosts, (1, 1), "/dev/null")
    argv[argv.index("-H") + 1] = f"{two_hosts.names[0]}:1,nosuchhost:1"
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 127
    assert "cannot start rank 1 on host nosuchhost: ssh: Could not resolve hostname nosuchhost" in proc.stderr
    _no_ranks_left(two_hosts)


@pytest.mark.extended
def test_a_host_whose_sshd_is_stopped_fails_the_start_naming_it(two_hosts):
    two_hosts.stop_sshd(1)
    try:
        start = time.monotonic()
        proc = launch(two_hosts, (1, 1), "import time; time.sleep(60)", timeout=120)
        assert proc.returncode == 127
        assert f"cannot start rank 1 on host {two_hosts.names[1]}: " in proc.stderr
        assert "Connection refused" in proc.stderr
        assert time.monotonic() - start < 30
    finally:
        two_hosts.start_sshd(1)
    _no_ranks_left(two_hosts)


LOOP = r'''
import os, sys, time
import tensorflow as tf
import tfring
tfring.init()
print("UP", tfring.rank(), os.getpid(), flush=True)
try:
    while True:
        tfring.ops.allreduce(tf.ones([1 << 16]))
        time.sleep(0.01)
except tf.errors.UnavailableError as e:
    print("UNAVAILABLE", e.message.splitlines()[0], flush=True)
    sys.exit(1)
'''


def _start(hosts, layout, source, env=None):
    script = _script(source)
    proc = subprocess.Popen(launcher_argv(hosts, layout, script, env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    pids = {}
    deadline = time.monotonic() + 120
    while len(pids) < sum(layout) and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if " UP " in line:
            _, _, rank, pid = line.split()
            pids[int(rank)] = int(pid)
    if len(pids) < sum(layout):
        proc.kill()
        os.unlink(script)
        raise AssertionError(f"the ranks did not start: {proc.communicate(timeout=30)[1][-3000:]}")
    return proc, pids, script


def test_a_rank_killed_on_another_host_stops_every_rank_on_every_host(two_hosts):
    proc, pids, script = _start(two_hosts, (2, 2), LOOP)
    try:
        start = time.monotonic()
        os.kill(pids[3], signal.SIGKILL)  # rank 3 runs on host h1 (pids are global: one pid namespace)
        out, err = proc.communicate(timeout=60)
        assert time.monotonic() - start < 30
        assert proc.returncode == 137, err[-3000:]
        assert f"rank 3 on host {two_hosts.names[1]} exited with code 137" in err
        assert "rank 3 was killed by SIGKILL" in err
    finally:
        os.unlink(script)
        proc.kill()
    _no_ranks_left(two_hosts)


@pytest.mark.extended
def test_a_stopped_rank_times_out_the_others(two_hosts):
    proc, pids, script = _start(two_hosts, (1, 1), LOOP, env={"TFRING_TIMEOUT": "3"})
    try:
        os.kill(pids[1], signal.SIGSTOP)
        out, err = proc.communicate(timeout=90)
        assert proc.returncode != 0
        assert any("rank 1 stopped answering" in line for line in rank_lines(out, 0)), out[-2000:] + err[-2000:]
    finally:
        os.unlink(script)
        for pid in pids.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.kill()
    _no_ranks_left(two_hosts)


@pytest.mark.parametrize("layout", [pytest.param((1, 1), id="2x1", marks=pytest.mark.extended),
                                    pytest.param((2, 2), id="2x2-hierarchical")])
def test_a_host_cut_off_mid_allreduce_fails_the_others_naming_the_peer(two_hosts, layout):
    proc, pids, script = _start(two_hosts, layout, LOOP, env={"TFRING_TIMEOUT": "5"})
    try:
        two_hosts.link_down(1)
        out, err = proc.communicate(timeout=90)
        local = range(layout[0])  # the ranks on the host that stays up
        seen = {r: [line for line in rank_lines(out, r) if line.startswith("UNAVAILABLE")] for r in local}
        assert all(seen.values()), out[-2000:] + err[-2000:]
        # The rank waiting on the far host names a rank there; a rank waiting on its own host's
        # neighbour may name that neighbour, which failed first.
        far = [f"rank {r}" for r in range(layout[0], sum(layout))]
        assert any(name in lines[0] for lines in seen.values() for name in far), seen
        assert proc.returncode != 0
    finally:
        two_hosts.link_up(1)
        os.unlink(script)
        proc.kill()
    _no_ranks_left(two_hosts, seconds=60)  # rank 1 times out by itself behind the cut link


def test_a_host_cut_off_is_noticed_long_before_the_collective_timeout(two_hosts):
    # TCP keepalive probes on the ring's sockets: a silent peer host fails the connection within
    # about 5 s, and the launcher does not wait for that host's ranks to answer SIGTERM.
    proc, pids, script = _start(two_hosts, (1, 1), LOOP, env={"TFRING_TIMEOUT": "120"})
    try:
        start = time.monotonic()
        two_hosts.link_down(1)
        out, err = proc.communicate(timeout=180)
        assert proc.returncode != 0
        assert time.monotonic() - start < 40, err[-3000:]  # (the collective timeout is 120 s)
        assert "UNAVAILABLE" in out, out[-2000:] + err[-2000:]
    finally:
        two_hosts.link_up(1)
        os.unlink(script)
        proc.kill()
    _no_ranks_left(two_hosts, seconds=180)  # rank 1 behind the cut link: its own keepalive ends it


@pytest.mark.extended
def test_hierarchical_allreduce_on_an_uneven_layout_fails_saying_why(two_hosts):
    proc = launch(two_hosts, (2, 1), LOOP, env={"TFRING_ALLREDUCE": "hierarchical"}, timeout=120)
    assert proc.returncode != 0
    assert "needs the same number of ranks on every host" in proc.stderr, proc.stderr[-3000:]
    _no_ranks_left(two_hosts)


def test_a_killed_launcher_leaves_no_rank_on_any_host(two_hosts):
    proc, pids, script = _start(two_hosts, (2, 2), LOOP)
    try:
        proc.kill()
        proc.wait(timeout=10)
    finally:
        os.unlink(script)
    _no_ranks_left(two_hosts)


def _mpirun(hosts, env, extra=()):
    from mpirun_test import SCRIPT

    names = hosts.names
    exports = [a for k in ["PATH", *QUIET_ENV, *extra] for a in ("-x", k)]
    cmd = (["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "4",
            "--host", f"{names[0]}:2,{names[1]}:2", "--mca", "plm_rsh_agent", " ".join(hosts.ssh_command)]
           + exports + [sys.executable, "-c", SCRIPT])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = sorted(line for line in proc.stdout.splitlines() if line.startswith("MPI"))
    assert lines == [f"MPI {r} 4 2 [10.0, 10.0, 10.0, 10.0, 10.0]" for r in range(4)], proc.stdout
    _no_ranks_left(hosts)


_NEEDS_MPIRUN = pytest.mark.skipif(shutil.which("mpirun") is None,
                                   reason="mpirun is not installed (apt-get install openmpi-bin; .ci/run does)")


@_NEEDS_MPIRUN
@pytest.mark.extended
def test_mpirun_across_hosts_with_a_secret_and_a_store_address(two_hosts):
    env = {k: v for k, v in {**os.environ, **QUIET_ENV}.items() if not k.startswith("TFRING_")}
    env["TFRING_SECRET"] = secrets.token_hex(16)
    env["TFRING_STORE_ADDR"] = f"{two_hosts.addresses[0]}:{29500 + secrets.randbelow(1000)}"
    _mpirun(two_hosts, env, ["TFRING_SECRET", "TFRING_STORE_ADDR"])


@_NEEDS_MPIRUN
@pytest.mark.extended
def test_mpirun_across_hosts_finds_rank0_through_a_rendezvous_file(two_hosts, tmp_path):
    env = {k: v for k, v in {**os.environ, **QUIET_ENV}.items() if not k.startswith("TFRING_")}
    env["TFRING_SECRET"] = secrets.token_hex(16)
    env["TFRING_RENDEZVOUS_FILE"] = str(tmp_path / "rendezvous")  # chosen even where mpi4py is installed
    _mpirun(two_hosts, env, ["TFRING_SECRET", "TFRING_RENDEZVOUS_FILE"])
    assert not (tmp_path / "rendezvous").exists(), "rank 0 left its rendezvous file behind"


@_NEEDS_MPIRUN
def test_mpirun_across_hosts_with_nothing_set_over_mpi4py(two_hosts):
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (the test requirements install it)")
    env = {k: v for k, v in {**os.environ, **QUIET_ENV}.items() if not k.startswith("TFRING_")}
    _mpirun(two_hosts, env)


@pytest.mark.parametrize("signum", [pytest.param(signal.SIGTERM, id="SIGTERM", marks=pytest.mark.extended),
                                    pytest.param(signal.SIGINT, id="SIGINT")])
def test_a_signal_to_the_launcher_stops_every_rank_on_every_host(two_hosts, signum):
    proc, pids, script = _start(two_hosts, (2, 2), LOOP)
    try:
        start = time.monotonic()
        proc.send_signal(signum)
        proc.communicate(timeout=30)
        _no_ranks_left(two_hosts, seconds=10)
        assert time.monotonic() - start < 10  # 5 s by design; slack for a loaded 2-core machine
        assert proc.returncode != 0
    finally:
        os.unlink(script)
        proc.kill()


@pytest.mark.parametrize("lost", [2, 0], ids=["last-host", "rank-0s-host"])
def test_an_elastic_fit_loses_a_host_and_goes_on_to_the_uninterrupted_weights(three_hosts, tmp_path, lost):
    # 3 hosts of one rank; after the first epoch's backup every process of one host is killed, the
    # host cut off and no longer listed: the job starts again on the other two from the backup
    # (tests/elastic_test.py). Losing rank 0's host moves rank 0 (and the store) to another host.
    from elastic_test import FIT as ELASTIC_FIT

    env = {"OUT": str(tmp_path), "OPT": "sgd", "CHANGE": "none"}
    script = tmp_path / "fit.py"
    script.write_text(ELASTIC_FIT)
    alone = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                           env={**{k: v for k, v in os.environ.items() if not k.startswith("TFRING_")},
                                **QUIET_ENV, **env})
    assert alone.returncode == 0, alone.stderr[-3000:]
    hosts_file, discover = tmp_path / "hosts", tmp_path / "discover.sh"
    hosts_file.write_text("".join(f"{name}:1\n" for name in three_hosts.names))
    discover.write_text(f"#!/bin/sh\ncat {hosts_file}\n")
    discover.chmod(0o700)
    exports = [a for k, v in {**QUIET_ENV, **env, "HOSTS": str(hosts_file), "SLOW": "0.3"}.items()
               for a in ("-x", f"{k}={v}")]
    argv = [sys.executable, "-m", "tfring", "run", "--min-np", "2", "--host-discovery-script", str(discover),
            "--rsh", " ".join(three_hosts.ssh_command), "--blacklist-cooldown-range", "300", "300",
            "--all-output", *exports, sys.executable, str(script)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        metadata = tmp_path / "backup-sgd-job" / "training_metadata.json"
        deadline = time.monotonic() + 180
        while not metadata.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert metadata.exists(), "no backup was written"
        hosts_file.write_text("".join(f"{name}:1\n" for i, name in enumerate(three_hosts.names) if i != lost))
        for pid in three_hosts.pids(lost):  # every process of the host, then its link
            os.kill(pid, signal.SIGKILL)
        three_hosts.link_down(lost)
        try:
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=30)
            raise AssertionError("the elastic job did not end within 300 s: "
                                 + "\n".join(line for line in err.splitlines() if not line.startswith("["))[-3000:])
    finally:
        three_hosts.link_up(lost)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == 0, err[-3000:]
    assert "starting the job again (restart 1 of at most 3)" in err, err[-3000:]
    # its rank is blamed and kept out, or a rank that only lost it, which keeps no host out
    assert (f"host {three_hosts.names[lost]} kept out for 300 s" in err
            or "no host kept out (the first failure lost a peer)" in err), err[-3000:]
    one = np.load(tmp_path / "w-sgd-alone-r0-0of1.npy")
    for r in range(2):
        resumed = np.load(tmp_path / f"w-sgd-job-r1-{r}of2.npy")
        assert np.max(np.abs(resumed - one)) <= 1e-5, np.max(np.abs(resumed - one))
    _no_ranks_left(three_hosts)


def _wait_for(condition, seconds, what, proc):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise AssertionError(f"{what} within {seconds} s (launcher exit: {proc.poll()})")
        time.sleep(0.2)


def _start_committing_fit(hosts, tmp_path, env, min_np, args=()):
    """Runs tests/elastic_state_test.py's SCRIPT alone, then starts it as an elastic job on every
    host (one rank each, listed by a discovery script). Returns the launcher's process, a function
    that lists the hosts named, its stderr and the ranks' stdout (files), and the commits' folder."""
    from elastic_state_test import SCRIPT

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    alone = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                           env={**{k: v for k, v in os.environ.items() if not k.startswith("TFRING_")},
                                **QUIET_ENV, **env})
    assert alone.returncode == 0, alone.stderr[-3000:]
    hosts_file, discover, scratch = tmp_path / "hosts", tmp_path / "discover.sh", tmp_path / "scratch"
    scratch.mkdir()
    listed = lambda *names: hosts_file.write_text("".join(f"{name}:1\n" for name in names))  # noqa: E731
    listed(*hosts.names)
    discover.write_text(f"#!/bin/sh\ncat {hosts_file}\n")
    discover.chmod(0o700)
    exports = [a for k, v in {**QUIET_ENV, **env, "SLOW": "0.5", "TMPDIR": str(scratch)}.items()
               for a in ("-x", f"{k}={v}")]
    argv = [sys.executable, "-m", "tfring", "run", "--min-np", str(min_np), "--host-discovery-script", str(discover),
            "--rsh", " ".join(hosts.ssh_command), "--blacklist-cooldown-range", "1", "1",
            "--all-output", *args, *exports, sys.executable, str(script)]
    log, printed = tmp_path / "launcher.log", tmp_path / "ranks.log"
    with open(log, "w") as err, open(printed, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, start_new_session=True)
    return proc, listed, log, printed, scratch / f"tfring-{os.geteuid()}"


def _lose_a_host_between_commits(hosts, lost, listed, kept, proc):
    """Once a commit is written, and one batch later: host `lost` leaves the list and loses every
    process, its link and its sshd."""
    _wait_for(lambda: list(kept.glob("elastic-*/commit")), 180, "no commit was written", proc)
    time.sleep(0.7)  # (mid-way between two commits: one batch after one)
    listed(*[name for i, name in enumerate(hosts.names) if i != lost])
    for pid in hosts.pids(lost):
        os.kill(pid, signal.SIGKILL)
    hosts.link_down(lost)
    hosts.stop_sshd(lost)


def _bring_back_and_end(hosts, i, proc):
    """Whatever the test saw: host `i`'s link and sshd back, and the launcher's process group ended."""
    hosts.link_up(i, answer=False)
    hosts.start_sshd(i)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.mark.parametrize("lost,mode", [(2, "fit"), (0, "loop")], ids=["last-host-fit", "rank-0s-host-custom-loop"])
def test_elastic_commits_survive_a_lost_host_and_the_job_grows_back_to_the_uninterrupted_weights(
        three_hosts, tmp_path, lost, mode):
    # 3 hosts of one rank, a fit committing every 2 batches with tfring.elastic (tests/elastic_state_test.py):
    # between two commits one host loses every process, its link and its sshd, and leaves the host
    # list. The two ranks left go on in their processes from the commit they hold in memory (losing
    # rank 0's host loses the store: the new rank 0 serves a new one). The host comes back and is
    # listed again: the two ranks stop at their next commit and wait in their processes, a rank
    # starts on the host that came back and joins them, taking the commit from their memory; the
    # job ends with the weights of the uninterrupted one-process run, leaving no commit on any host
    # and no process behind. A `fit`, or a custom loop (`tf.function` made in the function `run` calls).
    env = {"OUT": str(tmp_path), "OPT": "sgd", "MODE": mode, "EPOCHS": "8"}
    proc, listed, log, printed, kept = _start_committing_fit(three_hosts, tmp_path, env, min_np=2)
    try:
        _lose_a_host_between_commits(three_hosts, lost, listed, kept, proc)
        _wait_for(lambda: printed.read_text().count("reset: 2 rank(s)") == 2, 120, "the job did not go on", proc)
        time.sleep(3)  # (a few batches and commits on two ranks)
        three_hosts.link_up(lost, answer=False)
        three_hosts.start_sshd(lost)
        listed(*three_hosts.names)
        _wait_for(lambda: "growing it in the ranks' processes" in log.read_text(), 120, "the job did not grow", proc)
        proc.wait(timeout=300)
    finally:
        _bring_back_and_end(three_hosts, lost, proc)
    said = log.read_text()
    assert proc.returncode == 0, said[-3000:]
    assert "the job ended well after 1 failure and 1 resize" in said, said[-3000:]
    name = three_hosts.names[lost]
    assert (f"rank {lost} on host {name} stopped answering (the other ranks lost it); host {name} kept out for 1 s; "
            "going on with the 2 ranks left, in their processes (restart 1 of at most 3)") in said, said[-3000:]
    moved = [(1, 0), (2, 1)] if lost == 0 else [(0, 0), (1, 1)]
    assert all(f"tfring: rank {old}: now rank {new} of 2" in said for old, new in moved), said[-3000:]
    assert "tfring run: the ranks stopped at a commit and wait for the new ones in their processes" in said, said[-3000:]
    assert "tfring: rank 2: started to join the running job" in said, said[-3000:]  # (the kept ranks' hosts first)
    assert printed.read_text().count("started pid") == 4, printed.read_text()  # 3, then 1 joining: none again
    resets = [line.split("reset: ")[1] for line in printed.read_text().splitlines() if "reset: " in line]
    # each membership went on from a commit, not from the start: "2 rank(s) from epoch E batch B step S"
    assert [r.split()[0] for r in resets] == ["2"] * 2 + ["3"] * 3 and all(
        r.split()[4:9:2] != ["0", "0", "0"] for r in resets), resets
    one = np.load(tmp_path / f"w-{mode}-sgd-alone-r0-0of1.npy")
    for r in range(3):
        went_on = np.load(tmp_path / f"w-{mode}-sgd-job-r2-{r}of3.npy")
        assert np.max(np.abs(went_on - one)) <= 1e-5, np.max(np.abs(went_on - one))
    assert list(kept.iterdir()) == []
    _no_ranks_left(three_hosts)


def test_an_elastic_job_left_below_min_np_fails_saying_so_and_leaves_nothing_running(three_hosts, tmp_path):
    env = {"OUT": str(tmp_path), "OPT": "sgd", "MODE": "fit", "EPOCHS": "8"}
    proc, listed, log, _, kept = _start_committing_fit(three_hosts, tmp_path, env, min_np=3,
                                                       args=("--elastic-timeout", "4"))
    try:
        _lose_a_host_between_commits(three_hosts, 1, listed, kept, proc)
        proc.wait(timeout=120)
    finally:
        _bring_back_and_end(three_hosts, 1, proc)
    said = log.read_text()
    assert proc.returncode == 1, said[-3000:]
    assert "tfring run: 2 slots of the --min-np 3 needed since " in said, said[-3000:]
    assert "(--elastic-timeout 4 s)" in said
    _no_ranks_left(three_hosts)


FLAPPING = """
import os, socket, sys, time
if socket.gethostname() == os.environ["FLAPPING"]:
    time.sleep(1)
    sys.exit(3)  # fails by itself, at every start
time.sleep(60)
"""


def test_a_flapping_host_is_kept_out_longer_each_time_until_the_restarts_run_out(three_hosts, tmp_path):
    hosts_file, discover = tmp_path / "hosts", tmp_path / "discover.sh"
    hosts_file.write_text("".join(f"{name}:1\n" for name in three_hosts.names))
    discover.write_text(f"#!/bin/sh\ncat {hosts_file}\n")
    discover.chmod(0o700)
    script = tmp_path / "flapping.py"
    script.write_text(FLAPPING)
    argv = [sys.executable, "-m", "tfring", "run", "--min-np", "2", "--host-discovery-script", str(discover),
            "--rsh", " ".join(three_hosts.ssh_command), "--blacklist-cooldown-range", "2", "8", "--max-restarts", "2",
            "-x", f"FLAPPING={three_hosts.names[2]}", sys.executable, str(script)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    flapping = three_hosts.names[2]
    assert done.returncode == 3, done.stderr[-3000:]
    # Kept out 2 s, then (back, growing the job, failing again) 4 s: never looping the job at full speed.
    assert f"host {flapping} kept out for 2 s; starting the job again (restart 1 of at most 2)" in done.stderr
    assert f"host {flapping} kept out for 4 s; starting the job again (restart 2 of at most 2)" in done.stderr
    assert "the hosts now offer 3 ranks where the job runs 2" in done.stderr
    assert ("the job failed 3 times, and --max-restarts 2 allows no more: "
            f"1) rank 2 on host {flapping} exited with code 3 (host {flapping}); 2)") in done.stderr, done.stderr[-3000:]
    _no_ranks_left(three_hosts)
