"""Drift between two stores' armed timers: found, confirmed, repaired.

A dual-write period lasts days; what a team needs through it is a job that compares what each
store will fire (``export_armed()``: id and next fire time) and says where they differ:

* **missing**: the source holds the timer, the target does not (it would never fire there);
* **extra**: the target holds a timer the source does not (it would fire there uninvited);
* **moved**: both hold it, at fire times further apart than the tolerance.

Both stores are live while this runs, and live stores are never quite equal: a store a fire
behind the other still holds the fire time the other has already re-armed away from, a
temporal_shards timer is briefly in neither its shard nor a batch between hand-off and claim.
So a difference counts as drift only when it is still there, the same, after ``settle_s``
(:func:`confirm`; the default is twice the slower store's declared max lag plus 2 s, time
enough for a healthy store to fire what it owes). Inside a rehearsal the re-arm decisions are
known too: a pair of fire times they connect is catching up, not drift (``explains``).

``repair`` re-arms the target from the source (missing and moved: the source's latest read) and
disarms the extras, then reads again to show what is left (nothing, when the repair held).
Without ``repair`` nothing is written to either store.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from schedulers.base import Scheduler, Timer

MATCH_S = 0.001  # two fire times within this are the same (both stores keep microseconds)
SAMPLES = 10  # examples kept per kind of drift

Explains = Callable[[str, float, float], bool]
Repair = Callable[[Sequence[Timer], Sequence[str], float], Awaitable[tuple[int, int]]]


@dataclass
class Drift:
    missing: dict[str, Timer] = field(default_factory=dict)  # id -> the source's timer
    extra: dict[str, float | None] = field(default_factory=dict)  # id -> the target's fire time
    moved: dict[str, tuple[Timer, float | None]] = field(default_factory=dict)  # id -> (source timer, target fire)
    catching_up: int = 0  # differing fire times the re-arm decisions explain (lag, not drift)

    @property
    def total(self) -> int:
        return len(self.missing) + len(self.extra) + len(self.moved)

    def counts(self) -> dict[str, int]:
        return {"missing": len(self.missing), "extra": len(self.extra), "moved": len(self.moved), "total": self.total}

    def samples(self, n: int = SAMPLES) -> dict[str, list[str]]:
        now = time.time()
        return {
            "missing": [f"{i} (source fires {_when(t.fire_at, now)})" for i, t in sorted(self.missing.items())[:n]],
            "extra": [f"{i} (target fires {_when(f, now)})" for i, f in sorted(self.extra.items())[:n]],
            "moved": [
                f"{i} (source {_when(t.fire_at, now)}, target {_when(f, now)}, off by {_delta(f, t.fire_at)})"
                for i, (t, f) in sorted(self.moved.items())[:n]
            ],
        }


def _when(t: float | None, now: float) -> str:
    if t is None:
        return "now"
    iso = datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{iso} ({t - now:+,.1f} s)"


def _delta(target: float | None, source: float | None) -> str:
    if target is None or source is None:
        return "?"
    return f"{target - source:+,.3f} s"


def _same(a: float | None, b: float | None, tolerance_s: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) < tolerance_s


def diff(
    source: Sequence[Timer], target: Sequence[Timer], *, tolerance_s: float = MATCH_S, explains: Explains | None = None
) -> Drift:
    """Compare two reads by id and fire time."""
    d = Drift()
    tgt = {t.id: t.fire_at for t in target}
    src_ids = set()
    for t in source:
        src_ids.add(t.id)
        if t.id not in tgt:
            d.missing[t.id] = t
            continue
        have = tgt[t.id]
        if _same(have, t.fire_at, tolerance_s):
            continue
        if explains is not None and have is not None and t.fire_at is not None and explains(t.id, have, t.fire_at):
            d.catching_up += 1
            continue
        d.moved[t.id] = (t, have)
    for tid, f in tgt.items():
        if tid not in src_ids:
            d.extra[tid] = f
    return d


def confirm(first: Drift, second: Drift, tolerance_s: float = MATCH_S) -> tuple[Drift, int]:
    """The drift of ``second`` that ``first`` already showed the same way (a moved timer at the
    same target fire time in both reads: the target did not move it meanwhile), with the
    source's values from ``second``; and how many differences of ``first`` went away."""
    out = Drift(catching_up=second.catching_up)
    for i, t in second.missing.items():
        if i in first.missing:
            out.missing[i] = t
    for i, f in second.extra.items():
        if i in first.extra and _same(first.extra[i], f, tolerance_s):
            out.extra[i] = f
    for i, (t, f) in second.moved.items():
        if i in first.moved and _same(first.moved[i][1], f, tolerance_s):
            out.moved[i] = (t, f)
    return out, first.total - out.total


