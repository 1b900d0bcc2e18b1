# Sourced by the e2e tests: llm.c and nanoGPT token files made from an etr token file's
# tokens (its bytes from offset 64), laid out as those projects write them.

# le32 N: N as 4 little-endian bytes (two's complement).
le32() {
  local v=$1 i
  for i in 0 8 16 24; do
    # shellcheck disable=SC2059
    printf "\\$(printf %03o $(((v >> i) & 255)))"
  done
}

# llmc_from_etr ETR OUT [VERSION [MAGIC [COUNT]]]: llm.c's write_datafile: 256 int32
# (magic 20240520, version 1, the token count, zeros), then the uint16 tokens.
llmc_from_etr() {
  local etr=$1 out=$2 version=${3:-1} magic=${4:-20240520}
  local count=${5:-$((($(stat -c %s "$etr") - 64) / 2))}
  {
    le32 "$magic"
    le32 "$version"
    le32 "$count"
    head -c 1012 /dev/zero
    tail -c +65 "$etr"
  } >"$out"
}

# nanogpt_from_etr ETR OUT: nanoGPT's np.uint16 .tofile(): the tokens alone.
nanogpt_from_etr() {
  tail -c +65 "$1" >"$2"
}
