"""Writing figures: matplotlib on its file-only backend, a CJK font for Hangul tokens, PNGs without a warning per
missing glyph. matplotlib is optional (the ``train`` extra) and imported on first use, not with the package.

Used by ``scripts/plot_attention.py`` and the recipes' learning curves.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["CJK_FONTS", "pyplot", "save_figure", "use_cjk_font"]

# Fonts with Hangul (and other CJK) glyphs, the first installed one used.
CJK_FONTS = (
    "Noto Sans CJK KR",
    "Noto Sans CJK JP",
    "Noto Sans KR",
    "NanumGothic",
    "NanumBarunGothic",
    "Malgun Gothic",
    "AppleGothic",
    "Apple SD Gothic Neo",
    "Source Han Sans KR",
    "UnDotum",
    "WenQuanYi Zen Hei",
)


def pyplot():
    """matplotlib.pyplot on the file-only backend (Agg), imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def use_cjk_font() -> str | None:
    """Put the first installed CJK font in front of matplotlib's default, which still draws Latin text; its name,
    or None when none is installed."""
    from matplotlib import font_manager

    installed = {font.name for font in font_manager.fontManager.ttflist}
    for name in CJK_FONTS:
        if name in installed:
            pyplot().rcParams["font.family"] = [name, "DejaVu Sans"]
            return name
    return None


def figure_path(output: str | Path) -> Path:
    """The file a figure is written to: ``output``, with ``.png`` added where it has no suffix (matplotlib would
    add it and the name told would be wrong); a suffix matplotlib writes no format for is refused, before the
    figure is drawn."""
    output = Path(output)
    if not output.suffix:
        return output.with_name(output.name + ".png")
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if output.suffix[1:].lower() not in formats:
        raise ValueError(f"{output}: matplotlib writes no {output.suffix} figures; give one of .{', .'.join(formats)}")
    return output


def save_figure(figure, output: str | Path, dpi: int = 100) -> Path:
    """Write a PNG and close the figure; glyphs the fonts lack become one log warning instead of one per glyph."""
    output = figure_path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figure.savefig(output, dpi=dpi)
    missing = [w for w in caught if "missing from font" in str(w.message)]
    for other in caught:
        if other not in missing:
            warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)
    if missing:
        logger.warning(
            "%d characters have no glyph in the installed fonts and show as boxes in %s; install a CJK font "
            "(e.g. fonts-noto-cjk or fonts-nanum) for Hangul",
            len(missing),
            output,
        )
    pyplot().close(figure)
    return output
