from __future__ import annotations

import io
from pathlib import Path

import pytest

from autoclusters.rego.documents import InputError, parse_text, read_paths

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "manifests"


def test_multi_document_yaml_keeps_indexes_and_skips_empty_documents() -> None:
    docs = parse_text("---\nkind: A\nmetadata: {name: a}\n---\n---\nkind: B\n", "f.yaml")
    assert [(d.index, d.kind, d.name) for d in docs] == [(0, "A", "a"), (2, "B", "")]
    assert docs[0].where == "f.yaml#0"


def test_list_is_flattened_with_item_positions() -> None:
    docs = parse_text('{"kind": "List", "items": [{"kind": "A"}, {"kind": "B"}]}', "l.json")
    assert [(d.index, d.item, d.kind) for d in docs] == [(0, 0, "A"), (0, 1, "B")]
    assert docs[1].where == "l.json#0.items[1]"


def test_directory_is_walked_in_order_and_only_manifest_suffixes_read(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.yml").write_text("kind: X\n")
    (tmp_path / "a.yaml").write_text("kind: A\n")
    (tmp_path / "notes.txt").write_text("kind: Ignored\n")
    assert [d.kind for d in read_paths([str(tmp_path)])] == ["A", "X"]


def test_stdin() -> None:
    assert [d.source for d in read_paths(["-"], stdin=io.StringIO("kind: A\n"))] == ["<stdin>"]


@pytest.mark.parametrize("name", ["broken.yaml", "not-an-object.yaml"])
def test_invalid_input_is_an_input_error(name: str) -> None:
    with pytest.raises(InputError, match=name):
        read_paths([str(FIXTURES / "invalid" / name)])


def test_missing_path() -> None:
    with pytest.raises(InputError, match="no such file"):
        read_paths(["/nonexistent/manifests"])
