"""Text for people: the ground floor every command's output is built on.

What lives where: `table` (`render_table`: a plain aligned table, safe for pipes, logs and
bug reports; `colour_status` for FAIL and WARN cells, which the command line applies only
on a terminal). Pure: the width to fit and whether to colour are the caller's (the shell
reads the terminal). The library's renderers (the doctor's report, the bench reports) and the
command line use it alike, so it imports nothing of accelhost: no arrow runs from here up
to `accelhost.cli` or back.
"""

from accelhost.render.table import colour_status, render_table

__all__ = ["colour_status", "render_table"]
