"""The suffix index: matches over past replies and the context, walks, the corpus itself."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localspec.core.costs import CostModel
from localspec.core.options import MAX_DRAFT
from localspec.core.policy import DEFAULT as P
from localspec.core.rules import LookupGate
from localspec.core.sampling import SamplingParams
from localspec.core.suffix import (
    SEP,
    Corpus,
    SuffixDrafter,
    bucket,
    build,
    continuations,
    match_corpus,
    prompt_hash,
    walk,
    with_reply,
)

GREEDY = SamplingParams(temperature=0.0)
replies = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), max_size=6)


def brute_longest(reps, tail, depth):
    """The longest suffix of ``tail`` (≤ depth) inside one reply, and where its occurrences end."""
    best, ends = 0, []
    flat = [int(SEP)]
    for r in reps:
        flat += list(r) + [int(SEP)]
    for n in range(1, min(depth, len(tail)) + 1):
        pat = list(tail[-n:])
        hits = [e for e in range(n - 1, len(flat)) if flat[e - n + 1 : e + 1] == pat]
        if hits:
            best, ends = n, hits
    return best, ends


class TestMatchCorpus:
    @settings(max_examples=300, deadline=None)
    @given(replies, st.lists(st.integers(0, 3), min_size=1, max_size=10), st.integers(1, 8))
    def test_finds_the_longest_suffix_match_and_all_its_occurrences(self, reps, tail, depth):
        m = match_corpus(build(reps), np.array(tail), depth, 1000)
        length, ends = brute_longest(reps, tail, depth)
        assert m.length == length
        assert list(m.ends) == ends

    def test_no_match_runs_across_two_replies(self):
        c = build([[1, 2], [3, 4]])
        assert match_corpus(c, np.array([2, 3]), 8, 10).length == 1  # "3" alone, not "2 3"

    def test_an_empty_history_matches_nothing(self):
        assert match_corpus(build([]), np.array([1, 2]), 8, 10).length == 0


class TestWalk:
    def test_follows_the_majority_and_multiplies_the_shares(self):
        follow = np.array([[5, 6, 7], [5, 6, 8], [5, 9, -1], [4, -1, -1]])
        ids, probs = walk(follow, 3, 0.1)
        assert ids == (5, 6, 8)  # 5: 3 of 4; 6: 2 of 3; then one each, the latest (8) wins the tie
        assert probs == pytest.approx([0.75, 0.5, 0.25])

    def test_stops_below_the_least_probability(self):
        follow = np.array([[1, 2], [1, 3], [1, 4], [1, 5]])
        assert walk(follow, 2, 0.3) == ((1,), (1.0,))  # 1 for sure, then a quarter each

    def test_an_occurrence_that_ends_counts_against_the_path(self):
        follow = np.array([[7, -1], [7, 2]])
        ids, probs = walk(follow, 2, 0.1)
        assert ids == (7, 2) and probs == pytest.approx([1.0, 0.5])

    def test_continuations_stop_at_a_separator_and_at_the_end(self):
        tokens = np.array([SEP, 1, 2, SEP, 3, 4, SEP], dtype=np.uint32)
        out = continuations(tokens, np.array([1, 4]), 4, len(tokens))
        assert out.tolist() == [[2, -1, -1, -1], [4, -1, -1, -1]]


class TestCorpus:
    def test_with_reply_drops_the_least_recently_used_to_fit(self):
        c = build([[1, 1, 1], [2, 2, 2]], used=[5.0, 1.0], prompts=[11, 22])
        c = with_reply(c, [3, 3, 3], now=9.0, cap_tokens=6)
        assert [r.tolist() for r in c.replies()] == [[1, 1, 1], [3, 3, 3]]  # [2,2,2] was used longest ago
        assert c.n_replies == 2 and c.n_tokens == 6 and c.used.tolist() == [5.0, 9.0]
        assert c.prompts.tolist() == [11, 0] and c.reproduced == {11}  # each reply keeps its mark; a new one has none
        c.check()

    def test_a_prompts_hash_is_the_same_in_every_process_and_never_zero(self):
        assert prompt_hash([1, 2, 3]) == prompt_hash(np.array([1, 2, 3])) != prompt_hash([1, 2, 4])
        assert prompt_hash([1, 2, 3]) == 0x9E3D6A5F74569CD6  # blake2b-64 of the uint32 bytes, little-endian
        assert prompt_hash([]) != 0

    @pytest.mark.parametrize(
        "damage",
        [
            lambda c: Corpus(c.tokens[:-1], c.starts, c.used, c.rsa[:-1]),  # no closing separator
            lambda c: Corpus(c.tokens, c.starts, c.used[:1], c.rsa),  # a use time missing
            lambda c: Corpus(c.tokens, c.starts, c.used, c.rsa + 100),  # suffixes past the end
            lambda c: Corpus(c.tokens.astype(np.int64), c.starts, c.used, c.rsa),  # foreign dtype
            lambda c: Corpus(c.tokens, c.starts, c.used, c.rsa, c.prompts[:1]),  # a prompt missing
            lambda c: Corpus(c.tokens, c.starts, c.used, c.rsa, c.prompts, c.asked[:1]),  # a prompt asked missing
        ],
    )
    def test_check_refuses_a_damaged_corpus(self, damage):
        c = build([[1, 2], [3]], used=[0.0, 1.0])
        c.check()
        with pytest.raises(ValueError, match="not a history"):
            damage(c).check()


class TestSuffixDrafter:
    def test_a_longer_match_in_the_history_wins_over_the_context(self):
        history = build([[9, 1, 2, 3, 4, 5, 6]])
        d = SuffixDrafter(lambda: (history,))
        ctx = [1, 2, 7, 8, 1, 2, 3]  # the context has "1 2" (then 7 8), the history "1 2 3" (then 4 5 6)
        draft = d.draft(ctx, 3, GREEDY, None)
        assert draft.ids == (4, 5, 6) and draft.source == "history" and draft.match == ("history", 3)

    def test_at_equal_length_the_context_wins(self):
        history = build([[1, 2, 5, 5]])
        draft = SuffixDrafter(lambda: (history,)).draft([1, 2, 7, 1, 2], 3, GREEDY, None)
        assert draft.ids == (7, 1, 2) and draft.source == "context"

    def test_a_full_depth_history_match_runs_to_what_a_verify_takes(self):
        """A regenerated reply: the whole earlier reply follows a match as long as a match gets
        (suffix_depth, 24), and a copy runs as far as one verify takes (MAX_DRAFT)."""
        reply = list(range(100, 200))
        d = SuffixDrafter(lambda: (build([reply]),))
        draft = d.draft(reply[:30], 64, GREEDY, None)
        assert draft.match == ("history", 4)  # the 24-token match, bucketed
        assert draft.ids == tuple(reply[30 : 30 + MAX_DRAFT]) and P.suffix_depth < MAX_DRAFT

    def test_a_shorter_history_match_drafts_no_further_than_it_is_long(self):
        """Another conversation's 5 tokens are evidence for 5 more, whatever trust the history's
        matches earned; the context's own 5-token match runs on (an edit copies on)."""
        reply = list(range(100, 160))
        d = SuffixDrafter(lambda: (build([reply]),))
        assert d.draft(reply[:5], 64, GREEDY, None).ids == tuple(reply[5:10])
        draft = SuffixDrafter().draft([*reply, 1, *reply[:5]], 64, GREEDY, None)
        assert draft.source == "context" and draft.ids == tuple(reply[5 : 5 + MAX_DRAFT])

    def test_a_context_copy_goes_only_as_far_as_its_kind_earned_a_history_one_as_its_rate_says(self):
        """On a compute-bound curve (a row costs 0.5 T(1)) both kinds are trusted from many kept
        3-token copies; the context's copy is held to the doubling of that (LookupGate.reach),
        another conversation's full-depth match is not: its length is evidence of its own."""
        steep = CostModel({n: 1.0 + 0.5 * (n - 1) for n in (1, 2, 4, 8, 16, 33)})
        gate = LookupGate(steep)
        for _ in range(30):
            gate.observe(("context", 4), 3, 3)
            gate.observe(("history", 4), 3, 3)
        reply = list(range(100, 160))
        context = SuffixDrafter(gate=gate).draft([*reply, 1, *reply[:30]], 64, GREEDY, None)
        history = SuffixDrafter(lambda: (build([reply]),), gate).draft(reply[:30], 64, GREEDY, None)
        assert context.match == ("context", 4) and len(context.ids) == gate.reach(("context", 4), MAX_DRAFT) == 8
        assert history.match == ("history", 4) and len(history.ids) == 20  # the rate's best at alpha 0.997

    def test_buckets_group_match_lengths(self):
        assert [bucket(n) for n in (1, 2, 3, 4, 7, 8, 24)] == [1, 2, 3, 4, 4, 4, 4]


