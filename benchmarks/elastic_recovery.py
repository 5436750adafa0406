"""Elastic jobs: the time from a failure to the first step after it, and the work lost, against how
often the job backs up or commits, in one run; or (`--change grow`) what growing costs.

    .venv/bin/python benchmarks/elastic_recovery.py [--ranks 3] [--save-freqs 10,50,epoch] [--ways backup,restart,commit]
    sudo .venv/bin/python benchmarks/elastic_recovery.py --hosts 3     # emulated hosts, one rank each
    .venv/bin/python benchmarks/elastic_recovery.py --change grow --ways restart,commit --save-freqs 10

Each trial is one `tfring run --min-np 1 --host-discovery-script ...` job of an MLP (64 -> 1024 ->
1024 -> 1, 1.1 M parameters, global batch 96, 100 steps an epoch, 3 epochs) that either backs up
(`backup`: `BackupAndRestore(save_freq=F)`, into a folder of the benchmark's) or commits
(`tfring.elastic.CommitCallback(state, save_freq=F)` inside `tfring.elastic.run`, which every host
keeps and a restart resumes mid-epoch): `commit` lets the ranks left go on in their processes
(from the commit in memory) where at least two are left, `restart` has them exit, so that every
rank starts again, as before tfring's launcher offered to go on in place. Rank 0 logs the time of every step it ends. When it has ended step
175 (75 steps into the second epoch), the benchmark SIGKILLs the last rank. On this host (default)
the discovery script keeps listing every slot (cool-down 0), so the job starts again at its size
(or, going on in place, grows back to it at its next commit);
with `--hosts H` (root, iproute2, openssh-server) every process of the last emulated host is killed,
its link cut and the host dropped from the discovery script's list, so the job goes on with one host
fewer. A host cut off is noticed by the others within about 5 s (TCP keepalive probes on the
ring's connections), long before `tfring run --timeout` (`--timeout`, default tfring's 60 s).

With `--change grow` the job starts on one slot fewer, and at step 175 the discovery script lists
one more: `commit` grows in place (the ranks wait at their next commit and a joining rank starts
beside them), `restart` has the ranks exit there (`TFRING_GROWS_IN_PLACE` removed) so that every
rank starts again. Printed then: from the listing to the first step at the new size, and how long
the running ranks' steps stopped (rank 0's longest gap between two steps after the listing).

Printed per `save_freq`: the step time before the failure; from the kill to the first new process
(the launcher seeing the failure, stopping the job, reading the hosts, starting again); from there
to `import tfring` done, to the model built, and to the first step after the failure ended ("-"
where the job went on in place: no new process); the whole recovery; the steps done twice (ended before the kill, done again after it) and their time.
"""

import argparse
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.dirname(HERE))
from allreduce import _quiet_env  # noqa: E402

ROWS, GLOBAL_BATCH, EPOCHS, KILL_AFTER = 9600, 96, 3, 175
GROW_EPOCHS = 10  # (growing: enough steps after the listing for the launcher to see it and the new rank to start)
NONE = float("nan")  # a figure a job that went on in place has not (no new process)


def worker(args):
    started = time.time()
    restart = int(os.environ.get("TFRING_RESTART", "0"))
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    import keras

    import tfring

    keras.utils.set_random_seed(0)  # (before RingStrategy(): a rank joining in place must take the same state)
    strategy = tfring.RingStrategy()
    imported = time.time()
    with open(os.path.join(args.out, f"pid.{strategy.rank}.{restart}"), "w") as f:
        f.write(str(os.getpid()))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, 64)).astype("float32")
    y = (x[:, :1] - x[:, 1:2]).astype("float32")
    with strategy.scope():
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(1024, activation="relu"),
                                  keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9), loss="mse")
    built = time.time()
    log = open(os.path.join(args.out, f"steps.{strategy.rank}.{restart}"), "w") if strategy.rank == 0 else None

    class Log(keras.callbacks.Callback):
        last = None

        def on_train_batch_end(self, batch, logs=None):
            step = int(self.model.optimizer.iterations)
            if log and step != self.last:  # (a batch a resumed commit holds is skipped: no step)
                log.write(f"{step} {time.time()}\n")
                log.flush()
                self.last = step

    if log:
        log.write(f"# {started} {imported} {built}\n")
    save_freq = "epoch" if args.save_freq == "epoch" else int(args.save_freq)
    if args.way == "restart":  # (commits, but the ranks left exit after a failure or to grow, as a
        os.environ.pop("TFRING_REFORM_SECONDS", None)  # launcher that does not offer to go on in place
        os.environ.pop("TFRING_GROWS_IN_PLACE", None)  # would have them)
    if args.way == "backup":
        model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=int(args.epochs), shuffle=False, verbose=0,
                  callbacks=[keras.callbacks.BackupAndRestore(os.path.join(args.out, "backup"), save_freq=save_freq),
                             Log()])
        return

    @tfring.elastic.run
    def train(state):
        model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=int(args.epochs), initial_epoch=state.epoch, shuffle=False,
                  verbose=0,
                  callbacks=[tfring.elastic.CommitCallback(state, save_freq=save_freq), Log()])

    train(tfring.elastic.State(model, epoch=0, batch=0))


