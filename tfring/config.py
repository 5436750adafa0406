"""The runtime configuration: one schema, read from arguments first, environment second, defaults last.

Each setting is declared once, as a field of `Config`: its name (the `tfring.init()` argument and
the key handed to the C++ core), default, environment variable, meaning and kind (how text is
parsed and what values are valid). The configuration table (docs/configuration.md), `ENVIRONMENT`, the
validation and the record the core parses (`Config.record`) are all derived from these fields;
the C++ side holds no defaults and does no validation. Nothing else in tfring reads the
environment for configuration.
"""

import dataclasses
import math
import numbers
import os

MiB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Kind:
    """How a setting's text is parsed and which values are valid.

    Args:
        parse: text (from the environment) -> value; raises ValueError on bad text.
        coerce: value -> the normalised value (an int of seconds becomes a float); raises
            ValueError or TypeError when the value is not valid.
        expected: what a valid value is, for messages ("a number of seconds > 0").
        to_record: value -> the text the C++ core parses.
    """

    parse: object
    coerce: object
    expected: str
    to_record: object = str


def _flag(text):
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


def _require(ok, value):
    if not ok:
        raise ValueError(value)
    return value


def _real(value):
    # NumPy scalars count as numbers; a bool does not.
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _seconds(value):
    _require(_real(value), value)
    return _require(math.isfinite(value) and float(value) > 0, float(value))


def _seconds_or_off(value):
    _require(_real(value), value)
    return _require(math.isfinite(value) and float(value) >= 0, float(value))


def _bytes(value):
    _require(_real(value) and int(value) == value, value)
    return _require(int(value) >= 0, int(value))


def _bytes_or_auto_text(text):
    return "auto" if text.strip().lower() == "auto" else int(text)


def _bytes_or_auto(value):
    return value if value == "auto" else _bytes(value)


def _bool(value):
    # True/False, or 1/0 as the README's table and the environment variable write it.
    _require(isinstance(value, bool) or (_real(value) and value in (0, 1)), value)
    return bool(value)


SECONDS = Kind(float, _seconds, "a number of seconds > 0", repr)
SECONDS_OR_OFF = Kind(float, _seconds_or_off, "a number of seconds >= 0 (0: off)", repr)
BYTES = Kind(int, _bytes, "a whole number of bytes >= 0")
BYTES_OR_AUTO = Kind(_bytes_or_auto_text, _bytes_or_auto, "a whole number of bytes >= 0, or 'auto'")
FLAG = Kind(_flag, _bool, "0 or 1", lambda v: "1" if v else "0")
TEXT = Kind(str, lambda v: _require(isinstance(v, str) and "\n" not in v, v), "text on one line")
# Text that travels in the core's space-separated records (the rendezvous endpoint).
WORD = Kind(str, lambda v: _require(isinstance(v, str) and not any(c.isspace() for c in v), v),
            "text without spaces")
TRANSPORT = Kind(str, lambda v: _require(v in ("auto", "shm", "tcp"), v), "'auto', 'shm' or 'tcp'")
ALLREDUCE = Kind(str, lambda v: _require(v in ("auto", "ring", "hierarchical"), v),
                 "'auto', 'ring' or 'hierarchical'")


def setting(default, kind, meaning, env=None, shown_default=None, core=True):
    """Declares one configuration field: its default, kind, meaning and environment variable.

    Args:
        default: the value when neither an argument nor the environment gives one.
        kind: a `Kind` (`SECONDS`, `SECONDS_OR_OFF`, `BYTES`, `BYTES_OR_AUTO`, `FLAG`, `TEXT`, `WORD`, `TRANSPORT`, `ALLREDUCE`).
        meaning: one line for the configuration table (docs/configuration.md) and for messages.
        env: the environment variable that sets it, or None (argument only).
        shown_default: how the configuration table shows the default, when not `str(default)`.
        core: whether the C++ core reads it (False: only Python does, e.g. `RingStrategy`).

    Returns:
        A `dataclasses.field` carrying the facts as metadata.

    Example:

    >>> timeout: float = setting(60.0, SECONDS, "seconds a collective may stall", env="TFRING_TIMEOUT")
    """
    facts = {"kind": kind, "meaning": meaning, "env": env, "core": core,
             "shown_default": str(default) if shown_default is None else shown_default}
    return dataclasses.field(default=default, metadata=facts)


