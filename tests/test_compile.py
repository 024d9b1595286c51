"""``torch.compile`` traces the model in one graph (no host round trips, no unsupported ops) and the compiled
training step computes what the eager one does."""

import pytest
import torch
from conftest import batch_with_padding, tiny_config
from launch_utils import load_benchmark_module

from hf_transformer import TransformerForConditionalGeneration


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
        assert torch.equal(compiled.eval()(**inputs).loss, model.eval()(**inputs).loss)  # no dropout in eval


def test_device_check_passes_on_the_cpu(capsys):
    device_check = load_benchmark_module("device_check")
    assert device_check.main(["--device", "cpu"]) == 0
    report = capsys.readouterr().out
    assert "FAIL" not in report and report.count("ok  ") == 12
