"""The per-worker model cache: each checkpoint loaded once, bounded, least recently used out first."""

from __future__ import annotations

import pytest

from solaris.udfs import fm_scoring


@pytest.fixture
def loads(monkeypatch):
    calls: list[str] = []

    def fake_load(path, arch, embedding_dim, device="cpu"):
        calls.append(path)
        return object(), {"version": f"v-{path}"}

    monkeypatch.setattr("solaris.models.checkpoint.load_checkpoint", fake_load)
    monkeypatch.setattr(fm_scoring, "_MODEL_CACHE", type(fm_scoring._MODEL_CACHE)())
    return calls


def test_a_checkpoint_is_loaded_once_and_the_cache_stays_bounded(loads):
    first, _ = fm_scoring.load_cached("a", "fm", 8, "cpu")
    assert fm_scoring.load_cached("a", "fm", 8, "cpu")[0] is first and loads == ["a"]
    for path in ("b", "c", "d"):
        fm_scoring.load_cached(path, "fm", 8, "cpu")
    fm_scoring.load_cached("a", "fm", 8, "cpu")  # used again: now the most recent
    fm_scoring.load_cached("e", "fm", 8, "cpu")  # over the bound: evicts b, the least recently used
    assert len(fm_scoring._MODEL_CACHE) == fm_scoring.MODEL_CACHE_SIZE == 4
    assert [key[0] for key in fm_scoring._MODEL_CACHE] == ["c", "d", "a", "e"]
    fm_scoring.load_cached("b", "fm", 8, "cpu")
    assert loads == ["a", "b", "c", "d", "e", "b"]
