"""scripts/plot.py on a real run: etr-train writes its metrics (steps, held-out losses),
the test appends a relaunch record as etr-train writes one under etr-run, and the
figure plot.py draws must hold what the file holds: the curves' points are read back
from the figure's axes (matplotlib's own objects), and the PNG is decoded. A bad input
file is one sentence and exit 1.

  plot_check.py --train ETR_TRAIN --config tiny.pbtxt --plot scripts/plot.py
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.image  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--train", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--plot", required=True)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="etr-plot-")
    metrics = os.path.join(work, "m.jsonl")
    subprocess.run([args.train, "--config", args.config, "--set", "schedule.max_steps=12",
                    "--set", "log.log_every=2", "--set", "log.eval_every=4",
                    "--set", f"log.metrics_file={metrics}"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = [json.loads(l) for l in open(metrics)]
    steps = {r["step"]: r["loss"] for r in records if "loss" in r}
    val = {r["step"]: r["val_loss"] for r in records if "val_loss" in r}
    if not steps or not val:
        fail(f"etr-train wrote no steps or no held-out losses: {records}")
    if any(not (0 <= r["progress"] <= 1) for r in records if "loss" in r):
        fail("a step record's progress is outside [0, 1]")
    relaunch = {"step": 6, "event": "relaunch", "restart": 1, "reason": "failure",
                "world_before": 2, "world_after": 1, "steps_lost": 2}
    with open(metrics, "a") as f:
        f.write(json.dumps(relaunch) + "\n")

    # plot.py's figure, captured before it is saved.
    sys.argv = ["plot.py", "loss", metrics, "-o", os.path.join(work, "loss.png")]
    sys.path.insert(0, os.path.dirname(args.plot))
    import plot  # noqa: E402
    saved = {}
    real_savefig = plt.Figure.savefig

    def capture(fig, path, *a, **k):
        saved["fig"] = fig
        return real_savefig(fig, path, *a, **k)

    plt.Figure.savefig = capture
    plot.main()
    plt.Figure.savefig = real_savefig
    ax = saved["fig"].axes[0]
    lines = {l.get_label(): l for l in ax.get_lines()}
    train = lines.get("training loss")
    held = lines.get("held-out loss")
    if train is None or held is None:
        fail(f"the figure lacks a curve: {list(lines)}")
    if list(train.get_xdata()) != sorted(steps) or list(train.get_ydata()) != [steps[s] for s in sorted(steps)]:
        fail("the training-loss curve is not the metrics file's")
    if list(held.get_xdata()) != sorted(val) or list(held.get_ydata()) != [val[s] for s in sorted(val)]:
        fail("the held-out curve is not the metrics file's")
    marks = [l for l in ax.get_lines() if list(l.get_xdata()) == [6, 6]]
    texts = [t.get_text() for t in ax.texts]
    if len(marks) != 1 or not any("2 -> 1 ranks, 2 steps lost" in t for t in texts):
        fail(f"the relaunch is not marked (texts {texts})")
    image = matplotlib.image.imread(os.path.join(work, "loss.png"))
    if image.shape[0] < 200 or image.shape[1] < 300:
        fail(f"the PNG is {image.shape}")

    # Bad input: one sentence, exit 1.
    bad = os.path.join(work, "bad.jsonl")
    open(bad, "w").write("not json\n")
    r = subprocess.run([sys.executable, args.plot, "loss", bad, "-o", os.path.join(work, "x.png")],
                       capture_output=True, text=True)
    if r.returncode != 1 or "is not a JSON record" not in r.stderr or "Traceback" in r.stderr:
        fail(f"bad metrics: exit {r.returncode}, {r.stderr!r}")
    r = subprocess.run([sys.executable, args.plot, "busbw", metrics], capture_output=True, text=True)
    if r.returncode != 1 or "Traceback" in r.stderr:
        fail(f"a metrics file given as a benchmark: exit {r.returncode}, {r.stderr!r}")
    shutil.rmtree(work)
    print(f"ok: {len(steps)} steps, {len(val)} evaluations and a relaunch plotted as written")


if __name__ == "__main__":
    main()
