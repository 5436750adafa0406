"""Train a Keras model on Spark with tfring: each barrier task is a rank (as HorovodRunner was).

Run it where PySpark and a Java runtime are installed (`make test-spark` installs both):

    PYSPARK_PYTHON=$(which python) python examples/spark_train.py            # local[2]
    spark-submit --master spark://host:7077 examples/spark_train.py          # a cluster (its master wins)

On Databricks, paste `train` and the `tfring.spark.run` line into a notebook cell; the cluster's
executors need tfring installed (a cluster library), like the driver.
"""

from pyspark import SparkConf
from pyspark.sql import SparkSession

import tfring.spark


def train(epochs, batch_size):
    # Runs on every rank, in a fresh Python process per Spark task.
    import keras
    import numpy as np
    import tfring

    rng = np.random.default_rng(0)  # the same data on every rank: each keeps its share of every global batch
    x = rng.standard_normal((1024, 8)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int32")
    strategy = tfring.RingStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"),
                                  keras.layers.Dense(2)])
        model.compile(optimizer=keras.optimizers.Adam(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    history = model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=2 if tfring.is_chief() else 0)
    model.save("spark_model.keras")  # on every rank; rank 0 writes (the driver's working directory in local mode)
    return history.history["accuracy"][-1]


if __name__ == "__main__":
    builder = SparkSession.builder.appName("tfring-example")
    if not SparkConf().contains("spark.master"):  # plain `python`: a local Spark; spark-submit's master otherwise
        builder = builder.master("local[2]")
    spark = builder.getOrCreate()
    accuracy = tfring.spark.run(train, num_proc=2, args=(3, 64), env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    print(f"final training accuracy (rank 0): {accuracy:.3f}")
    spark.stop()
