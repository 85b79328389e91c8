"""HDR histograms recorded a batch at a time.

``hdrh``'s ``record_value`` is one Python call per value; at 20,000 fires/s that alone is a
visible share of a core. :func:`record_many` computes the same counts-array index as
``HdrHistogram._counts_index_for`` for a whole numpy array and adds the counts in one
``np.bincount``, so the histogram (and its encoding, percentiles, iterators) stays the library's.
Values are integer microseconds.
"""

from __future__ import annotations

import numpy as np
from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour: anything later is clamped (and still counted)
SIGNIFICANT_FIGURES = 3


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES)


def _counts_view(h: HdrHistogram) -> np.ndarray:
    view = getattr(h, "_np_counts", None)
    if view is None:
        view = np.ctypeslib.as_array(h.counts)
        h._np_counts = view
    return view


def record_many(h: HdrHistogram, values_us: np.ndarray) -> None:
    """Record every value of ``values_us`` (negative values count as 0, huge ones as the max)."""
    if len(values_us) == 0:
        return
    v = np.clip(np.asarray(values_us, dtype=np.int64), 0, HIGHEST_US)
    # bit length of (v | sub_bucket_mask): frexp's exponent is exact for integers < 2**53
    pow2ceiling = np.frexp((v | h.sub_bucket_mask).astype(np.float64))[1].astype(np.int64)
    bucket = pow2ceiling - h.unit_magnitude - (h.sub_bucket_half_count_magnitude + 1)
    sub = v >> (bucket + h.unit_magnitude)
    idx = ((bucket + 1) << h.sub_bucket_half_count_magnitude) + sub - h.sub_bucket_half_count
    counts = _counts_view(h)
    binned = np.bincount(idx, minlength=0)
    top = len(binned)
    counts[:top] += binned[: len(counts)].astype(counts.dtype)
    h.total_count += int(len(v))
    h.min_value = min(h.min_value, int(v.min()))
    h.max_value = max(h.max_value, int(v.max()))


def percentiles_ms(h: HdrHistogram, pcts=(50.0, 90.0, 99.0, 99.9)) -> dict[str, float | None]:
    """``{"p50": ms, ..., "max": ms}``; None for an empty histogram."""
    out: dict[str, float | None] = {}
    for p in pcts:
        key = "p" + (str(p).rstrip("0").rstrip(".").replace(".", ""))
        out[key] = h.get_value_at_percentile(p) / 1000.0 if h.total_count else None
    out["max"] = h.max_value / 1000.0 if h.total_count else None  # exact, not the bucket's top
    return out


def reset(h: HdrHistogram) -> None:
    """Empty ``h`` in one numpy assignment (``HdrHistogram.reset`` loops in Python)."""
    _counts_view(h)[:] = 0
    h.total_count = 0
    h.min_value = 2**63 - 1
    h.max_value = 0
