"""The lessons' figures (matplotlib). Each function draws on `ax` if given and returns the Axes."""

from __future__ import annotations

import matplotlib.pyplot as plt

from .dataparallel import PHASES, split_sizes
from .language import say


def _axes(ax, figsize=(6, 3)):
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


def plot_split(batch_size: int, n_devices: int, ax=None):
    """Which rows of the batch each device receives (torch's chunk rule)."""
    sizes = split_sizes(batch_size, n_devices)
    ax = _axes(ax, (7, 0.6 + 0.45 * n_devices))
    start = 0
    for device in range(n_devices):
        size = sizes[device] if device < len(sizes) else 0
        if size:
            ax.barh(device, size, left=start, color=f"C{device}")
            ax.text(start + size / 2, device, f"{start}..{start + size - 1}", ha="center", va="center", color="white")
        else:
            ax.text(0, device, "  " + say("no rows: no replica"), va="center", color="grey")
        start += size
    ax.set_yticks(range(n_devices), [say("device {i}", i=d) for d in range(n_devices)])
    ax.set_ylim(n_devices - 0.5, -0.5)  # device 0 on top, every row fully visible
    ax.set_xlim(0, batch_size)
    ax.set_xlabel(say("sample index in the batch"))
    ax.set_title(say("batch of {batch_size} over {n_devices} devices: {sizes}", batch_size=batch_size,
                     n_devices=n_devices, sizes=sizes))
    return ax


def plot_memory(report, ax=None, title: str | None = None):
    """Stacked bars of bytes per device and category, labelled with the report's source."""
    ax = _axes(ax, (6, 3.5))
    devices = range(len(report.per_device))
    bottom = [0] * len(report.per_device)
    for i, name in enumerate(report.per_device[0]):
        values = [rows[name] / 1024 for rows in report.per_device]
        if any(values):
            ax.bar(devices, values, bottom=bottom, label=say(name), color=f"C{i}")
            bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(list(devices), [say("device {i}", i=d) for d in devices])
    ax.set_ylabel("KiB")
    ax.set_title(title or say("memory per device"), fontsize=10, loc="left")
    # where the numbers come from, above the plot (inside it, it sat on the tallest bars)
    ax.set_title(say(report.source).split(" (")[0], fontsize=8, style="italic", loc="right")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=4, frameon=False)
    return ax


def plot_phases(phase_seconds: dict[str, dict[str, float]], ax=None):
    """Horizontal stacked bars of seconds per DataParallel phase, one bar per labelled run."""
    ax = _axes(ax, (7, 0.8 + 0.6 * len(phase_seconds)))
    for row, (label, phases) in enumerate(phase_seconds.items()):
        total = sum(phases.values()) or 1.0
        left = 0.0
        for i, name in enumerate(PHASES):
            share = phases.get(name, 0.0) / total
            ax.barh(row, share, left=left, color=f"C{i}", label=say(name) if row == 0 else None)
            if share > 0.08:
                ax.text(left + share / 2, row, f"{share:.0%}", ha="center", va="center", color="white", fontsize=8)
            left += share
    ax.set_yticks(range(len(phase_seconds)), list(phase_seconds))
    ax.invert_yaxis()
    ax.set_xlabel(say("share of the step's time"))
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=5, frameon=False)
    return ax


def plot_losses(curves: dict[str, list[float]], ax=None):
    ax = _axes(ax)
    for label, losses in curves.items():
        ax.plot(losses, label=label)
    ax.set_xlabel(say("step"))
    ax.set_ylabel(say("loss"))
    ax.legend()
    return ax


def plot_formats(rows: list[dict], ax=None):
    """Where each format's values lie on a log2 scale: subnormals, normals, and the step between values."""
    import math

    ax = _axes(ax, (8, 2.6))
    for i, row in enumerate(rows):
        lo, normal, hi = (math.log2(row[k]) for k in ("smallest subnormal", "smallest normal", "largest"))
        ax.barh(i, normal - lo, left=lo, color=f"C{i}", alpha=0.35)
        ax.barh(i, hi - normal, left=normal, color=f"C{i}")
        ax.text(hi + 2, i, say("max {largest}, eps {eps}", largest=f"{row['largest']:.3g}",
                               eps=f"{row['eps (1 -> next)']:.2g}"), va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [r["format"] for r in rows])
    ax.invert_yaxis()
    ax.axvline(0, color="grey", lw=0.5)
    ax.set_xlabel(say("log2 of the magnitude (light: subnormals, dark: normal numbers)"))
    ax.set_xlim(-155, 200)
    return ax


def plot_scaler(trajectory: list[dict], ax=None):
    """GradScaler's loss scale per step; skipped steps marked."""
    ax = _axes(ax, (7, 2.8))
    scales = [s["scale"] for s in trajectory]
    ax.step(range(len(scales)), scales, where="post", label=say("loss scale"))
    skipped = [i for i, s in enumerate(trajectory) if s["skipped"]]
    ax.scatter(skipped, [scales[i] for i in skipped], color="C3", zorder=3, label=say("step skipped (inf/nan)"))
    ax.set_yscale("log", base=2)
    ax.set_xlabel(say("step"))
    ax.set_ylabel(say("scale"))
    ax.legend(fontsize=8)
    return ax


def plot_bars(values: dict[str, float], ylabel: str, ax=None, title: str | None = None):
    ax = _axes(ax, (5, 3))
    ax.bar(list(values), list(values.values()), color=[f"C{i}" for i in range(len(values))])
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    return ax
