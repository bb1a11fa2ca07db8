"""flashcpu.Context's lifetime."""

import gc
import sys

import pytest

import flashcpu


def test_a_bad_keyword_raises_and_cleans_up_quietly(monkeypatch):
    """Context(wrong=...) raises TypeError, and collecting the half-made
    object raises nothing (its __del__ runs before __init__ set anything)."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    with pytest.raises(TypeError):
        flashcpu.Context(num_threads=2)
    gc.collect()
    assert not seen, [str(s.exc_value) for s in seen]
