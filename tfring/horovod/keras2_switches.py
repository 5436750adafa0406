"""Keras 2 switches that Horovod's Keras examples pass and Keras 3 refuses, accepted with a note.

Horovod's Keras examples (`tensorflow2_keras_mnist.py`, the elastic one) compile with
`experimental_run_tf_function=False`, a Keras 2 switch of how `fit` runs its steps; Keras 3's
`compile` has no such parameter and stops with a `TypeError`. Importing
`tfring.horovod.tensorflow.keras` (or `tfring.horovod.keras`) makes `compile` drop it, saying so
in one line, so that those scripts run with only their import line changed.
"""

import warnings

from tfring.strategy import keras_patches

KERAS2_SWITCHES = ("experimental_run_tf_function",)


def _without_keras2_switches(original):
    def compile(self, *args, **kwargs):
        dropped = [name for name in KERAS2_SWITCHES if name in kwargs]
        for name in dropped:
            kwargs.pop(name)
        if dropped:
            warnings.warn(f"tfring.horovod: compile({', '.join(f'{n}=...' for n in dropped)}) is a Keras 2 switch "
                          f"that Keras 3 does not have; ignored", UserWarning, stacklevel=2)
        return original(self, *args, **kwargs)

    return compile


# Trainer's own compile (every model's, unless overridden): Keras loads a saved model's compile
# settings only into a model whose class's compile is Trainer.compile (`compile_from_config`).
PATCHES = [keras_patches.Patch("keras.src.trainers.trainer.Trainer", "compile", _without_keras2_switches,
                               "Horovod's examples' Keras 2 switches are dropped with a note")]


def install():
    """Makes `keras.Model.compile` accept (and drop) `KERAS2_SWITCHES`. Idempotent.

    Example:

    >>> install()   # on importing tfring.horovod.tensorflow.keras
    """
    keras_patches.apply(PATCHES)
