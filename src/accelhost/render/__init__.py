"""Text for people: the ground floor every command's output is built on.

What lives where: `table` (`render_table`: a plain aligned table, safe for pipes, logs and
bug reports). The library's renderers (the doctor's report, the bench reports) and the
command line use it alike, so it imports nothing of accelhost: no arrow runs from here up
to `accelhost.cli` or back.
"""

from accelhost.render.table import render_table

__all__ = ["render_table"]
