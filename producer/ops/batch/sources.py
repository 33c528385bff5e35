"""Datasets a batch reads cases from: JSONL, CSV, Parquet, or a Hugging Face dataset on disk.

A JSONL file given as it is (no field mapping, no selection) is read in place, as before. Any
other source is first written to a temporary JSONL file whose line ``n`` is row ``n`` of the
source (rows left out by the selection are blank lines), so validation reports the source's own
row numbers. Rows are mapped to cases:

- ``id``: the ``--id-field`` column (default ``id``; missing: the row number);
- ``input``: the ``--input-field`` column (default ``input``);
- ``expected``: the ``--target-field`` column (default ``expected``, when the source has it);
- ``tags``, ``agent``, ``grader``, ``session_id``: the columns of those names, when present (in
  CSV, ``tags`` is comma-separated);
- every other column goes to ``metadata``.

Selection, in this order: ``--filter key=value`` (``tag=x``: the row's tags hold x; any other
key: the row's column equals the value as text; repeatable, all must hold), ``--sample N --seed
S`` (N rows drawn without replacement, kept in file order), ``--limit N`` (the first N).
A named field the source does not have is refused before any run starts.

Parquet needs ``pyarrow`` (``pip install 'tether[parquet]'``) and a saved Hugging Face dataset
needs ``datasets`` (``pip install 'tether[hf]'``).
"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.errors import InvalidInput
from tether.producer.ops.batch.cases import INVALID_ROW_KEY

CASE_COLUMNS = ("tags", "agent", "grader", "session_id")


@dataclass(frozen=True)
class SourceProblem:
    """A row of a source that could not be read (a malformed CSV row), and why."""

    message: str


#: Rows read from Parquet at a time (bounded memory on large files).
PARQUET_BATCH_ROWS = 1024


@dataclass(frozen=True)
class DatasetOptions:
    """How to read a dataset: field mapping and row selection (see the module docstring)."""

    input_field: str | None = None
    target_field: str | None = None
    id_field: str | None = None
    limit: int | None = None
    sample: int | None = None
    seed: int = 0
    filters: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @property
    def maps_fields(self) -> bool:
        """Whether a field was named."""
        return any(f is not None for f in (self.input_field, self.target_field, self.id_field))

    @property
    def selects(self) -> bool:
        """Whether rows are selected."""
        return self.limit is not None or self.sample is not None or bool(self.filters)

    def check(self) -> None:
        """Raises InvalidInput for a negative limit or sample size."""
        for name, value in (("--limit", self.limit), ("--sample", self.sample)):
            if value is not None and value < 1:
                raise InvalidInput(f"{name} must be 1 or more, got {value}")


def parse_filter(text: str) -> tuple[str, str]:
    """``key=value`` (``tag=x``) to a pair; raises InvalidInput naming the value."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise InvalidInput(f"--filter {text!r} is not key=value; e.g. --filter tag=math")
    return key.strip(), value.strip()


def source_format(path: Path) -> str:
    """``jsonl``, ``csv``, ``parquet`` or ``hf`` (a directory ``save_to_disk`` wrote)."""
    if path.is_dir():
        return "hf"
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    return "jsonl"


def unit_of(fmt: str) -> str:
    """What a source's problems are numbered by: lines of JSONL, rows of the others."""
    return "line" if fmt == "jsonl" else "row"


def _jsonl_rows(path: Path) -> tuple[list[str] | None, Iterator[tuple[int, Any]]]:
    def rows() -> Iterator[tuple[int, Any]]:
        with path.open("rb") as fh:
            for number, raw in enumerate(fh, start=1):
                try:
                    text = raw.decode("utf-8").strip()
                except UnicodeDecodeError:
                    # left as its bytes (the spooled file is written with surrogateescape), so
                    # validation reports the line as not UTF-8 instead of replacing characters
                    yield number, raw.decode("utf-8", "surrogateescape").strip()
                    continue
                if number == 1:
                    text = text.removeprefix("\ufeff")  # a BOM opening the file
                if not text:
                    yield number, None
                    continue
                try:
                    yield number, json.loads(text)
                except (ValueError, RecursionError):
                    yield number, text  # left as it is: validation reports it

    return None, rows()


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> InvalidInput:
    return InvalidInput(
        f"{path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} cannot be decoded); "
        "save it as UTF-8"
    )


