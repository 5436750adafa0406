"""The multi-host allreduce benchmark's units, labels, tables and JSON (see multihost.py).

Workloads are named as the workers receive them: `"resnet50"` or a byte count (`"4096"`);
bandwidth is nccl-tests' bus bandwidth in Gbit/s (10^9 bit/s). The tables are markdown, a row per
workload, so the documentation (docs/benchmarks.md) can quote them.
"""

import json
import os

import allreduce

PEER_NAMES = {"tfring": "tfring", "mpi": "OpenMPI", "mwms": "MWMS", "core": "tfring core (C API, no TF)",
              "ring": "tfring flat ring (TFRING_ALLREDUCE=ring)"}


def parse_size(text):
    """`"4K"` -> 4096, `"256M"` -> 268435456 (K, M, G are powers of 1024); `"resnet50"` is kept."""
    text = text.strip()
    if text == "resnet50":
        return text
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    count = int(text[:-1] if scale > 1 else text) * scale
    if count < 4 or count % 4:
        raise ValueError(f"a size must be a positive multiple of 4 bytes (float32), got {text!r}")
    return str(count)


def workload_bytes(workload):
    """Bytes one rank contributes to an allreduce of `workload`."""
    if workload == "resnet50":
        return sum(4 * _count(s) for s in allreduce.shapes("resnet50"))
    return int(workload)


def workload_label(workload):
    """`"resnet50"` -> `"ResNet-50 grads"`, `"4096"` -> `"4 KiB"`."""
    if workload == "resnet50":
        return "ResNet-50 grads"
    size = int(workload)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def _count(shape):
    count = 1
    for dim in shape:
        count *= dim
    return count


def busbw(nbytes, seconds, ranks):
    """nccl-tests' bus bandwidth in Gbit/s: algbw (bytes / seconds) times 2(P-1)/P."""
    return nbytes * 8 / seconds / 1e9 * 2 * (ranks - 1) / ranks


def rate_label(rate):
    """`1000.0` -> `"1000 Mbit/s"`, None -> `"unshaped"`."""
    return "unshaped" if rate is None else f"{rate:g} Mbit/s"


def layout_label(layout):
    """`"2x2"` -> `"2 hosts x 2 ranks (P=4)"`."""
    hosts, per_host = layout.split("x")
    ranks = int(hosts) * int(per_host)
    return f"{hosts} hosts x {per_host} rank{'s' if per_host != '1' else ''} (P={ranks})"


def _num(value, fmt):
    return "-" if value is None else format(value, fmt)


def _pct(value, of):
    return "-" if value is None or not of else f"{100 * value / of:.0f}%"


