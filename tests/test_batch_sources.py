"""Batch datasets without workers: CSV, Parquet and a saved Hugging Face dataset read as cases,
field mapping, --limit / --sample --seed / --filter, and the refusals before any run starts (a
field that does not exist, a row that does not validate, reported by its row number)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tether.errors import InvalidInput
from tether.producer.client import Producer
from tether.producer.ops.batch import DatasetOptions, run_batch
from tether.producer.ops.batch.cases import BatchCase, CasesInvalid, iter_cases, scan_cases
from tether.producer.ops.batch.scoring import resolve_scorers
from tether.producer.ops.batch.scoring.specs import scores_with_regex
from tether.producer.ops.batch.sources import parse_filter, spool_dataset
from tether.settings import Settings

ROWS = [
    {"qid": "q1", "question": "2+2", "answer": "4", "tags": "math,easy", "source": "a"},
    {"qid": "q2", "question": "3*3", "answer": "9", "tags": "math", "source": "b"},
    {"qid": "q3", "question": "capital of France", "answer": "Paris", "tags": "geo", "source": "a"},
    {"qid": "q4", "question": "10-7", "answer": "3", "tags": "math", "source": "b"},
]
# datasets and pyarrow (about 1 s to import) are imported where they are used, not when pytest
# collects this file in every test process.
NAMES = {"write_csv": "data.csv", "write_parquet": "data.parquet", "write_hf": "data_hf"}
MAPPING = DatasetOptions(input_field="question", target_field="answer", id_field="qid")


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    import csv

    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def as_lists(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "tags": r["tags"].split(",")} for r in rows]


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(as_lists(rows)), path)
    return path


def write_hf(path: Path, rows: list[dict[str, Any]]) -> Path:
    import datasets

    datasets.Dataset.from_list(as_lists(rows)).save_to_disk(str(path))
    return path


def cases_of(source: Path, options: DatasetOptions, tmp_path: Path) -> list[tuple[int, Any]]:
    spooled = tmp_path / "spooled.jsonl"
    spool_dataset(source, options, spooled)
    return [(n.line, n.case) for n in iter_cases(spooled, default_agent="echo")]


@pytest.mark.parametrize("writer", [write_csv, write_parquet, write_hf])
def test_every_format_maps_rows_to_cases(writer: Any, tmp_path: Path) -> None:
    source = writer(tmp_path / NAMES[writer.__name__], ROWS)
    cases = cases_of(source, MAPPING, tmp_path)
    assert [line for line, _ in cases] == [1, 2, 3, 4]  # the source's row numbers
    first = cases[0][1]
    assert (first.id, first.input, first.expected, first.tags) == (
        "q1",
        "2+2",
        "4",
        ["math", "easy"],
    )
    assert first.metadata == {"source": "a"}  # the other columns


@pytest.mark.parametrize("writer", [write_csv, write_parquet, write_hf])
def test_selection_filter_sample_limit(writer: Any, tmp_path: Path) -> None:
    source = writer(tmp_path / NAMES[writer.__name__], ROWS)

    def ids(**options: Any) -> list[str]:
        chosen = DatasetOptions(
            input_field="question", target_field="answer", id_field="qid", **options
        )
        return [case.id for _, case in cases_of(source, chosen, tmp_path)]

    assert ids(filters=(("tag", "math"),)) == ["q1", "q2", "q4"]
    assert ids(filters=(("tag", "math"), ("source", "b"))) == ["q2", "q4"]
    assert ids(limit=2) == ["q1", "q2"]
    assert ids(filters=(("tag", "math"),), limit=2) == ["q1", "q2"]
    sampled = ids(sample=2, seed=7)
    assert len(sampled) == 2 and sampled == ids(sample=2, seed=7)  # the seed fixes the draw
    assert sampled == sorted(sampled)  # kept in file order
    draws = {tuple(ids(sample=2, seed=s)) for s in range(12)}
    assert len(draws) > 1  # and another seed draws others
    assert ids(sample=10) == ["q1", "q2", "q3", "q4"]  # more than there are: all


def test_default_field_names_and_row_number_ids(tmp_path: Path) -> None:
    source = write_csv(
        tmp_path / "plain.csv",
        [
            {"input": "hi", "expected": "echo: hi"},
            {"input": "yo", "expected": "echo: yo"},
        ],
    )
    cases = cases_of(source, DatasetOptions(), tmp_path)
    assert [(c.id, c.input, c.expected) for _, c in cases] == [
        ("1", "hi", "echo: hi"),
        ("2", "yo", "echo: yo"),
    ]


def test_jsonl_with_mapping_and_selection(tmp_path: Path) -> None:
    source = tmp_path / "data.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in as_lists(ROWS)))
    cases = cases_of(
        source,
        DatasetOptions(
            input_field="question", target_field="answer", id_field="qid", filters=(("tag", "geo"),)
        ),
        tmp_path,
    )
    assert [(line, c.id, c.expected) for line, c in cases] == [(3, "q3", "Paris")]
    plain = tmp_path / "cases.jsonl"
    plain.write_text(
        "".join(
            json.dumps({"id": f"c{i}", "input": "x", "tags": [f"t{i % 2}"]}) + "\n"
            for i in range(6)
        )
    )
    kept = cases_of(plain, DatasetOptions(filters=(("tag", "t1"),), limit=2), tmp_path)
    assert [(line, c.id) for line, c in kept] == [(2, "c1"), (4, "c3")]


@pytest.mark.parametrize("writer", [write_csv, write_parquet, write_hf, None])
def test_a_missing_field_is_refused_naming_it(writer: Any, tmp_path: Path) -> None:
    if writer is None:
        source = tmp_path / "data.jsonl"
        source.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    else:
        source = writer(tmp_path / NAMES[writer.__name__], ROWS)
    with pytest.raises(InvalidInput) as caught:
        spool_dataset(
            source,
            DatasetOptions(input_field="question", target_field="answr"),
            tmp_path / "out.jsonl",
        )
    assert "has no field 'answr' (--target-field)" in str(caught.value)
    assert "question" in str(caught.value)  # its fields are listed
    if writer is not None:  # the default input field must exist too
        with pytest.raises(InvalidInput, match="has no field 'input' \\(--input-field\\)"):
            spool_dataset(source, DatasetOptions(), tmp_path / "out.jsonl")


def test_bad_rows_are_reported_by_row_number(tmp_path: Path) -> None:
    rows = [dict(r) for r in ROWS]
    rows[1]["qid"] = "q1"  # a repeated id
    rows[2]["grader"] = "fuzzy"  # not a grader
    rows[0]["grader"] = "exact"
    source = write_csv(tmp_path / "bad.csv", rows)
    producer = Producer(Settings(redis_url="redis://127.0.0.1:1", broker_url="redis://127.0.0.1:1"))
    with pytest.raises(CasesInvalid) as caught:
        run_batch(producer, source, agent="echo", dataset=MAPPING, out=tmp_path / "r.jsonl")
    message = str(caught.value)
    assert "bad.csv: 2 invalid row(s); the batch was not started" in message
    assert "  row 2: id 'q1' is already used on line 1" in message
    assert "  row 3: grader: Value error, grader must be one of" in message
    assert not (tmp_path / "r.jsonl").exists()  # refused before any file or run


def test_bad_options_are_refused(tmp_path: Path) -> None:
    import datasets

    with pytest.raises(InvalidInput, match="--filter 'tagmath' is not key=value"):
        parse_filter("tagmath")
    assert parse_filter(" tag = x ") == ("tag", "x")
    with pytest.raises(InvalidInput, match="--sample must be 1 or more, got 0"):
        DatasetOptions(sample=0).check()
    with pytest.raises(InvalidInput, match="holds several splits"):
        datasets.DatasetDict(
            {
                "train": datasets.Dataset.from_list([{"input": "x"}]),
                "test": datasets.Dataset.from_list([{"input": "y"}]),
            }
        ).save_to_disk(str(tmp_path / "dd"))
        spool_dataset(tmp_path / "dd", DatasetOptions(), tmp_path / "out.jsonl")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidInput, match="is not a dataset saved with save_to_disk"):
        spool_dataset(tmp_path / "empty", DatasetOptions(), tmp_path / "out.jsonl")
    (tmp_path / "x.parquet").write_text("not parquet")
    with pytest.raises(InvalidInput, match="is not a readable Parquet file"):
        spool_dataset(tmp_path / "x.parquet", DatasetOptions(), tmp_path / "out.jsonl")


def test_scan_of_a_spooled_dataset_hashes_its_selection(tmp_path: Path) -> None:
    source = write_csv(tmp_path / "d.csv", ROWS)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    spool_dataset(source, MAPPING, a)
    spool_dataset(source, DatasetOptions(input_field="question", id_field="qid", limit=2), b)
    scan_a, scan_b = scan_cases(a, default_agent="echo"), scan_cases(b, default_agent="echo")
    assert (scan_a.valid, scan_b.valid) == (4, 2)
    assert scan_a.sha256 != scan_b.sha256  # another selection is another batch


def test_bad_scorers_and_fields_are_refused_before_any_run(tmp_path: Path) -> None:
    source = write_csv(tmp_path / "d.csv", ROWS)
    nowhere = "redis://127.0.0.1:1"  # never contacted: every refusal comes first
    producer = Producer(Settings(redis_url=nowhere, broker_url=nowhere))
    out = tmp_path / "r.jsonl"
    bad_scorer = re.escape("--scorer 'no_such_pkg.scorers:grade': module")
    with pytest.raises(InvalidInput, match=bad_scorer):
        run_batch(
            producer,
            source,
            agent="echo",
            dataset=MAPPING,
            out=out,
            scorers=["exact", "no_such_pkg.scorers:grade"],
        )
    with pytest.raises(InvalidInput, match=re.escape("has no field 'prompt' (--input-field)")):
        run_batch(
            producer, source, agent="echo", out=out, dataset=DatasetOptions(input_field="prompt")
        )
    with pytest.raises(InvalidInput, match=re.escape("epochs must be 1..1000, got 0")):
        run_batch(producer, source, agent="echo", dataset=MAPPING, out=out, epochs=0)
    assert not out.exists()


# --- red-team findings (each failed before its fix) ---------------------------------------------


def test_a_csv_with_a_utf8_bom_keeps_its_id_column(tmp_path: Path) -> None:
    source = tmp_path / "bom.csv"  # as Excel's "CSV UTF-8" saves it
    source.write_bytes(
        "\ufeffid,input,expected\nq-paris,France?,Paris\nq-rome,Italy?,Rome\n".encode()
    )
    cases = cases_of(source, DatasetOptions(), tmp_path)
    assert [(n, c.id, c.expected, c.metadata) for n, c in cases] == [
        (1, "q-paris", "Paris", {}),
        (2, "q-rome", "Rome", {}),
    ]
    assert [c.id for _, c in cases_of(source, DatasetOptions(id_field="id"), tmp_path)] == [
        "q-paris",
        "q-rome",
    ]


def test_a_malformed_csv_row_is_an_invalid_row_like_a_malformed_jsonl_line(
    tmp_path: Path,
) -> None:
    """An unterminated quote made the rest of the file one case's input, silently; a stray
    quote after a quoted field went through as text."""
    source = tmp_path / "quotes.csv"
    source.write_text(
        "id,input,expected\n"
        "q1,fine,1\n"
        'q2,"a stray"quote,2\n'
        "q3,also fine,3\n"
        'q4,"never closed,4\n'
        "q5,swallowed,5\n"
    )
    producer = Producer(Settings(redis_url="redis://127.0.0.1:1", broker_url="redis://127.0.0.1:1"))
    out = tmp_path / "r.jsonl"
    with pytest.raises(CasesInvalid) as caught:
        run_batch(producer, source, agent="echo", out=out)
    message = str(caught.value)
    assert "quotes.csv: 2 invalid row(s); the batch was not started" in message, message
    assert "  row 2: malformed CSV (',' expected after '\"')" in message, message
    assert "  row 4: malformed CSV (unexpected end of data): a quote opened in this row is " in (
        message
    )
    assert not out.exists()
    cases = cases_of(source, DatasetOptions(), tmp_path)  # --skip-invalid's view: the rest
    assert [(n, c.id, c.input) for n, c in cases] == [(1, "q1", "fine"), (3, "q3", "also fine")]


def test_a_jsonl_file_with_a_utf8_bom_reads_its_first_line(tmp_path: Path) -> None:
    source = tmp_path / "bom.jsonl"
    source.write_bytes('\ufeff{"id": "a", "input": "x"}\n{"id": "b", "input": "y"}\n'.encode())
    scan = scan_cases(source, default_agent="echo")
    assert (scan.valid, scan.problems) == (2, [])
    assert [n.case.id for n in iter_cases(source, default_agent="echo")] == ["a", "b"]
    # read through a mapping (spooled) too
    mapped = cases_of(source, DatasetOptions(id_field="id"), tmp_path)
    assert [c.id for _, c in mapped] == ["a", "b"]


def test_cases_that_are_not_utf8_are_invalid_lines_not_replaced_text(tmp_path: Path) -> None:
    source = tmp_path / "latin1.jsonl"
    source.write_bytes(
        b'{"id": "ok", "input": "fine"}\n'
        + '{"id": "q1", "input": "R\u00e9ponds", "expected": "Br\u00fcssel"}\n'.encode("latin-1")
    )
    scan = scan_cases(source, default_agent="echo")
    assert (scan.valid, scan.invalid) == (1, 1)
    ((line, message),) = scan.problems
    assert line == 2 and message.startswith("not UTF-8 (byte 0xe9")
    assert [n.case.id for n in iter_cases(source, default_agent="echo")] == ["ok"]
    # spooled (a mapping or a selection): the line keeps its bytes, so it is reported the same
    spooled = tmp_path / "spooled.jsonl"
    spool_dataset(source, DatasetOptions(limit=5), spooled)
    assert scan_cases(spooled, default_agent="echo").problems == scan.problems
    latin_csv = tmp_path / "latin1.csv"
    latin_csv.write_bytes("id,input\nq1,R\u00e9ponds\n".encode("latin-1"))
    with pytest.raises(InvalidInput, match=r"latin1\.csv is not UTF-8 text"):
        spool_dataset(latin_csv, DatasetOptions(), spooled)


def test_a_repeated_tag_counts_once() -> None:
    case = BatchCase(id="c", input="q", tags=["math", "easy", "math"])
    assert case.tags == ["math", "easy"]  # order kept


def test_with_the_regex_scorer_a_bad_pattern_in_expected_is_an_invalid_line(
    tmp_path: Path,
) -> None:
    source = tmp_path / "cases.jsonl"
    source.write_text(
        '{"id": "a", "input": "q", "expected": "([0-9]+"}\n'
        '{"id": "b", "input": "q", "expected": "^[0-9]+$"}\n'
        '{"id": "c", "input": "q"}\n'
    )
    assert scores_with_regex(resolve_scorers(["exact", "regex:threshold=0.5"]))
    assert not scores_with_regex(resolve_scorers(["exact", "contains"]))
    assert scan_cases(source, default_agent="echo").problems == []  # no regex scorer: fine
    scan = scan_cases(source, default_agent="echo", regex_expected=True)
    assert scan.valid == 2
    ((line, message),) = scan.problems
    assert line == 1 and "'expected' is not a valid regex (--scorer regex): missing )" in message
    kept = iter_cases(source, default_agent="echo", regex_expected=True)
    assert [n.case.id for n in kept] == ["b", "c"]
