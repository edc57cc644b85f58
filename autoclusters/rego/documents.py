"""Reading manifests for ``policy check``: files, directories, multi-document YAML, stdin.

Every object keeps where it came from (file, document index, item index inside a
``kind: List``), so a finding can point at the exact document to fix.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

SUFFIXES = (".yaml", ".yml", ".json")


class InputError(ValueError):
    """A path that cannot be read or a document that is not a Kubernetes object."""


@dataclass(frozen=True)
class Document:
    source: str
    index: int
    obj: dict[str, Any]
    item: int | None = None

    @property
    def where(self) -> str:
        at = f"{self.source}#{self.index}"
        return at if self.item is None else f"{at}.items[{self.item}]"

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind") or "")

    @property
    def name(self) -> str:
        return str((self.obj.get("metadata") or {}).get("name") or "")


def read_paths(paths: Iterable[str], stdin: TextIO | None = None) -> list[Document]:
    """Every object under the given paths; ``-`` reads stdin. Directories are walked in order."""
    docs: list[Document] = []
    for p in paths:
        if p == "-":
            docs.extend(parse_text((stdin or sys.stdin).read(), "<stdin>"))
            continue
        path = Path(p)
        if path.is_dir():
            files = sorted(f for f in path.rglob("*") if f.is_file() and f.suffix in SUFFIXES)
            for f in files:
                docs.extend(_read_file(f))
        elif path.exists():
            docs.extend(_read_file(path))
        else:
            raise InputError(f"{p}: no such file or directory")
    return docs


def _read_file(path: Path) -> list[Document]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read: {e}") from e
    return parse_text(text, str(path))


def parse_text(text: str, source: str) -> list[Document]:
    """Objects of a multi-document YAML (or JSON) text; empty documents are skipped."""
    try:
        raw = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        raise InputError(f"{source}: invalid YAML: {e}") from e
    docs: list[Document] = []
    for i, obj in enumerate(raw):
        if obj is None:
            continue
        if not isinstance(obj, dict):
            raise InputError(f"{source}#{i}: expected a Kubernetes object (a mapping), got {type(obj).__name__}")
        if obj.get("kind") == "List" and isinstance(obj.get("items"), list):
            for j, item in enumerate(obj["items"]):
                if not isinstance(item, dict):
                    raise InputError(f"{source}#{i}.items[{j}]: expected a Kubernetes object (a mapping)")
                docs.append(Document(source, i, item, j))
        else:
            docs.append(Document(source, i, obj))
    return docs
