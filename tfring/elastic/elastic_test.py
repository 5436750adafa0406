"""`tfring.elastic` in one process: the hosts' commit files (private, atomic, refused when foreign),
a state's commit/restore, and a restarted elastic job's resume from a commit (the multi-rank paths:
tests/elastic_state_test.py, tests/multihost_test.py)."""

import os
import pickle

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402

from tfring import file_safety  # noqa: E402
from tfring.elastic import CommitCallback  # noqa: E402
from tfring.elastic import State  # noqa: E402
from tfring.elastic import commits  # noqa: E402
from tfring.elastic import run  # noqa: E402
from tfring.launch import variables  # noqa: E402

NOBODY = 65534


def _model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse")
    return model


def _fit(model, steps=2):
    x = np.random.default_rng(0).standard_normal((4 * steps, 3)).astype("float32")
    model.fit(x, np.ones((4 * steps, 2), "float32"), batch_size=4, epochs=1, shuffle=False, verbose=0)


def _weights(model):
    return [np.array(v) for v in model.variables + model.optimizer.variables]


def test_a_hosts_commit_folder_is_private_and_named_by_job_and_host(tmp_path):
    where = commits.folder("job1", base=str(tmp_path), host="h0")
    assert where != commits.folder("job1", base=str(tmp_path), host="h1")
    for path in (where, os.path.dirname(where)):
        assert os.stat(path).st_mode & 0o777 == 0o700
    assert commits.read(where) is None
    commits.write(where, 7, {"model": [np.arange(3.0)]}, {"epoch": 2})
    found = commits.read(where)
    assert found["number"] == 7 and found["values"] == {"epoch": 2}
    np.testing.assert_array_equal(found["arrays"]["model"][0], np.arange(3.0))
    commits.remove(where)
    assert not os.path.exists(where)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
def test_a_commit_folder_or_file_another_user_could_plant_is_refused(tmp_path):
    parent = tmp_path / f"tfring-{os.geteuid()}"
    parent.mkdir(mode=0o777)
    os.chown(parent, NOBODY, NOBODY)  # a hostile local user made the folder first
    with pytest.raises(file_safety.UnsafePathError, match="not by"):
        commits.folder("job1", base=str(tmp_path), host="h0")
    os.chown(parent, 0, 0)
    parent.chmod(0o700)
    where = commits.folder("job1", base=str(tmp_path), host="h0")
    planted = os.path.join(where, commits.NAME)
    with open(planted, "wb") as f:
        pickle.dump({"number": 99, "arrays": {}, "values": {}}, f)
    os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(file_safety.UnsafePathError, match="elastic commit"):
        commits.read(where)
    os.unlink(planted)
    os.symlink("/etc/passwd", planted)
    with pytest.raises(file_safety.UnsafePathError, match="not a regular file"):
        commits.read(where)


def test_a_truncated_commit_is_an_error_naming_it(tmp_path):
    where = commits.folder("job1", base=str(tmp_path), host="h0")
    file_safety.write_atomically(os.path.join(where, commits.NAME), b"\x80\x05not a pickle")
    with pytest.raises(ValueError, match="cannot read the elastic commit"):
        commits.read(where)


def test_restore_returns_to_the_last_commit_and_outside_a_job_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv(variables.ELASTIC_ID, raising=False)
    model = _model()
    state = State(model, epoch=0)
    _fit(model)
    state.epoch = 1
    state.commit()
    committed = _weights(model)
    _fit(model)
    state.epoch = 2
    state.restore()
    assert state.epoch == 1
    assert all(np.array_equal(a, b) for a, b in zip(_weights(model), committed))
    assert os.listdir(tmp_path) == []


def test_a_restarted_job_resumes_the_newest_commit_then_runs_the_reset_callbacks(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv(variables.ELASTIC_ID, "job1")
    monkeypatch.setenv(variables.RESTART, "0")
    model = _model()
    state = State(model, epoch=0, batch=0)
    _fit(model)
    state.epoch, state.batch = 3, 1
    state.commit()
    committed = _weights(model)
    # The job starts again: a new process builds the model afresh (its optimizer not yet built).
    monkeypatch.setenv(variables.RESTART, "1")
    again = _model()
    resumed = State(again, epoch=0, batch=0)
    resets = []
    resumed.register_reset_callbacks([lambda: resets.append((resumed.epoch, resumed.batch))])
    trained = []
    assert run(lambda s, k: trained.append((s.epoch, k)) or "done")(resumed, 5) == "done"
    assert trained == [(3, 5)] and resets == [(3, 1)]
    assert all(np.array_equal(a, b) for a, b in zip(_weights(again), committed))
    assert list((tmp_path / f"tfring-{os.geteuid()}").iterdir()) == []  # run removed the host's copy


def test_a_commit_of_another_model_is_refused(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv(variables.ELASTIC_ID, "job1")
    monkeypatch.setenv(variables.RESTART, "0")
    State(_model(), epoch=0).commit()
    monkeypatch.setenv(variables.RESTART, "1")
    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="the state has 4 model variables but its commit holds 2"):
        State(other, epoch=0).resume()


def test_the_commit_callback_checks_its_arguments():
    with pytest.raises(ValueError, match="needs a state with batch"):
        CommitCallback(State(epoch=0))
    for bad in (0, -2, 1.5, True, "batch"):
        with pytest.raises(ValueError, match="save_freq must be 'epoch' or a number of batches"):
            CommitCallback(State(epoch=0, batch=0), save_freq=bad)
    with pytest.raises(ValueError, match="built"):
        State(keras.Sequential([keras.layers.Dense(1)]))


def test_mid_epoch_commits_with_several_steps_per_call_are_refused_before_training():
    model = _model()
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=2)
    with pytest.raises(ValueError, match="steps_per_execution=1 only; this model runs 2"):
        model.fit(np.ones((8, 3)), np.ones((8, 2)), batch_size=4, verbose=0,
                  callbacks=[CommitCallback(State(model, epoch=0, batch=0), save_freq=2)])
    model.fit(np.ones((8, 3)), np.ones((8, 2)), batch_size=4, verbose=0,
              callbacks=[CommitCallback(State(model, epoch=0, batch=0))])  # (every epoch: fine)


def test_a_joining_rank_whose_state_cannot_go_on_in_place_says_why(monkeypatch):
    # A rank started into a running job whose model is not under a RingStrategy (plain Keras here):
    # it cannot join in its process, and says so, before any random state is compared.
    from tfring import runtime
    from tfring.elastic import reform
    from tfring.launch import membership

    monkeypatch.setattr(runtime, "joining", lambda: True)
    monkeypatch.setenv(membership.RANDOM_STATE, "abc")
    monkeypatch.setenv(membership.REFORM_SECONDS, "1")
    with pytest.raises(RuntimeError, match="was started to join a running job but cannot: the state has no model "
                                           "under a RingStrategy"):
        reform.join(State(_model()))
