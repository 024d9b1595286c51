"""Load checkpoints of the two reference implementations into [`TransformerModel`].

* [`from_seed`]: the seed tutorial's ``Transformer`` (post-LN encoder-decoder, frozen sinusoid positions
  numbered from 1, kernel-size-1 convolutions as the feed-forward, GELU, separate encoder and decoder
  token tables).
* [`from_book`]: the book-style encoder (pre-LN, learned positions from 0, LayerNorm on the embeddings,
  one ``nn.Linear`` per attention head, no final LayerNorm, no mask).

Both check the checkpoint against the names and shapes its own code would produce for the given config,
and raise ``ValueError`` listing every unknown, missing or mis-shaped key: no tensor is dropped or
guessed. ``docs/seed_to_code.md`` maps each concept of the reference code to the code here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import nn

from .configuration_transformer import TransformerConfig
from .modeling_transformer import TransformerModel

SEED_CONFIG_KEYS = (
    "n_enc_vocab",
    "n_dec_vocab",
    "n_enc_seq",
    "n_dec_seq",
    "n_layer",
    "d_hidn",
    "i_pad",
    "d_ff",
    "n_head",
    "d_head",
    "dropout",
    "layer_norm_epsilon",
)
# The tutorial's classification config adds the number of classes to the same dict.
SEED_OPTIONAL_CONFIG_KEYS = ("n_output",)

BOOK_CONFIG_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "num_hidden_layers",
    "hidden_dropout_prob",
)
# The book hard-codes these rather than reading them from its (BERT) config.
BOOK_EMBEDDING_LAYER_NORM_EPSILON = 1e-12
BOOK_LAYER_NORM_EPSILON = 1e-5  # nn.LayerNorm's default

# A rule builds one tensor of the package's state dict from the (already validated) source state dict.
_Rule = Callable[[Mapping[str, torch.Tensor]], torch.Tensor]


# ---------------------------------------------------------------------------------------------------
# Configurations
# ---------------------------------------------------------------------------------------------------


def seed_config(config: Mapping) -> TransformerConfig:
    """The [`TransformerConfig`] of the seed tutorial's model described by its config dict."""
    config = _as_dict(config)
    missing = [key for key in SEED_CONFIG_KEYS if key not in config]
    unknown = sorted(key for key in config if key not in SEED_CONFIG_KEYS + SEED_OPTIONAL_CONFIG_KEYS)
    if missing or unknown:
        raise ValueError(
            "from_seed: the config is not a seed tutorial config: "
            + "; ".join(
                part
                for part in (
                    f"missing keys {missing}" if missing else "",
                    f"unknown keys {unknown}" if unknown else "",
                )
                if part
            )
            + f". Expected exactly {list(SEED_CONFIG_KEYS)} (and optionally {list(SEED_OPTIONAL_CONFIG_KEYS)})."
        )
    settings = {key: config[key] for key in SEED_CONFIG_KEYS}
    if "n_output" in config:
        settings["num_labels"] = config["n_output"]
    return TransformerConfig(
        **settings,
        layer_norm_position="post",
        position_embedding_type="sinusoidal",
        embedding_layer_norm=False,
        scale_embedding=False,
        final_layer_norm=False,
        activation_function="gelu",
        # The tutorial has two token tables (`enc_emb`, `dec_emb`), even when the vocabularies are equal.
        share_embeddings=False,
        # The tutorial drops attention probabilities with the same rate as everything else, and nothing
        # inside the feed-forward.
        attention_dropout=config["dropout"],
        activation_dropout=0.0,
    )


def book_config(config: Mapping) -> TransformerConfig:
    """The [`TransformerConfig`] of the book-style encoder (plus a decoder of the same shape).

    ``config`` is the BERT-style dict (or config object) the book builds its model from. Only the keys
    the book's code reads are used, plus ``pad_token_id`` / ``bos_token_id`` / ``eos_token_id`` when
    present (the pad id defaults to 0); other BERT keys such as ``layer_norm_eps`` or ``hidden_act`` are
    ignored because the book ignores them too.
    """
    config = _as_dict(config)
    missing = [key for key in BOOK_CONFIG_KEYS if key not in config]
    if missing:
        raise ValueError(f"from_book: the config lacks {missing}; the book's encoder needs {list(BOOK_CONFIG_KEYS)}.")
    special_ids = {
        name: config[name] for name in ("pad_token_id", "bos_token_id", "eos_token_id") if config.get(name) is not None
    }
    special_ids.setdefault("pad_token_id", 0)
    return TransformerConfig(
        vocab_size=config["vocab_size"],
        d_model=config["hidden_size"],
        num_attention_heads=config["num_attention_heads"],
        intermediate_size=config["intermediate_size"],
        max_position_embeddings=config["max_position_embeddings"],
        n_layer=config["num_hidden_layers"],
        dropout=config["hidden_dropout_prob"],
        attention_dropout=0.0,
        activation_dropout=0.0,
        layer_norm_position="pre",
        position_embedding_type="learned",
        embedding_layer_norm=True,
        embedding_layer_norm_epsilon=BOOK_EMBEDDING_LAYER_NORM_EPSILON,
        layer_norm_epsilon=BOOK_LAYER_NORM_EPSILON,
        final_layer_norm=False,
        scale_embedding=False,
        activation_function="gelu",
        # The decoder is new: it gets its own token table rather than silently sharing the book's.
        share_embeddings=False,
        **special_ids,
    )


