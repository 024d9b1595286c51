"""Noisy-channel reranking of Multi30k translations (recipes.multi30k.reranking): beam search's n-best lists from
the forward model(s), each candidate rescored with a model of the reverse direction, the channel weight and the
length exponent chosen on validation, test2016 scored once with them.

    python -m recipes.multi30k.rerank --model_dirs runs/m30k-de-en --channel_model_dirs runs/m30k-en-de \
        --output_dir runs/m30k-de-en-rerank --data_dir ../shared/data --source_lang de --target_lang en \
        --num_candidates 5

Several `--model_dirs` (or `--channel_model_dirs`) score as their ensemble (they must share one tokenizer); the
forward and the channel models need not share one. An ensemble's folder as recipes/multi30k/train_ensemble.sh (or
`python -m recipes.multi30k.evaluate`) leaves it stands for its members, and beam search takes the length penalty
its scoring chose on validation:

    python -m recipes.multi30k.rerank --model_dirs runs/m30k-de-en-ensemble \
        --channel_model_dirs runs/m30k-en-de-ensemble --output_dir runs/m30k-de-en-ensemble-reranked \
        --data_dir ../shared/data --source_lang de --target_lang en

`--engine ctranslate2` decodes and scores both models in CTranslate2 (each folder converted on loading; one model
each way): a 10-best reranking of a 7.6M-parameter model runs many times faster than torch on a CPU, and the setting
chosen on its scores is what `recipes.multi30k.distill` then decodes the training sources with, on the same engine.

The output folder gets `candidates.json` (each split's n-best lists and both scores: `--candidates_from` that
folder chooses again, with other grids, without decoding), `results.json` (the reranked figures as `bleu` /
`bleu_lc_tok`, beside those of the n-best's first candidates, which are beam search's own output, and every grid
setting's validation score) and `test_predictions.txt`; `python -m recipes.common.collect_results` reads it like a
training run's folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

import hf_transformer  # noqa: F401  (registers the Auto classes)
from hf_transformer import Predictor
from hf_transformer.commands import parse_arguments, run_command
from hf_transformer.folders import SEQ2SEQ
from hf_transformer.hub import count_parameters
from hf_transformer.metrics import bleu, require_scorers
from hf_transformer.saved_folder import read_folder
from recipes.multi30k.bleu import SCORERS, bleu_lc_tok
from recipes.multi30k.data import DataArguments
from recipes.multi30k.reranking import (
    SequenceScores,
    candidates,
    choose_weights,
    mbr_utilities,
    rerank,
    score_both_ways,
)
from recipes.multi30k.scoring import (
    check_direction,
    check_output_dir,
    headline,
    lc_tok_references,
    lowercases,
    task_fields,
)

logger = logging.getLogger("recipes.multi30k.rerank")

PROGRAM = "recipes.multi30k.rerank"  # how results.json names the program


@dataclass
class RerankArguments:
    model_dirs: list[str] = field(
        metadata={"help": "the forward translation model folder(s) or an ensemble's folder; several: an ensemble"}
    )
    channel_model_dirs: list[str] = field(
        metadata={"help": "the reverse direction's model folder(s), scoring p(source | candidate)"}
    )
    output_dir: str = field(metadata={"help": "where results.json and test_predictions.txt go"})
    num_candidates: int = field(default=5, metadata={"help": "n-best size (beam search with this many beams)"})
    length_penalty: float | None = field(
        default=None,
        metadata={
            "help": "beam search's length penalty (default: the forward ensemble folder's choice, else the model's)"
        },
    )
    channel_weights: list[float] = field(
        default_factory=lambda: [0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0],
        metadata={"help": "channel weights tried on validation (0: the forward model alone)"},
    )
    length_exponents: list[float] = field(
        default_factory=lambda: [0.25, 0.5, 0.75, 1.0, 1.25],
        metadata={"help": "exponents of the candidate length dividing the score, tried on validation"},
    )
    mbr_scales: list[float] = field(
        default_factory=list,
        metadata={
            "help": "also try minimum Bayes risk decoding over the n-best (expected sentence BLEU), its posterior "
            "softmax(scale (log p(y|x) + weight log p(x|y))), with each of these scales and each channel weight"
        },
    )
    candidates_from: str | None = field(
        default=None,
        metadata={
            "help": "a folder an earlier run of this script wrote: its candidates.json (n-best lists and both scores) "
            "is reused instead of decoding again; its models, n-best size and length penalty must be these"
        },
    )
    batch_size: int = field(default=64, metadata={"help": "sentences per decoding and scoring batch"})
    device: str = field(default="cpu", metadata={"help": "cpu, cuda, ..."})
    engine: str = field(
        default="torch",
        metadata={
            "help": "torch, or ctranslate2: both models decode and score in CTranslate2 (one folder each, converted "
            "on loading; many times faster on a CPU)"
        },
    )
    quantization: str | None = field(
        default=None, metadata={"help": "with --engine ctranslate2: int8 and the like (default: float32 weights)"}
    )

    def __post_init__(self):
        check_output_dir(self.output_dir, model_dirs=self.model_dirs, channel_model_dirs=self.channel_model_dirs)
        if self.num_candidates < 1:
            raise ValueError(f"--num_candidates must be 1 or more, got {self.num_candidates}")
        for option, values in (
            ("--channel_weights", self.channel_weights),
            ("--length_exponents", self.length_exponents),
            ("--mbr_scales", self.mbr_scales),
        ):
            if any(value < 0 for value in values):
                raise ValueError(f"{option} must be 0 or more, got {values}")


def model_folders(folders: list[str]) -> tuple[list[str], float | None]:
    """The model folders ``folders`` name, and the length penalty an ensemble's scoring chose on validation (None if
    none is named): a folder recipes.multi30k.evaluate wrote (results.json listing the ``ensemble``, no
    config.json; recipes/multi30k/train_ensemble.sh's output) stands for its members, each found where it was scored
    or, moved since, inside that folder (where the ensemble job trains them)."""
    members, length_penalty = [], None
    for folder in folders:
        path = Path(folder)
        recorded = path / "results.json"
        scored = {}
        if not (path / "config.json").is_file() and recorded.is_file():
            scored = json.loads(recorded.read_text())
        if "ensemble" not in scored:
            members.append(folder)  # a model or adapter folder; anything else fails in Predictor, naming it
            continue
        for member in scored["ensemble"]:
            places = [Path(member["folder"]), path / Path(member["folder"]).name]
            found = next((candidate for candidate in places if (candidate / "config.json").is_file()), None)
            if found is None:
                raise FileNotFoundError(
                    f"ensemble {folder}: member {member['folder']} not found (looked in {', '.join(map(str, places))})"
                )
            members.append(str(found))
        if length_penalty is None:
            length_penalty = scored.get("length_penalty")
    return members, length_penalty


CANDIDATES_FILE = "candidates.json"


def weights_sha256(folder: str | Path) -> str:
    """One digest over the folder's weight files (``*.safetensors``, by name)."""
    digest = hashlib.sha256()
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no .safetensors weights in it")
    for path in files:
        digest.update(path.name.encode())
        with open(path, "rb") as stream:
            while block := stream.read(1 << 22):
                digest.update(block)
    return digest.hexdigest()


def save_candidates(path: Path, settings: dict, sources: dict[str, list[str]], scored: dict) -> None:
    """Write each split's sources, n-best lists and their forward and channel scores beside the decoding settings."""
    splits = {
        split: {
            "sources": sources[split],
            "nbest": nbest,
            "forward": {"log_probs": forward.log_probs, "lengths": forward.lengths},
            "channel": {"log_probs": channel.log_probs, "lengths": channel.lengths},
        }
        for split, (nbest, forward, channel) in scored.items()
    }
    path.write_text(json.dumps({**settings, "splits": splits}, ensure_ascii=False), encoding="utf-8")


def load_candidates(path: Path, settings: dict, sources: dict[str, list[str]]) -> dict:
    """The n-best lists and scores ``save_candidates`` wrote, refused when they were decoded with other settings
    (models, n-best size, length penalty, engine) or for other source sentences than ``sources``."""
    if not path.is_file():
        raise FileNotFoundError(f"--candidates_from: no {CANDIDATES_FILE} in {path.parent}")
    saved = json.loads(path.read_text(encoding="utf-8"))
    differing = [
        f"{key} {recorded_setting(saved, key)!r} there, {value!r} here"
        for key, value in settings.items()
        if recorded_setting(saved, key) != value
    ]
    if differing:
        raise ValueError(f"--candidates_from {path.parent} was decoded otherwise: " + "; ".join(differing))
    scored = {}
    for split, split_sources in sources.items():
        found = saved["splits"].get(split)
        if found is None or found["sources"] != split_sources or len(found["nbest"]) != len(split_sources):
            raise ValueError(
                f"--candidates_from {path.parent}: its n-best lists are not those of these {len(split_sources)} "
                f"{split} sentences"
            )
        scored[split] = (
            found["nbest"],
            SequenceScores(found["forward"]["log_probs"], found["forward"]["lengths"]),
            SequenceScores(found["channel"]["log_probs"], found["channel"]["lengths"]),
        )
    return scored


ENGINE_DEFAULTS = {"engine": "torch", "quantization": None}


def load(
    folders: list[str], batch_size: int, device: str, engine: str = "torch", quantization: str | None = None
) -> Predictor:
    """A folder, or several as their ensemble (torch only), decoding with ``engine``."""
    if engine != "torch" and len(folders) > 1:
        raise ValueError(f"engine {engine!r} decodes one model; an ensemble of {len(folders)} folders needs torch")
    folder = folders[0] if len(folders) == 1 else folders
    options = {"engine": engine, "quantization": quantization} if engine != "torch" or quantization else {}
    return Predictor.from_pretrained(folder, batch_size=batch_size, device=device, **options)


def recorded_setting(saved: dict, key: str):
    """A setting as a kept record holds it; records from before the engine was recorded decoded with torch."""
    return saved.get(key, ENGINE_DEFAULTS.get(key))


class Scorer:
    """BLEU (and lc-tok BLEU, where the data folder has the official tokenised references) of a split's outputs."""

    def __init__(self, splits, data_args: DataArguments):
        self.target_lang = data_args.target_lang
        self.references = {
            split: [pair[self.target_lang] for pair in splits[split]["translation"]] for split in ("validation", "test")
        }
        self.tokenized_references = lc_tok_references(splits, data_args)

    def __call__(self, split: str, hypotheses: list[str]) -> dict[str, float]:
        found = {"bleu": bleu(hypotheses, self.references[split])}
        if split in self.tokenized_references:
            found["bleu_lc_tok"] = bleu_lc_tok(hypotheses, self.tokenized_references[split], self.target_lang)
        return found


def decode_and_score(
    args: RerankArguments, forward: Predictor, channel: Predictor, decoding: dict, sources, output_dir
):
    """Each split's n-best lists with their forward and channel scores: decoded (and kept in candidates.json), or
    read from --candidates_from."""
    if args.candidates_from is not None:
        scored = load_candidates(Path(args.candidates_from) / CANDIDATES_FILE, decoding, sources)
        logger.info("n-best lists and scores read from %s", args.candidates_from)
        return scored
    scored = {}
    for split, split_sources in sources.items():
        logger.info("%s: %d-best lists of %d sentences", split, args.num_candidates, len(split_sources))
        nbest = candidates(
            forward, split_sources, args.num_candidates, length_penalty=decoding["length_penalty"], progress=True
        )
        logger.info("%s: scoring %d candidates both ways", split, sum(map(len, nbest)))
        scored[split] = (nbest, *score_both_ways(forward, channel, split_sources, nbest))
    output_dir.mkdir(parents=True, exist_ok=True)  # made when there is something to write: a refusal leaves none
    save_candidates(output_dir / CANDIDATES_FILE, decoding, sources, scored)
    return scored


def pairwise_bleu(scored: dict, split: str) -> list:
    logger.info("%s: sentence BLEU of every pair of candidates (MBR)", split)
    return mbr_utilities(scored[split][0])


def choose(args: RerankArguments, scored: dict, scorer: Scorer, selection: str, utilities: dict) -> tuple[dict, dict]:
    """The reranking setting with the best validation ``selection`` score from the grid, and every setting's score.
    The validation lists' pairwise BLEU (MBR in the grid) is computed here, into ``utilities``."""
    if args.mbr_scales:
        utilities["validation"] = pairwise_bleu(scored, "validation")
    nbest, forward_scores, channel_scores = scored["validation"]
    chosen, grid = choose_weights(
        nbest,
        forward_scores,
        channel_scores,
        lambda hypotheses: scorer("validation", hypotheses)[selection],
        channel_weights=args.channel_weights,
        length_exponents=args.length_exponents,
        mbr_scales=args.mbr_scales,
        utilities=utilities.get("validation"),
    )
    logger.info("validation %s by channel weight / length exponent: %s; chosen %s", selection, grid, chosen)
    return chosen, grid


def rerank_splits(scored: dict, chosen: dict, scorer: Scorer, utilities: dict) -> tuple[dict, dict[str, list[str]]]:
    """Both splits reranked with the chosen setting: their scores beside beam search's own best (``eval_*``,
    ``test_*``, ``*_beam_*``), and the reranked outputs. Test's pairwise BLEU is computed only if MBR was chosen."""
    results, outputs = {}, {}
    for split, prefix in (("validation", "eval"), ("test", "test")):
        nbest, forward_scores, channel_scores = scored[split]
        if chosen["mbr_scale"] is not None and split not in utilities:
            utilities[split] = pairwise_bleu(scored, split)
        outputs[split] = rerank(nbest, forward_scores, channel_scores, **chosen, utilities=utilities.get(split))
        results |= {f"{prefix}_{name}": value for name, value in scorer(split, outputs[split]).items()}
        beam = [row[0] for row in nbest]  # beam search's own best
        results |= {f"{prefix}_beam_{name}": value for name, value in scorer(split, beam).items()}
        results[f"{prefix}_candidates_per_sentence"] = round(sum(map(len, nbest)) / len(nbest), 2)
    return results, outputs


def save(output_dir: Path, results: dict, test_outputs: list[str]) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False))
    (output_dir / "test_predictions.txt").write_text("\n".join(test_outputs) + "\n", encoding="utf-8")
    logger.info(
        "test2016 reranked: BLEU %.2f, lc-tok %s (beam search alone %.2f, %s); %s",
        results["test_bleu"],
        f"{results['test_bleu_lc_tok']:.2f}" if "test_bleu_lc_tok" in results else "-",
        results["test_beam_bleu"],
        f"{results['test_beam_bleu_lc_tok']:.2f}" if "test_beam_bleu_lc_tok" in results else "-",
        output_dir / "results.json",
    )


