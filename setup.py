"""Installs tfring; its op library is compiled against the TensorFlow that will import it.

- `pip install --no-build-isolation .` (or `-e .`) in an environment with TensorFlow compiles the
  library for that TensorFlow while installing.
- `python -m build` makes an sdist and a wheel (pyproject.toml); the wheel carries the libraries
  already built in this checkout for other TensorFlows (`tfring/native/lib/tf*/`, those built from
  these sources: `make wheel` builds them for the tested TensorFlows first), and `import tfring`
  builds the library for any other TensorFlow on first use (tfring/native/library.py).
"""

import functools
import glob
import importlib.util
import os
import re
import shutil

from setuptools import find_packages
from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1 (pip install --no-build-isolation into an older environment)
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:
        bdist_wheel = None  # no wheel to tag: setuptools installs without one

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


@functools.lru_cache(maxsize=None)
def _prebuilt_libraries():
    """The folders of tfring/native/lib/ holding a library built from these very sources (its build
    info says so), which a wheel can carry: one per TensorFlow version and flavour. Read once: each
    reads every library and hashes every source."""
    build = _load_build_module()
    folders = sorted(glob.glob(os.path.join(HERE, "tfring", "native", "lib", "tf*")))
    return tuple(f for f in folders if (build.read_build_info(f) or {}).get("sources") == build.source_digest())


@functools.lru_cache(maxsize=None)
def _tensorflow_here():
    return importlib.util.find_spec("tensorflow") is not None


class BuildPyWithOps(build_py):
    """build_py that also puts the op library in: built for the TensorFlow of the build environment
    when it has one, and copied from the checkout's `tfring/native/lib/` for the other TensorFlows it
    was built for. It leaves the tests beside each layer (`*_test.py`) out of what it installs."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        return [(pkg, module, path) for pkg, module, path in modules if not module.endswith("_test")]

    def run(self):
        super().run()
        build = _load_build_module()
        editable = getattr(self, "editable_mode", False)
        target = os.path.join(HERE if editable else self.build_lib, "tfring", "native")
        if _tensorflow_here():
            here = build.library_dir(build.tensorflow_identity()["tensorflow"], target)
            if build.why_not_usable(here):  # already built from these sources for this TensorFlow: kept
                build.build(base=target)
        for folder in [] if editable else _prebuilt_libraries():  # an editable install uses them in place
            copy = os.path.join(target, "lib", os.path.basename(folder))
            if not os.path.exists(copy):
                os.makedirs(copy)
                shutil.copy2(os.path.join(folder, build.LIBRARY_NAME), copy)
        if not _tensorflow_here() and not _prebuilt_libraries():
            print("tfring: no TensorFlow in this build environment: `import tfring` builds the op library "
                  "on first use (needs g++)")


class DistributionWithOps(Distribution):
    """tfring carries compiled code (an op library) when one is built or copied in (BuildPyWithOps):
    it then installs into platlib and makes a platform wheel."""

    def has_ext_modules(self):
        return _tensorflow_here() or bool(_prebuilt_libraries())


class BdistWheelWithOps(bdist_wheel or object):
    """A wheel that carries op libraries is tagged py3-none-<platform> (the library depends on
    TensorFlow's ABI, checked at import, not on Python's); one without them is py3-none-any."""

    def get_tag(self):
        python, abi, platform = super().get_tag()
        return (python, abi, platform) if self.root_is_pure else ("py3", "none", platform)


setup(
    name="tfring",
    version=_version(),
    description="Synchronous data-parallel training for Keras 3 / TensorFlow over a fused ring allreduce",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
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
    cmdclass={"build_py": BuildPyWithOps, **({"bdist_wheel": BdistWheelWithOps} if bdist_wheel else {})},
    distclass=DistributionWithOps,
)
