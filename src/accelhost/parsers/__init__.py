"""Pure parsers: text in, typed facts out; one module per source.

A parser that meets text it cannot read raises `accelhost.errors.ParseError` naming the
source, never a bare IndexError or ValueError.
"""
