"""tfring on Spark: `tfring.spark.run(train_fn, num_proc=N)` trains in N barrier tasks of a Spark job.

Databricks retired HorovodRunner and points to tf.distribute, whose multi-worker `fit` is broken on
Keras 3; this is the replacement. Needs PySpark (`pip install pyspark`) and a Java runtime.
"""

from tfring.spark.runner import run

__all__ = ["run"]
