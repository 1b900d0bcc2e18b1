#!/usr/bin/env python3
"""Times PyTorch's own GPU implementation of each operation of one GPT-2 124M layer.

The reference column beside etr's CUDA kernels (runtime/kernels/cuda/), run in the same
device check. Shapes default to GPT-2 124M at batch 8 x 1024 (B 8, T 1024, C 768, NH 12,
V 50257 padded to Vp 50304, N = B T = 8192 rows, 124475904 parameters). Every tensor is
fp32 with random values from a fixed seed; matmuls (and cuDNN) may use TF32, as etr's
matmuls do by default, unless --no-tf32.

Rows, one operation each, forward and backward apart:
  encoder          F.embedding(tokens, wte) + wpe[:T]; tokens [B,T] in [0,V), wte [Vp,C]
  layernorm        F.layer_norm over [N,C] with weight and bias, eps 1e-5
  matmul qkv       F.linear [N,C] -> [N,3C] with bias
  attention        causal attention the eager way, as etr computes it: q, k, v split from
                   qkv [B,T,3C] into NH heads, softmax of the masked, scaled q k^T
                   materialised as [B,NH,T,T], times v, back to [B,T,C]
  attention (sdpa) F.scaled_dot_product_attention(is_causal=True) from the same qkv, for
                   information: PyTorch's fastest fp32 attention (no [B,NH,T,T] tensor)
  matmul attproj   F.linear [N,C] -> [N,C] with bias
  residual         a + b over [N,C]
  matmul fc        F.linear [N,C] -> [N,4C] with bias
  gelu             F.gelu(approximate='tanh') over [N,4C]
  matmul fcproj    F.linear [N,4C] -> [N,C] with bias
  lm head          F.linear [N,C] -> [N,Vp], no bias
  softmax xent     F.cross_entropy(logits[:, :V], targets) (mean) forward and backward
                   into logits [N,Vp] as one row; logits.grad is set to None before each
                   call, so the gradient is assigned, as etr's fused kernel assigns dlogits
  adamw step       torch.optim.AdamW (lr 3e-4, betas 0.9/0.95, eps 1e-8, weight decay
                   0.1; fused=True on CUDA) over one flat parameter of --params elements
  grad norm        torch.linalg.vector_norm of that gradient, left on the device

A forward row times the call under torch.no_grad() (the same kernels, without building a
graph). A backward row builds the graph once and times only
torch.autograd.backward(out, dout, retain_graph=True) with a random dout; the gradients
accumulate into .grad, as etr's do (its kernels accumulate every gradient but dlogits).

Timing: --warmup untimed calls, then --reps timed calls, the median in milliseconds. On
CUDA each call is bracketed by CUDA events after a torch.cuda.synchronize(), with a short
GPU sleep enqueued before the start event so that the events time the GPU's work rather
than Python's kernel launches; caches are not flushed between calls. On the CPU (for
testing this script on small shapes) time.perf_counter. Writes a JSON file (--json) and
prints a table.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F


class Timer:
    """Median milliseconds of fn() over reps calls after warmup calls."""

    def __init__(self, device, reps, warmup):
        self.cuda = device.type == "cuda"
        self.reps = reps
        self.warmup = warmup
        # GPU cycles to sleep before each start event (about 0.5 ms): the launches of the
        # timed call are enqueued while the GPU sleeps, so the events see no launch gap.
        self.sleep = getattr(torch.cuda, "_sleep", None) if self.cuda else None

    def __call__(self, fn, before=None):
        for _ in range(self.warmup):
            fn()
        if before is not None:
            before()
        times = []
        if self.cuda:
            torch.cuda.synchronize()
            for _ in range(self.reps):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                if self.sleep is not None:
                    self.sleep(1_000_000)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
        else:
            for _ in range(self.reps):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)


def zero_grads(*tensors):
    def zero():
        for t in tensors:
            if t.grad is not None:
                t.grad.zero_()
    return zero


def leaf(*shape, dev, scale=1.0):
    return (torch.randn(*shape, device=dev) * scale).requires_grad_(True)


def forward_backward(name, timer, fn, inputs):
    """Rows "NAME fwd" and "NAME bwd" of out = fn(*inputs): backward into every input."""
    with torch.no_grad():
        fwd = timer(lambda: fn(*inputs))
    out = fn(*inputs)
    dout = torch.randn_like(out)
    bwd = timer(lambda: torch.autograd.backward(out, dout, retain_graph=True),
                before=zero_grads(*inputs))
    return [(f"{name} fwd", fwd), (f"{name} bwd", bwd)]


def eager_attention(qkv, NH, mask):
    """Causal attention with the [B,NH,T,T] weights materialised (etr's algorithm);
    mask [T,T] is True above the diagonal (the future)."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // NH
    q, k, v = qkv.split(C, dim=2)
    q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
    att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
    return (att @ v).transpose(1, 2).contiguous().view(B, T, C)


def sdpa_attention(qkv, NH):
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = qkv.split(C, dim=2)
    q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).contiguous().view(B, T, C)


def encoder_rows(a, timer, dev):
    tokens = torch.randint(0, a.V, (a.B, a.T), device=dev)
    wte = leaf(a.Vp, a.C, dev=dev, scale=0.02)
    wpe = leaf(a.T, a.C, dev=dev, scale=0.01)
    return forward_backward("encoder", timer,
                            lambda w, p: F.embedding(tokens, w) + p[:a.T], [wte, wpe])