def account(
    first_src: Sequence[Timer],
    first_tgt: Sequence[Timer],
    first: Drift,
    final: Drift,
    second: tuple[Sequence[Timer], Sequence[Timer]] | None,
) -> dict[str, Any]:
    """Where every timer of the two counts of the first read went: armed in both (the same, a
    fire behind, moved), or held by one store only, then, by the second read: back in the
    other store (it was in flight or claimed there: a timer between a claim and its re-arm is
    missing from one design's ``export_armed`` and listed by another's at its past fire time),
    gone from the one that held it (it fired since the read and finished, or its store was a
    fire behind one that had finished it), changed there (fired and re-armed since), or still
    the same difference (drift). The categories add up to the counts."""
    src_ids = {t.id for t in first_src}
    tgt_ids = {t.id for t in first_tgt}
    only_src, only_tgt = src_ids - tgt_ids, tgt_ids - src_ids
    both = len(src_ids & tgt_ids)
    out: dict[str, Any] = {
        "source_armed": len(src_ids),
        "target_armed": len(tgt_ids),
        "in_both": both,
        "in_both_same": both - first.catching_up - len(first.moved),
        "in_both_catching_up": first.catching_up,
        "in_both_moved": len(first.moved),
        "in_both_moved_confirmed": len(final.moved),
    }
    for key, ids, holder, drift in (
        ("only_source", only_src, 0, final.missing),
        ("only_target", only_tgt, 1, final.extra),
    ):
        cat = {"total": len(ids), "in_flight": 0, "fired_since": 0, "changed": 0, "drift": 0}
        if second is None:
            cat["drift"] = len(ids)
        else:
            now = [{t.id: t.fire_at for t in second[0]}, {t.id: t.fire_at for t in second[1]}]
            before = {t.id: t.fire_at for t in (first_src if holder == 0 else first_tgt)}
            for i in ids:
                if i in drift:
                    cat["drift"] += 1
                elif i in now[1 - holder]:
                    cat["in_flight"] += 1
                elif i not in now[holder]:
                    cat["fired_since"] += 1
                elif not _same(now[holder][i], before.get(i), MATCH_S):
                    cat["changed"] += 1
                else:  # the same at both reads but not confirmed (cannot happen: confirm keeps it)
                    cat["drift"] += 1
        out[key] = cat
    return out


async def read(source: Scheduler, target: Scheduler) -> tuple[list[Timer], list[Timer]]:
    """Both stores at (nearly) the same moment."""
    src, tgt = await asyncio.gather(source.export_armed(), target.export_armed())
    return list(src), list(tgt)