def load_models(args: RerankArguments, data_args: DataArguments) -> tuple[Predictor, Predictor, dict]:
    """The forward and the channel model (each a folder or an ensemble), and the decoding settings: the folders, the
    n-best size and beam search's length penalty (as given, else the forward ensemble's choice, else the model's)."""
    source, target = data_args.source_lang, data_args.target_lang
    check_direction(args.model_dirs, source, target)
    check_direction(args.channel_model_dirs, target, source, "--channel_model_dirs")  # p(source | candidate)
    forward_dirs, ensemble_length_penalty = model_folders(args.model_dirs)
    channel_dirs, _ = model_folders(args.channel_model_dirs)
    for folder in (*forward_dirs, *channel_dirs):  # a classifier loads as a Predictor, and failed at the scoring
        read_folder(folder).check(PROGRAM, (SEQ2SEQ,))
    forward = load(forward_dirs, args.batch_size, args.device, args.engine, args.quantization)
    channel = load(channel_dirs, args.batch_size, args.device, args.engine, args.quantization)
    length_penalty = args.length_penalty
    if length_penalty is None:
        length_penalty = ensemble_length_penalty
    if length_penalty is None:
        length_penalty = forward.generation_config.length_penalty
    decoding = {
        "models": forward_dirs,
        "channel_models": channel_dirs,
        # The weights too: a model trained again into the same folder decodes other candidates.
        "weights_sha256": [weights_sha256(folder) for folder in (*forward_dirs, *channel_dirs)],
        "num_candidates": args.num_candidates,
        "length_penalty": length_penalty,
        "engine": args.engine,
        "quantization": args.quantization,
    }
    return forward, channel, decoding


