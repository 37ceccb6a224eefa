"""Objects named by import path (`module:name`): plug-ins, worker kinds, factories.

surge finds the pieces an algorithm brings (its plug-in, its acting policy, its workers) by
their import paths, in whichever process needs them, so the layers that use them never
import them: a path is data, and travels with the config and the graph.
"""

from __future__ import annotations

import importlib
from typing import Any


def import_object(path: str) -> Any:
    """The object `module:name` names (ValueError if the path is malformed; ImportError or
    AttributeError if it does not resolve)."""
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"{path!r} is not an import path of the form 'module:name'")
    return getattr(importlib.import_module(module), name)
