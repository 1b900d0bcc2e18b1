#!/usr/bin/env bash
# etr-train's checkpoints as a user meets them (mpirun, the tiny config):
#  a. a 2-rank job killed at step 4 (ETR_FAIL_AT_STEP=4:1) after its checkpoint at step 3
#     resumes with --resume latest on 2 ranks and completes; its final checkpoint's shard
#     files are byte-identical to an uninterrupted 2-rank run's;
#  a2. a run in parts (schedule.stop_at_step=2, then 5, then to the end, no other
#     checkpoints) saves at each stop and ends byte-identical to the uninterrupted run;
#  b. the same checkpoint resumed on 3 ranks completes;
#  c. a full disk (ulimit -f): the save fails, etr-train exits 1 saying so, and the
#     previous checkpoint is still there, complete and verified; no .partial is left;
#  d. a corrupt newest checkpoint (one flipped byte) is refused with a sentence and the
#     job resumes from the older one, ending where the uninterrupted run ends.
# Usage: checkpoint_resume_test.sh ETR_MPIRUN ETR_TRAIN CONFIG [ETR_CKPT]
# (ETR_CKPT, when given, also checks the checkpoint of c with `etr-ckpt verify`.)
set -u
mpirun=$1 train=$2 config=$3 ckpt=${4:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
common=(--config "$config" --set schedule.max_steps=6 --set log.log_every=1
        --set log.eval_every=0 --set runtime.threads=1)
# run NP OUT ARGS...: etr-train ARGS on NP ranks (the environment's ETR_FAIL_AT_STEP
# passed on), all output into OUT; returns its status.
run() {
  local np=$1 out=$2
  shift 2
  timeout 120 "$mpirun" -np "$np" --bind-to none -x ETR_FAIL_AT_STEP="${ETR_FAIL_AT_STEP:-}" \
    "$train" "${common[@]}" "$@" >"$out" 2>&1
}
# same_shards A B: every shard file of checkpoint A equals B's, and they have the same ones.
same_shards() {
  local a=$1 b=$2 n=0
  [ "$(cd "$a" && ls shard-*)" = "$(cd "$b" && ls shard-*)" ] || fail "$a and $b hold different shard files"
  for f in "$a"/shard-*; do
    cmp "$f" "$b/$(basename "$f")" || fail "$(basename "$f") differs between $a and $b"
    n=$((n + 1))
  done
  echo "$n shard file(s) of $a equal $b's"
}
# flip_byte FILE OFFSET: XORs the byte at OFFSET with 0xff.
flip_byte() {
  local byte
  byte=$(dd if="$1" bs=1 skip="$2" count=1 2>/dev/null | od -An -tu1 | tr -d ' \n')
  # shellcheck disable=SC2059
  printf "$(printf '\\%03o' $((byte ^ 255)))" | dd of="$1" bs=1 seek="$2" count=1 conv=notrunc 2>/dev/null
}
step() { printf '%s/step-%09d' "$1" "$2"; }

echo "== reference: an uninterrupted 2-rank run, checkpoints at 3 and 6"
run 2 "$work/ref.out" --set checkpoint.dir="$work/ref" --set checkpoint.every=3 ||
  { cat "$work/ref.out"; fail "the uninterrupted run failed"; }
[ -f "$(step "$work/ref" 6)/manifest.pb" ] || fail "the uninterrupted run saved no step 6"

echo "== a. killed at step 4, resumed on 2 ranks"
# Sync saves, so that step 3 is committed before rank 1 fails (an async save is committed
# at a later step boundary, which the failure may pre-empt: then nothing is resumable).
ETR_FAIL_AT_STEP=4:1 run 2 "$work/a1.out" --set checkpoint.dir="$work/ck" \
  --set checkpoint.every=3 --set checkpoint.async=false
status=$?
[ "$status" -ne 0 ] || fail "the job exited 0 although rank 1 failed"
[ "$status" -ne 124 ] || fail "the job hung after rank 1 failed"
grep -q "rank 1 fails at step 4" "$work/a1.out" || { cat "$work/a1.out"; fail "no failure message"; }
[ -f "$(step "$work/ck" 3)/manifest.pb" ] || { cat "$work/a1.out"; fail "no checkpoint of step 3"; }
[ ! -e "$(step "$work/ck" 6)" ] || fail "the killed job saved step 6"
cp -r "$work/ck" "$work/ck3"  # for b
run 2 "$work/a2.out" --set checkpoint.dir="$work/ck" --set checkpoint.every=3 --resume latest ||
  { cat "$work/a2.out"; fail "the resumed 2-rank run failed"; }
grep -q "resumed from $(step "$work/ck" 3): step 3" "$work/a2.out" ||
  { cat "$work/a2.out"; fail "did not resume from step 3"; }
grep -q "done: 3 steps (from step 3)" "$work/a2.out" || { cat "$work/a2.out"; fail "did not train steps 4-6"; }
same_shards "$(step "$work/ck" 6)" "$(step "$work/ref" 6)"

echo "== a2. a run in parts: schedule.stop_at_step"
for stop in 2 5 0; do
  run 2 "$work/parts$stop.out" --set checkpoint.dir="$work/parts" --set checkpoint.every=0 \
    --set schedule.stop_at_step=$stop --resume latest || { cat "$work/parts$stop.out"; fail "the part to $stop failed"; }
done
[ "$(ls "$work/parts")" = "$(printf 'step-000000002\nstep-000000005\nstep-000000006')" ] ||
  fail "the parts did not save exactly steps 2, 5 and 6: $(ls "$work/parts" | tr '\n' ' ')"
grep -q "done: 3 steps (from step 2)" "$work/parts5.out" || { cat "$work/parts5.out"; fail "the second part did not train steps 3-5"; }
same_shards "$(step "$work/parts" 6)" "$(step "$work/ref" 6)"

echo "== b. the same checkpoint resumed on 3 ranks"
run 3 "$work/b.out" --set checkpoint.dir="$work/ck3" --set checkpoint.every=3 --resume latest ||
  { cat "$work/b.out"; fail "the resumed 3-rank run failed"; }
grep -q "resumed from $(step "$work/ck3" 3): step 3.*saved by 2 rank(s), now 3" "$work/b.out" ||
  { cat "$work/b.out"; fail "did not resume from the 2-rank step 3 on 3 ranks"; }
grep -q "done: 3 steps (from step 3)" "$work/b.out" || { cat "$work/b.out"; fail "did not train steps 4-6"; }
shards=("$(step "$work/ck3" 6)"/shard-*-of-00003.bin)
if [ "${#shards[@]}" -ne 3 ] || [ ! -f "${shards[2]}" ]; then
  fail "step 6 of the 3-rank run does not hold 3 shard files"
fi

echo "== c. a full disk: the save fails, the previous checkpoint survives"
# d_model 256: one rank's shard is ~19 MiB, over a 16000 KiB file-size limit (which still
# lets MPI start; etr-train ignores SIGXFSZ, so the write fails with EFBIG).
big=(--set model.d_model=256 --set model.n_head=4 --set checkpoint.dir="$work/full")
run 1 "$work/c1.out" "${big[@]}" --set schedule.max_steps=2 ||
  { cat "$work/c1.out"; fail "the first run failed"; }
kept=$(step "$work/full" 2)
[ -f "$kept/manifest.pb" ] || fail "the first run saved no step 2"
(ulimit -f 16000 && run 1 "$work/c2.out" "${big[@]}" --set schedule.max_steps=4 --resume latest)
status=$?
[ "$status" -eq 1 ] || { cat "$work/c2.out"; fail "exit status $status, not 1, after a failed last save"; }
grep -q "resumed from $kept" "$work/c2.out" || { cat "$work/c2.out"; fail "did not resume from step 2"; }
grep -q "File too large" "$work/c2.out" || { cat "$work/c2.out"; fail "the cause (EFBIG) is not reported"; }
grep -q "etr-train: error: the last checkpoint (step 4) was not saved" "$work/c2.out" ||
  { cat "$work/c2.out"; fail "no 'not saved' error"; }
[ -f "$kept/manifest.pb" ] || fail "step 2's manifest is gone"
[ ! -e "$(step "$work/full" 4)" ] || fail "a step-4 directory exists after the failed save"
leftover=$(find "$work/full" -name '*.partial')
[ -z "$leftover" ] || fail "left behind: $leftover"
[ "$(ls -A "$work/full")" = "step-000000002" ] || fail "unexpected entries in $work/full: $(ls -A "$work/full")"
# Step 2 still verifies: resuming from it explicitly checks every shard's size and
# checksum (an explicit path with nothing usable is an error).
run 1 "$work/c3.out" --set model.d_model=256 --set model.n_head=4 --set schedule.max_steps=2 \
  --resume "$kept" || { cat "$work/c3.out"; fail "step 2 no longer verifies"; }
grep -q "resumed from $kept: step 2" "$work/c3.out" || { cat "$work/c3.out"; fail "did not resume from step 2"; }
if [ -n "$ckpt" ]; then
  "$ckpt" verify "$kept" >"$work/c4.out" 2>&1 || { cat "$work/c4.out"; fail "etr-ckpt verify $kept failed"; }
  echo "etr-ckpt verify: ok"
fi

echo "== d. a corrupt newest checkpoint: fall back to the older one"
run 2 "$work/d1.out" --set checkpoint.dir="$work/corrupt" --set checkpoint.every=2 \
  --set schedule.max_steps=4 || { cat "$work/d1.out"; fail "the run saving steps 2 and 4 failed"; }
newest=$(step "$work/corrupt" 4)
flip_byte "$newest/shard-00000-of-00002.bin" 1000
run 2 "$work/d2.out" --set checkpoint.dir="$work/corrupt" --set checkpoint.every=0 --resume latest ||
  { cat "$work/d2.out"; fail "the run resuming past the corrupt checkpoint failed"; }
grep -q "checkpoint $newest is not usable: shard file .*shard-00000-of-00002.bin fails its checksum" \
  "$work/d2.out" || { cat "$work/d2.out"; fail "the corrupt checkpoint was not reported"; }
grep -q "falling back to $(step "$work/corrupt" 2)" "$work/d2.out" || { cat "$work/d2.out"; fail "no fallback"; }
grep -q "resumed from $(step "$work/corrupt" 2): step 2" "$work/d2.out" ||
  { cat "$work/d2.out"; fail "did not resume from step 2"; }
same_shards "$(step "$work/corrupt" 6)" "$(step "$work/ref" 6)"
echo "PASS"
