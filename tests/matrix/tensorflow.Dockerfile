# A TensorFlow image that is not ours: the version matrix's stand-in for
# tensorflow/tensorflow, a Rasa image or a company base. Python plus
# TensorFlow from a hashed lock, nothing of tf-entrypoint; the recipe in
# docs/own-image/Dockerfile.add-entrypoint is then applied on top of it.
#
# Build context: a directory with this file and the lock as tf.lock
# (tests/matrix/conftest.py makes one).
#   INSTALL=venv    /opt/venv, first on PATH (python images, Rasa's images)
#   INSTALL=system  the interpreter's own site-packages, as root with the
#                   distribution's pip (tensorflow/tensorflow's images)
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
ARG INSTALL=venv
ARG PIP_VERSION=22.0.2+dfsg-1
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY tf.lock /tmp/tf.lock
RUN if [ "$INSTALL" = venv ]; then \
        python3 -m venv /opt/venv \
        && /opt/venv/bin/pip install --require-hashes --no-deps --only-binary=:all: -r /tmp/tf.lock; \
    else \
        apt-get update \
        && apt-get install -y --no-install-recommends python3-pip=${PIP_VERSION} \
        && rm -rf /var/lib/apt/lists/* \
        && python3 -m pip install --require-hashes --no-deps --only-binary=:all: -r /tmp/tf.lock; \
    fi \
    && rm /tmp/tf.lock
ENV PATH=/opt/venv/bin:${PATH}
