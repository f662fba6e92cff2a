"""Which cephx key types a local cluster makes, and how a client that cannot read a cluster's keys is named.

Ceph 20 (Tentacle) makes aes256k keys and service tickets by default. Clients before it cannot parse them:
a Ceph 16 `ceph` fails on the keyring with "Malformed input" and the mon answers nothing it can use. A local
cluster keeps its release's defaults when its client is of that release or newer; with an older client (this
host's Ceph 16 against Tentacle daemons) the mon's and client.admin's keys are aes, and the mon allows both
ciphers and prefers and serves aes, as a cluster with older clients must; the health checks that say so are
muted, for HEALTH_OK to mean the rest.
"""

from __future__ import annotations

import base64
import configparser
import struct
from typing import Callable

# Ceph 20's checks on aes (pre-20) keys and tickets, which a cluster serving older clients raises
AUTH_INSECURE_CHECKS = ("AUTH_INSECURE_CLIENT_KEY_TYPE", "AUTH_INSECURE_KEYS_ALLOWED", "AUTH_INSECURE_KEYS_CREATABLE",
                        "AUTH_INSECURE_SERVICE_TICKETS", "AUTH_INSECURE_ROTATING_SERVICE_KEY_TYPE",
                        "AUTH_INSECURE_SERVICE_KEY_TYPE")
# the first release whose client reads aes256k keys
AES256K_FROM = 20
# CryptoKey's type field (src/auth/Crypto.h): the first two bytes of a key's encoding
KEY_TYPES = {0: "none", 1: "aes", 2: "aes256k"}


def cipher_args(help_text: Callable[[str], str], client_major: int | None) -> tuple[list[str], list[str]]:
    """(ceph-authtool, monmaptool) options for a new cluster's keys: none when the tools know only one key type
    (before Ceph 20) or the client reads the release's default; else aes for the older client."""
    if client_major is not None and client_major >= AES256K_FROM:
        return [], []
    if "--auth-allowed-ciphers" not in help_text("monmaptool"):
        return [], []
    return (["--key-type", "aes"] if "--key-type" in help_text("ceph-authtool") else [],
            ["--auth-allowed-ciphers", "aes,aes256k", "--auth-preferred-cipher", "aes", "--auth-service-cipher",
             "aes"])


def key_type(keyring: str, name: str) -> str | None:
    """The type of `name`'s key in a keyring file (aes, aes256k), None if it cannot be told. The secret is
    decoded only for its two-byte type field, and nothing of it leaves this function."""
    cp = configparser.RawConfigParser(strict=False, interpolation=None)
    try:
        with open(keyring) as f:
            cp.read_file(f)
        raw = base64.b64decode(cp.get(name, "key").strip().strip('"'))
    except (OSError, configparser.Error, ValueError):
        return None
    if len(raw) < 2:
        return None
    return KEY_TYPES.get(struct.unpack("<H", raw[:2])[0])


def unreadable_key(keyring: str | None, name: str, client_major: int | None, stderr: str) -> str | None:
    """Why a client could not authenticate, when the reason is a key type it cannot read; else None."""
    if client_major is None or client_major >= AES256K_FROM:
        return None
    kt = key_type(keyring, name) if keyring else None
    if kt == "aes256k" or (kt is None and "Malformed input" in stderr):
        return (f"{name}'s key is {kt or 'of a type'}, which this Ceph {client_major} client cannot read "
                f"(aes256k, Ceph 20's default key type, is read by Ceph 20 clients and later)")
    return None
