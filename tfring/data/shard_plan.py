"""The conversion's plan: which examples go to which shard, and which shards are done.

The plan is fixed before writing and saved as `PREFIX.plan.json` with a fingerprint of the
arguments. A shard's checksum is recorded in the plan before the shard gets its final name, so a
run killed midway leaves no file under a final name that the plan does not vouch for, and a run
with `resume=True` keeps every complete shard whose checksum still matches and writes the rest.
"""

import math
import os
import threading

import numpy as np

from tfring.data import meta as meta_lib
from tfring.data.encoding import example_bytes
from tfring.data.shard_writer import sha256_of
from tfring.data.sources import BadItem

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
# Examples whose encoded size estimates the number of shards for a target shard size.
_SAMPLE = 32


def parse_size(text):
    """'128MB' -> 128000000 (B, KB, MB, GB, KiB, MiB, GiB; a bare number is bytes).

    Args:
        text: the size.

    Returns:
        An int > 0.

    Raises:
        ValueError: not a size.

    Example:

    >>> parse_size("1KiB")
    1024
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        number, unit = float(text), ""
    else:
        s = str(text).strip().upper().replace(" ", "")
        digits = s.rstrip("KMGIB")
        number, unit = digits, s[len(digits):]
        try:
            number = float(number)
        except ValueError:
            number = -1
    if unit not in _UNITS or number <= 0:
        raise ValueError(f"not a size: {text!r} (examples: 128MB, 1GiB, 500000)")
    return int(number * _UNITS[unit])


def split_examples(source, num_shards, shard_bytes, shuffle=False, seed=None):
    """The example indices of each shard.

    Args:
        source: a `Source`.
        num_shards: the number of shards, or None to aim at `shard_bytes` per shard.
        shard_bytes: the target shard size (estimated from the first examples' encoded size).
        shuffle: shuffle the examples (with `seed`) before splitting them.
        seed: the shuffle seed.

    Returns:
        A list of lists of indices, as even as possible (never more shards than examples).

    Example:

    >>> [len(s) for s in split_examples(source, 4, None)]   # 50 examples
    [13, 13, 12, 12]
    """
    indices = np.arange(len(source))
    if shuffle:
        indices = np.random.default_rng(seed).permutation(len(source))
    if num_shards is None:
        num_shards = max(1, math.ceil(_example_bytes(source, indices[:_SAMPLE]) * len(source) / shard_bytes))
    num_shards = min(num_shards, len(source))
    return [part.tolist() for part in np.array_split(indices, num_shards)]


def _example_bytes(source, sample):
    """The average encoded size of the readable examples among `sample` (1 when none is)."""
    sizes = []
    for i in sample:
        try:
            sizes.append(len(example_bytes(source.features, source.example(int(i)))))
        except BadItem:
            continue
    return (sum(sizes) / len(sizes)) if sizes else 1


def fingerprint(source, shards, shuffle, seed, compression):
    """What a resumed run must share with the interrupted one (compared as JSON).

    Args:
        source: the `Source`.
        shards: `split_examples`'s result.
        shuffle: the shuffle flag.
        seed: the shuffle seed.
        compression: the compression.

    Returns:
        A dict.
    """
    return {"source": source.description, "examples": len(source), "shards": [len(s) for s in shards],
            "shuffle": bool(shuffle), "seed": seed, "compression": compression}


def finished(prefix, resume):
    """Whether `resume` meets a dataset already converted completely (a meta file, no plan).

    Args:
        prefix: the output prefix.
        resume: the `resume` argument.

    Returns:
        A bool.
    """
    return bool(resume) and not meta_lib.exists(prefix + meta_lib.PLAN_SUFFIX) and meta_lib.exists(
        prefix + meta_lib.META_SUFFIX)


def verify_complete(prefix, progress):
    """A finished dataset met again with resume=True: check every shard against the meta file.

    Args:
        prefix: the output prefix.
        progress: print a line saying so.

    Returns:
        The `DatasetMeta`.

    Raises:
        ValueError: a shard is missing or its checksum differs.
    """
    result = meta_lib.load_meta(prefix)
    folder = os.path.dirname(prefix)
    for shard in result.shards:
        path = folder.rstrip("/") + "/" + shard["file"]
        if not meta_lib.exists(path) or sha256_of(path) != shard["sha256"]:
            raise ValueError(f"{prefix} is complete according to its meta file, but shard {path} is missing or "
                             f"its checksum differs; delete the dataset and convert again")
    if progress:
        print(f"tfring convert: {prefix} is already complete ({result.total} records, {len(result.shards)} shards, "
              f"checksums verified)", flush=True)
    return result


class ShardPlan:
    """The shards to write and the ones done, kept in `PREFIX.plan.json` (see the module docstring).

    Args:
        prefix: the output prefix.
        shards: the example indices of each shard (`split_examples`).
        fingerprint: the arguments' `fingerprint`.
        done: {str(shard index): the shard's record}, from an interrupted run.

    Example:

    >>> plan = ShardPlan.start("data/train", shards, fingerprint(...), resume=False)
    >>> plan.file_name(0)
    'data/train-00000-of-00016.tfrecord'
    """

    def __init__(self, prefix, shards, fingerprint, done=None):
        self.prefix = prefix
        self.shards = shards
        self.fingerprint = fingerprint
        self.done = dict(done or {})
        self.path = prefix + meta_lib.PLAN_SUFFIX
        self._lock = threading.Lock()

    @classmethod
    def start(cls, prefix, shards, fingerprint, resume):
        """A new plan, or with `resume` the interrupted run's; saved before any shard is written.

        Args:
            prefix: the output prefix.
            shards: the example indices of each shard.
            fingerprint: the arguments' `fingerprint`.
            resume: continue an interrupted run's plan when there is one.

        Returns:
            A `ShardPlan`.

        Raises:
            ValueError: the interrupted run had other arguments, or (without a plan to resume)
                the prefix already holds a dataset.
        """
        path = prefix + meta_lib.PLAN_SUFFIX
        if resume and meta_lib.exists(path):
            done = _done_by_interrupted_run(path, fingerprint)
        else:
            _refuse_existing(prefix)
            done = {}
        plan = cls(prefix, shards, fingerprint, done)
        plan.save()
        _remove_temporary_files(prefix)
        return plan

    def file_name(self, index):
        """The final path of shard `index`."""
        return meta_lib.shard_file_name(self.prefix, index, len(self.shards), self.fingerprint["compression"])

    def kept(self, index):
        """The interrupted run's record of shard `index` when its file is complete (checksum), else None."""
        record = self.done.get(str(index))
        final = self.file_name(index)
        # Records without "skipped" come from an older plan that lacks what the meta file needs.
        if record and "skipped" in record and meta_lib.exists(final) and sha256_of(final) == record["sha256"]:
            return record
        return None

    def commit(self, index, partial, record):
        """Gives a written shard its final name, recording its checksum first: a file under a
        final name is always in the plan (killed in between, the plan names a file that does not
        exist, and resume rewrites it).

        Args:
            index: the shard's index.
            partial: the path it was written to.
            record: its record (`shard_writer.write_shard`).
        """
        import tensorflow as tf

        with self._lock:
            self.done[str(index)] = record
            self.save()
        tf.io.gfile.rename(partial, self.file_name(index), overwrite=True)

    def save(self):
        """Writes the plan file (atomically)."""
        meta_lib.write_json_atomically(self.path, {"fingerprint": self.fingerprint, "done": self.done})

    def remove(self):
        """Deletes the plan file (the meta file is written: the conversion is complete)."""
        import tensorflow as tf

        tf.io.gfile.remove(self.path)


def _done_by_interrupted_run(path, fingerprint):
    previous = meta_lib.read_json(path)
    if previous.get("fingerprint") != fingerprint:
        raise ValueError(f"--resume: {path} was written for other arguments or another source "
                         f"(it says {previous.get('fingerprint')}); rerun with the same arguments")
    return previous.get("done", {})


def _refuse_existing(prefix):
    import tensorflow as tf

    found = tf.io.gfile.glob(prefix + "-*-of-*.tfrecord*")
    found += [prefix + suffix for suffix in (meta_lib.META_SUFFIX, meta_lib.PLAN_SUFFIX)
              if meta_lib.exists(prefix + suffix)]
    if found:
        raise ValueError(f"{prefix} already holds a dataset ({len(found)} files, e.g. "
                         f"{os.path.basename(sorted(found)[0])}); choose another output prefix or delete them first")


def _remove_temporary_files(prefix):
    import tensorflow as tf

    for stale in tf.io.gfile.glob(prefix + "-*.tmp-*"):
        tf.io.gfile.remove(stale)  # temporary files of a killed run
