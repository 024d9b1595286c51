"""ONNX export of a saved folder (torch's dynamo exporter) and a small numpy decoder over ONNX Runtime.

Graphs written by :func:`to_onnx` (all batch and sequence dimensions dynamic; ids and masks int64, states fp32):

seq2seq (``TransformerForConditionalGeneration``), cross-attention keys and values computed once, by the encoder graph:
  ``encoder.onnx``  input_ids (B, S), attention_mask (B, S)
                    -> encoder_hidden_states (B, S, D), cross_key_{i} / cross_value_{i} (B, H, S, Dh) per decoder layer
  ``decoder.onnx``  input_ids (B, T): the new target token(s), encoder_attention_mask (B, S),
                    past_key_{i} / past_value_{i} (B, H, P, Dh): the self-attention cache, P = 0 at the first step,
                    cross_key_{i} / cross_value_{i} (B, H, S, Dh): the encoder graph's outputs
                    -> logits (B, T, V), present_key_{i} / present_value_{i} (B, H, P + T, Dh)
classifier (``TransformerForSequenceClassification``):
  ``classifier.onnx`` input_ids (B, S), attention_mask (B, S) -> logits (B, num_labels)

The decoder graph reads the cross-attention keys and values instead of the encoder output: they are the same at every
step, so they are projected once (in the encoder graph) rather than at each step. Beam search repeats them for the
beams of each input and never reorders them; only the self-attention cache follows the beams.

transformers' own exporter (``transformers.exporters.OnnxExporter``, experimental), tried with transformers 5.24.0,
torch 2.13.0 and ONNX Runtime 1.32.0, is not used, because:

- ``export_for_generation`` exports no encoder for an encoder-decoder: its ``prefill`` and ``decode`` graphs start
  from ``encoder_outputs.last_hidden_state``, so the encoder needs an ``export`` of ``get_encoder()`` of its own;
- its single-token ``decode`` graph is fixed to a self-attention cache of one token: it is traced at the second step,
  after a one-token prefill, and torch.export specializes a dimension of size 1, so ONNX Runtime refuses the third
  step ("Got invalid dimensions for input: input.cache.self_attention_cache.layers.0.keys ... Got: 2 Expected: 1").
  ``multi_token_decode=True`` keeps that dimension dynamic;
- it comes with no decoding loop: its runners run one graph at a time on torch tensors, so greedy and beam search are
  to be written around them, and torch is needed where they run;
- so assembled (``get_encoder()`` exported, ``multi_token_decode=True``, a greedy loop over its runners) it gives
  ``generate``'s greedy tokens, but decodes in 1.32-1.39 times the time of :class:`OnnxSeq2SeqGenerator`
  (docs/deployment.md), past the 10% it had to stay within to take over. Its classifier graph (``export``) equals
  ``classifier.onnx``'s logits and runs in 1.10 times its time; one exporter serves both heads here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import warnings
from pathlib import Path

import numpy as np

from ..folders import CLASSIFICATION, SEQ2SEQ, refuse_replacing
from ..saved_folder import ADAPTER, MODEL, FolderError, read_folder

__all__ = ["to_onnx", "quantize_onnx", "OnnxSeq2SeqGenerator", "OnnxClassifier"]

ENCODER_FILE, DECODER_FILE, CLASSIFIER_FILE = "encoder.onnx", "decoder.onnx", "classifier.onnx"
TOLERANCE = 1e-4
QUANTIZATIONS = (None, "int8")
EXTERNAL_DATA_BYTES = 1 << 30  # weights above this go to a file beside the graph (protobuf stops at 2 GiB)
_COPIED = (
    "config.json",
    "generation_config.json",
    "tokenizer*",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab*",
    "merges.txt",
    "*.model",
    "chat_template*",
)


# ---------------------------------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------------------------------


def _wrappers():
    """The modules that are exported: plain tensors in and out (defined here so that torch loads only on export)."""
    import torch
    from transformers import DynamicCache, EncoderDecoderCache
    from transformers.cache_utils import DynamicLayer

    def cache_of(tensors):
        cache = DynamicCache()
        for key, value in zip(tensors[0::2], tensors[1::2]):
            layer = DynamicLayer()
            layer.dtype, layer.device, layer.keys, layer.values = key.dtype, key.device, key, value
            layer.is_initialized = True
            cache.layers.append(layer)
        return cache

    class Wrapper(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

    class Encoder(Wrapper):
        def forward(self, input_ids, attention_mask):
            states = self.model.model.encoder(
                input_ids=input_ids, attention_mask=attention_mask.bool()
            ).last_hidden_state
            outputs = [states]
            for layer in self.model.model.decoder.layers:
                attention = layer.cross_attn
                outputs += [
                    attention._split_heads(attention.k_proj(states)),
                    attention._split_heads(attention.v_proj(states)),
                ]
            return tuple(outputs)

    class Decoder(Wrapper):
        def forward(self, input_ids, encoder_attention_mask, *caches):
            half = len(caches) // 2
            self_cache, cross_cache = cache_of(caches[:half]), cache_of(caches[half:])
            cache = EncoderDecoderCache(self_cache, cross_cache)
            cache.is_updated = dict.fromkeys(range(half // 2), True)  # cross-attention reads the given keys and values
            hidden = self.model.model.decoder(
                input_ids=input_ids,
                encoder_hidden_states=caches[half],  # only its batch size is read: the cross cache is complete
                encoder_attention_mask=encoder_attention_mask.bool(),
                cache=cache,
                use_cache=True,
            ).last_hidden_state
            present = [tensor for layer in self_cache.layers for tensor in (layer.keys, layer.values)]
            return (self.model.lm_head(hidden), *present)

    class Classifier(Wrapper):
        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).logits

    return Encoder, Decoder, Classifier


def _example_ids(generator, vocab_size: int, shape, pad: int | None, lengths=()):
    """Random (ids, mask) of ``shape`` without the pad id; row i is padded after ``lengths[i]`` tokens."""
    import torch

    ids = torch.randint(0, vocab_size, shape, generator=generator)
    if pad is not None:
        ids = torch.where(ids == pad, (pad + 1) % vocab_size, ids)
    mask = torch.ones(shape, dtype=torch.int64)
    for row, length in enumerate(lengths):
        mask[row, length:] = 0
        if pad is not None:
            ids[row, length:] = pad
    return ids, mask


@contextlib.contextmanager
def _quiet_exporter():
    """Silences the exporter's notes that concern no graph written here: torchvision's ops it cannot register, axis
    names shared by several inputs (one name is kept), and a deprecation inside torch's pytree code."""
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration.level
    registration.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"# The axis name: .* will not be used")
            warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
            yield
    finally:
        registration.setLevel(level)


