"""Speed and memory of hf_transformer against HF Marian and BART, torch.nn.Transformer and the seed tutorial's
plain code, measured side by side in one process.

    python benchmarks/benchmark.py --quick                 # base-small, about 1-2 minutes on 2 CPU cores
    python benchmarks/benchmark.py                         # base-small and the seed tutorial's config
    python benchmarks/benchmark.py --device cuda --peak-tflops 989 --output benchmarks/results/performance-gpu.md
                                      # a GPU (H100: 989 TFLOP/s dense bf16), bf16 autocast, also the big config
    python benchmarks/benchmark.py --deployed --no-train --generation-batch-sizes 8 32
                                      # ours, Marian and ours's deployed engines (CPU), generation at batch 8 and 32
    python benchmarks/benchmark.py --device cuda --no-train --generation-batch-sizes 8 32
        --models ours,marian,ours_static,marian_static,ours_ct2,ours_ct2_int8
                                      # a GPU: generate over a compiled static cache, and CTranslate2 on CUDA

What is timed, for every model on the same random batch (token ids in [3, V): no padding; masks are still
built and passed, as in a training loop):
  train    forward + cross-entropy + backward + AdamW step, dropout 0.1, in target tokens per second;
  greedy   ``generate`` with the KV cache, 32 new tokens for a batch of 8 (min_new_tokens=32), tokens per second;
  beam4    the same with ``num_beams=4``.
The opt-in ``*_static`` entries generate over a static cache with the decoding step compiled by ``generate`` (the
warm-up call compiles); the ``*_compiled`` ones train under ``torch.compile`` (for a GPU). The opt-in deployed
engines (``--deployed``, CPU, generation only) decode with ``ours``'s weights (the same seed): ``ours_ct2`` and
``ours_ct2_int8`` converted to CTranslate2 (float32, int8 weights; these two also on CUDA, computing in the run's
dtype), ``ours_onnx`` exported to ONNX and decoded by
``OnnxSeq2SeqGenerator`` over ONNX Runtime, ``ours_int8`` after torch's ``quantize_dynamic``; each exported once
before the rounds (the export is not timed), each made to generate exactly 32 tokens per row as ``generate``
(min = max new tokens), an engine that is not installed skipped with its reason. Their report adds the size of the
weights as deployed (int8 against float32) and, with ``--generation-batch-sizes 8 32``, a table per batch size.
The models are called in rounds, in an order rotated every round, after warm-up calls; the tables give the
median over rounds and the speed relative to Marian as the median of per-round ratios (adjacent calls), so
that a slow moment of the machine hits every model alike. MFU is the matmul FLOP/s of a training step over
the FLOP/s of a square matmul of this device and dtype timed in the same rounds (the median of per-round
ratios, so that a busy moment of a shared machine moves both alike), and over ``--peak-tflops`` when given.
On a CPU, denormal floats are flushed to zero for every model (``--keep-denormals`` keeps them): the anchors'
token tables are drawn from N(0, 1) (torch's default for ``nn.Embedding``), which makes their softmax and
gradients full of denormals, and some CPUs compute those many times slower (on an AVX-512 Xeon
``torch.nn.Transformer`` and the seed code trained at 0.45-0.5x Marian with them and at 0.86x and 0.95-1.0x
without; Marian, BART and this package, whose tables start at std 0.02, train at the same speed either way).
Memory is the rise of the peak resident set (CPU) or of the peak allocated memory (GPU) during a training
step over the memory held before it. Results go to the terminal and to ``--output`` (Markdown) and a JSON file
beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import gc
import importlib.util
import io
import json
import math
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
import transformers
from torch import nn

try:  # python -m benchmarks.benchmark, or imported from the repository root
    from benchmarks.seed_reference import SeedSeq2Seq, reference_sinusoids
except ModuleNotFoundError:  # python benchmarks/benchmark.py: the script's own folder is on the path
    from seed_reference import SeedSeq2Seq, reference_sinusoids

RESULTS = "benchmarks/results"  # where the reports go by default (relative to the repository root)

PAD, START, EOS = 0, 1, 2
NEW_TOKENS = 32

CONFIGS = {
    # d 256, 4 heads of 64, ffn 1024, 3+3 layers, vocab 8000, length 64, batch 32.
    "base-small": dict(vocab_size=8000, d_model=256, heads=4, head_dim=64, ffn=1024, layers=3, length=64, batch=32),
    # The seed tutorial's configuration: 6+6 layers, vocab 8007, length 256, batch 8.
    "seed": dict(vocab_size=8007, d_model=256, heads=4, head_dim=64, ffn=1024, layers=6, length=256, batch=8),
    # The widths of the paper's "big" model (d 1024, 16 heads, ffn 4096), 6+6 layers: enough work per kernel for
    # a GPU's matrix units (the two configs above leave one mostly idle). Run on a GPU only.
    "big": dict(vocab_size=32000, d_model=1024, heads=16, head_dim=64, ffn=4096, layers=6, length=256, batch=32),
    # For the test suite: runs in seconds.
    "tiny": dict(vocab_size=64, d_model=32, heads=2, head_dim=16, ffn=64, layers=1, length=8, batch=4),
}
GENERATION_BATCH = 8


def positions(c: dict) -> int:
    """Position-table size: the training length, or the start token plus the generated ones if longer."""
    return max(c["length"], NEW_TOKENS + 1)


# ---------------------------------------------------------------------------------------------------
# The models, all from one configuration: post-LN, GELU, dropout 0.1, tied output projection
# ---------------------------------------------------------------------------------------------------


def build_ours(c: dict) -> nn.Module:
    from hf_transformer import TransformerConfig, TransformerForConditionalGeneration

    config = TransformerConfig(
        vocab_size=c["vocab_size"], d_model=c["d_model"], num_attention_heads=c["heads"], head_dim=c["head_dim"],
        intermediate_size=c["ffn"], encoder_layers=c["layers"], decoder_layers=c["layers"],
        max_position_embeddings=positions(c), dropout=0.1, attention_dropout=0.1, activation_dropout=0.0,
        activation_function="gelu", label_smoothing=0.0, pad_token_id=PAD, bos_token_id=START,
        eos_token_id=EOS, decoder_start_token_id=START,
    )  # fmt: skip
    return TransformerForConditionalGeneration(config)


def _hf_seq2seq_arguments(c: dict) -> dict:
    return dict(
        vocab_size=c["vocab_size"], d_model=c["d_model"], encoder_layers=c["layers"], decoder_layers=c["layers"],
        encoder_attention_heads=c["heads"], decoder_attention_heads=c["heads"], encoder_ffn_dim=c["ffn"],
        decoder_ffn_dim=c["ffn"], max_position_embeddings=positions(c), dropout=0.1, attention_dropout=0.1,
        activation_dropout=0.0, activation_function="gelu", pad_token_id=PAD, bos_token_id=START,
        eos_token_id=EOS, decoder_start_token_id=START, forced_eos_token_id=None,
    )  # fmt: skip


def build_marian(c: dict) -> nn.Module:
    from transformers import MarianConfig, MarianMTModel

    return MarianMTModel(MarianConfig(scale_embedding=True, **_hf_seq2seq_arguments(c)))


def build_bart(c: dict) -> nn.Module:
    from transformers import BartConfig, BartForConditionalGeneration

    return BartForConditionalGeneration(BartConfig(scale_embedding=False, **_hf_seq2seq_arguments(c)))


class TorchTransformerSeq2Seq(nn.Module):
    """``torch.nn.Transformer`` (post-LN; it adds a final LayerNorm to each stack) with one token table,
    sinusoidal positions, sqrt(d) scaling and the output projection tied to the table."""

    def __init__(self, c: dict):
        super().__init__()
        d = c["d_model"]
        self.embed = nn.Embedding(c["vocab_size"], d, padding_idx=PAD)
        self.register_buffer("positions", reference_sinusoids(positions(c), d), persistent=False)
        self.dropout = nn.Dropout(0.1)
        self.transformer = nn.Transformer(
            d_model=d, nhead=c["heads"], num_encoder_layers=c["layers"], num_decoder_layers=c["layers"],
            dim_feedforward=c["ffn"], dropout=0.1, activation="gelu", batch_first=True,
        )  # fmt: skip
        self.projection = nn.Linear(d, c["vocab_size"], bias=False)
        self.projection.weight = self.embed.weight

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.embed(ids) * math.sqrt(self.embed.embedding_dim) + self.positions[: ids.shape[1]])

    def forward(self, source_ids: torch.Tensor, target_ids: torch.Tensor) -> torch.Tensor:
        length = target_ids.shape[1]
        causal = torch.ones(length, length, dtype=torch.bool, device=target_ids.device).triu(1)
        source_padding = source_ids.eq(PAD)
        hidden = self.transformer(
            self._embed(source_ids), self._embed(target_ids), tgt_mask=causal, tgt_is_causal=True,
            src_key_padding_mask=source_padding, memory_key_padding_mask=source_padding,
            tgt_key_padding_mask=target_ids.eq(PAD),
        )  # fmt: skip
        return self.projection(hidden)


def build_torch_nn(c: dict) -> nn.Module:
    return TorchTransformerSeq2Seq(c)


def build_seed(c: dict) -> nn.Module:
    names = SimpleNamespace(
        n_enc_vocab=c["vocab_size"], n_dec_vocab=c["vocab_size"], n_enc_seq=positions(c), n_dec_seq=positions(c),
        n_layer=c["layers"], d_hidn=c["d_model"], n_head=c["heads"], d_head=c["head_dim"], d_ff=c["ffn"],
        i_pad=PAD, dropout=0.1, layer_norm_epsilon=1e-12,
    )  # fmt: skip
    return SeedSeq2Seq(names)


@dataclass
class Entry:
    name: str
    build: Callable[[dict], nn.Module]
    hf: bool  # HF keyword interface, its own loss from `labels`, and generate(); else model(src, tgt) -> logits
    greedy: bool = True
    beam: bool = True
    note: str = ""
    compile_mode: str | None = None  # training under torch.compile(mode=...), as Trainer's torch_compile_mode
    train: bool = True
    static_decoding: bool = False  # generate with a static cache, its decoding step compiled by generate
    engine: str | None = None  # a deployed form of the model (a key of ENGINES): generation only


# fmt: off
ENTRIES = {
    "ours": Entry("ours", build_ours, True, note="hf_transformer TransformerForConditionalGeneration"),
    "marian": Entry("marian", build_marian, True, note="transformers MarianMTModel"),
    "bart": Entry("bart", build_bart, True, note="transformers BartForConditionalGeneration"),
    "torch_nn": Entry("torch_nn", build_torch_nn, False, greedy=False, beam=False, note="torch.nn.Transformer"),
    "seed": Entry("seed", build_seed, False, beam=False, note="seed tutorial's plain code; greedy without cache"),
    # Opt-in (--models): the compiled step with CUDA graphs, for a GPU, where eager steps of these sizes wait on
    # the host's kernel launches. Training only; compiling takes a minute or two per model and config.
    "ours_compiled": Entry(
        "ours_compiled", build_ours, True, greedy=False, beam=False, compile_mode="reduce-overhead",
        note="hf_transformer under torch.compile(mode='reduce-overhead'), training only",
    ),
    "marian_compiled": Entry(
        "marian_compiled", build_marian, True, greedy=False, beam=False, compile_mode="reduce-overhead",
        note="MarianMTModel under torch.compile(mode='reduce-overhead'), training only",
    ),
    # Opt-in (--models): generation only, `generate(cache_implementation="static", compile_config=...)`: the
    # decoding step over a preallocated cache, compiled once per shape (the first call, a warm-up, compiles).
    # generate compiles greedy search and sampling; beam search runs eagerly over the static cache.
    "ours_static": Entry(
        "ours_static", build_ours, True, train=False, static_decoding=True,
        note="hf_transformer generating over a static cache, greedy steps compiled (generation only)",
    ),
    "marian_static": Entry(
        "marian_static", build_marian, True, train=False, static_decoding=True,
        note="MarianMTModel generating over a static cache, greedy steps compiled (generation only)",
    ),
    # Opt-in (--models or --deployed): `ours` (the same weights: the same seed) in the forms it is deployed in,
    # generation only; on the CPU, and CTranslate2 on CUDA too. Exporting and converting happen when the entry is
    # built, outside the timed rounds.
    "ours_ct2": Entry(
        "ours_ct2", build_ours, True, train=False, engine="ctranslate2",
        note="hf_transformer converted to CTranslate2 (float32), CTranslate2Generator (generation only)",
    ),
    "ours_ct2_int8": Entry(
        "ours_ct2_int8", build_ours, True, train=False, engine="ctranslate2_int8",
        note="hf_transformer converted to CTranslate2 with int8 weights, CTranslate2Generator (generation only)",
    ),
    "ours_onnx": Entry(
        "ours_onnx", build_ours, True, train=False, engine="onnx",
        note="hf_transformer exported to ONNX, OnnxSeq2SeqGenerator over ONNX Runtime (generation only)",
    ),
    "ours_onnx_int8": Entry(
        "ours_onnx_int8", build_ours, True, train=False, engine="onnx_int8",
        note="hf_transformer exported to ONNX with int8 weights (ONNX Runtime quantize_dynamic), OnnxSeq2SeqGenerator "
        "(generation only)",
    ),
    "ours_int8": Entry(
        "ours_int8", build_ours, True, train=False, engine="torch_int8",
        note="hf_transformer after torch.ao.quantization.quantize_dynamic (int8 nn.Linear), generate (generation only)",
    ),
}
# fmt: on
DEFAULT_MODELS = ",".join(
    name
    for name, entry in ENTRIES.items()
    if entry.compile_mode is None and not entry.static_decoding and entry.engine is None
)
DEPLOYED_MODELS = [name for name, entry in ENTRIES.items() if entry.engine]


# ---------------------------------------------------------------------------------------------------
# One model: a training step, greedy and beam generation
# ---------------------------------------------------------------------------------------------------


class Runner:
    def __init__(
        self, entry: Entry, c: dict, device: torch.device, dtype: torch.dtype, deployment: Deployment | None = None
    ):
        torch.manual_seed(0)  # every model of a config starts from the same seed: the engines hold ours's weights
        self.entry, self.c, self.device, self.dtype = entry, c, device, dtype
        self.model = entry.build(c).to(device)
        self.parameters = sum(p.numel() for p in {id(p): p for p in self.model.parameters()}.values())
        self.engine: Engine | None = None
        if entry.engine:
            if deployment is None:
                raise ValueError(f"{entry.name} needs a Deployment (the folder its exports are written to)")
            self.engine = ENGINES[entry.engine](self.model, deployment, dtype)
            if self.engine.model is not None:
                self.model = self.engine.model  # a torch model (quantized): generated by `generate` as the others
            return
        # The fused (one-kernel) AdamW where torch has it, as a GPU user would run it; the same for every model.
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=device.type == "cuda")
        if entry.compile_mode:
            self.model = torch.compile(self.model, mode=entry.compile_mode)

    def weights(self) -> dict:
        """``weights_mb``: the bytes of the model's weights as deployed (the engine's files, or the torch
        ``state_dict`` as ``torch.save`` writes it), in MB; for an int8 form also ``weights_fp32_mb`` (the same
        form in float32) and ``weights_vs_fp32``."""
        if self.engine is not None:
            size, fp32 = self.engine.weights_bytes, self.engine.fp32_weights_bytes
        else:
            size, fp32 = state_dict_bytes(self.model), None
        row = dict(weights_mb=size / 2**20)
        if fp32:
            row.update(weights_fp32_mb=fp32 / 2**20, weights_vs_fp32=size / fp32)
        return row

    def _autocast(self):
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def train_step(self, batch: dict) -> float:
        self.model.train()
        if self.entry.compile_mode:
            torch.compiler.cudagraph_mark_step_begin()  # the previous step's graph outputs may be overwritten
        with self._autocast():
            if self.entry.hf:
                loss = self.model(
                    input_ids=batch["source"], attention_mask=batch["source_mask"],
                    decoder_input_ids=batch["decoder_input"], labels=batch["labels"], use_cache=False,
                ).loss  # fmt: skip
            else:
                logits = self.model(batch["source"], batch["decoder_input"])
                loss = F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten())
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()

    @functools.cached_property
    def _static_decoding(self) -> dict:
        """The ``generate`` arguments of a static-cache entry (one compile configuration for all its calls)."""
        if not self.entry.static_decoding:
            return {}
        from transformers import CompileConfig

        # CUDA graphs on a GPU (generate's default there); inductor's kernels on a CPU, where generate compiles only
        # when told to.
        mode = "reduce-overhead" if self.device.type == "cuda" else "default"
        compile_config = CompileConfig(fullgraph=True, dynamic=False, mode=mode)
        compile_config._compile_all_devices = True
        return dict(cache_implementation="static", compile_config=compile_config)

    @torch.no_grad()
    def generate(self, batch: dict, num_beams: int):
        if self.engine is not None and self.engine.model is None:
            generated = self.engine.generate(batch, num_beams)
            check_new_tokens(self.entry.name, generated)
            return generated
        self.model.eval()
        with self._autocast():
            if self.entry.hf:
                output = self.model.generate(
                    input_ids=batch["source"], attention_mask=batch["source_mask"], num_beams=num_beams,
                    do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, use_cache=True,
                    **self._static_decoding,
                )  # fmt: skip
            else:
                output = self.model.greedy(batch["source"], START, NEW_TOKENS, banned_ids=(PAD, EOS))
        check_new_tokens(self.entry.name, [output.shape[1] - 1])
        return output


def make_batch(c: dict, batch_size: int, device: torch.device, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    source = torch.randint(3, c["vocab_size"], (batch_size, c["length"]), generator=generator)
    labels = torch.randint(3, c["vocab_size"], (batch_size, c["length"]), generator=generator)
    decoder_input = torch.cat([torch.full((batch_size, 1), START), labels[:, :-1]], dim=1)
    batch = dict(source=source, source_mask=torch.ones_like(source), decoder_input=decoder_input, labels=labels)
    return {key: value.to(device) for key, value in batch.items()}


# ---------------------------------------------------------------------------------------------------
# Deployed engines: ours exported, converted or quantized (generation only)
# ---------------------------------------------------------------------------------------------------


def state_dict_bytes(model: nn.Module) -> int:
    """The bytes ``torch.save`` writes for the model's ``state_dict``: parameters, buffers and the packed weights of
    quantized layers (a tied table once)."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.tell()


