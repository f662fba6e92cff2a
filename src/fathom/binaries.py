"""Where fathom's two binaries are: fathom-engine (the load generator) and fathom-sampler (the host sampler
alone, uploaded to server hosts), each of one build (one version)."""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path

from fathom.errors import FathomError

BINARY = "fathom-engine"
INSTALL_HINT = ("build it with `make install` (needs cargo; the binary is engine/target/release/fathom-engine), "
                "or set FATHOM_ENGINE to its path")
_REPO_BINARY = Path(__file__).resolve().parents[2] / "engine" / "target" / "release" / BINARY
# the host sampler alone, linked statically against musl by make (a target of its own) so that it runs on any
# Linux host of this architecture, whatever its C library
SAMPLER = "fathom-sampler"
REPO_SAMPLER = _REPO_BINARY.parents[1] / f"{platform.machine()}-unknown-linux-musl" / "release" / SAMPLER


def engine_path() -> Path:
    """The fathom-engine binary to run: $FATHOM_ENGINE, this checkout's release build, or PATH."""
    env = os.environ.get("FATHOM_ENGINE")
    if env:
        p = Path(env)
        if p.is_file() and os.access(p, os.X_OK):
            return p
        raise FathomError(f"FATHOM_ENGINE={env!r} is not an executable file", hint=INSTALL_HINT, exit_code=4)
    if _REPO_BINARY.is_file() and os.access(_REPO_BINARY, os.X_OK):
        return _REPO_BINARY
    found = shutil.which(BINARY)
    if found:
        return Path(found)
    raise FathomError(f"{BINARY} not found (looked at $FATHOM_ENGINE, {_REPO_BINARY}, PATH)",
                      hint=INSTALL_HINT, exit_code=4)


def sampler_beside(engine: Path) -> Path:
    """The fathom-sampler of the same build as `engine` (the same version): this checkout's static one for this
    checkout's engine, else the one installed beside it."""
    return REPO_SAMPLER if engine.resolve() == _REPO_BINARY.resolve() else engine.with_name(SAMPLER)


def sampler_path() -> Path:
    """The sampler binary built with the engine (static: it runs whatever the host's C library)."""
    p = sampler_beside(engine_path())
    if not p.exists():
        raise FathomError(f"{p} is missing: the server hosts' sampler is built with the engine",
                          hint="run `make engine` (or `make install`)")
    return p