def _weight_bytes(module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def _export(module, args, path: Path, input_names, output_names, dynamic_shapes, opset, checks) -> None:
    """Exports ``module`` and runs the graph with onnxruntime on ``args`` and on each of ``checks`` (tuples of
    inputs): every output must agree with torch's within :data:`TOLERANCE`."""
    import onnxruntime
    import torch

    module.eval()
    external = _weight_bytes(module) > EXTERNAL_DATA_BYTES
    with torch.no_grad(), _quiet_exporter():
        program = torch.onnx.export(
            module,
            args,
            dynamo=True,
            input_names=list(input_names),
            output_names=list(output_names),
            dynamic_shapes=dynamic_shapes,
            opset_version=opset,
            external_data=external,
            verbose=False,
        )
    program.save(str(path), external_data=external)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for inputs in (args, *checks):
        with torch.no_grad():
            expected = module(*inputs)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = session.run(list(output_names), {name: t.numpy() for name, t in zip(input_names, inputs)})
        for name, want, have in zip(output_names, expected, got):
            if tuple(want.shape) != have.shape:
                raise RuntimeError(f"{path.name}: output {name} has shape {have.shape}, torch {tuple(want.shape)}")
            difference = float(np.abs(want.numpy() - have).max()) if have.size else 0.0
            if not difference <= TOLERANCE:
                raise RuntimeError(
                    f"{path.name}: output {name} differs from torch by {difference:.3g} (> {TOLERANCE}) "
                    f"on inputs of shapes {[tuple(t.shape) for t in inputs]}"
                )


def _quantize_int8(path: Path) -> Path:
    """The graph at ``path`` with int8 weights (ONNX Runtime's dynamic quantization), written beside it
    (``<stem>.int8.onnx``) once ONNX Runtime loads it; returns that file."""
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantized = path.with_name(path.stem + ".int8.onnx")
    # The quantizer logs on the root logger: a line per tensor it leaves alone (INFO) and advice to pre-process the
    # graph with shape inference first (WARNING); every projection here is quantized without it (the tests count them).
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        # 7-bit weights (reduce_range): on CPUs without VNNI (AVX2, or AVX-512 without VNNI) ONNX Runtime multiplies
        # uint8 activations by int8 weights in pairs summed into int16, which saturates with 8-bit weights
        # (255 * 127 * 2 > 32767) and changes the decoded tokens there; 7 bits fit, on every CPU.
        quantize_dynamic(str(path), str(quantized), weight_type=QuantType.QInt8, per_channel=True, reduce_range=True)
    finally:
        root.setLevel(level)
    onnxruntime.InferenceSession(str(quantized), providers=["CPUExecutionProvider"])
    return quantized


def to_onnx(
    model_dir, output_dir, opset: int | None = None, quantization: str | None = None, force: bool = False
) -> Path:
    """Exports the folder ``model_dir`` (written by ``save_pretrained``: a seq2seq model or a classifier, as its
    config's ``architectures`` says, any other class refused with ``FolderTaskError``; or a LoRA adapter folder,
    merged into its base model first: :mod:`hf_transformer.adapters`; or the ``SavedFolder`` read from either) to the
    ONNX graphs of the module's docstring in ``output_dir``, beside a copy of its config, generation config and
    tokenizer files. ``opset``: the ONNX opset (None: the exporter's default).

    The graphs are traced from unpadded examples; each is then run with onnxruntime on its example and on padded
    inputs of other shapes (a first decoding step with an empty cache among them), and must agree with torch within
    :data:`TOLERANCE`, else ``RuntimeError``.

    ``quantization="int8"``: after that check, ONNX Runtime's dynamic quantization
    (``onnxruntime.quantization.quantize_dynamic``, 7-bit weights in int8 per output channel, so that CPUs without
    VNNI do not saturate, activations quantized at run time) rewrites the layers' projections as ``MatMulInteger``
    and stores the token and position tables in 8 bits, dequantized where read (an output projection tied to the
    token table is exported as a transposed copy of it and multiplies in int8 too). ``force`` writes into an
    ``output_dir`` that already holds files (never the model folder). Returns ``output_dir``."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"to_onnx: quantization={quantization!r} is not one of {list(QUANTIZATIONS)}")
    folder = read_folder(model_dir, hub=False)
    model_dir, output_dir = Path(folder.path), Path(output_dir)
    if folder.kind not in (MODEL, ADAPTER):
        raise FolderError(f"{model_dir} holds a {folder.kind} model, not a folder written by save_pretrained")
    # The task of the saved class: a masked-token folder is neither (it would export a decoder of random weights).
    seq2seq = folder.check("to_onnx", (SEQ2SEQ, CLASSIFICATION)) == SEQ2SEQ
    if folder.kind == ADAPTER:  # LoRA adapters (peft): merged into their base model first
        from ..adapters import merged_model_folder

        with merged_model_folder(model_dir, output_dir) as merged:
            return to_onnx(merged, output_dir, opset=opset, quantization=quantization, force=force)
    refuse_replacing(model_dir, output_dir, "model folder")
    if output_dir.is_dir() and any(output_dir.iterdir()) and not force:
        raise FileExistsError(f"{output_dir} already holds files; pass force=True (--force) to write into it.")
    try:  # before the output folder is made: each graph is checked with ONNX Runtime
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as error:
        raise ImportError(f'ONNX export needs onnx and onnxruntime ({error}): pip install -e ".[export]"') from error
    import torch
    from torch.export import Dim

    model = folder.load_model(dtype=torch.float32)
    config = model.config
    if quantization and _weight_bytes(model) > EXTERNAL_DATA_BYTES:
        raise ValueError(
            f"to_onnx: quantization={quantization!r} is not supported for a model of over {EXTERNAL_DATA_BYTES >> 20} "
            "MiB, whose graphs keep their weights in external data files"
        )
    output_dir.mkdir(parents=True, exist_ok=True)
    _remove_earlier_export(output_dir)  # a translator's graphs beside a classifier's config would still decode
    Encoder, Decoder, Classifier = _wrappers()

    generator = torch.Generator().manual_seed(0)
    length = min(8, config.max_position_embeddings)
    example = _example_ids(generator, config.vocab_size, (3, length), config.pad_token_id)
    checks = [_example_ids(generator, config.vocab_size, (2, max(1, length - 3)), config.pad_token_id, [1])]
    batch, source = Dim("batch"), Dim("source_length", max=config.max_position_embeddings)
    text_names, text_shapes = ["input_ids", "attention_mask"], ({0: batch, 1: source}, {0: batch, 1: source})
    if not seq2seq:
        _export(
            Classifier(model), example, output_dir / CLASSIFIER_FILE, text_names, ["logits"], text_shapes, opset, checks
        )
    else:
        layers = config.decoder_layers
        cross_names = [f"cross_{kind}_{i}" for i in range(layers) for kind in ("key", "value")]
        past_names = [f"past_{kind}_{i}" for i in range(layers) for kind in ("key", "value")]
        encoder = Encoder(model)
        _export(
            encoder,
            example,
            output_dir / ENCODER_FILE,
            text_names,
            ["encoder_hidden_states", *cross_names],
            text_shapes,
            opset,
            checks,
        )

        def decoder_inputs(source_ids, source_mask, past_length: int, new_length: int) -> tuple:
            with torch.no_grad():
                cross = encoder(source_ids, source_mask)[1:]
            shape = (source_ids.shape[0], config.num_attention_heads, past_length, config.head_dim)
            past = [torch.randn(shape, generator=generator) for _ in past_names]
            ids = torch.randint(0, config.decoder_vocab_size, (source_ids.shape[0], new_length), generator=generator)
            return (ids, source_mask, *past, *cross)

        positions = config.decoder_max_position_embeddings
        new, past = Dim("new_length", max=positions), Dim("past_length", max=positions)
        # The wrapper takes the caches as one `*caches` argument: their shapes go in one tuple.
        cache_shapes = (*[{0: batch, 2: past}] * len(past_names), *[{0: batch, 2: source}] * len(cross_names))
        _export(
            Decoder(model),
            decoder_inputs(*example, 3, 2),
            output_dir / DECODER_FILE,
            ["input_ids", "encoder_attention_mask", *past_names, *cross_names],
            ["logits", *(name.replace("past_", "present_") for name in past_names)],
            ({0: batch, 1: new}, {0: batch, 1: source}, cache_shapes),
            opset,
            [decoder_inputs(*checks[0], 0, 1), decoder_inputs(*checks[0], 0, 3), decoder_inputs(*checks[0], 4, 1)],
        )

    for pattern in _COPIED:
        for file in model_dir.glob(pattern):
            if file.is_file():
                shutil.copy2(file, output_dir / file.name)
    if quantization:
        try:
            quantize_onnx(output_dir, output_dir, quantization)
        except Exception as error:  # the float32 export stays, whole: it need not be made again
            raise RuntimeError(
                f"to_onnx: {output_dir} holds the float32 export, but its {quantization} quantization failed "
                f"({type(error).__name__}: {error}); once that is mended, quantize_onnx({str(output_dir)!r}, ...) "
                "quantizes it without exporting again"
            ) from error
    return output_dir


def _remove_earlier_export(output_dir: Path) -> None:
    """The graphs (and their external data) and generation settings an earlier export left in ``output_dir``, which
    this one may not write again (a classifier writes no decoder); the folder's other files are left alone."""
    for name in (ENCODER_FILE, DECODER_FILE, CLASSIFIER_FILE, "generation_config.json"):
        for path in (output_dir / name, *output_dir.glob(f"{name}.data"), *output_dir.glob(f"{name}_data")):
            if path.is_file():
                path.unlink()


def quantize_onnx(onnx_dir, output_dir, quantization: str = "int8") -> Path:
    """The quantized form of a folder written by :func:`to_onnx` (``to_onnx(..., quantization=...)`` without
    exporting again): its graphs quantized as that function says, written to ``output_dir`` with the folder's other
    files; ``output_dir`` may be ``onnx_dir`` itself, rewritten in place. Returns ``output_dir``."""
    if quantization not in QUANTIZATIONS or quantization is None:
        raise ValueError(f"quantize_onnx: quantization={quantization!r} is not one of {list(QUANTIZATIONS[1:])}")
    onnx_dir, output_dir = Path(onnx_dir), Path(output_dir)
    graphs = [name for name in (ENCODER_FILE, DECODER_FILE, CLASSIFIER_FILE) if (onnx_dir / name).is_file()]
    if not graphs:
        raise FileNotFoundError(
            f"quantize_onnx: {onnx_dir} holds none of {ENCODER_FILE}, {DECODER_FILE}, {CLASSIFIER_FILE}"
        )
    if any(path.suffix != ".onnx" for path in onnx_dir.glob("*.onnx*")):
        raise ValueError(
            f"quantize_onnx: quantization={quantization!r} is not supported for graphs whose weights are in external "
            f"data files ({onnx_dir} holds a model of over {EXTERNAL_DATA_BYTES >> 20} MiB)"
        )
    copied: list[Path] = []
    made = not output_dir.exists()
    if output_dir.resolve() != onnx_dir.resolve():
        if output_dir.is_dir() and any(output_dir.iterdir()):  # as to_onnx without force: never mixed with others
            raise FileExistsError(f"quantize_onnx: {output_dir} already holds files; give a new or empty folder")
        output_dir.mkdir(parents=True, exist_ok=True)
        for file in onnx_dir.iterdir():
            if file.is_file():
                copied.append(Path(shutil.copy2(file, output_dir / file.name)))
    # All graphs or none: each quantized beside its float32 form first, which they replace only once every one is
    # quantized and loads, so that a failure leaves no folder of mixed graphs (nor a copy that looks quantized).
    quantized: list[Path] = []
    try:
        for graph in graphs:
            quantized.append(_quantize_int8(output_dir / graph))
    except BaseException:
        for path in [*quantized, *(output_dir / f"{Path(graph).stem}.int8.onnx" for graph in graphs), *copied]:
            path.unlink(missing_ok=True)
        if made:
            output_dir.rmdir()
        raise
    for graph, path in zip(graphs, quantized):
        path.replace(output_dir / graph)
    return output_dir


# ---------------------------------------------------------------------------------------------------
# Inference with ONNX Runtime (numpy only)
# ---------------------------------------------------------------------------------------------------

# Generation settings that add logits processors to `model.generate`; the decoder below does not apply them.
_UNSUPPORTED = {
    "do_sample": False,
    "no_repeat_ngram_size": 0,
    "repetition_penalty": 1.0,
    "min_length": 0,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "bad_words_ids": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "num_return_sequences": 1,
    "encoder_repetition_penalty": 1.0,
    "encoder_no_repeat_ngram_size": 0,
    "sequence_bias": None,
    "exponential_decay_length_penalty": None,
}


def _session(path: Path, intra_op_num_threads: int | None, providers):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if intra_op_num_threads:
        options.intra_op_num_threads = intra_op_num_threads
    return onnxruntime.InferenceSession(str(path), options, providers=providers or ["CPUExecutionProvider"])


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest entries of each row, largest first (``torch.topk``); equal scores in index order.

    A beam step ranks beams x vocabulary scores per sentence and keeps a handful: a full sort of that row is most of
    the step's time, so a long row is first cut to its ``k`` largest (``argpartition``, linear) and only those are
    sorted."""
    if scores.shape[1] <= 4 * k:
        return np.argsort(-scores, axis=1, kind="stable")[:, :k]
    kept = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    kept_scores = np.take_along_axis(scores, kept, axis=1)
    threshold = kept_scores.min(axis=1, keepdims=True)
    if ((scores == threshold).sum(axis=1) > (kept_scores == threshold).sum(axis=1)).any():
        return np.argsort(-scores, axis=1, kind="stable")[:, :k]  # a tie across the cut: which one is kept matters
    order = np.lexsort((kept, -kept_scores), axis=1)  # score descending, then index ascending
    return np.take_along_axis(kept, order, axis=1)


def _take(array: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``array[b, indices[b, j], ...]`` for each row b (``GenerationMixin._gather_beams``)."""
    return np.take_along_axis(array, indices.reshape(indices.shape + (1,) * (array.ndim - 2)), axis=1)


class OnnxSeq2SeqGenerator:
    """Greedy and beam-search decoding over the graphs of :func:`to_onnx`, returning the token ids that
    ``model.generate`` returns: (B, L) int64, starting with the decoder start token; a finished greedy row is padded
    with the pad token, a beam hypothesis with ``pad_token_id or eos_token_id`` (as transformers does).

    ``workers`` > 1: each batch is split into that many parts, decoded at once from as many Python threads (ONNX
    Runtime runs a session from several threads at a time, and releases the GIL while it does); the rows come
    back in input order, padded to the longest. :meth:`for_cpu` gives N cores to N workers of one thread each, the
    faster layout for step-by-step decoding on a CPU (docs/deployment.md)."""

    def __init__(self, output_dir, intra_op_num_threads: int | None = None, providers=None, workers: int = 1):
        output_dir = Path(output_dir)
        self.workers = max(1, int(workers))
        self._pool = None
        self.encoder = _session(output_dir / ENCODER_FILE, intra_op_num_threads, providers)
        self.decoder = _session(output_dir / DECODER_FILE, intra_op_num_threads, providers)
        settings = {**_read_json(output_dir / "config.json"), **_read_json(output_dir / "generation_config.json")}
        unsupported = sorted(k for k, v in _UNSUPPORTED.items() if settings.get(k, v) not in (v, [], {}))
        if unsupported:
            warnings.warn(f"OnnxSeq2SeqGenerator ignores the generation settings {unsupported}", stacklevel=2)
        eos = settings.get("eos_token_id")
        self.eos = [eos] if isinstance(eos, int) else list(eos or [])
        self.pad = settings.get("pad_token_id")
        self.start = settings.get("decoder_start_token_id", settings.get("bos_token_id"))
        self.num_beams = settings.get("num_beams", 1)
        self.length_penalty = settings.get("length_penalty", 1.0)
        self.early_stopping = settings.get("early_stopping", False)
        # HF's max_length counts the start token; without either, generate gives 20 new tokens.
        max_length = settings.get("max_length")
        self.max_new_tokens = settings.get("max_new_tokens") or (max_length - 1 if max_length is not None else 20)
        self.vocab_size = settings.get("vocab_size")
        self.min_new_tokens = settings.get("min_new_tokens") or 0
        self.source_positions = settings.get("max_position_embeddings")
        self.position_table = settings.get("decoder_max_position_embeddings") or self.source_positions
        inputs = {node.name: node.shape for node in self.decoder.get_inputs()}
        self.past_names = [name for name in inputs if name.startswith("past_")]
        self.cross_names = [name for name in inputs if name.startswith("cross_")]
        self.cache_shape = inputs[self.past_names[0]][1], inputs[self.past_names[0]][3]  # (H, Dh)
        self.outputs = ["logits", *(name.replace("past_", "present_") for name in self.past_names)]

    @classmethod
    def for_cpu(cls, output_dir, threads: int, **kwargs) -> OnnxSeq2SeqGenerator:
        """``threads`` CPU cores used as ``threads`` workers of one ONNX Runtime thread each."""
        return cls(output_dir, intra_op_num_threads=1, workers=threads, **kwargs)

    def generate(
        self,
        input_ids,
        attention_mask=None,
        num_beams: int | None = None,
        max_new_tokens: int | None = None,
        length_penalty: float | None = None,
        early_stopping: bool | str | None = None,
        min_new_tokens: int | None = None,
    ) -> np.ndarray:
        """Like ``model.generate(input_ids, attention_mask, num_beams=..., max_new_tokens=...)``; settings left None
        come from the exported generation config. ``input_ids`` and ``attention_mask``: (B, S) arrays.
        ``min_new_tokens``: the end tokens get a score of -inf before that many tokens are generated, as transformers'
        ``MinNewTokensLengthLogitsProcessor`` does (in beam search after the log-softmax, as there)."""
        input_ids = np.asarray(input_ids, dtype=np.int64)
        if input_ids.ndim != 2 or 0 in input_ids.shape:
            raise ValueError(f"input_ids must be (batch, length) with at least one token, got shape {input_ids.shape}")
        import torch

        from ..generation import new_tokens_within_position_table
        from ..input_checks import check_ids_in_vocabulary, check_sequence_fits

        if self.vocab_size is not None:  # as the model checks them: a Gather would wrap -1 around
            check_ids_in_vocabulary(torch.from_numpy(input_ids), self.vocab_size)
        attention_mask = (input_ids != self.pad if attention_mask is None else np.asarray(attention_mask)).astype(
            np.int64
        )
        num_beams = self.num_beams if num_beams is None else num_beams
        for name, value in (("num_beams", num_beams), ("max_new_tokens", max_new_tokens)):
            if value is not None and not (isinstance(value, (int, np.integer)) and value >= 1):
                raise ValueError(f"`{name}` must be an integer of at least 1, got {value!r}")
        if early_stopping not in (None, True, False, "never"):
            raise ValueError(f"early_stopping must be True, False or 'never', got {early_stopping!r}")
        check_sequence_fits(input_ids.shape[1], self.source_positions)  # as the model says it
        max_new_tokens = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        settings = (
            num_beams,
            new_tokens_within_position_table(max_new_tokens, self.position_table),  # as generate caps it
            self.min_new_tokens if min_new_tokens is None else min_new_tokens,
            self.length_penalty if length_penalty is None else length_penalty,
            self.early_stopping if early_stopping is None else early_stopping,
        )
        parts = min(self.workers, len(input_ids))
        if parts <= 1:
            return self._generate(input_ids, attention_mask, *settings)
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="onnx-generate")
        rows = np.array_split(np.arange(len(input_ids)), parts)
        outputs = list(self._pool.map(lambda r: self._generate(input_ids[r], attention_mask[r], *settings), rows))
        fill, length = self._fill(num_beams), max(output.shape[1] for output in outputs)  # out to the longest part
        return np.concatenate(
            [np.pad(output, ((0, 0), (0, length - output.shape[1])), constant_values=fill) for output in outputs]
        )

    def _fill(self, num_beams: int) -> int:
        """The token after a finished row, as transformers writes it: greedy, the pad token (else the end token);
        beam search, ``pad_token_id or eos_token_id[0]``."""
        if num_beams == 1:
            return self.pad if self.pad is not None else self.eos[0]
        return self.pad or (self.eos[0] if self.eos else -1)

    def _generate(self, input_ids, attention_mask, num_beams, max_new_tokens, min_new_tokens, length_penalty, stop):
        encoded = self.encoder.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})
        cross = dict(zip(self.cross_names, encoded[1:]))
        if num_beams == 1:
            return self._greedy(attention_mask, cross, max_new_tokens, min_new_tokens)
        return self._beam_search(attention_mask, cross, num_beams, max_new_tokens, length_penalty, stop, min_new_tokens)

    def _step(
        self, tokens: np.ndarray, mask: np.ndarray, past: list, cross: dict, suppress_eos: bool = False
    ) -> tuple[np.ndarray, list]:
        """One decoder step: (R,) tokens -> (R, V) float32 log-probabilities of the next token and the new cache;
        with ``suppress_eos`` (fewer tokens generated than ``min_new_tokens``) the end tokens get -inf."""
        feed = {"input_ids": tokens[:, None], "encoder_attention_mask": mask, **dict(zip(self.past_names, past))}
        logits, *present = self.decoder.run(self.outputs, {**feed, **cross})
        log_probs = _log_softmax(logits[:, -1].astype(np.float32))
        if suppress_eos and self.eos:
            log_probs[:, self.eos] = -np.inf
        return log_probs, present

    def _empty_cache(self, rows: int) -> list:
        return [np.zeros((rows, self.cache_shape[0], 0, self.cache_shape[1]), np.float32)] * len(self.past_names)

    def _greedy(self, mask: np.ndarray, cross: dict, max_new_tokens: int, min_new_tokens: int = 0) -> np.ndarray:
        pad = self._fill(1)
        sequences = np.full((mask.shape[0], 1), self.start, dtype=np.int64)
        unfinished = np.ones(mask.shape[0], dtype=bool)
        past = self._empty_cache(mask.shape[0])
        for generated in range(max_new_tokens):
            log_probs, past = self._step(sequences[:, -1], mask, past, cross, generated < min_new_tokens)
            tokens = np.where(unfinished, log_probs.argmax(-1), pad)
            sequences = np.concatenate([sequences, tokens[:, None]], axis=1)
            unfinished &= ~np.isin(tokens, self.eos)
            if not unfinished.any():
                break
        return sequences

    def _beam_search(
        self, mask, cross, num_beams, max_new_tokens, length_penalty, early_stopping, min_new_tokens=0
    ) -> np.ndarray:
        """transformers' ``GenerationMixin._beam_search`` (one start token as the prompt), in float32 like it."""
        batch, neg = mask.shape[0], np.float32(-1e9)
        mask = np.repeat(mask, num_beams, axis=0)
        cross = {name: np.repeat(value, num_beams, axis=0) for name, value in cross.items()}
        max_length, keep = 1 + max_new_tokens, max(2, 1 + len(self.eos)) * num_beams
        running = np.full((batch, num_beams, max_length), self._fill(num_beams), dtype=np.int64)
        running[:, :, 0] = self.start
        sequences = running.copy()
        running_scores = np.zeros((batch, num_beams), np.float32)
        running_scores[:, 1:] = neg  # the first step extends the first beam only
        scores = np.full((batch, num_beams), neg, np.float32)
        lengths = np.zeros((batch, num_beams), np.int64)  # generated tokens of each finished hypothesis
        finished = np.zeros((batch, num_beams), bool)
        improvable = np.ones((batch, 1), bool)
        in_top_beams = np.arange(keep) < num_beams
        past, length = self._empty_cache(batch * num_beams), 1
        while True:
            tokens = running[:, :, length - 1].reshape(-1)
            log_probs, past = self._step(tokens, mask, past, cross, length - 1 < min_new_tokens)
            vocab = log_probs.shape[-1]
            log_probs = (log_probs.reshape(batch, num_beams, vocab) + running_scores[:, :, None]).reshape(batch, -1)
            top = _top(log_probs, keep)
            top_scores, top_beams, top_tokens = _take(log_probs, top), top // vocab, top % vocab
            top_sequences = _take(running, top_beams)
            top_sequences[:, :, length] = top_tokens
            hits = np.isin(top_tokens, self.eos) | (length + 1 >= max_length)
            # The best `num_beams` continuations that did not finish run on.
            penalised = top_scores + hits.astype(np.float32) * neg
            chosen = _top(penalised, num_beams)
            running, running_scores = _take(top_sequences, chosen), _take(penalised, chosen)
            rows = (np.arange(batch)[:, None] * num_beams + _take(top_beams, chosen)).reshape(-1)
            past = [tensor[rows] for tensor in past]
            # Those of the top `num_beams` that finished compete with the earlier hypotheses.
            just_finished = hits & in_top_beams
            candidates = top_scores / np.float32(length**length_penalty)
            candidates += (finished.all(1, keepdims=True) & (early_stopping is True)).astype(np.float32) * neg
            candidates += (~improvable).astype(np.float32) * neg
            candidates += (~just_finished).astype(np.float32) * neg
            merged = np.concatenate([scores, candidates], axis=1)
            best = _top(merged, num_beams)
            sequences = _take(np.concatenate([sequences, top_sequences], axis=1), best)
            scores = _take(merged, best)
            lengths = _take(np.concatenate([lengths, np.full(top.shape, length)], axis=1), best)
            finished = _take(np.concatenate([finished, just_finished], axis=1), best)
            length += 1
            # Stop when no running beam can beat the worst kept hypothesis (transformers' heuristic).
            best_length = max_length - 1 if early_stopping == "never" and length_penalty > 0 else length - 1
            best_running = running_scores[:, :1] / np.float32(best_length**length_penalty)
            worst = np.where(finished, scores.min(axis=1, keepdims=True), neg)
            improvable &= (best_running > worst).any(axis=-1, keepdims=True)
            if not improvable.any() or (finished.all() and early_stopping is True) or hits.all():
                break
        return sequences[:, 0, : 1 + lengths[:, 0].max()]


