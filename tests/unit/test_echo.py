"""Echoed client and file text is bounded, quoted, and says how long the original was."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kubegpu.echo import ECHO_LIMIT, clip, shorten


def test_short_values_are_quoted_whole() -> None:
    assert shorten("GPU-bogus") == "'GPU-bogus'"
    assert shorten(3) == "3"


def test_a_16kb_id_keeps_its_start_and_names_its_size() -> None:
    value = "GPU-" + "x" * 16380
    out = shorten(value)
    assert out.startswith("'GPU-xxxx")
    assert out.endswith("…(16384 bytes)")
    assert len(out) < ECHO_LIMIT + 30


def test_control_characters_cannot_forge_a_log_line() -> None:
    assert "\n" not in shorten('a\n{"level": "error"}')
    assert "\n" not in clip("first\nsecond")


def test_large_non_strings_are_bounded_too() -> None:
    assert len(shorten(list(range(100_000)))) < ECHO_LIMIT + 40


def test_clip_leaves_plain_text_unquoted() -> None:
    assert clip("fell off the bus") == "fell off the bus"
    long = clip("d" * 100_000)
    assert long.startswith("ddd") and long.endswith("…(100000 bytes)") and len(long) < 200


@given(st.text(max_size=5000))
def test_echoes_never_exceed_their_bound(value: str) -> None:
    assert len(shorten(value)) <= ECHO_LIMIT + 2 + len("…(20000 bytes)") + 1
    assert len(clip(value)) <= 2 * ECHO_LIMIT + len("…(20000 bytes)")


def test_loaders_echo_huge_file_values_short(tmp_path) -> None:
    import pytest

    from kubegpu.deviceplugin.config import load_config
    from kubegpu.errors import InputError
    from kubegpu.sources.faults import parse_fault_line
    from kubegpu.sources.spec import parse_spec

    huge = "z" * 100_000
    cases = [
        lambda: parse_fault_line(f'{{"gpu": 0, "xid": "{huge}"}}'),
        lambda: parse_fault_line(f'{{"{huge}": 1}}'),
        lambda: parse_spec(f"gpus:\n- model: {huge}\n", origin="n.yaml"),
        lambda: parse_spec(f"gpus:\n- model: H100-80GB\n  ? {huge}\n  : 1\n", origin="n.yaml"),
    ]
    config = tmp_path / "c.yaml"
    config.write_text(f"version: v1\nflags:\n  migStrategy: {huge}\n")
    cases.append(lambda: load_config(config, env={}, cli={}))
    for case in cases:
        with pytest.raises(InputError) as err:
            case()
        assert len(str(err.value)) < 400, str(err.value)[:200]
        assert "100000 bytes" in str(err.value)
