"""Reading shard files with each file's records counted against the meta file."""

import pytest
import tensorflow as tf

from tfring.data.record_reader import read_records
from tfring.data.record_reader import readable_records


def _file(path, records, compression="none"):
    options = tf.io.TFRecordOptions(compression_type={"none": "", "gzip": "GZIP"}[compression])
    with tf.io.TFRecordWriter(str(path), options) as writer:
        for record in records:
            writer.write(record)
    return str(path)


def _read(files, compression="none", **options):
    records = read_records(files, compression, record_bytes=8, shuffle=False, deterministic=True, **options)
    return [r.numpy() for r in records]


def test_every_record_of_every_file_is_read(tmp_path):
    a = _file(tmp_path / "a", [b"a%d" % i for i in range(5)])
    b = _file(tmp_path / "b", [b"b%d" % i for i in range(3)], "gzip")
    assert sorted(_read([(a, {"count": 5})])) == [b"a%d" % i for i in range(5)]
    assert sorted(_read([(b, {"count": 3})], "gzip")) == [b"b%d" % i for i in range(3)]
    many = [(_file(tmp_path / f"f{i}", [b"%d" % i] * 2), {"count": 2}) for i in range(20)]
    assert len(_read(many)) == 40


def test_a_file_with_fewer_records_than_its_meta_file_lists_fails_or_is_logged(tmp_path, capfd):
    path = _file(tmp_path / "short", [b"x" * 10] * 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"corrupt or truncated record in .*short at byte 78 "
                                                             r"\(after record 3 of 5\)"):
        _read([(path, {"count": 5})])
    assert len(_read([(path, {"count": 5})], skip_corrupt=True)) == 3
    assert "skipped 2 records" in capfd.readouterr().err
    with pytest.raises(tf.errors.InvalidArgumentError, match="holds more records than the 2 its meta file lists"):
        _read([(path, {"count": 2})], skip_corrupt=True)


def test_readable_records_reads_compressed_files(tmp_path):
    # The up-front count of skip_corrupt in a job: the meta file's compression name ("gzip") is
    # not TensorFlow's ("GZIP"), which reads a gzip file as zero records.
    assert readable_records(_file(tmp_path / "z", [b"r"] * 5, "gzip"), "gzip") == 5
    path = _file(tmp_path / "p", [b"r" * 20] * 4)  # 36 bytes a record with its framing
    data = bytearray(open(path, "rb").read())
    data[2 * 36 + 20] ^= 0xFF  # inside the third record
    open(path, "wb").write(bytes(data))
    assert readable_records(path, "none") == 2
