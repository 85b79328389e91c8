import pytest

from loadgen.rates import parse_duration, parse_interval_range, parse_rate


@pytest.mark.parametrize(
    "text, want", [("556/s", 556.0), ("33360/min", 556.0), ("556", 556.0), ("7200/h", 2.0), (" 10 / s ", 10.0)]
)
def test_rate_forms(text, want):
    assert parse_rate(text) == pytest.approx(want)


@pytest.mark.parametrize("text", ["abc", "-5/s", "5/fortnight", "0/s", "", "5/"])
def test_bad_rates_name_the_accepted_forms(text):
    with pytest.raises(ValueError, match="556/s"):
        parse_rate(text)


@pytest.mark.parametrize(
    "text, want", [("90s", 90), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25), ("30d", 2592000), ("12", 12)]
)
def test_duration_forms(text, want):
    assert parse_duration(text) == pytest.approx(want)


@pytest.mark.parametrize("text", ["soon", "5x", "-3", "5m later"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_interval_range():
    assert parse_interval_range("60s..120s") == (60.0, 120.0)
    assert parse_interval_range("90s") == (90.0, 90.0)
    with pytest.raises(ValueError):
        parse_interval_range("120s..60s")


def test_recorded_argv_hides_passwords_and_tokens():
    from harness.stack import redact_argv

    argv = [
        "bench",
        "run",
        "--dsn",
        "postgresql://u:s3cret@db:5432/x",
        "--token",
        "t0k",
        "--dsn=postgresql://u:s3cret@h/x",
        "--token=t0k",
        "--rate",
        "556/s",
    ]
    shown = " ".join(redact_argv(argv))
    assert "s3cret" not in shown and "t0k" not in shown
    assert "postgresql://u@db:5432/x" in shown and "556/s" in shown