def _csv_rows(path: Path) -> tuple[list[str] | None, Iterator[tuple[int, Any]]]:
    # utf-8-sig: a BOM (Excel's "CSV UTF-8") is not part of the first column's name
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            columns = next(csv.reader(fh), [])
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, exc) from None

    def rows() -> Iterator[tuple[int, Any]]:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            try:
                yield from _csv_records(csv.DictReader(fh, strict=True))
            except UnicodeDecodeError as exc:
                raise _not_utf8(path, exc) from None

    return columns, rows()


def _csv_records(reader: csv.DictReader[str]) -> Iterator[tuple[int, Any]]:
    """The rows of ``reader``, numbered; a malformed row is an invalid row (reported like a
    malformed JSONL line). Strict: a quote never closed made the rest of the file one field of
    one case, silently."""
    number = 0
    while True:
        number += 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield number, SourceProblem(_csv_problem(str(exc)))
            if "field larger than field limit" in str(exc):
                return  # inside a runaway quoted field: the rows after it are not rows
            continue
        if isinstance(row.get("tags"), str):
            row["tags"] = [t.strip() for t in row["tags"].split(",") if t.strip()]
        yield number, {k: v for k, v in row.items() if k is not None and v != ""}


def _csv_problem(error: str) -> str:
    if "unexpected end of data" in error or "field larger than field limit" in error:
        return (
            f"malformed CSV ({error}): a quote opened in this row is never closed; close it, "
            'or double a quote inside a quoted field ("")'
        )
    return f'malformed CSV ({error}); quote a field holding commas or quotes ("a ""b"", c")'


def _parquet_rows(path: Path) -> tuple[list[str] | None, Iterator[tuple[int, Any]]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise InvalidInput(
            f"{path} is Parquet, which needs pyarrow; pip install 'tether[parquet]'"
        ) from exc
    try:
        columns = list(pq.ParquetFile(path).schema_arrow.names)
    except Exception as exc:  # pyarrow raises its own error types for a bad file
        raise InvalidInput(f"{path} is not a readable Parquet file: {exc}") from exc

    def rows() -> Iterator[tuple[int, Any]]:
        number = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=PARQUET_BATCH_ROWS):
            for row in batch.to_pylist():
                number += 1
                yield number, row

    return columns, rows()


def _hf_rows(path: Path) -> tuple[list[str] | None, Iterator[tuple[int, Any]]]:
    try:
        import datasets
    except ImportError as exc:
        raise InvalidInput(
            f"{path} is a directory (a saved Hugging Face dataset), which needs datasets; "
            "pip install 'tether[hf]'"
        ) from exc
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:  # datasets raises FileNotFoundError, ValueError...
        raise InvalidInput(f"{path} is not a dataset saved with save_to_disk: {exc}") from exc
    if isinstance(loaded, datasets.DatasetDict):
        raise InvalidInput(
            f"{path} holds several splits ({', '.join(loaded)}); pass one split's folder, "
            f"e.g. {path / next(iter(loaded))}"
        )
    data = loaded

    def rows() -> Iterator[tuple[int, Any]]:
        for number, row in enumerate(data, start=1):
            yield number, dict(row)

    return list(data.column_names), rows()


_READERS = {"jsonl": _jsonl_rows, "csv": _csv_rows, "parquet": _parquet_rows, "hf": _hf_rows}


def _check_fields(path: Path, columns: list[str], options: DatasetOptions) -> None:
    named = [
        ("--input-field", options.input_field or "input"),
        ("--target-field", options.target_field),
        ("--id-field", options.id_field),
    ]
    for flag, name in named:
        if name is not None and name not in columns:
            raise InvalidInput(
                f"{path} has no field {name!r} ({flag}); its fields: {', '.join(columns)}"
            )


