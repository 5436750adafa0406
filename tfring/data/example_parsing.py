"""Parsing and batching the records: `tfrecord_dataset`'s last stage.

Records are batched and each batch parsed with one `tf.io.parse_example`, then decoded in
parallel (raw arrays reshaped, images decoded or resized). Records of 64 KiB and more are parsed
and decoded one by one before the batch instead (a batch of them would be one more copy).
"""

import tensorflow as tf

from tfring.data.record_reader import parallel_calls


def parse_and_batch(records, meta, batch, *, each=False, decode_images=True, image_size=None, map_fn=None,
                    drop_remainder=True, deterministic=False):
    """Batches of typed `(features, label)` from serialized records.

    Args:
        records: a `tf.data.Dataset` of serialized `tf.train.Example`s.
        meta: the dataset's `DatasetMeta`.
        batch: rows per batch.
        each: parse each record before batching (large records) instead of each batch after.
        decode_images: decode encoded images to uint8 tensors (float32 when resized).
        image_size: (height, width) to resize decoded images to.
        map_fn: a function applied to the batches, in parallel.
        drop_remainder: drop a last partial batch.
        deterministic: keep a fixed order through the parallel stages.

    Returns:
        A `tf.data.Dataset` of batches (see `example_parser` for their structure).

    Example:

    >>> batches = parse_and_batch(records, meta, 32)
    """
    parse = example_parser(meta, decode_images, image_size)
    parallel = parallel_calls()
    if each:
        # Large records: parsing a batch would copy every byte once more (into the batch of
        # strings) than parsing each record and batching the parsed tensors.
        dataset = records.map(lambda record: parse(record, batched=False), num_parallel_calls=parallel,
                              deterministic=deterministic)
        dataset = dataset.batch(batch, drop_remainder=drop_remainder)
    else:
        dataset = records.batch(batch, drop_remainder=drop_remainder)
        dataset = dataset.map(parse, num_parallel_calls=parallel, deterministic=deterministic)
    if map_fn is not None:
        dataset = dataset.map(map_fn, num_parallel_calls=parallel, deterministic=deterministic)
    return dataset


def example_parser(meta, decode_images=True, image_size=None):
    """A function `(serialized, batched=True) -> (features, label)` for the records of `meta`.

    Args:
        meta: the dataset's `DatasetMeta`.
        decode_images: decode encoded images.
        image_size: (height, width) to resize decoded images to.

    Returns:
        The function. Features are a dict by name, or the single tensor when there is one feature
        besides the label (images: the image); without a label it returns the features alone.
    """
    spec = parse_spec(meta)
    decode = decoder(meta, decode_images, image_size)
    label = meta.label

    def parse(serialized, batched=True):
        parsed = tf.io.parse_example(serialized, spec) if batched else tf.io.parse_single_example(serialized, spec)
        features = decode(parsed, batched)
        if label is None:
            return _one_or_all(features)
        target = features.pop(label)
        return _one_or_all(features), target

    return parse


def _one_or_all(features):
    return features if len(features) > 1 else next(iter(features.values()))


def parse_spec(meta):
    """The `tf.io.parse_example` features of `meta`'s records.

    Args:
        meta: the dataset's `DatasetMeta`.

    Returns:
        A dict: feature name -> `tf.io.FixedLenFeature`.
    """
    spec = {}
    for f in meta.features:
        if f.encoding == "int":
            spec[f.name] = tf.io.FixedLenFeature(f.shape, tf.int64)
        elif f.encoding == "float":
            spec[f.name] = tf.io.FixedLenFeature(f.shape, tf.float32)
        else:
            spec[f.name] = tf.io.FixedLenFeature([], tf.string)
    return spec


def image_shape(meta, image_size):
    """The shape of decoded images: `image_size` with the channels, or the images' one shape.

    Args:
        meta: the dataset's `DatasetMeta` (its source lists the images' shapes).
        image_size: (height, width), or None.

    Returns:
        (height, width, channels).

    Raises:
        ValueError: the images differ in size and no `image_size` is given.
    """
    uniform = meta.source.get("uniform_image_shape")
    shapes = meta.source.get("image_shapes") or []
    channels = max((s[2] for s in shapes), default=3)
    if image_size is not None:
        return (int(image_size[0]), int(image_size[1]), channels)
    if uniform is None:
        raise ValueError("the images differ in size (e.g. " + ", ".join("x".join(map(str, s)) for s in shapes[:3])
                         + "): pass image_size=(height, width) to resize them, or decode_images=False")
    return tuple(uniform)


def decoder(meta, decode_images, image_size):
    """A function `(parsed, batched=True) -> typed tensors` for parsed records of `meta`.

    Args:
        meta: the dataset's `DatasetMeta`.
        decode_images: decode encoded images (then their height/width/channels features are dropped:
            the decoded image carries its shape).
        image_size: (height, width) to resize decoded images to.

    Returns:
        The function.
    """
    features = {f.name: f for f in meta.features}
    has_images = decode_images and any(f.encoding == "image" for f in meta.features)
    image = _image_decoder(image_shape(meta, image_size), image_size) if has_images else None

    def decode(parsed, batched=True):
        out = {name: _decode_feature(features[name], value, image, batched) for name, value in parsed.items()}
        if image is not None:
            for name in ("height", "width", "channels"):
                out.pop(name, None)
        return out

    return decode


def _image_decoder(shape, image_size):
    """(decode one encoded image, the `tf.TensorSpec` of what it returns)."""

    def decode_image(data):
        # The one-kernel decoder (tf.io.decode_image builds a chain of format checks per image).
        image = tf.raw_ops.DecodeImage(contents=data, channels=shape[2], dtype=tf.uint8, expand_animations=False)
        if image_size is not None:
            return tf.image.resize(image, shape[:2])
        image.set_shape(shape)
        return image

    return decode_image, tf.TensorSpec(shape, tf.float32 if image_size is not None else tf.uint8)


def _decode_feature(f, value, image, batched):
    if f.encoding == "int":
        return tf.cast(value, tf.bool if f.dtype == "bool" else tf.as_dtype(f.dtype))
    if f.encoding == "raw":
        raw_type = tf.uint8 if f.dtype == "bool" else tf.as_dtype(f.dtype)
        flat = tf.io.decode_raw(value, raw_type, little_endian=True)
        array = tf.reshape(flat, tf.concat([tf.shape(value), f.shape], 0))
        return tf.cast(array, tf.bool) if f.dtype == "bool" else array
    if f.encoding == "image" and image is not None:
        decode_image, spec = image
        return tf.map_fn(decode_image, value, fn_output_signature=spec) if batched else decode_image(value)
    return value
