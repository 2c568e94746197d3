"""The command-line shell: parses arguments, calls the library, renders results.

What lives where: `main` (the dispatcher: imports only the module of the command run),
`common` (options every command shares: `--device LIST`, `--grace`, host, JSON, tables),
`topo`, `plan`, `snapshot`, `bind` with `bind_args` (bind, exec, verify, unbind),
`hygiene` with `hygiene_options` and `container_args` (doctor, clean, watch), `run`,
`bench` (bench pipeline, and bench bind from `accelhost.benchbind.cli`).
"""
