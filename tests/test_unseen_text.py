"""The unseen-text prompt set (runner/unseen_text.py): third-party code, the same prompts on
every call, named by a fingerprint, and never drawn from what training reads."""

from __future__ import annotations

import pytest

from runner import unseen_text
from runner.prompts import PromptsError
from runner.train import corpus


def test_the_set_is_fixed_and_fingerprinted():
    first, again = unseen_text.unseen_prompts(), unseen_text.unseen_prompts()
    assert first == again and len(first) == 300
    assert len({p.id for p in first}) == 300
    packages = {p.id.split("/")[0] for p in first}
    assert packages == set(unseen_text.PACKAGES.values())
    assert all(1000 <= len(p.text) <= 1600 for p in first)
    assert unseen_text.fingerprint(first) == unseen_text.fingerprint(again)
    assert unseen_text.fingerprint(first) != unseen_text.fingerprint(first[:-1])


def test_no_unseen_package_lives_where_training_reads():
    """Training reads the standard library only (and never its site-packages)."""
    stdlib = corpus.stdlib_root().resolve()
    for name in unseen_text.PACKAGES.values():
        root = unseen_text.package_root(name).resolve()
        assert stdlib not in root.parents or "site-packages" in root.parts, name


def test_a_missing_package_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(unseen_text, "PACKAGES", {"no-such-dist": "no_such_package_here"})
    with pytest.raises(PromptsError, match="package 'no_such_package_here' is not installed"):
        unseen_text.unseen_prompts()


def test_a_workload_draws_unseen_prompts_from_the_set():
    """`prompts = "unseen"` in a declaration: the seeded stream over the unseen texts,
    tokenised with the checkpoint's tokenizer (shipped tiny)."""
    from tokenizers import Tokenizer

    from runner.engine.checkpoint import resolve_checkpoint
    from runner.experiments.declaration import Workload
    from runner.experiments.workloads.workload import PromptStream

    tiny = resolve_checkpoint("tiny")
    w = Workload(prompts="unseen", requests_per_client=2, prompt_tokens=(64, 96), max_new_tokens=8)
    first = [PromptStream(w, 5, tiny, width=2).prompt(c, i) for c in range(2) for i in range(2)]
    assert first == [PromptStream(w, 5, tiny, width=2).prompt(c, i) for c in range(2) for i in range(2)]
    assert all(64 <= len(p) <= 96 for p in first)
    tok = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    texts = "".join(p.text for p in unseen_text.unseen_prompts())
    assert all(tok.decode(p[:12]).strip()[:20] in texts for p in first)
