"""`tfring run`: environment, output routing, exit codes, signal forwarding, kill on failure, which rank
is blamed, Ctrl-C, and mistyped options."""

import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time

import pytest

from tfring.launch import launcher


def _run(args, timeout=60, **kw):
    return subprocess.run([sys.executable, "-m", "tfring", "run"] + args, capture_output=True, text=True,
                          timeout=timeout, **kw)


@pytest.mark.multiprocess
def test_each_rank_gets_its_environment_and_output_is_prefixed():
    code = ("import os; print(' '.join(os.environ[k] for k in ('TFRING_RANK','TFRING_SIZE','TFRING_LOCAL_RANK',"
            "'TFRING_LOCAL_SIZE'))); print(len(os.environ['TFRING_SECRET']), os.environ['TFRING_STORE_ADDR']); "
            "print('hvd', ' '.join(os.environ['HOROVOD_' + k] for k in ('RANK', 'SIZE', 'LOCAL_RANK', 'LOCAL_SIZE', "
            "'CROSS_RANK', 'CROSS_SIZE')))")
    proc = _run(["-np", "3", "--all-output", sys.executable, "-c", code])
    assert proc.returncode == 0, proc.stderr
    for r in range(3):
        assert f"[{r}] {r} 3 {r} 3" in proc.stdout
        assert f"[{r}] hvd {r} 3 {r} 3 0 1" in proc.stdout  # horovodrun's variables, one host
    # A 32-byte hex secret and one store address, the same for every rank.
    secret_lines = {line.split(" ", 1)[1] for line in proc.stdout.splitlines() if " 127.0.0.1:" in line}
    assert len(secret_lines) == 1 and secret_lines.pop().startswith("64 127.0.0.1:")


@pytest.mark.multiprocess
def test_default_shows_rank0_stdout_and_every_stderr():
    code = "import os, sys; r = os.environ['TFRING_RANK']; print('out', r); print('err', r, file=sys.stderr)"
    proc = _run(["-np", "2", sys.executable, "-c", code])
    assert proc.returncode == 0
    assert "[0] out 0" in proc.stdout and "[1] out 1" not in proc.stdout
    assert "[0] err 0" in proc.stderr and "[1] err 1" in proc.stderr


@pytest.mark.multiprocess
def test_failing_rank_stops_the_others_and_sets_the_exit_code():
    code = ("import os, sys, time\n"
            "if os.environ['TFRING_RANK'] == '1': sys.exit(3)\n"
            "time.sleep(100)")
    start = time.monotonic()
    proc = _run(["-np", "3", sys.executable, "-c", code])
    assert proc.returncode == 3
    assert time.monotonic() - start < 30  # rank 0 would sleep 100 s if it were not stopped
    assert "rank 1 exited with code 3" in proc.stderr


