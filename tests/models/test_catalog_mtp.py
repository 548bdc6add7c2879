"""The catalog's architecture field and MTP drafters: ``arch`` checked against what this build of
llama.cpp loads, ``mtp = true`` on a file with next-token-prediction layers, and the reserved
drafter id ``"mtp"`` in a pair's drafts (the target drafting for itself)."""

from __future__ import annotations

import tomllib

import pytest
from pydantic import ValidationError

from localspec.llama.memory import SNAPSHOTS, snapshots_for
from localspec.models import catalog as cat
from localspec.settings import Settings


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "config" / "catalog.toml"
    path.parent.mkdir(parents=True)
    return path


def model_table(
    model_id: str,
    *,
    mtp: bool = False,
    arch: str = "qwen35",
    size: int = 1000,
    kv: int = 10,
    state: int = 0,
    embd: int = 0,
) -> str:
    return (
        f'[models."{model_id}"]\nrepo = "me/{model_id}-GGUF"\nfilename = "{model_id}.gguf"\nquant = "Q4_K_M"\n'
        f'params = "9B"\nfamily = "qwen3.5"\narch = "{arch}"\nmtp = {str(mtp).lower()}\n'
        f"size_bytes = {size}\nkv_bytes_per_token = {kv}\nstate_bytes = {state}\nn_embd = {embd}\n\n"
    )


def pair_table(target: str, drafts: list[str], pair_id: str = "p") -> str:
    listed = ", ".join(f'"{d}"' for d in drafts)
    return f'[[pairs]]\nid = "{pair_id}"\nname = "P"\nfamily = "qwen3.5"\ntarget = "{target}"\ndrafts = [{listed}]\n\n'


# a 1000-byte target with its MTP layer, a 1000-byte one without, and a 100-byte draft
MODELS = model_table("big", mtp=True) + model_table("plain") + model_table("small", size=100, kv=2)


def ref(**kw) -> cat.ModelRef:
    return cat.ModelRef(filename="m.gguf", quant="F32", size_bytes=5, params="1M", family="llama", **kw)


class TestArchitecture:
    @pytest.mark.parametrize("arch", ["", "qwen2", "llama", "gemma3", "qwen35", "gemma4", "gemma4-assistant"])
    def test_an_architecture_this_build_loads_is_taken(self, arch):
        assert ref(arch=arch).arch == arch

    def test_another_is_refused_by_name(self):
        with pytest.raises(ValidationError, match="architecture 'gpt-9': this llama.cpp build does not load it"):
            ref(arch="gpt-9")

    def test_a_user_entry_with_one_is_skipped_with_a_warning(self, user_file):
        user_file.write_text(MODELS + model_table("future", arch="gpt-9"))
        catalog, warnings = cat.load_catalog(Settings())
        [said] = [w for w in warnings if "models.future" in w]
        assert str(user_file) in said and "field 'arch'" in said and "'gpt-9'" in said and "does not load it" in said
        assert "future" not in catalog.models and {"big", "plain", "small"} <= set(catalog.models)

    def test_an_import_writes_arch_and_mtp_only_when_given(self):
        assert "arch" not in cat.toml_entry("x", ref()) and "mtp" not in cat.toml_entry("x", ref())
        entry = tomllib.loads(cat.toml_entry("x", ref(arch="qwen35", mtp=True)))["models"]["x"]
        assert (entry["arch"], entry["mtp"]) == ("qwen35", True)

    def test_arch_and_mtp_read_back_from_the_user_file(self, user_file):
        cat.add_user_model("x", ref(arch="qwen35", mtp=True))
        catalog, warnings = cat.load_catalog(Settings())
        assert warnings == [] and catalog.models["x"] == ref(arch="qwen35", mtp=True)


