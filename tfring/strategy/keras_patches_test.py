"""Every Keras function tfring wraps or calls exists in the installed Keras with the parameters
tfring expects, and a missing or changed one fails loudly."""

import importlib
import os
import pkgutil
import re

import keras
import pytest

import tfring
from tfring import version
from tfring.strategy import keras_patches


def _tfring_modules():
    # Every module of the tfring package, wherever it sits (modules move between sub-packages).
    for info in pkgutil.walk_packages(tfring.__path__, prefix="tfring."):
        leaf = info.name.rsplit(".", 1)[-1]
        if not leaf.endswith("_test") and leaf != "__main__":  # __main__ would run the command
            yield importlib.import_module(info.name)


def _declared(list_name):
    return [item for module in _tfring_modules() for item in getattr(module, list_name, [])]


ALL = _declared("PATCHES")
INTERNALS = _declared("KERAS_INTERNALS")


def test_the_registry_lists_every_wrapped_function():
    targets = {p.target for p in ALL}
    assert {"keras.Model.fit", "keras.Model.save", "keras.callbacks.BackupAndRestore._save_model",
            "keras.src.losses.loss.scale_loss_for_distribution",
            "keras.optimizers.Optimizer.apply", "keras.optimizers.LossScaleOptimizer.apply",
            "keras.random.SeedGenerator.next", "keras.Model.predict"} <= targets
    assert len(ALL) == 29
    assert len(targets) == len(ALL)  # each function wrapped once (keras_wraps.model_calls for fit)


@pytest.mark.parametrize("patch", ALL, ids=[f"{p.target}<-{p.wrap.__name__}" for p in ALL])
def test_keras_still_has_the_wrapped_function(patch):
    # A Keras upgrade that renames or removes one of these, or changes the parameters its wrap
    # declares (`Patch.parameters`), fails here, naming it.
    owner, function = keras_patches.resolve(patch)
    assert callable(function), f"{patch.target} is no longer a function in Keras {keras.__version__}"


def test_the_registry_lists_the_internals_tfring_calls():
    targets = {i.target for i in INTERNALS}
    assert {"keras.Model._get_metrics_result_or_logs", "keras.src.losses.loss.apply_mask",
            "keras.optimizers.Optimizer._overwrite_variable_with_gradient"} <= targets
    assert all(isinstance(i, keras_patches.Internal) for i in INTERNALS)


@pytest.mark.parametrize("internal", INTERNALS, ids=[i.target for i in INTERNALS])
def test_keras_still_has_the_internal_with_its_parameters(internal):
    # A Keras upgrade that renames one, or changes the parameters tfring passes, fails here, naming it.
    owner, function = keras_patches.resolve(internal)
    assert callable(function), f"{internal.target} is no longer callable in Keras {keras.__version__}"


def test_changed_parameters_fail_naming_them_and_wrap_nothing():
    class Owner:
        @staticmethod
        def f(values, weights=None):
            return "original"

    f = Owner.f
    keras_patches.Owner = Owner
    try:
        patch = keras_patches.Patch("tfring.strategy.keras_patches.Owner", "f", lambda g: lambda *a: "wrapped",
                                    "t", parameters=("values", "sample_weight"))
        with pytest.raises(keras_patches.KerasChangedError,
                           match=r"tfring wraps tfring\.strategy\.keras_patches\.Owner\.f \(t\), expecting its "
                                 r"parameters to begin \(values, sample_weight\), which in Keras .* begin "
                                 r"\(values, weights\): install Keras \d+\.\d+\.\d+ or newer"):
            keras_patches.apply([patch])
        assert Owner.f is f
        internal = keras_patches.Internal("tfring.strategy.keras_patches.Owner", "f", ("values", "weights", "mask"))
        with pytest.raises(keras_patches.KerasChangedError, match=r"tfring calls .*Owner\.f, expecting .* begin "
                                                                  r"\(values, weights\):"):
            keras_patches.resolve(internal)
        with pytest.raises(keras_patches.KerasChangedError, match=r"tfring calls .*Owner\.gone \(for u\), which"):
            keras_patches.resolve(keras_patches.Internal("tfring.strategy.keras_patches.Owner", "gone", why="for u"))
    finally:
        del keras_patches.Owner


def test_requirement_files_pin_the_keras_floor():
    # tfring/version.py names the floor (setup.py reads it there); requirement files cannot, so they must agree.
    root = os.path.dirname(os.path.dirname(os.path.abspath(tfring.__file__)))
    folder = os.path.join(root, "requirements")
    if not os.path.isdir(folder):
        pytest.skip("tfring is installed without its checkout (no requirements/ beside it)")
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as f:
            text = f.read()
        if not re.search(r"^tensorflow", text, re.M):
            continue  # an environment without TensorFlow or Keras (docs.txt: the site's tools)
        pins = re.findall(r"^keras\b(.*?)\s*(?:#.*)?$", text, re.M)
        assert pins == [f">={version.KERAS_FLOOR},<4"], f"requirements/{name} pins keras as {pins}"


def test_a_missing_function_fails_naming_it_and_wraps_nothing():
    class Owner:
        @staticmethod
        def present():
            return "original"

    present = Owner.present
    keras_patches.Owner = Owner  # a resolvable owner for the test
    try:
        patches = [keras_patches.Patch("tfring.strategy.keras_patches.Owner", "present", lambda f: lambda: "wrapped", "t"),
                   keras_patches.Patch("tfring.strategy.keras_patches.Owner", "gone", lambda f: f, "needed for t")]
        with pytest.raises(keras_patches.KerasChangedError,
                           match=r"tfring wraps tfring\.strategy\.keras_patches\.Owner\.gone \(needed for t\), "
                                 r"which Keras .* does not have"):
            keras_patches.apply(patches)
        assert Owner.present is present  # all or nothing
    finally:
        del keras_patches.Owner


def test_apply_is_idempotent_and_stacks_distinct_wraps():
    class Owner:
        @staticmethod
        def f():
            return ["f"]

    def outer(name):
        def wrap(original):
            return lambda: [name] + original()
        wrap.__qualname__ = f"wrap_{name}"
        return wrap

    keras_patches.Owner = Owner
    try:
        a = keras_patches.Patch("tfring.strategy.keras_patches.Owner", "f", outer("a"), "a")
        b = keras_patches.Patch("tfring.strategy.keras_patches.Owner", "f", outer("b"), "b")
        for _ in range(3):
            keras_patches.apply([a])
            keras_patches.apply([b])
        assert Owner.f() == ["b", "a", "f"]
        assert keras_patches.is_patched(Owner.f)
    finally:
        del keras_patches.Owner
