#!/usr/bin/env python3
"""Trains GPT-2 124M in PyTorch on one GPU: the reference printed beside `etr-bench gpu-train`.

The same computation as etr's GPT-2 on the GPU, same shapes. Defaults are GPT-2 124M:
n_layer L 12, n_head 12, d_model C 768, seq_len 1024 (the rows of the learned position
embedding wpe; a micro-batch has --T <= seq_len tokens a row, 1024 by default), vocabulary
V 50257 with the token embedding wte padded to Vp 50304 rows (the extra rows are
parameters that get no gradient from the loss, as in llm.c), tied LM head
(logits = ln_f(x) @ wte^T, [B,T,Vp]), pre-LayerNorm blocks

    x = x + c_proj(attention(c_attn(ln_1(x))))       c_attn Linear(C,3C), c_proj Linear(C,C)
    x = x + mlp_proj(gelu_tanh(c_fc(ln_2(x))))       c_fc Linear(C,4C), mlp_proj Linear(4C,C)

all Linear layers with bias, final LayerNorm, eps 1e-5, no dropout. Loss: mean cross
entropy over logits[:, :, :V]. Initialisation: weights normal(0, 0.02), c_proj and
mlp_proj normal(0, 0.02/sqrt(2 n_layer)), biases 0, LayerNorm weight 1 and bias 0.
Attention (--attention): "eager" materialises the scaled scores q k^T as [B,NH,T,T],
masks the future with -inf, softmaxes and multiplies by v (the algorithm etr runs);
"sdpa" is F.scaled_dot_product_attention(is_causal=True), PyTorch's fastest.
Optimizer: torch.optim.AdamW(lr 3e-4, betas (0.9, 0.95), eps 1e-8), weight decay 0.1 on
the 2-D weights (wte, wpe, the Linear weights) and 0 on biases and LayerNorm parameters,
fused=True on CUDA (the default foreach implementation on the CPU); global-norm
gradient clipping at 1.0 (torch.nn.utils.clip_grad_norm_).

Precision (--precision): "fp32" keeps parameters, activations, gradients and optimizer
state in fp32, matmuls (and cuDNN) in TF32 unless --no-tf32. "bf16" is PyTorch's mixed
precision as llm.c's train_gpt2.py runs it: torch.autocast(device_type=--device,
dtype=torch.bfloat16) around forward and loss only (autocast's own op lists: products and
SDPA in bf16, LayerNorm, softmax and cross entropy in fp32), fp32 master parameters,
gradients and AdamW state (fused AdamW on CUDA, as for fp32), no gradient scaler (bf16
needs none).

Compilation (--compile): torch.compile(model) (the default mode: Inductor, no CUDA graphs)
of forward and loss; backward through the compiled graph, clipping and AdamW stay eager.
The compilation happens during the warm-up steps (--warmup must be at least 1). When it
raises, or compiling plus the warm-up takes more than --compile-timeout seconds (a timer
interrupts it there), the run falls back to the eager model: the warm-up starts again
eagerly and the output says so ("compiled": false and "compile_fallback" with the reason
in the JSON; "eager (compile failed: ...)" in the table). Without --compile no
torch.compile, and never CUDA graphs.

Inputs and targets: one batch of random token ids in [0, V) of shape [B,T] each, drawn
once from a fixed seed and used by every step. A step is opt.zero_grad(set_to_none=True),
forward, loss, backward, clip, opt.step(): one micro-batch of B x T tokens, no gradient
accumulation.

Timing: --warmup untimed steps (with --compile, the compilation), then --steps timed
steps. On CUDA a CUDA event is recorded before the first timed step and after each one,
with nothing in between that waits for the GPU (the loss is read once, at the end), then
torch.cuda.synchronize(); a step's time is the time between consecutive events, so it
includes any GPU idle time while Python launches kernels. On the CPU (for testing this
script on small shapes) time.perf_counter around each step. Reported: the median
ms/step, tokens/s = B*T / median step time, the loss of the last step, model FLOPs per
token as llm.c and etr count them,

    flops_per_token = 6 N + 12 n_layer C T,
    N = 12 L C^2 + 13 L C + V C + seq_len C + 2 C   (parameters, unpadded vocabulary),

checked against sum(p.numel()) less the (Vp - V) C padding rows, model TFLOP/s =
flops_per_token * tokens/s, and on CUDA torch.cuda.max_memory_allocated() over the
whole run (after a failed compilation: over the eager run) and
torch.cuda.mem_get_info() (free, total) before the first step (model built, optimizer
state not yet allocated) and after the timed steps. Prints a table and writes
a JSON file (--json) with, besides the figures, "precision", "attention", "compile" (asked
for), "compiled" (what ran) and "compile_fallback" (null, or why it fell back to eager).

On the CPU, for testing this script (tiny shapes, e.g. --n-layer 2 --d-model 64 --n-head 4
--T 32 --seq-len 32 --V 1000 --Vp 1024 --B 2): --device cpu; bf16 autocasts on the CPU.
"""
import argparse
import contextlib
import json
import math
import signal
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH, attention, mask):
        super().__init__()
        self.NH = NH
        self.attention = attention
        self.mask = mask  # [T,T] bool, True above the diagonal (the future); shared
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def attend(self, qkv):
        B, T, C3 = qkv.shape
        C = C3 // 3
        hs = C // self.NH
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, hs).transpose(1, 2) for t in (q, k, v))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = F.softmax(att.masked_fill(self.mask[:T, :T], float("-inf")), dim=-1)
            y = att @ v
        return y.transpose(1, 2).contiguous().view(B, T, C)

    def forward(self, x):
        x = x + self.c_proj(self.attend(self.c_attn(self.ln_1(x))))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, NH, C, seq_len, V, Vp, attention):
        super().__init__()
        self.V = V
        mask = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)
        self.register_buffer("mask", mask, persistent=False)
        self.wte = nn.Embedding(Vp, C)  # rows V..Vp-1: padding, never looked up or scored
        self.wpe = nn.Embedding(seq_len, C)
        self.h = nn.ModuleList(Block(C, NH, attention, self.mask) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif ".ln_" in name or name.startswith("ln_"):
                    p.fill_(1.0)  # LayerNorm weight
                elif name.endswith("c_proj.weight") or name.endswith("mlp_proj.weight"):
                    p.normal_(0.0, 0.02 / math.sqrt(2 * L))
                else:
                    p.normal_(0.0, 0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:T]
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied LM head, [B,T,Vp]
        return F.cross_entropy(logits[:, :, :self.V].reshape(-1, self.V), targets.reshape(-1))


def parse_args():
    """The command line, checked: sizes positive and consistent, CUDA there if asked for."""
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--attention", choices=["eager", "sdpa"], default="eager")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="fp32 (TF32 products unless --no-tf32), or bf16 autocast around "
                        "forward and loss with fp32 master parameters")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (during the warm-up; eager when it fails)")
    p.add_argument("--compile-timeout", type=float, default=90.0,
                   help="seconds that compiling plus the warm-up may take before the run "
                        "falls back to eager")
    p.add_argument("--B", type=int, default=8, help="micro-batch rows")
    p.add_argument("--T", type=int, default=1024, help="tokens a row of the micro-batch")
    p.add_argument("--seq-len", type=int, default=1024,
                   help="the model's seq_len: rows of wpe, at least --T")
    p.add_argument("--n-layer", type=int, default=12)
    p.add_argument("--n-head", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--V", type=int, default=50257, help="vocabulary")
    p.add_argument("--Vp", type=int, default=50304, help="padded rows of wte")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before them")
    p.add_argument("--no-tf32", action="store_true", help="plain fp32 matmuls (no TF32)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--json", help="write the figures to this JSON file")
    a = p.parse_args()
    L, NH, C, T, B, V, Vp = a.n_layer, a.n_head, a.d_model, a.T, a.B, a.V, a.Vp
    S = a.seq_len
    if (min(L, NH, C, T, B) < 1 or C % NH != 0 or not 0 < V <= Vp or T > S or a.steps < 1
            or a.warmup < 0):
        raise SystemExit("need positive sizes, d_model divisible by n_head, 0 < V <= Vp, "
                         "T <= seq_len, --steps >= 1 and --warmup >= 0.")
    if a.compile and (a.warmup < 1 or a.compile_timeout <= 0):
        raise SystemExit("--compile compiles during the warm-up: it needs --warmup >= 1 and "
                         "--compile-timeout > 0.")
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda was asked but CUDA is not available to this PyTorch.")
    return a


def build(a, dev, fused):
    """The model (created and initialised on dev), its AdamW, and the one batch (x, y)."""
    with dev:  # parameters are created (and initialised) on the device
        model = GPT(a.n_layer, a.n_head, a.d_model, a.seq_len, a.V, a.Vp, a.attention)
    model.train()
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            **({"fused": True} if fused else {}))
    gen = torch.Generator(device="cpu").manual_seed(a.seed)
    x = torch.randint(0, a.V, (a.B, a.T), generator=gen).to(dev)
    y = torch.randint(0, a.V, (a.B, a.T), generator=gen).to(dev)
    return model, opt, x, y