async def reconcile(
    source: Scheduler,
    target: Scheduler,
    *,
    settle_s: float,
    repair: bool = False,
    tolerance_s: float = MATCH_S,
    explains: Explains | None = None,
    repair_with: Repair | None = None,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Find drift (confirmed over ``settle_s``), optionally repair it, and report.

    ``repair_with(timers, extra_ids, since)`` replaces the plain ``target.arm`` / ``target.disarm``
    (a rehearsal routes it through its dual writer, which skips ids written since ``since``).
    """
    say = say or (lambda _m: None)
    started = time.time()
    src, tgt = await read(source, target)
    first = diff(src, tgt, tolerance_s=tolerance_s, explains=explains)
    report: dict[str, Any] = {
        "source": source.name,
        "target": target.name,
        "source_armed": len(src),
        "target_armed": len(tgt),
        "tolerance_s": tolerance_s,
        "settle_s": settle_s,
        "first_read": first.counts(),
    }
    drift, went_away = first, 0
    second_read_at = started
    first_reads = (src, tgt)
    second = None
    if first.total and settle_s > 0:
        say(
            f"reconcile: {first.total:,} differences in the first read; reading again in {settle_s:g} s to "
            f"confirm (a live store may be catching up)"
        )
        await asyncio.sleep(settle_s)
        second_read_at = time.time()
        src, tgt = await read(source, target)
        second = (src, tgt)
        drift, went_away = confirm(first, diff(src, tgt, tolerance_s=tolerance_s, explains=explains), tolerance_s)
    report["accounts"] = account(first_reads[0], first_reads[1], first, drift, second)
    report.update(
        drift=drift.counts(),
        samples=drift.samples(),
        went_away=went_away,
        catching_up=drift.catching_up,
        repaired=None,
        after_repair=None,
    )
    if repair and drift.total:
        timers = [t for t in drift.missing.values()] + [t for t, _ in drift.moved.values()]
        extra = sorted(drift.extra)
        if repair_with is not None:
            armed, disarmed = await repair_with(timers, extra, second_read_at)
        else:
            if timers:
                await target.arm(timers)
            disarmed = await target.disarm(extra) if extra else 0
            armed = len(timers)
        report["repaired"] = {"armed": armed, "disarmed": disarmed}
        say(
            f"reconcile: re-armed {armed:,} timers in {target.name} from {source.name}, disarmed {disarmed:,}; "
            f"checking again"
        )
        src, tgt = await read(source, target)
        after = diff(src, tgt, tolerance_s=tolerance_s, explains=explains)
        if after.total and settle_s > 0:
            await asyncio.sleep(settle_s)
            src, tgt = await read(source, target)
            after, _ = confirm(after, diff(src, tgt, tolerance_s=tolerance_s, explains=explains), tolerance_s)
        report["after_repair"] = after.counts()
        report["after_repair_samples"] = after.samples()
    report["took_s"] = time.time() - started
    return report


def summary_line(r: dict[str, Any]) -> str:
    """One line: what drifted, what was repaired, what is left."""
    d = r["drift"]
    a = r.get("accounts")
    line = f"{r['source']} -> {r['target']}: {r['source_armed']:,} vs {r['target_armed']:,} armed"
    if a:
        line += ": " + accounts_text(a, r["source"], r["target"])
    line += f"; drift {d['total']:,} (missing {d['missing']:,}, extra {d['extra']:,}, moved {d['moved']:,})"
    if not a and r.get("catching_up"):
        line += f"; {r['catching_up']:,} catching up (a fire behind, re-arm known)"
    if r.get("repaired") is not None:
        a = r["after_repair"] or {}
        line += (
            f"; repaired: re-armed {r['repaired']['armed']:,}, disarmed {r['repaired']['disarmed']:,}; "
            f"after repair {a.get('total', 0):,}"
        )
    return line


def accounts_text(a: dict[str, Any], source: str, target: str) -> str:
    """Every timer of both counts of the first read, by category (see :func:`account`)."""
    both = [f"{a['in_both_same']:,} at the same time"]
    if a["in_both_catching_up"]:
        both.append(f"{a['in_both_catching_up']:,} a fire behind (re-arm known)")
    if a["in_both_moved"]:
        both.append(f"{a['in_both_moved']:,} at another time ({a['in_both_moved_confirmed']:,} confirmed)")
    parts = [f"in both {a['in_both']:,} ({', '.join(both)})"]
    for key, holder, other in (("only_source", source, target), ("only_target", target, source)):
        c = a[key]
        if not c["total"]:
            continue
        why = [
            f"{c[k]:,} {label}"
            for k, label in (
                ("in_flight", f"in flight or claimed in {other} at the read, there by the second"),
                ("fired_since", f"fired since the read (gone from {holder} by the second)"),
                ("changed", f"fired and re-armed in {holder} since the read"),
                ("drift", f"still not in {other} (drift)"),
            )
            if c[k]
        ]
        parts.append(f"only in {holder} {c['total']:,} (" + "; ".join(why) + ")")
    return "; ".join(parts)
