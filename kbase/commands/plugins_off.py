"""A stand-in for pydantic's plugin loader while plugins are switched off (issue #11).

pydantic imports pydantic/plugin/_loader.py when it builds its first validator, and that module
imports importlib.metadata (and through it email, socket, zipfile, ...): ~20 ms of a cold
search's CPU, for the entry points that PYDANTIC_DISABLE_PLUGINS=__all__ tells it never to read.
With plugins off, the loader's get_plugins() returns () without touching importlib.metadata; the
stand-in does the same. Should plugins be switched on later in the process, or pydantic ask the
loader for anything else, the real module is imported and takes the stand-in's place.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

LOADER = "pydantic.plugin._loader"
# the values pydantic's get_plugins reads as "no plugins at all"
_ALL_OFF = ("__all__", "1", "true")


def _real() -> types.ModuleType:
    import importlib

    if isinstance(sys.modules.get(LOADER), _StandIn):
        del sys.modules[LOADER]
    return importlib.import_module(LOADER)


class _StandIn(types.ModuleType):
    def get_plugins(self) -> Any:
        if os.environ.get("PYDANTIC_DISABLE_PLUGINS") in _ALL_OFF:
            return ()
        return _real().get_plugins()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system asks a module for __path__ and the like
            raise AttributeError(name)
        return getattr(_real(), name)


def skip_plugin_loader() -> None:
    """Put the stand-in in place of the loader, when plugins are off and it is not loaded yet."""
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") in _ALL_OFF and LOADER not in sys.modules:
        sys.modules[LOADER] = _StandIn(LOADER)