@pytest.mark.multiprocess
def test_the_failure_line_starts_a_line_after_a_progress_bar_cut_short():
    # Keras' progress bar redraws one line with "\r" and ends it only with the epoch.
    code = ("import os, sys\n"
            "sys.stdout.write('1/10 [==>....]\\r2/10 [====>..]'); sys.stdout.flush()\n"
            "sys.exit(3 if os.environ['TFRING_RANK'] == '0' else 0)")
    proc = subprocess.run([sys.executable, "-m", "tfring", "run", "-np", "2", sys.executable, "-c", code],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    assert proc.returncode == 3
    out = proc.stdout.decode()  # as bytes: text mode would read the "\r" as a line's end
    assert "[0] 1/10 [==>....]\r2/10 [====>..]\n" in out, repr(out)
    said = [line for line in out.split("\n") if "rank 0 exited with code 3" in line]
    assert said and all(line.startswith("tfring run:") for line in said), repr(proc.stdout)


@pytest.mark.multiprocess
def test_rank_ignoring_sigterm_is_killed_within_five_seconds():
    code = ("import os, signal, sys, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "if os.environ['TFRING_RANK'] == '0': time.sleep(0.5); sys.exit(7)\n"
            "time.sleep(100)")
    start = time.monotonic()
    proc = _run(["-np", "2", sys.executable, "-c", code])
    assert proc.returncode == 7
    # The other rank sleeps 100 s and ignores SIGTERM: only the SIGKILL after the grace ends it.
    # (Generous margin: interpreter start-up on a loaded 2-core machine.)
    assert time.monotonic() - start < 0.5 + launcher.KILL_GRACE_SECONDS + 20


@pytest.mark.multiprocess
def test_signal_killed_rank_maps_to_128_plus_signal():
    code = "import os, signal\nif os.environ['TFRING_RANK'] == '1': os.kill(os.getpid(), signal.SIGKILL)"
    proc = _run(["-np", "2", sys.executable, "-c", code])
    assert proc.returncode == 128 + 9


SIGINT_HANDLER = ("import signal, sys, time\n"
                  "def h(*a): print('got SIGINT', flush=True); sys.exit(0)\n"
                  "signal.signal(signal.SIGINT, h)\n"
                  "print('ready', flush=True)\n"
                  "time.sleep(60)")


def check_sigint_reaches_every_rank(launcher_args, env=None):
    """Starts two ranks that print 'ready', sends SIGINT to `tfring run`, and checks both got it."""
    p = subprocess.Popen([sys.executable, "-m", "tfring", "run"] + launcher_args + ["--all-output", sys.executable,
                          "-c", SIGINT_HANDLER], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    watchdog = threading.Timer(60, p.kill)  # readline() has no timeout: a hung start fails the test
    watchdog.start()
    try:
        seen = 0
        while seen < 2:
            line = p.stdout.readline()
            assert line, "launcher ended early (or hung for 60 s)"
            seen += "ready" in line
    finally:
        watchdog.cancel()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert out.count("got SIGINT") == 2


@pytest.mark.multiprocess
def test_sigint_is_forwarded_to_every_rank():
    check_sigint_reaches_every_rank(["-np", "2"])


@pytest.mark.multiprocess
def test_bad_arguments_are_refused():
    assert _run(["-np", "0", sys.executable, "-c", "pass"]).returncode == 2
    proc = _run(["-np", "2"])
    assert proc.returncode == 2 and "no command" in proc.stderr
    proc = _run(["-np", "1", "/nonexistent/program"])
    assert proc.returncode == 127 and proc.stderr.strip().splitlines() == [
        "tfring run: cannot start '/nonexistent/program': No such file or directory"], proc.stderr


@pytest.mark.multiprocess
def test_a_forgotten_python_is_one_line_with_the_fix(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hello')\n")
    proc = _run(["-np", "2", str(script)])
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 127 and len(lines) == 1, proc.stderr
    assert "Permission denied" in lines[0] and f"tfring run -np N python {script}" in lines[0]


WARN = ("import warnings, os; warnings.warn('deprecated thing'); "
        "warnings.warn('rank ' + os.environ['TFRING_RANK'] + ' only')")


@pytest.mark.multiprocess
@pytest.mark.parametrize("all_output", [False, True])
def test_python_warnings_of_other_ranks_are_shown_once(all_output):
    proc = _run(["-np", "3"] + (["--all-output"] if all_output else []) + [sys.executable, "-c", WARN])
    assert proc.returncode == 0, proc.stderr
    same = [line for line in proc.stderr.splitlines() if "UserWarning: deprecated thing" in line]
    assert len(same) == (3 if all_output else 1), proc.stderr
    for r in range(3):  # a warning that differs per rank is shown from every rank
        assert f"UserWarning: rank {r} only" in proc.stderr


AFFINITY = "import os; print(os.environ['TFRING_LOCAL_RANK'], sorted(os.sched_getaffinity(0)))"


@pytest.mark.multiprocess
def test_bind_to_core_gives_each_rank_its_share_of_the_launchers_cores():
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs 2 usable cores")
    # Bound to the launcher's first two cores, as taskset would leave it: one each.
    proc = _run(["-np", "2", "--bind-to", "core", "--all-output", sys.executable, "-c", AFFINITY],
                preexec_fn=lambda: os.sched_setaffinity(0, cores[:2]))
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == [f"[0] 0 [{cores[0]}]", f"[1] 1 [{cores[1]}]"]
    # One rank gets them both, and without --bind-to a rank keeps what the launcher has.
    for extra in (["--bind-to", "core"], []):
        proc = _run(["-np", "1"] + extra + [sys.executable, "-c", AFFINITY])
        assert proc.stdout.strip() == f"[0] 0 {cores}", proc.stderr


@pytest.mark.multiprocess
def test_bind_to_core_refuses_more_ranks_than_cores_before_starting_any():
    proc = _run(["-np", "2", "--bind-to", "core", sys.executable, "-c", "print('started')"],
                preexec_fn=lambda: os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:1]))
    assert proc.returncode == 2 and "started" not in proc.stdout
    assert proc.stderr.strip().startswith("tfring run: --bind-to core: 2 ranks on this host but only 1 usable "
                                          "core(s)"), proc.stderr


@pytest.mark.multiprocess
def test_timeout_option_reaches_the_ranks():
    proc = _run(["-np", "1", "--timeout", "7.5", sys.executable, "-c", "import os; print(os.environ['TFRING_TIMEOUT'])"])
    assert proc.stdout.strip() == "[0] 7.5"


@pytest.mark.multiprocess
def test_timeline_option_reaches_the_ranks_as_an_absolute_path(tmp_path):
    proc = _run(["-np", "1", "--timeline", "t.json", sys.executable, "-c",
                 "import os; print(os.environ['TFRING_TIMELINE'])"])
    assert proc.stdout.strip() == f"[0] {os.path.abspath('t.json')}"


def _alive(pid):
    """True while `pid` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.multiprocess
@pytest.mark.parametrize("wrapped", [False, True], ids=["python", "shell-wrapped"])
def test_ranks_die_with_a_killed_launcher(wrapped):
    # SIGKILL of `tfring run` gives it no chance to stop its ranks: they must notice by themselves
    # (the direct child through PR_SET_PDEATHSIG; a rank behind a wrapper through the launcher's pipe).
    code = "import os, time, tfring; tfring.init(); print('UP', os.getpid(), flush=True); time.sleep(120)"
    command = [sys.executable, "-c", code]
    if wrapped:
        command = ["sh", "-c", shlex.join(command) + "; true"]
    launcher_proc = subprocess.Popen([sys.executable, "-m", "tfring", "run", "-np", "2", "--all-output"] + command,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     start_new_session=True)
    pids = []
    try:
        deadline = time.monotonic() + 60
        while len(pids) < 2 and time.monotonic() < deadline:
            line = launcher_proc.stdout.readline()
            if "UP" in line:
                pids.append(int(line.split()[-1]))
        assert len(pids) == 2, "the ranks did not start"
        launcher_proc.kill()
        launcher_proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids), "ranks outlived their launcher"
    finally:
        launcher_proc.kill()
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _summary(stderr):
    """The launcher's own lines (not a rank's)."""
    return [line for line in stderr.splitlines() if line.startswith("tfring run: ")]


BOOM_ON_RANK_1 = ("import os, time\n"
                  "if os.environ['TFRING_RANK'] == '1': time.sleep(0.3); raise ValueError('boom')\n"
                  "time.sleep(100)")


@pytest.mark.multiprocess
@pytest.mark.parametrize("size", [2, 3])
def test_the_rank_that_failed_first_is_blamed_with_its_last_error_line(size):
    proc = _run(["-np", str(size), sys.executable, "-c", BOOM_ON_RANK_1])
    assert proc.returncode == 1, proc.stderr
    others = "ranks 0, 2" if size == 3 else "rank 0"
    assert _summary(proc.stderr) == [
        "tfring run: first failure: rank 1 exited with code 1 (last stderr line: ValueError: boom); "
        f"stopped {others} because of it"], proc.stderr
    assert proc.stderr.rstrip().endswith("because of it")  # the summary ends the output


# A line as a rank prints it when its ring neighbour died (the core's words: tcp_transport.cc).
PEER_LOST = ("tensorflow.python.framework.errors_impl.UnavailableError: tfring.allreduce 'x' failed on rank 0: "
             "lost the connection to rank 1: connection closed by peer [Op:TfringAllreduce]")


# Rank 1 fails by itself, rank 0 with a lost-peer error, rank 2 sleeps until stopped. Markers in
# DIR order their exits: "cause first": rank 0 speaks 0.2 s after rank 1 has exited (and ignores
# the launcher's SIGTERM meanwhile); "consequence first": rank 1 exits 0.5 s after rank 0 has.
PEER_LOST_JOB = """
import os, signal, sys, time

