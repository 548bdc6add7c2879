"""CLI progress: plain lines when piped, rich bars on a terminal."""

import io

from localspec.cli.progress import ByteProgress, StepProgress, plain_line
from localspec.models.downloads import Progress


class Tty(io.StringIO):
    def isatty(self):
        return True


def record(done, total=1000):
    return Progress("model.gguf", done, total, 2_000_000.0, 30.0, "hub")


class TestPiped:
    def test_steps_are_one_plain_line_each(self):
        out = io.StringIO()
        p = StepProgress(out)
        p(0, 3, "warm-up")
        p(3, 3, "done")
        assert out.getvalue() == "[0/3] warm-up\n[3/3] done\n"

    def test_the_time_left_comes_from_this_process_s_own_steps(self):
        out, now = io.StringIO(), [100.0]
        p = StepProgress(out, clock=lambda: now[0])
        p(40, 100, "resumed at 40")  # a resumed bench: 40 runs were done before
        now[0] += 60.0
        p(42, 100, "two runs later")  # 30 s a run, 58 to go
        assert out.getvalue().splitlines() == ["[40/100] resumed at 40", "[42/100] two runs later · about 29:00 left"]

    def test_downloads_print_rarely_and_at_the_end_without_escape_codes(self):
        out = io.StringIO()
        p = ByteProgress(out)
        for done in (0, 10, 20, 1000):
            p(record(done))
        p.note("falling back to the package index")
        lines = out.getvalue().splitlines()
        assert lines[0] == plain_line(record(0)) and lines[-2] == plain_line(record(1000))
        assert lines[-1] == "note: falling back to the package index"
        assert len(lines) == 3 and "\r" not in out.getvalue() and "\x1b" not in out.getvalue()

    def test_plain_line_reads_well(self):
        assert plain_line(record(500)) == "model.gguf: 50% 500 B/1 KB at 2.0 MB/s, ETA 0:30 (hub)"


class TestTerminal:
    def test_rich_bars_on_a_terminal(self):
        out = Tty()
        p = StepProgress(out)
        p(1, 2, "code-intervals draft")
        p(2, 2, "done")
        text = out.getvalue()
        assert "2/2" in text and "[0/" not in text

    def test_download_bar_on_a_terminal(self):
        out = Tty()
        p = ByteProgress(out)
        p(record(500))
        p(record(1000))
        p.finish()
        assert "model.gguf (hub)" in out.getvalue()


class TestPlainLine:
    def test_known_total(self):
        p = Progress("m.gguf", 500_000_000, 1_000_000_000, 12.5e6, 40.0, "hub")
        assert plain_line(p) == "m.gguf: 50% 500.0 MB/1.0 GB at 12.5 MB/s, ETA 0:40 (hub)"

    def test_unknown_total(self):
        assert plain_line(Progress("m.gguf", 2048, None, 0.0, None, "hub")) == "m.gguf: ? 2 KB at 0 B/s (hub)"
