"""`tfring run`: starts the ranks of a job, on this host and over ssh on others, and supervises them.

Each rank gets its rank, the sizes, the address of rank 0's rendezvous store and a fresh job
secret in its environment. Output lines are prefixed with `[rank]`. SIGINT/SIGTERM are forwarded
to every rank on every host. How the job ends (a rank that fails stops the others, and the
launcher names it), and what the launcher says then, is `supervision`'s.

With other hosts (`-H`, `--hostfile`) every remote rank is started by `ssh HOST` running
`tfring.launch.remote` in the same working directory and interpreter as here (a shared file system
is assumed, as horovodrun and mpirun do); its environment, secret included, travels over the ssh
channel. Before any rank starts, each host reports what it runs: another tfring build or
TensorFlow version than rank 0's host fails the start, naming the host.
"""

import collections
import dataclasses
import functools
import os
import secrets
import signal
import subprocess
import sys
import time

from tfring.launch import addresses
from tfring.launch import cluster
from tfring.launch import core_binding
from tfring.launch import elastic
from tfring.launch import forwarding
from tfring.launch import horovod_habits
from tfring.launch import hosts as hostlist
from tfring.launch import interpreter
from tfring.launch import local_rank
from tfring.launch import membership
from tfring.launch import output
from tfring.launch import remote_rank
from tfring.launch import supervision
from tfring.launch import variables
from tfring.launch import versions

# The ranks' grace before SIGKILL: `supervision`'s, named here too (tests allow for it).
KILL_GRACE_SECONDS = supervision.KILL_GRACE_SECONDS


@dataclasses.dataclass
class Options:
    """How `tfring run` starts and watches a job (the command line's options).

    Args:
        timeout: seconds a collective may stall (passed to the ranks as TFRING_TIMEOUT), or None.
        all_output: show every rank's stdout, not only rank 0's, and the ranks' stderr after Ctrl-C
            (hidden by default: their KeyboardInterrupt tracebacks).
        hosts: a list of `hosts.Host`, or None for this host only.
        rsh, ssh_port, ssh_identity_file: how to reach other hosts (`remote_rank.ssh_prefix`).
        exports: `-x` variables for every rank (`forwarding.parse_exports`).
        output_dir: a folder for one log file per rank, or None.
        start_timeout: seconds every host has to answer before the start fails.
        interface: the network interface whose address the hosts advertise, or None.
        bind_to: "core" binds each rank to its share of its host's cores (`core_binding`); "none".
    """

    timeout: float = None
    all_output: bool = False
    hosts: list = None
    rsh: str = None
    ssh_port: int = None
    ssh_identity_file: str = None
    exports: dict = dataclasses.field(default_factory=dict)
    output_dir: str = None
    start_timeout: float = 30.0
    interface: str = None
    bind_to: str = "none"


def _cannot_start(command, error):
    hint = ""
    if command[0].endswith(".py"):
        hint = f" (to run a Python script, name the interpreter: tfring run -np N python {' '.join(command)})"
    return f"tfring run: cannot start {command[0]!r}: {error.strerror or error}{hint}"


class StartError(RuntimeError):
    """The job could not be started (a command not found, a host not reached): a one-line message.

    Args:
        message: the line to print.
        exit_code: the launcher's exit code (127; 128+N when signal N interrupted the start).

    Example:

    >>> raise StartError("tfring run: cannot start 'train.py': Permission denied")
    """

    def __init__(self, message, exit_code=127, host=None):
        super().__init__(message)
        self.exit_code = exit_code
        self.host = host  # the host that could not be reached, when one is to blame


class CannotGrowInPlace(RuntimeError):
    """A new rank could not join the running job in its process (it said why); every rank was ended."""


