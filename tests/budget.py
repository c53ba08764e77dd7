"""How many examples a hypothesis test draws: a test asks for ``examples(n)``, its full budget
``n``, which the default run draws; ``pytest --quick`` draws a third of it (at least 5), for a
quicker run while working on the code. (On the 2-core VM the full budgets cost the default
run under 30 s of its 10 minutes: its critical path is the services worker and compiling.)
``tests/conftest.py`` sets :data:`QUICK` before the test modules are imported."""

#: Whether this run draws a third of each budget (``--quick``).
QUICK = False


def examples(n: int) -> int:
    """The ``max_examples`` of a test whose full budget is ``n``."""
    return max(5, n // 3) if QUICK else n
