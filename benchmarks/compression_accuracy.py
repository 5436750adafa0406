"""What gradient compression costs in accuracy: each compressor's final test accuracy beside exact
training, with the same epochs and schedule, over several seeds; and loss against wall-clock time.

    .venv/bin/python benchmarks/compression_accuracy.py [--datasets mnist1d,digits]
        [--compressors exact,fp16,powersgd4,onebit] [--seeds 0,1,2] [--np 2] [--epochs N]
        [--samples 20000] [--link-mbit 1000] [--plot FILE] [--json FILE]

Data made offline: mnist1d's generator (`pip install mnist1d`: 1-D digits, `--samples` of them,
80 % to train) and scikit-learn's digits (1,797 8x8 images, 80 % to train). The model is an MLP
with two hidden layers of 1024 (about 1.1 M parameters on mnist1d), trained with SGD (momentum
0.9, learning rate 0.05 with a 2-epoch warm-up and a cosine decay) on a global batch of 256, each
seed giving the same initial weights and batches to every compressor, for 20 epochs on mnist1d
(1,260 steps) and 60 on digits (360 steps: digits is 11 times smaller; `--epochs` sets both).
Every job runs on `--np` ranks with `tfring run`: on this host, or with `--link-mbit R` across two
emulated hosts whose links are shaped to R Mbit/s (root and openssh-server needed), so that
wall-clock time includes what the link costs. Compressors warm up exactly for `--warmup-fraction` of the steps (10 %).

Printed: per dataset and compressor, the final test accuracy (mean and spread over the seeds), its
difference from exact in points, and the seconds a run took; the plot (PNG) shows the training loss
of the first seed against wall-clock seconds, one panel per dataset.
"""

import argparse
import json
import os
import shlex
import signal
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.dirname(HERE))
from compression import COMPRESSORS  # noqa: E402
from compression import compressor  # noqa: E402
from compression import last_result  # noqa: E402
from multihost import WORKER_ENV  # noqa: E402
from multihost import run_launcher  # noqa: E402

BATCH = 256
EPOCHS = {"mnist1d": 20, "digits": 60}  # 1,260 and 360 steps


def make_data(dataset, samples, folder):
    """Writes `dataset`'s train and test arrays to `folder`/`dataset`.npz; returns the path."""
    import numpy as np

    if dataset == "mnist1d":
        from mnist1d.data import get_dataset_args
        from mnist1d.data import make_dataset

        args = get_dataset_args()
        args.num_samples = samples
        data = make_dataset(args)  # generated from its seed; nothing is downloaded
        x, y, x_test, y_test = data["x"], data["y"], data["x_test"], data["y_test"]
    elif dataset == "digits":
        from sklearn.datasets import load_digits

        digits = load_digits()
        order = np.random.default_rng(0).permutation(len(digits.target))
        cut = int(0.8 * len(order))
        x, y = digits.data[order[:cut]] / 16.0, digits.target[order[:cut]]
        x_test, y_test = digits.data[order[cut:]] / 16.0, digits.target[order[cut:]]
    else:
        raise ValueError(f"unknown dataset {dataset!r}")
    path = os.path.join(folder, f"{dataset}.npz")
    np.savez(path, x=x.astype("float32"), y=y.astype("int32"), x_test=x_test.astype("float32"),
             y_test=y_test.astype("int32"))
    return path


