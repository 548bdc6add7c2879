"""Issue 12: damaged GGUF headers get a clear message, never a crash or a huge allocation.

Hypothesis writes GGUF files whose headers are made up (any value type under the keys
localspec reads, huge counts and lengths, unknown types, nested arrays, absurd tensor shapes,
a cut at any byte) or are a real tiny model's header with bytes overwritten. Each file goes
through ``ggufinfo`` (info, layout, vocabulary), ``preflight`` and ``localspec models import``
and ``models check``: the outcome is a result or GgufError / ModelFileError / exit 2 with one
line, and Python's traced memory peak stays under MEMORY_LIMIT.

The CI set is 150 derandomized files for the readers and 40 for the commands (~10 s: no
model is loaded); the longer run is ``pytest -m fuzz tests/test_fuzz_gguf.py``
(LOCALSPEC_FUZZ_EXAMPLES files, default 500; LOCALSPEC_FUZZ_REPORT=path.json writes its figures).
"""

from __future__ import annotations

import functools
import json
import os
import re
import struct
import tempfile
import tracemalloc
import uuid
from collections import Counter
from pathlib import Path

import gguf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localspec.llama import ggufinfo, preflight
from tests.support.checks import check_model_file
from tests.support.tiny_gguf import write_tiny_gguf

T = gguf.GGUFValueType
MEMORY_LIMIT = 64 * 2**20  # bytes of Python/numpy allocations at the peak, per file
FIGURES: dict = {"files": 0, "calls": 0, "max_peak_mib": 0.0, "outcomes": Counter()}
CI_FILES = 150
CI_CLI_FILES = 40  # each runs three commands, each loading the settings and the catalog
LONG_FILES = int(os.environ.get("LOCALSPEC_FUZZ_EXAMPLES", "500"))
# keys localspec and llama.cpp interpret, so wrong types there reach real code paths
KEYS = [
    "general.architecture",
    "general.alignment",
    "general.name",
    "general.size_label",
    "general.file_type",
    "split.count",
    "llama.context_length",
    "llama.block_count",
    "llama.embedding_length",
    "llama.attention.head_count",
    "llama.attention.head_count_kv",
    "llama.attention.key_length",
    "tokenizer.ggml.model",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.add_bos_token",
]
SCALAR = {
    T.UINT8: "<B",
    T.INT8: "<b",
    T.UINT16: "<H",
    T.INT16: "<h",
    T.UINT32: "<I",
    T.INT32: "<i",
    T.FLOAT32: "<f",
    T.BOOL: "<B",
    T.UINT64: "<Q",
    T.INT64: "<q",
    T.FLOAT64: "<d",
}
HUGE = st.sampled_from([2**31 - 1, 2**32 - 1, 2**40, 2**62, 2**64 - 1])


def mostly(usual, rare):
    """``usual`` nine times in ten: damage everywhere at once would stop every file at its
    first field, and the checks further in would never run."""
    return st.integers(0, 9).flatmap(lambda i: rare if i == 0 else usual)


def _string(data: bytes, length: int | None = None) -> bytes:
    return struct.pack("<Q", len(data) if length is None else length) + data


@st.composite
def scalar(draw, vtype: int) -> bytes:
    fmt = SCALAR[vtype]
    if fmt[-1] in "fd":
        return struct.pack(
            fmt, draw(st.floats(allow_nan=True, allow_infinity=True, width=32 if fmt[-1] == "f" else 64))
        )
    size = struct.calcsize(fmt)
    signed = fmt[-1].islower()
    lo, hi = (-(2 ** (8 * size - 1)), 2 ** (8 * size - 1) - 1) if signed else (0, 2 ** (8 * size) - 1)
    edges = [v for v in (lo, hi, 0, 1, 2, 512, 513) if lo <= v <= hi]
    return struct.pack(fmt, draw(st.integers(lo, hi) | st.sampled_from(edges)))


@st.composite
def value(draw, depth: int = 0) -> bytes:
    """A typed value: type id, then its bytes; arrays may lie about their count."""
    vtype = draw(
        mostly(st.sampled_from(list(T)), st.integers(13, 2**32 - 1)) if depth == 0 else st.sampled_from(list(T))
    )
    head = struct.pack("<I", vtype)
    if vtype == T.STRING:
        text = draw(st.binary(max_size=24))
        return head + _string(text, draw(mostly(st.none(), HUGE)))
    if vtype == T.ARRAY:
        etype = draw(mostly(st.sampled_from(list(T)), st.integers(13, 99)))
        count = draw(mostly(st.integers(0, 6), HUGE))
        items = draw(st.lists(value(depth + 1), max_size=min(count, 6))) if depth < 2 else []
        body = b"".join(i[4:] if etype != T.ARRAY else i for i in items)
        return head + struct.pack("<IQ", etype, count) + body
    if vtype in SCALAR:
        return head + draw(scalar(vtype))
    return head + draw(st.binary(max_size=8))  # an unknown type with some bytes


