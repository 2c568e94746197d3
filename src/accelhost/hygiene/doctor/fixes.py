"""The `accelhost clean` command a FIX tells the reader to run, built in one place from
the options in force.

A fix that drops the doctor's `--container` or `--shm-min-age` does something else than
the doctor described: it removes the whole host's leftovers, or none of the fresh ones it
just listed. So every fix repeats the scope and each option that changes what clean finds
(the shm dirs and age, the engine catalog, where containers and pods are looked up), and a
replayed recording says that the command is for the recorded host: a replay cannot clean.
"""

from __future__ import annotations

import shlex

from accelhost.hygiene.options import DEFAULT_SHM_DIRS, DEFAULT_SHM_MIN_AGE_S, HygieneOptions


def clean_command(
    options: HygieneOptions,
    only: str | None = None,
    named: tuple[str, ...] = (),
    yes: bool = True,
) -> str:
    """`accelhost clean --yes [NAMED] [--only KIND] [options in force]`, quoted for a shell.
    `named`: what the command names (`--shmid 7`); `only`: the one kind it cleans; `yes`
    False: the dry run that shows what would go."""
    words = ["accelhost", "clean", *(["--yes"] if yes else []), *named]
    if only is not None:
        words += ["--only", only]
    # the options in force that change what clean removes
    if options.container is not None:
        words += ["--container", options.container]
    if options.shm_min_age_s != DEFAULT_SHM_MIN_AGE_S:
        words += ["--shm-min-age", f"{options.shm_min_age_s:g}"]
    words += [w for d in options.shm_dirs if d not in DEFAULT_SHM_DIRS for w in ("--shm-dir", d)]
    words += options.catalog_words
    words += [w for s in options.container_sockets for w in ("--docker-socket", s)]
    words += [w for s in options.cri_sockets for w in ("--cri-socket", s)]
    if options.kubelet_root is not None:
        words += ["--kubelet-root", options.kubelet_root]
    return " ".join(shlex.quote(w) for w in words)


def clean_fix(options: HygieneOptions, live: bool, what: str, only: str | None = None) -> str:
    """A FIX line: the command, what it does, and where it must run."""
    text = f"{clean_command(options, only)} ({what})"
    if live:
        return text
    return f"on the recorded host: {text}; a --snapshot replay cannot be cleaned"
