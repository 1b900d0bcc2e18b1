"""etr's safetensors files against Python's safetensors and transformers (ctest label
"compat"; run by tests/compat/run_in_venv.sh with the interpreter of .venv/).

1. etr writes a fixture (write_safetensors_fixture write): every dtype Python can
   represent, a 0-d and an empty tensor, a UTF-8 name, metadata. Python's safetensors
   loads it; dtypes, shapes, bytes and metadata must match FIXTURE.
2. Python's safetensors writes the same tensors; etr reads them back
   (write_safetensors_fixture check) and must find the same bytes. A file with one
   value changed must be rejected, so the check is not vacuous.
3. A random tiny GPT2LMHeadModel (2 layers, 2 heads, width 16, 32 positions, vocabulary
   256) saved with save_pretrained: etr's reader parses model.safetensors, and its names
   and shapes are exactly the mapping table of docs/gpt2_weights.md. The page's claims
   about the layout are checked with the real library: etr's [out, in] weights, turned
   back into Conv1D's [in, out], load into from_pretrained with identical logits, with
   and without the "transformer." prefix; a Conv1D forward equals a linear with etr's
   weight; an untransposed square c_proj loads silently with wrong logits.

Usage: safetensors_compat.py --fixture-tool PATH --gpt2-doc docs/gpt2_weights.md [--keep]
Exit status 0 when every check passes, 1 otherwise.
"""

import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

torch.set_num_threads(1)

# The fixture of write_safetensors_fixture.cc: (name, safetensors dtype, shape). Element
# j of a tensor depends only on its dtype; see fixture_values. Keep in step with kFixture.
FIXTURE = [
    ("f32.matrix", "F32", [3, 4]),
    ("f32.scalar", "F32", []),
    ("f32.empty", "F32", [0, 4]),
    ("f64.cube", "F64", [2, 3, 2]),
    ("f16.vector", "F16", [5]),
    ("bf16.matrix", "BF16", [2, 3]),
    ("i8.vector", "I8", [4]),
    ("u8.vector", "U8", [6]),
    ("i16.vector", "I16", [3]),
    ("u16.vector", "U16", [2]),
    ("i32.vector", "I32", [4]),
    ("u32.vector", "U32", [2]),
    ("i64.vector", "I64", [3]),
    ("u64.vector", "U64", [2]),
    ("bool.vector", "BOOL", [5]),
    ("f8_e4m3.vector", "F8_E4M3", [4]),
    ("f8_e5m2.vector", "F8_E5M2", [4]),
    ("c64.vector", "C64", [2]),
    ("name.\u00fc\u00f1\u00ef", "F32", [2]),
]
FIXTURE_METADATA = {"format": "pt", "etr.fixture": "1", "note": "\u00fc\u00f1\u00ef \u2713"}

TORCH_DTYPES = {
    "F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
    "I8": torch.int8, "U8": torch.uint8, "I16": torch.int16, "U16": torch.uint16,
    "I32": torch.int32, "U32": torch.uint32, "I64": torch.int64, "U64": torch.uint64,
    "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
    "C64": torch.complex64,
}


def fixture_values(dtype, shape):
    """The tensor write_safetensors_fixture.cc writes for this dtype and shape."""
    n = int(np.prod(shape)) if shape else 1
    j = np.arange(n, dtype=np.int64)
    if dtype in ("F32", "F16", "BF16"):
        step = 0.25 if dtype == "F32" else 0.5
        t = (torch.arange(n, dtype=torch.float32) * step - 1).to(TORCH_DTYPES[dtype])
    elif dtype == "F64":
        t = torch.arange(n, dtype=torch.float64) / 3.0
    elif dtype == "C64":
        f = torch.arange(n, dtype=torch.float32)
        t = torch.complex(f + 0.5, -f)
    elif dtype in ("F8_E4M3", "F8_E5M2"):
        t = torch.from_numpy((17 * j).astype(np.uint8)).view(TORCH_DTYPES[dtype])
    else:
        formulas = {
            "I8": (-128 + 50 * j, np.int8), "U8": ((250 + j) % 256, np.uint8),
            "I16": (-30000 + 30000 * j, np.int16), "U16": (65535 - j, np.uint16),
            "I32": (j * j - 5, np.int32), "U32": (4294967295 - j, np.uint32),
            "I64": ((j - 1) * (1 << 40), np.int64),
            "U64": (np.uint64(2**64 - 1) - j.astype(np.uint64), np.uint64),
            "BOOL": (j % 2 == 0, np.bool_),
        }
        values, np_type = formulas[dtype]
        t = torch.from_numpy(np.asarray(values).astype(np_type))
    return t.reshape(shape)


def raw_bytes(t):
    """The tensor's bytes as stored in a file (dtype-independent comparison)."""
    t = t.contiguous().reshape(-1)
    if t.is_complex():
        t = torch.view_as_real(t).reshape(-1)
    return bytes(t.view(torch.uint8).numpy()) if t.numel() else b""