@st.composite
def tensor_info(draw) -> bytes:
    n_dims = draw(mostly(st.integers(0, 4), st.sampled_from([5, 64, 2**31, 2**32 - 1])))
    dims = [draw(mostly(st.integers(0, 64), HUGE)) for _ in range(min(n_dims, 6))]
    ggml_type = draw(mostly(st.sampled_from([0, 1, 2, 8, 12, 14, 30, 39]), st.integers(0, 2**32 - 1)))
    offset = draw(mostly(st.integers(0, 4096), HUGE))
    return (
        _string(draw(st.binary(max_size=12)))
        + struct.pack("<I", n_dims)
        + b"".join(struct.pack("<Q", d) for d in dims)
        + struct.pack("<IQ", ggml_type, offset)
    )


@st.composite
def made_up_header(draw) -> bytes:
    kvs = [
        _string(draw(mostly(st.sampled_from(KEYS), st.text(max_size=20))).encode()) + draw(value())
        for _ in range(draw(st.integers(0, 6)))
    ]
    tensors = [draw(tensor_info()) for _ in range(draw(st.integers(0, 4)))]
    n_kv = draw(mostly(st.just(len(kvs)), st.integers(0, 12) | HUGE))
    n_tensors = draw(mostly(st.just(len(tensors)), st.integers(0, 6) | HUGE))
    version = draw(st.sampled_from([3] * 8 + [2, 1, 4, 2**31]))  # mostly past the version check
    data = b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + b"".join(kvs) + b"".join(tensors)
    data += b"\0" * draw(st.integers(0, 64))
    return data[: draw(st.integers(0, len(data)))] if draw(st.integers(0, 3)) == 0 else data


@functools.cache
def real_file() -> bytes:
    """The tiny model's bytes (a module-level cache: as a strategy argument, hypothesis would
    print all 1.4 MB of it with every failure)."""
    with tempfile.TemporaryDirectory() as d:
        return write_tiny_gguf(Path(d) / "tiny.gguf", seed=0).read_bytes()


@pytest.fixture(scope="module")
def real_header() -> bytes:
    return real_file()


@st.composite
def damaged_real_file(draw) -> bytes:
    """The tiny model with a few header bytes overwritten (counts, lengths, types), maybe cut."""
    data = bytearray(real_file())
    header_end = 24 + 10_000  # the metadata and tensor infos of the tiny model
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(4, header_end))
        data[at : at + 8] = draw(st.binary(min_size=1, max_size=8) | HUGE.map(lambda n: struct.pack("<Q", n)))
    return bytes(data[: draw(st.integers(0, len(data)))]) if draw(st.booleans()) else bytes(data)


def files(real: bytes):
    return st.one_of(made_up_header(), damaged_real_file())


def write(folder: Path, data: bytes) -> Path:
    FIGURES["files"] += 1
    path = folder / f"{uuid.uuid4().hex[:12]}.gguf"
    path.write_bytes(data)
    return path


def within_memory(fn):
    """fn()'s result, or the exception it raised; fails when its traced peak passes the limit."""
    tracemalloc.start()
    try:
        out = fn()
    except (ggufinfo.GgufError, preflight.ModelFileError) as e:
        out = e
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < MEMORY_LIMIT, f"{peak / 2**20:.0f} MiB allocated"
    FIGURES["calls"] += 1
    FIGURES["max_peak_mib"] = max(FIGURES["max_peak_mib"], round(peak / 2**20, 1))
    FIGURES["outcomes"][_outcome(out)] += 1
    return out


def _outcome(out) -> str:
    """'ok', 'exit N', or the message with the file name and numbers taken out."""
    if not isinstance(out, Exception):
        return f"exit {out}" if isinstance(out, int) else "ok"
    text = re.sub(r"\S*\.gguf:? ?|\(.*?\)|'[^']*'|[\d,]+", "", str(out))
    return " ".join(text.split(";")[0].split())[:56]


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    path = os.environ.get("LOCALSPEC_FUZZ_REPORT")
    if path and FIGURES["calls"]:
        Path(path).write_text(json.dumps(FIGURES, indent=1, default=dict))


def readers_property(path: Path) -> None:
    for read in (ggufinfo.read_info, ggufinfo.read_model_layout, ggufinfo.vocab_info):
        out = within_memory(functools.partial(read, path))
        if isinstance(out, Exception):
            assert str(path) in str(out) and "\n" not in str(out)
    out = within_memory(lambda: check_model_file(path, 4096, available_bytes=10**15))
    if isinstance(out, Exception):
        assert str(path) in str(out) and "Traceback" not in str(out)


