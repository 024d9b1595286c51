"""hf_transformer: the Transformer of "Attention Is All You Need" as a HuggingFace model.

Importing the package registers its classes with transformers' Auto classes and its translation pipeline; it changes
nothing else in the process (no environment variable: how torch's threads wait on a busy machine is chosen where a
job starts, ``hf_transformer.openmp``).
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
)
from transformers.models.auto.tokenization_auto import REGISTERED_TOKENIZER_CLASSES

from .configuration_transformer import TransformerConfig
from .inference import Predictor
from .modeling_transformer import (
    TransformerForConditionalGeneration,
    TransformerForMaskedLM,
    TransformerForSequenceClassification,
    TransformerModel,
    TransformerPreTrainedModel,
)
from .pipelines import PIPELINE_TASK, register_pipeline
from .tokenization.morphemes import MorphemeTokenizerFast

__version__ = "0.1.0"

AutoConfig.register(TransformerConfig.model_type, TransformerConfig, exist_ok=True)
AutoModel.register(TransformerConfig, TransformerModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(TransformerConfig, TransformerForConditionalGeneration, exist_ok=True)
AutoModelForSequenceClassification.register(TransformerConfig, TransformerForSequenceClassification, exist_ok=True)
AutoModelForMaskedLM.register(TransformerConfig, TransformerForMaskedLM, exist_ok=True)

# save_pretrained / push_to_hub then copy the configuration and modeling files beside the weights and write
# `auto_map`, so that a saved folder also loads with trust_remote_code=True where this package is not installed.
TransformerConfig.register_for_auto_class()
TransformerModel.register_for_auto_class("AutoModel")
TransformerForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
TransformerForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
TransformerForMaskedLM.register_for_auto_class("AutoModelForMaskedLM")

# AutoTokenizer finds the morpheme tokenizer by the class name its folders save (`tokenizer_class`); `auto_map` and
# a copy of its module let it load with trust_remote_code=True where this package is not installed.
# (AutoTokenizer.register would also tie it to TransformerConfig, the fallback of every folder of that config.)
REGISTERED_TOKENIZER_CLASSES[MorphemeTokenizerFast.__name__] = MorphemeTokenizerFast
MorphemeTokenizerFast.register_for_auto_class("AutoTokenizer")

# transformers.pipeline(PIPELINE_TASK, model=folder) translates (hf_transformer.pipelines.TranslationPipeline).
register_pipeline()

__all__ = [
    "TransformerConfig",
    "TransformerPreTrainedModel",
    "TransformerModel",
    "TransformerForConditionalGeneration",
    "TransformerForSequenceClassification",
    "TransformerForMaskedLM",
    "Predictor",
    "MorphemeTokenizerFast",
    "PIPELINE_TASK",
]
