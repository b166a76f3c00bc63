"""A TensorFlow Serving-compatible REST server for SavedModels.

    python -m tf_entrypoint.serving [--port N] [--rest_api_port N] [--model_name NAME]
                                 [--model_base_path PATH] ...   (TF Serving's flags)

(`tf-entrypoint serve` and `tensorflow_model_server` plan the container's
thread pools, then run this.)

Modules, from the outside in:

* :mod:`.server`: command line, logging, uvicorn, signals, exit codes.
* :mod:`.app`: the Starlette application: routes, body limit, worker pool,
  metrics, health endpoints.
* :mod:`.service`: the request handlers (status, metadata, predict).
* :mod:`.lifecycle`: the models and their versions: load, swap, unload,
  labels, status; written against a :class:`~.lifecycle.Servable` protocol
  so it runs without TensorFlow.
* :mod:`.model_config`: which models to serve (TF Serving's model config
  file, or the flags) and the version policies.
* :mod:`.protocol`: TF Serving's JSON protocol (parsing, validation, response
  shapes, error messages), pure Python.
* :mod:`.repository`: the on-disk model layout (versions, their identity).
* :mod:`.model`: the only module that imports TensorFlow (and warm-up).
* :mod:`.config`: settings and the sizing of the worker pool from the CPU budget.

Nothing outside this package imports it: it pulls in TensorFlow, Starlette
and uvicorn, which the entrypoint itself must never pay for.
"""
