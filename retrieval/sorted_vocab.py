"""The BM25 vocabulary as a searcher reads it: its tokens sorted, looked up by binary search
(issue #11). Decoding vocab.index.json (one dict entry per token, ~50k at 6.5k entries) was
~30 ms of every cold `kbase search`, which then looks up a few dozen tokens.

Three files beside vocab.index.json, written with it (build_bm25), which stays the vocabulary of
record (the next build extends it): every token's UTF-8 bytes end to end in byte order (which is
code point order), their offsets, and each token's id.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

KEYS_FILE = "vocab_sorted.bin"
OFFSETS_FILE = "vocab_sorted_offsets.npy"
IDS_FILE = "vocab_sorted_ids.npy"
# a token with a lone surrogate (text read with surrogateescape) is stored and found as well
_ERRORS = "surrogatepass"


def write_sorted(vocab: Mapping[str, int], path: Path) -> None:
    keys = sorted(t.encode("utf-8", _ERRORS) for t in vocab)
    offsets = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum([len(k) for k in keys], out=offsets[1:])
    ids = np.fromiter(
        (vocab[k.decode("utf-8", _ERRORS)] for k in keys), dtype=np.int64, count=len(keys)
    )
    (path / KEYS_FILE).write_bytes(b"".join(keys))
    np.save(path / OFFSETS_FILE, offsets)
    np.save(path / IDS_FILE, ids)


class _Keys:
    """The sorted tokens as a sequence of bytes, for bisect."""

    def __init__(self, data: bytes, offsets: list[int]):
        self.data = data
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> bytes:
        return self.data[self.offsets[i] : self.offsets[i + 1]]


class SortedVocab(Mapping[str, int]):
    """token -> id, as the dict of vocab.index.json answers."""

    def __init__(self, data: bytes, offsets: np.ndarray, ids: np.ndarray):
        self._keys = _Keys(data, offsets.tolist())
        self._ids = ids

    @classmethod
    def read(cls, path: Path, size: int) -> SortedVocab | None:
        """The sorted twin in path, if it is there and holds `size` tokens (else None)."""
        try:
            offsets = np.load(path / OFFSETS_FILE)
            ids = np.load(path / IDS_FILE)
            data = (path / KEYS_FILE).read_bytes()
        except (OSError, ValueError):
            return None
        if len(offsets) != size + 1 or len(ids) != size or int(offsets[-1]) != len(data):
            return None
        return cls(data, offsets, ids)

    def _find(self, token: str) -> int:
        key = token.encode("utf-8", _ERRORS)
        i = bisect.bisect_left(self._keys, key)
        return i if i < len(self._keys) and self._keys[i] == key else -1

    def __contains__(self, token: object) -> bool:
        return isinstance(token, str) and self._find(token) >= 0

    def __getitem__(self, token: str) -> int:
        i = self._find(token) if isinstance(token, str) else -1
        if i < 0:
            raise KeyError(token)
        return int(self._ids[i])

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return (self._keys[i].decode("utf-8", _ERRORS) for i in range(len(self._keys)))