def word_tokenizer(vocab_size: int):
    """A word-level tokenizer whose tokens ``<pad> <s> </s> <unk> t4 ... t{V-1}`` cover the model's ids one to one,
    its special tokens at the configs' ids: CTranslate2's converter maps ids to these strings."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    special = {PAD: "<pad>", START: "<s>", EOS: "</s>", 3: "<unk>"}
    vocabulary = {special.get(i, f"t{i}"): i for i in range(vocab_size)}
    backend = Tokenizer(models.WordLevel(vocabulary, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


class Deployment:
    """One config's ``ours`` saved (``save_pretrained``, with :func:`word_tokenizer`) in a temporary folder, and its
    exports there, each made once: before the timed rounds, which time decoding only."""

    def __init__(self):
        self._directory = tempfile.TemporaryDirectory(prefix="benchmark-deployed-")
        self.root = Path(self._directory.name)
        self._made: dict[str, Path] = {}

    def _once(self, name: str, make: Callable[[Path], object]) -> Path:
        if name not in self._made:
            make(self.root / name)
            self._made[name] = self.root / name
        return self._made[name]

    def saved(self, model: nn.Module) -> Path:
        def save(folder: Path) -> None:
            model.save_pretrained(folder)
            word_tokenizer(model.config.vocab_size).save_pretrained(folder)

        return self._once("model", save)

    def ctranslate2(self, model: nn.Module, quantization: str | None) -> Path:
        from hf_transformer.export import to_ctranslate2

        folder = self.saved(model)
        return self._once(f"ct2_{quantization or 'float32'}", lambda out: to_ctranslate2(folder, out, quantization))

    def onnx(self, model: nn.Module, quantization: str | None = None) -> Path:
        from hf_transformer.export import quantize_onnx, to_onnx

        if quantization:  # the float32 export, quantized
            exported = self.onnx(model)
            return self._once(f"onnx_{quantization}", lambda out: quantize_onnx(exported, out, quantization))
        folder = self.saved(model)
        return self._once("onnx_float32", lambda out: to_onnx(folder, out))

    def close(self) -> None:
        self._directory.cleanup()


def _require(module: str, extra: str = ' (pip install -e ".[export]")') -> None:
    if importlib.util.find_spec(module) is None:
        raise ImportError(f"{module} is not installed{extra}: skipped")


class Engine:
    """A deployed form of ``ours`` (its float32 model, as built for the config): ``generate(batch, num_beams)``
    returns the number of tokens generated for each output row; or, for a torch form, ``model``, which the runner
    generates with as with the others. ``weights_bytes``: its weights as deployed; ``fp32_weights_bytes``: those of
    the same form in float32, for an int8 form (else None)."""

    model: nn.Module | None = None
    fp32_weights_bytes: int | None = None

    def __init__(self, model: nn.Module, deployment: Deployment, dtype: torch.dtype = torch.float32):
        raise NotImplementedError

    def generate(self, batch: dict, num_beams: int) -> list[int]:
        raise NotImplementedError


def _check_float32(engine: str, dtype: torch.dtype) -> None:
    if dtype != torch.float32:
        raise RuntimeError(f"{engine} is timed with float32 activations only (--dtype fp32)")


def _check_cpu(model: nn.Module, engine: str, dtype: torch.dtype) -> None:
    if next(model.parameters()).device.type != "cpu":
        raise RuntimeError(f"{engine} is benchmarked on the CPU only")
    _check_float32(engine, dtype)


CT2_COMPUTE_TYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def ct2_compute_type(device: torch.device, dtype: torch.dtype, quantization: str | None) -> str:
    """CTranslate2's ``compute_type`` for a run at ``dtype``: on a CPU the converted weights' own type ("default":
    float32, or int8 weights with float32 activations); on CUDA the activations of the run's ``dtype``, with int8
    weights for an int8 form ("int8_bfloat16", ...)."""
    if device.type == "cpu":
        _check_float32("CTranslate2 on the CPU", dtype)
        return "default"
    activations = CT2_COMPUTE_TYPES[dtype]
    return f"{quantization}_{activations}" if quantization else activations


class CTranslate2Engine(Engine):
    """On a CPU, as many one-thread workers as torch has threads (``for_cpu``); on CUDA, one translator on the
    model's GPU computing in the run's dtype (``ct2_compute_type``)."""

    quantization: str | None = None

    def __init__(self, model: nn.Module, deployment: Deployment, dtype: torch.dtype = torch.float32):
        _require("ctranslate2")
        from hf_transformer.export.ctranslate2_export import CTranslate2Generator

        device = next(model.parameters()).device
        self.compute_type = ct2_compute_type(device, dtype, self.quantization)
        folder = deployment.ctranslate2(model, self.quantization)
        if device.type == "cpu":
            self.generator = CTranslate2Generator.for_cpu(folder, torch.get_num_threads())
        else:
            self.generator = CTranslate2Generator(folder, device=str(device), compute_type=self.compute_type)
        self.weights_bytes = (folder / "model.bin").stat().st_size
        if self.quantization:
            self.fp32_weights_bytes = (deployment.ctranslate2(model, None) / "model.bin").stat().st_size

    def generate(self, batch: dict, num_beams: int) -> list[int]:
        sequences = self.generator.generate(
            batch["source"], batch["source_mask"], num_beams=num_beams, max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS, length_penalty=1.0,
        )  # fmt: skip
        return [len(row) for row in sequences]  # without the start token


class CTranslate2Int8Engine(CTranslate2Engine):
    quantization = "int8"


class OnnxEngine(Engine):
    quantization: str | None = None

    def __init__(self, model: nn.Module, deployment: Deployment, dtype: torch.dtype = torch.float32):
        _check_cpu(model, "ONNX Runtime", dtype)
        _require("onnxruntime")
        _require("onnxscript", " (torch's ONNX exporter needs it)")
        from hf_transformer.export.onnx_export import OnnxSeq2SeqGenerator

        folder = deployment.onnx(model, self.quantization)
        self.generator = OnnxSeq2SeqGenerator.for_cpu(folder, torch.get_num_threads())
        # The encoder and decoder graphs (each with the token table), and any external weights beside them.
        self.weights_bytes = sum(file.stat().st_size for file in folder.glob("*.onnx*"))
        if self.quantization:
            self.fp32_weights_bytes = sum(file.stat().st_size for file in deployment.onnx(model).glob("*.onnx*"))

    def generate(self, batch: dict, num_beams: int) -> list[int]:
        sequences = self.generator.generate(
            batch["source"].numpy(), batch["source_mask"].numpy(), num_beams=num_beams,
            max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, length_penalty=1.0,
        )  # fmt: skip
        return [sequences.shape[1] - 1] * sequences.shape[0]  # (B, 1 + new): the start token first


class OnnxInt8Engine(OnnxEngine):
    quantization = "int8"


class TorchInt8Engine(Engine):
    """``torch.ao.quantization.quantize_dynamic`` of every ``nn.Linear`` (int8 weights, activations quantized per
    call); generated with ``generate``."""

    def __init__(self, model: nn.Module, deployment: Deployment, dtype: torch.dtype = torch.float32):
        _check_cpu(model, "quantize_dynamic", dtype)
        self.fp32_weights_bytes = state_dict_bytes(model)
        with warnings.catch_warnings():  # torch's notices that torch.ao.quantization moves to torchao
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.filterwarnings("ignore", message=r".*quantized tensor creation functions", category=UserWarning)
            self.model = torch.ao.quantization.quantize_dynamic(model.eval(), {nn.Linear}, dtype=torch.qint8)
        self.weights_bytes = state_dict_bytes(self.model)


ENGINES: dict[str, type[Engine]] = {
    "ctranslate2": CTranslate2Engine,
    "ctranslate2_int8": CTranslate2Int8Engine,
    "onnx": OnnxEngine,
    "onnx_int8": OnnxInt8Engine,
    "torch_int8": TorchInt8Engine,
}


def training_flops(c: dict) -> float:
    """Matmul FLOPs of one training step (backward = 2x forward): projections, feed-forward, attention scores
    and context, and the output projection; embeddings, softmax, norms and the optimizer are left out."""
    b, n, d, f, v, layers = c["batch"], c["length"], c["d_model"], c["ffn"], c["vocab_size"], c["layers"]
    inner = c["heads"] * c["head_dim"]
    tokens = b * n
    attention = 2 * 2 * tokens * n * inner  # scores and context, per attention
    encoder = layers * (2 * tokens * 4 * d * inner + 2 * tokens * 2 * d * f + attention)
    decoder = layers * (2 * tokens * 8 * d * inner + 2 * tokens * 2 * d * f + 2 * attention)
    head = 2 * tokens * d * v
    return 3.0 * (encoder + decoder + head)


# ---------------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------------


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_new_tokens(name: str, counts, expected: int = NEW_TOKENS) -> None:
    """Every row decoded exactly ``expected`` new tokens (min = max), or a timing would compare unequal work."""
    counts = list(counts)
    if any(count != expected for count in counts):
        raise RuntimeError(f"{name} generated {sorted(set(counts))} tokens per row, not {expected}")


def check_threads(threads: int, during: str) -> None:
    """torch still runs ``threads`` threads: an engine that changed them would make the rounds unlike."""
    if torch.get_num_threads() != threads:
        raise RuntimeError(f"torch threads went from {threads} to {torch.get_num_threads()} {during}")


def interleaved(tasks: dict[str, Callable[[], object]], device, warmup: int, rounds: int, budget_s: float) -> dict:
    """Per task, the seconds of each round's call. Every round calls each task once, rotating the order;
    rounds stop after ``rounds`` or once ``budget_s`` is spent (at least 3 rounds)."""
    names = list(tasks)
    for _ in range(warmup):
        for name in names:
            tasks[name]()
    synchronize(device)
    seconds = {name: [] for name in names}
    started = time.perf_counter()
    for index in range(rounds):
        for name in names[index % len(names) :] + names[: index % len(names)]:
            begin = time.perf_counter()
            tasks[name]()
            synchronize(device)
            seconds[name].append(time.perf_counter() - begin)
        if index + 1 >= 3 and time.perf_counter() - started > budget_s:
            break
    return seconds


def speed_ratios(seconds: dict[str, list[float]], reference: str) -> dict[str, tuple[float, float, float]]:
    """Per model, the (lower quartile, median, upper quartile) over rounds of t_reference / t_model (> 1:
    faster than the reference). The quartiles show how far the rounds of a shared machine scatter."""
    if reference not in seconds:
        return {}
    ratios = {}
    for name, times in seconds.items():
        per_round = [r / t for r, t in zip(seconds[reference], times)]
        if len(per_round) == 1:
            ratios[name] = (per_round[0],) * 3
        else:
            ratios[name] = tuple(statistics.quantiles(per_round, n=4, method="inclusive"))
    return ratios


MATMUL_PROBE = "matmul probe"


def matmul_probe(device: torch.device, dtype: torch.dtype, size: int, repeats: int = 5) -> tuple[Callable, float]:
    """A task of ``repeats`` square matmuls to time beside the models, and its FLOPs."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)

    def run() -> None:
        for _ in range(repeats):
            torch.mm(a, b)

    return run, 2.0 * size**3 * repeats