def cli_property(path: Path, other: Path, capsys) -> None:
    from localspec.cli import main

    for argv in (
        ["models", "import", str(path), "--link", "--name", f"m{uuid.uuid4().hex[:10]}"],
        ["models", "check", str(path), str(other)],
        ["models", "check", str(other), str(path)],
    ):
        rc = within_memory(functools.partial(main, argv))
        err = capsys.readouterr().err
        assert rc in (0, 1, 2), (argv, rc, err)
        if rc == 2:
            assert len(err.strip().splitlines()) == 1 and err.startswith("localspec models: "), err


FUZZ = settings(
    max_examples=CI_FILES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


class TestDamagedHeaders:
    @FUZZ
    @given(data=st.data())
    def test_readers_and_preflight(self, tmp_path, real_header, data):
        readers_property(write(tmp_path, data.draw(files(real_header))))

    @settings(FUZZ, max_examples=CI_CLI_FILES)
    @given(data=st.data())
    def test_models_import_and_check(self, tmp_path, real_header, data, capsys):
        other = tmp_path / "good.gguf"
        if not other.exists():
            other.write_bytes(real_header)
        cli_property(write(tmp_path, data.draw(files(real_header))), other, capsys)

    @pytest.mark.fuzz
    @settings(FUZZ, max_examples=LONG_FILES, derandomize=False)
    @given(data=st.data())
    def test_many_files(self, tmp_path, real_header, data, capsys):
        other = tmp_path / "good.gguf"
        if not other.exists():
            other.write_bytes(real_header)
        path = write(tmp_path, data.draw(files(real_header)))
        readers_property(path)
        cli_property(path, other, capsys)


class TestEachDamageHasItsMessage:
    """Hand-made headers, one per kind of damage, with the message each gets."""

    def header(self, kvs: bytes = b"", n_kv: int = 0, tensors: bytes = b"", n_tensors: int = 0) -> bytes:
        return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + kvs + tensors + b"\0" * 64

    def kv(self, key: str, vtype: int, body: bytes) -> bytes:
        return _string(key.encode()) + struct.pack("<I", vtype) + body

    @pytest.mark.parametrize(
        "make, message",
        [
            (lambda s: s.header(n_kv=2**62), "ends inside its header"),
            (lambda s: s.header(s.kv("a", 99, b""), 1), "unknown value type 99: the file is damaged"),
            (lambda s: s.header(s.kv("a", T.ARRAY, struct.pack("<IQ", T.ARRAY, 1)), 1), "array of arrays"),
            (lambda s: s.header(s.kv("a", T.ARRAY, struct.pack("<IQ", T.STRING, 2**62)), 1), "ends inside its header"),
            (lambda s: s.header(s.kv("a", T.STRING, struct.pack("<Q", 2**62)), 1), "ends inside its header"),
            (
                lambda s: s.header(s.kv("general.architecture", T.UINT32, struct.pack("<I", 7)), 1),
                "general.architecture should be text, not int 7",
            ),
            (
                lambda s: s.header(
                    s.kv("general.architecture", T.STRING, _string(b"llama"))
                    + s.kv("llama.block_count", T.UINT64, struct.pack("<Q", 2**40)),
                    2,
                ),
                "block_count gives 1,099,511,627,776 layers; llama.cpp supports at most 512",
            ),
            (lambda s: s.header(s.kv("general.alignment", T.UINT32, struct.pack("<I", 0)), 1), "not a power of two"),
            (
                lambda s: s.header(s.kv("tokenizer.ggml.token_type", T.INT32, struct.pack("<i", 1)), 1),
                "token_type should be a list of whole numbers, not int 1",
            ),  # found by the long run
            (
                lambda s: s.header(tensors=_string(b"w") + struct.pack("<I", 2**31), n_tensors=1),
                "has 2147483648 dimensions; GGUF allows at most 4",
            ),
        ],
    )
    def test_message(self, tmp_path, make, message):
        path = write(tmp_path, make(self))
        with pytest.raises(ggufinfo.GgufError, match=message.replace("(", r"\(")):
            ggufinfo.read_info(path)

    def test_absurd_tensor_sizes_are_a_damaged_header_not_a_truncated_download(self, tmp_path):
        meta = self.kv("general.architecture", T.STRING, _string(b"llama"))
        tensor = _string(b"w") + struct.pack("<I4QIQ", 4, 2**40, 2**40, 2**40, 1, 0, 0)
        path = write(tmp_path, self.header(meta, 1, tensor, 1))
        with pytest.raises(preflight.ModelFileError, match="header is damaged: its tensors would take"):
            check_model_file(path, 512, available_bytes=10**15)
