"""Disjunctions in join predicates, ``(A & B) | C``: a pair joins when any term holds, once.
The oracle against DuckDB's SQL on the same rows, every topology against the oracle on
every backend, the normal form, the index plans and the text and error forms."""

import warnings

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import strategies as st
from layouts import LAYOUTS, every_layout, run_layout
from sql_windows import in_count_window, ranked
from strategies import conditions, tables

import streamjoin as sj
from streamjoin import indexes
from streamjoin.cli import main
from streamjoin.query import MAX_TERMS, Predicate
from streamjoin.query_text import parse_predicate

pytestmark = pytest.mark.filterwarnings("ignore::streamjoin.indexes.IndexFallbackWarning")

A, B, C = sj.less("a"), sj.greater("b"), sj.equal("k")


def _duckdb_pairs(table: pa.Table, window: int, where: str, self_join: bool) -> pa.Table:
    """The contract in SQL: θ as ``where`` (over ``r`` and ``s``), and the earlier of the two
    among the last ``window`` rows of its stream before the later one. A self-join keeps
    (older, newer) when θ holds either way round."""
    rows = table.append_column("row", pa.array(np.arange(len(table))))  # noqa: F841
    if self_join:
        flipped = where.replace("r.", "@.").replace("s.", "r.").replace("@.", "s.")
        sql = f"""
            SELECT r.row AS r, s.row AS s FROM rows r, rows s
            WHERE r.row < s.row AND r.row >= s.row - {window}
              AND (({where}) OR ({flipped}))"""
        return duckdb.sql(sql).to_arrow_table()
    sql = f"""
        WITH {ranked()}
        SELECT r.row AS r, s.row AS s FROM t r, t s
        WHERE r.stream = 0 AND s.stream = 1 AND ({where}) AND {in_count_window(window)}"""
    return duckdb.sql(sql).to_arrow_table()


#: Predicates as text (the contract's own form) with the SQL ``WHERE`` that says the same.
SQL_FORMS = [
    ("(r.a < s.a AND r.b > s.b) OR r.k = s.k", "(r.a < s.a AND r.b > s.b) OR r.k = s.k"),
    ("r.k = s.k AND (r.a < s.a OR r.b + 3 > s.b)", "r.k = s.k AND (r.a < s.a OR r.b + 3 > s.b)"),
    ("|r.x - s.x| <= 1 OR s.x - r.x in [5, 6]", "abs(r.x - s.x) <= 1 OR s.x - r.x BETWEEN 5 AND 6"),
    (
        "(|r.x - s.x| <= 2 AND r.k != s.k) OR (r.a <= s.b AND r.k = s.k) OR r.x = s.a",
        "(abs(r.x - s.x) <= 2 AND r.k <> s.k) OR (r.a <= s.b AND r.k = s.k) OR r.x = s.a",
    ),
    ("(r.a < s.a OR r.b < s.b) AND s.k < 3 AND r.x >= 10", "(r.a < s.a OR r.b < s.b)"),
]


@pytest.mark.parametrize(("text", "where"), SQL_FORMS)
@pytest.mark.parametrize("self_join", [False, True])
def test_oracle_equals_duckdb(text, where, self_join):
    rng = np.random.default_rng(len(text))
    n, window = 240, 12
    columns = {
        "a": rng.integers(0, 20, n),
        "b": rng.integers(0, 20, n),
        "k": rng.integers(0, 4, n),
        "x": rng.integers(0, 30, n).astype(np.float64),
    }
    if not self_join:
        columns = {"stream": rng.integers(0, 2, n).astype(np.int8), **columns}
    table = pa.table(columns)
    pred = parse_predicate(text)
    query = sj.Query(pred, window=sj.CountWindow(window), self_join=self_join)
    filters = " AND ".join(f"{f.side}.{f.attr} {f.op} {f.value}" for f in pred.filters)
    if filters and self_join:  # in a self-join every filter applies to both tuples
        both = filters.replace("r.", "@.").replace("s.", "r.").replace("@.", "s.")
        filters = f"{filters} AND {both}"
    sql_where = f"({where}) AND {filters}" if filters else where
    expected = _duckdb_pairs(table, window, sql_where, self_join)
    assert len(expected) > 0
    assert sj.oracle.same_pairs(sj.oracle.join(query, table), expected)


