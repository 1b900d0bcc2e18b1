#!/usr/bin/env python3
"""The chaos soak's report (bench/run_chaos.sh), from its fault log and etr-run's events.

  chaos_report.py FAULTS EVENTS OUTPUT FF_STEPS CHAOS_STEPS SECONDS [HOSTS]
      a row per fault: its class and target, detection (the fault to the end of the
      launch it broke), recovery (to the next launch's first step), steps lost (the
      broken launch's last step less the step the next one restored), the tier restored
      from; then the goodput kept, and the ceiling: the goodput a runtime would keep that
      lost no time to detection, relaunch or recomputation, only the hosts that the faults
      take away (a partition or a lost host: HOST_AWAY_S, by run_chaos.sh), each second
      with a host away worth what the job measured in this run on that many ranks against
      all of them (steps a second from each launch's first step to its end or the fault
      that broke it). Beside it, the same ceiling with the work split as etr splits it
      (each of k ranks runs ceil(B/k) of the global batch B, so a step takes that long),
      which is what compute-bound hosts would give. HOSTS (default 3): the hosts of 1
      slot the soak ran on, the job on at most RANKS of them; with spare hosts a second
      with a host away is worth a full one while enough others are up.
  chaos_report.py --segments EVENTS FINAL
      the launches to replay: "NP FROM TO" lines, each launch's world size from the step
      it restored to the step the next one restored, the last to FINAL.

FAULTS lines: "<unix ms> <class> <target>", and "<unix ms> back <target>" when a host
partitioned or lost came back (without one, HOST_AWAY_S after its fault); EVENTS lines:
"<unix ms> <name> k=v...".
"""
import math
import re
import sys

RANKS = 3          # run_chaos.sh: the job runs on at most 3 ranks (etr-run --max-np 3)
HOST_AWAY_S = 20   # run_chaos.sh: a partition or a lost host is back 20 s later


def read_events(path):
    events = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 2 or not parts[0].isdigit():
                continue
            fields = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
            events.append((int(parts[0]), parts[1], fields))
    return events


def launches(events):
    """Each launch: its np, the step it restored (0: a fresh start), its end event."""
    out = []
    for ms, name, f in events:
        if name == "launch":
            out.append({"ms": ms, "np": int(f.get("np", 0)), "restored": None,
                        "tier": None, "first_ms": None, "first_step": None, "exit": None,
                        "resize_exit": None})
        elif not out:
            continue
        elif name == "restored":
            out[-1]["restored"] = int(f.get("step", 0))
            out[-1]["tier"] = f.get("tier", "disk")
        elif name == "first-step" and out[-1]["first_ms"] is None:
            out[-1]["first_ms"] = ms
            out[-1]["first_step"] = int(f.get("step", 1))
            if out[-1]["restored"] is None:
                out[-1]["restored"] = int(f.get("step", 1)) - 1
                out[-1]["tier"] = out[-1]["tier"] or ("none" if out[-1]["restored"] == 0 else "?")
        elif name == "resize-exit":
            out[-1]["resize_exit"] = ms
        elif name == "exit":
            out[-1]["exit"] = (ms, int(f.get("status", -1)), int(f.get("last_step", -1)))
    return out


def segments(events_path, final):
    runs = [l for l in launches(read_events(events_path)) if l["first_ms"] is not None]
    for i, l in enumerate(runs):
        start = l["restored"]
        end = runs[i + 1]["restored"] if i + 1 < len(runs) else final
        end = min(end, final)
        if end > start:
            print(l["np"], start, end)


def rates(runs, faults):
    """Steps a second on each number of ranks, measured: the steps after each launch's
    first, over the time from its first step to the first fault within it (a broken
    launch does no step between the fault and its end; it was half-way through a step
    on average when the fault came, counted as half a step), else to the job's word that
    it stopped to resize (its last step and that step's save done), else to its end."""
    steps, secs = {}, {}
    for l in runs:
        if l["first_ms"] is None or l["exit"] is None or l["first_step"] is None:
            continue
        broken = [ms for ms, _, _ in faults if l["first_ms"] < ms < l["exit"][0]]
        end = min(broken) if broken else (l["resize_exit"] or l["exit"][0])
        n = l["exit"][2] - l["first_step"] + (0.5 if broken else 0.0)
        t = (end - l["first_ms"]) / 1000
        if n > 0 and t > 0:
            steps[l["np"]] = steps.get(l["np"], 0) + n
            secs[l["np"]] = secs.get(l["np"], 0.0) + t
    return {k: steps[k] / secs[k] for k in steps}


def away_spans(faults, backs):
    """(from, to) unix ms of each partition or lost host: to its "back" line, if any."""
    spans = []
    for ms, cls, target in faults:
        if cls not in ("partition", "host"):
            continue
        back = [b for b, t in backs if t == target and b >= ms]
        spans.append((ms, min(back) if back else ms + HOST_AWAY_S * 1000))
    return spans


def ceiling(away, begin_ms, seconds, worth, hosts):
    """The fraction of the fault-free steps a runtime with no overhead would do, a second
    on `up` ranks (one a host up, at most RANKS) being worth worth(up) of one on RANKS."""
    dt, done = 100, 0.0
    for t in range(begin_ms, begin_ms + seconds * 1000, dt):
        up = min(RANKS, hosts - sum(1 for a, b in away if a <= t < b))
        done += worth(up) if up > 0 else 0.0
    return done * dt / (seconds * 1000)


def away_text(away):
    secs = sorted((b - a) / 1000 for a, b in away)
    return f"{secs[0]:.2f}-{secs[-1]:.2f} s" if secs else f"{HOST_AWAY_S} s"


