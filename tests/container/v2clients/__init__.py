"""Real Open Inference Protocol clients, run by tests/container/test_v2_clients.py.

Each script runs in .venv-clients (requirements/clients.lock: tritonclient and
kserve, which pin a protobuf older than the dev venv's), as a subprocess:

    .venv-clients/bin/python tests/container/v2clients/SCRIPT ADDRESS OPS_JSON

ADDRESS is host:port (REST or gRPC); OPS_JSON a list of operations (_common.py
describes them). The script prints one JSON list, a result per operation, on its
last line of stdout. They import neither the project nor tests/: only the
client libraries, NumPy and their sibling _common.py.
"""