def linear_rows(name, a, timer, dev, n_in, n_out, bias=True):
    N = a.B * a.T
    x = leaf(N, n_in, dev=dev)
    w = leaf(n_out, n_in, dev=dev, scale=1.0 / math.sqrt(n_in))
    inputs = [x, w] + ([leaf(n_out, dev=dev, scale=0.02)] if bias else [])
    return forward_backward(name, timer, F.linear, inputs)


def xent_row(a, timer, dev):
    N = a.B * a.T
    logits = leaf(N, a.Vp, dev=dev)
    targets = torch.randint(0, a.V, (N,), device=dev)

    def step():
        logits.grad = None  # dlogits assigned, as etr's fused kernel does
        F.cross_entropy(logits[:, :a.V], targets, reduction="mean").backward()
    return [("softmax xent fwd+bwd", timer(step))]


def optimizer_rows(a, timer, dev):
    fused = dev.type == "cuda"
    p = torch.nn.Parameter(torch.randn(a.params, device=dev) * 0.02)
    p.grad = torch.randn(a.params, device=dev) * 1e-3
    opt = torch.optim.AdamW([p], lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                            **({"fused": True} if fused else {}))
    rows = [("adamw step", timer(opt.step))]
    rows.append(("grad norm", timer(lambda: torch.linalg.vector_norm(p.grad))))
    return rows, fused


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--B", type=int, default=8)
    p.add_argument("--T", type=int, default=1024)
    p.add_argument("--C", type=int, default=768)
    p.add_argument("--NH", type=int, default=12)
    p.add_argument("--V", type=int, default=50257)
    p.add_argument("--Vp", type=int, default=50304)
    p.add_argument("--params", type=int, default=124475904)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--no-tf32", action="store_true", help="plain fp32 matmuls (no TF32)")
    p.add_argument("--json", required=True, help="write the figures to this JSON file")
    a = p.parse_args()
    if a.C % a.NH != 0 or not 0 < a.V <= a.Vp or a.reps < 1 or a.warmup < 0:
        raise SystemExit("need C divisible by NH, 0 < V <= Vp, --reps >= 1, --warmup >= 0")
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda was asked but CUDA is not available to this PyTorch.")

    tf32 = not a.no_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.manual_seed(1234)
    dev = torch.device(a.device)
    timer = Timer(dev, a.reps, a.warmup)
    B, T, C, NH, N = a.B, a.T, a.C, a.NH, a.B * a.T

    def free():
        if dev.type == "cuda":
            torch.cuda.empty_cache()

    # Each group's tensors (and graph) die when its function returns.
    rows = []
    rows += encoder_rows(a, timer, dev)
    free()
    rows += forward_backward(
        "layernorm", timer, lambda x, w, b: F.layer_norm(x, (C,), w, b, 1e-5),
        [leaf(N, C, dev=dev), leaf(C, dev=dev), leaf(C, dev=dev)])
    rows += linear_rows("matmul qkv", a, timer, dev, C, 3 * C)
    free()
    mask = torch.ones(T, T, dtype=torch.bool, device=dev).triu(1)
    rows += forward_backward("attention", timer, lambda qkv: eager_attention(qkv, NH, mask),
                             [leaf(B, T, 3 * C, dev=dev)])
    free()
    rows += [(f"{n} (sdpa)", ms) for n, ms in forward_backward(
        "attention", timer, lambda qkv: sdpa_attention(qkv, NH),
        [leaf(B, T, 3 * C, dev=dev)])]
    free()
    rows += linear_rows("matmul attproj", a, timer, dev, C, C)
    rows += forward_backward("residual", timer, lambda x, y: x + y,
                             [leaf(N, C, dev=dev), leaf(N, C, dev=dev)])
    rows += linear_rows("matmul fc", a, timer, dev, C, 4 * C)
    rows += forward_backward("gelu", timer, lambda x: F.gelu(x, approximate="tanh"),
                             [leaf(N, 4 * C, dev=dev)])
    rows += linear_rows("matmul fcproj", a, timer, dev, 4 * C, C)
    free()
    rows += linear_rows("lm head", a, timer, dev, C, a.Vp, bias=False)
    free()
    rows += xent_row(a, timer, dev)
    free()
    opt_rows, fused = optimizer_rows(a, timer, dev)
    rows += opt_rows
    free()

    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    result = {
        "device": device_name, "torch": torch.__version__, "tf32": tf32,
        "fused_adamw": fused,
        "shapes": {"B": B, "T": T, "C": C, "NH": NH, "V": a.V, "Vp": a.Vp, "N": N,
                   "params": a.params},
        "reps": a.reps, "warmup": a.warmup,
        "rows": [{"name": n, "ms": ms} for n, ms in rows],
    }
    with open(a.json, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")

    print(f"# PyTorch {torch.__version__} on {device_name}: B {B}, T {T}, C {C}, NH {NH}, "
          f"V {a.V}, Vp {a.Vp}, params {a.params}; fp32, TF32 {'on' if tf32 else 'off'}, "
          f"AdamW {'fused' if fused else 'not fused'}; median of {a.reps} after {a.warmup} "
          f"warm-up calls")
    width = max(len(n) for n, _ in rows)
    print(f"{'operation':<{width}}  {'ms':>10}")
    for n, ms in rows:
        print(f"{n:<{width}}  {ms:>10.4f}")


if __name__ == "__main__":
    main()
