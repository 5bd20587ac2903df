"""One training step of the 6 × 256 language model of issue 27, through ``meanfield run``'s loop and through a
plain PyTorch loop on the same model, interleaved.

The model is ``experiments/particle_attention/scale.toml`` (tiny-shakespeare characters, 6 layers × 256,
context 128, batch 16, the whole train split): its arms ``mha8`` (8-head attention) and particle attention at
M = 8, 16, 32, in both families (width d/M: ``p8``, ``p16``, ``p32``, the baseline's parameters and FLOPs; width
d/8 = 32 fixed: ``p16-w32``, ``p32-w32``, attention cost × M/8; at M = 8 the families coincide). Three loops
per arm, each with its own copy of the model built from the same configuration:

- ``run``: :func:`meanfield.runs.run` itself, the study's configuration (metrics line every 50 steps, the
  streaming gradient variance of ``grad_stats``, the Langevin optimizer with the noise at ``--beta`` on the
  particle groups, checkpoints every 250 steps, no evaluation: the run is stopped before its final one). A
  step is timed from the return of one ``on_step`` callback to the next (the loop runs in a thread that the
  benchmark lets take one step at a time, so that it can be interleaved with the other loops).
- ``bare``: the same task, model, batches, loss, gradient statistics and Langevin optimizer, in a loop of
  ``next_batch, zero_grad, loss, backward, on_backward, step, float(loss)``: ``run / bare`` is what the
  machinery itself costs.
- ``plain``: a plain PyTorch loop on the same :class:`~meanfield.nn.TransformerLM` (same configuration and
  initialisation): random windows of the train split drawn by ``torch.randint``, ``F.cross_entropy``,
  ``torch.optim.Adam`` (lr 1e-3, betas (0.9, 0.99), eps 1e-8) on every parameter, no noise, no statistics:
  ``run / plain`` is the whole cost of doing it the meanfield way.

Every round takes one step of every alternative in a random order (drawn afresh each round), after warm-up;
the table gives median step times and medians of per-round ratios with a percentile-bootstrap 95 % interval
(paired, so that load from other processes on a shared machine cancels in the ratios). Options:

- ``--threads 1 2``: torch threads per loop (each count measured in its own block);
- ``--bf16``: the ``run`` and ``plain`` loops also under ``torch.autocast(bfloat16)`` (the training step;
  parameters and optimizer stay float32): only where ``lscpu`` shows AVX-512 BF16 or AMX BF16 (refused
  otherwise, unless ``--force-bf16``);
- ``--compile``: the ``run`` and ``plain`` loops also with the model's forward compiled (``nn.Module.compile``);
- ``--side-by-side``: also two one-thread ``run`` loops in two processes at once against one two-thread loop
  (throughput of the machine: what a sweep with ``--jobs 2`` gets against ``--jobs 1`` with 2 threads);
- ``--quick``: 1 warm-up round, 3 timed rounds, the arms ``mha8`` and ``p8`` (a check that it works, not a
  measurement); ``--tiny``: the config's ``smoke`` model size instead of 6 × 256 (tests).

The bf16 and compiled loops go through ``experiments/particle_attention/fast_lm.py`` (the ``lm`` task with
``model.autocast`` and ``model.compile``). Run::

    python benchmarks/lm_step.py --quick                   # a minute; writes results/<machine>/lm_step.md
    python benchmarks/lm_step.py --threads 1 2 --bf16 --compile --side-by-side    # the measurement (idle CPU)
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from _common import ROOT, Provenance, cpu_flags, result_path, write_result  # noqa: E402

sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments" / "particle_attention"))  # fast_lm (bf16 / compile)

import fast_lm  # noqa: E402

from meanfield import config as _config  # noqa: E402
from meanfield.runs import build_optimizer, check_config, load_config, run  # noqa: E402
from meanfield.runs.loop import build_experiment  # noqa: E402
from meanfield.seeds import derive_seed  # noqa: E402

CONFIG = ROOT / "experiments" / "particle_attention" / "scale.toml"
ARMS = ("mha8", "p8", "p16", "p32", "p16-w32", "p32-w32")
QUICK_ARMS = ("mha8", "p8")
LOOPS = ("plain", "bare", "run")


# ----------------------------------------------------------------------------------------------- configuration


def arm_config(arm: str, *, threads: int, beta: float, tiny: bool, autocast: str = "none",
               compile: bool = False, steps: int = 10_000) -> dict:  # fmt: skip
    """The resolved configuration of one arm of ``scale.toml`` (the study's, but ``steps`` long, no evaluation
    before the end and the noise at ``beta`` on a particle arm)."""
    preset = f"smoke+{arm}" if tiny else arm
    overrides = [f"threads={threads}", f"train.steps={steps}", "train.eval_every=0"]
    if arm != "mha8":
        overrides.append(f"optim.beta={beta}")
    if autocast != "none" or compile:
        overrides += [
            "task=fast_lm:TASK",
            f"model.autocast={autocast}",
            f"model.compile={str(compile).lower()}",
        ]
    return load_config(CONFIG, preset, overrides)


# ---------------------------------------------------------------------------------------------------- the loops


class _Stop(Exception):
    """Raised in ``on_step`` to end a ``run`` loop (before its final evaluation)."""


class RunLoop:
    """``meanfield.runs.run`` in a thread that takes one step per :meth:`step` call.

    The time of a step is measured inside the run's thread, from the return of one ``on_step`` callback to the
    next: the optimizer step and everything the loop does around it (metrics line, checkpoint when due, the
    progress bookkeeping), none of the waiting.
    """

    def __init__(self, config: dict, folder: Path) -> None:
        self.config, self.folder = config, folder
        self._go, self._done = threading.Semaphore(0), threading.Semaphore(0)
        self._stop, self.error = False, None
        self.times: list[float] = []
        self._t0 = 0.0
        self._thread = threading.Thread(target=self._target, daemon=True)

    def _target(self) -> None:
        try:
            run(self.config, self.folder, quiet=True, on_step=self._on_step)
        except _Stop:
            pass
        except BaseException as error:  # noqa: BLE001 — reported by step()
            self.error = error
        finally:
            self._stop = True
            self._done.release()

    def _on_step(self, step: int) -> None:
        self.times.append(time.perf_counter() - self._t0)
        self._done.release()
        self._go.acquire()
        if self._stop:
            raise _Stop
        self._t0 = time.perf_counter()

    def start(self) -> None:
        """Build the run and take its first step (build included: not a timed step)."""
        self._t0 = time.perf_counter()
        self._thread.start()
        self._wait()

    def _wait(self) -> None:
        self._done.acquire()
        if self.error is not None:
            raise RuntimeError(f"the run in {self.folder} failed: {self.error!r}") from self.error
        if self._stop:
            raise RuntimeError(f"the run in {self.folder} ended early")

    def step(self) -> float:
        self._go.release()
        self._wait()
        return self.times[-1]

    def close(self) -> None:
        if self._thread.is_alive():
            self._stop = True
            self._go.release()
            self._thread.join()


class BareLoop:
    """The run's own task, model, batches, loss, gradient statistics and optimizer, without the machinery."""

    def __init__(self, config: dict) -> None:
        cfg = check_config(config)
        torch.set_num_threads(cfg.threads)
        self.exp = build_experiment(cfg, torch.device("cpu"))
        self.opt = build_optimizer(self.exp.model, cfg)

    def start(self) -> None:
        self.step()

    def step(self) -> float:
        exp, opt = self.exp, self.opt
        start = time.perf_counter()
        batch = exp.next_batch()
        opt.zero_grad(set_to_none=True)
        loss = exp.loss(batch)
        loss.backward()
        if exp.on_backward is not None:
            exp.on_backward()
        opt.step()
        float(loss.detach())
        return time.perf_counter() - start

    def close(self) -> None:
        pass


