"""The one reader of a user's JSON-object file: each failure is one EvalkitError line naming the file."""

from __future__ import annotations

import pytest

from evalkit_core import ConfigError, ReleaseError, read_json_object


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "file not found"),
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON (not UTF-8"),
        (b"[1, 2]", "expected a JSON object"),
        (b"null", "expected a JSON object"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),  # deeper than the parser's recursion limit
    ],
)
def test_each_failure_is_one_line_naming_the_file(tmp_path, content, message):
    path = tmp_path / "x.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        read_json_object(path)
    text = str(err.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text


def test_a_directory_cannot_be_read(tmp_path):
    with pytest.raises(ConfigError, match=r": cannot be read \("):
        read_json_object(tmp_path)


def test_the_callers_error_type_and_words(tmp_path):
    with pytest.raises(ReleaseError, match=r"release\.json: missing, make one"):
        read_json_object(tmp_path / "release.json", ReleaseError, missing="missing, make one")
    (tmp_path / "a.json").write_text("[]")
    with pytest.raises(ReleaseError, match="expected a manifest"):
        read_json_object(tmp_path / "a.json", ReleaseError, expected="a manifest")


def test_strict_refuses_nan_and_infinity(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"x": NaN}')
    assert read_json_object(path)["x"] != read_json_object(path)["x"]  # Python's json takes NaN by default
    for constant in ("NaN", "Infinity", "-Infinity"):
        path.write_text(f'{{"x": {constant}}}')
        with pytest.raises(ConfigError, match="not valid JSON"):
            read_json_object(path, strict=True)
    path.write_text('{"x": 1.5}')
    assert read_json_object(path, strict=True) == {"x": 1.5}
