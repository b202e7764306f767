"""benchmarks/shield_box.py: a tiny run of each row and the section it writes."""

from __future__ import annotations

from pathlib import Path

import torch

from benchmarks import shield_box


def test_a_tiny_run_measures_each_row_and_writes_the_section(tmp_path: Path):
    threads = torch.get_num_threads()
    try:
        sizes = shield_box.QUICK
        rows = [
            shield_box.measure(algo, 4, sizes, tmp_path)
            for algo in ("ippo", "shield", "shield_dec")
        ]
        deployed = [shield_box.deploy(tmp_path / "shield-4", c, sizes) for c in (4, 8)]
    finally:
        torch.set_num_threads(threads)
    for row in rows:
        assert 0.0 <= row["risk_low"] <= row["risk"] <= row["risk_high"] <= 1.0
        assert row["episodes"] == sizes["eval_episodes"]
    for row in rows[1:]:
        assert 0.0 <= row["fallback_share"] <= 1.0 and isinstance(row["certified"], bool)
    for row in deployed:
        assert 0.0 <= row["override_share"] <= 1.0 and row["filter_s_per_1000"] > 0
    text = shield_box.markdown(rows, sizes, deployed)
    assert text.count("\n| shield") == 2 and "| shield_dec | 4 |" in text
    assert "| ippo | - |" in text and "| - | - | - | - |" in text
    assert "| 8 | " in text and "deployed with each count" in text
    assert "deployed with each count" not in shield_box.markdown(rows, sizes, [])