class TestMtpDrafter:
    def load(self, user_file, text: str, n_ctx: int = 4096):
        user_file.write_text(text)
        return cat.load_catalog(Settings(n_ctx=n_ctx))

    def test_mtp_first_is_the_default_and_adds_no_file(self, user_file):
        catalog, warnings = self.load(user_file, MODELS + pair_table("big", ["mtp", "small"]), n_ctx=1000)
        pair = catalog.get("p")
        assert warnings == []
        assert pair.mtp and pair.default_is_mtp and pair.default_draft is None
        assert pair.drafters == ["mtp", "small"] and pair.drafts == [catalog.models["small"]]
        assert pair.memory_bytes == 1000 + 10 * 1000  # the target alone: its MTP layer is in its file

    def test_mtp_second_leaves_the_file_as_the_default(self, user_file):
        catalog, _ = self.load(user_file, MODELS + pair_table("big", ["small", "mtp"]), n_ctx=1000)
        pair = catalog.get("p")
        assert pair.mtp and not pair.default_is_mtp and pair.default_draft == catalog.models["small"]
        assert pair.memory_bytes == 1000 + 10 * 1000 + 100 + 2 * 1000

    def test_mtp_alone_is_a_pair_without_draft_files(self, user_file):
        catalog, warnings = self.load(user_file, MODELS + pair_table("big", ["mtp"]))
        pair = catalog.get("p")
        assert warnings == [] and pair.drafts == [] and pair.default_draft is None and pair.default_is_mtp

    def test_a_pair_of_files_only_offers_no_mtp(self, user_file):
        catalog, _ = self.load(user_file, MODELS + pair_table("big", ["small"]))
        pair = catalog.get("p")
        assert not pair.mtp and not pair.default_is_mtp and pair.default_draft == catalog.models["small"]

    def test_mtp_for_a_target_without_the_layers_names_the_pair(self, user_file):
        catalog, warnings = self.load(user_file, MODELS + pair_table("plain", ["mtp", "small"], pair_id="mine"))
        [said] = [w for w in warnings if "pairs[0] (id 'mine')" in w]
        assert str(user_file) in said and "field 'drafts'" in said and "'mtp'" in said and "'plain'" in said
        assert "mine" not in [p.id for p in catalog.pairs]

    def test_no_model_may_take_the_id(self, user_file):
        _, warnings = self.load(user_file, MODELS + model_table("mtp"))
        assert any(str(user_file) in w and "models.mtp" in w for w in warnings), warnings

    def test_a_broken_builtin_names_the_pair(self, tmp_path, monkeypatch):
        (tmp_path / cat.BUILTIN_NAME).write_text(MODELS + pair_table("plain", ["mtp"], pair_id="broken"))
        monkeypatch.setattr(cat.resources, "files", lambda package: tmp_path)
        with pytest.raises(cat.CatalogError, match=r"built-in catalog is broken: .*\(id 'broken'\): field 'drafts'"):
            cat.load_catalog(Settings(), user_path=tmp_path / "none.toml")


class TestMemoryFigure:
    """The pair menu's figure: every kind of state (``llama.memory``) at 1000 tokens of context
    and the default --draft-max of 16."""

    def figure(self, user_file, text: str) -> int:
        user_file.write_text(text)
        catalog, warnings = cat.load_catalog(Settings(n_ctx=1000))
        assert warnings == []
        return catalog.get("p").memory_bytes

    def test_an_mtp_default_counts_the_state_and_the_hidden_states(self, user_file):
        big, small = model_table("big", mtp=True, state=100, embd=8), model_table("small", size=100, kv=2)
        figure = self.figure(user_file, big + small + pair_table("big", ["mtp", "small"]))
        # weights and KV; the state, its snapshots (memory.SNAPSHOTS), two checkpoints; 8 floats a token
        assert figure == 1000 + 10 * 1000 + 100 * (1 + SNAPSHOTS + 2) + 1000 * 8 * 4

    def test_a_draft_file_keeps_its_state_and_checkpoints_but_no_snapshots(self, user_file):
        big, small = model_table("big", mtp=True, state=100, embd=8), model_table("small", size=100, kv=2, state=50)
        figure = self.figure(user_file, big + small + pair_table("big", ["small", "mtp"]))
        # the target: no hidden states, the draft file drafts; the draft: its state and 2 checkpoints
        assert figure == 1000 + 10 * 1000 + 100 * (1 + SNAPSHOTS + 2) + 100 + 2 * 1000 + 50 * (1 + 2)

    def test_an_assistant_counts_its_targets_hidden_states(self, user_file):
        target = model_table("t", arch="gemma4", embd=8)
        assistant = model_table("a", arch="gemma4-assistant", size=100, kv=0)
        figure = self.figure(user_file, target + assistant + pair_table("t", ["a"]))
        assert figure == 1000 + 10 * 1000 + 100 + 1000 * 8 * 4


