"""The public front door of ``agents`` lists each name once, and each name exists."""

import agents


def test_every_public_name_is_exported_once_and_resolves() -> None:
    assert len(agents.__all__) == len(set(agents.__all__))
    assert sorted(agents.__all__) == agents.__all__
    for name in agents.__all__:
        assert getattr(agents, name) is not None
