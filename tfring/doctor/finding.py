"""One line of `tfring doctor`'s report."""

import dataclasses

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclasses.dataclass
class Finding:
    """What one check found.

    Args:
        name: what was checked ("TensorFlow", "shared memory", ...).
        status: `OK`, `WARN` (works, but something named is missing or slower) or `FAIL` (tfring
            cannot work here until it is fixed).
        detail: what was found, one line.
        fix: what to do, for `WARN` and `FAIL`; "" otherwise.
    """

    name: str
    status: str
    detail: str
    fix: str = ""
