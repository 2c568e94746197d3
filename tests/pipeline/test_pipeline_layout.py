"""The pipeline package stays readable: no module over 400 lines."""

from __future__ import annotations

from pathlib import Path

import accelhost.pipeline

LIMIT = 400


def test_no_pipeline_module_over_400_lines() -> None:
    root = Path(accelhost.pipeline.__file__).parent
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in root.glob("*.py")}
    assert "_run.py" in sizes and "_pipeline.py" in sizes
    assert {name: n for name, n in sizes.items() if n > LIMIT} == {}