def _steps(path):
    """(process start, import done, model built) and [(step, time)] from a rank-0 log."""
    times, steps = None, []
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                times = [float(t) for t in line.split()[1:]]
            elif line.strip():
                step, at = line.split()
                steps.append((int(step), float(at)))
    return times, steps


def _wait_for(predicate, seconds, proc):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def trial(args, save_freq, way, hosts=None):
    """One job, killed once, in a private folder removed afterwards; returns its figures."""
    with tempfile.TemporaryDirectory(prefix="elastic-recovery-") as out:  # (0700, as mkdtemp)
        return _measure(args, out, save_freq, way, hosts)


def _measure(args, out, save_freq, way, hosts):
    listed = os.path.join(out, "hosts")
    names = hosts.names[:args.hosts] if hosts else ["localhost"]
    growing = args.change == "grow"
    _list(listed, names[:len(names) - growing], hosts, args.ranks - growing)
    discover = os.path.join(out, "discover.sh")
    with open(discover, "w") as f:
        f.write(f"#!/bin/sh\ncat {shlex.quote(listed)}\n")
    os.chmod(discover, 0o700)
    # (TMPDIR: the hosts' copies of the commits go into the trial's folder, the lost host's too.)
    where = ["--rsh", shlex.join(hosts.ssh_command)] + [
        a for k in ("PYTHONPATH",) if k in os.environ for a in ("-x", f"{k}={os.environ[k]}")] if hosts else []
    where += ["-x", f"TMPDIR={out}"]
    cmd = [sys.executable, "-m", "tfring", "run", "--min-np", "1", "--host-discovery-script", discover,
           "--blacklist-cooldown-range", "0", "0", "--timeout", str(args.timeout), *where, sys.executable, HERE, "--worker", "--out", out,
           "--save-freq", str(save_freq), "--way", way, "--epochs", str(GROW_EPOCHS if growing else EPOCHS)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_quiet_env(),
                            start_new_session=True)
    first = os.path.join(out, "steps.0.0")
    try:
        def past_kill_step():
            return os.path.exists(first) and any(s >= KILL_AFTER for s, _ in _steps(first)[1])

        if not _wait_for(past_kill_step, 300, proc):
            raise RuntimeError(f"the job never reached step {KILL_AFTER}: {proc.communicate(timeout=60)[1][-2000:]}")
        if growing:
            return _grow(out, listed, names, hosts, args, proc)
        size = args.hosts if hosts else args.ranks
        victim = int(open(os.path.join(out, f"pid.{size - 1}.0")).read())
        killed_at = time.time()
        if hosts:
            _list(listed, names[:-1], hosts, None)
            for pid in hosts.pids(args.hosts - 1):
                os.kill(pid, signal.SIGKILL)
            hosts.link_down(args.hosts - 1)
        else:
            os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=600)
    finally:
        if hosts:
            hosts.link_up(args.hosts - 1)  # (returns once the host answers again)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"the job failed: {err[-2000:]}")
    _, before = _steps(first)
    restarted = os.path.join(out, "steps.0.1")
    if os.path.exists(restarted):
        (started, imported, built), after = _steps(restarted)
        new_process = {"to_new_process": started - killed_at, "import": imported - started,
                       "build": built - imported, "first_step": after[0][1] - built}
    else:  # went on in place: rank 0's log goes on, from a step at or before the ones it had ended
        back = next(i for i in range(1, len(before))
                    if before[i][1] > killed_at and before[i][0] <= before[i - 1][0])
        before, after = before[:back], before[back:]
        new_process = {"to_new_process": NONE, "import": NONE, "build": NONE, "first_step": NONE}
    done_before = max(s for s, t in before if t <= killed_at)
    step_s = statistics.median(b[1] - a[1] for a, b in zip(before, before[1:]))
    redone = done_before - (after[0][0] - 1)
    return {"step_ms": 1e3 * step_s, **new_process, "recovery": after[0][1] - killed_at,
            "redone": redone, "redone_s": redone * step_s}


def _list(listed, names, hosts, slots):
    """What the discovery script prints: the emulated hosts `names`, one slot each, or this host
    with `slots` slots."""
    with open(listed, "w") as f:
        f.write("".join(f"{n}:1\n" for n in names) if hosts else f"localhost:{slots}\n")


