"""Data contracts shared by workers and orchestrator (DESIGN.md §4 and §7), as pydantic v2 models."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from enum import Enum
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from .answers import LEGACY_TARGET_ERROR, NO_RETRIEVAL
from .counts import close_names, did_you_mean, noun, noun_names
from .redaction import credential_name, query_secret_names, secret_query_param, url_password_spans, userinfo_span

__all__ = [
    "Citation",
    "Context",
    "EmbeddingConfig",
    "GateSpec",
    "ItemResult",
    "JudgeConfig",
    "MetricResult",
    "MetricSpec",
    "MetricSummary",
    "Queue",
    "Row",
    "Rubric",
    "RunSummary",
    "SandboxConfig",
    "Suite",
    "TargetConfig",
    "TargetResponseMap",
    "target_name",
]

log = logging.getLogger(__name__)

#: Fields of stored suites' judges and targets this process warned it does not know (:meth:`Suite.stored`).
_IGNORED: set[str] = set()
_IGNORED_LOCK = threading.Lock()


class Queue(str, Enum):
    """The Celery queues; each is served by its own kind of worker."""

    CPU = "cpu"
    EMBED = "embed"
    JUDGE = "judge"
    CODE = "code"
    TARGET = "target"
    #: Not a queue: derived metrics are computed from stored results before aggregation.
    DERIVED = "derived"


# --------------------------------------------------------------------------- input row


class Context(BaseModel):
    """One retrieved context: a plain string in the input becomes ``{"text": ...}``. As in a row, a number where
    text is expected is read as text (a retriever's ``"id": 17``), and ``"metadata": null`` is no metadata."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, coerce_numbers_to_str=True)

    text: str = Field(validation_alias=AliasChoices("text", "page_content", "content"))
    id: str | None = None
    score: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"text": value}
        if isinstance(value, dict) and "metadata" in value and value["metadata"] is None:
            return {k: v for k, v in value.items() if k != "metadata"}
        return value


class Citation(BaseModel):
    """A quote the answer attributes to ``contexts[source_index]``."""

    source_index: int
    quote: str


class Rubric(BaseModel):
    """A grading rubric: a description and a ``{"1".."5": text}`` scale."""

    description: str = ""
    scale: dict[str, str] = Field(default_factory=dict)


def _coerce_id(value: Any) -> Any:
    # Integer ids are common in exported datasets; bools are not ids.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


#: Between system and id in an item key.
KEY_SEPARATOR = "::"
#: The row fields that name an item (its key, the summary's breakdowns): stored as the item's ``_meta``.
ITEM_META_FIELDS = ("id", "system", "group", "question_type")
#: The row fields a scoring task message carries whatever its metrics read (:meth:`Row.to_message`): those that name
#: the item (``ITEM_META_FIELDS``), ``question`` (the item's ``question_sha``) and ``metadata`` (where an older version
#: marked a target's failure, with ``answer`` where it holds that mark); with every ``ragscore:`` mark
#: (:data:`ROW_MARK_PREFIX`), which workers read.
MESSAGE_FIELDS = frozenset({*ITEM_META_FIELDS, "question", "metadata"})
#: What a metric declares it reads (``reads=``) where all it reads of the contexts is whether they hold text and their
#: scores (``Row.has_contexts``, ``Context.score``): its task message carries each context with its score and, for its
#: text, :data:`TEXT_LEFT_OUT` ("" for a blank one), unless a metric it is sent with reads ``contexts`` whole. The
#: contexts' shape is the same, so every worker version reads such a message as it reads the whole row.
CONTEXTS_WITHOUT_TEXT = "contexts:without_text"
#: The text of a context whose text a task message leaves out (:data:`CONTEXTS_WITHOUT_TEXT`).
TEXT_LEFT_OUT = "…"
#: The prefix of the fields ragscore itself marks a row with (``ragscore:no_retrieval``, ``ragscore:target_error``).
ROW_MARK_PREFIX = "ragscore:"


