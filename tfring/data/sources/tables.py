"""CSV and Parquet tables: one feature per column, typed (read with pyarrow)."""

import os

import numpy as np

from tfring.data.encoding import spec_for
from tfring.data.sources.arrays import ArraySource
from tfring.data.sources.base import require


def table_source(path, format, label=None):
    """A table whose rows are examples.

    Args:
        path: the .csv or .parquet file.
        format: "csv" or "parquet".
        label: the label column; default "label" when there is one.

    Returns:
        An `ArraySource` over the columns.

    Raises:
        ValueError: a column with missing values or a type that cannot be stored.
    """
    if format == "csv":
        pa_csv = require("pyarrow.csv", "pyarrow", "CSV tables")
        try:
            table = pa_csv.read_csv(path)
        except Exception as e:  # pyarrow's ArrowInvalid names the line
            raise ValueError(f"{path}: not a readable CSV table: {e}") from None
    else:
        pq = require("pyarrow.parquet", "pyarrow", "Parquet tables")
        try:
            table = pq.read_table(path)
        except Exception as e:
            raise ValueError(f"{path}: not a readable Parquet file: {e}") from None
    arrays = {}
    for name, column in zip(table.column_names, table.columns):
        if column.null_count:
            first = next(i for i, v in enumerate(column.is_null().to_pylist()) if v)
            raise ValueError(f"{path}: column {name!r} has {column.null_count} missing values (first in row {first})")
        values = column.to_numpy(zero_copy_only=False)
        if values.dtype == object:
            values = np.array([v.encode() if isinstance(v, str) else v for v in values], dtype=object)
            if not all(isinstance(v, bytes) for v in values):
                raise ValueError(f"{path}: column {name!r} is of type {column.type}, which cannot be stored")
        arrays[name] = values
    source = _TableSource(arrays, {"format": format, "path": os.path.abspath(path),
                                   "columns": {n: str(t) for n, t in zip(table.column_names, table.schema.types)}},
                          label)
    return source


class _TableSource(ArraySource):
    def __init__(self, arrays, description, label):
        super().__init__(arrays, description, label=label)
        self.features = [spec_for(name, a[0] if a.dtype != object else bytes(a[0])) for name, a in arrays.items()]

    def example(self, index):
        return {name: (a[index] if a.dtype == object else np.asarray(a[index])) for name, a in self.arrays.items()}
