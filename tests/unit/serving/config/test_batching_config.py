"""The batching parameters file (config/batching_config.py): TF Serving's text format."""

from __future__ import annotations

from pathlib import Path

import pytest

from tf_entrypoint.serving.config.batching_config import parse_batching_parameters
from tf_entrypoint.serving.config.model_config import ConfigError
from tf_entrypoint.serving.core.batching import (
    BatchingParameters,
)

PATH = Path("/etc/batching.txt")


def parse(text: str, workers: int = 2) -> BatchingParameters:
    return parse_batching_parameters(text, PATH, workers)


def test_the_parameters_file_is_tf_servings_text_format() -> None:
    text = """
    # as in TF Serving's documentation
    max_batch_size { value: 128 }
    batch_timeout_micros { value: 2000 }
    max_enqueued_batches { value: 100 }
    num_batch_threads { value: 4 }
    allowed_batch_sizes: 32
    allowed_batch_sizes: 128
    """
    assert parse(text) == BatchingParameters(
        num_batch_threads=4,
        max_batch_size=128,
        batch_timeout_micros=2000,
        max_enqueued_batches=100,
        allowed_batch_sizes=(32, 128),
        source=PATH,
    )
    assert parse("") == BatchingParameters(num_batch_threads=2, source=PATH)
    assert parse("enable_large_batch_splitting { value: false }").max_batch_size == 1000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "max_batch_size: 8",
            "Error parsing text-format tensorflow.serving.BatchingParameters: "
            """/etc/batching.txt:1:17: 'max_batch_size: 8': Expected "{".""",
        ),
        (
            "\nmax_batch { value: 8 }",
            "Error parsing text-format tensorflow.serving.BatchingParameters: "
            "/etc/batching.txt:2:1: Message type "
            '"tensorflow.serving.BatchingParameters" has no field named "max_batch".',
        ),
        (
            "max_batch_size { value: 0 }",
            "/etc/batching.txt:1: max_batch_size: 0 is out of range: expected a whole number "
            "from 1",
        ),
        (
            "\n\nnum_batch_threads { value: -1 }",
            "/etc/batching.txt:3: num_batch_threads: -1 is out of range",
        ),
        (
            "max_batch_size { value: 64 }\nallowed_batch_sizes: 32",
            "/etc/batching.txt:2: allowed_batch_sizes: Last entry in allowed_batch_sizes must "
            "match max_batch_size; last entry was 32; expected 64",
        ),
        (
            "allowed_batch_sizes: [8, 4, 1000]",
            "/etc/batching.txt:1: allowed_batch_sizes: [8, 4, 1000]: expected positive sizes "
            "in increasing order",
        ),
        (
            'thread_pool_name { value: "x" }',
            "/etc/batching.txt:1: thread_pool_name: not supported: shared batch thread pools",
        ),
        (
            "enable_large_batch_splitting { value: true }",
            "/etc/batching.txt:1: enable_large_batch_splitting: not supported",
        ),
        (
            "max_execution_batch_size { value: 8 }",
            "/etc/batching.txt:1: max_execution_batch_size: not supported",
        ),
        (
            "pad_variable_length_inputs: true",
            "/etc/batching.txt:1: pad_variable_length_inputs: not supported",
        ),
    ],
)
def test_parameters_file_errors_name_file_line_and_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(text)
    assert str(err.value).startswith(message)