class PlainLoop:
    """A plain PyTorch loop on the same model: ``torch.randint`` windows, cross-entropy, ``torch.optim.Adam``."""

    def __init__(self, config: dict, autocast: str = "none", compile: bool = False) -> None:
        cfg = check_config(config)
        torch.set_num_threads(cfg.threads)
        task_model = dict(cfg.model)
        task_model.pop("autocast", None), task_model.pop("compile", None)
        plain_cfg = check_config(_config.merge(config, {"task": "lm", "model": task_model}))
        exp = build_experiment(
            plain_cfg, torch.device("cpu")
        )  # the model, built and initialised as the run's
        self.model = exp.model
        self.train = exp.batches.tokens  # the train split's token ids (1-D int64)
        self.block, self.batch = cfg.data["block_size"], cfg.train.batch_size
        self.autocast = autocast
        self.forward = self.model
        if compile:
            self.forward = torch.compile(self.model)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3, betas=(0.9, 0.99), eps=1e-8)
        self.g = torch.Generator().manual_seed(derive_seed(cfg.seed, "batches"))

    def start(self) -> None:
        self.step()

    def step(self) -> float:
        start = time.perf_counter()
        i = torch.randint(len(self.train) - self.block - 1, (self.batch,), generator=self.g)  # (B,)
        offsets = i[:, None] + torch.arange(self.block + 1)  # (B, T + 1)
        window = self.train[offsets]  # (B, T + 1)
        x, y = window[:, :-1], window[:, 1:]
        with fast_lm.autocast_context(self.autocast):
            logits = self.forward(x)  # (B, T, V)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        float(loss.detach())
        return time.perf_counter() - start

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------- measurement


