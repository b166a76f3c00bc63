"""tf-entrypoint: make TensorFlow fit the container it runs in."""

__version__ = "0.1.0"