def main(argv: list[str] | None = None) -> dict:
    args, data_args = parse_arguments(HfArgumentParser((RerankArguments, DataArguments)), argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    require_scorers(SCORERS)
    started = time.time()
    forward, channel, decoding = load_models(args, data_args)
    splits = data_args.evaluation_splits()
    scorer = Scorer(splits, data_args)
    has_lc_tok_validation = "validation" in scorer.tokenized_references
    selection = "bleu_lc_tok" if lowercases(forward.tokenizer) and has_lc_tok_validation else "bleu"
    output_dir = Path(args.output_dir)
    source_lang = data_args.source_lang
    sources = {split: [pair[source_lang] for pair in splits[split]["translation"]] for split in ("validation", "test")}
    scored = decode_and_score(args, forward, channel, decoding, sources, output_dir)
    utilities: dict = {}  # each split's pairwise BLEU of candidates, where MBR needs it
    chosen, grid = choose(args, scored, scorer, selection, utilities)
    scores, outputs = rerank_splits(scored, chosen, scorer, utilities)
    results = task_fields(data_args) | decoding | chosen
    results |= {"selected_on": f"eval_{selection}", f"eval_{selection}_by_setting": grid, **scores, **headline(scores)}
    results |= {
        "parameters": sum(
            predictor.model.num_parameters()
            if predictor.model is not None
            else sum(count_parameters(folder) or 0 for folder in folders)
            for predictor, folders in ((forward, decoding["models"]), (channel, decoding["channel_models"]))
        ),
        "eval_samples": len(splits["validation"]),
        "test_samples": len(splits["test"]),
        "wall_seconds": round(time.time() - started, 1),
        "command": " ".join([PROGRAM, *(argv if argv is not None else sys.argv[1:])]),
    }
    save(output_dir, results, outputs["test"])
    return results


if __name__ == "__main__":
    run_command(main)
