"""Does the model compute the same function on an accelerator as on the CPU? Run before trusting a benchmark there.

    python benchmarks/device_check.py --device cuda

One small model with padded batches, its weights copied to the device, against the same model in float64 on
the CPU: evaluation logits (sdpa and eager attention, fp32 and bf16 autocast), the training loss and every
gradient (dropout off), greedy and beam generation (same tokens, scores within tolerance; also over a static
cache, whose decoding step generate compiles on a GPU), the dropout rate in training, and on CUDA the tokens of
the model converted to CTranslate2 (float32, where ctranslate2 sees the GPU). Each line prints the relative error
||x - ref|| / ||ref|| and its bound; the exit status is 1 if any check fails. It also lists the attention kernels
that a training step with dropout ran (GPU profiler).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import sys
import tempfile
from pathlib import Path

import torch

from hf_transformer import TransformerConfig, TransformerForConditionalGeneration

PAD, START, EOS = 0, 1, 2
FP32_BOUND = 1e-4
BF16_BOUND = 3e-2


def build(device: torch.device, dtype: torch.dtype, attention: str, dropout: float = 0.0):
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=96, d_model=64, num_attention_heads=4, head_dim=16, intermediate_size=128, encoder_layers=2,
        decoder_layers=2, max_position_embeddings=48, dropout=dropout, attention_dropout=dropout,
        pad_token_id=PAD, bos_token_id=START, eos_token_id=EOS, decoder_start_token_id=START,
        attn_implementation=attention,
    )  # fmt: skip
    return TransformerForConditionalGeneration(config).to(device=device, dtype=dtype)


def padded_batch(device: torch.device) -> dict:
    generator = torch.Generator().manual_seed(1)
    source = torch.randint(3, 96, (4, 12), generator=generator)
    labels = torch.randint(3, 96, (4, 10), generator=generator)
    source[1, 8:] = PAD
    source[3, 5:] = PAD
    labels[2, 6:] = -100
    return dict(input_ids=source, attention_mask=source.ne(PAD).long(), labels=labels)


def relative_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    value, reference = value.detach().double().cpu(), reference.detach().double().cpu()
    if not torch.isfinite(value).all():
        return float("inf")
    return ((value - reference).norm() / reference.norm().clamp(min=1e-30)).item()


class Checks:
    def __init__(self):
        self.failed = []

    def error(self, name: str, error: float, bound: float) -> None:
        self.truth(name, error <= bound, f"relative error {error:.2e} (bound {bound:.0e})")

    def truth(self, name: str, ok: bool, detail: str = "") -> None:
        print(f"{'ok  ' if ok else 'FAIL'} {name:<48} {detail}")
        if not ok:
            self.failed.append(name)


def to(batch: dict, device: torch.device) -> dict:
    return {key: value.to(device) for key, value in batch.items()}


def autocast(device: torch.device, dtype: torch.dtype | None):
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def attention_kernels(device: torch.device) -> list[str]:
    """Names of the attention kernels one bf16 training step with dropout launches on ``device``."""
    from torch.profiler import ProfilerActivity, profile

    model = build(device, torch.float32, "sdpa", dropout=0.1).train()
    batch = dict(to(padded_batch(device), device), attention_mask=None)  # no padding: the fused kernels apply
    batch["input_ids"] = batch["input_ids"].clamp(min=3)
    batch["labels"] = batch["labels"].clamp(min=3)
    with profile(activities=[ProfilerActivity.CUDA]) as profiler, autocast(device, torch.bfloat16):
        model(**batch).loss.backward()
    torch.cuda.synchronize(device)
    names = {event.name for event in profiler.events() if event.device_type.name == "CUDA"}
    return sorted(name[:90] for name in names if any(key in name.lower() for key in ("flash", "attention", "fmha")))


def ctranslate2_checks(checks: Checks, reference, batch: dict, device: torch.device) -> None:
    """The model converted to CTranslate2 and decoded on the GPU in float32: the reference's greedy and beam tokens
    on the padded batch. Skipped, with the reason, where ctranslate2 or its CUDA support is missing."""
    if importlib.util.find_spec("ctranslate2") is None:
        print("skip CTranslate2 on CUDA: ctranslate2 is not installed")
        return
    import ctranslate2

    if ctranslate2.get_cuda_device_count() < 1:
        print("skip CTranslate2 on CUDA: ctranslate2 sees no CUDA device")
        return
    try:  # python -m benchmarks.device_check, or imported from the repository root
        from benchmarks.benchmark import word_tokenizer
    except ModuleNotFoundError:  # python benchmarks/device_check.py: the script's own folder is on the path
        from benchmark import word_tokenizer

    from hf_transformer.export import to_ctranslate2
    from hf_transformer.export.ctranslate2_export import CTranslate2Generator

    model = build(torch.device("cpu"), torch.float32, "sdpa").eval()  # the reference's weights, in float32
    source = {key: batch[key] for key in ("input_ids", "attention_mask")}
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(Path(folder) / "model")
        word_tokenizer(model.config.vocab_size).save_pretrained(Path(folder) / "model")
        converted = to_ctranslate2(Path(folder) / "model", Path(folder) / "ct2")
        generator = CTranslate2Generator(converted, device=str(device), compute_type="float32")
        for beams in (1, 4):
            arguments = dict(num_beams=beams, max_new_tokens=16)
            # CTranslate2 stops a beam search once num_beams hypotheses have ended: HF's early_stopping=True (a
            # beam-search flag: generate warns of it in greedy search).
            sequences = reference.eval().generate(**source, do_sample=False, early_stopping=beams > 1, **arguments)
            expected = sequences[:, 1:].tolist()  # without the start token, as CTranslate2 returns them
            got = generator.generate(**source, length_penalty=1.0, **arguments)
            checks.truth(f"CTranslate2 on CUDA fp32, {beams} beam(s): same tokens", got == expected)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    device = torch.device(parser.parse_args(argv).device)
    checks = Checks()
    print(f"device {device}" + (f": {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""))
    print(f"torch {torch.__version__}")

    cpu = torch.device("cpu")
    batch = padded_batch(cpu)
    reference = build(cpu, torch.float64, "eager")
    with torch.no_grad():
        reference_logits = reference.eval()(**batch).logits
    reference_output = reference.train()(**batch)
    reference_output.loss.backward()
    reference_gradients = {name: p.grad for name, p in reference.named_parameters() if p.grad is not None}

    for attention in ("sdpa", "eager"):
        model = build(device, torch.float32, attention)
        for cast, bound in ((None, FP32_BOUND), (torch.bfloat16, BF16_BOUND)):
            label = f"{attention} {'bf16 autocast' if cast else 'fp32'}"
            with torch.no_grad(), autocast(device, cast):
                logits = model.eval()(**to(batch, device)).logits
            checks.error(f"eval logits, {label}", relative_error(logits, reference_logits), bound)
        model.train()
        output = model(**to(batch, device))
        output.loss.backward()
        checks.error(f"training loss, {attention} fp32", relative_error(output.loss, reference_output.loss), 1e-5)
        # All gradients as one vector: some are zero in exact arithmetic (the key bias: softmax ignores a
        # constant added to every score), so their own relative error is noise over nothing.
        names = sorted(reference_gradients)
        gradients = dict(model.named_parameters())
        checks.error(
            f"gradients, {attention} fp32",
            relative_error(
                torch.cat([gradients[name].grad.double().cpu().flatten() for name in names]),
                torch.cat([reference_gradients[name].flatten() for name in names]),
            ),
            FP32_BOUND,
        )

    model = build(device, torch.float32, "sdpa").eval()
    for beams in (1, 4):
        arguments = dict(
            num_beams=beams, max_new_tokens=16, min_new_tokens=16, do_sample=False, output_scores=True,
            return_dict_in_generate=True,
        )  # fmt: skip
        source = {key: batch[key] for key in ("input_ids", "attention_mask")}
        expected = reference.eval().generate(**source, **arguments)
        got = model.generate(**to(source, device), **arguments)
        same = torch.equal(got.sequences.cpu(), expected.sequences)
        checks.truth(f"generate, {beams} beam(s): same tokens", same, f"{tuple(got.sequences.shape)}")
        if beams > 1:
            checks.error("generate, 4 beams: sequence scores", relative_error(
                got.sequences_scores, expected.sequences_scores), FP32_BOUND)  # fmt: skip
        # A static cache; on a GPU generate also compiles the greedy decoding step over it (CUDA graphs). Beam search
        # is not compiled by generate, so only the greedy line can say so.
        static = model.generate(**to(source, device), cache_implementation="static", **arguments)
        compiled = " (compiled step)" if beams == 1 and hasattr(model, "_compiled_call") else ""
        same = torch.equal(static.sequences.cpu(), expected.sequences)
        checks.truth(f"generate, {beams} beam(s), static cache{compiled}: same tokens", same)

    if device.type == "cuda":
        ctranslate2_checks(checks, reference, batch, device)

    model = build(device, torch.float32, "sdpa", dropout=0.1).train()
    hidden = torch.ones(1 << 20, device=device)
    dropped = (model.model.encoder.embeddings.dropout(hidden) == 0).float().mean().item()
    checks.truth("dropout rate in training", abs(dropped - 0.1) < 0.003, f"{dropped:.4f} (p = 0.1)")

    if device.type == "cuda":
        print("attention kernels of a bf16 training step with dropout:")
        for name in attention_kernels(device):
            print("   ", name)
    print("all checks passed" if not checks.failed else f"FAILED: {', '.join(checks.failed)}")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
