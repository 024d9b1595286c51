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
    from recipes.multi30k.reranking import candidates, sequence_log_probs, rerank

    forward = Predictor.from_pretrained("runs/m30k-de-en")        # or a list of folders: their ensemble
    channel = Predictor.from_pretrained("runs/m30k-en-de")
    nbest = candidates(forward, sources, num_candidates=5)          # list of lists of strings
    pairs = [(x, y) for x, ys in zip(sources, nbest) for y in ys]
    forward_scores = sequence_log_probs(forward, [x for x, _ in pairs], [y for _, y in pairs])
    channel_scores = sequence_log_probs(channel, [y for _, y in pairs], [x for x, _ in pairs])
    best = rerank(nbest, forward_scores, channel_scores, channel_weight=0.2, length_exponent=0.75)

Minimum Bayes risk (MBR) decoding over the same lists replaces the argmax: each candidate is compared with the
others as if they were references (sentence BLEU), and the one with the highest expected BLEU under the n-best's
posterior wins,

    p(y_j) ∝ exp(β (log p(y_j | x) + λ log p(x | y_j))),     choice = argmax_i Σ_j p(y_j) BLEU(y_i, y_j)

(Kumar and Byrne, 2004; over n-best lists, as in Eikema and Aziz, 2020, and Freitag et al., 2022). β flattens the
posterior (β = 1 keeps the models' own); it is chosen on validation with λ. A candidate the others agree with wins
over one that is likely but alone.

    utilities = mbr_utilities(nbest)                       # sentence BLEU of every pair, once per split
    best = rerank(nbest, forward_scores, channel_scores, channel_weight=0.2, mbr_scale=0.5, utilities=utilities)

Both halves run on either engine of :class:`~hf_transformer.Predictor`: a predictor loaded with
``engine="ctranslate2"`` proposes the candidates with CTranslate2's beam search and scores them with its teacher
forcing, many times faster than torch on a CPU (one model each way, no ensemble).

``python -m recipes.multi30k.rerank`` runs the whole of it on Multi30k: the weights chosen on validation, test
scored once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from hf_transformer.data import IGNORE_INDEX
from hf_transformer.folders import SEQ2SEQ
from hf_transformer.inference import Predictor

__all__ = ["SequenceScores", "candidates", "sequence_log_probs", "mbr_utilities", "rerank", "choose_weights"]


@dataclass
class SequenceScores:
    """Per (source, target) pair: the target's summed token log-probability and its length in tokens."""

    log_probs: list[float]
    lengths: list[int]

    def __len__(self) -> int:
        return len(self.log_probs)


def _check_seq2seq(predictor: Predictor) -> None:
    if predictor.task != SEQ2SEQ:
        raise ValueError("reranking needs a seq2seq folder (a translation model) to propose and score candidates")


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
    the encoder's limit, the target at the decoder's position table. A predictor on the CTranslate2 engine scores
    with it (``CTranslate2Generator.score``): the same figures to rounding, many times faster on a CPU."""
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
        if predictor.engine == "ctranslate2":
            padding = tokenizer.pad_token_id
            rows = [[token for token in row if token != padding] for row in labels.tolist()]
            token_log_probs = predictor.ctranslate2_generator.score(batch["input_ids"], batch["attention_mask"], rows)
            sums, counts = [sum(row) for row in token_log_probs], [len(row) for row in token_log_probs]
        else:
            sums, counts = _model_log_probs(model, batch, labels, tokenizer.pad_token_id)
        for row, index in enumerate(indices):
            log_probs[index], lengths[index] = sums[row], counts[row]
    return SequenceScores(log_probs, lengths)


def _model_log_probs(model, batch, labels: torch.Tensor, pad_token_id: int) -> tuple[list[float], list[int]]:
    """Each row's summed log p(label tokens) under a torch model, and its count of tokens (padding left out)."""
    device = model.device
    labels = labels.masked_fill(labels == pad_token_id, IGNORE_INDEX).to(device)  # (B, T)
    logits = model(
        input_ids=batch["input_ids"].to(device),
        attention_mask=batch["attention_mask"].to(device),
        decoder_input_ids=model.prepare_decoder_input_ids_from_labels(labels),  # the labels shifted right
        use_cache=False,
    ).logits  # (B, T, V)
    real = labels != IGNORE_INDEX
    token_log_probs = F.log_softmax(logits.float(), dim=-1)
    picked = token_log_probs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, T)
    return (picked * real).sum(-1).tolist(), real.sum(-1).tolist()


