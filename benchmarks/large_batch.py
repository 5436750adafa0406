"""Large-batch training, measured: LARS, Lamb, Adasum and tuned Nesterov and Adam as the global
batch grows from B to 256·B, on the same epoch budget, 2 ranks under RingStrategy.

    .venv/bin/python benchmarks/large_batch.py [--samples 200000] [--epochs 10] [--base-batch 64]
        [--multiples 1,16,64,256] [--optimizers lars,lamb,adasum,momentum,nesterov,adam] [--seeds 0,1,2]
        [--sweep-multiple 64] [--results FILE] [--minutes M] [--report-only] [--plots DIR]

Data: mnist1d's generator (`pip install mnist1d`, offline: `make_dataset` with `--samples`
samples, 80 % to train), kept in ~/.cache/tfring-bench so that later runs reuse it. With the
default 200,000 samples the largest global batch (256 x 64 = 16,384) is a tenth of the 160,000
training rows: ten steps an epoch, far from full-batch. The model is an MLP (40 -> 256 -> 256 ->
10, ReLU), trained with every optimizer on the same schedule (a linear warm-up from 0 over the
first `--warmup-epochs`, then a cosine decay to 0), `--epochs` epochs, batches of the global
batch split over 2 ranks (`tfring run -np 2`; intra-op threads pinned to 1).

Each optimizer has a base rate at the base batch and a scaling rule (`RATES`); its "scaled rate" at
k x B is the base rate scaled by k (linear) or sqrt(k) (square root). Nesterov and Adam are swept at
every batch size (8 rates doubling from `GRID_STARTS`, plus the scaled rate); LARS, Lamb and Adasum
run at their scaled rate (no tuning beyond the rule: LARS's is the docs' recipe,
`scale_learning_rate(0.1, global_batch)`), and are swept too at `--sweep-multiple` for the
rate-robustness picture. Adasum is `RingStrategy(compression="adasum")` with momentum SGD;
"momentum" is the same optimizer with the gradients averaged, Adasum's control.

Every run appends one JSON line (its configuration, test accuracy, final training loss, seconds)
to `--results`; a configuration already there is not run again, so the study can be run in parts
(`--minutes M` stops starting runs after M minutes) and resumed. The report (printed, and two PNGs
in `--plots`) reads that file: best accuracy per optimizer and batch (mean over seeds at the best
rate, and the lowest and highest seed there), accuracy at the scaled rate, and the width of the
rates within 1 point of the best.
"""

import argparse
import json
import math
import os
import signal
import sys
import time

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.dirname(HERE))
from compression import last_result  # noqa: E402
from multihost import run_launcher  # noqa: E402

# optimizer: (base rate at the base batch, scaling rule, swept at every batch size). Nesterov's,
# momentum's and Adasum's 0.1 is the best of a 2-epoch probe at the base batch; Adam's and Lamb's is Keras' default;
# LARS's the docs' recipe, scale_learning_rate(0.1, global_batch) = 0.1 x 64 / 256 at the base batch.
RATES = {"lars": (0.025, "linear", False), "lamb": (0.001, "sqrt", False), "adasum": (0.1, "linear", False),
         "momentum": (0.1, "linear", False), "nesterov": (0.1, "linear", True), "adam": (0.001, "sqrt", True)}
# The sweeps: 8 rates doubling from the first, the same at every batch size, wide enough that
# the best rate of every optimizer and batch lies inside (a first pass with 6 rates around the
# scaled rate missed it at both ends).
GRID_STARTS = {"lars": 0.4, "lamb": 0.002, "adasum": 0.025, "momentum": 0.025, "nesterov": 0.025, "adam": 0.001}
GRID_POINTS = 8
RANKS = 2
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "tfring-bench")


def scaled_rate(optimizer, multiple):
    """The optimizer's base rate scaled to `multiple` x the base batch by its rule."""
    base, rule, _ = RATES[optimizer]
    return rounded(base * (multiple if rule == "linear" else math.sqrt(multiple)))


def rounded(rate):
    """A rate to 6 significant digits: the form it is run, stored and matched in."""
    return float(f"{rate:.6g}")


def rates(optimizer, multiple, sweep_multiple):
    """The rates `optimizer` runs at `multiple` x the base batch: its scaled rate, and the grid
    where it is swept."""
    swept = RATES[optimizer][2] or multiple == sweep_multiple
    grid = [rounded(GRID_STARTS[optimizer] * 2 ** k) for k in range(GRID_POINTS)] if swept else []
    return sorted(set(grid + [scaled_rate(optimizer, multiple)]))


