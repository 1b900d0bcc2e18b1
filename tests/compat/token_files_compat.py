"""llm.c's and nanoGPT's token files, written by numpy as those projects write them, read
by etr (ctest label "compat"; run by tests/compat/run_in_venv.sh with .venv's python).

1. llm.c: write_datafile of karpathy/llm.c dev/data/data_common.py (a header of 256
   int32: magic 20240520, version 1, the token count; then the tokens as uint16).
2. nanoGPT: data/*/prepare.py's np.array(ids, dtype=np.uint16).tofile(path).
etr-tokenize --show must report the format, the count and the size on disk, and print
the same first token ids as numpy holds. A LLaMA-3 file (magic 20240801, version 7,
uint32 tokens) must be refused in one sentence.

Usage: token_files_compat.py --tokenize PATH/etr-tokenize
Exit status 0 when every check passes, 1 otherwise.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HEADERS_INFO = {  # as in llm.c's data_common.py
    "gpt-2": {"magic": 20240520, "version": 1, "token_dtype": np.uint16},
    "llama-3": {"magic": 20240801, "version": 7, "token_dtype": np.uint32},
}


def write_datafile(filename, toks, model_desc="gpt-2"):
    """llm.c's write_datafile: 256 int32 of header, then the tokens."""
    info = HEADERS_INFO[model_desc]
    header = np.zeros(256, dtype=np.int32)
    header[0] = info["magic"]
    header[1] = info["version"]
    header[2] = len(toks)
    toks_np = np.array(toks, dtype=info["token_dtype"])
    with open(filename, "wb") as f:
        f.write(header.tobytes())
        f.write(toks_np.tobytes())


def show(tokenize, path, *extra):
    return subprocess.run([tokenize, "--show", path, "--tokens", "50", *extra],
                          capture_output=True, text=True)


def check_show(tokenize, path, tokens, format_line, size, extra=()):
    r = show(tokenize, path, *extra)
    if r.returncode != 0:
        return [f"--show {path} failed: {r.stderr.strip()}"]
    problems = []
    lines = r.stdout.splitlines()
    for want in (format_line, f"tokens:      {len(tokens)}", f"size:        {size} bytes"):
        if not any(want in line for line in lines):
            problems.append(f"--show {path}: no line with '{want}' in:\n{r.stdout}")
    ids = [int(x) for x in lines[-1].split()]
    if ids != [int(t) for t in tokens[:50]]:
        problems.append(f"--show {path}: first ids {ids[:8]}..., numpy has {tokens[:8]}...")
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenize", required=True)
    args = parser.parse_args()
    rng = np.random.default_rng(19)
    tokens = rng.integers(0, 50257, size=3001).astype(np.uint16)  # GPT-2's vocabulary
    problems = []
    with tempfile.TemporaryDirectory() as d:
        llmc = os.path.join(d, "tiny_train.bin")
        write_datafile(llmc, tokens.tolist())
        problems += check_show(args.tokenize, llmc, tokens, "llm.c token file, version 1",
                               1024 + 2 * len(tokens))
        nano = os.path.join(d, "train.bin")
        tokens.astype(np.uint16).tofile(nano)
        problems += check_show(args.tokenize, nano, tokens, "nanoGPT .bin", 2 * len(tokens),
                               ("--format", "nanogpt"))
        llama = os.path.join(d, "llama.bin")
        write_datafile(llama, tokens.tolist(), "llama-3")
        r = show(args.tokenize, llama)
        err = r.stderr.strip()
        if r.returncode != 1 or "uint32" not in err or "\n" in err:
            problems.append(f"LLaMA-3 file: exit {r.returncode}, stderr: {err}")
    for p in problems:
        print("FAIL:", p)
    if not problems:
        print("ok: etr reads llm.c's and nanoGPT's files as numpy wrote them")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
