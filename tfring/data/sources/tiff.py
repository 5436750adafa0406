"""Multi-band (Geo)TIFF patches like BigEarthNet's, stored as raw typed bytes with shape and dtype.

Labels come from class subfolders (`root/<class>/<patch>.tif`) or from a CSV of `file,label`
rows (`labels_file`; label an integer, or a class name that gets an index in sorted order).
"""

import csv
import os

import numpy as np

from tfring.data.encoding import check_value
from tfring.data.meta import FeatureSpec
from tfring.data.sources.base import BadItem
from tfring.data.sources.base import Source
from tfring.data.sources.base import require

TIFF_SUFFIXES = (".tif", ".tiff")


class TiffPatches(Source):
    """TIFF patches of one shape and dtype (the first readable patch sets them).

    Args:
        root: the folder.
        labels_file: optional CSV of `file,label` rows (file relative to root).
    """

    def __init__(self, root, labels_file=None):
        self._tifffile = require("tifffile", "tifffile", "TIFF patches")
        if labels_file is not None:
            self.files, self.classes = self._from_csv(root, labels_file)
        else:
            self.classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
            self.files = [(os.path.join(root, c, f), i) for i, c in enumerate(self.classes)
                          for f in sorted(os.listdir(os.path.join(root, c))) if f.lower().endswith(TIFF_SUFFIXES)]
            if not self.classes:  # no class folders: unlabelled patches
                self.files = [(os.path.join(root, f), None) for f in sorted(os.listdir(root))
                              if f.lower().endswith(TIFF_SUFFIXES)]
                self.classes = None
        if not self.files:
            raise ValueError(f"{root} holds no {'/'.join(TIFF_SUFFIXES)} files")
        self.label = None if self.files[0][1] is None else "label"
        first = None
        for path, _ in self.files:
            try:
                first = self._read(path)
                break
            except BadItem:
                continue
        if first is None:
            raise ValueError(f"none of the {len(self.files)} TIFF files under {root} can be read")
        self._spec = FeatureSpec("patch", first.dtype.name, list(first.shape), "raw")
        self.features = [self._spec] + ([FeatureSpec("label", "int64", [], "int")] if self.label else [])
        self.description = {"format": "tiff", "path": os.path.abspath(root),
                            "labels": os.path.abspath(labels_file) if labels_file else "class folders"}

    @staticmethod
    def _from_csv(root, labels_file):
        rows = []
        with open(labels_file, newline="") as f:
            for n, row in enumerate(csv.reader(f), 1):
                if not row or (n == 1 and row[0].strip().lower() in ("file", "filename", "path")):
                    continue
                if len(row) < 2:
                    raise ValueError(f"{labels_file}:{n}: expected `file,label`, got {row}")
                rows.append((os.path.join(root, row[0].strip()), row[1].strip()))
        names = sorted({label for _, label in rows if not label.lstrip("-").isdigit()})
        index = {name: i for i, name in enumerate(names)}
        files = [(path, int(label) if label.lstrip("-").isdigit() else index[label]) for path, label in rows]
        return files, (names or None)

    def _read(self, path):
        try:
            patch = np.asarray(self._tifffile.imread(path))
        except Exception as e:  # tifffile raises many types for damaged files
            raise BadItem(path, f"unreadable TIFF ({type(e).__name__}: {e})") from None
        if patch.size == 0:
            raise BadItem(path, "unreadable TIFF (no image data)")
        return patch

    def __len__(self):
        return len(self.files)

    def item_name(self, index):
        return self.files[index][0]

    def example(self, index):
        path, label = self.files[index]
        patch = self._read(path)
        try:
            check_value(self._spec, patch)
        except ValueError as e:
            raise BadItem(path, str(e)) from None
        values = {"patch": patch}
        if self.label:
            values["label"] = label
        return values