class Checks:
    def __init__(self):
        self.failures = 0

    def expect(self, ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            self.failures += 1
        return ok


def run_tool(tool, *args, expect_rc=0):
    r = subprocess.run([tool, *args], capture_output=True, text=True)
    if r.returncode != expect_rc:
        print(r.stdout + r.stderr, end="")
    return r


# ---- 1 and 2: the fixture in both directions ---------------------------------------------

def check_fixture_cpp_to_python(checks, tool, tmp):
    path = os.path.join(tmp, "from_etr.safetensors")
    r = run_tool(tool, "write", path)
    if not checks.expect(r.returncode == 0, "etr writes the fixture"):
        return
    with open(path, "rb") as f:
        header_len = struct.unpack("<Q", f.read(8))[0]
    checks.expect(header_len % 8 == 0, f"etr's header length {header_len} is a multiple of 8")
    loaded = load_file(path)
    with safe_open(path, framework="pt") as f:
        metadata = f.metadata()
    checks.expect(metadata == FIXTURE_METADATA, f"Python reads etr's metadata {metadata}")
    checks.expect(sorted(loaded) == sorted(n for n, _, _ in FIXTURE),
                  f"Python finds etr's {len(FIXTURE)} tensor names")
    for name, dtype, shape in FIXTURE:
        if name not in loaded:
            continue
        t, want = loaded[name], fixture_values(dtype, shape)
        checks.expect(t.dtype == TORCH_DTYPES[dtype] and list(t.shape) == shape
                      and raw_bytes(t) == raw_bytes(want),
                      f"etr -> Python {name}: {dtype} {shape} {t.dtype} equal bytes")


def check_fixture_python_to_cpp(checks, tool, tmp):
    tensors = {name: fixture_values(dtype, shape) for name, dtype, shape in FIXTURE}
    path = os.path.join(tmp, "from_python.safetensors")
    save_file(tensors, path, metadata=FIXTURE_METADATA)
    r = run_tool(tool, "check", path)
    print(r.stdout, end="")
    checks.expect(r.returncode == 0, "etr reads Python's file with the fixture's values")

    tensors["i32.vector"] = tensors["i32.vector"].clone()
    tensors["i32.vector"][2] += 1
    bad = os.path.join(tmp, "from_python_changed.safetensors")
    save_file(tensors, bad, metadata=FIXTURE_METADATA)
    r = run_tool(tool, "check", bad, expect_rc=1)
    checks.expect(r.returncode == 1 and "MISMATCH i32.vector: values differ" in r.stdout,
                  "etr notices one changed value in Python's file")


# ---- 3: GPT-2 ----------------------------------------------------------------------------

def read_mapping_table(doc_path):
    """Rows of the mapping table in docs/gpt2_weights.md as dicts."""
    with open(doc_path, encoding="utf-8") as f:
        text = f.read()
    marker = "<!-- mapping-table: read by tests/compat/safetensors_compat.py -->"
    if marker not in text:
        raise SystemExit(f"{doc_path}: no mapping table marker '{marker}'")
    rows = []
    for line in text.split(marker, 1)[1].lstrip().splitlines():
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0].startswith("`"):
            rows.append({"etr": cells[0].strip("`"), "etr_shape": cells[1],
                         "hf": cells[2].strip("`"), "hf_shape": cells[3],
                         "conversion": cells[4]})
    return rows


def eval_shape(text, dims):
    """'[3C, C]' with dims {'C': 16, ...} -> [48, 16]."""
    out = []
    for item in text.strip("[]").split(","):
        m = re.fullmatch(r"\s*(\d*)([A-Z])\s*", item)
        if not m:
            raise SystemExit(f"cannot read shape '{text}' in the mapping table")
        out.append(int(m.group(1) or 1) * dims[m.group(2)])
    return out


def expand_table(rows, dims, n_layer):
    """Every tensor: {'etr', 'etr_shape', 'hf', 'hf_shape', 'conversion'} with {i} filled."""
    out = []
    for row in rows:
        for i in range(n_layer) if "{i}" in row["etr"] else [None]:
            fill = (lambda s: s.replace("{i}", str(i))) if i is not None else (lambda s: s)
            out.append({"etr": fill(row["etr"]), "hf": fill(row["hf"]),
                        "etr_shape": eval_shape(row["etr_shape"], dims),
                        "hf_shape": eval_shape(row["hf_shape"], dims),
                        "conversion": row["conversion"]})
    return out


def list_with_etr(tool, path):
    r = run_tool(tool, "list", path)
    tensors, metadata = {}, {}
    for line in r.stdout.splitlines():
        if m := re.fullmatch(r"tensor (\S+) (\S+) \[(.*)\]", line):
            tensors[m.group(1)] = (m.group(2), [int(x) for x in m.group(3).split(",") if x])
        elif m := re.fullmatch(r"metadata (\S+) (.*)", line):
            metadata[m.group(1)] = m.group(2)
    return r.returncode, tensors, metadata


