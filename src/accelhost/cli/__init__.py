"""The command-line shell: parses arguments, calls the library, renders results.

One module per command or family: `topo`, `plan`, `snapshot`, `bind` (bind, exec, verify,
unbind), `hygiene` with `hygiene_options` (doctor, clean, watch), `run`, `bench` (bench
pipeline and bench bind); `main` dispatches them and guards the output streams, `options`
and `common` hold what several commands share. Nothing outside this package imports it.
"""
