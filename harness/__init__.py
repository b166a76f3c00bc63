"""The test and benchmark harness: what tests/ and bench/ share.

- images: build the images (`make images` builds every flavor at once);
- docker: run containers from tests, always cleaned up;
- models: the model library, every test and benchmark model exported by one
  container run and cached across runs;
- servers: a pool of model servers keyed by their arguments and models;
- load: the one load loop; stats: the one percentile definition.

Everything here drives the Docker CLI or the Docker SDK from the host and
never imports TensorFlow (that lives in the images only).
"""
