"""Which Python the ranks run when the command names a bare `python`.

`tfring run -np 2 python train.py` from an environment that is not activated would start the first
`python` on PATH (the system's), where tfring, TensorFlow and Keras may not be: every rank would
fail on an import. A bare `python`, `python3` or `python3.N` that is another environment's than
the launcher's own (or not on PATH at all) is replaced by the launcher's interpreter, saying so in
one line. A path (`./venv/bin/python`, `/usr/bin/python3`) is always run as given.
"""

import os
import re
import shutil
import sys

_BARE = re.compile(r"python(\d+(\.\d+)?)?")


def _environment(path):
    """What tells interpreters apart: the venv an interpreter belongs to, else its real file."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    if os.path.exists(os.path.join(root, "pyvenv.cfg")):
        return ("venv", os.path.realpath(root))
    return ("interpreter", os.path.realpath(path))


def _own_environment():
    if sys.prefix != sys.base_prefix:
        return ("venv", os.path.realpath(sys.prefix))
    return ("interpreter", os.path.realpath(sys.executable))


def resolve(command, env):
    """`command` with a bare `python` of another environment replaced by `sys.executable`.

    Args:
        command: the program and its arguments.
        env: the environment the ranks get (its PATH decides what a bare name would run).

    Returns:
        (the command to run, a one-line note for the user or None).

    Example:

    >>> resolve(["python", "train.py"], os.environ)
    (['/work/.venv/bin/python', 'train.py'], "tfring run: `python` here is /usr/bin/python, ...")
    """
    if not command or not _BARE.fullmatch(command[0]) or not sys.executable:
        return list(command), None
    found = shutil.which(command[0], path=env.get("PATH", os.defpath))
    if found is not None and _environment(found) == _own_environment():
        return list(command), None
    what = "is not on PATH" if found is None else f"here is {found}, not the Python tfring runs in"
    note = f"tfring run: `{command[0]}` {what}; the ranks run {sys.executable} (give a path to run another)"
    return [sys.executable] + list(command[1:]), note