# ---------------------------------------------------------------------------------------------------
# Conversions
# ---------------------------------------------------------------------------------------------------


def from_seed(state_dict: Mapping[str, torch.Tensor], config: Mapping) -> TransformerModel:
    """Build a [`TransformerModel`] (in eval mode) from the seed tutorial's ``Transformer``.

    Args:
        state_dict: ``Transformer.state_dict()`` of the tutorial, with its own parameter names
            (``encoder.enc_emb.weight``, ``encoder.layers.0.self_attn.W_Q.weight``, ...). A module is
            accepted too.
        config: the tutorial's config dict (``n_enc_vocab``, ``d_hidn``, ``n_head``, ...).

    Called without ``attention_mask``, the model derives padding from ``i_pad`` as the tutorial does and
    gives the same encoder and decoder outputs and per-head attention probabilities at every non-pad
    position of right-padded batches. The tutorial's frozen position tables (``*.pos_emb.weight``) are
    not copied but compared with the table the package computes; a different table raises ``ValueError``.

    Dropout sits where the tutorial has it except on the embeddings, which the tutorial does not drop;
    this matters only when training.
    """
    hf_config = seed_config(config)
    state_dict = _as_state_dict(state_dict)
    model = TransformerModel(hf_config)
    target = model.state_dict()

    expected_shapes: dict[str, tuple[int, ...]] = {}
    rules: dict[str, _Rule] = {}

    def take(source: str, destination: str, reshape: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        shape = tuple(target[destination].shape)
        expected_shapes[source] = shape + (1,) if reshape is not None else shape
        rules[destination] = (lambda sd: reshape(sd[source])) if reshape is not None else (lambda sd: sd[source])

    def squeeze_kernel(weight: torch.Tensor) -> torch.Tensor:
        return weight.squeeze(-1)  # Conv1d(kernel_size=1) weight (out, in, 1) -> Linear weight (out, in)

    def attention(source: str, destination: str) -> None:
        for seed_name, name in (("W_Q", "q_proj"), ("W_K", "k_proj"), ("W_V", "v_proj"), ("linear", "out_proj")):
            for kind in ("weight", "bias"):
                take(f"{source}.{seed_name}.{kind}", f"{destination}.{name}.{kind}")

    def norm(source: str, destination: str) -> None:
        for kind in ("weight", "bias"):
            take(f"{source}.{kind}", f"{destination}.layer_norm.{kind}")

    def feed_forward(source: str, destination: str) -> None:
        for conv, fc in (("conv1", "fc1"), ("conv2", "fc2")):
            take(f"{source}.{conv}.weight", f"{destination}.{fc}.weight", squeeze_kernel)
            take(f"{source}.{conv}.bias", f"{destination}.{fc}.bias")

    take("encoder.enc_emb.weight", "encoder.embeddings.embed_tokens.weight")
    take("decoder.dec_emb.weight", "decoder.embeddings.embed_tokens.weight")
    position_tables = {
        "encoder.pos_emb.weight": model.encoder.embeddings.position_table,
        "decoder.pos_emb.weight": model.decoder.embeddings.position_table,
    }
    for name, table in position_tables.items():
        expected_shapes[name] = tuple(table.shape)
    for i in range(hf_config.encoder_layers):
        layer = f"encoder.layers.{i}"  # the same prefix in both layouts
        attention(f"{layer}.self_attn", f"{layer}.self_attn")
        norm(f"{layer}.layer_norm1", f"{layer}.self_attn_sublayer")
        feed_forward(f"{layer}.pos_ffn", f"{layer}.feed_forward")
        norm(f"{layer}.layer_norm2", f"{layer}.feed_forward_sublayer")
    for i in range(hf_config.decoder_layers):
        layer = f"decoder.layers.{i}"
        attention(f"{layer}.self_attn", f"{layer}.self_attn")
        norm(f"{layer}.layer_norm1", f"{layer}.self_attn_sublayer")
        attention(f"{layer}.dec_enc_attn", f"{layer}.cross_attn")
        norm(f"{layer}.layer_norm2", f"{layer}.cross_attn_sublayer")
        feed_forward(f"{layer}.pos_ffn", f"{layer}.feed_forward")
        norm(f"{layer}.layer_norm3", f"{layer}.feed_forward_sublayer")

    _check_keys("from_seed", state_dict, expected_shapes)
    mismatched = [name for name, table in position_tables.items() if not _same_table(state_dict[name], table)]
    if mismatched:
        raise ValueError(
            f"from_seed: {mismatched} differ from the sinusoid table "
            "PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) with rows 0..n_seq "
            "that the package computes; a checkpoint with trained or altered position tables cannot be "
            "represented by position_embedding_type='sinusoidal'."
        )
    _load(model, target, rules, state_dict, keep=())
    return model.eval()


def from_book(state_dict: Mapping[str, torch.Tensor], config: Mapping) -> TransformerModel:
    """Build a [`TransformerModel`] (in eval mode) whose encoder is the book-style encoder.

    Args:
        state_dict: the book's ``TransformerEncoder.state_dict()`` with its names
            (``embeddings.token_embeddings.weight``, ``layers.0.attention.heads.0.Q.weight``, ...). A module
            is accepted too.
        config: the BERT-style config the book reads (``vocab_size``, ``hidden_size``,
            ``num_attention_heads``, ``intermediate_size``, ``max_position_embeddings``,
            ``num_hidden_layers``, ``hidden_dropout_prob``), as a dict or a config object.

    The per-head ``Q``/``K``/``V`` projections are stacked, head after head, into the fused
    ``q_proj``/``k_proj``/``v_proj``; ``fc_layer`` becomes ``out_proj``. ``model.get_encoder()`` then
    reproduces the book's encoder. The book uses no mask and so attends to padding too: to reproduce it
    on padded batches call the encoder with ``attention_mask=torch.ones_like(input_ids)``. Without an
    attention mask the encoder hides the pad id (``pad_token_id``, 0 unless the config names one),
    which is what a model should do but is not what the book computes.

    The decoder (and its token table) has no counterpart in the book: it keeps the initialisation of a new
    ``TransformerModel`` of this config and must be trained before the model's decoder outputs mean anything.

    In training mode the dropout differs from the book's: the book drops the embeddings with p=0.5
    (``nn.Dropout()``'s default), drops the feed-forward output with ``hidden_dropout_prob`` and never
    drops the attention output; here every residual branch and the embeddings use ``hidden_dropout_prob``.
    """
    hf_config = book_config(config)
    state_dict = _as_state_dict(state_dict)
    model = TransformerModel(hf_config)
    target = model.state_dict()
    num_heads, head_dim, d_model = hf_config.num_attention_heads, hf_config.head_dim, hf_config.d_model

    expected_shapes: dict[str, tuple[int, ...]] = {}
    rules: dict[str, _Rule] = {}

    def take(source: str, destination: str) -> None:
        expected_shapes[source] = tuple(target[destination].shape)
        rules[destination] = lambda sd: sd[source]

    def fuse_heads(sources: list[str], destination: str, shape: tuple[int, ...]) -> None:
        # Head h reads rows h*head_dim:(h+1)*head_dim of the fused projection, which is the order the
        # book concatenates the heads' outputs in before `fc_layer`.
        for source in sources:
            expected_shapes[source] = shape
        rules[destination] = lambda sd: torch.cat([sd[source] for source in sources], dim=0)

    take("embeddings.token_embeddings.weight", "encoder.embeddings.embed_tokens.weight")
    take("embeddings.position_embeddings.weight", "encoder.embeddings.position_embeddings.weight")
    for kind in ("weight", "bias"):
        take(f"embeddings.layer_norm.{kind}", f"encoder.embeddings.layer_norm.{kind}")
    for i in range(hf_config.encoder_layers):
        book, ours = f"layers.{i}", f"encoder.layers.{i}"
        for kind in ("weight", "bias"):
            take(f"{book}.layer_norm1.{kind}", f"{ours}.self_attn_sublayer.layer_norm.{kind}")
            take(f"{book}.layer_norm2.{kind}", f"{ours}.feed_forward_sublayer.layer_norm.{kind}")
            for letter, name in (("Q", "q_proj"), ("K", "k_proj"), ("V", "v_proj")):
                fuse_heads(
                    [f"{book}.attention.heads.{h}.{letter}.{kind}" for h in range(num_heads)],
                    f"{ours}.self_attn.{name}.{kind}",
                    (head_dim, d_model) if kind == "weight" else (head_dim,),
                )
            take(f"{book}.attention.fc_layer.{kind}", f"{ours}.self_attn.out_proj.{kind}")
            take(f"{book}.ffn.fc_layer1.{kind}", f"{ours}.feed_forward.fc1.{kind}")
            take(f"{book}.ffn.fc_layer2.{kind}", f"{ours}.feed_forward.fc2.{kind}")

    _check_keys("from_book", state_dict, expected_shapes)
    _load(model, target, rules, state_dict, keep=("decoder.",))
    return model.eval()


# ---------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------


def _as_dict(config) -> dict:
    # Mappings first: the tutorial's `Config(dict)` answers every attribute lookup with a KeyError.
    if isinstance(config, Mapping):
        return dict(config)
    if hasattr(config, "to_dict"):
        return config.to_dict()
    if hasattr(config, "__dict__"):  # e.g. an argparse / SimpleNamespace config
        return dict(vars(config))
    raise TypeError(f"config must be a dict or a config object, got {type(config).__name__}.")


def _as_state_dict(state_dict) -> dict:
    if isinstance(state_dict, nn.Module):
        return state_dict.state_dict()
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"state_dict must be a mapping of names to tensors, got {type(state_dict).__name__}.")
    return dict(state_dict)


