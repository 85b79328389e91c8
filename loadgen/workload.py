"""Workloads: a YAML file (or a preset name) plus CLI overrides, resolved to one flat record.

Fields follow docs/design.md and the README's "Workloads". In YAML every duration may be written as ``90s``,
``5m``, ``250ms`` or a bare number of seconds, a rate as ``556/s``, ``33360/min`` or ``556``,
and the interval as ``60s..120s``. A relative ``trace`` in a YAML file is relative to that file
(``bench capture`` writes ``trace.csv`` beside its ``workload.yaml``); ``--trace`` on the command
line is relative to the working directory. The resolved :class:`Workload` holds plain numbers only (the
names carry the units) and is what ``config.json`` records, every field.

``rate`` is the steady-state fire rate; the trigger population is derived from it (or the rate
from ``triggers`` when only that is given): with intervals uniform on ``[lo, hi]`` a trigger
fires ``E[1/I] = ln(hi/lo)/(hi-lo)`` times a second, so ``triggers = rate / E[1/I]`` (over the
share of triggers that are not long-horizon). At 556/s and 60-120 s that is ~48,100 triggers.

``cadence`` says how a trigger's next fire is timed. ``fixed`` (the default of every preset): next
due = previous due + interval, whenever the poll ran, so the load is open-loop and a slow backend
falls behind instead of being offered less; a trigger delivered more than one interval late fires
once and realigns to its grid (the periods it skipped are counted, never fired in a burst).
``after-poll``: next due = when the poll finished + interval, as the articles' own systems re-armed
(closed-loop: a backend lagging by L is offered about L/I fewer fires).

``warmup`` defaults to one maximum interval, so every trigger has fired and re-armed once before
the measured window opens. ``on_time`` is the lag up to which a delivered fire is on time, one
value for every backend; ``drain_limit`` bounds the drain after the window (see harness/session.py).
``time_compression`` and ``description`` say what a preset stands for (production-compressed).

Bad input raises :class:`WorkloadError` (a ``ValueError``) naming the field, and, for a file,
the file and line: ``workload file w.yaml line 3, field rate: invalid rate 'fast'; accepted
forms: ...``. Every number must be finite (no ``.nan``, ``.inf``), every field known.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from loadgen.rates import parse_duration, parse_interval_range, parse_rate, shown

PRESET_DIR = Path(__file__).parent / "presets"
MAX_FILE_BYTES = 1 << 20  # a workload file is a page of YAML; anything this big is the wrong file
MAX_STATE_BYTES = 1 << 20  # poll state per trigger (toasted-state: ~4 KB); a MiB is already far beyond it
MAX_TENANTS = 1_000_000
MAX_POLL_CONCURRENCY = 1_000_000
CADENCES = ("fixed", "after-poll")


class WorkloadError(ValueError):
    """A bad workload value. ``field`` is the YAML key (and CLI option) it came from, if one."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass
class Workload:
    name: str = "custom"
    rate_per_s: float | None = None  # steady-state fires/s (derived from triggers when None)
    triggers: int | None = None  # population size (derived from the rate when None)
    interval_min_s: float = 60.0  # poll interval, uniform on [min, max] (DESIGN: 60-120 s)
    interval_max_s: float = 120.0
    tenants: int = 100
    tenant_skew: float = 1.1  # Zipf exponent of trigger counts per tenant; 0 = uniform
    state_bytes: int = 4096  # incompressible poll state per trigger (toasted-state)
    latency_median_ms: float = 120.0  # provider poll latency, lognormal
    latency_p99_ms: float = 900.0
    error_rate: float = 0.01  # share of polls that fail and re-arm with backoff
    retry_backoff_s: float = (
        5.0  # first retry delay after an error, doubled per consecutive error, capped at the interval
    )
    new_event_rate: float = 0.05  # share of polls that find new events: new state + an effect
    poll_concurrency: int | None = (
        None  # provider polls in flight at once; None: 4x what the rate needs (never the bottleneck)
    )
    long_horizon_share: float = 0.0  # share of triggers whose first fire is far out
    long_horizon_min_days: float = 30.0
    long_horizon_max_days: float = 60.0
    # poll state of a long-horizon timer, bytes (a callback's payload is small); None: state_bytes
    long_horizon_state_bytes: int | None = None
    # share of the long-horizon timers the application moves while they are armed, during the window
    # (harness.moves: re-armed to a new far time, a few to a near time inside the window)
    long_horizon_move_share: float = 0.0
    herd_share: float = 0.0  # share of triggers whose first fire is the same instant
    herd_at_s: float = 5.0  # offset of that instant from the start of arming, seconds
    duration_s: float = 600.0  # measured window
    warmup_s: float | None = None  # recorded but excluded from the summary; None: one maximum interval
    seed: int = 1
    trace: str | None = None  # CSV to replay: trigger_id, tenant_id, interval_s, first_fire_s
    cadence: str = "fixed"  # "fixed": next due = previous due + interval (open loop); "after-poll": poll end + interval
    # seconds of lag up to which a delivered fire counts as on time, later is late; one value for
    # every backend (maxlag-10s: the lag the Composio article accepted for a poll)
    on_time_s: float = 10.0
    drain_limit_s: float = 180.0  # after the window, wait at most this long for the fires due in it, seconds
    arm_batch: int = 2000  # timers per arm() call while arming the population
    description: str = ""  # one line a report shows beside the workload's name
    time_compression: float = (
        1.0  # > 1: intervals and population are this many times smaller than the shape named in description
    )

    # -- derived ------------------------------------------------------------------------

    def fires_per_trigger_s(self) -> float:
        """E[1/I] for intervals uniform on [min, max]: fires per second of one trigger."""
        lo, hi = self.interval_min_s, self.interval_max_s
        if hi - lo < 1e-9:
            return 1.0 / lo
        return math.log(hi / lo) / (hi - lo)

    def resolved(self) -> Workload:
        """Fill in whichever of rate and triggers was left open; check every field."""
        w = Workload(**asdict(self))
        w.validate()
        periodic = max(1e-9, 1.0 - w.long_horizon_share)
        if w.trace:
            return w  # rate, triggers and the default warm-up come from the trace's population
        if w.warmup_s is None:
            w.warmup_s = w.interval_max_s  # every trigger fires and re-arms once before the window
        if w.triggers is None:
            w.triggers = max(1, int(round(w.rate_per_s / (periodic * w.fires_per_trigger_s()))))
        elif w.rate_per_s is None:
            w.rate_per_s = w.triggers * periodic * w.fires_per_trigger_s()
        w.fill_concurrency()
        return w

    def mean_latency_s(self) -> float:
        """Mean of the lognormal latency with this median and p99."""
        if self.latency_median_ms <= 0:
            return 0.0
        sigma = math.log(self.latency_p99_ms / self.latency_median_ms) / 2.3263478740408408
        return self.latency_median_ms / 1000.0 * math.exp(sigma * sigma / 2)

    def fill_concurrency(self) -> None:
        """Little's law with 4x headroom: the simulated provider is not what a run measures."""
        if self.poll_concurrency is None:  # (a trace of long-horizon timers only offers no steady rate)
            self.poll_concurrency = max(64, int(math.ceil(4 * (self.rate_per_s or 0.0) * self.mean_latency_s())))

    def validate(self) -> None:
        def bad(what: str, value: Any, accepted: str) -> WorkloadError:
            return WorkloadError(f"invalid {what} {shown(value)}; {accepted}", field=what)

        for f in fields(self):  # no NaN or infinity anywhere, whichever way it came in
            v = getattr(self, f.name)
            if isinstance(v, float) and not math.isfinite(v):
                raise bad(_FIELD_KEY.get(f.name, f.name), v, "must be a finite number")
        if not self.name or not str(self.name).strip():
            raise bad("name", self.name, "give a non-empty name")

        if self.rate_per_s is None and self.triggers is None and not self.trace:
            raise WorkloadError("no rate: give a rate (e.g. 556/s), a trigger count or a trace", field="rate")
        if self.rate_per_s is not None and self.rate_per_s <= 0:
            raise bad("rate", self.rate_per_s, "must be positive")
        if self.triggers is not None and self.triggers < 1:
            raise bad("triggers", self.triggers, "must be at least 1")
        if not (0 < self.interval_min_s <= self.interval_max_s):
            raise bad("interval", f"{self.interval_min_s}..{self.interval_max_s}", "use LOW..HIGH with 0 < LOW <= HIGH")
        if not (1 <= self.tenants <= MAX_TENANTS):
            raise bad("tenants", self.tenants, f"must be between 1 and {MAX_TENANTS:,}")
        if self.tenant_skew < 0:
            raise bad("tenant_skew", self.tenant_skew, "must be >= 0 (0 = uniform)")
        if not (0 <= self.state_bytes <= MAX_STATE_BYTES):
            raise bad("state_size", self.state_bytes, f"must be between 0 and {MAX_STATE_BYTES:,} bytes")
        if self.long_horizon_state_bytes is not None and not (0 <= self.long_horizon_state_bytes <= MAX_STATE_BYTES):
            raise bad(
                "long_horizon_state_size",
                self.long_horizon_state_bytes,
                f"must be between 0 and {MAX_STATE_BYTES:,} bytes",
            )
        for name in ("error_rate", "new_event_rate", "long_horizon_share", "long_horizon_move_share", "herd_share"):
            v = getattr(self, name)
            if not (0.0 <= v <= 1.0):
                raise bad(name, v, "must be between 0 and 1")
        if self.latency_median_ms < 0 or self.latency_p99_ms < self.latency_median_ms:
            raise bad("provider_latency", (self.latency_median_ms, self.latency_p99_ms), "need 0 <= median <= p99 (ms)")
        if self.poll_concurrency is not None and not (1 <= self.poll_concurrency <= MAX_POLL_CONCURRENCY):
            raise bad("poll_concurrency", self.poll_concurrency, f"must be between 1 and {MAX_POLL_CONCURRENCY:,}")
        if self.seed < 0:
            raise bad("seed", self.seed, "must be a whole number >= 0")
        if self.arm_batch < 1:
            raise bad("arm_batch", self.arm_batch, "must be at least 1")
        if self.retry_backoff_s < 0:
            raise bad("retry_backoff", self.retry_backoff_s, "must not be negative")
        if self.cadence not in CADENCES:
            raise bad("cadence", self.cadence, f"use one of: {', '.join(CADENCES)}")
        if self.on_time_s <= 0:
            raise bad("on_time", self.on_time_s, "must be positive (a lag such as 10s)")
        if self.drain_limit_s < 0:
            raise bad("drain_limit", self.drain_limit_s, "must not be negative (e.g. 3m)")
        if self.time_compression < 1:
            raise bad("time_compression", self.time_compression, "must be >= 1 (1 = not compressed)")
        if not (0 < self.long_horizon_min_days <= self.long_horizon_max_days):
            raise bad(
                "long_horizon_days",
                f"{self.long_horizon_min_days:g}..{self.long_horizon_max_days:g}",
                "use LOW..HIGH days with 0 < LOW <= HIGH, e.g. 30..60",
            )
        if self.trace is not None and not str(self.trace).strip():
            raise bad("trace", self.trace, "give the path of a CSV file")
        if self.duration_s <= 0:
            raise bad("duration", self.duration_s, "must be positive")
        if self.warmup_s is not None and self.warmup_s < 0:
            raise bad("warmup", self.warmup_s, "must not be negative")


