#!/usr/bin/env bash
# etr-train and etr-tokenize against bad input (issue 13 cases 1-6), as a user meets it:
# each refusal ends with the given exit status and one sentence on stderr matching a
# pattern - never a signal death, a hang, "internal error" or a raw std::bad_alloc.
# Other cases are appended as more `expect_fail` lines.
# Usage: bad_input_test.sh ETR_MPIRUN ETR_TRAIN ETR_TOKENIZE TINY_CONFIG
set -u
mpirun=$1 train=$2 tokenize=$3 tiny=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
n=0
# expect_fail CODE REGEX -- COMMAND...: COMMAND (stdin /dev/null, at most 120 s) exits
# with CODE and its stderr matches the extended regex REGEX, holds no "internal error"
# nor "bad_alloc", and the test goes on to the next case either way.
expect_fail() {
  local code=$1 pattern=$2
  shift 3
  n=$((n + 1))
  local err=$work/$n.err status
  timeout 120 "$@" </dev/null >"$work/$n.out" 2>"$err"
  status=$?
  local why=""
  if [ "$status" -ne "$code" ]; then
    why="exit status $status, not $code"
  elif grep -Eq 'internal error|bad_alloc' "$err"; then
    why="an internal error or a raw bad_alloc"
  elif ! grep -Eq -- "$pattern" "$err"; then
    why="no sentence matching: $pattern"
  fi
  if [ -n "$why" ]; then
    echo "FAIL $n: $*: $why"
    sed 's/^/    /' "$err" | head -20
    failures=$((failures + 1))
  else
    echo "ok $n: $* -> $(grep -E -- "$pattern" "$err" | head -1)"
  fi
}
# etr-train on the tiny config, one rank: under mpirun, as a user starts it, for the cases
# that show the sentence and the exit status come through it; else as an MPI singleton
# that starts no daemon (0.5 s a case instead of 2.3 s; the same code refuses the input).
# Cases add `--set` overrides.
mpi_tiny=("$mpirun" -np 1 "$train" --config "$tiny")
train_tiny=(env OMPI_MCA_ess_singleton_isolated=1 "$train" --config "$tiny")

# 1. threads beyond the machine's CPUs (65536 crashed libgomp).
expect_fail 1 'runtime\.threads is 65536, more than the [0-9]+ CPUs of this machine' -- \
  "${mpi_tiny[@]}" --set runtime.threads=65536
# 2. a model larger than the host memory budget: refused before allocating (it grew at
#    450 MB/s), with no int64 overflow on the way; a budget in which the state fits but not
#    one sequence's activations, even recomputed (a larger micro-batch is lowered instead).
expect_fail 1 'model\.n_layer = 2147483647.* needs .* for parameters, gradients and AdamW state, more than the .* host memory budget' -- \
  "${train_tiny[@]}" --set model.n_layer=2147483647
expect_fail 1 'model\.n_layer = 100000.* more than the 1 GiB host memory budget' -- \
  "${train_tiny[@]}" --set model.n_layer=100000 --set runtime.memory_budget=1GiB
expect_fail 1 'model\.d_model = 2147483646.* needs' -- \
  "${train_tiny[@]}" --set model.d_model=2147483646 --set model.n_head=1
expect_fail 1 'not even a micro-batch of 1 sequence of 64 tokens fits with activation recomputation: this rank would need .* under a budget of 2.051 MiB' -- \
  "${train_tiny[@]}" --set runtime.memory_budget=2100KiB
# 3. a non-finite real in a config FILE: the sentence --set gives.
for section in "optimizer { lr: inf }" "optimizer { weight_decay: nan }" \
  "optimizer { eps: -inf }" "optimizer { grad_clip: nan }" "model { preset: 'tiny' init_std: inf }"; do
  cfg=$work/nonfinite.$n.pbtxt
  printf '%s\ndata { synthetic: true synthetic_size: "64KiB" }\n' "$section" >"$cfg"
  expect_fail 1 'is out of range: expected a finite number such as 0\.02 or 1e-3\.' -- \
    env OMPI_MCA_ess_singleton_isolated=1 "$train" --config "$cfg"
