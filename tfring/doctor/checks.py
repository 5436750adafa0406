"""The checks of `tfring doctor`, each a function of nothing (or the hosts) returning Findings.

Nothing here starts tfring or a job: the self-test (`selftest.py`) does that.
"""

import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile

from tfring.doctor.finding import ABSENT
from tfring.doctor.finding import FAIL
from tfring.doctor.finding import OK
from tfring.doctor.finding import WARN
from tfring.doctor.finding import Finding

# The TensorFlow versions tfring is tested on (README, requirements/): others may work.
TESTED_TENSORFLOW = ("2.17", "2.21")
TENSORFLOW_FIX = "pip install tensorflow-cpu==2.17.1 (or tensorflow==2.17.1 for GPUs; 2.21 is tested too)"


def versions():
    """Python, TensorFlow, Keras and tfring: found, and in the range tfring supports."""
    from tfring.version import KERAS_FLOOR
    from tfring.version import __version__

    found = [Finding("Python", OK, f"{platform.python_version()} ({sys.executable})")]
    try:
        import tensorflow as tf
    except Exception as e:  # ImportError, or a broken install's own error
        return found + [Finding("TensorFlow", FAIL, f"cannot import tensorflow: {e}", TENSORFLOW_FIX)]
    flavour = "CUDA build" if tf.test.is_built_with_cuda() else "CPU build"
    tested = tf.__version__.startswith(tuple(v + "." for v in TESTED_TENSORFLOW))
    found.append(Finding("TensorFlow", OK if tested else WARN, f"{tf.__version__} ({flavour})",
                         "" if tested else f"tfring is tested on TensorFlow {' and '.join(TESTED_TENSORFLOW)}"))
    found.append(_keras(KERAS_FLOOR))
    found.append(Finding("tfring", OK, f"{__version__} ({os.path.dirname(os.path.dirname(__file__))})"))
    return found


def _keras(floor):
    """Keras: importable, not older than the floor (RingStrategy's own check), below 4 (tested)."""
    fix = f"pip install 'keras>={floor},<4'"
    try:
        import keras

        from tfring.strategy.keras_patches import KerasChangedError
        from tfring.strategy.keras_wraps.install import check_keras_floor
    except Exception as e:
        return Finding("Keras", FAIL, f"cannot import keras: {e}", fix)
    try:
        check_keras_floor(keras.__version__)
    except KerasChangedError as e:
        return Finding("Keras", FAIL, str(e), fix)
    if not keras.__version__.startswith("3."):
        return Finding("Keras", FAIL, f"{keras.__version__}: tfring runs on Keras 3", fix)
    return Finding("Keras", OK, keras.__version__)


def op_library():
    """The op library for this TensorFlow: built and matching (what for), or buildable here, or not."""
    from tfring.native import build

    try:
        import tensorflow as tf
    except Exception:
        return [Finding("op library", FAIL, "TensorFlow cannot be imported (above)", TENSORFLOW_FIX)]
    directory = build.library_dir(tf.__version__)
    reason = build.why_not_usable(directory)
    compiler = build.find_compiler()
    if reason is None:
        info = build.read_build_info(directory)
        kernels = "CPU and GPU kernels" if info["gpu"] else f"CPU kernels ({info['gpu_note']})"
        detail = (f"built for TensorFlow {info['tensorflow']}, _GLIBCXX_USE_CXX11_ABI = {info['cxx11_abi']}, "
                  f"{kernels}: {directory}")
        found = [Finding("op library", OK, detail)]
    elif compiler is None:
        found = [Finding("op library", FAIL, f"must be built ({reason}) and there is no C++ compiler",
                         f"install g++ ({build.COMPILER_PACKAGES})")]
    elif not os.access(build.HERE, os.W_OK):
        found = [Finding("op library", FAIL, f"must be built ({reason}) and {build.HERE} is not writable",
                         f"as a user who can write there: {sys.executable} -m tfring.native.build")]
    else:
        found = [Finding("op library", OK, f"will be built on first use ({reason}), in about a minute")]
    found.append(_compiler(build, compiler, reason))
    return found + [_gpu(build, tf)]


