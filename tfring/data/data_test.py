"""The converter (every format, shards, meta, resume, bad input) and the pipeline (one process)."""

import glob
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

from tfring.data import load_meta  # noqa: E402
from tfring.data import tfrecord_dataset  # noqa: E402
from tfring.data import write_tfrecords  # noqa: E402
from tfring.data.sources import BadItem  # noqa: E402


def _all(ds):
    """Every batch of an unlabelled-or-labelled dataset, concatenated, as NumPy."""
    xs, ys = [], []
    for batch in ds:
        x, y = batch if isinstance(batch, tuple) else (batch, None)
        xs.append(x)
        ys.append(y)
    if isinstance(xs[0], dict):
        x = {k: np.concatenate([b[k].numpy() for b in xs]) for k in xs[0]}
    else:
        x = np.concatenate([b.numpy() for b in xs])
    return x, (np.concatenate([y.numpy() for y in ys]) if ys[0] is not None else None)


def _sorted_by(ids, *arrays):
    order = np.argsort(ids)
    return [a[order] for a in arrays]


@pytest.fixture(params=["batch", "each"])
def parse_mode(request, monkeypatch):
    """Runs a test with the pipeline parsing batches of records (small records) and parsing each
    record before batching (what it does for records of 64 KiB and more)."""
    from tfring.data import pipeline

    if request.param == "each":
        monkeypatch.setattr(pipeline, "_PARSE_EACH_ABOVE", 0)
    return request.param


def test_numpy_round_trip_shards_and_meta(tmp_path, parse_mode):
    rng = np.random.default_rng(0)
    patch = rng.integers(0, 60000, (50, 12, 10, 10)).astype("uint16")  # raw bytes
    small = rng.standard_normal((50, 3)).astype("float32")              # float list
    ident = np.arange(50, dtype="int64")                                 # int list
    np.savez(tmp_path / "a.npz", patch=patch, small=small, ident=ident, label=(ident % 3).astype("int32"))
    meta = write_tfrecords(str(tmp_path / "a.npz"), str(tmp_path / "out" / "train"), num_shards=4, progress=False)
    files = sorted(glob.glob(str(tmp_path / "out" / "train-*")))
    assert [os.path.basename(f) for f in files] == [f"train-0000{i}-of-00004.tfrecord" for i in range(4)]
    on_disk = load_meta(str(tmp_path / "out" / "train"))
    assert on_disk.total == 50 and [s["count"] for s in on_disk.shards] == [13, 13, 12, 12]
    for f, s in zip(files, on_disk.shards):
        assert hashlib.sha256(open(f, "rb").read()).hexdigest() == s["sha256"]
        assert os.path.getsize(f) == s["bytes"]
    assert {f.name: f.encoding for f in meta.features} == {"patch": "raw", "small": "float", "ident": "int",
                                                          "label": "int"}
    assert on_disk.label == "label" and on_disk.source["format"] == "numpy"
    x, y = _all(tfrecord_dataset(str(tmp_path / "out" / "train"), 8, drop_remainder=False))
    assert x["patch"].dtype == np.uint16 and x["ident"].dtype == np.int64 and y.dtype == np.int32
    order = np.argsort(x["ident"])
    np.testing.assert_array_equal(x["ident"][order], ident)
    np.testing.assert_array_equal(x["patch"][order], patch)
    np.testing.assert_array_equal(x["small"][order], small)
    np.testing.assert_array_equal(y[order], ident % 3)


def _images(root, n=6, bad=None):
    from PIL import Image

    rng = np.random.default_rng(1)
    pixels = {}
    for c, name in enumerate(["cat", "dog"]):
        os.makedirs(root / name, exist_ok=True)
        for i in range(n):
            array = rng.integers(0, 255, (9, 7, 3)).astype("uint8")
            path = root / name / f"{i}.png"
            Image.fromarray(array).save(path)
            pixels[array.tobytes()] = (array, c)
    if bad:
        (root / "dog" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 10)
    return pixels


