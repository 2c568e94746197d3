"""`clean --container X` says what it keeps because X may not alone have left it.

On the bundled `docker-vllm-leak` host the doctor names three files "possibly" left by
`vllm-rmf` (removed with `docker rm -f`; the events do not say whether it used the host's
/dev/shm). `clean --container vllm-rmf` rightly plans none of them; it used to say nothing
at all about why, after the doctor had shown them under that very scope.
"""

from __future__ import annotations

import pytest

from accelhost.cli.main import main

EXAMPLE = "example:docker-vllm-leak"


def test_scope_with_only_possible_leftovers_says_it_kept_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["clean", "--snapshot", EXAMPLE, "--container", "vllm-rmf"]) == 0
    out, err = capsys.readouterr()
    assert ": 0 action(s)" in out
    assert err.splitlines() == [
        "accelhost clean: kept 3 leftover(s) that vllm-rmf may have left, but not for sure "
        "alone (left by: possibly, or another container too); without --container, "
        "`accelhost clean` judges them for the whole host"
    ]


@pytest.mark.parametrize("name", ["vllm-bash", "vllm-pod"])
def test_scope_whose_leftovers_are_all_its_own_keeps_quiet(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["clean", "--snapshot", EXAMPLE, "--container", name]) == 0
    out, err = capsys.readouterr()
    assert ": 3 action(s)" in out and err == ""
