"""The pure parts of a rehearsal's judgement: drift between two reads of two stores, and the
SLO-aware verdict on a lag comparison (migration/reconcile.py, migration/compare.py)."""

from __future__ import annotations

from migration.compare import Comparison, compare, in_windows, lag_comparison, verdict
from migration.dual import DualState, SideFires
from migration.reconcile import account, confirm, diff
from schedulers.base import Timer


def t(tid: str, at: float) -> Timer:
    return Timer(tid, at)


def test_diff_names_missing_extra_and_moved_timers():
    src = [t("a", 100.0), t("b", 200.0), t("c", 300.0)]
    tgt = [t("b", 200.0004), t("c", 310.0), t("z", 50.0)]
    d = diff(src, tgt)
    assert set(d.missing) == {"a"} and set(d.extra) == {"z"} and set(d.moved) == {"c"}
    assert d.counts() == {"missing": 1, "extra": 1, "moved": 1, "total": 3}
    s = d.samples()
    assert s["moved"][0].startswith("c ") and "+10.000 s" in s["moved"][0]


def test_a_store_a_fire_behind_is_catching_up_not_drifting():
    dual = DualState()
    dual.decide(("c", 300.0), 310.0)  # the executor fired c@300 and re-armed it to 310
    d = diff([t("c", 310.0)], [t("c", 300.0)], explains=dual.explains)
    assert d.total == 0 and d.catching_up == 1
    dual.decide(("c", 310.0), 320.0)  # two fires behind is still lag
    assert diff([t("c", 320.0)], [t("c", 300.0)], explains=dual.explains).catching_up == 1
    assert diff([t("c", 330.0)], [t("c", 300.0)], explains=dual.explains).total == 1


def test_confirm_keeps_only_drift_that_held_still():
    first = diff([t("a", 1.0), t("m", 5.0), t("n", 5.0)], [t("m", 6.0), t("n", 6.0), t("x", 9.0)])
    # a second read: a arrived, m's target moved on (it was in flight), n is stuck, x is still extra
    second = diff([t("a", 1.0), t("m", 7.0), t("n", 7.0)], [t("a", 1.0), t("m", 7.5), t("n", 6.0), t("x", 9.0)])
    kept, went_away = confirm(first, second)
    assert set(kept.missing) == set() and set(kept.moved) == {"n"} and set(kept.extra) == {"x"}
    assert kept.moved["n"][0].fire_at == 7.0, "repair uses the source's latest read"
    assert went_away == 2


def slow_shadow(delay_s: float) -> tuple[SideFires, SideFires]:
    p, s = SideFires(), SideFires()
    for i in range(400):
        tenant = f"t{i % 4}"
        due = 1000.0 + i * 0.1
        p.add(f"x{i}", due, 0.05 + (i % 10) * 0.01, tenant)
        s.add(f"x{i}", due, 0.05 + (i % 10) * 0.01 + delay_s + (3.0 if tenant == "t3" else 0.0), tenant)
    return p, s


def test_a_shadow_ten_seconds_slower_fails_a_one_second_regression_limit_only():
    p, s = slow_shadow(10.0)
    in_window = in_windows([(1000.0, 1100.0)], 1100.0)

    def judged(due: float, lag: float) -> bool:
        return in_window(due)

    c = compare(p, s, tolerance_s=1.0, judged_until=1100.0, windows=[(1000.0, 1100.0)])
    assert c.matched == 400 and c.missing_in_shadow == 0
    lag = lag_comparison(p, s, judged)
    assert 9_900 < lag["regression_p99"] < 13_200
    assert lag["worst_tenant"]["tenant"] == "t3"  # 3 s worse than the rest
    strict = verdict(c, 0, 0, lag, max_lag_p99_ms=15_000, max_lag_p99_source="test", max_lag_regression_ms=1_000)
    assert not strict.go and any("lag regression" in r and "--max-lag-regression" in r for r in strict.reasons)
    assert strict.checks["lag_regression_p99"]["ok"] is False
    lenient = verdict(c, 0, 0, lag, max_lag_p99_ms=15_000, max_lag_p99_source="test")
    assert lenient.go, lenient.reasons
    bound = verdict(c, 0, 0, lag, max_lag_p99_ms=5_000, max_lag_p99_source="the declared bound")
    assert not bound.go and "shadow lag p99" in bound.reasons[0] and "the declared bound" in bound.reasons[0]


