"""The files Tandem ships beside its code: the pair catalog (models.toml) and the benchmark's
prompts (assets/bench). A checkout (and an editable install) reads them at its top level; a
built wheel carries copies inside the package (tandem/shipped/, put there by the build:
_build.py), read wherever the package was installed."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_CHECKOUT = _PACKAGE.parent.parent  # app/tandem -> the checkout's top level


def shipped(relative: str) -> Path:
    """A shipped file or folder by its path in the checkout ("models.toml", "assets/bench")."""
    if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / relative).exists():
        return _CHECKOUT / relative
    return _PACKAGE / "shipped" / relative
