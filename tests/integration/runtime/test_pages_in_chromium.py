"""The pages the KFP UI shows, rendered by headless Chromium (Debian's, ``make tools``):
the screenshot's bars are measured in pixels and compared with the ledger and the
profiled steps, and its text (Chromium's own DOM after layout) with their numbers."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from spottrain import ledger
from spottrain.ledger import attempt_cost
from spottrain.pipelines import local
from spottrain.profiling import render_html
from spottrain.runtime import report

REPO = Path(__file__).resolve().parents[3]
CHROMIUM = next(
    (p for p in (str(REPO / ".tools" / "bin" / "chromium"), shutil.which("chromium")) if p
     and os.path.exists(p)), None,
)  # fmt: skip
pytestmark = [
    pytest.mark.skipif(
        CHROMIUM is None, reason="needs Debian's chromium (make tools installs it as root)"
    ),
]
SIZE = (1000, 900)


def _chromium(tmp_path: Path, html: str, *how: str) -> subprocess.CompletedProcess:
    page = tmp_path / "page.html"
    page.write_text(html)
    return _open(tmp_path, page.as_uri(), *how)


def _open(tmp_path: Path, url: str, *how: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={SIZE[0]},{SIZE[1]}", *how, url],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip


def screenshot(tmp_path: Path, html: str) -> Image.Image:
    png = tmp_path / "shot.png"
    done = _chromium(tmp_path, html, f"--screenshot={png}")
    assert png.is_file(), done.stderr
    return Image.open(png).convert("RGB")


def rendered_text(tmp_path: Path, html: str) -> str:
    return _chromium(tmp_path, html, "--dump-dom").stdout


def rgb(color: str) -> tuple[int, int, int]:
    return tuple(int(color[i : i + 2], 16) for i in (1, 3, 5))


def drawn(im: Image.Image) -> int:
    """Pixels that are not the page's white: 0 for an empty page."""
    return sum(1 for p in im.get_flattened_data() if p != (255, 255, 255))


def bands(im: Image.Image, color: str) -> list[tuple[int, int]]:
    """(top row, width in pixels at two rows below it) of each horizontal band of ``color``."""
    want, (w, h) = rgb(color), im.size
    px = im.load()
    rows = [y for y in range(h) if any(px[x, y] == want for x in range(w))]
    tops = [y for i, y in enumerate(rows) if i == 0 or rows[i - 1] != y - 1]
    return [(t, sum(px[x, t + 2] == want for x in range(w))) for t in tops]


def assert_page_drawn(im: Image.Image) -> None:
    assert drawn(im) > 1000, "the page is empty"


def test_the_attempts_page_draws_each_attempt_to_scale_in_its_capacity_colour(tmp_path):
    t0 = 1_700_000_000.0
    spans = [(0, 600, "spot", "preempted", 0, 30), (700, 1000, "spot", "preempted", 30, 45),
             (1100, 1900, "standard", "success", 45, 100)]  # fmt: skip
    records = [
        {"attempt": i + 1, "started": t0 + a, "resumed_at": t0 + a + 20,
         "first_step_at": t0 + a + 80, "ended": t0 + b, "seconds": b - a,
         "capacity": kind, "outcome": outcome, "start_step": s0, "last_step": s1,
         "saved_step": s1, "steps_lost": 0, "exit_code": 0,
         "prices_given": {"price_per_hour": 0.35, "on_demand_price_per_hour": 1.2}}
        for i, (a, b, kind, outcome, s0, s1) in enumerate(spans)
    ]  # fmt: skip
    # Priced by the records' own prices (as the --price-per-hour flags leave them).
    records = attempt_cost.price_records(records, None)
    totals = ledger.totals(records)
    loss = [(s, 2.0 / (1 + s / 10)) for s in range(5, 105, 5)]
    html = report.page(records, totals, {"loss": loss})
    im = screenshot(tmp_path, html)
    assert_page_drawn(im)
    scale = (report.WIDTH - 2 * report.LEFT) / 1900
    spot = bands(im, report.COLORS["spot"])
    standard = bands(im, report.COLORS["standard"])
    widths = [w for _, w in spot[-2:]] + [w for _, w in standard[-1:]]
    expected = [(b - a) * scale for a, b, *_ in spans]
    assert widths == pytest.approx(expected, abs=2), (widths, expected)
    # Rows in attempt order, one row apart (taller where a label took two lines, beside
    # its bar); the two preempted bars end on a red notice.
    row = report.ROW + (report.WRAP_DY if f'dy="{report.WRAP_DY}"' in html else 0)
    tops = [t for t, _ in spot[-2:]] + [t for t, _ in standard[-1:]]
    assert [b - a for a, b in zip(tops, tops[1:], strict=False)] == [row, row]
    assert len(bands(im, "#c62828")) == 2
    # The loss curve is drawn below the bars (its stroke colour, many pixels).
    blue = sum(1 for p in im.get_flattened_data() if p == rgb("#1565c0"))
    assert blue > 100
    # Each restart is drawn on the row of the attempt after it, from the previous
    # attempt's end until it trained again (100 s between, then 20 s start-up), then,
    # darker, its 60 s to the first step (the input's fast-forward), labelled.
    restarts = bands(im, report.RESTART)[-2:]
    assert [w for _, w in restarts] == pytest.approx([120 * scale, 120 * scale], abs=2)
    assert [t for t, _ in restarts] == [t + row - report.ROW + report.RESTART_DY for t in tops[1:]]
    firsts = bands(im, report.FIRST_STEP)[-2:]
    assert [w for _, w in firsts] == pytest.approx([60 * scale, 60 * scale], abs=2)
    assert [t for t, _ in firsts] == [t for t, _ in restarts]
    text = rendered_text(tmp_path, html)
    assert "3 attempt(s), 2 preemption(s), 0 step(s) lost, 360 s in 2 restart(s)" in text
    assert text.count("restart 180 s (80 s paid)</text>") == 2
    assert "#2 spot: steps 30→45 saved, preempted, 0 steps lost" in text
    # One set of words: the --price-per-hour flags' prices are spent, lost and saved too.
    assert "against $" not in text and "saving" not in text
    assert f"Spent {totals['spent']:.4f} USD" in text
    # Spot at 0.35, the standard attempt at the on-demand 1.2, per hour.
    assert totals["spent"] == pytest.approx((600 + 300) / 3600 * 0.35 + 800 / 3600 * 1.2, abs=1e-4)
    assert f"spent {records[1]['spent']:.4f}" in text  # beside bar 2
    assert f"loss (last {loss[-1][1]:.4g})" in text


