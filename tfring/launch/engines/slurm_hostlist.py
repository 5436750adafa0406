"""SLURM's compressed lists: host lists (`node[01-04,07],gpu-a[1-2]-b[1-2]`) and task counts (`2(x3),1`)."""

import itertools
import re


def _split_top_level(text, where):
    """Splits at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise ValueError(f"{where}: unbalanced brackets in {text!r}")
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"{where}: unbalanced brackets in {text!r}")
    return parts + [text[start:]]


def _expand_range(item, text, where):
    """'01-04' -> ['01', '02', '03', '04'] (the width of the first bound is kept); '7' -> ['7']."""
    low, dash, high = item.partition("-")
    if not low.isdigit() or (dash and not high.isdigit()):
        raise ValueError(f"{where}: {item!r} in {text!r} is not a number or a range of numbers")
    if not dash:
        return [low]
    if int(high) < int(low):
        raise ValueError(f"{where}: the range {item!r} in {text!r} runs backwards")
    return [str(n).zfill(len(low)) for n in range(int(low), int(high) + 1)]


def _expand_one(name, where):
    """One entry, possibly with several bracket groups: each group multiplies the names."""
    pieces = re.split(r"(\[[^\]]*\])", name)
    choices = []
    for piece in pieces:
        if piece.startswith("["):
            choices.append([n for item in piece[1:-1].split(",") for n in _expand_range(item, name, where)])
        elif "[" in piece or "]" in piece:
            raise ValueError(f"{where}: unbalanced brackets in {name!r}")
        else:
            choices.append([piece])
    return ["".join(parts) for parts in itertools.product(*choices)]


def expand_hostlist(text, where="SLURM_JOB_NODELIST"):
    """Expands a SLURM host list into host names, in SLURM's order.

    Args:
        text: e.g. "node[01-04,07],cpu3".
        where: the variable it came from, for error messages.

    Returns:
        A list of names.

    Raises:
        ValueError: unbalanced brackets, an empty entry, or a range that is not numeric or runs backwards.

    Example:

    >>> expand_hostlist("node[01-03,07],cpu3")
    ['node01', 'node02', 'node03', 'node07', 'cpu3']
    """
    names = []
    for entry in _split_top_level(text.strip(), where):
        if not entry:
            raise ValueError(f"{where}: an empty entry in {text!r}")
        names.extend(_expand_one(entry, where))
    return names


def expand_tasks_per_node(text, where="SLURM_STEP_TASKS_PER_NODE"):
    """Expands SLURM's tasks-per-node list: one count per node, in node order.

    Args:
        text: e.g. "2(x3),1" (three nodes with 2 tasks, then one with 1).
        where: the variable it came from, for error messages.

    Returns:
        A list of ints.

    Raises:
        ValueError: an entry that is not `N` or `N(xK)`.

    Example:

    >>> expand_tasks_per_node("2(x3),1")
    [2, 2, 2, 1]
    """
    counts = []
    for entry in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", entry)
        if not match:
            raise ValueError(f"{where}: expected entries like 2 or 2(x3), got {text!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts
