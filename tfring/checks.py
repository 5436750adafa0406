"""Argument checks shared by every public tfring name: one wording for "bad number" and "bad choice".

Each check returns the value it accepted (normalised: a float, an int), so callers write
`self.factor = checks.number("MultiStepDecay", "factor", factor, above=0)`. The message always
names the caller, the argument, what was expected and what was received.
"""

import numbers


def number(where, what, value, *, at_least=None, above=None, below=None, integer=False, unit=None,
           expected=None):
    """Checks that `value` is a real number (not a bool) in range; returns it as a float or int.

    Args:
        where: the public name being called, e.g. `"LARS"`; starts the message.
        what: the argument's name.
        value: what the caller passed.
        at_least: the smallest allowed value (inclusive), or None.
        above: a bound the value must exceed (exclusive), or None.
        below: a bound the value must stay under (exclusive), or None.
        integer: whether the value must be a whole number (an `int`); returns an int then.
        unit: what the number counts, for the message (e.g. `"epochs"`, `"seconds"`).
        expected: what the message says a valid value is (e.g. `"a positive int"`) for every
            failure, instead of the standard wording: only for messages users already match on.

    Returns:
        `value` as an int when `integer`, else as a float.

    Raises:
        ValueError: not a number, not whole when `integer`, or out of range; the message says which.

    Example:

    >>> number("LARS", "momentum", 0.9, at_least=0)
    0.9
    >>> number("fit", "steps", 0, integer=True, above=0)
    Traceback (most recent call last):
    ...
    ValueError: fit: steps must be > 0, got 0
    >>> number("scale_learning_rate", "base_lr", -1, above=0, expected="a positive number")
    Traceback (most recent call last):
    ...
    ValueError: scale_learning_rate: base_lr must be a positive number, got -1
    """
    kind = "a whole number" if integer else "a number"
    if unit:
        kind += f" of {unit}"
    allowed = numbers.Integral if integer else numbers.Real  # NumPy scalars too
    failure = None
    if isinstance(value, bool) or not isinstance(value, allowed):
        failure = kind
    elif at_least is not None and value < at_least:
        failure = f">= {at_least}"
    elif above is not None and not value > above:
        failure = f"> {above}"
    elif below is not None and not value < below:
        failure = f"< {below}"
    if failure is not None:
        shown = repr(value) if expected or failure == kind else value
        raise ValueError(f"{where}: {what} must be {expected or failure}, got {shown}")
    return int(value) if integer else float(value)


def choice(where, what, value, options):
    """Checks that `value` is one of `options`; returns it.

    Args:
        where: the public name being called; starts the message.
        what: the argument's name.
        value: what the caller passed.
        options: the allowed values (compared with `==`).

    Returns:
        `value`.

    Raises:
        ValueError: `value` is not among `options`; the message lists them.

    Example:

    >>> choice("RingStrategy", "compression", "fp16", (None, "fp16", "bf16"))
    'fp16'
    """
    if value not in options:
        listed = ", ".join(repr(o) for o in options)
        raise ValueError(f"{where}: {what} must be one of {listed}, got {value!r}")
    return value

