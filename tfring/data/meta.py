"""The description of a converted dataset: `PREFIX.meta.json` beside `PREFIX-00000-of-00016.tfrecord`.

It holds the feature spec (name, dtype, per-example shape, encoding), the label feature, the
record count and checksum of every shard, the total, and where the data came from. Readers
(`tfring.data.tfrecord_dataset`) build their parsing from it.
"""

import dataclasses
import json
import os
import re

# How a feature is stored in the tf.train.Example:
#   "int"   int64_list of the values (small integer arrays)
#   "float" float_list of the values (small float32 arrays)
#   "raw"   one bytes value: the array's little-endian bytes (decode_raw + reshape)
#   "bytes" one bytes value as is (strings)
#   "image" one bytes value: an encoded JPEG/PNG (height/width/channels are separate features)
ENCODINGS = ("int", "float", "raw", "bytes", "image")
# Each compression's TensorFlow name (`compression_type`) and shard file ending.
COMPRESSION_TYPES = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}
_ENDINGS = {"none": "", "gzip": ".gz", "zlib": ".zz"}
_SHARD_NAME = re.compile(r"^(?P<prefix>.*)-\d{5}-of-\d{5}\.tfrecord(\.gz|\.zz)?$")
META_SUFFIX = ".meta.json"
PLAN_SUFFIX = ".plan.json"


@dataclasses.dataclass
class FeatureSpec:
    """One feature of every example.

    Args:
        name: the feature's key.
        dtype: a NumPy dtype name ("uint16", "float32"), or "string".
        shape: the per-example shape (a list; [] for scalars; images: [] with the size stored apart).
        encoding: one of `ENCODINGS`.
    """

    name: str
    dtype: str
    shape: list
    encoding: str

    def to_json(self):
        return dataclasses.asdict(self)


@dataclasses.dataclass
class DatasetMeta:
    """The contents of `PREFIX.meta.json`.

    Args:
        features: the `FeatureSpec`s.
        label: the name of the label feature, or None.
        shards: one dict per shard: {"file", "count", "bytes", "sha256"} (file name relative to the
            meta file's folder).
        compression: "none", "gzip" or "zlib".
        source: where the data came from, and its format.
        classes: class names by label index (image and TIFF folders), else None.
        skipped: files left out with `skip_bad` and why.
    """

    features: list
    label: object
    shards: list
    compression: str
    source: dict
    classes: object = None
    skipped: list = dataclasses.field(default_factory=list)

    @property
    def total(self):
        return sum(s["count"] for s in self.shards)

    def feature(self, name):
        for f in self.features:
            if f.name == name:
                return f
        raise KeyError(name)

    def to_json(self):
        return {"format": "tfring-tfrecord-v1", "features": [f.to_json() for f in self.features],
                "label": self.label, "total": self.total, "compression": self.compression,
                "shards": self.shards, "source": self.source, "classes": self.classes, "skipped": self.skipped}

    @classmethod
    def from_json(cls, payload, where="meta file"):
        if payload.get("format") != "tfring-tfrecord-v1":
            raise ValueError(f"{where} is not a tfring dataset description (format {payload.get('format')!r})")
        for index, shard in enumerate(payload["shards"]):
            check_shard_name(shard.get("file") if isinstance(shard, dict) else shard, index, where)
        return cls(features=[FeatureSpec(**f) for f in payload["features"]], label=payload.get("label"),
                   shards=payload["shards"], compression=payload.get("compression", "none"),
                   source=payload.get("source", {}), classes=payload.get("classes"),
                   skipped=payload.get("skipped", []))


def check_shard_name(name, index, where):
    """Refuses a shard name that is not a plain file name.

    Readers join shard names to the meta file's folder, and `stage` to a local folder: a name with a
    separator, `..`, an absolute path or a NUL in a shared (possibly hostile) dataset would read
    or write outside them (a staged copy overwrote `~/.bashrc`). `tfring convert` writes plain names.

    Args:
        name: the shard's "file" entry.
        index: the shard's position, for the message.
        where: the meta file, for the message.

    Raises:
        ValueError: the name is not a non-empty string without "/", "\\" or NUL, or is "." or "..".

    Example:

    >>> check_shard_name("train-00000-of-00002.tfrecord", 0, "train.meta.json")
    """
    if not isinstance(name, str) or name in ("", ".", "..") or any(c in name for c in "/\\\0"):
        raise ValueError(f"{where}: shard {index} is named {name!r}, which is not a plain file name (no folder, "
                         f"'..', absolute path or NUL may appear): the dataset description is damaged or was "
                         f"written to read or write outside its folder; nothing was read or copied")


def shard_file_name(prefix, index, count, compression):
    """`PREFIX-00003-of-00016.tfrecord` (+ `.gz` for gzip, `.zz` for zlib)."""
    return f"{prefix}-{index:05d}-of-{count:05d}.tfrecord{_ENDINGS[compression]}"


def shard_prefix(path):
    """The output prefix of a shard file's path (`data/train` for `data/train-00003-of-00016.tfrecord`).

    Args:
        path: a path.

    Returns:
        The prefix, or None when `path` is not named like a shard (see `shard_file_name`).
    """
    match = _SHARD_NAME.match(path)
    return match.group("prefix") if match else None


def read_json(path):
    """Reads a JSON file (local or any `tf.io.gfile` path)."""
    with open_file(path, "r") as f:
        return json.load(f)


def write_json_atomically(path, payload):
    """Writes JSON under a temporary name and renames it: readers never see half a file."""
    partial = f"{path}.tmp-{os.getpid()}"
    with open_file(partial, "w") as f:
        f.write(json.dumps(payload, indent=1))
    _rename(partial, path)


def load_meta(prefix):
    """The `DatasetMeta` of `PREFIX.meta.json`.

    Args:
        prefix: the dataset's output prefix (or the meta file's path).

    Returns:
        A `DatasetMeta`.

    Raises:
        FileNotFoundError: no meta file there.
        ValueError: the file is not a tfring dataset description.
    """
    path = prefix if prefix.endswith(META_SUFFIX) else prefix + META_SUFFIX
    if not exists(path):
        raise FileNotFoundError(f"no dataset description at {path} (convert the data with `tfring convert` first)")
    try:
        payload = read_json(path)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}): the dataset description is damaged; "
                         f"convert the data again") from None
    return DatasetMeta.from_json(payload, where=path)


def is_remote(path):
    return "://" in str(path)


def exists(path):
    if is_remote(path):
        import tensorflow as tf

        return tf.io.gfile.exists(path)
    return os.path.exists(path)


def open_file(path, mode):
    """Opens a local path or any `tf.io.gfile` URL."""
    if is_remote(path):
        import tensorflow as tf

        return tf.io.gfile.GFile(path, mode)
    return open(path, mode)


def _rename(src, dst):
    if is_remote(dst):
        import tensorflow as tf

        tf.io.gfile.rename(src, dst, overwrite=True)
    else:
        os.replace(src, dst)