def matmul_peak(device: torch.device, dtype: torch.dtype, size: int) -> float:
    """FLOP/s of a square matmul of the given size: the best median of a few bursts."""
    run, flops = matmul_probe(device, dtype, size, repeats=1)
    best = 0.0
    for _ in range(3):
        times = []
        for _ in range(5):
            synchronize(device)
            begin = time.perf_counter()
            run()
            synchronize(device)
            times.append(time.perf_counter() - begin)
        best = max(best, flops / statistics.median(times))
    return best


def process_memory_mb(key: str) -> float | None:
    """A memory figure of this process from /proc/self/status in MiB (``VmRSS``: resident now, ``VmHWM``: its
    peak); None where the file or the key is missing."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def training_memory_mb(runner: Runner, batch: dict, device: torch.device) -> float | None:
    """Peak memory rise of one training step (the optimizer state exists already: it is the second step)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        runner.train_step(batch)
        return (torch.cuda.max_memory_allocated(device) - before) / 2**20
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed pages go back, so the peak measures this step
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # resets the peak resident set (VmHWM) to the current one
    except OSError:
        return None
    before = process_memory_mb("VmRSS")
    runner.train_step(batch)
    peak = process_memory_mb("VmHWM")
    return None if before is None or peak is None else peak - before


@dataclass
class ConfigResult:
    name: str
    config: dict
    rows: dict[str, dict] = field(default_factory=dict)
    matmul_probe_gflops: float | None = None  # median over the training rounds
    failed: dict[str, str] = field(default_factory=dict)  # model -> the error that stopped it
    generation_batch_sizes: list[int] = field(default_factory=lambda: [GENERATION_BATCH])


