"""`tfring run --min-np A --max-np B`: a job that goes on, or starts again, on the hosts still there
when a rank fails.

Ranks that go on in place (`tfring.elastic.run`: the ranks left after a failure keep their
processes; `supervision` keeps them and `launcher.Job.reform` renumbers them) go on by themselves
when at least two, and `--min-np`, are left: a failure still counts against `--max-restarts` and
keeps its host out.

Otherwise, the restart form (as torchrun's `--nnodes=MIN:MAX --max-restarts`): when a rank fails, the launcher stops the job as it always does, keeps the host of the rank that
failed first out for a cool-down (`--blacklist-cooldown-range`: doubling with each failure of that
host, so a flapping host cannot loop the job), asks the hosts again (`--host-discovery-script`, else
the fixed `-H`/`--hostfile` list) and starts every rank again on what is there: between `--min-np` and
`--max-np` ranks, renumbered host by host. Each start is a new membership: a fresh job secret and
store, so nothing of an earlier one is taken for the new one. Below `--min-np` slots it waits at most
`--elastic-timeout` seconds for hosts, then fails saying how many slots there are and since when.
After `--max-restarts` restarts the next failure ends the job, naming every failure. While the job
runs, the hosts are read again every few seconds; when they offer more ranks than it runs (up to
`--max-np`: new hosts, or a host back from its cool-down), the launcher tells the ranks; ranks that
commit (`tfring.elastic`) stop together at their next commit, others are ended, and the job starts
again on all of them (a resize, counted apart from failures; `supervision` holds the rule). Ranks
that go on in place instead wait at that commit in their processes, and new ranks join them on the
free slots (`launcher.Job.grow`). After a failure the work since the ranks' last commit or
checkpoint is done again.

The ranks see `TFRING_RESTART` (0 at the first start) and `TFRING_ELASTIC_ID` (the same at every
start) and go on from their own checkpoint or their commits: a Keras script with `BackupAndRestore`
resumes at its last backup, one with `tfring.elastic` (or `hvd.elastic`) at the newest commit the
hosts keep; under `RingStrategy`, which keeps the global batch whatever the number of ranks, either
ends with the weights of the uninterrupted run.
"""

import dataclasses
import signal
import subprocess
import sys
import time

from tfring.launch import hosts as hostlist

DISCOVERY_SECONDS = 2.0  # between two reads of the hosts while the job waits for slots
DISCOVERY_TIMEOUT = 30.0  # the most a discovery script may take


@dataclasses.dataclass
class ElasticOptions:
    """How an elastic job resizes and restarts (the command line's options).

    Args:
        min_np: the fewest ranks the job runs with.
        max_np: the most ranks (None: every slot the hosts offer).
        discovery_script: an executable that prints the hosts, one `host:slots` per line (Horovod's
            format; `host` alone has one slot), or None for the fixed host list.
        max_restarts: how many times the job may start again after a failure.
        elastic_timeout: seconds the job waits for `min_np` slots before it fails.
        cooldown: (first, most) seconds a failed host is kept out; doubled at each failure of it.
    """

    min_np: int = 1
    max_np: int = None
    discovery_script: str = None
    max_restarts: int = 3
    elastic_timeout: float = 600.0
    cooldown: tuple = (10.0, 300.0)

    def check(self):
        """Raises ValueError naming a bad option."""
        if self.min_np < 1:
            raise ValueError(f"--min-np must be at least 1, got {self.min_np}")
        if self.max_np is not None and self.max_np < self.min_np:
            raise ValueError(f"--max-np {self.max_np} is below --min-np {self.min_np}")
        if self.max_restarts < 0:
            raise ValueError(f"--max-restarts must be 0 or more, got {self.max_restarts}")
        if self.elastic_timeout <= 0:
            raise ValueError(f"--elastic-timeout must be > 0, got {self.elastic_timeout:g}")
        first, most = self.cooldown
        if first < 0 or most < first:
            raise ValueError(f"--blacklist-cooldown-range needs 0 <= MIN <= MAX, got {first:g} {most:g}")


