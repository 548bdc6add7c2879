"""The pair menu, downloads and loading (localspec.tui.screens.pair, .download, .loading,
.error): first run, the second start, cancelled downloads, superseded and failed loads."""

from __future__ import annotations

import threading
from pathlib import Path

from localspec.chat.session import PairSpec
from localspec.settings import Settings, load_settings, save_settings
from localspec.tui.app import LocalspecApp
from localspec.tui.screens.download import DownloadScreen
from localspec.tui.screens.error import ErrorDialog
from localspec.tui.screens.pair import MTP_LABEL, PairScreen, compatible_drafts, draft_options, drafters
from tests.support.fake_session import (
    HELLO,
    FakeSession,
)
from tests.support.tui import (
    SIZE,
    FakeCatalog,
    FakePair,
    Files,
    Ref,
    make_app,
    make_catalog,
    wait_for,
)


async def wait_for_menu(pilot, app) -> None:
    """Until the pair menu has mounted: pushed is not enough, its drafters and the highlighted
    pair are filled in by its on_mount, which a busy machine can run after the next check."""
    await wait_for(pilot, lambda: isinstance(app.screen, PairScreen) and app.screen.is_mounted)


def qwen35_pair(mtp_first: bool = True) -> FakePair:
    """A Qwen3.5 target whose file carries MTP layers, its small draft, and a draft of another
    vocabulary the catalog lists beside them."""
    return FakePair(
        "q35",
        "Qwen3.5 9B (MTP) + 0.8B",
        "qwen3.5",
        Ref("u/t", "q35-9b.gguf", family="qwen3.5", mtp=True),
        [Ref("u/d", "q35-0.8b.gguf", family="qwen3.5"), Ref("q/d", "qwen-0.5b.gguf")],
        default_is_mtp=mtp_first,
    )


class TestDrafters:
    """What the menu offers for a target, and a line for each drafter it does not offer."""

    def test_mtp_is_offered_as_built_in_in_the_pairs_order(self):
        offered, why_not = drafters(qwen35_pair())
        assert [v for _, v in offered] == ["mtp", "draft:q35-0.8b.gguf", "lookup", "none"]
        assert offered[0][0] == MTP_LABEL == "MTP layers: built into the model, nothing to download"
        assert why_not == ["qwen-0.5b.gguf: another vocabulary (qwen2.5; the target is qwen3.5)"]
        offered, _ = drafters(qwen35_pair(mtp_first=False))
        assert [v for _, v in offered][:2] == ["draft:q35-0.8b.gguf", "mtp"]

    def test_a_target_without_mtp_layers_says_so(self):
        _, why_not = drafters(make_catalog().get("qwen"))
        assert why_not == [
            "llama-1b.gguf: another vocabulary (llama3; the target is qwen2.5)",
            "MTP: qwen-1.5b.gguf has no MTP layers",
        ]

    def test_a_missing_file_with_no_repo_is_not_offered(self):
        pair = FakePair("mine", "Mine", "qwen2.5", Ref("q/t", "t.gguf"), [Ref("", "gone.gguf")])
        offered, why_not = drafters(pair, locate=lambda ref: None)
        assert "draft:gone.gguf" not in [v for _, v in offered]
        assert "gone.gguf: its file is missing and it has no hub repo to download it from" in why_not

    def test_the_file_on_disk_decides_about_mtp(self, tmp_path):
        from tests.support.hybrid_gguf import write_tiny_qwen35

        with_mtp = write_tiny_qwen35(tmp_path / "q35-9b.gguf", seed=1, mtp=True)
        plain = write_tiny_qwen35(tmp_path / "plain.gguf", seed=1)
        # a user's own file with MTP layers is found, though the catalog says nothing of them
        mine = FakePair("mine", "Mine", "qwen3.5", Ref("", "q35-9b.gguf", family="qwen3.5"), [])
        assert drafters(mine, locate=lambda ref: with_mtp)[0][0] == (MTP_LABEL, "mtp")
        # a plain copy under the MTP file's name is caught
        offered, why_not = drafters(qwen35_pair(), locate=lambda ref: plain if ref.filename == "q35-9b.gguf" else None)
        assert "mtp" not in [v for _, v in offered]
        assert (
            why_not[-1]
            == "MTP: plain.gguf on disk has no MTP layers (a copy of the plain file?); the MTP file is in u/t"
        )

    async def test_choosing_mtp_opens_the_target_drafting_for_itself(self, tmp_path):
        files = Files(tmp_path, present={"q35-9b.gguf", "q35-0.8b.gguf"})
        app = make_app(spec=None, catalog=FakeCatalog([qwen35_pair()], "q35"), files=files)
        factory = app.session_factory
        async with app.run_test(size=SIZE) as pilot:
            await wait_for_menu(pilot, app)
            menu = app.screen
            assert menu.query_one("#draft-select").value == "mtp"  # the pair's first drafter
            notes = str(menu.query_one("#drafter-notes").render())
            assert "not offered: qwen-0.5b.gguf: another vocabulary" in notes
            await pilot.click("#open")
            await wait_for(pilot, lambda: app.session is not None)
            spec, _ = factory.loaded[0]
            assert spec.mtp and spec.draft is None and spec.target.name == "q35-9b.gguf"
            saved, _ = load_settings()
            assert saved.default_draft == "mtp"


