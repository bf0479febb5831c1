"""The progress bar draws only on a terminal, and only once reading takes a while."""

import io
import time

from traceview.trace.progress import progress_bar


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_bar_when_not_a_terminal():
    stream = io.StringIO()
    with progress_bar("reading", stream=stream) as update:
        assert update is None
    assert stream.getvalue() == ""


def test_no_bar_for_a_quick_read():
    stream = FakeTerminal()
    with progress_bar("reading", delay_s=5, stream=stream) as update:
        update(1, 1)
    assert stream.getvalue() == ""


def test_bar_for_a_slow_read_then_cleared():
    stream = FakeTerminal()
    with progress_bar("reading", delay_s=0.05, interval_s=0.02, stream=stream) as update:
        update(1, 3)
        time.sleep(0.3)
    text = stream.getvalue()
    assert "reading [" in text and "1/3 files" in text
    assert text.endswith("\r")  # the line is wiped before the report is printed


def test_bar_says_when_the_fast_reader_is_being_compiled():
    """A first use on a machine compiles the reader (tens of seconds): the bar says so, and only then."""
    from traceview.parsers.native import loader as native_loader

    stream = FakeTerminal()
    with progress_bar("reading", delay_s=0.05, interval_s=0.02, stream=stream) as update:
        update(0, 1)
        time.sleep(0.15)
        assert "compiling" not in stream.getvalue()
        native_loader.on_compile(True)  # what the kernel loader calls on a cache miss
        time.sleep(0.15)
        assert "compiling the fast reader: first use here" in stream.getvalue()
        native_loader.on_compile(False)  # ... and once the kernels are loaded
        seen = len(stream.getvalue())
        time.sleep(0.15)
        assert "compiling" not in stream.getvalue()[seen:]
    assert native_loader.on_compile is None  # the hook goes with the bar