done
expect_fail 1 '^etr-train: error: optimizer\.lr = inf is out of range: expected a finite number' -- \
  "${mpi_tiny[@]}" --set optimizer.lr=inf
# 4. a global batch of more windows than the corpus holds.
expect_fail 1 'batch\.global_batch = 2000000000 is more than the [0-9]+ training windows' -- \
  "${train_tiny[@]}" --set batch.global_batch=2000000000
# Counts: the sample counter (max_steps x global_batch) and the sample's length.
expect_fail 1 'schedule\.max_steps = 9223372036854775807 x batch\.global_batch = 4 sequences overflow' -- \
  "${train_tiny[@]}" --set schedule.max_steps=9223372036854775807
expect_fail 1 'log\.sample_tokens is 2147483647; it must be at most 100000' -- \
  "${train_tiny[@]}" --set log.sample_tokens=2147483647
# 5. a synthetic corpus larger than memory.
expect_fail 1 'data\.synthetic_size = 64GiB needs .* for the synthetic corpus' -- \
  "${train_tiny[@]}" --set data.synthetic_size=64GiB
expect_fail 1 '^etr-tokenize: error: --synthetic 100000000000 needs .* of memory available; ask for fewer tokens\.$' -- \
  "$tokenize" --synthetic 100000000000 -o "$work/big.tok"
# A text file larger than memory (sparse: no disk used) is refused before it is read.
truncate -s 1T "$work/huge.txt"
expect_fail 1 "^etr-tokenize: error: '.*huge\.txt' \(.*\) needs .* to convert .* of memory available; split it into smaller files\.\$" -- \
  "$tokenize" "$work/huge.txt" -o "$work/huge.tok"
# 6. negative counts are usage errors, not 2^64 - 1.
expect_fail 2 '--synthetic: -1 is not a whole number from 1' -- "$tokenize" --synthetic -1 -o "$work/neg.tok"
expect_fail 2 '--synthetic: 0 is not a whole number from 1' -- "$tokenize" --synthetic 0 -o "$work/zero.tok"
"$tokenize" --synthetic 1000 -o "$work/ok.tok" >/dev/null || { echo "FAIL: --synthetic 1000"; exit 1; }
expect_fail 2 '--tokens: -1 is not a whole number from 0' -- "$tokenize" --show "$work/ok.tok" --tokens -1
expect_fail 2 '--seed: -1 is not a whole number from 0' -- "$tokenize" --synthetic 10 --seed -1 -o "$work/seed.tok"
[ ! -e "$work/neg.tok" ] || { echo "FAIL: --synthetic -1 wrote a file"; failures=$((failures + 1)); }
# 7. (issue 19) a subword tokenizer that does not fit the data or the model. Not in sanitizer builds
# (no SentencePiece there: examples/data/sentencepiece_backend.h).
if [ -z "${ETR_TEST_NO_SUBWORD:-}" ]; then
  for i in $(seq 1 300); do echo "line $i: the quick brown fox jumps over the lazy dog"; done >"$work/text.txt"
  "$tokenize" "$work/text.txt" --train-tokenizer bpe --vocab-size 300 -o "$work/a.model" >/dev/null &&
    "$tokenize" "$work/text.txt" --train-tokenizer unigram --vocab-size 300 -o "$work/b.model" >/dev/null &&
    "$tokenize" "$work/text.txt" --tokenizer "$work/a.model" -o "$work/sub.tok" >/dev/null ||
    { echo "FAIL: etr-tokenize could not make the subword files"; exit 1; }
  sub=("${train_tiny[@]}" --set data.synthetic=false --set "data.train_file=$work/sub.tok")
  expect_fail 1 '^etr-train: error: model\.vocab_size = 256 but the tokenizer .* has [0-9]+ pieces' -- \
    "${sub[@]}" --set model.vocab_size=256
  expect_fail 1 "data\.tokenizer_model '.*b\.model' is not the tokenizer that made data\.train_file" -- \
    "${sub[@]}" --set "data.tokenizer_model=$work/b.model"
  expect_fail 1 "data\.train_file '.*ok\.tok' has a vocabulary of 256 but its tokenizer" -- \
    "${train_tiny[@]}" --set data.synthetic=false --set "data.train_file=$work/ok.tok" \
    --set "data.tokenizer_model=$work/a.model"
  expect_fail 1 "cannot open the tokenizer model '.*none\.model'" -- \
    "${sub[@]}" --set "data.tokenizer_model=$work/none.model"
  # A resume with other tokens than the checkpoint's: its tokenizer attachment differs.
  "${sub[@]}" --set schedule.max_steps=2 --set "checkpoint.dir=$work/ckpt" >/dev/null 2>&1 &&
    "$tokenize" "$work/text.txt" --tokenizer "$work/b.model" -o "$work/sub2.tok" >/dev/null ||
    { echo "FAIL: could not train on sub.tok"; exit 1; }
  expect_fail 1 "cannot resume from .*step-000000002: its tokenizer\.model is not this run's" -- \
    "${train_tiny[@]}" --set data.synthetic=false --set "data.train_file=$work/sub2.tok" \
    --set schedule.max_steps=4 --set "checkpoint.dir=$work/ckpt" --resume latest
  head -c 60 "$work/a.model" >"$work/sub.tok.tokenizer.model"
  expect_fail 1 "the tokenizer model '.*sub\.tok\.tokenizer\.model' is not a SentencePiece model" -- "${sub[@]}"