class TestBuiltinPairs:
    @pytest.mark.parametrize(
        "pair_id, target_arch",
        [("qwen3.5-4b", "qwen35"), ("qwen3.5-9b", "qwen35"), ("qwen3.6-27b", "qwen35")],
    )
    def test_qwen35_targets_draft_for_themselves_then_with_the_0_8b(self, pair_id, target_arch):
        catalog, _ = cat.load_catalog(Settings())
        pair = catalog.get(pair_id)
        assert pair.target.arch == target_arch and pair.target.mtp
        assert pair.drafters == ["mtp", "qwen3.5-0.8b-q4_k_m"] and pair.default_is_mtp
        assert [d.params for d in pair.drafts] == ["0.8B"] and pair.drafts[0].family == pair.target.family
        # the default adds no file: the target alone at 4096 tokens (the default): weights, KV,
        # the recurrent state with its snapshots (memory.snapshots_for: at most 8,
        # within the budget) and two checkpoints, and the hidden states its MTP layer reads
        t = pair.target
        state = t.state_bytes * (1 + snapshots_for(t.state_bytes, 16) + 2)
        assert pair.memory_bytes == t.size_bytes + t.kv_bytes_per_token * 4096 + state + 4096 * t.n_embd * 4

    @pytest.mark.parametrize("pair_id", ["gemma-4-e4b", "gemma-4-12b", "gemma-4-26b-a4b"])
    def test_gemma4_targets_come_with_their_assistant(self, pair_id):
        catalog, _ = cat.load_catalog(Settings())
        pair = catalog.get(pair_id)
        assert pair.target.arch == "gemma4" and not pair.mtp
        assert pair.default_draft is not None and pair.default_draft.arch == "gemma4-assistant"
        assert pair.default_draft.repo == pair.target.repo  # unsloth ships each beside its own target
        assert pair.default_draft.family == pair.target.family

    @pytest.mark.parametrize(
        "pair_id, kv",
        [
            # 24 of its 42 layers keep a cache: 4 global, 2 KV heads x 512; 20 sliding, 2 x 256
            ("gemma-4-e4b", 4 * 2 * 1024 * 2 + 20 * 2 * 512 * 2),
            # 8 global of 48 layers, 1 KV head x 512; 40 sliding-window, 8 x 256
            ("gemma-4-12b", 8 * 1 * 1024 * 2 + 40 * 8 * 512 * 2),
            # 5 global of 30 layers, 2 KV heads x 512; 25 sliding-window, 8 x 256
            ("gemma-4-26b-a4b", 5 * 2 * 1024 * 2 + 25 * 8 * 512 * 2),
        ],
    )
    def test_gemma4_pairs_count_the_sliding_window_cache_and_the_hidden_states(self, pair_id, kv):
        catalog, _ = cat.load_catalog(Settings())
        pair = catalog.get(pair_id)
        t, a = pair.target, pair.default_draft
        assert t.kv_bytes_per_token == kv  # llama.cpp caches the sliding-window layers at full size
        # both files, the target's KV cache at 4096 tokens, and its hidden states the assistant reads
        assert pair.memory_bytes == t.size_bytes + a.size_bytes + kv * 4096 + 4096 * t.n_embd * 4

    def test_the_older_pairs_default_to_their_first_draft_file(self):
        catalog, _ = cat.load_catalog(Settings())
        older = [p for p in catalog.pairs if not p.mtp]
        assert older and all(p.default_draft == p.drafts[0] and not p.default_is_mtp for p in older)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A target file with MTP layers, one that declares them without their tensors, a plain one,
    a file that is no GGUF, and a missing one."""
    from tests.support.hybrid_gguf import write_tiny_qwen35

    d = tmp_path_factory.mktemp("mtp")
    junk = d / "junk.gguf"
    junk.write_bytes(b"not a GGUF file")
    return {
        "mtp": write_tiny_qwen35(d / "mtp.gguf", seed=1, mtp=True),
        "no tensors": write_tiny_qwen35(d / "no-tensors.gguf", seed=1, mtp=True, mtp_tensors=False),
        "plain": write_tiny_qwen35(d / "plain.gguf", seed=1),
        "junk": junk,
        "missing": d / "missing.gguf",
    }


class TestTargetMtp:
    """Whether a target drafts for itself (``target_mtp``): one answer for the pair menu,
    ``localspec --target`` and ``localspec run``."""

    def test_a_file_with_the_layers_has_them_whatever_the_catalog_says(self, files):
        for listed in (None, ref(), ref(mtp=True)):  # a command line's file, a user's own, the catalog's
            mtp = cat.target_mtp(files["mtp"], listed)
            assert mtp.present and mtp.in_file and mtp.in_file > 0

    def test_a_plain_copy_under_the_mtp_files_name_is_caught(self, files):
        mtp = cat.target_mtp(files["plain"], ref(mtp=True))
        assert not mtp.present and mtp.in_file == 0 and mtp.listed

    def test_layers_declared_without_their_tensors_are_none_to_draft_with(self, files):
        # a conversion that left them out: llama.cpp would refuse the MTP draft at load
        mtp = cat.target_mtp(files["no tensors"], ref(mtp=True))
        assert not mtp.present and mtp.in_file == 0

    @pytest.mark.parametrize("on_disk", ["missing", "junk", None])
    @pytest.mark.parametrize("listed", [True, False])
    def test_without_a_file_to_read_the_catalog_decides(self, files, on_disk, listed):
        # a file that cannot be read is its load's to explain
        mtp = cat.target_mtp(files[on_disk] if on_disk else None, ref(mtp=listed))
        assert mtp.in_file is None and mtp.present == listed
        assert not cat.target_mtp(files[on_disk] if on_disk else None).present
