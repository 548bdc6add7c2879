"""GGUF metadata and vocabulary read without llama.cpp, checked against gguf's reader and llama.cpp."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from localspec.llama import ggufinfo
from localspec.llama.compat import check_compatible
from tests.support.checks import check_pair
from tests.support.hybrid_gguf import write_tiny_qwen35
from tests.support.tiny_gguf import write_tiny_gguf

REPO_ROOT = Path(__file__).resolve().parents[2]
REAL_TARGET = REPO_ROOT / "models" / "qwen2.5-coder-1.5b.gguf"
REAL_DRAFT = REPO_ROOT / "models" / "qwen2.5-coder-0.5b.gguf"


@pytest.fixture
def tiny(tmp_path) -> Path:
    return write_tiny_gguf(tmp_path / "tiny.gguf", seed=0)


class TestReadInfo:
    def test_tiny_model(self, tiny):
        info = ggufinfo.read_info(tiny)
        assert (info.arch, info.name, info.quant, info.context_length) == ("llama", "tiny-0", "F32", 512)
        assert info.n_vocab == 3 + 256 + 42  # <unk> <s> </s>, the byte tokens, the word pieces
        # 2 layers x 4 KV heads x (16 + 16) dims x 2 bytes (F16)
        assert info.kv_bytes_per_token == 2 * 4 * 32 * 2
        assert info.size_bytes == tiny.stat().st_size

    def test_params_counted_from_the_tensors(self, tiny):
        # embeddings and output 301 x 64 each, per layer 4 x 64 x 64 + 3 x 128 x 64 + 2 x 64, final norm 64
        expected = 2 * 301 * 64 + 2 * (4 * 64 * 64 + 3 * 128 * 64 + 2 * 64) + 64
        info = ggufinfo.read_info(tiny)
        assert info.n_params == expected and info.params == "121K"

    def test_agrees_with_the_gguf_reader(self, tiny):
        meta, n_params = ggufinfo.read_metadata(tiny)
        reader = gguf.GGUFReader(tiny)
        for key, field in reader.fields.items():
            if key.startswith("GGUF."):
                continue
            ours = meta[key]
            if field.types[0] == gguf.GGUFValueType.ARRAY and field.types[-1] == gguf.GGUFValueType.STRING:
                assert ours == [bytes(field.parts[i]) for i in field.data], key
            elif field.types[0] == gguf.GGUFValueType.ARRAY:
                assert np.array_equal(ours, np.concatenate([field.parts[i] for i in field.data])), key
            elif field.types[0] == gguf.GGUFValueType.STRING:
                assert ours == bytes(field.parts[field.data[0]]), key
            else:
                assert ours == field.parts[field.data[0]][0], key
        assert n_params == sum(int(t.n_elements) for t in reader.tensors)

    @pytest.mark.parametrize(
        "content, message",
        [
            (None, "no such file"),
            (b"", "cannot read it as GGUF"),
            (b"PK\x03\x04 a zip file", "not a GGUF file"),
            (b"GGUF\x03\x00\x00\x00" + b"\x00" * 8 + b"\x05" + b"\x00" * 7, "cannot read it as GGUF"),
        ],
        ids=["missing", "empty", "not-gguf", "truncated"],
    )
    def test_bad_files_raise_one_clear_error(self, tmp_path, content, message):
        path = tmp_path / "bad.gguf"
        if content is not None:
            path.write_bytes(content)
        with pytest.raises(ggufinfo.GgufError, match=message) as info:
            ggufinfo.read_info(path)
        assert str(path) in str(info.value)

    def test_a_directory_is_not_a_model(self, tmp_path):
        with pytest.raises(ggufinfo.GgufError, match="is a directory"):
            ggufinfo.read_info(tmp_path)


def llama_vocab(path: Path):
    from localspec.llama.backend import LlamaModel

    model = LlamaModel.load(path, n_ctx=64, gpu_layers=0)
    try:
        return model.vocab_info()
    finally:
        model.close()


CASES = {
    # name: (draft kwargs, compatible?)
    "compatible": (dict(seed=1), True),
    "vocab-size": (dict(seed=1, extra_pieces=200), False),  # 200 > 128 ids apart
    "few-extra-ids": (dict(seed=1, extra_pieces=20), True),  # within 128: extra ids are banned
    "token-text": (dict(seed=1, rename={270: "▁other"}), False),  # a normal piece differs
    "control-text": (dict(seed=1, rename={1: "<bos>"}), True),  # a control token differs: banned, not fatal
    "eos": (dict(seed=1, eos=300), False),
}


class TestVocabAgreesWithLlamaCpp:
    @pytest.mark.parametrize("case", CASES)
    def test_same_verdict_as_llama_cpp(self, tmp_path, case):
        kwargs, compatible = CASES[case]
        target = write_tiny_gguf(tmp_path / "target.gguf", seed=0)
        draft = write_tiny_gguf(tmp_path / "draft.gguf", **kwargs)
        ours = check_compatible(ggufinfo.vocab_info(target), ggufinfo.vocab_info(draft))
        theirs = check_compatible(llama_vocab(target), llama_vocab(draft))
        assert ours.ok is theirs.ok is compatible
        assert ours.problems == theirs.problems
        assert ours.banned_draft_ids == theirs.banned_draft_ids
        assert check_pair(target, draft) == ours

    def test_same_vocab_fields_as_llama_cpp(self, tiny):
        ours, theirs = ggufinfo.vocab_info(tiny), llama_vocab(tiny)
        for field in ("vocab_type", "n_vocab", "bos", "eos", "add_bos", "add_eos", "special"):
            assert getattr(ours, field) == getattr(theirs, field), field
        assert list(ours.tokens) == list(theirs.tokens)

    def test_unknown_tokenizer_is_an_error(self, tmp_path):
        path = tmp_path / "odd.gguf"
        w = gguf.GGUFWriter(str(path), "llama")
        w.add_tokenizer_model("mystery")
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        with pytest.raises(ggufinfo.GgufError, match="unknown tokenizer model 'mystery'"):
            ggufinfo.vocab_info(path)


class TestMtpLayers:
    """Whether a file's MTP layers can draft: declared by ``nextn_predict_layers`` *and* their
    tensors there (llama.cpp refuses a qwen35 file that lacks them, and aborts drafting with a
    deepseek2 one). Written by ``hybrid_gguf``: a trunk of 4 layers, the MTP blocks after it."""

    def test_a_whole_mtp_file(self, tmp_path):
        layers = ggufinfo.mtp_layers(write_tiny_qwen35(tmp_path / "m.gguf", mtp=True))
        assert (layers.arch, layers.declared, layers.missing, layers.usable, layers.problem) == (
            "qwen35",
            1,
            (),
            True,
            None,
        )
        assert ggufinfo.nextn_layers(layers.path) == 1

    def test_the_key_without_the_tensors(self, tmp_path):
        layers = ggufinfo.mtp_layers(write_tiny_qwen35(tmp_path / "m.gguf", mtp=True, mtp_tensors=False))
        assert layers.declared == 1 and not layers.usable
        # the four every MTP architecture requires of block n_layer - nextn_predict_layers = 4
        assert layers.missing == (
            "blk.4.attn_norm.weight",
            "blk.4.nextn.eh_proj.weight",
            "blk.4.nextn.enorm.weight",
            "blk.4.nextn.hnorm.weight",
        )
        assert layers.problem is not None and "lacks its tensors (blk.4.attn_norm.weight, " in layers.problem
        assert ggufinfo.nextn_layers(layers.path) == 0  # so automatic MTP is not chosen

    def test_every_declared_block_is_checked(self, tmp_path):
        path = write_tiny_qwen35(tmp_path / "m.gguf", mtp=2)
        assert ggufinfo.mtp_layers(path).usable and ggufinfo.nextn_layers(path) == 2

    def test_nothing_declared(self, tmp_path):
        layers = ggufinfo.mtp_layers(write_tiny_qwen35(tmp_path / "m.gguf"))
        assert (layers.declared, layers.usable, layers.problem) == (0, False, None)

    def test_a_file_that_cannot_be_read(self, tmp_path):
        path = tmp_path / "m.gguf"
        path.write_bytes(b"not a model")
        with pytest.raises(ggufinfo.GgufError, match="not a GGUF file"):
            ggufinfo.mtp_layers(path)
        assert ggufinfo.nextn_layers(path) == 0


@pytest.mark.slow
@pytest.mark.skipif(not (REAL_TARGET.exists() and REAL_DRAFT.exists()), reason="real Qwen2.5-Coder pair not in models/")
def test_real_pair_same_as_llama_cpp():
    ours = [ggufinfo.vocab_info(p) for p in (REAL_TARGET, REAL_DRAFT)]
    theirs = [llama_vocab(p) for p in (REAL_TARGET, REAL_DRAFT)]
    for a, b in zip(ours, theirs):
        for field in ("vocab_type", "n_vocab", "bos", "eos", "add_bos", "add_eos", "special"):
            assert getattr(a, field) == getattr(b, field), field
        assert list(a.tokens) == list(b.tokens)
    verdict = check_compatible(*ours)
    assert verdict == check_compatible(*theirs) and verdict.ok
