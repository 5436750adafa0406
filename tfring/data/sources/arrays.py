"""Arrays whose first dimension indexes examples: `.npy` / `.npz` files and HDF5 datasets."""

import os

import numpy as np

from tfring.data.encoding import spec_for
from tfring.data.sources.base import Source
from tfring.data.sources.base import require


class ArraySource(Source):
    """Examples are the rows of named arrays that share their first dimension.

    Args:
        arrays: {name: array-like with a first dimension} (NumPy arrays, memory maps, h5py datasets).
        description: for the meta file.
        label: the label's name; default "label" when present.
    """

    def __init__(self, arrays, description, label=None):
        if not arrays:
            raise ValueError(f"{description.get('path')}: no arrays to store")
        lengths = {name: (a.shape[0] if len(a.shape) else None) for name, a in arrays.items()}
        if None in lengths.values():
            scalar = [n for n, length in lengths.items() if length is None]
            raise ValueError(f"{description.get('path')}: arrays {scalar} are scalars; every array needs a first "
                             f"dimension that indexes the examples")
        if len(set(lengths.values())) > 1:
            raise ValueError(f"{description.get('path')}: the arrays' first dimensions differ, so they are not one "
                             f"example per row: {lengths}")
        if label is not None and label not in arrays:
            raise ValueError(f"{description.get('path')}: no array named {label!r} for the label "
                             f"(arrays: {sorted(arrays)})")
        self.arrays = arrays
        self._length = next(iter(lengths.values()))
        self.label = label if label is not None else ("label" if "label" in arrays else None)
        self.features = [spec_for(name, np.asarray(a[0])) for name, a in arrays.items()] if self._length else []
        if not self._length:
            raise ValueError(f"{description.get('path')}: the arrays hold no examples")
        self.description = description

    def __len__(self):
        return self._length

    def item_name(self, index):
        return f"{self.description.get('path')} row {index}"

    def example(self, index):
        return {name: np.asarray(a[index]) for name, a in self.arrays.items()}


def numpy_source(path, label=None):
    """A `.npy` file (one array named after the file) or a `.npz` file (arrays by key).

    Args:
        path: the file.
        label: the label array's name.

    Returns:
        An `ArraySource`.
    """
    description = {"format": "numpy", "path": os.path.abspath(path)}
    if path.endswith(".npz"):
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    else:
        arrays = {os.path.splitext(os.path.basename(path))[0]: np.load(path, mmap_mode="r", allow_pickle=False)}
    return ArraySource(arrays, description, label=label)


def hdf5_source(path, datasets=None, label=None):
    """Chosen datasets of an HDF5 file (default: every top-level dataset).

    Args:
        path: the file.
        datasets: dataset paths inside the file.
        label: the label dataset's name.

    Returns:
        An `ArraySource` (the file stays open while it is used).
    """
    h5py = require("h5py", "h5py", "HDF5 files")
    f = h5py.File(path, "r")
    names = list(datasets) if datasets else [k for k in f.keys() if isinstance(f[k], h5py.Dataset)]
    missing = [n for n in names if n not in f or not isinstance(f[n], h5py.Dataset)]
    if missing:
        raise ValueError(f"{path}: no datasets {missing} (it has {sorted(f.keys())})")
    arrays = {n.strip("/").replace("/", "_"): f[n] for n in names}
    return ArraySource(arrays, {"format": "hdf5", "path": os.path.abspath(path), "datasets": names}, label=label)
