"""Every Keras function tfring wraps exists in the installed Keras, and a missing one fails loudly."""

import importlib
import pkgutil

import keras
import pytest

import tfring.strategy
from tfring.strategy import keras_patches


def _all_patches():
    patches = []
    for info in pkgutil.iter_modules(tfring.strategy.__path__):
        if not info.name.endswith("_test"):
            patches += getattr(importlib.import_module(f"tfring.strategy.{info.name}"), "PATCHES", [])
    return patches


ALL = _all_patches()


def test_the_registry_lists_every_wrapped_function():
    targets = {p.target for p in ALL}
    assert {"keras.Model.fit", "keras.Model.save", "keras.callbacks.BackupAndRestore._save_model",
            "keras.src.losses.loss.scale_loss_for_distribution",
            "keras.src.optimizers.base_optimizer.BaseOptimizer._backend_apply_gradients",
            "keras.random.SeedGenerator.next", "keras.Model.predict"} <= targets
    assert len(ALL) == 27


@pytest.mark.parametrize("patch", ALL, ids=[f"{p.target}<-{p.wrap.__name__}" for p in ALL])
def test_keras_still_has_the_wrapped_function(patch):
    # A Keras upgrade that renames or removes one of these fails here, naming it.
    owner, function = keras_patches.resolve(patch)
    assert callable(function), f"{patch.target} is no longer a function in Keras {keras.__version__}"


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