def test_fires_outside_the_judged_windows_are_not_counted():
    p, s = SideFires(), SideFires()
    p.add("a", 10.0, 0.1)
    p.add("a", 50.0, 0.1)  # due while only the primary ran: not judged
    s.add("a", 10.0, 0.2)
    c = compare(p, s, tolerance_s=1.0, judged_until=100.0, windows=[(0.0, 20.0), (60.0, 100.0)])
    assert (c.matched, c.missing_in_shadow, c.extra_in_shadow) == (1, 0, 0)
    assert isinstance(c, Comparison)


def test_the_regression_compares_like_with_like_on_each_side_of_a_switch():
    """Before the switch the new store observes what the old one executes (same fires); after
    it, the new store executes and is held against the old store's own figure from before the
    switch, never against the old store's observed lag meanwhile (here a wild 20 s)."""
    p, s = SideFires(), SideFires()
    switch = 1050.0
    for i in range(1000):
        due = 1000.0 + i * 0.1
        p.add(f"x{i}", due, 0.1 + (i % 10) * 0.01 + (20.0 if due >= switch else 0.0))
        s.add(f"x{i}", due, 5.1 + (i % 10) * 0.01)

    def judged(due: float, lag: float) -> bool:
        return due < 1100.0

    lag = lag_comparison(p, s, judged, [(switch, "shadow")])
    before, after = lag["periods"]
    assert before["executor"] == "primary" and before["same_fires"] == 500
    assert after["executor"] == "shadow" and after["baseline"]["fires"] == 500
    assert after["primary"]["role"] == "observed" and after["primary"]["p99"] > 20_000
    for q in (before, after):
        assert 4_900 < q["regression_p99"] < 5_100, q
    assert 4_900 < lag["regression_p99"] < 5_100
    # each store's headline: the old one over what it executed, the new one likewise
    assert lag["primary"]["role"] == "executed" and lag["primary"]["fires"] == 500 and lag["primary"]["p99"] < 300
    assert lag["shadow"]["role"] == "executed" and lag["shadow"]["fires"] == 500
    # without a switch the same shadow, observing throughout, regresses the same
    again = lag_comparison(p, s, lambda due, lag: due < switch)
    assert again["shadow"]["role"] == "observed" and 4_900 < again["regression_p99"] < 5_100


def test_account_explains_every_timer_of_both_counts():
    src1 = [t("same", 1.0), t("inflight", 2.0), t("gone", 3.0), t("lost", 4.0)]
    tgt1 = [t("same", 1.0), t("behind", 5.0), t("rearmed", 6.0)]
    src2 = [t("same", 1.0), t("inflight", 2.0), t("lost", 4.0)]  # gone fired and finished
    tgt2 = [t("same", 1.0), t("inflight", 2.0), t("rearmed", 7.0)]  # behind fired, inflight is back
    first = diff(src1, tgt1)
    kept, _ = confirm(first, diff(src2, tgt2))
    a = account(src1, tgt1, first, kept, (src2, tgt2))
    assert (a["source_armed"], a["target_armed"], a["in_both"]) == (4, 3, 1)
    assert a["only_source"] == {"total": 3, "in_flight": 1, "fired_since": 1, "changed": 0, "drift": 1}
    assert a["only_target"] == {"total": 2, "in_flight": 0, "fired_since": 1, "changed": 1, "drift": 0}
    for side, n in (("only_source", 4), ("only_target", 3)):
        c = a[side]
        assert a["in_both"] + c["total"] == n
        assert c["in_flight"] + c["fired_since"] + c["changed"] + c["drift"] == c["total"]
