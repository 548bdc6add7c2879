"""The built-in catalog and the user's catalog file."""

from __future__ import annotations

import json
import re
import tomllib
from importlib import resources
from pathlib import Path

import hypothesis
import pytest
from hypothesis import strategies as st

from localspec.llama.preflight import SUPPORTED_ARCHITECTURES
from localspec.models import catalog as cat
from localspec.settings import Settings


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "config" / "catalog.toml"
    path.parent.mkdir(parents=True)
    return path


GOOD_MODEL = """
[models.mine]
repo = "me/mine-GGUF"
filename = "mine-q4.gguf"
quant = "Q4_K_M"
params = "2B"
family = "qwen2.5"
size_bytes = 1000
kv_bytes_per_token = 10
"""


class TestBuiltin:
    def test_loads_cleanly(self):
        catalog, warnings = cat.load_catalog(Settings())
        assert warnings == []
        assert len(catalog.pairs) >= 23

    def test_default_pair_is_pinned(self):
        catalog, _ = cat.load_catalog(Settings())
        pair = catalog.default
        assert pair.id == catalog.default_pair_id == "qwen2.5-coder-1.5b"
        assert pair.target.repo == "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"
        assert pair.target.filename == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
        assert (pair.target.sha256, pair.target.size_bytes) == (
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            1117320768,
        )
        draft = pair.drafts[0]
        assert draft.repo == "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"
        assert (draft.sha256, draft.size_bytes) == (
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            491400064,
        )

    @pytest.mark.parametrize(
        "pair_id, draft_params",
        [
            ("qwen2.5-coder-1.5b", "0.5B"),
            ("qwen2.5-coder-7b", "0.5B"),
            ("qwen2.5-coder-14b", "0.5B"),
            ("qwen2.5-coder-32b", "0.5B"),
            ("qwen2.5-3b", "0.5B"),
            ("qwen2.5-7b", "0.5B"),
            ("qwen2.5-14b", "0.5B"),
            ("llama-3.1-8b", "1B"),
            ("llama-3.2-3b", "1B"),
            ("gemma-3-4b", "270M"),
            ("gemma-3-12b", "1B"),
            ("gemma-3-27b", "1B"),
            ("smollm2-1.7b", "135M"),
            ("qwen3-4b", "0.6B"),
            ("qwen3-8b", "0.6B"),
            ("qwen3-14b", "0.6B"),
            ("qwen3-32b", "0.6B"),
        ],
    )
    def test_the_pairs_the_issue_asks_for(self, pair_id, draft_params):
        catalog, _ = cat.load_catalog(Settings())
        pair = catalog.get(pair_id)
        assert pair.drafts[0].params == draft_params
        # a draft shares its target's tokenizer family (the Llama 3.x models are one family)
        assert all(d.family == pair.target.family for d in pair.drafts)
        assert pair.good_for and pair.license

    def test_every_model_is_a_hub_gguf(self):
        catalog, _ = cat.load_catalog(Settings())
        for model_id, m in catalog.models.items():
            assert "/" in m.repo and m.filename.endswith(".gguf"), model_id
            assert m.size_bytes > 0, model_id
            # a Gemma 4 assistant reads its target's KV cache and keeps none of its own
            assert (m.kv_bytes_per_token == 0) == (m.arch == "gemma4-assistant"), model_id

    def test_every_entry_has_an_architecture_this_build_loads(self):
        catalog, _ = cat.load_catalog(Settings())
        unloadable = {k: m.arch for k, m in catalog.models.items() if m.arch not in SUPPORTED_ARCHITECTURES}
        assert unloadable == {}

    def test_every_model_table_names_its_source(self):
        text = resources.files(cat.__package__).joinpath(cat.BUILTIN_NAME).read_text(encoding="utf-8")
        # each [models."..."] header is followed by its "# source: URL" line
        lines = text.splitlines()
        headers = [i for i, line in enumerate(lines) if line.startswith("[models.")]
        assert len(headers) == len(tomllib.loads(text)["models"])
        unsourced = [lines[i] for i in headers if not re.fullmatch(r"# source: https://\S+.*", lines[i + 1])]
        assert unsourced == []

    def test_memory_is_files_plus_kv_at_the_configured_context(self):
        catalog, _ = cat.load_catalog(Settings(n_ctx=8192))
        pair = catalog.default
        # 1117320768 + 491400064 bytes of weights; KV (28672 + 12288) bytes/token x 8192 tokens
        assert pair.memory_bytes == 1117320768 + 491400064 + (28672 + 12288) * 8192

    def test_unknown_pair_message_lists_the_known_ones(self):
        catalog, _ = cat.load_catalog(Settings())
        with pytest.raises(KeyError) as info:
            catalog.get("gpt-5")
        assert str(info.value).startswith("no pair 'gpt-5' in the catalog; known pairs: qwen2.5-coder-1.5b, ")


