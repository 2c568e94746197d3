"""The Kubernetes Container Runtime Interface (CRI), spoken over a runtime's gRPC socket.

Nothing here is imported by `plan`, `bind` or `--version`: `grpcio` and `protobuf` load only
when a CRI socket is asked (`client`), so a host without Kubernetes pays nothing for them.
- `api.proto`: accelhost's own subset of `runtime.v1` (k8s.io/cri-api), only the messages
  and fields used here and by the e2e suite's small kubelet, with cri-api's field numbers;
  `api_pb2.py`, `api_pb2.pyi` are generated from it and committed (no `_pb2_grpc`);
- `client`: `connect(endpoint)` and `rpc(channel, name, request, timeout)`.

Regenerate after editing api.proto: `make proto` (grpcio-tools 1.75 writes code for
protobuf 6.31.1, so the generated module runs on any protobuf from 6.31.1 to 7.x, the range
pyproject.toml declares; a newer grpcio-tools raises that floor).
"""