@dataclasses.dataclass
class Config:
    """Settings of one tfring runtime (see the configuration table, docs/configuration.md).

    Args:
        timeout: seconds a collective may wait on a peer before failing with `UnavailableError`.
        rendezvous_timeout: seconds all ranks have to find each other at `init()`.
        transport: `"auto"` (shared memory when every rank is on this host, else TCP),
            `"shm"` or `"tcp"`.
        single_copy: let shared memory read a peer's tensors in place (`process_vm_readv`);
            when the OS forbids it tfring falls back to copying through the shared ring.
        fusion_threshold_bytes: most bytes reduced in one fused pass; 0 reduces each tensor alone.
        advertise_host: the address other hosts use to reach this rank.
        store_request_timeout: seconds one request to rank 0's rendezvous store may take.
        store_auth_timeout: seconds a new store connection has to prove the job secret.
        store_frame_timeout: seconds a store request or reply may take once it has begun.
        mixed_ring: with `transport="auto"` and ranks on several hosts, use shared memory for the
            ring's links inside a host and TCP between hosts (off: TCP on every link).
        host_id: this rank's host identity: ranks with equal ones count as one host and may share
            memory. `""` (the default) detects it from the hostname, the boot id and the network
            namespace, so that network namespaces on one machine count as different hosts; any
            other text (no spaces) replaces detection, as `NCCL_HOSTID` does.
        allreduce_algorithm: `"auto"` (tfring picks by the layout), `"ring"` (one ring over every
            rank) or `"hierarchical"` (reduce inside each host, allreduce across hosts, share
            inside each host; needs the same number of ranks on every host, placed host by host).
        timeline: a Chrome-trace / Perfetto JSON file of each rank's collectives (the path with
            ".rank<R>" before ".json", one per rank); "" (the default) writes none.
        stall_warning: seconds a collective may wait before every waiting rank logs which ranks
            have not submitted it (and again at that interval until `timeout`); 0 turns it off.
        bucket_bytes: `RingStrategy` cuts the gradients into buckets of about this many bytes, in
            the order the backward pass produces them, and starts each bucket's allreduce as soon
            as its gradients exist, so communication overlaps the rest of the backward pass.
            0: one allreduce of every gradient after the backward pass. `"auto"`: `fit` tries
            sizes from 1 to 32 MiB over its first steps and keeps the fastest (`bucket_tuning`).

    Example:

    >>> cfg = Config.resolve(timeout=30)
    >>> cfg.timeout
    30.0
    """

    timeout: float = setting(60.0, SECONDS, "seconds a collective may stall before it fails with "
                             "`UnavailableError`", env="TFRING_TIMEOUT", shown_default="60")
    rendezvous_timeout: float = setting(120.0, SECONDS, "seconds for all ranks to join at `init()`",
                                        env="TFRING_RENDEZVOUS_TIMEOUT", shown_default="120")
    transport: str = setting("auto", TRANSPORT, "`auto` (shared memory when every rank is on this host, "
                             "else TCP), `shm`, `tcp`", env="TFRING_TRANSPORT")
    single_copy: bool = setting(True, FLAG, "1/0: shared memory reads peers' tensors in place with "
                                "`process_vm_readv`", env="TFRING_SINGLE_COPY", shown_default="1")
    fusion_threshold_bytes: int = setting(64 * MiB, BYTES, "bytes per fused allreduce pass; 0 reduces "
                                          "each tensor alone", env="TFRING_FUSION_THRESHOLD")
    advertise_host: str = setting("", WORD, "address other hosts use to reach this rank", env="TFRING_HOST",
                                  shown_default="`tfring run -H`: the address ssh reached; else first non-loopback IPv4")
    store_request_timeout: float = setting(60.0, SECONDS, "seconds one request to rank 0's rendezvous "
                                           "store may take", shown_default="60")
    store_auth_timeout: float = setting(10.0, SECONDS, "seconds a new store connection has to prove the "
                                        "job secret", shown_default="10")
    store_frame_timeout: float = setting(30.0, SECONDS, "seconds a store request or reply may take once "
                                         "begun", shown_default="30")
    mixed_ring: bool = setting(True, FLAG, "1/0: with `auto` across hosts, shared memory between ranks on "
                               "one host and TCP between hosts in one ring (0: TCP on every link)",
                               env="TFRING_MIXED_RING", shown_default="1")
    host_id: str = setting("", WORD, "ranks with equal host ids count as one host and may share memory; "
                           "text without spaces", env="TFRING_HOST_ID",
                           shown_default="hostname, boot id and network namespace")
    allreduce_algorithm: str = setting("auto", ALLREDUCE, "`ring` (one ring over every rank), `hierarchical` "
                                       "(inside each host, then across hosts; equal ranks per host, placed "
                                       "host by host) or `auto` (hierarchical where the layout allows)",
                                       env="TFRING_ALLREDUCE")
    timeline: str = setting("", TEXT, "a Chrome-trace / Perfetto JSON of each rank's collectives: "
                            "`trace.json` makes `trace.rank<R>.json` per rank", env="TFRING_TIMELINE",
                            shown_default="none")
    stall_warning: float = setting(10.0, SECONDS_OR_OFF, "seconds a collective may wait before every waiting "
                                   "rank logs which ranks have not submitted it, repeated at that interval "
                                   "until `timeout` (0: never)", env="TFRING_STALL_WARNING", shown_default="10")
    bucket_bytes: int = setting(4 * MiB, BYTES_OR_AUTO, "`RingStrategy`: bytes of gradients per bucket; each "
                                "bucket's allreduce starts as soon as its gradients exist, overlapping the "
                                "backward pass (0: one allreduce after the backward pass; `auto`: `fit` times "
                                "1-32 MiB over its first steps and keeps the fastest)", env="TFRING_BUCKET_BYTES",
                                core=False)

    @classmethod
    def resolve(cls, environ=None, **arguments):
        """Builds a Config from `arguments`, then `environ` (default `os.environ`), then defaults.

        Args:
            environ: the environment to read (default `os.environ`).
            **arguments: field values; None means "not given".

        Returns:
            A validated `Config`.

        Raises:
            TypeError: an argument names no setting.
            ValueError: an argument or variable has a bad value (the message names it).
        """
        environ = os.environ if environ is None else environ
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(arguments) - set(fields)
        if unknown:
            raise TypeError(f"unknown tfring option(s): {sorted(unknown)}; known: {sorted(fields)}")
        values = {}
        for name, field in fields.items():
            env = field.metadata["env"]
            if arguments.get(name) is None and env and env in environ:
                values[name] = _from_text(env, name, field.metadata["kind"], environ[env])
        values.update({k: v for k, v in arguments.items() if v is not None})
        config = cls(**values)
        config.validate()
        return config

    def validate(self):
        """Checks every field against its kind.

        Raises:
            ValueError: naming the field, what it must be, and what it holds.
        """
        for field in dataclasses.fields(self):
            kind, value = field.metadata["kind"], getattr(self, field.name)
            try:
                setattr(self, field.name, kind.coerce(value))
            except (TypeError, ValueError):
                raise ValueError(f"{field.name} must be {kind.expected}, got {value!r}") from None

    def record(self, job):
        """The complete text record the C++ core parses: every setting and the job's identity.

        Args:
            job: the `tfring.launch.cluster.ClusterInfo` of this process.

        Returns:
            "key=value" lines, every key the core knows, each exactly once.

        Raises:
            ValueError: a job of several ranks without rank 0's store port.
        """
        if job.size > 1 and not job.store_port > 0:
            raise ValueError(f"a job of {job.size} ranks needs the port of rank 0's store, got {job.store_port!r}")
        lines = {"rank": job.rank, "size": job.size, "local_rank": job.local_rank,
                 "local_size": job.local_size, "store_host": job.store_host, "store_port": job.store_port,
                 "secret": job.secret, "job_id": job.job_id}
        for field in dataclasses.fields(self):
            if field.metadata["core"]:
                lines[field.name] = field.metadata["kind"].to_record(getattr(self, field.name))
        return "".join(f"{key}={value}\n" for key, value in lines.items())


def _from_text(env, name, kind, text):
    # Checked here, so that a bad value names the variable the user set as well as the setting.
    try:
        return kind.coerce(kind.parse(text))
    except (TypeError, ValueError):
        raise ValueError(f"{env} ({name}) must be {kind.expected}, got {text!r}") from None


def settings_table():
    """The rows of the configuration table (docs/configuration.md), from the schema.

    Returns:
        A list of `(variable, argument, meaning, default)`, one per setting; `variable` is "—"
        for a setting only an argument sets.

    Example:

    >>> settings_table()[0]
    ('TFRING_TIMEOUT', 'timeout', 'seconds a collective may stall before it fails with `UnavailableError`', '60')
    """
    return [(f.metadata["env"] or "—", f.name, f.metadata["meaning"], f.metadata["shown_default"])
            for f in dataclasses.fields(Config)]


# Every variable tfring reads for configuration -> the setting it sets.
ENVIRONMENT = {env: name for env, name, _, _ in settings_table() if env != "—"}
