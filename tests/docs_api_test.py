"""Every public name is in the documentation site's API reference, and has a docstring.

Public names are each public module's `__all__` (a module without one: the functions and classes
it defines). The site's inventory (`objects.inv`, written by mkdocstrings) must list each name
under its public path (`tfring.horovod.tensorflow.allreduce`) or under the path of the object that
defines it (`tfring.ops.collectives.allreduce` for `tfring.ops.allreduce`, which `tfring.ops`
loads on first use). This test imports tfring (it needs TensorFlow), so it runs in the main
environment, against a site built before it: `site/` (`make docs`), or the folder
`TFRING_DOCS_SITE` names; without one it skips, saying so.
"""

import ast
import importlib
import importlib.util
import inspect
import os
import zlib

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
PUBLIC_MODULES = ["tfring", "tfring.ops", "tfring.compression", "tfring.optimizers", "tfring.callbacks", "tfring.schedules", "tfring.data",
                  "tfring.spark", "tfring.horovod", "tfring.horovod.tensorflow", "tfring.horovod.tensorflow.keras",
                  "tfring.horovod.keras"]


def _site():
    site = os.environ.get("TFRING_DOCS_SITE") or os.path.join(ROOT, "site")
    if not os.path.isfile(os.path.join(site, "objects.inv")):
        pytest.skip(f"no built documentation site at {site} (no objects.inv): `make docs` builds it into site/, "
                    f"or set TFRING_DOCS_SITE to a site built elsewhere")
    return site


def read_inventory(path):
    """The object names of a Sphinx inventory (version 2): 4 header lines, then zlib-compressed lines
    `name domain:role priority uri display-name`.

    Example:

    >>> "tfring.ops.collectives.allreduce" in read_inventory("site/objects.inv")
    True
    """
    with open(path, "rb") as f:
        data = f.read()
    header_end = 0
    for _ in range(4):
        header_end = data.index(b"\n", header_end) + 1
    assert data.startswith(b"# Sphinx inventory version 2"), data[:60]
    lines = zlib.decompress(data[header_end:]).decode("utf-8").splitlines()
    return {line.split(" ", 1)[0] for line in lines if line.strip()}


def _module_source(name):
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin, name
    with open(spec.origin, encoding="utf-8") as f:
        return ast.parse(f.read()), os.path.basename(spec.origin) == "__init__.py"


def _is_module(name):
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its parent is a module, not a package
        return False


def _binds(tree, name):
    """Whether `tree`'s top level binds `name` other than by an import (def, class, assignment)."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        for target in targets:
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            if any(isinstance(t, ast.Name) and t.id == name for t in names):
                return True
    return False


def static_homes(module, name, depth=0):
    """The paths `module.name` is defined at, read from the source the way the docs' generator
    (griffe) reads it: following `from X import name [as ...]` and star imports to the module
    that binds it, and, for a package that loads the name on first use, its submodules that do.

    Example:

    >>> static_homes("tfring.horovod.tensorflow", "DistributedOptimizer")
    {'tfring.horovod.optimizer.tensorflow_distributed_optimizer'}
    """
    assert depth < 10, (module, name)
    tree, is_package = _module_source(module)
    if _binds(tree, name):
        return {f"{module}.{name}"}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    if _is_module(f"{node.module}.{alias.name}"):
                        return {f"{node.module}.{alias.name}"}
                    return static_homes(node.module, alias.name, depth + 1)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and [a.name for a in node.names] == ["*"]:
            if name in getattr(importlib.import_module(node.module), "__all__", []):
                return static_homes(node.module, name, depth + 1)
    homes = set()
    if is_package:  # names a module-level __getattr__ loads from a submodule
        folder = os.path.dirname(importlib.util.find_spec(module).origin)
        for entry in sorted(os.listdir(folder)):
            if entry.endswith(".py") and entry != "__init__.py" and not entry.endswith("_test.py"):
                submodule = f"{module}.{entry[:-3]}"
                if _binds(_module_source(submodule)[0], name):
                    homes.add(f"{submodule}.{name}")
    return homes


def public_names(module):
    """`module.__all__`, or the functions and classes `module` defines."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [name for name, obj in vars(module).items() if not name.startswith("_")
            and (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ == module.__name__]


def _public_objects():
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in public_names(module):
            yield module_name, name, getattr(module, name)


def _paths(module_name, name, obj):
    paths = {f"{module_name}.{name}"} | static_homes(module_name, name)
    if inspect.ismodule(obj):
        paths.add(obj.__name__)
    elif inspect.isfunction(obj) or inspect.isclass(obj):
        paths.add(f"{obj.__module__}.{obj.__qualname__}")
    return paths


def test_every_public_name_is_in_the_api_reference():
    inventory = read_inventory(os.path.join(_site(), "objects.inv"))
    missing = [f"{module}.{name} (looked for {', '.join(sorted(_paths(module, name, obj)))})"
               for module, name, obj in _public_objects() if not _paths(module, name, obj) & inventory]
    assert not missing, "public names missing from the API reference (docs/api/):\n" + "\n".join(missing)


def test_every_public_function_and_class_has_a_docstring():
    # Their own docstring, not one inherited; for a class also its public methods, except those
    # that override a base class's (Keras' hooks: `on_epoch_end`, `get_config`, ...).
    undocumented = []
    for module, name, obj in _public_objects():
        if not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.ismodule(obj)):
            continue
        own = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
        if not (own or "").strip():
            undocumented.append(f"{module}.{name}")
        if inspect.isclass(obj) and obj.__module__.startswith("tfring"):
            for attribute, value in vars(obj).items():
                function = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
                overrides = any(attribute in vars(base) for base in obj.__mro__[1:])
                if (not attribute.startswith("_") and inspect.isfunction(function) and not overrides
                        and not (function.__doc__ or "").strip()):
                    undocumented.append(f"{module}.{name}.{attribute}")
    assert not undocumented, "public names without a docstring:\n" + "\n".join(sorted(set(undocumented)))


def test_the_inventory_reader_and_the_name_resolution():
    assert static_homes("tfring.ops", "allreduce") == {"tfring.ops.collectives.allreduce"}
    assert static_homes("tfring", "init") == {"tfring.runtime.init"}
    assert static_homes("tfring.horovod.keras", "init") == {"tfring.horovod.basics.init"}
    assert static_homes("tfring.horovod.tensorflow", "Average") == {"tfring.horovod.basics.Average"}
    assert public_names(importlib.import_module("tfring.horovod")) == ["run"]
