"""Reading a dataset in the forms datasets are published in: JSON lines, a JSON array,
parquet, a ``datasets`` folder saved with ``save_to_disk``, or a hub name (``datasets``
installed; it downloads).

Rows come back as plain dicts, exactly as stored: interpreting them is not this module's job.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_SPLIT", "DatasetFileError", "read_rows"]

# SWE-bench, Lite, Verified and Multimodal evaluate on `test`; SWE-Gym and SWE-smith
# publish only `train`; when a folder or hub dataset has one split, that one is used.
DEFAULT_SPLIT = "test"

Row = dict[str, Any]


class DatasetFileError(ValueError):
    """The dataset cannot be read. Retrying does not help: fix the path or install the reader."""


def read_rows(source: str | Path, *, split: str | None = None) -> list[Row]:
    """All rows of ``source``: a .jsonl/.json/.parquet file, a saved dataset folder, or a hub name."""
    path = Path(source)
    if path.is_dir():
        return _read_saved(path, split)
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix == ".parquet":
            return _read_parquet(path)
        if suffix in (".json", ".jsonl", ".ndjson"):
            return _read_json(path)
        raise DatasetFileError(
            f"{path}: unknown dataset format {suffix or '(no suffix)'!r}; use .jsonl, .json, .parquet or a saved "
            "`datasets` folder"
        )
    if _looks_like_hub_name(str(source)):
        return _read_hub(str(source), split)
    raise DatasetFileError(
        f"{source} does not exist: pass a .jsonl/.json/.parquet file, a saved dataset folder or a hub name ORG/NAME "
        "(`swerollout tasks materialize --dest DIR` writes the bundled tasks)"
    )


def _read_json(path: Path) -> list[Row]:
    text = path.read_text()
    stripped = text.lstrip()
    # A .json file is either one array (SWE-bench's own json files) or JSON lines, which is
    # what `datasets`' to_json writes under that suffix.
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetFileError(f"{path}: not valid JSON: {exc}") from exc
        rows = data
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DatasetFileError(f"{path}:{number}: not a JSON object: {exc}") from exc
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DatasetFileError(f"{path}: row {index + 1} is a {type(row).__name__}, not a JSON object")
    return list(rows)


def _read_parquet(path: Path) -> list[Row]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DatasetFileError(f"{path}: reading parquet needs pyarrow: pip install 'swerollout[parquet]'") from None
    try:
        rows: list[Row] = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises its own types for every kind of bad file
        raise DatasetFileError(f"{path}: not a readable parquet file: {exc}") from exc
    return rows


def _datasets_module(what: str) -> Any:
    try:
        import datasets
    except ImportError:
        raise DatasetFileError(f"{what} needs the `datasets` package: pip install datasets") from None
    return datasets


def _pick_split(splits: list[str], split: str | None, where: str) -> str:
    if split is not None:
        if split not in splits:
            raise DatasetFileError(f"{where} has no split {split!r}; it has {', '.join(splits)} (--split)")
        return split
    if len(splits) == 1:
        return splits[0]
    if DEFAULT_SPLIT in splits:
        return DEFAULT_SPLIT
    raise DatasetFileError(f"{where} has splits {', '.join(splits)}: choose one with --split")


def _read_saved(path: Path, split: str | None) -> list[Row]:
    if not ((path / "dataset_dict.json").is_file() or (path / "dataset_info.json").is_file()):
        raise DatasetFileError(
            f"{path} is a folder but not a saved dataset (no dataset_dict.json or dataset_info.json); "
            "pass the .jsonl/.parquet file or the folder `save_to_disk` wrote"
        )
    datasets = _datasets_module(f"reading the saved dataset {path}")
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        loaded = loaded[_pick_split(list(loaded), split, str(path))]
    elif split is not None:
        raise DatasetFileError(f"{path} holds a single split; drop --split")
    return [dict(row) for row in loaded]


_FILE_SUFFIXES = (".json", ".jsonl", ".ndjson", ".parquet")


def _looks_like_hub_name(source: str) -> bool:
    parts = source.split("/")
    return (
        len(parts) == 2
        and all(parts)
        and not source.startswith((".", "~"))
        and not source.lower().endswith(_FILE_SUFFIXES)
    )


def _read_hub(name: str, split: str | None) -> list[Row]:
    datasets = _datasets_module(f"loading {name} from the hub")
    try:
        loaded = datasets.load_dataset(name, split=split)
    except Exception as exc:  # network, auth, unknown name: all the user's to fix
        raise DatasetFileError(f"cannot load {name} from the hub: {type(exc).__name__}: {exc}") from exc
    if isinstance(loaded, datasets.DatasetDict):
        loaded = loaded[_pick_split(list(loaded), None, name)]
    return [dict(row) for row in loaded]
