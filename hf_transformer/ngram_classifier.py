"""Fitting a classifier's n-gram score: the linear part beside the encoder (`config.classifier_ngram_buckets`).

`TransformerForSequenceClassification` can add to the encoder's logits a linear score over the bag of the input's
token or character n-grams, or both (`NgramClassifier`, in the model file). On short texts such a bag of n-grams is
a strong classifier of its own (fastText, NBSVM), and its errors differ from the encoder's, so the sum beats both.
It is not trained by back-propagation with the encoder: after the encoder's training, `fit_ngram_classifier`

1. fills the tables the score reads tokens through: each token's characters (``token_character_table``), and for
   token n-grams the same piece inside a word for a word-initial piece where the vocabulary has both
   (``canonical_token_ids``),
2. counts in how many training rows each n-gram occurs and keeps those in at least ``min_count`` of them, weighted
   by inverse document frequency (as scikit-learn's ``TfidfVectorizer(smooth_idf=True)``),
3. fits a logistic regression on the training rows with L2 regularisation ``inverse_l2`` (scikit-learn's ``C``),
   full-batch L-BFGS over a sparse matrix, and
4. scales the encoder's logits and the n-gram score by the two weights that give their sum the lowest cross-entropy
   on the validation rows (the classifier's last linear layer and the n-gram weights are multiplied by them).

The rows are the token ids the model itself reads (the tokenized training set, special tokens and truncation
included), so what is fitted is what every entry point computes from raw text.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import warnings
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .modeling_transformer import (
    NGRAM_CHARACTERS_PER_TOKEN,
    NgramClassifier,
    TransformerForSequenceClassification,
    ngram_hashes,
)

logger = logging.getLogger(__name__)


def canonical_token_ids(tokenizer, vocab_size: int) -> torch.Tensor:
    """(V,): each id, or the id of the same piece without its word-start mark ("▁film" -> "film") where the
    vocabulary has that piece. Ids beyond the tokenizer's vocabulary map to themselves."""
    vocab = tokenizer.get_vocab()
    canonical = torch.arange(vocab_size)
    for piece, index in vocab.items():
        if index < vocab_size and piece.startswith("▁") and len(piece) > 1 and piece[1:] in vocab:
            canonical[index] = vocab[piece[1:]]
    return canonical


def token_character_table(tokenizer, vocab_size: int) -> torch.Tensor:
    """(V, NGRAM_CHARACTERS_PER_TOKEN): each token's characters as code points (0 after its last), the piece's text
    without its word-start mark "▁"; special tokens have none, except the unknown token, which reads as U+FFFD
    (a character the text had that the vocabulary lacks)."""
    table = torch.zeros(vocab_size, NGRAM_CHARACTERS_PER_TOKEN, dtype=torch.long)
    special = set(tokenizer.all_special_tokens)
    for piece, index in tokenizer.get_vocab().items():
        if index >= vocab_size:
            continue
        text = "\ufffd" if piece == tokenizer.unk_token else "" if piece in special else piece.replace("▁", "")
        codes = [ord(character) for character in text[:NGRAM_CHARACTERS_PER_TOKEN]]
        table[index, : len(codes)] = torch.tensor(codes, dtype=torch.long)
    return table


