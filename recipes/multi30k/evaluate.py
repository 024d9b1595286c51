"""Score saved Multi30k translation models, alone or as an ensemble, as recipes.multi30k.train scores its own:
beam search's length penalty chosen on validation, then test2016 decoded once with it (and once greedily), both
BLEU forms (cased sacreBLEU, lowercased Moses-tokenised `bleu_lc_tok`).

    python -m recipes.multi30k.evaluate --model_dirs runs/m30k-en-de-v7 runs/m30k-en-de-v7s43 \
        --output_dir runs/m30k-en-de-ens2 --data_dir ../shared/data --source_lang en --target_lang de \
        --num_beams 5 --length_penalty 1.0 1.4 1.8

With several `--model_dirs` the models decode as one ensemble (hf_transformer.ensemble: the log of the members'
mean next-token probability); they must share one tokenizer (train them with `python -m recipes.multi30k.train
--tokenizer FOLDER`). The output folder gets `results.json` (the members' own test figures beside the ensemble's)
and `test_predictions.txt`; `python -m recipes.common.collect_results` reads it like a training run's folder.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import HfArgumentParser, Seq2SeqTrainer, Seq2SeqTrainingArguments

import hf_transformer  # noqa: F401  (registers the Auto classes)
from hf_transformer.commands import parse_arguments, run_command
from hf_transformer.data import seq2seq_collator, tokenize_translation
from hf_transformer.ensemble import TransformerEnsemble
from hf_transformer.metrics import require_scorers
from recipes.multi30k.bleu import SCORERS
from recipes.multi30k.data import DataArguments
from recipes.multi30k.scoring import (
    check_direction,
    check_output_dir,
    headline,
    lowercases,
    score,
    split_metrics,
    task_fields,
)

logger = logging.getLogger("recipes.multi30k.evaluate")

PROGRAM = "recipes.multi30k.evaluate"  # how results.json names the program


@dataclass
class EvaluationArguments:
    model_dirs: list[str] = field(metadata={"help": "saved translation model folders; several decode as an ensemble"})
    output_dir: str = field(metadata={"help": "where results.json and test_predictions.txt go"})
    num_beams: int = field(default=5, metadata={"help": "beam size of the scoring"})
    length_penalty: list[float] = field(
        default_factory=lambda: [1.0],
        metadata={"help": "beam search length penalties tried on validation; the best is used for test"},
    )
    per_device_eval_batch_size: int = field(default=128, metadata={"help": "sentences per decoding batch"})
    bf16: bool = field(
        default=False,
        metadata={
            "help": "decode under bfloat16 autocast, as recipes.multi30k.train scores a run trained with --bf16 true "
            "(its Trainer evaluates under the training precision)"
        },
    )
    use_cpu: bool = field(default=False, metadata={"help": "decode on the CPU even where a GPU is present"})

    def __post_init__(self):
        check_output_dir(self.output_dir, model_dirs=self.model_dirs)


def load_models(model_dirs: list[str]):
    """The model of one folder, exactly as trained, or the ensemble of several; and their shared tokenizer."""
    model, tokenizer = TransformerEnsemble.from_folders(model_dirs)
    if len(model.members) == 1:
        model = model.members[0]
    return model, tokenizer


def tokenize(splits, tokenizer, config, data_args: DataArguments):
    return tokenize_translation(
        splits,
        tokenizer,
        source_lang=data_args.source_lang,
        target_lang=data_args.target_lang,
        max_source_length=config.max_position_embeddings,
        max_target_length=config.decoder_max_position_embeddings or config.max_position_embeddings,
    )


def evaluate(model, tokenizer, splits, tokenized, args: EvaluationArguments, data_args: DataArguments):
    """recipes.multi30k.scoring.score with a Trainer that decodes as the training step's does: the scores and the
    beam search's test hypotheses."""
    metric, has_lc_tok_validation = split_metrics(splits, tokenized, tokenizer, data_args)
    with tempfile.TemporaryDirectory() as scratch:
        trainer = Seq2SeqTrainer(
            model=model,
            args=Seq2SeqTrainingArguments(
                output_dir=scratch,
                per_device_eval_batch_size=args.per_device_eval_batch_size,
                predict_with_generate=True,
                # The training step's evaluation: batches of similar length, in the training precision.
                train_sampling_strategy="group_by_length",
                bf16=args.bf16,
                use_cpu=args.use_cpu or not torch.cuda.is_available(),
                report_to="none",
                disable_tqdm=True,
            ),
            eval_dataset=tokenized["validation"],
            data_collator=seq2seq_collator(tokenizer, model),
            processing_class=tokenizer,
        )
        return score(
            trainer,
            tokenized["test"],
            metric,
            num_beams=args.num_beams,
            length_penalties=args.length_penalty,
            lowercase=lowercases(tokenizer),
            has_lc_tok_validation=has_lc_tok_validation,
        )


def members(model_dirs: list[str]) -> list[dict]:
    """Each folder's own figures, from its results.json (where it has one)."""
    found = []
    for folder in model_dirs:
        path = Path(folder) / "results.json"
        own = json.loads(path.read_text()) if path.is_file() else {}
        kept = ("bleu", "bleu_lc_tok", "eval_bleu", "eval_bleu_lc_tok", "wall_seconds", "world_size", "command")
        found.append({"folder": folder, **{k: own[k] for k in kept if k in own}})
    return found


def save(output_dir: str, results: dict, test_hypotheses: list[str]) -> Path:
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(results, indent=2, default=str, ensure_ascii=False))
    (folder / "test_predictions.txt").write_text("\n".join(test_hypotheses) + "\n", encoding="utf-8")
    return folder


def main(argv: list[str] | None = None) -> dict:
    args, data_args = parse_arguments(HfArgumentParser((EvaluationArguments, DataArguments)), argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    require_scorers(SCORERS)
    started = time.time()
    check_direction(args.model_dirs, data_args.source_lang, data_args.target_lang)
    model, tokenizer = load_models(args.model_dirs)
    splits = data_args.evaluation_splits()
    tokenized = tokenize(splits, tokenizer, model.config, data_args)
    scores, test_hypotheses = evaluate(model, tokenizer, splits, tokenized, args, data_args)
    results = {
        **task_fields(data_args),
        "ensemble": members(args.model_dirs),
        **scores,
        **headline(scores),
        "num_beams": args.num_beams,
        "eval_samples": len(tokenized["validation"]),
        "test_samples": len(tokenized["test"]),
        "parameters": sum(member.num_parameters() for member in getattr(model, "members", [model])),
        "wall_seconds": round(time.time() - started, 1),
        "command": " ".join([PROGRAM, *(argv if argv is not None else sys.argv[1:])]),
    }
    output_dir = save(args.output_dir, results, test_hypotheses)
    logger.info(
        "test2016 BLEU %.2f, lc-tok %s (beam %d, length penalty %s); %s",
        results["test_bleu"],
        f"{results['bleu_lc_tok']:.2f}" if "bleu_lc_tok" in results else "-",
        args.num_beams,
        results["length_penalty"],
        output_dir / "results.json",
    )
    return results


if __name__ == "__main__":
    run_command(main)
