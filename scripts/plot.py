#!/usr/bin/env python3
"""Plots of a training run and of a collectives benchmark, drawn with matplotlib.

  .venv/bin/python scripts/plot.py loss METRICS.jsonl [-o loss.png] [--title T]
      the training loss per step, the held-out loss, and a marker at each relaunch by
      etr-run (world size before -> after), from the JSON lines of log.metrics_file
  .venv/bin/python scripts/plot.py busbw BENCH.json [BENCH.json ...] [-o busbw.png]
      bus bandwidth against message size for etr and MPI (the reference measured in the
      same run) and the memory-bandwidth ceiling when the benchmark derived one, from
      `etr-bench allreduce --json` (several files: one pair of curves each)

The Python environment is the project's (.venv/, scripts/setup_python.sh installs
matplotlib). The figures are PNG files; nothing is shown on screen.
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402


def die(message):
    print(f"plot.py: error: {message}", file=sys.stderr)
    sys.exit(1)


def read_metrics(path):
    """The records of a metrics file: (steps, val, relaunches), each in file order."""
    steps, val, relaunches = {}, {}, []
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        die(f"cannot read the metrics file {path}: {e.strerror}")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            die(f"{path}:{number} is not a JSON record (is it a log.metrics_file?)")
        if record.get("event") == "relaunch":
            relaunches.append(record)
        elif "val_loss" in record:
            val[record["step"]] = record["val_loss"]
        elif "loss" in record:
            # A relaunch repeats the steps after its checkpoint: the later run wins.
            steps[record["step"]] = record
    if not steps:
        die(f"{path} holds no step records (log.metrics_file of an etr-train run)")
    return steps, val, relaunches


def plot_loss(args):
    steps, val, relaunches = read_metrics(args.metrics)
    xs = sorted(steps)
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    ax.plot(xs, [steps[s]["loss"] for s in xs], lw=1.2, label="training loss")
    if val:
        vx = sorted(val)
        ax.plot(vx, [val[s] for s in vx], "o-", ms=4, lw=1.2, label="held-out loss")
    top = ax.get_ylim()[1]
    for r in relaunches:
        ax.axvline(r["step"], color="0.4", ls="--", lw=0.9)
        lost = r.get("steps_lost")
        text = f"{r['world_before']} -> {r['world_after']} ranks"
        if lost:
            text += f", {lost} step{'s' if lost != 1 else ''} lost"
        ax.annotate(f"relaunch ({r.get('reason', '?')}):\n{text}", (r["step"], top),
                    xytext=(4, -4), textcoords="offset points", va="top", fontsize=8)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per token)")
    ax.set_title(args.title or f"etr-train: {args.metrics}")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right" if not relaunches else "lower left")
    fig.tight_layout()
    fig.savefig(args.output)
    def count(n, what):
        return f"{n} {what}{'' if n == 1 else 'es' if what.endswith('h') else 's'}"

    print(f"plot.py: wrote {args.output} ({count(len(xs), 'step')}, "
          f"{count(len(val), 'evaluation')}, {count(len(relaunches), 'relaunch')})")


def read_bench(path):
    try:
        bench = json.load(open(path, encoding="utf-8"))
    except OSError as e:
        die(f"cannot read the benchmark file {path}: {e.strerror}")
    except json.JSONDecodeError:
        die(f"{path} is not JSON (etr-bench allreduce --json FILE writes one)")
    if bench.get("benchmark") not in ("allreduce", "collectives") or not bench.get("rows"):
        die(f"{path} holds no rows of etr-bench allreduce")
    return bench


def size_text(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}"
        n /= 1024


def plot_busbw(args):
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    ticks = set()
    for path in args.bench:
        bench = read_bench(path)
        rows = sorted(bench["rows"], key=lambda r: r["bytes"])
        n = bench.get("machine", {}).get("world_size", "?")
        tag = f" ({path})" if len(args.bench) > 1 else ""
        sizes = [r["bytes"] for r in rows]
        ticks.update(sizes)
        ax.plot(sizes, [r["etr"]["busbw"] for r in rows], "o-", ms=4, label=f"etr, {n} ranks{tag}")
        ax.plot(sizes, [r["mpi"]["busbw"] for r in rows], "s--", ms=4,
                label=f"MPI_Allreduce, {n} ranks{tag}")
        ceiling = bench.get("memory_bandwidth", {}).get("ceiling_busbw_gbps")
        if ceiling:
            ax.axhline(ceiling, color="0.3", ls=":", lw=1.2,
                       label=f"ceiling (memory bandwidth){tag}: {ceiling:.1f} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(ticks), [size_text(t) for t in sorted(ticks)])
    ax.minorticks_off()
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(args.title or "allreduce: etr beside MPI (etr-bench allreduce)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output)
    print(f"plot.py: wrote {args.output}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    loss = sub.add_parser("loss", help="loss curve with held-out loss and relaunches")
    loss.add_argument("metrics", help="a JSON-lines file of log.metrics_file")
    loss.add_argument("-o", "--output", default="loss.png", help="PNG to write (default loss.png)")
    loss.add_argument("--title", help="the figure's title")
    bus = sub.add_parser("busbw", help="busbw against size for etr, MPI and the ceiling")
    bus.add_argument("bench", nargs="+", help="files of etr-bench allreduce --json")
    bus.add_argument("-o", "--output", default="busbw.png", help="PNG to write (default busbw.png)")
    bus.add_argument("--title", help="the figure's title")
    args = parser.parse_args()
    plot_loss(args) if args.what == "loss" else plot_busbw(args)


if __name__ == "__main__":
    main()
