"""The content hash that decides whether `cluster up` rebuilds our image."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from swerollout_dev.cluster.buildinputs import BuildInputsError, copy_sources, ignored, inputs_hash

ROOT = Path(__file__).resolve().parents[3]

DOCKERFILE = """\
# syntax=docker/dockerfile:1.7
FROM base AS build
COPY pyproject.toml \\
     README.md ./
COPY --chown=1:1 pkg ./pkg
RUN echo hi
FROM base
COPY --from=build /opt/x /opt/x
"""


@pytest.fixture
def context(tmp_path: Path) -> Path:
    (tmp_path / "Dockerfile").write_text(DOCKERFILE)
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    (tmp_path / "README.md").write_text("readme\n")
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("A = 1\n")
    (tmp_path / "pkg" / "sub" / "b.py").write_text("B = 2\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("")
    (tmp_path / ".dockerignore").write_text("# bytecode\n**/__pycache__\n**/*.pyc\n")
    return tmp_path


def _hash(context: Path, *args: str) -> str:
    return inputs_hash(context, context / "Dockerfile", args)


def test_copy_sources_are_the_context_paths_of_copy_lines_without_from() -> None:
    assert copy_sources(DOCKERFILE) == ["pyproject.toml", "README.md", "pkg"]


def test_our_dockerfile_copies_the_packages_and_the_lock() -> None:
    sources = copy_sources((ROOT / "Dockerfile").read_text())
    assert {"swerollout", "agent_runner", "operator", "requirements-runtime.lock", "pyproject.toml"} <= set(sources)


def test_a_copied_file_changes_the_hash(context: Path) -> None:
    before = _hash(context)
    (context / "pkg" / "sub" / "b.py").write_text("B = 3\n")
    assert _hash(context) != before


def test_a_new_file_a_mode_the_dockerfile_or_an_argument_change_the_hash(context: Path) -> None:
    before = _hash(context)
    (context / "pkg" / "c.py").write_text("")
    added = _hash(context)
    assert added != before
    (context / "pkg" / "c.py").chmod(0o755)
    assert _hash(context) != added
    assert _hash(context, "--build-arg", "X=1") != _hash(context)
    (context / "Dockerfile").write_text(DOCKERFILE + "ENV A=1\n")
    assert _hash(context) != added


def test_files_not_copied_or_ignored_leave_the_hash_alone(context: Path) -> None:
    before = _hash(context)
    (context / "tests" / "test_x.py").write_text("def test(): pass\n")
    (context / "notes.txt").write_text("x")
    (context / "pkg" / "__pycache__").mkdir()
    (context / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (context / "pkg" / "sub" / "stray.pyc").write_bytes(b"\0")
    assert _hash(context) == before


def test_the_hash_does_not_depend_on_where_the_context_lies(
    context: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    copy = tmp_path_factory.mktemp("elsewhere") / "ctx"
    shutil.copytree(context, copy)
    assert _hash(copy) == _hash(context)


def test_dockerignore_patterns_follow_dockers_rules() -> None:
    assert ignored("a/b/__pycache__/x.pyc", ["**/__pycache__"])
    assert ignored("x.pyc", ["**/*.pyc"])
    assert ignored("build/lib/x.py", ["build"])
    assert not ignored("src/build/x.py", ["build"])
    assert not ignored("a/xpyc", ["**/*.pyc"])
    assert not ignored("a/b.py", ["*.py"])  # `*` stays within one path element


@pytest.mark.parametrize(
    "dockerfile, field",
    [
        ("FROM x\nCOPY src/*.py /app/\n", "src/*.py"),
        ("FROM x\nADD https://example.invalid/x.tar /x\n", "https://example.invalid/x.tar"),
        ('FROM x\nCOPY ["a", "/b"]\n', "JSON form"),
    ],
)
def test_copies_it_cannot_hash_are_refused_naming_them(dockerfile: str, field: str) -> None:
    with pytest.raises(BuildInputsError, match=field.replace("*", r"\*").replace(".", r"\.")):
        copy_sources(dockerfile)


def test_a_missing_source_is_named(context: Path) -> None:
    shutil.rmtree(context / "pkg")
    with pytest.raises(BuildInputsError, match="'pkg' does not exist"):
        _hash(context)
