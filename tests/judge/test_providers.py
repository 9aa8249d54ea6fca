"""Providers against the fake server over real HTTP: replies, usage, headers, and every upstream error
translated into our error tree with the right retry decision."""

from __future__ import annotations

import re
import time

import pytest

from ragscore_workers.errors import ConfigError
from ragscore_workers.providers import CompletionParams, MalformedReplyError, MissingKeyError, ProviderError
from ragscore_workers.providers.base import Provider, RetryDecision
from ragscore_workers.providers.errors import redact
from ragscore_workers.providers.groq_sdk import GroqProvider
from ragscore_workers.providers.headers import RateLimitInfo, parse_duration, parse_retry_after, rate_limit_wait
from ragscore_workers.providers.openai_compat import OpenAICompatProvider, error_details

from ..fakes import FakeProvider, count_tokens
from ..support import closed_port
from .conftest import SECRET

PARAMS = CompletionParams(temperature=0.0, max_tokens=64)


def _provider(kind: str, fake: FakeProvider, **kw: object) -> Provider:
    if kind == "groq":
        return GroqProvider(model="m", base_url=fake.url, timeout_s=1.0, **kw)  # type: ignore[arg-type]
    return OpenAICompatProvider(model="m", base_url=fake.openai_base_url, timeout_s=1.0, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["groq", "openai"])
def test_completion_text_usage_and_rate_limit_headers(kind: str, keys: str) -> None:
    with FakeProvider(rpm=50, tpm=5000, api_key=keys) as fake:
        provider = _provider(kind, fake)
        prompt = "Rate this. [[rating=2]]"
        completion = provider.complete([{"role": "user", "content": prompt}], PARAMS)
    assert completion.text == "2"
    assert completion.tokens_in == count_tokens(prompt) + 4 and completion.tokens_out == 1
    info = RateLimitInfo.from_headers(completion.headers)
    assert info.remaining_requests == 49 and info.remaining_tokens == 5000 - completion.tokens_in - 1
    assert info.limit_tokens == 5000 and info.reset_requests_s is not None


# (fault, error class, retry decision kind)
ERROR_TABLE = [
    ("500", ProviderError, "transient"),
    ("502", ProviderError, "transient"),
    ("503", ProviderError, "transient"),
    ("timeout", ProviderError, "transient"),
    ("disconnect", ProviderError, "transient"),
    ("malformed", MalformedReplyError, "transient"),
    ("429", ProviderError, "rate_limit"),
    ("quota", ProviderError, "no"),
    ("400", ProviderError, "no"),
]


@pytest.mark.parametrize("kind", ["groq", "openai"])
@pytest.mark.parametrize(("fault", "error", "decision"), ERROR_TABLE, ids=[row[0] for row in ERROR_TABLE])
def test_every_upstream_error_is_translated_with_a_retry_decision(
    kind: str, fault: str, error: type[Exception], decision: str, fake: FakeProvider
) -> None:
    provider = _provider(kind, fake)
    fake.fail_next(fault)
    with pytest.raises(error) as info:
        provider.complete([{"role": "user", "content": "hello"}], PARAMS)
    exc = info.value
    assert isinstance(exc, ProviderError) and exc.provider == kind
    assert isinstance(exc.__cause__, Exception)  # raised ... from the upstream error
    assert provider.should_retry(exc).kind == decision
    if fault == "429":
        assert provider.should_retry(exc).retry_after == 1.0  # the fake's retry-after header
    if fault in ("timeout", "disconnect"):
        assert exc.status is None