def data_path(samples):
    """mnist1d with `samples` samples as an .npz in the private cache, made once (about 1 s per 5,000)."""
    import numpy as np

    os.makedirs(CACHE, mode=0o700, exist_ok=True)
    path = os.path.join(CACHE, f"mnist1d-{samples}.npz")
    if not os.path.exists(path):
        from mnist1d.data import get_dataset_args
        from mnist1d.data import make_dataset

        args = get_dataset_args()
        args.num_samples = samples
        data = make_dataset(args)  # generated from its seed; nothing is downloaded
        partial = path + f".{os.getpid()}.npz"
        np.savez(partial, x=data["x"].astype("float32"), y=data["y"].astype("int32"),
                 x_test=data["x_test"].astype("float32"), y_test=data["y_test"].astype("int32"))
        os.replace(partial, path)
    return path


def make_optimizer(name, schedule):
    """The Keras optimizer for `name` with the learning-rate schedule `schedule`."""
    import keras
    import tfring

    if name == "lars":
        return tfring.optimizers.LARS(schedule, momentum=0.9, nesterov=True)
    if name == "lamb":
        return keras.optimizers.Lamb(schedule)
    if name == "adam":
        return keras.optimizers.Adam(schedule)
    return keras.optimizers.SGD(schedule, momentum=0.9, nesterov=name == "nesterov")  # adasum, momentum: plain


