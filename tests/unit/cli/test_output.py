"""``-o json`` output (cli/_output.py)."""

from __future__ import annotations

import io
import json

from autoclusters.cli._output import print_json


class _Writes(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, s: str) -> int:
        self.writes.append(s)
        return super().write(s)


def test_a_json_document_is_written_whole_in_one_write() -> None:
    """With stdout unbuffered (the image's PYTHONUNBUFFERED), each write reaches the container
    log at once; a document written in pieces could be split by a log line on stderr."""
    out = _Writes()
    doc = {"inventory": {"gpus": [{"index": i, "uuid": f"GPU-{i}"} for i in range(4)]}, "state": {"status": "on"}}
    print_json(doc, out)
    assert len(out.writes) == 1
    assert out.writes[0].endswith("}\n") and json.loads(out.writes[0]) == doc
