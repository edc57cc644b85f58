"""The one redaction of URLs and programs' output (``autoclusters.redact``)."""

from __future__ import annotations

import pytest

from autoclusters.redact import redact, redact_url


@pytest.mark.parametrize(("url", "shown"), [
    ("https://user:pass@hooks.example/predrain", "https://***@hooks.example/predrain"),
    ("https://user@hooks.example:8443/p", "https://***@hooks.example:8443/p"),
    ("http://[::1]:8080/p?x=1", "http://[::1]:8080/p?x=***"),
    ("https://h.example/p?token=abc&sig=def&flag", "https://h.example/p?token=***&sig=***&flag=***"),
    ("https://blob.example/c/o?sv=2024&se=2026&sig=abc%2Bdef", "https://blob.example/c/o?sv=***&se=***&sig=***"),
    ("https://h.example/p#access_token=abc", "https://h.example/p#***"),
    ("https://h.example/plain/path", "https://h.example/plain/path"),
    ("http://h:notaport/", "***"),
])
def test_a_url_loses_its_user_information_query_values_and_fragment(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert redact(f"POST {url} failed") == f"POST {shown} failed"  # also inside a text


@pytest.mark.parametrize(("text", "shown"), [
    ("login failed: password=hunter2 for admin", "login failed: password=*** for admin"),
    ('{"api_key": "k-123", "user": "a"}', '{"api_key": ***, "user": "a"}'),
    ("TOKEN: abc123; retrying", "TOKEN: ***; retrying"),
    ("client_secret=s3cr3t&grant=x", "client_secret=***&grant=x"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.x", "Authorization: Bearer ***"),
    ("curl -H 'Authorization: Basic dXNlcjpwYXNz'", "curl -H 'Authorization: Basic ***'"),
    ("basic authentication is off; the token expired", "basic authentication is off; the token expired"),
    ("no such file: /opt/hook.sh", "no such file: /opt/hook.sh"),
])
def test_credential_like_values_outside_urls_are_masked_and_words_are_not(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_a_cut_keeps_the_end_and_says_so() -> None:
    text = "x" * 500 + " the reason token=abc"
    cut = redact(text, 40)
    assert cut.endswith(" the reason token=***") and "abc" not in cut
    note = "[cut to the last 40 characters] "
    assert cut.startswith(note) and len(cut) == len(note) + 40
    assert redact("short", 40) == "short"
