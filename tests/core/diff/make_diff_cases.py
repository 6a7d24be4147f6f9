"""Checkpoint/model pairs and what real torch's load_state_dict does with them.

Run by tst_diff with Debian's torch (/usr/bin/python3):
  make_diff_cases.py make OUT_DIR
      writes OUT_DIR/<case>/a.pt (the checkpoint), b.pt (model.state_dict(): what the model expects),
      rules.json (the case's rename rules, possibly none) and truth.json (see `truth`).
  make_diff_cases.py truth OUT_DIR CASE RULES_JSON OUT_JSON
      rebuilds the case's model, applies RULES_JSON to a.pt's keys with Python's `re` (chain semantics:
      every enabled rule in order, re.sub on the output of the one before; a drop rule that matches removes
      the key) and writes what torch reports:
        {"missing": [...], "unexpected": [...], "shape_mismatch": [...], "dtype_mismatch": [...],
         "mapped": {a_key: new_key|null}, "load_succeeds": bool}
The models are real nn.Modules; wrapper prefixes come from real wrapper modules (DataParallel,
checkpoint_wrapper) or from modules holding the child under the attribute name the wrapper uses.
"""
import json
import pathlib
import re
import sys

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, d, names):
        super().__init__()
        for n in names:
            setattr(self, n, nn.Linear(d, d, bias=False))


class Rotary(nn.Module):
    def __init__(self, d, persistent):
        super().__init__()
        self.register_buffer("inv_freq", torch.arange(d // 2, dtype=torch.float32), persistent=persistent)


class HfBlock(nn.Module):
    def __init__(self, d, persistent_inv_freq):
        super().__init__()
        self.self_attn = Attention(d, ["q_proj", "k_proj", "v_proj", "o_proj"])
        self.self_attn.rotary_emb = Rotary(d, persistent_inv_freq)
        self.mlp = nn.Module()
        self.mlp.up_proj = nn.Linear(d, 2 * d, bias=False)
        self.mlp.down_proj = nn.Linear(2 * d, d, bias=False)
        self.input_layernorm = nn.LayerNorm(d)


class HfModel(nn.Module):
    """Llama-like names, as a Hugging Face checkpoint has them."""

    def __init__(self, d=8, layers=3, vocab=50, persistent_inv_freq=True, tie=False):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(vocab, d)
        self.model.layers = nn.ModuleList([HfBlock(d, persistent_inv_freq) for _ in range(layers)])
        self.model.norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        if tie:
            self.lm_head.weight = self.model.embed_tokens.weight


class TitanBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attention = Attention(d, ["wq", "wk", "wv", "wo"])
        self.feed_forward = nn.Module()
        self.feed_forward.w1 = nn.Linear(d, 2 * d, bias=False)
        self.feed_forward.w2 = nn.Linear(2 * d, d, bias=False)
        self.attention_norm = nn.LayerNorm(d)


class TitanModel(nn.Module):
    """The same network with torchtitan's names."""

    def __init__(self, d=8, layers=3, vocab=50):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([TitanBlock(d) for _ in range(layers)])
        self.norm = nn.LayerNorm(d)
        self.output = nn.Linear(d, vocab, bias=False)


class Holder(nn.Module):
    """A wrapper that keeps the wrapped module under `attr` (torch.compile's OptimizedModule uses _orig_mod,
    FSDP1 _fsdp_wrapped_module, PEFT base_model.model)."""

    def __init__(self, attr, mod):
        super().__init__()
        setattr(self, attr, mod)


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 4))
        self.norm = nn.LayerNorm(4)
        self.register_buffer("steps", torch.zeros(1))


def seeded(fn):
    torch.manual_seed(0)
    return fn()


def checkpoint_wrapped():
    # torch's checkpoint_wrapper strips its segment in state_dict hooks; a state dict captured around them
    # (a custom save, or torch versions without the hooks) carries it, as this module does.
    m = Small()
    m.body = Holder("_checkpoint_wrapped_module", m.body)
    return m


def mixed_checkpoint():
    """HF names, a padded vocabulary on the model side, one weight stored transposed, one norm in half,
    and the rotary buffer saved (older transformers did)."""
    m = HfModel(vocab=50, persistent_inv_freq=True)
    sd = m.state_dict()
    sd["model.layers.1.mlp.down_proj.weight"] = sd["model.layers.1.mlp.down_proj.weight"].t().contiguous()
    sd["model.norm.weight"] = sd["model.norm.weight"].half()
    return sd