@st.composite
def keyed(draw, attr: str, attr_s: str):
    """A condition an index can search: a finite band or an equality on ``(attr, attr_s)``."""
    kind = draw(st.sampled_from(["band", "band_lohi", "equal"]))
    if kind == "band":
        return sj.band(attr, draw(st.sampled_from([0, 0.5, 1, 3])), attr_s)
    if kind == "band_lohi":
        lo = draw(st.sampled_from([-3, -1, 0, 1]))
        return sj.band(attr, None, attr_s, lo=lo, hi=lo + draw(st.sampled_from([0, 1, 2.5])))
    return sj.equal(attr, attr_s)


#: The attribute pairs of the terms' keys when they share none (an index per term).
APART = [("x", "x"), ("y", "y"), ("x", "y")]


@st.composite
def disjunctions(draw):
    """An OR of two or three conjunctions on ``x`` and ``y``, in one of three shapes: any
    conditions (one or two a term), half the time ANDed with a common one; a band on ``x`` in
    every term (their hull is served); or a searchable condition in every term on attributes
    no other term's shares, and maybe another condition (an index per term, or with a
    self-join's cross-attribute key, a scan)."""
    shape = draw(st.sampled_from(["any", "hull", "apart"]))
    terms = []
    for t in range(draw(st.integers(2, 3))):
        term = draw(conditions(draw(st.sampled_from(["x", "y"]))))
        if shape == "hull":
            term = sj.band("x", None, lo=draw(st.sampled_from([-3, -1, 0, 2])), hi=4) & term
        elif shape == "apart":
            key = draw(keyed(*APART[t]))
            term = key & term if draw(st.booleans()) else key
        elif draw(st.booleans()):
            term = term & draw(conditions(draw(st.sampled_from(["x", "y"]))))
        terms.append(term)
    pred = terms[0]
    for t in terms[1:]:
        pred = pred | t
    if shape == "any" and draw(st.booleans()):
        pred = draw(conditions(draw(st.sampled_from(["x", "y"])))) & pred
    return pred


@every_layout(60, predicate=disjunctions(), lateness=st.sampled_from([None, None, None, 3]))
def test_every_layout_equals_the_oracle(
    self_join, data, predicate, window, layout, backend, batch_size, delivery_seed, lateness
):
    table = data.draw(tables(self_join))
    on_late = "error" if lateness is None else "drop"  # (a row behind the other stream is late)
    query = sj.Query(
        predicate, window=window, self_join=self_join, lateness=lateness, on_late=on_late
    )
    res = run_layout(query, table, layout, backend, batch_size, delivery_seed)
    if res is None:
        return
    assert res.same_pairs(sj.oracle.join(query, table))


def test_wide_integers_at_a_terms_edge_are_exact():
    """int64 keys near 2**62, whose float64 images are 1024 apart: each term decides on the
    exact integers, and the served hull's probe is widened, not rounded."""
    base = 2**62
    x = np.array([base, base + 1, base + 3, base + 4, base + 5, base + 9], dtype=np.int64)
    data = {"stream": np.array([0, 1, 1, 0, 1, 1], dtype=np.int8), "x": x}
    pred = sj.band("x", None, lo=1, hi=1) | sj.band("x", None, lo=3, hi=3)
    query = sj.Query(pred, window=sj.CountWindow(6))
    expected = sj.oracle.join(query, data)
    pairs = set(zip(expected["r"].to_pylist(), expected["s"].to_pylist(), strict=True))
    assert pairs == {(0, 1), (0, 2), (3, 4)}  # s - r of 1 or 3; (3, 5) is 5 apart
    for layout in ("single", "grid", "shared"):
        res = run_layout(query, data, layout, "local", 2, 0)
        assert res is not None and res.same_pairs(expected), layout


@pytest.mark.parametrize("layout", ["grid"])
def test_disjunction_on_ray(ray_session, layout):
    data = sj.sources.synthetic(3_000, low=0, high=500, attrs=("x", "y"), seed=7)
    pred = (sj.band("x", 2) & sj.not_equal("y")) | sj.band("y", None, lo=10, hi=12)
    assert indexes.plan(indexes.default_for(pred), pred).terms  # an index per term
    query = sj.Query(pred & (sj.r.y < 400), window=sj.CountWindow(300))
    res = sj.run(query, data, LAYOUTS[layout](), backend="ray", batch_size=64)
    expected = sj.oracle.join(query, data)
    assert len(expected) > 0
    assert res.same_pairs(expected)


