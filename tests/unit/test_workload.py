import math

import numpy as np
import pytest

from loadgen import workload as wl
from loadgen.population import build, from_trace, tenant_weights


def test_every_preset_loads_and_resolves():
    names = wl.presets()
    assert {"production", "smoke", "noisy-tenant", "long-horizon", "herd"} <= set(names)
    for name in names:
        w = wl.load(name).resolved()
        assert w.name == name
        assert w.triggers > 0 and w.rate_per_s > 0 and w.poll_concurrency >= 1


def test_production_population_follows_the_rate():
    # the Composio article: 556 fires/s at 60-120 s intervals -> rate / (ln 2 / 60) triggers
    w = wl.load("production").resolved()
    assert w.rate_per_s == pytest.approx(556.0)
    assert w.triggers == round(556.0 / (math.log(2) / 60.0))


def test_rate_follows_triggers_when_only_triggers_given():
    w = wl.Overrides({"triggers": "1000"}).apply(wl.load("smoke")).resolved()
    assert w.triggers == 1000
    assert w.rate_per_s == pytest.approx(1000 * math.log(12 / 6) / 6)


def test_cli_overrides_take_human_forms():
    w = (
        wl.Overrides(
            {
                "rate": "33360/min",
                "interval": "10s..20s",
                "duration": "2m",
                "warmup": "5s",
                "state_size": "512",
                "tenants": "7",
                "seed": "9",
            }
        )
        .apply(wl.load("production"))
        .resolved()
    )
    assert (w.rate_per_s, w.interval_min_s, w.interval_max_s) == (556.0, 10.0, 20.0)
    assert (w.duration_s, w.warmup_s, w.state_bytes, w.tenants, w.seed) == (120.0, 5.0, 512, 7, 9)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"rate": "10/s", "colour": "red"}, "unknown workload field 'colour'"),
        ({"rate": "10/s", "interval": "9s..3s"}, "invalid interval"),
        ({"rate": "10/s", "error_rate": 2}, "error_rate"),
    ],
)
def test_bad_fields_say_what_is_wrong(data, message):
    with pytest.raises(ValueError, match=message):
        wl.from_mapping(data).resolved()


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError, match="smoke"):
        wl.load("nosuch")


def test_population_is_deterministic_and_spread_over_one_interval():
    w = wl.Overrides({"triggers": "5000"}).apply(wl.load("smoke")).resolved()
    a, b = build(w), build(w)
    assert a.ids == b.ids and a.tenants == b.tenants
    assert np.array_equal(a.first_fire_s, b.first_fire_s)
    assert ((a.interval_s >= 6.0) & (a.interval_s <= 12.0)).all()
    assert ((a.first_fire_s >= 0) & (a.first_fire_s < a.interval_s)).all()
    # first fires arrive at the steady rate from the first second: ~rate per second over [0, 6)
    per_s = np.histogram(a.first_fire_s, bins=6, range=(0, 6))[0]
    assert per_s.min() > 0.8 * w.rate_per_s and per_s.max() < 1.2 * w.rate_per_s
    assert a.rate_per_s() == pytest.approx(w.rate_per_s, rel=0.05)


def test_tenant_skew_is_zipf():
    p = tenant_weights(10, 1.0)
    assert p[0] / p[1] == pytest.approx(2.0) and p.sum() == pytest.approx(1.0)
    assert np.allclose(tenant_weights(4, 0.0), 0.25)


def test_long_horizon_and_herd_shapes():
    lh = build(wl.Overrides({"triggers": "2000"}).apply(wl.load("long-horizon")).resolved())
    far = lh.first_fire_s[lh.long_horizon]
    assert 0.4 < lh.long_horizon.mean() < 0.6
    assert (far >= 30 * 86400).all() and (far <= 60 * 86400).all()
    herd = build(wl.Overrides({"triggers": "2000"}).apply(wl.load("herd")).resolved())
    assert 0.4 < np.mean(herd.first_fire_s == 10.0) < 0.6


def test_trace_replay(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("trigger_id,tenant_id,interval_s,first_fire_s\na,t1,10,0.5\nb,t2,20,3\nc,t1,60,5000000\n")
    pop = from_trace(path)
    assert pop.ids == ["a", "b", "c"] and pop.tenants == ["t1", "t2", "t1"]
    assert pop.long_horizon.tolist() == [False, False, True]
    assert pop.rate_per_s() == pytest.approx(0.1 + 0.05)
    path.write_text("trigger_id,interval_s\na,10\n")
    with pytest.raises(ValueError, match="first_fire_s"):
        from_trace(path)
