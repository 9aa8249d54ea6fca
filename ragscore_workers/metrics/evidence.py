"""``evidence_overlap`` (document-grounded QA framework): word overlap of gold vs predicted evidence.

e = |words(G) ∩ words(P)| / |words(G)|, where words(X) is the set of lower-cased, whitespace-split
tokens of the text of the sentences whose IDs are in X (IDs the document lacks contribute nothing).
The text comes from the row's ``sentences`` map, else, with ``corpus_dir`` set, from the document
``gold_doc_id`` names in that directory (see ``_corpus``). The seed's special cases, in this order:

1. no gold IDs (``[]``): 1.0 if no predicted IDs, else 0.0;
2. no gold words (the IDs name no text): 1.0 if no predicted words, else 0.0;
3. no document text at all: fall back to |G ∩ P| / |G| on the IDs themselves.

An absent ``gold_evidence_sentences`` or ``evidence_sentences`` field is unscorable (the latter by design in a row an
LLM alone answered, ``citation.no_evidence``).

Param ``tokenizer`` (ragscore's, opt-in): ``whitespace`` (default) is the seed's ``text.lower().split()``, so a
sentence of Chinese or Japanese, written without spaces, is one token; ``unicode`` (:func:`unicode_words`) takes
each Han ideograph as a token of its own, a run of hiragana or of katakana as one, and other text by words
(letters, digits and combining marks, punctuation dropped), after NFKC normalisation. Character-level overlap of
CJK text is inflated by shared function characters (particles, common ideographs), as English stopwords would be.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..schemas import CONTEXTS_WITHOUT_TEXT, MetricResult, Queue, Row
from ._corpus import corpus_sentences
from .citation import id_set, no_evidence
from .registry import register, unset_means

__all__ = ["EvidenceParams", "evidence_overlap", "overlap_score", "unicode_words", "words_of"]


#: How a sentence's text becomes words: the seed's whitespace split, or :func:`unicode_words`.
Tokenizer = Literal["whitespace", "unicode"]


class EvidenceParams(BaseModel):
    """``corpus_dir``: directory of sentence-segmented documents, used when a row has no ``sentences``;
    ``tokenizer``: ``whitespace`` (the seed's) or ``unicode`` (a Han ideograph or a kana run one token)."""

    model_config = ConfigDict(extra="forbid")

    corpus_dir: str | None = Field(default=None, json_schema_extra=unset_means("the rows' own sentences only"))
    tokenizer: Tokenizer = "whitespace"


#: Han ideographs (unified, extensions A-G, compatibility) and the ideographic iteration / closing marks and
#: number zero (``々 〆 〇``): one token each.
_HAN = re.compile("[\u3005-\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]")
#: Hiragana and katakana (with the katakana extension): a run of either script is one token.
_HIRAGANA = re.compile("[\u3040-\u309f]")
_KATAKANA = re.compile("[\u30a0-\u30ff\u31f0-\u31ff]")
#: The prolonged sound mark, which lengthens the kana before it (``コーヒー``, ``すごーい``).
_PROLONG = "\u30fc"
#: Apostrophes that join the letters around them, written as the straight one (``don’t`` is ``don't``).
_APOSTROPHES = "'\u2018\u2019"
#: Runs of these kinds of character are one token each.
_RUNS = ("word", "hiragana", "katakana")


def _kind(ch: str) -> str:
    """``han``, ``hiragana``, ``katakana``, ``prolong`` (``ー``), ``word`` (another letter, a digit), ``mark``
    (combining) or ``other``."""
    kind = unicodedata.category(ch)[0]
    if kind not in "LN":
        return "mark" if kind == "M" else "other"
    if _HAN.match(ch):
        return "han"
    if ch == _PROLONG:
        return "prolong"
    if _HIRAGANA.match(ch):
        return "hiragana"
    return "katakana" if _KATAKANA.match(ch) else "word"


def unicode_words(text: str) -> list[str]:
    """Lower-cased tokens of ``text`` after NFKC (full-width ``ＡＢ`` is ``ab``, half-width ``ｺｰﾋｰ`` ``コーヒー``):
    each Han ideograph one token; a run of hiragana, a run of katakana (``ー`` in the run of the kana before it, else
    katakana) and a run of other letters, digits and combining marks (a vowel sign stays in its word; so do an
    apostrophe between letters, a curly ``’`` or ``‘`` written straight, and a point or comma between digits:
    ``don't``, ``3.5``, ``1,000``) one token each; punctuation, symbols and spaces separate tokens and are dropped."""
    chars = unicodedata.normalize("NFKC", text).lower()
    kinds = [_kind(ch) for ch in chars] + ["other"]
    out: list[str] = []
    word: list[str] = []
    run = ""
    for i, ch in enumerate(chars):
        kind = kinds[i]
        if kind == "prolong":
            kind = run if run in ("hiragana", "katakana") else "katakana"
        joins = run == "word" and (
            (ch in _APOSTROPHES and kinds[i + 1] == "word")
            or (ch in ".," and chars[i - 1].isdigit() and chars[i + 1 : i + 2].isdigit())
        )
        if word and (kind == run or kind == "mark" or joins):
            word.append("'" if joins and ch in _APOSTROPHES else ch)
            continue
        if word:
            out.append("".join(word))
            word, run = [], ""
        if kind == "han":
            out.append(ch)
        elif kind in _RUNS:
            word, run = [ch], kind
    if word:
        out.append("".join(word))
    return out


def words_of(sentences: dict[str, str], ids: set[str], tokenizer: Tokenizer = "whitespace") -> set[str]:
    """Lower-cased tokens of the sentences named by ``ids``: whitespace-split, or :func:`unicode_words`."""
    split = unicode_words if tokenizer == "unicode" else lambda text: text.lower().split()
    return {w for sid in ids if sid in sentences for w in split(sentences[sid])}


def overlap_score(
    gold: set[str], predicted: set[str], sentences: dict[str, str] | None, tokenizer: Tokenizer = "whitespace"
) -> tuple[float, dict]:
    """The evidence score and how it was reached (``method``: ``empty_gold``, ``words`` or ``ids``)."""
    if not gold:
        return (0.0 if predicted else 1.0), {"method": "empty_gold"}
    if not sentences:
        hits = len(gold & predicted)
        return hits / len(gold), {"method": "ids", "matched": hits}
    gold_words, pred_words = words_of(sentences, gold, tokenizer), words_of(sentences, predicted, tokenizer)
    details = {
        "method": "words",
        "gold_words": len(gold_words),
        "pred_words": len(pred_words),
        "shared_words": len(gold_words & pred_words),
        "unknown_ids": sorted((gold | predicted) - sentences.keys()),
    }
    if not gold_words:
        return (0.0 if pred_words else 1.0), details
    return len(gold_words & pred_words) / len(gold_words), details


def _document(row: Row, params: EvidenceParams) -> tuple[dict[str, str] | None, str]:
    if row.sentences:
        return row.sentences, "row"
    if not params.corpus_dir:
        return None, "none"
    gold_doc = row.gold_doc_id if isinstance(row.gold_doc_id, str) else next(iter(row.gold_doc_id or ()), None)
    if not gold_doc:
        return None, "no gold_doc_id"
    found = corpus_sentences(params.corpus_dir, gold_doc)
    return found, f"corpus:{gold_doc}" if found else f"no sentences in corpus for {gold_doc}"


@register("evidence_overlap", Queue.CPU, params=EvidenceParams, needs=("gold_evidence_sentences", "evidence_sentences"),
          reads=("sentences", "gold_doc_id", CONTEXTS_WITHOUT_TEXT, "retrieved_doc_ids"))  # fmt: skip  # no_evidence
def evidence_overlap(row: Row, params: EvidenceParams) -> MetricResult:
    """Share of the gold evidence's words that the predicted evidence sentences contain."""
    if row.gold_evidence_sentences is None:
        return MetricResult.unscorable("no gold_evidence_sentences")
    if row.evidence_sentences is None:
        return no_evidence(row)
    gold, predicted = id_set(row.gold_evidence_sentences), id_set(row.evidence_sentences)
    sentences, source = _document(row, params) if gold else (None, "none")
    score, details = overlap_score(gold, predicted, sentences, params.tokenizer)
    return MetricResult(score=score, details={**details, "source": source})
