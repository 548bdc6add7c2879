"""Per-machine cost profiles: the store, what is expected from them, and a session keeping them."""

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from localspec import lockedfile
from localspec.chat.session import LONGEST_VERIFY, LoadOptions, PairSpec, Session
from localspec.core.controller import AdaptiveController
from localspec.core.costs import CostModel
from localspec.core.estimates import prior_from
from localspec.core.options import usable_cpus
from localspec.core.policy import DEFAULT as P
from localspec.core.sampling import SamplingParams
from localspec.models.profiles import (
    ASSUMED_ALPHA,
    HISTORY,
    Profile,
    ProfileStore,
    Use,
    expected,
    machine_id,
    model_key,
    options_here,
    recommend,
)

GREEDY = SamplingParams(temperature=0.0)


class TestStore:
    def test_round_trip_and_use_adds_up(self, tmp_path):
        store = ProfileStore(tmp_path / "p.json")
        store.update("k", tmp_path / "t.gguf", verify={1: 0.1, 2: 0.11}, use={"none": Use(10, 1.0)})
        p = store.update("k", tmp_path / "t.gguf", use={"none": Use(20, 2.0, 0, 0)})
        assert p.verify == {1: 0.1, 2: 0.11} and p.use["none"] == Use(30, 3.0, 0, 0)
        again = ProfileStore(tmp_path / "p.json").get("k")
        assert again == p and again.measured

    def test_a_busy_load_is_outvoted_by_the_loads_around_it(self, tmp_path):
        # a draft pass of 0.02 s, but one load ran beside a build and measured 2.68 s
        store = ProfileStore(tmp_path / "p.json")
        for seconds in (0.02, 0.021, 2.68, 0.019):
            p = store.update("d", tmp_path / "d.gguf", draft_pass=seconds, verify={1: 50 * seconds})
        assert p.draft_pass == pytest.approx(0.0205) and p.verify[1] == pytest.approx(50 * 0.0205)
        assert p.draft_pass_history == [0.02, 0.021, 2.68, 0.019]
        for _ in range(HISTORY):  # the window holds the last HISTORY loads
            p = store.update("d", tmp_path / "d.gguf", draft_pass=0.03)
        assert p.draft_pass_history == [0.03] * HISTORY

    def test_a_load_amends_its_own_entry(self, tmp_path):
        store = ProfileStore(tmp_path / "p.json")
        store.update("d", tmp_path / "d.gguf", draft_pass=0.02)
        store.update("d", tmp_path / "d.gguf", draft_pass=0.05)  # the next load, at load
        p = store.update("d", tmp_path / "d.gguf", draft_pass=0.04, amend=True)  # ... and at its close
        assert p.draft_pass_history == [0.02, 0.04]

    def test_an_old_profile_keeps_its_value_as_the_first_of_its_history(self, tmp_path):
        path = tmp_path / "p.json"
        path.write_text(json.dumps({"d": {"model": "d", "measured": "x", "verify": {"1": 0.1}, "draft_pass": 0.02}}))
        p = ProfileStore(path).update("d", tmp_path / "d.gguf", draft_pass=0.2, verify={1: 1.0})
        assert p.draft_pass_history == [0.02, 0.2] and p.verify_history == {1: [0.1, 1.0]}

    def test_use_counts_replies_and_an_older_profile_without_them_reads(self, tmp_path):
        store = ProfileStore(tmp_path / "profiles.json")
        store.update("k", tmp_path / "t.gguf", use={"none": Use(10, 1.0, replies=1)})
        assert ProfileStore(tmp_path / "profiles.json").get("k").use["none"].replies == 1
        raw = json.loads((tmp_path / "profiles.json").read_text())
        del raw["k"]["use"]["none"]["replies"]  # as a profile written before replies were counted
        (tmp_path / "profiles.json").write_text(json.dumps(raw))
        assert ProfileStore(tmp_path / "profiles.json").get("k").use["none"] == Use(10, 1.0)

    def test_use_counts_rejections_for_the_acceptance_prior(self):
        assert Use(100, 1.0, 60, 40).prior() is None  # no rejections counted (an older profile)
        alpha = Use(100, 1.0, 60, 40, rejected=10).prior()
        assert alpha == pytest.approx(prior_from(40, 10)) and alpha > P.prior_alpha

    def test_a_damaged_file_is_set_aside_and_started_again(self, tmp_path):
        path = tmp_path / "p.json"
        path.write_text("{not json")
        store = ProfileStore(path)
        assert store.load() == {} and "set aside" in store.warning
        assert list(tmp_path.glob("p.json.bad-*"))
        store.update("k", tmp_path / "t.gguf", verify={1: 0.1})
        assert json.loads(path.read_text())["k"]["verify"] == {"1": 0.1}

    def test_a_damaged_file_is_left_alone_while_another_process_holds_the_lock(self, tmp_path, monkeypatch):
        # the holder may be about to replace it with a good file: moving that aside would lose it
        monkeypatch.setattr(lockedfile, "LOCK_TIMEOUT", 0.1)
        path = tmp_path / "p.json"
        path.write_text("{not json")
        store = ProfileStore(path)
        with lockedfile.locked(path):
            assert store.load() == {}
        assert "left as it is" in store.warning and "p.json.lock" in store.warning
        assert path.read_text() == "{not json" and not list(tmp_path.glob("p.json.bad-*"))

    def test_an_update_that_cannot_take_the_lock_raises_and_writes_nothing(self, tmp_path, monkeypatch):
        monkeypatch.setattr(lockedfile, "LOCK_TIMEOUT", 0.1)
        store = ProfileStore(tmp_path / "p.json")
        store.update("k", tmp_path / "t.gguf", use={"none": Use(10, 1.0)})
        before = store.path.read_text()
        with lockedfile.locked(store.path), pytest.raises(OSError, match="nothing was written"):
            store.update("k", tmp_path / "t.gguf", use={"none": Use(10, 1.0)})  # Session.close catches OSError
        assert store.path.read_text() == before

    def test_a_get_reads_the_file_only_when_it_changed(self, tmp_path, monkeypatch):
        # a session asks for its pair's profile at each new way of drafting (a server request's
        # own longest draft): a stat of the file then, not a parse of every profile in it
        path = tmp_path / "p.json"
        ProfileStore(path).update("k", tmp_path / "t.gguf", verify={1: 0.1})
        store = ProfileStore(path)
        reads, read_text = [], Path.read_text
        monkeypatch.setattr(Path, "read_text", lambda p, *a, **kw: reads.append(p) or read_text(p, *a, **kw))
        for _ in range(5):
            assert store.get("k").verify == {1: 0.1}
        assert reads == [path]
        ProfileStore(path).update("k", tmp_path / "t.gguf", verify={1: 0.3})  # another process's update
        assert store.get("k").verify_history == {1: [0.1, 0.3]}  # is seen at the next get

    def test_an_update_builds_on_the_file_not_on_what_a_get_read(self, tmp_path):
        path = tmp_path / "p.json"
        app, server = ProfileStore(path), ProfileStore(path)  # two processes' stores
        app.update("k", tmp_path / "t.gguf", use={"none": Use(10, 1.0)})
        assert app.get("k").use["none"].tokens == 10  # read, and kept by the app's store
        server.update("k", tmp_path / "t.gguf", use={"none": Use(20, 2.0)})
        app.update("k", tmp_path / "t.gguf", use={"none": Use(5, 0.5)})
        assert ProfileStore(path).get("k").use["none"] == Use(35, 3.5)  # every reply counted once

    def test_the_key_changes_with_the_file_and_the_machine(self, tmp_path):
        f = tmp_path / "m.gguf"
        f.write_bytes(b"x")
        a = model_key(f, machine_id("build-1"), 2, 0)
        assert a == model_key(f, machine_id("build-1"), 2, 0)
        assert a != model_key(f, machine_id("build-2"), 2, 0)
        assert a != model_key(f, machine_id("build-1"), 4, 0)
        assert a != model_key(f, machine_id("build-1"), 2, 10)
        f.write_bytes(b"xy")
        assert a != model_key(f, machine_id("build-1"), 2, 0)

    def test_adopt_moves_an_old_key_and_merges_it_older_first(self, tmp_path):
        store = ProfileStore(tmp_path / "p.json")
        for t in (0.10, 0.11, 0.12):  # the old key's three loads
            store.update("old", tmp_path / "t.gguf", verify={1: t}, use={"d": Use(10, 1.0, 8, 6, 2)})
        for t in (0.20, 0.21, 0.22):  # the new key's three, later
            store.update("new", tmp_path / "t.gguf", verify={1: t}, draft_pass=0.02, use={"d": Use(5, 0.5, 4, 3, 1)})
        store.adopt("old", "new")
        again = ProfileStore(tmp_path / "p.json")
        assert again.get("old") is None
        p = again.get("new")
        assert p.use["d"] == Use(45, 4.5, 36, 27, 9)  # every reply counted once
        assert p.verify_history[1] == pytest.approx([0.11, 0.12, 0.20, 0.21, 0.22][-HISTORY:])
        assert p.verify[1] == pytest.approx(0.20) and p.draft_pass == pytest.approx(0.02)
        store.adopt("gone", "new")  # nothing under the old key: nothing changes
        assert ProfileStore(tmp_path / "p.json").get("new") == p

    def test_adopt_keeps_a_profile_older_than_histories(self, tmp_path):
        # a profile written before histories were kept holds medians only
        path = tmp_path / "p.json"
        bare = Profile("t.gguf", "2026-11-30", verify={1: 0.1, 2: 0.12}, draft_pass=0.02, use={"d": Use(10, 1.0)})
        path.write_text(json.dumps({"old": asdict(bare)}))
        store = ProfileStore(path)
        store.update("new", tmp_path / "t.gguf", verify={1: 0.3})
        store.adopt("old", "new")
        p = store.get("new")
        assert p.verify_history == {1: [0.1, 0.3], 2: [0.12]} and p.verify[2] == pytest.approx(0.12)
        assert p.draft_pass_history == [0.02] and p.use["d"] == Use(10, 1.0)


