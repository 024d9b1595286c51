# Copyright 2026 The hf_transformer Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Configuration of the encoder-decoder Transformer of "Attention Is All You Need".

The canonical field names follow BART (``d_model``, ``encoder_layers``, ...), because transformers'
generation and cache utilities read those. The names of the seed tutorial (``d_hidn``, ``n_head``,
``n_enc_vocab``, ...) and the HF standard names (``hidden_size``, ``num_hidden_layers``, ...) are
aliases: they are accepted by the constructor and read and written through ``attribute_map``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import difflib
import inspect
import logging
import math
import warnings

from transformers import GenerationConfig, PretrainedConfig

logger = logging.getLogger(__name__)

LAYER_NORM_POSITIONS = ("post", "pre")
POSITION_EMBEDDING_TYPES = ("sinusoidal", "learned")
ACTIVATION_FUNCTIONS = ("relu", "gelu")
CLASSIFIER_POOLINGS = ("mean", "max", "first", "decoder")
INIT_METHODS = ("normal", "xavier_uniform")

# The loss a classifier computes (transformers' names, read by `TransformerForSequenceClassification`).
PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")

# alias -> canonical field. One-to-one aliases only; ``n_layer`` and ``num_hidden_layers`` given to the
# constructor set both stacks and are handled in ``__post_init__``.
_ALIASES = {
    # seed tutorial names
    "n_enc_vocab": "vocab_size",
    "n_dec_vocab": "decoder_vocab_size",
    "n_enc_seq": "max_position_embeddings",
    "n_dec_seq": "decoder_max_position_embeddings",
    "d_hidn": "d_model",
    "n_head": "num_attention_heads",
    "d_head": "head_dim",
    "d_ff": "intermediate_size",
    "i_pad": "pad_token_id",
    # HF standard / BART names
    "hidden_size": "d_model",
    "encoder_attention_heads": "num_attention_heads",
    "decoder_attention_heads": "num_attention_heads",
    "encoder_ffn_dim": "intermediate_size",
    "decoder_ffn_dim": "intermediate_size",
    "ffn_dim": "intermediate_size",
    "layer_norm_eps": "layer_norm_epsilon",
}
_BOTH_STACK_LAYER_ALIASES = ("n_layer", "num_hidden_layers")


def _base_config_keys() -> frozenset[str]:
    """Keys that ``PretrainedConfig`` itself owns, read off the installed base class: its dataclass fields, what
    it writes into config.json, and its settable properties (``num_labels``, ``torch_dtype``...; a private
    property such as ``_attn_implementation`` is set through its public name ``attn_implementation``)."""
    keys = {field.name for field in dataclasses.fields(PretrainedConfig)}
    keys.update(PretrainedConfig().to_dict())
    for name, member in inspect.getmembers(PretrainedConfig):
        if isinstance(member, property) and member.fset is not None:
            keys.update((name, name.lstrip("_")))
    return frozenset(keys)


# Keys `PretrainedConfig` no longer declares but transformers still reads off a config by name, so a person may
# set them on any config: `AutoTokenizer` takes `config.tokenizer_class` when a folder's tokenizer_config.json
# names no class.
_ECOSYSTEM_KEYS = frozenset({"tokenizer_class"})

_BASE_KEYS = _base_config_keys() | _ECOSYSTEM_KEYS

# Set while a config is read back from a dictionary or config.json (`from_dict`, `from_json_file`, and
# `from_pretrained` through `from_dict`): unknown keys are then kept as attributes, as `PretrainedConfig` keeps
# them, because other tools and users add attributes to configs before saving. Only what a person passes to
# the constructor is checked for misspellings.
_READING_SAVED_CONFIG: contextvars.ContextVar[bool] = contextvars.ContextVar("_READING_SAVED_CONFIG", default=False)


# Saved class name -> the `transformers.Pipeline` class that serves its folders, registered in transformers'
# PIPELINE_REGISTRY (`hf_transformer` registers its translation pipeline for the seq2seq class on import). A folder
# saved with one names it in `custom_pipelines` and carries its code: see `hf_transformer.checkpoint`.
_FOLDER_PIPELINES: dict[str, type] = {}


