"""What the facts mean: the removal rules (`rules`), each finding computed once per look
(`findings`), and whose each leftover is (`attribution`, `containers`: by container, pod and
attempt; the `--container` scope)."""