class TestExpected:
    # the F16 target and the 0.5B draft on this CPU, roughly
    TARGET = Profile("t", "2026-12-01", verify={1: 0.16, 2: 0.165, 4: 0.186, 8: 0.27})
    DRAFT = Profile("d", "2026-12-01", draft_pass=0.033)

    def test_target_alone_is_one(self):
        e = expected(self.TARGET, "none")
        assert e.speedup == 1.0 and e.tokens_per_second == pytest.approx(6.25)

    def test_a_draft_never_used_comes_from_the_cost_model_with_an_assumed_acceptance(self):
        e = expected(self.TARGET, "d", self.DRAFT)
        assert 1.2 < e.speedup < 2.5 and f"assumed acceptance {ASSUMED_ALPHA:.0%}" in e.label
        assert e.label.startswith(f"expected {e.speedup:.2f}× · ")

    def test_use_wins_over_the_model(self):
        t = Profile("t", "2026-12-01", verify={1: 0.1}, use={"d": Use(100, 5.0, 80, 70)})
        e = expected(t, "d", self.DRAFT)
        assert e.tokens_per_second == pytest.approx(20.0) and e.speedup == pytest.approx(2.0)
        assert "measured in use over 100 tokens" in e.label

    def test_lookup_unknown_until_used_and_nothing_without_a_curve(self):
        assert expected(self.TARGET, "lookup") is None
        assert expected(Profile("t", ""), "none") is None

    def test_drafting_that_cannot_pay_is_expected_at_one(self):
        cpu = Profile("t", "x", verify={n: 0.07 * n for n in (1, 2, 4, 8)})
        assert expected(cpu, "d", Profile("d", "x", draft_pass=0.04)).speedup == pytest.approx(1.0)


