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


def _load_build_module():
    # Load tfring/native/build.py by path: importing the package would import TensorFlow's ops too.
    spec = importlib.util.spec_from_file_location("_tfring_build", os.path.join(HERE, "tfring", "native", "build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _version(name="__version__"):
    # The one place the version and the Keras floor (KERAS_FLOOR) are written is tfring/version.py
    # (read as text: importing the package here would need its dependencies installed first).
    with open(os.path.join(HERE, "tfring", "version.py")) as f:
        return re.search(rf'^{name} = "([^"]+)"', f.read(), re.M).group(1)


class BuildPyWithOps(build_py):
    """build_py that also compiles `tfring/native/lib/.../_tfring_ops.so`, and leaves the tests
    beside each layer (`*_test.py`) out of what it installs."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        return [(pkg, module, path) for pkg, module, path in modules if not module.endswith("_test")]

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
    # tfring only: tfring_dev (the test rig) and the `*_test.py` modules (BuildPyWithOps) stay out.
    packages=find_packages(include=["tfring", "tfring.*"]),
    # The sources travel with the package: the library is compiled where it is installed. Every
    # folder of the core is listed (package_data globs do not descend into subfolders): build.py's
    # core_rooms(), the one list of them.
    package_data={"tfring.native": [f"cc/{room}/*.{ext}" for room in _load_build_module().core_rooms()
                                    for ext in ("h", "cc")]
                  + ["cc/kernels/*.cc", "cc/kernels/*.h", "cc/cuda/*.h", "cc/cuda/*.cuh", "cc/cuda/*.cu"]},
    install_requires=["numpy", f"keras>={_version('KERAS_FLOOR')},<4"],
    extras_require={"test": ["pytest"], "run": ["cloudpickle"], "data": ["tqdm", "Pillow", "pyarrow", "h5py", "tifffile"]},
    entry_points={"console_scripts": ["tfring=tfring.cli:main"]},
    cmdclass={"build_py": BuildPyWithOps},
)