def _compiler(build, compiler, reason):
    if compiler is None:
        status = FAIL if reason else WARN
        return Finding("C++ compiler", status, "g++ not found: another TensorFlow version needs a rebuild",
                       f"install g++ ({build.COMPILER_PACKAGES})")
    version = f"{_first_line([compiler, '--version'])} ({compiler})"
    failure = _cannot_compile(compiler)
    if failure:
        return Finding("C++ compiler", FAIL if reason else WARN, f"{version} cannot compile C++17: {failure}",
                       f"install a working g++ ({build.COMPILER_PACKAGES})")
    return Finding("C++ compiler", OK, f"{version}, compiles C++17")


_PROGRAM = "#include <string>\n#include <optional>\nint main() { std::optional<std::string> s; return s ? 1 : 0; }\n"


def _cannot_compile(compiler):
    """Why `compiler` cannot build a small C++17 program, or "" when it can (what it prints for
    `--version` proves nothing: a wrapper or a broken install prints one too)."""
    with tempfile.TemporaryDirectory(prefix="tfring-doctor-") as folder:
        try:
            proc = subprocess.run([compiler, "-std=c++17", "-x", "c++", "-", "-o", os.path.join(folder, "a.out")],
                                  input=_PROGRAM, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            return str(e)
    if proc.returncode == 0:
        return ""
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    return lines[0] if lines else f"exit status {proc.returncode}"


def _gpu(build, tf):
    nvcc = build.find_nvcc()
    if not tf.test.is_built_with_cuda():
        return Finding("GPU", OK, "CPU build of TensorFlow: CPU kernels only"
                       + (f" (nvcc found: {nvcc})" if nvcc else ""))
    if nvcc is None:
        return Finding("GPU", WARN, "a CUDA build of TensorFlow, but no nvcc: the op library has no GPU kernels",
                       "install the CUDA toolkit (nvcc) and rebuild: python -m tfring.native.build")
    gpus = len(tf.config.list_physical_devices("GPU"))
    note = build.cuda_version_note(nvcc)
    return Finding("GPU", WARN if note else OK, f"nvcc {_first_line([nvcc, '--version'], last=True)}, "
                   f"{gpus} GPU(s) visible to TensorFlow", note or "")


def shared_memory():
    """/dev/shm, where ranks on one host put their rings' buffers: present, writable, its free space."""
    fix = ("mount a tmpfs at /dev/shm (Docker: --shm-size=1g or --ipc=host), or run every job over TCP: "
           "TFRING_TRANSPORT=tcp")
    try:
        fd, path = tempfile.mkstemp(prefix="tfring-doctor-", dir="/dev/shm")
        os.close(fd)
        os.unlink(path)
        stat = os.statvfs("/dev/shm")
    except OSError as e:
        return Finding("shared memory", FAIL, f"/dev/shm cannot hold tfring's segments: {e.strerror or e}", fix)
    free = stat.f_bavail * stat.f_frsize
    if free < 64 << 20:
        return Finding("shared memory", WARN, f"/dev/shm has only {free >> 20} MiB free", fix)
    return Finding("shared memory", OK, f"/dev/shm writable, {free >> 20} MiB free")


def single_copy():
    """Whether a rank may read its neighbour's buffers directly (process_vm_readv, one copy instead of two)."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            scope = int(f.read())
    except (OSError, ValueError):
        scope = None
    if scope is not None and scope >= 2:
        return Finding("single-copy reads", WARN, f"Yama ptrace_scope is {scope}: shared memory copies twice",
                       "as root: sysctl kernel.yama.ptrace_scope=1 (or give the ranks CAP_SYS_PTRACE)")
    seccomp = _status_field("Seccomp")
    detail = "permitted" + (f" (Yama ptrace_scope {scope})" if scope is not None else " (no Yama)")
    if seccomp not in (None, "0"):
        detail += "; a seccomp filter is active (a container?): --self-test shows whether it allows them"
    return Finding("single-copy reads", OK, detail)


def _status_field(name):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def tcp_interfaces():
    """The IPv4 interfaces other hosts could reach this one on (`tfring run --interface`)."""
    from tfring.launch import addresses

    found = []
    for _, name in socket.if_nameindex():
        try:
            found.append(f"{name} {addresses.interface_address(name)}")
        except ValueError:
            continue  # no IPv4 address
    if not any(f.startswith("lo ") for f in found):
        return Finding("TCP", FAIL, "no loopback interface (lo) with an IPv4 address: ranks cannot rendezvous",
                       "bring up lo (ip link set lo up)")
    if len(found) == 1:
        return Finding("TCP", WARN, "only the loopback interface: jobs stay on this host",
                       "other hosts need an interface with an IPv4 address")
    return Finding("TCP", OK, ", ".join(found))


def launchers(hosts=None):
    """ssh (needed for several hosts), mpirun and srun (for their jobs), and a scheduler's allocation."""
    from tfring.launch import allocation
    from tfring.launch.hosts import is_local

    need_ssh = bool(hosts) and any(not is_local(h.name) for h in hosts)
    found = []
    for program, version_flag, use, package in (("ssh", "-V", "tfring run -H (several hosts)", "openssh-client"),
                                                ("mpirun", "--version", "mpirun jobs", "openmpi-bin"),
                                                ("srun", "--version", "SLURM jobs", "slurm-client")):
        path = shutil.which(program)
        if path:
            found.append(Finding(program, OK, f"{_first_line([path, version_flag])} ({path})"))
        else:
            status = FAIL if program == "ssh" and need_ssh else WARN if program == "ssh" else ABSENT
            found.append(Finding(program, status, f"not found, needed only for {use}",
                                 f"install {package} (Debian/Ubuntu: apt-get install {package})"))
    try:
        listed, source = allocation.allocation_hosts(os.environ)
    except ValueError as e:
        return found + [Finding("allocation", FAIL, str(e), "fix the variable it names")]
    if listed:
        found.append(Finding("allocation", OK, f"{source}: " + ", ".join(f"{h.name}:{h.slots}" for h in listed)))
    return found


def ssh_reaches(hosts):
    """For `-H`: ssh reaches every other host without a password (as `tfring run` will ask it to)."""
    from tfring.launch.hosts import is_local

    ssh = shutil.which("ssh")
    found = []
    for host in hosts or []:
        if is_local(host.name) or ssh is None:
            continue
        cmd = [ssh, "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", host.name, "true"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=15)
            ok, why = proc.returncode == 0, (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        except subprocess.TimeoutExpired:
            ok, why = False, "no answer in 15 s"
        found.append(Finding(f"ssh {host.name}", OK if ok else FAIL, "reachable without a password" if ok else why,
                             "" if ok else f"set up key login: ssh-copy-id {host.name} (tfring run uses BatchMode)"))
    return found


def job_secret():
    """Where a job's secret (which signs every rendezvous message) comes from here."""
    from tfring.launch import cluster
    from tfring.launch.engines import address_exchange

    if os.environ.get(cluster.SECRET):
        return Finding("job secret", OK, f"{cluster.SECRET} is set: every rank of a job must be given the same")
    if os.environ.get(cluster.SECRET_FILE):
        try:
            cluster.read_secret_file(os.environ[cluster.SECRET_FILE])
        except ValueError as e:
            return Finding("job secret", FAIL, str(e), f"make the file readable by its owner only, or unset "
                                                       f"{cluster.SECRET_FILE}")
        return Finding("job secret", OK, f"{cluster.SECRET_FILE} names a file only its owner can read")
    mpi = "mpi4py (installed) hands one out under mpirun" if address_exchange.mpi4py_installed() else (
        "under mpirun, install mpi4py to have one handed out")
    return Finding("job secret", OK, f"tfring run makes a fresh one per job; jobs started without it need "
                   f"{cluster.SECRET} or {cluster.SECRET_FILE} on every rank ({mpi})")


def _first_line(cmd, last=False):
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"({e})"
    lines = [line.strip() for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    return (lines[-1] if last else lines[0]) if lines else "(no version)"


def all_checks(hosts=None):
    """Every check but the self-test, in the report's order.

    Args:
        hosts: the `hosts.Host` list of `-H` / `--hostfile`, or None for this host only.

    Returns:
        list of `Finding`.
    """
    return (versions() + op_library() + [shared_memory(), single_copy(), tcp_interfaces()]
            + launchers(hosts) + ssh_reaches(hosts) + [job_secret()])