# case -> (checkpoint state dict, model, rules)
def cases():
    titan_rules = [
        {"pattern": r"^model\.embed_tokens\.", "replace": "tok_embeddings."},
        {"pattern": r"^model\.layers\.(\d+)\.self_attn\.q_proj\.", "replace": r"layers.\1.attention.wq."},
        {"pattern": r"^model\.layers\.(\d+)\.self_attn\.k_proj\.", "replace": r"layers.\1.attention.wk."},
        {"pattern": r"^model\.layers\.(\d+)\.self_attn\.v_proj\.", "replace": r"layers.\1.attention.wv."},
        {"pattern": r"^model\.layers\.(\d+)\.self_attn\.o_proj\.", "replace": r"layers.\1.attention.wo."},
        {"pattern": r"^model\.layers\.(?P<n>\d+)\.mlp\.up_proj\.", "replace": r"layers.\g<n>.feed_forward.w1."},
        {"pattern": r"^model\.layers\.(\d+)\.mlp\.down_proj\.", "replace": r"layers.\1.feed_forward.w2."},
        {"pattern": r"^model\.layers\.(\d+)\.input_layernorm\.", "replace": r"layers.\1.attention_norm."},
        {"pattern": r"^model\.norm\.", "replace": "norm."},
        {"pattern": r"^lm_head\.", "replace": "output."},
        {"pattern": r"\.rotary_emb\.inv_freq$", "replace": "", "drop": True},
    ]
    return {
        "compiled": (lambda: Holder("_orig_mod", Small()).state_dict(), lambda: Small(), []),
        "compiled_model": (lambda: Small().state_dict(), lambda: Holder("_orig_mod", Small()), []),
        "data_parallel": (lambda: nn.DataParallel(Small()).state_dict(), lambda: Small(), []),
        "nested_wrappers": (
            lambda: nn.DataParallel(Holder("_orig_mod", Small())).state_dict(), lambda: Small(), []),
        "checkpoint_wrapper": (lambda: checkpoint_wrapped().state_dict(), lambda: Small(), []),
        "fsdp_wrapped": (lambda: Holder("_fsdp_wrapped_module", Small()).state_dict(), lambda: Small(), []),
        "peft": (lambda: Holder("base_model", Holder("model", Small())).state_dict(), lambda: Small(), []),
        "tied": (lambda: {k: v for k, v in HfModel(tie=True, persistent_inv_freq=False).state_dict().items()
                          if k != "lm_head.weight"},
                 lambda: HfModel(tie=True, persistent_inv_freq=False), []),
        "non_persistent": (lambda: HfModel(persistent_inv_freq=True).state_dict(),
                           lambda: HfModel(persistent_inv_freq=False), []),
        "hf_to_titan": (lambda: HfModel(persistent_inv_freq=True).state_dict(), lambda: TitanModel(), []),
        "hf_to_titan_rules": (lambda: HfModel(persistent_inv_freq=True).state_dict(), lambda: TitanModel(),
                              titan_rules),
        "mixed": (mixed_checkpoint, lambda: HfModel(vocab=64, persistent_inv_freq=False), []),
        "identical": (lambda: Small().state_dict(), lambda: Small(), []),
    }


def apply_rules(rules, key):
    for r in rules:
        if not r.get("enabled", True):
            continue
        if r.get("drop"):
            if re.search(r["pattern"], key):
                return None
            continue
        key = re.sub(r["pattern"], r.get("replace", ""), key)
    return key


def truth(model, checkpoint, rules):
    mapped = {k: apply_rules(rules, k) for k in checkpoint}
    sd = {mapped[k]: v for k, v in checkpoint.items() if mapped[k] is not None}
    expected = model.state_dict()
    size = []
    try:
        result = model.load_state_dict(sd, strict=False)
    except RuntimeError as e:
        size = re.findall(r"size mismatch for ([^:]+): copying", str(e))
        result = model.load_state_dict({k: v for k, v in sd.items() if k not in size}, strict=False)
    try:
        model.load_state_dict(sd, strict=True)
        ok = True
    except RuntimeError:
        ok = False
    dtype = [k for k, v in sd.items() if k in expected and k not in size and v.dtype != expected[k].dtype]
    return {
        "missing": sorted(k for k in result.missing_keys if k not in size),
        "unexpected": sorted(result.unexpected_keys),
        "shape_mismatch": sorted(size),
        "dtype_mismatch": sorted(dtype),
        "mapped": mapped,
        "load_succeeds": ok,
    }


def main():
    cmd, out = sys.argv[1], pathlib.Path(sys.argv[2])
    all_cases = cases()
    if cmd == "make":
        for name, (checkpoint, model, rules) in all_cases.items():
            d = out / name
            d.mkdir(parents=True, exist_ok=True)
            ckpt = seeded(checkpoint)
            torch.save(ckpt, d / "a.pt")
            m = seeded(model)
            torch.save(m.state_dict(), d / "b.pt")
            (d / "rules.json").write_text(json.dumps({"version": 1, "rules": rules}))
            (d / "truth.json").write_text(json.dumps(truth(m, ckpt, rules)))
    elif cmd == "truth":
        name, rules_path, out_json = sys.argv[3], sys.argv[4], sys.argv[5]
        _, model, _ = all_cases[name]
        ckpt = torch.load(out / name / "a.pt")
        rules = json.loads(pathlib.Path(rules_path).read_text())["rules"]
        pathlib.Path(out_json).write_text(json.dumps(truth(seeded(model), ckpt, rules)))
    else:
        raise SystemExit("usage: make_diff_cases.py make OUT_DIR | truth OUT_DIR CASE RULES_JSON OUT_JSON")


if __name__ == "__main__":
    main()
