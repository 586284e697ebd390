"""A profile no MIG model has, or one the entry's own device filter model lacks, makes a config
invalid (not "not applicable"): the reason names the profile, the entry and the GPU model."""

from __future__ import annotations

from kubegpu.model.migparted import CheckStatus, MigConfig, MigConfigEntry, check_config, format_device_id

H100_SXM = (0x2330 << 16) | 0x10DE


def _config(*entries: MigConfigEntry) -> MigConfig:
    return MigConfig(name="x", entries=entries)


def test_a_profile_no_model_has_is_invalid_on_every_model() -> None:
    config = _config(MigConfigEntry(mig_enabled=True, mig_devices=(("9g.99gb", 1),), where="f.yaml:4"))
    check = check_config(config, "H100-80GB")
    assert check.status is CheckStatus.INVALID
    reason = check.entries[0].reason
    assert "f.yaml:4" in reason and "'9g.99gb'" in reason and "H100-80GB" in reason


def test_a_profile_of_another_model_under_a_filter_for_this_one_is_invalid() -> None:
    entry = MigConfigEntry(
        device_filter=(H100_SXM,), mig_enabled=True, mig_devices=(("1g.5gb", 7),), where="f.yaml:9"
    )
    check = check_config(_config(entry), "H100-80GB")
    assert check.status is CheckStatus.INVALID
    assert "device filter picks H100-80GB" in check.entries[0].reason
    assert format_device_id(H100_SXM) == "0x233010DE"


def test_a_per_sku_profile_without_a_filter_still_does_not_apply_elsewhere() -> None:
    config = _config(MigConfigEntry(mig_enabled=True, mig_devices=(("1g.5gb", 7),), where="f.yaml:4"))
    assert check_config(config, "H100-80GB").status is CheckStatus.NOT_APPLICABLE
    assert check_config(config, "A100-40GB").status is CheckStatus.VALID


def test_a_mix_of_this_models_profiles_and_others_is_invalid() -> None:
    entry = MigConfigEntry(mig_enabled=True, mig_devices=(("1g.10gb", 1), ("1g.5gb", 1)), where="f.yaml:4")
    check = check_config(_config(entry), "H100-80GB")
    assert check.status is CheckStatus.INVALID
    assert "but not '1g.5gb'" in check.entries[0].reason
