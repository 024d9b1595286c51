"""hf_transformer: the Transformer of "Attention Is All You Need" as a HuggingFace model.

Importing the package registers the configuration and the models with the Auto classes. Imported before torch on a
machine whose cores other processes keep busy, it also makes torch's OpenMP threads sleep instead of spinning while
they wait (``hf_transformer.openmp``), which keeps training from collapsing there.
"""

# First, before anything below loads torch: its OpenMP runtime reads the waiting setting when it loads.
from .openmp import SET_ON_IMPORT  # noqa: F401

# isort: split

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
)

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
    "PIPELINE_TASK",
]
