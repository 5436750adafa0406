"""Gradient compression across emulated hosts: bytes on the wire, allreduce time and step time per
compressor, side by side, in one run.

    sudo .venv/bin/python benchmarks/compression.py [--rates 1000,10000] [--layouts 2x1,2x2]
        [--compressors exact,fp16,powersgd1,powersgd2,powersgd4,powersgd8,onebit,qsgd] [--steps 12] [--json FILE]

Two hosts are built on this machine with `tfring_dev.emulated_hosts` (network namespaces joined
by shaped veths, an sshd in each; needs root and openssh-server). For each link rate and layout
(hosts x ranks per host), each compressor trains the same model as its own `tfring run` job over
both hosts: a 25 M-parameter MLP (six 2048-wide Dense layers on 1024 inputs) on 32 rows per rank,
whose gradients (100 MB in float32) dominate a step on 1 Gbit/s links. Each job first runs the
compressor's exact warm-up steps, then times `--steps` steps and prints, from rank 0:

- bytes on the wire per step: what host 0's network interface sent (its `tx_bytes`, read inside
  the host's namespace), divided by the steps: every collective's traffic between the hosts, the
  protocol's overhead included;
- allreduce ms: the median time of the compressor's reduction of the model's gradient list alone
  (a compiled function of the hook over the same buckets the step uses);
- step ms: the median time of a whole training step (`model.fit`'s batches).

Printed per (rate, layout): each compressor's figures and its ratios to exact (bytes fewer, step
faster). Everything the run built is torn down at the end, also on an error, Ctrl-C or SIGTERM.
"""

import argparse
import json
import os
import shlex
import signal
import sys
import time

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.dirname(HERE))
from allreduce import parse_results  # noqa: E402
from multihost import WORKER_ENV  # noqa: E402
from multihost import run_launcher  # noqa: E402
from multihost import _kill_leftovers  # noqa: E402

COMPRESSORS = ("exact", "fp16", "powersgd1", "powersgd2", "powersgd4", "powersgd8", "onebit", "qsgd")
WARMUP = 2  # exact steps before compression starts (and before the timing)


def compressor(name, warmup=WARMUP):
    """The `compression=` argument a name of COMPRESSORS stands for, compressing after `warmup`
    exact steps (PowerSGD: at least 2)."""
    import tfring

    if name == "exact":
        return None
    if name == "fp16":
        return "fp16"
    if name.startswith("powersgd"):
        return tfring.compression.PowerSGD(rank=int(name[len("powersgd"):]), start_iter=max(2, warmup))
    if name == "onebit":
        return tfring.compression.OneBit(warmup_steps=warmup)
    if name == "qsgd":
        return tfring.compression.QSGD(warmup_steps=warmup)
    raise ValueError(f"unknown compressor {name!r}")


def last_result(out):
    """The dict of the last `RESULT {...}` line a job printed (`[0] RESULT {...}`), or None."""
    results = parse_results(out)
    return results[-1] if results else None


def _tx_bytes():
    with open("/sys/class/net/eth0/statistics/tx_bytes") as f:
        return int(f.read())


