"""The ranks' output as the launcher shows it: `[rank]` prefixes, repeated warnings once, log files.

Rank 0's stdout and every rank's stderr are shown by default (`--all-output`: every stdout too);
`--output-dir DIR` also writes each rank's whole output, unprefixed, to `DIR/rank.N.log`: DIR must
be this user's own (created 0700; another user's, or one others can write, is refused), and a log
is created 0600 without following links, or appended to when it is already this user's own file.
The last lines of each rank's stderr are kept, for the launcher's word on a failed job.
"""

import collections
import errno
import os
import re
import sys
import threading

from tfring import file_safety
from tfring.launch import membership
from tfring.launch import variables

# "path.py:12: UserWarning: text", the first line of a Python warning (its source line follows).
_WARNING_LINE = re.compile(rb"^\S.*:\d+: \w*Warning: ")
# "2026-11-26 18:55:50.565860: I tensorflow/...cc:210] text": TensorFlow's C++ log (I: info, W: warning);
# group 1 is the line without its time, the same on every rank for the same record.
_TF_LOG_LINE = re.compile(rb"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: (?:([IW] \S+:\d+\] .*)|[EF] )", re.S)
# "I0000 00:00:1795863875.325354   17911 port.cc:153] text": the same through absl (TensorFlow 2.21),
# whose time is followed by the thread id; group 1 is the line without either.
_ABSL_LOG_LINE = re.compile(rb"^(?:([IW])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ (\S+:\d+\] .*)|[EF]\d{4} \d\d:\d\d:)", re.S)
# absl's own notice before TensorFlow's first record (TensorFlow 2.21 prints it, and its start-up
# records, twice in one process): once per job too.
_ABSL_NOTICE = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# Lines kept as a TensorFlow record's continuation (a NodeDef it prints spans several).
_MAX_CONTINUATION = 64
_REFORM_WAIT, _CAN_REFORM = membership.REFORM_WAIT.encode(), membership.CAN_REFORM.encode()
# Lines of each rank's stderr kept for the launcher's last word (a TensorFlow error spans several).
TAIL_LINES = 20


def _tf_record(line):
    """Whether `line` starts a TensorFlow log record, and its key (the line without its time and
    thread: the same on every rank for the same info or warning record; None for an error)."""
    match = _TF_LOG_LINE.match(line)
    if match:
        return True, match.group(1)
    match = _ABSL_LOG_LINE.match(line)
    if match:
        return True, (match.group(1) + b" " + match.group(2)) if match.group(1) else None
    return False, None


def _starts_an_entry(line):
    """Whether `line` starts something of its own: a TensorFlow record, a Python warning, absl's notice."""
    return _tf_record(line)[0] or bool(_WARNING_LINE.match(line)) or line.startswith(_ABSL_NOTICE)


class WarningsOnce:
    """Lets each distinct Python warning and TensorFlow info or warning record through once per job.

    The ranks run the same code, so rank 1's copy of rank 0's warning (with its indented source
    line) says nothing new; nor does TensorFlow's start-up notice (cpu_feature_guard, oneDNN) or
    the data-sharding warning each `fit` repeats, compared without their time stamps. A repeated
    TensorFlow record's continuation lines are dropped while they equal the first copy's; the first
    line that differs is shown, and so is every TensorFlow error (E) record.

    Example:

    >>> keep = WarningsOnce().filter()   # one per output stream
    >>> [keep(b"t.py:1: UserWarning: x\\n"), keep(b"t.py:1: UserWarning: x\\n")]
    [True, False]
    """

    def __init__(self):
        self._seen = set()
        self._records = {}  # a TensorFlow record's first line (no time) -> its continuation lines
        self._lock = threading.Lock()

    def filter(self):
        """A predicate for one output stream (it remembers whether it is inside a dropped warning).

        Returns:
            A function: line (bytes) -> True to show it.
        """
        state = {"dropping": False, "recording": None, "record": None, "at": 0}

        def continues(line):
            """Whether `line` belongs to the record in progress on this stream (shown or dropped)."""
            if state["dropping"] and line[:1] in (b" ", b"\t"):
                return False  # the source line of a dropped Python warning
            state["dropping"] = False
            if state["record"] is not None:
                expected = self._records[state["record"]]
                if state["at"] < len(expected) and expected[state["at"]] == line:
                    state["at"] += 1
                    return False
                state["record"] = None
            if state["recording"] is not None:
                lines = self._records[state["recording"]]
                if len(lines) < _MAX_CONTINUATION and not _starts_an_entry(line):
                    lines.append(line)
                    return True
                state["recording"] = None
            return None

        def keep(line):
            with self._lock:
                carried = continues(line)
                if carried is not None:
                    return carried
                _, key = _tf_record(line)
                if key is not None:
                    if key in self._records:
                        state["record"], state["at"] = key, 0
                        return False
                    self._records[key] = []
                    state["recording"] = key
                    return True
                if not _WARNING_LINE.match(line) and not line.startswith(_ABSL_NOTICE):
                    return True
                if line in self._seen:
                    state["dropping"] = True
                    return False
                self._seen.add(line)
            return True

        return keep


