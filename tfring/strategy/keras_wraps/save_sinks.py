"""What Keras writes a save into under RingStrategy: a file in memory, on every rank.

Every rank runs Keras' saving code (see `checkpointing`), but none lets Keras write to a disk:
each passes Keras an in-memory file in place of the path, and only rank 0 then writes the bytes
out. Two reasons:

- ranks > 0 throw their copy away, so it costs no disk at all (it used to be written in full to
  `$TMPDIR`, and a small or full `$TMPDIR` failed the job although the target had room);
- HDF5 must never write to a disk that can fill: once a write failed, h5py cannot release the file
  and the process ends in SIGSEGV. In memory, Keras' walk through the model (where a save's
  collectives happen) runs to its end on every rank whatever the disk does, so the ranks stay in
  step, and rank 0's write of the finished bytes is plain Python I/O, whose errors are ordinary
  `OSError`s.

The in-memory file's `str()` is the user's path: Keras checks the name's extension on it and names
it in its errors. The cost is memory while a save runs: every rank holds the HDF5 weights file
(as Keras' own `.keras` save already does), and rank 0 also the finished `.keras` archive until it
is written; the archive of ranks > 0 is counted, not kept.
"""

import io
import os
import zipfile

import h5py


class MemoryFile(io.BytesIO):
    """An in-memory file that Keras takes for `path`: a `.weights.h5` or `.keras` save rank 0 keeps.

    Args:
        path: the user's path, returned by `str()`.

    Example:

    >>> target = MemoryFile("/ckpt/model.weights.h5")
    >>> model.save_weights(target)        # Keras checks str(target)'s extension
    >>> len(contents(target)) > 0
    True
    """

    def __init__(self, path):
        super().__init__()
        self.path = path

    def __str__(self):
        return self.path


class DiscardedFile(io.RawIOBase):
    """A write-only file that keeps nothing: the zip archive of a `.keras` save rank > 0 throws away.

    Args:
        path: the user's path, returned by `str()`.

    Example:

    >>> target = DiscardedFile("/ckpt/model.keras")
    >>> target.write(b"abc"), target.tell()
    (3, 3)
    """

    def __init__(self, path):
        super().__init__()
        self.path = path
        self._written = 0

    def __str__(self):
        return self.path

    def writable(self):
        return True

    def write(self, data):
        size = memoryview(data).nbytes
        self._written += size
        return size

    def tell(self):
        return self._written


class MemoryH5File(h5py.File):
    """A legacy `.h5` model file in memory: Keras writes such a save into an open `h5py.File` as is.

    Args:
        path: the user's path, returned by `str()`.

    Example:

    >>> target = MemoryH5File("/ckpt/model.h5")
    >>> model.save(target)
    >>> contents(target)[:4].tobytes()
    b'\\x89HDF'
    """

    def __init__(self, path):
        buffer = io.BytesIO()
        super().__init__(buffer, "w")
        self._tfring_path, self._tfring_buffer = path, buffer

    def __str__(self):
        return self._tfring_path


def for_save(method, path, keep, zipped=None):
    """The in-memory file to give Keras in place of `path`.

    Args:
        method: `"save"` or `"save_weights"`, the Keras method saving.
        path: the user's path (absolute).
        keep: whether the bytes are wanted (rank 0) or thrown away.
        zipped: `Model.save`'s `zipped` argument; False saves a folder (Keras' layout, which rank 0
            unpacks from a `.keras` archive).

    Returns:
        A `MemoryFile`, `MemoryH5File` or `DiscardedFile`.

    Raises:
        ValueError: `zipped=False` with a `.keras` name (Keras' own refusal, which an in-memory
            file would bypass).

    Example:

    >>> type(for_save("save_weights", "/ckpt/m.weights.h5", keep=False)).__name__
    'MemoryFile'
    """
    if method == "save_weights":
        return MemoryFile(path)
    if zipped is False and path.endswith(".keras"):
        raise ValueError("When using `zipped=False`, the `filepath` argument should not end in `.keras`. "
                         f"Received: filepath={path}")
    if zipped is not False and path.endswith((".h5", ".hdf5")):
        return MemoryH5File(path)
    return MemoryFile(path) if keep else DiscardedFile(path)


def contents(target):
    """The bytes Keras saved into `target` (a `MemoryFile` or `MemoryH5File`), as a memoryview.

    Example:

    >>> with contents(target) as data:
    ...     f.write(data)
    """
    if isinstance(target, MemoryH5File):
        buffer = target._tfring_buffer
        target.close()  # HDF5 writes what it still holds
        return buffer.getbuffer()
    return target.getbuffer()


def write_folder(target, folder):
    """Unpacks the `.keras` archive in `target` into the new `folder`: Keras' layout of `zipped=False`.

    Args:
        target: the `MemoryFile` a `.keras` save went into.
        folder: a folder that does not exist yet.

    Example:

    >>> write_folder(target, "/ckpt/.partial-model")
    """
    os.mkdir(folder)
    os.mkdir(os.path.join(folder, "assets"))
    with zipfile.ZipFile(target) as archive:
        archive.extractall(folder)


def release(target):
    """Frees `target`'s memory (closing an HDF5 file Keras left open after an error).

    Example:

    >>> release(target)
    """
    try:
        target.close()
    except Exception:  # an h5py file already closed, or failing in memory: nothing to keep
        pass
    buffer = getattr(target, "_tfring_buffer", None)
    if buffer is not None:
        buffer.close()
