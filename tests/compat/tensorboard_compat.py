"""TensorBoard reads the event files etr-train writes (log.tensorboard_dir).

1. etr-train trains 6 steps on 2 ranks (data parallel: the comm/ scalars appear) with a
   checkpoint every 3 steps, then a second process resumes on 1 rank and trains to step
   8, into the same directory: two event files, one run. The second is told, as etr-run
   would tell it, that it is relaunch 1 after a failure of the 2-rank launch, and its
   memory budget is cut inside step 8 (ETR_TEST_BUDGET_CUT): a decision to report.
2. Each file is read record by record with TensorBoard's own loader (which checks both
   CRCs of every record with its own CRC-32C, and stops silently at a bad one: so the
   test counts the records it should find, from the framing alone), and its first event
   is the file version "brain.Event:2".
3. EventAccumulator over the directory: every scalar equals the number in the metrics
   file (log.metrics_file) of the same run, as float32; held-out losses, world sizes
   and checkpoint stalls included; and every number of a step's metrics record is a
   scalar. The text events (the launches, the checkpoint saves,
   the out-of-memory recovery) are readable as the text plugin's data, and the relaunch
   names its old and new world and the step it resumed from.

Usage: tensorboard_compat.py --mpirun ETR_MPIRUN --train ETR_TRAIN --config tiny.pbtxt
"""

import argparse
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np
from tensorboard.backend.event_processing import event_accumulator, event_file_loader
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
from tensorboard.util import tensor_util

# tag -> the metrics file's key, for the records of logged steps.
STEP_SCALARS = {
    "train/loss": "loss",
    "train/lr": "lr",
    "train/grad_norm": "grad_norm",
    "train/progress": "progress",
    "train/eta_s": "eta_s",
    "perf/tokens_per_s": "tokens_per_s",
    "perf/step_ms": "ms",
    "perf/gflops": "gflops",
    "memory/peak_bytes": "peak_bytes",
    "memory/predicted_peak_bytes": "predicted_peak_bytes",
    "memory/budget_bytes": "budget_bytes",
    "memory/state_bytes": "state_bytes",
    "memory/analytic_state_bytes": "analytic_state_bytes",
    "memory/unreduced_grad_peak_bytes": "unreduced_grad_peak_bytes",
    "memory/gathered_param_peak_bytes": "gathered_param_peak_bytes",
    "memory/zero_stage": "zero_stage",
    "memory/oom_recoveries": "oom_recoveries",
    "memory/replans": "memory_replans",
    "batch/global_batch": "global_batch",
    "batch/micro_batch": "micro_batch",
    "batch/accumulation": "accumulation",
    "batch/noise_scale": "noise_scale",
    "comm/comm_ms": "comm_ms",
    "comm/exposed_ms": "exposed_comm_ms",
    "comm/hidden_fraction": "hidden_fraction",
    "pipeline/bubble": "bubble",
    "pipeline/bubble_theory": "bubble_theory",
    "pipeline/norm_wait_ms": "norm_wait_ms",
    "train/skipped_steps": "skipped_steps",
    "elastic/world_size": "world_size",
}
# Numbers of a step's record that are not charts: the x axis.
NOT_SCALARS = {"step"}
CHECKPOINT_SCALARS = {
    "checkpoint/stall_ms": "checkpoint_stall_ms",
    "checkpoint/write_s": "checkpoint_write_s",
    "checkpoint/bytes": "checkpoint_bytes",
}
NAME = re.compile(r"^events\.out\.tfevents\.\d{10}\.[^.].*\.\d+\.\d+$")


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def train(cmd, log_path, env=None):
    with open(log_path, "w") as out:
        status = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=240,
                                env=dict(os.environ, **(env or {}))).returncode
    if status != 0:
        print(open(log_path).read())
        fail("etr-train exited with status %d: %s" % (status, " ".join(cmd)))


def count_records(path):
    """Records in `path` by the framing alone, checking both masked CRCs."""
    data = open(path, "rb").read()
    at = n = 0
    while at < len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        (head_crc,) = struct.unpack_from("<I", data, at + 8)
        if head_crc != masked_crc32c(data[at : at + 8]):
            fail("%s: record %d: the length's CRC is wrong" % (path, n))
        body = data[at + 12 : at + 12 + length]
        (body_crc,) = struct.unpack_from("<I", data, at + 12 + length)
        if body_crc != masked_crc32c(body):
            fail("%s: record %d: the data's CRC is wrong" % (path, n))
        at += 16 + length
        n += 1
    if at != len(data):
        fail("%s: %d bytes after the last record" % (path, len(data) - at))
    return n


def check_files(tb_dir):
    files = sorted(os.listdir(tb_dir))
    if len(files) != 2:
        fail("expected an event file per process start (2), found %s" % files)
    for name in files:
        if not NAME.match(name):
            fail("%s does not follow TensorBoard's naming" % name)
        path = os.path.join(tb_dir, name)
        events = []
        for raw in event_file_loader.RawEventFileLoader(path).Load():
            e = event_pb2.Event()
            e.ParseFromString(raw)
            events.append(e)
        expected = count_records(path)
        if len(events) != expected:
            fail("%s: TensorBoard's loader read %d of %d records" % (name, len(events), expected))
        if events[0].file_version != "brain.Event:2":
            fail("%s: the first event is not the file version: %s" % (name, events[0]))
        print("%s: %d events" % (name, len(events)))


def same(tb_value, metric, what):
    want = float(np.float32(metric))
    if not (tb_value == want or (math.isnan(want) and math.isnan(tb_value))):
        fail("%s: TensorBoard has %r, the metrics file %r" % (what, tb_value, metric))