def check_gpt2(checks, tool, doc_path, tmp):
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")

    n_layer, n_head, n_embd, n_positions, vocab = 2, 2, 16, 32, 256
    dims = {"V": vocab, "T": n_positions, "C": n_embd}
    table = expand_table(read_mapping_table(doc_path), dims, n_layer)
    checks.expect(len(table) == 4 + 12 * n_layer,
                  f"the mapping table expands to {len(table)} tensors (4 + 12 L)")

    torch.manual_seed(0)
    config = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_positions=n_positions,
                        vocab_size=vocab, bos_token_id=None, eos_token_id=None)
    model = GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, vocab, (2, n_positions))
    with torch.no_grad():
        reference = model(ids).logits
    hf_dir = os.path.join(tmp, "gpt2-tiny")
    model.save_pretrained(hf_dir)

    # etr reads what save_pretrained wrote; names and shapes are the table's.
    rc, tensors, metadata = list_with_etr(tool, os.path.join(hf_dir, "model.safetensors"))
    checks.expect(rc == 0, f"etr reads save_pretrained's model.safetensors ({len(tensors)} tensors)")
    print("  save_pretrained's tensors, as etr's reader sees them:")
    for name, (dtype, shape) in tensors.items():
        print(f"    {name:40s} {dtype} {shape}")
    expected = {row["hf"]: ("F32", row["hf_shape"]) for row in table}
    checks.expect(tensors == expected, "the names, dtypes and shapes are the mapping table's")
    for name in sorted(set(tensors) ^ set(expected)):
        print(f"    differs: {name}: file {tensors.get(name)}, table {expected.get(name)}")
    checks.expect(metadata == {"format": "pt"}, f"save_pretrained's metadata is {metadata}")
    state = model.state_dict()
    checks.expect(set(state) == set(expected) | {"lm_head.weight"},
                  "the model's state dict is the table plus the tied lm_head.weight")
    checks.expect(not any(re.search(r"\.attn\.(bias|masked_bias)$", k) for k in state),
                  "no attn.bias / masked_bias buffers in the state dict")

    # etr's layout from the table, and back: the round trip must give the same logits.
    etr = {}
    for row in table:
        w = state[row["hf"]]
        etr[row["etr"]] = w.t().contiguous() if row["conversion"] == "transpose" else w.clone()
    wrong = [f"{r['etr']} {list(etr[r['etr']].shape)} != {r['etr_shape']}" for r in table
             if list(etr[r["etr"]].shape) != r["etr_shape"]]
    checks.expect(not wrong, f"the table's conversions give its etr shapes {wrong or ''}")
    for row in table:
        if row["conversion"] == "transpose":
            conv = model.get_submodule(row["hf"].removesuffix(".weight"))
            x = torch.randn(3, row["hf_shape"][0])
            with torch.no_grad():
                same = torch.allclose(conv(x), torch.nn.functional.linear(x, etr[row["etr"]],
                                                                          conv.bias), atol=1e-6)
            checks.expect(same, f"Conv1D {row['hf']} == linear with etr's [out, in] weight")

    def to_hf(prefixed, transpose=True):
        out = {}
        for row in table:
            w = etr[row["etr"]]
            if row["conversion"] == "transpose" and transpose:
                w = w.t()
            out[row["hf"] if prefixed else row["etr"]] = w.contiguous()
        return out

    def load_logits(name, tensors, metadata={"format": "pt"}):
        d = os.path.join(tmp, name)
        os.makedirs(d)
        save_file(tensors, os.path.join(d, "model.safetensors"), metadata=metadata)
        shutil.copy(os.path.join(hf_dir, "config.json"), d)
        loaded, info = GPT2LMHeadModel.from_pretrained(d, output_loading_info=True)
        with torch.no_grad():
            logits = loaded.eval()(ids).logits
        problems = {k: v for k, v in info.items() if v}
        return (logits - reference).abs().max().item(), problems

    for prefixed in (True, False):
        diff, problems = load_logits(f"from-etr-{'prefixed' if prefixed else 'plain'}",
                                     to_hf(prefixed))
        checks.expect(diff == 0.0 and not problems,
                      f"etr layout -> HF ({'with' if prefixed else 'without'} 'transformer.'): "
                      f"from_pretrained logits max diff {diff}, loading problems {problems}")
    # The page's warning: a square c_proj left in etr's layout loads silently, wrongly.
    untransposed = to_hf(True)
    name = "transformer.h.0.attn.c_proj.weight"
    untransposed[name] = etr["h.0.attn.c_proj.weight"]
    diff, problems = load_logits("untransposed-c-proj", untransposed)
    checks.expect(diff > 1e-3 and not problems,
                  f"an untransposed square c_proj loads without complaint (problems {problems}) "
                  f"and changes the logits by {diff:.3g}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixture-tool", required=True)
    parser.add_argument("--gpt2-doc", required=True)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="etr-compat-")
    checks = Checks()
    try:
        check_fixture_cpp_to_python(checks, args.fixture_tool, tmp)
        check_fixture_python_to_cpp(checks, args.fixture_tool, tmp)
        check_gpt2(checks, args.fixture_tool, args.gpt2_doc, tmp)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'FAILED' if checks.failures else 'passed'}: {checks.failures} failing checks")
    return 1 if checks.failures else 0


if __name__ == "__main__":
    sys.exit(main())