fi

# 7. llm.c and nanoGPT token files (tests/e2e/foreign_token_files.sh makes them from the
#    tokens of an etr file): each defect one sentence naming the file.
. "$(dirname "$0")/foreign_token_files.sh"
"$tokenize" --synthetic 2000 -o "$work/foreign.tok" >/dev/null || { echo "FAIL: --synthetic 2000"; exit 1; }
llmc_from_etr "$work/foreign.tok" "$work/v2.bin" 2
llmc_from_etr "$work/foreign.tok" "$work/cut.bin" 1 20240520 2001
llmc_from_etr "$work/foreign.tok" "$work/gpt2.bin"
nanogpt_from_etr "$work/foreign.tok" "$work/raw.bin"
{ cat "$work/raw.bin"; printf x; } >"$work/odd.bin"
{ printf 'MZ'; cat "$work/raw.bin"; } >"$work/magic.bin"
{ cat "$work/raw.bin"; printf '\x2c\x01'; } >"$work/oov.bin"  # token 300 at position 2000
expect_fail 1 "'.*magic\.bin' is not an etr token file nor an llm\.c one: .*set data\.format=nanogpt" -- \
  "${train_tiny[@]}" --set data.synthetic=false --set data.train_file="$work/magic.bin"
expect_fail 1 "'.*magic\.bin' is not an llm\.c token file" -- \
  "${train_tiny[@]}" --set data.synthetic=false --set data.train_file="$work/magic.bin" --set data.format=llmc
expect_fail 1 "llm\.c token file '.*v2\.bin' has version 2, but etr reads version 1 only .*etr's tokens are uint16" -- \
  "${train_tiny[@]}" --set data.synthetic=false --set data.train_file="$work/v2.bin"
expect_fail 1 "llm\.c token file '.*cut\.bin' is corrupt: its header says 2001 tokens, .*\(truncated\)" -- \
  "${train_tiny[@]}" --set data.synthetic=false --set data.train_file="$work/cut.bin" --set model.vocab_size=256
expect_fail 1 "the llm\.c token file's vocabulary \(50257, GPT-2's.*\) is larger than model\.vocab_size \(256\)" -- \
  "${train_tiny[@]}" --set data.synthetic=false --set data.train_file="$work/gpt2.bin"
expect_fail 1 "nanoGPT \.bin '.*odd\.bin' has 4001 bytes, an odd number" -- \
  "${train_tiny[@]}" --set data.synthetic=false --set data.train_file="$work/odd.bin" \
  --set data.format=nanogpt --set model.vocab_size=256
expect_fail 1 "nanoGPT \.bin '.*oov\.bin': token 300 at position 2000 is not below the vocabulary size 256" -- \
  "${train_tiny[@]}" --set data.synthetic=false --set data.train_file="$work/oov.bin" \
  --set data.format=nanogpt --set model.vocab_size=256
expect_fail 1 '^etr-train: error: data\.format = nanogpt but model\.vocab_size is not set; .*records no vocabulary' -- \
  "${train_tiny[@]}" --set data.synthetic=false --set data.train_file="$work/raw.bin" --set data.format=nanogpt
