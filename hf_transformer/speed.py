"""The speed machinery behind the paper's components, kept apart so that the model file reads as the paper.

Each piece takes over from one plain computation of the model, gives the same result up to float rounding, and
says why it exists; the measurements behind each are in benchmarks/results/notes.md (summarised in
docs/performance.md), not here. This is the only module that touches private torch ops (``torch.ops.mkldnn``).

- residual and attention dropout ....... :func:`inverted_dropout`, :class:`Dropout` (CPU: a cheaper mask)
- multi-head attention ................. :func:`attend` (eager path with dropout on CPU, for compiled short CPU
                                         attention and for bfloat16 CPU training over short rows; else sdpa or
                                         the configured kernel), and what a model tells transformers of its
                                         kernels (:class:`AttentionKernels`)
- output projection and training loss .. :func:`output_logits_and_loss` (the loss without the logits)
- the n-gram score's characters ........ :func:`pack_token_characters` (as wide as the row's characters, not as
                                         the tokens' slots)
- decoding on CPU ...................... :func:`packed_linear_weights` (oneDNN-packed weights for few rows)
- graph capture ........................ :func:`capturing_graph` (host-side shortcuts off under compile/trace)
- masks that hide nothing .............. :func:`all_true`, :func:`sees_every_key` (attention without a mask)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers.integrations import is_deepspeed_zero3_enabled
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

__all__ = [
    "capturing_graph",
    "all_true",
    "sees_every_key",
    "inverted_dropout",
    "Dropout",
    "attend",
    "AttentionKernels",
    "output_logits_and_loss",
    "fused_linear_cross_entropy",
    "pack_token_characters",
    "packed_linear_weights",
    "packed_weight",
    "is_packing",
    "stop_packing",
]


def capturing_graph() -> bool:
    """True while ``torch.compile`` or ``torch.jit.trace`` (the TorchScript ONNX exporter) records the model.
    Shortcuts that read tensor values on the host are off then: compiled, the read would break the graph; traced,
    the answer for the example input would be baked into the graph (an unpadded example would drop the padding
    mask for every later input)."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing()


def all_true(mask: torch.Tensor) -> bool:
    """Whether nothing is masked, so that attention may run without the mask. Reading the answer waits for the
    device; a captured graph, which cannot branch on data, keeps the mask (False)."""
    return not capturing_graph() and bool(mask.all())


def sees_every_key(query_length: int, past_length: int | torch.Tensor, key_length: int) -> bool:
    """A decoding step over a growing cache, one new token after the P cached ones, sees all K = P+1 keys: its
    causal mask hides nothing and need not be built. Not for a static cache (P a 0-d tensor, K every slot), nor
    while tracing (a traced graph may be run with other lengths)."""
    return (
        query_length == 1
        and not torch.is_tensor(past_length)
        and key_length == past_length + 1
        and not torch.jit.is_tracing()
    )


# ---------------------------------------------------------------------------------------------------
# Dropout (5.4)
# ---------------------------------------------------------------------------------------------------

_DROPOUT_MASK_BITS = 15


