"""Writes the bundled demo pair (run with Debian's torch: /usr/bin/python3 resources/demo/make_demo.py).

checkpoint.pt   a training checkpoint {"model", "optimizer", "step"} from a tiny language model that was
                wrapped by torch.compile (its keys carry `_orig_mod.`; torch 1.13 has no compile, so the
                prefix is added the way OptimizedModule.state_dict() adds it), trained with a vocabulary
                padded to a multiple of 8, and saved without the tied lm_head.
model.pt        what the unwrapped model expects: plain names, the unpadded vocabulary, a tied lm_head.

Together they show the usual reasons a strict load_state_dict fails.
"""
import collections
import os

import torch
from torch import nn

torch.manual_seed(0)
HERE = os.path.dirname(os.path.abspath(__file__))
DIM = 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(DIM)
        self.attn = nn.Module()
        self.attn.qkv = nn.Linear(DIM, 3 * DIM, bias=False)
        self.attn.proj = nn.Linear(DIM, DIM, bias=False)
        self.norm2 = nn.LayerNorm(DIM)
        self.mlp = nn.Module()
        self.mlp.up = nn.Linear(DIM, 4 * DIM, bias=False)
        self.mlp.down = nn.Linear(4 * DIM, DIM, bias=False)


class TinyLM(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.embed = nn.Embedding(vocab, DIM)
        self.layers = nn.ModuleList([Block() for _ in range(2)])
        self.norm = nn.LayerNorm(DIM)
        self.lm_head = nn.Linear(DIM, vocab, bias=False)
        self.lm_head.weight = self.embed.weight  # tied
        self.register_buffer("rope_inv_freq", torch.arange(0, DIM, 2).float() / DIM, persistent=False)


def main():
    trained = TinyLM(vocab=104)  # vocabulary padded to a multiple of 8 for the run
    sd = trained.state_dict()
    del sd["lm_head.weight"]  # tied weights are saved once
    compiled = collections.OrderedDict(("_orig_mod." + k, v) for k, v in sd.items())
    opt = torch.optim.AdamW(trained.parameters(), lr=3e-4)
    loss = sum(p.sum() for p in trained.parameters())
    loss.backward()
    opt.step()
    torch.save({"model": compiled, "optimizer": opt.state_dict(), "step": 1200},
               os.path.join(HERE, "checkpoint.pt"))

    expected = TinyLM(vocab=100).state_dict()  # the model the user is loading into
    torch.save(expected, os.path.join(HERE, "model.pt"))


if __name__ == "__main__":
    main()
