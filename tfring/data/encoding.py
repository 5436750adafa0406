"""From NumPy values to `tf.train.Example` bytes, and the choice of encoding for each feature."""

import numpy as np

from tfring.data.meta import FeatureSpec

# Small arrays of these dtypes go into typed lists; everything else is stored as raw bytes.
_INT_LIST = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "bool"}
_SMALL = 16


def spec_for(name, value):
    """The `FeatureSpec` for a feature whose first example is `value`.

    Args:
        name: the feature's name.
        value: a NumPy array (or scalar, bytes, str).

    Returns:
        A `FeatureSpec`.

    Raises:
        ValueError: a dtype that cannot be stored (objects other than strings, complex numbers).
    """
    if isinstance(value, (bytes, str)):
        return FeatureSpec(name, "string", [], "bytes")
    value = np.asarray(value)
    if value.dtype.kind in "SU":
        if value.ndim:
            raise ValueError(f"feature {name!r}: only scalar strings can be stored, got shape {value.shape}")
        return FeatureSpec(name, "string", [], "bytes")
    if value.dtype.kind not in "biuf":
        raise ValueError(f"feature {name!r}: dtype {value.dtype} cannot be stored (numbers and strings only)")
    dtype = value.dtype.name
    if value.size <= _SMALL and dtype == "float32":
        encoding = "float"
    elif value.size <= _SMALL and dtype in _INT_LIST:
        encoding = "int"
    else:
        encoding = "raw"
    return FeatureSpec(name, dtype, list(value.shape), encoding)


def check_value(spec, value):
    """Raises ValueError when `value` does not fit `spec` (shape or dtype differ from the first example).

    Args:
        spec: the feature's `FeatureSpec`.
        value: this example's value.
    """
    if spec.encoding in ("bytes", "image"):
        if not isinstance(value, (bytes, str, np.bytes_, np.str_)):
            raise ValueError(f"feature {spec.name!r} should be a string, got {type(value).__name__}")
        return
    value = np.asarray(value)
    if list(value.shape) != list(spec.shape) or value.dtype.name != spec.dtype:
        raise ValueError(f"feature {spec.name!r} has shape {list(value.shape)} and dtype {value.dtype}, "
                         f"but the first example had {spec.shape} and {spec.dtype}")


def example_bytes(specs, values):
    """Serializes one example.

    Args:
        specs: the `FeatureSpec`s.
        values: a dict name -> value for every spec (images: the encoded bytes, plus the int
            features `NAME/height`, `NAME/width`, `NAME/channels` as their own specs).

    Returns:
        The serialized `tf.train.Example`.
    """
    import tensorflow as tf

    feature = {}
    for spec in specs:
        value = values[spec.name]
        if spec.encoding in ("bytes", "image"):
            data = value.encode() if isinstance(value, str) else bytes(value)
            feature[spec.name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[data]))
        elif spec.encoding == "int":
            feature[spec.name] = tf.train.Feature(int64_list=tf.train.Int64List(
                value=np.asarray(value).ravel().astype(np.int64).tolist()))
        elif spec.encoding == "float":
            feature[spec.name] = tf.train.Feature(float_list=tf.train.FloatList(
                value=np.asarray(value, np.float32).ravel().tolist()))
        else:
            raw = np.ascontiguousarray(value, dtype=np.dtype(spec.dtype).newbyteorder("<")).tobytes()
            feature[spec.name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[raw]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