# YAML / CLI keys -> (field, parser). Human forms are accepted; the canonical field names too.
def _float(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError(f"{shown(v)} is not a number")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{shown(v)} is not a number") from None
    if not math.isfinite(f):
        raise ValueError(f"{shown(v)} is not a finite number")
    return f


def _int(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError(f"{shown(v)} is not a whole number")
    if isinstance(v, int):
        return v
    try:
        f = float(v)
        if f != int(f):
            raise ValueError
        return int(f)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{shown(v)} is not a whole number") from None


def _str(v: Any) -> str:
    if not isinstance(v, (str, int, float)) or isinstance(v, bool):
        raise ValueError(f"{shown(v)} is not text")
    return str(v)


def _opt_str(v: Any) -> str | None:
    return None if v in (None, "") else _str(v)


def _days_range(v: Any) -> tuple[float, float]:
    lo, _, hi = str(v).partition("..")
    try:
        low, high = _float(lo), _float(hi or lo)
    except ValueError:
        raise ValueError(f"invalid long_horizon_days {shown(v)}; use LOW..HIGH days, e.g. 30..60") from None
    return low, high


_KEYS: dict[str, tuple[str, Any]] = {
    "name": ("name", _str),
    "rate": ("rate_per_s", parse_rate),
    "triggers": ("triggers", _int),
    "tenants": ("tenants", _int),
    "tenant_skew": ("tenant_skew", _float),
    "state_size": ("state_bytes", _int),
    "error_rate": ("error_rate", _float),
    "retry_backoff": ("retry_backoff_s", parse_duration),
    "new_event_rate": ("new_event_rate", _float),
    "poll_concurrency": ("poll_concurrency", _int),
    "long_horizon_share": ("long_horizon_share", _float),
    "long_horizon_state_size": ("long_horizon_state_bytes", _int),
    "long_horizon_move_share": ("long_horizon_move_share", _float),
    "herd_share": ("herd_share", _float),
    "herd_at": ("herd_at_s", parse_duration),
    "duration": ("duration_s", parse_duration),
    "warmup": ("warmup_s", parse_duration),
    "seed": ("seed", _int),
    "trace": ("trace", _opt_str),
    "cadence": ("cadence", _str),
    "on_time": ("on_time_s", parse_duration),
    "drain_limit": ("drain_limit_s", parse_duration),
    "arm_batch": ("arm_batch", _int),
    "description": ("description", _str),
    "time_compression": ("time_compression", _float),
}
# Fields that are gone, with what replaced them (an old YAML file gets told, not ignored).
_REMOVED = {
    "grace": "grace was removed: a fire's outcome no longer depends on a per-backend grace period; use on_time "
    "(the lag up to which a fire is on time, one value for every backend) and drain_limit",
    "grace_s": "grace_s was removed; use on_time and drain_limit",
}


# canonical field name -> the YAML key it is written as (for messages)
_FIELD_KEY = {name: key for key, (name, _) in _KEYS.items()} | {
    "interval_min_s": "interval",
    "interval_max_s": "interval",
    "latency_median_ms": "provider_latency",
    "latency_p99_ms": "provider_latency",
    "long_horizon_min_days": "long_horizon_days",
    "long_horizon_max_days": "long_horizon_days",
}


def _canonical_parser(name: str):
    """A canonical field name given as a key (``duration_s: 30``): the value is checked by the type
    the field declares."""
    kind = next(f.type for f in fields(Workload) if f.name == name)
    parse = _float if "float" in kind else _int if "int" in kind else _str
    return (lambda v: None if v is None else parse(v)) if "None" in kind else parse


def _set(w: Workload, key: str, value: Any) -> None:
    if key == "interval":
        w.interval_min_s, w.interval_max_s = parse_interval_range(str(value))
    elif key == "provider_latency":
        if not isinstance(value, Mapping) or not set(value) <= {"median", "p99"}:
            raise ValueError(f"invalid provider_latency {shown(value)}; use {{median: 120ms, p99: 900ms}}")
        if "median" in value:
            w.latency_median_ms = parse_duration(value["median"]) * 1000.0
        if "p99" in value:
            w.latency_p99_ms = parse_duration(value["p99"]) * 1000.0
    elif key == "long_horizon_days":
        w.long_horizon_min_days, w.long_horizon_max_days = _days_range(value)
    elif key in _KEYS:
        name, parse = _KEYS[key]
        try:
            setattr(w, name, parse(value) if value is not None else None)
        except ValueError as exc:
            msg = str(exc)
            # parse_rate / parse_duration already name the value and the accepted forms
            raise ValueError(msg if msg.startswith("invalid") else f"invalid {key.replace('_', '-')}: {msg}") from None
    else:
        try:
            setattr(w, key, _canonical_parser(key)(value))
        except ValueError as exc:
            raise ValueError(f"invalid {key}: {exc}") from None


def from_mapping(data: Mapping[str, Any], base: Workload | None = None) -> Workload:
    """A workload from a YAML mapping (human forms) over ``base``. Raises :class:`WorkloadError`
    naming the field."""
    w = Workload(**asdict(base)) if base else Workload()
    canonical = {f.name for f in fields(Workload)}
    for key, value in data.items():
        if isinstance(key, str) and key in _REMOVED:
            raise WorkloadError(f"invalid workload field {key}: {_REMOVED[key]}", field=key)
        if not isinstance(key, str) or key not in (
            *_KEYS,
            *canonical,
            "interval",
            "provider_latency",
            "long_horizon_days",
        ):
            accepted = ", ".join(sorted([*_KEYS, "interval", "provider_latency", "long_horizon_days"]))
            raise WorkloadError(f"unknown workload field {shown(key)}; accepted: {accepted}", field=str(key))
        try:
            _set(w, key, value)
        except ValueError as exc:
            raise WorkloadError(str(exc), field=key) from None
    return w


def presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load(spec: str | None) -> Workload:
    """A workload from a preset name or a YAML file; ``None`` gives the production preset."""
    return load_located(spec)[0]


def load_located(spec: str | None) -> tuple[Workload, dict[str, str]]:
    """:func:`load`, and where each field was given (``workload file F line N``), for messages
    about fields that only fail once combined with command-line overrides."""
    spec = spec or "production"
    path = Path(spec)
    if not (path.suffix in (".yaml", ".yml") or path.exists()):
        path = PRESET_DIR / f"{spec}.yaml"
        if not path.exists():
            raise WorkloadError(
                f"unknown workload {shown(spec)}; give a YAML file or one of the presets: {', '.join(presets())}"
            )
    where = f"workload file {spec}" if path.parent != PRESET_DIR else f"workload preset {spec}"
    text = _read_text(path, where)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        at = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise WorkloadError(f"{where}{at}: not valid YAML ({problem}); write one `field: value` per line") from None
    if node is None:
        data, lines = {}, {}
    elif not isinstance(node, yaml.MappingNode) or not isinstance(data, Mapping):
        kind = {"SequenceNode": "a list", "ScalarNode": "a single value"}.get(type(node).__name__, "not a mapping")
        raise WorkloadError(
            f"{where} line {node.start_mark.line + 1}: must be a mapping of fields "
            f"(one `field: value` per line, e.g. `rate: 556/s`), found {kind}"
        )
    else:
        lines = {}
        for key_node, value_node in node.value:
            key = key_node.value
            if key in lines:
                raise WorkloadError(
                    f"{where} line {key_node.start_mark.line + 1}: field {key} given twice "
                    f"(first at line {lines[key]}); give each field once"
                )
            lines[key] = value_node.start_mark.line + 1
    data = dict(data)
    data.setdefault("name", path.stem)
    trace = data.get("trace")
    if isinstance(trace, str) and trace and not Path(trace).is_absolute():
        data["trace"] = str(path.parent / trace)  # a file's trace is relative to the file (bench capture)
    origins = {"": where} | {key: f"{where} line {line}, field {key}" for key, line in lines.items()}
    try:
        return from_mapping(data), origins
    except WorkloadError as exc:
        raise WorkloadError(f"{origins.get(exc.field, where)}: {exc}", field=exc.field) from None


def _read_text(path: Path, where: str) -> str:
    """The file as UTF-8 text, or one line saying why not (the line of a byte that is not UTF-8)."""
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise WorkloadError(f"{where}: not a file; give a YAML file or a preset name")
        if size > MAX_FILE_BYTES:
            raise WorkloadError(
                f"{where}: {size:,} bytes is not a workload (at most {MAX_FILE_BYTES:,}); give a YAML file of fields"
            )
        raw = path.read_bytes()
    except FileNotFoundError:
        raise WorkloadError(f"workload file not found: {path}") from None
    except OSError as exc:
        raise WorkloadError(f"{where}: cannot read it ({exc.strerror})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise WorkloadError(
            f"{where} line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); save it as UTF-8"
        ) from None


@dataclass
class Overrides:
    """CLI options; None means "keep the workload's value"."""

    values: dict[str, Any] = field(default_factory=dict)

    def apply(self, w: Workload) -> Workload:
        data = {k: v for k, v in self.values.items() if v is not None}
        if "rate" in data and "triggers" not in data:
            w.triggers = None  # the population follows the rate given on the command line
        if "triggers" in data and "rate" not in data:
            w.rate_per_s = None
        return from_mapping(data, base=w)
