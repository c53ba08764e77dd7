"""How many examples a hypothesis test draws: a test asks for ``examples(n)``, its budget in a
thorough run (``pytest --thorough``); the default run draws a third of it, at least 5, so that
it stays within a few minutes on two cores. ``tests/conftest.py`` sets :data:`THOROUGH`
before the test modules are imported."""

#: Whether this run draws the full budgets (``--thorough``).
THOROUGH = False


def examples(n: int) -> int:
    """The ``max_examples`` of a test whose thorough budget is ``n``."""
    return n if THOROUGH else max(5, n // 3)