class TestUserFile:
    def test_user_pairs_and_models_are_added(self, user_file):
        user_file.write_text(
            GOOD_MODEL
            + """
[[pairs]]
id = "mine"
name = "Mine + 0.5B"
family = "qwen2.5"
target = "mine"
drafts = ["qwen2.5-coder-0.5b-instruct-q4_k_m"]
"""
        )
        catalog, warnings = cat.load_catalog(Settings())
        assert warnings == []
        pair = catalog.get("mine")
        assert pair.target.repo == "me/mine-GGUF" and pair.drafts[0].params == "0.5B"
        assert catalog.get("qwen2.5-coder-1.5b")  # built-in still there

    def test_same_id_replaces_the_builtin(self, user_file):
        user_file.write_text(
            GOOD_MODEL
            + """
[[pairs]]
id = "qwen2.5-coder-1.5b"
name = "my default"
family = "qwen2.5"
target = "mine"
drafts = ["mine"]
"""
        )
        catalog, _ = cat.load_catalog(Settings())
        assert catalog.get("qwen2.5-coder-1.5b").name == "my default"
        assert len([p for p in catalog.pairs if p.id == "qwen2.5-coder-1.5b"]) == 1

    def test_bad_field_names_file_entry_and_field(self, user_file):
        user_file.write_text(
            GOOD_MODEL
            + """
[models.broken]
repo = "me/broken"
filename = "b.gguf"
quant = "Q4_K_M"
params = "1B"
family = "x"
size_bytes = "big"
"""
        )
        catalog, warnings = cat.load_catalog(Settings())
        assert str(user_file) in warnings[0]
        assert "models.broken" in warnings[0] and "field 'size_bytes'" in warnings[0] and "'big'" in warnings[0]
        assert "mine" in catalog.models and "broken" not in catalog.models  # the good entry survives
        assert catalog.default.id == "qwen2.5-coder-1.5b"
        backups = list(user_file.parent.glob("catalog.toml.bad-*"))
        assert len(backups) == 1 and backups[0].read_text() == user_file.read_text()
        assert str(backups[0]) in warnings[-1]

    @pytest.mark.parametrize(
        "entry, where, field",
        [
            (
                '[[pairs]]\nid = "p"\nname = "P"\nfamily = "f"\ntarget = "nope"\ndrafts = ["mine"]\n',
                "pairs[0] (id 'p')",
                "field 'target'",
            ),
            (
                '[[pairs]]\nid = "p"\nname = "P"\nfamily = "f"\ntarget = "mine"\ndrafts = []\n',
                "pairs[0] (id 'p')",
                "field 'drafts'",
            ),
            ('[[pairs]]\nname = "P"\nfamily = "f"\ntarget = "mine"\ndrafts = ["mine"]\n', "pairs[0]", "field 'id'"),
            (
                '[models.x]\nfilename = "x.gguf"\nquant = "Q8_0"\nparams = "1B"\nfamily = "f"\nsize_bytes = 1\n'
                'sha256 = "abc"\n',
                "models.x",
                "field 'sha256'",
            ),
            (
                '[models.x]\nfilename = "x.gguf"\nquant = "Q8_0"\nparams = "1B"\nfamily = "f"\nsize_bytes = 1\n'
                'colour = "red"\n',
                "models.x",
                "field 'colour'",
            ),
        ],
    )
    def test_each_kind_of_mistake_is_named(self, user_file, entry, where, field):
        user_file.write_text(GOOD_MODEL + entry)
        _, warnings = cat.load_catalog(Settings())
        assert any(str(user_file) in w and where in w and field in w for w in warnings), warnings

    def test_a_bad_file_is_copied_aside_once_not_at_every_start(self, user_file):
        user_file.write_text(GOOD_MODEL.replace("size_bytes = 1000", "size_bytes = -1"))
        for _ in range(3):
            _, warnings = cat.load_catalog(Settings())
            assert "field 'size_bytes'" in warnings[0]
        assert len(list(user_file.parent.glob("catalog.toml.bad-*"))) == 1

    def test_wrong_shape_at_top_level(self, user_file):
        user_file.write_text("models = 3\n")
        catalog, warnings = cat.load_catalog(Settings())
        assert "'models' must be tables" in warnings[0] and catalog.default.id == "qwen2.5-coder-1.5b"

    def test_unknown_default_in_the_user_file(self, user_file):
        user_file.write_text('default_pair = "nope"\n')
        catalog, warnings = cat.load_catalog(Settings())
        assert catalog.default_pair_id == "qwen2.5-coder-1.5b" and "catalog: default_pair 'nope'" in warnings[0]

    def test_unparseable_file_gives_the_line_and_keeps_the_builtin(self, user_file):
        user_file.write_text('[models.x]\nrepo = "unterminated\n')
        catalog, warnings = cat.load_catalog(Settings())
        assert str(user_file) in warnings[0] and "line 2" in warnings[0]
        assert catalog.default.id == "qwen2.5-coder-1.5b"

    def test_default_pair_from_settings(self, user_file):
        catalog, warnings = cat.load_catalog(Settings(default_pair="qwen3-8b"))
        assert catalog.default_pair_id == "qwen3-8b" and warnings == []
        catalog, warnings = cat.load_catalog(Settings(default_pair="nope"))
        assert catalog.default_pair_id == "qwen2.5-coder-1.5b" and "default_pair 'nope'" in warnings[0]


