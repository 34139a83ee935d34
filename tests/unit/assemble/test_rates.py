"""service/assemble/rates.py: cumulative counters -> rates per series."""

from __future__ import annotations

from service.assemble.rates import Rates


def test_a_rate_needs_two_samples_of_the_same_series():
    rates = Rates()
    assert rates.rate("a", 10.0, 1000.0) is None
    assert rates.rate("b", 10.0, 5.0) is None
    assert rates.rate("a", 20.0, 3000.0) == 200.0
    assert rates.rate("a", 30.0, 3000.0) == 0.0


def test_a_reset_or_a_new_start_gives_no_rate_and_starts_over():
    rates = Rates()
    rates.rate("a", 10.0, 1000.0, start=1.0)
    assert rates.rate("a", 20.0, 10.0, start=1.0) is None  # went down: the agent restarted
    assert rates.rate("a", 30.0, 110.0, start=1.0) == 10.0
    assert rates.rate("a", 40.0, 500.0, start=35.0) is None  # a new start time: a new counter
    assert rates.rate("a", 50.0, 600.0, start=35.0) == 10.0


def test_an_old_sample_changes_nothing():
    rates = Rates()
    rates.rate("a", 20.0, 2000.0)
    assert rates.rate("a", 10.0, 1000.0) is None  # a re-read: older than the reference
    assert rates.rate("a", 20.0, 2000.0) is None  # the same sample again
    assert rates.rate("a", 30.0, 2500.0) == 50.0


def test_the_least_recently_updated_series_are_forgotten_first():
    rates = Rates(max_series=2)
    rates.rate("a", 1.0, 1.0)
    rates.rate("b", 1.0, 1.0)
    rates.rate("a", 2.0, 2.0)  # a is now the most recent
    rates.rate("c", 1.0, 1.0)  # forgets b
    assert len(rates) == 2
    assert rates.rate("a", 3.0, 3.0) == 1.0
    assert rates.rate("b", 2.0, 2.0) is None