def worker(args):
    """One rank: trains, and rank 0 prints a RESULT line (test accuracy, loss against time)."""
    import numpy as np
    import keras
    import tfring

    data = np.load(args.data)
    steps_per_epoch = -(-len(data["y"]) // BATCH)
    total = steps_per_epoch * args.epochs
    strategy = tfring.RingStrategy(compression=compressor(args.worker, int(total * args.warmup_fraction)))
    keras.utils.set_random_seed(args.seed)
    schedule = keras.optimizers.schedules.CosineDecay(0.0, total - 2 * steps_per_epoch, warmup_target=0.05,
                                                      warmup_steps=2 * steps_per_epoch)
    with strategy.scope():
        model = keras.Sequential([keras.Input(data["x"].shape[1:]), keras.layers.Dense(1024, activation="relu"),
                                  keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(10)])
        model.compile(optimizer=keras.optimizers.SGD(schedule, momentum=0.9),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    curve, start = [], time.perf_counter()

    class Curve(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            curve.append((time.perf_counter() - start, float(logs["loss"])))

    model.fit(data["x"], data["y"], batch_size=BATCH, epochs=args.epochs, verbose=0, callbacks=[Curve()])
    _, accuracy = model.evaluate(data["x_test"], data["y_test"], batch_size=BATCH, verbose=0)
    if strategy.rank == 0:
        print("RESULT " + json.dumps({"accuracy": float(accuracy), "seconds": curve[-1][0], "curve": curve,
                                      "params": int(model.count_params())}))


def launcher_argv(args, name, seed, data, hosts, epochs):
    exports = [arg for k, v in WORKER_ENV.items() for arg in ("-x", f"{k}={v}")]
    where = ["-np", str(args.np)] if hosts is None else [
        "-H", ",".join(f"{h}:{args.np // 2}" for h in hosts.names[:2]), "--rsh", shlex.join(hosts.ssh_command)]
    return ([sys.executable, "-m", "tfring", "run"] + where + exports +
            [sys.executable, HERE, "--worker", name, "--seed", str(seed), "--data", data, "--epochs", str(epochs),
             "--warmup-fraction", str(args.warmup_fraction)])


def run(argv, timeout):
    out, err = run_launcher(argv, timeout)
    result = last_result(out)
    return (result, "") if result else (None, (out + err)[-2500:])


def print_table(dataset, results, compressors, epochs):
    import numpy as np

    exact = np.mean([r["accuracy"] for r in results.get("exact", []) if r]) if results.get("exact") else None
    print(f"\n{dataset}, {epochs} epochs: final test accuracy over {len(next(iter(results.values())))} seeds")
    print("| compressor | accuracy % (mean) | spread (min-max) | vs exact (points) | seconds per run |")
    print("|---|---:|---:|---:|---:|")
    for name in compressors:
        runs = [r for r in results.get(name, []) if r]
        if not runs:
            print(f"| {name} | failed | | | |")
            continue
        acc = 100 * np.array([r["accuracy"] for r in runs])
        delta = f"{acc.mean() - 100 * exact:+.2f}" if exact is not None else ""
        print(f"| {name} | {acc.mean():.2f} | {acc.min():.2f}-{acc.max():.2f} | {delta} | "
              f"{np.median([r['seconds'] for r in runs]):.1f} |")


def plot(everything, path, link):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(everything), figsize=(6 * len(everything), 4), squeeze=False)
    for ax, (dataset, results) in zip(axes[0], everything.items()):
        for name, runs in results.items():
            if runs and runs[0]:
                t, loss = zip(*runs[0]["curve"])
                ax.plot(t, loss, marker=".", label=name)
        ax.set_title(f"{dataset}: training loss, seed 0" + (f", {link:g} Mbit/s links" if link else ""))
        ax.set_xlabel("wall-clock seconds")
        ax.set_ylabel("loss")
        ax.set_yscale("log")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main_bench(args):
    sys.stdout.reconfigure(line_buffering=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    everything, start = {}, time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        hosts = None
        if args.link_mbit:
            from tfring_dev.emulated_hosts import EmulatedHosts

            hosts = EmulatedHosts(2, rate_mbit=args.link_mbit).__enter__()
        try:
            for dataset in args.datasets:
                data = make_data(dataset, args.samples, folder)
                epochs = args.epochs or EPOCHS[dataset]
                results = everything.setdefault(dataset, {})
                for seed in args.seeds:  # seeds outermost: a slow spell spreads over every compressor
                    for name in args.compressors:
                        print(f"[{time.monotonic() - start:6.0f} s] {dataset} {name} seed {seed}", file=sys.stderr)
                        result, why = run(launcher_argv(args, name, seed, data, hosts, epochs), args.timeout)
                        if result is None:
                            print(f"  failed: {why}", file=sys.stderr)
                        results.setdefault(name, []).append(result)
                print_table(dataset, results, args.compressors, epochs)
        finally:
            if hosts is not None:
                hosts.__exit__(None, None, None)
    print(f"\n(measured in {time.monotonic() - start:.0f} s; {args.np} ranks"
          + (f" on two emulated hosts at {args.link_mbit:g} Mbit/s)" if args.link_mbit else " on this host)"))
    plot(everything, args.plot, args.link_mbit)
    with open(args.json, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d"), "args": {k: v for k, v in vars(args).items() if k != "worker"},
                   "results": everything}, f, indent=1)
    return 0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="mnist1d,digits")
    parser.add_argument("--compressors", default="exact,fp16,powersgd4,onebit", help=f"of {','.join(COMPRESSORS)}")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--np", type=int, default=2, help="ranks (default 2; even with --link-mbit)")
    parser.add_argument("--epochs", type=int, help="epochs on every dataset (default: 20 on mnist1d, 60 on digits)")
    parser.add_argument("--samples", type=int, default=20000, help="mnist1d samples to generate (default 20000)")
    parser.add_argument("--link-mbit", type=float, help="run across two emulated hosts with links of this rate")
    parser.add_argument("--warmup-fraction", type=float, default=0.1,
                        help="share of the steps compressors run exactly first (default 0.1)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per job (default 900)")
    parser.add_argument("--plot", default=os.path.join(os.path.dirname(HERE), "compression_accuracy.png"))
    parser.add_argument("--json", default=os.path.join(os.path.dirname(HERE), "compression_accuracy.json"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.datasets = args.datasets.split(",")
    args.compressors = args.compressors.split(",")
    args.seeds = [int(s) for s in args.seeds.split(",")]
    bad = [c for c in args.compressors if c not in COMPRESSORS]
    if bad:
        parser.error(f"unknown compressors {bad}")
    if args.link_mbit and args.np % 2:
        parser.error("--np must be even with --link-mbit (half the ranks on each host)")
    return args


def main():
    args = parse_args()
    if args.worker:
        worker(args)
        return 0
    return main_bench(args)


if __name__ == "__main__":
    sys.exit(main())
