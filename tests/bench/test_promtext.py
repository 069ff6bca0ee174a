"""The benches' reading of Prometheus histograms (bench/promtext.py)."""

from __future__ import annotations

from bench import promtext


def test_histogram_quantiles_split_by_label_and_sum_the_rest() -> None:
    text = "\n".join(
        [
            'm_bucket{le="0.1",method="POST",priority="normal"} 10.0',
            'm_bucket{le="1.0",method="POST",priority="normal"} 98.0',
            'm_bucket{le="+Inf",method="POST",priority="normal"} 100.0',
            'm_bucket{le="0.1",method="POST",priority="urgent"} 0.0',
            'm_bucket{le="1.0",method="POST",priority="urgent"} 2.0',
            'm_bucket{le="+Inf",method="POST",priority="urgent"} 2.0',
            'other_bucket{le="0.1"} 5.0',
        ]
    )
    split = promtext.histogram_quantiles(text, "m", ("priority",))
    assert split == {
        "normal": {"count": 100.0, "p50_s": 1.0, "p99_s": float("inf")},
        "urgent": {"count": 2.0, "p50_s": 1.0, "p99_s": 1.0},
    }
    # Not split: the series are summed bucket by bucket.
    assert promtext.histogram_quantiles(text, "m", ()) == {"all": {"count": 102.0, "p50_s": 1.0, "p99_s": float("inf")}}


def test_histogram_quantiles_since_an_earlier_scrape_count_only_what_came_after() -> None:
    before = "\n".join(['m_bucket{le="0.1"} 90.0', 'm_bucket{le="1.0"} 100.0', 'm_bucket{le="+Inf"} 100.0'])
    after = "\n".join(['m_bucket{le="0.1"} 90.0', 'm_bucket{le="1.0"} 100.0', 'm_bucket{le="+Inf"} 110.0'])
    # 90 fast ones before; all 10 since were slower than a second.
    assert promtext.histogram_quantiles(after, "m", ())["all"]["p50_s"] == 0.1
    assert promtext.histogram_quantiles(after, "m", (), since=before) == {
        "all": {"count": 10.0, "p50_s": float("inf"), "p99_s": float("inf")}
    }
    # Nothing observed since: no row.
    assert promtext.histogram_quantiles(after, "m", (), since=after) == {}