def _served_here(custom_pipelines: dict) -> dict:
    """The entries of a saved folder's ``custom_pipelines`` whose task a pipeline registered here does not serve."""
    served = {task for pipeline in _FOLDER_PIPELINES.values() for task in pipeline._registered_impl}
    return {task: entry for task, entry in custom_pipelines.items() if task not in served}


@contextlib.contextmanager
def _reading_saved_config():
    token = _READING_SAVED_CONFIG.set(True)
    try:
        yield
    finally:
        _READING_SAVED_CONFIG.reset(token)


class TransformerConfig(PretrainedConfig):
    r"""Configuration of [`TransformerModel`] and its heads.

    Defaults are the seed tutorial's model (d_model 256, 6 + 6 post-LN layers, 4 heads of 64, GELU,
    frozen sinusoid positions, vocabulary 8007, pad id 0). [`paper_base`], [`paper_big`] and
    [`seed_tutorial`] build the ready configurations.

    Sizes:
        vocab_size (`n_enc_vocab`): encoder vocabulary. decoder_vocab_size (`n_dec_vocab`): decoder and
        output vocabulary, defaults to ``vocab_size``. max_position_embeddings (`n_enc_seq`) and
        decoder_max_position_embeddings (`n_dec_seq`): longest sequences. d_model (`d_hidn`,
        `hidden_size`). encoder_layers / decoder_layers (`n_layer` or `num_hidden_layers` set both).
        num_attention_heads (`n_head`). head_dim (`d_head`): per-head size; ``num_attention_heads *
        head_dim`` need not equal ``d_model``; when omitted it is ``d_model // num_attention_heads``.
        intermediate_size (`d_ff`): feed-forward size.
    Regularisation:
        dropout (residual branches and embeddings), attention_dropout (attention probabilities, defaults
        to ``dropout`` as in the seeds), activation_dropout (inside the feed-forward),
        classifier_dropout (defaults to ``dropout``), label_smoothing (seq2seq loss).
    Speed:
        fused_output_loss: in training, when ``labels`` are given, compute the output projection and the
        cross-entropy together, a few hundred rows at a time, without materialising the (batch, length,
        vocabulary) logits; the output's ``logits`` is then None. Same loss and gradients; set False to get
        the logits in training as well. Evaluation and generation always return logits.
    Architecture options:
        layer_norm_position: "post" (paper) or "pre" (book-style). position_embedding_type:
        "sinusoidal" (frozen table, position 0 reserved for padding, tokens numbered from 1) or
        "learned" (numbered from 0). embedding_layer_norm: LayerNorm after the embedding sum.
        scale_embedding: multiply token embeddings by sqrt(d_model). final_layer_norm: LayerNorm after
        each stack (defaults to True for pre-LN, False for post-LN). activation_function: "relu" or
        "gelu". share_embeddings: one token table for encoder and decoder. tie_word_embeddings: output
        projection tied to the decoder token table. classifier_pooling: "mean", "max" (over non-pad
        encoder tokens), "first" (first encoder token) or "decoder" (the seed tutorial's way: the
        decoder reads one start token over the encoder output, max-pooled).
    Initialisation (of a new model; loaded weights are never drawn again):
        init_method: "normal" (every projection from N(0, init_std), as BART) or "xavier_uniform" (the
        attention and feed-forward projections Glorot-uniform, as tensor2tensor, fairseq and the Annotated
        Transformer draw them, the query, key and value projections with gain 1/sqrt(2) as fairseq does; the
        heads' own projections stay normal). Token and position tables are drawn with std d_model^-0.5 either way.

    Unknown keyword arguments raise ``ValueError`` (with the closest known name), so a misspelled
    option never passes silently. A config read back from a dictionary or config.json (``from_dict``,
    ``from_json_file``, ``from_pretrained``) keeps unknown keys as attributes instead, as ``PretrainedConfig``
    does, and saves them again: other tools and users add attributes to a config before saving it (a key close
    to a known setting is logged as a warning). Generation settings (``num_beams``, ``max_length``...) belong on
    ``model.generation_config``; given here they are dropped with a warning.
    """

    model_type = "hf_transformer"
    # Trainer puts every output field not named here into its predictions: the cache and the encoder states that
    # the heads return beside their logits are not predictions.
    keys_to_ignore_at_inference = ["past_key_values", "cache", "encoder_last_hidden_state", "last_hidden_state"]
    attribute_map = dict(_ALIASES, num_hidden_layers="encoder_layers")

    vocab_size: int = 8007
    decoder_vocab_size: int | None = None
    max_position_embeddings: int = 256
    decoder_max_position_embeddings: int | None = None
    d_model: int = 256
    encoder_layers: int = 6
    decoder_layers: int = 6
    num_attention_heads: int = 4
    head_dim: int | None = None
    intermediate_size: int = 1024
    dropout: float | int = 0.1
    attention_dropout: float | int | None = None
    activation_dropout: float | int = 0.0
    classifier_dropout: float | int | None = None
    label_smoothing: float | int = 0.0
    layer_norm_epsilon: float = 1e-12
    embedding_layer_norm_epsilon: float | None = None
    layer_norm_position: str = "post"
    position_embedding_type: str = "sinusoidal"
    embedding_layer_norm: bool = False
    scale_embedding: bool = False
    final_layer_norm: bool | None = None
    activation_function: str = "gelu"
    share_embeddings: bool = True
    tie_word_embeddings: bool = True
    classifier_pooling: str = "mean"
    fused_output_loss: bool = True
    init_std: float = 0.02
    init_method: str = "normal"
    use_cache: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 2
    eos_token_id: int | None = 3
    decoder_start_token_id: int | None = None
    is_encoder_decoder: bool = True

    def __post_init__(self, **kwargs):
        kwargs = self._apply_aliases(kwargs)
        if isinstance(kwargs.get("custom_pipelines"), dict):
            # The package's own pipelines serve their tasks where it is installed: a saved folder's entries for them
            # are for remote code only, and read here they would make transformers ask for trust_remote_code.
            kwargs["custom_pipelines"] = _served_here(kwargs["custom_pipelines"])
            if not kwargs["custom_pipelines"]:
                del kwargs["custom_pipelines"]
        self._reject_unknown(kwargs)
        self._fill_defaults()
        self._validate()
        super().__post_init__(**kwargs)

    # -- construction helpers -------------------------------------------------------------------
    def _apply_aliases(self, kwargs: dict) -> dict:
        for alias in _BOTH_STACK_LAYER_ALIASES:
            if alias not in kwargs:
                continue
            value = kwargs.pop(alias)
            fields = type(self).__dataclass_fields__
            conflicts = [
                f"`{field}`={current!r}"
                for field in ("encoder_layers", "decoder_layers")
                if (current := object.__getattribute__(self, field)) != fields[field].default and current != value
            ]
            if conflicts and _READING_SAVED_CONFIG.get():
                # A saved config's own stack depths are what its weights were saved with.
                logger.warning("TransformerConfig: saved `%s`=%r ignored; %s kept.", alias, value, ", ".join(conflicts))
                continue
            if conflicts:
                raise ValueError(
                    f"TransformerConfig: `{alias}`={value!r} sets both stacks and conflicts with "
                    f"{' and '.join(conflicts)}; give the depth once (or encoder_layers and decoder_layers alone)."
                )
            self.encoder_layers = value
            self.decoder_layers = value
        for alias, field in _ALIASES.items():
            if alias not in kwargs:
                continue
            value = kwargs.pop(alias)
            current = object.__getattribute__(self, field)
            default = type(self).__dataclass_fields__[field].default
            if current != default and current != value:
                raise ValueError(
                    f"TransformerConfig: `{alias}`={value!r} conflicts with `{field}`={current!r}; "
                    f"they name the same setting, give only one."
                )
            object.__setattr__(self, field, value)
        return kwargs

    def _reject_unknown(self, kwargs: dict) -> None:
        generation_keys = set(GenerationConfig._get_default_generation_params())
        ignored = sorted(k for k in kwargs if k in generation_keys)
        if ignored:
            warnings.warn(
                f"TransformerConfig: generation settings {ignored} are ignored here; set them on "
                "`model.generation_config` instead.",
                stacklevel=4,
            )
        unknown = sorted(k for k in kwargs if k not in generation_keys and k not in _BASE_KEYS)
        if not unknown:
            return
        known = sorted(set(self.__dataclass_fields__) | set(_ALIASES) | set(_BOTH_STACK_LAYER_ALIASES) | _BASE_KEYS)
        hints = {key: difflib.get_close_matches(key, known, n=1) for key in unknown}
        described = [f"`{key}`" + (f" (did you mean `{close[0]}`?)" if close else "") for key, close in hints.items()]
        # `model_type` is written by `to_dict()` into every saved config and is never a setting one types:
        # `TransformerConfig(**config.to_dict())` and `AutoConfig.for_model(...)` read a saved config too.
        if not _READING_SAVED_CONFIG.get() and "model_type" not in kwargs:
            raise ValueError(f"TransformerConfig got unknown argument(s): {', '.join(described)}.")
        # Read back from a saved config: kept as attributes (the base class sets them in `__post_init__`). One
        # that looks like a misspelled setting is worth a warning; another tool's own attribute is not.
        misspelt = [key for key in unknown if difflib.get_close_matches(key, known, n=1, cutoff=0.8)]
        if misspelt:
            logger.warning(
                "TransformerConfig: config keys that look like misspelled settings are kept as attributes but not "
                "used: %s.",
                ", ".join(text for key, text in zip(unknown, described) if key in misspelt),
            )
        logger.info("TransformerConfig: keeping keys it does not use as attributes: %s", ", ".join(unknown))

    def _fill_defaults(self) -> None:
        if self.decoder_vocab_size is None:
            self.decoder_vocab_size = self.vocab_size
        if self.decoder_max_position_embeddings is None:
            self.decoder_max_position_embeddings = self.max_position_embeddings
        if self.attention_dropout is None:
            self.attention_dropout = self.dropout
        if self.classifier_dropout is None:
            self.classifier_dropout = self.dropout
        if self.embedding_layer_norm_epsilon is None:
            self.embedding_layer_norm_epsilon = self.layer_norm_epsilon
        if self.final_layer_norm is None:
            self.final_layer_norm = self.layer_norm_position == "pre"
        if self.decoder_start_token_id is None:
            self.decoder_start_token_id = self.bos_token_id
        if self.head_dim is None and _is_positive_int(self.d_model) and _is_positive_int(self.num_attention_heads):
            if self.d_model % self.num_attention_heads:
                raise ValueError(
                    f"TransformerConfig: `d_model` ({self.d_model}) must be divisible by "
                    f"`num_attention_heads` ({self.num_attention_heads}) when `head_dim` is not given; "
                    "pass `head_dim` (`d_head`) explicitly to use another per-head size."
                )
            self.head_dim = self.d_model // self.num_attention_heads

    def _validate(self) -> None:
        if _READING_SAVED_CONFIG.get() and self.problem_type not in _CHOICES["problem_type"]:
            # Saved before assignments were checked (the classifier then trained with binary cross-entropy, its
            # fallback): the folder still loads, and the loss is chosen from the labels, as for None.
            logger.warning(
                "TransformerConfig: the saved `problem_type` %r is not one of %s; it is read as None (the loss is "
                "chosen from the labels).",
                self.problem_type,
                list(PROBLEM_TYPES),
            )
            object.__setattr__(self, "problem_type", None)
        for name in _CHECKED_FIELDS:
            _check_setting(name, getattr(self, name))
        if self.share_embeddings and self.vocab_size != self.decoder_vocab_size:
            raise ValueError(
                "TransformerConfig: `share_embeddings=True` needs one vocabulary, but `vocab_size` "
                f"(n_enc_vocab) is {self.vocab_size} and `decoder_vocab_size` (n_dec_vocab) is "
                f"{self.decoder_vocab_size}; set share_embeddings=False or make them equal."
            )
        smallest_vocab = min(self.vocab_size, self.decoder_vocab_size)
        for name in _TOKEN_IDS:
            value = getattr(self, name)
            if value is not None and not value < smallest_vocab:
                raise ValueError(f"TransformerConfig: `{name}` must be an id in [0, {smallest_vocab}), got {value!r}.")
        if self.decoder_start_token_id is None:
            raise ValueError("TransformerConfig: set `decoder_start_token_id` or `bos_token_id`.")
        if self.decoder_start_token_id == self.pad_token_id:
            raise ValueError(
                f"TransformerConfig: `decoder_start_token_id` ({self.decoder_start_token_id}) equals "
                "`pad_token_id`; the start token would be treated as padding. Use a separate start token."
            )

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        with _reading_saved_config():
            return super().from_dict(config_dict, **kwargs)

    @classmethod
    def from_json_file(cls, json_file):
        with _reading_saved_config():
            return super().from_json_file(json_file)

    def __setattr__(self, key, value):
        # After construction, an assignment is checked as the constructor checks that setting, so that a typo
        # raises where it is made instead of in a later forward pass, or in `from_pretrained` of the saved folder.
        # `_post_init_done` is set by `PretrainedConfig.__post_init__`, after this class's own checks (a private
        # attribute of transformers, pinned in tests/test_private_hooks.py).
        name = type(self).attribute_map.get(key, key)
        if name not in _CHECKED_FIELDS or not self.__dict__.get("_post_init_done", False):
            super().__setattr__(key, value)
            return
        if value is None and name in _DERIVED_WHEN_NONE:
            super().__setattr__(key, value)
            self._fill_defaults()
            return
        try:
            _check_setting(name, value)
        except ValueError as error:
            if key == name:
                raise
            raise ValueError(f"{error} (assigned as `{key}`)") from None
        super().__setattr__(key, value)

    def validate(self) -> None:
        """Every check of the constructor (`PretrainedConfig.save_pretrained` calls this before writing): a config
        that would not load is refused before it is saved, with the setting it names."""
        super().validate()
        self._validate()

    # -- seed-style names that are not one-to-one aliases ----------------------------------------
    @property
    def n_layer(self) -> int:
        if self.encoder_layers != self.decoder_layers:
            raise AttributeError(
                f"n_layer is ambiguous: encoder_layers={self.encoder_layers}, decoder_layers={self.decoder_layers}"
            )
        return self.encoder_layers

    @n_layer.setter
    def n_layer(self, value: int) -> None:
        self.encoder_layers = value
        self.decoder_layers = value

    @property
    def embed_scale(self) -> float:
        return math.sqrt(self.d_model) if self.scale_embedding else 1.0

    # -- ready configurations ----------------------------------------------------------------------
    @classmethod
    def paper_base(cls, **overrides) -> TransformerConfig:
        """Transformer base of the paper (table 3): d 512, 6 + 6 layers, 8 heads, ffn 2048, post-LN,
        ReLU, scaled and shared embeddings with a tied output projection, label smoothing 0.1."""
        settings = dict(
            vocab_size=37000,
            max_position_embeddings=512,
            d_model=512,
            n_layer=6,
            num_attention_heads=8,
            intermediate_size=2048,
            dropout=0.1,
            layer_norm_epsilon=1e-6,
            activation_function="relu",
            scale_embedding=True,
            layer_norm_position="post",
            label_smoothing=0.1,
        )
        return cls(**{**settings, **overrides})

    @classmethod
    def paper_big(cls, **overrides) -> TransformerConfig:
        """Transformer big of the paper: d 1024, 16 heads, ffn 4096, dropout 0.3."""
        settings = dict(d_model=1024, num_attention_heads=16, intermediate_size=4096, dropout=0.3)
        return cls.paper_base(**{**settings, **overrides})

    @classmethod
    def seed_tutorial(cls, **overrides) -> TransformerConfig:
        """The seed tutorial's config.json, in its own names."""
        settings = dict(
            n_enc_vocab=8007,
            n_dec_vocab=8007,
            n_enc_seq=256,
            n_dec_seq=256,
            n_layer=6,
            d_hidn=256,
            i_pad=0,
            d_ff=1024,
            n_head=4,
            d_head=64,
            dropout=0.1,
            layer_norm_epsilon=1e-12,
        )
        return cls(**{**settings, **overrides})


