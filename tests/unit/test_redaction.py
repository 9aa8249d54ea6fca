"""What an item's error keeps of the environment's secrets (``providers/errors.py``): the working directory is no
secret; a URL's password is cut whole, at the authority's last ``@``."""

from __future__ import annotations

import pytest

from ragscore_workers.providers.errors import exception_text, redact_url_passwords


def test_the_working_directory_is_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """PWD matched the credential names (``(?:^|_)PWD$`` is meant for ``DB_PWD``): since a763ffe a 4-7 character
    working directory (``/tmp``, ``/app``, ``/work``) is taken out of every path in an item's error; a longer one
    (``/home/alice/proj``) was already."""
    for cwd in ("/tmp", "/app", "/home/alice/proj"):
        monkeypatch.setenv("PWD", cwd)
        monkeypatch.setenv("OLDPWD", cwd)
        said = exception_text(FileNotFoundError(f"{cwd}/rows.jsonl not found"))
        assert said == f"FileNotFoundError: {cwd}/rows.jsonl not found", said


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("redis://:p@ss1@host:6379/0 down", "redis://:***@host:6379/0 down"),
        ("connect postgres://u:ab@cd@db/x failed", "connect postgres://u:***@db/x failed"),
        ("see https://github.com/org/repo/blob/x@y", "see https://github.com/org/repo/blob/x@y"),
        ("redis://u:pw@host/0 and mail a@b", "redis://u:***@host/0 and mail a@b"),
    ],
)
def test_a_url_password_holding_an_at_sign_is_redacted_whole(text: str, redacted: str) -> None:
    """A URL's password is cut at the last '@' of the authority (as urlsplit reads it), not the first: 'p@ss1' left
    'ss1' in the text, even with the URL in the environment."""
    assert redact_url_passwords(text) == redacted


def test_a_url_password_holding_an_at_sign_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://u:p@ss1@db/x")
    said = exception_text(ValueError("could not connect postgres://u:p@ss1@db/x"))
    assert "ss1" not in said, said
