"""Draws one training step from tfring's timeline: ranks as lanes, the step and each gradient
bucket's allreduce as bars (used by step_time.py; needs matplotlib: `make bench-deps`)."""

import json
import os


def _load(run_dir, rank):
    with open(os.path.join(run_dir, f"trace.rank{rank}.json")) as f:
        events = json.load(f)
    with open(os.path.join(run_dir, f"steps.rank{rank}.json")) as f:
        steps = json.load(f)
    return events, steps


def _gradient_spans(events, begin, end):
    """The allreduce spans on the engine lane that start inside [begin, end) (microseconds)."""
    return [e for e in events if e.get("ph") == "X" and e["name"].startswith("allreduce ")
            and begin <= e["ts"] < end]


def draw(panels, out_png, step=4, ranks=2):
    """Writes a PNG with one panel per run.

    Args:
        panels: a list of (title, run_dir): each run_dir holds trace.rank<R>.json (TFRING_TIMELINE)
            and steps.rank<R>.json (a list of [begin_us, end_us] per step).
        out_png: where to write the picture.
        step: which step to draw (after warm-up).
        ranks: how many ranks' lanes.

    Example:

    >>> draw([("bucket_bytes=0", "/tmp/run0"), ("4 MiB buckets", "/tmp/run4")], "step.png")
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 1.6 + 1.3 * ranks * len(panels)), squeeze=False,
                             sharex=True)
    colors = plt.get_cmap("tab10")
    for ax, (title, run_dir) in zip(axes[:, 0], panels):
        origin = None
        for rank in range(ranks):
            events, steps = _load(run_dir, rank)
            begin, end = steps[min(step, len(steps) - 1)]
            origin = begin if origin is None else origin
            lane = ranks - 1 - rank
            ax.barh(lane + 0.2, (end - begin) / 1e3, left=(begin - origin) / 1e3, height=0.35, color="#bbbbbb",
                    label="step (compute, then waiting for the last bucket)" if rank == 0 else None)
            for k, span in enumerate(_gradient_spans(events, begin, end)):
                ax.barh(lane - 0.2, span["dur"] / 1e3, left=(span["ts"] - origin) / 1e3, height=0.35,
                        color=colors(k % 10), edgecolor="black", linewidth=0.5,
                        label=f"allreduce {k + 1}" if rank == 0 else None)
        ax.set_yticks(range(ranks))
        ax.set_yticklabels([f"rank {r}" for r in reversed(range(ranks))])
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, loc="upper left", ncol=3)
        ax.set_xlabel("ms from rank 0's step start")
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