def worker(args):
    """One rank: trains one configuration; rank 0 prints a RESULT line."""
    import numpy as np
    import keras
    import tfring

    strategy = tfring.RingStrategy(compression="adasum" if args.optimizer == "adasum" else None)
    keras.utils.set_random_seed(args.seed)
    data = np.load(args.data)
    batch = args.base_batch * args.multiple
    steps_per_epoch = -(-len(data["y"]) // batch)
    total, warmup = steps_per_epoch * args.epochs, steps_per_epoch * args.warmup_epochs
    schedule = keras.optimizers.schedules.CosineDecay(0.0, total - warmup, warmup_target=args.lr, warmup_steps=warmup)
    with strategy.scope():
        model = keras.Sequential([keras.Input(data["x"].shape[1:]), keras.layers.Dense(256, activation="relu"),
                                  keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
        model.compile(optimizer=make_optimizer(args.optimizer, schedule),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    start = time.perf_counter()
    history = model.fit(data["x"], data["y"], batch_size=batch, epochs=args.epochs, verbose=0)
    seconds = time.perf_counter() - start
    loss, accuracy = model.evaluate(data["x_test"], data["y_test"], batch_size=4096, verbose=0)
    if strategy.rank == 0:
        train_loss = float(history.history["loss"][-1])
        print("RESULT " + json.dumps({"accuracy": float(accuracy), "test_loss": float(loss),
                                      "train_loss": train_loss if math.isfinite(train_loss) else None,
                                      "seconds": seconds, "steps": total}))


def configurations(args):
    """Every (seed, multiple, optimizer, lr) the study runs, seeds outermost: a study cut short
    has whole seeds."""
    out = []
    for seed in args.seeds:
        for multiple in args.multiples:
            for name in args.optimizers:
                for lr in rates(name, multiple, args.sweep_multiple):
                    out.append({"seed": seed, "multiple": multiple, "optimizer": name, "lr": lr})
    return out


def key(config):
    return (config["seed"], config["multiple"], config["optimizer"], rounded(config["lr"]))


def setting(args):
    """What must match for results to be comparable: kept in every line, checked on resuming."""
    return {"samples": args.samples, "epochs": args.epochs, "warmup_epochs": args.warmup_epochs,
            "base_batch": args.base_batch, "ranks": RANKS, "model": "mlp-256-256"}


def load(path, wanted):
    """The results in `path` made with the setting `wanted`, keyed by configuration."""
    done = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                if row["setting"] == wanted:
                    done[key(row)] = row
    return done


def run_study(args):
    wanted = setting(args)
    done = load(args.results, wanted)
    todo = [c for c in configurations(args) if key(c) not in done]
    print(f"{len(done)} runs done, {len(todo)} to run", file=sys.stderr)
    data, start = data_path(args.samples), time.monotonic()
    for config in todo:
        if args.minutes and time.monotonic() - start > 60 * args.minutes:
            print(f"stopping after {args.minutes} minutes; run again to go on", file=sys.stderr)
            break
        lr = config["lr"]
        argv = [sys.executable, "-m", "tfring", "run", "-np", str(RANKS), sys.executable, HERE, "--worker",
                "--optimizer", config["optimizer"], "--multiple", str(config["multiple"]), "--lr", repr(lr),
                "--seed", str(config["seed"]), "--data", data, "--samples", str(args.samples),
                "--epochs", str(args.epochs), "--warmup-epochs", str(args.warmup_epochs),
                "--base-batch", str(args.base_batch)]
        print(f"[{time.monotonic() - start:6.0f} s] {config} lr {lr:.4g}", file=sys.stderr)
        out, err = run_launcher(argv, args.timeout)
        result = last_result(out)
        if result is None:
            print(f"  failed: {(out + err)[-2000:]}", file=sys.stderr)
            continue
        row = dict(config, factor=lr / scaled_rate(config["optimizer"], config["multiple"]), setting=wanted,
                   date=time.strftime("%Y-%m-%d"), **result)
        with open(args.results, "a") as f:
            f.write(json.dumps(row) + "\n")


def summary(rows, args):
    """{(optimizer, multiple): {lr: [accuracy per seed]}}, for the rates and seeds the study runs now."""
    table = {}
    for row in rows:
        if row["seed"] in args.seeds and rounded(row["lr"]) in rates(row["optimizer"], row["multiple"],
                                                                     args.sweep_multiple):
            table.setdefault((row["optimizer"], row["multiple"]), {}).setdefault(rounded(row["lr"]), []).append(
                row["accuracy"])
    return table


def best_and_width(cell):
    """(best mean accuracy, its rate, the rates within 1 point of it, how many rates, whether the
    best is at an end of the sweep)."""
    means = {lr: sum(accs) / len(accs) for lr, accs in cell.items()}
    best = max(means, key=means.get)
    near = sorted(lr for lr, m in means.items() if m >= means[best] - 0.01)
    at_end = len(means) > 1 and best in (min(means), max(means))
    return means[best], best, near, len(means), at_end


def report(args):
    rows = list(load(args.results, setting(args)).values())
    if not rows:
        print("no results yet")
        return
    table = summary(rows, args)
    print(f"\nmnist1d, {args.samples} samples, {args.epochs} epochs, base batch {args.base_batch}, "
          f"{RANKS} ranks; test accuracy %, mean over seeds {args.seeds} (the last column: seeds run so far)")
    print("| optimizer | batch | at the scaled rate | best (rate) | seeds at the best rate "
          "| rates within 1 point of the best | seeds |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in args.optimizers:
        for multiple in args.multiples:
            cell = table.get((name, multiple))
            if not cell:
                continue
            scaled = cell.get(scaled_rate(name, multiple))
            at_scaled = _with_diverged(scaled)
            best, lr, near, count, at_end = best_and_width(cell)
            width = ("(one rate)" if count == 1 else f"{lr:.3g} only (of {count} rates)" if len(near) == 1
                     else f"{near[0]:.3g}-{near[-1]:.3g}: {len(near)} of {count} rates, {near[-1] / near[0]:.0f}x")
            seeds = min(len(accs) for accs in cell.values())
            spread = f"{100 * min(cell[lr]):.2f}-{100 * max(cell[lr]):.2f}"
            print(f"| {name} | {multiple}x ({multiple * args.base_batch}) | {at_scaled} | {100 * best:.2f} "
                  f"({lr:.3g}{', end of sweep' if at_end else ''}) | {spread} | {width} | {seeds} |")
    print_around_best(table, args)
    plot(table, args)


def print_around_best(table, args):
    """At the sweep's batch, each optimizer's accuracy at rates 1/4x to 4x its best: how far the
    rate can miss before accuracy goes."""
    factors = [0.25, 0.5, 1, 2, 4]
    print(f"\nAt {args.sweep_multiple}x ({args.sweep_multiple * args.base_batch}): test accuracy % (mean over "
          "seeds) at rates around each optimizer's best (chance: 10 %)")
    print("| optimizer | best rate | " + " | ".join(f"{f:g}x" for f in factors) + " |")
    print("|---|---:|" + "---:|" * len(factors))
    for name in args.optimizers:
        cell = table.get((name, args.sweep_multiple), {})
        if len(cell) < 2:
            continue
        _, lr, _, _, _ = best_and_width(cell)
        near = [cell.get(rounded(lr * f)) for f in factors]
        print(f"| {name} | {lr:.3g} | " + " | ".join(_with_diverged(a) for a in near) + " |")


def _with_diverged(accuracies):
    """The mean accuracy %, and how many seeds ended at chance (below 20 %) when some but not all did."""
    if not accuracies:
        return ""
    diverged = sum(a < 0.2 for a in accuracies)
    mean = f"{100 * sum(accuracies) / len(accuracies):.2f}"
    return f"{mean} ({diverged} of {len(accuracies)} at chance)" if 0 < diverged < len(accuracies) else mean


def plot(table, args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    os.makedirs(args.plots, exist_ok=True)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name in args.optimizers:
        cell = table.get((name, args.sweep_multiple), {})
        if len(cell) > 1:
            lrs = sorted(cell)
            accs = [100 * np.array(cell[lr]) for lr in lrs]
            ax.errorbar(lrs, [a.mean() for a in accs], marker="o", capsize=3, label=name,
                        yerr=[[a.mean() - a.min() for a in accs], [a.max() - a.mean() for a in accs]])
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("test accuracy % (mean, min-max of seeds)")
    ax.set_title(f"mnist1d, batch {args.sweep_multiple * args.base_batch} ({args.sweep_multiple}x), "
                 f"{args.epochs} epochs")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(args.plots, "large_batch_rates.png"), dpi=110)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name in args.optimizers:
        points = [(m, table[(name, m)][scaled_rate(name, m)]) for m in args.multiples
                  if scaled_rate(name, m) in table.get((name, m), {})]
        if points:
            line, = ax.plot([m * args.base_batch for m, _ in points], [100 * np.mean(a) for _, a in points],
                            marker="o", label=f"{name} ({RATES[name][1]} rule)")
        tuned = [(m, best_and_width(table[(name, m)])[0]) for m in args.multiples
                 if RATES[name][2] and (name, m) in table]
        if points and tuned:
            ax.plot([m * args.base_batch for m, _ in tuned], [100 * a for _, a in tuned], marker="s",
                    linestyle="--", color=line.get_color(), label=f"{name}, best rate of the sweep")
    ax.set_xscale("log", base=2)
    ax.set_xticks([m * args.base_batch for m in args.multiples], [str(m * args.base_batch) for m in args.multiples])
    ax.set_xlabel("global batch")
    ax.set_ylabel("test accuracy % (mean of seeds)")
    ax.set_title(f"mnist1d, {args.epochs} epochs: each optimizer at its scaled rate\n"
                 "(dashed: the swept optimizers at their best rate per batch)", fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(args.plots, "large_batch_sizes.png"), dpi=110)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200000, help="mnist1d samples, 80 %% to train (200000)")
    parser.add_argument("--epochs", type=int, default=10, help="epochs of every run (10)")
    parser.add_argument("--warmup-epochs", type=int, default=2, help="linear warm-up from 0, in epochs (2)")
    parser.add_argument("--base-batch", type=int, default=64, help="the base global batch B (64)")
    parser.add_argument("--multiples", default="1,16,64,256", help="global batches as multiples of B")
    parser.add_argument("--optimizers", default=",".join(RATES))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--sweep-multiple", type=int, default=64, help="where every optimizer is swept (64)")
    parser.add_argument("--results", default=os.path.join(os.path.dirname(HERE), "large_batch.jsonl"))
    parser.add_argument("--plots", default=os.path.join(os.path.dirname(os.path.dirname(HERE)), "docs", "images"))
    parser.add_argument("--minutes", type=float, help="start no run after this many minutes")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run (1800)")
    parser.add_argument("--report-only", action="store_true", help="print the report of the results so far")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--optimizer", help=argparse.SUPPRESS)
    parser.add_argument("--multiple", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--lr", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.multiples = [int(m) for m in args.multiples.split(",")]
    args.optimizers = args.optimizers.split(",")
    args.seeds = [int(s) for s in args.seeds.split(",")]
    bad = [o for o in args.optimizers if o not in RATES]
    if bad:
        parser.error(f"unknown optimizers {bad}: choose from {','.join(RATES)}")
    if not 0 <= args.warmup_epochs < args.epochs:
        parser.error("--warmup-epochs must be at least 0 and fewer than --epochs")
    return args


def main():
    args = parse_args()
    if args.worker:
        worker(args)
        return 0
    sys.stdout.reconfigure(line_buffering=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not args.report_only:
        run_study(args)
    report(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
