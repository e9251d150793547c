"""HTTP basic auth for one user, against a salted scrypt hash.

The password file holds one line, `USER:HASH`, where HASH is in the PHC
string format (`$scrypt$ln=15,r=8,p=1$<salt>$<hash>`, unpadded base64), the
form passlib and other libraries read. Hashing is the standard library's
`hashlib.scrypt`; comparison is `hmac.compare_digest`, whose time does not
depend on where the strings differ.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from pathlib import Path

from wfsched.errors import UsageError

LOG2_N = 15
R = 8
P = 1
SALT_BYTES = 16
HASH_BYTES = 32
_PHC = re.compile(r"^\$scrypt\$ln=(\d+),r=(\d+),p=(\d+)\$([A-Za-z0-9+/]+)\$([A-Za-z0-9+/]+)$")
_USER = re.compile(r"^[^:\s]{1,64}$")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4))


def _scrypt(password: str, salt: bytes, log2_n: int, r: int, p: int, size: int) -> bytes:
    n = 1 << log2_n
    return hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=size, maxmem=256 * n * r + 2**20
    )


def hash_password(password: str) -> str:
    salt = os.urandom(SALT_BYTES)
    digest = _scrypt(password, salt, LOG2_N, R, P, HASH_BYTES)
    return f"$scrypt$ln={LOG2_N},r={R},p={P}${_b64(salt)}${_b64(digest)}"


def check_user(user: str) -> str:
    if not _USER.match(user):
        raise UsageError("user: 1 to 64 characters, no colon and no whitespace")
    return user


@dataclass(frozen=True)
class Credential:
    user: str
    encoded: str

    def matches(self, user: str, password: str) -> bool:
        """Both the user and the password, compared in constant time (a
        wrong user costs the same scrypt as a wrong password)."""
        match = _PHC.match(self.encoded)
        assert match is not None  # checked when the file was read
        log2_n, r, p = (int(match.group(i)) for i in (1, 2, 3))
        salt, expected = _unb64(match.group(4)), _unb64(match.group(5))
        digest = _scrypt(password, salt, log2_n, r, p, len(expected))
        same_user = hmac.compare_digest(user.encode("utf-8"), self.user.encode("utf-8"))
        return hmac.compare_digest(digest, expected) and same_user


def read_password_file(path: Path) -> Credential:
    """The file `wfsched web hash-password` wrote; anything else is exit 2."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--password-file {path}: cannot read it ({exc})") from None
    user, _, encoded = text.partition(":")
    match = _PHC.match(encoded)
    valid = bool(_USER.match(user)) and match is not None
    if match is not None:
        try:
            _unb64(match.group(4))
            _unb64(match.group(5))
        except (binascii.Error, ValueError):
            valid = False
        valid = valid and 1 <= int(match.group(1)) <= 20
    if not valid:
        raise UsageError(
            f"--password-file {path}: not a password file (expected one line USER:$scrypt$...);"
            " make one with `wfsched web hash-password --user NAME FILE`"
        )
    return Credential(user, encoded)


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """(user, password) from an `Authorization: Basic ...` header, or None."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    user, colon, password = decoded.partition(":")
    return (user, password) if colon else None
