"""The command-line shell: parses arguments, calls the library, renders results.

One module per command or family (`bind`: bind, exec, verify, unbind; `hygiene`, with
`hygiene_options`: doctor, clean, watch; `bench`: bench pipeline and bench bind), dispatched
by `main`, which also guards the output streams; `options` and `common` hold what several
commands share. Nothing outside this package imports it.
"""
