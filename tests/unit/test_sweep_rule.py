"""`bench sweep`'s stop rule on synthetic summaries: a rate is held only when the run completed,
kept its correctness promise (0 lost, 0 duplicate keyed effects), achieved >= 95% of the offered
rate with the offered rate >= 95% of the target, and kept p99 lag over every due fire within the
SLO; the maximum sustainable rate is the last rate held before the first one that was not."""

import pytest

from harness.sweep_rule import judge, max_sustainable, parse_rates, writes_per_fire
from metrics.accounting import EXIT_INCORRECT, NOT_DELIVERED, rate_held

SLO_MS = 1000.0


def summary(achieved=1000.0, offered=1000.0, target=1000.0, p99=50.0, lost=0, complete=True, **extra):
    held, _ = rate_held(target, offered, achieved)
    failures = [f"{lost} fires lost"] if lost else []
    s = {
        "complete": complete,
        "incomplete_reason": None if complete else "crashed: boom",
        "correct": not failures,
        "failures": failures,
        "target_rate": target,
        "achieved_rate": achieved,
        "offered_rate": offered,
        "rate_held": held,
        "outcomes": {"due": 1000, "on_time": 1000 - lost, "late": 0, "pending": 0, "lost": lost},
        "lag_ms": {"p50": 1.0, "p99": p99},
        "per_fire": {"inserts": None, "updates": None, "deletes": None},
    }
    s.update(extra)
    return s


def test_a_run_at_target_within_the_slo_is_held():
    assert judge(summary(), 1000, SLO_MS) == (True, None)


def test_achieved_exactly_95_percent_of_offered_is_held_and_below_is_not():
    assert judge(summary(achieved=950.0), 1000, SLO_MS)[0] is True
    held, why = judge(summary(achieved=949.0), 1000, SLO_MS)
    assert not held and "rate not held" in why and "949" in why


def test_an_offered_rate_below_95_percent_of_the_target_is_not_held():
    # everything offered was delivered, but the load itself fell short (closed loop, skipped periods)
    held, why = judge(summary(achieved=900.0, offered=900.0), 1000, SLO_MS)
    assert not held and "900.0/s offered" in why
    # an offered rate above the target (retries after provider errors) never lowers the bar
    assert judge(summary(achieved=1010.0, offered=1050.0), 1000, SLO_MS)[0] is True
    assert judge(summary(achieved=990.0, offered=1050.0), 1000, SLO_MS)[0] is False


def test_one_lost_fire_is_not_held():
    held, why = judge(summary(lost=1), 1000, SLO_MS, exit_code=EXIT_INCORRECT)
    assert not held and "1 fires lost" in why


def test_p99_over_the_slo_or_not_delivered_is_not_held():
    assert judge(summary(p99=1000.0), 1000, SLO_MS)[0] is True  # at the SLO: held
    held, why = judge(summary(p99=1000.1), 1000, SLO_MS)
    assert not held and "SLO" in why
    held, why = judge(summary(p99=NOT_DELIVERED), 1000, SLO_MS)
    assert not held and "not delivered" in why


def test_incomplete_failed_or_missing_runs_are_not_held():
    assert judge(summary(complete=False), 1000, SLO_MS) == (False, "incomplete: crashed: boom")
    assert judge(summary(), 1000, SLO_MS, exit_code=1) == (False, "bench run exited 1")
    assert judge(None, 1000, SLO_MS, exit_code=2)[0] is False
    assert judge(summary(achieved=None), 1000, SLO_MS)[0] is False
    assert judge(summary(lag_ms={"p99": None}), 1000, SLO_MS) == (False, "no lag measured")


def entries(*held):
    return [{"rate": r, "held": h} for r, h in held]


def test_max_sustainable_is_the_last_rate_held_before_the_first_failure():
    assert max_sustainable(entries((300, True), (556, True), (1000, False))) == 556
    assert max_sustainable(entries((300, True), (556, True), (1000, True))) == 1000
    # a later rate held by luck after a failure does not count: the sweep stops at the first failure
    assert max_sustainable(entries((300, True), (556, False), (1000, True))) == 300
    assert max_sustainable(entries((1000, True), (300, False))) is None  # judged in rate order
    assert max_sustainable(entries((300, False))) is None
    assert max_sustainable([]) is None


def test_rates_parse_ascending_without_duplicates():
    assert parse_rates("1000, 556/s,300,556") == [300.0, 556.0, 1000.0]
    assert parse_rates("120/min") == [2.0]
    for bad in ("", "fast", "0", "100,-5"):
        with pytest.raises(ValueError):
            parse_rates(bad)


def test_writes_per_fire_sums_row_writes_and_is_none_without_tables():
    assert writes_per_fire(summary()) is None
    assert writes_per_fire({"per_fire": {"inserts": 1.0, "updates": 2.0, "deletes": 1.0}}) == 4.0
    assert writes_per_fire({"per_fire": {"inserts": 0.3, "updates": 2.0, "deletes": None}}) == pytest.approx(2.3)


def test_slo_spec_gives_every_backend_a_p99_bound():
    from harness.sweep_rule import DEFAULT_SLO, parse_slo, slo_for

    default_ms, overrides = parse_slo("1s,temporal_shards=max-lag,pg_queue=2.5s")
    assert default_ms == 1000.0 and overrides == {"temporal_shards": "max-lag", "pg_queue": 2500.0}
    assert slo_for("pg_leased", default_ms, overrides, 1.1) == (1000.0, "--slo-p99")
    assert slo_for("pg_queue", default_ms, overrides, 2.0)[0] == 2500.0
    assert slo_for("temporal_shards", default_ms, overrides, 12.0)[0] == 12000.0  # its declared MaxLag bound
    assert slo_for("temporal_shards", default_ms, overrides, None)[0] == 1000.0  # unknown bound: the default
    # the default: one bound for every backend, the workload's on-time bound
    from harness.sweep import default_slo_spec

    assert "on-time" in DEFAULT_SLO
    assert parse_slo(default_slo_spec(None, [])) == (10_000.0, {})
    assert parse_slo(default_slo_spec(None, ["--on-time", "3s"])) == (3000.0, {})
    for bad in ("", "max-lag", "pg_queue=1s", "fast", "1s,x=soon", "0s"):
        with pytest.raises(ValueError):
            parse_slo(bad)


def test_a_backend_with_a_long_max_lag_warms_up_longer():
    from harness.sweep_rule import warmup_for

    assert warmup_for(5.0, 0.55) == 5.0  # memory: --warmup
    assert warmup_for(5.0, 12.0) == 18.0  # temporal_shards (MaxLag 10 s): 1.5 x its bound
    assert warmup_for(30.0, 12.0) == 30.0
    assert warmup_for(5.0, None) == 5.0