class TestAnotherPrompt:
    """A history match that reaches into the reply's prompt (its first steps) is of what followed
    the end of that prompt. Where the replies there answered this very prompt (``Corpus.asked``),
    the walk follows them alone; where every one answered another prompt that only ends the same,
    the match is a kind of its own, whose trust the gate keeps apart."""

    COSTS = CostModel({n: 0.7 + 0.3 * n for n in (1, 2, 4, 8, 16, 33)})  # a row costs 0.3 of T(1)
    END, REPLY, OTHER = list(range(1000, 1030)), list(range(100, 160)), list(range(300, 360))

    def drafter(self, prompt, *answers, gate=None, known=True):
        """A drafter of a reply to ``prompt`` over a history of ``answers``, (prompt, reply), each
        with its prompt's hash kept as asked (``known``; else none, as an older file's)."""
        asked = [prompt_hash(p) if known else 0 for p, _ in answers]
        history = build([[*p[-P.suffix_depth :], *r] for p, r in answers], asked=asked)
        return SuffixDrafter(lambda: (history,), gate, prompt_len=len(prompt))

    def trusting_gate(self) -> LookupGate:
        gate = LookupGate(self.COSTS)
        gate.counts[("history", 4)] = [200.0, 1.0]  # regenerates earned the long matches' trust
        return gate

    def test_the_answer_to_a_prompt_that_only_ends_the_same_earns_trust_apart(self):
        asked, mine = [1, *self.END], [2, *self.END]  # two questions about one text, which both end
        draft = self.drafter(mine, (asked, self.OTHER), gate=self.trusting_gate()).draft(mine, 64, GREEDY, None)
        assert draft.match == ("history", "another prompt") and draft.source == "history"
        assert draft.alpha == 0.5 and len(draft.ids) == 1  # Laplace's trust, not the regenerates'
        unknown = self.drafter(mine, (asked, self.OTHER), gate=self.trusting_gate(), known=False).draft(
            mine, 64, GREEDY, None
        )
        assert unknown.match == ("history", 4) and len(unknown.ids) > 1  # an older file's reply: as before
        later = [*mine, *self.OTHER[: P.suffix_depth]]  # the match lies in this reply now
        draft = self.drafter(mine, (asked, self.OTHER), gate=self.trusting_gate()).draft(later, 64, GREEDY, None)
        assert draft.match == ("history", 4) and len(draft.ids) > 1

    def test_a_regenerate_follows_its_own_answer_not_those_of_prompts_that_end_the_same(self):
        mine = [2, *self.END]
        answers = [(mine, self.REPLY), ([1, *self.END], self.OTHER), ([3, *self.END], self.OTHER)]
        draft = self.drafter(mine, *answers).draft(mine, 64, GREEDY, None)  # no gate: the whole walk
        assert draft.match == ("history", 4) and draft.ids == tuple(self.REPLY[:MAX_DRAFT])


