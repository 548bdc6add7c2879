"""``localspec --target`` and ``localspec run --target`` draft with the target's own MTP layers
when its file has them and no other drafting is asked for (``catalog.target_mtp``)."""

from __future__ import annotations

import pytest

from localspec.cli import build_parser
from localspec.cli.app_args import app_spec
from localspec.cli.run import spec_and_options


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from tests.support.hybrid_gguf import write_tiny_qwen35

    d = tmp_path_factory.mktemp("mtp")
    return {
        "mtp": str(write_tiny_qwen35(d / "mtp.gguf", seed=1, mtp=True)),
        "plain": str(write_tiny_qwen35(d / "plain.gguf", seed=1)),
        # declared, but converted without their tensors: llama.cpp would refuse the MTP draft
        "no tensors": str(write_tiny_qwen35(d / "no-tensors.gguf", seed=1, mtp=True, mtp_tensors=False)),
    }


def app(*args: str):
    return app_spec(build_parser().parse_args(list(args)))


def run(*args: str):
    return spec_and_options(build_parser().parse_args(["run", *args, "hello"]))[0]


@pytest.mark.parametrize("spec_of", [app, run], ids=["app", "run"])
class TestMtpByDefault:
    def test_a_target_with_mtp_layers_drafts_with_them(self, files, spec_of):
        assert spec_of("--target", files["mtp"]).mode == "mtp"

    @pytest.mark.parametrize("file", ["plain", "no tensors"])
    def test_a_target_without_them_runs_alone(self, files, spec_of, file):
        assert spec_of("--target", files[file]).mode == "none"

    def test_another_way_of_drafting_asked_for_wins(self, files, spec_of):
        assert spec_of("--target", files["mtp"], "--lookup").mode == "lookup"
        assert spec_of("--target", files["mtp"], "--draft", files["plain"]).mode == "draft"
