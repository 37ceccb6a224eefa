"""Compare runs: episode return against env steps and against wall time, one line per run."""

from __future__ import annotations

from pathlib import Path

from surge.errors import UserError
from surge.tracking.metrics import METRICS_FILE, read_metrics


def plot_runs(run_dirs: list[Path], out: Path) -> None:
    """Write a PNG (or any format matplotlib infers from `out`'s suffix) to `out`."""
    # Figure + the Agg canvas directly: no global backend switch, no display needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not run_dirs:
        raise UserError("no run directories to plot", "give one or more run directories")
    series = []
    for run_dir in map(Path, run_dirs):
        if not (run_dir / METRICS_FILE).is_file():
            raise UserError(
                f"{run_dir} has no {METRICS_FILE}",
                "give a run directory written by surge; metrics appear after the first "
                "log interval",
            )
        rows = [r for r in read_metrics(run_dir) if r.get("episode_return_mean") is not None]
        series.append((run_dir.name, rows))

    fig = Figure(figsize=(12, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, x_key, x_label in (
        (axes[0], "env_steps", "env steps"),
        (axes[1], "wall_time_s", "wall time (s)"),
    ):
        for label, rows in series:
            pts = [(r[x_key], r["episode_return_mean"]) for r in rows if r.get(x_key) is not None]
            xs = [p[0] for p in pts]
            ys = [p[1] for p in pts]
            ax.plot(xs, ys, label=label if pts else f"{label} (no episodes yet)")
        ax.set_xlabel(x_label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("episode return (mean)")
    axes[0].legend(loc="best", fontsize="small")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