@pytest.mark.parametrize("kind", ["groq", "openai"])
def test_a_rejected_key_is_final_and_never_echoed(
    kind: str, fake: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "gsk-WRONG-KEY-123456789"
    monkeypatch.setenv("MY_JUDGE_KEY", wrong)
    provider = _provider(kind, fake, api_key_env="MY_JUDGE_KEY")
    with pytest.raises(ProviderError) as info:
        provider.complete([{"role": "user", "content": "hello"}], PARAMS)
    assert info.value.status == 401 and provider.should_retry(info.value).kind == "no"
    assert wrong not in str(info.value)
    assert ("***" in str(info.value)) == (kind == "openai")  # OpenAI's message echoes the key; we redact it
    assert wrong not in repr(provider) and SECRET not in repr(provider)
    assert fake.stats()["unauthorized"] == 1


def test_a_401_names_the_variable_whose_key_it_refused_or_says_that_none_was_sent(
    fake: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server on this machine needs no key unless it asks: its 401 said "Incorrect API key provided" and nothing of
    the unset OPENAI_API_KEY; a wrong key's 401 did not say which variable held it. Groq's and OpenAI's code
    invalid_api_key stops judging with the variable to check, named once and the key unshown."""
    monkeypatch.delenv("OPENAI_API_KEY")
    keyless = _provider("openai", fake)
    with pytest.raises(ProviderError) as info:
        keyless.complete([{"role": "user", "content": "hello"}], PARAMS)
    assert info.value.status == 401
    none_sent = "(no key was sent: OPENAI_API_KEY is unset, and this server asks for one)"
    assert none_sent in str(info.value)
    stopper = keyless.run_stopper(info.value)  # it said no more than "the key was refused: check OPENAI_API_KEY"
    assert stopper is not None and f"{none_sent}): check OPENAI_API_KEY" in stopper, stopper
    monkeypatch.setenv("MY_JUDGE_KEY", "gsk-WRONG-KEY-123456789")
    refused = {"groq": "Invalid API Key", "openai": "Incorrect API key provided: ***. You can find your API key at "
               "https://platform.openai.com/account/api-keys."}  # fmt: skip
    for kind in ("groq", "openai"):
        provider = _provider(kind, fake, api_key_env="MY_JUDGE_KEY")
        with pytest.raises(ProviderError) as info:
            provider.complete([{"role": "user", "content": "hi"}], PARAMS)
        assert str(info.value) == f"{kind} HTTP 401: {refused[kind]} (the key in MY_JUDGE_KEY)", kind
        stopper = provider.run_stopper(info.value)
        assert stopper == f"the {kind} judge's key was refused ({kind} HTTP 401: {refused[kind]}): check MY_JUDGE_KEY"


@pytest.mark.parametrize("kind", ["groq", "openai"])
def test_a_401_with_an_empty_body_reads_cleanly(kind: str, fake: FakeProvider) -> None:
    """A gateway's 401 with no body read "HTTP 401:  (the key in X)": a double space where the message was."""
    fake.fail_next("401_empty")
    with pytest.raises(ProviderError) as info:
        _provider(kind, fake).complete([{"role": "user", "content": "hello"}], PARAMS)
    key_env = "GROQ_API_KEY" if kind == "groq" else "OPENAI_API_KEY"
    assert info.value.status == 401
    assert str(info.value) == f"{kind} HTTP 401: no error message (the key in {key_env})", str(info.value)
    assert _provider(kind, fake).run_stopper(info.value) is None  # no invalid_api_key: it counts toward the breaker


@pytest.mark.parametrize("kind", ["groq", "openai"])
def test_an_endpoint_with_no_server_or_no_such_path_is_named_in_the_error(kind: str, fake: FakeProvider) -> None:
    """A wrong port said "Connection error." (Groq) or "Connection refused" with no URL; a base_url without /v1 said
    404 "unknown path" (or a server's bare "Not Found"), never which URL was posted to nor what base_url should be."""
    with closed_port() as port:
        closed = f"http://127.0.0.1:{port}"
        provider: Provider = (
            GroqProvider(model="m", base_url=closed)
            if kind == "groq"
            else OpenAICompatProvider(model="m", base_url=closed + "/v1")
        )
        with pytest.raises(ProviderError) as info:
            provider.complete([{"role": "user", "content": "hello"}], PARAMS)
    said = str(info.value)
    assert info.value.status is None and "ConnectError" in said, said
    assert f"(POST {provider.endpoint})" in said and provider.endpoint.startswith(closed), said
    # a base_url one path segment off: every call is a 404
    wrong: Provider = (
        GroqProvider(model="m", base_url=fake.url + "/api")
        if kind == "groq"
        else OpenAICompatProvider(model="m", base_url=fake.url)
    )
    with pytest.raises(ProviderError) as info:
        wrong.complete([{"role": "user", "content": "hello"}], PARAMS)
    said = str(info.value)
    assert info.value.status == 404 and f"(POST {wrong.endpoint}: check base_url, " in said, said
    assert ("/v1 URL" if kind == "openai" else "https://api.groq.com") in said


@pytest.mark.parametrize("kind", ["groq", "openai"])
def test_a_404_for_a_wrong_path_is_not_read_as_a_model_the_provider_lacks(kind: str, keys: str) -> None:
    """Only the provider's code ``model_not_found`` says the judge has no such model: a base_url off by a segment
    holding ``models`` got 404 "unknown path /models/..." and stopped the run at once telling the user to change
    judge.model, with no word of base_url. Seen failing before: any 404 saying "model" anywhere was a missing model."""
    with FakeProvider(api_key=keys, models={"m"}) as fake:
        wrong: Provider = (
            GroqProvider(model="m", base_url=fake.url + "/models")
            if kind == "groq"
            else OpenAICompatProvider(model="m", base_url=fake.url + "/models")
        )
        with pytest.raises(ProviderError) as info:
            wrong.complete([{"role": "user", "content": "hello"}], PARAMS)
        assert info.value.status == 404 and "/models/" in str(info.value)
        assert wrong.run_stopper(info.value) is None
        assert f"(POST {wrong.endpoint}: check base_url, " in str(info.value), str(info.value)
        misspelt = (
            GroqProvider(model="n", base_url=fake.url)
            if kind == "groq"
            else OpenAICompatProvider(model="n", base_url=fake.openai_base_url)
        )
        with pytest.raises(ProviderError) as info:
            misspelt.complete([{"role": "user", "content": "hello"}], PARAMS)
    stopper = misspelt.run_stopper(info.value)
    assert stopper is not None and stopper.startswith(f"the {kind} judge has no model n ({kind} HTTP 404: The model"), (
        stopper
    )
    assert "check base_url" not in stopper and keys not in stopper


@pytest.mark.parametrize(
    "url",
    [
        "http://user:s3cret-in-the-url@127.0.0.1:{port}",
        "http://127.0.0.1:{port}/?api_key=s3cret-in-the-url",
        "http://127.0.0.1:{port}/?x=1&token=s3cret-in-the-url",
    ],
)
def test_a_groq_base_url_from_the_environment_with_a_credential_is_refused_unshown(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK reads GROQ_BASE_URL, which no suite check saw: ``user:password@`` went out as basic auth in place of
    the key (a 401 may echo it), and its credential showed in every item's '(POST URL)'."""
    monkeypatch.setenv("GROQ_API_KEY", "gsk-test-key-0123456789")
    with closed_port() as port:
        monkeypatch.setenv("GROQ_BASE_URL", url.format(port=port))
        with pytest.raises(ConfigError, match="GROQ_BASE_URL: the url holds a credential") as info:
            GroqProvider(model="m")
    assert "s3cret-in-the-url" not in str(info.value)


@pytest.mark.parametrize(
    "query", ["api_key=s3cret-in-the-query", "x=1&token=s3cret-in-the-query", "sig=s3cret-in-the-query"]
)
def test_an_unreachable_endpoint_is_named_without_a_credential_of_its_url(
    query: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'(POST URL)' hides a URL's password and credential query values whatever let them in (a suite's base_url and
    the variables are checked; a provider made in code is not)."""
    monkeypatch.setenv("GROQ_API_KEY", "gsk-test-key-0123456789")
    with closed_port() as port:
        url = f"http://user:s3cret-in-the-url@127.0.0.1:{port}/?{query}"
        for provider in (GroqProvider(model="m", base_url=url), OpenAICompatProvider(model="m", base_url=url)):
            with pytest.raises(ProviderError) as info:
                provider.complete([{"role": "user", "content": "hello"}], PARAMS)
            said = str(info.value)
            assert "s3cret-in-the" not in said and "(POST http://user:***@127.0.0.1:" in said and "=***" in said, said


@pytest.mark.parametrize(
    ("kind", "url", "root"),
    [
        ("openai", "http://127.0.0.1:8000/v1/chat/completions", "http://127.0.0.1:8000/v1"),
        ("openai", "https://api.groq.com/openai/v1/chat/completions/", "https://api.groq.com/openai/v1"),
        ("groq", "https://api.groq.com/openai/v1", "https://api.groq.com"),
        ("groq", "https://api.groq.com/openai/v1/chat/completions", "https://api.groq.com"),
        ("groq", "http://proxy.internal:8080/groq/openai/v1/", "http://proxy.internal:8080/groq"),
    ],
)
def test_a_base_url_ending_in_what_the_client_adds_itself_is_refused_with_the_root_to_give(
    kind: str, url: str, root: str, keys: str
) -> None:
    """Groq's docs show https://api.groq.com/openai/v1 for OpenAI clients, and curl examples show the whole
    .../v1/chat/completions: either as base_url doubled the path, and every call of the run was a 404."""
    provider = GroqProvider if kind == "groq" else OpenAICompatProvider
    with pytest.raises(
        ConfigError, match=f"base_url {re.escape(url)} ends in /.*, which the {kind} client adds"
    ) as info:
        provider(model="m", base_url=url)
    assert f": give {root} (as judge.base_url, or in RAGSCORE_JUDGE_BASE_URL" in str(info.value)
    assert provider(model="m", base_url=root).endpoint.startswith(root.rstrip("/") + "/")


@pytest.mark.parametrize("kind", ["groq", "openai"])
def test_a_base_url_override_ending_in_what_the_client_adds_is_refused_naming_the_variable(
    kind: str, keys: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A RAGSCORE_JUDGE_BASE_URL ending in /chat/completions was refused with "give ROOT (as judge.base_url, or in
    RAGSCORE_JUDGE_BASE_URL ...)", as if the suite might hold it: the variable did."""
    from ragscore_workers.providers.factory import BASE_URL_ENV, make_provider
    from ragscore_workers.schemas import JudgeConfig

    monkeypatch.setenv(BASE_URL_ENV, "http://127.0.0.1:8000/v1/chat/completions")
    with pytest.raises(ConfigError, match="ends in /chat/completions") as info:
        make_provider(JudgeConfig(provider=kind, model="m", base_url="http://127.0.0.1:8000/v1"))
    said = str(info.value)
    assert f"(in {BASE_URL_ENV}, which held it)" in said and "judge.base_url" not in said, said


def test_missing_keys_fail_with_the_variable_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GROQ_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingKeyError, match="GROQ_API_KEY"):
        GroqProvider(model="m").require_key()
    with pytest.raises(MissingKeyError, match="OPENAI_API_KEY"):
        OpenAICompatProvider(model="m").require_key()
    # A hosted OpenAI-compatible API needs one too, whatever its base_url; the message names the host.
    with pytest.raises(MissingKeyError, match=r"OPENAI_API_KEY \(for api\.groq\.com; any value if that server"):
        OpenAICompatProvider(model="m", base_url="https://api.groq.com/openai/v1").require_key()
    # A server on this machine or a private network (vLLM, Ollama, a Kubernetes service) needs no key.
    for url in (
        "http://127.0.0.1:9/v1",
        "http://localhost:11434/v1",
        "http://vllm:8000/v1",
        "http://10.1.2.3/v1",
        "http://vllm.ml.svc.cluster.local/v1",
        "http://host.docker.internal:1234/v1",
        "http://[::1]:8/v1",
    ):
        provider = OpenAICompatProvider(model="m", base_url=url)
        provider.require_key()  # none needed
        assert provider.limiter_key().startswith("openai:m:"), url


def test_a_missing_key_outside_a_worker_says_what_to_set_and_how_to_choose_another_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The process a user started (an embedded run checks the key before submitting) is not named by its host
    (``on host vm`` read oddly on a laptop); the message names both providers' variables and the setting that
    picks one. A worker's error still names its host and node (tests/judge/test_worker_without_key.py)."""
    monkeypatch.delenv("GROQ_API_KEY", raising=False)
    with pytest.raises(MissingKeyError) as info:
        GroqProvider(model="m").require_key()
    said = str(info.value)
    assert "set the environment variable GROQ_API_KEY for the ragscore process" in said, said
    assert " on host " not in said, said
    assert "judge.provider" in said and "OPENAI_API_KEY" in said and "docs/judge.md" in said, said


def test_a_missing_key_names_a_like_named_variable_that_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key exported under a misspelt name (``GROQ_APIKEY``, ``groq_api_key``) read as no key at all: the message
    names the like-named variables that are set, never their values, and not an unlike one."""
    monkeypatch.delenv("GROQ_API_KEY", raising=False)
    monkeypatch.setenv("GROQ_APIKEY", SECRET)
    monkeypatch.setenv("groq_api_key", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with pytest.raises(MissingKeyError) as info:
        GroqProvider(model="m").require_key()
    said = str(info.value)
    assert "suite). GROQ_APIKEY, groq_api_key are set, but the judge reads only GROQ_API_KEY. The suite" in said, said
    assert "GROQ_APIKEY" in said and "groq_api_key" in said and SECRET not in said, said
    assert "OPENAI_API_KEY is set" not in said, said
    monkeypatch.delenv("GROQ_APIKEY")
    monkeypatch.delenv("groq_api_key")
    monkeypatch.setenv("GROQ_API_KEY", SECRET)
    with pytest.raises(MissingKeyError) as info:
        GroqProvider(model="m", api_key_env="GROQ_KEY").require_key()
    assert "GROQ_API_KEY is set, but the judge reads only GROQ_KEY." in str(info.value), str(info.value)
    monkeypatch.delenv("GROQ_API_KEY")
    with pytest.raises(MissingKeyError) as info:
        GroqProvider(model="m").require_key()
    assert "set, but" not in str(info.value), str(info.value)


@pytest.mark.parametrize(
    ("provider", "unlike"),
    [
        (GroqProvider, ("NGROK_API_KEY", "GROQ_API_BASE")),
        (OpenAICompatProvider, ("OPENAI_API_BASE", "OPENAI_API_TYPE")),
    ],
)
def test_a_missing_key_names_no_other_tools_or_settings_variable(
    provider: type[Provider], unlike: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another tool's key (ngrok's) or the provider's other settings (a base URL, an API type) are no misspelt key:
    naming them as set, not the key, sent the user to the wrong variable."""
    for name in ("GROQ_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name in unlike:
        monkeypatch.setenv(name, SECRET)
    with pytest.raises(MissingKeyError) as info:
        provider(model="m").require_key()
    assert "set, but" not in str(info.value), str(info.value)


def test_the_providers_own_key_is_never_sent_in_clear_text_across_a_public_network(
    keys: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``http://`` to a public host would carry ``Authorization: Bearer <key>`` readable on every hop: refused
    for the provider's usual variable (most likely a key for the provider itself), said for one a metric named."""
    for provider in (OpenAICompatProvider, GroqProvider):
        with pytest.raises(
            ConfigError,
            match=r"over plain http to gateway\.example\.com, .*: use an https base_url, or set .*api_key_env",
        ):
            provider(model="m", base_url="http://gateway.example.com/v1")
        provider(model="m", base_url="https://gateway.example.com/v1")  # https: fine
        provider(model="m", base_url="http://vllm.ml.svc.cluster.local/v1")  # a private network: fine
        provider(model="m", base_url="http://100.101.102.103:11434/v1")  # Tailscale's shared range: fine
        monkeypatch.setenv("GATEWAY_KEY", "gw-key")
        provider(model="m", base_url="http://gateway.example.com/v1", api_key_env="GATEWAY_KEY")
        assert "sends the key in GATEWAY_KEY over plain http to gateway.example.com" in caplog.text
    # A server over plain http that needs no key works with the usual variable unset (it needed one before).
    monkeypatch.delenv("OPENAI_API_KEY")
    assert OpenAICompatProvider(model="m", base_url="http://gpu01.corp.example.com:8000/v1").key_env == "OPENAI_API_KEY"


@pytest.mark.parametrize("kind", ["groq", "openai"])
def test_a_key_read_with_its_newline_works_and_a_key_with_a_control_character_is_refused_unshown(
    kind: str, fake: FakeProvider, keys: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_JUDGE_KEY", f"  {keys}\r\n")  # as read from a key file or a CRLF env file
    assert _provider(kind, fake, api_key_env="MY_JUDGE_KEY").complete([{"role": "user", "content": "[[rating=2]]"}],
                                                                       PARAMS).text == "2"  # fmt: skip
    monkeypatch.setenv("MY_JUDGE_KEY", f"{keys}\nEXTRA")
    with pytest.raises(ConfigError, match="MY_JUDGE_KEY cannot be a key or token") as info:
        _provider(kind, fake, api_key_env="MY_JUDGE_KEY")
    assert keys not in str(info.value) and "EXTRA" not in str(info.value)


@pytest.mark.parametrize(
    "url", ["http://user:pwSECRET999@127.0.0.1:47100/v1", "http://127.0.0.1/v1?api_key=pwSECRET999"]
)
def test_a_base_url_override_carrying_a_credential_is_refused_unshown(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RAGSCORE_JUDGE_BASE_URL with ``user:password@`` (refused in a suite) went out as HTTP basic auth in place of
    the API key, and the provider's 401 echoed it, base64-encoded, into every item's error and the reports."""
    from ragscore_workers.providers.factory import BASE_URL_ENV, judge_identity, make_provider
    from ragscore_workers.schemas import JudgeConfig

    monkeypatch.setenv(BASE_URL_ENV, url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789")
    for make in (make_provider, judge_identity):
        with pytest.raises(ConfigError, match=f"{BASE_URL_ENV}: the url holds a credential") as info:
            make(JudgeConfig(provider="openai", model="m"))
        assert "pwSECRET999" not in str(info.value)


def test_redaction_covers_the_escaped_forms_a_library_quotes() -> None:
    said = "Illegal header value b'Bearer sk-NL-7\\n' and 'sk-NL-7\n' and sk-NL-7\n"
    assert "sk-NL-7" not in redact(said, "sk-NL-7\n")
    echoed = '{"error": "bad key ab\\/cd+ef=="} {"key": "ab\\/cd\\u00e9"}'  # PHP's json_encode escapes "/"
    assert "cd+ef" not in redact(echoed, "ab/cd+ef==") and "cd\\u00e9" not in redact(echoed, "ab/cd\u00e9")


def test_limiter_key_holds_a_hash_of_the_key_never_the_key(fake: FakeProvider) -> None:
    provider = _provider("groq", fake)
    assert SECRET not in provider.limiter_key() and provider.limiter_key().startswith("groq:m:")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2m59.56s", 179.56),
        ("7.66s", 7.66),
        ("1h0m0s", 3600.0),
        ("20ms", 0.02),
        ("6m0s", 360.0),
        ("3", 3.0),
        ("", None),
        ("soon", None),
        ("5x", None),
    ],  # fmt: skip
)
def test_reset_durations_in_groq_and_openai_formats(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == (pytest.approx(seconds) if seconds is not None else None)


def test_retry_after_prefers_milliseconds_then_seconds() -> None:
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({}) is None
    assert 0 <= parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # type: ignore[operator]


@pytest.mark.parametrize(
    ("headers", "message", "seconds"),
    [
        ({"retry-after": "9"}, "Please try again in 1.5s.", 9.0),
        ({"retry-after-ms": "250"}, "", 0.25),
        # a message's wait is rounded: one unit of its last digit more, so the retry never comes inside the window
        ({}, "Rate limit reached for gpt-4o on requests per min (RPM): Limit 500. Please try again in 120ms.", 0.121),
        ({}, "Rate limit reached on tokens per minute (TPM): Limit 6000, Used 5950. Please try again in 7.66s.", 7.67),
        ({}, "please try again in 2m59.56s", 179.57),
        ({}, "Please try again in 3.9s.", 4.0),
        ({}, "Please try again in 0.00s.", 0.01),  # rounded to nothing: a tick, not the backoff of a wait unsaid
        ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "4.5s"}, "Rate limit reached", 4.5),
        ({"x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "4.5s"}, "Rate limit reached", None),
        ({}, "Too Many Requests", None),
    ],  # fmt: skip
)
def test_a_429_without_retry_after_is_read_from_its_message_or_reset_headers(
    headers: dict[str, str], message: str, seconds: float | None
) -> None:
    wait = rate_limit_wait(headers, message)
    assert wait == (pytest.approx(seconds) if seconds is not None else None)
    decision = RetryDecision.for_status(429, headers, message)
    assert decision.kind == "rate_limit"
    assert decision.retry_after == (pytest.approx(seconds) if seconds is not None else None)  # None: back off


def test_headers_at_zero_pause_until_the_reset() -> None:
    info = RateLimitInfo.from_headers({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "7.66s",
                                       "x-ratelimit-remaining-requests": "10"})  # fmt: skip
    assert info.exhausted_for() == pytest.approx(7.66)
    assert RateLimitInfo.from_headers({"x-ratelimit-remaining-tokens": "5"}).exhausted_for() == 0.0


@pytest.mark.parametrize("count_rejected", [False, True])
def test_the_fake_can_count_rejected_requests_against_the_window(keys: str, count_rejected: bool) -> None:
    """OpenAI's documented behaviour (a 429'd request still uses the per-minute limit), as an option."""
    with FakeProvider(rpm=3, api_key=keys, count_rejected=count_rejected) as fake:
        provider = _provider("openai", fake)
        statuses = []
        for i in range(5):
            try:
                provider.complete([{"role": "user", "content": f"q{i} [[rating=2]]"}], PARAMS)
                statuses.append(200)
            except ProviderError as exc:
                statuses.append(exc.status)
        used = len(fake._window.entries)
    assert statuses == [200, 200, 200, 429, 429]
    assert used == (5 if count_rejected else 3)


def test_the_fake_served_from_another_process_answers_and_runs_its_module_once() -> None:
    """`python -m tests.fakes.fake_provider` (how a benchmark drives it from another process) printed runpy's
    "found in sys.modules ... unpredictable behaviour" warning: the package had imported the module already."""
    import subprocess
    import sys

    import httpx

    from ..support import ROOT, next_line

    served = subprocess.Popen([sys.executable, "-m", "tests.fakes.fake_provider", "--rpm", "60"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert served.stdout is not None
        url = next_line(served.stdout, 180).strip()
        asked = {"model": "m", "messages": [{"role": "user", "content": "q [[rating=2]]"}]}
        reply = httpx.post(f"{url}/openai/v1/chat/completions", json=asked, timeout=30)
        assert reply.status_code == 200, reply.text
        assert reply.headers["x-ratelimit-limit-requests"] == "60"
    finally:
        served.terminate()
        _, said = served.communicate(timeout=30)
    assert "RuntimeWarning" not in said, said


@pytest.mark.parametrize("kind", ["groq", "openai"])
@pytest.mark.parametrize("fault", ["timeout", "trickle"])
def test_a_timeout_names_the_endpoint_as_a_connection_error_does(kind: str, fault: str, fake: FakeProvider) -> None:
    """A timeout said only "timed out after 1.0 s": not where the call went, as a connection error says."""
    provider = _provider(kind, fake)  # timeout_s 1
    fake.hang_s = 3.0
    fake.fail_next(fault)
    with pytest.raises(ProviderError, match=r"timed out after 1.0 s") as info:
        provider.complete([{"role": "user", "content": "hello"}], PARAMS)
    assert str(info.value).endswith(f"(POST {provider.endpoint})"), str(info.value)
    if kind == "openai" and fault == "trickle":  # read_reply's own cut: one parenthesis, not two in a row
        assert str(info.value).endswith(f"timed out after 1.0 s, the reply still arriving (POST {provider.endpoint})")


@pytest.mark.serial  # its 16 MiB reply must arrive within the 1 s timeout: loaded, it timed out
@pytest.mark.parametrize("kind", ["groq", "openai"])
def test_a_reply_that_trickles_in_is_cut_at_the_timeout_and_a_huge_one_refused(kind: str, fake: FakeProvider) -> None:
    """httpx's timeout bounds each read, not the call: a reply sent a byte at a time (each byte well within the
    read timeout) would hold the call, and its budget hold, for as long as the server likes."""
    provider = _provider(kind, fake)  # timeout_s 1
    fake.hang_s = 30.0  # a cut after 1 s has room under the bounds below on a loaded box
    fake.fail_next("trickle")
    started = time.monotonic()
    with pytest.raises(ProviderError, match=r"timed out after 1.0 s") as info:
        provider.complete([{"role": "user", "content": "hello"}], PARAMS)
    assert time.monotonic() - started < 8.0  # the whole reply takes 30 s
    assert info.value.status is None and provider.should_retry(info.value).kind == "transient"
    fake.fail_next("trickle_500")  # an error reply trickling in: the groq SDK reads that body itself
    started = time.monotonic()
    with pytest.raises(ProviderError, match=r"timed out after 1.0 s"):
        provider.complete([{"role": "user", "content": "hello"}], PARAMS)
    assert time.monotonic() - started < 8.0
    fake.fail_next("huge")
    with pytest.raises(ProviderError, match="reply over 16 MiB"):  # malformed (openai) or cut (groq transport)
        provider.complete([{"role": "user", "content": "hello"}], PARAMS)
    assert provider.complete([{"role": "user", "content": "[[rating=3]]"}], PARAMS).text == "3"  # still works


def test_a_missing_key_named_by_api_key_env_is_the_one_the_hint_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """An OpenAI-compatible gateway's key named by the metrics' ``api_key_env`` (``GW_KEY``) was asked for, then the
    hint on choosing a provider said the key was in OPENAI_API_KEY or GROQ_API_KEY: read from GW_KEY whichever."""
    monkeypatch.delenv("GW_KEY", raising=False)
    for provider in (OpenAICompatProvider, GroqProvider):
        with pytest.raises(MissingKeyError) as info:
            provider(model="m", base_url="https://gw.example.com/v1", api_key_env="GW_KEY").require_key()
        said = str(info.value)
        assert "set the environment variable GW_KEY" in said and "judge.provider" in said, said
        assert "OPENAI_API_KEY" not in said and "GROQ_API_KEY" not in said, said
        assert "reads its key from GW_KEY (the judge metrics' api_key_env)" in said, said


#: What each local server says, in its own error shape, for a model it lacks and for a prompt past its context.
LOCAL_ERRORS = [
    ("vllm", "unknown_model", 404, "The model `n` does not exist.", "NotFoundError"),
    ("vllm", "context_length", 400, "This model's maximum context length is 8192 tokens.", "BadRequestError"),
    ("ollama", "unknown_model", 404, 'model "n" not found, try pulling it first', "not_found_error"),
    ("llamacpp", "context_size", 400, "the request exceeds the available context size.", "exceed_context_size_error"),
]


@pytest.mark.parametrize(
    ("shape", "fault", "status", "said", "code"), LOCAL_ERRORS, ids=[f"{r[0]}-{r[1]}" for r in LOCAL_ERRORS]
)
def test_a_local_servers_error_body_is_read_as_its_message_and_code(
    shape: str, fault: str, status: int, said: str, code: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's older errors are the top-level object, Ollama's native ones a bare string, llama.cpp's code the status
    again: the item's error was the raw JSON cut at 200 characters (``openai HTTP 400: {"object": "error", ...``) and
    llama.cpp's code the number 400, its kind (``exceed_context_size_error``) lost."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a server on this machine: no key
    with FakeProvider(models={"m"}, errors=shape, limit_headers=False) as fake:  # type: ignore[arg-type]
        provider = OpenAICompatProvider(model="n" if fault == "unknown_model" else "m", base_url=fake.openai_base_url)
        if fault != "unknown_model":
            fake.fail_next(fault)
        with pytest.raises(ProviderError) as info:
            provider.complete([{"role": "user", "content": "hello"}], PARAMS)
    exc = info.value
    assert exc.status == status and str(exc).startswith(f"openai HTTP {status}: {said}"), str(exc)
    assert "{" not in str(exc) and exc.code == code
    assert provider.should_retry(exc).kind == "no"
    assert provider.request_specific(exc) is (status == 400)  # a prompt too long fails its item, not the run
    # a model the server lacks stops judging at once, with the setting to change (seen failing before: the breaker's
    # count of them, each row's judges asking again)
    stopper = provider.run_stopper(exc)
    if fault == "unknown_model":  # the server posted to said too: no key sent, what explain() added stays
        assert stopper is not None and stopper.startswith(f"the openai judge has no model n (openai HTTP 404: {said}")
        assert stopper.endswith("set the suite's judge.model to a model openai serves (every judge call would fail "
                                "the same way)"), stopper  # fmt: skip
    else:
        assert stopper is None


def test_ollamas_native_error_body_is_its_message() -> None:
    """Ollama's own API (not its ``/v1``) answers an error as a bare string."""
    assert error_details(b'{"error": "model \\"n\\" not found, try pulling it first"}') == (
        'model "n" not found, try pulling it first',
        None,
    )


def test_a_local_servers_404_for_a_path_it_lacks_does_not_stop_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's and Ollama's 404 type says "not found", of a model or of anything else: only one naming a model stops
    judging as a model the server lacks; a wrong path counts toward the breaker and says to check base_url."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for shape in ("vllm", "ollama"):
        with FakeProvider(models={"m"}, errors=shape, limit_headers=False) as fake:  # type: ignore[arg-type]
            wrong = OpenAICompatProvider(model="m", base_url=fake.url + "/nowhere")
            with pytest.raises(ProviderError) as info:
                wrong.complete([{"role": "user", "content": "hello"}], PARAMS)
        assert info.value.status == 404 and info.value.code in ("NotFoundError", "not_found_error"), info.value
        assert "check base_url" in str(info.value) and wrong.run_stopper(info.value) is None


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_a_connection_refused_on_this_machine_asks_whether_the_server_runs(
    host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local server not started (or on another port) refuses the connection: the error asks whether it runs,
    beside the URL posted to. Seen failing before: ``ConnectError: [Errno 111] Connection refused`` and the URL only."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with closed_port() as port:
        provider = OpenAICompatProvider(model="m", base_url=f"http://{host}:{port}/v1")
        with pytest.raises(ProviderError) as info:
            provider.complete([{"role": "user", "content": "hello"}], PARAMS)
    said = str(info.value)
    assert "ConnectError" in said, said
    assert f"(POST http://{host}:{port}/v1/chat/completions): is the server running, on that port?" in said, said
    assert provider.should_retry(info.value).retry  # a server starting up: asked again after a backoff