def median_ci(ratios: list[float], level: float = 0.95, resamples: int = 2000) -> tuple[float, float]:
    """Percentile-bootstrap interval of the median of paired ratios (fixed seed)."""
    if len(ratios) < 2:
        return (float("nan"), float("nan"))
    g = torch.Generator().manual_seed(0)
    r = torch.tensor(ratios, dtype=torch.float64)  # (n,)
    idx = torch.randint(len(ratios), (resamples, len(ratios)), generator=g)  # (resamples, n)
    medians = r[idx].median(dim=1).values.sort().values  # (resamples,)
    return float(medians[int((1 - level) / 2 * resamples)]), float(
        medians[int((1 + level) / 2 * resamples) - 1]
    )


def alternatives(args, threads: int) -> dict[tuple[str, str], object]:
    """Every (arm, loop) measured at ``threads``; loops: plain, bare, run, and with the options
    run-bf16 / plain-bf16, run-compiled / plain-compiled."""
    made: dict[tuple[str, str], object] = {}
    tmp = Path(args.tmp)
    kw = {"threads": threads, "beta": args.beta, "tiny": args.tiny}
    for arm in args.arms:
        cfg = arm_config(arm, **kw)
        for loop in args.loops:
            if loop == "plain":
                made[arm, "plain"] = PlainLoop(cfg)
            elif loop == "bare":
                made[arm, "bare"] = BareLoop(cfg)
            else:
                made[arm, "run"] = RunLoop(cfg, tmp / f"t{threads}-{arm}-run")
        if args.bf16:
            made[arm, "run-bf16"] = RunLoop(
                arm_config(arm, autocast="bf16", **kw), tmp / f"t{threads}-{arm}-bf16"
            )
            made[arm, "plain-bf16"] = PlainLoop(cfg, autocast="bf16")
        if args.compile:
            cc = arm_config(arm, compile=True, **kw)
            made[arm, "run-compiled"] = RunLoop(cc, tmp / f"t{threads}-{arm}-compiled")
            made[arm, "plain-compiled"] = PlainLoop(cfg, compile=True)
    return made


def measure(args, threads: int) -> dict:
    """Median step times and per-round paired ratios of every alternative at ``threads`` torch threads."""
    torch.set_num_threads(threads)
    made = alternatives(args, threads)
    names = list(made)
    try:
        started = time.perf_counter()
        for name in names:
            made[name].start()
        for _ in range(args.warmup):
            for name in names:
                made[name].step()
        warm = time.perf_counter() - started
        times: dict[tuple[str, str], list[float]] = {n: [] for n in names}
        rng = random.Random(threads)
        for r in range(args.repeats):
            order = names[:]
            rng.shuffle(order)
            for name in order:
                times[name].append(made[name].step())
            print(f"threads {threads}: round {r + 1}/{args.repeats} done", flush=True)
    finally:
        for loop in made.values():
            loop.close()
    return {"threads": threads, "times": times, "build_and_warmup_s": warm}


def ratio(times: dict, a: tuple[str, str], b: tuple[str, str]) -> tuple[float, tuple[float, float]] | None:
    """Median over rounds of time(a) / time(b), and its bootstrap interval (None where one is missing)."""
    if a not in times or b not in times:
        return None
    rs = [x / y for x, y in zip(times[a], times[b], strict=True)]
    return statistics.median(rs), median_ci(rs)