def _check_keys(caller: str, state_dict: Mapping, expected_shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Raise one ValueError naming every unknown, missing and mis-shaped key."""
    unknown = sorted(key for key in state_dict if key not in expected_shapes)
    missing = sorted(key for key in expected_shapes if key not in state_dict)
    misshaped = []
    for key in sorted(set(state_dict) & set(expected_shapes)):
        value = state_dict[key]
        if not isinstance(value, torch.Tensor):
            misshaped.append(f"{key}: not a tensor ({type(value).__name__})")
        elif tuple(value.shape) != expected_shapes[key]:
            misshaped.append(f"{key}: shape {tuple(value.shape)}, expected {expected_shapes[key]}")
        elif not value.is_floating_point():
            misshaped.append(f"{key}: dtype {value.dtype}, expected a floating-point tensor")
    if not (unknown or missing or misshaped):
        return
    problems = []
    if unknown:
        problems.append(f"unknown keys ({len(unknown)}): {unknown}")
    if missing:
        problems.append(f"missing keys ({len(missing)}): {missing}")
    if misshaped:
        problems.append(f"mis-shaped keys ({len(misshaped)}): {misshaped}")
    raise ValueError(
        f"{caller}: the checkpoint does not match the model described by the config; nothing was loaded.\n  "
        + "\n  ".join(problems)
    )


def _same_table(given: torch.Tensor, computed: torch.Tensor) -> bool:
    # Both tables are computed in float64 and rounded; allow a few units of the checkpoint's precision.
    tolerance = 4 * torch.finfo(given.dtype).eps
    return torch.allclose(given.double(), computed.double(), rtol=0.0, atol=tolerance)


def _load(
    model: TransformerModel,
    target: dict,
    rules: Mapping[str, _Rule],
    source: Mapping[str, torch.Tensor],
    keep: tuple[str, ...],
) -> None:
    """Fill ``target`` (the model's own state dict) from ``source`` through ``rules`` and load it strictly.

    Every key of the model must come from a rule, except those under a prefix in ``keep``, which keep
    their fresh initialisation. A key covered neither way means the converter no longer matches the
    model's layout, which must not pass silently.
    """
    uncovered = sorted(key for key in target if key not in rules and not key.startswith(keep))
    extra = sorted(key for key in rules if key not in target)
    if uncovered or extra:
        raise RuntimeError(
            f"hf_transformer.convert is out of date with TransformerModel: parameters without a source "
            f"{uncovered}, sources without a parameter {extra}."
        )
    state = dict(target)
    with torch.no_grad():
        for key, rule in rules.items():
            state[key] = rule(source).detach()
    model.load_state_dict(state, strict=True)


__all__ = ["from_seed", "from_book", "seed_config", "book_config"]
