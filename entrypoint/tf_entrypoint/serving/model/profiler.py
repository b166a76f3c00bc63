"""TensorFlow's profiler server, started in this process (the gRPC transport forwards
TF Serving's `tensorflow.ProfilerService` to it: grpc/profiler.py)."""

from __future__ import annotations


def start_profiler_server(port: int) -> None:
    """`tf.profiler.experimental.server.start(port)`: every interface, this port."""
    import tensorflow as tf  # noqa: PLC0415 - the server process has it loaded already

    tf.profiler.experimental.server.start(port)