def question_fingerprint(question: str | None) -> str | None:
    """12 hex digits naming a question's text (``item.question_sha``): ``compare`` pairs runs' items by id and
    uses it to tell when one id holds different questions (``row-N`` ids of two different datasets)."""
    if not question:
        return None
    return hashlib.blake2b(question.strip().encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()


def item_key(system: str | None, id: str) -> str:
    """``system::id``; ``id`` alone without a system, or ``::id`` when the id itself holds ``::`` (so that
    ``{"id": "x::y"}`` and ``{"id": "y", "system": "x"}`` are two items, and every key splits back)."""
    if system is not None:
        return f"{system}{KEY_SEPARATOR}{id}"
    return f"{KEY_SEPARATOR}{id}" if KEY_SEPARATOR in id else id


#: What :func:`unscorable_reason` says of an unscorable result whose metric gave no ``details.reason``.
NO_REASON = "no reason given"


def unscorable_reason(result: Mapping[str, Any]) -> str:
    """Why a stored result (``{score, details, error, ...}``) that has no score was unscorable: its
    ``details.reason``, else :data:`NO_REASON` (items.csv's ``unscorable`` column, the JUnit item cases)."""
    return str((result.get("details") or {}).get("reason") or NO_REASON)


_ENV_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: What keys and tokens look like, though some are valid variable names (Groq's gsk_..., Hugging Face's hf_...).
_SECRET_SHAPE = re.compile(r"^(?:gsk_|hf_|ghp_|gho_|github_pat_|xai-|sk-|sk_|pk_|rk_|AKIA|AIza|eyJ)")


def _looks_like_a_secret(value: str) -> bool:
    """A known key prefix, or 30+ characters mixing lower case and digits (variable names are short words)."""
    return bool(_SECRET_SHAPE.match(value)) or (
        len(value) >= 30 and any(c.islower() for c in value) and any(c.isdigit() for c in value)
    )


def env_var_name(value: str | None) -> str | None:
    """A field that names the environment variable holding a secret (``api_key_env``, ``auth_env``): a key
    pasted there instead would be shown by every message that names the variable, so it is refused, unshown."""
    if value is not None and (not _ENV_VAR_NAME.fullmatch(value) or _looks_like_a_secret(value)):
        raise PydanticCustomError(
            "env_var_name",
            "must name an environment variable (letters, digits and _), not hold the secret itself: secrets come "
            "from the environment only (the value is not shown)",
        )
    return value


def _no_secret_headers(headers: dict[str, str]) -> dict[str, str]:
    """A target's plain ``headers`` are configuration, kept with the run (its store, its task messages,
    run_info.json): one that carries a credential is refused, unshown, with the way to send it from the environment."""
    if named := sorted(name for name in headers if credential_name(name)):
        raise PydanticCustomError(
            "secret_in_suite",
            "{names}: a header that carries a credential comes from the environment only, never from a suite file "
            "(the value is not shown): name its variable in auth_env, with auth_header: {first} (and auth_scheme: '' "
            "for a value sent as it is)",
            {"names": ", ".join(named), "first": named[0]},
        )
    return headers


#: What urlsplit takes out of a URL wherever it is (and an HTTP client may too).
_TABS_AND_NEWLINES = re.compile(r"[\t\r\n]")


def no_secret_in_url(url: str | None) -> str | None:
    """A suite's ``url`` / ``base_url`` is kept with the run and shown in messages: one carrying a credential
    (``user:password@``, ``?api_key=``) is refused, unshown, with where the credential goes instead."""
    if url is None:
        return url
    # urlsplit's netloc, and the userinfo as messages read it (a password holding a "/", "?" or "#" cuts urlsplit's
    # netloc short: https://u:pa/ss@h), in the url as given and as urlsplit reads it (" https://u:pw@h", "ht\tps:")
    plain = _TABS_AND_NEWLINES.sub("", url.strip())
    userinfo = "@" in urlsplit(url).netloc or userinfo_span(plain) is not None
    # the fields messages hide (?next=/a?token=, #access_token=, ?a=1;key=)
    named = sorted({*query_secret_names(url), *query_secret_names(plain)})
    # the password of a url quoted in it, as messages hide it (?next=https://u:pw@h2/)
    quoted = bool(url_password_spans(url) or url_password_spans(plain))
    if userinfo or named or quoted:
        # a password cut short may read as a query's name (u:pa?S3CRET@h/v1?key=): a url with one names none
        if userinfo:
            where = "user info (user:password@)"
        elif named:
            where = f"query parameter {', '.join(named)}"
        else:
            where = "user info (user:password@) of a url quoted in it"
        raise PydanticCustomError(
            "secret_in_suite",
            "the url holds a credential ({where}): a url is kept with the run and shown in messages, so a credential "
            "comes from the environment only (the value is not shown): a target names its variable in auth_env (a "
            "query parameter: auth_in: query, auth_param: NAME; a header: auth_header, auth_scheme); a judge reads "
            "its provider's *_API_KEY",
            {"where": where},
        )
    return url


def _credential_fields(request: dict[str, Any], query: bool, path: str = "") -> list[str]:
    """Fields of a target's ``request`` (nested too) named like a credential whose value is written in the suite,
    not a ``{field}`` of the row: ``"api_key": "sk-..."``, not ``"session_token": "{metadata.session}"``. A name is
    read in words as a url's query's is (``auth.token``, ``api key``: :func:`credential_name`); in a ``query`` (a
    GET's), a bare ``key``, ``code`` or ``sig`` too, as :func:`no_secret_in_url` refuses it
    (:func:`secret_query_param`)."""
    found = []
    for name, value in request.items():
        where = f"{path}{name}"
        named = secret_query_param(str(name)) if query else credential_name(str(name))
        if isinstance(value, dict):
            found += _credential_fields(value, query, f"{where}.")
            continue
        if named and _written_text(value):
            found.append(where)
        if isinstance(value, list):  # objects in a list (a chat body's messages) are nested fields too
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    found += _credential_fields(item, query, f"{where}[{i}].")
    return found


def _written_text(value: Any) -> bool:
    """Whether ``value`` holds text the suite writes, as a credential is: not a number or a flag (``stop_token_ids:
    [2]``, ``token_limit: 512``), nor a row's ``{field}``."""
    if isinstance(value, str):
        return bool(value) and "{" not in value
    return isinstance(value, list) and any(_written_text(v) for v in value)


def _no_secret_in_request(request: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
    """A target's ``request`` is kept with the run as its url and headers are: a credential written in it is
    refused, unshown, with where it goes instead."""
    if named := _credential_fields(request, query=info.data.get("method") == "GET"):
        raise PydanticCustomError(
            "secret_in_suite",
            "{names}: a credential comes from the environment only, never from a suite file (the "
            "value is not shown): name its variable in auth_env and send it with auth_in: body (or query), "
            "auth_param: NAME, or as a header (auth_header, auth_scheme), or call a callable target that reads it "
            "from the environment",
            {"names": f"{noun(len(named), 'request field')} {', '.join(named)}"},
        )
    return request


def _system_name(value: str | None) -> str | None:
    """A row's or target's ``system``: no ``::`` in it, so every item key splits back (:func:`split_key`)."""
    if value is not None and KEY_SEPARATOR in value:
        raise PydanticCustomError("system_separator", f"a system name may not contain {KEY_SEPARATOR!r}")
    return value


def target_name(system: str | None) -> str:
    """A target's name in counters, messages and the run store: its ``system``, else ``target`` (unnamed, a suite's
    only target)."""
    return system or "target"


def split_key(key: str) -> tuple[str | None, str]:
    """``(system, id)`` of an item key: the inverse of :func:`item_key` (system names hold no ``::``)."""
    system, sep, id = key.partition(KEY_SEPARATOR)
    return (system or None, id) if sep else (None, key)


#: Row fields whose ``null`` means "absent" (their default is not None: an empty list or dict).
NULL_AS_ABSENT = ("contexts", "metadata")
#: Ragas 0.2+ column names (its ``reference`` is ours) -> the row field they fill, and what they must hold.
RAGAS_NAMES: dict[str, tuple[str, type]] = {
    "user_input": ("question", str), "response": ("answer", str), "retrieved_contexts": ("contexts", list),
}  # fmt: skip


class Row(BaseModel):
    """One question to score. Every field is optional except what the chosen metrics need. A number where
    text is expected is read as text (``"reference": 42``); ``null``, ``NaN`` and ``Infinity`` are absent values."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, coerce_numbers_to_str=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, value: Any) -> Any:
        """``null`` lists are absent, and so is any field that is NaN or infinite: JSON's ``NaN`` (pandas writes a
        missing value so) was read as the text "nan", a reference every "nan" answer matched. Ragas 0.2+ column
        names fill a field the row does not give, when they hold what it takes (else they stay extra columns)."""
        if isinstance(value, dict) and any(name in value for name in RAGAS_NAMES):
            value = dict(value)
            for name, (field, kind) in RAGAS_NAMES.items():
                if field not in value and isinstance(value.get(name), kind):
                    value[field] = value.pop(name)
        if isinstance(value, dict) and any(
            (v is None and k in NULL_AS_ABSENT) or (isinstance(v, float) and not math.isfinite(v))
            for k, v in value.items()
        ):
            return {
                k: v for k, v in value.items()
                if not ((v is None and k in NULL_AS_ABSENT) or (isinstance(v, float) and not math.isfinite(v)))
            }  # fmt: skip
        return value

    id: str
    question: str | None = None
    answer: str | None = None
    reference: str | None = Field(
        default=None,
        validation_alias=AliasChoices("reference", "gold_answer", "reference_answer", "ground_truth"),
    )
    contexts: list[Context] = Field(default_factory=list)
    question_type: str | None = None
    expected: Any = None
    citations: list[Citation] | None = None
    retrieved_doc_ids: list[str] | None = None
    gold_doc_id: str | list[str] | None = None
    evidence_sentences: list[str] | None = None
    gold_evidence_sentences: list[str] | None = None
    sentences: dict[str, str] | None = None
    rubric: Rubric | None = None
    checks: list[dict[str, Any]] | None = None
    code: str | None = None
    system: str | None = None
    group: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    _coerce = field_validator("id", "system", "group", "gold_doc_id", mode="before")(_coerce_id)

    @field_validator("retrieved_doc_ids", "evidence_sentences", "gold_evidence_sentences", mode="before")
    @classmethod
    def _coerce_id_lists(cls, value: Any) -> Any:
        return [_coerce_id(v) for v in value] if isinstance(value, list) else value

    _system = field_validator("system")(_system_name)

    @property
    def has_contexts(self) -> bool:
        """Whether the row retrieved anything: a context with text (``contexts: []``, or only blank texts, is none).
        The metrics that leave a row without contexts unscorable (``no contexts``) and the pre-run check of a field
        no row has read contexts so."""
        return any(c.text.strip() for c in self.contexts)

    @property
    def retrieved_nothing(self) -> bool:
        """Whether the row says its system retrieved nothing: ``retrieved_doc_ids: []`` (a retrieval that ran and found
        nothing: ``recall_at_k`` scores it 0; an LLM alone's rows are ``answered_alone``). A row without the field
        (absent or null) says nothing of its retrieval."""
        return self.retrieved_doc_ids == []

    @property
    def answered_alone(self) -> bool:
        """Whether a target that returns no contexts nor doc ids answered the row (an LLM alone: its mark
        :data:`~ragscore_workers.answers.NO_RETRIEVAL`): its system retrieves nothing by design, and nothing is known
        of a retrieval (not ``retrieved_nothing``)."""
        return (self.model_extra or {}).get(NO_RETRIEVAL) is True

    @property
    def sourceless(self) -> bool:
        """Whether the row has no source to cite or quote, by its own word: no contexts, and it says its system
        retrieved nothing (``retrieved_nothing``: retrieval ran and found nothing) or an LLM alone answered it
        (``answered_alone``). ``quality_checks`` flags neither ``no_contexts`` nor ``no_citation`` on it and
        ``verbatim`` leaves it unscorable by design (``no contexts``); ``recall_at_k`` still scores ``[]`` 0."""
        return not self.has_contexts and (self.retrieved_nothing or self.answered_alone)

    @property
    def evidence_unnamed_by_design(self) -> bool:
        """Whether the row, without ``evidence_sentences``, lacks them by design: it retrieved no document whose
        sentences it could name (an LLM alone answered it, ``answered_alone``, or, without contexts, its retrieval
        found nothing, ``sourceless``). ``citation`` and ``evidence_overlap`` leave it unscorable by design, and the
        dry run counts such rows (``DatasetScan.alone``) so that it says what the run will."""
        return self.answered_alone or self.sourceless

    @property
    def key(self) -> str:
        """Unique key of the item: its id, or ``system::id`` when several systems answered (see :func:`split_key`)."""
        return item_key(self.system, self.id)

    def to_message(self, fields: frozenset[str] | None = None) -> dict[str, Any]:
        """JSON-ready form for a task message (no nulls, so messages stay small). A Ragas column the row did not
        take (its field was given, even as null) is left out: read again, it would fill the dropped null.
        ``fields``: the only fields its metrics read (:meth:`ResolvedSuite.message_fields`), kept with those every
        message carries (:data:`MESSAGE_FIELDS`, the ``ragscore:`` marks), the contexts without their text where
        ``fields`` says so (:data:`CONTEXTS_WITHOUT_TEXT`); None keeps every field."""
        message = self.model_dump(mode="json", exclude_none=True, exclude_defaults=True) | {"id": self.id}
        for name in RAGAS_NAMES.keys() & (self.model_extra or {}).keys():
            message.pop(name, None)  # a null one is not in the dump
        if fields is None:
            return message
        kept = fields | MESSAGE_FIELDS
        if LEGACY_TARGET_ERROR in self.metadata:  # an older version's mark holds only where there is no answer
            kept |= {"answer"}  # (answers.unanswered_why): without it, a worker would fail the answered row
        trimmed = {name: value for name, value in message.items() if name in kept or name.startswith(ROW_MARK_PREFIX)}
        if CONTEXTS_WITHOUT_TEXT in fields and "contexts" not in kept and "contexts" in message:
            trimmed["contexts"] = [_without_text(context) for context in message["contexts"]]
        return trimmed


def _without_text(context: dict[str, Any]) -> dict[str, Any]:
    """A context of a task message as :data:`CONTEXTS_WITHOUT_TEXT` sends it: its score, and whether it has text."""
    text = TEXT_LEFT_OUT if context["text"].strip() else ""
    return {"text": text} | ({"score": context["score"]} if "score" in context else {})


# --------------------------------------------------------------------------- suite


class MetricSpec(BaseModel):
    """A metric as a suite names it: a bare name or ``{name, params}``."""

    model_config = ConfigDict(extra="forbid")

    name: str
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"name": value}
        if isinstance(value, dict) and (flat := sorted(set(value) - {"name", "params"})):
            if typos := {key: close[0] for key in flat if (close := close_names(key, ["name", "params"]))}:
                said = ", ".join(f"{key} ({did_you_mean([word])})" for key, word in typos.items())  # param: {k: [1]}
                raise PydanticCustomError(
                    "misspelt_key", "{said}: a metric is written {example}",
                    {"said": said, "example": f"{{name: {value.get('name', '...')}, params: {{...}}}}",
                     "key": next(iter(typos))},
                )  # fmt: skip
            if "name" not in value and len(value) == 1:  # {recall_at_k: {k: [1, 5]}}: the metric as the key
                example = f"{{name: {flat[0]}, params: {{...}}}}"
            else:
                example = f"{{name: {value.get('name', '...')}, params: {{{flat[0]}: ...}}}}"
            raise PydanticCustomError(
                "flat_params",
                "{keys}: a metric is written {example}",
                {"keys": ", ".join(flat), "example": example, "key": flat[0]},
            )  # "key": the first one, whose line the problem is said at
        return value


class EmbeddingConfig(BaseModel):
    """How embed workers load and run their model."""

    model_config = ConfigDict(extra="forbid")

    model: str = "all-MiniLM-L6-v2"
    device: str = "auto"
    batch_size: int = Field(default=64, gt=0)
    fp16: bool = False
    cache: bool = True


#: Names of judge fields that would hold a secret (not ``max_tokens``: a whole name, or one ending in api_key).
_SECRET_NAME = re.compile(r"^(?:\w*api_?key|key|(?:api_|access_|auth_)?token|secret|password)$", re.I)
#: The secrets' names a misspelt judge key is held against (``api_kye``), where it is like no field of the judge.
_SECRET_NAMES = ("api_key", "token", "secret", "password")
#: How like one of :data:`_SECRET_NAMES` such a key must be: closer than a field's typo (0.6), as the names are short
#: and common words come that close (``seed``, ``user``: secret; ``top_k``: token; ``api_base``: api_key).
_SECRET_LIKENESS = 0.75
#: A misspelt key shorter than this (the shortest of :data:`_SECRET_NAMES`, ``token``) is a secret only where its value
#: looks like a key: one letter off a short name still reaches :data:`_SECRET_LIKENESS`, and so do words (``ton``,
#: ``ken``, ``sect``) and typos of no secret (``tken: 5``).
_SHORT_SECRET_KEY = 5
#: Model names of OpenAI's reasoning models (``o1``, ``o3-mini``, ``o4-mini``, ``gpt-5``, ``gpt-5-mini``).
_OPENAI_REASONING = re.compile(r"^(?:openai/)?(?:o\d|gpt-5)", re.I)
#: The rate limits by name, as :class:`JudgeConfig` (and :class:`TargetConfig`, ``rpm`` only) and the limiter
#: (``Limit.name``, the ``on`` of a wait) name them, and the wait counters (``judge_wait_{name}``) and the live view.
RATE_LIMITS = ("rpm", "tpm", "rpd", "tpd")
#: The ``on`` of a judge call's wait for a slot of ``judge.max_in_flight`` (its ``limit``: the cap), and its wait
#: counter's (``judge_wait_slot``).
SLOT_WAIT = "slot"
#: How a minute's requests are spread: ``burst`` sends them as they come (an exact window per minute), ``even`` also
#: holds them to ceil(rpm / 60) per second, for providers that enforce a minute limit per second (OpenAI: limits "may
#: be quantized").
Pace = Literal["burst", "even"]


def paced_per_second(rpm: int) -> int:
    """The requests a second ``pace: even`` lets through at ``rpm``: ceil(rpm / 60), at least 1."""
    return math.ceil(rpm / 60)


def _paced_rpm(also: str = "") -> Callable[[Pace, ValidationInfo], Pace]:
    """The check of ``pace``: ``even`` with ``rpm: null`` paced nothing, silently (ceil(rpm / 60) of no rpm), so it
    is refused with the fix (``also``: another way to set the rpm). An ``rpm`` refused itself is not in
    ``info.data``: its own error says the problem."""

    def check(pace: Pace, info: ValidationInfo) -> Pace:
        if pace == "even" and "rpm" in info.data and info.data["rpm"] is None:
            raise PydanticCustomError(
                "pace_without_rpm",
                f"even holds requests to ceil(rpm / 60) a second, and rpm is not set: set rpm{also} (the requests a "
                "minute allowed) or leave pace at burst",
            )
        return pace

    return check


#: The key of a param's ``json_schema_extra`` that says what a run uses when the param is left unset (None).
UNSET = "unset"


def unset_means(what: str) -> dict[str, Any]:
    """``Field(default=None, json_schema_extra=unset_means("the suite's sandbox.timeout_s"))``: what stands in for
    the param when it is not given, which ``ragscore metrics NAME`` shows as its default (not ``null``)."""
    return {UNSET: what}


#: A price per million tokens: not negative (a run's cost would go down), finite (Redis refuses to add NaN or
#: infinity to the run's cost, which failed every call after it was paid for).
PricePerMTok = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class JudgeParams(BaseModel):
    """Params shared by every judge metric (the model and limits are in the suite's ``judge`` section)."""

    model_config = ConfigDict(extra="forbid")

    #: Judge calls in flight at once per task.
    concurrency: int = Field(default=8, ge=1, le=64)
    #: Read and write the reply cache (``false`` = ``--no-cache``).
    cache: bool = True
    #: Environment variable holding the key, when not the provider's usual one.
    api_key_env: str | None = Field(
        default=None, json_schema_extra=unset_means("the provider's usual one, as GROQ_API_KEY")
    )
    _api_key_env = field_validator("api_key_env")(env_var_name)
    timeout_s: float = Field(default=60.0, gt=0)
    #: Longest one call may wait for the shared rate limit before it fails.
    max_wait_s: float = Field(default=600.0, gt=0)
    #: Provider attempts per call for 5xx, timeouts, connection errors and 429s (the first included).
    attempts: int = Field(default=5, ge=1, le=20)
    #: Consecutive failed calls that stop judging for the whole run.
    breaker_failures: int = Field(default=5, ge=1)
    #: Stop new calls once the run's judge cost / tokens reach these.
    max_cost: float | None = Field(default=None, ge=0, json_schema_extra=unset_means("no limit"))
    max_tokens_total: int | None = Field(default=None, ge=1, json_schema_extra=unset_means("no limit"))
    #: Price per million tokens by model: ``{"llama-3.1-8b-instant": [in, out]}``.
    prices: dict[str, tuple[PricePerMTok, PricePerMTok]] = Field(default_factory=dict)


def _misplaced_param(param: str) -> PydanticCustomError:
    """A param of the judge metrics (``max_cost``) written in the suite's judge section, and where it goes."""
    return PydanticCustomError(
        "judge_metrics_param",
        "a param of the judge metrics, not of the judge section: give it in each judge metric's params ({name: "
        "answer_accuracy, params: {{param}: ...}})",
        {"param": param},
    )


class JudgeConfig(BaseModel):
    """Which LLM judges, and its limits. Keys come from the environment only."""

    model_config = ConfigDict(extra="forbid")

    provider: Literal["groq", "openai"] = "groq"
    model: str = "llama-3.1-8b-instant"
    base_url: str | None = None
    _base_url = field_validator("base_url")(no_secret_in_url)
    temperature: float = 0.0
    max_tokens: int = Field(default=512, gt=0)
    #: A reasoning model, which thinks before it answers (OpenAI o-series and gpt-5, DeepSeek-R1 distills,
    #: Qwen3): the cap is sent as ``max_completion_tokens``, no temperature, and judge metrics give the reply at
    #: least 2,048 tokens. None: guessed for OpenAI's o-series and gpt-5 only.
    reasoning: bool | None = None
    rpm: int | None = Field(default=30, gt=0)
    tpm: int | None = Field(default=6000, gt=0)
    #: Requests and tokens per day (Groq's free tier limits both).
    rpd: int | None = Field(default=None, gt=0)
    tpd: int | None = Field(default=None, gt=0)
    #: ``even``: at most ceil(rpm / 60) requests per second too (:data:`Pace`); tokens are not paced.
    pace: Pace = "burst"
    #: Judge calls in flight at once across every worker (None: no cap): a local server answers a few at a time.
    max_in_flight: int | None = Field(default=None, gt=0)
    _pace = field_validator("pace")(_paced_rpm(" (or run with --rpm)"))

    @model_validator(mode="wrap")
    @classmethod
    def _no_secrets(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """A key written into the suite (``api_key: gsk_...``): refused, never shown, with where keys go; a param of
        the judge metrics (``api_key_env``, ``max_cost``) told where it goes, not taken for a key; each said with the
        section's other problems (a typo beside it was hidden until the key was gone)."""
        if not isinstance(value, dict):
            return handler(value)
        misplaced = [k for k in value if k in JudgeParams.model_fields and k not in cls.model_fields]  # not its own
        secrets = dict(cls._secret_keys({k: v for k, v in value.items() if k not in misplaced}))
        if not secrets and not misplaced:
            return handler(value)
        errors: list[InitErrorDetails] = [
            {"type": _misplaced_param(key), "loc": (key,), "input": key} for key in misplaced
        ]
        if secrets:
            refused = PydanticCustomError(
                "secret_in_suite",
                "{keys}: keys come from the environment only (GROQ_API_KEY, OPENAI_API_KEY, or the variable a judge "
                "metric's api_key_env names), never from a suite file (the value is not shown)",
                {"keys": ", ".join(sorted(secrets.values())), "key": next(iter(secrets))},
            )  # "key": the first written, whose line the problem is said at
            errors.insert(0, {"type": refused, "loc": (), "input": sorted(secrets.values())})
        try:
            handler({k: v for k, v in value.items() if k not in secrets and k not in misplaced})
        except ValidationError as exc:
            errors += [{"type": PydanticCustomError(e["type"], e["msg"]), "loc": e["loc"], "input": e["input"]}
                       for e in exc.errors()]  # fmt: skip
        raise ValidationError.from_exception_data(cls.__name__, errors)

    @classmethod
    def _secret_keys(cls, value: dict[Any, Any]) -> Iterator[tuple[Any, str]]:
        """The keys of ``value`` that would hold a secret, and each as said: named as one (``api_key``), or misspelt
        and like no field (``api_kye (did you mean 'api_key'?)``: pydantic's unknown key has no such name to offer),
        in any case (``API_KYE``), where its value is a string (``secure: true`` is no key); one under
        :data:`_SHORT_SECRET_KEY` characters (``tken``) only where its value looks like a key (``gsk_...``)."""
        for key, item in value.items():
            name = str(key).lower()
            if name.endswith("_env"):  # names a variable, holds no secret
                continue
            if _SECRET_NAME.match(name):
                yield key, str(key)
            elif name not in cls.model_fields and not close_names(name, cls.model_fields):
                close = close_names(name, _SECRET_NAMES, cutoff=_SECRET_LIKENESS)
                if close and isinstance(item, str) and (len(name) >= _SHORT_SECRET_KEY or _looks_like_a_secret(item)):
                    yield key, f"{key} ({did_you_mean(close)})"

    @property
    def defaulted_limits(self) -> list[str]:
        """``rpm`` and ``tpm`` where left at ragscore's defaults (Groq's free tier): not set in the suite nor on the
        command line, so assumed of whichever provider (a suite read back from a run's store sets every field)."""
        return [name for name in ("rpm", "tpm") if name not in self.model_fields_set]

    @property
    def is_reasoning(self) -> bool:
        """Whether the model is called as a reasoning model: as ``reasoning`` says, else guessed for OpenAI's
        o-series and gpt-5, which refuse ``max_tokens`` and temperature 0."""
        if self.reasoning is not None:
            return self.reasoning
        return self.provider == "openai" and bool(_OPENAI_REASONING.match(self.model))


#: (least, most) wall-clock seconds of one sandboxed program: below half a second the sandbox cannot start it, and
#: a chunk of code tests must fit the code queue's time limit (a program of 10 minutes has a queue of its own to
#: itself at most).
SANDBOX_TIMEOUT_S = (0.5, 600.0)
#: (least, most) MiB of address space of one sandboxed program: below 32 the interpreter (and the sandbox's own
#: helper) cannot start; above 1 TiB is no limit.
SANDBOX_MEMORY_MB = (32, 1_048_576)


class SandboxConfig(BaseModel):
    """Limits for code_test validators."""

    model_config = ConfigDict(extra="forbid")

    #: ``auto`` (docker when an engine answers, else local), ``local`` (bubblewrap) or ``docker``.
    backend: Literal["auto", "local", "docker"] = "auto"
    timeout_s: float = Field(default=10, ge=SANDBOX_TIMEOUT_S[0], le=SANDBOX_TIMEOUT_S[1])
    memory_mb: int = Field(default=256, ge=SANDBOX_MEMORY_MB[0], le=SANDBOX_MEMORY_MB[1])


#: Row fields a target's reply may fill.
TARGET_FIELDS = ("answer", "contexts", "citations", "retrieved_doc_ids", "evidence_sentences")
#: Those it fills from its retrieval: a target that fills neither is an LLM alone (``TargetConfig.retrieves``).
RETRIEVAL_FIELDS = ("contexts", "retrieved_doc_ids")


class TargetResponseMap(BaseModel):
    """Where each row field is found in the target's JSON reply: a path such as ``data.answer``,
    ``contexts[*].text`` or ``hits[0].id`` (``[*]`` maps over a list). None: the field is not filled."""

    model_config = ConfigDict(extra="forbid")

    answer: str | None = "answer"
    contexts: str | None = "contexts"
    citations: str | None = None
    retrieved_doc_ids: str | None = None
    evidence_sentences: str | None = None


class TargetConfig(BaseModel):
    """The system under test: an HTTP endpoint (``url``) or a Python function (``callable``,
    ``module:function``) asked every question before scoring. Secrets come from the environment only
    (``auth_env`` names the variable holding the token)."""

    model_config = ConfigDict(extra="forbid")

    #: The name its items carry (``system``); required when a suite has several targets.
    system: str | None = None
    url: str | None = None
    _url = field_validator("url")(no_secret_in_url)
    callable: str | None = Field(default=None, pattern=r"^[\w.]+:[\w.]+$")
    method: Literal["POST", "GET"] = "POST"
    #: JSON body (GET: query parameters). ``"{field}"`` alone keeps the row value's type; inside a longer
    #: string it is formatted in. Fields: any row field (``id``, ``question``, ``metadata.lang`` ...).
    request: dict[str, Any] = Field(default_factory=lambda: {"question": "{question}"})
    _request = field_validator("request")(_no_secret_in_request)
    headers: dict[str, str] = Field(default_factory=dict)
    _headers = field_validator("headers")(_no_secret_headers)
    auth_env: str | None = None
    _auth_env = field_validator("auth_env")(env_var_name)
    auth_header: str = "Authorization"
    auth_scheme: str = "Bearer"
    #: Where the ``auth_env`` token goes: a header (``auth_header``, with ``auth_scheme``), or as it is into the
    #: query string or the JSON body under ``auth_param`` (APIs keyed by ``?key=`` or ``{"api_key": ...}``).
    auth_in: Literal["header", "query", "body"] = "header"
    auth_param: str | None = Field(default=None, min_length=1, max_length=128)
    response: TargetResponseMap = Field(default_factory=TargetResponseMap)
    #: Requests per minute, shared by every target worker of the cluster (None: no limit).
    rpm: int | None = Field(default=None, gt=0)
    #: ``even``: at most ceil(rpm / 60) requests per second too (:data:`Pace`).
    pace: Pace = "burst"
    _pace = field_validator("pace")(_paced_rpm())
    #: Calls in flight per target task.
    concurrency: int = Field(default=8, gt=0, le=256)
    timeout_s: float = Field(default=60.0, gt=0)
    #: Tries per question (the first included) for 5xx, timeouts and connection errors.
    attempts: int = Field(default=3, ge=1, le=20)
    #: 429 replies one question waits out (its ``retry-after``, else the default pause), not counted in ``attempts``;
    #: one more fails the question, naming its 429s.
    max_429s: int = Field(default=20, ge=0, le=1000)
    #: Seconds one question may take, its tries and their waits together (429 pauses, backoffs): past it the question
    #: fails, saying how long it was asked and why; the others go on. A call in flight is not cut (``timeout_s`` is).
    #: Counted in each delivery of its task (a resume or a redelivery asks afresh), and bounded by the time left to its
    #: task's soft time limit, which the task keeps itself (thread pool: no Celery time limit): one not below that limit
    #: (780 s) is never given, and is refused for a new run (:func:`orchestrator.runner.check_question_time`).
    max_seconds_per_question: float = Field(default=600.0, gt=0)
    #: Consecutive failed questions that stop calling this target for the run (the circuit breaker).
    breaker_failures: int = Field(default=10, ge=1)
    #: Reuse replies cached in Redis for the same request (a re-run pays for no call twice).
    cache: bool = True

    _system = field_validator("system")(_system_name)

    @model_validator(mode="after")
    def _one_kind(self) -> TargetConfig:
        if (self.url is None) == (self.callable is None):
            raise ValueError("a target needs exactly one of 'url' or 'callable'")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"a target url must start with http:// or https://, got {self.url!r}")
        self._check_auth_place()
        if self.method == "GET":
            nested = [key for key, value in self.request.items() if isinstance(value, dict)]
            if nested:
                raise ValueError(
                    f"a GET target sends its request as query parameters, which cannot hold the mapping "
                    f"{nested[0]!r}: flatten it or use method POST"
                )
        return self

    def _check_auth_place(self) -> None:
        """``auth_in: query|body`` needs the token (``auth_env``) and the name it goes under (``auth_param``), one
        the request does not write itself; ``auth_param`` means nothing for a header."""
        if self.auth_in == "header":
            if self.auth_param is not None:
                raise ValueError("auth_param names the query parameter or body field of auth_in: query or body; a "
                                 "header's name is auth_header")  # fmt: skip
            return
        if self.callable is not None:
            raise ValueError("auth_in is where an HTTP target sends its token; a callable reads auth_env itself")
        if self.auth_env is None or self.auth_param is None:
            raise ValueError(f"auth_in: {self.auth_in} sends the token of auth_env under the name auth_param: set both")
        if (self.auth_header, self.auth_scheme) != ("Authorization", "Bearer"):  # set: a stored suite has both
            raise ValueError(f"auth_header and auth_scheme shape a header; auth_in: {self.auth_in} sends the token "
                             "as it is, under auth_param")  # fmt: skip
        in_query = self.auth_in == "query" or self.method == "GET"  # a GET's request is its query string
        url_names = {name for name, _ in parse_qsl(urlsplit(self.url or "").query, keep_blank_values=True)}
        if (in_query and self.auth_param in url_names) or ((not in_query or self.method == "GET")
                                                            and self.auth_param in self.request):  # fmt: skip
            where = "url" if in_query and self.auth_param in url_names else "request"
            raise ValueError(f"the {where} writes {self.auth_param!r} itself, where auth_in: {self.auth_in} puts the "
                             f"token: drop it from the {where}")  # fmt: skip

    @property
    def name(self) -> str:
        """The name in counters, messages and the run store: :func:`target_name`."""
        return target_name(self.system)

    @property
    def retrieves(self) -> bool:
        """Whether its replies fill contexts or retrieved doc ids: a response map naming neither is an LLM alone's
        (its rows are marked :data:`~ragscore_workers.answers.NO_RETRIEVAL`)."""
        return any(getattr(self.response, field) is not None for field in RETRIEVAL_FIELDS)

    @property
    def identity(self) -> str:
        """What a cached reply depends on: the endpoint or function and the method."""
        return f"{self.method} {self.url}" if self.url else f"callable {self.callable}"


#: ``METRIC=VALUE`` or ``METRIC:ci_low=VALUE`` (``METRIC:mean=VALUE`` spells the default out).
#: ``METRIC[@SYSTEM][:ON]=VALUE``; a system name runs to the first ``:`` or ``=`` (names holding one go in the
#: ``{metric, system, min}`` form).
_GATE_TEXT = re.compile(r"^\s*([\w.\-]+)\s*(?:@\s*([^:=\s][^:=]*?)\s*)?(?::\s*(\w+)\s*)?=\s*(\S+)\s*$")


class GateSpec(BaseModel):
    """A CI gate: the run's ``metric`` output must reach ``min`` on its mean or its ci95 lower bound, over all
    items or (``system``) over one system's.

    Written as ``{metric, min, on, system}`` or as text: ``exact_match=0.8`` (mean >= 0.8),
    ``exact_match:ci_low=0.7`` (lower bound of the 95% interval >= 0.7, so noise does not flip a build) or
    ``exact_match@bm25-llm=0.8`` (the mean of system ``bm25-llm``'s items).
    """

    model_config = ConfigDict(extra="forbid")

    metric: str = Field(min_length=1)
    min: float = Field(allow_inf_nan=False)
    on: Literal["mean", "ci_low"] = "mean"
    system: str | None = Field(default=None, min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        if isinstance(value, dict) and True in value and "on" not in value:
            # YAML 1.1 (PyYAML) reads an unquoted ``on:`` key as the boolean true.
            return {("on" if k is True else k): v for k, v in value.items()}
        if not isinstance(value, str):
            return value
        match = _GATE_TEXT.match(value)
        if match is None:
            raise ValueError(f"gate {value!r} is not METRIC=VALUE, METRIC:ci_low=VALUE or METRIC@SYSTEM=VALUE")
        metric, system, on, threshold = match.groups()
        try:
            number = float(threshold)
        except ValueError:
            raise ValueError(f"gate {value!r}: {threshold!r} is not a number") from None
        return {"metric": metric, "min": number, "on": on or "mean", "system": system}

    def __str__(self) -> str:
        where = f"@{self.system}" if self.system is not None else ""
        return f"{self.metric}{where}{'' if self.on == 'mean' else ':' + self.on}={self.min:g}"


class Suite(BaseModel):
    """A suite file (DESIGN.md §7): which metrics, with which params, on which resources."""

    model_config = ConfigDict(extra="forbid")
    _unknown_judge: tuple[str, ...] = PrivateAttr(default=())

    name: str = "ragscore"
    metrics: list[MetricSpec] = Field(min_length=1)
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    #: Questions per task message, per queue; unset queues use the registry's defaults.
    chunk_size: dict[str, int] = Field(default_factory=dict)
    #: CI gates checked when the run ends (``ragscore run`` exits 3 when one fails); see :class:`GateSpec`.
    gates: list[GateSpec] = Field(default_factory=list)
    #: The system under test, asked every question before scoring (see :class:`TargetConfig`) ...
    target: TargetConfig | None = None
    #: ... or several, each with its ``system`` name: every question is asked of every one.
    targets: list[TargetConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _targets(self) -> Suite:
        if self.target is not None and self.targets:
            raise ValueError("give either 'target' or 'targets', not both")
        if self.targets:
            names = [t.system for t in self.targets]
            if any(not n for n in names):
                raise ValueError("every entry of 'targets' needs a 'system' name")
            if len(set(names)) != len(names):
                raise ValueError(f"target system names must be unique, got {names}")
        return self

    @classmethod
    def stored(cls, text: str | bytes) -> Suite:
        """A suite as a worker reads it from a task message or the run store: written by an orchestrator perhaps newer
        than this worker (a cluster upgraded one part at a time), its judge's and targets' fields this version does not
        know are ignored, with one warning a process naming them (the judge's are kept in :attr:`unknown_judge_fields`:
        a judge setting may change scores, so a worker refuses to judge with them); a bad value of a field it knows is
        refused as ever (ValidationError). A user's suite file is read strictly (:meth:`model_validate`)."""
        data = json.loads(text)
        unknown: list[str] = []
        if isinstance(data, dict):
            data = _known_sections(data, unknown)
        if not unknown:
            return cls.model_validate_json(text)
        _say_ignored(unknown)
        suite = cls.model_validate_json(json.dumps(data))
        suite._unknown_judge = tuple(name for name in unknown if name.startswith("judge."))
        return suite

    @property
    def unknown_judge_fields(self) -> tuple[str, ...]:
        """The judge fields of a stored suite this version does not know (:meth:`stored`): empty for any other."""
        return self._unknown_judge

    @property
    def all_targets(self) -> list[TargetConfig]:
        """The targets asked before scoring, in order (empty: rows are scored as given)."""
        return [self.target] if self.target is not None else list(self.targets)

    @property
    def checks_points(self) -> list[Any] | None:
        """The evaluation points of the suite's ``checks`` metric (its ``params.points``), for rows without their
        own; None when it has none."""
        return next((m.params.get("points") for m in self.metrics if m.name == "checks"), None)

    @field_validator("chunk_size")
    @classmethod
    def _positive_chunks(cls, value: dict[str, int]) -> dict[str, int]:
        queues = [q.value for q in Queue if q is not Queue.DERIVED]
        unknown = sorted(set(value) - set(queues))
        if unknown:
            raise ValueError(f"unknown {noun_names(unknown, 'queue')}; choose from {', '.join(queues)}")
        bad = {q: n for q, n in value.items() if n < 1}
        if bad:
            raise ValueError(f"chunk sizes must be >= 1, got {bad}")
        return value


def _known_sections(data: dict[str, Any], unknown: list[str]) -> dict[str, Any]:
    """A stored suite's ``data`` with its judge and targets cut to the fields this version knows (:func:`_known_fields`;
    those cut added to ``unknown``)."""
    data = dict(data)
    for name, model in (("judge", JudgeConfig), ("target", TargetConfig)):
        if name in data:
            data[name] = _known_fields(data[name], model, name, unknown)
    if isinstance(data.get("targets"), list):
        targets = enumerate(data["targets"])
        data["targets"] = [_known_fields(t, TargetConfig, f"targets[{i}]", unknown) for i, t in targets]
    return data


def _say_ignored(names: list[str]) -> None:
    """Warn of the stored suite's fields ``names`` this version ignores: once a process each."""
    with _IGNORED_LOCK:
        new = [name for name in names if name not in _IGNORED]
        _IGNORED.update(new)
    if new:
        log.warning("ignoring %s of the run's stored suite that this version of ragscore does not know (a newer one "
                    "wrote it; upgrade to use them): %s", noun(len(new), "field"), ", ".join(new))  # fmt: skip


def _known_fields(section: Any, model: type[BaseModel], where: str, unknown: list[str]) -> Any:
    """``section`` (a stored suite's judge or target) without the keys ``model`` has no field for, each added to
    ``unknown`` as ``where.key``; anything but a mapping as it is (its validation says what is wrong)."""
    if not isinstance(section, dict):
        return section
    unknown += [f"{where}.{key}" for key in section if key not in model.model_fields]
    return {key: value for key, value in section.items() if key in model.model_fields}


# --------------------------------------------------------------------------- results


class MetricResult(BaseModel):
    """One metric output for one item. ``score is None`` means unscorable, never zero."""

    score: float | None = None
    passed: bool | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    ms: float = 0.0

    @field_validator("score")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError(f"score must be finite, got {value}")
        return value

    @classmethod
    def unscorable(cls, reason: str, **details: Any) -> MetricResult:
        """The item lacks what this metric needs: recorded with the reason, never averaged as 0."""
        return cls(score=None, details={"reason": reason, **details})

    @classmethod
    def stopped(cls, reason: str, **details: Any) -> MetricResult:
        """Not scored because the run stopped this work (judge circuit breaker, budget): unscorable for the
        summary, but a resume does it again (``details.stopped``; stored with its own status)."""
        return cls(score=None, details={"reason": reason, "stopped": True, **details})

    @classmethod
    def failed(cls, error: str) -> MetricResult:
        """The metric raised or timed out on this item."""
        return cls(score=None, error=error)


class ItemResult(BaseModel):
    """One line of ``items.jsonl``."""

    id: str
    system: str | None = None
    group: str | None = None
    question_type: str | None = None
    #: ``question_fingerprint`` of the row's question (None without one, or from a run before it existed).
    question_sha: str | None = None
    metrics: dict[str, MetricResult] = Field(default_factory=dict)
    errors: list[str] = Field(default_factory=list)


#: Counters of ``summary.target`` per system (always present, 0 when nothing happened; ``breaker`` only once open).
TARGET_COUNTERS = ("calls", "cache_hits", "retries", "rate_limited", "failures")
#: ``summary.target[system]["unfilled_<field>"]``: answered questions whose reply had nothing at that field's path.
UNFILLED_PREFIX = "unfilled_"
#: Judge counters of ``summary.judge`` (cost in the price table's currency; rate_limited = 429s received).
#: usage_estimated: replies that reported no token usage (LocalAI, some gateways), whose tokens and cost were
#: estimated from the text, so that budgets still hold. unpriced_calls: calls of a model the price table lacks
#: (their cost is not in ``cost``: a run without ``prices`` is not free, and its ``cost`` is None: :func:`unpriced`).
JUDGE_COUNTERS = (
    "calls", "cache_hits", "retries", "rate_limited", "tokens_in", "tokens_out", "cost", "parse_failures", "failures",
    "usage_estimated", "unpriced_calls",
)  # fmt: skip


def unpriced(judge: Mapping[str, Any]) -> bool:
    """Whether every judge call of a run's ``judge`` counters was of a model without a price: its cost is unknown,
    not 0 (a run that sent no call, the cache answering, paid nothing)."""
    count = int(float(judge.get("unpriced_calls") or 0))
    return bool(count) and count >= int(float(judge.get("calls") or 0))


class MetricSummary(BaseModel):
    """Dataset-level statistics of one metric output."""

    mean: float | None
    n: int
    ci95: list[float] | None = None
    errors: int = 0
    unscorable: int = 0
    #: Of the unscorable, items the run stopped before scoring them (judge circuit breaker or budget, a cancel):
    #: a resume scores them.
    stopped: int = 0
    #: The first error message seen for this output (cut to 1,000 characters, ending with "…" where it was cut), so
    #: a summary says why.
    first_error: str | None = None
    #: The item that gave ``first_error``: its id, with ``(system NAME)`` where it has a system.
    first_error_item: str | None = None
    #: Why items were unscorable: the most common reasons and how many items gave each (dataset level only).
    unscorable_reasons: dict[str, int] | None = None
    #: Of the scored items, those scored on an input that was empty by design (``details["empty"]``: recall_at_k's
    #: rows that retrieved nothing, an LLM-only system's), which a report tells from misses.
    empty: int = 0


class SystemsNamed(BaseModel):
    """Some of a run's systems: the first few named (in the order first seen) and how many there are."""

    names: list[str] = Field(default_factory=list)
    count: int = 0


class RetrievedSystems(BaseModel):
    """``recall_at_k``'s rows told apart per system, of every system (``by_system`` keeps the first 1,000): those with
    rows that retrieved nothing, and those none of whose rows that retrieved something found a gold id."""

    nothing: SystemsNamed = Field(default_factory=SystemsNamed)
    missed: SystemsNamed = Field(default_factory=SystemsNamed)


class RunSummary(BaseModel):
    """``summary.json``."""

    run_id: str
    suite: str = ""
    state: str = "finished"
    items: int
    #: Items at least one metric output scored.
    scored: int
    #: Of those, the items every metric output scored (None in a summary written before it was counted).
    scored_all: int | None = None
    failed_rows: int = 0
    metrics: dict[str, MetricSummary] = Field(default_factory=dict)
    by_group: dict[str, dict[str, MetricSummary]] = Field(default_factory=dict)
    by_system: dict[str, dict[str, MetricSummary]] = Field(default_factory=dict)
    by_question_type: dict[str, dict[str, MetricSummary]] = Field(default_factory=dict)
    by_category: dict[str, dict[str, MetricSummary]] = Field(default_factory=dict)
    #: ``cost`` is None where every call was of a model without a price (:func:`unpriced`): not known, not free.
    judge: dict[str, Any] = Field(default_factory=lambda: dict.fromkeys(JUDGE_COUNTERS, 0))
    #: Embedding work: texts encoded, cache hits, batched encode calls, worker processes and model loads.
    embedding: dict[str, Any] = Field(default_factory=dict)
    #: Target stage, per system: calls, cache hits, retries, 429s, failures, and ``breaker`` when it opened.
    target: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: compare_answers, where several systems answered one question: wins per system by ``checks`` score
    #: (``{"metric", "questions", "ties", "by_system": {...}}``, see ``aggregate.Wins``); empty otherwise.
    wins: dict[str, Any] = Field(default_factory=dict)
    #: Question ids that two systems or more answered: what ``ragscore compare`` pairs (None in a summary written
    #: before they were counted).
    paired_questions: int | None = None
    #: Per system of ``by_system``, how many of its other systems answered a question id it answered: those ``ragscore
    #: compare --baseline SYSTEM`` pairs with it (None in a summary written before they were counted).
    paired_systems: dict[str, int] | None = None
    #: recall_at_k's systems that retrieved nothing or missed every gold id, of every system (None: no scored row
    #: has a system, or a summary written before they were told: ``by_system`` tells them, the first 1,000).
    retrieved_systems: RetrievedSystems | None = None
    timing: dict[str, Any] = Field(default_factory=dict)

    @field_validator("judge")
    @classmethod
    def _unknown_cost(cls, judge: dict[str, Any]) -> dict[str, Any]:
        """An unpriced run's ``cost`` is None, a summary stored before it was (its ``cost`` 0) read so too: a user
        summing costs across runs does not read it as free."""
        return judge | {"cost": None} if unpriced(judge) else judge
