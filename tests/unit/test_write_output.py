"""commands._options.write_output: a command's output written as it comes, whole where a hook records it."""

from __future__ import annotations

import json
import random

import pytest

from traceview.commands import _options
from traceview.render.jsontext import chunks


def _document(seed: int) -> dict:
    rng = random.Random(seed)
    rows = [{"id": f"dev{i}", "busy_us": rng.random() * 1e3, "steps": [rng.randrange(9) for _ in range(3)]}
            for i in range(rng.randrange(10, 300))]
    return {"devices": rows, "summary": {"by_device": {r["id"]: r["busy_us"] for r in rows}}}


@pytest.mark.parametrize("seed", range(3))
def test_pieces_written_to_a_file_and_to_stdout(tmp_path, capsys, seed):
    doc = _document(seed)
    out = tmp_path / "report.json"
    _options.write_output(chunks(doc, end="\n"), str(out))
    assert json.loads(out.read_text()) == doc
    _options.write_output(chunks(doc, end="\n"), None)
    assert capsys.readouterr().out == out.read_text()


def test_a_hook_gets_the_whole_text_once(tmp_path, monkeypatch):
    seen: list[str] = []
    monkeypatch.setattr(_options, "OUTPUT_HOOKS", [seen.append])
    doc = _document(7)
    out = tmp_path / "report.json"
    _options.write_output(chunks(doc, end="\n"), str(out))
    assert seen == [out.read_text()]


def test_a_failure_while_writing_leaves_no_half_report(tmp_path):
    out = tmp_path / "report.json"

    def pieces():
        yield "{\n"
        raise TypeError("Object of type set is not JSON serializable")
    with pytest.raises(TypeError):
        _options.write_output(pieces(), str(out))
    assert not out.exists()
