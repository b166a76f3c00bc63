"""What the pure-Python servables of the unit tests share (core/servable.py's protocol)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.servable import Call, Done, Pending


class FakeServable:
    """Defaults for a test's servable: it implements `run`, and `signatures`."""

    signatures: Mapping[str, p.Signature] = {}
    signature_texts: Mapping[str, str] = {}
    signature_def_map = b""
    warmup_records = 0
    method_name_check = False

    def runs(self, name: str) -> bool:
        return name in self.signatures

    def run(
        self,
        name: str,
        inputs: Mapping[str, p.Tensor],
        outputs: Sequence[str],
        *,
        batch: bool = False,
    ) -> dict[str, p.Tensor]:
        raise NotImplementedError

    def run_many(self, calls: Sequence[Call]) -> list[dict[str, p.Tensor]]:
        return [self.run(name, inputs, outputs) for name, inputs, outputs in calls]

    def start(
        self,
        name: str,
        inputs: Mapping[str, p.Tensor],
        outputs: Sequence[str],
        *,
        deadline: float | None,
        expired: str,
        done: Done,
    ) -> Pending | None:
        return None  # no batch queue: the server runs it on a thread
