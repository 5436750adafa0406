"""Allreduce across emulated hosts: tfring beside OpenMPI and MultiWorkerMirroredStrategy, in one run.

    sudo .venv/bin/python benchmarks/multihost.py [--rates 1000,10000] [--layouts 2x1,2x2]
        [--sizes resnet50,4K,64K,1M,16M,64M,256M] [--repeats 5] [--rounds 1] [--peers tfring,mpi,mwms]
        [--json FILE] [--quick]
    sudo make bench-multihost [BENCH_ARGS=--quick]

`--quick` is a smoke run of about a minute (4K and 1M, 2 repeats, 1000 Mbit/s, both layouts); the
full default run takes about ten minutes on an idle 2-core machine. `--peers core` adds tfring's
engine alone (its C API on NumPy buffers, no TF op), to show what the TF op costs; `--peers ring` adds
tfring with one flat ring over every rank (`TFRING_ALLREDUCE=ring`) beside its default (hierarchical
where a host has several ranks).

Two hosts are built on this machine with `tfring_dev.emulated_hosts` (network namespaces, each with an
sshd, joined by shaped veths), so it needs root, iproute2, util-linux and openssh-server; the
OpenMPI column needs `mpirun` and mpi4py (`make bench-deps`), and is skipped, saying so, without
them. For each link rate (`tc` token buckets, both directions) the raw link is measured first with
a Python TCP bulk transfer between the hosts; then, for each layout (hosts x ranks per host), every
peer runs as its own job over the hosts:

- tfring: `tfring run -H h0:N,h1:N --rsh "ssh -F cfg"`, transport auto (TCP between hosts, and
  for 2x2 one ring over shared memory inside a host and TCP between them);
- OpenMPI: `MPI_Allreduce` through mpi4py under `mpirun --host h0:N,h1:N --mca plm_rsh_agent
  "ssh -F cfg" --mca pml ob1 --mca btl tcp,vader,self --mca mpi_yield_when_idle 1` (TCP between
  hosts, shared memory inside a host as OpenMPI does by default; yielding because the emulated
  hosts share this machine's cores), on one pre-packed buffer (and, for ResNet-50, one call per
  tensor too);
- MultiWorkerMirroredStrategy (RING), one worker process per rank started inside the hosts'
  namespaces, TF_CONFIG naming the hosts' addresses (gRPC, also between two workers of one host).

Workloads: ResNet-50's gradient list (214 float32 tensors, about 102 MB) and one float32 tensor of
each size. Printed per (layout, rate): bus bandwidth (nccl-tests' busbw = bytes / time * 2(P-1)/P,
in Gbit/s = 10^9 bit/s) and median ms per allreduce, tfring's busbw as % of the measured and the
nominal link rate, and tfring's busbw over OpenMPI's. A ring allreduce moves 2(P-1)/P of the data
over each link in each direction, so a busbw equal to the link rate saturates the link, for 2x1 and
for 2x2 alike. Everything the run built is torn down at the end, also on an error or Ctrl-C.
"""

import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import allreduce
import multihost_report as report
from link_rate import measure_link

HERE = os.path.abspath(__file__)
PEERS = ("tfring", "mpi", "mwms")  # the table's columns, run by default
# On request: tfring's engine through its C API (no TensorFlow op); tfring with the flat ring only.
EXTRA_PEERS = ("core", "ring")
DEFAULTS = {"rates": "1000,10000", "layouts": "2x1,2x2", "sizes": "resnet50,4K,64K,1M,16M,64M,256M",
            "repeats": 5, "probe_seconds": 2.0}
QUICK = {"rates": "1000", "layouts": "2x1,2x2", "sizes": "4K,1M", "repeats": 2, "probe_seconds": 1.0}
WORKER_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
              "TF_NUM_INTRAOP_THREADS": "1"}


# ---- workloads ----

