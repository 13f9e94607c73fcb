"""interp.load prints nothing a user cannot act on, and leaves global settings as it found them."""

import logging
import subprocess
import sys
import warnings

import interp


def _state():
    from transformers.utils import logging as hf_logging

    root = logging.getLogger()
    return (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled(), list(root.handlers),
            list(root.filters), root.level, logging.getLogger("transformer_lens").level, list(warnings.filters))


def test_load_is_quiet_in_a_fresh_process():
    code = (
        "import interp\n"
        "for name in ('lm-gpt2', 'lm-gemma2', 'mlm-bert'):\n"
        "    interp.load('zoo:' + name)\n"
        "m = interp.load('zoo:lm-gpt2')\n"
        "m.generate('the cat', max_new_tokens=2, verbose=False)\n"
        "import logging; assert not logging.getLogger().handlers, 'load configured the root logger'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "ok\n"
    assert out.stderr == "", out.stderr  # no "Loading weights" bar, center_unembed or past_key_values warning


def test_load_restores_what_it_silences(tiny_dirs):
    from transformers.utils import logging as hf_logging

    interp.load(tiny_dirs["gpt2"])  # first use imports modules that set filters of their own
    hf_logging.set_verbosity_info()
    try:
        before = _state()
        interp.load(tiny_dirs["gemma2"])
        assert _state() == before
    finally:
        hf_logging.set_verbosity_error()


def test_load_keeps_the_callers_own_warnings_and_logs(tiny_dirs, caplog):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        interp.load(tiny_dirs["gpt2"])
        warnings.warn("mine", UserWarning)
    assert [str(w.message) for w in seen] == ["mine"]
    with caplog.at_level(logging.WARNING):
        interp.load(tiny_dirs["gpt2"])
        logging.warning("still logged")
    assert "still logged" in caplog.text


def test_subnetworks_shows_progress_over_seeds_and_steps(gpt2, capsys):
    import torch

    from interp.masking import subnetworks
    from interp.tasks.base import BOS_ID, Task

    n, length, vocab = 8, 5, gpt2.cfg.d_vocab
    g = torch.Generator().manual_seed(0)
    clean = torch.randint(5, vocab, (n, length), generator=g)
    clean[:, 0] = BOS_ID
    correct = torch.randint(5, vocab, (n,), generator=g)
    task = Task("random", "test", clean, clean.clone(), correct, (correct - 4) % (vocab - 5) + 5,
                torch.full((n,), length - 1), tuple(map(str, range(n))), metric="logit_diff")
    subnetworks(gpt2, task, sparsity=0.5, seeds=[0, 1], steps=2, batch_size=4, progress=True)
    err = capsys.readouterr().err
    assert "masks s=0.5 seeds=0..1" in err  # one bar over the batched seeds' steps, naming the seeds
    subnetworks(gpt2, task, sparsity=0.5, seeds=[0], steps=2, batch_size=4, progress=False)
    assert capsys.readouterr().err == ""


def test_reprs_are_concise():
    import torch

    from interp.cores.results import Alignment, Core, Operator
    from interp.masking.mask import HeadMask
    from interp.simplify.simplifiers import KMeansSimplifier, OneHotSimplifier, SVDSimplifier
    from interp.steering import Steer, axis_from_vector

    meta = {"seed": 0, "sparsity": 0.5, "log_alpha": [1.2345] * 40, "history": [{"kl": 0.1}] * 40}
    mask = HeadMask(torch.tensor([[1.0, 0, 1, 1], [0, 0, 1, 1]]), torch.ones(2), meta)
    text = repr(mask)
    assert "2x4" in text and "heads kept=5/8" in text and "sparsity=0.300" in text and "log_alpha" in text
    assert "1.2345" not in text and "tensor" not in text and len(text) < 200
    axis = axis_from_vector(torch.randn(16), site="resid_pre", layer=1)
    for obj, must in [
        (axis, ["blocks.1.hook_resid_pre", "d_model=16", "proj_std=nan"]),
        (Steer(axis, "add", 2.0), ["'add'", "strength=2"]),
        (Core(torch.eye(16)[:, :3], torch.zeros(16), torch.ones(3), "blocks.1.hook_resid_pre", "pca"), ["k=3", "'pca'"]),
        (Operator(torch.eye(3), torch.zeros(3), torch.ones(3), torch.zeros(3), 0.93, "a", "b"), ["a -> b", "r2=0.9300"]),
        (Alignment(torch.eye(3), torch.zeros(3), "cca", 0.9, 0.8, torch.ones(3), torch.ones(3), torch.eye(16)[:, :3],
                   torch.eye(16)[:, :3], {"site_a": "x", "site_b": "y"}), ["x -> y", "'cca'", "r2_heldout=0.8000"]),
        (OneHotSimplifier(((0, 1), (1, 2))), ["L0H1, L1H2"]),
        (SVDSimplifier(((0, 1),), ((0, 0),), 2, "separate", True, torch.zeros(1, 8, 2), torch.zeros(1, 8, 2),
                       torch.zeros(1, 8), torch.zeros(1, 8)), ["rank=2", "L0H1"]),
        (KMeansSimplifier(((0, 1),), ((0, 0),), 3, 0, torch.zeros(1, 3, 8), torch.zeros(1, 3, 8)), ["k=3", "L0H0"]),
    ]:
        text = repr(obj)
        assert all(m in text for m in must), text
        assert "tensor(" not in text and len(text) < 200, text
