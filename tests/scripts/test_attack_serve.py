"""scripts/attack_serve.py: the adversarial pass against a real `localspec serve` on tiny GGUFs.

The cases that wait on the server's 10 s header deadline (``slowloris``), time a start of
`localspec` per bad port (``ports``) or start it once per catalog name (``names``) are left to
the script's own runs: tests/serve/test_hardening.py and tests/cli cover what they check."""

import pytest

from tests.support.scripts import load_script

attack_serve = load_script("attack_serve")


def passed(out: str) -> list[str]:
    return [line.split(" ", 1)[1].strip() for line in out.splitlines() if line.startswith("PASS ")]


def test_the_cases_on_one_server_then_sigterm(capsys):
    assert attack_serve.main(["--only", "origin,literal,mid-body,bad-bodies,sigterm"]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and out.rstrip().endswith("23 of 23 passed")
    names = passed(out)
    assert "rebinding Host evil.com" in names and "preflight from evil" in names
    assert any(n.startswith("special text is literal") for n in names)
    assert names[-3] == "SIGTERM exits 0 rc=0" and names[-1] == "profile saved"
    assert names[-2].startswith("no ERROR/Traceback in the log")


def test_a_case_that_fails_is_a_fail_and_exit_1(monkeypatch, capsys):
    monkeypatch.setattr(attack_serve, "status", lambda reply: " 500 ")  # every answer a server error
    assert attack_serve.main(["--only", "origin"]) == 1
    out = capsys.readouterr().out
    assert "FAIL rebinding Host evil.com" in out and "FAIL plain client passes" in out
    assert out.rstrip().endswith("0 of 12 passed")


def test_an_unknown_case_names_the_cases(capsys):
    with pytest.raises(SystemExit) as exit:
        attack_serve.main(["--only", "origin,nope"])
    assert exit.value.code == 2
    assert "no case nope: the cases are origin, literal, mid-body, slowloris" in capsys.readouterr().err
