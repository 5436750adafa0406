"""Datasets to sharded TFRecords (`tfring convert`, `write_tfrecords`) and the input pipeline that
reads them (`tfrecord_dataset`), and node-local staging of a converted dataset (`stage`)."""

__all__ = ["write_tfrecords", "tfrecord_dataset", "load_meta", "stage"]


def __getattr__(name):
    # These import TensorFlow: load them only when asked for.
    if name == "write_tfrecords":
        from tfring.data.writer import write_tfrecords

        return write_tfrecords
    if name == "tfrecord_dataset":
        from tfring.data.pipeline import tfrecord_dataset

        return tfrecord_dataset
    if name == "stage":
        from tfring.data.staging import stage

        return stage
    if name == "load_meta":
        from tfring.data.meta import load_meta

        return load_meta
    raise AttributeError(f"module 'tfring.data' has no attribute {name!r}")