def load_calibrated_by(calibrate, tiny_pair, options: LoadOptions, store: ProfileStore) -> Session:
    """The pair loaded with ``calibrate`` in place of the session's own (a load beside a burst)."""
    import localspec.chat.session as session_module

    session_module.calibrate, real = calibrate, session_module.calibrate
    try:
        return Session.load(PairSpec(tiny_pair[0], tiny_pair[1]), options, profiles=store)
    finally:
        session_module.calibrate = real


class TestSessionKeepsProfiles:
    def test_load_measures_and_close_adds_the_use(self, tiny_pair, tmp_path):
        store = ProfileStore(tmp_path / "profiles.json")
        s = Session.load(PairSpec(tiny_pair[0], tiny_pair[1]), LoadOptions(n_ctx=512, threads=1), profiles=store)
        target_key = model_key(tiny_pair[0], s.machine, 1, s.offload.target_layers)
        draft_key = model_key(tiny_pair[1], s.machine, 1, s.offload.draft_layers)
        assert set(store.get(target_key).verify) >= {1, 2, 4, 8}
        assert store.get(draft_key).draft_pass > 0
        steps = list(s.chat([{"role": "user", "content": "hello"}], GREEDY, 12))
        s.close()
        use = store.get(target_key).use[str(tiny_pair[1].resolve())]
        assert use.tokens == sum(len(x.emitted) for x in steps) and use.seconds > 0
        assert not any(x.extended for x in steps)  # so a step is a copy's or the draft model's alone
        drafted = [x for x in steps if not x.n_copied]  # a copy's verdict is its gate's
        assert use.drafted == sum(len(x.drafted) for x in drafted)
        assert use.rejected == sum(x.n_accepted < len(x.drafted) for x in drafted)

    def test_the_next_load_starts_from_what_this_pair_measured(self, tiny_pair, tmp_path, monkeypatch):
        import localspec.chat.session as session_module

        store = ProfileStore(tmp_path / "profiles.json")
        s = Session.load(PairSpec(tiny_pair[0], tiny_pair[1]), LoadOptions(n_ctx=512, threads=1), profiles=store)
        s.costs = CostModel({1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0}, t_draft=0.01)  # costs where drafting pays
        monkeypatch.setattr(session_module, "recheck", lambda *args, **kwargs: False)  # (not this machine's)
        assert s.drafting("draft").controller.alpha == pytest.approx(P.prior_alpha)  # untried: the default
        for _ in range(3):
            list(s.chat([{"role": "user", "content": "hello world the model"}], GREEDY, 24))
        s.close()
        again = Session.load(PairSpec(tiny_pair[0], tiny_pair[1]), LoadOptions(n_ctx=512, threads=1), profiles=store)
        try:
            use = store.get(model_key(tiny_pair[0], again.machine, 1, again.offload.target_layers)).use
            counted = use[str(tiny_pair[1].resolve())]
            controller = again.drafting("draft").controller
            assert isinstance(controller, AdaptiveController) and counted.rejected > 0
            assert controller.alpha == pytest.approx(prior_from(counted.accepted, counted.rejected))
        finally:
            again.close()

    def test_loads_time_the_longest_verify_until_the_profile_holds_three_timings_of_it(self, tiny_pair, tmp_path):
        from localspec.core import calibration as costs

        store, options = ProfileStore(tmp_path / "profiles.json"), LoadOptions(n_ctx=512, threads=1)
        timed_once: list[tuple[int, ...]] = []

        def spy(*args, **kwargs):
            timed_once.append(tuple(kwargs.get("once", ())))
            return costs.calibrate(*args, **kwargs)

        loads = [load_calibrated_by(spy, tiny_pair, options, store) for _ in range(4)]
        for s in loads:
            s.close()
        assert timed_once == [(LONGEST_VERIFY,)] * 3 + [()]
        key = model_key(tiny_pair[0], loads[0].machine, 1, loads[0].offload.target_layers)
        assert len(store.get(key).verify_history[LONGEST_VERIFY]) == 3
        last = loads[-1].costs.verify  # seeded with them, not timed
        assert LONGEST_VERIFY in last.sizes and LONGEST_VERIFY not in last.points(own=True)
        assert last.T(LONGEST_VERIFY) == pytest.approx(store.get(key).verify[LONGEST_VERIFY], rel=0.01)

    def test_a_load_beside_a_burst_of_load_starts_from_the_draft_pass_measured_before(self, tiny_pair, tmp_path):
        store = ProfileStore(tmp_path / "profiles.json")
        options = LoadOptions(n_ctx=512, threads=1)
        quiet = Session.load(PairSpec(tiny_pair[0], tiny_pair[1]), options, profiles=store)
        quiet.close()
        draft_key = model_key(tiny_pair[1], quiet.machine, 1, quiet.offload.draft_layers)
        from localspec.core import calibration as costs

        def busy_calibrate(*args, **kwargs):  # every draft pass timed 30x slower at this load
            curve, draft = costs.calibrate(*args, **kwargs)
            slow = costs.DraftCost()
            for _ in range(3):
                slow.observe(1, 30 * draft.seconds)
            return curve, slow

        for _ in range(3):  # three more quiet loads: the history holds four, more than a load's own three
            Session.load(PairSpec(tiny_pair[0], tiny_pair[1]), options, profiles=store).close()
        # what the quiet loads measured (the profile's median of four): one load's own pass of
        # ~0.1 ms on the tiny draft varied 3x under a clean-clone CI run's load
        usual = store.get(draft_key).draft_pass
        busy = load_calibrated_by(busy_calibrate, tiny_pair, options, store)
        try:
            assert busy.costs.t_draft < 3 * usual  # outvoted by the loads before it
            assert busy.costs.draft.own_seconds > 10 * usual  # and its own measurement is what it saves
        finally:
            busy.close()
        assert store.get(draft_key).draft_pass < 3 * usual  # the profile's median: one busy load of five

    def test_a_load_beside_a_burst_of_load_starts_from_the_verify_curve_measured_before(self, tiny_pair, tmp_path):
        store = ProfileStore(tmp_path / "profiles.json")
        options = LoadOptions(n_ctx=512, threads=1)
        for _ in range(4):  # four quiet loads: the history holds four, more than a load's own three
            quiet = Session.load(PairSpec(tiny_pair[0], tiny_pair[1]), options, profiles=store)
            quiet.close()
        key = model_key(tiny_pair[0], quiet.machine, 1, quiet.offload.target_layers)
        usual = store.get(key).verify  # the profile's median of four, steadier than one load's own
        from localspec.core import calibration as costs

        def busy_calibrate(*args, **kwargs):  # every verify timed 30x slower at this load
            curve, draft = costs.calibrate(*args, **kwargs)
            slow = costs.VerifyCurve()
            for n, t in curve.points().items():
                for _ in range(3):
                    slow.add(n, 30 * t)
            return slow, draft

        busy = load_calibrated_by(busy_calibrate, tiny_pair, options, store)
        try:
            for n, t in busy.costs.verify.points().items():  # outvoted by the loads before it
                assert t < 3 * max(usual.values()), n
            own = busy.costs.verify.points(own=True)
            assert own and all(own[n] > 10 * usual[n] for n in own)  # and its own curve is what it saves
        finally:
            busy.close()
        assert max(store.get(key).verify_history[1]) > 10 * usual[1]  # the busy load's entry, its own
        assert store.get(key).verify[1] < 3 * usual[1]  # the profile's median: one busy load of five

    def test_the_target_alone_waits_on_no_timing_before_its_first_token(self, tiny_pair, monkeypatch):
        """The costs decide nothing for the target alone: its replies probe nothing (2 T(1) before
        the first token, 0.34 s of an F16 short prompt's 1.21 s here); the first drafting reply
        probes as the first reply of a session does."""
        import localspec.chat.session as session_module

        rechecks: list[bool] = []
        monkeypatch.setattr(session_module, "recheck", lambda *a, **k: rechecks.append(k.get("probe", False)))
        s = Session.load(PairSpec(tiny_pair[0], tiny_pair[1]), LoadOptions(n_ctx=512, threads=1), profiles=None)
        try:
            hello = [{"role": "user", "content": "hello"}]
            for _ in range(2):
                list(s.chat(hello, max_tokens=4, mode="none"))
            assert rechecks == []
            list(s.chat(hello, max_tokens=4))  # the pair's draft mode
            assert rechecks == [True]
        finally:
            s.close()

    def test_the_first_reply_after_a_load_beside_a_burst_times_the_costs_again(self, tiny_pair, tmp_path, monkeypatch):
        import localspec.chat.session as session_module

        rechecks: list[bool] = []
        real = session_module.recheck
        monkeypatch.setattr(session_module, "recheck", lambda *a, **k: rechecks.append(real(*a, **k)))
        store = ProfileStore(tmp_path / "profiles.json")
        options = LoadOptions(n_ctx=512, threads=1)
        quiet = Session.load(PairSpec(tiny_pair[0], tiny_pair[1]), options, profiles=None)
        usual = quiet.costs.T(1)
        quiet.close()
        from localspec.core import calibration as costs

        def busy_calibrate(*args, **kwargs):  # every size timed alike, 30x a quiet T(1): a flat curve
            curve, draft = costs.calibrate(*args, **kwargs)
            return costs.VerifyCurve({n: 30 * usual for n in curve.sizes}), draft

        busy = load_calibrated_by(busy_calibrate, tiny_pair, options, store)
        try:
            assert busy.costs.T(1) > 10 * usual
            list(busy.chat([{"role": "user", "content": "hello"}], max_tokens=12))
            # the first reply's probe found the burst gone, and the sizes were timed again (not
            # only scaled by the level, which keeps the burst's flat shape)
            assert rechecks == [True] and busy.costs.T(1) < 5 * usual and abs(busy.costs.verify.level) < 1
            key = busy.profile_keys.target
        finally:
            busy.close()
        assert store.get(key).verify_history[1][-1] < 5 * usual  # the load's entry is amended

    def test_automatic_threads_are_keyed_by_the_count_they_run_with(self, tiny_pair, tmp_path):
        # `localspec run` gives the thread count, the app leaves it automatic: on one machine
        # both run on every usable CPU, so they share one profile (one history, one prior)
        store = ProfileStore(tmp_path / "profiles.json")
        auto = Session.load(PairSpec(tiny_pair[0], tiny_pair[1]), LoadOptions(n_ctx=512), profiles=store)
        auto.close()
        counted = Session.load(
            PairSpec(tiny_pair[0], tiny_pair[1]), LoadOptions(n_ctx=512, threads=usable_cpus()), profiles=store
        )
        counted.close()
        key = model_key(tiny_pair[0], auto.machine, usable_cpus(), auto.offload.target_layers)
        assert auto.profile_keys.target == counted.profile_keys.target == key
        assert len(store.get(key).verify_history[1]) == 2  # both loads, one history
        assert not any("|tNone|" in k for k in store.load())

    def test_an_older_versions_automatic_profile_is_adopted(self, tiny_pair, tmp_path):
        # an older version kept the app's loads under `tNone`: the next load takes them over
        store = ProfileStore(tmp_path / "profiles.json")
        s = Session.load(PairSpec(tiny_pair[0], tiny_pair[1]), LoadOptions(n_ctx=512), profiles=store)
        s.close()
        machine, layers = s.machine, s.offload.target_layers
        old = model_key(tiny_pair[0], machine, None, layers)
        new = model_key(tiny_pair[0], machine, usable_cpus(), layers)
        how = str(tiny_pair[1].resolve())
        profiles = store.load()
        profiles[new].use = {how: Use(400, 20.0, 380, 300, 40)}  # what the app counted before
        raw = {(old if k == new else k): asdict(v) for k, v in profiles.items()}
        (tmp_path / "profiles.json").write_text(json.dumps(raw))
        again = Session.load(PairSpec(tiny_pair[0], tiny_pair[1]), LoadOptions(n_ctx=512), profiles=store)
        try:
            assert store.get(old) is None and store.get(new).use[how].rejected == 40
            assert again.drafting("draft").controller.alpha == pytest.approx(prior_from(300, 40))  # starts from it
        finally:
            again.close()

    def test_no_store_no_file(self, tiny_pair, tmp_path):
        s = Session.load(PairSpec(tiny_pair[0]), LoadOptions(n_ctx=512, threads=1))
        s.close()
        assert not list(tmp_path.rglob("profiles.json"))


