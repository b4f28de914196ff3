#!/usr/bin/python3
"""Draws the simulator's time series (written by `sluice bench autoscale --series-dir DIR`) as one PNG
per scenario: workers (local and remote pods), the trainers' stall and the money spent, over time, per
policy. Usage: plot_autoscale.py SERIES_DIR OUT_DIR"""
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Every policy the simulator runs (sim/report/report.cc PolicyNames), each in a colour of its own.
POLICIES = ["sluice", "sluice-remote", "pecan", "cachew", "hpa", "fixed", "collocated", "best-static", "oracle"]
COLORS = {"sluice": "tab:blue", "sluice-remote": "tab:cyan", "pecan": "tab:orange", "cachew": "tab:green",
          "hpa": "tab:red", "fixed": "tab:gray", "collocated": "tab:brown", "best-static": "tab:pink",
          "oracle": "black"}


def plot(path: pathlib.Path, out_dir: pathlib.Path) -> pathlib.Path:
    data = json.loads(path.read_text())
    fig, (workers, stall, cost) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    unknown = sorted(set(data["policies"]) - set(POLICIES))
    if unknown:
        raise SystemExit(f"plot_autoscale.py: {path}: policies without a colour: {', '.join(unknown)}")
    for name in POLICIES:
        series = data["policies"].get(name)
        if not series:
            continue
        minutes = [t / 60 for t in series["t_s"]]
        color = COLORS[name]
        workers.step(minutes, series["remote_pods"], where="post", color=color, label=f"{name} remote")
        workers.step(minutes, series["local_pods"], where="post", color=color, linestyle=":", label=f"{name} local")
        stall.plot(minutes, [100 * s for s in series["stall"]], color=color, linewidth=1, label=name)
        cost.plot(minutes, series["cost_dollars"], color=color, linewidth=1,
                  label=f"{name} (${series['cost_per_epoch']:.2f}/epoch)")
    for ax in (workers, stall, cost):
        for change in data["changes"][1:]:
            ax.axvline(change["at_s"] / 60, color="purple", linestyle="--", linewidth=0.8)
        for interval in data["intervals"]:
            ax.axvspan(interval["from_s"] / 60, interval["to_s"] / 60, color="gold", alpha=0.2)
        ax.grid(alpha=0.3)
    workers.set_ylabel("workers (pods)\nsolid remote, dotted local")
    workers.legend(ncol=6, fontsize=6, loc="upper right")
    stall.set_ylabel("stall per 15 s (%)")
    stall.axhline(5, color="purple", linewidth=0.6)
    stall.set_ylim(-2, 102)
    cost.set_ylabel("spent so far ($)")
    cost.set_xlabel("minutes (dashed: changes; shaded: outages and crash loops)")
    cost.legend(ncol=2, fontsize=6, loc="upper left")
    fig.suptitle(f"{data['scenario']}: {data['description']}", fontsize=9)
    fig.tight_layout()
    out = out_dir / f"autoscale-{data['scenario']}.png"
    fig.savefig(out, dpi=60)
    plt.close(fig)
    return out


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    series_dir, out_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    files = sorted(series_dir.glob("*.json"))
    if not files:
        print(f"plot_autoscale.py: no <scenario>.json in {series_dir}: run sluice bench autoscale --series-dir first",
              file=sys.stderr)
        return 1
    out_dir.mkdir(parents=True, exist_ok=True)
    for f in files:
        print(plot(f, out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
