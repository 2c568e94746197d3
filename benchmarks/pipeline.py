"""Pipeline benchmark: the same table as `accelhost bench pipeline`, from a checkout.

    python benchmarks/pipeline.py                       # 10/50/20 ms, 100 items
    python benchmarks/pipeline.py --pre-time 0 --device-time 0 --post-time 0
    python benchmarks/pipeline.py --real --json

Every option of `accelhost bench pipeline` works here; this script only forwards them.
"""

from __future__ import annotations

import sys

from accelhost.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["bench", "pipeline", *sys.argv[1:]]))
