"""What a host runs: tfring's version and build, and TensorFlow's version, compared across hosts.

Ranks of one job must run the same code: a host with another tfring or TensorFlow fails the start
of a multi-host job with a message naming it, rather than a mismatch deep inside a collective.
Read without importing TensorFlow (the launcher never does).
"""

import hashlib
import importlib.metadata
import os

from tfring.version import __version__

_TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly")
_SOURCE_SUFFIXES = (".py", ".cc", ".h", ".cu", ".cuh")


def tensorflow_version():
    """The installed TensorFlow's version, read from its package metadata.

    Returns:
        A version string, or "none" where TensorFlow is not installed.
    """
    for name in _TENSORFLOW_DISTRIBUTIONS:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "none"


def build_digest():
    """A digest of tfring's source files as installed here: equal on two hosts iff they run the same code.

    Returns:
        12 hex digits.
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tfring/
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "lib"))
        for name in sorted(files):
            if name.endswith(_SOURCE_SUFFIXES):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as f:
                    digest.update(f.read())
    return digest.hexdigest()[:12]


def this_host():
    """The versions of this host, as compared across hosts.

    Returns:
        A dict with "tfring", "build" and "tensorflow".

    Example:

    >>> this_host()
    {'tfring': '0.3.0', 'build': '5c1e0a9b7f2d', 'tensorflow': '2.17.1'}
    """
    return {"tfring": __version__, "build": build_digest(), "tensorflow": tensorflow_version()}


def describe(versions):
    """One phrase for messages: "tfring 0.3.0 (build 5c1e0a9b7f2d) with TensorFlow 2.17.1"."""
    return f"tfring {versions['tfring']} (build {versions['build']}) with TensorFlow {versions['tensorflow']}"


def mismatch(host, versions, reference_host, reference):
    """Says how `host` differs from rank 0's host, or None when it runs the same code.

    Args:
        host, versions: a host and what it runs (`this_host()` there).
        reference_host, reference: rank 0's host and what it runs.

    Returns:
        A one-line message, or None.
    """
    if versions == reference:
        return None
    return (f"host {host} runs {describe(versions)} but rank 0's host {reference_host} runs "
            f"{describe(reference)}: install the same tfring and TensorFlow on every host")