def print_table(bench, rate, layout):
    """One markdown table: a row per workload, tfring / OpenMPI / MWMS columns."""
    link = bench.links[rate]
    nominal = None if rate is None else rate / 1000
    print(f"\n### {layout_label(layout)}, links {'shaped to ' if rate else ''}{rate_label(rate)}: measured "
          f"{_num(link['one_way'], '.2f')} Gbit/s one way, {_num(link['both_ways'], '.2f')} per direction both ways")
    print("| workload | tfring Gbit/s | % of link (meas.) | % of link (nom.) | tfring ms | OpenMPI Gbit/s "
          "| OpenMPI ms | MWMS Gbit/s | MWMS ms | tfring/OpenMPI |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for workload in bench.args.workloads:
        bw = {p: bench.busbw(rate, layout, p, workload) for p in ("tfring", "mpi", "mwms")}
        ms = {p: bench.median_ms(rate, layout, p, workload) for p in ("tfring", "mpi", "mwms")}
        ratio = bw["tfring"] / bw["mpi"] if bw["tfring"] and bw["mpi"] else None
        print(f"| {workload_label(workload)} | {_num(bw['tfring'], '.3f')} | {_pct(bw['tfring'], link['both_ways'])} "
              f"| {_pct(bw['tfring'], nominal)} | {_num(ms['tfring'], '.2f')} | {_num(bw['mpi'], '.3f')} "
              f"| {_num(ms['mpi'], '.2f')} | {_num(bw['mwms'], '.3f')} | {_num(ms['mwms'], '.2f')} "
              f"| {_num(ratio, '.2f')} |")
    cells = [f"{workload_label(w)} {_num(bench.cpu_per_gb(rate, layout, 'tfring', w), '.2f')} / "
             f"{_num(bench.cpu_per_gb(rate, layout, 'mpi', w), '.2f')}" for w in bench.args.workloads]
    print("CPU seconds per GB each rank sends (rank 0's process, every thread; tfring / OpenMPI): " + ", ".join(cells))
    per_tensor = bench.busbw(rate, layout, "mpi", "resnet50 per-tensor")
    if per_tensor is not None:
        print(f"OpenMPI on ResNet-50 grads, one MPI_Allreduce per tensor instead of one on a packed buffer: "
              f"{per_tensor:.3f} Gbit/s, {bench.median_ms(rate, layout, 'mpi', 'resnet50 per-tensor'):.2f} ms")
    for extra in ("core", "ring"):
        if extra in bench.peers:
            cells = [f"{workload_label(w)} {_num(bench.busbw(rate, layout, extra, w), '.3f')} Gbit/s "
                     f"{_num(bench.median_ms(rate, layout, extra, w), '.2f')} ms" for w in bench.args.workloads]
            print(f"{PEER_NAMES[extra]}: " + ", ".join(cells))


def print_layout_comparison(bench):
    """Per rate and peer: busbw of 2x2 over 2x1 on ResNet-50 and on the largest single tensor."""
    if not {"2x1", "2x2"} <= set(bench.args.layouts):
        return
    sizes = [w for w in bench.args.workloads if w != "resnet50"]
    picks = [w for w in ("resnet50", max(sizes, key=int) if sizes else None) if w in bench.args.workloads]
    print("\n2x2 vs 2x1 (busbw of 2 hosts x 2 ranks over 2 hosts x 1 rank; 1.00 = the same use of the link):")
    for rate in bench.args.rates:
        parts = []
        for peer in bench.peers:
            ratios = [_ratio(bench.busbw(rate, "2x2", peer, w), bench.busbw(rate, "2x1", peer, w)) for w in picks]
            parts.append(f"{PEER_NAMES[peer]} " + " / ".join(ratios))
        names = " / ".join(workload_label(w) for w in picks)
        print(f"  {rate_label(rate)} ({names}): " + ", ".join(parts))


def _ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def print_header(bench, unshaped):
    """What ran where: the machine, the units, the unshaped veth's rate, and how to read the tables."""
    print(f"\nAllreduce across 2 emulated hosts (network namespaces) on one machine of {os.cpu_count()} cores; "
          f"medians of {bench.args.repeats * bench.args.rounds} per cell; busbw in Gbit/s (10^9 bit/s) = "
          f"bytes*8/time * 2(P-1)/P; % of link = tfring busbw / link rate (meas.: per direction with both "
          f"directions busy, as in a ring); tfring/OpenMPI = busbw ratio, above 1 tfring is faster")
    print(f"The unshaped veth here carries {_num(unshaped['one_way'], '.2f')} Gbit/s for one TCP stream "
          f"({_num(unshaped['both_ways'], '.2f')} per direction both ways at once, Python sender and receiver): "
          f"a shaped rate above that does not bind, the CPU does.")
    print("Every rank of every host shares this machine's cores: 2x2 runs 4 ranks on them, so OpenMPI runs with "
          "mpi_yield_when_idle=1 (its busy polling, the default when slots are not oversubscribed, starves "
          "the other ranks on shared cores).")
    print("tc's token bucket lets 4 ms at the rate through at once (0.5 MB at 1000 Mbit/s, 5 MB at 10000), so "
          "transfers not much larger can show more than 100 % of the link.")
    print("A ring moves 2(P-1)/P of the data over each link, so its busbw is at most the link rate; for 2x2 an "
          "algorithm that reduces inside a host first crosses the link with 2/3 of that and can reach 1.5x.")


def print_commands(bench):
    """Every peer's command line, once per layout, the ssh config's path shortened to `cfg`."""
    print("\nCommand lines (cfg = the hosts' ssh_config):")
    for (peer, layout), command in bench.commands.items():
        print(f"  {PEER_NAMES[peer]} {layout}: {command.replace(bench.hosts.ssh_config, 'cfg')}")


def write_json(bench, path, unshaped):
    """Every sample, with its median and busbw, the link rates, notes and command lines."""
    rows = [{"rate_mbit": r, "layout": l, "peer": p, "workload": w, "bytes": workload_bytes(w.split()[0]),
             "median_ms": bench.median_ms(r, l, p, w), "busbw_gbit": bench.busbw(r, l, p, w),
             "cpu_s_per_gb_sent": bench.cpu_per_gb(r, l, p, w), "samples": s}
            for (r, l, p, w), s in bench.samples.items()]
    with open(path, "w") as f:
        json.dump({"rows": rows, "links_gbit": {rate_label(r): v for r, v in bench.links.items()},
                   "unshaped_gbit": unshaped, "notes": bench.notes, "cores": os.cpu_count(),
                   "commands": {f"{p} {l}": c for (p, l), c in bench.commands.items()}}, f, indent=1)
    print(f"wrote {path}")


def print_notes(bench):
    """What each peer's rank 0 said of itself: tfring's transport, OpenMPI's version and placement."""
    print()
    for peer in bench.peers:
        if bench.notes.get(peer):
            print(f"{PEER_NAMES[peer]}: {bench.notes[peer]}")