def _grow(out, listed, names, hosts, args, proc):
    """Lists one slot more, lets the job end, and returns what growing cost."""
    listed_at = time.time()
    _list(listed, names, hosts, args.ranks)
    _, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the job failed: {err[-2000:]}")
    if "cannot join the running job" in err:
        raise RuntimeError(f"the new rank could not join in place: {err[-2000:]}")
    _, before = _steps(os.path.join(out, "steps.0.0"))
    step_s = statistics.median(b[1] - a[1] for a, b in zip(before, before[1:]) if b[1] <= listed_at)
    starts = sorted(int(name.split(".")[-1]) for name in os.listdir(out) if name.startswith("steps.0."))
    figures = {"to_new_process": NONE, "import": NONE, "build": NONE, "first_step": NONE}
    if starts[-1] > 0:  # every rank started again (rank 0's log of the last start)
        (started, imported, built), after = _steps(os.path.join(out, f"steps.0.{starts[-1]}"))
        before = [s for s in before if s[1] <= started]
        figures = {"to_new_process": started - listed_at, "import": imported - started,
                   "build": built - imported, "first_step": after[0][1] - built}
    elif "wait for the new ones in their processes" in err:
        # grown in place (a rank joined): the longest gap in rank 0's steps after the listing is the growth
        since = [i for i in range(1, len(before)) if before[i][1] > listed_at]
        gap = max(since, key=lambda i: before[i][1] - before[i - 1][1])
        before, after = before[:gap], before[gap:]
    else:
        raise RuntimeError(f"the job ended without growing: {err[-2000:]}")
    return {"step_ms": 1e3 * step_s, **figures, "recovery": after[0][1] - listed_at,
            "stalled": after[0][1] - before[-1][1], "redone": before[-1][0] - (after[0][0] - 1),
            "redone_s": (before[-1][0] - (after[0][0] - 1)) * step_s}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=0, help="emulated hosts of one rank each (0: this host)")
    parser.add_argument("--save-freqs", default="10,50,epoch")
    parser.add_argument("--ways", default="backup,restart,commit",
                        help="backup (BackupAndRestore), restart (tfring.elastic, every rank starts again), "
                             "commit (tfring.elastic, the ranks left go on in place where they can)")
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--change", choices=("lose", "grow"), default="lose",
                        help="lose: kill the last rank (or host); grow: list one slot (or host) more")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="tfring run --timeout: seconds a collective may stall (default 60, tfring's)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--save-freq", help=argparse.SUPPRESS)
    parser.add_argument("--way", help=argparse.SUPPRESS)
    parser.add_argument("--epochs", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    hosts = None
    if args.hosts:
        from tfring_dev.emulated_hosts import EmulatedHosts

        hosts = EmulatedHosts(args.hosts)
    rows = {}
    try:
        if hosts:
            hosts.__enter__()
        for way in args.ways.split(","):
            for freq in args.save_freqs.split(","):
                rows[way, freq] = [trial(args, freq, way, hosts) for _ in range(args.trials)]
    finally:
        if hosts:
            hosts.__exit__(None, None, None)
    if args.change == "grow":
        return _print_growth(args, rows, hosts)
    where = f"{args.hosts} emulated hosts, the last one lost" if hosts else f"{args.ranks} ranks on this host, one killed"
    print(f"Elastic recovery ({where}; --timeout {args.timeout:g}; medians of {args.trials} "
          f"trial{'s' if args.trials > 1 else ''}, {time.strftime('%Y-%m-%d')}):\n")
    _print_rows(rows, "| way | save_freq | step ms | kill to new process s | import s | model built s | first step s "
                      "| failure to next step s | steps done twice | their time s |",
                lambda m: f"{m['recovery']:.2f} | {m['redone']:.0f} | {m['redone_s']:.2f}")
    return 0


def _print_rows(rows, header, last):
    """A table of the medians of each (way, save_freq)'s trials: the columns they share, then `last(medians)`."""
    print(header)
    print("|---|---|" + "---:|" * (header.count("|") - 3))
    for (way, freq), results in rows.items():
        m = {k: statistics.median(r[k] for r in results) for k in results[0]}
        f = {k: "-" if v != v else f"{v:.2f}" for k, v in m.items()}  # (NaN: went on in place)
        print(f"| {way} | {freq} | {m['step_ms']:.1f} | {f['to_new_process']} | {f['import']} | {f['build']} "
              f"| {f['first_step']} | {last(m)} |")


def _print_growth(args, rows, hosts):
    size = args.hosts if hosts else args.ranks
    where = f"{size - 1} emulated hosts, then {size}" if hosts else f"{size - 1} ranks on this host, then {size}"
    print(f"Elastic growth ({where}; medians of {args.trials} trial{'s' if args.trials > 1 else ''}, "
          f"{time.strftime('%Y-%m-%d')}):\n")
    _print_rows(rows, "| way | save_freq | step ms (before) | listing to new process s | import s | model built s "
                      "| first step s | listing to the first step at the new size s | running ranks' steps stopped s "
                      "| steps done twice |",
                lambda m: f"{m['recovery']:.2f} | {m['stalled']:.2f} | {m['redone']:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