def wait_until(done):
    deadline = time.monotonic() + 30
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)

def gone(pid):  # a zombie has exited too
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True

rank = os.environ["TFRING_RANK"]
if rank == "1":
    print("ValueError: boom", file=sys.stderr, flush=True)
    with open(DIR + "/1.tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(DIR + "/1.tmp", DIR + "/1")
    if ORDER == "consequence first":
        wait_until(lambda: os.path.exists(DIR + "/0"))
        time.sleep(0.5)
    sys.exit(1)
if rank == "0":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    wait_until(lambda: os.path.exists(DIR + "/1"))
    if ORDER == "cause first":
        pid = int(open(DIR + "/1").read())
        wait_until(lambda: gone(pid))
        time.sleep(0.2)
    print(PEER_LOST, file=sys.stderr, flush=True)
    open(DIR + "/0", "w").close()
    sys.exit(1)
time.sleep(100)
"""


@pytest.mark.multiprocess
@pytest.mark.parametrize("order", ["cause first", "consequence first"])
def test_a_rank_that_lost_its_peer_is_not_blamed(tmp_path, order):
    script = tmp_path / "job.py"
    script.write_text(f"DIR = {str(tmp_path)!r}\nORDER = {order!r}\nPEER_LOST = {PEER_LOST!r}\n" + PEER_LOST_JOB)
    proc = _run(["-np", "3", sys.executable, str(script)])
    assert proc.returncode == 1, proc.stderr
    assert _summary(proc.stderr) == [
        "tfring run: first failure: rank 1 exited with code 1 (last stderr line: ValueError: boom); "
        "stopped ranks 0, 2 because of it"], proc.stderr
    assert "[0] " + PEER_LOST in proc.stderr  # rank 0 did fail, saying it lost its peer


SLEEPERS = ("import sys, time\n"
            "print('ready', file=sys.stderr, flush=True)\n"
            "time.sleep(60)")


@pytest.mark.multiprocess
@pytest.mark.parametrize("signum, all_output, said", [(signal.SIGINT, False, "stopped by Ctrl-C"),
                                                       (signal.SIGINT, True, "stopped by Ctrl-C"),
                                                       (signal.SIGTERM, False, "stopped by SIGTERM")])
def test_ctrl_c_says_so_once_and_blames_no_rank(signum, all_output, said):
    proc = subprocess.Popen([sys.executable, "-m", "tfring", "run", "-np", "2"] +
                            (["--all-output"] if all_output else []) + [sys.executable, "-c", SLEEPERS],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lines = queue.Queue()
        reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True)
        reader.start()
        seen = []
        while sum("ready" in line for line in seen) < 2:
            seen.append(lines.get(timeout=60))
        proc.send_signal(signum)
        assert proc.wait(timeout=30) == 128 + signum
        reader.join(timeout=10)
        err = "".join(seen + list(lines.queue))
    finally:
        proc.kill()
    assert err.count(said) == 1, err
    assert "killed by SIG" not in err and "exited with code" not in err, err
    # The ranks' KeyboardInterrupt tracebacks: only with --all-output.
    assert ("Traceback" in err) == (all_output and signum == signal.SIGINT), err


@pytest.mark.multiprocess
@pytest.mark.parametrize("typo, suggestion", [("--all-ouput", "--all-output"), ("--np", "-np")])
def test_a_mistyped_option_shows_run_usage_and_a_suggestion(typo, suggestion):
    proc = _run([typo] + (["2"] if typo == "--np" else []) + [sys.executable, "-c", "pass"])
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: tfring run "), proc.stderr
    assert f"tfring run: error: unrecognized arguments: {typo} (did you mean {suggestion}?)" in proc.stderr


@pytest.mark.multiprocess
def test_an_option_with_no_close_match_is_named_without_a_guess():
    proc = _run(["--zzzzzz", sys.executable, "-c", "pass"])
    assert proc.returncode == 2 and proc.stderr.startswith("usage: tfring run "), proc.stderr
    assert proc.stderr.rstrip().endswith("tfring run: error: unrecognized arguments: --zzzzzz"), proc.stderr


@pytest.mark.multiprocess
def test_options_after_the_command_belong_to_the_command():
    proc = _run(["-np", "1", sys.executable, "-c", "import sys; print(sys.argv[1:])", "--all-ouput"])
    assert proc.returncode == 0 and proc.stdout.strip() == "[0] ['--all-ouput']", proc.stderr


@pytest.mark.multiprocess
def test_long_lines_of_ranks_printing_at_once_stay_whole():
    # Two ranks print lines of ~300 KB at once into the launcher's stdout, a pipe: every line
    # must come out whole, behind its own rank's prefix (they interleaved mid-line before).
    code = ("import json, os\nr = os.environ['TFRING_RANK']\n"
            "for i in range(30): print(json.dumps({'r': r, 'i': i, 'd': [r] * 100000}))")
    proc = _run(["-np", "2", "--all-output", sys.executable, "-c", code], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 60
    for line in lines:
        prefix, text = line.split(" ", 1)
        value = json.loads(text)  # a torn line fails here
        assert prefix == f"[{value['r']}]" and value["d"] == [value["r"]] * 100000


# Rank 0 starts a `sleep` that ignores SIGTERM (only SIGKILL ends it), prints its pid and exits 0;
# rank 1 then exits 0, fails, or sleeps until the launcher is interrupted.
LEAVES_A_CHILD = ("import os, subprocess, sys, time\n"
                  "if os.environ['TFRING_RANK'] == '0':\n"
                  "    child = subprocess.Popen(['sh', '-c', 'trap \"\" TERM; exec sleep 300'])\n"
                  "    print('CHILD', child.pid, flush=True); sys.exit(0)\n"
                  "time.sleep(1)\n"
                  "sys.exit({'succeeds': 0, 'fails': 3}.get(sys.argv[1])) if sys.argv[1] != 'is-interrupted' "
                  "else time.sleep(100)")


@pytest.mark.multiprocess
@pytest.mark.parametrize("end", ["succeeds", "fails", "is-interrupted"])
def test_what_a_rank_left_running_ends_with_the_job(end):
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "tfring", "run", "-np", "2", sys.executable, "-c",
                             LEAVES_A_CHILD, end], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    child = None
    try:
        line = proc.stdout.readline()
        assert line.startswith("[0] CHILD "), line
        child = int(line.split()[-1])
        if end == "is-interrupted":
            time.sleep(2)  # rank 0 has exited; rank 1 sleeps
            proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == {"succeeds": 0, "fails": 3, "is-interrupted": 130}[end], stderr
        assert not _alive(child), "a process rank 0 started outlived the job"
        assert time.monotonic() - start < 2 + 2 * launcher.KILL_GRACE_SECONDS + 15
        if end == "succeeds":
            assert f"tfring run: rank 0 left 1 process running after it exited (pid {child}: sleep)" in stderr
    finally:
        proc.kill()
        proc.communicate()
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)


# Rank 0 starts a daemon in a session of its own (setsid: out of the rank's process group) that
# ignores SIGTERM, prints its pid and exits 0.
LEAVES_A_DAEMON = ("import os, subprocess, sys\n"
                   "if os.environ['TFRING_RANK'] == '0':\n"
                   "    child = subprocess.Popen(['sh', '-c', 'trap \"\" TERM; exec sleep 300'], start_new_session=True)\n"
                   "    print('DAEMON', child.pid, flush=True)\n")


@pytest.mark.multiprocess
def test_a_daemon_a_rank_started_in_its_own_session_is_named_and_ended_with_the_job():
    proc = subprocess.Popen([sys.executable, "-m", "tfring", "run", "-np", "2", sys.executable, "-c",
                             LEAVES_A_DAEMON], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    daemon = None
    try:
        line = proc.stdout.readline()
        assert line.startswith("[0] DAEMON "), line
        daemon = int(line.split()[-1])
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr
        assert not _alive(daemon), "a process a rank started in its own session outlived the job"
        assert f"in a session of its own (pid {daemon}: sleep)" in stderr, stderr
    finally:
        proc.kill()
        proc.communicate()
        if daemon and _alive(daemon):
            os.kill(daemon, signal.SIGKILL)


@pytest.mark.multiprocess
def test_a_bare_python_runs_the_launchers_own_interpreter(tmp_path):
    # Another `python` first on PATH, as the system's is when tfring's environment is not activated.
    other = tmp_path / "python"
    other.write_text("#!/bin/sh\necho 'the other python ran'\nexit 3\n")
    other.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    proc = _run(["-np", "1", "python", "-c", "import sys; print('ran', sys.prefix)"], env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"[0] ran {sys.prefix}" in proc.stdout, proc.stdout
    note, = [line for line in proc.stderr.splitlines() if "tfring run: `python`" in line]
    assert str(other) in note and sys.executable in note, note


TF_LOGS = r'''
import os, sys
r = int(os.environ["TFRING_RANK"])
stamp = lambda: f"2026-11-26 18:55:5{r}.56586{r}"
sys.stderr.write(f"{stamp()}: I tensorflow/core/platform/cpu_feature_guard.cc:210] This TensorFlow binary is optimized\n"
                 "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow.\n")
for fit in range(2):
    sys.stderr.write(f"{stamp()}: W tensorflow/core/grappler/optimizers/data/auto_shard.cc:787] AUTO sharding policy "
                     'will apply DATA sharding policy: Found an unshardable source dataset: name: "TensorSliceDataset/_2"\n'
                     'op: "TensorSliceDataset"\nattr {\n  key: "Toutput_types"\n}\n')
    sys.stderr.flush()
sys.stderr.write(f"rank {r} says\n")
sys.stderr.write(f"{stamp()}: E tensorflow/core/framework/local_rendezvous.cc:404] rank {r} is aborting\n")
# TensorFlow 2.21 logs through absl (time, then the thread id), and its import prints the start-up
# notices twice in one process.
absl = lambda: f"I0000 00:00:179586387{r}.32535{r}   1791{r} "
for copy in range(2):
    sys.stderr.write("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
                     f"{absl()}port.cc:153] oneDNN custom operations are on.\n")
sys.stderr.write(f"E0000 00:00:1795863875.0{r}   1791{r} rank.cc:1] rank {r} absl error\n")
'''


@pytest.mark.multiprocess
@pytest.mark.parametrize("all_output", [False, True])
def test_tensorflows_start_up_and_sharding_logs_are_shown_once(all_output):
    proc = _run(["-np", "3"] + (["--all-output"] if all_output else []) + [sys.executable, "-c", TF_LOGS])
    assert proc.returncode == 0, proc.stderr
    ranks, fits = (3, 2) if all_output else (1, 1)  # by default once per job, not once per rank per fit
    for needle, count in [("cpu_feature_guard.cc:210]", ranks), ("To enable the following", ranks),
                          ("auto_shard.cc:787]", ranks * fits), ('op: "TensorSliceDataset"', ranks * fits),
                          ("before absl::InitializeLog()", ranks * fits), ("port.cc:153] oneDNN", ranks * fits)]:
        assert sum(needle in line for line in proc.stderr.splitlines()) == count, (needle, proc.stderr)
    for r in range(3):  # what differs per rank, and errors, come from every rank
        assert f"[{r}] rank {r} says" in proc.stderr and f"rank {r} is aborting" in proc.stderr, proc.stderr
        assert f"rank {r} absl error" in proc.stderr, proc.stderr
