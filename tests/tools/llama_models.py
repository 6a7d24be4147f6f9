"""The small Llama of the torchtitan <-> Hugging Face tests, one definition for every script that needs it:
make_torch2_fixtures.py builds and saves it under torch 2.6 (tests/fixtures/torch2/dcp, float8), and
convert_truth.py loads converted files into it under torch 1.13. Plain torch.nn, so both torch versions run it.

TitanLM has torchtitan's names (tok_embeddings, layers.N.attention.wq, feed_forward.w1, ...); HFLM the same
model under Hugging Face Llama names; TITAN_TO_HF the renames a user would write between them (truth for the
rename workflow: StateLens must find an equivalent set on its own). buffers=False is Meta's own checkpoint
layout without the two buffers (torchtune's tiny_fair_checkpoint.pt).
"""

import torch
import torch.nn as nn


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))


class TitanBlock(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.attention = nn.Module()
        for n in ("wq", "wk", "wv", "wo"):
            setattr(self.attention, n, nn.Linear(dim, dim, bias=False))
        self.feed_forward = nn.Module()
        self.feed_forward.w1 = nn.Linear(dim, hidden, bias=False)
        self.feed_forward.w2 = nn.Linear(hidden, dim, bias=False)
        self.feed_forward.w3 = nn.Linear(dim, hidden, bias=False)
        self.attention_norm = RMSNorm(dim)
        self.ffn_norm = RMSNorm(dim)


class TitanLM(nn.Module):
    """Small. The vocabulary (67) does not divide by 2, so FSDP2's Shard(0) pieces are uneven; `mask` is a bool
    buffer, `freqs_cis` a complex64 buffer, as torchtitan keeps it (persistent)."""

    def __init__(self, vocab=67, dim=32, hidden=48, layers=2, buffers=True):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleDict({str(i): TitanBlock(dim, hidden) for i in range(layers)})
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        if buffers:
            self.register_buffer("mask", torch.tril(torch.ones(4, 4, dtype=torch.bool)))
            freqs = 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8))
            self.register_buffer("freqs_cis", torch.polar(torch.ones(4, 4), torch.outer(torch.arange(4).float(), freqs)))


class HFBlock(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.self_attn = nn.Module()
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(self.self_attn, n, nn.Linear(dim, dim, bias=False))
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.mlp.down_proj = nn.Linear(hidden, dim, bias=False)
        self.mlp.up_proj = nn.Linear(dim, hidden, bias=False)
        self.input_layernorm = RMSNorm(dim)
        self.post_attention_layernorm = RMSNorm(dim)


class HFLM(nn.Module):
    """The same model under Hugging Face Llama names, as the target of a torchtitan checkpoint."""

    def __init__(self, vocab=67, dim=32, hidden=48, layers=2, buffers=True):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(vocab, dim)
        self.model.layers = nn.ModuleList([HFBlock(dim, hidden) for _ in range(layers)])
        self.model.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        if buffers:
            self.model.register_buffer("mask", torch.tril(torch.ones(4, 4, dtype=torch.bool)))
            self.model.register_buffer("freqs_cis", torch.zeros(4, 4, dtype=torch.complex64))


TITAN_TO_HF = [
    (r"^tok_embeddings\.", "model.embed_tokens."),
    (r"^layers\.(\d+)\.attention\.wq\.", r"model.layers.\1.self_attn.q_proj."),
    (r"^layers\.(\d+)\.attention\.wk\.", r"model.layers.\1.self_attn.k_proj."),
    (r"^layers\.(\d+)\.attention\.wv\.", r"model.layers.\1.self_attn.v_proj."),
    (r"^layers\.(\d+)\.attention\.wo\.", r"model.layers.\1.self_attn.o_proj."),
    (r"^layers\.(\d+)\.feed_forward\.w1\.", r"model.layers.\1.mlp.gate_proj."),
    (r"^layers\.(\d+)\.feed_forward\.w2\.", r"model.layers.\1.mlp.down_proj."),
    (r"^layers\.(\d+)\.feed_forward\.w3\.", r"model.layers.\1.mlp.up_proj."),
    (r"^layers\.(\d+)\.attention_norm\.", r"model.layers.\1.input_layernorm."),
    (r"^layers\.(\d+)\.ffn_norm\.", r"model.layers.\1.post_attention_layernorm."),
    (r"^norm\.", "model.norm."),
    (r"^output\.", "lm_head."),
    (r"^mask$", "model.mask"),
    (r"^freqs_cis$", "model.freqs_cis"),
]
