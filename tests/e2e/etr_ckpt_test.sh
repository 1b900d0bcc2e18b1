#!/usr/bin/env bash
# etr-ckpt on checkpoints that etr-train wrote, as a user runs it:
#  1. etr-train (2 ranks) saves steps 2, 4, 6; --help of every subcommand; usage errors
#  2. list: complete, corrupt (a flipped bit, a truncated shard), incomplete, the resume
#     mark, --quick; etr-train --resume takes the checkpoint list marked
#  3. show and verify, on good and bad checkpoints (the bad file named); manifests
#     crafted with valid checksums (step 2^63, a data position that disagrees with the
#     step): verify names the inconsistency, list marks them corrupt, etr-train --resume
#     falls back to the older checkpoint; a run whose loss turns NaN (lr 1e30 on 2 ranks)
#     exits 1 naming the step and leaves only the checkpoint of the good step
#  4. rollback: newer checkpoints moved aside, not deleted; several directories; then
#     etr-train --resume continues from the rolled-back step to the same bytes as the
#     uninterrupted run
#  5. restore: into a new directory, into one holding the step, over a corrupt copy
#  6. reshard 2 -> 3: verifies, same parameters (exports compare equal), resumes on 3 ranks;
#     6c. reshard --pp 2: a 2-stage pipeline resumes it and continues as data parallelism
#     does within float rounding (ckpt_compare at 1e-5)
#  7. export: the file loads (import_hf) and equals the checkpoint's parameters
#  8. prune; errors: a nonexistent path, --pp 2, an existing output
# Usage: etr_ckpt_test.sh ETR_MPIRUN ETR_TRAIN ETR_CKPT HF_IMPORT_CHECK CONFIG MANIFEST_EDIT
set -u
mpirun=$1 train=$2 ckpt=$3 import_check=$4 config=$5 manifest_edit=$6 compare=$7
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
step() { printf 'step-%09d' "$1"; }
common=(--config "$config" --set schedule.max_steps=6 --set log.eval_every=0
        --set runtime.threads=1 --set checkpoint.every=2 --set checkpoint.keep=0
        --set checkpoint.async=false)
# run EXPECTED_STATUS NAME etr-ckpt-args...: output in NAME.out (stdout + stderr).
run() {
  local want=$1 name=$2
  shift 2
  "$ckpt" "$@" >"$name.out" 2>&1
  local got=$?
  [ "$got" -eq "$want" ] || { cat "$name.out"; fail "etr-ckpt $* exited $got, expected $want"; }
}
expect() {  # expect NAME PATTERN: NAME.out has a line matching the extended regex
  grep -Eq -- "$2" "$1.out" || { cat "$1.out"; fail "$1: no line matching '$2'"; }
}

echo "== 1. etr-train saves checkpoints; --help; usage errors"
"$mpirun" -np 2 --bind-to none "$train" "${common[@]}" --set checkpoint.dir="$work/ck" \
  >train.out 2>&1 || { cat train.out; fail "etr-train failed"; }
for s in 2 4 6; do [ -f "ck/$(step $s)/manifest.pb" ] || fail "no checkpoint of step $s"; done
run 0 help --help
for sub in list show verify restore rollback reshard export prune; do
  run 0 "help_$sub" "$sub" --help
  expect "help_$sub" "$sub"
done
run 2 usage_none
run 2 usage_missing verify
expect usage_missing "etr-ckpt: error: .*CKPT.*required"
run 2 usage_unknown frobnicate

