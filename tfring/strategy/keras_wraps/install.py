"""`install_all()`: every Keras function RingStrategy wraps, wrapped once, in one stated order.

Each wrap is declared as a `PATCHES` list beside the code that needs it; this is the one place
that applies them (`RingStrategy()` calls `install_all()`). The order, which decides how wraps of
one function would stack (none does today: each function is wrapped once):

1. `step_rows`: a rank's loss is what one process computes on its rows (Keras' 1 / replicas
   scaling does nothing), and a scalar tracked in a step counts for the rank's rows;
2. `gradients.loss_reductions`: sums, masked and sample-weighted means, and
   `tf.nn.compute_average_loss` count as the global batch's;
3. `gradients.door`: gradients are averaged, weighed by rows, as they enter the optimizer;
   `gradients.sparse`: sparse rows are added into a variable once each, in a fixed order;
   `sharding.optimizer_state`: with `shard_optimizer_state`, slots for owned variables only, saved whole;
4. `checkpointing`: saves run on every rank, rank 0 writes;
5. `model_calls`: `fit`, `evaluate`, `predict` check the ranks agree and quiet ranks > 0;
6. `on_batch`: `predict_on_batch` runs on this rank alone, the other two return the job's logs;
7. `rank_noise`: Keras' seeded noise differs between ranks, as in one process between rows.

All or nothing: a Keras older than `KERAS_FLOOR`, or one that lacks a target or a name tfring
calls (`KERAS_INTERNALS`), fails before anything is wrapped (`keras_patches.KerasChangedError`).
"""

import re

from tfring.strategy import keras_patches
from tfring.strategy import step_rows
from tfring.strategy.gradients import door
from tfring.strategy.gradients import loss_reductions
from tfring.strategy.gradients import sparse
from tfring.strategy.keras_wraps import checkpointing
from tfring.strategy.keras_wraps import model_calls
from tfring.strategy.keras_wraps import on_batch
from tfring.strategy.keras_wraps import rank_noise
from tfring.strategy.sharding import optimizer_state
from tfring.version import KERAS_FLOOR

MODULES = (step_rows, loss_reductions, door, sparse, optimizer_state, checkpointing, model_calls, on_batch,
           rank_noise)


def _release(version):
    """'3.10.0' -> (3, 10, 0); a pre-release or dev suffix is ignored."""
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def check_keras_floor(version):
    """Refuses a Keras older than `KERAS_FLOOR`.

    Args:
        version: a Keras version string, e.g. `keras.__version__`.

    Raises:
        keras_patches.KerasChangedError: the version is older than the floor.

    Example:

    >>> check_keras_floor("3.9.2")
    Traceback (most recent call last):
    KerasChangedError: tfring needs Keras 3.10.0 or newer ...
    """
    if _release(version) < _release(KERAS_FLOOR):
        raise keras_patches.KerasChangedError(
            f"tfring needs Keras {KERAS_FLOOR} or newer, below 4, and this is Keras {version}: "
            f"pip install 'keras>={KERAS_FLOOR},<4'")


def install_all():
    """Wraps every Keras function in `MODULES`' `PATCHES`, in that order. Idempotent.

    Raises:
        keras_patches.KerasChangedError: see the module docstring (nothing is wrapped then).

    Example:

    >>> install_all()   # in RingStrategy.__init__
    """
    import keras

    check_keras_floor(keras.__version__)
    for module in MODULES:
        for internal in getattr(module, "KERAS_INTERNALS", ()):
            keras_patches.resolve(internal)
    keras_patches.apply([patch for module in MODULES for patch in module.PATCHES])