def check_scalars(acc, metrics):
    scalars = {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
    steps = [m for m in metrics if "loss" in m]
    evals = [m for m in metrics if "val_loss" in m]
    saves = [m for m in metrics if "checkpoint_tier" in m]
    if len(steps) != 8 or not evals or len(saves) < 3:
        fail("the metrics file lacks records: %d steps, %d evals, %d saves"
             % (len(steps), len(evals), len(saves)))
    # Every number of a step's record is a chart: a field added to the metrics without a
    # TensorBoard tag (or without a row above) fails here.
    keys = {k for m in steps for k, v in m.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)} - NOT_SCALARS
    missing = keys - set(STEP_SCALARS.values())
    if missing:
        fail("numbers of the metrics record with no TensorBoard tag: %s" % sorted(missing))
    checked = 0
    for table, records in ((STEP_SCALARS, steps), (CHECKPOINT_SCALARS, saves),
                           ({"eval/loss": "val_loss"}, evals)):
        for tag, key in table.items():
            for m in records:
                if key not in m:
                    continue
                if m["step"] not in scalars.get(tag, {}):
                    fail("no %s at step %d (TensorBoard has steps %s)"
                         % (tag, m["step"], sorted(scalars.get(tag, {}))))
                same(scalars[tag][m["step"]], m[key], "%s at step %d" % (tag, m["step"]))
                checked += 1
    if not any(m.get("comm_ms") is not None for m in steps):
        fail("the 2-rank launch reported no communication")
    worlds = [scalars["elastic/world_size"][s] for s in (1, 6, 7, 8)]
    if worlds != [2, 2, 1, 1]:
        fail("elastic/world_size at steps 1, 6, 7, 8: %s" % worlds)
    print("%d scalars equal the metrics file's" % checked)


def texts(acc, tag):
    if tag not in acc.PluginTagToContent("text"):
        fail("no text events under %s (text tags: %s)" % (tag, acc.PluginTagToContent("text")))
    out = []
    for e in acc.Tensors(tag):
        value = tensor_util.make_ndarray(e.tensor_proto)
        out.append((e.step, value.item().decode()))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mpirun", required=True)
    p.add_argument("--train", required=True)
    p.add_argument("--config", required=True)
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="etr-tensorboard-")
    tb_dir = os.path.join(work, "runs", "tiny")
    metrics = os.path.join(work, "metrics.jsonl")
    common = ["--config", a.config, "--set", "log.log_every=1", "--set", "log.eval_every=3",
              "--set", "runtime.threads=1", "--set", "log.metrics_file=" + metrics,
              "--set", "log.tensorboard_dir=" + tb_dir,
              "--set", "checkpoint.dir=" + os.path.join(work, "ckpt"),
              "--set", "checkpoint.every=3", "--set", "checkpoint.resume=latest"]
    print("== 1. 6 steps on 2 ranks, then a resume to step 8 on 1 rank")
    train([a.mpirun, "-np", "2", "--bind-to", "none", a.train] + common
          + ["--set", "schedule.max_steps=6"], os.path.join(work, "out1"))
    run_dir = os.path.join(work, "etr-run")  # (etr-run's run directory: its events file)
    os.makedirs(run_dir)
    relaunch = {"ETR_RUN_DIR": run_dir, "ETR_RUN_RESTART": "1", "ETR_RUN_REASON": "failure",
                "ETR_RUN_PREV_NP": "2", "ETR_RUN_LAST_STEP": "6",
                "ETR_TEST_BUDGET_CUT": "8:3MiB"}  # (tiny at micro-batch 2 peaks at 3.7 MiB)
    train([a.train] + common + ["--set", "schedule.max_steps=8"], os.path.join(work, "out2"),
          relaunch)
    print("== 2. the event files, record by record")
    check_files(tb_dir)
    print("== 3. EventAccumulator against the metrics file")
    acc = event_accumulator.EventAccumulator(
        os.path.join(work, "runs", "tiny"),
        size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    acc.Reload()
    records = [json.loads(line) for line in open(metrics)]
    check_scalars(acc, records)
    relaunches = [m for m in records if m.get("event") == "relaunch"]
    want = {"step": 6, "event": "relaunch", "restart": 1, "reason": "failure",
            "world_before": 2, "world_after": 1, "steps_lost": 0}
    if relaunches != [want]:
        fail("the metrics file's relaunch records: %s, not [%s]" % (relaunches, want))
    launches = texts(acc, "elastic/launch")
    print("launches:", launches)
    if len(launches) != 2 or launches[0][0] != 0 or launches[1][0] != 6:
        fail("expected a launch text at step 0 and one at step 6: %s" % launches)
    if "2 rank(s)" not in launches[0][1] or "relaunch 1 after a failure: world 2 -> 1, resumed from step 6" not in launches[1][1]:
        fail("the launch texts do not say the world and the resumed step: %s" % launches)
    decisions = texts(acc, "memory/decisions")
    print("memory decisions:", decisions)
    if len(decisions) != 1 or decisions[0][0] != 8 or "out of memory inside the step" not in decisions[0][1]:
        fail("expected the out-of-memory recovery of step 8: %s" % decisions)
    saves = texts(acc, "checkpoint/saves")
    if [s for s, _ in saves] != [3, 6, 8] or "durable checkpoint of step 3" not in saves[0][1]:
        fail("checkpoint texts: %s" % saves)
    subprocess.run(["rm", "-rf", work], check=False)
    print("PASS")


if __name__ == "__main__":
    main()
