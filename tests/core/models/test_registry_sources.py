"""Every shipped registry entry says when and where its prices and context window were read."""

from __future__ import annotations

import datetime as dt

import pytest

from evalkit_core.models import RegistryError, load_registry


def test_every_shipped_entry_has_a_date_and_a_source():
    reg = load_registry([], env={})
    assert reg.models
    for entry in reg.models.values():
        assert entry.as_of is not None, entry.id
        assert dt.date.fromisoformat(entry.as_of) <= dt.datetime.now(dt.UTC).date(), entry.id
        assert entry.source and entry.source.strip(), entry.id


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ('as_of = "June 2025"', "field 'as_of' = 'June 2025'; expected a date string YYYY-MM-DD"),
        ('as_of = "2025-02-30"', "expected a real date"),
        ("as_of = 20250601", "expected a date string"),
        ('source = "  "', "field 'source'"),
    ],
)
def test_a_bad_date_or_source_is_refused_naming_the_field(tmp_path, line, needle):
    user = tmp_path / "reg.toml"
    user.write_text(f'[models."sim/weak"]\n{line}\n')
    with pytest.raises(RegistryError, match=needle.replace("(", r"\(").replace(")", r"\)")) as exc:
        load_registry([user], env={})
    assert str(user) in str(exc.value) and "sim/weak" in str(exc.value)
