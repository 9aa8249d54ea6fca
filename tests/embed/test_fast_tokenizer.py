"""The model's ``tokenizer.json`` read alone (what a worker whose texts are all cached counts pieces with, the model
not loaded) cuts contexts into the same windows and flags the same texts as truncated as the loaded model's own
tokenizer, on the test datasets and on hostile text."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragscore_workers._embedding_note import fast_pieces, fast_tokenizer, tokenizer_digest
from ragscore_workers.embedding import Encoder, get_encoder
from ragscore_workers.metrics.embedding_metrics import _cut_windows
from ragscore_workers.schemas import EmbeddingConfig

from ..support import ROOT

pytestmark = pytest.mark.integration

HOSTILE = [
    "",
    " ",
    "\n\t\r",
    "Café naïve façade résumé Ångström Œuvre",
    "e\u0301\u0301 combining marks, \u200bzero\u200dwidth\ufeff joiners",
    "emoji 👩‍👩‍👧‍👦 🇫🇷 🤖 and a lone surrogate \ud83d cut by a UTF-16 slicer",
    "مرحبا بالعالم שלום עולם mixed RTL",
    "控制字符\x00\x01\x1f 与 [CLS] [SEP] [MASK] [PAD] [UNK] 特殊标记",
    "東京都は日本の首都であり" * 300,  # CJK without spaces: a word per character
    "x" * 5000,  # one very long word
    "https://example.com/a/b?c=d&e=f#g " * 400,
    "The committee reviewed every proposal in detail before the vote. " * 2000,  # ~130,000 characters
    "Über straße ĳ ﬁ ﬀ ℌ ① ² ½ fullwidth ＡＢＣ１２３",
]


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _dataset_texts() -> list[str]:
    """Every string of the test datasets and examples (questions, answers, contexts, whole corpus documents)."""
    texts: list[str] = []
    for path in sorted([*(ROOT / "tests" / "data").rglob("*"), *(ROOT / "examples").rglob("*")]):
        if path.suffix == ".txt":
            texts.append(path.read_text(encoding="utf-8"))
        elif path.suffix == ".json":
            texts += _strings(json.loads(path.read_text(encoding="utf-8")))
        elif path.suffix == ".jsonl":
            texts += [
                s for line in path.read_text(encoding="utf-8").splitlines() if line for s in _strings(json.loads(line))
            ]
    return list(dict.fromkeys(texts))


def _two_encoders() -> tuple[Encoder, Encoder]:
    """The loaded model's encoder (its tokenizer's truncation set by an encode call, as in a worker) and one counting
    pieces with its ``tokenizer.json`` alone."""
    model = get_encoder(EmbeddingConfig(device="cpu"))
    model.encode(["a first encode sets the model's truncation and padding"], 8)
    fast = Encoder(model.source, model.device, model.precision, model.dim, model.max_pieces,
                   fast_pieces(fast_tokenizer(Path(model.source.path) / "tokenizer.json")))  # fmt: skip
    return model, fast


def test_the_tokenizer_file_alone_cuts_and_flags_every_text_as_the_loaded_model_does() -> None:
    model, fast = _two_encoders()
    texts = [*_dataset_texts(), *HOSTILE]
    assert len(texts) > 300 and sum(model.text_pieces(t) > model.max_pieces for t in texts) >= 20  # long ones too
    assert fast.word_pieces(texts) == model.word_pieces(texts)
    words = [m.group() for t in texts for m in re.finditer(r"\w+|[^\w\s]", t)]
    assert fast.word_pieces(words) == model.word_pieces(words)  # what _cut_windows counts
    for text in texts:
        assert _cut_windows(text, fast) == _cut_windows(text, model), text[:80]
        assert (fast.text_pieces(text) > fast.max_pieces) == (model.text_pieces(text) > model.max_pieces)


def test_the_notes_tokenizer_digest_is_the_same_for_the_file_and_the_loaded_models_tokenizer() -> None:
    """The digest a worker checks the note by, before it trusts the file's pieces to be the model's."""
    model, _ = _two_encoders()
    tokenizer = fast_tokenizer(Path(model.source.path) / "tokenizer.json")
    assert tokenizer_digest(tokenizer) == tokenizer_digest(model.model.tokenizer.backend_tokenizer)
    tokenizer.enable_truncation(max_length=128)  # what the model's encode calls set: not part of the definition
    assert tokenizer_digest(tokenizer) == tokenizer_digest(model.model.tokenizer.backend_tokenizer)
    lowercase = json.loads(tokenizer.to_str())
    lowercase["normalizer"]["lowercase"] = False  # another tokenizer: another digest
    from tokenizers import Tokenizer

    assert tokenizer_digest(Tokenizer.from_str(json.dumps(lowercase))) != tokenizer_digest(tokenizer)
