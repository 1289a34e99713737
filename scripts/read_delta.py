#!/usr/bin/env python3
"""Reads Delta tables with an independent reader (the Python `deltalake` package) and checks
them against what zerobus-sink wrote.

    read_delta.py EXPECTED.json

EXPECTED.json is a list of tables, each
    {"path": ..., "columns": [{"name", "type", "nullable", "comment"}], "properties": {...},
     "rows": N, "table_comment": ...}
with `type` in Delta's JSON schema form. Exits non-zero naming every difference. Run it with
`scripts/check-delta-reader` (which installs the reader into a virtualenv).
"""
import json
import os
import sys

from deltalake import DeltaTable


def strip_metadata(t):
    """A Delta JSON type without field metadata (nested comments are not ours to check)."""
    if isinstance(t, dict):
        return {k: strip_metadata(v) for k, v in t.items() if k != "metadata"}
    if isinstance(t, list):
        return [strip_metadata(v) for v in t]
    return t


def check(table):
    path = table["path"]
    problems = []
    try:
        dt = DeltaTable(path)
    except Exception as e:  # the reader's own words are the finding
        return [f"{path}: cannot open: {e}"]
    schema = json.loads(dt.schema().to_json())
    fields = {f["name"]: f for f in schema["fields"]}
    names = [f["name"] for f in schema["fields"]]
    wanted = [c["name"] for c in table["columns"]]
    if names != wanted:
        problems.append(f"{path}: columns {names}, wrote {wanted}")
    for c in table["columns"]:
        f = fields.get(c["name"])
        if f is None:
            continue
        if strip_metadata(f["type"]) != strip_metadata(c["type"]):
            problems.append(f"{path}: column {c['name']} is {f['type']}, wrote {c['type']}")
        if f["nullable"] != c["nullable"]:
            problems.append(f"{path}: column {c['name']} nullable {f['nullable']}, wrote {c['nullable']}")
        comment = f.get("metadata", {}).get("comment")
        if comment != c.get("comment"):
            problems.append(f"{path}: column {c['name']} comment {comment!r}, wrote {c.get('comment')!r}")
    metadata = dt.metadata()
    config = metadata.configuration
    for k, v in table["properties"].items():
        if config.get(k) != v:
            problems.append(f"{path}: property {k} is {config.get(k)!r}, wrote {v!r}")
    if table.get("table_comment") is not None and metadata.description != table["table_comment"]:
        problems.append(f"{path}: table comment {metadata.description!r}, wrote {table['table_comment']!r}")
    try:
        rows = dt.to_pyarrow_table().num_rows
    except Exception as e:
        problems.append(f"{path}: cannot read rows: {e}")
    else:
        if rows != table["rows"]:
            problems.append(f"{path}: {rows} rows, wrote {table['rows']}")
    protocol = dt.protocol()
    print(
        f"read {path}: {len(names)} columns, protocol reader {protocol.min_reader_version} / "
        f"writer {protocol.min_writer_version}, {len(problems)} problems"
    )
    return problems


def main():
    with open(sys.argv[1]) as f:
        tables = json.load(f)
    problems = [p for t in tables for p in check(t)]
    for p in problems:
        print("MISMATCH", p)
    print(f"{len(tables)} tables read by deltalake, {len(problems)} mismatches")
    if not tables:
        print("nothing to read")
        code = 2
    else:
        code = 1 if problems else 0
    # Leave without the interpreter's teardown: deltalake's native threads can abort the
    # process there ("terminate called without an active exception", seen once in CI after
    # every table had been read), which would turn a verdict already printed into a failure.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
