"""model.fit throughput: RingStrategy on 1 and 2 ranks beside MirroredStrategy and MWMS, in one run.

    python benchmarks/fit_scaling.py [--rounds 5] [--json results.json]

A small CNN on synthetic 32x32x3 images, 64 images per replica per step (weak scaling), one
intra-op thread per process. Peers: `tf.distribute.MirroredStrategy` on 2 logical CPU devices in
one process (its model.fit works) and `MultiWorkerMirroredStrategy` with 2 worker processes
through a custom `strategy.run` loop (its model.fit crashes with Keras 3). Beside them, two
independent processes without a strategy, run at once, show what the cores give two processes
at all (the ceiling for 2 ranks when ranks outnumber free cores). The runs are interleaved
over rounds and the medians printed; scaling efficiency = images/s(2 ranks) / (2 x images/s(1 rank)).
"""

import argparse
import json
import os
import subprocess
import sys
import time

from tfring.launch.addresses import free_port

HERE = os.path.abspath(__file__)
PER_REPLICA = 64
STEPS = 40


def _model(keras):
    return keras.Sequential([
        keras.Input((32, 32, 3)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10),
    ])


def _data(replicas):
    import numpy as np

    n = PER_REPLICA * replicas * STEPS
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 32, 32, 3)).astype("float32"), rng.integers(0, 10, n).astype("int32")


def _fit_images_per_second(strategy, replicas, rank):
    import keras
    import tensorflow as tf

    x, y = _data(replicas)
    with strategy.scope():
        model = _model(keras)
        model.compile(optimizer=keras.optimizers.SGD(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(PER_REPLICA * replicas).prefetch(2).cache()
    model.fit(ds, epochs=1, verbose=0)  # warm-up: tracing, caches
    start = time.perf_counter()
    model.fit(ds, epochs=2, verbose=0)
    return 2 * len(x) / (time.perf_counter() - start)


def worker(kind):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    if kind == "ring":
        import tfring

        strategy = tfring.RingStrategy()
        ips = _fit_images_per_second(strategy, strategy.size, strategy.rank)
        if strategy.rank == 0:
            print("RESULT " + json.dumps({"peer": f"tfring RingStrategy, {strategy.size} rank(s)", "ips": ips}))
    elif kind == "alone":
        # No strategy and no communication: what this machine gives two processes that share it.
        ips = _fit_images_per_second(tf.distribute.get_strategy(), 1, 0)
        print("RESULT " + json.dumps({"peer": "one process alone, no strategy", "ips": ips}))
    elif kind == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        ips = _fit_images_per_second(strategy, 2, 0)
        print("RESULT " + json.dumps({"peer": "MirroredStrategy, 2 logical CPUs, 1 process", "ips": ips}))
    elif kind == "mwms":
        import keras

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        rank = strategy.cluster_resolver.task_id
        x, y = _data(2)
        with strategy.scope():
            model = _model(keras)
            opt = keras.optimizers.SGD(0.01)
            loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        ds = strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices((x, y)).batch(PER_REPLICA * 2).cache())

        @tf.function
        def step(batch):
            def replica(xb, yb):
                with tf.GradientTape() as tape:
                    loss = tf.nn.compute_average_loss(loss_fn(yb, model(xb, training=True)),
                                                      global_batch_size=PER_REPLICA * 2)
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
                return loss
            return strategy.reduce("SUM", strategy.run(replica, args=batch), axis=None)

        def epoch():
            for batch in ds:
                step(batch)

        epoch()
        start = time.perf_counter()
        epoch()
        epoch()
        ips = 2 * len(x) / (time.perf_counter() - start)
        if rank == 0:
            print("RESULT " + json.dumps({"peer": "MultiWorkerMirroredStrategy, 2 workers (custom loop)", "ips": ips}))



def _env(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1", TF_NUM_INTRAOP_THREADS="1")
    env.update(extra)
    return env


def _result(stdout):
    for line in stdout.splitlines():
        line = line.split("] ", 1)[-1] if line.startswith("[") else line
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return None


def _run(key):
    if key.startswith("ring"):
        cmd = [sys.executable, "-m", "tfring", "run", "-np", key[-1], sys.executable, HERE, "--worker", "ring"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=1200)
        return _result(proc.stdout), proc.stderr
    if key == "alone2":
        # The ceiling for 2 ranks here: two independent processes at once, their rates summed.
        procs = [subprocess.Popen([sys.executable, HERE, "--worker", "alone"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=_env()) for _ in range(2)]
        outs = [p.communicate(timeout=1200) for p in procs]
        results = [_result(out) for out, _ in outs]
        if None in results:
            return None, outs[0][1] + outs[1][1]
        return {"peer": "2 independent processes, no communication (sum)",
                "ips": sum(r["ips"] for r in results)}, ""
    if key == "mirrored":
        proc = subprocess.run([sys.executable, HERE, "--worker", "mirrored"], capture_output=True, text=True,
                              env=_env(), timeout=1200)
        return _result(proc.stdout), proc.stderr
    ports = [free_port(), free_port()]
    procs = [subprocess.Popen([sys.executable, HERE, "--worker", "mwms"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=_env(TF_CONFIG=json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                                             "task": {"type": "worker", "index": i}})))
             for i in range(2)]
    outs = [p.communicate(timeout=1200) for p in procs]
    return _result(outs[0][0]), outs[0][1] + outs[1][1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=["ring", "alone", "mirrored", "mwms"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default="benchmarks/fit_scaling_results.json")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return 0
    if args.rounds < 5:
        parser.error("--rounds must be at least 5 (this machine is noisy)")
    import numpy as np

    keys = ["ring1", "ring2", "alone2", "mirrored", "mwms"]
    samples, labels = {k: [] for k in keys}, {}
    for _ in range(args.rounds):
        for key in keys:
            result, err = _run(key)
            if result is None:
                print(f"{key} failed:\n{err[-2000:]}", file=sys.stderr)
                continue
            samples[key].append(result["ips"])
            labels[key] = result["peer"]
    med = {k: float(np.median(v)) for k, v in samples.items() if v}
    print(f"\nmodel.fit throughput, small CNN, {PER_REPLICA} images per replica per step, "
          f"{os.cpu_count()} cores, medians of {args.rounds} interleaved rounds")
    print(f"| {'peer':<52} | {'images/s':>9} | {'x tfring 2 ranks':>16} |")
    print(f"|{'-' * 54}|{'-' * 10}:|{'-' * 17}:|")
    for k in keys:
        if k in med:
            ratio = med[k] / med["ring2"] if "ring2" in med else float("nan")
            print(f"| {labels[k]:<52} | {med[k]:>9.1f} | {ratio:>16.2f} |")
    if "ring1" in med and "ring2" in med:
        print(f"scaling efficiency, 1 -> 2 ranks: {med['ring2'] / (2 * med['ring1']):.1%}")
    if "alone2" in med and "ring2" in med:
        print(f"2 ranks vs 2 independent processes on the same cores: {med['ring2'] / med['alone2']:.1%}")
    with open(args.json, "w") as f:
        json.dump({"samples": samples, "medians": med, "labels": labels}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
