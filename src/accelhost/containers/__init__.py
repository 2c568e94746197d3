"""Containers: which container a process is in, and what its runtime calls it.

What lives where:
- `cgroup`: the pure parser of /proc/PID/cgroup (every runtime's path shape, v1 and v2);
- `docker_api`: Docker's (and Podman's) API answers, parsed (pure);
- `cri_answers`: a CRI runtime's answers (`Host.cri_look`'s plain data), parsed (pure);
- `pod_volumes`: pods' emptyDir tmpfs volumes and sandbox shm mounts from the mount table;
- `model`: `Container` (what evidence shows), `Namespaces` (a process's) and
  `ContainerView` (one look at a host);
- `reader`: `read_containers`, the one reader (cgroups, namespaces, runtimes), through the
  host door (a snapshot replays it).
"""
