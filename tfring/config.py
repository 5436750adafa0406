"""The runtime configuration: arguments first, environment variables second, defaults last.

Every environment variable tfring reads is listed in `ENVIRONMENT` (and in the README's one
table); nothing else in the package reads the environment for configuration.
"""

import dataclasses
import os

MiB = 1 << 20

# name -> (field, meaning). The README's table is generated from the same facts.
ENVIRONMENT = {
    "TFRING_TIMEOUT": ("timeout", "seconds a collective may stall before it fails (default 60)"),
    "TFRING_RENDEZVOUS_TIMEOUT": ("rendezvous_timeout", "seconds for all ranks to join (default 120)"),
    "TFRING_TRANSPORT": ("transport", "auto | shm | tcp (default auto: shm when all ranks share a host)"),
    "TFRING_SINGLE_COPY": ("single_copy", "1/0: shm reads peers' buffers directly with process_vm_readv (default 1)"),
    "TFRING_FUSION_THRESHOLD": ("fusion_threshold_bytes", "bytes per fused allreduce pass; 0 disables fusion (default 64 MiB)"),
    "TFRING_HOST": ("advertise_host", "address other ranks use to reach this one (default: first non-loopback IPv4)"),
}


def _parse_bool(name, text):
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name} must be 0 or 1, got {text!r}")


@dataclasses.dataclass
class Config:
    """Settings of one tfring runtime.

    Args:
        timeout: seconds a collective may wait on a peer before failing with `UnavailableError`.
        rendezvous_timeout: seconds all ranks have to find each other at `init()`.
        transport: `"auto"` (shared memory when every rank is on this host, else TCP),
            `"shm"` or `"tcp"`.
        single_copy: let shared memory read a peer's tensors in place (`process_vm_readv`);
            when the OS forbids it tfring falls back to copying through the shared ring.
        fusion_threshold_bytes: most bytes reduced in one fused pass; 0 reduces each tensor alone.
        advertise_host: the address other hosts use to reach this rank.

    Example:

    >>> cfg = Config.resolve(timeout=30)
    >>> cfg.timeout
    30.0
    """

    timeout: float = 60.0
    rendezvous_timeout: float = 120.0
    transport: str = "auto"
    single_copy: bool = True
    fusion_threshold_bytes: int = 64 * MiB
    advertise_host: str = ""

    @classmethod
    def resolve(cls, environ=None, **arguments):
        """Builds a Config from `arguments`, then `environ` (default `os.environ`), then defaults.

        Raises:
            ValueError: an argument or variable has a bad value (the message names it).
        """
        environ = os.environ if environ is None else environ
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(arguments) - set(fields)
        if unknown:
            raise TypeError(f"unknown tfring option(s): {sorted(unknown)}; known: {sorted(fields)}")
        values = {}
        for env_name, (field, _) in ENVIRONMENT.items():
            if arguments.get(field) is None and env_name in environ:
                values[field] = cls._from_text(env_name, field, environ[env_name])
        values.update({k: v for k, v in arguments.items() if v is not None})
        config = cls(**values)
        config.validate()
        return config

    @staticmethod
    def _from_text(name, field, text):
        if field == "single_copy":
            return _parse_bool(name, text)
        if field in ("timeout", "rendezvous_timeout"):
            try:
                return float(text)
            except ValueError:
                raise ValueError(f"{name} must be a number of seconds, got {text!r}") from None
        if field == "fusion_threshold_bytes":
            try:
                return int(text)
            except ValueError:
                raise ValueError(f"{name} must be a whole number of bytes, got {text!r}") from None
        return text

    def validate(self):
        if not self.timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {self.timeout}")
        if not self.rendezvous_timeout > 0:
            raise ValueError(f"rendezvous_timeout must be > 0 seconds, got {self.rendezvous_timeout}")
        if self.transport not in ("auto", "shm", "tcp"):
            raise ValueError(f"transport must be 'auto', 'shm' or 'tcp', got {self.transport!r}")
        if int(self.fusion_threshold_bytes) < 0:
            raise ValueError(f"fusion_threshold_bytes must be >= 0, got {self.fusion_threshold_bytes}")
        self.timeout = float(self.timeout)
        self.rendezvous_timeout = float(self.rendezvous_timeout)
        self.fusion_threshold_bytes = int(self.fusion_threshold_bytes)
