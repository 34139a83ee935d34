"""service/observability/health.py: what the probes answer, on a fake clock."""

from __future__ import annotations

import pytest

from service.observability.health import Health


@pytest.fixture
def health(clock) -> Health:
    return Health(liveness_timeout_s=60, broker_timeout_s=30, clock=clock)


def test_live_while_starting_but_not_ready_until_warmed_up_and_looping(health, clock):
    assert health.live() == (True, "starting")
    assert health.ready()[0] is False and "model" in health.ready()[1]
    health.warmed_up = True
    assert health.ready() == (False, "connecting to the brokers")
    health.tick()
    assert health.ready() == (True, "ok, waiting for a partition assignment")
    health.assigned = 3
    assert health.ready() == (True, "ok")


def test_a_loop_that_stops_coming_round_fails_both_probes(health, clock):
    health.warmed_up = True
    health.tick()
    clock.advance(60)
    assert health.live()[0] is True  # exactly at the timeout: still live
    clock.advance(1)
    live, why = health.live()
    assert live is False and "61s" in why
    assert health.ready()[0] is False
    health.tick()
    assert health.live() == (True, "ok")


def test_brokers_down_longer_than_the_timeout_makes_it_unready_but_still_live(health, clock):
    health.warmed_up = True
    health.tick()
    health.brokers(False)
    clock.advance(20)
    health.brokers(False)  # a repeated report does not restart the outage
    clock.advance(11)
    health.tick()
    ready, why = health.ready()
    assert ready is False and "31s" in why
    assert health.live() == (True, "ok")
    health.brokers(True)
    assert health.ready()[0] is True


def test_shutting_down_is_not_ready(health):
    health.warmed_up = True
    health.tick()
    health.stopping = True
    assert health.ready() == (False, "shutting down")


def test_a_permission_refused_longer_than_the_bound_makes_it_unready_until_it_works_again(health, clock):
    health.warmed_up = True
    health.tick()
    health.access("READ on group 'g'", refused=True)
    clock.advance(20)
    health.access("READ on group 'g'", refused=True)  # refused again: still counted from the first time
    health.access("WRITE on topic 'out'", refused=True)
    assert health.ready()[0] is True  # within the bound: a grant on its way, a leader moving
    clock.advance(11)
    health.tick()
    assert health.ready() == (False, "not authorised: READ on group 'g' refused for 31s")
    assert health.live() == (True, "ok")  # the loop still comes round: no restart would help
    health.access("READ on group 'g'", refused=False)
    assert health.ready()[0] is True  # WRITE was refused for 11s only
    clock.advance(20)
    assert health.ready() == (False, "not authorised: WRITE on topic 'out' refused for 31s")
    health.access("WRITE on topic 'out'", refused=False)
    health.access("WRITE on topic 'out'", refused=False)  # works, and was not refused: nothing to clear
    assert health.ready() == (True, "ok, waiting for a partition assignment")
