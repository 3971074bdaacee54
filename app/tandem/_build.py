"""The build backend (pyproject.toml's `build-backend`): setuptools' own, with the files Tandem
ships from the checkout's top level (models.toml, the benchmark's prompts in assets/bench)
copied into the package first (tandem/shipped/, shipped.py reads them there), so that a wheel,
whoever builds it (`pip install .`, `pipx install .`, `uv tool install .`), carries its catalog.
The copies exist only while a build runs; a build from an sdist, which carries them already,
copies nothing. Runs in the build's environment: the standard library and setuptools only."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (every other hook, as setuptools defines it)

_PACKAGE = Path(__file__).resolve().parent
_ROOT = _PACKAGE.parent.parent  # app/tandem -> the checkout
SHIPPED = ("models.toml", "assets/bench")  # (as in the checkout; shipped.py names them too)


@contextlib.contextmanager
def _shipped_copied() -> Iterator[None]:
    if not (_ROOT / "pyproject.toml").is_file() or not (_ROOT / SHIPPED[0]).is_file():
        yield  # an sdist's tree: the copies are in the package already
        return
    into = _PACKAGE / "shipped"
    shutil.rmtree(into, ignore_errors=True)
    try:
        for relative in SHIPPED:
            source, copy = _ROOT / relative, into / relative
            copy.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, copy)
            else:
                shutil.copyfile(source, copy)
        yield
    finally:
        shutil.rmtree(into, ignore_errors=True)


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, object] | None = None,
    metadata_directory: str | None = None,
) -> str:
    with _shipped_copied():
        return str(_setuptools.build_wheel(wheel_directory, config_settings, metadata_directory))


def build_sdist(sdist_directory: str, config_settings: dict[str, object] | None = None) -> str:
    with _shipped_copied():
        return str(_setuptools.build_sdist(sdist_directory, config_settings))
