"""R-Drop (Liang et al., 2021): each training batch goes through the model twice, with independent dropout, and the
loss adds the symmetric KL divergence between the two predicted token distributions to their cross-entropy:

    loss = (CE(p1) + CE(p2)) / 2 + alpha / 4 * (KL(p1 || p2) + KL(p2 || p1))

per target token, which is the paper's ``CE1 + CE2 + alpha / 2 * (KL12 + KL21)`` halved so that ``alpha = 0`` gives
the usual loss. The two passes are one forward over the batch stacked on itself, (2B, ...), so dropout draws a
fresh mask for each copy. The regulariser pulls the sub-models that dropout samples towards one prediction; it
helps most where a model overfits a small training set, at twice the cost of a step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hf_transformer.data import IGNORE_INDEX
from hf_transformer.input_checks import check_labels_in_range
from hf_transformer.trainer import OrderKeepingSeq2SeqTrainer


def rdrop_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    alpha: float,
    label_smoothing: float = 0.0,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """The R-Drop loss of two passes over one batch.

    ``logits`` (2B, T, V): the first pass's rows, then the second's; ``labels`` (B, T), -100 ignored. The sum over
    the batch's target tokens is divided by ``num_items_in_batch`` (Trainer's count of target tokens in the whole
    accumulated batch) or, without it, by the number of target tokens in ``labels``.
    """
    if logits.dim() != 3 or logits.shape[0] != 2 * labels.shape[0] or logits.shape[1] != labels.shape[1]:
        raise ValueError(
            f"R-Drop takes the logits of a batch stacked on itself, (2B, T, V), with labels (B, T); got logits "
            f"{tuple(logits.shape)} and labels {tuple(labels.shape)}"
        )
    if alpha < 0:
        raise ValueError(f"the R-Drop weight alpha must be >= 0, got {alpha}")
    check_labels_in_range(labels, logits.shape[-1])  # a negative label but -100 would become token 0 below
    labelled = labels != IGNORE_INDEX  # (B, T)
    targets = labels.clamp(min=0)
    log_probs = F.log_softmax(logits.float(), dim=-1)  # (2B, T, V)
    first, second = log_probs.chunk(2)  # (B, T, V) each

    def cross_entropy(pass_log_probs: torch.Tensor) -> torch.Tensor:  # (B, T)
        nll = -pass_log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        if not label_smoothing:
            return nll
        return (1.0 - label_smoothing) * nll - label_smoothing * pass_log_probs.mean(dim=-1)

    # KL(p1 || p2) + KL(p2 || p1) = sum_v (p1 - p2) (log p1 - log p2), (B, T)
    symmetric_kl = ((first.exp() - second.exp()) * (first - second)).sum(dim=-1)
    per_token = (cross_entropy(first) + cross_entropy(second)) / 2 + alpha / 4 * symmetric_kl
    total = per_token.masked_fill(~labelled, 0.0).sum()
    if num_items_in_batch is None:
        return total / labelled.sum().clamp(min=1)
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(total.device)
    return total / num_items_in_batch


class RDropSeq2SeqTrainer(OrderKeepingSeq2SeqTrainer):
    """``Seq2SeqTrainer`` (the package's `OrderKeepingSeq2SeqTrainer`: a length-grouped pass resumes in its order)
    whose training loss is :func:`rdrop_loss` with weight ``rdrop_alpha``.

    Evaluation, prediction and generation are the parent's: only a training step runs the batch twice. With
    ``rdrop_alpha=0`` the trainer is the parent.
    """

    def __init__(self, *args, rdrop_alpha: float, **kwargs):
        if rdrop_alpha < 0:
            raise ValueError(f"rdrop_alpha must be >= 0, got {rdrop_alpha}")
        super().__init__(*args, **kwargs)
        self.rdrop_alpha = rdrop_alpha

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if not (self.rdrop_alpha and model.training and inputs.get("labels") is not None):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        labels = inputs["labels"]
        unwrapped = self.accelerator.unwrap_model(model)
        # Without labels the model returns the logits (its fused training loss never holds them).
        doubled = {
            name: torch.cat([value, value]) if torch.is_tensor(value) else value
            for name, value in inputs.items()
            if name != "labels"
        }
        if "decoder_input_ids" not in doubled and "decoder_inputs_embeds" not in doubled:
            doubled["decoder_input_ids"] = unwrapped.prepare_decoder_input_ids_from_labels(torch.cat([labels, labels]))
        outputs = model(**doubled)
        loss = rdrop_loss(
            outputs.logits,
            labels,
            alpha=self.rdrop_alpha,
            label_smoothing=unwrapped.config.label_smoothing,
            num_items_in_batch=num_items_in_batch,
        )
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            # As Trainer.compute_loss: num_items_in_batch counts every process's tokens, and DDP averages gradients.
            loss = loss * self.accelerator.num_processes
        return (loss, outputs) if return_outputs else loss
