"""Signed ledger rows: ed25519 over the row's canonical JSON, checked against trusted public keys
(CONTRIBUTING.md, "The ledger"). A signed row carries `"sig": {"alg": "ed25519", "key": <key id>,
"value": <base64>}` over the row without its `sig` (sorted keys, no spaces, UTF-8), so
re-serialising a row (merge-ledger) keeps it valid. Key files: the private key is PKCS#8 PEM (mode
0600, never committed); the public key is one line, `kbase-ed25519 <base64 of the 32 raw bytes>
<comment>`. The key id is the first 16 hex digits of the SHA-256 of the raw public key."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from kbase.errors import KbaseError

TRUSTED_DIR = "trusted-keys"
PUB_PREFIX = "kbase-ed25519"
# trust labels of a row
TRUSTED, SELF_REPORTED, BAD_SIGNATURE = "trusted", "self-reported", "bad-signature"


class SigningError(KbaseError, ValueError):
    """A signing key that cannot be read or used; nothing is run or recorded."""

    code = "signing"


def _crypto():  # imported on first use: a search that reads no signature never needs it
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    return InvalidSignature, serialization, ed25519.Ed25519PrivateKey, ed25519.Ed25519PublicKey


def canonical_payload(row: dict) -> bytes:
    body = {k: v for k, v in row.items() if k != "sig"}
    return json.dumps(
        body, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
    ).encode("utf-8")


def key_id(raw_public: bytes) -> str:
    return hashlib.sha256(raw_public).hexdigest()[:16]


def keygen(path: Path, comment: str = "", force: bool = False) -> tuple[Path, Path, str]:
    """Write a private key at `path` (0600) and its public key at `path`.pub; returns the key id."""
    _, serialization, priv_cls, _ = _crypto()
    path = Path(path)
    pub_path = path.with_name(path.name + ".pub")
    if not force and (path.exists() or pub_path.exists()):
        raise SigningError(f"{path} or {pub_path} exists already (pass --force to overwrite)")
    path.parent.mkdir(parents=True, exist_ok=True)
    key = priv_cls.generate()
    fmt = serialization.PrivateFormat.PKCS8
    pem = key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    os.chmod(path, 0o600)
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    line = f"{PUB_PREFIX} {base64.b64encode(raw).decode()} {comment or path.stem}".strip()
    pub_path.write_text(line + "\n", encoding="utf-8")
    return path, pub_path, key_id(raw)


@dataclass(frozen=True)
class Signer:
    key: object  # Ed25519PrivateKey
    key_id: str

    def sign(self, row: dict) -> dict:
        sig = self.key.sign(canonical_payload(row))  # type: ignore[attr-defined]
        value = base64.b64encode(sig).decode()
        body = {k: v for k, v in row.items() if k != "sig"}
        return {**body, "sig": {"alg": "ed25519", "key": self.key_id, "value": value}}


def signer_from_env() -> Signer | None:
    """The signer named by KBASE_SIGNING_KEY, loaded once (before any snippet runs), or None."""
    path = os.environ.get("KBASE_SIGNING_KEY")
    return load_signer(os.path.realpath(path)) if path else None


@functools.lru_cache(maxsize=4)
def load_signer(path: str) -> Signer:
    _, serialization, priv_cls, _ = _crypto()
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SigningError(f"KBASE_SIGNING_KEY={path}: {exc.strerror or exc}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise SigningError(f"{path}: not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, priv_cls):
        raise SigningError(f"{path}: not an ed25519 key")
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return Signer(key, key_id(raw))


def parse_public(text: str, where: str) -> tuple[str, object]:
    _, _, _, pub_cls = _crypto()
    parts = text.strip().split()
    if len(parts) < 2 or parts[0] != PUB_PREFIX:
        raise SigningError(f"{where}: expected `{PUB_PREFIX} <base64> [comment]`")
    try:
        raw = base64.b64decode(parts[1], validate=True)
        key = pub_cls.from_public_bytes(raw)
    except (ValueError, TypeError) as exc:
        raise SigningError(f"{where}: not an ed25519 public key ({exc})") from None
    return key_id(raw), key


@dataclass
class TrustedKeys:
    keys: dict[str, object]  # key id -> Ed25519PublicKey
    names: dict[str, str]  # key id -> file name
    problems: list[str]

    @property
    def configured(self) -> bool:
        """Any trusted key (or a broken key file, which must not silently disable trust)."""
        return bool(self.keys) or bool(self.problems)

    def check(self, row: dict) -> str:
        """TRUSTED, SELF_REPORTED (unsigned, or signed by a key not trusted) or BAD_SIGNATURE."""
        sig = row.get("sig")
        if not isinstance(sig, dict):
            return SELF_REPORTED
        invalid_signature, *_ = _crypto()
        key = self.keys.get(str(sig.get("key")))
        if key is None:
            return SELF_REPORTED
        try:
            value = base64.b64decode(str(sig.get("value", "")), validate=True)
            key.verify(value, canonical_payload(row))  # type: ignore[attr-defined]
        except (invalid_signature, ValueError, TypeError):
            return BAD_SIGNATURE
        return TRUSTED


def trusted_keys(root: Path) -> TrustedKeys:
    folder = Path(root) / "ledger" / TRUSTED_DIR
    files = sorted(folder.glob("*.pub")) if folder.is_dir() else []
    return read_keys(
        (f"ledger/{TRUSTED_DIR}/{f.name}", functools.partial(f.read_text, encoding="utf-8"))
        for f in files
    )


def read_keys(files: Iterable[tuple[str, Callable[[], str]]]) -> TrustedKeys:
    """The keys of (shown path, its reader) public key files; a file that does not read or
    parse is a problem, kept so that it cannot silently disable trust."""
    keys = TrustedKeys({}, {}, [])
    for shown, read in files:
        try:
            kid, key = parse_public(read(), shown)
        except (SigningError, OSError) as exc:
            keys.problems.append(str(exc))
            continue
        keys.keys[kid], keys.names[kid] = key, Path(shown).name
    return keys


def counts(row: dict, keys: TrustedKeys) -> bool:
    """Whether a row may count toward a status: sandboxed, and trusted when keys are configured."""
    return row.get("isolated") is not False and (not keys.configured or keys.check(row) == TRUSTED)
