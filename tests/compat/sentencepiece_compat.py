#!/usr/bin/env python3
"""A SentencePiece tokenizer goes from etr-tokenize through etr-train and etr-ckpt export
to transformers unchanged: the same ids for the same text, the same greedy continuation.

The pipeline, as a user runs it, for a BPE and a unigram model: etr-tokenize trains one on a small corpus and
encodes the corpus with it (the token file and its sidecar); etr-train trains the tiny
GPT-2 on it for a few steps and checkpoints (the checkpoint carries the tokenizer);
etr-ckpt export writes the Hugging Face directory (weights, config.json, tokenizer.model,
tokenizer_config.json). Then, in the real libraries, offline:
  - AutoTokenizer.from_pretrained(dir).encode(corpus) is the token file's tokens;
  - it encodes the prompt to the ids etr encodes it to;
  - GPT2LMHeadModel.from_pretrained(dir).generate(greedy) gives the ids etr's greedy
    generation (the fixture tool, from the checkpoint) gives, and the same decoded text.
"""
import argparse
import json
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers

PROMPT = "the quick brown fox"
NEW_TOKENS = 24
STEPS = 60


def corpus():
    words = ("the quick brown fox jumps over the lazy dog while a small cat sleeps on "
             "the warm mat and birds sing in the tall trees near the river").split()
    lines = []
    for i in range(600):
        n = 5 + (i * 7) % 9
        lines.append(" ".join(words[(i * 3 + k * 5) % len(words)] for k in range(n)) +
                     (".", "!", "?", ",")[i % 4])
    lines.append("Über café naïve 日本語 ☃ 😀")
    return "\n".join(lines) + "\n"


def run(cmd, both=False):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(f"FAIL: {' '.join(cmd)} exited {r.returncode}\n{r.stdout}\n{r.stderr}\n")
        sys.exit(1)
    return r.stdout + r.stderr if both else r.stdout


def token_file_tokens(path):
    data = open(path, "rb").read()
    assert data[:8] == b"ETRTOKEN", "not a token file"
    return np.frombuffer(data[64:], dtype="<u2").tolist()


def check(a, d, kind, failures):
    """The pipeline with a `kind` (bpe, unigram) tokenizer in directory d; appends failures."""
    text = corpus()
    open(f"{d}/corpus.txt", "w", encoding="utf-8").write(text)
    run([a.tokenize, f"{d}/corpus.txt", "--train-tokenizer", kind, "--vocab-size", "400",
         "-o", f"{d}/tok.model"])
    run([a.tokenize, f"{d}/corpus.txt", "--tokenizer", f"{d}/tok.model", "-o", f"{d}/train.tok"])
    log = run([a.mpirun, "-np", "1", a.train, "--config", a.tiny_config,
               "--set", "data.synthetic=false", "--set", f"data.train_file={d}/train.tok",
               "--set", f"schedule.max_steps={STEPS}", "--set", "log.eval_every=0",
               "--set", "log.sample_tokens=16", "--set", f"log.sample_prompt={PROMPT}",
               "--set", f"checkpoint.dir={d}/ckpt"], both=True)
    if f"sample:\n{PROMPT}" not in log.replace("\r", ""):
        failures.append(f"{kind}: etr-train's sample does not start with the decoded prompt")
    ckpt = f"{d}/ckpt/step-{STEPS:09d}"
    run([a.ckpt, "export", ckpt, "-o", f"{d}/hf/"])
    etr = json.loads(run([a.fixture_tool, ckpt, PROMPT, str(NEW_TOKENS)]))

    tok = transformers.AutoTokenizer.from_pretrained(f"{d}/hf")
    ids = tok.encode(text)
    if ids != token_file_tokens(f"{d}/train.tok"):
        failures.append(f"{kind}: AutoTokenizer does not encode the corpus to etr-tokenize's tokens")
    if tok.encode(PROMPT) != etr["prompt_ids"]:
        failures.append(f"{kind}: prompt: transformers {tok.encode(PROMPT)}, etr {etr['prompt_ids']}")
    if tok.decode(ids) != text:
        failures.append(f"{kind}: AutoTokenizer does not decode the corpus's tokens to the corpus")

    model = transformers.GPT2LMHeadModel.from_pretrained(f"{d}/hf")
    model.eval()
    prompt = torch.tensor([etr["prompt_ids"]])
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                             max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1,
                             pad_token_id=0)
    hf_ids = out[0].tolist()
    if hf_ids != etr["ids"]:
        failures.append(f"{kind}: greedy generation: transformers {hf_ids}, etr {etr['ids']}")
    if tok.decode(hf_ids) != etr["text"]:
        failures.append(f"{kind}: decoded: transformers {tok.decode(hf_ids)!r}, etr {etr['text']!r}")
    print(f"{kind}: vocabulary {len(tok)}, corpus {len(text)} bytes -> {len(ids)} tokens; "
          f"greedy continuation of {PROMPT!r}: {etr['text']!r}")


def main():
    p = argparse.ArgumentParser()
    for name in ("tokenize", "train", "ckpt", "mpirun", "fixture-tool", "tiny-config"):
        p.add_argument(f"--{name}", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    failures = []
    kinds = ("bpe", "unigram")
    for kind in kinds:
        with tempfile.TemporaryDirectory() as d:
            check(a, d, kind, failures)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    checks = 6 * len(kinds)
    print(f"{checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
