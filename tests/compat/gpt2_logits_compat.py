#!/usr/bin/env python3
"""transformers' GPT2LMHeadModel loads etr's GPT-2 export and gives etr's logits.

The fixture tool writes a small perturbed GPT-2 exported by etr, the tokens and etr's
logits; this script loads the directory with GPT2LMHeadModel.from_pretrained (the real
library, offline) and compares the logits. Tolerance: max |difference| <= 1e-4 with
logits of magnitude ~1-10 (both run in f32; the sums differ only in order).
"""
import argparse
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fixture-tool", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([a.fixture_tool, d], check=True)
        B, T, V = (int(x) for x in open(f"{d}/shape.txt").read().split())
        tokens = np.fromfile(f"{d}/tokens.bin", dtype="<i4").reshape(B, T)
        etr_logits = np.fromfile(f"{d}/logits.bin", dtype="<f4").reshape(B, T, V)
        etr_bf16 = np.fromfile(f"{d}/logits_bf16.bin", dtype="<f4").reshape(B, T, V)
        model = transformers.GPT2LMHeadModel.from_pretrained(f"{d}/model")
        model.eval()
        with torch.no_grad():
            ids = torch.from_numpy(tokens.astype(np.int64))
            hf = model(input_ids=ids).logits.numpy()
            # PyTorch's own mixed precision on the same model: bf16 autocast on the CPU.
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                hf_bf16 = model(input_ids=ids).logits.float().numpy()
    diff = float(np.abs(hf - etr_logits).max())
    scale = float(np.abs(hf).max())
    print(f"max |logit difference| = {diff:.3g} (largest logit {scale:.3g}); "
          f"transformers {transformers.__version__}, torch {torch.__version__}")
    if not diff <= 1e-4:
        print("FAIL: etr's export does not give etr's logits in transformers", file=sys.stderr)
        return 1
    # Mixed precision: etr's bf16 model (runtime.precision = bf16) against transformers in
    # fp32, beside PyTorch's bf16 autocast against the same: etr's error must be a bf16
    # error (relative L2 under 2e-2) and no worse than twice autocast's.
    def rel_l2(x, y):
        return float(np.linalg.norm((x - y).ravel()) / np.linalg.norm(y.ravel()))
    etr_err, torch_err = rel_l2(etr_bf16, hf), rel_l2(hf_bf16, hf)
    print(f"bf16 logits vs transformers fp32, relative L2: etr {etr_err:.3g}, "
          f"torch autocast {torch_err:.3g}")
    if not (etr_err < 2e-2 and etr_err <= 2 * torch_err):
        print("FAIL: etr's bf16 logits are further from fp32 than a bf16 model's",
              file=sys.stderr)
        return 1
    print("2 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