class OnnxClassifier:
    """``classifier.onnx`` of :func:`to_onnx`: ``classifier(input_ids, attention_mask)`` -> (B, num_labels) logits;
    ``labels`` reads ``id2label`` from the exported config (a regression head has values, not labels)."""

    def __init__(self, output_dir, intra_op_num_threads: int | None = None, providers=None):
        output_dir = Path(output_dir)
        self.session = _session(output_dir / CLASSIFIER_FILE, intra_op_num_threads, providers)
        config = _read_json(output_dir / "config.json")
        self.pad = config.get("pad_token_id")
        self.positions = config.get("max_position_embeddings")
        self.id2label = {int(i): label for i, label in (config.get("id2label") or {}).items()}
        self.problem_type = config.get("problem_type")

    def __call__(self, input_ids, attention_mask=None) -> np.ndarray:
        from ..input_checks import check_sequence_fits

        input_ids = np.asarray(input_ids, dtype=np.int64)
        check_sequence_fits(input_ids.shape[1], self.positions)  # as the model says it
        mask = input_ids != self.pad if attention_mask is None else np.asarray(attention_mask)
        return self.session.run(["logits"], {"input_ids": input_ids, "attention_mask": mask.astype(np.int64)})[0]

    def labels(self, input_ids, attention_mask=None) -> list:
        if self.problem_type == "regression":
            raise ValueError("a regression head gives values, not labels: call the classifier for its outputs")
        return [self.id2label.get(int(i), int(i)) for i in self(input_ids, attention_mask).argmax(-1)]
