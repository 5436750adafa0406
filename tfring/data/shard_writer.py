"""Writing one shard: its examples read, checked and serialized into a temporary file, checksummed.

The file gets its final name from the plan (`ShardPlan.commit`), after its checksum is recorded.
"""

import hashlib
import os
import threading

from tfring.data import meta as meta_lib
from tfring.data.encoding import check_value
from tfring.data.encoding import example_bytes
from tfring.data.sources import BadItem


def write_shard(source, indices, final, compression="none", skip_bad=False, progress=None):
    """Writes examples `indices` of `source` into a temporary file beside `final`.

    Args:
        source: a `Source`.
        indices: the example indices, in order.
        final: the shard's final path (the temporary file is `final` + `.tmp-...`).
        compression: "none", "gzip" or "zlib".
        skip_bad: skip unreadable items (listed in the record) instead of failing.
        progress: a `Progress` to count records and bytes on, or None.

    Returns:
        (the temporary file's path, the shard's record): {"file", "count", "bytes", "sha256",
        "skipped", "image_shapes"}, all that the meta file needs from this shard.

    Raises:
        BadItem: an unreadable item (without `skip_bad`), naming it.

    Example:

    >>> partial, record = write_shard(source, [0, 1, 2], "data/train-00000-of-00001.tfrecord")
    >>> record["count"]
    3
    """
    import tensorflow as tf

    partial = f"{final}.tmp-{os.getpid()}-{threading.get_ident()}"
    count, skipped, image_shapes = 0, [], set()
    options = tf.io.TFRecordOptions(compression_type=meta_lib.COMPRESSION_TYPES[compression])
    with tf.io.TFRecordWriter(partial, options) as writer:
        for i in indices:
            values = readable_example(source, int(i), skip_bad, skipped)
            if values is None:
                continue
            shape = source.image_shape(values)
            if shape is not None:
                image_shapes.add(tuple(shape))
            data = example_bytes(source.features, values)
            writer.write(data)
            count += 1
            if progress is not None:
                progress.add(1, len(data))
    record = {"file": os.path.basename(final), "count": count, "bytes": tf.io.gfile.stat(partial).length,
              "sha256": sha256_of(partial), "skipped": skipped, "image_shapes": sorted(list(s) for s in image_shapes)}
    return partial, record


def readable_example(source, index, skip_bad, skipped):
    """Example `index`'s values, checked against the source's feature specs.

    Args:
        source: a `Source`.
        index: the example's index.
        skip_bad: list an unreadable example in `skipped` and return None, instead of failing.
        skipped: the list of `{"item", "reason"}` to append to.

    Returns:
        {feature name: value}, or None when skipped.

    Raises:
        BadItem: an unreadable item or a value unlike the first example's (without `skip_bad`).
    """
    try:
        values = source.example(index)
        for spec in source.features:
            if spec.encoding != "image":
                check_value(spec, values[spec.name])
        return values
    except (BadItem, ValueError) as e:
        reason = getattr(e, "reason", str(e))
        if not skip_bad:
            raise BadItem(source.item_name(index), reason) from None
        skipped.append({"item": source.item_name(index), "reason": reason})
        return None


def sha256_of(path):
    """The SHA-256 of a file (local or any `tf.io.gfile` path), as hex.

    Args:
        path: the file.

    Returns:
        A str of 64 hex digits.
    """
    import tensorflow as tf

    h = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as f:
        while True:
            block = f.read(1 << 22)
            if not block:
                break
            h.update(block)
    return h.hexdigest()