def inverted_dropout(hidden_states: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout: zero each element with probability ``p``, scale the rest by 1 / (1 - p).

    Why not ``F.dropout`` on CPU: its float Bernoulli draw is slow there. Here the keep-mask is drawn as 15-bit
    integers compared with ``p * 2**15`` (``p`` is kept to 3e-5), four from each 64-bit draw of the generator,
    and autograd keeps a 1-byte mask instead of a 4-byte one. The mask multiplies as bytes, as torch's own
    dropout multiplies by its mask (a dropped inf becomes NaN there too), which is cheaper than ``torch.where``.
    Other devices, and compiled graphs, use ``F.dropout``, which is fused there.
    (benchmarks/results/notes.md, "A cheaper dropout mask on CPU".)
    """
    if not training or p == 0.0:
        return hidden_states
    if hidden_states.device.type != "cpu" or p >= 1.0 or torch.compiler.is_compiling():
        return F.dropout(hidden_states, p, training=True)  # compiled: fused with its neighbours instead
    # A 64-bit draw (its top bit is always 0) holds four 16-bit integers: their low 15 bits are the draws.
    count = hidden_states.numel()
    words = torch.empty((count + 3) // 4, dtype=torch.int64, device=hidden_states.device).random_()
    draws = words.view(torch.int16)[:count].view(hidden_states.shape).bitwise_and_((1 << _DROPOUT_MASK_BITS) - 1)
    keep = draws >= round(p * (1 << _DROPOUT_MASK_BITS))
    return hidden_states * (1.0 / (1.0 - p)) * keep.view(torch.uint8)


class Dropout(nn.Dropout):
    """``nn.Dropout`` computed by :func:`inverted_dropout`."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return inverted_dropout(hidden_states, self.p, self.training)


# ---------------------------------------------------------------------------------------------------
# Attention (3.2): which kernel computes softmax(Q K^T / sqrt(d_k)) V
# ---------------------------------------------------------------------------------------------------

# Compiled on CPU, the plain product-softmax-product path is fused by inductor (scaling, mask and softmax in one
# kernel) and beats sdpa's flash kernel, whose per-call cost dominates over few keys; over many keys sdpa wins.
COMPILED_CPU_MATH_ATTENTION_MAX_KEYS = 128


def _compiled_short_cpu_attention(key: torch.Tensor) -> bool:
    return (
        key.device.type == "cpu"
        and key.shape[-2] <= COMPILED_CPU_MATH_ATTENTION_MAX_KEYS
        and torch.compiler.is_compiling()
    )


# In bfloat16 on CPU, sdpa's backward pass over few keys is slower than the product-softmax-product path's (its
# softmax in float32) up to about this many keys, enough to slow a whole training step over short rows
# (benchmarks/results/notes.md). Evaluation keeps sdpa: without gradients it is as fast or faster there.
BFLOAT16_CPU_TRAINING_MATH_ATTENTION_MAX_KEYS = 128


def _bfloat16_cpu_training_attention(query: torch.Tensor, key: torch.Tensor) -> bool:
    return (
        query.device.type == "cpu"
        and query.dtype == torch.bfloat16
        and query.requires_grad
        and torch.is_grad_enabled()
        and key.shape[-2] <= BFLOAT16_CPU_TRAINING_MATH_ATTENTION_MAX_KEYS
    )


def attend(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    output_attentions: bool,
    paper_attention: Callable,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """softmax(Q K^T / sqrt(d_k)) V for ``module`` (a ``TransformerAttention``), through the fastest kernel that
    gives the same result: ``paper_attention`` (the model's eager function, which returns the probabilities)
    where probabilities are asked for, for dropout on CPU (sdpa has no fused CPU kernel with dropout and falls
    back to the same math with a slower mask), for short compiled CPU attention and for training in bfloat16 on
    CPU over short rows; otherwise the configured implementation (sdpa called directly, or any kernel registered
    with transformers).

    query (B, H, T, Dh), key/value (B, H, S, Dh), mask bool (True = may attend) or float, broadcastable to
    (B, H, T, S) -> output (B, T, H, Dh), probabilities (B, H, T, S) or None.
    """
    dropout = module.dropout if module.training else 0.0
    implementation = "eager"
    cpu_dropout = dropout > 0.0 and query.device.type == "cpu"
    if (
        not output_attentions
        and not cpu_dropout
        and not _compiled_short_cpu_attention(key)
        and not _bfloat16_cpu_training_attention(query, key)
    ):
        implementation = module.config._attn_implementation
    if implementation == "sdpa":
        # torch's kernel called directly (the generic wrapper's checks cost time at every decoding step). A single
        # query, a decoding step, sees every cached key: causal only for several queries without a mask.
        is_causal = module.is_causal and attention_mask is None and query.shape[2] > 1
        output = F.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, is_causal=is_causal, scale=module.scaling
        ).transpose(1, 2)  # (B, T, H, Dh)
        return output, None
    attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, paper_attention)
    return attention_interface(
        module,
        query,
        key,
        value,
        attention_mask,
        dropout=dropout,
        scaling=module.scaling,
        is_causal=module.is_causal and attention_mask is None,
    )


