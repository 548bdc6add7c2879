"""bench/suites.py: the long built-in suites ("documents", "summaries") load by name, and every
prompt in them is a document of 600 to 2,000 tokens followed by a short question or instruction
(bytes stand in for tokens here; the real tokenizer checks the counts under ``-m slow``)."""

import fnmatch
import tomllib
from pathlib import Path

import pytest

from localspec.bench import suites

ROOT = Path(__file__).parents[2]
TOKENIZER = ROOT / "models" / "qwen2.5-coder-1.5b.gguf"
CATEGORY = {"documents": "document-qa", "summaries": "summary"}
MIN_TOKENS, MAX_TOKENS = 600, 2_000
# Qwen2.5's tokenizer reads 4.0-4.7 UTF-8 bytes a token in these suites' English and about 3.2
# in their German and Korean, so 600-2,000 tokens is roughly 2,400-9,000 bytes in any of them:
# a short prompt swapped in fails the lower bound, a pasted book the upper.
MIN_BYTES, MAX_BYTES = 2_400, 9_000
MAX_QUESTION_CHARS = 600  # the question or instruction after the document: a few sentences


def prompts(name: str) -> list[dict]:
    return suites.load_suite(name)["prompts"]


@pytest.mark.parametrize("name", suites.LONG_SUITES)
class TestLongSuites:
    def test_it_loads_by_name_with_short_replies(self, name):
        suite = suites.load_suite(name)
        assert suite["name"] == name and suite["max_tokens"] == 128
        assert len(suite["prompts"]) >= 6
        assert {p["category"] for p in suite["prompts"]} == {CATEGORY[name]}
        for p in suite["prompts"]:
            assert {"id", "category", "prompt"} == set(p) and all(isinstance(v, str) and v for v in p.values())

    def test_ids_are_unique(self, name):
        ids = [p["id"] for p in prompts(name)]
        assert len(ids) == len(set(ids))

    def test_every_prompt_is_a_long_document(self, name):
        lengths = {p["id"]: len(p["prompt"].encode("utf-8")) for p in prompts(name)}
        assert all(MIN_BYTES <= n <= MAX_BYTES for n in lengths.values()), lengths

    def test_the_document_comes_first_and_a_short_question_last(self, name):
        for p in prompts(name):
            document, question = p["prompt"].rsplit("\n\n", 1)
            assert len(document.encode("utf-8")) >= MIN_BYTES - MAX_QUESTION_CHARS, p["id"]
            assert 20 <= len(question) <= MAX_QUESTION_CHARS, p["id"]

    @pytest.mark.slow
    def test_every_prompt_is_600_to_2000_tokens_of_qwen(self, name):
        if not TOKENIZER.exists():
            pytest.skip(f"real model absent: {TOKENIZER.name} (see ../shared/fixtures/fetch-models)")
        from llama_cpp import Llama  # the vocabulary only: no weights are read

        vocab = Llama(model_path=str(TOKENIZER), vocab_only=True, verbose=False)
        counts = {p["id"]: len(vocab.tokenize(p["prompt"].encode("utf-8"), add_bos=False)) for p in prompts(name)}
        assert all(MIN_TOKENS <= n <= MAX_TOKENS for n in counts.values()), counts


def test_prompt_ids_are_unique_across_every_builtin_suite():
    ids = [p["id"] for name in suites.BUILTIN_SUITES + suites.LONG_SUITES for p in prompts(name)]
    assert len(ids) == len(set(ids))


def test_the_long_suites_are_in_the_packages_data():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for name in suites.LONG_SUITES:
        assert any(fnmatch.fnmatch(f"bench/suites/{name}.json", pattern) for pattern in data["localspec"])
