"""The rule for folders others may share: owner and mode checks, exclusive creation, atomic writes."""

import os

import pytest

from tfring import file_safety


def test_private_dir_made_0700_and_accepted(tmp_path):
    folder = tmp_path / "a" / "b"
    old = os.umask(0o022)
    try:
        file_safety.make_private_dir(str(folder))
    finally:
        os.umask(old)
    assert os.stat(folder).st_mode & 0o777 == 0o700
    file_safety.make_private_dir(str(folder))  # an existing private folder is fine


def test_writable_by_others_refused_naming_mode(tmp_path):
    folder = tmp_path / "open"
    folder.mkdir()
    os.chmod(folder, 0o777)
    with pytest.raises(file_safety.UnsafePathError, match=r"rwxrwxrwx.*0777.*others can write"):
        file_safety.check_private_dir(str(folder), "stage: local_dir")


def test_symlink_refused(tmp_path):
    (tmp_path / "real").mkdir(mode=0o700)
    os.symlink(tmp_path / "real", tmp_path / "link")
    with pytest.raises(file_safety.UnsafePathError, match="symbolic link"):
        file_safety.make_private_dir(str(tmp_path / "link"))


def test_folder_of_another_user_refused_naming_owner(tmp_path, other_user):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o755)
    os.chown(folder, other_user.uid, other_user.gid)
    with pytest.raises(file_safety.UnsafePathError, match=f"owned by {other_user.name}"):
        file_safety.make_private_dir(str(folder), "--output-dir")


def test_create_exclusive_never_follows_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.symlink(victim, tmp_path / "rank.0.log")
    with pytest.raises(FileExistsError):
        file_safety.create_exclusive(str(tmp_path / "rank.0.log"))
    assert victim.read_text() == "keep"


def test_write_atomically_replaces_a_link_not_its_target(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.symlink(victim, tmp_path / "marker")
    file_safety.write_atomically(str(tmp_path / "marker"), b"new")
    assert victim.read_text() == "keep"
    assert not os.path.islink(tmp_path / "marker") and (tmp_path / "marker").read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["marker", "victim"]  # no temporary left


def test_own_file_checks(tmp_path, other_user):
    path = tmp_path / "marker"
    file_safety.write_atomically(str(path), b"{}")
    file_safety.check_own_file(str(path))
    os.chmod(path, 0o666)
    with pytest.raises(file_safety.UnsafePathError, match="others can write"):
        file_safety.check_own_file(str(path))
    os.chmod(path, 0o600)
    os.chown(path, other_user.uid, other_user.gid)
    with pytest.raises(file_safety.UnsafePathError, match=f"owned by {other_user.name}"):
        file_safety.check_own_file(str(path))
