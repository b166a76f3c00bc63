# (a) Your application on tf-entrypoint's image.
#   docker build -f Dockerfile.app -t my-app .      (context: this directory)
ARG IMAGE=tf-entrypoint:cpu
FROM ${IMAGE}
# Extra packages: as root, into the image's venv (/opt/venv, first on PATH).
USER 0
COPY requirements.txt /tmp/requirements.txt
RUN pip install --no-cache-dir -r /tmp/requirements.txt && rm /tmp/requirements.txt
# The application, owned by root: the app user can read it, not change it.
COPY app/ /app/
# Back to the image's numeric user (Kubernetes runAsNonRoot can verify it).
USER 10001:10001
# ENTRYPOINT (tini, then tf-entrypoint) is inherited; CMD is your command.
CMD ["python", "/app/train.py"]
