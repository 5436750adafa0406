"""`tfring run -H` through a stand-in for ssh (`--rsh`) that runs the far end on this host.

These check the launcher's side of the conversation without root or sshd: the environment and
secret travelling over the channel, per-host local ranks, output files, start failures, version
mismatches, exit codes and signals. tests/multihost_test.py runs the real ssh across emulated hosts.
"""

import os
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

from tfring.launch.launcher_test import check_sigint_reaches_every_rank
from tfring.version import __version__

pytestmark = pytest.mark.multiprocess
TFRING_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds tfring/


def _rsh(tmp_path, body):
    """A stand-in for ssh: called as `rsh HOST COMMAND`; `body` is shell code ($host, $command)."""
    path = tmp_path / "rsh"
    path.write_text(f'#!/bin/sh\nhost="$1"\ncommand="$2"\necho "$@" >> {tmp_path}/argv\n{body}\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _launch(args, timeout=90, env=None, **kw):
    full_env = {**os.environ, "PYTHONPATH": TFRING_ROOT, **(env or {})}
    return subprocess.run([sys.executable, "-m", "tfring", "run"] + args, capture_output=True, text=True,
                          timeout=timeout, env=full_env, **kw)


RANK_INFO = ("import os; e = os.environ; print(' '.join(e.get(k, '-') for k in ('TFRING_RANK', 'TFRING_LOCAL_RANK', "
             "'TFRING_LOCAL_SIZE', 'TFRING_SIZE', 'FOO', 'TFRING_TIMEOUT')), len(e['TFRING_SECRET']), "
             "e['TFRING_STORE_ADDR'].rsplit(':', 1)[0], os.getcwd())")


def test_ranks_on_other_hosts_get_their_environment_over_the_channel(tmp_path):
    rsh = _rsh(tmp_path, 'exec sh -c "$command"')
    proc = _launch(["-H", "hostA:2,hostB:1", "--rsh", rsh, "--all-output", "-x", "FOO=bar", "--timeout", "9",
                    "--output-dir", str(tmp_path / "logs"), sys.executable, "-c", RANK_INFO], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = sorted(line for line in proc.stdout.splitlines() if line.startswith("["))
    store = {line.split()[-2] for line in lines}
    assert len(store) == 1  # one store address for all
    assert [line.split()[:8] for line in lines] == [
        ["[0]", "0", "0", "2", "3", "bar", "9.0", "64"], ["[1]", "1", "1", "2", "3", "bar", "9.0", "64"],
        ["[2]", "2", "0", "1", "3", "bar", "9.0", "64"]]
    assert all(line.endswith(str(tmp_path)) for line in lines)  # the launcher's working directory
    # One log per rank; the job secret never on the remote command line.
    for r in range(3):
        assert (tmp_path / "logs" / f"rank.{r}.log").read_text().startswith(f"{r} ")
    argv = (tmp_path / "argv").read_text()
    assert argv.count("tfring.launch.remote") == 3 and "TFRING_SECRET" not in argv and "bar" not in argv


def test_bind_to_core_binds_ranks_on_each_host_to_that_hosts_share(tmp_path):
    cores = sorted(os.sched_getaffinity(0))[:2]
    if len(cores) < 2:
        pytest.skip("needs 2 usable cores")
    rsh = _rsh(tmp_path, 'exec sh -c "$command"')
    code = "import os; print(os.environ['TFRING_LOCAL_RANK'], sorted(os.sched_getaffinity(0)))"
    proc = _launch(["-H", "hostA:2,hostB:1", "--rsh", rsh, "--all-output", "--bind-to", "core",
                    sys.executable, "-c", code], cwd=tmp_path, preexec_fn=lambda: os.sched_setaffinity(0, cores))
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == [f"[0] 0 [{cores[0]}]", f"[1] 1 [{cores[1]}]", f"[2] 0 {cores}"]
    # A host with fewer cores than ranks says so, naming itself.
    proc = _launch(["-H", "hostA:3", "--rsh", rsh, "--bind-to", "core", sys.executable, "-c", "print('started')"],
                   cwd=tmp_path, preexec_fn=lambda: os.sched_setaffinity(0, cores))
    assert proc.returncode != 0 and "started" not in proc.stdout
    assert "--bind-to core: 3 ranks on this host but only 2 usable core(s)" in proc.stderr, proc.stderr


def test_a_host_that_cannot_be_reached_fails_the_start_naming_it(tmp_path):
    rsh = _rsh(tmp_path, '[ "$host" = bad ] && { echo "ssh: Could not resolve hostname bad: Name or service '
                         'not known" >&2; exit 255; }\nexec sh -c "$command"')
    start = time.monotonic()
    proc = _launch(["-H", "good:1,bad:1", "--rsh", rsh, sys.executable, "-c", "import time; time.sleep(60)"])
    assert proc.returncode == 127, proc.stderr
    assert ("tfring run: cannot start rank 1 on host bad: ssh: Could not resolve hostname bad: Name or service "
            "not known") in proc.stderr
    assert time.monotonic() - start < 30  # rank 0 (sleeping 60 s) was stopped


def test_a_host_that_does_not_answer_fails_within_the_start_timeout(tmp_path):
    rsh = _rsh(tmp_path, '[ "$host" = slow ] && exec sleep 60\nexec sh -c "$command"')
    start = time.monotonic()
    proc = _launch(["-H", "fast:1,slow:1", "--rsh", rsh, "--start-timeout", "3", sys.executable, "-c", "pass"])
    assert proc.returncode == 127
    assert "cannot start rank 1 on host slow: no answer within 3 s (--start-timeout)" in proc.stderr
    assert time.monotonic() - start < 20


def test_a_missing_working_directory_is_named(tmp_path):
    rsh = _rsh(tmp_path, '[ "$host" = other ] && command=$(echo "$command" | sed "s#^cd [^ ]*#cd /no/such/dir#")\n'
                         'exec sh -c "$command"')
    proc = _launch(["-H", "here:1,other:1", "--rsh", rsh, sys.executable, "-c", "pass"])
    assert proc.returncode == 127 and "cannot start rank 1 on host other:" in proc.stderr
    assert "/no/such/dir" in proc.stderr


def test_another_tfring_build_on_a_host_fails_the_start_naming_both(tmp_path):
    copy = tmp_path / "other" / "tfring"
    shutil.copytree(os.path.join(TFRING_ROOT, "tfring"), copy, ignore=shutil.ignore_patterns("lib", "__pycache__"))
    (copy / "version.py").write_text('__version__ = "9.9.9"\n')
    rsh = _rsh(tmp_path, f'[ "$host" = old ] && export PYTHONPATH={copy.parent}\nexec sh -c "$command"')
    # (Run from tmp_path: `python -m` puts the working directory first on sys.path.)
    proc = _launch(["-H", "new:1,old:1", "--rsh", rsh, sys.executable, "-c", "pass"],
                   env={"PYTHONPATH": ""}, cwd=tmp_path)
    assert proc.returncode == 127, proc.stderr
    assert "host old runs tfring 9.9.9 (build" in proc.stderr
    assert f"but rank 0's host new runs tfring {__version__} (build" in proc.stderr
    assert "install the same tfring and TensorFlow on every host" in proc.stderr


def test_a_failing_remote_rank_stops_the_job_with_its_code(tmp_path):
    rsh = _rsh(tmp_path, 'exec sh -c "$command"')
    code = ("import os, sys, time\n"
            "if os.environ['TFRING_RANK'] == '2': print('ValueError: boom', file=sys.stderr); sys.exit(5)\n"
            "time.sleep(60)")
    start = time.monotonic()
    proc = _launch(["-H", "a:2,b:2", "--rsh", rsh, sys.executable, "-c", code])
    assert proc.returncode == 5, proc.stderr
    # The remote rank's last stderr line travelled over ssh and is quoted.
    assert ("tfring run: first failure: rank 2 on host b exited with code 5 (last stderr line: ValueError: boom); "
            "stopped ranks 0, 1, 3 because of it") in proc.stderr, proc.stderr
    assert time.monotonic() - start < 30


def test_sigint_reaches_remote_ranks(tmp_path):
    rsh = _rsh(tmp_path, 'exec sh -c "$command"')
    check_sigint_reaches_every_rank(["-H", "a:1,b:1", "--rsh", rsh], env={**os.environ, "PYTHONPATH": TFRING_ROOT})


def test_bad_launch_options_are_refused(tmp_path):
    for args, message in [(["-H", "a:2,a:1"], "'a' is listed twice"),
                          (["-np", "5", "-H", "a:2,b:2"], "-np 5 does not fit the 4 slots"),
                          (["--hostfile", str(tmp_path / "none")], "cannot read"),
                          (["-np", "2", "-x", "NOT_SET_ANYWHERE_X"], "-x NOT_SET_ANYWHERE_X: NOT_SET_ANYWHERE_X is not set"),
                          (["-H", "a", "--start-timeout", "0"], "--start-timeout must be > 0"),
                          ([], "give -np N")]:
        proc = _launch(args + [sys.executable, "-c", "pass"], timeout=30)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)


def test_ctrl_c_while_a_host_does_not_answer_stops_the_start(tmp_path):
    rsh = _rsh(tmp_path, '[ "$host" = slow ] && exec sleep 60\nexec sh -c "$command"')
    p = subprocess.Popen([sys.executable, "-m", "tfring", "run", "-H", "fast:1,slow:1", "--rsh", rsh,
                          sys.executable, "-c", "import time; time.sleep(60)"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": TFRING_ROOT})
    time.sleep(3)
    start = time.monotonic()
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 128 + signal.SIGINT, err
    assert "tfring run: stopped by SIGINT while starting the job" in err
    assert time.monotonic() - start < 10


def test_ranks_that_ignore_a_forwarded_sigint_are_killed_after_the_grace(tmp_path):
    rsh = _rsh(tmp_path, 'exec sh -c "$command"')
    code = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    p = subprocess.Popen([sys.executable, "-m", "tfring", "run", "-H", "a:1,b:1", "--rsh", rsh, "--all-output",
                          sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": TFRING_ROOT})
    seen = 0
    while seen < 2:
        line = p.stdout.readline()
        assert line, "launcher ended early"
        seen += "ready" in line
    start = time.monotonic()
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 128 + signal.SIGINT, err
    assert "the ranks did not stop within 4 s of SIGINT; killing them" in err
    assert time.monotonic() - start < 4 + 5


def test_this_host_named_twice_is_refused(tmp_path):
    proc = _launch(["-H", "localhost:1,127.0.0.1:1", sys.executable, "-c", "pass"], timeout=30)
    assert proc.returncode == 2 and "127.0.0.1 and localhost are both this host" in proc.stderr
    proc = _launch(["-H=-oProxyCommand=x:1", sys.executable, "-c", "pass"], timeout=30)
    assert proc.returncode == 2 and "is not a host name" in proc.stderr
