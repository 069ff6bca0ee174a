"""What a Dockerfile build reads from its context, as one content hash.

`cluster up` builds our image before every node it starts (`make test` does that
once per run). buildah's layer cache still re-runs the source layer and every step
after it, then writes and imports the whole image: minutes, even when nothing the
Dockerfile copies has changed (a commit that touches only tests or docs). This hash
covers exactly the build's inputs, so an unchanged image is reused as it is:

- the Dockerfile itself and the build arguments,
- every file a ``COPY``/``ADD`` takes from the context (``--from`` copies come from
  other stages, already covered by the Dockerfile's text), minus what
  ``.dockerignore`` excludes, by path, mode and content.

The Dockerfile stays the one home of what the image contains: its copy lines are read
here, never listed a second time.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path


class BuildInputsError(ValueError):
    pass


def logical_lines(dockerfile: str) -> Iterator[str]:
    """The Dockerfile's instructions, one line each (comments dropped, continuations joined)."""
    pending = ""
    for raw in dockerfile.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield pending + line
        pending = ""
    if pending.strip():
        yield pending


def _instructions(dockerfile: str) -> Iterator[list[str]]:
    """The Dockerfile's instructions as word lists."""
    for line in logical_lines(dockerfile):
        words = shlex.split(line, comments=False, posix=True)
        if words:
            yield words


def copy_sources(dockerfile: str) -> list[str]:
    """The context paths the Dockerfile's ``COPY``/``ADD`` lines read, in order."""
    sources: list[str] = []
    for words in _instructions(dockerfile):
        if words[0].upper() not in ("COPY", "ADD"):
            continue
        flags = [w for w in words[1:] if w.startswith("--")]
        if any(flag.startswith("--from") for flag in flags):
            continue
        paths = [w for w in words[1:] if not w.startswith("--")]
        if paths[:1] and paths[0].startswith("["):
            raise BuildInputsError(
                f"Dockerfile: `{' '.join(words)}`: the JSON form of COPY is not read here; "
                "write it as `COPY src... dest`"
            )
        for source in paths[:-1]:
            if any(ch in source for ch in "*?[") or "://" in source:
                raise BuildInputsError(
                    f"Dockerfile: COPY source {source!r}: globs and URLs are not hashed; name the files or directories"
                )
            sources.append(source)
    return sources


def ignore_patterns(context: Path) -> list[str]:
    """``.dockerignore``'s patterns (comments and blank lines dropped)."""
    path = context / ".dockerignore"
    if not path.is_file():
        return []
    patterns = []
    for line in path.read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        if pattern.startswith("!"):
            raise BuildInputsError(
                f".dockerignore: {pattern!r}: exceptions are not read here; exclude with plain patterns only"
            )
        patterns.append(pattern.strip("/"))
    return patterns


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A ``.dockerignore`` pattern as a regex over a context-relative path: ``*`` and ``?``
    stay within one path element, ``**`` spans any number of them (Docker's rules)."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def ignored(relative: str, patterns: Iterable[str]) -> bool:
    """Whether ``.dockerignore`` excludes ``relative`` (a path under the context) or a
    directory it lies in."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(_pattern_regex(p).fullmatch(prefix) for p in patterns for prefix in prefixes)


def _files(context: Path, source: str, patterns: Sequence[str]) -> Iterator[Path]:
    root = (context / source).resolve()
    if not root.is_relative_to(context.resolve()):
        raise BuildInputsError(f"Dockerfile: COPY source {source!r} lies outside the build context")
    if not root.exists():
        raise BuildInputsError(f"Dockerfile: COPY source {source!r} does not exist in {context}")
    if root.is_file():
        yield root
        return
    for directory, subdirs, files in os.walk(root):
        here = Path(directory)
        subdirs[:] = sorted(
            d for d in subdirs if not ignored((here / d).relative_to(context.resolve()).as_posix(), patterns)
        )
        for name in sorted(files):
            path = here / name
            if not ignored(path.relative_to(context.resolve()).as_posix(), patterns):
                yield path


def inputs_hash(context: Path, dockerfile: Path, build_args: Sequence[str] = ()) -> str:
    """A sha256 over the Dockerfile, ``build_args`` and every context file it copies."""
    text = dockerfile.read_text()
    patterns = ignore_patterns(context)
    digest = hashlib.sha256()
    digest.update(b"dockerfile\0" + text.encode() + b"\0")
    for arg in build_args:
        digest.update(b"arg\0" + arg.encode() + b"\0")
    for source in copy_sources(text):
        for path in _files(context, source, patterns):
            relative = path.relative_to(context.resolve()).as_posix()
            mode = path.stat().st_mode & 0o777
            digest.update(f"file\0{relative}\0{mode:o}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()
