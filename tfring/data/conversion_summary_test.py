"""The meta file's contents built from the shards' records, and the summary line."""

from tfring.data.conversion_summary import dataset_meta
from tfring.data.conversion_summary import image_shape_info
from tfring.data.conversion_summary import summary_line
from tfring.data.meta import FeatureSpec
from tfring.data.sources import Source


class _Source(Source):
    features = [FeatureSpec("x", "int64", [], "int")]
    label = None
    description = {"format": "numpy", "path": "x.npy"}


def _record(i, count, shapes=(), skipped=()):
    return {"file": f"d-{i:05d}-of-00002.tfrecord", "count": count, "bytes": 100 * count, "sha256": "ab" * 32,
            "skipped": list(skipped), "image_shapes": [list(s) for s in shapes]}


def test_image_shapes_tell_whether_images_share_one():
    assert image_shape_info([_record(0, 1), _record(1, 1)]) == {}
    assert image_shape_info([_record(0, 1, [(8, 8, 3)]), _record(1, 1, [(8, 8, 3)])]) == {
        "image_shapes": [[8, 8, 3]], "uniform_image_shape": [8, 8, 3]}
    assert image_shape_info([_record(0, 1, [(9, 8, 3)]), _record(1, 1, [(8, 8, 1)])]) == {
        "image_shapes": [[8, 8, 1], [9, 8, 3]], "uniform_image_shape": None}
    many = [_record(0, 1, [(i, i, 3) for i in range(1, 30)])]
    assert len(image_shape_info(many)["image_shapes"]) == 16


def test_the_meta_file_comes_from_the_records_alone():
    records = [_record(0, 3, skipped=[{"item": "b", "reason": "r"}]),
               _record(1, 2, skipped=[{"item": "a", "reason": "r"}])]
    meta = dataset_meta(_Source(), records, "gzip", shuffle=True, seed=4)
    assert meta.total == 5 and meta.compression == "gzip"
    assert meta.shards[0] == {"file": "d-00000-of-00002.tfrecord", "count": 3, "bytes": 300, "sha256": "ab" * 32}
    assert meta.source == {"format": "numpy", "path": "x.npy", "shuffle": True, "seed": 4}
    assert [s["item"] for s in meta.skipped] == ["a", "b"]
    line = summary_line(meta, 2.0, "/data/d")
    assert line.startswith("tfring convert: 5 records in 2 shards, 0.0 MB, 2.0 s (2 records/s")
    assert "skipped 2 unreadable items" in line and line.endswith("-> /data/d.meta.json")