def test_image_folder_stored_encoded_and_decoded_on_read(tmp_path, parse_mode):
    pixels = _images(tmp_path / "imgs")
    meta = write_tfrecords(str(tmp_path / "imgs"), str(tmp_path / "out" / "img"), num_shards=3, progress=False)
    assert meta.classes == ["cat", "dog"] and meta.source["uniform_image_shape"] == [9, 7, 3]
    raw = next(iter(tf.data.TFRecordDataset(str(tmp_path / "out" / "img-00000-of-00003.tfrecord"))))
    example = tf.train.Example.FromString(raw.numpy())
    assert example.features.feature["image"].bytes_list.value[0][:4] == b"\x89PNG"  # encoded, not decoded
    x, y = _all(tfrecord_dataset(str(tmp_path / "out" / "img"), 4, drop_remainder=False))
    assert x.shape == (12, 9, 7, 3) and x.dtype == np.uint8
    for image, label in zip(x, y):
        want, want_label = pixels[image.tobytes()]
        np.testing.assert_array_equal(image, want)
        assert label == want_label
    resized, _ = _all(tfrecord_dataset(str(tmp_path / "out" / "img"), 4, image_size=(16, 16)))
    assert resized.shape == (12, 16, 16, 3) and resized.dtype == np.float32


def test_unreadable_image_fails_or_is_skipped(tmp_path):
    _images(tmp_path / "imgs", n=2, bad=True)
    with pytest.raises(BadItem, match="broken.png: unreadable image"):
        write_tfrecords(str(tmp_path / "imgs"), str(tmp_path / "out" / "a"), num_shards=1, progress=False)
    assert not glob.glob(str(tmp_path / "out" / "a-*-of-*.tfrecord"))  # nothing under a final name
    meta = write_tfrecords(str(tmp_path / "imgs"), str(tmp_path / "out2" / "a"), num_shards=1, skip_bad=True,
                           progress=False)
    assert meta.total == 4 and len(meta.skipped) == 1 and meta.skipped[0]["item"].endswith("broken.png")


def test_csv_and_parquet_columns_are_typed(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "t.csv").write_text("age,height,name,label\n31,1.5,ann,1\n42,1.75,bob,0\n27,1.25,cy,1\n")
    table = pa.table({"age": pa.array([31, 42, 27], pa.int64()), "height": pa.array([1.5, 1.75, 1.25], pa.float32()),
                      "name": ["ann", "bob", "cy"], "label": pa.array([1, 0, 1], pa.int8())})
    pq.write_table(table, tmp_path / "t.parquet")
    for name in ("t.csv", "t.parquet"):
        meta = write_tfrecords(str(tmp_path / name), str(tmp_path / name.replace(".", "_")), num_shards=1,
                               progress=False)
        x, y = _all(tfrecord_dataset(str(tmp_path / name.replace(".", "_")), 3, shuffle=False))
        order = np.argsort(x["age"])
        assert x["age"][order].tolist() == [27, 31, 42]
        np.testing.assert_allclose(x["height"][order], [1.25, 1.5, 1.75])
        assert x["name"][order].tolist() == [b"cy", b"ann", b"bob"]
        assert y[order].tolist() == [1, 1, 0]
        assert meta.feature("name").encoding == "bytes"
    (tmp_path / "gap.csv").write_text("a,b\n1,2\n3,\n")
    with pytest.raises(ValueError, match="column 'b' has 1 missing values"):
        write_tfrecords(str(tmp_path / "gap.csv"), str(tmp_path / "gap"), progress=False)


