"""Noisy-channel reranking: a translation model proposes candidates, a model of the reverse direction checks them.

Beam search keeps the candidates y that the forward model p(y | x) finds likely, and likely is not the same as
faithful: a candidate that leaves out part of the source, or adds to it, can still score well. A model trained in
the other direction, the channel p(x | y), asks how well y accounts for the whole source. Each candidate of an
n-best list gets

    score(y) = (log p(y | x) + λ log p(x | y)) / |y| ** α

(Yee et al., 2019, "Simple and Effective Noisy Channel Modeling for Neural Machine Translation", without their
language-model term), |y| the candidate's length in target tokens, end token included; the highest score wins.
λ and α are chosen on a validation set (:func:`choose_weights`); λ = 0 ranks by the forward model alone.

    from hf_transformer import Predictor
    from hf_transformer.reranking import candidates, sequence_log_probs, rerank

    forward = Predictor.from_pretrained("runs/m30k-de-en")        # or a list of folders: their ensemble
    channel = Predictor.from_pretrained("runs/m30k-en-de")
    nbest = candidates(forward, sources, num_candidates=5)          # list of lists of strings
    pairs = [(x, y) for x, ys in zip(sources, nbest) for y in ys]
    forward_scores = sequence_log_probs(forward, [x for x, _ in pairs], [y for _, y in pairs])
    channel_scores = sequence_log_probs(channel, [y for _, y in pairs], [x for x, _ in pairs])
    best = rerank(nbest, forward_scores, channel_scores, channel_weight=0.2, length_exponent=0.75)

``scripts/rerank_translation.py`` runs the whole of it on Multi30k: the weights chosen on validation, test scored
once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .data import IGNORE_INDEX
from .inference import SEQ2SEQ, Predictor

__all__ = ["SequenceScores", "candidates", "sequence_log_probs", "rerank", "choose_weights"]


@dataclass
class SequenceScores:
    """Per (source, target) pair: the target's summed token log-probability and its length in tokens."""

    log_probs: list[float]
    lengths: list[int]

    def __len__(self) -> int:
        return len(self.log_probs)


def _check_seq2seq(predictor: Predictor) -> None:
    if predictor.task != SEQ2SEQ or predictor.model is None:
        raise ValueError("reranking needs a seq2seq folder loaded with engine='torch' (it scores with the model)")


def candidates(
    predictor: Predictor, sources: Sequence[str], num_candidates: int, **generate_options
) -> list[list[str]]:
    """Each source's n-best list from beam search with ``num_candidates`` beams, best first, texts that decode
    alike kept once (two token sequences can read the same)."""
    _check_seq2seq(predictor)
    if num_candidates < 1:
        raise ValueError(f"num_candidates must be 1 or more, got {num_candidates}")
    generate_options.setdefault("num_beams", num_candidates)
    if generate_options["num_beams"] < num_candidates:
        raise ValueError(f"beam search keeps num_beams={generate_options['num_beams']} < {num_candidates} candidates")
    results = predictor(sources, num_return_sequences=num_candidates, **generate_options)
    return [list(dict.fromkeys(result.get("translations", [result["translation"]]))) for result in results]


@torch.no_grad()
def sequence_log_probs(
    predictor: Predictor, sources: Sequence[str], targets: Sequence[str], *, batch_size: int | None = None
) -> SequenceScores:
    """log p(target | source) under the predictor's model (teacher forcing), summed over the target's tokens,
    its end token included, with the tokenizer and length limits the model was trained with: the source cut at
    the encoder's limit, the target at the decoder's position table."""
    _check_seq2seq(predictor)
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    model, tokenizer = predictor.model, predictor.tokenizer
    config = predictor.config
    target_limit = min(
        config.decoder_max_position_embeddings or config.max_position_embeddings, predictor.input_length_limit()
    )
    batch_size = batch_size or predictor.batch_size
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]) + len(targets[i]))
    log_probs, lengths = [0.0] * len(sources), [0] * len(sources)
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        batch = tokenizer(
            [sources[i] for i in indices],
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=predictor.input_length_limit(),
        )
        labels = tokenizer(
            text_target=[targets[i] for i in indices],
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=target_limit,
        )["input_ids"]
        device = model.device
        labels = labels.masked_fill(labels == tokenizer.pad_token_id, IGNORE_INDEX).to(device)  # (B, T)
        logits = model(
            input_ids=batch["input_ids"].to(device),
            attention_mask=batch["attention_mask"].to(device),
            decoder_input_ids=model.prepare_decoder_input_ids_from_labels(labels),  # the labels shifted right
            use_cache=False,
        ).logits  # (B, T, V)
        real = labels != IGNORE_INDEX
        token_log_probs = F.log_softmax(logits.float(), dim=-1)
        picked = token_log_probs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, T)
        sums = (picked * real).sum(-1).tolist()
        counts = real.sum(-1).tolist()
        for row, index in enumerate(indices):
            log_probs[index], lengths[index] = sums[row], counts[row]
    return SequenceScores(log_probs, lengths)


def rerank(
    nbest: Sequence[Sequence[str]],
    forward: SequenceScores,
    channel: SequenceScores,
    *,
    channel_weight: float,
    length_exponent: float = 1.0,
) -> list[str]:
    """Each source's best candidate by (log p(y|x) + channel_weight log p(x|y)) / |y| ** length_exponent.

    ``forward`` and ``channel`` hold one score per candidate, the candidates of ``nbest`` flattened in order
    (``forward.lengths`` are the candidates' lengths in target tokens)."""
    total = sum(len(row) for row in nbest)
    if len(forward) != total or len(channel) != total:
        raise ValueError(f"{total} candidates but {len(forward)} forward and {len(channel)} channel scores")
    if any(not row for row in nbest):
        raise ValueError("every source needs at least one candidate")
    chosen, offset = [], 0
    for row in nbest:
        scores = [
            (forward.log_probs[offset + j] + channel_weight * channel.log_probs[offset + j])
            / max(forward.lengths[offset + j], 1) ** length_exponent
            for j in range(len(row))
        ]
        chosen.append(row[max(range(len(row)), key=scores.__getitem__)])
        offset += len(row)
    return chosen


def choose_weights(
    nbest: Sequence[Sequence[str]],
    forward: SequenceScores,
    channel: SequenceScores,
    score: Callable[[list[str]], float],
    *,
    channel_weights: Sequence[float],
    length_exponents: Sequence[float],
) -> tuple[dict, dict]:
    """The (channel_weight, length_exponent) of the grid whose reranked outputs ``score`` highest (BLEU on a
    validation set), as ``{"channel_weight": ..., "length_exponent": ...}``, and every setting's score keyed
    ``"weight/exponent"``. Ties go to the setting listed first."""
    grid = {}
    for weight in channel_weights:
        for exponent in length_exponents:
            outputs = rerank(nbest, forward, channel, channel_weight=weight, length_exponent=exponent)
            grid[f"{weight:g}/{exponent:g}"] = score(outputs)
    best = max(grid, key=grid.__getitem__)
    weight, exponent = (float(part) for part in best.split("/"))
    return {"channel_weight": weight, "length_exponent": exponent}, grid