def ref(size_bytes: int = 5, **kw) -> cat.ModelRef:
    return cat.ModelRef(filename="m.gguf", quant="F32", size_bytes=size_bytes, params="1M", family="llama", **kw)


# ids from every plane and of every awkward kind: the table header must quote each so it reads back
AWKWARD_IDS = [
    "😀",  # beyond U+FFFF: json.dumps wrote it as a surrogate pair, which TOML refuses
    "🏳️‍🌈",  # a ZWJ sequence with a variation selector
    "中文模型",
    "\U00020000",  # CJK extension B, plane 2
    "\U000e0001",  # a tag character, plane 14
    "\U0010fffd",  # plane 16, private use
    "e\u0301",  # a combining mark
    "\ufeff",  # a byte order mark
    'say "hi"',
    "back\\slash",
    "a.b",
    "with space",
    "tab\tand\nnewline",
    "\x7f",
    "[models.x]",
]


class TestAddUserModel:
    def test_round_trip_keeps_what_the_user_wrote(self, user_file, tmp_path):
        user_file.write_text("# my models\n" + GOOD_MODEL)
        cat.add_user_model('odd "name"', ref(path=tmp_path / 'dir with "quotes"/m.gguf'))
        text = user_file.read_text()
        assert text.startswith("# my models\n")
        raw = tomllib.loads(text)
        assert raw["models"]['odd "name"']["path"] == str(tmp_path / 'dir with "quotes"/m.gguf')
        catalog, warnings = cat.load_catalog(Settings())
        assert warnings == [] and catalog.models['odd "name"'].path == tmp_path / 'dir with "quotes"/m.gguf'

    def test_duplicate_id_is_refused(self, user_file):
        user_file.write_text(GOOD_MODEL)
        with pytest.raises(cat.CatalogError, match="'mine' is already there"):
            cat.add_user_model("mine", ref())

    @pytest.mark.parametrize("model_id", AWKWARD_IDS)
    def test_any_id_round_trips_and_the_users_text_is_kept(self, user_file, model_id):
        user_file.write_text("# my models\n" + GOOD_MODEL, encoding="utf-8")
        cat.add_user_model(model_id, ref())
        assert user_file.read_text(encoding="utf-8").startswith("# my models\n" + GOOD_MODEL)
        catalog, warnings = cat.load_catalog(Settings())
        assert warnings == [] and catalog.models[model_id] == ref() and "mine" in catalog.models

    @hypothesis.settings(
        max_examples=60,
        derandomize=True,
        deadline=None,
        suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture],
    )
    @hypothesis.given(model_id=st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12))
    def test_drawn_ids_from_every_plane_round_trip(self, user_file, model_id):
        user_file.unlink(missing_ok=True)
        cat.add_user_model(model_id, ref())
        catalog, warnings = cat.load_catalog(Settings())
        assert warnings == [] and catalog.models[model_id] == ref()

    def test_an_id_that_is_not_text_is_refused_and_nothing_written(self, user_file):
        user_file.write_text(GOOD_MODEL)
        with pytest.raises(cat.CatalogError, match="not valid text"):
            cat.add_user_model("\udcff", ref())  # what Python makes of a --name that is not UTF-8
        assert user_file.read_text() == GOOD_MODEL

    @pytest.mark.parametrize("text", ["models = {}  # an inline table takes no [models.ID]\n", "models = 3\n"])
    def test_an_append_that_would_not_read_back_is_refused_and_the_file_left_as_it_was(self, user_file, text):
        user_file.write_text(text)
        with pytest.raises(cat.CatalogError, match=r"with 'x' added the file would not read back .*line 3.*nothing"):
            cat.add_user_model("x", ref())
        assert user_file.read_text() == text

    def test_a_broken_file_is_refused_with_its_line_and_left_as_it_was(self, user_file):
        user_file.write_text(GOOD_MODEL + "[models.x\n")
        with pytest.raises(cat.CatalogError, match=r"not valid TOML .*line 10.*; nothing was changed"):
            cat.add_user_model("y", ref())
        assert user_file.read_text() == GOOD_MODEL + "[models.x\n"


