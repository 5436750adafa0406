"""`--output-dir`: logs only in a folder of this user's own, created 0600, never through a planted link."""

import os
import subprocess
import sys

import pytest

from tfring import file_safety
from tfring.launch.output import JobOutput


def _write(out, rank, text):
    out.stream(rank, stdout=True)(text)
    out.close()


def test_logs_are_private_and_appended_to_when_they_are_ours(tmp_path):
    old = os.umask(0o022)
    try:
        _write(JobOutput(output_dir=str(tmp_path / "logs")), 1, b"first\n")
        _write(JobOutput(output_dir=str(tmp_path / "logs")), 1, b"second\n")
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "logs").st_mode & 0o777 == 0o700
    assert os.stat(tmp_path / "logs" / "rank.1.log").st_mode & 0o777 == 0o600
    assert (tmp_path / "logs" / "rank.1.log").read_bytes() == b"first\nsecond\n"


def test_a_folder_of_another_user_is_refused(tmp_path, other_user):
    # Issue 33, item 5: the logs went into a folder another user made (and could read).
    folder = tmp_path / "logs"
    folder.mkdir(mode=0o755)
    os.chown(folder, other_user.uid, other_user.gid)
    with pytest.raises(file_safety.UnsafePathError, match=f"--output-dir `{folder}` is owned by {other_user.name}"):
        JobOutput(output_dir=str(folder))


def test_a_folder_others_can_write_is_refused(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    os.chmod(folder, 0o1777)
    with pytest.raises(file_safety.UnsafePathError, match="others can write"):
        JobOutput(output_dir=str(folder))


def test_a_planted_link_is_never_written_through(tmp_path):
    # Issue 33, item 5: a `rank.N.log` symlink sent the job's output into the victim's file.
    folder = tmp_path / "logs"
    folder.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep\n")
    os.symlink(victim, folder / "rank.1.log")
    out = JobOutput(output_dir=str(folder))
    with pytest.raises(file_safety.UnsafePathError, match="rank.1.log` is a symbolic link"):
        out.stream(1, stdout=True)
    assert victim.read_bytes() == b"keep\n"


@pytest.mark.multiprocess
def test_tfring_run_refuses_the_folder_before_starting_ranks(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    os.chmod(folder, 0o777)
    proc = subprocess.run([sys.executable, "-m", "tfring", "run", "-np", "2", "--output-dir", str(folder),
                           sys.executable, "-c", "open('started', 'w')"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "tfring run: --output-dir" in proc.stderr and "others can write" in proc.stderr
    assert not (tmp_path / "started").exists()
