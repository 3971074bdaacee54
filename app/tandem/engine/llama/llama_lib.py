"""llama-cpp-python's ctypes bindings to the llama.cpp C API, imported on their own.

`import llama_cpp` runs the package's __init__, which also imports its high-level layer
(the `Llama` class, chat formats with Jinja2, a diskcache-backed prompt cache): about 10 MB of
resident memory and 0.1 s that Tandem never uses, since it drives the C API directly. When
nothing has imported the package yet, we register a bare package object for `llama_cpp` and
import only its `llama_cpp.llama_cpp` submodule (the bindings), which needs nothing else.
If the full package is already imported (by other code in the process), we use it as is.

The bindings load on first use, not on import: `llama_cpp` here stands for them until then, so a
module may import it and be imported where llama-cpp-python is absent (the fast lane of the
tests, the catalog), as long as it calls nothing at import. Each name is looked up once and then
kept on this stand-in, so a call through it costs what a call through the module would.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any


def _import_bindings() -> types.ModuleType:
    if "llama_cpp" not in sys.modules:
        spec = importlib.util.find_spec("llama_cpp")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(
                "llama-cpp-python is not installed: run `python3 scripts/install.py` from the Tandem checkout"
            )
        package = types.ModuleType("llama_cpp")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        package.__file__ = spec.origin
        sys.modules["llama_cpp"] = package
        try:
            return importlib.import_module("llama_cpp.llama_cpp")
        except BaseException:
            del sys.modules["llama_cpp"]
            raise
    return importlib.import_module("llama_cpp.llama_cpp")


class _Bindings(types.ModuleType):
    """llama_cpp.llama_cpp, imported when a name of it is first asked for."""

    def __getattr__(self, name: str) -> Any:
        real = _bindings()
        value = getattr(real, name)
        setattr(self, name, value)  # (found directly from now on)
        return value


_real: types.ModuleType | None = None
_lock = threading.Lock()  # (threads may ask first at once: the app's workers)


def _bindings() -> types.ModuleType:
    global _real
    with _lock:
        if _real is None:
            _real = _import_bindings()
        return _real


llama_cpp: Any = _Bindings("llama_cpp")
