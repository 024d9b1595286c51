"""Ways out to inference engines: ONNX (ONNX Runtime) and CTranslate2.

    python -m hf_transformer.export onnx MODEL_DIR OUTPUT_DIR [--quantization int8]
    python -m hf_transformer.export ctranslate2 MODEL_DIR OUTPUT_DIR [--quantization int8]

Both need the `export` extra (`pip install -e ".[export]"`); the engines are imported only when used.
"""

from __future__ import annotations

__all__ = ["to_onnx", "quantize_onnx", "to_ctranslate2"]


def to_onnx(model_dir, output_dir, **kwargs):
    """Export a saved folder to ONNX; see :func:`hf_transformer.export.onnx_export.to_onnx`."""
    from .onnx_export import to_onnx as export

    return export(model_dir, output_dir, **kwargs)


def quantize_onnx(onnx_dir, output_dir, quantization="int8"):
    """Quantize a folder written by `to_onnx`; see :func:`hf_transformer.export.onnx_export.quantize_onnx`."""
    from .onnx_export import quantize_onnx as quantize

    return quantize(onnx_dir, output_dir, quantization)


def to_ctranslate2(model_dir, output_dir, quantization=None, **kwargs):
    """Convert a saved seq2seq folder to CTranslate2; see :func:`.ctranslate2_export.to_ctranslate2`."""
    from .ctranslate2_export import to_ctranslate2 as export

    return export(model_dir, output_dir, quantization=quantization, **kwargs)
