"""`python -m accelhost ...` is the `accelhost` command."""

import sys

from accelhost.cli.main import main

sys.exit(main())
