"""A profile the entry's own device filter model lacks, or a mix of a model's profiles and others',
makes a config invalid: the reason names the profile, the entry and the GPU model. A well-formed
profile kubegpu knows on no model (a GPU outside its catalogue) only makes the entry not apply."""

from __future__ import annotations

from kubegpu.model.migparted import CheckStatus, MigConfig, MigConfigEntry, check_config, format_device_id

H100_SXM = (0x2330 << 16) | 0x10DE


def _config(*entries: MigConfigEntry) -> MigConfig:
    return MigConfig(name="x", entries=entries)


def test_a_profile_no_catalogue_model_has_does_not_apply_and_is_named() -> None:
    config = _config(MigConfigEntry(mig_enabled=True, mig_devices=(("9g.99gb", 1),), where="f.yaml:4"))
    check = check_config(config, "H100-80GB")
    assert check.status is CheckStatus.NOT_APPLICABLE
    assert "9g.99gb" in check.entries[0].reason and "no profiles for" in check.entries[0].reason


def test_rtx_pro_blackwell_profiles_with_attributes_do_not_apply_to_h100() -> None:
    """NVIDIA's current default mig-parted config names RTX PRO 6000 Blackwell profiles with
    mig-parted's attribute syntax; on every catalogue model they are "not applicable", not invalid."""
    entries = tuple(
        MigConfigEntry(mig_enabled=True, mig_devices=((key, 4),), where=f"f.yaml:{i}")
        for i, key in enumerate(("1g.24gb+gfx", "1g.24gb+me.all", "1g.24gb-me", "2g.48gb", "4g.96gb"))
    )
    for model in ("H100-80GB", "A100-40GB", "A100-80GB"):
        for entry in entries:
            assert check_config(_config(entry), model).status is CheckStatus.NOT_APPLICABLE, (model, entry)


def test_an_unknown_profile_beside_this_models_profiles_is_invalid() -> None:
    entry = MigConfigEntry(
        mig_enabled=True, mig_devices=(("1g.10gb", 1), ("1g.24gb+gfx", 1)), where="f.yaml:4"
    )
    check = check_config(_config(entry), "H100-80GB")
    assert check.status is CheckStatus.INVALID
    assert "'1g.24gb+gfx'" in check.entries[0].reason


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
