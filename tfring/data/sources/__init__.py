"""Readers of the formats `tfring convert` accepts, behind one small interface.

A source has `features` (the `FeatureSpec`s), `label` (a feature name or None), `classes`,
`description` (a dict for the meta file), `len()`, `item_name(i)` (for messages),
`example(i)` -> {feature name: value}, raising `BadItem` for an unreadable item, and
`image_shape(values)` -> the (height, width, channels) of an example's encoded image, or None.
"""

import os

from tfring.data.sources.base import BadItem
from tfring.data.sources.base import Source

FORMATS = ("images", "numpy", "csv", "parquet", "hdf5", "tiff")
_BY_SUFFIX = {".npy": "numpy", ".npz": "numpy", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet",
              ".h5": "hdf5", ".hdf5": "hdf5"}

__all__ = ["open_source", "detect_format", "FORMATS", "BadItem", "Source"]


def detect_format(path):
    """The format of `path` from its suffix or, for a folder, the files in its subfolders.

    Args:
        path: a file or folder.

    Returns:
        One of `FORMATS`.

    Raises:
        ValueError: the format cannot be told (name it with `format=`).
    """
    from tfring.data.sources.images import IMAGE_SUFFIXES
    from tfring.data.sources.tiff import TIFF_SUFFIXES

    if os.path.isdir(path):
        suffixes = set()
        for _, _, files in os.walk(path):
            suffixes.update(os.path.splitext(f)[1].lower() for f in files)
            if len(suffixes) > 20:
                break
        if suffixes & set(TIFF_SUFFIXES):
            return "tiff"
        if suffixes & set(IMAGE_SUFFIXES):
            return "images"
        raise ValueError(f"cannot tell the format of folder {path}: it holds no images or TIFF files "
                         f"(found {sorted(suffixes) or 'nothing'}); name it with --format")
    suffix = os.path.splitext(path)[1].lower()
    if suffix in _BY_SUFFIX:
        return _BY_SUFFIX[suffix]
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file or folder: {path}")
    raise ValueError(f"unknown format of {path} (suffix {suffix or 'none'!r}); name one of {', '.join(FORMATS)} "
                     f"with --format")


def open_source(path, format="auto", label=None, datasets=None, labels_file=None):
    """Opens `path` as a source of examples.

    Args:
        path: a file or folder.
        format: "auto" or one of `FORMATS`.
        label: the feature holding the label (numpy, csv, parquet, hdf5); default "label" when
            there is one.
        datasets: hdf5: the datasets to store (default: every top-level dataset).
        labels_file: tiff: a CSV of `file,label` rows instead of class subfolders.

    Returns:
        A `Source`.

    Raises:
        ValueError: an unknown format or unusable input (named in the message).
    """
    if format == "auto":
        format = detect_format(path)
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}: use one of auto, {', '.join(FORMATS)}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file or folder: {path}")
    if format == "images":
        from tfring.data.sources.images import ImageFolder

        return ImageFolder(path)
    if format == "tiff":
        from tfring.data.sources.tiff import TiffPatches

        return TiffPatches(path, labels_file=labels_file)
    if format == "numpy":
        from tfring.data.sources.arrays import numpy_source

        return numpy_source(path, label=label)
    if format == "hdf5":
        from tfring.data.sources.arrays import hdf5_source

        return hdf5_source(path, datasets=datasets, label=label)
    from tfring.data.sources.tables import table_source

    return table_source(path, format, label=label)
