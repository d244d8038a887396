"""The figures reluexp draws (the lab's check.png, a sweep's loss curves), as matplotlib
Figures without pyplot: PNG files through Agg, never a window, whatever the environment says."""

import io
import os
from types import ModuleType
from typing import Any


def matplotlib() -> ModuleType:
    """matplotlib, imported lazily (only reports draw). It validates MPLBACKEND at its first
    import and refuses a value it does not know; no backend is used here, so the import
    ignores it."""
    backend = os.environ.pop("MPLBACKEND", None)
    try:
        import matplotlib.figure
    except ImportError as error:  # a broken environment: what draws says what it could not
        raise ImportError(f"matplotlib cannot be imported ({error})") from None
    finally:
        if backend is not None:
            os.environ["MPLBACKEND"] = backend
    return matplotlib


def new_figure(**kwargs: Any) -> Any:
    return matplotlib().figure.Figure(**kwargs)


def colormap(name: str) -> Any:
    return matplotlib().colormaps[name]


def png(figure: Any, dpi: int, tight: bool = True) -> bytes:
    """The figure as a PNG's bytes, laid out tight unless its margins are set (a tight layout
    draws the figure once more to measure it)."""
    if tight:
        figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()