class Job:
    """A job being started: its ranks (local and remote), watched by its `supervision.Supervisor`.

    Args:
        command: the program and its arguments.
        num_processes: the job size (None: every slot of `options.hosts`).
        options: an `Options`.
        env: the launcher's environment (default `os.environ`).
        restart: an elastic job's start count, given to the ranks as `TFRING_RESTART` (None: not elastic).
        elastic_id: an elastic job's name, the same at every start, given as `TFRING_ELASTIC_ID`.
        interrupt: for `supervision.Supervisor`: called while the job runs, a reason to end it or None.
        kept: the `supervision.Kept` ranks of the last membership that go on in this one, in rank
            order: alone (`reform`, after a failure: `options.hosts` is ignored), or with new ranks
            on the slots of `options.hosts` they leave free (`grow`, up to `num_processes` ranks).
    """

    def __init__(self, command, num_processes, options=None, env=None, restart=None, interrupt=None, elastic_id=None,
                 kept=None):
        self.command = list(command)
        self.restart = restart  # an elastic job's start count, or None
        self.elastic_id = elastic_id
        self.options = options or Options()
        self.kept = kept  # the ranks of the last membership that go on in place (`reform`), in rank order
        self.secret = None  # the job secret, once started
        if kept:
            hosts = _hosts_of([k.rank.slot.host for k in kept])
            if self.options.hosts is not None:  # (growing: the free slots of the hosts there now)
                hosts = _grown_hosts(hosts, self.options.hosts, num_processes)
            self.options = dataclasses.replace(self.options, hosts=hosts)
            num_processes = sum(h.slots for h in hosts)
        self.slots = hostlist.plan_slots(num_processes, self.options.hosts)
        self.base_env = dict(os.environ if env is None else env)
        self.output = output.JobOutput(self.options.all_output, self.options.output_dir)
        here = {host: hostlist.is_local(host) for host in {s.host for s in self.slots}}
        if sum(here.values()) > 1:
            raise ValueError(f"{' and '.join(sorted(h for h in here if here[h]))} are both this host: "
                             "name it once, with all its slots")
        self.remote_slots = [s for s in self.slots if not here[s.host]]
        self.ranks = {}  # rank -> LocalRank or RemoteRank
        self.supervisor = supervision.Supervisor(self.ranks, self.output, interrupt, in_place=restart is not None)

    @property
    def runs_here(self):
        """Whether some ranks run on the launcher's own host."""
        return len(self.remote_slots) < len(self.slots)

    def _rank_env(self, slot, store_addr, secret, job_id):
        env = {
            cluster.RANK: str(slot.rank), cluster.SIZE: str(len(self.slots)),
            cluster.LOCAL_RANK: str(slot.local_rank), cluster.LOCAL_SIZE: str(slot.local_size),
            cluster.STORE_ADDR: store_addr, cluster.SECRET: secret, cluster.JOB_ID: job_id,
            "PYTHONUNBUFFERED": "1",
            **horovod_habits.identity(slot, self.slots),
        }
        if self.options.timeout is not None:
            env[cluster.TIMEOUT] = str(self.options.timeout)
        if self.restart is not None:
            env[variables.RESTART] = str(self.restart)
            env[variables.ELASTIC_ID] = self.elastic_id
            env[membership.REFORM_SECONDS] = f"{supervision.REFORM_WAIT_SECONDS:g}"
            env[membership.GROWS_IN_PLACE] = "1"
        env.update(self.options.exports)
        return env

    def start(self):
        """Reaches every host, checks what they run, then starts every rank.

        Raises:
            StartError: a host did not answer or runs other versions, or a command cannot start.
        """
        secret, job_id = secrets.token_hex(32), secrets.token_hex(6)
        self.secret = secret
        local_rank.become_subreaper()  # what a rank starts in a session of its own comes back to us
        local_cores = {s.rank: core_binding.plan(self.options.bind_to, s.local_rank, s.local_size)
                       for s in self.slots if s not in self.remote_slots}
        self._connect_remotes()
        store_addr, here = self._addresses()
        for slot in self.slots:
            self._stop_if_signalled()
            env = self._rank_env(slot, store_addr, secret, job_id)
            if slot.rank in self.ranks:
                self._start_remote(self.ranks[slot.rank], env)
            else:
                self._start_local(slot, {**self._local_env(here), **env}, local_cores[slot.rank])

    def reform(self, secret):
        """Goes on with the ranks kept from the last membership, in their processes: each is
        renumbered (host by host, in their old order) and told its place in a new membership, with
        a new store (served by its rank 0) and job id (`launch.membership`).

        Args:
            secret: the job secret the kept ranks started with.
        """
        self.secret = secret
        self._take_over_kept()
        self._send_memberships()

    def grow(self, secret):
        """Goes on with the ranks kept from the last membership, in their processes, and new ranks
        on the slots they leave free: each new rank starts as a joining rank (`membership.JOINING`)
        and, once every one of them waits at `tfring.elastic.run` (at most `GROW_JOIN_SECONDS`),
        every rank is told its place in the new membership, as `reform` does.

        Args:
            secret: the job secret the kept ranks started with (the new ranks get it too).

        Raises:
            StartError: a new rank could not start, exited, or did not wait in time (naming its
                host); every rank has been ended then.
            CannotGrowInPlace: a new rank exited saying it cannot join in its process (its random
                state is not the job's); every rank has been ended then.
        """
        self.secret = secret
        self._take_over_kept()
        new = [s for s in self.slots if s.rank not in self.ranks]
        local_rank.become_subreaper()
        self._connect_remotes([s for s in new if s in self.remote_slots])
        here = self._this_host_address() if self.remote_slots else None
        for slot in new:
            self._stop_if_signalled()
            env = self._joining_env(slot, secret)
            if slot.rank in self.ranks:
                self._start_remote(self.ranks[slot.rank], env)
            else:
                cores = core_binding.plan(self.options.bind_to, slot.local_rank, slot.local_size)
                self._start_local(slot, {**self._local_env(here), **env}, cores)
        self._wait_for_joining(new)
        self._send_memberships()
        self.output.reforming.clear()  # (the new ranks' waits are answered: one said from now on is a new one)

    def _take_over_kept(self):
        """Gives each kept rank its slot: the first slots of its host, in the kept ranks' order."""
        free = {}
        for slot in self.slots:
            free.setdefault(slot.host, []).append(slot)
        for kept in self.kept:
            slot = free[kept.rank.slot.host].pop(0)
            kept.rank.slot = slot
            self.supervisor.take_over(slot.rank, kept)

    def _send_memberships(self):
        job_id = secrets.token_hex(6)
        store_addr = self._store_address(self._this_host_address() if self.remote_slots else None)
        for slot in self.slots:
            self.ranks[slot.rank].reform(self._rank_env(slot, store_addr, self.secret, job_id))

    def _joining_env(self, slot, secret):
        """A new rank's variables: the job's, less its identity, which comes when it joins."""
        env = self._rank_env(slot, "", secret, "")
        for name in (cluster.RANK, cluster.SIZE, cluster.LOCAL_RANK, cluster.LOCAL_SIZE, cluster.STORE_ADDR,
                     cluster.JOB_ID):
            env.pop(name)
        env[membership.JOINING] = f"{slot.rank} {len(self.slots)} {slot.local_rank} {slot.local_size}"
        said = next((k.random_state for k in self.kept if k.random_state), None)  # (the kept ranks said the same)
        if said:
            env[membership.RANDOM_STATE] = said
        return env

    def _wait_for_joining(self, new):
        """Waits until every new rank says it waits for its membership (`membership.REFORM_WAIT`)."""
        deadline = time.monotonic() + supervision.GROW_JOIN_SECONDS
        while not all(s.rank in self.output.reforming for s in new):
            self._stop_if_signalled()
            for slot in new:
                code = self.ranks[slot.rank].poll()
                if code == variables.LEFT_AT_COMMIT:
                    self.output.hide_stderr()  # (the kept ranks' tracebacks of SIGTERM)
                    self.supervisor.terminate()
                    self.output.close()
                    raise CannotGrowInPlace(f"rank {slot.rank} on host {slot.host} cannot join the running job in its "
                                            f"process (its line says why)")
                if code is not None:
                    self._fail_start(f"{self.ranks[slot.rank].describe_failure(code)} before it joined the running job",
                                     code or 1, host=slot.host)
            if time.monotonic() > deadline:
                late = [s for s in new if s.rank not in self.output.reforming]
                self._fail_start(f"rank {late[0].rank} on host {late[0].host}, started to join the running job, did not "
                                 f"reach tfring.elastic.run within {supervision.GROW_JOIN_SECONDS:g} s",
                                 host=late[0].host)
            time.sleep(supervision.POLL_SECONDS)

    def _store_address(self, here):
        """Where rank 0 serves the store: on another host, a port that host offered when it
        answered (rank 0 of an elastic job may move to any host: each offers some); here, a free
        port on `here` (the address this host advertises, or None on one host)."""
        rank0 = self.ranks.get(0)
        if isinstance(rank0, remote_rank.RemoteRank):
            return f"{rank0.reply['address']}:{rank0.store_port()}"
        host = here or "127.0.0.1"
        return f"{host}:{addresses.free_port(host)}"

    def _local_env(self, here):
        """This host's ranks see the launcher's environment; in a job across hosts they advertise `here`."""
        env = dict(self.base_env)
        if here:
            env.setdefault(cluster.ADVERTISE_HOST, here)
        return env

    def _start_local(self, slot, env, cores):
        try:
            rank = local_rank.LocalRank(slot, self.command, env, subprocess.PIPE, subprocess.PIPE, cores)
        except OSError as e:
            self.supervisor.terminate()
            raise StartError(_cannot_start(self.command, e)) from e
        self.ranks[slot.rank] = rank
        self.supervisor.follow(slot.rank, functools.partial(output.pump, rank.proc.stdout),
                               functools.partial(output.pump, rank.proc.stderr))

    def _start_remote(self, rank, env):
        rank.start_stderr(self.output.stream(rank.slot.rank, stdout=False))
        rank.send_job({**forwarding.forwarded(self.base_env, self.options.exports), **env}, self.command,
                      self.options.bind_to)

    def _connect_remotes(self, slots=None):
        """Starts ssh for every remote rank (of `slots`: default all) and waits until each far end has answered."""
        o = self.options
        prefix = remote_rank.ssh_prefix(o.rsh, o.ssh_port, o.ssh_identity_file, o.start_timeout)
        command = remote_rank.remote_command(_working_directory(self.base_env), sys.executable, self.base_env)
        slots = self.remote_slots if slots is None else slots
        for slot in slots:
            try:
                rank = remote_rank.RemoteRank(slot, prefix, command)
            except OSError as e:
                self.supervisor.terminate()
                raise StartError(f"tfring run: cannot start {prefix[0]!r} to reach {slot.host}: "
                                 f"{e.strerror or e} (see --rsh)") from e
            self.ranks[slot.rank] = rank
            self.supervisor.follow(slot.rank, rank.pump_stdout, rank.pump_stderr)
            # (An elastic job's rank 0 may move to any host when it goes on in place.)
            rank.request(o.interface, want_port=slot.rank == 0 or self.restart is not None)
        started = [self.ranks[s.rank] for s in slots]
        deadline = time.monotonic() + o.start_timeout
        while not all(r.ready.is_set() for r in started) and time.monotonic() < deadline:
            self._stop_if_signalled()
            time.sleep(supervision.POLL_SECONDS)
        for rank in started:
            if rank.reply is None:
                self._fail_start(f"cannot start rank {rank.slot.rank} on host {rank.slot.host}: "
                                 f"{rank.start_error(o.start_timeout)}", host=rank.slot.host)
        self._check_versions(started)

    def _fail_start(self, message, exit_code=127, host=None):
        self.supervisor.terminate()
        self.output.close()
        raise StartError(f"tfring run: {message}", exit_code, host)

    def _stop_if_signalled(self):
        signalled = self.supervisor.signalled
        if signalled is not None:
            name = signal.Signals(signalled).name
            self._fail_start(f"stopped by {name} while starting the job", 128 + signalled)

    def _check_versions(self, started):
        """Every host must run what rank 0's host runs (`started`: the remote ranks just reached)."""
        here = f"{os.uname().nodename} (this host)"
        reported = {r.slot.host: r.reply["versions"] for r in started}
        if self.runs_here:
            reported[here] = versions.this_host()
        rank0 = self.ranks.get(0)
        reference = rank0.reply["versions"] if isinstance(rank0, remote_rank.RemoteRank) else versions.this_host()
        for host, theirs in reported.items():
            message = versions.mismatch(host, theirs, self.slots[0].host, reference)
            if message:
                self._fail_start(message)

    def _addresses(self):
        """Rank 0's store address, and the address this host's ranks advertise (None on one host)."""
        if not self.ranks:
            return self._store_address(None), None
        here = self._this_host_address() if self.runs_here or 0 not in self.ranks else None
        return self._store_address(here), here

    def _this_host_address(self):
        """--interface, else TFRING_HOST, else the address the other hosts' sshd saw us come from."""
        try:
            if self.options.interface:
                return addresses.interface_address(self.options.interface)
        except ValueError as e:
            self._fail_start(str(e))
        if self.base_env.get(cluster.ADVERTISE_HOST):
            return self.base_env[cluster.ADVERTISE_HOST]
        for rank in self.ranks.values():  # where ssh came from, if it is ours (not a jump host's)
            if addresses.is_own_ipv4(rank.reply.get("launcher_address")):
                return rank.reply["launcher_address"]
        return addresses.route_source(next(iter(self.ranks.values())).reply["address"]) or "127.0.0.1"


