"""``evidence_overlap``: word overlap of gold vs predicted evidence, each seed special case, and the corpus option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragscore_workers.errors import ConfigError
from ragscore_workers.metrics import _corpus
from ragscore_workers.metrics.evidence import EvidenceParams, evidence_overlap, unicode_words
from ragscore_workers.metrics.registry import RunContext, get_metric
from ragscore_workers.schemas import Row, Suite
from ragscore_workers.scoring import derive, score_rows

DOC = {"S1": "The cat sat", "S2": "on the mat", "S3": "The dog barked loudly", "S4": "Cat, sat."}


def _e(gold: list[str] | None, pred: list[str] | None, sentences: dict[str, str] | None = DOC, **params: str) -> float:
    row = Row(id="x", gold_evidence_sentences=gold, evidence_sentences=pred, sentences=sentences, gold_doc_id="d1")
    return evidence_overlap(row, EvidenceParams(**params)).score  # type: ignore[return-value]


def test_word_overlap_by_hand() -> None:
    # words(G={S1,S2}) = {the, cat, sat, on, mat} (5); words({S3}) = {the, dog, barked, loudly}: shared {the} -> 1/5
    assert _e(["S1", "S2"], ["S3"]) == pytest.approx(1 / 5)
    assert _e(["S1", "S2"], ["S1"]) == pytest.approx(3 / 5)  # {the, cat, sat}
    assert _e(["S1", "S2"], ["S1", "S2", "S3"]) == 1.0
    assert _e(["S3"], ["S1"]) == pytest.approx(1 / 4)  # only "the" of {the, dog, barked, loudly}


def test_words_are_lowercased_whitespace_tokens_punctuation_kept() -> None:
    # words(S4) = {"cat,", "sat."}; words(S1) = {the, cat, sat}: nothing shared, as in the seed
    assert _e(["S4"], ["S1"]) == 0.0


def test_no_gold_ids() -> None:
    assert _e([], []) == 1.0
    assert _e([], ["S1"]) == 0.0


def test_no_gold_words() -> None:
    # IDs the document lacks name no text: no gold words -> 1.0 iff no predicted words
    assert _e(["S9"], []) == 1.0
    assert _e(["S9"], ["S8"]) == 1.0
    assert _e(["S9"], ["S1"]) == 0.0


def test_without_document_text_falls_back_to_ids() -> None:
    assert _e(["S1", "S2"], ["S2", "S3"], sentences=None) == 0.5  # |{S2}| / |{S1, S2}|
    assert _e(["S1", "S2"], [], sentences=None) == 0.0
    row = Row(id="x", gold_evidence_sentences=["S1"], evidence_sentences=["S1"])
    assert evidence_overlap(row, EvidenceParams()).details["method"] == "ids"


def test_absent_fields_are_unscorable() -> None:
    assert _e(None, ["S1"]) is None
    assert _e(["S1"], None) is None


def _write(path: Path, doc: dict | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    sents = [{"sid": sid, "text": text} for sid, text in DOC.items()]
    _write(root / "gold" / "news__a1.txt", {"doc_id": "gold/news__a1", "sentences": sents})
    _write(root / "gold" / "dup.txt", {"doc_id": "gold/dup", "sentences": sents})
    _write(root / "other" / "dup.txt", {"doc_id": "other/dup", "sentences": sents[:1]})
    _write(root / "plain" / "story.txt", "Just a plain text article. Not segmented.")
    _write(tmp_path / "secret.txt", {"sentences": sents})
    return root


def test_corpus_documents_found_by_path_prefixless_id_or_unique_stem(corpus: Path) -> None:
    assert _corpus.corpus_sentences(corpus, "gold/news__a1") == DOC
    assert _corpus.corpus_sentences(corpus, "news__a1") == DOC  # the id with its gold/ folder dropped
    assert _corpus.corpus_sentences(corpus, "other/dup") == {"S1": "The cat sat"}
    assert _corpus.corpus_sentences(corpus, "dup") is None  # two files share the stem: ambiguous
    assert _corpus.corpus_sentences(corpus, "plain/story") is None  # not a sentence-segmented document
    assert _corpus.corpus_sentences(corpus, "../secret") is None  # never leaves the directory
    assert _corpus.corpus_sentences(corpus, "missing") is None
    with pytest.raises(FileNotFoundError):
        _corpus.corpus_sentences(corpus / "nope", "gold/news__a1")


def test_corpus_documents_are_parsed_once_per_process(corpus: Path) -> None:
    _corpus._load.cache_clear()
    first = _corpus.corpus_sentences(corpus, "gold/news__a1")
    again = _corpus.corpus_sentences(corpus, "news__a1")
    assert first is again and _corpus._load.cache_info().hits == 1 and _corpus._load.cache_info().misses == 1


def test_corpus_dir_param_gives_the_same_scores_as_row_sentences(corpus: Path) -> None:
    for gold, pred in [(["S1", "S2"], ["S3"]), (["S9"], ["S1"]), ([], [])]:
        from_row = _e(gold, pred)
        row = Row(id="x", gold_evidence_sentences=gold, evidence_sentences=pred, gold_doc_id="news__a1")
        from_corpus = evidence_overlap(row, EvidenceParams(corpus_dir=str(corpus)))
        assert from_corpus.score == from_row
    assert from_corpus.details["method"] == "empty_gold"
    row = Row(id="x", gold_evidence_sentences=["S1"], evidence_sentences=["S1", "S3"], gold_doc_id="gold/news__a1")
    details = evidence_overlap(row, EvidenceParams(corpus_dir=str(corpus))).details
    assert details["source"] == "corpus:gold/news__a1" and details["method"] == "words"


def test_document_missing_from_corpus_falls_back_to_ids(corpus: Path) -> None:
    row = Row(id="x", gold_evidence_sentences=["S1", "S2"], evidence_sentences=["S1"], gold_doc_id="plain/story")
    result = evidence_overlap(row, EvidenceParams(corpus_dir=str(corpus)))
    assert result.score == 0.5 and result.details["method"] == "ids"
    assert result.details["source"] == "no sentences in corpus for plain/story"


def test_missing_corpus_dir_is_a_per_row_error_not_a_crash(tmp_path: Path) -> None:
    mdef = get_metric("evidence_overlap")
    params = mdef.parse_params({"corpus_dir": str(tmp_path / "absent")})
    rows = [Row(id="a", gold_evidence_sentences=["S1"], evidence_sentences=["S1"], gold_doc_id="d")]
    [scores] = score_rows(rows, [(mdef, params)], RunContext("r", Suite(metrics=["evidence_overlap"])))
    assert scores["evidence_overlap"].score is None and "corpus directory not found" in scores["evidence_overlap"].error


CJK = {"G": "東京は日本の首都です。", "P": "京都は日本の古都です。", "M": "iPhone是苹果的产品", "N": "IPHONE 苹果"}


def test_cjk_text_is_one_whitespace_token_by_default_and_characters_with_the_unicode_tokenizer() -> None:
    # whitespace (the seed's): each sentence is one token, so related sentences share nothing
    assert _e(["G"], ["P"], sentences=CJK) == 0.0
    # unicode: ideographs one token each, a run of hiragana one token, punctuation dropped;
    # G = {東 京 は 日 本 の 首 都 です} (9), P shares all but 東 and 首 -> 7/9
    assert _e(["G"], ["P"], sentences=CJK, tokenizer="unicode") == pytest.approx(7 / 9)
    # other text by words: M = {iphone 是 苹 果 的 产 品}; N = {iphone 苹 果} -> 3/7, and all of N's 3 in M
    assert _e(["M"], ["N"], sentences=CJK, tokenizer="unicode") == pytest.approx(3 / 7)
    assert _e(["N"], ["M"], sentences=CJK, tokenizer="unicode") == 1.0
    assert _e(["N"], ["M"], sentences=CJK) == 0.0  # whitespace: "苹果" is no token of M's one token


def test_unicode_tokenizer_takes_words_without_punctuation_and_normalises_width() -> None:
    doc = {"a": "Cat, sat.", "b": "The cat sat", "c": "ｃａｔ ＳＡＴ", "d": "Hindi: नमस्ते दुनिया", "e": "नमस्ते"}
    assert _e(["a"], ["b"], sentences=doc, tokenizer="unicode") == 1.0  # {cat, sat}; whitespace: 0 (test above)
    assert _e(["a"], ["c"], sentences=doc, tokenizer="unicode") == 1.0  # full-width letters are letters (NFKC)
    assert _e(["e"], ["d"], sentences=doc, tokenizer="unicode") == 1.0  # a word's combining vowel signs stay in it
    assert _e(["S1", "S2"], ["S3"], tokenizer="unicode") == pytest.approx(1 / 5)  # spaced text: as whitespace


@pytest.mark.parametrize("value", ["jieba", "Unicode", "", 1])
def test_an_unknown_tokenizer_is_refused_naming_the_choices(value: object) -> None:
    with pytest.raises(
        ConfigError, match=r"Bad params for metric 'evidence_overlap': tokenizer: .*'whitespace'.*'unicode'"
    ):
        get_metric("evidence_overlap").parse_params({"tokenizer": value})
    assert get_metric("evidence_overlap").parse_params({"tokenizer": "unicode"}).tokenizer == "unicode"  # type: ignore[attr-defined]


def test_combined_takes_the_unicode_tokenized_evidence_score() -> None:
    evidence, combined = get_metric("evidence_overlap"), get_metric("combined")
    row = Row(id="x", gold_evidence_sentences=["G"], evidence_sentences=["P"], sentences=CJK)
    suite = Suite(metrics=[{"name": "evidence_overlap", "params": {"tokenizer": "unicode"}}])
    [scores] = score_rows([row], [(evidence, evidence.parse_params({"tokenizer": "unicode"}))], RunContext("r", suite))
    stored = {"rubric_judge": {"score": 1.0}, "evidence_overlap": scores["evidence_overlap"].model_dump()}
    assert derive(stored, [(combined, combined.parse_params({}))])["combined"].score == pytest.approx(0.5 + 0.5 * 7 / 9)


def test_unicode_words_keep_apostrophes_between_letters_and_points_between_digits() -> None:
    text = "Don't stop: 3.5 km, 1,000 people; 2,a 'quoted' ＣＡＦÉ 東京"
    assert unicode_words(text) == [
        "don't",
        "stop",
        "3.5",
        "km",
        "1,000",
        "people",
        "2",
        "a",
        "quoted",
        "café",
        "東",
        "京",
    ]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("猫が寝ています。", ["猫", "が", "寝", "ています"]),  # a run of hiragana is one token, each ideograph one
        ("雨が降っています。", ["雨", "が", "降", "っています"]),
        ("コーヒーを飲む", ["コーヒー", "を", "飲", "む"]),  # a run of katakana, with ー, is one token
        ("東京タワーは高い", ["東", "京", "タワー", "は", "高", "い"]),
        ("ｺｰﾋｰとお茶", ["コーヒー", "とお", "茶"]),  # half-width katakana is full-width after NFKC
        ("カタカナ・ひらがな", ["カタカナ", "ひらがな"]),  # the middle dot is punctuation
        ("すごーい", ["すごーい"]),  # ー lengthens the kana before it, hiragana too
        ("ゝゞとヽヾ", ["ゝゞと", "ヽヾ"]),  # the kana iteration marks are of their script
        ("iPhoneは苹果的产品", ["iphone", "は", "苹", "果", "的", "产", "品"]),
        ("日々", ["日", "々"]),
    ],
)
def test_unicode_words_take_a_run_of_kana_as_one_token_and_each_ideograph_as_one(text: str, words: list[str]) -> None:
    assert unicode_words(text) == words


def test_unrelated_cjk_sentences_share_only_their_function_characters() -> None:
    # 猫が寝ています (a cat sleeps) vs 雨が降っています (it rains): {猫 が 寝 ています} share only が -> 1/4
    # (one token per kana: {猫 が 寝 て い ま す} shared が て い ま す -> 5/7)
    doc = {"cat": "猫が寝ています。", "rain": "雨が降っています。"}
    assert _e(["cat"], ["rain"], sentences=doc, tokenizer="unicode") == pytest.approx(1 / 4)
    # Chinese, one token per ideograph, shares its function characters 我 的 在 (the docs' caveat) -> 3/6
    doc = {"cat": "我的猫在睡觉。", "book": "我的书在桌上。"}
    assert _e(["cat"], ["book"], sentences=doc, tokenizer="unicode") == pytest.approx(3 / 6)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Don’t", ["don't"]),  # a curly apostrophe (U+2019) inside a word is the straight one
        ("don‘t", ["don't"]),  # so is a left single quotation mark (U+2018) written for it
        ("don't", ["don't"]),
        ("l’été", ["l'été"]),
        ("‘quoted’ text", ["quoted", "text"]),  # quotation marks around a word stay punctuation
        ("rock ’n’ roll", ["rock", "n", "roll"]),
    ],
)
def test_unicode_words_write_an_apostrophe_inside_a_word_straight(text: str, words: list[str]) -> None:
    assert unicode_words(text) == words


def test_curly_and_straight_apostrophes_share_their_words() -> None:
    doc = {"curly": "Don’t stop", "straight": "don't stop"}
    assert _e(["curly"], ["straight"], sentences=doc, tokenizer="unicode") == 1.0