def old_toml_entry(model_id: str, ref: cat.ModelRef) -> str:
    """The table localspec wrote before tomli_w, verbatim: the id through json.dumps."""
    lines = [f"[models.{json.dumps(model_id)}]"]
    for key, value in ref.model_dump(exclude_none=True).items():
        if (key == "repo" and not value) or key in ("arch", "mtp"):  # arch and mtp came later
            continue
        text = json.dumps(str(value), ensure_ascii=False) if isinstance(value, (str, Path)) else str(value)
        lines.append(f"{key} = {text}")
    return "\n".join(lines) + "\n"


class TestFilesFromTheOldWriter:
    """`models import --name mine`, then `--name '😀'`, as an older localspec wrote them."""

    def damaged(self, user_file) -> str:
        text = "# my models\n" + old_toml_entry("mine", ref()) + "\n" + old_toml_entry("😀", ref(size_bytes=6))
        assert '[models."\\ud83d\\ude00"]' in text
        user_file.write_text(text, encoding="utf-8")
        return text

    def test_the_escaped_id_is_repaired_and_every_entry_kept(self, user_file):
        old = self.damaged(user_file)
        catalog, warnings = cat.load_catalog(Settings())
        assert catalog.models["mine"] == ref() and catalog.models["😀"] == ref(size_bytes=6)
        [backup] = user_file.parent.glob("catalog.toml.bad-*")
        assert backup.read_text(encoding="utf-8") == old
        assert warnings == [
            f"{user_file}: the model ids '😀' were written by an older localspec in a form TOML refuses; "
            f"repaired them in the file, and kept the original as {backup}"
        ]
        assert user_file.read_text(encoding="utf-8") == old.replace('"\\ud83d\\ude00"', '"😀"')

    def test_once_repaired_it_loads_quietly_and_takes_new_models(self, user_file):
        self.damaged(user_file)
        cat.load_catalog(Settings())
        cat.add_user_model("𝄞", ref())
        catalog, warnings = cat.load_catalog(Settings())
        assert warnings == [] and {"mine", "😀", "𝄞"} <= set(catalog.models)
        assert len(list(user_file.parent.glob("catalog.toml.bad-*"))) == 1

    def test_what_toml_reads_is_left_byte_for_byte(self, user_file):
        # json.dumps wrote characters below U+FFFF as \\uXXXX, which TOML reads as the same id;
        # an escape in a comment or a literal string is the user's text
        pair = '[[pairs]]\nid = "p"\nname = \'literal \\ud83d\\ude00\'\nfamily = "llama"\n'
        pair += 'target = "中文"\ndrafts = ["😀"]\n'
        text = '# "\\ud83d\\ude00" in a comment\n' + old_toml_entry("中文", ref()) + "\n" + old_toml_entry("😀", ref())
        user_file.write_text(text + "\n" + pair, encoding="utf-8")
        catalog, _ = cat.load_catalog(Settings())
        assert catalog.get("p").target == catalog.models["中文"] and catalog.get("p").name == r"literal \ud83d\ude00"
        repaired = text.replace('[models."\\ud83d\\ude00"]', '[models."😀"]') + "\n" + pair
        assert '"\\u4e2d\\u6587"' in text and user_file.read_text(encoding="utf-8") == repaired

    def test_a_file_the_repair_cannot_mend_is_ignored_as_before(self, user_file):
        text = old_toml_entry("😀", ref()) + "[models.x\n"
        user_file.write_text(text)
        catalog, warnings = cat.load_catalog(Settings())
        assert "not valid TOML" in warnings[0] and "the whole file was ignored" in warnings[0]
        assert "😀" not in catalog.models and user_file.read_text() == text