def test_the_profile_page_draws_each_step_and_its_input_wait_to_scale(tmp_path):
    steps = [(0.005, 0.020)] * 10 + [(0.030, 0.040)] * 10
    html = render_html("# Training profile\n\nThe report.", steps)
    im = screenshot(tmp_path, html)
    assert_page_drawn(im)
    px = im.load()
    blue, orange = rgb("#1565c0"), rgb("#ef6c00")
    # Each bar's column: its orange (input wait) and blue (the rest of the step) heights,
    # above the bars' common baseline (the caption's coloured squares are below it).
    w, h = im.size
    baseline = max(y for y in range(h) if sum(px[x, y] == orange for x in range(w)) > 10)
    columns = []
    for x in range(w):
        col = [px[x, y] for y in range(baseline + 1)]
        o, b = col.count(orange), col.count(blue)
        if o + b > 20:
            columns.append((o, b))
    assert columns, "no bar drawn"
    tall = max(o + b for o, b in columns)  # the 40 ms steps are the full chart height
    for o, b in columns:
        total = o + b
        assert total == pytest.approx(tall, abs=2) or total == pytest.approx(tall / 2, abs=2)
        wait = o / total
        assert wait == pytest.approx(0.25 if total < tall * 0.75 else 0.75, abs=0.05)
    assert "20 profiled steps: median" in rendered_text(tmp_path, html)


def test_an_empty_page_is_caught_and_a_run_without_attempts_still_says_so(tmp_path):
    with pytest.raises(AssertionError, match="the page is empty"):
        assert_page_drawn(screenshot(tmp_path, "<html><body></body></html>"))
    html = report.page([], ledger.totals([]), {})
    assert_page_drawn(screenshot(tmp_path, html))
    assert "No attempt has been recorded yet." in rendered_text(tmp_path, html)


def test_the_pages_a_local_run_prints_open_in_a_browser_as_pages_not_as_source(tmp_path):
    # What kfp.local leaves: HTML artifacts as files without an extension.
    t0 = 1_700_000_000.0
    records = [{"attempt": 1, "started": t0, "ended": t0 + 60, "seconds": 60,
                "outcome": "success", "start_step": 0, "saved_step": 20, "steps_lost": 0,
                "capacity": "spot"}]  # fmt: skip
    root = tmp_path / "pipeline_root"
    (root / "run" / "train").mkdir(parents=True)
    (root / "run" / "profile").mkdir()
    (root / "run" / "train" / "report").write_text(report.page(records, ledger.totals(records), {}))
    (root / "run" / "profile" / "report_html").write_text(
        render_html("# Training profile", [(0.005, 0.02)] * 5)
    )
    # As the artifact is, a browser shows the page's source as text: what this test tells apart.
    source = _open(tmp_path, (root / "run" / "train" / "report").as_uri(), "--dump-dom").stdout
    assert "&lt;svg" in source and "<svg" not in source
    attempts, profile = local.browser_pages(root, tmp_path)
    printed = local.LocalResult(
        out=tmp_path, ok=True, seconds=1.0, params={}, attempts_page=attempts, profile_page=profile
    ).report()
    urls = dict(re.findall(r"^(attempts page|profile page): +(file://\S+)$", printed, flags=re.M))
    assert set(urls) == {"attempts page", "profile page"}, printed
    for name, element, colour in (
        ("attempts page", '<svg class="timeline"', report.COLORS["spot"]),
        ("profile page", '<svg class="steps"', "#1565c0"),
    ):
        dom = _open(tmp_path, urls[name], "--dump-dom").stdout
        assert element in dom and "&lt;svg" not in dom, (name, dom[:300])
        png = tmp_path / "shot.png"
        _open(tmp_path, urls[name], f"--screenshot={png}")
        im = Image.open(png).convert("RGB")
        assert bands(im, colour), f"{name}: nothing drawn in {colour}"
