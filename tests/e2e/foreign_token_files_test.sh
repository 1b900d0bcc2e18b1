#!/usr/bin/env bash
# etr-train on llm.c's and nanoGPT's token files without conversion: the same tokens in
# an etr token file (the reference), an llm.c file (256 int32 header, uint16 tokens, as
# llm.c's write_datafile writes it) and a nanoGPT .bin (raw uint16, as np.tofile writes
# it) give bitwise the same losses, step by step; etr-tokenize --show describes all three;
# a nanoGPT file with its SentencePiece model (data.tokenizer_model, no model.vocab_size)
# trains as the etr file it came from; a model of an llm.c GPT-2 file samples token ids.
# Usage: foreign_token_files_test.sh ETR_MPIRUN ETR_TRAIN ETR_TOKENIZE TINY_CONFIG
set -u
mpirun=$1 train=$2 tokenize=$3 tiny=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=tests/e2e/foreign_token_files.sh
. "$(dirname "$0")/foreign_token_files.sh"

"$tokenize" --synthetic 40000 --seed 7 -o "$work/ref.tok" >/dev/null || fail "etr-tokenize --synthetic"
llmc_from_etr "$work/ref.tok" "$work/ref_llmc.bin"
nanogpt_from_etr "$work/ref.tok" "$work/ref_nanogpt.bin"
[ "$(stat -c %s "$work/ref_llmc.bin")" -eq $((1024 + 80000)) ] || fail "llm.c file size"
[ "$(stat -c %s "$work/ref_nanogpt.bin")" -eq 80000 ] || fail "nanoGPT file size"

# --show: format, count, vocabulary, size on disk.
show() { "$tokenize" --show "$@" --tokens 16 2>&1; }
out=$(show "$work/ref_llmc.bin") || fail "--show llm.c: $out"
for want in 'llm.c token file, version 1' 'tokens: +40000' 'vocabulary: +50257' 'size: +81024 bytes'; do
  grep -Eq "$want" <<<"$out" || fail "--show llm.c lacks '$want': $out"
done
out=$(show "$work/ref_nanogpt.bin" --format nanogpt) || fail "--show nanoGPT: $out"
for want in 'nanoGPT \.bin' 'tokens: +40000' 'vocabulary: +not recorded' 'size: +80000 bytes'; do
  grep -Eq "$want" <<<"$out" || fail "--show nanoGPT lacks '$want': $out"
done
# The first tokens as ids are the etr file's first bytes.
ids=$(show "$work/ref_llmc.bin" | tail -1)
first=$(tail -c +65 "$work/ref.tok" | head -c 32 | od -An -tu2 -v | xargs)
[ "$ids" = "$first" ] || fail "llm.c first tokens '$ids', not '$first'"
out=$(show "$work/ref.tok") || fail "--show etr: $out"
grep -q 'etr token file, version 1' <<<"$out" || fail "--show etr: $out"

# The losses of 6 steps (and two evaluations) on each file: "loss" and "val_loss" records
# of the metrics file, printed in full precision (equal text: equal doubles).
train_on() {
  local name=$1
  shift
  "$mpirun" -np 1 "$train" --config "$tiny" --set data.synthetic=false \
    --set schedule.max_steps=6 --set log.log_every=1 --set log.eval_every=3 \
    --set log.metrics_file="$work/$name.jsonl" "$@" >"$work/$name.log" 2>&1 ||
    fail "etr-train on $name: $(tail -5 "$work/$name.log")"
  grep -o '"\(loss\|val_loss\)":[^,}]*' "$work/$name.jsonl" >"$work/$name.losses"
}
train_on etr --set data.train_file="$work/ref.tok"
train_on llmc --set data.train_file="$work/ref_llmc.bin" --set model.vocab_size=256
train_on nanogpt --set data.train_file="$work/ref_nanogpt.bin" --set data.format=nanogpt \
  --set model.vocab_size=256
[ "$(grep -c '"loss"' "$work/etr.losses")" -eq 6 ] || fail "no 6 losses: $(cat "$work/etr.losses")"
[ "$(grep -c '"val_loss"' "$work/etr.losses")" -eq 2 ] || fail "no 2 held-out losses"
cmp -s "$work/llmc.losses" "$work/etr.losses" ||
  fail "llm.c losses differ from the etr file's: $(paste "$work/llmc.losses" "$work/etr.losses")"
cmp -s "$work/nanogpt.losses" "$work/etr.losses" ||
  fail "nanoGPT losses differ from the etr file's: $(paste "$work/nanogpt.losses" "$work/etr.losses")"
# Not vacuous: other tokens give other losses.
"$tokenize" --synthetic 40000 --seed 8 -o "$work/other.tok" >/dev/null || fail "--synthetic"
nanogpt_from_etr "$work/other.tok" "$work/other.bin"
train_on other --set data.train_file="$work/other.bin" --set data.format=nanogpt \
  --set model.vocab_size=256
! cmp -s "$work/other.losses" "$work/etr.losses" || fail "other tokens gave the same losses"
grep -q 'llm.c token file' "$work/llmc.log" || fail "the log does not name the llm.c format"
# An llm.c GPT-2 file without a tokenizer: the sample is token ids, from end-of-text.
train_on gpt2_ids --set data.train_file="$work/ref_llmc.bin" --set model.vocab_size=50257 \
  --set log.sample_tokens=8 --set schedule.max_steps=2
grep -A1 "(token ids: no tokenizer for the data's vocabulary of 50257" "$work/gpt2_ids.log" |
  grep -Eq '^50256( [0-9]+){8}$' || fail "no sample as token ids: $(tail -4 "$work/gpt2_ids.log")"

# A nanoGPT file made with a SentencePiece tokenizer: data.tokenizer_model gives its
# vocabulary (no model.vocab_size), and it trains as the etr file with its sidecar does.
# Not in sanitizer builds (no SentencePiece there: examples/data/sentencepiece_backend.h).
if [ -z "${ETR_TEST_NO_SUBWORD:-}" ]; then
  for i in $(seq 1 400); do echo "line $i: the quick brown fox jumps over the lazy dog"; done >"$work/text.txt"
  "$tokenize" "$work/text.txt" --train-tokenizer bpe --vocab-size 300 -o "$work/sub.model" >/dev/null &&
    "$tokenize" "$work/text.txt" --tokenizer "$work/sub.model" -o "$work/sub.tok" >/dev/null ||
    fail "etr-tokenize could not make the subword files"
  nanogpt_from_etr "$work/sub.tok" "$work/sub_nanogpt.bin"
  train_on sub --set data.train_file="$work/sub.tok"
  train_on sub_nanogpt --set data.train_file="$work/sub_nanogpt.bin" --set data.format=nanogpt \
    --set data.tokenizer_model="$work/sub.model"
  cmp -s "$work/sub_nanogpt.losses" "$work/sub.losses" ||
    fail "nanoGPT + tokenizer losses differ: $(paste "$work/sub_nanogpt.losses" "$work/sub.losses")"
  ! cmp -s "$work/sub.losses" "$work/etr.losses" || fail "the subword tokens gave the byte losses"
  echo "ok: a nanoGPT file with its SentencePiece model trains as its etr file: $(tr '\n' ' ' <"$work/sub.losses")"
fi
echo "ok: etr, llm.c and nanoGPT files give the same losses: $(tr '\n' ' ' <"$work/etr.losses")"