def _hosts_of(names):
    """The host list of ranks on hosts `names` (in rank order: a host's ranks are together)."""
    return [hostlist.Host(name, n) for name, n in collections.Counter(names).items()]


def _grown_hosts(kept, available, most):
    """The hosts of a job that grows: the kept ranks' (`kept`, a host list), each with its free
    slots of `available` added, then `available`'s other hosts, up to `most` slots in all."""
    offered = {h.name: h.slots for h in available}
    counts = {h.name: h.slots for h in kept}
    room = most - sum(counts.values())
    for name in [h.name for h in kept] + [h.name for h in available if h.name not in counts]:
        more = max(0, min(offered.get(name, 0) - counts.get(name, 0), room))
        counts[name] = counts.get(name, 0) + more
        room -= more
    return [hostlist.Host(name, n) for name, n in counts.items() if n]


def _working_directory(environ):
    """The directory the ranks start in: $PWD as the user typed it when it is this directory
    (`/home/u` rather than the automounted `/nfs/home/u` that getcwd() sees), else getcwd()."""
    cwd = os.getcwd()
    pwd = environ.get("PWD")
    try:
        return pwd if pwd and os.path.samefile(pwd, cwd) else cwd
    except OSError:
        return cwd


def run(command, num_processes, options=None, elastic_options=None):
    """Runs `command` as `num_processes` ranks and returns the launcher's exit code.

    Args:
        command: the program and its arguments, e.g. `["python", "train.py"]`.
        num_processes: the job size; None means every slot of `options.hosts`.
        options: an `Options` (hosts, ssh, output, timeouts); None: this host, defaults.
        elastic_options: an `elastic.ElasticOptions` for a job that starts again on the hosts left
            after a failure (`tfring run --min-np`), or None.

    Returns:
        0 when every rank exited 0, else the code of the rank that failed first (128+N for signal
        N); 128+N when the launcher got signal N (0 if every rank then exited 0).

    Raises:
        StartError: the job could not be started (the message says why, in one line).
        ValueError: bad hosts or slots (the message names them).

    Example:

    >>> run(["python", "-c", "import tfring; print(tfring.size())"], 2)
    [0] 2
    0
    """
    if not command:
        raise ValueError("tfring run: no command given")
    command, note = interpreter.resolve(command, os.environ)
    if note:
        print(note, file=sys.stderr)
    if elastic_options is not None:
        return _run_elastic(command, num_processes, options or Options(), elastic_options)
    job = Job(command, num_processes, options)
    with _signals_to(job.supervisor.record_signal):
        job.start()
        return job.supervisor.wait()


