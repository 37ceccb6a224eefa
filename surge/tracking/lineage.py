"""A population's lineage (PBT): each member's metric over its env steps, every exploit drawn
as a jump from the source's curve to the member's, and the mutated settings below it.

`surge plot POPULATION_DIR` writes it (and a population run writes `lineage.png` when it
ends). It reads only files: the members' `metrics.jsonl` (`member-<k>/`, with the `hp/<key>`
fields the trainer logs for the settings in force) and `population.jsonl`, the decisions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from surge.errors import UserError
from surge.tracking.metrics import read_metrics

POPULATION_LOG = "population.jsonl"
"""The decisions of a population run, one JSON line each (surge/population/controller.py)."""


def is_population_dir(path: Path) -> bool:
    return (Path(path) / POPULATION_LOG).is_file()


def read_decisions(run_dir: Path) -> list[dict[str, Any]]:
    """The population's exploit / explore decisions, oldest first."""
    lines = (Path(run_dir) / POPULATION_LOG).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def member_dirs(run_dir: Path) -> list[Path]:
    found = [p for p in Path(run_dir).glob("member-*") if p.is_dir()]  # not member-<k>.log
    members = sorted(found, key=lambda p: int(p.name.split("-")[1]))
    if not members:
        raise UserError(f"{run_dir} has no member-<k>/ runs", "give a population's run directory")
    return members


def plot_lineage(run_dir: Path, out: Path, metric: str = "episode_return_mean") -> None:
    """Write the lineage figure of the population in `run_dir` to `out` (PNG by suffix)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    run_dir = Path(run_dir)
    decisions = read_decisions(run_dir)
    members = {p.name: read_metrics(p) for p in member_dirs(run_dir)}
    settings = sorted({k for rows in members.values() for r in rows for k in r if k[:3] == "hp/"})
    settings = [k for k in settings if k != "hp/seq"]
    fig = Figure(figsize=(11, 4 + 2.2 * len(settings)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1 + len(settings), 1, sharex=True, squeeze=False)[:, 0]
    colours = {}
    for name, rows in members.items():
        pts = [(r["env_steps"], r[metric]) for r in rows if r.get(metric) is not None]
        (line,) = axes[0].plot([p[0] for p in pts], [p[1] for p in pts], label=name, lw=1.2)
        colours[name] = line.get_color()
        for ax, key in zip(axes[1:], settings, strict=True):
            hp = [(r["env_steps"], r[key]) for r in rows if r.get(key) is not None]
            ax.step([p[0] for p in hp], [p[1] for p in hp], where="post", color=colours[name])
    for d in decisions:  # the jump: from the source's point to the member's new start
        axes[0].annotate(
            "",
            xy=(d["env_steps"], d["source_score"]),
            xytext=(d["source_env_steps"], d["source_score"]),
            arrowprops={"arrowstyle": "->", "color": colours.get(d["source"], "grey"), "lw": 0.8},
        )
        axes[0].plot([d["env_steps"]], [d["score"]], "x", color=colours.get(d["member"], "k"))
    axes[0].set_ylabel(metric)
    axes[0].set_title(
        f"{run_dir.name}: {len(decisions)} exploits (x: the member before, ->: copied)"
    )
    axes[0].legend(loc="best", fontsize="small")
    for ax, key in zip(axes[1:], settings, strict=True):
        ax.set_ylabel(key.removeprefix("hp/"))
        if all(v > 0 for line in ax.get_lines() for v in line.get_ydata()):
            ax.set_yscale("log")
    axes[-1].set_xlabel("env steps of the member")
    for ax in axes:
        ax.grid(alpha=0.3)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
