"""One line of `tfring doctor`'s report."""

import dataclasses

OK, WARN, FAIL, ABSENT = "ok", "warn", "fail", "absent"


@dataclasses.dataclass
class Finding:
    """What one check found.

    Args:
        name: what was checked ("TensorFlow", "shared memory", ...).
        status: `OK`, `WARN` (works, but something named is missing or slower), `FAIL` (tfring
            cannot work here until it is fixed) or `ABSENT` (an optional tool is not installed,
            needed only for what `detail` names).
        detail: what was found, one line.
        fix: what to do, for `WARN`, `FAIL` and `ABSENT`; "" otherwise.
    """

    name: str
    status: str
    detail: str
    fix: str = ""
