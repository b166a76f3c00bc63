# Stand-in for a Rasa Open Source 3.6 image (rasa/rasa:3.6.x cannot be pulled
# here): a TensorFlow 2.12 image from tests/matrix with a `rasa` command that
# sets TensorFlow up as Rasa does (rasa_like.py), user 1001 in group 0,
# home /app, ENTRYPOINT ["rasa"], CMD ["--help"], like Rasa's images.
ARG TF_IMAGE=tf-entrypoint-matrix:tf2.12-py3.10-tf
FROM ${TF_IMAGE}
COPY rasa_like.py /usr/local/lib/rasa_like.py
RUN printf '#!/bin/sh\nexec python3 /usr/local/lib/rasa_like.py "$@"\n' >/usr/local/bin/rasa \
    && chmod 0755 /usr/local/bin/rasa \
    && useradd --uid 1001 --gid 0 --create-home --home-dir /app --shell /usr/sbin/nologin rasa
WORKDIR /app
USER 1001
ENTRYPOINT ["rasa"]
CMD ["--help"]
