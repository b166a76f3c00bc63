"""The renderers of the flag table (config/help.py): --help and docs/tf-serving.md's table."""

from __future__ import annotations

from pathlib import Path

import pytest

from tf_entrypoint.serving.config import (
    FLAGS,
    ShowText,
    help_text,
    markdown_table,
    read_flags,
)

REPO = Path(__file__).resolve().parents[4]
#: The TF Serving compatibility page holds the flag table (it was the README's).
TF_SERVING_PAGE = (REPO / "docs" / "tf-serving.md").read_text()


def test_help_lists_every_spelling() -> None:
    with pytest.raises(ShowText) as shown:
        read_flags(["--model_name=m", "--help"])
    assert shown.value.text == help_text()
    for flag in FLAGS:
        for spelling in flag.spellings:
            assert f"{spelling}" in shown.value.text


def test_the_docs_table_is_the_codes_table() -> None:
    table = markdown_table()
    assert table.splitlines()[0] in TF_SERVING_PAGE
    start = TF_SERVING_PAGE.index(table.splitlines()[0])
    assert TF_SERVING_PAGE[start : TF_SERVING_PAGE.index("\n\n", start)] == table