def grow_backs(backs, events, faults):
    """A line on the hosts' returns: from each "back" to etr-run's resize request and to
    the first step of the launch on more ranks (a return while the job had already
    relaunched for another reason is left out, and so is one with no request before the
    next fault: a host that came back as a spare, the job already on all its ranks)."""
    asked, grown = [], []
    for ms, _ in backs:
        later = [(t, n, f) for t, n, f in events if t >= ms]
        req = next((t for t, n, _ in later if n == "resize-request"), None)
        next_fault = min((t for t, _, _ in faults if t > ms), default=float("inf"))
        if req is None or req > next_fault or any(n == "launch" and t < req for t, n, _ in later):
            continue
        asked.append((req - ms) / 1000)
        launch = next(((t, f) for t, n, f in later if n == "launch" and t > req), None)
        first = next((t for t, n, _ in later
                      if launch and n == "first-step" and t > launch[0]), None)
        if launch and launch[1].get("reason") == "resize" and first:
            grown.append((first - ms) / 1000)
    if not asked:
        return
    med = lambda v: sorted(v)[len(v) // 2]
    text = (f"hosts back: {len(backs)}; to etr-run's resize request: median {med(asked):.2f} s "
            f"(max {max(asked):.2f})")
    if grown:
        text += (f", to the first step on more ranks: median {med(grown):.2f} s "
                 f"(max {max(grown):.2f})")
    print(text)


def global_batch_of(output_path):
    with open(output_path, errors="replace") as f:
        m = re.search(r"of the global batch (\d+)", f.read())
    return int(m.group(1)) if m else None


def report(faults_path, events_path, output_path, ff_steps, chaos_steps, seconds, hosts=3):
    faults, backs = [], []
    with open(faults_path) as f:
        for line in f:
            ms, cls, target = line.split()
            if cls == "back":
                backs.append((int(ms), target))
            else:
                faults.append((int(ms), cls, target))
    events = read_events(events_path)
    runs = launches(events)
    print(f"{'#':>3} {'fault':>10} {'on':>4} {'detect s':>9} {'recover s':>10} {'steps lost':>11} {'restored from':>14}")
    lost_total = 0
    for i, (ms, cls, target) in enumerate(faults):
        until = faults[i + 1][0] if i + 1 < len(faults) else float("inf")
        row = None
        for k, l in enumerate(runs):
            if l["exit"] is None or not (ms <= l["exit"][0] < until) or l["exit"][1] == 75:
                continue
            nxt = runs[k + 1] if k + 1 < len(runs) else None
            detect = (l["exit"][0] - ms) / 1000
            recover = (nxt["first_ms"] - ms) / 1000 if nxt and nxt["first_ms"] else float("nan")
            lost = max(0, l["exit"][2] - nxt["restored"]) if nxt and nxt["restored"] is not None else 0
            lost_total += lost
            tier = (nxt["tier"] if nxt else None) or "-"
            row = f"{detect:9.2f} {recover:10.2f} {lost:11d} {tier:>14}"
            break
        if row is None:
            row = f"{'-':>9} {'-':>10} {'-':>11} {'(no launch ended)':>14}"
        print(f"{i + 1:3d} {cls:>10} {target:>4} {row}")
    resizes = sum(1 for l in runs if l["exit"] and l["exit"][1] == 75)
    kept = chaos_steps / ff_steps if ff_steps else float("nan")
    print(f"faults: {len(faults)}, launches: {len(runs)}, resizes (hosts back): {resizes}, "
          f"steps lost in all: {lost_total}")
    grow_backs(backs, events, faults)
    print(f"steps in {seconds} s: fault-free {ff_steps}, with faults {chaos_steps}: "
          f"goodput kept {kept * 100:.1f} %")
    batch = global_batch_of(output_path)
    if runs and batch:
        split = lambda up: math.ceil(batch / RANKS) / math.ceil(batch / up)
        r = rates(runs, faults)
        measured = lambda up: min(1.0, r[up] / r[RANKS]) if up in r and RANKS in r else split(up)
        away = away_spans(faults, backs)
        c = ceiling(away, runs[0]["ms"], seconds, measured, hosts)
        c_split = ceiling(away, runs[0]["ms"], seconds, split, hosts)
        shown = ", ".join(f"{k} rank(s) {v:.2f}" for k, v in sorted(r.items()))
        print(f"steps a second in this run, after each launch's first step: {shown}")
        spares = f" ({hosts - RANKS} spare)" if hosts > RANKS else ""
        print(f"ceiling (no time lost to detection, relaunch or recomputation; {hosts} hosts{spares}, "
              f"each partition or lost host away {away_text(away)}, a second with a host away "
              f"worth what this run measured): {c * 100:.1f} %; kept of the ceiling: "
              f"{kept / c * 100:.1f} %; with the work split as etr splits the global batch of "
              f"{batch} (compute-bound hosts): {c_split * 100:.1f} %")
        if RANKS in r and ff_steps:
            # The goodput against the fault-free halves compares two stretches of time; a
            # machine whose speed wanders (a shared VM) moves the figure by its drift. The
            # chaos run's own speed on all hosts gives the same comparison without it.
            ff_rate, own = ff_steps / seconds, r[RANKS] * seconds
            print(f"the machine's speed: fault-free {ff_rate:.2f} steps a second, the chaos run's "
                  f"{RANKS}-rank launches {r[RANKS]:.2f} ({(r[RANKS] / ff_rate - 1) * 100:+.1f} %); "
                  f"against a fault-free run at the chaos run's own speed ({own:.0f} steps): goodput "
                  f"kept {chaos_steps / own * 100:.1f} %")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--segments":
        segments(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) in (7, 8):
        report(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
               int(sys.argv[6]), int(sys.argv[7]) if len(sys.argv) == 8 else 3)
    else:
        sys.exit(__doc__)
