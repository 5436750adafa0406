"""Writing one shard: checked examples, skipped items, image shapes asked of the source, checksums."""

import hashlib
import os

import numpy as np
import pytest
import tensorflow as tf

from tfring.data.meta import FeatureSpec
from tfring.data.progress import Progress
from tfring.data.shard_writer import write_shard
from tfring.data.sources import BadItem
from tfring.data.sources import Source


class _Tiles(Source):
    """Square tiles of side i; tile 2 is unreadable and tile 4's value has the wrong dtype."""

    features = [FeatureSpec("x", "int64", [], "int")]

    def __len__(self):
        return 5

    def item_name(self, index):
        return f"tile{index}"

    def example(self, index):
        if index == 2:
            raise BadItem(self.item_name(index), "unreadable")
        return {"x": np.float32(index) if index == 4 else np.int64(index), "side": index}

    def image_shape(self, values):
        return (values["side"], values["side"], 3)


def test_a_shard_is_written_under_a_temporary_name_with_its_record(tmp_path):
    final = str(tmp_path / "d-00000-of-00001.tfrecord")
    progress = Progress(3, enabled=False)
    partial, record = write_shard(_Tiles(), [0, 1, 3], final, progress=progress)
    assert partial.startswith(final + ".tmp-") and not os.path.exists(final)
    assert record["file"] == "d-00000-of-00001.tfrecord" and record["count"] == 3 and record["skipped"] == []
    assert record["image_shapes"] == [[0, 0, 3], [1, 1, 3], [3, 3, 3]]  # asked of the source
    data = open(partial, "rb").read()
    assert record["bytes"] == len(data) == progress.bytes + 3 * 16 and progress.records == 3
    assert record["sha256"] == hashlib.sha256(data).hexdigest()
    values = [tf.train.Example.FromString(r.numpy()).features.feature["x"].int64_list.value[0]
              for r in tf.data.TFRecordDataset(partial)]
    assert values == [0, 1, 3]


def test_unreadable_items_fail_or_are_skipped(tmp_path):
    final = str(tmp_path / "d.tfrecord")
    with pytest.raises(BadItem, match="tile2: unreadable"):
        write_shard(_Tiles(), [0, 2], final)
    with pytest.raises(BadItem, match="tile4: feature 'x' has shape \\[\\] and dtype float32"):
        write_shard(_Tiles(), [4], final)
    _, record = write_shard(_Tiles(), range(5), final, compression="gzip", skip_bad=True)
    assert record["count"] == 3 and [s["item"] for s in record["skipped"]] == ["tile2", "tile4"]
    assert record["skipped"][0]["reason"] == "unreadable"
