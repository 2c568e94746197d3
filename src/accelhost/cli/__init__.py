"""The command-line shell: parses arguments, calls the library, renders results.

What lives where: `main` (the dispatcher: each command's name and help line, and the
module of the command run is the only one it imports, none for `accelhost --help`; its
help formatter wraps every command's help to the terminal), `streams` (standard output
and error while a command runs: a reader that goes away ends the output, not the status),
`options` (every option more than one command takes, defined once: `--device LIST`,
`--grace`, `--plan`, `--pid`, ...), `common` (what the commands share besides options:
one device, the host, JSON output, roles and planning keywords), `topo`, `plan`,
`snapshot`, `bind` with `bind_args` (bind, exec, verify, unbind), `hygiene` with
`hygiene_options` (doctor, clean, watch), `run`, `bench` (bench
pipeline and bench bind). Nothing outside this package imports it.
"""