class TestAnsweredBefore:
    """A greedy reply to a prompt answered before in this process (the gate's ``prompts``), or
    whose answer this machine gave twice (the history's ``prompts``), is that answer again: its
    full-depth history copies are priced as sure (the whole walk), as far as every occurrence
    agrees, until one fails."""

    COSTS = CostModel({n: 0.7 + 0.3 * n for n in (1, 2, 4, 8, 16, 33)})  # a row costs 0.3 of T(1)
    PROMPT, REPLY = list(range(1000, 1040)), list(range(100, 200))

    def drafter(self, *answers, gate=None, prompt_len=0):
        """A fresh drafter (a new process's, unless it shares a ``gate``) over a history of
        ``answers``: (prompt, reply, the prompt's hash where that answer was given twice, else 0)."""
        history = build([[*p[-P.suffix_depth :], *r] for p, r, _ in answers], prompts=[h for _, _, h in answers])
        return SuffixDrafter(lambda: (history,), gate or LookupGate(self.COSTS), prompt_len=prompt_len)

    def test_a_reproduced_answer_is_copied_whole_from_the_first_step_in_a_new_process(self):
        reproduced = (self.PROMPT, self.REPLY, prompt_hash(self.PROMPT))
        again = self.drafter(reproduced).draft(list(self.PROMPT), 64, GREEDY, None)
        assert again.ids == tuple(self.REPLY[:MAX_DRAFT]) and again.alpha == 1.0
        once = (self.PROMPT, self.REPLY, 0)  # given once: a batched verify may part from it at a near-tie
        first = self.drafter(once).draft(list(self.PROMPT), 64, GREEDY, None)
        assert len(first.ids) == 1 and first.alpha == 0.5  # Laplace's trust: one token pays

    def test_a_prompt_answered_in_this_process_is_copied_whole_the_next_time(self):
        gate, once = LookupGate(self.COSTS), (self.PROMPT, self.REPLY, 0)
        assert self.drafter(once, gate=gate).draft(list(self.PROMPT), 64, GREEDY, None).alpha == 0.5
        again = self.drafter(once, gate=gate).draft(list(self.PROMPT), 64, GREEDY, None)
        assert again.ids == tuple(self.REPLY[:MAX_DRAFT]) and again.alpha == 1.0

    def test_a_sampled_reply_and_another_prompt_are_the_gates(self):
        reproduced = (self.PROMPT, self.REPLY, prompt_hash(self.PROMPT))
        sampled = SamplingParams(temperature=0.8)
        assert self.drafter(reproduced).draft(list(self.PROMPT), 64, sampled, None).alpha == 0.5
        other = [7, *self.PROMPT]  # ends the same, another prompt
        assert self.drafter(reproduced).draft(other, 64, GREEDY, None).alpha == 0.5

    def test_the_prompt_is_the_replys_even_when_the_first_draft_comes_later(self):
        reproduced = (self.PROMPT, self.REPLY, prompt_hash(self.PROMPT))
        late = [*self.PROMPT, *self.REPLY[:3]]  # the step that first asks has three reply tokens
        draft = self.drafter(reproduced, prompt_len=len(self.PROMPT)).draft(late, 64, GREEDY, None)
        assert draft.ids == tuple(self.REPLY[3 : 3 + MAX_DRAFT]) and draft.alpha == 1.0

    def test_the_earlier_answer_wins_a_tie_with_the_context(self):
        x, a, b = list(range(500, 524)), [7, 7, 7, 7], list(range(600, 640))  # the prompt quotes x a; the answer x b
        prompt = [*x, *a, *self.PROMPT]
        d = self.drafter((prompt, [*x, *b], prompt_hash(prompt)), prompt_len=len(prompt))
        draft = d.draft([*prompt, *x], 64, GREEDY, None)  # x again: the context and the history match in full
        assert draft.source == "history" and draft.ids == tuple(b[:MAX_DRAFT]) and draft.alpha == 1.0

    def test_a_copy_that_fails_hands_the_reply_back_to_the_gate(self):
        gate = LookupGate(self.COSTS)
        d = self.drafter((self.PROMPT, self.REPLY, prompt_hash(self.PROMPT)), gate=gate)
        context = list(self.PROMPT)
        copy = d.draft(context, 64, GREEDY, None)
        d.observe(copy, (len(copy.ids), 3), (*copy.ids[:3], 5))  # the target parts at the 4th token
        context += [*copy.ids[:3], 5, *self.REPLY[4:40]]  # ... and later writes the earlier answer again
        assert d.draft(context, 64, GREEDY, None).alpha == gate.alpha(("history", 4)) < 1.0

    def test_a_sure_copys_verdicts_are_its_own_not_the_trust_of_other_history_matches(self):
        """A regenerate's copies all kept say nothing of a 4-token match into another reply."""
        gate = LookupGate(self.COSTS)
        d = self.drafter((self.PROMPT, self.REPLY, prompt_hash(self.PROMPT)), gate=gate)
        copy = d.draft(list(self.PROMPT), 64, GREEDY, None)
        assert copy.alpha == 1.0 and copy.match == ("history", "regenerate")
        d.observe(copy, (len(copy.ids), len(copy.ids)), (*copy.ids, 7))
        assert gate.alpha(("history", 4)) == 0.5  # Laplace's, untouched

    def test_occurrences_that_disagree_are_sure_only_as_far_as_they_agree(self):
        h = prompt_hash(self.PROMPT)
        two = (self.PROMPT, range(100, 140), h), (self.PROMPT, [*range(100, 110), *range(300, 330)], h)
        assert self.drafter(*two).draft(list(self.PROMPT), 64, GREEDY, None).ids == tuple(range(100, 110))
