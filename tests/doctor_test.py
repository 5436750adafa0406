"""`tfring doctor`: passes here (with its 2-rank self-test), and fails clearly, naming the fix,
where g++, shared memory or ssh is missing. Each runs the command as a user does."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tfring_dev.testing import QUIET_ENV
from tfring_dev.testing import path_without

# Every test runs `python -m tfring doctor` as a user does.
pytestmark = pytest.mark.multiprocess


def _doctor(*args, env=None, prefix=(), timeout=400, cwd=None):
    cmd = list(prefix) + [sys.executable, "-m", "tfring", "doctor", "--json", *args]
    full = {k: v for k, v in os.environ.items() if not k.startswith("TFRING_")}
    full.update(QUIET_ENV, **(env or {}))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full, timeout=timeout, cwd=cwd)
    report = json.loads(proc.stdout)
    return proc.returncode, {c["name"]: c for c in report["checks"]}, report


def test_doctor_with_its_self_test_passes_here():
    code, checks, report = _doctor("--self-test")
    assert code == 0 and report["ok"], json.dumps(report, indent=1)
    assert not [c for c in checks.values() if c["status"] == "fail"]
    for name in ("Python", "TensorFlow", "Keras", "tfring", "op library", "C++ compiler", "shared memory",
                 "single-copy reads", "TCP", "ssh", "mpirun", "srun", "job secret", "self-test"):
        assert name in checks, name
    result = report["self_test"]
    assert result["ranks"] == 2 and result["cases"] == 80 and result["failed"] == {}
    assert result["transport"].startswith("shm") and result["bandwidth"]["gb_per_s"] > 0
    assert "built for TensorFlow" in checks["op library"]["detail"]


def test_no_compiler_where_the_library_must_be_built_fails_naming_the_package(tmp_path):
    # A copy of the package whose library claims another TensorFlow, on a PATH without g++.
    import tensorflow as tf

    from tfring.native import build

    source = pathlib.Path(build.__file__).resolve().parents[2] / "tfring"
    shutil.copytree(source, tmp_path / "src" / "tfring", ignore=shutil.ignore_patterns("__pycache__", ".build.lock"))
    library = pathlib.Path(build.library_dir(tf.__version__, str(tmp_path / "src" / "tfring" / "native")))
    data = (library / build.LIBRARY_NAME).read_bytes()
    claimed = f'"tensorflow": "{tf.__version__}"'.encode()
    (library / build.LIBRARY_NAME).write_bytes(data.replace(claimed, claimed.replace(b'"2.', b'"0.')))
    env = {"PYTHONPATH": str(tmp_path / "src"), "PATH": path_without(tmp_path / "bin", ["g++"])}
    code, checks, _ = _doctor(env=env, cwd=tmp_path / "src")  # the copy, not the checkout, is imported
    assert code == 1
    op = checks["op library"]
    assert op["status"] == "fail" and "must be built (it was built for TensorFlow 0." in op["detail"]
    assert "no C++ compiler" in op["detail"] and "apt-get install g++" in op["fix"]
    assert checks["C++ compiler"]["status"] == "fail"


def test_no_ssh_warns_and_fails_for_a_job_on_other_hosts(tmp_path):
    env = {"PATH": path_without(tmp_path / "bin", ["ssh"])}
    code, checks, _ = _doctor(env=env)
    assert code == 0 and checks["ssh"]["status"] == "warn" and "openssh-client" in checks["ssh"]["fix"]
    code, checks, _ = _doctor("-H", "gpu-node-7.invalid:4", env=env)
    assert code == 1 and checks["ssh"]["status"] == "fail" and "openssh-client" in checks["ssh"]["fix"]


def test_a_host_ssh_cannot_reach_fails_naming_it():
    code, checks, _ = _doctor("-H", "localhost:1,gpu-node-7.invalid:4")
    assert code == 1
    reach = checks["ssh gpu-node-7.invalid"]
    assert reach["status"] == "fail" and "ssh-copy-id gpu-node-7.invalid" in reach["fix"], reach


def test_a_secret_file_others_can_read_fails(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    secret.chmod(0o644)
    code, checks, _ = _doctor(env={"TFRING_SECRET_FILE": str(secret)})
    assert code == 1 and "chmod 600" in checks["job secret"]["detail"]


def test_no_shared_memory_fails_and_the_self_test_says_why():
    # /dev/shm read-only, in a mount namespace of the doctor's own (root only), torn down with it.
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to hide /dev/shm in a mount namespace")
    mount = "mount -t tmpfs -o ro,size=1m tfring-test /dev/shm && exec \"$@\""
    code, checks, report = _doctor("--self-test", "--timeout", "120", prefix=["unshare", "-m", "sh", "-c", mount, "sh"])
    assert code == 1
    shm = checks["shared memory"]
    assert shm["status"] == "fail" and "/dev/shm cannot hold" in shm["detail"] and "TFRING_TRANSPORT=tcp" in shm["fix"]
    assert checks["self-test"]["status"] == "fail", checks["self-test"]


def test_missing_launchers_are_absent_not_ok_and_a_broken_compiler_fails(tmp_path):
    # mpirun and srun hidden; a "g++" that prints a version but compiles nothing.
    bin_dir = tmp_path / "bin"
    path = path_without(bin_dir, ["mpirun", "srun", "g++"])
    fake = bin_dir / "g++"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'g++ (Debian 12.2.0-14) 12.2.0' && exit 0\n"
                    "echo 'cc1plus: fatal error: cannot execute' >&2; exit 1\n")
    fake.chmod(0o755)
    code, checks, _ = _doctor(env={"PATH": path})
    for program, use in (("mpirun", "mpirun jobs"), ("srun", "SLURM jobs")):
        assert checks[program]["status"] == "absent", checks[program]
        assert checks[program]["detail"] == f"not found, needed only for {use}" and "apt-get install" in \
            checks[program]["fix"]
    compiler = checks["C++ compiler"]
    assert compiler["status"] in ("warn", "fail") and "cannot compile C++17: cc1plus: fatal error" in \
        compiler["detail"], compiler
    assert code == (1 if compiler["status"] == "fail" else 0)
