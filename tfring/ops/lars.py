"""The fused LARS update op: one kernel per variable computes both norms and updates the variable
and its velocity in place (see `TfringLarsUpdate` in cc/kernels/ops.cc for the formula)."""

import tensorflow as tf

from tfring.native import library as _library

_VELOCITY_DTYPE = {tf.float16: tf.float32, tf.float32: tf.float32, tf.float64: tf.float64}


def _tf_variable(variable):
    value = getattr(variable, "value", None)  # a keras.Variable wraps a tf.Variable
    return value if isinstance(value, tf.Variable) else variable


def velocity_dtype(dtype):
    """The velocity's dtype for a variable of `dtype`: float32, or float64 for float64 variables.

    Args:
        dtype: the variable's dtype.

    Returns:
        A `tf.DType`.

    Raises:
        TypeError: dtype is not float16, float32 or float64.
    """
    dtype = tf.as_dtype(dtype)
    if dtype not in _VELOCITY_DTYPE:
        raise TypeError(f"LARS updates float16, float32 and float64 variables, not {dtype.name}")
    return _VELOCITY_DTYPE[dtype]


def fused_unavailable_reason(variable):
    """Why the fused op cannot update `variable` here, or None when it can.

    The op has a CPU kernel, GPU kernels for float16 and float32 variables where the library was
    built with them (a GPU build of TensorFlow and nvcc), and no XLA kernel: variables elsewhere, and
    XLA-compiled functions, use the composed update.

    Args:
        variable: the variable to update.

    Returns:
        A string, or None.
    """
    try:
        _library.load()
    except ImportError as e:
        return f"the op library is unavailable ({e})"
    device = (_tf_variable(variable).device or "").upper()
    if "GPU" in device:
        if not _library.has_gpu_kernels():
            return f"the variable lives on {device} and the op library was built without GPU kernels"
        if tf.as_dtype(variable.dtype) not in (tf.float16, tf.float32):
            return f"the GPU kernel updates float16 and float32 variables, not {tf.as_dtype(variable.dtype).name}"
    elif device and "CPU" not in device:
        return f"the variable lives on {device} (the fused op has CPU and GPU kernels only)"
    from tensorflow.python.ops import control_flow_util

    if not tf.executing_eagerly() and control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        return "the function is compiled with XLA (the fused op has no XLA kernel)"
    return None


def lars_update(variable, velocity, gradient, learning_rate, momentum, weight_decay=0.0,
                trust_coefficient=0.001, epsilon=0.0, adapt=True, nesterov=False, name=None):
    """One fused LARS step for one variable, in place.

    Args:
        variable: a float16/32/64 `tf.Variable` (or `keras.Variable`) to update.
        velocity: its momentum buffer: float32 (float64 for a float64 variable), same shape.
        gradient: the gradient, cast to the variable's dtype.
        learning_rate: the global learning rate (a float32 scalar).
        momentum: the momentum factor m.
        weight_decay: coupled weight decay β (0 for variables excluded from decay).
        trust_coefficient: η.
        epsilon: added to the ratio's denominator.
        adapt: False for variables excluded from layer adaptation (trust ratio 1).
        nesterov: Nesterov momentum.
        name: an optional op name.

    Returns:
        The trust ratio used (a float32 scalar tensor).

    Example:

    >>> w = tf.Variable([3.0, 4.0]); v = tf.Variable([0.0, 0.0])
    >>> round(float(lars_update(w, v, tf.constant([0.3, 0.4]), 1.0, momentum=0.9)), 6)
    0.01
    """
    variable, velocity = _tf_variable(variable), _tf_variable(velocity)
    expected = velocity_dtype(variable.dtype)
    if velocity.dtype != expected:
        raise TypeError(f"LARS: the velocity of a {variable.dtype.name} variable must be {expected.name}, "
                        f"got {velocity.dtype.name}")
    gradient = tf.cast(gradient, variable.dtype)
    learning_rate = tf.cast(learning_rate, tf.float32)
    return _library.load()[0].tfring_lars_update(
        variable.handle, velocity.handle, gradient, learning_rate, momentum=float(momentum),
        weight_decay=float(weight_decay), trust_coefficient=float(trust_coefficient), epsilon=float(epsilon),
        adapt=bool(adapt), nesterov=bool(nesterov), name=name)