def padded(rows: Sequence[Sequence[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of token ids -> (N, S) ids padded on the right, (N, S) which are real. The rows are read at once (a
    `datasets` column read row by row formats each row apart) and written in one assignment."""
    rows = rows[:]
    lengths = torch.tensor([len(row) for row in rows], dtype=torch.long)
    real = torch.arange(int(lengths.max()))[None] < lengths[:, None]
    ids = torch.full(real.shape, pad_token_id, dtype=torch.long)
    ids[real] = torch.tensor(list(itertools.chain.from_iterable(rows)), dtype=torch.long)  # row by row, in order
    return ids, real


def _ngrams(head: NgramClassifier, ids: torch.Tensor, real: torch.Tensor, size: int = 8192):
    """(start, [(buckets, which exist) for each kind of unit]): the rows' n-grams a chunk of rows at a time. A row's
    units come first (tokens padded on the right by `padded`, characters packed), so the columns past the chunk's
    longest row are cut rather than hashed: the same n-grams as the forward finds, without the empty slots of the
    character table."""
    for start in range(0, ids.shape[0], size):
        kinds = []
        for units, unit_is_real, kind, order in head.units(ids[start : start + size], real[start : start + size]):
            longest = max(int(unit_is_real.sum(1).max()), 1)
            kinds.append(ngram_hashes(units[:, :longest], unit_is_real[:, :longest], order, head.buckets, kind))
        yield start, kinds


def document_frequencies(head: NgramClassifier, ids: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """(buckets,): in how many rows each bucket's n-grams occur (once per row however often)."""
    counts = torch.zeros(head.buckets, dtype=torch.long)
    for start, kinds in _ngrams(head, ids, real):
        hashes, exists = torch.cat([kind[0] for kind in kinds], 1), torch.cat([kind[1] for kind in kinds], 1)
        row = torch.arange(start, start + hashes.shape[0])[:, None].expand_as(hashes)
        pairs = torch.unique(row[exists] * head.buckets + hashes[exists])
        counts += torch.bincount(pairs % head.buckets, minlength=head.buckets)
    return counts


def feature_matrix(head: NgramClassifier, ids: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """(N, buckets) sparse: the rows' n-gram features exactly as `NgramClassifier.features` computes them
    (a bucket occurring twice in a row sums)."""
    rows, columns, values = [], [], []
    for start, kinds in _ngrams(head, ids, real):
        hashes, value = head.ngram_features(kinds)
        keep = value != 0
        rows.append((torch.arange(start, start + hashes.shape[0])[:, None].expand_as(hashes))[keep])
        columns.append(hashes[keep])
        values.append(value[keep])
    indices = torch.stack([torch.cat(rows), torch.cat(columns)])
    shape = (ids.shape[0], head.buckets)
    return torch.sparse_coo_tensor(indices, torch.cat(values), shape, check_invariants=False).coalesce()


def csr_with_int32_indices(matrix: torch.Tensor) -> torch.Tensor:
    """A sparse COO matrix as CSR with 32-bit indices, which the CPU's sparse product (MKL) reads as they are;
    64-bit ones it converts on every product, a copy of the whole index each time."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        csr = matrix.to_sparse_csr()
        if csr.values().numel() >= 2**31:
            return csr
        return torch.sparse_csr_tensor(
            csr.crow_indices().int(), csr.col_indices().int(), csr.values(), csr.shape, check_invariants=False
        )


def logistic_regression(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_labels: int,
    inverse_l2: float,
    max_iter: int,
    start: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights (F, L) and bias (L) minimising mean cross-entropy + ||weights||^2 / (2 * inverse_l2 * N), i.e.
    scikit-learn's ``C * sum(loss) + ||w||^2 / 2`` with ``C = inverse_l2`` (the bias not penalised). The gradient
    is written out (two sparse products a step, the transposed matrix kept) for L-BFGS over the whole training set,
    from zero weights or from ``start`` (weights and bias of those shapes, e.g. a fit on part of these rows).

    Two things keep the steps small, neither changing the minimum:
    - only the columns some row uses are optimised: an unused column's weight has no gradient but its penalty's, so
      it stays 0, and L-BFGS's vector work (a step costs more in it than in the sparse products) shrinks to the used;
    - with two labels only their difference v = w_1 - w_0 is fitted (a logistic loss): the loss depends on nothing
      else, and of all weights with that difference w = (-v/2, v/2) has the least penalty, ||v||^2 / 2.
    """
    features = features.coalesce()
    count = features.shape[0]
    used, column = torch.unique(features.indices()[1], return_inverse=True)  # (U,), each entry's place in used
    compact = torch.sparse_coo_tensor(  # the same order of entries: renumbering keeps the columns' order
        torch.stack([features.indices()[0], column]),
        features.values(),
        (count, len(used)),
        is_coalesced=True,
        check_invariants=False,
    )
    rows, columns = csr_with_int32_indices(compact), csr_with_int32_indices(compact.t().coalesce())
    binary = num_labels == 2
    width = 1 if binary else num_labels
    targets = labels[:, None].float() if binary else F.one_hot(labels, num_labels).float()
    weight, bias = torch.zeros(len(used), width), torch.zeros(width)
    if start is not None:
        start_weight, start_bias = start[0][used].float(), start[1].float()
        if binary:  # the difference alone: w_1 - w_0 = v
            start_weight, start_bias = start_weight[:, 1:] - start_weight[:, :1], start_bias[1:] - start_bias[:1]
        weight, bias = start_weight.clone(), start_bias.clone()
    weight.requires_grad_(True)
    bias.requires_grad_(True)
    penalty = 1.0 / (2.0 * inverse_l2 * count) / (2.0 if binary else 1.0)  # ||w||^2 = ||v||^2 / 2
    optimizer = torch.optim.LBFGS(
        [weight, bias], max_iter=max_iter, tolerance_grad=1e-7, history_size=20, line_search_fn="strong_wolfe"
    )

    def closure():
        with torch.no_grad():
            scores = rows @ weight + bias  # (N, 1): the labels' logit difference, or (N, L)
            if binary:
                loss = F.binary_cross_entropy_with_logits(scores, targets)
                error = (scores.sigmoid() - targets) / count  # d loss / d scores
            else:
                loss = F.cross_entropy(scores, labels)
                error = (scores.softmax(-1) - targets) / count
            loss = loss + penalty * weight.square().sum()
            weight.grad = columns @ error + 2.0 * penalty * weight
            bias.grad = error.sum(0)
        return loss

    optimizer.step(closure)
    fitted, fitted_bias = weight.detach(), bias.detach()
    if binary:
        fitted, fitted_bias = torch.cat([-fitted, fitted], 1) / 2, torch.cat([-fitted_bias, fitted_bias]) / 2
    full = torch.zeros(features.shape[1], num_labels)
    full[used] = fitted
    return full, fitted_bias


def mixing_weights(
    encoder_logits: torch.Tensor, ngram_logits: torch.Tensor, labels: torch.Tensor
) -> tuple[float, float]:
    """(a, b) >= 0 such that a * encoder + b * n-gram logits have the lowest cross-entropy on these rows: a
    stacking of the two parts, whose a also tempers an over-confident fine-tuned encoder."""
    log_weights = torch.zeros(2, requires_grad=True)
    optimizer = torch.optim.LBFGS([log_weights], max_iter=100, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        a, b = log_weights.exp()
        loss = F.cross_entropy(a * encoder_logits + b * ngram_logits, labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    a, b = log_weights.detach().exp().tolist()
    return a, b


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return (logits.argmax(-1) == labels).float().mean().item()


@contextlib.contextmanager
def _on_cpu(head: NgramClassifier):
    """The fit's arithmetic (its sparse features, the regression) runs on the CPU: a head on another device (a model
    trained on a GPU) is moved there for it and back after."""
    device = head.idf.device
    if device.type == "cpu":
        yield
        return
    head.to("cpu")
    try:
        yield
    finally:
        head.to(device)


def _check_rows_and_labels(rows, labels: torch.Tensor, num_labels: int, what: str) -> None:
    """One line naming ``what`` where the rows and their labels cannot be fitted: none, counts that differ, or
    labels that are not class ids 0 .. num_labels - 1."""
    if len(rows) == 0:
        raise ValueError(f"the n-gram score needs {what} rows; none were given")
    if labels.dim() != 1 or len(labels) != len(rows):
        raise ValueError(f"{what}: {len(rows)} rows but {tuple(labels.shape)} labels; give one label per row")
    outside = labels[(labels < 0) | (labels >= num_labels)]
    if len(outside):
        raise ValueError(
            f"{what}: labels must be class ids 0 .. {num_labels - 1} of the model's {num_labels} labels; "
            f"got {sorted(set(outside.tolist()))[:5]}"
        )


def _check_inverse_l2(inverse_l2) -> None:
    if isinstance(inverse_l2, bool) or not isinstance(inverse_l2, (int, float)) or not 0 < inverse_l2 < math.inf:
        raise ValueError(f"inverse_l2 (--ngram_inverse_l2) must be a positive number, got {inverse_l2!r}")


@contextlib.contextmanager
def ngram_score_left_out(model: TransformerForSequenceClassification):
    """Within the block, ``model``'s forward leaves out its n-gram score, which must be zero and frozen: so it is
    before `fit_ngram_classifier`, while the encoder trains. Every row's score would be exactly 0, so the logits,
    their dtype and the gradients are the same bit for bit, without hashing each batch's n-grams (the training
    scripts' fine-tuning and their scoring of the encoder alone). Refused for a fitted score, whose leaving out would
    change the logits, and for a score that trains with the encoder, whose gradients it would drop. A model without
    the score runs as it is."""
    head = model.ngram_classifier
    if head is None:  # no score: the forward is the encoder's alone anyway
        yield model
        return
    if any(parameter.requires_grad for parameter in head.parameters()):
        raise ValueError(
            "The n-gram score trains with the encoder here (its parameters require gradients): leaving it out "
            "would drop them. Freeze it first (`model.ngram_classifier.requires_grad_(False)`)."
        )
    if bool(head.weight.any()) or bool(head.bias.any()):
        raise ValueError("The n-gram score is fitted (its weights are not zero): leaving it out would change logits.")
    before, head.left_out = head.left_out, True
    try:
        yield model
    finally:
        head.left_out = before


@torch.no_grad()
def ngram_logits(head: NgramClassifier, rows: Sequence[Sequence[int]], pad_token_id: int) -> torch.Tensor:
    """(N, L): the n-gram score of each row of token ids (on the CPU, in float32)."""
    ids, real = padded(rows, pad_token_id)
    ids, real = ids.to(head.idf.device), real.to(head.idf.device)
    return torch.cat([head(ids[i : i + 4096], real[i : i + 4096]) for i in range(0, len(rows), 4096)]).float().cpu()


def fit_ngram_classifier(
    model: TransformerForSequenceClassification,
    tokenizer,
    train_rows: Sequence[Sequence[int]],
    train_labels: Sequence[int],
    validation_rows: Sequence[Sequence[int]],
    validation_labels: Sequence[int],
    encoder_validation_logits: torch.Tensor,
    *,
    inverse_l2: float = 4.0,
    min_count: int = 2,
    max_iter: int = 200,
) -> dict[str, float]:
    """Fit ``model.ngram_classifier`` on the training rows (token ids, as the model reads them) and weigh it beside
    the encoder on the validation rows, given the encoder's validation logits (N, L) without the n-gram score.
    Returns what was chosen and each part's validation accuracy."""
    head = model.ngram_classifier
    if head is None:
        raise ValueError("The model has no n-gram score: build it with `classifier_ngram_buckets` > 0.")
    if head.left_out:
        raise ValueError("The n-gram score is left out of the forward here (ngram_score_left_out): fit it after.")
    if model.config.problem_type not in (None, "single_label_classification") or model.config.num_labels < 2:
        problem = model.config.problem_type or f"{model.config.num_labels} label (regression)"
        raise ValueError(f"The n-gram score is fitted for single-label classification, not {problem}")
    _check_inverse_l2(inverse_l2)
    if head.buckets & (head.buckets - 1):
        logger.warning(
            "n-gram score: %d buckets is not a power of two; for some counts the rolling hash puts runs a few code "
            "points apart into one bucket (classifier_ngram_buckets)",
            head.buckets,
        )
    labels = torch.as_tensor(train_labels, dtype=torch.long)
    validation_labels = torch.as_tensor(validation_labels, dtype=torch.long)
    encoder_validation_logits = torch.as_tensor(encoder_validation_logits, dtype=torch.float32).cpu()
    num_labels = model.config.num_labels
    _check_rows_and_labels(train_rows, labels, num_labels, "training")
    _check_rows_and_labels(validation_rows, validation_labels, num_labels, "validation")
    if encoder_validation_logits.shape != (len(validation_rows), num_labels):
        raise ValueError(
            f"encoder_validation_logits must be (validation rows, labels) = ({len(validation_rows)}, {num_labels}), "
            f"got {tuple(encoder_validation_logits.shape)}"
        )
    with _on_cpu(head):  # the fit's arithmetic on the CPU, the head moved back after
        pad = model.config.pad_token_id
        with torch.no_grad():
            head.weight.zero_()
            head.bias.zero_()
            if head.reads_characters:
                head.token_characters.copy_(token_character_table(tokenizer, head.token_characters.shape[0]))
            if head.reads_tokens:
                head.canonical_ids.copy_(canonical_token_ids(tokenizer, head.canonical_ids.shape[0]))
            ids, real = padded(train_rows, pad)
            counts = document_frequencies(head, ids, real)
            idf = torch.log((1.0 + len(train_rows)) / (1.0 + counts)) + 1.0
            kept = counts >= min_count
            head.idf.copy_(torch.where(kept, idf, torch.zeros_like(idf)))
            features = feature_matrix(head, ids, real)
        logger.info("n-gram score: %d n-gram buckets kept of %d, fitting", int(kept.sum()), head.buckets)
        weight, bias = logistic_regression(features, labels, head.weight.shape[1], inverse_l2, max_iter)
        with torch.no_grad():
            head.weight.copy_(weight)
            head.bias.copy_(bias)
        validation_ngram = ngram_logits(head, validation_rows, pad)
        encoder_weight, ngram_weight = mixing_weights(encoder_validation_logits, validation_ngram, validation_labels)
        with torch.no_grad():
            model.classifier.weight.mul_(encoder_weight)
            model.classifier.bias.mul_(encoder_weight)
            head.weight.mul_(ngram_weight)
            head.bias.mul_(ngram_weight)
        report = {
            "encoder_logit_scale": encoder_weight,
            "ngram_logit_scale": ngram_weight,
            "ngram_buckets_kept": int(kept.sum()),
            "eval_encoder_accuracy": accuracy(encoder_validation_logits, validation_labels),
            "eval_ngram_accuracy": accuracy(validation_ngram, validation_labels),
        }
        logger.info("n-gram score fitted: %s", report)
        return report


def refit_ngram_classifier(
    model: TransformerForSequenceClassification,
    rows: Sequence[Sequence[int]],
    labels: Sequence[int],
    *,
    ngram_logit_scale: float,
    inverse_l2: float = 4.0,
    max_iter: int = 200,
) -> None:
    """Fit a fitted ``model.ngram_classifier``'s logistic regression once more, on ``rows`` (e.g. the training and
    the validation rows together, once the validation rows have been scored and have weighed the two parts),
    keeping what `fit_ngram_classifier` chose: the token table, the n-grams kept and their idf, and the score's
    weight beside the encoder (``ngram_logit_scale``, its report's). It starts from the fitted weights."""
    head = model.ngram_classifier
    if head is None or not bool(head.idf.any()):
        raise ValueError("Refitting needs a fitted n-gram score: run `fit_ngram_classifier` first.")
    if ngram_logit_scale <= 0:
        raise ValueError(f"ngram_logit_scale must be the fit's positive weight, not {ngram_logit_scale}")
    _check_inverse_l2(inverse_l2)
    labels = torch.as_tensor(labels, dtype=torch.long)
    _check_rows_and_labels(rows, labels, model.config.num_labels, "refitting")
    with _on_cpu(head):
        with torch.no_grad():
            features = feature_matrix(head, *padded(rows, model.config.pad_token_id))
            start = (head.weight / ngram_logit_scale, head.bias / ngram_logit_scale)
        weight, bias = logistic_regression(features, labels, head.weight.shape[1], inverse_l2, max_iter, start=start)
        with torch.no_grad():
            head.weight.copy_(weight * ngram_logit_scale)
            head.bias.copy_(bias * ngram_logit_scale)
    logger.info("n-gram score refitted on %d rows", len(rows))
