"""Saving under RingStrategy: rank 0 alone writes, atomically; BackupAndRestore resumes exactly."""

import os
import shutil
import socket
import subprocess

import numpy as np

import pytest

from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

SAVE = r'''
import os
import numpy as np
import tensorflow as tf
import keras
import tfring

out = os.environ["OUT"]
strategy = tfring.RingStrategy()
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).standard_normal((64, 4)).astype("float32")
y = x[:, :1] * 3
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
ckpt = keras.callbacks.ModelCheckpoint(os.path.join(out, "ckpt", "epoch{epoch}.keras"))
model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[ckpt])
model.save(os.path.join(out, "final.keras"))
model.save_weights(os.path.join(out, "final.weights.h5"))
# Every rank can read the file as soon as save() returns.
loaded = keras.models.load_model(os.path.join(out, "final.keras"))
same = all(np.array_equal(a, b) for a, b in zip(loaded.get_weights(), model.get_weights()))
print("LOADED_SAME", same)
np.save(os.path.join(out, f"weights{strategy.rank}.npy"), np.concatenate([w.ravel() for w in model.get_weights()]))
'''


def test_only_rank0_writes_and_every_rank_can_load(warm, tmp_path):
    # A partial file of a killed save on this host is cleaned up; a live process's is left alone.
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / "ckpt").mkdir()
    stale = tmp_path / "ckpt" / f".tfring-partial-{socket.gethostname()}-{dead.pid}-epoch1.keras"
    live = tmp_path / "ckpt" / f".tfring-partial-{socket.gethostname()}-{os.getpid()}-epoch1.keras"
    stale.write_text("half a file")
    live.write_text("being written")
    proc = warm.run_job(2, SAVE, env={"OUT": str(tmp_path)}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("LOADED_SAME True") == 2, proc.stdout
    names = sorted(os.listdir(tmp_path))
    assert names == ["ckpt", "final.keras", "final.weights.h5", "weights0.npy", "weights1.npy"], names
    assert sorted(os.listdir(tmp_path / "ckpt")) == sorted([live.name, "epoch1.keras", "epoch2.keras"])
    assert np.array_equal(np.load(tmp_path / "weights0.npy"), np.load(tmp_path / "weights1.npy"))


RESUME = r'''
import os, signal
import numpy as np
import tensorflow as tf
import keras
import tfring

out, backup = os.environ["OUT"], os.environ["BACKUP"]
kill_at = int(os.environ.get("KILL_AT_EPOCH", "-1"))
strategy = tfring.RingStrategy()
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.standard_normal((128, 6)).astype("float32")
y = (x @ rng.standard_normal((6, 1))).astype("float32")
with strategy.scope():
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse")

class Kill(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if epoch == kill_at and strategy.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)

backup_cb = keras.callbacks.BackupAndRestore(backup)
kill_in_backup = int(os.environ.get("KILL_IN_BACKUP_OF_EPOCH", "-1"))
if kill_in_backup >= 0:  # rank 0 dies right after the backup's weights are written
    save_weights = model.save_weights
    def dying_save_weights(filepath, *args, **kwargs):
        save_weights(filepath, *args, **kwargs)
        if strategy.rank == 0 and str(filepath).startswith(backup) and backup_cb._current_epoch == kill_in_backup:
            os.kill(os.getpid(), signal.SIGKILL)
    model.save_weights = dying_save_weights
model.fit(x, y, batch_size=32, epochs=5, verbose=0, shuffle=False, callbacks=[backup_cb, Kill()])
np.save(os.path.join(out, f"final{strategy.rank}.npy"), np.concatenate([w.ravel() for w in model.get_weights()]))
print("FINISHED", strategy.rank)
'''


def _killed_and_resumed(warm, tmp_path, kill):
    """Runs RESUME straight, then killed as `kill` says and resumed; returns the two output folders."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    straight.mkdir()
    resumed.mkdir()
    proc = warm.run_job(2, RESUME, env={"OUT": str(straight), "BACKUP": str(tmp_path / "b1")}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    killed = run_job(2, RESUME, env=dict(kill, OUT=str(resumed), BACKUP=str(tmp_path / "b2"), TFRING_TIMEOUT="20"),
                     timeout=600)
    assert killed.returncode == 128 + 9, killed.stderr[-3000:]
    assert (tmp_path / "b2").exists() and not list(resumed.iterdir())
    again = warm.run_job(2, RESUME, env={"OUT": str(resumed), "BACKUP": str(tmp_path / "b2")}, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert not (tmp_path / "b2").exists()  # deleted (by rank 0) at the end of training
    return straight, resumed


def test_backup_and_restore_after_a_kill_equals_an_uninterrupted_run(warm, tmp_path):
    straight, resumed = _killed_and_resumed(warm, tmp_path, {"KILL_AT_EPOCH": "3"})
    np.testing.assert_allclose(np.load(resumed / "final0.npy"), np.load(straight / "final0.npy"), rtol=0, atol=1e-6)
    assert np.array_equal(np.load(resumed / "final0.npy"), np.load(resumed / "final1.npy"))


def test_a_kill_inside_the_backup_write_resumes_exactly(warm, tmp_path):
    # The weights of epoch 3 are written but its epoch number is not: the resumed run must not take
    # those weights as epoch 2's (it would train one epoch twice).
    straight, resumed = _killed_and_resumed(warm, tmp_path, {"KILL_IN_BACKUP_OF_EPOCH": "3"})
    np.testing.assert_allclose(np.load(resumed / "final0.npy"), np.load(straight / "final0.npy"), rtol=0, atol=1e-6)


# A model whose saves (~0.5 MB) are larger than the small disk.
SAVES = r'''
import os
import numpy as np
import keras
import tfring

out = os.environ["OUT"]
strategy = tfring.RingStrategy()
x = np.random.default_rng(0).standard_normal((32, 128)).astype("float32")
with strategy.scope():
    model = keras.Sequential([keras.Input((128,)), keras.layers.Dense(1024), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
model.fit(x, x[:, :1], batch_size=16, epochs=1, verbose=0)
for name in ("m.weights.h5", "m.keras", "m.h5"):
    save = model.save_weights if name.endswith(".weights.h5") else model.save
    try:
        save(os.path.join(out, name))
        print("SAVED", name)
    except Exception as e:
        print("FAILED", name, type(e).__name__, " ".join(str(e).split()))
if os.environ.get("LOAD"):
    same = []
    for name in ("m.keras", "m.h5"):
        loaded = keras.models.load_model(os.path.join(out, name), compile=False)
        same.append(all(np.array_equal(a, b) for a, b in zip(loaded.get_weights(), model.get_weights())))
    fresh = keras.models.clone_model(model)
    fresh.load_weights(os.path.join(out, "m.weights.h5"))
    same.append(all(np.array_equal(a, b) for a, b in zip(fresh.get_weights(), model.get_weights())))
    for _ in range(2):  # a folder (zipped=False), saved again over itself
        model.save(os.path.join(out, "folder"), zipped=False)
    loaded = keras.models.load_model(os.path.join(out, "folder"), compile=False)
    same.append(all(np.array_equal(a, b) for a, b in zip(loaded.get_weights(), model.get_weights())))
    print("LOADED_SAME", same)
print("END")
'''


def test_a_full_tmpdir_does_not_fail_a_save(tmp_path, small_disk):
    small_disk = small_disk("64k", mode="1777")
    # Issue 33, item 12: ranks > 0 wrote a throwaway copy of every save into $TMPDIR.
    (small_disk / "filler").write_bytes(b"x" * (60 << 10))  # almost nothing left
    out = tmp_path / "out"
    proc = run_job(2, SAVES, env={"OUT": str(out), "TMPDIR": str(small_disk), "LOAD": "1"}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "FAILED" not in proc.stdout, proc.stdout
    assert proc.stdout.count("LOADED_SAME [True, True, True, True]") == 2, proc.stdout
    assert sorted(os.listdir(out)) == ["folder", "m.h5", "m.keras", "m.weights.h5"]
    left = [n for n in os.listdir(small_disk) if not n.startswith("__autograph_generated_file")]  # TF's own
    assert left == ["filler"], left


def test_a_full_disk_fails_every_rank_alike_naming_the_users_path(tmp_path, small_disk):
    small_disk = small_disk("64k", mode="1777")
    # Issue 33, item 12: rank 0's HDF5 write error named tfring's partial file, the other rank
    # failed elsewhere, and the process ended in SIGSEGV. Now every rank gets the same Python error.
    proc = run_job(2, SAVES, env={"OUT": str(small_disk)}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("END") == 2, proc.stdout
    for name in ("m.weights.h5", "m.keras", "m.h5"):
        failed = sorted(line[4:] for line in proc.stdout.splitlines() if f"FAILED {name} " in line)
        assert len(failed) == 2 and failed[0] == failed[1], proc.stdout  # the same error on both ranks
        assert "OSError" in failed[0] and "No space left on device" in failed[0], failed[0]
        assert str(small_disk / name) in failed[0] and "tfring-partial" not in failed[0], failed[0]
    assert os.listdir(small_disk) == []  # no partial file left behind


def test_a_read_only_folder_fails_every_rank_alike_naming_the_users_path(small_disk):
    # Rank 0 named tfring's partial file (removing a partial that was never made failed too, on a
    # read-only file system), and the other rank got a bare "Read-only file system".
    folder = small_disk("64k", mode="0755")
    subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True, timeout=30)
    proc = run_job(2, SAVES, env={"OUT": str(folder)}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("m.weights.h5", "m.keras", "m.h5"):
        failed = sorted(line[4:] for line in proc.stdout.splitlines() if f"FAILED {name} " in line)
        assert len(failed) == 2 and failed[0] == failed[1], proc.stdout  # the same error on both ranks
        assert "Read-only file system" in failed[0] and str(folder / name) in failed[0], failed[0]
        assert "tfring-partial" not in failed[0] and "save into a folder you can write" in failed[0], failed[0]


STRANGER = r'''
import os
import numpy as np
import keras
import tfring

strategy = tfring.RingStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.save_weights(os.path.join(os.environ["OUT"], "ckpt.weights.h5"))
model.save(os.path.join(os.environ["OUT"], "ckpt.keras"))
print("SAVED")
'''


def test_a_strangers_partial_in_a_sticky_folder_does_not_fail_a_save(tmp_path, other_user):
    # Issue 33, item 8: a file named like this host's stale partial, made by someone else, cannot be
    # removed from a sticky folder, and every save failed with PermissionError. Root ignores the
    # sticky bit, so this root job meets the same refusal through the file's immutable flag.
    if not shutil.which("chattr"):
        pytest.skip("needs chattr to make a file root cannot remove")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    dead = subprocess.Popen(["true"])
    dead.wait()
    strangers = shared / f".tfring-partial-{socket.gethostname()}-{dead.pid}-ckpt.weights.h5"
    strangers.write_text("not yours")
    os.chown(strangers, other_user.uid, other_user.gid)
    if subprocess.run(["chattr", "+i", str(strangers)], capture_output=True, timeout=30).returncode != 0:
        pytest.skip("this file system has no immutable flag")
    try:
        proc = run_job(2, STRANGER, env={"OUT": str(shared)}, timeout=120)
    finally:
        subprocess.run(["chattr", "-i", str(strangers)], timeout=30)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("SAVED") == 2, proc.stdout
    assert strangers.read_text() == "not yours" and os.stat(strangers).st_uid == other_user.uid
    assert sorted(os.listdir(shared)) == sorted([strangers.name, "ckpt.keras", "ckpt.weights.h5"])
