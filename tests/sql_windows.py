"""The join's windows in DuckDB's SQL, for the tests that check the oracle against it: each
row's rank in its stream and the count of each stream's rows before it (every row counts,
filtered or not), and the count-window condition on a pair ``r``, ``s`` of those rows."""


def ranked(source: str = "rows") -> str:
    """``t AS (...)``: ``source``'s rows (ordered by ``row``) with ``rank``, ``r_before`` and
    ``s_before``."""
    return f"""t AS (
            SELECT *,
                row_number() OVER (PARTITION BY stream ORDER BY row) - 1 AS rank,
                coalesce(sum(CASE WHEN stream = 0 THEN 1 ELSE 0 END) OVER (ORDER BY row
                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS r_before,
                coalesce(sum(CASE WHEN stream = 1 THEN 1 ELSE 0 END) OVER (ORDER BY row
                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS s_before
            FROM {source})"""


def in_count_window(window: int) -> str:
    """The earlier of ``r`` and ``s`` is among the last ``window`` rows of its stream before
    the later one."""
    return f"""((s.row > r.row AND r.rank >= s.r_before - {window})
            OR (r.row > s.row AND s.rank >= r.s_before - {window}))"""