def worker(args):
    """One rank of one job: trains, times, and (rank 0) prints a RESULT line."""
    import numpy as np
    import tensorflow as tf
    import keras
    import tfring
    from tfring.compression import runner

    strategy = tfring.RingStrategy(compression=compressor(args.worker))
    rows = 32 * strategy.size
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows * (WARMUP + args.steps + 1), 1024)).astype("float32")
    y = rng.standard_normal((len(x), 10)).astype("float32")
    with strategy.scope():
        model = keras.Sequential([keras.Input((1024,))] + [keras.layers.Dense(2048, activation="relu")
                                                          for _ in range(6)] + [keras.layers.Dense(10)])
        model.compile(optimizer=keras.optimizers.SGD(1e-4, momentum=0.9), loss="mse")
    stamps = []

    class Stamps(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            stamps.append((time.perf_counter(), _tx_bytes()))

    model.fit(x, y, batch_size=rows, epochs=1, shuffle=False, verbose=0, callbacks=[Stamps()])
    timed = stamps[WARMUP:]  # from the end of the warm-up: every later step is compressed
    steps = np.diff([t for t, _ in timed])
    sent = (timed[-1][1] - timed[0][1]) / (len(timed) - 1)

    settings = strategy.extended.gradient_settings
    grads = [tf.random.stateless_normal(v.shape, [0, k]) for k, v in enumerate(model.trainable_variables)]
    from tfring.strategy.gradients import buckets as buckets_lib
    order = buckets_lib.plan(grads, settings.bucket_bytes)

    @tf.function
    def reduce():
        out = runner.run(settings.hook, settings.hook_state, [[grads[i] for i in idx] for idx in order], "mean",
                         overlap=len(order) > 1, size=strategy.size,
                         variables=[[model.trainable_variables[i] for i in idx] for idx in order])
        return [r for rs in out for r in rs]

    durations = []
    for _ in range(WARMUP + args.steps):
        start = time.perf_counter()
        [r.numpy() for r in reduce()]
        durations.append(time.perf_counter() - start)
    if strategy.rank == 0:
        print("RESULT " + json.dumps({"step_ms": 1e3 * float(np.median(steps)),
                                      "allreduce_ms": 1e3 * float(np.median(durations[WARMUP:])),
                                      "wire_bytes": sent, "params": int(model.count_params()),
                                      "finite": bool(np.all([np.all(np.isfinite(w)) for w in model.get_weights()]))}))


def run_job(hosts, per_host, name, steps, timeout):
    """One compressor's job over both hosts; its RESULT, or None and the reason."""
    exports = [arg for k, v in WORKER_ENV.items() for arg in ("-x", f"{k}={v}")]
    argv = ([sys.executable, "-m", "tfring", "run", "-H", ",".join(f"{h}:{per_host}" for h in hosts.names[:2]),
             "--rsh", shlex.join(hosts.ssh_command)] + exports
            + [sys.executable, HERE, "--worker", name, "--steps", str(steps)])
    out, err = run_launcher(argv, timeout)
    _kill_leftovers(hosts)
    result = last_result(out)
    return (result, shlex.join(argv)) if result else (None, (out + err)[-2500:])


def print_table(rate, layout, results):
    exact = results.get("exact")
    print(f"\n{layout} at {rate:g} Mbit/s")
    print("| compressor | MB on the wire per step | x fewer than exact | allreduce ms | step ms | x faster step |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        if r is None:
            print(f"| {name} | failed | | | | |")
            continue
        fewer = f"{exact['wire_bytes'] / r['wire_bytes']:.1f}" if exact and r["wire_bytes"] else ""
        faster = f"{exact['step_ms'] / r['step_ms']:.2f}" if exact else ""
        print(f"| {name} | {r['wire_bytes'] / 1e6:.1f} | {fewer} | {r['allreduce_ms']:.0f} | {r['step_ms']:.0f} | "
              f"{faster} |")


def main_bench(args):
    from tfring_dev.emulated_hosts import EmulatedHosts
    from tfring_dev.emulated_hosts import available

    sys.stdout.reconfigure(line_buffering=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill tears the hosts down too
    ok, reason = available()
    if not ok:
        print(f"compression benchmark: cannot build emulated hosts: {reason}", file=sys.stderr)
        return 2
    everything, commands, start = {}, {}, time.monotonic()
    with EmulatedHosts(2) as hosts:
        for rate in args.rates:
            hosts.shape(rate)
            for layout in args.layouts:
                results = {}
                for name in args.compressors:
                    print(f"[{time.monotonic() - start:6.0f} s] {name} {layout} at {rate:g} Mbit/s", file=sys.stderr)
                    result, note = run_job(hosts, int(layout.split("x")[1]), name, args.steps, args.timeout)
                    results[name] = result
                    if result is None:
                        print(f"  {name} failed: {note}", file=sys.stderr)
                    else:
                        commands.setdefault(name, note)
                everything[f"{layout}@{rate:g}"] = results
                print_table(rate, layout, results)
    print(f"\n(measured in {time.monotonic() - start:.0f} s; each job: "
          f"{next(iter(commands.values()), 'none ran')})")
    with open(args.json, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d"), "results": everything}, f, indent=1)
    return 0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1000,10000", help="link rates in Mbit/s (default 1000,10000)")
    parser.add_argument("--layouts", default="2x1,2x2", help="hosts x ranks per host (default 2x1,2x2)")
    parser.add_argument("--compressors", default=",".join(COMPRESSORS), help=f"of {','.join(COMPRESSORS)}")
    parser.add_argument("--steps", type=int, default=12, help="timed steps per job (default 12)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per job (default 900)")
    parser.add_argument("--json", default=os.path.join(os.path.dirname(HERE), "compression_results.json"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.rates = [float(r) for r in args.rates.split(",")]
    args.layouts = args.layouts.split(",")
    args.compressors = args.compressors.split(",")
    bad = [c for c in args.compressors if c not in COMPRESSORS]
    if bad or args.steps < 2:
        parser.error(f"unknown compressors {bad}" if bad else "--steps must be at least 2")
    return args


def main():
    args = parse_args()
    if args.worker:
        worker(args)
        return 0
    return main_bench(args)


if __name__ == "__main__":
    sys.exit(main())