def score_both_ways(
    forward: Predictor, channel: Predictor, sources: Sequence[str], nbest: Sequence[Sequence[str]]
) -> tuple[SequenceScores, SequenceScores]:
    """Every candidate's forward score log p(y|x) and channel score log p(x|y), the candidates of ``nbest`` (one row
    per source) flattened in order, as :func:`rerank` takes them."""
    xs = [source for source, row in zip(sources, nbest, strict=True) for _ in row]
    ys = [candidate for row in nbest for candidate in row]
    return sequence_log_probs(forward, xs, ys), sequence_log_probs(channel, ys, xs)


def mbr_utilities(nbest: Sequence[Sequence[str]]) -> list[list[list[float]]]:
    """For each source, ``utilities[i][j]``: sentence BLEU (sacreBLEU, effective n-gram order) of candidate i
    against candidate j as the reference; a candidate against itself scores 100."""
    from sacrebleu.metrics import BLEU

    metric = BLEU(effective_order=True)
    return [
        [
            [
                100.0 if i == j else metric.sentence_score(hypothesis, [reference]).score
                for j, reference in enumerate(row)
            ]
            for i, hypothesis in enumerate(row)
        ]
        for row in nbest
    ]


def rerank(
    nbest: Sequence[Sequence[str]],
    forward: SequenceScores,
    channel: SequenceScores,
    *,
    channel_weight: float,
    length_exponent: float | None = 1.0,
    mbr_scale: float | None = None,
    utilities: Sequence[Sequence[Sequence[float]]] | None = None,
) -> list[str]:
    """Each source's best candidate by (log p(y|x) + channel_weight log p(x|y)) / |y| ** length_exponent, or, with
    ``mbr_scale`` (β), the candidate of highest expected BLEU against the others under the posterior
    softmax(β (log p(y|x) + channel_weight log p(x|y))) (``utilities`` from :func:`mbr_utilities`; the length
    exponent plays no part).

    ``forward`` and ``channel`` hold one score per candidate, the candidates of ``nbest`` flattened in order
    (``forward.lengths`` are the candidates' lengths in target tokens)."""
    total = sum(len(row) for row in nbest)
    if len(forward) != total or len(channel) != total:
        raise ValueError(f"{total} candidates but {len(forward)} forward and {len(channel)} channel scores")
    if any(not row for row in nbest):
        raise ValueError("every source needs at least one candidate")
    if mbr_scale is not None:
        if utilities is None or [len(row) for row in utilities] != [len(row) for row in nbest]:
            raise ValueError("MBR (mbr_scale) needs the n-best's utilities: mbr_utilities(nbest)")
        if mbr_scale < 0:
            raise ValueError(f"mbr_scale must be 0 or more, got {mbr_scale}")
    elif length_exponent is None:
        raise ValueError("ranking by score (no mbr_scale) needs a length_exponent")
    chosen, offset = [], 0
    for index, row in enumerate(nbest):
        joint = [
            forward.log_probs[offset + j] + channel_weight * channel.log_probs[offset + j] for j in range(len(row))
        ]
        if mbr_scale is None:
            scores = [joint[j] / max(forward.lengths[offset + j], 1) ** length_exponent for j in range(len(row))]
        else:
            posterior = torch.softmax(mbr_scale * torch.tensor(joint, dtype=torch.float64), dim=0).tolist()
            scores = [sum(p * u for p, u in zip(posterior, utilities[index][i])) for i in range(len(row))]
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
    mbr_scales: Sequence[float] = (),
    utilities: Sequence[Sequence[Sequence[float]]] | None = None,
) -> tuple[dict, dict]:
    """The setting of the grid whose reranked outputs ``score`` highest (BLEU on a validation set), as
    ``{"channel_weight": ..., "length_exponent": ..., "mbr_scale": ...}``, and every setting's score: keyed
    ``"weight/exponent"`` for the argmax, ``"weight/mbr<scale>"`` for MBR with each of ``mbr_scales`` (which needs
    ``utilities``; the chosen setting's ``length_exponent`` is then None). Ties go to the setting listed first."""
    grid, settings = {}, {}
    for weight in channel_weights:
        for exponent in length_exponents:
            key = f"{weight:g}/{exponent:g}"
            settings[key] = {"channel_weight": weight, "length_exponent": exponent, "mbr_scale": None}
        for scale in mbr_scales:
            key = f"{weight:g}/mbr{scale:g}"
            settings[key] = {"channel_weight": weight, "length_exponent": None, "mbr_scale": scale}
    for key, setting in settings.items():
        grid[key] = score(rerank(nbest, forward, channel, **setting, utilities=utilities))
    best = max(grid, key=grid.__getitem__)
    return settings[best], grid