echo "== 2. list: complete, corrupt, incomplete, the resume mark"
run 0 list list ck
expect list "^ck: 3 checkpoint"
expect list "^ +2 +durable +2 .* complete$"
expect list "^ +6 +durable +2 .* complete  <- resume$"
cp -r ck bad
python3 - "bad/$(step 4)/shard-00001-of-00002.bin" <<'PY' || fail "cannot flip a bit"
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
data[len(data) // 2] ^= 0x04
open(path, "wb").write(data)
PY
truncate -s 1000 "bad/$(step 6)/shard-00000-of-00002.bin"
mkdir "bad/$(step 8)"  # a save that never finished
run 0 list_bad list bad
expect list_bad "^ +2 .* complete  <- resume$"
expect list_bad "^ +4 .* corrupt: shard file bad/$(step 4)/shard-00001-of-00002.bin fails its checksum"
expect list_bad "^ +6 .* corrupt: shard file bad/$(step 6)/shard-00000-of-00002.bin has 1000 bytes"
expect list_bad "^ +8 .* incomplete"
expect list_bad "a job resuming from bad takes bad/$(step 2)"
run 0 list_quick list --quick bad
expect list_quick "^ +4 .* complete \(not verified\)  <- resume$"
expect list_quick "^ +6 .* corrupt: .*has 1000 bytes"
# etr-train agrees with the mark: the newest checkpoint that verifies.
"$train" "${common[@]}" --set schedule.max_steps=3 --resume bad >resume_bad.out 2>&1 ||
  { cat resume_bad.out; fail "etr-train --resume bad failed"; }
grep -q "resumed from bad/$(step 2): step 2" resume_bad.out || { cat resume_bad.out; fail "etr-train did not resume from step 2"; }
run 1 list_missing list "$work/nowhere"
expect list_missing "^etr-ckpt: error: .*nowhere does not exist$"

echo "== 3. show, verify"
run 0 show show "ck/$(step 6)"
expect show "^  format version +2$"
expect show "^  step +6$"
expect show "^  layout +world 2 \(dp 2, pp 1, zero 0\)$"
expect show "^  tier +durable$"
expect show "^  writer +etr-train"
expect show "^  states +param, adam.m, adam.v$"
expect show "shard-00001-of-00002.bin +[0-9]+ bytes +xxh3 [0-9a-f]{16} +rank 1$"
expect show "^  wte.weight +adam.v +f32 +\[256, 64\] +1 +1$"
expect show "^config:$"
expect show "^    dir: \"$work/ck\"$"
run 0 verify verify "ck/$(step 6)"
expect verify "^OK: step 6, 2 files, [0-9]+ bytes verified"
run 1 verify_flip verify "bad/$(step 4)"
expect verify_flip "^etr-ckpt: error: shard file bad/$(step 4)/shard-00001-of-00002.bin fails its checksum"
run 1 verify_trunc verify "bad/$(step 6)"
expect verify_trunc "^etr-ckpt: error: shard file bad/$(step 6)/shard-00000-of-00002.bin has 1000 bytes .*truncated"
run 1 verify_incomplete verify "bad/$(step 8)"
expect verify_incomplete "^etr-ckpt: error: .*has no manifest.pb"
run 1 verify_root verify ck
expect verify_root "is a directory of checkpoints, not a checkpoint"
run 1 verify_missing verify "$work/nowhere"
expect verify_missing "^etr-ckpt: error: the checkpoint .*nowhere does not exist$"
# craft DIR SED_SCRIPT: DIR's manifest edited as text, re-written with a valid checksum.
craft() {
  "$manifest_edit" print "$1" >manifest.txt || fail "cannot print the manifest of $1"
  sed -i "$2" manifest.txt
  "$manifest_edit" write "$1" manifest.txt || fail "cannot write the manifest of $1"
}
cp -r ck crafted
craft "crafted/$(step 6)" 's/^step: 6$/step: 9223372036854775808/'
grep -q '^step: 9223372036854775808$' manifest.txt || fail "the crafted manifest has no step 2^63"
craft "crafted/$(step 4)" 's/^  samples_seen: 16$/  samples_seen: 20/'
grep -q '^  samples_seen: 20$' manifest.txt || fail "the crafted manifest has no sample 20"
run 1 verify_step verify "crafted/$(step 6)"
expect verify_step "^etr-ckpt: error: crafted/$(step 6)/manifest.pb passes its checksum but does not make sense: it records step 9223372036854775808, more than"
run 1 verify_position verify "crafted/$(step 4)"
expect verify_position "^etr-ckpt: error: .*does not make sense: its data position is sample 20 but step 4 at a global batch of 4 ends at sample 16$"
run 0 list_crafted list crafted
expect list_crafted "^ +6 .* corrupt: .*does not make sense: it records step 9223372036854775808"
expect list_crafted "^ +2 .* complete  <- resume$"
"$train" "${common[@]}" --set schedule.max_steps=3 --resume crafted >resume_crafted.out 2>&1 ||
  { cat resume_crafted.out; fail "etr-train --resume crafted failed"; }
grep -q "resumed from crafted/$(step 2): step 2" resume_crafted.out ||
  { cat resume_crafted.out; fail "etr-train did not fall back to step 2"; }
# Finite or stop: the loss is NaN from step 2 at lr 1e30 (which validation accepts).
"$mpirun" -np 2 --bind-to none "$train" "${common[@]}" --set optimizer.lr=1e30 \
  --set checkpoint.every=1 --set checkpoint.dir="$work/nan" >nan.out 2>&1
status=$?
[ "$status" -eq 1 ] || { cat nan.out; fail "a run whose loss turned NaN exited $status, not 1"; }
grep -q "error: step 2: the loss summed over the 2 ranks is nan, so training stopped" nan.out ||
  { cat nan.out; fail "the NaN run does not name step 2"; }
[ "$(ls nan)" = "$(step 1)" ] || { ls -a nan; fail "the NaN run left more than the checkpoint of step 1"; }
run 0 verify_nan verify "nan/$(step 1)"

echo "== 4. rollback, then resume from the rolled-back step"
cp -r ck live
run 0 rollback rollback live --step 2
expect rollback "moved 2 newer checkpoint"
ls -d live/rolled-back-*/"$(step 4)" live/rolled-back-*/"$(step 6)" >/dev/null ||
  fail "the newer checkpoints were not moved aside"
run 0 list_live list live
expect list_live "^ +2 .* complete  <- resume$"
expect list_live "also here: rolled-back-"
"$mpirun" -np 2 --bind-to none "$train" "${common[@]}" --set checkpoint.dir="$work/live" \
  --resume live >resume_live.out 2>&1 || { cat resume_live.out; fail "etr-train --resume live failed"; }
grep -q "resumed from live/$(step 2): step 2" resume_live.out || { cat resume_live.out; fail "etr-train did not resume from step 2"; }
for f in shard-00000-of-00002.bin shard-00001-of-00002.bin; do
  cmp -s "ck/$(step 6)/$f" "live/$(step 6)/$f" ||
    fail "step 6 after rollback and resume differs from the uninterrupted run ($f)"
done
run 1 rollback_none rollback live --step 5
expect rollback_none "no checkpoint of step 5 that verifies"
cp -r ck live2
mkdir fast && cp -r "ck/$(step 6)" fast/
run 0 rollback_two rollback live2 fast --step 4
expect rollback_two "^live2: moved 1 newer"
expect rollback_two "^fast: moved 1 newer"
expect rollback_two "no usable step 4 in fast"
[ -z "$(ls -d fast/step-* 2>/dev/null)" ] || fail "fast still has a checkpoint newer than step 4"

echo "== 5. restore"
run 0 restore restore "ck/$(step 4)" --to restored
expect restore "copied it to restored/$(step 4)"
run 0 verify_restored verify "restored/$(step 4)"
cp -r ck live3
run 0 restore_present restore "ck/$(step 4)" --to live3
expect restore_present "already holds step 4 and it verifies"
expect restore_present "moved 1 newer"
run 0 restore_over restore "ck/$(step 4)" --to bad
expect restore_over "moved the existing bad/$(step 4) aside"
run 0 verify_over verify "bad/$(step 4)"
ls -d bad/"$(step 4)".replaced-* bad/rolled-back-*/"$(step 6)" >/dev/null ||
  fail "restore deleted something instead of moving it aside"
run 1 restore_corrupt restore "bad/$(step 4)".replaced-* --to restored2
expect restore_corrupt "fails its checksum"
[ ! -e restored2 ] || fail "a failed restore left restored2 behind"

echo "== 6. reshard 2 -> 3"
run 0 reshard reshard "ck/$(step 6)" --world 3 -o r3
expect reshard "wrote r3/$(step 6): world 3 \(dp 3, pp 1, zero 0\), 3 shard files"
run 0 verify_r3 verify "r3/$(step 6)"
expect verify_r3 "^OK: step 6, 3 files"
run 0 show_r3 show "r3/$(step 6)"
expect show_r3 "^  writer +etr-ckpt reshard$"
run 0 export_2 export "ck/$(step 6)" -o from2.safetensors
run 0 export_3 export "r3/$(step 6)" -o from3.safetensors
cmp from2.safetensors from3.safetensors || fail "the resharded parameters differ"
"$mpirun" -np 3 --bind-to none "$train" "${common[@]}" --set schedule.max_steps=7 \
  --set checkpoint.dir="$work/r3" --resume "r3/$(step 6)" >resume_r3.out 2>&1 ||
  { cat resume_r3.out; fail "3 ranks could not resume from the resharded checkpoint"; }
grep -q "resumed from r3/$(step 6): step 6.*saved by 3 rank(s), now 3" resume_r3.out ||
  { cat resume_r3.out; fail "no resume line"; }
echo "== 6b. reshard --zero 3: stage 3 on 2 ranks continues as stage 0 did"
run 0 reshard_z3 reshard "ck/$(step 6)" --world 2 --zero 3 -o rz
expect reshard_z3 "wrote rz/$(step 6): world 2 \(dp 2, pp 1, zero 3\), 2 shard files"
for stage in 0 3; do
  src=ck
  [ "$stage" -eq 3 ] && src=rz
  "$mpirun" -np 2 --bind-to none "$train" "${common[@]}" --set schedule.max_steps=7 \
    --set parallel.zero_stage=$stage --set checkpoint.dir="$work/z$stage" \
    --resume "$src/$(step 6)" >resume_z$stage.out 2>&1 ||
    { cat resume_z$stage.out; fail "stage $stage could not resume from $src/$(step 6)"; }
  run 0 export_z$stage export "z$stage/$(step 7)" -o z$stage.safetensors
done
grep -q "ZeRO stage 3" resume_z3.out || { cat resume_z3.out; fail "the resumed run is not at stage 3"; }
cmp z0.safetensors z3.safetensors || fail "stage 3 continued differently from stage 0"
echo "== 6c. reshard --pp 2: a pipeline of 2 stages resumes it as data parallelism does"
run 0 reshard_pp reshard "ck/$(step 6)" --world 2 --pp 2 -o rp
expect reshard_pp "wrote rp/$(step 6): world 2 \(dp 1, pp 2, zero 0\), 2 shard files"
"$mpirun" -np 2 --bind-to none "$train" "${common[@]}" --set schedule.max_steps=7 \
  --set parallel.pp=2 --set parallel.pp_partition=params --set checkpoint.dir="$work/p2" \
  --resume "rp/$(step 6)" >resume_pp.out 2>&1 ||
  { cat resume_pp.out; fail "a 2-stage pipeline could not resume from rp/$(step 6)"; }
grep -q "pipeline: 1f1b over 2 stages" resume_pp.out || { cat resume_pp.out; fail "the resumed run is not a pipeline"; }
"$compare" "z0/$(step 7)" "p2/$(step 7)" 1e-5 ||
  fail "the pipeline continued differently from data parallelism (beyond float rounding)"
run 1 reshard_pp3 reshard "ck/$(step 6)" --world 3 --pp 2 -o r4
expect reshard_pp3 "^etr-ckpt: error: --world 3 is not a multiple of --pp 2"
run 1 reshard_zero reshard "ck/$(step 6)" --world 4 --zero 4 -o r4
expect reshard_zero "^etr-ckpt: error: --zero must be 0, 1, 2 or 3"
run 1 reshard_world reshard "ck/$(step 6)" --world 0 -o r4
run 1 reshard_exists reshard "ck/$(step 6)" --world 3 -o r3
expect reshard_exists "already exists"
run 1 reshard_bad reshard bad/rolled-back-*/"$(step 6)" --world 3 -o r4  # truncated
expect reshard_bad "has 1000 bytes"
[ ! -e r4 ] || fail "failed reshards left r4 behind"

echo "== 7. export"
"$import_check" "ck/$(step 6)" from2.safetensors || fail "the export does not load as the checkpoint's parameters"
run 0 export_dir export "ck/$(step 6)" -o hf/
[ -f hf/model.safetensors ] && [ -f hf/config.json ] || fail "export to a directory"
cmp hf/model.safetensors from2.safetensors || fail "the two exports differ"
run 1 export_missing export "$work/nowhere" -o x.safetensors

echo "== 8. prune"
cp -r ck pruned
run 0 prune prune pruned --keep 1
expect prune "^deleted pruned/$(step 2)$"
expect prune "^deleted pruned/$(step 4)$"
[ -d "pruned/$(step 6)" ] && [ ! -e "pruned/$(step 4)" ] || fail "prune kept the wrong ones"
run 1 prune_zero prune pruned --keep 0
run 1 prune_missing prune "$work/nowhere" --keep 1
echo "PASS"
