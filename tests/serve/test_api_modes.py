"""The API's drafting types against what the server drafts with: a draft model, the target's own
MTP layers, or neither (``serve.api.parse_job``)."""

from __future__ import annotations

import pytest

from localspec.serve.api import ApiError, Served, parse_job

BODY = {"messages": [{"role": "user", "content": "hi"}]}


def job(served: Served, type_: str | None):
    body = {**BODY, "speculative": {"type": type_}} if type_ else BODY
    return parse_job("chat", body, served)


MTP = Served("q35", frozenset(), "mtp", True, 512)
DRAFT = Served("qwen", frozenset(), "draft", True, 512)
ALONE = Served("qwen", frozenset(), "none", False, 512)


class TestDraftingTypes:
    def test_an_mtp_server_drafts_with_its_mtp_layers_by_default_and_on_request(self):
        assert job(MTP, None).mode == "mtp"
        assert job(MTP, "mtp").mode == "mtp"
        assert job(MTP, "lookup").mode == "lookup"

    @pytest.mark.parametrize(
        ("served", "asked", "words"),
        [
            (MTP, "draft", "'draft' needs a draft model; this server has none (use 'mtp', 'lookup' or 'none')"),
            (
                DRAFT,
                "mtp",
                "'mtp' needs a target with MTP layers; this server has none (use 'draft', 'lookup' or 'none')",
            ),
            (ALONE, "mtp", "'mtp' needs a target with MTP layers; this server has none (use 'lookup' or 'none')"),
            (ALONE, "draft", "'draft' needs a draft model; this server has none (use 'lookup' or 'none')"),
        ],
    )
    def test_a_type_the_server_cannot_draft_with_is_refused_with_what_it_can(self, served, asked, words):
        with pytest.raises(ApiError) as e:
            job(served, asked)
        assert e.value.status == 400 and e.value.param == "speculative.type"
        assert words in e.value.message


NEVER = Served("qwen", frozenset(), "none", False, 512, draft_max=0)  # loaded with --draft-max 0


class TestLongestDraftZero:
    """A longest draft of 0, the server's (--draft-max 0) or the request's (speculative.n_max),
    drafts nothing: the target alone, never a mode built to draft at most 0 tokens."""

    @pytest.mark.parametrize("asked", [None, "lookup", "none", "draft"])
    def test_a_server_loaded_never_to_draft_runs_the_target_alone(self, asked):
        assert job(NEVER, asked).mode == "none"

    def test_a_request_that_names_its_own_longest_draft_drafts_up_to_it(self):
        asked = parse_job("chat", {**BODY, "speculative": {"type": "lookup", "n_max": 2}}, NEVER)
        assert (asked.mode, asked.draft_max) == ("lookup", 2)

    @pytest.mark.parametrize("served", [DRAFT, MTP, ALONE])
    def test_a_request_of_n_max_0_runs_the_target_alone_on_any_server(self, served):
        assert parse_job("chat", {**BODY, "speculative": {"type": "lookup", "n_max": 0}}, served).mode == "none"
