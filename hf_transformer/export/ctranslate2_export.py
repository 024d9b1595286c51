"""Conversion of a saved seq2seq folder to a CTranslate2 model folder, and decoding with it.

:func:`to_ctranslate2` runs CTranslate2's own Hugging Face converter (``TransformersConverter``) with a model
loader registered here for ``TransformerConfig``: the loader reuses ``BartLoader``'s helpers (fused attention
projections, linear and LayerNorm weights) and describes this architecture with a
``ctranslate2.specs.TransformerSpec``:

=================================  ==========================================================================
config setting                     CTranslate2 spec
=================================  ==========================================================================
layer_norm_position "post"/"pre"   ``pre_norm`` False / True on both stacks
final_layer_norm                   an output ``layer_norm`` on each stack (CTranslate2 applies one whenever it
                                   is present, also after post-LN layers), else ``no_final_norm``
position_embedding_type            ``position_encodings.encodings``: "learned": the trained table (numbered
                                   from 0); "sinusoidal": rows 1.. of the model's own table (interleaved
                                   sin/cos, row 0 is the padding position), never CTranslate2's built-in
                                   sinusoids, whose sines and cosines lie in two halves
scale_embedding                    ``scale_embeddings`` = ``config.embed_scale`` (sqrt(d_model) or 1)
embedding_layer_norm               ``layernorm_embedding``
activation_function relu / gelu    ``Activation.RELU`` / ``Activation.GELU`` (exact erf GELU, as ``nn.GELU()``)
head_dim                           ``head_dim`` of every attention layer
layer_norm_epsilon                 the model config's ``layer_norm_epsilon`` (one value for every LayerNorm)
share_embeddings / vocabularies    one ``shared_vocabulary.json``, or source and target vocabularies when the
                                   encoder and decoder vocabularies differ in size
decoder_start / eos / bos ids      ``decoder_start_token`` / ``eos_token`` / ``bos_token`` (token strings)
=================================  ==========================================================================

Vocabulary entry ``i`` is the tokenizer's token for id ``i``; ids the tokenizer does not cover (a model
vocabulary larger than the tokenizer's) get placeholder strings ``<ct2_unused_ID>``, so that CTranslate2's token
strings map one to one to the model's ids. The tokenizer files and ``generation_config.json`` are copied into the
output folder, and the model's own config is saved there as ``transformer_config.json``.

:class:`CTranslate2Generator` decodes with the converted folder and returns token ids as ``model.generate`` does
(without the start token). Differences in decoding semantics from ``model.generate``, and how they are matched:

* Length: HF ``max_new_tokens`` = CTranslate2 ``max_decoding_length`` (both count the end token);
  ``min_new_tokens`` = ``min_decoding_length`` (CTranslate2's default is 1, HF's 0: 0 is passed).
* End token: CTranslate2 drops it from its results unless ``return_end_token=True``, which is passed: HF keeps
  it, and CTranslate2 then also counts it in the length used by the length penalty.
* Length penalty: both rank finished beams by ``sum of log-probabilities / length ** length_penalty``, the length
  counting the generated tokens with the end token and without the start token (the same with
  ``return_end_token=True``).
* Stopping of beam search: CTranslate2 stops an input once ``patience * num_beams`` hypotheses have finished
  (with ``length_penalty == 0``, once the best beam finishes, which gives HF's best hypothesis). Patience 1 is HF's
  ``early_stopping=True``, passed for it. HF's default ``early_stopping=False`` goes on while its heuristic says a
  running beam might still beat the worst finished one; CTranslate2 has no such rule, and
  :data:`PATIENCE_FOR_HEURISTIC_STOPPING` finished hypotheses per beam come closest at little cost (the figures are
  in docs/deployment.md), so that patience is passed for ``False`` (and for ``"never"``): the beams then agree with
  generate's for most inputs, not all. The generation config's ``early_stopping`` decides unless the call gives it.
  At the length limit both keep the best ``num_beams`` running beams.
* Padding: CTranslate2 removes the padding of each input: the result equals ``model.generate`` on right-padded
  inputs (left padding shifts the sinusoidal positions of the HF model's real tokens).
* A generated pad token: the HF model gives any pad token in the decoder input the padding position (row 0 of
  the sinusoid table), CTranslate2 its real position; the outputs may part after a generated pad token.
* Processors applied to scores (``min_new_tokens``): HF's beam search applies them after the log-softmax,
  CTranslate2 before it (renormalised): beam scores then differ slightly.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from ..adapters import merged_model_folder
from ..configuration_transformer import TransformerConfig
from ..cpu import cpu_fields
from ..folders import SEQ2SEQ, refuse_replacing
from ..generation import new_tokens_within_position_table
from ..input_checks import check_ids_in_vocabulary, check_sequence_fits
from ..saved_folder import ADAPTER, CTRANSLATE2, CTRANSLATE2_MODEL_CONFIG, FolderError, read_folder

__all__ = ["to_ctranslate2", "CTranslate2Generator", "ctranslate2_generate", "check_convertible"]

SEQ2SEQ_ARCHITECTURE = "TransformerForConditionalGeneration"
# Copied beside the converted model when the saved folder has them: the tokenizer, and HF's generation defaults.
COPIED_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "generation_config.json",
)
PLACEHOLDER = "<ct2_unused_{}>"
MODEL_CONFIG_FILE = CTRANSLATE2_MODEL_CONFIG
PATIENCE_FOR_HEURISTIC_STOPPING = 2.0
"""CTranslate2's beam search patience passed for transformers' ``early_stopping=False``: it stops once twice
``num_beams`` hypotheses have finished."""

# Settings of a folder's generation_config.json, with their defaults, that make `model.generate` sample or change the
# scores (logits processors). `CTranslate2Generator` applies none of them and warns when the folder sets one (it
# returns the saved `num_return_sequences`, as generate does): CTranslate2's own `repetition_penalty`,
# `no_repeat_ngram_size` and `suppress_sequences` are not passed for them, their semantics not having been checked
# against generate's.
IGNORED_GENERATION_SETTINGS = {
    "do_sample": False,
    "no_repeat_ngram_size": 0,
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "bad_words_ids": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "encoder_no_repeat_ngram_size": 0,
    "sequence_bias": None,
    "exponential_decay_length_penalty": None,
}


# CTranslate2 runs its own kernels (the quantization of activations for int8 products, softmax, LayerNorm, the
# elementwise steps) in AVX2 on every CPU that is not Intel's, AVX-512 or not; its matrix products go through oneDNN,
# which picks AVX-512 by itself. On an AMD CPU with AVX-512 the int8 model decodes faster with its kernels in AVX-512
# too (docs/deployment.md), so that ISA is chosen there unless the user has chosen one.
AVX512_FLAGS = ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl")


def prefer_avx512(environ=os.environ, cpuinfo: str | None = None) -> bool:
    """Set ``CT2_FORCE_CPU_ISA=AVX512`` on an AMD CPU with AVX-512 when it is not set; True when it was set here.

    CTranslate2 reads the variable once, when it first picks its kernels (its first model), so this runs before
    anything of CTranslate2 is used. ``cpuinfo``: the text of /proc/cpuinfo (read when None; no change where
    there is none).
    """
    if "CT2_FORCE_CPU_ISA" in environ:
        return False
    fields = cpu_fields(cpuinfo)
    if fields is None:
        return False
    flags = set(fields.get("flags", "").split())
    if fields.get("vendor_id") != "AuthenticAMD" or not flags.issuperset(AVX512_FLAGS):
        return False
    environ["CT2_FORCE_CPU_ISA"] = "AVX512"
    return True


# int8 weights are stored in 7 bits (within +-63, a scale per output row), as the ONNX export stores its own: on a CPU
# whose int8 products sum pairs of uint8 x int8 products in 16 bits (oneDNN's kernels on AVX2 without VNNI, which
# CTranslate2 uses on an AMD CPU), 8-bit weights saturate those sums (255 * 127 * 2 > 32767) and move the
# log-probabilities about ten times as far from float32's; 7 bits fit on every CPU (docs/deployment.md).
INT8_WEIGHT_LIMIT = 63
# CTranslate2's int8 weight types, each with the type of the model's other (unquantized) variables.
INT8_QUANTIZATIONS = {"int8": None, "int8_float32": "float32", "int8_float16": "float16", "int8_bfloat16": "bfloat16"}


def quantize_int8_weights(spec, quantization: str, limit: int = INT8_WEIGHT_LIMIT) -> None:
    """Quantize ``spec``'s weights as CTranslate2's ``quantization`` (one of :data:`INT8_QUANTIZATIONS`) does,
    rounding each weight row to integers within ``+-limit`` (CTranslate2's own: +-127) with its scale beside it; the
    other float variables take the quantization's float type. Variables already aliased (tied) are left as names."""
    from ctranslate2.specs.model_spec import NumpyVariable, Variable, visit_spec

    float_type = INT8_QUANTIZATIONS[quantization]

    def quantize(layer, name, value):
        if not isinstance(value, Variable) or value.is_scalar():
            return
        key = name.split("/")[-1]
        if hasattr(layer, f"{key}_scale"):  # a weight CTranslate2 quantizes
            weight = value.to("float32").numpy()
            largest = np.abs(weight).max(axis=1)
            largest[largest == 0] = limit
            scale = (limit / largest).astype(np.float32)
            setattr(layer, key, NumpyVariable(np.rint(weight * scale[:, None]).astype(np.int8)))
            setattr(layer, f"{key}_scale", NumpyVariable(scale))
        elif float_type is not None and value.dtype in ("float32", "float16", "bfloat16"):
            setattr(layer, key, value.to(float_type))

    visit_spec(spec, quantize)


# CTranslate2's type ids in model.bin (bfloat16 read as its 16 raw bits), and the binary version read here (4.x's).
MODEL_BIN_TYPES = (np.float32, np.int8, np.int16, np.int32, np.float16, np.uint16)
MODEL_BIN_VERSION = 6


def read_model_bin(path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The variables of a CTranslate2 ``model.bin`` by name, and its aliases (a name -> the variable it names).
    Raises ``ValueError`` for a file of another binary version."""
    data = Path(path).read_bytes()
    at = 0

    def take(fmt: str):
        nonlocal at
        values = struct.unpack_from(fmt, data, at)
        at += struct.calcsize(fmt)
        return values[0] if len(values) == 1 else values

    def string() -> str:  # a length (the closing NUL counted), then the bytes
        nonlocal at
        length = take("H")
        at += length
        return data[at - length : at - 1].decode()

    version = take("I")
    if version != MODEL_BIN_VERSION:
        raise ValueError(f"{path}: CTranslate2 binary version {version}; this reader knows {MODEL_BIN_VERSION}")
    string(), take("I")  # the spec's name and revision
    variables = {}
    for _ in range(take("I")):
        name = string()
        shape = [take("I") for _ in range(take("B"))]
        dtype, size = MODEL_BIN_TYPES[take("B")], take("I")
        variables[name] = np.frombuffer(data, dtype, size // np.dtype(dtype).itemsize, at).reshape(shape)
        at += size
    aliases = {}
    for _ in range(take("I")):
        alias = string()
        aliases[alias] = string()
    return variables, aliases


VNNI_FLAGS = ("avx512_vnni", "avx_vnni")


def int8_products_saturate(environ=os.environ, cpuinfo: str | None = None) -> bool:
    """Whether CTranslate2's int8 products on this CPU sum pairs of 8-bit products in 16 bits: oneDNN's kernels,
    which CTranslate2 takes on an AMD CPU (unless ``CT2_USE_MKL=1``), on a CPU without VNNI."""
    if environ.get("CT2_USE_MKL") == "1":
        return False
    fields = cpu_fields(cpuinfo)
    if fields is None or fields.get("vendor_id") != "AuthenticAMD":
        return False
    return not set(fields.get("flags", "").split()).intersection(VNNI_FLAGS)


def weights_fit_int8_products(model_dir) -> bool:
    """Whether a CTranslate2 folder's weights are int8 within 7 bits (:func:`to_ctranslate2`'s int8 export). Float
    weights are not: CTranslate2 rounds them to 8 bits when it loads them for an int8 compute type."""
    variables, _ = read_model_bin(Path(model_dir) / "model.bin")
    matrices = [value for value in variables.values() if value.dtype == np.int8 and value.ndim == 2]
    return bool(matrices) and all(np.abs(m.astype(np.int16)).max() <= INT8_WEIGHT_LIMIT for m in matrices)


def _ctranslate2():
    prefer_avx512()
    try:
        import ctranslate2
        import ctranslate2.converters.transformers  # noqa: F401  (the converter and its loaders)
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError('CTranslate2 export needs the `ctranslate2` package: pip install -e ".[export]"') from error
    _register_loader()
    return ctranslate2


# ---------------------------------------------------------------------------------------------------
# What CTranslate2 can represent
# ---------------------------------------------------------------------------------------------------


def check_convertible(config: TransformerConfig) -> None:
    """Raises ``ValueError`` naming the setting if ``config`` describes a model CTranslate2 cannot run as it is;
    returns None otherwise. Dropout settings are ignored: they do nothing at inference."""
    architectures = list(getattr(config, "architectures", None) or [])
    if architectures and SEQ2SEQ_ARCHITECTURE not in architectures:
        raise ValueError(
            f"CTranslate2 export converts seq2seq models ({SEQ2SEQ_ARCHITECTURE}) only; this folder holds "
            f"{', '.join(architectures)} (`architectures` in config.json)."
        )
    if config.layer_norm_position not in ("post", "pre"):
        raise ValueError(
            f"CTranslate2 export: `layer_norm_position`={config.layer_norm_position!r} is not supported "
            "(only 'post' and 'pre')."
        )
    if config.position_embedding_type not in ("sinusoidal", "learned"):
        raise ValueError(
            f"CTranslate2 export: `position_embedding_type`={config.position_embedding_type!r} is not supported "
            "(only 'sinusoidal' and 'learned')."
        )
    if config.activation_function not in _activations():
        raise ValueError(
            f"CTranslate2 export: `activation_function`={config.activation_function!r} has no CTranslate2 "
            f"equivalent here (supported: {sorted(_activations())})."
        )
    if config.embedding_layer_norm and config.embedding_layer_norm_epsilon != config.layer_norm_epsilon:
        raise ValueError(
            "CTranslate2 export: `embedding_layer_norm_epsilon` "
            f"({config.embedding_layer_norm_epsilon}) differs from `layer_norm_epsilon` "
            f"({config.layer_norm_epsilon}); CTranslate2 uses one epsilon for every LayerNorm."
        )
    if config.eos_token_id is None:
        raise ValueError(
            "CTranslate2 export: `eos_token_id` is None; CTranslate2 needs an end token to stop decoding on."
        )
    if config.decoder_start_token_id is None:
        raise ValueError("CTranslate2 export: `decoder_start_token_id` is None; the decoder needs a start token.")


def _activations() -> dict:
    from ctranslate2.specs import common_spec

    # nn.GELU() (the model's "gelu") is the exact, erf-based GELU: CTranslate2's GELU, not GELUTanh.
    return {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}


# ---------------------------------------------------------------------------------------------------
# The loader registered with CTranslate2's Transformers converter
# ---------------------------------------------------------------------------------------------------

_LOADER_REGISTERED = False


def _register_loader() -> None:
    """Registers :class:`TransformerLoader` for ``TransformerConfig`` with ``TransformersConverter`` (once)."""
    global _LOADER_REGISTERED
    if _LOADER_REGISTERED:
        return
    from ctranslate2.converters import transformers as ct2_transformers
    from ctranslate2.specs import transformer_spec

    class SevenBitInt8TransformerSpec(transformer_spec.TransformerSpec):
        """``TransformerSpec`` whose int8 quantizations round the weights within 7 bits
        (:func:`quantize_int8_weights`); every other quantization is CTranslate2's own."""

        def optimize(self, quantization=None):
            if quantization not in INT8_QUANTIZATIONS:
                return super().optimize(quantization=quantization)
            super().optimize(quantization=None)  # ties variables of equal values, as before CTranslate2's quantizing
            quantize_int8_weights(self, quantization, INT8_WEIGHT_LIMIT)  # read when called: a benchmark sets 127

    class TransformerLoader(ct2_transformers.BartLoader):
        """``BartLoader`` with this package's module names, head size, positions and vocabularies."""

        @property
        def architecture_name(self):
            # The converter looks the name up in `transformers`; `get_model_class` then gives this package's class.
            return "AutoModelForSeq2SeqLM"

        def get_model_class(self, config, model_class):
            from ..modeling_transformer import TransformerForConditionalGeneration

            return TransformerForConditionalGeneration

        def get_model_spec(self, model):
            config = model.config
            check_convertible(config)
            activation = _activations()[config.activation_function]
            stack_options = dict(
                pre_norm=True,  # builds the optional final LayerNorm; the real setting is written below
                no_final_norm=not config.final_layer_norm,
                activation=activation,
                layernorm_embedding=config.embedding_layer_norm,
                head_dim=config.head_dim,
            )
            encoder = transformer_spec.TransformerEncoderSpec(
                config.encoder_layers, config.num_attention_heads, **stack_options
            )
            decoder = transformer_spec.TransformerDecoderSpec(
                config.decoder_layers, config.num_attention_heads, **stack_options
            )
            # Post-LN: LayerNorm after each residual sum. CTranslate2 applies a stack's `layer_norm` whenever it is
            # present, so a final LayerNorm after post-LN layers is represented too.
            encoder.pre_norm = decoder.pre_norm = config.layer_norm_position == "pre"
            spec = SevenBitInt8TransformerSpec(encoder, decoder)

            self.set_encoder(spec.encoder, model.model.encoder)
            self.set_decoder(spec.decoder, model.model.decoder)
            self.set_linear(spec.decoder.projection, model.lm_head)
            return spec

        def set_config(self, config, model, tokenizer):
            tokens = _id_to_token(tokenizer, _vocabulary_size(model.config))
            model_config = model.config
            # The BOS token is only read for `add_source_bos`, which is off; it must still name a token.
            bos_id = model_config.bos_token_id
            config.bos_token = tokens[bos_id if bos_id is not None else model_config.decoder_start_token_id]
            config.eos_token = tokens[model_config.end_token_ids[0]]  # the model's own; the others stop it too
            config.decoder_start_token = tokens[model_config.decoder_start_token_id]
            # The unknown token must be in both vocabularies, or CTranslate2 appends it (one row too many).
            smallest = min(model_config.vocab_size, model_config.decoder_vocab_size)
            unk_id = tokenizer.unk_token_id
            config.unk_token = tokens[unk_id if unk_id is not None and unk_id < smallest else model_config.pad_token_id]
            config.layer_norm_epsilon = float(model_config.layer_norm_epsilon)
            config.add_source_bos = False
            config.add_source_eos = False

        def get_vocabulary(self, model, tokenizer):
            return _id_to_token(tokenizer, _vocabulary_size(model.config))

        def set_vocabulary(self, spec, tokens):
            (source_size,) = spec.get_source_vocabulary_size()
            spec.register_source_vocabulary(tokens[:source_size])
            spec.register_target_vocabulary(tokens[: spec.get_target_vocabulary_size()])

        def set_encoder(self, spec, encoder):
            self.set_common_layers(spec, encoder)
            for layer_spec, layer in zip(spec.layer, encoder.layers):
                self.set_attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
                self.set_layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_sublayer.layer_norm)
                self.set_feed_forward(layer_spec.ffn, layer)

        def set_decoder(self, spec, decoder):
            self.set_common_layers(spec, decoder)
            for layer_spec, layer in zip(spec.layer, decoder.layers):
                self.set_attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
                self.set_layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_sublayer.layer_norm)
                self.set_attention(layer_spec.attention, layer.cross_attn, self_attention=False)
                self.set_layer_norm(layer_spec.attention.layer_norm, layer.cross_attn_sublayer.layer_norm)
                self.set_feed_forward(layer_spec.ffn, layer)

        def set_feed_forward(self, spec, layer):
            self.set_linear(spec.linear_0, layer.feed_forward.fc1)
            self.set_linear(spec.linear_1, layer.feed_forward.fc2)
            self.set_layer_norm(spec.layer_norm, layer.feed_forward_sublayer.layer_norm)

        def set_common_layers(self, spec, stack):
            embeddings = stack.embeddings
            spec.scale_embeddings = float(embeddings.embed_scale)
            self.set_embeddings(
                spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings, embeddings.embed_tokens
            )
            if embeddings.position_embedding_type == "sinusoidal":
                # The model's own table: tokens are numbered from 1, row 0 is the padding position.
                spec.position_encodings.encodings = embeddings.position_table[1:].detach().float().contiguous()
            else:
                self.set_position_encodings(spec.position_encodings, embeddings.position_embeddings)
            if embeddings.layer_norm is not None:
                self.set_layer_norm(spec.layernorm_embedding, embeddings.layer_norm)
            if stack.layer_norm is not None:
                self.set_layer_norm(spec.layer_norm, stack.layer_norm)

    ct2_transformers.register_loader(TransformerConfig.__name__)(TransformerLoader)
    _LOADER_REGISTERED = True