class TestPairs:
    def test_menu_offers_only_compatible_drafts(self):
        qwen = make_catalog().get("qwen")
        assert [d.filename for d in compatible_drafts(qwen)] == ["qwen-0.5b.gguf"]
        assert [v for _, v in draft_options(qwen)] == ["draft:qwen-0.5b.gguf", "lookup", "none"]

    async def test_first_run_menu_download_and_open(self, tmp_path):
        files = Files(tmp_path)
        app = make_app(spec=None, catalog=make_catalog(), files=files)
        factory = app.session_factory
        async with app.run_test(size=SIZE) as pilot:
            await wait_for_menu(pilot, app)
            menu = app.screen
            assert menu.pair.id == "qwen"  # the default is preselected
            offered = menu.query_one("#draft-select").query_one("SelectOverlay")  # the list it opens
            assert [str(offered.get_option_at_index(i).prompt) for i in range(offered.option_count)] == [
                "qwen-0.5b.gguf  (976.6 KB)",
                "prompt lookup (no draft model)",
                "none (target alone)",
            ]
            assert "download needed" in str(menu.query_one("#pair-list").get_option_at_index(0).prompt)
            menu.query_one("#max-k").value = "6"
            menu.query_one("#p-min").value = "0.6"
            files.release.clear()  # hold the download mid-way to look at it
            await pilot.click("#open")
            await wait_for(
                pilot, lambda: isinstance(app.screen, DownloadScreen) and app.screen.last_progress is not None
            )
            rate = str(app.screen.query_one("#rate-0").render())
            assert "MB/s" in rate and "ETA" in rate and "/ 976.6 KB" in rate
            await pilot.press("ctrl+l")  # the UI stays responsive while downloading
            files.release.set()
            await wait_for(pilot, lambda: app.session is not None)
            assert files.pulled == ["qwen-1.5b.gguf", "qwen-0.5b.gguf"]
            spec, options = factory.loaded[0]
            assert spec.target.name == "qwen-1.5b.gguf" and spec.draft.name == "qwen-0.5b.gguf"
            assert (options.draft_max, options.adaptive, options.p_min) == (6, False, 0.6)
            saved, warning = load_settings()
            assert warning is None
            assert (saved.default_pair, saved.default_draft, saved.draft.draft_max) == ("qwen", "qwen-0.5b.gguf", 6)

    async def test_the_menu_shows_what_this_machine_measured(self, tmp_path, monkeypatch):
        from localspec.llama import backend as llama_backend
        from localspec.models import profiles
        from localspec.settings import data_dir

        files = Files(tmp_path, present={"qwen-1.5b.gguf", "qwen-0.5b.gguf"})
        target, draft = files.dir / "qwen-1.5b.gguf", files.dir / "qwen-0.5b.gguf"
        for f in (target, draft):
            f.write_bytes(b"gguf")
        monkeypatch.setattr(llama_backend, "build_info", lambda: {"llama_cpp_python": "v", "system_info": "s"})
        machine = profiles.machine_id("v|s")
        store = profiles.ProfileStore(data_dir() / profiles.PROFILES_FILE)
        # the F16-like target alone at 6.25 tok/s; 100 tokens in 6 s with the draft in use
        store.update(
            profiles.model_key(target, machine, None, 0),
            target,
            verify={1: 0.16, 2: 0.165, 4: 0.19},
            use={str(draft.resolve()): profiles.Use(100, 6.0, 90, 80)},
        )
        store.update(profiles.model_key(draft, machine, None, 0), draft, draft_pass=0.033)
        app = make_app(spec=None, catalog=make_catalog(), files=files)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for_menu(pilot, app)
            shown = str(app.screen.query_one("#pair-list").get_option_at_index(0).prompt)
            assert (
                "expected here: draft 2.67× · 16.7 tok/s · lookup not measured yet · none 6.2 tok/s (measured "
            ) in shown
            # a pair never loaded here says nothing rather than guess
            assert "expected here" not in str(app.screen.query_one("#pair-list").get_option_at_index(1).prompt)

    async def test_second_start_opens_default_pair_directly(self, tmp_path):
        files = Files(tmp_path, present={"llama-8b.gguf"})
        save_settings(Settings(default_pair="llama", default_draft="lookup"))
        settings, _ = load_settings()
        app = make_app(settings=settings, spec=None, catalog=make_catalog(), files=files)
        factory = app.session_factory
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.session is not None)
            spec, _ = factory.loaded[0]
            assert (spec.target.name, spec.draft, spec.lookup) == ("llama-8b.gguf", None, True)

    async def test_cancel_download_keeps_app_running(self, tmp_path):
        files = Files(tmp_path)
        files.release.clear()
        app = make_app(spec=None, catalog=make_catalog(), files=files)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for_menu(pilot, app)
            await pilot.click("#open")
            await wait_for(pilot, lambda: isinstance(app.screen, DownloadScreen))
            await pilot.press("escape")
            files.release.set()
            await wait_for(pilot, lambda: type(app.screen).__name__ == "ChatScreen")
            assert app.session is None and files.pulled == []

    async def test_a_superseded_load_is_dropped_and_freed(self):
        slow, fast = FakeSession(list(HELLO)), FakeSession(list(HELLO))
        started, release = threading.Event(), threading.Event()

        def factory(spec, options, progress):
            if spec.target.name == "slow.gguf":
                started.set()
                release.wait(5)
                return slow
            return fast

        app = LocalspecApp(Settings(), session_factory=factory, spec=PairSpec(Path("slow.gguf")))
        async with app.run_test(size=SIZE) as pilot:
            # the start-up load must be under way first (a fixed pause was not always enough:
            # after long benchmarks, apparently with a cold page cache, the mount took longer,
            # and the start-up load, issued after the pick below, became the newest and won)
            await wait_for(pilot, started.is_set)
            app.load_pair(PairSpec(Path("fast.gguf")))  # the user picked another pair meanwhile
            await wait_for(pilot, lambda: app.session is fast)
            release.set()
            await wait_for(pilot, lambda: slow.closed)
            assert app.session is fast and type(app.screen).__name__ == "ChatScreen"

    async def test_load_failure_is_a_dialog(self):
        def failing(spec, options, progress):
            raise ValueError("[Errno 2] not a GGUF file [/bold]")  # brackets are not markup

        app = LocalspecApp(Settings(), session_factory=failing, spec=PairSpec(Path("bad.gguf")))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, ErrorDialog))
            assert "not a GGUF file" in app.screen.message
            await pilot.press("enter")
            assert type(app.screen).__name__ == "ChatScreen"