def fmt(r) -> str:
    if r is None:
        return "—"
    m, (lo, hi) = r
    return f"{m:.3f}× ({lo:.2f}–{hi:.2f})" if lo == lo else f"{m:.3f}×"


def side_by_side(args) -> dict:
    """Two one-thread processes each timing the ``run`` loop of ``--arms``, started together."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--threads", "1", "--loops", "run",
            "--repeats", str(args.repeats), "--warmup", str(args.warmup), "--beta", str(args.beta),
            "--arms", *args.arms] + (["--tiny"] if args.tiny else [])  # fmt: skip
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a side-by-side worker failed: {[p.returncode for p in procs]}")
    results = [json.loads(out.strip().splitlines()[-1]) for out in outs]
    return {arm: [statistics.median(r[arm]) for r in results] for arm in args.arms}


# -------------------------------------------------------------------------------------------------- the report


def tables(args, blocks: list[dict], pair: dict | None) -> str:
    lines = []
    for block in blocks:
        t, n = block["times"], block["threads"]
        loops = sorted(
            {loop for _, loop in t}, key=lambda x: (x not in LOOPS, LOOPS.index(x) if x in LOOPS else 0, x)
        )
        lines += [
            f"### {n} torch thread{'s' if n > 1 else ''} per loop ({len(next(iter(t.values())))} rounds; build "
            f"and warm-up {block['build_and_warmup_s']:.0f} s)",
            "",
            "| arm | "
            + " | ".join(f"{loop} ms/step" for loop in loops)
            + " | run / plain (95 % CI) | run / bare (95 % CI) | run vs MHA-8's run (95 % CI) |",
            "|---|" + "---|" * (len(loops) + 3),
        ]
        for arm in args.arms:
            cells = [
                f"{1e3 * statistics.median(t[arm, loop]):.1f}" if (arm, loop) in t else "—" for loop in loops
            ]
            vs_mha = "baseline" if arm == "mha8" else fmt(ratio(t, (arm, "run"), ("mha8", "run")))
            lines.append(
                f"| {arm} | "
                + " | ".join(cells)
                + f" | {fmt(ratio(t, (arm, 'run'), (arm, 'plain')))} | {fmt(ratio(t, (arm, 'run'), (arm, 'bare')))}"
                f" | {vs_mha} |"
            )
        extra = [(v, "run") for v in ("run-bf16", "run-compiled")] + [
            (v, "plain") for v in ("plain-bf16", "plain-compiled")
        ]
        present = [(v, b) for v, b in extra if any(loop == v for _, loop in t)]
        if present:
            lines += ["", "| arm | " + " | ".join(f"{v} / {b} fp32 (95 % CI)" for v, b in present) + " |",
                      "|---|" + "---|" * len(present)]  # fmt: skip
            for arm in args.arms:
                lines.append(
                    f"| {arm} | " + " | ".join(fmt(ratio(t, (arm, v), (arm, b))) for v, b in present) + " |"
                )
        lines.append("")
        tag = f"target ({n} thread{'s' if n > 1 else ''}" + (
            ", --quick: a check, not a measurement)" if args.quick else ")"
        )
        goals = []
        for arm in args.arms:
            r = ratio(t, (arm, "run"), (arm, "plain"))
            if r is not None:
                goals.append(f"{arm} {r[0]:.3f}×")
        if goals:
            lines.append(
                f"- {tag} the run machinery costs ≤ 1.1× the plain loop: run / plain = {', '.join(goals)}"
            )
        r = ratio(t, ("p8", "run"), ("mha8", "run"))
        if r is not None:
            lines.append(f"- {tag} particle attention at M = 8, width d/M, costs ≤ 1.1× MHA-8 in the whole model "
                         f"(both through the run loop): {fmt(r)}")  # fmt: skip
        lines.append("")
    if pair is not None and blocks:
        two = next((b for b in blocks if b["threads"] == 2), None)
        lines += ["### Two one-thread runs side by side against one two-thread run (the `run` loop)", "",
                  "| arm | side by side: ms/step of each process | steps/s of the machine, side by side | "
                  "one 2-thread run: ms/step | steps/s, one 2-thread run | side by side / 2-thread |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for arm, (a, b) in pair.items():
            both = 1 / a + 1 / b
            if two is not None and (arm, "run") in two["times"]:
                t2 = statistics.median(two["times"][arm, "run"])
                lines.append(f"| {arm} | {1e3 * a:.1f}, {1e3 * b:.1f} | {both:.3f} | {1e3 * t2:.1f} | {1 / t2:.3f} "
                             f"| {both * t2:.2f}× |")  # fmt: skip
            else:
                lines.append(
                    f"| {arm} | {1e3 * a:.1f}, {1e3 * b:.1f} | {both:.3f} | — (run with --threads … 2) | — | — |"
                )
        lines += ["", "The two-thread numbers are from the interleaved block above, measured at another time than "
                  "the side-by-side pair: compare them only on an idle machine.", ""]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arms", nargs="+", default=None, choices=ARMS, help=f"default {' '.join(ARMS)}")
    parser.add_argument("--loops", nargs="+", default=list(LOOPS), choices=LOOPS)
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--beta", type=float, default=1e-3, help="β of the particle arms' noise (run, bare)")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--force-bf16", action="store_true", help="--bf16 even without bf16 CPU instructions")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--side-by-side", action="store_true")
    parser.add_argument("--quick", action="store_true", help="1 warm-up, 3 rounds, mha8 and p8: a check")
    parser.add_argument("--tiny", action="store_true", help="the config's smoke model size (tests)")
    parser.add_argument("--out", type=Path, default=None, help="default results/<machine>/lm_step.md")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.warmup, args.repeats = min(args.warmup, 1), min(args.repeats, 3)
        args.arms = args.arms or list(QUICK_ARMS)
    args.arms = args.arms or list(ARMS)
    flags = cpu_flags()
    has_bf16 = flags.get("AVX-512 BF16") or flags.get("AMX BF16")
    if args.bf16 and not has_bf16 and not args.force_bf16:
        raise SystemExit(
            "--bf16: lscpu shows neither AVX-512 BF16 nor AMX BF16 here (--force-bf16 to time it anyway)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        args.tmp = tmp
        if args.worker:
            block = measure(args, 1)
            print(json.dumps({arm: block["times"][arm, "run"] for arm in args.arms}))
            return
        provenance = Provenance.start(__file__, argv)
        out = args.out or result_path("lm_step")
        started = time.perf_counter()
        blocks = [measure(args, n) for n in args.threads]
        pair = side_by_side(args) if args.side_by_side else None
    steps_model = "the config's smoke size (d 16, 2 layers, context 16, batch 4)" if args.tiny else (
        "6 layers × 256, context 128, batch 16 (2,048 tokens a step), tiny-shakespeare characters")  # fmt: skip
    text = "\n".join(
        [
            "# One training step of the 6 × 256 LM: `meanfield run`'s loop against a plain PyTorch loop",
            "",
            f"- model: `experiments/particle_attention/scale.toml`, {steps_model}; arms {', '.join(args.arms)}; "
            f"noise β = {args.beta:g} on the particle arms' `run` and `bare` loops (none in `plain`, none for MHA)",
            "- loops: `plain` (torch.optim.Adam, torch.randint windows, no statistics), `bare` (the run's task, "
            "batches, gradient statistics and Langevin optimizer, no machinery), `run` (`meanfield.runs.run` itself, "
            "stepped from a thread; metrics every 50 steps, checkpoints every 250, no evaluation)",
            f"- {args.repeats} interleaved rounds after {args.warmup} warm-up round(s) (and one untimed first step "
            "each); ms/step: the median; ratios: the median over rounds of the paired time ratio, 95 % CI: "
            "percentile bootstrap (2000 resamples)",
            f"- bf16 instructions (lscpu): AVX-512 BF16 {'yes' if flags.get('AVX-512 BF16') else 'no'}, AMX BF16 "
            f"{'yes' if flags.get('AMX BF16') else 'no'}; bf16 autocast timed: {'yes' if args.bf16 else 'no'}; "
            f"torch.compile timed: {'yes' if args.compile else 'no'}",
            f"- {'**--quick: a check that the benchmark works, not a measurement**' if args.quick else 'full measurement'}; "
            f"total time {time.perf_counter() - started:.0f} s",
            "",
            tables(args, blocks, pair),
        ]
    )
    print(text)
    print(f"written: {write_result(out, text, provenance)}")


if __name__ == "__main__":
    main()
