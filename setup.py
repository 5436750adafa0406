"""Installs tfring and compiles its op library against the TensorFlow of the target environment.

Install with `pip install --no-build-isolation .` (or `-e .`): the library must be built against
the TensorFlow that will import it, so the build has to see that environment.
"""

import importlib.util
import os
import re

from setuptools import find_packages
from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
# The C++ core's top level and its subfolders (tfring/native/cc/core/...).
CORE_ROOMS = ["", "rendezvous/", "transport/", "algorithms/", "engine/"]


def _load_build_module():
    # Load tfring/native/build.py by path: importing the package would import TensorFlow's ops too.
    spec = importlib.util.spec_from_file_location("_tfring_build", os.path.join(HERE, "tfring", "native", "build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _version():
    # The one place the version is written is tfring/version.py (read as text: importing the
    # package here would need its dependencies installed first).
    with open(os.path.join(HERE, "tfring", "version.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


class BuildPyWithOps(build_py):
    """build_py that also compiles `tfring/native/lib/.../_tfring_ops.so`."""

    def run(self):
        super().run()
        build = _load_build_module()
        if getattr(self, "editable_mode", False):
            target = os.path.join(HERE, "tfring", "native")
        else:
            target = os.path.join(self.build_lib, "tfring", "native")
        build.build(base=target)


setup(
    name="tfring",
    version=_version(),
    description="Synchronous data-parallel training for Keras 3 / TensorFlow over a fused ring allreduce",
    python_requires=">=3.10",
    packages=find_packages(include=["tfring", "tfring.*"]),
    # The sources travel with the package: the library is compiled where it is installed. Every
    # folder of the core is listed (package_data globs do not descend into subfolders).
    package_data={"tfring.native": [f"cc/core/{room}*.{ext}" for room in CORE_ROOMS for ext in ("h", "cc")]
                  + ["cc/kernels/*.cc", "cc/kernels/*.h", "cc/cuda/*.h", "cc/cuda/*.cuh", "cc/cuda/*.cu"]},
    install_requires=["numpy"],
    extras_require={"test": ["pytest"], "run": ["cloudpickle"], "data": ["tqdm", "Pillow", "pyarrow", "h5py", "tifffile"]},
    entry_points={"console_scripts": ["tfring=tfring.cli:main"]},
    cmdclass={"build_py": BuildPyWithOps},
)