class _signals_to:
    """A context in which SIGINT and SIGTERM go to `handler` (restored after)."""

    def __init__(self, handler):
        self.handler = handler

    def __enter__(self):
        self.previous = {s: signal.signal(s, self.handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def __exit__(self, *exc):
        for s, h in self.previous.items():
            signal.signal(s, h)


def _run_elastic(command, num_processes, options, elastic_options):
    """`run` for an elastic job: a `Job` per membership, as `elastic.ElasticJob` decides."""

    elastic_id = secrets.token_hex(6)  # (its commits' folder on each host: tfring.elastic.commits)
    last = []  # the last membership's Job

    def start_job(hosts, size, restart, interrupt, kept=None):
        job = Job(command, size, dataclasses.replace(options, hosts=hosts), restart=restart, interrupt=interrupt,
                  elastic_id=elastic_id, kept=kept)
        if runner.signalled is not None:  # (a signal between two memberships)
            job.supervisor.signalled = runner.signalled

        def to_both(signum, frame):
            runner.record_signal(signum, frame)
            job.supervisor.record_signal(signum, frame)

        with _signals_to(to_both):
            try:
                if kept and hosts is None:
                    job.reform(last[0].secret)  # (the kept ranks' secret: theirs since they started)
                elif kept:
                    job.grow(last[0].secret)
                else:
                    job.start()
            except CannotGrowInPlace as e:
                elastic.say(f"{e}; starting the job again on every slot")
                return elastic.Ending(0, grown=True, fell_back=True)
            except StartError as e:
                if e.host is None or runner.signalled is not None:
                    raise
                return elastic.Ending(e.exit_code, e.host, str(e).removeprefix("tfring run: "))  # not reached
            last[:] = [job]
            code = job.supervisor.wait()
        if job.supervisor.grown:
            return elastic.Ending(code, grown=True, kept=_kept(job), end_kept=job.supervisor.end_kept)
        if code == 0 or job.supervisor.cause is None or runner.signalled is not None:
            return elastic.Ending(code)
        rank, line, lost_peer = job.supervisor.cause
        # (A rank that only lost a peer keeps no host out: which host went silent cannot be told
        # reliably from the survivors' errors; the discovery script drops a dead host.)
        return elastic.Ending(code, job.slots[rank].host, line, lost_peer=lost_peer, kept=_kept(job),
                              end_kept=job.supervisor.end_kept)

    def _kept(job):
        return list(job.supervisor.kept.values()) if job.supervisor.kept else None

    runner = elastic.ElasticJob(start_job, options.hosts, num_processes, elastic_options)
    with _signals_to(runner.record_signal):
        try:
            return runner.run()
        except RuntimeError as e:
            raise StartError(f"tfring run: {e}", 128 + runner.signalled if runner.signalled else 1) from None
