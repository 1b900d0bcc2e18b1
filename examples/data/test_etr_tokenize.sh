#!/bin/sh
# The etr_tokenize_cli test (examples/data/CMakeLists.txt): runs etr-tokenize as a user
# would and checks its output files, what --show prints, and that each bad input ends
# with one "etr-tokenize: error:" line and a non-zero status.
#
# Usage: test_etr_tokenize.sh <path of etr-tokenize>
set -eu
tool=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/etr-tokenize-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

fail() { echo "FAIL: $*"; exit 1; }

# expect_error <words the message must contain> -- <command...>
expect_error() {
  want=$1; shift; shift
  if "$@" >"$tmp/out" 2>"$tmp/err"; then fail "'$*' succeeded"; fi
  grep -q "^etr-tokenize: error: .*$want" "$tmp/err" ||
    fail "'$*' printed '$(cat "$tmp/err")', expected an error with '$want'"
  [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "'$*' printed more than one line: $(cat "$tmp/err")"
  echo "ok: $* -> $(cat "$tmp/err")"
}

echo "== text -> tokens -> --show"
printf 'h\303\251llo, world\n' >"$tmp/in.txt"   # "héllo, world\n": 14 bytes
"$tool" "$tmp/in.txt" -o "$tmp/in.tok"
[ "$(wc -c <"$tmp/in.tok")" -eq $((64 + 2 * 14)) ] || fail "in.tok has the wrong size"
"$tool" --show "$tmp/in.tok" >"$tmp/show"
cat "$tmp/show"
grep -q '^tokens: *14$' "$tmp/show" || fail "--show does not say 14 tokens"
grep -q '(verified)' "$tmp/show" || fail "--show did not verify the checksum"
grep -q 'héllo, world' "$tmp/show" || fail "--show does not decode the text"

echo "== synthetic corpus: exact size, same bytes for the same seed"
"$tool" --synthetic 5000 --seed 3 -o "$tmp/a.tok"
"$tool" --synthetic 5000 --seed 3 -o "$tmp/b.tok"
"$tool" --synthetic 5000 --seed 4 -o "$tmp/c.tok"
[ "$(wc -c <"$tmp/a.tok")" -eq $((64 + 2 * 5000)) ] || fail "a.tok has the wrong size"
cmp -s "$tmp/a.tok" "$tmp/b.tok" || fail "the same seed gave different files"
if cmp -s "$tmp/a.tok" "$tmp/c.tok"; then fail "different seeds gave the same file"; fi
"$tool" --show "$tmp/a.tok" --tokens 120

echo "== subword: train a tokenizer, encode with it, --show through the sidecar"
if [ -n "${ETR_TEST_NO_SUBWORD:-}" ]; then
  echo "skipped: no SentencePiece in a sanitizer build"
else
i=0
while [ $i -lt 300 ]; do
  printf 'the quick brown fox %s jumps over the lazy dog, caf\303\251 %s.\n' $i $((i * 7))
  i=$((i + 1))
done >"$tmp/corpus.txt"
for type in bpe unigram; do
  "$tool" "$tmp/corpus.txt" --train-tokenizer $type --vocab-size 320 -o "$tmp/$type.model"
  "$tool" "$tmp/corpus.txt" --train-tokenizer $type --vocab-size 320 -o "$tmp/$type.again.model"
  cmp -s "$tmp/$type.model" "$tmp/$type.again.model" || fail "$type: training is not deterministic"
  "$tool" "$tmp/corpus.txt" --tokenizer "$tmp/$type.model" -o "$tmp/$type.tok"
  cmp -s "$tmp/$type.model" "$tmp/$type.tok.tokenizer.model" || fail "$type: no sidecar"
  "$tool" --show "$tmp/$type.tok" --tokens 1000000 >"$tmp/show"
  pieces=$(sed -n 's/^vocabulary: *//p' "$tmp/show")
  [ "$pieces" -gt 259 ] && [ "$pieces" -le 320 ] || fail "$type: vocabulary $pieces"
  grep -q '^tokenizer: .*tokenizer.model' "$tmp/show" || fail "$type: --show ignores the sidecar"
  # The decoded tokens are the text (the last line of the corpus, and the 'é').
  grep -q 'fox 299 jumps over the lazy dog, café 2093\.$' "$tmp/show" ||
    fail "$type: --show does not decode the text"
  count=$(sed -n 's/^tokens: *//p' "$tmp/show")
  [ "$count" -lt "$(wc -c <"$tmp/corpus.txt")" ] || fail "$type: $count tokens is no compression"
done
# Bytes again to the same path: the stale sidecar goes.
"$tool" "$tmp/corpus.txt" -o "$tmp/bpe.tok" >"$tmp/out"
[ ! -e "$tmp/bpe.tok.tokenizer.model" ] || fail "a byte conversion left the old sidecar"
"$tool" --show "$tmp/bpe.tok" --tokens 10 | grep -q '^tokenizer: *bytes$' || fail "not bytes"

echo "== subword errors"
expect_error "requires --vocab-size" -- "$tool" "$tmp/corpus.txt" --train-tokenizer bpe -o "$tmp/t.model"
expect_error "65536" -- "$tool" "$tmp/corpus.txt" --train-tokenizer bpe --vocab-size 70000 -o "$tmp/t.model"
expect_error "259 fixed pieces" -- "$tool" "$tmp/corpus.txt" --train-tokenizer unigram --vocab-size 100 -o "$tmp/t.model"
expect_error "not in" -- "$tool" "$tmp/corpus.txt" --train-tokenizer wordpiece --vocab-size 300 -o "$tmp/t.model"
expect_error "not a SentencePiece model" -- "$tool" "$tmp/corpus.txt" --tokenizer "$tmp/corpus.txt" -o "$tmp/t.tok"
expect_error "no-such.model" -- "$tool" "$tmp/corpus.txt" --tokenizer "$tmp/no-such.model" -o "$tmp/t.tok"
head -c 100 "$tmp/bpe.model" >"$tmp/cut.model"
expect_error "not a SentencePiece model" -- "$tool" "$tmp/corpus.txt" --tokenizer "$tmp/cut.model" -o "$tmp/t.tok"
: >"$tmp/empty.txt"
expect_error "without a non-empty line" -- "$tool" "$tmp/empty.txt" --train-tokenizer bpe --vocab-size 300 -o "$tmp/t.model"
expect_error "excludes" -- "$tool" --synthetic 10 --tokenizer "$tmp/bpe.model" -o "$tmp/t.tok"
fi

echo "== errors"
expect_error "does-not-exist.txt" -- "$tool" "$tmp/does-not-exist.txt" -o "$tmp/x.tok"
expect_error "is not an etr token file" -- "$tool" --show "$tmp/in.txt"
head -c 70 "$tmp/a.tok" >"$tmp/short.tok"
expect_error "truncated" -- "$tool" --show "$tmp/short.tok"
expect_error "-o OUTPUT is required" -- "$tool" "$tmp/in.txt"
expect_error "give a text file" -- "$tool"
expect_error "excludes" -- "$tool" --show "$tmp/a.tok" --synthetic 10 -o "$tmp/y.tok"
expect_error "cannot create" -- "$tool" --synthetic 10 -o "$tmp/no-such-dir/z.tok"
echo "PASS"
