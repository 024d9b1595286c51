"""The seed tutorial's Transformer, written plainly from its math: the reference of the conversion tests
(`tests/test_convert.py`) and the "naive seed code" entry of the benchmark.

Post-LN layers, frozen sinusoid positions numbered from 1 with row 0 for padding, masks built from the pad
id and repeated per head, -1e9 for hidden scores, Conv1d(kernel 1) feed-forward with GELU, dropout on the
attention probabilities and after each sub-layer. The parameter names are the tutorial's, so
`hf_transformer.convert.from_seed` reads its state dict. ``c`` is any object with the tutorial's config
names (``n_enc_vocab``, ``d_hidn``, ``n_head``, ``d_head``, ``i_pad``, ...); ``c.dropout`` defaults to 0.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def reference_sinusoids(rows: int, dim: int) -> torch.Tensor:
    """Row p, column j: p * exp(-ln(10000) * 2*(j//2) / dim), sine on even columns, cosine on odd ones."""
    position = torch.arange(rows, dtype=torch.float64).unsqueeze(1)
    frequency = torch.exp(-math.log(10000.0) * (2 * (torch.arange(dim) // 2)).double() / dim)
    angle = position * frequency
    even = torch.arange(dim) % 2 == 0
    return torch.where(even, torch.sin(angle), torch.cos(angle)).float()


class SeedAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        inner = c.n_head * c.d_head
        self.W_Q = nn.Linear(c.d_hidn, inner)
        self.W_K = nn.Linear(c.d_hidn, inner)
        self.W_V = nn.Linear(c.d_hidn, inner)
        self.linear = nn.Linear(inner, c.d_hidn)
        self.probability_dropout = nn.Dropout(getattr(c, "dropout", 0.0))
        self.output_dropout = nn.Dropout(getattr(c, "dropout", 0.0))

    def forward(self, query, memory, hidden):
        """hidden: (B, Lq, Lk) bool, True where the score is replaced by -1e9."""
        heads = lambda x: x.unflatten(-1, (self.c.n_head, self.c.d_head)).transpose(1, 2)  # noqa: E731
        q, k, v = heads(self.W_Q(query)), heads(self.W_K(memory)), heads(self.W_V(memory))
        scores = (q @ k.transpose(-1, -2)) / self.c.d_head**0.5
        hidden = hidden.unsqueeze(1).repeat(1, self.c.n_head, 1, 1)  # one mask copy per head, as the seed does
        probs = scores.masked_fill(hidden, -1e9).softmax(-1)
        context = (self.probability_dropout(probs) @ v).transpose(1, 2).flatten(2)
        return self.output_dropout(self.linear(context)), probs


class SeedFeedForward(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv1d(c.d_hidn, c.d_ff, kernel_size=1)
        self.conv2 = nn.Conv1d(c.d_ff, c.d_hidn, kernel_size=1)
        self.dropout = nn.Dropout(getattr(c, "dropout", 0.0))

    def forward(self, x):
        return self.dropout(self.conv2(F.gelu(self.conv1(x.transpose(1, 2)))).transpose(1, 2))


class SeedEncoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = SeedAttention(c)
        self.layer_norm1 = nn.LayerNorm(c.d_hidn, eps=c.layer_norm_epsilon)
        self.pos_ffn = SeedFeedForward(c)
        self.layer_norm2 = nn.LayerNorm(c.d_hidn, eps=c.layer_norm_epsilon)

    def forward(self, x, hidden):
        attended, probs = self.self_attn(x, x, hidden)
        x = self.layer_norm1(x + attended)
        return self.layer_norm2(x + self.pos_ffn(x)), probs


class SeedDecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = SeedAttention(c)
        self.layer_norm1 = nn.LayerNorm(c.d_hidn, eps=c.layer_norm_epsilon)
        self.dec_enc_attn = SeedAttention(c)
        self.layer_norm2 = nn.LayerNorm(c.d_hidn, eps=c.layer_norm_epsilon)
        self.pos_ffn = SeedFeedForward(c)
        self.layer_norm3 = nn.LayerNorm(c.d_hidn, eps=c.layer_norm_epsilon)

    def forward(self, y, memory, self_hidden, cross_hidden):
        attended, self_probs = self.self_attn(y, y, self_hidden)
        y = self.layer_norm1(y + attended)
        attended, cross_probs = self.dec_enc_attn(y, memory, cross_hidden)
        y = self.layer_norm2(y + attended)
        return self.layer_norm3(y + self.pos_ffn(y)), self_probs, cross_probs


def seed_positions(ids, pad):
    """1, 2, 3, ... along the sequence; 0 wherever the token is padding."""
    positions = torch.arange(1, ids.shape[1] + 1, device=ids.device).expand_as(ids)
    return positions.masked_fill(ids.eq(pad), 0)


def pad_keys(query_ids, key_ids, pad):
    return key_ids.eq(pad).unsqueeze(1).expand(-1, query_ids.shape[1], -1)


class SeedEncoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.enc_emb = nn.Embedding(c.n_enc_vocab, c.d_hidn)
        self.pos_emb = nn.Embedding.from_pretrained(reference_sinusoids(c.n_enc_seq + 1, c.d_hidn), freeze=True)
        self.layers = nn.ModuleList(SeedEncoderLayer(c) for _ in range(c.n_layer))

    def forward(self, ids):
        x = self.enc_emb(ids) + self.pos_emb(seed_positions(ids, self.c.i_pad))
        hidden = pad_keys(ids, ids, self.c.i_pad)
        probs = []
        for layer in self.layers:
            x, p = layer(x, hidden)
            probs.append(p)
        return x, probs


class SeedDecoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.dec_emb = nn.Embedding(c.n_dec_vocab, c.d_hidn)
        self.pos_emb = nn.Embedding.from_pretrained(reference_sinusoids(c.n_dec_seq + 1, c.d_hidn), freeze=True)
        self.layers = nn.ModuleList(SeedDecoderLayer(c) for _ in range(c.n_layer))

    def forward(self, ids, source_ids, memory):
        y = self.dec_emb(ids) + self.pos_emb(seed_positions(ids, self.c.i_pad))
        length = ids.shape[1]
        future = torch.ones(length, length, dtype=torch.bool, device=ids.device).triu(1)
        self_hidden = pad_keys(ids, ids, self.c.i_pad) | future
        cross_hidden = pad_keys(ids, source_ids, self.c.i_pad)
        self_probs, cross_probs = [], []
        for layer in self.layers:
            y, s, x = layer(y, memory, self_hidden, cross_hidden)
            self_probs.append(s)
            cross_probs.append(x)
        return y, self_probs, cross_probs


class SeedTransformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.encoder = SeedEncoder(c)
        self.decoder = SeedDecoder(c)

    def forward(self, source_ids, target_ids):
        memory, encoder_probs = self.encoder(source_ids)
        output, self_probs, cross_probs = self.decoder(target_ids, source_ids, memory)
        return memory, output, encoder_probs, self_probs, cross_probs


class SeedSeq2Seq(nn.Module):
    """``SeedTransformer`` plus an output projection tied to the decoder's token table (the classification
    tutorial has none; its sibling GPT model ties it this way), and greedy decoding as a tutorial would write
    it: no cache, the whole prefix is decoded again at every step."""

    def __init__(self, c):
        super().__init__()
        self.transformer = SeedTransformer(c)
        self.projection = nn.Linear(c.d_hidn, c.n_dec_vocab, bias=False)
        self.projection.weight = self.transformer.decoder.dec_emb.weight

    def forward(self, source_ids, target_ids):
        """(B, S), (B, T) -> logits (B, T, V)."""
        _, output, *_ = self.transformer(source_ids, target_ids)
        return self.projection(output)

    @torch.no_grad()
    def greedy(self, source_ids, start_id: int, new_tokens: int, banned_ids: tuple[int, ...] = ()) -> torch.Tensor:
        """(B, S) -> (B, 1 + new_tokens): the start token and ``new_tokens`` argmax choices."""
        memory, _ = self.transformer.encoder(source_ids)
        output = torch.full((source_ids.shape[0], 1), start_id, dtype=torch.long, device=source_ids.device)
        for _ in range(new_tokens):
            states, *_ = self.transformer.decoder(output, source_ids, memory)
            logits = self.projection(states[:, -1])
            logits[:, list(banned_ids)] = -float("inf")
            output = torch.cat([output, logits.argmax(-1, keepdim=True)], dim=1)
        return output
