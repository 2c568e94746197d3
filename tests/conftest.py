import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# GNU readline, once loaded in this process, exports COLUMNS=80 and LINES to every child
# (outside os.environ). The CLI fits its tables to $COLUMNS, so the commands the tests
# start would print 80-column tables; a test that wants a width sets COLUMNS itself.
os.environ.pop("COLUMNS", None)
os.unsetenv("COLUMNS")