class JobOutput:
    """Where the lines of every rank go.

    Args:
        all_output: show every rank's stdout, and every copy of a warning.
        output_dir: a folder for one log file per rank, or None.

    Example:

    >>> out = JobOutput(all_output=False, output_dir="logs")
    >>> show = out.stream(rank=1, stdout=False)
    >>> show(b"hello\\n")    # printed as "[1] hello" on stderr, written to logs/rank.1.log
    """

    def __init__(self, all_output=False, output_dir=None):
        self.all_output = all_output
        self.output_dir = output_dir
        self._warnings = WarningsOnce()
        self._logs = {}
        self._tails = {}  # rank -> its last stderr lines (bytes)
        self._hiding_stderr = False
        self.hidden_lines = 0  # stderr lines not shown since `hide_stderr`
        self.acknowledged = set()  # ranks that said they stop at their next commit (variables.GROW_ACK)
        self.reforming = set()  # ranks that said they wait for the job's next membership (membership.REFORM_WAIT)
        self.can_reform = set()  # ranks that said they go on in place after a failure (membership.CAN_REFORM)
        self.random_states = {}  # rank -> the random state digest it said with it (hex)
        self._lock = threading.Lock()
        # One line at a time into the launcher's stdout and stderr: a pipe takes a long line in
        # pieces, and another rank's thread wrote in between them (lines of ~100 KB came out torn).
        self._sink_lock = threading.Lock()
        if output_dir:
            file_safety.make_private_dir(output_dir, "--output-dir")

    def _log(self, rank):
        with self._lock:
            if rank not in self._logs and self.output_dir:
                self._logs[rank] = _open_log(os.path.join(self.output_dir, f"rank.{rank}.log"))
            return self._logs.get(rank)

    def stream(self, rank, stdout):
        """A function that takes the lines (bytes) of one stream of one rank.

        Args:
            rank: the rank.
            stdout: True for its stdout, False for its stderr.

        Returns:
            A function: line -> None.
        """
        sink = sys.stdout if stdout else sys.stderr
        show = not stdout or self.all_output or rank == 0
        keep = (lambda line: True) if self.all_output else self._warnings.filter()
        prefix = f"[{rank}] ".encode()
        log = self._log(rank)
        tail = None if stdout else self._stderr_tail(rank)

        def take(line):
            if tail is not None and _CAN_REFORM in line:
                self.can_reform.add(rank)  # (the launcher's alone: not shown)
                self.random_states[rank] = membership.random_state_said(line)
                return
            if log is not None and not log.closed:  # closed at the end, when a pump may linger
                log.write(line)
            if tail is not None:
                tail.append(line)
                if variables.GROW_ACK in line:
                    self.acknowledged.add(rank)
                if _REFORM_WAIT in line:
                    self.reforming.add(rank)
            if show and not (tail is not None and self._hidden()) and keep(line):
                # A rank's last line without its end (a progress bar when the rank stopped) ends
                # here, so that what the launcher says next starts a line of its own.
                with self._sink_lock:
                    sink.buffer.write(prefix + line + (b"" if line.endswith(b"\n") else b"\n"))
                    sink.buffer.flush()

        return take

    def _stderr_tail(self, rank):
        with self._lock:
            return self._tails.setdefault(rank, collections.deque(maxlen=TAIL_LINES))

    def tail(self, rank):
        """The last lines (str, newest last) rank `rank` wrote to stderr, shown or not.

        Example:

        >>> out.tail(1)
        ['Traceback (most recent call last):', '  File "train.py", line 3, in <module>', 'ValueError: boom']
        """
        return [line.decode(errors="replace").rstrip("\r\n") for line in list(self._stderr_tail(rank))]

    def hide_stderr(self):
        """Stops showing the ranks' stderr (log files still get it), unless `all_output`.

        Called when the launcher got Ctrl-C: what the ranks print then is mostly their
        KeyboardInterrupt tracebacks, dozens of lines that hide the launcher's one line.
        """
        self._hiding_stderr = not self.all_output

    def _hidden(self):
        """Whether a stderr line is to be hidden; counts it when it is."""
        with self._lock:
            self.hidden_lines += self._hiding_stderr
            return self._hiding_stderr

    def close(self):
        """Closes the log files."""
        with self._lock:
            for f in self._logs.values():
                f.close()
            self._logs.clear()


def _open_log(path):
    """A rank's log: created 0600, or appended to when it is this user's own regular file; never through a link."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise file_safety.UnsafePathError(f"--output-dir: log `{path}` is a symbolic link: tfring writes logs only "
                                              "into files of its own; remove it") from None
        raise
    try:
        file_safety.check_own_file(path, "--output-dir: log")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "ab", buffering=0)


def pump(stream, take):
    """Copies `stream` line by line to `take` until EOF, then closes it (run in a thread)."""
    for line in iter(stream.readline, b""):
        take(line)
    stream.close()
