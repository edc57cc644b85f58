"""An example script (examples/, outside the package) loaded as a module for its unit tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(relative: str, name: str) -> ModuleType:
    """``examples/<relative>`` as the module ``name`` (registered, as dataclasses look their
    module up)."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
