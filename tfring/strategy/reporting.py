"""Reporting happens once per job: rank 0 prints progress and writes logs; the other ranks stay quiet.

Every rank runs the same script, so without help each one would print its own progress bar (seen
twice under mpirun or srun, which show every rank's output) and every TensorBoard, CSVLogger or
RemoteMonitor callback would write or send the same global numbers once per rank (two event files
per run folder, every CSV row twice). Horovod users write `verbose=1 if hvd.rank() == 0 else 0` and
add such callbacks on rank 0 only; tfring does it for them.

`install()` wraps `keras.Model.fit`, `evaluate` and `predict`: for a model of a RingStrategy with
more than one rank, ranks other than 0 run with `verbose=0` and without the callbacks listed in
`REPORTING_CALLBACKS`. Every other callback runs on every rank (the logs they see are global, so
EarlyStopping, ReduceLROnPlateau or TerminateOnNaN decide the same on every rank); ModelCheckpoint
and BackupAndRestore run everywhere and write once (see `checkpointing`).

`verbose=0` is Keras' public switch for this call alone. `keras.config.disable_interactive_logging()`
would not do instead: it is state of the thread, not of the call, and it does not silence Keras'
messages but sends them to `absl.logging` (shown wherever a script sets absl to INFO); the reporting
callbacks would still need removing.
"""

import functools
import inspect

from tfring.strategy import keras_patches
from tfring.strategy.ring_model import ring_strategy_of


def reporting_callbacks():
    """The Keras callback classes that only report, and so run on rank 0 only.

    Returns:
        A tuple of classes: TensorBoard, CSVLogger, RemoteMonitor, ProgbarLogger.

    Example:

    >>> keras.callbacks.CSVLogger in reporting_callbacks()
    True
    """
    import keras

    return (keras.callbacks.TensorBoard, keras.callbacks.CSVLogger, keras.callbacks.RemoteMonitor,
            keras.callbacks.ProgbarLogger)


def _quiet_rank(model):
    """True when `model` belongs to a multi-rank RingStrategy and this process is not rank 0."""
    strategy = ring_strategy_of(model)
    return strategy is not None and strategy.rank != 0


def _quietly(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def call(self, *args, **kwargs):
        if not _quiet_rank(self):
            return original(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments["verbose"] = 0
        callbacks = bound.arguments.get("callbacks")
        if isinstance(callbacks, (list, tuple)):
            bound.arguments["callbacks"] = [c for c in callbacks if not isinstance(c, reporting_callbacks())]
        return original(*bound.args, **bound.kwargs)

    return call


# `_quietly` sets `verbose` and `callbacks` by name (a name Keras no longer takes would be dropped
# silently): Keras' parameters up to them.
_PARAMETERS = {"fit": ("self", "x", "y", "batch_size", "epochs", "verbose", "callbacks"),
               "evaluate": ("self", "x", "y", "batch_size", "verbose", "sample_weight", "steps", "callbacks"),
               "predict": ("self", "x", "batch_size", "verbose", "steps", "callbacks")}

PATCHES = [keras_patches.Patch("keras.Model", name, _quietly, "ranks > 0 report nothing", parameters=parameters)
           for name, parameters in _PARAMETERS.items()]


def install():
    """Wraps `keras.Model.fit`, `evaluate` and `predict` (see the module docstring). Idempotent.

    Example:

    >>> install()
    """
    keras_patches.apply(PATCHES)
