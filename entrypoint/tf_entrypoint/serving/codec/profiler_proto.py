"""TensorFlow's profiler service messages (`tensorflow.ProfilerService`), built at run time.

TensorFlow ships no Python module for `tsl/profiler/protobuf/profiler_service.proto`
(only its C++ code, in libtensorflow_cc), so this module writes the part of
the file the server answers, as codec/v2_proto.py does for the Open
Inference Protocol: a `FileDescriptorProto` in a pool of its own, with the
field numbers of TensorFlow 2.21's file (read from the descriptor that
libtensorflow_cc embeds). Fields the server does not read are left out
(protobuf keeps them as unknown fields); `ProfileResponse.xspace` is a
`tensorflow.profiler.XSpace` message on the wire, written here as the bytes
of one (the same encoding), so that this module needs no other file.

Exported: ProfileOptions (the fields a capture reads), ProfileRequest,
ProfileResponse, TerminateRequest, TerminateResponse, and SERVICE.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from tf_entrypoint.serving.codec.runtime_proto import Fields, message_classes, table_file

PACKAGE = "tensorflow"
FILE_NAME = "tf_entrypoint/serving/profiler_service.proto"
SERVICE = "tensorflow.ProfilerService"

# message -> ((field, number, type), ...), as runtime_proto.table_file reads it.
_MESSAGES: dict[str, Fields] = {
    "ProfileOptions": (  # tsl/profiler/protobuf/profiler_options.proto
        ("include_dataset_ops", 1, "bool"),
        ("host_tracer_level", 2, "uint32"),
        ("device_tracer_level", 3, "uint32"),
        ("python_tracer_level", 4, "uint32"),
        ("duration_ms", 9, "uint64"),
        ("override_hostname", 15, "string"),
    ),
    "ProfileRequest": (
        ("duration_ms", 1, "uint64"),
        ("max_events", 2, "uint64"),
        ("tools", 3, "string*"),
        ("opts", 4, "ProfileOptions"),
        ("repository_root", 5, "string"),
        ("session_id", 6, "string"),
        ("host_name", 7, "string"),
        ("emit_xspace", 9, "bool"),
    ),
    "ProfileResponse": (("empty_trace", 7, "bool"), ("xspace", 8, "bytes")),
    "TerminateRequest": (("session_id", 1, "string"),),
    "TerminateResponse": (),
}


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    return table_file(PACKAGE, FILE_NAME, _MESSAGES)


POOL, _message_class = message_classes(file_descriptor())


ProfileOptions = _message_class("ProfileOptions")
ProfileRequest = _message_class("ProfileRequest")
ProfileResponse = _message_class("ProfileResponse")
TerminateRequest = _message_class("TerminateRequest")
TerminateResponse = _message_class("TerminateResponse")