class TestRecommendation:
    def test_honest_about_absolute_speed(self):
        machine = "m1"
        q4 = Profile("/m/q4.gguf", "2026-12-01", verify={1: 0.07, 2: 0.10, 4: 0.12})
        f16 = Profile(
            "/m/f16.gguf", "2026-12-01", verify={1: 0.16, 2: 0.165}, use={"/m/d.gguf": Use(200, 20.0, 150, 140)}
        )
        other = Profile("/m/x.gguf", "2026-12-01", verify={1: 0.01})  # another machine's
        profiles = {
            f"/m/q4.gguf|1|2|{machine}|tNone|g0": q4,
            f"/m/f16.gguf|1|2|{machine}|tNone|g0": f16,
            "/m/x.gguf|1|2|m2|tNone|g0": other,
        }
        options = options_here(profiles, machine)
        assert {(o.target, o.how) for o in options} == {
            ("/m/q4.gguf", "none"),
            ("/m/f16.gguf", "none"),
            ("/m/f16.gguf", "/m/d.gguf"),
        }
        text = recommend(options)
        assert text.startswith("fastest here: q4.gguf alone (14.3 tok/s expected)")
        assert "f16.gguf with the draft d.gguf speculates at 1.60× but is still slower (10.0 tok/s)" in text

    def test_nothing_measured_nothing_said(self):
        assert recommend([]) is None
