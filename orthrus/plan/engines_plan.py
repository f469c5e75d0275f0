"""The engines' trajectory files (decode.external), and the runs the workflow makes itself
(decode.engines: workflow/rules/engines.smk), each ingested as the decoder `external` under its own
name (workflow/rules/external.smk): their cells, their decoding results and what each is compared with."""

from __future__ import annotations

from orthrus import contracts
from orthrus.errors import ConfigError, InputError
from orthrus.plan.decode_plan import decode_file
from orthrus.plan.paths import R


class EnginesPlan:
    """`entries`: name -> decode.external entry (decode.engines' runs among them); `cells`: name ->
    its (precision, attention), read when the plan is built (while the workflow is parsed)."""

    def __init__(self, config):
        from orthrus.engines.runner import external_entries

        d = config.decode  # the entries as data: the keys given (orthrus/engines/engine.py)
        self.teacher = config.teacher.name
        self.entries = {n: e.model_dump() for n, e in d.external.items()} | external_entries(config, R)
        self.cells = _cells(self.entries, d.precisions, d.attentions)

    def file(self, name: str) -> str:
        """The decoding result `orthrus ingest` writes for the entry `name`."""
        return decode_file(name, contracts.EXTERNAL_DECODER, *self.cells[name])

    def reference_file(self, name: str) -> str:
        """What the entry `name` is compared with: the engine's own plain run it declares, else the
        reference of its cell."""
        ref = self.entries[name].get("reference")
        return self.file(ref) if ref else decode_file(self.teacher, contracts.REFERENCE_DECODER, *self.cells[name])

    def plain_references(self) -> list[str]:
        """The engines' plain runs that engine pairs declare as their reference."""
        return [self.file(r) for r in sorted({e["reference"] for e in self.entries.values() if e.get("reference")})]


def _cells(entries: dict, precisions: list, attentions: list) -> dict[str, tuple[str, str]]:
    """Each engine file's cell: the entry's precision and attention, else its file's env, inside the
    decode grid (the reference runs only there)."""
    from orthrus.engines.ingest import cell

    out = {}
    for name, entry in entries.items():
        try:
            p, a = cell(name, entry)
        except InputError as e:
            raise ConfigError([str(e)]) from None
        for key, value, grid in (("precision", p, precisions), ("attention", a, attentions)):
            if value not in grid:
                raise ConfigError(
                    [
                        f"decode.external.{name}.{key}: {value!r} (from {entry['path']}) not in the decode "
                        f"grid {grid} (the ar-ref reference runs only there): set it, or add it there"
                    ]
                )
        out[name] = (p, a)
    return out