def test_hdf5_chosen_datasets(tmp_path):
    import h5py

    with h5py.File(tmp_path / "d.h5", "w") as f:
        f["x"] = np.arange(40, dtype="float64").reshape(10, 4)
        f["y"] = np.arange(10, dtype="int32")
        f["other"] = np.zeros(3)
    meta = write_tfrecords(str(tmp_path / "d.h5"), str(tmp_path / "h"), datasets=["x", "y"], label="y",
                           num_shards=2, progress=False)
    assert [f.name for f in meta.features] == ["x", "y"] and meta.feature("x").encoding == "raw"
    x, y = _all(tfrecord_dataset(str(tmp_path / "h"), 5, shuffle=False))
    order = np.argsort(y)
    np.testing.assert_array_equal(x[order], np.arange(40, dtype="float64").reshape(10, 4))
    with pytest.raises(ValueError, match="first dimensions differ"):
        write_tfrecords(str(tmp_path / "d.h5"), str(tmp_path / "h2"), datasets=["x", "other"], progress=False)


def test_tiff_patches_from_class_folders_and_from_a_csv(tmp_path):
    import tifffile

    rng = np.random.default_rng(2)
    patches = {}
    for c, name in enumerate(["forest", "water"]):
        os.makedirs(tmp_path / "t" / name)
        for i in range(3):
            patch = rng.integers(0, 10000, (12, 8, 8)).astype("uint16")
            tifffile.imwrite(tmp_path / "t" / name / f"p{i}.tif", patch)
            patches[int(patch.sum())] = (patch, c)
    (tmp_path / "t" / "water" / "bad.tif").write_bytes(b"II*\x00" + b"\x00" * 20)
    with pytest.raises(BadItem, match="bad.tif: unreadable TIFF"):
        write_tfrecords(str(tmp_path / "t"), str(tmp_path / "o" / "tif"), progress=False)
    meta = write_tfrecords(str(tmp_path / "t"), str(tmp_path / "o2" / "tif"), skip_bad=True, progress=False)
    assert meta.feature("patch").shape == [12, 8, 8] and meta.feature("patch").dtype == "uint16"
    assert meta.classes == ["forest", "water"] and len(meta.skipped) == 1
    x, y = _all(tfrecord_dataset(str(tmp_path / "o2" / "tif"), 2, shuffle=False))
    for patch, label in zip(x, y):
        want, want_label = patches[int(patch.sum())]
        np.testing.assert_array_equal(patch, want)
        assert label == want_label
    (tmp_path / "labels.csv").write_text("file,label\nforest/p0.tif,7\nwater/p1.tif,3\n")
    meta = write_tfrecords(str(tmp_path / "t"), str(tmp_path / "o3" / "tif"), labels_file=str(tmp_path / "labels.csv"),
                           progress=False)
    _, y = _all(tfrecord_dataset(str(tmp_path / "o3" / "tif"), 1, shuffle=False))
    assert sorted(y.tolist()) == [3, 7]


def test_bad_input_errors(tmp_path):
    np.savez(tmp_path / "m.npz", a=np.zeros((5, 2)), b=np.zeros((6,)))
    with pytest.raises(ValueError, match="first dimensions differ"):
        write_tfrecords(str(tmp_path / "m.npz"), str(tmp_path / "m"), progress=False)
    (tmp_path / "x.weird").write_text("?")
    with pytest.raises(ValueError, match="unknown format"):
        write_tfrecords(str(tmp_path / "x.weird"), str(tmp_path / "w"), progress=False)
    with pytest.raises(ValueError, match="unknown format 'gif'"):
        write_tfrecords(str(tmp_path / "x.weird"), str(tmp_path / "w"), format="gif", progress=False)
    np.save(tmp_path / "ok.npy", np.zeros((4, 2), "float32"))
    write_tfrecords(str(tmp_path / "ok.npy"), str(tmp_path / "d" / "ok"), progress=False)
    with pytest.raises(ValueError, match="already holds a dataset"):
        write_tfrecords(str(tmp_path / "ok.npy"), str(tmp_path / "d" / "ok"), progress=False)
    with pytest.raises(ValueError, match="not a size"):
        write_tfrecords(str(tmp_path / "ok.npy"), str(tmp_path / "d" / "z"), shard_size="lots", progress=False)
    with pytest.raises(FileNotFoundError, match="no dataset description"):
        tfrecord_dataset(str(tmp_path / "nothing"), 4)


