"""A one-time warning where a step reads the number of replicas: the habit of dividing a loss by it.

Under tf.distribute's MirroredStrategy a custom loop divides each replica's loss by the number of
replicas (or by the global batch size) because the replicas' gradients are summed. Under
RingStrategy a rank's loss is what one process computes on its rows and the gradients are
averaged (`step_rows`), so that division trains with 1/N of one process's gradient, silently.
tfring cannot see what a number divides, but it can see the script read it inside a step: it warns
once per place that does, naming the file and line. Reads by TensorFlow's or Keras' own code (and
tfring's) say nothing.
"""

import os
import warnings

import keras
import tensorflow as tf
from tensorflow.python.util import tf_stack

_DISTRIBUTE = os.path.join("tensorflow", "python", "distribute") + os.sep
_LIBRARIES = tuple(os.path.dirname(module.__file__) + os.sep for module in (tf, keras)) + (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,)

_WARNED = set()  # (file, line) warned about in this process: the warning is said once each

MESSAGE = ("tfring: this line reads num_replicas_in_sync inside a step. Under RingStrategy a rank's loss is "
           "what one process computes on its rows (a mean over them) and the ranks' gradients are averaged, "
           "so a loss divided by the number of replicas or by the global batch size trains with 1/N of one "
           "process's gradient: write the loss as for one process (tf.nn.compute_average_loss is understood). "
           "See 'Losses' in tfring's semantics page.")


def _script_line():
    """`(file, line)` of the script's code that read the property, or None when a library read it.

    TensorFlow's stack maps the code autograph generated inside a `tf.function` back to the
    script's own lines.
    """
    frames = list(tf_stack.extract_stack())[:-3]  # without this, its caller and the property itself
    while frames and _DISTRIBUTE in frames[-1].filename:
        frames.pop()  # the strategy's or replica context's public property
    if not frames or frames[-1].filename.startswith(_LIBRARIES):
        return None
    return frames[-1].filename, frames[-1].lineno


def warn_if_read_by_the_script():
    """Warns, once per line of the script, that a step read `num_replicas_in_sync`.

    Call it from the strategy's `_num_replicas_in_sync` while a step is being traced.

    Example:

    >>> warn_if_read_by_the_script()   # in RingExtended._num_replicas_in_sync
    """
    where = _script_line()
    if where is not None and where not in _WARNED:
        _WARNED.add(where)
        warnings.warn_explicit(MESSAGE, UserWarning, *where)
