"""The pure numpy reader end to end: `traceview analyze` without numba gives the bytes the compiled reader gives.

numba is a core dependency where it has wheels; elsewhere (or with TRACEVIEW_NO_NUMBA=1) the pure path reads
every file. Each run here forces one path for every file, whatever its size, and checks it was taken.
"""

from __future__ import annotations

import pytest

from traceview.cli import main
from traceview.parsers.xspace import file as xspace_file

pytest.importorskip("numba")
from traceview.parsers.xspace import fast as xspace_fast  # noqa: E402

TRACES = ["sample_traces/transformer", "sample_traces/sharded", "openxla-xprof/tpu_inference_2.xplane.pb",
          "AMD-AGI-TraceLens/jax08_gemm/tw003.xplane.pb"]


def _analyze(path, out, monkeypatch, compiled: bool) -> tuple[bytes, int, int]:
    calls, mapped = [], []
    parse = xspace_fast.parse_space

    def counted(data, pages=None):
        calls.append(len(data))
        mapped.append(pages is not None)
        return parse(data, pages)

    monkeypatch.setattr(xspace_fast, "parse_space", counted)
    if compiled:
        monkeypatch.delenv("TRACEVIEW_NO_NUMBA", raising=False)
        monkeypatch.setattr(xspace_file, "_FAST_MIN_BYTES", 0)  # every file, however small
    else:
        monkeypatch.setenv("TRACEVIEW_NO_NUMBA", "1")
    assert main(["analyze", str(path), "--format", "json", "--no-cache", "--jobs", "1", "-o", str(out)]) == 0
    monkeypatch.undo()
    return out.read_bytes(), len(calls), sum(mapped)


@pytest.mark.parametrize("trace", TRACES)
def test_pure_path_analyzes_as_the_compiled_one(trace, shared_traces, tmp_path, monkeypatch):
    path = shared_traces / trace if not trace.startswith("sample_traces/") else trace
    pure, pure_calls, _ = _analyze(path, tmp_path / "pure.json", monkeypatch, compiled=False)
    compiled, compiled_calls, mapped = _analyze(path, tmp_path / "compiled.json", monkeypatch, compiled=True)
    assert pure_calls == 0 and compiled_calls >= 1  # each path was the one taken
    # an uncompressed file is mapped, its pages dropped as decoded (parsers/xspace/mapped.py): the same bytes out
    assert mapped == compiled_calls
    assert b'"ops"' in pure and len(pure) > 1000
    assert pure == compiled
