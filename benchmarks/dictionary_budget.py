"""What a SmolLM2-135M transcoder suite at a real width costs on this machine, and the limit.

    OMP_NUM_THREADS=1 python benchmarks/dictionary_budget.py [--features 16384] [--out FILE.json]

Three measurements in CPU seconds of this process (one thread: the compute itself, whatever else
shares the machine), each the best of `--repeats`:

    matmul      fp32 GFLOP/s of one [1024, 1024] x [1024, 4096] product: the machine's rate
    forward     SmolLM2-135M tokens/s through `interp.run.cache` of every layer's transcoder sites
                (4 rows x 128 positions, logits at one position only), as the trainer reads them
    dictionary  tokens/s of one transcoder's training step at `--features` features, k 32
                (`interp.features.fit` on random activations: a step's cost depends on the
                shapes only), batch = one forward's trainable tokens

and what follows: tokens/s when L dictionaries train from one forward (1 / (1/forward +
L/dictionary)), the FLOPs per token of each part, the limit (FLOPs per token / the matmul rate),
and the `full16k` budget of `interp.features.suite` (every layer) in days at the measured rate and
in GPU hours at the FLOP rate `interp.studies.gpu_estimate` assumes (`bounds_assumed.tflops` of
interp/data/gpu_calibration.json: a lower bound on a GPU's time, not a measurement). A dictionary step is dense: the encoder [d_in, n] and decoder [n, d_out] products, forward
and backward, 3 x 2 x (d_in + d_out) x n FLOPs a token; the forward is 2 x (parameters outside the
embedding) a token.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

import interp
from interp.features import Recipe, fit
from interp.features.suite import SUITES
from interp.features.train import mlp_sites
from interp.run import cache
from interp.files.storage import write_text_atomic


def _best(fn, repeats: int) -> float:
    """The least CPU time (this process's, `time.process_time`) of `repeats` calls: on a shared
    machine the wall clock also counts the other jobs' turns, the CPU time only this work."""
    fn()  # warm-up: first-call allocations and kernel choice
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def matmul_gflops(repeats: int) -> float:
    a, b = torch.randn(1024, 1024), torch.randn(1024, 4096)
    return 2 * 1024 * 1024 * 4096 / _best(lambda: a @ b, repeats) / 1e9


def forward_rate(model, repeats: int) -> tuple[float, int]:
    """(tokens/s, trainable tokens per forward) of the trainer's read of every layer."""
    names = [n for l in range(model.cfg.n_layers) for n in mlp_sites(l)]
    rows = torch.randint(1, model.cfg.d_vocab, (4, 128))
    last = torch.full((4,), 127)
    seconds = _best(lambda: cache(model, rows, names, answer_pos=last), repeats)
    tokens = 4 * 127  # BOS is not trained on
    return tokens / seconds, tokens


def dictionary_rate(d: int, n_features: int, batch: int, steps: int) -> float:
    x, y = torch.randn(batch * 4, d), torch.randn(batch * 4, d)
    site_in, site_out = mlp_sites(0)
    run = lambda n: fit(x, y, site_in=site_in, site_out=site_out, batch=batch,
                        recipe=Recipe(n_features=n_features, k=32, tokens=batch * n, checkpoint_every=10**6))
    run(1)  # warm-up: first-call allocations
    t0 = time.process_time()
    run(steps)
    return batch * steps / (time.process_time() - t0)


def measure(n_features: int, repeats: int, steps: int) -> dict:
    torch.manual_seed(0)
    model = interp.load("smollm2-135m")
    cfg = model.cfg
    gflops = matmul_gflops(repeats)
    fwd, batch = forward_rate(model, repeats)
    dic = dictionary_rate(cfg.d_model, n_features, batch, steps)
    params = sum(p.numel() for p in model.parameters() if cfg.d_vocab not in p.shape)  # the blocks: not (un)embedding
    flops_fwd = 2 * params
    flops_dict = 3 * 2 * (cfg.d_model + cfg.d_model) * n_features
    rate = lambda layers: 1 / (1 / fwd + layers / dic)
    per_token = lambda layers: flops_fwd + layers * flops_dict
    full = SUITES["smollm2-english"].budgets["full16k"]
    calibration = Path(interp.__file__).parent / "data" / "gpu_calibration.json"  # interp.studies.gpu_estimate's
    tflops = json.loads(calibration.read_text(encoding="utf-8"))["bounds_assumed"]["tflops"]
    return {
        "full_budget": {"tokens": full.tokens, "layers": cfg.n_layers, "n_features": full.n_features,
                        "cpu_days_at_measured_rate": round(full.tokens / rate(cfg.n_layers) / 86400, 1),
                        "gpu_tflops_assumed": tflops,
                        "gpu_hours_flop_bound": round(full.tokens * per_token(cfg.n_layers) / (tflops * 1e12) / 3600, 2)},
        "model": "smollm2-135m", "n_layers": cfg.n_layers, "d_model": cfg.d_model, "n_features": n_features, "k": 32,
        "tokens_per_step": batch, "matmul_gflops": round(gflops, 1),
        "forward_tokens_per_s": round(fwd, 1), "dictionary_tokens_per_s": round(dic, 1),
        "flops_per_token": {"forward": flops_fwd, "dictionary": flops_dict},
        "achieved_gflops": {"forward": round(fwd * flops_fwd / 1e9, 1), "dictionary": round(dic * flops_dict / 1e9, 1)},
        "layers": [{"layers": l, "tokens_per_s": round(rate(l), 1), "gflop_per_token": round(per_token(l) / 1e9, 3),
                    "limit_tokens_per_s": round(gflops * 1e9 / per_token(l), 1)} for l in (1, 3, cfg.n_layers)],
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--features", type=int, default=16384)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}",
              "command": f"OMP_NUM_THREADS={torch.get_num_threads()} python benchmarks/dictionary_budget.py "
                         f"--features {a.features} --repeats {a.repeats} --steps {a.steps}",
              **measure(a.features, a.repeats, a.steps)}
    text = json.dumps(result, indent=1)
    print(text)
    if a.out:
        write_text_atomic(a.out, text + "\n")


if __name__ == "__main__":
    main()
