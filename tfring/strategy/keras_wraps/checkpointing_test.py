"""Rank 0's cleanup of partial files in a checkpoint folder others may share (issue 33, item 8)."""

import os
import socket
import subprocess

from tfring.strategy.keras_wraps import checkpointing
from tfring.strategy.keras_wraps import partial_files


def _dead_pid():
    dead = subprocess.Popen(["true"])
    dead.wait()
    return dead.pid


def test_only_this_users_stale_partials_of_this_host_are_removed(tmp_path, other_user):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # a sticky folder everyone writes into, like /tmp
    host, dead = socket.gethostname(), _dead_pid()
    mine = shared / f".tfring-partial-{host}-{dead}-epoch1.keras"
    live = shared / f".tfring-partial-{host}-{os.getpid()}-epoch1.keras"
    strangers = shared / f".tfring-partial-{host}-{dead}-epoch2.keras"
    other_host = shared / f".tfring-partial-{host}x-{dead}-epoch1.keras"
    my_link = shared / f".tfring-partial-{host}-{dead}-link.keras"
    my_folder = shared / f".tfring-partial-{host}-{dead}-folder.keras"
    for path in (mine, live, other_host, strangers):
        path.write_text("half a file")
    os.chown(strangers, other_user.uid, other_user.gid)  # made by someone else
    os.symlink(tmp_path / "elsewhere", my_link)
    my_folder.mkdir()
    partial_files.remove_stale(str(shared))
    assert not mine.exists()
    assert os.stat(strangers).st_uid == other_user.uid  # a stranger's file is never touched
    assert live.exists() and other_host.exists() and my_folder.is_dir()
    assert os.path.islink(my_link)  # not a regular file: this job never made it


def test_an_unreadable_shared_folder_does_not_fail_the_cleanup(tmp_path, monkeypatch):
    def refuse(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(os, "listdir", refuse)  # a drop folder one may write into but not list
    partial_files.remove_stale(str(tmp_path))


def test_backup_metadata_is_never_written_through_a_planted_link(tmp_path):
    # A backup folder others can write into: a link planted at the metadata's temporary name must
    # not redirect the write (rank 0 may run as root).
    victim = tmp_path / "victim"
    victim.write_text("precious")
    metadata = tmp_path / "training_metadata.json"
    os.symlink(victim, f"{metadata}.tfring-partial-{os.getpid()}")
    checkpointing._write_json_atomically(str(metadata), {"epoch": 3})
    assert victim.read_text() == "precious"
    assert checkpointing._read_json(str(metadata)) == {"epoch": 3} and not metadata.is_symlink()
