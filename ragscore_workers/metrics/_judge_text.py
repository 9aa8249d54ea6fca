"""Judge prompts and reply parsers (pure functions; the metrics in ``judge_metrics.py`` wire them in).

Dual-judge prompts follow the AI-Q / Ragas NVIDIA metrics in spirit (two differently worded judges, the
second presenting the two texts in the other order), written anew. A template's ``VERSION`` is part of
the reply-cache key: change it whenever the wording changes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ANSWER_ACCURACY",
    "CONTEXT_RELEVANCE",
    "DEFAULT_RUBRIC",
    "GROUNDEDNESS",
    "RATING_TOKENS",
    "RUBRIC_VERSION",
    "DualTemplates",
    "answer_part",
    "parse_rating",
    "parse_rubric",
    "rubric_prompt",
]

#: The rating must be among the first this-many tokens of a reply.
RATING_TOKENS = 8
# Numbers (with decimals or thousands separators, and a sign: "-", "+" or the minus sign U+2212) are one token, so
# "10", "4.0" and "-1" are read whole and never as a rating of 1, 4 or 0. Words are one token (superscripts and
# circled digits, "²" "①", are letters here: not decimal digits); any other character is one.
_SIGNS = "-+\u2212"
#: A number with more digits is no rating (and int() refuses a run of over 4,300 digits, a degenerate reply).
_MAX_RATING_DIGITS = 9
_TOKEN = re.compile(rf"[{_SIGNS}]?\d+(?:[.,]\d+)*|[^\W\d_]+|\S")


#: A reasoning model's thinking before its answer (DeepSeek-R1 distills, Qwen3 and QwQ on Groq, vLLM, Ollama).
_THINKING = re.compile(r"<(think|thinking|reasoning)>.*?</\1\s*>", re.S | re.I)
_OPENED = re.compile(r"\s*<(think|thinking|reasoning)>", re.I)
_CLOSED = re.compile(r"</(?:think|thinking|reasoning)\s*>", re.I)


def answer_part(text: str) -> str:
    """A reply without a reasoning model's thinking: ``<think>…</think>`` blocks are dropped, so is all before a
    lone closing tag (some servers drop the opening one), and a reply still thinking when it was cut off (at
    ``max_tokens``) has no answer: ""."""
    text = _THINKING.sub("", text)
    closed = list(_CLOSED.finditer(text))
    if closed:
        text = text[closed[-1].end() :]
    return "" if _OPENED.match(text) else text


def parse_rating(text: str, allowed: frozenset[int]) -> int | None:
    """The rating of a reply (its thinking dropped, see :func:`answer_part`): its first number among the first 8
    tokens, if that is a whole number in ``allowed``; None otherwise (no number, "10", "4.0", "3" on a 0/2/4
    scale)."""
    for token in _TOKEN.findall(answer_part(text))[:RATING_TOKENS]:
        if token[0].isdecimal() or (token[0] in _SIGNS and len(token) > 1):
            whole = token.isdecimal() and len(token) <= _MAX_RATING_DIGITS
            return int(token) if whole and int(token) in allowed else None
    return None


@dataclass(frozen=True)
class DualTemplates:
    """Two judge prompts, the ratings they may give, and the divisor that maps a rating to [0, 1]."""

    version: str
    first: str
    second: str
    allowed: frozenset[int]
    scale: int


ANSWER_ACCURACY = DualTemplates(
    version="answer_accuracy/v1",
    first=(
        "You check a User Answer against a Reference Answer. The Reference Answer answers the Question "
        "correctly and completely.\n"
        "Reply 4 if the User Answer says the same as the Reference Answer in every fact, name, number, date "
        "and unit.\n"
        "Reply 2 if the User Answer agrees with only part of the Reference Answer, or is close but differs in "
        "a detail.\n"
        "Reply 0 if the User Answer contradicts the Reference Answer, is wrong, or does not answer the "
        "Question.\n"
        "Reply with the number alone: 4, 2 or 0. Do not explain.\n\n"
        "Question: {question}\n"
        "User Answer: {answer}\n"
        "Reference Answer: {reference}\n"
        "Rating:"
    ),
    second=(
        "Compare two answers to the same Question. The Reference Answer is known to be right.\n"
        "- 4: the User Answer matches the Reference Answer in all facts, figures, dates and units.\n"
        "- 2: the User Answer matches the Reference Answer only in part.\n"
        "- 0: the User Answer does not match the Reference Answer, is incorrect, or misses the Question.\n"
        "Give only the number (4, 2 or 0), with no justification.\n\n"
        "Question: {question}\n\n"
        "Reference Answer: {reference}\n\n"
        "User Answer: {answer}\n\n"
        "The rating is "
    ),
    allowed=frozenset({0, 2, 4}),
    scale=4,
)

CONTEXT_RELEVANCE = DualTemplates(
    version="context_relevance_judge/v1",
    first=(
        "Decide whether a Context holds the information needed to answer a Question. Judge only from what "
        "the Context and the Question say, not from what you know.\n"
        "Reply 0 if the Context has nothing that helps answer the Question.\n"
        "Reply 1 if the Context helps answer the Question only in part.\n"
        "Reply 2 if the Context holds what is needed to answer the Question.\n"
        "Reply with one number, 0, 1 or 2, and nothing else.\n\n"
        "Question: {question}\n\n"
        "Context: {context}\n\n"
        "Relevance score:"
    ),
    second=(
        "I rate how relevant a retrieved Context is to a Question, using only the two texts below.\n"
        "* 0 means the Context contains no information useful to answer the Question.\n"
        "* 1 means the Context contains some of the information needed.\n"
        "* 2 means the Context contains the information needed to answer the Question.\n"
        "I answer with the score only.\n\n"
        "Context: {context}\n\n"
        "Question: {question}\n\n"
        "The relevance score is "
    ),
    allowed=frozenset({0, 1, 2}),
    scale=2,
)

GROUNDEDNESS = DualTemplates(
    version="groundedness/v1",
    first=(
        "Decide whether a Statement is supported by a Context.\n"
        "Reply 0 if the Context or the Statement is empty, or if the Context does not support the Statement.\n"
        "Reply 1 if the Context supports only part of the Statement.\n"
        "Reply 2 if the Context supports all of the Statement.\n"
        "Reply with one number, 0, 1 or 2, and nothing else.\n\n"
        "Context:\n<{context}>\n\n"
        "Statement:\n<{answer}>\n\n"
        "Groundedness score:"
    ),
    second=(
        "I assess how well a Statement is backed by the Context given with it.\n"
        "* 0: not backed at all, or the Context or the Statement is empty.\n"
        "* 1: partly backed.\n"
        "* 2: fully backed.\n"
        "I give the score alone, without explanation.\n\n"
        "Statement:\n[{answer}]\n\n"
        "Context:\n[{context}]\n\n"
        "The groundedness score is "
    ),
    allowed=frozenset({0, 1, 2}),
    scale=2,
)

RUBRIC_VERSION = "rubric_judge/v1"

#: Used when a row has no ``rubric``.
DEFAULT_RUBRIC: dict[str, Any] = {
    "description": "How correct and complete the model answer is compared with the gold answer.",
    "scale": {
        "1": "Wrong, or does not answer the question.",
        "2": "Mostly wrong; a small part agrees with the gold answer.",
        "3": "Partly right; important parts are missing or wrong.",
        "4": "Right, with a minor omission or imprecision.",
        "5": "Fully right and complete.",
    },
}

_RUBRIC = (
    "You grade a model's answer to a question, comparing it with a gold answer and following a rubric.\n\n"
    "Question: {question}\n\n"
    "Gold answer: {reference}\n\n"
    "Rubric: {description}\n"
    "Scale:\n{scale}\n\n"
    "Model answer: {answer}\n\n"
    'Reply with a JSON object only: {{"score": <whole number from 1 to 5>, "rationale": "<one or two '
    'sentences>"}}'
)


def rubric_prompt(question: str, reference: str, answer: str, description: str, scale: dict[str, str]) -> str:
    """The rubric judge's prompt; the scale is listed in order of its keys ("1" .. "5")."""
    lines = "\n".join(f"{k}: {v}" for k, v in sorted(scale.items(), key=lambda kv: kv[0]))
    return _RUBRIC.format(question=question, reference=reference, answer=answer, description=description, scale=lines)


def _whole_score(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):  # "4", " 4 ", "4.0": a number written as text
        try:
            value = float(value.strip()) if value.strip().replace(".", "", 1).isdigit() else None
        except ValueError:
            return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and 1 <= value <= 5 else None


def parse_rubric(text: str) -> tuple[int, str] | None:
    """``(score, rationale)`` from the reply (its thinking dropped, see :func:`answer_part`) as JSON, else from
    the text between its first ``{`` and last ``}``; None when neither holds an object with a whole ``score``
    from 1 to 5."""
    text = answer_part(text)
    candidates = [text]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except (ValueError, RecursionError):  # RecursionError: a reply of a thousand "[" nests too deep
            continue
        if isinstance(data, dict):
            score = _whole_score(data.get("score"))
            if score is not None:
                rationale = data.get("rationale")
                if rationale is None or isinstance(rationale, str):
                    return score, rationale or ""
                return score, json.dumps(rationale, ensure_ascii=False)  # as the judge wrote it, not a repr
    return None
