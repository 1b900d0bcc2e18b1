#!/usr/bin/env python3
"""Trains the model of `etr-bench train` in PyTorch, for the side-by-side comparison.

The identical model, in two PyTorch implementations (--impl): Hugging Face
transformers' GPT2LMHeadModel (the real GPT-2 code, "hf") and a lean nanoGPT-style
module written here ("lean": one fused QKV Linear, F.scaled_dot_product_attention,
nothing else), both with etr's benchmark configuration (4 layers, 4 heads, d_model 256, seq 128, vocab 256,
tanh GELU, LayerNorm eps 1e-5, no dropout, tied LM head), AdamW (betas 0.9/0.95, eps
1e-8, weight decay 0.1 on 2-D weights only), global-norm clipping at 1.0, batch 8 x 128
from the same token file, the same thread count. PyTorch runs its fastest attention
(scaled_dot_product_attention). Prints one JSON line.
"""
import argparse
import json
import os
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


class LeanBlock(torch.nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.h = h
        self.ln_1 = torch.nn.LayerNorm(c, eps=1e-5)
        self.c_attn = torch.nn.Linear(c, 3 * c)
        self.c_proj = torch.nn.Linear(c, c)
        self.ln_2 = torch.nn.LayerNorm(c, eps=1e-5)
        self.c_fc = torch.nn.Linear(c, 4 * c)
        self.mlp_proj = torch.nn.Linear(4 * c, c)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        h = torch.nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.mlp_proj(h)


class LeanGPT(torch.nn.Module):
    """nanoGPT-style GPT-2: the fastest plain PyTorch this model can be written in."""

    def __init__(self, vocab, seq, c, layers, heads):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, c)
        self.wpe = torch.nn.Embedding(seq, c)
        self.h = torch.nn.ModuleList(LeanBlock(c, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(c, eps=1e-5)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()  # LM head tied to wte


def threads_wait_seconds():
    """The run-queue delay of every thread of this process so far (bench/premise.h)."""
    total = 0.0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1]) * 1e-9
        except (OSError, IndexError, ValueError):
            pass  # the thread ended, or no schedstat in this kernel
    return total


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
    p.add_argument("--impl", choices=["hf", "lean"], default="hf")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    tokens = read_tokens(a.tokens)
    if a.impl == "hf":
        cfg = transformers.GPT2Config(
            vocab_size=256, n_positions=a.seq, n_embd=a.dim, n_layer=a.layers, n_head=a.heads,
            activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
            embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None,
            tie_word_embeddings=True)
        model = transformers.GPT2LMHeadModel._from_config(cfg, attn_implementation="sdpa")
        forward = lambda x: model(input_ids=x).logits
    else:
        model = LeanGPT(256, a.seq, a.dim, a.layers, a.heads)
        forward = model
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
        logits = forward(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    # The premise, measured as etr-bench measures its own (bench/premise.h): the process's
    # CPU time over the wall time of the timed steps, and the CPUs it may run on.
    wait0 = threads_wait_seconds()
    t0, cpu0 = time.perf_counter(), time.process_time()
    loss = 0.0
    for _ in range(a.steps):
        loss = step()
    secs = time.perf_counter() - t0
    cores_busy = (time.process_time() - cpu0) / secs
    waiting = (threads_wait_seconds() - wait0) / (secs * a.threads)
    cpus = sorted(os.sched_getaffinity(0))
    print(json.dumps({
        "impl": a.impl, "threads": a.threads, "tokens_per_s": a.steps * a.batch * a.seq / secs,
        "ms_per_step": secs / a.steps * 1e3, "final_loss": loss,
        "cores_busy": cores_busy, "waiting": waiting, "cpus": cpus, "torch_threads": torch.get_num_threads(),
        "parameters": sum(q.numel() for q in model.parameters()),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "blas": blas_info()}))


if __name__ == "__main__":
    main()