def _vocabulary_size(config: TransformerConfig) -> int:
    return max(config.vocab_size, config.decoder_vocab_size)


def _id_to_token(tokenizer, size: int) -> list[str]:
    """Token strings for ids 0..size-1: the tokenizer's, or a unique placeholder where it has none."""
    tokens = [PLACEHOLDER.format(i) for i in range(size)]
    for token, index in tokenizer.get_vocab().items():
        if 0 <= index < size:
            tokens[index] = token
    if len(set(tokens)) != size:
        duplicated = sorted({token for token in tokens if tokens.count(token) > 1})
        raise ValueError(f"CTranslate2 export: token strings used for more than one id: {duplicated[:5]}")
    return tokens


# ---------------------------------------------------------------------------------------------------
# Conversion
# ---------------------------------------------------------------------------------------------------


def to_ctranslate2(model_dir, output_dir, quantization: str | None = None, force: bool = False) -> Path:
    """Converts ``model_dir`` (written by ``TransformerForConditionalGeneration.save_pretrained``, with its
    tokenizer; or a LoRA adapter folder, merged into its base model first: :mod:`hf_transformer.adapters`; or the
    :class:`~hf_transformer.saved_folder.SavedFolder` read from either) to a CTranslate2 model folder ``output_dir``
    and returns its path.

    ``quantization`` is CTranslate2's weight type (None keeps float32; "int8", "int8_float32", "int16",
    "float16", "bfloat16", ...); int8 weights are stored in 7 bits, which every CPU's int8 products hold
    (:func:`quantize_int8_weights`). ``force`` replaces an existing ``output_dir``. Raises ``ValueError`` for a folder
    that is not a seq2seq model or a setting CTranslate2 cannot represent (see :func:`check_convertible`).
    """
    _ctranslate2()
    from ctranslate2.converters.transformers import TransformersConverter

    folder = read_folder(model_dir, hub=False)
    model_dir, output_dir = Path(folder.path), Path(output_dir)
    if folder.kind == CTRANSLATE2:
        raise FolderError(f"{model_dir} is already a CTranslate2 model")
    folder.check("to_ctranslate2", (SEQ2SEQ,))
    if folder.kind == ADAPTER:  # LoRA adapters (peft): merged into their base model first
        with merged_model_folder(model_dir, output_dir) as merged:
            return to_ctranslate2(merged, output_dir, quantization=quantization, force=force)
    config = TransformerConfig.from_pretrained(model_dir)
    check_convertible(config)
    if output_dir.exists() and not force:
        raise FileExistsError(f"{output_dir} already exists; pass force=True (--force) to replace it.")
    refuse_replacing(model_dir, output_dir, "model folder")
    folder.check("to_ctranslate2", (SEQ2SEQ,), tokenizer=True)

    copied = [name for name in COPIED_FILES if (model_dir / name).is_file()]
    converter = TransformersConverter(str(model_dir), copy_files=copied)
    converter.convert(str(output_dir), quantization=quantization, force=force)
    # CTranslate2 writes its own config.json; the model's (position tables, ids, labels) goes beside it.
    config.to_json_file(output_dir / MODEL_CONFIG_FILE)
    return output_dir