expect_fail 1 'data\.format = "raw" is not a token file format; choose auto' -- \
  "${train_tiny[@]}" --set data.synthetic=false --set data.train_file="$work/raw.bin" --set data.format=raw
expect_fail 1 "^etr-tokenize: error: llm\.c token file '.*v2\.bin' has version 2" -- "$tokenize" --show "$work/v2.bin"
# runtime.device: a bad value; cuda where no GPU is visible (CUDA_VISIBLE_DEVICES hides
# any this machine has; a build without CUDA says so instead); cuda with ZeRO.
expect_fail 1 'runtime\.device = "gpu" is not cpu, cuda or auto' -- "${train_tiny[@]}" --set runtime.device=gpu
expect_fail 1 'runtime\.device = cuda but (this process sees no GPU|this etr was built without CUDA)' -- \
  env CUDA_VISIBLE_DEVICES= "${train_tiny[@]}" --set runtime.device=cuda
expect_fail 1 'runtime\.gpu_matmul = "tf16" is not tf32 or fp32' -- "${train_tiny[@]}" --set runtime.gpu_matmul=tf16
expect_fail 1 'comm\.device_backend = "gpu" is not a device backend \(auto, nccl or staged\)' -- \
  "${train_tiny[@]}" --set comm.device_backend=gpu
# runtime.precision: a bad value; bf16 where it does not run yet (ZeRO).
expect_fail 1 'runtime\.precision = "fp16" is not auto, fp32 or bf16' -- "${train_tiny[@]}" --set runtime.precision=fp16
expect_fail 1 'runtime\.precision = bf16 is not available here: parallel\.zero_stage = 1' -- \
  "${train_tiny[@]}" --set runtime.precision=bf16 --set parallel.zero_stage=1
# A fresh start into a checkpoint directory that holds an earlier run's checkpoints (the
# two runs' steps would interleave there): refused, naming the newest and --resume latest;
# the earlier run's checkpoints are left as they were, and --resume latest continues.
earlier=(--set checkpoint.every=5 --set "checkpoint.dir=$work/earlier")
kept=$(printf 'step-000000005\nstep-000000010\nstep-000000012')
"${train_tiny[@]}" --set schedule.max_steps=12 "${earlier[@]}" >"$work/earlier.out" 2>&1
n=$((n + 1))
if [ "$(ls "$work/earlier" 2>/dev/null)" = "$kept" ]; then
  echo "ok $n: an earlier run saved steps 5, 10 and 12"
else
  echo "FAIL $n: the earlier run saved: $(ls "$work/earlier" 2>/dev/null | tr '\n' ' ')"
  failures=$((failures + 1))
fi
expect_fail 1 "$work/earlier holds checkpoints of an earlier run \(the newest: step 12\); --resume latest" -- \
  "${train_tiny[@]}" --set schedule.max_steps=20 "${earlier[@]}"
n=$((n + 1))
if [ "$(ls "$work/earlier")" = "$kept" ] &&
  "${train_tiny[@]}" --set schedule.max_steps=20 "${earlier[@]}" --resume latest 2>&1 |
    grep -q "resumed from $work/earlier/step-000000012"; then
  echo "ok $n: the earlier run's checkpoints untouched, --resume latest continues from step 12"
else
  echo "FAIL $n: after the refusal: $(ls "$work/earlier" | tr '\n' ' '), or no resume from step 12"
  failures=$((failures + 1))
fi
# --help prints its text before MPI starts: here MPI cannot (no plugins to load).
n=$((n + 1))
if OMPI_MCA_mca_base_component_path=/nonexistent timeout 30 "$train" --help </dev/null >"$work/help.out" 2>&1 &&
  grep -q '^Usage: ' "$work/help.out"; then
  echo "ok $n: etr-train --help where MPI cannot start"
else
  echo "FAIL $n: etr-train --help where MPI cannot start"
  sed 's/^/    /' "$work/help.out" | head -20
  failures=$((failures + 1))
fi

[ "$failures" -eq 0 ] || { echo "$failures of $n case(s) failed"; exit 1; }
echo "all $n cases refused as expected"