def _arrays(workload, seed):
    import numpy as np

    if workload == "resnet50":
        return allreduce.tensors("resnet50", seed)
    return [np.full(int(workload) // 4, seed + 1.0, np.float32)]


# ---- workers: one rank each, rank 0 prints a RESULT line ----

def worker_tfring(args):
    """Times tfring's allreduce (TF op, transport auto) on every workload."""
    import tensorflow as tf

    import tfring

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tfring.init()
    samples, cpu = {}, {}
    for workload in args.workloads:
        step = allreduce.tfring_step(_arrays(workload, tfring.rank()))
        samples[workload], cpu[workload] = allreduce.cpu_calls(step, tfring.ops.barrier, args.repeats)
    if tfring.rank() == 0:
        allreduce.report("tfring", samples, f"transport: {tfring.transport_name()}", cpu=cpu)


def worker_core(args):
    """Times tfring's engine alone (C API on NumPy buffers, no TF op): what the TF op adds shows."""
    import tfring

    tfring.init()
    samples = {w: allreduce.time_calls(allreduce.core_step(_arrays(w, tfring.rank())), tfring.ops.barrier,
                                       args.repeats)
               for w in args.workloads}
    if tfring.rank() == 0:
        allreduce.report("core", samples)


def worker_mwms(args):
    """Times MultiWorkerMirroredStrategy's RING all-reduce on every workload."""
    strategy = allreduce.mwms_strategy()
    rank = strategy.cluster_resolver.task_id
    samples = {}
    for workload in args.workloads:
        run, barrier = allreduce.mwms_step(strategy, _arrays(workload, rank))
        samples[workload] = allreduce.time_calls(run, barrier, args.repeats)
    if rank == 0:
        allreduce.report("mwms", samples)


def worker_mpi(args):
    """Times `MPI_Allreduce` on a packed buffer (and per tensor for ResNet-50) on every workload."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    samples, cpu = {}, {}
    for workload in args.workloads:
        per_tensor, packed = allreduce.mpi_steps(comm, _arrays(workload, comm.rank))
        if workload == "resnet50":
            samples["resnet50 per-tensor"] = allreduce.time_calls(per_tensor, comm.Barrier, args.repeats)
        samples[workload], cpu[workload] = allreduce.cpu_calls(packed, comm.Barrier, args.repeats)
    hosts = comm.gather(socket.gethostname())
    if comm.rank == 0:
        version = MPI.Get_library_version().split(",")[0]
        allreduce.report("mpi", samples, f"{version}, ranks on hosts {','.join(hosts)}", cpu=cpu)


# ---- the peers' jobs ----

def _worker_args(peer, workloads, repeats):
    return [sys.executable, HERE, "--worker", peer, "--workloads", ",".join(workloads), "--repeats", str(repeats)]


def tfring_argv(hosts, per_host, workloads, repeats, worker="tfring"):
    """`tfring run` over ssh into both hosts, the quiet environment exported to every rank."""
    exports = [arg for k, v in WORKER_ENV.items() for arg in ("-x", f"{k}={v}")]
    if worker == "ring":
        exports += ["-x", "TFRING_ALLREDUCE=ring"]
        worker = "tfring"
    return ([sys.executable, "-m", "tfring", "run", "-H", ",".join(f"{h}:{per_host}" for h in hosts.names[:2]),
             "--rsh", shlex.join(hosts.ssh_command)] + exports + _worker_args(worker, workloads, repeats))


def mpi_argv(hosts, per_host, workloads, repeats):
    """`mpirun` over ssh into both hosts: ob1 with the TCP BTL between hosts, vader inside one."""
    passed = ["PATH", "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH"]
    exports = [arg for k in passed if k in os.environ for arg in ("-x", k)]
    exports += [arg for k, v in WORKER_ENV.items() for arg in ("-x", f"{k}={v}")]
    return (["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(2 * per_host),
             "--host", ",".join(f"{h}:{per_host}" for h in hosts.names[:2]),
             "--mca", "plm_rsh_agent", shlex.join(hosts.ssh_command),
             "--mca", "pml", "ob1", "--mca", "btl", "tcp,vader,self", "--mca", "mpi_yield_when_idle", "1"] + exports
            + _worker_args("mpi", workloads, repeats))


def mwms_cluster(hosts, per_host, base_port):
    """TF_CONFIG's worker list: `per_host` workers on each host's address, ranks filling h0 first."""
    return [f"{hosts.addresses[h]}:{base_port + k}" for h in range(2) for k in range(per_host)]


def run_launcher(argv, timeout):
    """Runs a launcher (tfring run, mpirun) from the root namespace; returns `(stdout, stderr)`."""
    env = dict(os.environ, **WORKER_ENV)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return _text(e.stdout), f"timed out after {timeout:.0f} s\n" + _text(e.stderr)
    return proc.stdout, proc.stderr if proc.returncode == 0 else f"exit {proc.returncode}\n{proc.stderr}"


def run_mwms(hosts, per_host, workloads, repeats, timeout, base_port):
    """Starts one MWMS worker per rank inside the hosts; returns worker 0's stdout and all stderr."""
    cluster = mwms_cluster(hosts, per_host, base_port)
    with tempfile.TemporaryDirectory() as tmp:
        processes, logs = [], []
        for index in range(len(cluster)):
            tf_config = {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}}
            env = dict(os.environ, **WORKER_ENV, TF_CONFIG=json.dumps(tf_config))
            out, err = open(f"{tmp}/{index}.out", "w+"), open(f"{tmp}/{index}.err", "w+")
            logs.append((out, err))
            processes.append(hosts.popen(index // per_host, _worker_args("mwms", workloads, repeats),
                                         stdout=out, stderr=err, env=env))
        problem = _wait_all(processes, timeout)
        texts = [(_read(out), _read(err)) for out, err in logs]
    return texts[0][0], problem + "".join(err for _, err in texts)


def _wait_all(processes, timeout):
    deadline = time.monotonic() + timeout
    try:
        for process in processes:
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        for process in processes:
            process.kill()
            process.wait()
        return f"timed out after {timeout:.0f} s\n"
    codes = [p.returncode for p in processes]
    return "" if not any(codes) else f"exit codes {codes}\n"


def _read(f):
    f.seek(0)
    return f.read()


def _text(data):
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def _kill_leftovers(hosts):
    # A launcher killed at its timeout may leave ranks behind for a moment; the next job needs the CPU.
    for i in range(2):
        for pid in hosts.pids(i):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# ---- the orchestrator ----

class Bench:
    """One run: the hosts, the peers, the options, and every sample measured so far."""

    def __init__(self, hosts, args, peers):
        self.hosts, self.args, self.peers = hosts, args, peers
        self.samples = {}  # (rate, layout, peer, workload) -> seconds
        self.cpu = {}  # (rate, layout, peer, workload) -> rank 0's CPU seconds per call, one per job
        self.notes = {}  # peer -> note from its worker (transport, library version)
        self.links = {}  # rate -> measure_link(...)
        self.commands = {}  # (peer, layout) -> the command line, printed once
        self.mwms_jobs = 0

    def timeout(self, rate, per_host):
        """Seconds a job may take: 10x the link-bound estimate, at least 5 minutes."""
        link = self.links[rate]["both_ways"] or 0.1
        gbit = min(link, rate / 1000) if rate else link
        ranks = 2 * per_host
        per_link = sum(report.workload_bytes(w) for w in self.args.workloads) * 2 * (ranks - 1) / ranks
        seconds = (self.args.repeats + 3) * per_link * 8 / (gbit * 1e9)
        return max(300.0, 120 + 10 * seconds)

    def run_peer(self, peer, rate, layout):
        """Runs one peer's job at one (rate, layout) and files its samples."""
        command, out, err = self._job(peer, int(layout.split("x")[1]), rate)
        self.commands.setdefault((peer, layout), command)
        _kill_leftovers(self.hosts)
        results = allreduce.parse_results(out)
        if not results:
            print(f"  {report.PEER_NAMES[peer]} {layout} at {report.rate_label(rate)} failed: {err[-2500:]}",
                  file=sys.stderr)
        for result in results:
            self.notes[peer] = result.get("note", "")
            for workload, seconds in result["samples"].items():
                self.samples.setdefault((rate, layout, peer, workload), []).extend(seconds)
            for workload, seconds in result.get("cpu", {}).items():
                self.cpu.setdefault((rate, layout, peer, workload), []).append(seconds)

    def _job(self, peer, per_host, rate):
        """Runs the job; returns `(command line, stdout with the RESULT line, stderr)`."""
        workloads, repeats, timeout = self.args.workloads, self.args.repeats, self.timeout(rate, per_host)
        if peer == "mwms":
            self.mwms_jobs += 1
            base_port = 20000 + 10 * self.mwms_jobs  # fresh ports: no TIME_WAIT from the last job
            out, err = run_mwms(self.hosts, per_host, workloads, repeats, timeout, base_port)
            return self._mwms_command(per_host, base_port), out, err
        if peer == "mpi":
            argv = mpi_argv(self.hosts, per_host, workloads, repeats)
        else:
            argv = tfring_argv(self.hosts, per_host, workloads, repeats, worker=peer)
        return (shlex.join(argv),) + run_launcher(argv, timeout)

    def _mwms_command(self, per_host, base_port):
        cluster = mwms_cluster(self.hosts, per_host, base_port)
        worker = shlex.join(_worker_args("mwms", self.args.workloads, self.args.repeats))
        return (f"for each index i < {len(cluster)}, inside host h[i // {per_host}] (ip netns exec ... unshare "
                f"--uts): TF_CONFIG='{{\"cluster\": {{\"worker\": {json.dumps(cluster)}}}, "
                f"\"task\": {{\"type\": \"worker\", \"index\": i}}}}' {worker}")

    def median_ms(self, rate, layout, peer, workload):
        """The median milliseconds of the samples, or None if there are none."""
        seconds = sorted(self.samples.get((rate, layout, peer, workload), []))
        if not seconds:
            return None
        mid = len(seconds) // 2
        return 1e3 * (seconds[mid] if len(seconds) % 2 else (seconds[mid - 1] + seconds[mid]) / 2)

    def cpu_per_gb(self, rate, layout, peer, workload):
        """Rank 0's CPU seconds per GB (10^9 bytes) it sends, median over jobs, or None.

        A ring allreduce sends 2(P-1)/P of the workload from each rank (and receives as much)."""
        per_call = sorted(self.cpu.get((rate, layout, peer, workload), []))
        if not per_call:
            return None
        ranks = 2 * int(layout.split("x")[1])
        sent = report.workload_bytes(workload) * 2 * (ranks - 1) / ranks
        return per_call[len(per_call) // 2] / (sent / 1e9)

    def busbw(self, rate, layout, peer, workload):
        """Bus bandwidth in Gbit/s: bytes*8 / median time * 2(P-1)/P, or None."""
        ms = self.median_ms(rate, layout, peer, workload)
        ranks = 2 * int(layout.split("x")[1])
        return None if ms is None else report.busbw(report.workload_bytes(workload.split()[0]), ms / 1e3, ranks)


# ---- main ----

def unavailable_reason(peer):
    """Why `peer` cannot run here, or None."""
    if peer != "mpi":
        return None
    if shutil.which("mpirun") is None:
        return "mpirun is not installed (`make bench-deps` installs OpenMPI and mpi4py)"
    probe = subprocess.run([sys.executable, "-c", "import mpi4py.MPI"], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        return f"mpi4py cannot be imported ({probe.stderr.strip().splitlines()[-1]}; `make bench-deps`)"
    return None


def measure(bench, unshaped):
    """Every rate, layout, round and peer, in that nesting; prints each table when it is complete."""
    start = time.monotonic()
    for rate in bench.args.rates:
        if rate is None:
            bench.hosts.unshape()
            bench.links[rate] = unshaped
        else:
            bench.hosts.shape(rate)
            bench.links[rate] = measure_link(bench.hosts, bench.args.probe_seconds)
        for layout in bench.args.layouts:
            for _ in range(bench.args.rounds):  # rounds interleave the peers
                for peer in bench.peers:
                    print(f"[{time.monotonic() - start:6.0f} s] {report.PEER_NAMES[peer]} {layout} at "
                          f"{report.rate_label(rate)}", file=sys.stderr, flush=True)
                    bench.run_peer(peer, rate, layout)
            report.print_table(bench, rate, layout)
    print(f"\n(measured in {time.monotonic() - start:.0f} s)")


def main_bench(args):
    from tfring_dev.emulated_hosts import EmulatedHosts
    from tfring_dev.emulated_hosts import available

    sys.stdout.reconfigure(line_buffering=True)  # tables and the progress on stderr stay in order
    ok, reason = available()
    if not ok:
        print(f"multihost benchmark: cannot build emulated hosts: {reason}", file=sys.stderr)
        return 2
    peers = []
    for peer in args.peers:
        reason = unavailable_reason(peer)
        if reason:
            print(f"({report.PEER_NAMES[peer]} column skipped: {reason})")
        else:
            peers.append(peer)
    if "resnet50" in args.workloads:
        allreduce.shapes("resnet50")  # build the shape cache once, outside the timed jobs
    with EmulatedHosts(2) as hosts:
        bench = Bench(hosts, args, peers)
        unshaped = measure_link(hosts, args.probe_seconds)
        report.print_header(bench, unshaped)
        measure(bench, unshaped)
        report.print_layout_comparison(bench)
        report.print_notes(bench)
        report.print_commands(bench)
        report.write_json(bench, args.json, unshaped)
    return 0


def parse_args(argv=None):
    """The options, with `--quick`'s or the full run's defaults filled in where none was given."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", help=f"link rates in Mbit/s, or 'unshaped' (default {DEFAULTS['rates']})")
    parser.add_argument("--layouts", help=f"hosts x ranks per host, 2x1 to 2x4 (default {DEFAULTS['layouts']})")
    parser.add_argument("--sizes", help="float32 tensor sizes (K, M, G: KiB, MiB, GiB) and 'resnet50' for "
                                        f"ResNet-50's gradient list (default {DEFAULTS['sizes']})")
    parser.add_argument("--repeats", type=int, help=f"timed allreduces per job (default {DEFAULTS['repeats']})")
    parser.add_argument("--rounds", type=int, default=1, help="jobs per peer, interleaved (default 1)")
    parser.add_argument("--peers", default=",".join(PEERS),
                        help=f"which of {','.join(PEERS + EXTRA_PEERS)} to run (default {','.join(PEERS)})")
    parser.add_argument("--probe-seconds", type=float, help="seconds per link-rate probe")
    parser.add_argument("--json", default=os.path.join(os.path.dirname(HERE), "multihost_results.json"),
                        help="where the raw results go (default: multihost_results.json beside this script)")
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK}")
    parser.add_argument("--worker", choices=PEERS + ("core",), help=argparse.SUPPRESS)
    parser.add_argument("--workloads", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    try:
        _normalize(args)
    except ValueError as e:
        parser.error(str(e))
    return args


def _normalize(args):
    args.rates = [None if r.strip() == "unshaped" else float(r) for r in args.rates.split(",")]
    args.layouts = [layout.strip() for layout in args.layouts.split(",")]
    if any(layout not in ("2x1", "2x2", "2x3", "2x4") for layout in args.layouts):
        raise ValueError(f"--layouts takes 2x1, 2x2, 2x3 and 2x4 (two hosts), got {args.layouts}")
    if not args.workloads:  # a worker gets them from the orchestrator, already parsed
        args.workloads = ",".join(report.parse_size(s) for s in args.sizes.split(","))
    args.workloads = args.workloads.split(",")
    args.peers = [p.strip() for p in args.peers.split(",")]
    if any(p not in PEERS + EXTRA_PEERS for p in args.peers):
        raise ValueError(f"--peers takes {','.join(PEERS + EXTRA_PEERS)}, got {args.peers}")
    if args.repeats < 1 or args.rounds < 1:
        raise ValueError("--repeats and --rounds must be at least 1")


def main():
    args = parse_args()
    if args.worker:
        {"tfring": worker_tfring, "core": worker_core, "mwms": worker_mwms, "mpi": worker_mpi}[args.worker](args)
        return 0
    return main_bench(args)


if __name__ == "__main__":
    sys.exit(main())