def count_params(model, a):
    """(formula, counted without the padding rows, allocated) parameters; warns on a mismatch."""
    L, C, V, Vp, S = a.n_layer, a.d_model, a.V, a.Vp, a.seq_len
    params_formula = 12 * L * C * C + 13 * L * C + V * C + S * C + 2 * C
    params_allocated = sum(q.numel() for q in model.parameters())
    params_counted = params_allocated - (Vp - V) * C
    if params_counted != params_formula:
        print(f"warning: the model has {params_counted} parameters without the padding rows, "
              f"the formula says {params_formula}", file=sys.stderr)
    return params_formula, params_counted, params_allocated


def autocast(a):
    """bf16: autocast around forward and loss on --device; fp32: nothing."""
    if a.precision == "bf16":
        return torch.autocast(device_type=a.device, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def make_step(model, opt, x, y, a):
    """One training step of `model` (the eager module or its compiled wrapper): the loss,
    detached, without waiting for the device."""
    def step():
        opt.zero_grad(set_to_none=True)
        with autocast(a):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach()
    return step


def warm_up(step, a, cuda):
    """--warmup steps, the device waited for: the first step's loss (None without any)."""
    first_loss = None
    for i in range(a.warmup):
        loss = step()
        if i == 0:
            first_loss = loss
    if cuda:
        torch.cuda.synchronize()
    return first_loss


class CompileTimeout(Exception):
    pass


def compiled_graphs():
    """Graphs Dynamo has compiled in this process so far (None where the counter is gone)."""
    try:
        from torch._dynamo.utils import counters
        return int(counters["stats"]["unique_graphs"])
    except Exception:  # an internal counter: not every version has it
        return None


def compile_and_warm_up(model, opt, x, y, a, cuda):
    """torch.compile(model) and the warm-up through it, under a timer of --compile-timeout
    seconds: (step, first loss, None) when it compiled in time, else (None, None, reason).
    The timer (SIGALRM) interrupts a compilation that is still running, and again every
    0.5 s after that (Inductor catches and logs some exceptions and goes on compiling);
    the compiled wrapper is then dropped (the eager module's parameters are the same
    tensors)."""
    fired, armed = [False], [False]

    def on_alarm(signum, frame):
        fired[0] = True
        if armed[0]:
            raise CompileTimeout()

    def disarm():
        while True:  # an alarm may strike inside this very function: done again then
            try:
                armed[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                return
            except CompileTimeout:
                pass

    graphs_before = compiled_graphs()
    previous = signal.signal(signal.SIGALRM, on_alarm)
    reason = None
    try:
        try:
            armed[0] = True
            signal.setitimer(signal.ITIMER_REAL, a.compile_timeout, 0.5)
            step = make_step(torch.compile(model), opt, x, y, a)
            first_loss = warm_up(step, a, cuda)
        except Exception as e:  # CompileTimeout, or whatever Dynamo or Inductor raised
            if not fired[0]:
                text = str(e).strip().splitlines()
                reason = f"failed: {type(e).__name__}" + (f": {text[0][:200]}" if text else "")
        finally:
            disarm()
            signal.signal(signal.SIGALRM, previous)
    except CompileTimeout:  # one that struck in the handler above, before disarm()
        pass
    if fired[0]:  # also when Inductor swallowed the interruption and finished
        reason = (f"timeout: compiling plus {a.warmup} warm-up step(s) took more than "
                  f"{a.compile_timeout:g} s")
    elif reason is None and compiled_graphs() == graphs_before:
        reason = "failed: Dynamo compiled no graph"
    if reason is not None:
        release_compiler()
        return None, None, reason
    return step, first_loss, None


def release_compiler():
    """After a failed or interrupted compilation: Dynamo's caches dropped and Inductor's
    compile workers (still compiling, perhaps) stopped, so that they neither share the
    CPUs with the eager run nor hold up the exit. Internal APIs: best effort."""
    try:
        torch._dynamo.reset()
    except Exception:
        pass
    try:
        from torch._inductor.async_compile import shutdown_compile_workers
        shutdown_compile_workers()
    except Exception:
        pass


def train(model, opt, x, y, a, cuda):
    """--warmup untimed steps (with --compile, through the compiled model; eager again
    when that fails or runs out of time), then --steps timed ones: (step ms, first loss,
    last loss, warm-up s, compile fallback reason or None, compile attempt s). The first
    loss is None without warm-up steps."""
    t0 = time.perf_counter()
    step, first_loss, fallback, compile_s = None, None, None, None
    if a.compile:
        step, first_loss, fallback = compile_and_warm_up(model, opt, x, y, a, cuda)
        compile_s = time.perf_counter() - t0
        if fallback is not None:
            print(f"torch.compile {fallback}; running eager instead", file=sys.stderr)
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()  # the peak of the eager run alone
            t0 = time.perf_counter()
    if step is None:
        step = make_step(model, opt, x, y, a)
        first_loss = warm_up(step, a, cuda)
    warmup_s = time.perf_counter() - t0

    times = []
    if cuda:
        events = [torch.cuda.Event(enable_timing=True) for _ in range(a.steps + 1)]
        events[0].record()
        for i in range(a.steps):
            loss = step()
            events[i + 1].record()
        torch.cuda.synchronize()
        times = [events[i].elapsed_time(events[i + 1]) for i in range(a.steps)]
    else:
        for _ in range(a.steps):
            t0 = time.perf_counter()
            loss = step()
            times.append((time.perf_counter() - t0) * 1e3)
    last_loss = loss.item()
    first_loss = first_loss.item() if first_loss is not None else None
    return times, first_loss, last_loss, warmup_s, fallback, compile_s


def used(m):
    """Bytes in use from torch.cuda.mem_get_info's (free, total); None stays None."""
    return None if m is None else m[1] - m[0]


def make_result(a, tf32, fused, params, flops_per_token, run, mem_before, build_s, t_start,
                dev):
    """The figures of the run, as written to --json (wall_s measured now)."""
    cuda = dev.type == "cuda"
    params_formula, params_counted, params_allocated = params
    times, first_loss, last_loss, warmup_s, fallback, compile_s = run
    ms = statistics.median(times)
    tokens_per_s = a.B * a.T / (ms * 1e-3)
    tflops = flops_per_token * tokens_per_s / 1e12
    if cuda:
        mem_after = torch.cuda.mem_get_info(dev)
        peak_allocated = torch.cuda.max_memory_allocated(dev)
        peak_reserved = torch.cuda.max_memory_reserved(dev)
        device_name = torch.cuda.get_device_name(dev)
    else:
        mem_after = None
        peak_allocated = peak_reserved = None
        device_name = "cpu"
    return {
        "device": device_name, "torch": torch.__version__, "tf32": tf32,
        "precision": a.precision, "autocast": "bf16" if a.precision == "bf16" else None,
        "attention": a.attention, "fused_adamw": fused,
        "compile": a.compile, "compiled": a.compile and fallback is None,
        "compile_fallback": fallback, "compile_timeout_s": a.compile_timeout if a.compile else None,
        "compile_attempt_s": compile_s,
        "B": a.B, "T": a.T, "seq_len": a.seq_len, "n_layer": a.n_layer, "n_head": a.n_head,
        "d_model": a.d_model, "V": a.V, "Vp": a.Vp,
        "params": params_formula, "params_counted_unpadded": params_counted,
        "params_allocated": params_allocated,
        "flops_per_token": flops_per_token,
        "warmup": a.warmup, "steps": a.steps,
        "ms_per_step": ms, "ms_per_step_mean": statistics.fmean(times),
        "ms_per_step_min": min(times), "ms_per_step_max": max(times), "step_ms": times,
        "tokens_per_s": tokens_per_s, "tflops": tflops,
        "loss": last_loss, "first_loss": first_loss, "ln_V": math.log(a.V),
        "peak_allocated_bytes": peak_allocated, "peak_reserved_bytes": peak_reserved,
        "mem_used_bytes": used(mem_after), "mem_used_before_bytes": used(mem_before),
        "mem_free_total_before": list(mem_before) if cuda else None,
        "mem_free_total_after": list(mem_after) if cuda else None,
        "build_s": build_s, "warmup_s": warmup_s,
        "wall_s": time.perf_counter() - t_start,
    }


def print_report(r):
    """The table of the figures in r (make_result's dict)."""
    cuda = r["mem_free_total_before"] is not None
    mem_before, mem_after = r["mem_free_total_before"], r["mem_free_total_after"]
    times_min, times_max = r["ms_per_step_min"], r["ms_per_step_max"]
    first_loss, last_loss = r["first_loss"], r["loss"]
    params_formula, params_counted = r["params"], r["params_counted_unpadded"]

    def gib(n):
        return "-" if n is None else f"{n / 2**30:.2f} GiB"

    if r["precision"] == "bf16":
        precision = "bf16 autocast (fp32 master parameters)"
    else:
        precision = "fp32, TF32 " + ("on" if r["tf32"] else "off")
    if r["compiled"]:
        compiled = "torch.compile"
    elif r["compile"]:
        compiled = f"eager (compile {r['compile_fallback']})"
    else:
        compiled = "no torch.compile"
    print(f"# PyTorch {r['torch']} on {r['device']}: GPT-2 n_layer {r['n_layer']}, "
          f"n_head {r['n_head']}, d_model {r['d_model']}, seq_len {r['seq_len']}, "
          f"V {r['V']} (Vp {r['Vp']}), B {r['B']} x T {r['T']}; {precision}, "
          f"attention {r['attention']}, AdamW {'fused' if r['fused_adamw'] else 'not fused'}, "
          f"{compiled}; median of {r['steps']} steps after {r['warmup']} warm-up steps")
    rows = [
        ("precision / attention", f"{r['precision']} / {r['attention']}"),
        ("compiled", "yes" if r["compiled"] else
         (f"no: {r['compile_fallback']}" if r["compile"] else "no (not asked)")),
        ("params (formula)", f"{params_formula}"),
        ("params (counted, unpadded)", f"{params_counted}"
         + ("" if params_counted == params_formula else "  MISMATCH")),
        ("params (allocated, padded)", f"{r['params_allocated']}"),
        ("flops/token", f"{r['flops_per_token']}"),
        ("ms/step (median)", f"{r['ms_per_step']:.3f}"),
        ("ms/step (min / max)", f"{times_min:.3f} / {times_max:.3f}"),
        ("tokens/s", f"{r['tokens_per_s']:.0f}"),
        ("model TFLOP/s", f"{r['tflops']:.3f}"),
        ("loss (first / last step)",
         ("-" if first_loss is None else f"{first_loss:.4f}") + f" / {last_loss:.4f}"
         + f"  (ln V {r['ln_V']:.4f})"),
        ("peak allocated", gib(r["peak_allocated_bytes"])),
        ("peak reserved", gib(r["peak_reserved_bytes"])),
        ("GPU memory used before", gib(r["mem_used_before_bytes"])
         + ("" if not cuda else f" of {gib(mem_before[1])}")),
        ("GPU memory used after", gib(r["mem_used_bytes"])
         + ("" if not cuda else f" of {gib(mem_after[1])}")),
        ("build / warm-up / total s", f"{r['build_s']:.2f} / {r['warmup_s']:.2f} / "
         f"{r['wall_s']:.2f}"),
    ]
    if r["compile"] and not r["compiled"]:
        rows.append(("compile attempt s", f"{r['compile_attempt_s']:.2f} (then eager warm-up)"))
    width = max(len(n) for n, _ in rows)
    for n, v in rows:
        print(f"{n:<{width}}  {v}")


def main():
    a = parse_args()
    t_start = time.perf_counter()
    cuda = a.device == "cuda"
    dev = torch.device(a.device)

    tf32 = not a.no_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.manual_seed(a.seed)

    t0 = time.perf_counter()
    fused = cuda
    model, opt, x, y = build(a, dev, fused)
    if cuda:
        torch.cuda.synchronize()
    build_s = time.perf_counter() - t0

    params = count_params(model, a)
    flops_per_token = 6 * params[0] + 12 * a.n_layer * a.d_model * a.T
    mem_before = torch.cuda.mem_get_info(dev) if cuda else None
    run = train(model, opt, x, y, a, cuda)

    result = make_result(a, tf32, fused, params, flops_per_token, run, mem_before, build_s,
                         t_start, dev)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    print_report(result)


if __name__ == "__main__":
    main()
