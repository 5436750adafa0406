"""Parsing and batching records: typed features, each record or each batch, images' shapes."""

import numpy as np
import pytest
import tensorflow as tf

from tfring.data.encoding import example_bytes
from tfring.data.encoding import spec_for
from tfring.data.example_parsing import image_shape
from tfring.data.example_parsing import parse_and_batch
from tfring.data.meta import DatasetMeta
from tfring.data.meta import FeatureSpec


def _rows(n=10):
    rng = np.random.default_rng(0)
    return [{"ident": np.int64(i), "patch": rng.integers(0, 60000, (4, 5)).astype("uint16"),
             "mask": rng.integers(0, 2, (20,)).astype(bool), "name": b"row%d" % i, "label": np.int32(i % 3)}
            for i in range(n)]


def _meta(rows, label="label", source=None):
    features = [spec_for(name, value) for name, value in rows[0].items()]
    return DatasetMeta(features=features, label=label, shards=[], compression="none", source=source or {})


def _records(specs, rows):
    return tf.data.Dataset.from_tensor_slices([example_bytes(specs, values) for values in rows])


@pytest.mark.parametrize("each", [False, True])
def test_batches_hold_the_typed_features_and_the_label(each):
    rows = _rows()
    meta = _meta(rows)
    assert [f.encoding for f in meta.features] == ["int", "raw", "raw", "bytes", "int"]
    batches = list(parse_and_batch(_records(meta.features, rows), meta, 4, each=each, drop_remainder=False,
                                   deterministic=True))
    assert [int(y.shape[0]) for _, y in batches] == [4, 4, 2]
    x = {k: np.concatenate([b[0][k].numpy() for b in batches]) for k in batches[0][0]}
    y = np.concatenate([b[1].numpy() for b in batches])
    np.testing.assert_array_equal(x["ident"], np.arange(10))
    np.testing.assert_array_equal(x["patch"], np.stack([r["patch"] for r in rows]))
    assert x["patch"].dtype == np.uint16 and x["mask"].dtype == bool and y.dtype == np.int32
    np.testing.assert_array_equal(x["mask"], np.stack([r["mask"] for r in rows]))
    assert x["name"].tolist() == [r["name"] for r in rows]


def test_one_feature_comes_alone_and_map_fn_sees_the_batches():
    rows = [{"v": np.float32(i)} for i in range(6)]
    meta = _meta(rows, label=None)
    dataset = parse_and_batch(_records(meta.features, rows), meta, 3, map_fn=lambda v: v * 2, deterministic=True)
    assert [b.numpy().tolist() for b in dataset] == [[0, 2, 4], [6, 8, 10]]


def test_images_decode_to_their_one_shape_or_resize():
    images = [tf.io.encode_png(np.full((4, 5, 3), i, np.uint8)).numpy() for i in range(3)]
    specs = [FeatureSpec("image", "uint8", [], "image"), FeatureSpec("height", "int64", [], "int"),
             FeatureSpec("width", "int64", [], "int"), FeatureSpec("channels", "int64", [], "int")]
    rows = [{"image": data, "height": 4, "width": 5, "channels": 3} for data in images]
    meta = DatasetMeta(features=specs, label=None, shards=[], compression="none",
                       source={"image_shapes": [[4, 5, 3]], "uniform_image_shape": [4, 5, 3]})
    (batch,) = list(parse_and_batch(_records(specs, rows), meta, 3))
    assert batch.shape == (3, 4, 5, 3) and batch.dtype == tf.uint8 and int(batch[2, 0, 0, 0]) == 2
    (resized,) = list(parse_and_batch(_records(specs, rows), meta, 3, image_size=(8, 8)))
    assert resized.shape == (3, 8, 8, 3) and resized.dtype == tf.float32
    (kept,) = list(parse_and_batch(_records(specs, rows), meta, 3, decode_images=False))
    assert kept["image"].dtype == tf.string and kept["height"].numpy().tolist() == [4, 4, 4]


def test_images_of_several_sizes_need_an_image_size():
    meta = DatasetMeta(features=[], label=None, shards=[], compression="none",
                       source={"image_shapes": [[4, 5, 3], [6, 6, 1]], "uniform_image_shape": None})
    with pytest.raises(ValueError, match="the images differ in size \\(e.g. 4x5x3, 6x6x1\\): pass image_size"):
        image_shape(meta, None)
    assert image_shape(meta, (10, 12)) == (10, 12, 3)