def discover(script, timeout=DISCOVERY_TIMEOUT):
    """The hosts a discovery script prints now.

    Args:
        script: the executable (run without a shell).
        timeout: seconds it may take.

    Returns:
        A list of `hosts.Host` (possibly empty: no host is there now).

    Raises:
        ValueError: the script cannot run, fails, takes too long or prints a bad line (the message
            names the script and the line).

    Example:

    >>> discover("./discover.sh")   # prints "node1:4" and "node2:4"
    [Host(name='node1', slots=4), Host(name='node2', slots=4)]
    """
    where = f"--host-discovery-script {script!r}"
    try:
        proc = subprocess.run([script], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ValueError(f"{where} did not finish within {timeout:g} s") from None
    except OSError as e:
        raise ValueError(f"{where} cannot run: {e.strerror or e}") from None
    if proc.returncode != 0:
        last = proc.stderr.strip().splitlines()[-1:] or ["(no stderr)"]
        raise ValueError(f"{where} exited with code {proc.returncode}: {last[0]}")
    found = []
    for number, line in enumerate(proc.stdout.splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if text:
            name, _, slots = text.rpartition(":") if ":" in text else (text, "", "1")
            found.append(hostlist.make_host(name, slots, f"{where}, line {number}"))
    return hostlist.no_duplicates(found, where)


class Cooldowns:
    """Hosts kept out after a failure: the first time for `first` seconds, doubled at each further
    failure of the same host, at most `most`.

    Args:
        first, most: seconds.
        clock: a function returning seconds (default `time.monotonic`).

    Example:

    >>> kept = Cooldowns(10, 300)
    >>> kept.fail("node2")
    10.0
    >>> kept.out("node2")
    True
    """

    def __init__(self, first, most, clock=time.monotonic):
        self.first, self.most, self.clock = first, most, clock
        self.failures = {}  # host -> failures so far
        self.until = {}  # host -> when it may come back

    def fail(self, host):
        """Keeps `host` out; returns for how many seconds."""
        self.failures[host] = self.failures.get(host, 0) + 1
        seconds = min(self.most, self.first * 2 ** (self.failures[host] - 1))
        self.until[host] = self.clock() + seconds
        return seconds

    def out(self, host):
        """Whether `host` is still kept out."""
        return self.clock() < self.until.get(host, 0)


@dataclasses.dataclass
class Ending:
    """How one membership of an elastic job ended.

    Args:
        code: the launcher's exit code for it.
        host: the host of the rank blamed for a failure (None: no rank failed).
        line: the line naming that failure.
        grown: True when the launcher ended it to start again on more slots (with `kept`: to go
            on with its ranks, which wait in their processes, and new ones).
        fell_back: with `grown`: growing in place failed before the membership ran, and every
            rank was ended; the job starts again on every slot (the growth is not counted twice).
        lost_peer: True when the rank blamed only lost a peer (no rank was seen failing by
            itself), so its own host is not to blame.
        kept: after a failure, the ranks still running that wait to go on in place (opaque to
            this module; in rank order), or None.
        end_kept: a function that ends them, when the job starts again instead.
    """

    code: int
    host: str = None
    line: str = None
    grown: bool = False
    fell_back: bool = False
    lost_peer: bool = False
    kept: list = None
    end_kept: object = None


@dataclasses.dataclass
class Failure:
    """One failure of an elastic job, for the launcher's lines."""

    number: int
    line: str
    host: str
    code: int


class ElasticJob:
    """Starts a job, and again on the hosts still there after each failure, until one start ends
    well, the launcher is signalled, restarts run out or too few slots are left.

    Args:
        start_job: a function (hosts, size, restart, interrupt, kept) -> an `Ending`: runs one membership
            to its end, or until `interrupt()` (called while it runs) returns a reason to grow;
            `kept` (or None) are the last membership's ranks that go on in place: alone after a
            failure (then `hosts` is None), or with new ranks on `hosts`' free slots after a growth.
        fixed_hosts: the `-H`/`--hostfile` list, or None (with a discovery script, or this host).
        default_np: `-np` (the most ranks when `--max-np` is not given).
        options: an `ElasticOptions`.
        clock, sleep: for tests.
    """

    def __init__(self, start_job, fixed_hosts, default_np, options, clock=time.monotonic, sleep=time.sleep):
        options.check()
        self.start_job, self.options, self.clock, self.sleep = start_job, options, clock, sleep
        self.fixed_hosts = fixed_hosts
        self.most = options.max_np or default_np
        if fixed_hosts is None and options.discovery_script is None:
            self.fixed_hosts = [hostlist.Host("localhost", self.most or options.min_np)]
        self.cooldowns = Cooldowns(*options.cooldown, clock=clock)
        self.failures = []
        self.resizes = 0
        self.signalled = None

    def record_signal(self, signum, _frame):
        """A signal handler while the job waits between memberships (a running one's supervisor
        records its own)."""
        if self.signalled is None:
            self.signalled = signum

    def _hosts_now(self):
        """The hosts there now, less those cooling down."""
        found = (discover(self.options.discovery_script) if self.options.discovery_script
                 else list(self.fixed_hosts))
        return [h for h in found if not self.cooldowns.out(h.name)]

    def wait_for_slots(self):
        """The hosts to start on once they have `min_np` slots, at most `elastic_timeout` from now.

        Raises:
            RuntimeError: too few slots until the deadline, or a signal (the message says which).
        """
        since, deadline = time.strftime("%H:%M:%S"), self.clock() + self.options.elastic_timeout
        while True:
            try:
                available, why = self._hosts_now(), None
            except ValueError as e:  # a script that fails once may answer the next time
                available, why = [], str(e)
            slots = sum(h.slots for h in available)
            if slots >= self.options.min_np:
                return available
            if self.signalled is not None:
                raise RuntimeError(f"stopped by {signal.Signals(self.signalled).name} while waiting for hosts")
            if self.clock() >= deadline:
                cooling = sorted(h for h in self.cooldowns.until if self.cooldowns.out(h))
                raise RuntimeError(
                    f"{slots} slots of the --min-np {self.options.min_np} needed since {since} "
                    f"(--elastic-timeout {self.options.elastic_timeout:g} s)"
                    + (f"; kept out after failing: {', '.join(cooling)}" if cooling else "")
                    + (f"; {why}" if why else ""))
            self.sleep(DISCOVERY_SECONDS)

    def run(self):
        """Runs the job to its end.

        Returns:
            The exit code: 0 once a start ends well; else the last failure's (or 128+N after signal N).

        Raises:
            RuntimeError: too few slots (see `wait_for_slots`).
        """
        start, kept, ending = 0, None, None  # every start of the job, failures' restarts and resizes alike
        while True:
            if kept and not ending.grown:
                available, size = None, len(kept)
            else:
                available = self._slots_for(ending)
                size = self._size(available)
            ending = self.start_job(available, size, start, self._growth(size), kept)
            start, kept = start + 1, None
            if ending.grown:
                self.resizes += 0 if ending.fell_back else 1
                kept = ending.kept  # (ranks waiting for the new ones in their processes, or none)
                continue
            if ending.code == 0 or ending.line is None:  # ended well, or stopped by a signal
                self._report_end(ending.code)
                return ending.code
            self.failures.append(Failure(len(self.failures), ending.line, ending.host, ending.code))
            if len(self.failures) > self.options.max_restarts:
                self._end_kept(ending)
                say(f"the job failed {len(self.failures)} times, and --max-restarts {self.options.max_restarts} "
                     f"allows no more: {self._listed()}")
                return ending.code
            if ending.lost_peer:  # the host that failed is the one the discovery script drops
                out = "no host kept out (the first failure lost a peer)"
            else:
                out = f"host {ending.host} kept out for {self.cooldowns.fail(ending.host):g} s"
            restart = f"(restart {len(self.failures)} of at most {self.options.max_restarts})"
            if self._goes_on_in_place(ending):
                kept = ending.kept
                say(f"{ending.line}; {out}; going on with the {len(kept)} ranks left, in their processes {restart}")
                continue
            self._end_kept(ending)
            say(f"{ending.line}; {out}; starting the job again {restart}")

    def _slots_for(self, ending):
        """`wait_for_slots`; ranks of the last membership waiting to grow in place are ended if it fails."""
        try:
            return self.wait_for_slots()
        except RuntimeError:
            if ending is not None:
                self._end_kept(ending)
            raise

    def _goes_on_in_place(self, ending):
        """Whether the ranks still running after a failure go on by themselves, in their processes:
        they all wait for it, and are enough (`--min-np`, and two: a job of one rank starts again)."""
        left = len(ending.kept or ())
        return left >= max(self.options.min_np, 2) and left <= (self.most or sys.maxsize)

    def _end_kept(self, ending):
        if ending.kept:
            ending.end_kept()

    def _size(self, available):
        return min(sum(h.slots for h in available), self.most or sys.maxsize)

    def _growth(self, size):
        """The `interrupt` of a membership of `size` ranks: every `DISCOVERY_SECONDS`, the hosts are
        read again, and a reason is returned once they offer more ranks than `size` (up to the most)."""
        next_look = [self.clock() + DISCOVERY_SECONDS]

        def interrupt():
            if self.clock() < next_look[0]:
                return None
            next_look[0] = self.clock() + DISCOVERY_SECONDS
            try:
                bigger = self._size(self._hosts_now())
            except ValueError:
                return None  # a discovery script that fails once: the job goes on as it is
            if bigger > size:
                return f"the hosts now offer {bigger} ranks where the job runs {size}"
            return None

        return interrupt

    def _listed(self):
        return "; ".join(f"{f.number + 1}) {f.line} (host {f.host})" for f in self.failures)

    def _report_end(self, code):
        if code == 0 and (self.failures or self.resizes):
            failures = f"{len(self.failures)} failure{'s' if len(self.failures) != 1 else ''}"
            say(f"the job ended well after {failures} and {self.resizes} resize"
                 f"{'s' if self.resizes != 1 else ''}" + (f": {self._listed()}" if self.failures else ""))


def say(message):
    """Writes one line of the launcher's (`tfring run: ...`) on stderr."""
    sys.stderr.write(f"tfring run: {message}\n")
    sys.stderr.flush()