def generation_key(kind: str, batch_size: int) -> str:
    """Row keys of a generation timing: ``greedy``/``beam4`` at the default batch (8), ``greedy_b32`` at another."""
    return kind if batch_size == GENERATION_BATCH else f"{kind}_b{batch_size}"


def _ratio_fields(kind: str, ratio: tuple[float, float, float] | None) -> dict:
    """``{kind}_vs_marian``: the median ratio; ``{kind}_vs_marian_quartiles``: [lower, upper]."""
    if ratio is None:
        return {f"{kind}_vs_marian": None}
    lower, median, upper = ratio
    return {f"{kind}_vs_marian": median, f"{kind}_vs_marian_quartiles": [lower, upper]}


def run_config(
    name: str, models: list[str], device: torch.device, dtype: torch.dtype, args: argparse.Namespace, log
) -> ConfigResult:
    deployment = Deployment() if any(ENTRIES[model].engine for model in models) else None
    try:
        return _run_config(name, models, device, dtype, args, log, deployment)
    finally:
        if deployment is not None:
            deployment.close()


def _run_config(name, models, device, dtype, args, log, deployment: Deployment | None) -> ConfigResult:
    c = CONFIGS[name]
    result = ConfigResult(name, dict(c), generation_batch_sizes=list(args.generation_batch_sizes))
    runners = {}
    train_batch = make_batch(c, c["batch"], device)
    for model in models:
        entry = ENTRIES[model]
        try:
            began = time.perf_counter()
            runners[model] = Runner(entry, c, device, dtype, deployment)
            if entry.engine:
                runners[model].generate(make_batch(c, 2, device, seed=2), 1)  # decodes NEW_TOKENS, or fails here
                result.rows[model] = dict(parameters=runners[model].parameters, train_memory_mb=None)
                result.rows[model].update(runners[model].weights())
                log(
                    f"  built {model} in {time.perf_counter() - began:.1f}s (export, untimed): "
                    f"weights {result.rows[model]['weights_mb']:.1f} MB"
                )
                continue
            if not entry.train or args.no_train:
                result.rows[model] = dict(parameters=runners[model].parameters, train_memory_mb=None)
                continue
            runners[model].train_step(train_batch)  # optimizer state, allocator warm-up (and compiling)
        except Exception as error:  # one model that cannot run here (a compile failure) leaves the others' table
            runners.pop(model, None)
            result.failed[model] = f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
            log(f"  {model} {'skipped' if isinstance(error, ImportError) else 'failed'}: {result.failed[model]}")
            continue
        memory = training_memory_mb(runners[model], train_batch, device)
        result.rows[model] = dict(parameters=runners[model].parameters, train_memory_mb=memory)
        log(f"  built {model}: {runners[model].parameters / 1e6:.2f}M parameters, step memory rise {memory} MB")
    if "ours" in runners and any(ENTRIES[model].engine for model in runners):
        result.rows["ours"].update(runners["ours"].weights())  # the float32 weights the engines were made from

    flops = training_flops(c)
    tokens = c["batch"] * c["length"]
    models = list(runners)
    trained = [] if args.no_train else [m for m in models if ENTRIES[m].train]
    if trained:
        tasks = {m: (lambda r=runners[m]: r.train_step(train_batch)) for m in trained}
        tasks[MATMUL_PROBE], probe_flops = matmul_probe(device, dtype, args.peak_size)
        seconds = interleaved(tasks, device, warmup=args.warmup, rounds=args.rounds, budget_s=args.budget)
        probe_seconds = seconds.pop(MATMUL_PROBE)
        result.matmul_probe_gflops = probe_flops / statistics.median(probe_seconds) / 1e9
        ratios = speed_ratios(seconds, "marian")
        for model, times in seconds.items():
            median = statistics.median(times)
            mfu = statistics.median((flops / t) / (probe_flops / p) for t, p in zip(times, probe_seconds))
            result.rows[model].update(
                train_step_s=median, train_tokens_per_s=tokens / median, train_flops_per_s=flops / median,
                train_mfu=mfu, train_rounds=len(times), **_ratio_fields("train", ratios.get(model)),
            )  # fmt: skip
        log(f"  training timed over {len(next(iter(seconds.values())))} rounds")

    for batch_size in args.generation_batch_sizes:
        generation_batch = make_batch(c, batch_size, device, seed=1)
        for kind, beams in (("greedy", 1), ("beam4", 4)):
            if kind == "beam4" and args.no_beam:
                continue
            able = [m for m in models if (ENTRIES[m].greedy if beams == 1 else ENTRIES[m].beam)]
            if not able:
                continue
            seconds = interleaved(
                {m: (lambda r=runners[m], k=beams, b=generation_batch: r.generate(b, k)) for m in able},
                device, warmup=1, rounds=args.rounds, budget_s=args.budget,
            )  # fmt: skip
            ratios = speed_ratios(seconds, "marian")
            key = generation_key(kind, batch_size)
            for model, times in seconds.items():
                median = statistics.median(times)
                # Every model generates NEW_TOKENS per row (min_new_tokens = max_new_tokens; checked on each call).
                result.rows[model][f"{key}_tokens_per_s"] = batch_size * NEW_TOKENS / median
                result.rows[model].update(_ratio_fields(key, ratios.get(model)))
            log(f"  {kind} at batch {batch_size} timed over {len(next(iter(seconds.values())))} rounds")
    del runners
    gc.collect()
    return result


