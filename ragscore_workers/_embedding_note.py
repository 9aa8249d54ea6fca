"""The embedding model's note in the Redis cache (:func:`._embedding_cache.note_key`): what a worker whose texts are all
cached needs of the model, had without loading it, and the checks that a note is of the model's files.

A worker that loads the model writes (:func:`note_of`) its vector length and piece limit, digests of its tokenizer (as
transformers set it up) and of its JSON config files, and the versions of :data:`NOTE_LIBRARIES` it ran. A later worker
reads the model's ``tokenizer.json`` alone (:func:`fast_tokenizer`) and trusts the note's length and limit only where
the digests are those of its own files and the versions its own (:func:`noted_shape`): its pieces are then the model's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "NOTE_LIBRARIES",
    "fast_pieces",
    "fast_tokenizer",
    "files_digest",
    "note_of",
    "noted_shape",
    "tokenizer_digest",
]

#: The libraries that make a model of its files (how transformers sets its tokenizer up, how sentence-transformers reads
#: its piece limit): a note is trusted only by a worker with the versions of the worker that wrote it.
NOTE_LIBRARIES = ("sentence-transformers", "transformers", "tokenizers")


def _library_versions() -> dict[str, str]:
    """The installed versions of :data:`NOTE_LIBRARIES` (read from their metadata: nothing imported)."""
    from importlib.metadata import PackageNotFoundError, version

    versions: dict[str, str] = {}
    for name in NOTE_LIBRARIES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = ""
    return versions


def fast_tokenizer(path: Path) -> Any:
    """``tokenizer.json`` at ``path`` as a ``tokenizers.Tokenizer`` without truncation or padding (a quarter of a
    second, where the model takes seconds)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def fast_pieces(tokenizer: Any) -> Callable[[list[str]], list[int]]:
    """How many pieces a :func:`fast_tokenizer` makes of each text (no [CLS] or [SEP]):
    :attr:`ragscore_workers.embedding.Encoder.pieces`."""

    def pieces(texts: list[str]) -> list[int]:
        return [len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False)]

    return pieces


def tokenizer_digest(tokenizer: Any) -> str:
    """sha256 of a ``tokenizers.Tokenizer``'s whole definition but its truncation and padding (which the model's
    encode calls set, and :func:`fast_tokenizer` turns off): equal digests, equal pieces."""
    spec = json.loads(tokenizer.to_str())
    spec.pop("truncation", None)
    spec.pop("padding", None)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def files_digest(files: Iterable[tuple[str, str]]) -> str:
    """sha256 of ``(relative path, sha256 of its bytes)`` pairs: the model's JSON files (configs and tokenizer: where
    its vector length and piece limit come from)."""
    digest = hashlib.sha256()
    for name, file_digest in files:
        digest.update(f"{name}\0{file_digest}\n".encode("utf-8", "replace"))
    return digest.hexdigest()


def note_of(dim: int, max_pieces: int, tokenizer: Any, configs: str) -> dict[str, Any]:
    """The note of a loaded model: its vector length, piece limit, its ``tokenizers.Tokenizer`` (as transformers set it
    up) and :func:`files_digest` of its JSON files."""
    return {"dim": dim, "max_pieces": max_pieces, "tokenizer": tokenizer_digest(tokenizer), "configs": configs,
            "libraries": _library_versions()}  # fmt: skip


def noted_shape(note: dict[str, Any], tokenizer: Any, configs: str) -> tuple[int, int] | None:
    """The vector length and piece limit ``note`` says, where it is of the model whose :func:`fast_tokenizer` and
    :func:`files_digest` of JSON files are ``tokenizer`` and ``configs`` and of this worker's library versions; None
    where it is not, or is not a note a worker writes (the model is loaded then)."""
    dim, max_pieces = note.get("dim"), note.get("max_pieces")
    if not (type(dim) is int and type(max_pieces) is int and dim > 0 and max_pieces > 0):
        return None
    if note.get("libraries") != _library_versions():  # another worker's tokenizer set-up and piece limit may differ
        return None
    if note.get("tokenizer") != tokenizer_digest(tokenizer) or note.get("configs") != configs:
        return None
    return dim, max_pieces
