#!/usr/bin/env python3
"""Trains the model of `etr-bench train` in PyTorch, for the side-by-side comparison.

The identical model: Hugging Face transformers' GPT2LMHeadModel (the real GPT-2 code)
with etr's benchmark configuration (4 layers, 4 heads, d_model 256, seq 128, vocab 256,
tanh GELU, LayerNorm eps 1e-5, no dropout, tied LM head), AdamW (betas 0.9/0.95, eps
1e-8, weight decay 0.1 on 2-D weights only), global-norm clipping at 1.0, batch 8 x 128
from the same token file, the same thread count. PyTorch runs its fastest attention
(scaled_dot_product_attention). Prints one JSON line.
"""
import argparse
import json
import struct
import time

import numpy as np
import torch
import transformers


def read_tokens(path):
    with open(path, "rb") as f:
        header = f.read(64)
        if header[:8] != b"ETRTOKEN":
            raise SystemExit(f"{path} is not an etr token file")
        count = struct.unpack_from("<Q", header, 16)[0]
        return np.frombuffer(f.read(2 * count), dtype="<u2").astype(np.int64)


def blas_info():
    import re
    text = torch.__config__.show()
    found = re.findall(r"BLAS_INFO=([^,\s]+)", text)
    mkl = [l.strip(" -") for l in text.splitlines() if "Math Kernel Library" in l]
    parts = [f"BLAS_INFO={found[0]}" if found else "BLAS_INFO unknown"] + mkl
    return "; ".join(parts)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tokens", required=True, help="etr token file (etr-tokenize)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dim", type=int, default=256)
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    tokens = read_tokens(a.tokens)
    cfg = transformers.GPT2Config(
        vocab_size=256, n_positions=a.seq, n_embd=a.dim, n_layer=a.layers, n_head=a.heads,
        activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None,
        tie_word_embeddings=True)
    model = transformers.GPT2LMHeadModel._from_config(cfg, attn_implementation="sdpa")
    model.train()
    decay = [q for n, q in model.named_parameters() if q.dim() >= 2]
    no_decay = [q for n, q in model.named_parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=2e-3, betas=(0.9, 0.95), eps=1e-8)
    rng = np.random.default_rng(1234)
    n_windows = len(tokens) - a.seq - 1

    def batch():
        starts = rng.integers(0, n_windows, size=a.batch)
        w = np.stack([tokens[s:s + a.seq + 1] for s in starts])
        return torch.from_numpy(w[:, :-1]), torch.from_numpy(w[:, 1:])

    def step():
        x, y = batch()
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    loss = 0.0
    for _ in range(a.steps):
        loss = step()
    secs = time.perf_counter() - t0
    print(json.dumps({
        "threads": a.threads, "tokens_per_s": a.steps * a.batch * a.seq / secs,
        "ms_per_step": secs / a.steps * 1e3, "final_loss": loss,
        "parameters": sum(q.numel() for q in model.parameters()),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "blas": blas_info()}))


if __name__ == "__main__":
    main()
