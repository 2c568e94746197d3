"""What the doctor reads: one look at a host through the host door (`host`), the one
reader of its processes and shm files (`rounds`, with `shmstate`: the files it keeps
between rounds), device memory from the vendors' tools (`devices`) and what is known of
its containers and pods (`containers`)."""