def test_corrupt_record_names_file_and_offset_or_is_skipped(tmp_path, capfd):
    np.save(tmp_path / "v.npy", np.arange(40, dtype="int64").reshape(20, 2))
    write_tfrecords(str(tmp_path / "v.npy"), str(tmp_path / "v"), num_shards=2, progress=False)
    shard = tmp_path / "v-00001-of-00002.tfrecord"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only reading finds it
    shard.write_bytes(bytes(data))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"corrupt or truncated record in .*v-00001-of-00002"
                                                             r"\.tfrecord at byte \d+"):
        _all(tfrecord_dataset(str(tmp_path / "v"), 2, shuffle=False))
    x, _ = _all(tfrecord_dataset(str(tmp_path / "v"), 2, shuffle=False, skip_corrupt=True, drop_remainder=False))
    assert 10 <= len(x) < 20
    assert "skipped" in capfd.readouterr().err
    shard.write_bytes(bytes(data[: len(data) - 30]))  # truncated: found before reading
    with pytest.raises(ValueError, match="v-00001-of-00002.tfrecord is truncated"):
        tfrecord_dataset(str(tmp_path / "v"), 2)


@pytest.mark.multiprocess
def test_cli_convert_gzip_and_pattern(tmp_path):
    np.save(tmp_path / "v.npy", np.arange(30, dtype="float32").reshape(10, 3))
    out = subprocess.run([sys.executable, "-m", "tfring", "convert", str(tmp_path / "v.npy"), str(tmp_path / "c" / "v"),
                          "--num-shards", "3", "--compression", "gzip", "--shuffle", "--seed", "1"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "10 records in 3 shards" in out.stdout
    assert sorted(os.listdir(tmp_path / "c"))[0] == "v-00000-of-00003.tfrecord.gz"
    x, _ = _all(tfrecord_dataset(str(tmp_path / "c" / "v-0000[01]-*"), 1))
    assert len(x) == 7  # shards 0 and 1 of 10 records in 3 shards (4 + 3)
    bad = subprocess.run([sys.executable, "-m", "tfring", "convert", str(tmp_path / "nope.npy"), str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "no such file" in bad.stderr


SLOW = r'''
import sys, time
import numpy as np
from tfring.data.sources.arrays import ArraySource
from tfring.data.writer import write_tfrecords

class Slow(ArraySource):
    def example(self, i):
        time.sleep(0.01)
        return super().example(i)

x = np.arange(400, dtype="int64").reshape(200, 2)
write_tfrecords(Slow({"x": x}, {"format": "numpy", "path": "slow"}), sys.argv[1], num_shards=10, workers=1,
                resume=len(sys.argv) > 2, progress=False)
print("FINISHED")
'''


@pytest.mark.multiprocess
def test_killed_conversion_leaves_no_final_partial_and_resumes(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text(SLOW)
    prefix = str(tmp_path / "o" / "x")
    proc = subprocess.Popen([sys.executable, str(script), prefix], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and len(glob.glob(prefix + "-*-of-00010.tfrecord")) < 3:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    finished = glob.glob(prefix + "-*-of-00010.tfrecord")
    assert 3 <= len(finished) < 10 and not os.path.exists(prefix + ".meta.json")
    plan = json.load(open(prefix + ".plan.json"))
    for path in finished:  # every file under a final name is complete: its checksum was recorded
        record = next(r for r in plan["done"].values() if r["file"] == os.path.basename(path))
        assert hashlib.sha256(open(path, "rb").read()).hexdigest() == record["sha256"]
    kept = {p: os.path.getmtime(p) for p in finished}
    again = subprocess.run([sys.executable, str(script), prefix], capture_output=True, text=True, timeout=300)
    assert again.returncode != 0 and "already holds a dataset" in again.stderr
    resumed = subprocess.run([sys.executable, str(script), prefix, "--resume"], capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert all(os.path.getmtime(p) == t for p, t in kept.items())  # complete shards were kept
    meta = load_meta(prefix)
    assert meta.total == 200 and not os.path.exists(prefix + ".plan.json")
    assert not glob.glob(prefix + "*.tmp-*")
    x, _ = _all(tfrecord_dataset(prefix, 10))
    assert sorted(x[:, 0].tolist()) == list(range(0, 400, 2))


def test_resumed_conversion_writes_the_same_meta_as_an_uninterrupted_one(tmp_path):
    # 8x8 cats (one unreadable) land in the first shards, 12x12 dogs in the last: a resume that only
    # rewrites the last shard must still know the cats' shapes and the skipped file.
    from PIL import Image

    for name, side in (("cat", 8), ("dog", 12)):
        os.makedirs(tmp_path / "imgs" / name)
        for i in range(4):
            Image.fromarray(np.full((side, side, 3), i * 40, "uint8")).save(tmp_path / "imgs" / name / f"{i}.png")
    (tmp_path / "imgs" / "cat" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 10)
    args = dict(num_shards=3, skip_bad=True, workers=1, progress=False)
    write_tfrecords(str(tmp_path / "imgs"), str(tmp_path / "straight" / "ds"), **args)

    from tfring.data.sources import open_source

    source = open_source(str(tmp_path / "imgs"))
    example = source.example

    def dies_in_the_last_shard(index):
        if index == len(source) - 1:
            raise RuntimeError("killed")
        return example(index)

    source.example = dies_in_the_last_shard
    with pytest.raises(RuntimeError, match="killed"):
        write_tfrecords(source, str(tmp_path / "resumed" / "ds"), **args)
    write_tfrecords(str(tmp_path / "imgs"), str(tmp_path / "resumed" / "ds"), resume=True, **args)
    straight = (tmp_path / "straight" / "ds.meta.json").read_bytes()
    assert (tmp_path / "resumed" / "ds.meta.json").read_bytes() == straight
    meta = load_meta(str(tmp_path / "resumed" / "ds"))
    assert meta.source["uniform_image_shape"] is None and len(meta.skipped) == 1


def test_damaged_meta_files_and_gzip_shards_are_named(tmp_path):
    np.save(tmp_path / "v.npy", np.arange(40, dtype="int64").reshape(20, 2))
    write_tfrecords(str(tmp_path / "v.npy"), str(tmp_path / "v"), num_shards=2, progress=False)
    meta_path = tmp_path / "v.meta.json"
    good = meta_path.read_text()
    meta_path.write_text(good[:-20])
    with pytest.raises(ValueError, match=r"v\.meta\.json is not valid JSON"):
        tfrecord_dataset(str(tmp_path / "v"), 2)
    # A meta file that lists fewer records than a shard holds is caught on reading.
    payload = json.loads(good)
    payload["shards"][0]["count"] -= 3
    meta_path.write_text(json.dumps(payload))
    with pytest.raises(tf.errors.InvalidArgumentError, match="holds more records than the 7 its meta file lists"):
        _all(tfrecord_dataset(str(tmp_path / "v"), 2, shuffle=False))
    # A damaged gzip shard: the record reached, and why the rest of the file is lost.
    write_tfrecords(str(tmp_path / "v.npy"), str(tmp_path / "z"), num_shards=1, compression="gzip", progress=False)
    shard = tmp_path / "z-00000-of-00001.tfrecord.gz"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"after record \d+ of 20\): a compressed shard cannot"):
        _all(tfrecord_dataset(str(tmp_path / "z"), 2, shuffle=False))
