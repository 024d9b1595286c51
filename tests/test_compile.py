"""``torch.compile`` traces the model in one graph (no host round trips, no unsupported ops) and the compiled
training step computes what the eager one does."""

import pytest
import torch

from hf_transformer import TransformerForConditionalGeneration
from tests.helpers.launch import load_benchmark_module
from tests.helpers.models import batch_with_padding, tiny_config

pytestmark = pytest.mark.slow


def _inputs(padding: bool) -> dict:
    source, target = batch_with_padding()
    if not padding:
        source, target = source.clamp(min=4), target.clamp(min=4)
    labels = target.masked_fill(target == 0, -100)
    return dict(input_ids=source, attention_mask=source.ne(0).long(), labels=labels)


@pytest.mark.parametrize("padding", [True, False])
def test_training_step_compiles_to_one_graph_with_the_eager_loss_and_gradients(padding):
    torch.manual_seed(0)
    model = TransformerForConditionalGeneration(tiny_config()).train()
    eager_loss = model(**_inputs(padding)).loss
    eager_loss.backward()
    eager_gradients = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)

    # fullgraph: any graph break (a host read of a tensor such as the id-range check, or an unsupported op)
    # raises. aot_eager traces the backward as well but runs torch's own kernels, so the results must agree.
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    loss = compiled(**_inputs(padding)).loss
    loss.backward()
    torch.testing.assert_close(loss, eager_loss, rtol=1e-6, atol=1e-6)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, eager_gradients[name], rtol=1e-5, atol=1e-6, msg=name)


def test_compiled_model_with_dropout_drops_and_stays_in_one_graph():
    torch.manual_seed(0)
    model = TransformerForConditionalGeneration(tiny_config(dropout=0.5)).train()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    inputs = _inputs(padding=True)
    first, second = compiled(**inputs).loss, compiled(**inputs).loss
    assert torch.isfinite(first) and not torch.equal(first, second)  # fresh masks at each call
    with torch.no_grad():
        compiled_loss, eager_loss = compiled.eval()(**inputs).loss, model.eval()(**inputs).loss
        dropped_loss = model.train()(**inputs).loss
    # No dropout in eval. The traced graph and the eager model may run different kernels (AVX2 vs AVX-512 builds
    # of the same op), so the two losses agree to rounding, not bit for bit: a tolerance of a few 1e-5. Dropout at
    # 0.5 left on moves this loss by about 0.3 on average and by more than 1e-3 in all but the rarest draws, so the
    # tolerance is far below what a dropout left on in eval would change (checked on one draw below).
    tolerance = dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(compiled_loss, eager_loss, **tolerance)
    assert not torch.allclose(dropped_loss, eager_loss, **tolerance)


def test_device_check_passes_on_the_cpu(capsys):
    device_check = load_benchmark_module("device_check")
    assert device_check.main(["--device", "cpu"]) == 0
    report = capsys.readouterr().out
    assert "FAIL" not in report and report.count("ok  ") == 14
    assert "static cache: same tokens" in report


def test_device_check_compares_ctranslate2_tokens_with_the_reference(monkeypatch, capsys):
    """Its CTranslate2 lines run on CUDA only; here on the CPU (the GPU count faked), they pass for the reference's
    own weights and fail for weights that differ."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    load_benchmark_module("benchmark")  # device_check imports it as its neighbour (run as a script, it is on the path)
    device_check = load_benchmark_module("device_check")
    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 1)
    cpu = torch.device("cpu")
    batch = device_check.padded_batch(cpu)
    reference = device_check.build(cpu, torch.float64, "eager")
    checks = device_check.Checks()
    device_check.ctranslate2_checks(checks, reference, batch, cpu)
    assert checks.failed == [] and capsys.readouterr().out.count("ok   CTranslate2 on CUDA fp32") == 2
    with torch.no_grad():
        reference.lm_head.weight.add_(torch.randn_like(reference.lm_head.weight))  # the tied table, another model
    device_check.ctranslate2_checks(checks, reference, batch, cpu)
    assert len(checks.failed) == 2


def test_trainer_with_torch_compile_follows_the_eager_run_and_saves_a_loadable_model(tmp_path):
    from transformers import AutoModelForSeq2SeqLM, DataCollatorForSeq2Seq, Trainer, TrainingArguments

    from tests.test_integration import _PadOnlyTokenizer, copy_task

    runs = {}
    for compiled in (False, True):
        torch.manual_seed(0)
        model = TransformerForConditionalGeneration(tiny_config(d_model=64, intermediate_size=128))
        args = TrainingArguments(
            output_dir=str(tmp_path / str(compiled)), per_device_train_batch_size=32, learning_rate=2e-3,
            max_steps=12, logging_steps=3, save_strategy="no", report_to=[], disable_tqdm=True, use_cpu=True,
            seed=0, torch_compile=compiled,
            torch_compile_backend="aot_eager" if compiled else None,  # inductor's tracing, torch's own kernels
        )  # fmt: skip
        collator = DataCollatorForSeq2Seq(_PadOnlyTokenizer(), model=model, label_pad_token_id=-100)
        torch._dynamo.reset()
        trainer = Trainer(model=model, args=args, train_dataset=copy_task(384), data_collator=collator)
        trainer.train()
        runs[compiled] = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert trainer.model_wrapped is not model  # the compiled run's steps went through the compiled wrapper
    assert len(runs[True]) == 4 and runs[True][-1] < runs[True][0]
    torch.testing.assert_close(runs[True], runs[False], rtol=1e-4, atol=0)

    trainer.model.save_pretrained(str(tmp_path / "saved"))  # Trainer keeps the uncompiled model here
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path / "saved"))
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(reloaded.state_dict()[name], tensor, rtol=0, atol=0, msg=name)


def test_compiled_model_still_rejects_ids_outside_the_vocabulary():
    """Compiled, the host-side id check is skipped; the embedding's own bounds check must still raise."""
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    source = torch.tensor([[5, 6, model.config.vocab_size]])
    with torch.no_grad(), pytest.raises((IndexError, RuntimeError), match="out of range|out of bounds"):
        compiled(input_ids=source, decoder_input_ids=torch.tensor([[2, 7]]))
