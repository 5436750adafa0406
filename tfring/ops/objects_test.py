"""The object collectives in one process: what each serializer carries, and that a pickle without
the job's signature is never unpickled."""

import os
import pickle

import pytest

from tfring import runtime
from tfring.ops import objects


class _WritesAFile:
    """Unpickling this runs code: it creates the file named."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_each_serializer_carries_its_values():
    runtime.init()
    assert objects.broadcast_object({"a": [1, 2.5, None]}) == {"a": [1, 2.5, None]}
    assert objects.broadcast_object({0: (1, b"x")}, serializer="pickle") == {0: (1, b"x")}
    assert objects.allgather_object({1, 2}, serializer="pickle") == [{1, 2}]
    with pytest.raises(ValueError, match="serializer must be one of"):
        objects.broadcast_object(1, serializer="yaml")


def test_a_pickle_without_the_jobs_signature_is_refused_unopened(tmp_path):
    runtime.init()
    marker = str(tmp_path / "ran")
    forged = pickle.dumps(_WritesAFile(marker))
    for signature in (b"\0" * 32, runtime.sign_object(b"another value")):
        with pytest.raises(ValueError, match="from rank 3 does not carry this job's signature: it was not unpickled"):
            objects._decode(objects._VALUE + signature + forged, 3, "pickle")
    assert not os.path.exists(marker)
    # The same bytes signed by the job are unpickled (and so run their code): the signature is the gate.
    objects._decode(objects._VALUE + runtime.sign_object(forged) + forged, 0, "pickle")
    assert os.path.exists(marker)


def _refuse_to_unpickle():
    raise RuntimeError("this class refuses to be unpickled here")


class _FailsWhenUnpickled:
    """Pickles fine; unpickling it raises (a class another rank lacks, a failing __setstate__)."""

    def __reduce__(self):
        return (_refuse_to_unpickle, ())


def test_a_value_that_fails_only_when_unpickled_is_named_with_its_rank():
    runtime.init()
    with pytest.raises(ValueError, match=r"the pickled value from rank 0 could not be unpickled on this rank "
                                         r"\(RuntimeError: this class refuses to be unpickled here\)"):
        objects.broadcast_object(_FailsWhenUnpickled(), serializer="pickle")