def _is_positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


# What each setting may hold, checked at construction, on assignment (`config.dropout = 1.5` raises there) and
# before saving, so that a config that was saved always loads. Checks between settings (one shared vocabulary,
# token ids inside it) run at construction, on loading and before saving.
_POSITIVE_INTS = (
    "vocab_size",
    "decoder_vocab_size",
    "max_position_embeddings",
    "decoder_max_position_embeddings",
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "num_attention_heads",
    "head_dim",
    "intermediate_size",
)
_PROBABILITIES = ("dropout", "attention_dropout", "activation_dropout", "classifier_dropout", "label_smoothing")
_POSITIVE_NUMBERS = ("layer_norm_epsilon", "embedding_layer_norm_epsilon", "init_std")
_CHOICES = {
    "layer_norm_position": LAYER_NORM_POSITIONS,
    "position_embedding_type": POSITION_EMBEDDING_TYPES,
    "activation_function": ACTIVATION_FUNCTIONS,
    "classifier_pooling": CLASSIFIER_POOLINGS,
    "init_method": INIT_METHODS,
    "problem_type": (None, *PROBLEM_TYPES),
}
_FLAGS = (
    "embedding_layer_norm",
    "scale_embedding",
    "final_layer_norm",
    "share_embeddings",
    "tie_word_embeddings",
    "fused_output_loss",
    "use_cache",
    "is_encoder_decoder",
)
_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")
_CHECKED_FIELDS = (*_POSITIVE_INTS, *_PROBABILITIES, *_POSITIVE_NUMBERS, *_CHOICES, *_FLAGS, *_TOKEN_IDS)
# Settings whose default is derived from another one: assigning None derives it again, as the constructor does.
_DERIVED_WHEN_NONE = (
    "decoder_vocab_size",
    "decoder_max_position_embeddings",
    "head_dim",
    "attention_dropout",
    "classifier_dropout",
    "embedding_layer_norm_epsilon",
    "final_layer_norm",
    "decoder_start_token_id",
)


def _check_setting(name: str, value) -> None:
    """Raises ``ValueError`` naming ``name`` when ``value`` is not something that setting can hold."""
    if name in _POSITIVE_INTS:
        if not _is_positive_int(value):
            raise ValueError(f"TransformerConfig: `{name}` must be a positive integer, got {value!r}.")
    elif name in _PROBABILITIES:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
            raise ValueError(f"TransformerConfig: `{name}` must be a number in [0, 1), got {value!r}.")
    elif name in _POSITIVE_NUMBERS:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"TransformerConfig: `{name}` must be a positive number, got {value!r}.")
    elif name in _CHOICES:
        if value not in _CHOICES[name]:
            raise ValueError(f"TransformerConfig: `{name}` must be one of {list(_CHOICES[name])}, got {value!r}.")
    elif name in _FLAGS:
        if not isinstance(value, bool):
            raise ValueError(f"TransformerConfig: `{name}` must be True or False, got {value!r}.")
    elif name in _TOKEN_IDS:
        if value is None and name == "pad_token_id":
            raise ValueError("TransformerConfig: `pad_token_id` (i_pad) is required: padding is derived from it.")
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ValueError(f"TransformerConfig: `{name}` must be a token id (an integer >= 0), got {value!r}.")
