"""transformers' own FSDP 2 loading: ``from_pretrained(folder, distributed_config=DistributedConfig(fsdp_size=2))`` in
two CPU processes over gloo shards each encoder and decoder layer as a unit (the stacks' ``_fsdp_plan``), trains, and
saves a folder that loads as always.

The token table the encoder and decoder share is also the output projection: transformers folds only one input/output
pair into one unit by itself, so the test checks that the three stay one tensor through the steps and in the saved
folder. The two processes train on different halves of a batch; their update must be the one a single process makes
on the whole batch.

This file is also the script each process runs: ``python tests/test_fsdp_loading.py FOLDER OUTPUT``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parent.parent
STEPS, LEARNING_RATE = 3, 0.05
REPORT = re.compile(r"fsdp loading report: (\{.*\})")

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed with gloo is not available"
)


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(source, labels) of each step: 4 rows, the first two for process 0 and the last two for process 1, each row
    with as many target tokens, so that the mean loss of the whole batch is the mean of the halves' means."""
    generator = torch.Generator().manual_seed(0)
    return [
        (torch.randint(4, 40, (4, 7), generator=generator), torch.randint(4, 40, (4, 5), generator=generator))
        for _ in range(STEPS)
    ]


def train(model, rows: slice) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    model.train()
    losses = []
    for source, labels in batches():
        loss = model(input_ids=source[rows], labels=labels[rows]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def tied_tables(model) -> list[torch.Tensor]:
    """The encoder's and the decoder's token tables and the output projection."""
    return [
        model.model.encoder.embeddings.embed_tokens.weight,
        model.model.decoder.embeddings.embed_tokens.weight,
        model.lm_head.weight,
    ]


def one_tensor(tensors: list[torch.Tensor]) -> bool:
    return all(tensor is tensors[0] for tensor in tensors)


def worker(folder: str, output: str) -> None:
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor
    from transformers import DistributedConfig

    from hf_transformer import TransformerForConditionalGeneration
    from hf_transformer.training import end_process_group

    rank = int(os.environ["RANK"])
    sharding = DistributedConfig(fsdp_size=2)
    model = TransformerForConditionalGeneration.from_pretrained(folder, distributed_config=sharding)
    tied_before = one_tensor(tied_tables(model))
    train(model, slice(2 * rank, 2 * rank + 2))
    report = {
        "rank": rank,
        "units": sorted(name for name, module in model.named_modules() if isinstance(module, FSDPModule)),
        "sharded": all(isinstance(parameter, DTensor) for parameter in model.parameters()),
        "tied": tied_before and one_tensor(tied_tables(model)),
    }
    model.save_pretrained(output)
    # One write: the two processes share the pipe, and a short single write is not interleaved (print's separate
    # writes of its parts were, under load: "fsdp loading report:fsdp loading report:  {...}{...}").
    sys.stdout.write(f"fsdp loading report: {json.dumps(report)}\n")
    sys.stdout.flush()
    # The training scripts' teardown: wait for the other process, then close the group before the interpreter exits
    # (left to the exit, a gloo group's threads can abort a finished process with SIGABRT).
    end_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_transformers_fsdp2_loading_trains_and_saves_the_tied_model(tmp_path):
    from transformers import AutoModelForSeq2SeqLM

    from hf_transformer import TransformerConfig, TransformerForConditionalGeneration

    # No dropout: the processes' updates are compared with one process's.
    config = TransformerConfig(
        vocab_size=40, d_model=16, num_attention_heads=2, intermediate_size=32, n_layer=2, dropout=0.0
    )
    config.max_position_embeddings = config.decoder_max_position_embeddings = 32
    torch.manual_seed(0)
    TransformerForConditionalGeneration(config).save_pretrained(tmp_path / "model")

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "GLOO_SOCKET_IFNAME": "lo",  # gloo must not pick an external interface
    }
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
        __file__, str(tmp_path / "model"), str(tmp_path / "trained"),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    reports = {report["rank"]: report for report in map(json.loads, REPORT.findall(done.stdout))}
    assert sorted(reports) == [0, 1], done.stdout[-3000:]
    layers = [f"model.{stack}.layers.{i}" for stack in ("decoder", "encoder") for i in range(2)]
    for report in reports.values():
        assert report["units"] == ["", *layers]  # each layer a unit, the rest in the model's root unit
        assert report["sharded"] and report["tied"]
    assert "match nothing" not in done.stderr  # every rule of the plan names modules of the model

    trained, info = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "trained", output_loading_info=True)
    assert not any(info.values()), info
    assert one_tensor(tied_tables(trained))
    # One process, the whole batch: the same update.
    single = TransformerForConditionalGeneration.from_pretrained(tmp_path / "model")
    before = {name: parameter.detach().clone() for name, parameter in single.named_parameters()}
    train(single, slice(0, 4))
    expected = dict(single.named_parameters())
    for name, parameter in trained.named_parameters():
        torch.testing.assert_close(parameter, expected[name], rtol=1e-5, atol=1e-6, msg=name)
    assert not torch.equal(trained.lm_head.weight, before["model.encoder.embeddings.embed_tokens.weight"])  # trained


if __name__ == "__main__":
    worker(*sys.argv[1:3])