def test_normal_form():
    assert (A | B).terms == ((A,), (B,)) and not (A | B).conditions
    p = (A | B) & C
    assert p.conditions == (C,) and p.terms == ((A,), (B,))
    assert p == C & (A | B) == (A & C) | (B & C)
    assert Predicate((A,)) == A | (A & B)  # absorption
    assert (A | A).terms == () and Predicate((A,)) == A | A
    assert str((A & B) | C) == "(r.a < s.a AND r.b > s.b) OR r.k == s.k"
    assert str(C & (A | B) & (sj.r.x < 5)) == "r.k == s.k AND (r.a < s.a OR r.b > s.b) AND r.x < 5"
    four = (A | B) & (C | sj.band("x", 1))
    assert len(four.terms) == 4
    # a filter on every side of an OR applies to the whole join
    f = sj.s.z >= 2
    assert ((A & f) | (B & f)) == (A | B) & f
    assert sj.Query(A | B, window=sj.CountWindow(3)).attrs == ("a", "b")


def test_the_hull_of_the_terms_is_served():
    pred = sj.band("x", 1) | (sj.band("x", None, lo=5, hi=6) & sj.less("a"))
    (hull,) = pred.implied
    assert (hull.attr, hull.lo, hull.hi, hull.kind) == ("x", -1.0, 6.0, "band")
    plan = indexes.plan("bisort", pred)
    assert not plan.fallback and plan.note is None
    one_sided = sj.less("a") | sj.less("a", shift=3)
    assert [c.kind for c in one_sided.implied] == ["less"]
    # no condition on one pair in every term: no hull, the window is scanned
    assert (sj.band("x", 1) | sj.band("y", 1)).implied == ()
    assert (sj.not_equal("x") | sj.band("x", 1)).implied == ()


def test_an_index_per_term_when_the_terms_share_nothing():
    pred = (sj.band("x", 1) & sj.less("a")) | sj.equal("k") | sj.band("y", None, lo=2, hi=5)
    plan = indexes.plan(indexes.default_for(pred), pred)
    assert (plan.index, plan.keys, plan.fallback) == ("bisort", (), True)
    assert plan.terms == ((0,), (2,), (3,))  # positions in pred.flat
    assert indexes.plan("hash", sj.equal("k") | sj.equal("a")).terms == ((0,), (1,))
    assert indexes.default_for(sj.equal("k") | sj.equal("a")) == "hash"
    assert indexes.default_for((A & B) | C) == "nested_loop"  # a term of inequalities only
    assert indexes.plan("nested_loop", pred).terms == ()  # a scan per term gains nothing
    assert indexes.plan("hash", pred).terms == ()  # a term it cannot serve: one scan


@pytest.mark.parametrize(
    ("index", "options"),
    [("bisort", {}), ("pim_tree", {"layout": "compact"}), ("hash", {}), ("bplus_tree", {})],
)
def test_per_term_indexes_are_exact(index, options):
    """Each term's index probed apart, the candidates merged (and a compact layout's superset
    refined), and the in-batch join swept once per term; int64 keys near 2**62 too (whose
    images tie, so a sweep there meets the whole batch)."""
    rng = np.random.default_rng(3)
    n = 400
    pred = sj.equal("k") | sj.equal("x")
    if index != "hash":
        pred = (sj.band("k", None, lo=-2, hi=1) & sj.not_equal("x")) | sj.band("x", 1)
    assert indexes.plan(index, pred).terms  # nothing in common: an index per term
    for base in (0, 2**62):
        data = {
            "stream": rng.integers(0, 2, n).astype(np.int8),
            "k": base + rng.integers(0, 40, n),
            "x": rng.integers(0, 60, n).astype(np.float64),
        }
        for self_join in (False, True):
            table = {c: v for c, v in data.items() if c != "stream" or not self_join}
            query = sj.Query(pred, window=sj.CountWindow(60), self_join=self_join)
            expected = sj.oracle.join(query, table)
            assert len(expected) > 0
            for layout in (sj.topologies.single(index, **options), sj.topologies.grid(2, 2, index)):
                res = sj.run(query, table, layout, batch_size=32)
                assert res.same_pairs(expected), (index, base, self_join, layout)


