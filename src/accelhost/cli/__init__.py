"""The command-line shell: parses arguments, calls the library, renders results.

One module per command (or family of commands); `main` imports only the one run, none for
`accelhost --help`. Nothing outside this package imports it.
"""
