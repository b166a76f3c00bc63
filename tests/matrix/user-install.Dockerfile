# A second copy of tf-entrypoint, installed with `pip install --user` by the
# app user on top of an image that has it in the system site-packages already.
ARG IMAGE=tf-entrypoint-matrix:tf2.12-py3.10
FROM ${IMAGE}
USER 0
RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin app
COPY tf_entrypoint-*.whl /tmp/
USER 10001
RUN python3 -m pip install --no-cache-dir --user /tmp/tf_entrypoint-*.whl
