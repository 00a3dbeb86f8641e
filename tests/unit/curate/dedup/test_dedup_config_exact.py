"""MinhashConfig validation and slug; exact-dedup normalisation and keys."""

from __future__ import annotations

import pytest

from scicodepile.curate.dedup import MinhashConfig, content_sha256, normalise_for_hash
from scicodepile.errors import ConfigError
from scicodepile.settings import load_settings


def test_defaults_are_the_stack_v2_and_slug_is_stable() -> None:
    config = MinhashConfig()
    got = (config.ngram, config.num_perm, config.bands, config.rows, config.threshold)
    assert got == (5, 250, 25, 10, 0.7)
    assert config.slug == "minhash-5g-250p-25b-0.7"
    assert MinhashConfig(seed=3).slug == "minhash-5g-250p-25b-0.7-s3"
    assert MinhashConfig(ngram=3).slug != config.slug
    assert 0.70 < config.lsh_threshold < 0.75
    assert config.candidate_probability(0.9) > 0.99 > 0.01 > config.candidate_probability(0.4)


def test_verification_is_on_by_default_and_named_when_off() -> None:
    config = MinhashConfig()
    assert config.verify and config.min_equal == 175  # 0.7 of 250 minima, no float rounding slip
    assert MinhashConfig(verify=False).slug == "minhash-5g-250p-25b-0.7-noverify"
    assert MinhashConfig(seed=3, verify=False).slug == "minhash-5g-250p-25b-0.7-s3-noverify"
    assert MinhashConfig(num_perm=200, bands=20, threshold=0.75).min_equal == 150
    with pytest.raises(ConfigError, match="verify"):
        MinhashConfig(verify="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"bands": 20}, "SCICODEPILE_DEDUP_NUM_PERM"),
        ({"ngram": 0}, "SCICODEPILE_DEDUP_NGRAM"),
        ({"threshold": 1.5}, "SCICODEPILE_DEDUP_THRESHOLD"),
        ({"threshold": 0.3}, "SCICODEPILE_DEDUP_BANDS"),  # 25x10 cannot express 0.3
        ({"num_perm": 100, "bands": 50, "rows": 2}, "SCICODEPILE_DEDUP_BANDS"),
    ],
)
def test_invalid_configs_name_the_setting(kwargs: dict, setting: str) -> None:
    with pytest.raises(ConfigError) as err:
        MinhashConfig(**kwargs)
    assert setting in str(err.value)


def test_config_from_settings(tmp_path) -> None:
    settings = load_settings(var_dir=tmp_path, dedup_num_perm=200, dedup_bands=20, dedup_seed=9)
    config = MinhashConfig.from_settings(settings)
    assert (config.num_perm, config.bands, config.rows, config.seed) == (200, 20, 10, 9)
    with pytest.raises(ConfigError):
        MinhashConfig.from_settings(load_settings(var_dir=tmp_path, dedup_bands=7))


def test_normalisation_ignores_layout_noise_only() -> None:
    base = "def f(x):\n    return x\n"
    assert normalise_for_hash(base) == base
    for variant in (
        "def f(x):\r\n    return x\r\n",
        "\ufeffdef f(x):  \n    return x\t\n\n\n",
        "\n\ndef f(x):\n    return x",
        "def f(x):\r    return x\r",
    ):
        assert content_sha256(variant) == content_sha256(base), repr(variant)
    # case, indentation and inner blank lines can change meaning: they change the key
    assert content_sha256("def F(x):\n    return x\n") != content_sha256(base)
    assert content_sha256("def f(x):\n  return x\n") != content_sha256(base)
    assert content_sha256("def f(x):\n\n    return x\n") != content_sha256(base)
    # NFC: a composed and a decomposed e-acute are the same text
    assert content_sha256("caf\u00e9 = 1\n") == content_sha256("cafe\u0301 = 1\n")
    assert normalise_for_hash("") == "" and normalise_for_hash(" \n\t\n") == ""
    assert len(content_sha256("x")) == 64
    assert content_sha256("bad \udcff surrogate") != content_sha256("bad  surrogate")