def _jsonl_columns(path: Path) -> list[str]:
    """The keys of the first object of a JSONL file (the fields a mapping may name)."""
    for _, row in _jsonl_rows(path)[1]:
        if isinstance(row, dict):
            return list(row)
    return []


def to_case(row: Any, number: int, options: DatasetOptions) -> Any:
    """A source row as a case document (a row that is not an object is left as it is)."""
    if not isinstance(row, dict):
        return row
    rest = dict(row)
    id_field, input_field = options.id_field or "id", options.input_field or "input"
    target_field = options.target_field or "expected"
    case: dict[str, Any] = {"id": rest.pop(id_field, number)}
    if input_field in rest:
        case["input"] = rest.pop(input_field)
    if target_field in rest:
        case["expected"] = rest.pop(target_field)
    for name in CASE_COLUMNS:
        if name in rest and rest[name] is not None:
            case[name] = rest.pop(name)
    metadata = rest.pop("metadata", None)
    metadata = dict(metadata) if isinstance(metadata, dict) else {}
    metadata.update({k: v for k, v in rest.items() if v is not None})
    if metadata:
        case["metadata"] = metadata
    return case


def _matches(row: Any, filters: tuple[tuple[str, str], ...]) -> bool:
    if isinstance(row, SourceProblem):
        return False
    if not filters:
        return True
    if not isinstance(row, dict):
        return False
    for key, value in filters:
        if key == "tag":
            tags = row.get("tags")
            if not (isinstance(tags, list) and value in tags):
                return False
        elif key not in row or str(row[key]) != value:
            return False
    return True


def _selected(rows: Iterator[tuple[int, Any]], options: DatasetOptions) -> set[int] | None:
    """Row numbers the selection keeps (None: every row)."""
    if not options.selects:
        return None
    eligible = [n for n, row in rows if row is not None and _matches(row, options.filters)]
    if options.sample is not None and options.sample < len(eligible):
        eligible = sorted(random.Random(options.seed).sample(eligible, options.sample))
    if options.limit is not None:
        eligible = eligible[: options.limit]
    return set(eligible)


def needs_spool(path: Path, options: DatasetOptions) -> bool:
    """Whether ``path`` must be converted before a batch reads it."""
    return source_format(path) != "jsonl" or options.maps_fields or options.selects


def spool_dataset(path: Path, options: DatasetOptions, target: Path) -> str:
    """Write ``path``'s selected rows as cases to ``target`` (line n = row n); its format.

    Raises:
        InvalidInput: a named field the source lacks, an unreadable source, bad options.
    """
    options.check()
    fmt = source_format(path)
    columns, _ = _READERS[fmt](path)
    if fmt == "jsonl":
        columns = _jsonl_columns(path) if options.maps_fields else None
    if columns is not None:
        _check_fields(path, columns, options)
    keep = _selected(_READERS[fmt](path)[1], options)
    mapped = fmt != "jsonl" or options.maps_fields
    # surrogateescape: a JSONL line that is not UTF-8 keeps its bytes, for validation to report
    with target.open("w", encoding="utf-8", errors="surrogateescape") as out:
        for number, row in _READERS[fmt](path)[1]:
            if isinstance(row, SourceProblem):  # selected or not: the source is broken there
                out.write(json.dumps({INVALID_ROW_KEY: row.message}) + "\n")
                continue
            if row is None or (keep is not None and number not in keep):
                out.write("\n")
                continue
            doc = to_case(row, number, options) if mapped else row
            text = doc if isinstance(doc, str) else json.dumps(doc, ensure_ascii=False, default=str)
            out.write(text.replace("\n", " ") + "\n")
    return fmt


__all__ = [
    "DatasetOptions",
    "SourceProblem",
    "needs_spool",
    "parse_filter",
    "source_format",
    "spool_dataset",
    "to_case",
    "unit_of",
]
