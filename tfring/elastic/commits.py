"""Where an elastic job's commits outlive its ranks: one file per host, kept by its first local rank.

In the restart form of elastic jobs (`tfring run --min-np`), the launcher starts every rank again
after a failure or a resize, so a commit held only in memory would die with its process. Each
commit is therefore also written, by local rank 0 of every host, to
`<tmp>/tfring-<uid>/elastic-<job>-<host>/commit`, where `<tmp>` is the host's temporary folder
(`TMPDIR`), `<job>` the launcher's `TFRING_ELASTIC_ID`, the same at every start, and `<host>` names
the host (a digest of its hostname, boot id and network namespace: hosts that share a folder, as
emulated hosts share /tmp, still keep a copy each). Every host
holds the whole commit (the ranks hold the same state), so a job that loses any host, rank 0's
included, goes on from the newest commit some surviving host holds: each commit carries its number,
and the ranks of a new membership agree on the highest one (`State.resume`).

Both folders are made private to this user and checked before use (`tfring.file_safety`): another
local user cannot plant a commit for a rank to unpickle. Outside an elastic job nothing is written.
"""

import hashlib
import os
import pickle
import shutil
import tempfile

from tfring import file_safety
from tfring.launch import variables
from tfring.native import library

NAME = "commit"


def elastic_id(environ=None):
    """This elastic job's name (`TFRING_ELASTIC_ID`), or None outside an elastic job."""
    return (os.environ if environ is None else environ).get(variables.ELASTIC_ID) or None


def restart(environ=None):
    """How many times this elastic job has started again (`TFRING_RESTART`; 0 at its first start)."""
    return int((os.environ if environ is None else environ).get(variables.RESTART, "0"))


def folder(job, base=None, host=None):
    """The private folder this host keeps job `job`'s commits in, made (or checked) now.

    Args:
        job: the elastic job's name.
        base: the temporary folder (default `tempfile.gettempdir()`).
        host: this host's identity (default `tfring.native.library.host_identity()`).

    Returns:
        The folder's path.

    Raises:
        file_safety.UnsafePathError: it, or its parent, is not private to this user.
    """
    parent = os.path.join(base or tempfile.gettempdir(), f"tfring-{os.geteuid()}")
    file_safety.make_private_dir(parent, "tfring's folder for elastic commits")
    digest = hashlib.sha256((host or library.host_identity()).encode()).hexdigest()[:12]
    path = os.path.join(parent, f"elastic-{job}-{digest}")
    file_safety.make_private_dir(path, "the elastic job's commit folder")
    return path


def write(where, number, arrays, values):
    """Replaces the commit kept in `where` by commit `number` (atomically: a reader sees one or the other).

    Args:
        where: a folder from `folder`.
        number: the commit's number, higher for each commit of the job.
        arrays: the tracked variables' values: a dict of lists of numpy arrays, in their order.
        values: the state's other values, a dict (pickled).
    """
    data = pickle.dumps({"number": number, "arrays": arrays, "values": values}, protocol=pickle.HIGHEST_PROTOCOL)
    file_safety.write_atomically(os.path.join(where, NAME), data)


def read(where):
    """The commit kept in `where`: a dict with `number`, `arrays` and `values`, or None when there is none.

    Raises:
        file_safety.UnsafePathError: the file is not this user's own.
        ValueError: the file cannot be read as a commit (the message names it).
    """
    path = os.path.join(where, NAME)
    try:
        file_safety.check_own_file(path, "an elastic commit")
    except FileNotFoundError:
        return None
    try:
        with open(path, "rb") as f:
            found = pickle.load(f)
        return {"number": int(found["number"]), "arrays": dict(found["arrays"]), "values": dict(found["values"])}
    except Exception as e:  # a truncated or foreign file: say which
        raise ValueError(f"cannot read the elastic commit `{path}`: {e}") from e


def remove(where):
    """Removes the folder `where` and the commit in it (the job has finished)."""
    shutil.rmtree(where, ignore_errors=True)