def test_per_term_index_check_and_protocol():
    from streamjoin.indexes.per_term import PerTermIndex

    index = PerTermIndex(indexes.get("bisort"), (1, 1))
    keys = np.arange(20, dtype=np.float64).reshape(2, 10)
    index.insert(keys, np.arange(10))
    index.check()
    probe = keys[:, :2]
    pos, refs = index.probe(probe, np.array([0.0, 5.0]), np.array([1.0, 6.0]))
    # probe 0 (keys 0, 10): items 0, 1 by the first term; items 5, 6 by the second
    found = sorted(zip(pos.tolist(), refs.tolist(), strict=True))
    assert found == [(0, 0), (0, 1), (0, 5), (0, 6), (1, 1), (1, 2), (1, 6), (1, 7)]
    pos, refs = index.probe(probe, np.array([0.0, 0.0]), np.array([1.0, 1.0]))
    assert len(pos) == 4  # both terms find the same items: each once
    index.expire(5)
    index.check()
    with pytest.raises(ValueError, match="two or more terms"):
        PerTermIndex(indexes.get("bisort"), (2,))


def test_a_named_index_that_cannot_serve_an_or_warns():
    query = sj.Query((A & B) | C, window=sj.CountWindow(4))
    with pytest.warns(indexes.IndexFallbackWarning, match="OR's terms share no condition"):
        sj.topologies.single("hash").check(query)  # (no equality in the first term)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sj.topologies.single().check(query)  # the default index: nothing to say
    assert isinstance(query.predicate, sj.Predicate)
    # one index for all the shared core's threads: it scans, and says why
    with pytest.warns(indexes.IndexFallbackWarning, match="no condition of .* in every OR term"):
        LAYOUTS["shared"]().check(query)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LAYOUTS["shared"]().check(sj.Query(C & (A | B), window=sj.CountWindow(4)))


def test_text_forms():
    assert parse_predicate("(r.a < s.a AND r.b > s.b) OR r.k = s.k") == (A & B) | C
    assert parse_predicate("r.a < s.a and r.b > s.b or r.k = s.k") == (A & B) | C
    assert parse_predicate("r.k = s.k, (a<a or b>b)") == C & (A | B)
    assert parse_predicate("((r.order < s.order)) OR r.android = s.android") == sj.less(
        "order"
    ) | sj.equal("android")
    text = "r.k == s.k AND (r.a < s.a OR r.b > s.b) AND s.z < 3"
    assert str(parse_predicate(text)) == text


def test_cli_query_with_or(tmp_path, capsys):
    argv = ["run", "-n", "600", "--window", "50", "--check", "--no-progress"]
    argv += ["--query", "(r.a < s.a AND r.b > s.b) OR r.k = s.k", "-o", str(tmp_path)]
    code = main(argv)
    text = capsys.readouterr().out
    assert code == 0, text
    assert "oracle: same pairs" in text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("(r.a < s.a", "not closed"),
        ("r.a < s.a)", "no opening bracket"),
        ("r.a < s.a OR", "missing at the end"),
        ("OR r.a < s.a", "missing before 'OR'"),
        ("()", "missing before"),
        ("(r.a < s.a AND r.x < 3) OR r.b > s.b", "filter r.x < 3 is inside one side of an OR"),
        ("r.a < s.a OR r.a ~ s.b", "cannot read the condition"),
    ],
)
def test_text_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_predicate(text)


def test_api_errors():
    with pytest.raises(ValueError, match="inside one side of an OR"):
        (A & (sj.r.x < 5)) | B
    with pytest.raises(ValueError, match="inside one side of an OR"):
        A | (sj.r.x < 5)
    with pytest.raises(ValueError, match="inside one side of an OR"):
        (sj.s.y > 1) | A
    with pytest.raises(TypeError):
        A | 3
    many = sj.band("x", 0) | sj.band("x", 1)
    for k in range(2, 7):
        many = many & (sj.band("y", k) | sj.band("z", k))
    assert len(many.terms) == MAX_TERMS
    with pytest.raises(ValueError, match=f"at most {MAX_TERMS}"):
        many & (sj.less("q") | sj.greater("q"))
