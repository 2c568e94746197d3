"""The command-line shell: parses arguments, calls the library, renders results."""