# ---------------------------------------------------------------------------------------------------
# Decoding with the converted folder
# ---------------------------------------------------------------------------------------------------


def _read_json(path: Path):
    with open(path, encoding="utf-8") as file:
        return json.load(file)


@contextlib.contextmanager
def _keeping_torch_threads() -> Iterator[None]:
    """Building a translator sets the calling thread's OpenMP thread count to its `intra_threads`, which torch
    shares: without this, one-thread workers would leave the rest of the process's torch at one thread. (Decoding
    runs on the workers' own threads and leaves the caller's count alone.)"""
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def _device_and_index(device: str) -> tuple[str, int]:
    """torch's device names ("cpu", "cuda", "cuda:1") as CTranslate2's device and device index."""
    kind, colon, index = str(device).partition(":")
    if kind not in ("cpu", "cuda", "auto") or (colon and not index.isdigit()):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N' for CTranslate2, got {device!r}")
    return kind, int(index or 0)


def check_ids_in_rows(rows: Sequence[Sequence[int]], vocab_size: int) -> None:
    """Rows of ids of any lengths, checked as the model checks its ids (a list index would read -1 as the last
    token)."""
    check_ids_in_vocabulary(torch.tensor([i for row in rows for i in row], dtype=torch.long), vocab_size)


class CTranslate2Generator:
    """A ``ctranslate2.Translator`` over a folder written by :func:`to_ctranslate2`, speaking token ids.

    ``generate`` returns, per input, the generated ids as ``model.generate`` does, without the start token and
    without padding (the end token included when it was generated). Defaults for ``num_beams``,
    ``max_new_tokens``, ``min_new_tokens`` and ``length_penalty`` come from the copied ``generation_config.json``.
    The folder's other generation settings that ``model.generate`` would apply (:data:`IGNORED_GENERATION_SETTINGS`:
    ``no_repeat_ngram_size``, ``repetition_penalty``, ``bad_words_ids``, sampling, ...) are not applied: a folder
    that sets one gets a ``UserWarning`` naming them when the generator is built (its translations may then differ
    from generate's), and ``generate`` takes none of them as an argument.

    ``device`` as torch names it: "cpu", "cuda" or "cuda:N" (``compute_type`` as CTranslate2's, e.g. "bfloat16" or
    "int8_bfloat16" on a GPU).

    Threads (CTranslate2's two kinds): ``inter_threads`` workers decode parts of a batch in parallel (``generate``
    splits each batch between them unless given ``max_batch_size``), each with ``intra_threads`` threads inside
    its matrix products. For the small products of step-by-step decoding on a CPU, N workers of one thread are
    the faster use of N cores (docs/deployment.md); :meth:`for_cpu` builds that layout. A translator with several
    ``intra_threads`` also slows torch in the same process while it exists (their OpenMP threads compete).
    """

    def __init__(
        self,
        model_dir,
        device: str = "cpu",
        compute_type: str = "default",
        intra_threads: int = 1,
        inter_threads: int = 1,
    ):
        ctranslate2 = _ctranslate2()
        self.model_dir = Path(model_dir)
        self.inter_threads = inter_threads
        device, device_index = _device_and_index(device)
        with _keeping_torch_threads():
            self.translator = ctranslate2.Translator(
                str(self.model_dir),
                device=device,
                device_index=device_index,
                compute_type=compute_type,
                inter_threads=inter_threads,
                intra_threads=intra_threads,
            )
        if device == "cpu" and self.translator.compute_type.startswith("int8") and int8_products_saturate():
            if not weights_fit_int8_products(self.model_dir):
                warnings.warn(
                    f"CTranslate2Generator: {self.model_dir}'s weights computed in int8 take 8 bits, and this CPU's "
                    "int8 products (oneDNN's, without VNNI) saturate with them: scores move far from float32's. "
                    "Export the folder with quantization='int8' (7-bit weights), or set CT2_USE_MKL=1 before "
                    "CTranslate2 is imported",
                    stacklevel=2,
                )
        if (self.model_dir / "shared_vocabulary.json").is_file():
            self.source_tokens = self.target_tokens = _read_json(self.model_dir / "shared_vocabulary.json")
        else:
            self.source_tokens = _read_json(self.model_dir / "source_vocabulary.json")
            self.target_tokens = _read_json(self.model_dir / "target_vocabulary.json")
        self.target_ids = {token: index for index, token in enumerate(self.target_tokens)}
        ct2_config = _read_json(self.model_dir / "config.json")
        self.eos_token = ct2_config["eos_token"]
        self.eos_token_id = self.target_ids[self.eos_token]
        generation = self.model_dir / "generation_config.json"
        self.generation_config = _read_json(generation) if generation.is_file() else {}
        # Every end token the generation config names (generate stops at any of them), the model's own first.
        ends = self.generation_config.get("eos_token_id")
        ends = [ends] if isinstance(ends, int) else list(ends or [])
        self.end_tokens = [self.eos_token] + [
            self.target_tokens[i] for i in ends if 0 <= i < len(self.target_tokens) and i != self.eos_token_id
        ]
        ignored = sorted(
            name
            for name, default in IGNORED_GENERATION_SETTINGS.items()
            if self.generation_config.get(name, default) not in (default, [], {})
        )
        if ignored:
            warnings.warn(
                f"CTranslate2Generator ignores the generation settings {ignored} of {generation}: its translations "
                "may differ from model.generate's",
                stacklevel=2,
            )
        pad = self.generation_config.get("pad_token_id")
        self.pad_token_id = 0 if pad is None else pad
        model_config = self.model_dir / MODEL_CONFIG_FILE
        model_config = _read_json(model_config) if model_config.is_file() else {}
        self.source_positions = model_config.get("max_position_embeddings")
        self.position_table = model_config.get("decoder_max_position_embeddings")
        self._tokenizer = None

    @classmethod
    def for_cpu(cls, model_dir, threads: int, **kwargs) -> CTranslate2Generator:
        """``threads`` CPU cores used as ``threads`` workers of one thread each (batches split between them)."""
        return cls(model_dir, device="cpu", inter_threads=max(1, threads), intra_threads=1, **kwargs)

    @property
    def tokenizer(self):
        """The tokenizer copied into the folder."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        return self._tokenizer

    def _patience(self, early_stopping: bool | str | None) -> float:
        """CTranslate2's beam search patience for transformers' ``early_stopping`` (the folder's by default)."""
        if early_stopping is None:
            early_stopping = self.generation_config.get("early_stopping", False)
        if early_stopping not in (True, False, "never"):
            raise ValueError(f"early_stopping must be True, False or 'never', got {early_stopping!r}")
        return 1.0 if early_stopping is True else PATIENCE_FOR_HEURISTIC_STOPPING

    def _defaults(self, num_beams, max_new_tokens, min_new_tokens, length_penalty):
        gen = self.generation_config
        if num_beams is None:
            num_beams = gen.get("num_beams") or 1
        if max_new_tokens is None:
            max_new_tokens = gen.get("max_new_tokens")
            if max_new_tokens is None:
                # HF's max_length counts the start token; without one, generate gives 20 new tokens
                max_new_tokens = gen["max_length"] - 1 if gen.get("max_length") is not None else 20
        if min_new_tokens is None:
            min_new_tokens = gen.get("min_new_tokens")
            if min_new_tokens is None:
                min_new_tokens = max(gen.get("min_length", 0) - 1, 0)
        if length_penalty is None:
            length_penalty = gen.get("length_penalty", 1.0)
        return int(num_beams), int(max_new_tokens), int(min_new_tokens), float(length_penalty)

    def _source_tokens(self, input_ids, attention_mask) -> list[list[str]]:
        if torch.is_tensor(input_ids):
            input_ids = input_ids.tolist()
        if torch.is_tensor(attention_mask):
            attention_mask = attention_mask.tolist()
        if attention_mask is None:  # as generate does: padding from the pad id
            attention_mask = [[int(i != self.pad_token_id) for i in row] for row in input_ids]
        check_ids_in_rows(input_ids, len(self.source_tokens))
        return [
            [self.source_tokens[i] for i, real in zip(row, mask) if real]
            for row, mask in zip(input_ids, attention_mask)
        ]

    def _worker_batch_size(self, count: int, max_batch_size: int) -> int:
        """The batch size each call passes: the caller's, else one part of the batch per worker."""
        if not max_batch_size and self.inter_threads > 1:
            return -(-count // self.inter_threads)
        return max_batch_size

    def generate(
        self,
        input_ids: torch.Tensor | Sequence[Sequence[int]] | None = None,
        attention_mask: torch.Tensor | Sequence[Sequence[int]] | None = None,
        *,
        texts: Sequence[str] | None = None,
        num_beams: int | None = None,
        max_new_tokens: int | None = None,
        min_new_tokens: int | None = None,
        length_penalty: float | None = None,
        early_stopping: bool | str | None = None,
        num_return_sequences: int | None = None,
        return_scores: bool = False,
        max_batch_size: int = 0,
    ):
        """Generated ids per input (``num_return_sequences`` lists per input, one after the other, as
        ``model.generate`` orders them; by default the folder's generation config's number, as generate). With
        ``return_scores``, also the scores: the sum of the token log-probabilities divided by
        ``length ** length_penalty`` (HF's ``sequences_scores`` in beam search).
        ``early_stopping`` as ``model.generate`` takes it: ``True`` stops beam search as generate does, ``False``
        and ``"never"`` as closely as CTranslate2 can (the module's notes)."""
        if texts is not None:
            if input_ids is not None:
                raise ValueError("Give `input_ids` or `texts`, not both.")
            input_ids = self.tokenizer(list(texts))["input_ids"]
            attention_mask = [[1] * len(row) for row in input_ids]
        if input_ids is None:
            raise ValueError("Give `input_ids` or `texts`.")
        # As generate checks them (CTranslate2 would round a fraction or fail inside its bindings).
        for name, value, least in (
            ("num_beams", num_beams, 1),
            ("max_new_tokens", max_new_tokens, 1),
            ("min_new_tokens", min_new_tokens, 0),
            ("num_return_sequences", num_return_sequences, 1),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise ValueError(f"`{name}` must be an integer of at least {least}, got {value!r}")
        if length_penalty is not None and (
            isinstance(length_penalty, bool) or not isinstance(length_penalty, (int, float))
        ):
            raise ValueError(f"`length_penalty` must be a number, got {length_penalty!r}")
        num_beams, max_new_tokens, min_new_tokens, length_penalty = self._defaults(
            num_beams, max_new_tokens, min_new_tokens, length_penalty
        )
        if num_return_sequences is None:
            num_return_sequences = self.generation_config.get("num_return_sequences") or 1
        if not 1 <= num_return_sequences <= num_beams:  # as generate refuses it; CTranslate2 would return a
            # varying number of hypotheses per input, which a flat list of sequences cannot tell apart
            raise ValueError(
                f"`num_return_sequences` ({num_return_sequences}) must be at least 1 and at most `num_beams` "
                f"({num_beams})"
            )
        max_new_tokens = new_tokens_within_position_table(max_new_tokens, self.position_table)  # as generate caps it
        min_new_tokens = min(min_new_tokens, max_new_tokens)  # generate stops at the maximum; CTranslate2 would raise
        source = self._source_tokens(input_ids, attention_mask)
        check_sequence_fits(max(map(len, source), default=0), self.source_positions)  # the model's message
        max_batch_size = self._worker_batch_size(len(source), max_batch_size)
        results = self.translator.translate_batch(
            source,
            beam_size=num_beams,
            num_hypotheses=num_return_sequences,
            length_penalty=length_penalty,
            patience=self._patience(early_stopping),
            max_decoding_length=max_new_tokens,
            min_decoding_length=min_new_tokens,
            max_input_length=0,
            end_token=self.end_tokens,
            return_end_token=True,
            return_scores=return_scores,
            max_batch_size=max_batch_size,
        )
        sequences, scores = [], []
        for result in results:
            for index, hypothesis in enumerate(result.hypotheses):
                sequences.append([self.target_ids[token] for token in hypothesis])
                if return_scores:
                    scores.append(result.scores[index])
        return (sequences, scores) if return_scores else sequences

    def score(
        self,
        input_ids: torch.Tensor | Sequence[Sequence[int]],
        attention_mask: torch.Tensor | Sequence[Sequence[int]] | None,
        labels: Sequence[Sequence[int]],
        *,
        max_batch_size: int = 0,
    ) -> list[list[float]]:
        """Teacher forcing: for each input, the log-probability of each of its ``labels`` tokens given the source and
        the labels before it, as the model's log-softmax gathered at the labels gives them (the scores a reranker or
        a forced alignment needs). ``labels``: target ids per input without padding; the end token is scored whether
        the labels end with it or not (CTranslate2 appends it), and its log-probability is the last of the list."""
        source = self._source_tokens(input_ids, attention_mask)
        if len(source) != len(labels):
            raise ValueError(f"{len(source)} inputs but {len(labels)} label sequences")
        labels = [list(row.tolist() if torch.is_tensor(row) else row) for row in labels]
        check_ids_in_rows(labels, len(self.target_tokens))
        targets = []
        for row in labels:
            row = list(row)
            if row and row[-1] == self.eos_token_id:
                row = row[:-1]
            targets.append([self.target_tokens[i] for i in row])
        check_sequence_fits(max(map(len, source), default=0), self.source_positions)
        check_sequence_fits(max(map(len, targets), default=0) + 1, self.position_table)
        max_batch_size = self._worker_batch_size(len(source), max_batch_size)
        results = self.translator.score_batch(source, targets, max_batch_size=max_batch_size, max_input_length=0)
        return [list(result.log_probs) for result in results]

    def translate(self, texts: Sequence[str], **kwargs) -> list[str]:
        """Texts in, decoded texts out (special tokens skipped)."""
        sequences = self.generate(texts=texts, **kwargs)
        return [text.strip() for text in self.tokenizer.batch_decode(sequences, skip_special_tokens=True)]


def ctranslate2_generate(model_dir, input_ids=None, attention_mask=None, *, threads: int = 1, **kwargs):
    """One-off :meth:`CTranslate2Generator.generate` over the folder ``model_dir``, on ``threads`` CPU cores."""
    generator = CTranslate2Generator.for_cpu(model_dir, threads)
    return generator.generate(input_ids, attention_mask, **kwargs)
