"""Raw kernel interfaces: typed wrappers, no policy, standard library only.

What lives where: `libc` (the C library and the syscalls Python's `os` lacks, one table of
their numbers; pidfds), `procevents` (the process events connector: every fork and exit,
and classic BPF socket filters of them), `inotify` (files created in a
directory, with queue overflow said). `host/` (the only reader of the machine), `apply/`,
`remove/`, `supervisor/` and `hygiene/` use them; they import nothing of accelhost's.
A call that changes the machine (prctl, unshare, mount, shmctl, the NUMA syscalls) stands
where the house rule places it, on `libc` from here.
"""