# ---------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------


def write_report(output, markdown: str, record: dict) -> None:
    """The report at ``output`` (Markdown) and its record beside it (``.json``), the folder made if missing."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(markdown, encoding="utf-8")
    output.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    took = f" in {record['seconds']} s" if "seconds" in record else ""
    print(f"wrote {output} and {output.with_suffix('.json')}{took}")


def speed_up_result(seconds: dict[str, list[float]], before: str, after: str, fields: dict, per: int = 1) -> dict:
    """Two ways of doing one kind of work, from their seconds per round (each round's seconds for ``per`` units of
    work): ``fields``, the median milliseconds a unit of each way (``median_ms``) and ``before``'s over ``after``'s
    (``speedup``)."""
    medians = {way: statistics.median(values) * 1000 / per for way, values in seconds.items()}
    return {**fields, "median_ms": medians, "speedup": medians[before] / medians[after]}


def speed_up_report(intro: str, results: dict[str, dict], headings: tuple[str, ...], column: str, before: str,
                    after: str) -> str:  # fmt: skip
    """A report's Markdown: ``intro``, then a table of ``speed_up_result``s, one row per kind of work: the kind,
    ``result[column]``, the median milliseconds ``before`` and ``after`` and the speed-up, under ``headings`` (those
    of the first four columns)."""
    rows = [f"| {' | '.join(headings)} | speed-up |", "|---|---|---|---|---|"]
    for kind, result in results.items():
        medians = result["median_ms"]
        rows.append(f"| {kind} | {result[column]} | {medians[before]:.2f} | {medians[after]:.2f} | "
                    f"{result['speedup']:.2f}x |")  # fmt: skip
    return "\n".join([intro, "", *rows]) + "\n"


def machine_description(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    from hf_transformer.cpu import cpu_description

    return cpu_description()


def _number(value, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _ratio(row: dict, kind: str) -> str:
    """The median ratio, and the quartiles of the rounds where they differ from it: "1.21 (1.15-1.30)"."""
    median, quartiles = row.get(f"{kind}_vs_marian"), row.get(f"{kind}_vs_marian_quartiles")
    if median is None or not quartiles or quartiles[0] == quartiles[1]:
        return _number(median, 2)
    return f"{median:.2f} ({quartiles[0]:.2f}-{quartiles[1]:.2f})"


def markdown(results: list[ConfigResult], header: dict) -> str:
    lines = [
        "# Performance",
        "",
        "Produced by `python " + " ".join(header["command"]) + "`.",
        "",
        f"- date: {header['date']}",
        f"- machine: {header['machine']}; device {header['device']}, {header['dtype']}, "
        f"{header['threads']} torch threads"
        + ("; freed memory kept for reuse (glibc mallopt, as in training)" if header.get("kept_memory") else "")
        + ("; denormals flushed to zero" if header.get("flushed_denormals") else ""),
        f"- torch {header['torch']}, transformers {header['transformers']}, python {header['python']}",
        f"- matmul probe ({header['peak_size']}x{header['peak_size']} mm), best of before and after: "
        f"{header['matmul_peak_gflops']:.1f} GFLOP/s"
        + (f"; stated peak {header['stated_peak_tflops']} TFLOP/s" if header.get("stated_peak_tflops") else ""),
        "",
        "Each table: medians over interleaved rounds; `x Marian` is the median of per-round speed ratios "
        "(above 1 is faster), with the lower and upper quartiles of the rounds in parentheses. Training: "
        "forward, cross-entropy, backward and AdamW with dropout 0.1, target "
        "tokens/s. Generation: `generate` with KV cache, batch 8 (other batch sizes in their own tables), "
        f"{NEW_TOKENS} new tokens for every row (min_new_tokens = max_new_tokens, for every engine alike). MFU: "
        "matmul FLOP/s of the training step over that of a square matmul timed in the same rounds (median of "
        "per-round ratios). Memory: peak rise during a training step.",
    ]
    deployed = any(ENTRIES[name].engine for name in header["models"])
    if deployed and header["device"] == "cpu":
        lines += [
            "",
            "Deployed engines (generation only, float32 activations): `ours` with the same weights, exported or "
            "quantized before the rounds (not timed), decoding the same batch in the same interleaved rounds as "
            "Marian's `generate`; the CTranslate2 and ONNX Runtime ones use as many cores as torch has threads, "
            "as that many one-thread workers each decoding a part of the batch (`for_cpu`).",
        ]
    elif deployed:
        lines += [
            "",
            f"Deployed engines (generation only): `ours` with the same weights, converted before the rounds (not "
            f"timed), decoding the same batch in the same interleaved rounds as Marian's `generate`; CTranslate2 "
            f"on the same GPU computing in {header['dtype']} as the others (its int8 form: int8 weights, "
            f"{header['dtype']} activations).",
        ]
    stated = header.get("stated_peak_tflops")
    for result in results:
        c = result.config
        lines += [
            "",
            f"## {result.name}: d {c['d_model']}, {c['heads']}x{c['head_dim']} heads, ffn {c['ffn']}, "
            f"{c['layers']}+{c['layers']} layers, vocab {c['vocab_size']}, length {c['length']}, "
            f"batch {c['batch']}",
            "",
        ]
        if result.matmul_probe_gflops is not None:
            lines += [
                f"Matmul probe timed in the training rounds: {result.matmul_probe_gflops:.1f} GFLOP/s (median).",
                "",
            ]
        lines += [
            "| model | params | train tok/s | x Marian | MFU | step memory MB | greedy tok/s | x Marian "
            "| beam4 tok/s | x Marian |" + (" MFU (stated peak) |" if stated else ""),
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if stated else ""),
        ]
        for model, row in result.rows.items():
            mfu = row.get("train_mfu")
            cells = [
                model,
                f"{row['parameters'] / 1e6:.2f}M",
                _number(row.get("train_tokens_per_s")),
                _ratio(row, "train"),
                "-" if mfu is None else f"{mfu:.0%}",
                _number(row.get("train_memory_mb")),
                _number(row.get("greedy_tokens_per_s")),
                _ratio(row, "greedy"),
                _number(row.get("beam4_tokens_per_s")),
                _ratio(row, "beam4"),
            ]
            if stated:
                flops = row.get("train_flops_per_s")
                cells.append("-" if flops is None else f"{flops / (stated * 1e12):.0%}")
            lines.append("| " + " | ".join(cells) + " |")
        for batch_size in result.generation_batch_sizes:
            if batch_size == GENERATION_BATCH:
                continue
            greedy, beam = generation_key("greedy", batch_size), generation_key("beam4", batch_size)
            lines += [
                "",
                f"Generation at batch {batch_size}:",
                "",
                "| model | greedy tok/s | x Marian | beam4 tok/s | x Marian |",
                "|---|---:|---:|---:|---:|",
            ]
            for model, row in result.rows.items():
                if f"{greedy}_tokens_per_s" in row or f"{beam}_tokens_per_s" in row:
                    cells = [
                        model, _number(row.get(f"{greedy}_tokens_per_s")), _ratio(row, greedy),
                        _number(row.get(f"{beam}_tokens_per_s")), _ratio(row, beam),
                    ]  # fmt: skip
                    lines.append("| " + " | ".join(cells) + " |")
        weighed = {model: row for model, row in result.rows.items() if row.get("weights_mb") is not None}
        if weighed:
            lines += [
                "",
                "Weights as deployed: the engine's files (CTranslate2 `model.bin`; ONNX: both graphs, each with the "
                "token table) or the torch `state_dict` as `torch.save` writes it (int8: packed weights and scales). "
                "`x fp32`: over the same form in float32.",
                "",
                "| model | weights MB | x fp32 |",
                "|---|---:|---:|",
            ]
            for model, row in weighed.items():
                lines.append(f"| {model} | {row['weights_mb']:,.1f} | {_number(row.get('weights_vs_fp32'), 2)} |")
        for model, error in result.failed.items():
            lines += ["", f"`{model}` did not run: {error}"]
    lines += ["", "Models: " + "; ".join(f"`{name}` {ENTRIES[name].note}" for name in header["models"]) + "."]
    return "\n".join(lines) + "\n"


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="base-small only, fewer rounds (about 1-2 minutes)")
    parser.add_argument(
        "--configs", default=None, help="comma list of " + ", ".join(CONFIGS) + " (base-small,seed; GPU: and big)"
    )
    parser.add_argument("--models", default=None, help=f"comma list of {', '.join(ENTRIES)} (default {DEFAULT_MODELS})")
    parser.add_argument(
        "--deployed", action="store_true",
        help=f"add the deployed engines ({', '.join(DEPLOYED_MODELS)}) to --models (default then ours,marian); "
        "the report then defaults to benchmarks/results/performance-deployed.md",
    )  # fmt: skip
    parser.add_argument(
        "--generation-batch-sizes", type=int, nargs="+", default=[GENERATION_BATCH], metavar="N",
        help=f"batch sizes of the generation timings (default {GENERATION_BATCH}; e.g. 8 32)",
    )  # fmt: skip
    parser.add_argument("--no-train", action="store_true", help="time generation only")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default=None, choices=["fp32", "bf16", "fp16"], help="fp32 on CPU, bf16 on GPU")
    parser.add_argument("--threads", type=int, default=None, help="torch threads on CPU (default: all cores)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per section (10; quick 5)")
    parser.add_argument("--budget", type=float, default=None, help="seconds per section before stopping (60; quick 12)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed training steps per model first")
    parser.add_argument("--no-beam", action="store_true", help="leave out beam search")
    parser.add_argument("--peak-tflops", type=float, default=None, help="the device's stated dense peak, for MFU")
    parser.add_argument("--peak-size", type=int, default=None, help="matmul size of the peak probe (1024; GPU 4096)")
    parser.add_argument(
        "--keep-freed-memory", action="store_true",
        help="reuse freed memory instead of faulting it in anew (glibc), as the training scripts do; for every model",
    )  # fmt: skip
    parser.add_argument(
        "--keep-denormals", action="store_true",
        help="compute with denormal floats on CPU instead of flushing them to zero (slow on some CPUs)",
    )  # fmt: skip
    parser.add_argument(
        "--output", default=None,
        help=f"Markdown report, JSON beside it ({RESULTS}/performance.md; --deployed: performance-deployed.md)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.deployed:
        models = args.models.split(",") if args.models else ["ours", "marian"]
        args.models = ",".join(models + [name for name in DEPLOYED_MODELS if name not in models])
    args.models = args.models or DEFAULT_MODELS
    args.output = args.output or f"{RESULTS}/performance{'-deployed' if args.deployed else ''}.md"
    on_gpu = args.device.startswith("cuda")
    default_configs = "base-small" if args.quick else ("base-small,seed,big" if on_gpu else "base-small,seed")
    args.configs = (args.configs or default_configs).split(",")
    args.models = args.models.split(",")
    for name in args.configs:
        if name not in CONFIGS:
            parser.error(f"unknown config {name!r}; choose from {', '.join(CONFIGS)}")
    for name in args.models:
        if name not in ENTRIES:
            parser.error(f"unknown model {name!r}; choose from {', '.join(ENTRIES)}")
    if any(size < 1 for size in args.generation_batch_sizes):
        parser.error("--generation-batch-sizes must be positive")
    args.generation_batch_sizes = list(dict.fromkeys(args.generation_batch_sizes))
    args.rounds = args.rounds or (5 if args.quick else 10)
    args.budget = args.budget or (12.0 if args.quick else 60.0)
    args.dtype = args.dtype or ("bf16" if on_gpu else "fp32")
    return args


def _denormal_products_kept() -> bool:
    # Read as integers: a comparison of floats would itself treat denormals as zero on a flushing thread.
    products = torch.full((1 << 20,), 1e-30) * 1e-9  # 1e-39 exactly: a denormal float32
    return bool(products.view(torch.int32).any())


def flush_denormals() -> bool:
    """Flush denormal floats to zero on this CPU, for the rest of the process. torch sets it for the calling thread;
    intra-op threads started later inherit it, so it holds everywhere only when set before the first parallel
    work. True if every thread flushes (a product computed in parallel gives zero bits only where its exact
    value is denormal); else undone."""
    if not torch.set_flush_denormal(True):
        return False
    if not _denormal_products_kept():
        return True
    torch.set_flush_denormal(False)
    return False


def main(argv: list[str] | None = None) -> dict:
    """Runs the benchmark; on CPU it first flushes denormals for the process (``flush_denormals``) unless
    ``--keep-denormals``."""
    args = parse_arguments(argv)
    device = torch.device(args.device)
    flushed_denormals = device.type == "cpu" and not args.keep_denormals and flush_denormals()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.keep_freed_memory:
        from hf_transformer.training import keep_freed_memory

        if not keep_freed_memory():
            raise SystemExit("--keep-freed-memory needs glibc's malloc")
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # saving and loading the folders the deployed engines are made from
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", flush=True)

    args.peak_size = peak_size = args.peak_size or (4096 if device.type == "cuda" else 1024)
    peak = matmul_peak(device, dtype, peak_size)
    log(f"matmul peak {peak / 1e9:.1f} GFLOP/s ({args.dtype}, {peak_size}x{peak_size})")
    results = []
    threads = torch.get_num_threads()
    for name in args.configs:
        log(f"config {name}")
        results.append(run_config(name, args.models, device, dtype, args, log))
        check_threads(threads, f"during {name}")
    peak = max(peak, matmul_peak(device, dtype, peak_size))  # the better of the probes before and after

    header = dict(
        command=["benchmarks/benchmark.py", *(argv if argv is not None else sys.argv[1:])],
        date=datetime.date.today().isoformat(), machine=machine_description(device), device=str(device),
        dtype=args.dtype, threads=torch.get_num_threads(), torch=torch.__version__,
        transformers=transformers.__version__, python=platform.python_version(), peak_size=peak_size,
        matmul_peak_gflops=peak / 1e9, stated_peak_tflops=args.peak_tflops, models=args.models,
        kept_memory=args.keep_freed_memory, flushed_denormals=flushed_denormals,
        generation_batch_sizes=args.generation_batch_sizes, trained=not args.no_train,
        wall_seconds=round(time.perf_counter() - started, 1),
    )  # fmt: skip
    report = markdown(results, header)
    print(report)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report)
    record = dict(
        header,
        results=[
            dict(
                config=r.name,
                settings=r.config,
                matmul_probe_gflops=r.matmul_probe_gflops,
                models=r.rows,
                failed=r.failed,
            )
            for r in results
        ],
    )
    output.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    log(f"wrote {output} and {output.with_suffix('.json')}")
    return record


if __name__ == "__main__":
    main()
