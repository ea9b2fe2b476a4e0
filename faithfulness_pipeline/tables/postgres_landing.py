"""A PostgreSQL table or query as the landing (``sources.table_landing``): ``FP_LANDING=postgresql://...`` and
``FP_LANDING_QUERY`` a table (``schema.table``) or a ``SELECT``.

A day is one statement, ``SELECT ... FROM <relation> WHERE ts >= %s AND ts < %s``, its bounds sent as
parameters (never written into the SQL), so the database uses an index or partitions on the timestamp column
(PostgreSQL pushes the condition into a query given as a subquery too). Rows come through a server-side
cursor a few thousand at a time: the database holds the result, this process a chunk. Column types come
from the result's description: the flat ones map to polars', arrays of them to lists, ``json``/``jsonb``
are decoded with the type a sample of the table shows (a chat's ``messages`` become their list of structs),
anything else is read as its text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date
from typing import TYPE_CHECKING, Any, Final

import polars as pl

from faithfulness_pipeline.core.errors import ConfigError, InputError
from faithfulness_pipeline.core.schema import dtype_holds
from faithfulness_pipeline.tables.day_window import DayWindow, Stamp
from faithfulness_pipeline.tables.postgres_connect import CONNECT_TIMEOUT_S, one_line, shown

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

#: The settings, as errors name them.
URL_SETTING: Final = "FP_LANDING / landing.path"
QUERY_SETTING: Final = "FP_LANDING_QUERY / landing.query"
#: Rows fetched from the server-side cursor at a time (Python tuples are many times a frame's size).
FETCH_ROWS: Final = 5_000
#: Rows of the relation whose JSON values decide a json/jsonb column's polars type.
JSON_SAMPLE: Final = 1_000
_QUERY: Final = re.compile(r"^\s*(select|with|values|table)\b", re.IGNORECASE)

#: polars' type of each PostgreSQL type read as it is (by the type's name; arrays are ``_name``).
_TYPES: Final[dict[str, pl.DataType]] = {
    "text": pl.String(), "varchar": pl.String(), "bpchar": pl.String(), "name": pl.String(),
    "int2": pl.Int16(), "int4": pl.Int32(), "int8": pl.Int64(),
    "float4": pl.Float32(), "float8": pl.Float64(), "bool": pl.Boolean(), "bytea": pl.Binary(),
    "date": pl.Date(), "timestamp": pl.Datetime("us"), "timestamptz": pl.Datetime("us", "UTC"),
}
#: Types the database turns into one of the above (``::float8``, ``::text``) before they are sent.
_CAST: Final = {"numeric": ("float8", pl.Float64())}
_JSON: Final = ("json", "jsonb")


def relation(query: str | None, url: str) -> sql.Composed:
    """What the day's statement reads: a query as a subquery, or a table named ``[schema.]table`` (quoted as
    identifiers: a name is never SQL)."""
    from psycopg import sql

    if not query or not query.strip():
        raise ConfigError(f"{URL_SETTING} is a PostgreSQL database ({shown(url)}): set {QUERY_SETTING} to the "
                          f"table holding the conversations (schema.table) or a SELECT over them")
    text = query.strip().rstrip(";")
    if _QUERY.match(text):
        return sql.SQL("({}) AS landing").format(sql.SQL(text))  # the user's own SQL, from the settings
    names = text.split(".")
    if len(names) > 2 or not all(n.strip() for n in names):
        raise ConfigError(f"{QUERY_SETTING} {text!r} is neither a table (schema.table) nor a SELECT")
    return sql.SQL("{} AS landing").format(sql.Identifier(*(n.strip().strip('"') for n in names)))


class PostgresLanding:
    """The rows of ``query`` (a table or a SELECT) in the database ``url``."""

    def __init__(self, url: str, query: str | None) -> None:
        self.url = url
        self._relation = relation(query, url)
        with self._connect() as conn:
            self._columns = self._describe(conn)

    def _connect(self) -> psycopg.Connection[Any]:
        import psycopg

        try:
            conn = psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg.Error as exc:
            raise ConfigError(f"{URL_SETTING} {shown(self.url)} cannot be reached: {one_line(exc, self.url)}: check "
                              f"the host, database, user and password") from None
        conn.execute("SET TIME ZONE 'UTC'")  # instants arrive as UTC, whatever the server's default
        return conn

    def _describe(self, conn: psycopg.Connection[Any]) -> dict[str, tuple[str, pl.DataType]]:
        """Each column's PostgreSQL type name and polars type (None: JSON, typed from a sample)."""
        import psycopg
        from psycopg import sql

        try:
            cursor = conn.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(self._relation))
        except psycopg.Error as exc:
            raise ConfigError(f"{QUERY_SETTING} cannot be read from {shown(self.url)}: {one_line(exc, self.url)}"
                              ) from None
        columns: dict[str, tuple[str, pl.DataType | None]] = {}
        for column in cursor.description or []:
            info = conn.adapters.types.get(column.type_code)
            # The registry gives an array's element type, whose ``array_oid`` is the column's type: ``_name``.
            name = "unknown" if info is None else ("_" if info.array_oid == column.type_code else "") + info.name
            element = name[1:] if name.startswith("_") else None
            if name in _JSON:
                columns[column.name] = (name, None)
            elif element is not None and element in _TYPES:
                columns[column.name] = (name, pl.List(_TYPES[element]))
            else:
                columns[column.name] = (name, _TYPES.get(name) or _CAST.get(name, ("text", pl.String()))[1])
        json_columns = [c for c, (_, t) in columns.items() if t is None]
        typed = self._json_types(conn, json_columns) if json_columns else {}
        return {c: (name, t if t is not None else typed[c]) for c, (name, t) in columns.items()}

    def _json_types(self, conn: psycopg.Connection[Any], names: list[str]) -> dict[str, pl.DataType]:
        from psycopg import sql

        query = sql.SQL("SELECT {} FROM {} LIMIT {}").format(
            sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(n)) for n in names), self._relation,
            sql.Literal(JSON_SAMPLE))
        sample = pl.DataFrame(conn.execute(query).fetchall(), schema=dict.fromkeys(names, pl.String()), orient="row")
        types = {}
        for name in names:
            try:
                types[name] = sample.get_column(name).str.json_decode(infer_schema_length=None).dtype
            except pl.exceptions.ComputeError as exc:
                raise _shape_error(f"column {name!r}", exc, "holds JSON values of more than one shape") from None
        # A part the sample never saw a value of (all null, an empty list) has no type to decode later rows'
        # values with: such a column stays the JSON text it is, rather than losing what the sample lacked.
        return {n: pl.String() if dtype_holds(t, lambda part: part == pl.Null) else t for n, t in types.items()}

    def schema(self) -> pl.Schema:
        return pl.Schema({c: t for c, (_, t) in self._columns.items()})

    def _selected(self) -> sql.Composable:
        from psycopg import sql

        parts: list[sql.Composable] = []
        for column, (name, _) in self._columns.items():
            ident = sql.Identifier(column)
            if name in _JSON or (name not in _TYPES and not (name.startswith("_") and name[1:] in _TYPES)):
                cast = _CAST.get(name, ("text", None))[0]
                parts.append(sql.SQL("{}::{} AS {}").format(ident, sql.SQL(cast), ident))  # a type name of ours
            else:
                parts.append(ident)
        return sql.SQL(", ").join(parts)

    def days(self, column: str, stamp: Stamp, timezone: str, undated_day: date | None) -> set[date]:
        """The distinct days, computed by the database (only the days travel)."""
        from psycopg import sql

        col = sql.Identifier(column)
        day = {"date": sql.SQL("{}"), "instant": sql.SQL("({} AT TIME ZONE %(zone)s)::date"),
               "naive": sql.SQL("(({} AT TIME ZONE 'UTC') AT TIME ZONE %(zone)s)::date")}[stamp].format(col)
        query = sql.SQL("SELECT DISTINCT {} FROM {}").format(day, self._relation)
        with self._connect() as conn:
            found = {row[0] for row in conn.execute(query, {"zone": timezone}).fetchall()}
        days = {d for d in found if d is not None}
        if None in found and undated_day is not None:
            days.add(undated_day)
        return days

    def day_batches(self, column: str, stamp: Stamp, window: DayWindow, rows: int) -> Iterator[pl.DataFrame]:
        from psycopg import sql

        low, high = window.bounds(stamp)
        col = sql.Identifier(column)
        where = sql.SQL("({} >= %(low)s AND {} < %(high)s)").format(col, col)
        if window.undated:
            where = sql.SQL("({} OR {} IS NULL)").format(where, col)
        query = sql.SQL("SELECT {} FROM {} WHERE {}").format(self._selected(), self._relation, where)
        yield from self._fetched(query, {"low": low, "high": high}, max(rows, 1))

    def _fetched(self, query: sql.Composed, params: dict[str, object], rows: int) -> Iterator[pl.DataFrame]:
        names = list(self._columns)
        read_as = {c: pl.String() if name in _JSON else t for c, (name, t) in self._columns.items()}
        decoded = [pl.col(c).str.json_decode(t) for c, (name, t) in self._columns.items()
                   if name in _JSON and t != pl.String()]
        fetch = min(rows, FETCH_ROWS)
        with self._connect() as conn, conn.transaction(), conn.cursor(name="fp_landing_day") as cursor:
            cursor.itersize = fetch
            cursor.execute(query, params)
            gathered: list[pl.DataFrame] = []
            held = 0
            while chunk := cursor.fetchmany(min(fetch, rows - held)):  # never more than ``rows`` a chunk
                frame = pl.DataFrame(chunk, schema=read_as, orient="row")
                gathered.append(_decoded(frame, decoded) if decoded else frame)
                held += frame.height
                if held >= rows:
                    yield pl.concat(gathered, rechunk=True).select(names)
                    gathered, held = [], 0
            if gathered:
                yield pl.concat(gathered, rechunk=True).select(names)

    def rows_before(self, column: str, stamp: Stamp, window: DayWindow) -> int:
        from psycopg import sql

        low, _ = window.bounds(stamp)
        query = sql.SQL("SELECT count(*) FROM {} WHERE {} < %s").format(self._relation, sql.Identifier(column))
        with self._connect() as conn:
            found = conn.execute(query, (low,)).fetchone()
        return int(found[0]) if found else 0



def _decoded(frame: pl.DataFrame, decoded: list[pl.Expr]) -> pl.DataFrame:
    """``frame`` with its JSON columns decoded; a value of another shape than the sample's is one line."""
    try:
        return frame.with_columns(decoded)
    except pl.exceptions.ComputeError as exc:
        raise _shape_error("a json/jsonb column", exc,
                           f"holds a value whose shape differs from the first {JSON_SAMPLE:,} rows'") from None


def _shape_error(what: str, exc: Exception, problem: str) -> InputError:
    return InputError(f"{what} of {QUERY_SETTING} {problem} ({' '.join(str(exc).split())[:200]}): select it as "
                      f"text (column::text) or in one shape")
