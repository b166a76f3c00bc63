"""tf-entrypoint's TensorFlow Serving-compatible model server (REST and gRPC).

    python -m tf_entrypoint.serving [--port N] [--rest_api_port N] [--model_name NAME]
                                 [--model_base_path PATH] ...   (TF Serving's flags)

(`tf-entrypoint serve` and `tensorflow_model_server` plan the container's
thread pools, then run this.) The module map and the rules between modules
are in docs/architecture.md. Nothing outside this package imports it: it
pulls in TensorFlow, Starlette, uvicorn and grpc, which the entrypoint itself
must never pay for.
"""