class AttentionKernels:
    """What transformers asks a model about its attention kernels, which :func:`attend` dispatches to: sdpa and
    the kernels registered with transformers, not flash or flex attention."""

    _supports_sdpa = True
    _supports_flash_attn = False
    _supports_flex_attn = False

    @classmethod
    def _can_set_attn_implementation(cls) -> bool:
        # Attention reads `config._attn_implementation` at every call (:func:`attend`, through transformers'
        # AttentionInterface), so `set_attn_implementation` may change it after loading. transformers guesses this
        # from the model file's source, where the dispatch is not, and would refuse with a warning.
        return True


# ---------------------------------------------------------------------------------------------------
# Output projection and loss (3.4): the training loss without the (N, V) logits
# ---------------------------------------------------------------------------------------------------


def output_logits_and_loss(
    lm_head: nn.Module | torch.Tensor,
    hidden_states: torch.Tensor,
    labels: torch.Tensor | None,
    loss_function: Callable,
    *,
    bias: torch.Tensor | None = None,
    label_smoothing: float = 0.0,
    fuse: bool,
    training: bool,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``logits = lm_head(hidden_states)`` and ``loss_function(logits, labels, num_items_in_batch)``.

    ``lm_head`` is the output layer, or the weight (V, D) of the output projection itself with an optional ``bias``
    (V,): ``logits = hidden_states @ lm_head.T + bias``, for a head whose projection is the token table.

    With ``fuse`` (the config's ``fused_output_loss``), a training step's loss is computed chunk by chunk with its
    gradients (:func:`fused_linear_cross_entropy`) and the logits, the largest activation of a step, are never
    held: then ``logits`` is None. The plain path is taken wherever the fused one would not give the same loss:
    outside training, under autocast (whose casts it would skip), under DeepSpeed ZeRO-3 (which gathers a
    partitioned weight only around its module's call), compiled (its chunk loop would break the graph), for an
    output layer that is not a plain float ``nn.Linear`` (a quantized one, for example), and for empty ``labels``
    (nothing to predict: ``loss_function`` says what that loss is).
    """
    if isinstance(lm_head, nn.Module) and bias is not None:
        raise ValueError("`bias` goes with an output weight; an output layer holds its own bias")
    if labels is not None and labels.dtype != torch.long:
        labels = labels.long()  # int32 labels: both paths then read them (cross_entropy takes int64 targets only)
    if labels is not None and fuse and labels.numel() and _can_fuse(lm_head, hidden_states, training):
        weight, bias = (lm_head, bias) if isinstance(lm_head, torch.Tensor) else (lm_head.weight, lm_head.bias)
        return None, _fused_loss(weight, bias, hidden_states, labels, label_smoothing, num_items_in_batch)
    logits = F.linear(hidden_states, lm_head, bias) if isinstance(lm_head, torch.Tensor) else lm_head(hidden_states)
    loss = loss_function(logits, labels, num_items_in_batch) if labels is not None else None
    return logits, loss


def _can_fuse(lm_head: nn.Module | torch.Tensor, hidden_states: torch.Tensor, training: bool) -> bool:
    if isinstance(lm_head, torch.Tensor):
        weight = lm_head
    elif isinstance(lm_head, nn.Linear) and not _calls_hooks(lm_head):
        weight = lm_head.weight
    else:
        return False
    return (
        training
        and torch.is_grad_enabled()
        and not torch.is_autocast_enabled(hidden_states.device.type)
        and hidden_states.dtype == weight.dtype
        and not is_deepspeed_zero3_enabled()
        and not torch.compiler.is_compiling()
    )


def _calls_hooks(module: nn.Module) -> bool:
    """Whether calling ``module`` runs hooks (its own, or torch's global module hooks: pruning's recomputed weight,
    an offloading hook, a user's) that the fused path, reading the weight without calling the layer, would skip."""
    from torch.nn.modules import module as torch_module  # the global hook tables: pinned in test_private_hooks.py

    return bool(
        module._forward_hooks
        or module._forward_pre_hooks
        or torch_module._global_forward_hooks
        or torch_module._global_forward_pre_hooks
    )


def _fused_loss(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    hidden_states: torch.Tensor,
    labels: torch.Tensor,
    label_smoothing: float,
    num_items_in_batch: int | torch.Tensor | None,
) -> torch.Tensor:
    # labels in [0, V) or -100: checked by the model (input_checks.check_labels_in_range) before either path.
    flat_labels = labels.reshape(-1).to(hidden_states.device)
    total = fused_linear_cross_entropy(
        hidden_states.reshape(-1, hidden_states.shape[-1]), weight, flat_labels, label_smoothing, bias=bias
    )
    if num_items_in_batch is None:
        return total / (flat_labels != -100).sum()
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(total.device)
    return total / num_items_in_batch


_LOGITS_PER_CHUNK = 1 << 21  # about 8 MB of float32 logits per chunk: they stay in cache while used


class _FusedLinearCrossEntropy(torch.autograd.Function):
    """Summed label-smoothed cross-entropy of ``hidden @ weight.T (+ bias)``, computed a chunk of rows at a time.

    Each chunk's logits become, in place, the gradient of its loss (softmax - (1 - s) onehot - s / V) and are
    multiplied back at once, so the gradients exist when the forward returns and the (N, V) logits never
    do; the backward only scales them by the incoming gradient.
    """

    @staticmethod
    def forward(ctx, hidden, weight, labels, smoothing: float, bias=None):
        # hidden (N, D), weight (V, D), labels (N,) in [0, V) or -100, bias (V,) or None
        #   -> loss summed over the labelled rows, ()
        vocab_size = weight.shape[0]
        chunk = max(1, _LOGITS_PER_CHUNK // vocab_size)
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        want_bias = bias is not None and ctx.needs_input_grad[4]
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        grad_weight = torch.zeros_like(weight) if want_weight else None
        grad_bias = torch.zeros_like(bias) if want_bias else None
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, hidden.shape[0], chunk):
            rows = hidden[start : start + chunk]
            row_labels = labels[start : start + chunk]
            logits = (rows @ weight.t() if bias is None else torch.addmm(bias, rows, weight.t())).float()  # (c, V)
            labelled = row_labels != -100
            targets = row_labels.clamp(min=0)[:, None]
            target_logits = logits.gather(1, targets).squeeze(1)
            mean_logits = logits.mean(dim=-1) if smoothing else None
            # In place, one pass each: shift by the row maximum, exponentiate, normalise.
            row_max = logits.amax(dim=-1, keepdim=True)
            exp_logits = logits.sub_(row_max).exp_()
            row_sum = exp_logits.sum(dim=-1, keepdim=True)
            log_normalizer = (row_sum.log() + row_max).squeeze(1)  # logsumexp, (c,)
            loss = log_normalizer - target_logits
            if smoothing:
                loss = (1.0 - smoothing) * loss + smoothing * (log_normalizer - mean_logits)
            total += loss.masked_fill(~labelled, 0.0).sum()
            if not (want_hidden or want_weight or want_bias):
                continue
            grad_logits = exp_logits.div_(row_sum)  # softmax
            if smoothing:
                grad_logits.sub_(smoothing / vocab_size)
            grad_logits.scatter_add_(1, targets, grad_logits.new_full(targets.shape, smoothing - 1.0))
            unlabelled = (~labelled).nonzero().squeeze(1)
            if unlabelled.numel():
                grad_logits.index_fill_(0, unlabelled, 0.0)
            grad_logits = grad_logits.to(hidden.dtype)
            if want_hidden:
                torch.mm(grad_logits, weight, out=grad_hidden[start : start + chunk])
            if want_weight:
                grad_weight.addmm_(grad_logits.t(), rows)
            if want_bias:
                grad_bias += grad_logits.sum(dim=0)
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        return total

    @staticmethod
    def backward(ctx, grad_total):
        if torch.is_grad_enabled():  # create_graph=True: a second order the gradients, constants here, do not have
            raise RuntimeError(
                "the fused output loss gives first-order gradients only; for gradients of gradients "
                "(create_graph=True) build the model with fused_output_loss=False"
            )
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        return (
            grad_hidden * grad_total if grad_hidden is not None else None,
            grad_weight * grad_total if grad_weight is not None else None,
            None,
            None,
            grad_bias * grad_total if grad_bias is not None else None,
        )


def fused_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    label_smoothing: float = 0.0,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``F.cross_entropy(hidden @ weight.T + bias, labels, reduction="sum")`` (-100 ignored) without ever
    holding the (N, V) logits; hidden (N, D), weight (V, D), labels (N,), bias (V,) -> ()."""
    return _FusedLinearCrossEntropy.apply(hidden, weight, labels, float(label_smoothing), bias)


# ---------------------------------------------------------------------------------------------------
# The n-gram score's characters: each row's as wide as the row's characters
# ---------------------------------------------------------------------------------------------------


def pack_token_characters(
    input_ids: torch.Tensor, token_is_real: torch.Tensor, token_characters: torch.Tensor, plain_packing: Callable
) -> tuple[torch.Tensor, torch.Tensor]:
    """The real tokens' characters one after the other in each row (``plain_packing``, the model's
    ``token_characters_in_a_row``), found without its (B, S * W) table of every token's W character slots, most of
    them empty: each packed place looks up its token and the character's place in it, over as many places as the
    batch's longest row has characters.

    (B, S) ids, (B, S) which are real, (V, W) code points -> (B, C) code points, (B, C) which are real: the plain
    packing's first C columns, where it has only empty ones after them (C >= 1). A captured graph cannot size a tensor
    by its data, and takes ``plain_packing``; so does an accelerator, where reading C would wait for the device and
    the gain was not measured.
    """
    batch, length = input_ids.shape
    if capturing_graph() or input_ids.device.type != "cpu" or batch == 0 or length == 0:
        return plain_packing(input_ids, token_is_real, token_characters)
    slots = token_characters.shape[1]
    present = token_characters != 0  # (V, W)
    if not bool((present[:, 1:] <= present[:, :-1]).all()):  # a token's characters after an empty slot: close up
        order = (~present).to(torch.uint8).argsort(dim=1, stable=True)
        token_characters, present = token_characters.gather(1, order), present.gather(1, order)
    counts = present.sum(1)[input_ids] * token_is_real  # (B, S) characters of each real token
    ends = counts.cumsum(1)  # (B, S): where each token's characters end in its row
    totals = ends[:, -1:]  # (B, 1)
    places = torch.arange(max(int(totals.max()), 1), device=input_ids.device)  # (C,)
    queries = places.expand(batch, -1).contiguous()  # (B, C)
    token = torch.searchsorted(ends, queries, right=True).clamp_(max=length - 1)  # (B, C): the token holding it
    real = queries < totals
    within = torch.where(real, queries - (ends - counts).gather(1, token), 0)  # its place among the token's
    characters = token_characters.reshape(-1)[input_ids.gather(1, token) * slots + within]
    return characters * real, real


# ---------------------------------------------------------------------------------------------------
# Decoding on CPU: linear layers multiplying few rows by oneDNN-packed weights
# ---------------------------------------------------------------------------------------------------

# A decoding step multiplies a few rows (batch x beams) by every weight matrix once. For a large weight,
# oneDNN's pre-packed layout streams it faster than MKL's sgemm, which repacks the weight at every call.
# Small weights gain little or lose, and their packing is not repaid in a short generation; many rows are
# faster through MKL. The thresholds and the measurements behind them: benchmarks/results/notes.md,
# "Decoding from packed weights".
PACKED_MAX_ROWS = 64
PACKED_MIN_WEIGHT_ELEMENTS = 1 << 20  # 4 MB of fp32


def _packable(weight: torch.Tensor) -> bool:
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and type(weight) in (torch.Tensor, nn.Parameter)
        and weight.numel() >= PACKED_MIN_WEIGHT_ELEMENTS
        and torch.backends.mkldnn.is_available()
    )


class _PackedLinearForward:
    """The forward of one ``nn.Linear`` inside :func:`packed_linear_weights`: up to ``PACKED_MAX_ROWS`` rows are
    multiplied by a oneDNN-packed copy of the weight (inference only, fp32 on CPU), other products are the
    plain ``F.linear``. Same parameters; the same results up to float rounding (another summation order)."""

    def __init__(self, linear: nn.Linear):
        self.linear = linear
        self.packed_weight: torch.Tensor | None = None

    def __call__(self, hidden_states: torch.Tensor) -> torch.Tensor:
        linear = self.linear
        if (
            hidden_states.numel() <= PACKED_MAX_ROWS * linear.in_features
            and hidden_states.dtype == torch.float32
            and not torch.is_grad_enabled()
            and not torch.is_autocast_enabled("cpu")
            and not torch.compiler.is_compiling()  # a compiled step's matmuls are the compiler's to choose
        ):
            if self.packed_weight is None:  # packed at the first few-row product: the encoder never needs it
                self.packed_weight = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), None)
            rows = hidden_states.reshape(-1, linear.in_features).contiguous()
            output = torch.ops.mkldnn._linear_pointwise(rows, self.packed_weight, linear.bias, "none", [], "")
            return output.view(*hidden_states.shape[:-1], linear.out_features)
        return F.linear(hidden_states, linear.weight, linear.bias)


def packed_weight(linear: nn.Module) -> torch.Tensor | None:
    """The packed copy of ``linear``'s weight inside :func:`packed_linear_weights`, once made; else None."""
    forward = linear.__dict__.get("forward")
    return forward.packed_weight if isinstance(forward, _PackedLinearForward) else None


def is_packing(linear: nn.Module) -> bool:
    """Whether ``linear`` multiplies through :class:`_PackedLinearForward` now."""
    return isinstance(linear.__dict__.get("forward"), _PackedLinearForward)


def stop_packing(linear: nn.Module) -> None:
    """Back to the plain product; the packed copy, if any, is dropped."""
    if is_packing(linear):
        del linear.forward


@contextlib.contextmanager
def packed_linear_weights(model: nn.Module):
    """Inside the block, ``model``'s large ``nn.Linear`` weights on CPU are packed when first used for a few-row
    product, and the copies are dropped on exit: a weight changed between two blocks (training,
    ``load_state_dict``, an in-place edit through ``.data``) is always packed anew. Nested blocks share the
    outer copies.

    The layers stay plain ``nn.Linear`` modules (so that ``torch.ao.quantization.quantize_dynamic``, which
    matches the exact type, quantizes them); inside the block each one's ``forward`` is an instance attribute.
    Only exact ``nn.Linear`` modules are taken: a subclass or a quantized layer keeps its own forward."""
    modules = [
        module
        for module in model.modules()
        if type(module) is nn.Linear and not is_packing(module) and _packable(module.weight)
    ]
    for module in modules:
        module.forward = _PackedLinearForward(module)
    try:
        yield
    finally:
        for module in modules:
            stop_packing(module)
