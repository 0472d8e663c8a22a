"""Runs a SQL file with DuckDB over a log: run.py QUERY.sql LOG.jsonl.
The query reads the log's path from the variable `log`; prints its rows,
one a line, fields separated by spaces, floats in full (repr)."""
import sys

import duckdb


def main(query: str, log: str) -> None:
    """Runs the query in `query` on the log at `log`, on every core."""
    con = duckdb.connect()
    con.execute("SET VARIABLE log = ?", [log])
    with open(query) as sql:
        rows = con.execute(sql.read()).fetchall()
    for row in rows:
        print(*(repr(v) if isinstance(v, float) else v for v in row))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
