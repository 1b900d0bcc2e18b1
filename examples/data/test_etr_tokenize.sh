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
