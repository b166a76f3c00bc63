# The model server's packages added to a matrix cell whose image already has
# tf-entrypoint (docs/own-image/Dockerfile.add-entrypoint): what a user adds
# to serve from such an image. tests/matrix/test_serving.py builds it.
#
# Build context: a directory with this file and the cell's serving lock as
# serve.lock (requirements/matrix/serve-*.lock: the wheel's `serve` extra plus
# tensorflow-serving-api and grpcio-health-checking, resolved against the
# cell's TensorFlow lock, so that nothing the cell has changes).
ARG CELL_IMAGE=tf-entrypoint-matrix:tf2.12-py3.10
FROM ${CELL_IMAGE}
ARG APP_USER=0
USER 0
COPY serve.lock /tmp/serve.lock
RUN python3 -m pip install --no-cache-dir --require-hashes --no-deps --only-binary=:all: \
        -r /tmp/serve.lock \
    && rm /tmp/serve.lock
USER ${APP_USER}
