"""meanfield against the engines a researcher would otherwise pick, each in its own environment.

Two problems, float32 on the CPU, one thread per engine:

- **sde**: the McKean–Vlasov Ornstein–Uhlenbeck system ``dx = (−a·x − k·(x − x̄)) dt + sqrt(2β) dW`` (a = k = 1,
  β = ½), Euler–Maruyama with dt = 0.01 from a fixed ``x0 ~ N(0, I)``, for (M, d) = (1e3, 1), (1e5, 1),
  (1e4, 10). Engines: ``meanfield.simulate`` (native Euler), a hand-written torch loop, torchsde's ``sdeint``
  (Euler, its cheapest Brownian motion: one draw per step from a generator), diffrax ``Euler`` with an
  ``UnsafeBrownianPath`` and with a ``VirtualBrownianTree`` (jitted ``diffeqsolve``), and ``simulate`` on a
  block of steps captured by ``torch.compile`` (:func:`meanfield.stepping.captured.euler_block`).
- **sgld**: Bayesian logistic regression, d = 20, n = 1,000, full batch, one chain, prior N(0, I), SGLD
  ``w ← w + lr·∇log p(w | data) + sqrt(2·lr)·ξ`` with lr = 1e-3. Engines: :class:`meanfield.optim.Langevin`
  (SGD drift, ``weight_decay = 1`` as the prior, ``check_every = 1`` and ``0``), the hand-written torch loop
  with the same autograd loss, :class:`meanfield.optim.KineticLangevin` (BAOAB, h = 0.01, γ = 5) against the
  same BAOAB written by hand (a different chain of the same posterior: its ratio is to its own hand-written
  loop), ``posteriors.sgmcmc.sgld`` (torch), BlackJAX ``sgld`` called step by step
  (each step jitted) and inside ``lax.scan`` (a block of steps, one call), and the captured
  :func:`meanfield.stepping.captured.sgld_block` (``torch.compile`` of a block of steps).

Before a ratio is reported the engines' answers are compared with meanfield's within Monte Carlo error
(z = 5): for **sde** the mean of ``x_T²`` over the particles (its SE from the particles' spread); for **sgld**
the chain's average of each coordinate of ``w`` over its second half (SE from 20 batch means, the largest
of the 20 z-scores). An engine that disagrees is reported without a ratio.

Timing: every engine runs in a worker process of its own environment (``--peers-python``, default
``/work/venv-peers/bin/python`` or ``$MEANFIELD_PEERS_PYTHON``, for JAX, diffrax, BlackJAX and posteriors;
the interpreter running this script for the rest), one thread each (torch ``set_num_threads(1)``, XLA's
single-threaded CPU flags). Each round times every engine once in a fresh random order (interleaved: a change
of load hits all alike); the table gives medians over rounds of the CPU time of the process
(``time.process_time``) and of the wall time per step, and the ratios are medians of per-round ratios. The
compile time of the captured paths (and JAX's) is measured once, at setup. An engine whose package is not
installed is skipped with a note.

Usage:
    python benchmarks/peers.py                       # writes benchmarks/results/<machine>/peers.md + .png
    python benchmarks/peers.py --smoke --out /tmp/peers.md
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

A, K, BETA, DT = 1.0, 1.0, 0.5, 0.01
SIGMA = math.sqrt(2 * BETA)
N_DATA, DIM, LR = 1000, 20, 1e-3
SDE_SIZES = [(1000, 1), (100_000, 1), (10_000, 10)]
FIGURES = BENCH.parent / "docs" / "figures"
PEERS_PYTHON = os.environ.get("MEANFIELD_PEERS_PYTHON", "/work/venv-peers/bin/python")
Z = 5.0


# ------------------------------------------------------------------------------------------------- the data


def sde_x0(M: int, d: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((1, M, d)).astype(np.float32)  # (1, M, d)


def blr_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((N_DATA, DIM)).astype(np.float32)  # (n, d)
    w = rng.standard_normal(DIM).astype(np.float32) / math.sqrt(DIM)
    y = (rng.random(N_DATA) < 1 / (1 + np.exp(-X @ w))).astype(np.float32)  # (n,)
    return X, y


def sde_answer(x: np.ndarray) -> dict:
    """Mean of x² over the particles and its standard error."""
    s = np.asarray(x, dtype=np.float64).reshape(-1) ** 2
    return {"value": [float(s.mean())], "se": [float(s.std() / math.sqrt(s.size))]}


def chain_answer(ws: np.ndarray) -> dict:
    """Each coordinate's average over the chain's second half, SE from 20 batch means."""
    half = np.asarray(ws, dtype=np.float64)[len(ws) // 2 :]  # (T/2, d)
    batches = np.array_split(half, 20)
    means = np.stack([b.mean(0) for b in batches])  # (20, d)
    return {"value": half.mean(0).tolist(), "se": (means.std(0, ddof=1) / math.sqrt(20)).tolist()}


# ----------------------------------------------------------------------------------------------- the engines
# Each engine: make(case) -> (run(steps) -> None, answer(steps) -> dict); run advances its own state.


def _torch():
    import torch

    torch.set_num_threads(1)
    return torch


def meanfield_euler(case):
    torch = _torch()
    import meanfield as mf
    from meanfield.drift.potentials import Quadratic, QuadraticInteraction

    system = mf.MeanFieldLangevin(Quadratic(A), QuadraticInteraction(K), beta=BETA)
    x0 = torch.from_numpy(sde_x0(case["M"], case["d"]))
    g = torch.Generator().manual_seed(1)

    def run(steps):
        return mf.simulate(system, x0, t1=steps * DT, dt=DT, generator=g).final

    return run, lambda steps: sde_answer(run(steps).numpy())


def meanfield_euler_compiled(case):
    torch = _torch()
    import meanfield as mf
    from meanfield.drift.potentials import Quadratic, QuadraticInteraction
    from meanfield.stepping.captured import euler_block

    system = mf.MeanFieldLangevin(Quadratic(A), QuadraticInteraction(K), beta=BETA)
    x0 = torch.from_numpy(sde_x0(case["M"], case["d"]))
    g = torch.Generator().manual_seed(1)
    block = euler_block(system, dt=DT, block=case["block"])

    def run(steps):
        x = x0
        for _ in range(steps // case["block"]):
            x = block(x, g)
        return x

    return run, lambda steps: sde_answer(run(steps).numpy())


def hand_euler(case):
    torch = _torch()
    x0 = torch.from_numpy(sde_x0(case["M"], case["d"]))
    g = torch.Generator().manual_seed(1)
    noise = torch.empty_like(x0)

    def run(steps):
        x = x0.clone()
        for _ in range(steps):
            drift = -A * x - K * (x - x.mean(1, keepdim=True))  # (1, M, d)
            x.add_(drift, alpha=DT).add_(noise.normal_(0.0, SIGMA * math.sqrt(DT), generator=g))
        return x

    return run, lambda steps: sde_answer(run(steps).numpy())


def torchsde_euler(case):
    torch = _torch()
    import torchsde  # noqa: F401
    from sde import DrawnBrownian, TorchsdeSystem

    M, d = case["M"], case["d"]
    y0 = torch.from_numpy(sde_x0(M, d)).reshape(1, -1)
    sde = TorchsdeSystem((1, M, d), True)
    g = torch.Generator().manual_seed(1)

    def run(steps):
        ts = torch.tensor([0.0, steps * DT], dtype=torch.float64)
        return torchsde.sdeint(sde, y0, ts, bm=DrawnBrownian((1, M * d), g), method="euler", dt=DT)[-1]

    return run, lambda steps: sde_answer(run(steps).numpy())


def _diffrax(case, tree: bool):
    import diffrax
    import jax
    import jax.numpy as jnp
    import lineax

    x0 = jnp.asarray(sde_x0(case["M"], case["d"])[0])  # (M, d)

    def drift(t, y, args):
        return -A * y - K * (y - y.mean(0, keepdims=True))

    def diffusion(t, y, args):
        return lineax.DiagonalLinearOperator(jnp.full(y.shape, SIGMA, dtype=y.dtype))

    @jax.jit(static_argnums=1)
    def solve(key, steps):
        t1 = steps * DT
        if tree:
            bm = diffrax.VirtualBrownianTree(0.0, t1, tol=DT / 2, shape=x0.shape, key=key)
        else:
            bm = diffrax.UnsafeBrownianPath(shape=x0.shape, key=key)
        terms = diffrax.MultiTerm(diffrax.ODETerm(drift), diffrax.ControlTerm(diffusion, bm))
        sol = diffrax.diffeqsolve(
            terms,
            diffrax.Euler(),
            0.0,
            t1,
            dt0=DT,
            y0=x0,
            saveat=diffrax.SaveAt(t1=True),
            max_steps=steps + 1,
            adjoint=diffrax.ForwardMode() if not tree else diffrax.RecursiveCheckpointAdjoint(),
        )
        return sol.ys[0]

    keys = iter(jax.random.split(jax.random.key(1), 100_000))

    def run(steps):
        return solve(next(keys), steps).block_until_ready()

    return run, lambda steps: sde_answer(np.asarray(run(steps)))


def diffrax_unsafe(case):
    return _diffrax(case, tree=False)


def diffrax_tree(case):
    return _diffrax(case, tree=True)


def _blr_torch():
    torch = _torch()
    X, y = (torch.from_numpy(a) for a in blr_data())
    return torch, X, y


def _chain(step, get, steps):
    ws = []
    for _ in range(steps):
        step()
        ws.append(get())
    return chain_answer(np.stack(ws))


def _optimizer_engine(torch, X, y, w, opt):
    """``(run, chain)`` of a torch optimizer ``opt`` stepping ``w`` on the logistic-regression loss (one full batch a
    step): the timed loop, and the chain of ``w`` for the agreement check."""

    def step():
        opt.zero_grad()
        torch.nn.functional.binary_cross_entropy_with_logits(X @ w, y, reduction="sum").backward()
        opt.step()

    def run(steps):
        for _ in range(steps):
            step()

    return run, lambda steps: _chain(step, lambda: w.detach().numpy().copy(), steps)


def meanfield_langevin(case):
    torch, X, y = _blr_torch()
    from meanfield.optim import Langevin

    w = torch.nn.Parameter(torch.zeros(DIM))
    opt = Langevin([w], lr=LR, beta=1.0, weight_decay=1.0, seed=1, check_every=case.get("check_every", 1))
    return _optimizer_engine(torch, X, y, w, opt)


def meanfield_sgld_compiled(case):
    torch, X, y = _blr_torch()
    from meanfield.stepping.captured import sgld_block

    def loss(w):
        return torch.nn.functional.binary_cross_entropy_with_logits(X @ w, y, reduction="sum")

    block = sgld_block(loss, lr=LR, beta=1.0, weight_decay=1.0, block=case["block"])
    g = torch.Generator().manual_seed(1)
    state = {"w": torch.zeros(DIM)}

    def run(steps):
        for _ in range(steps // case["block"]):
            state["w"] = block(state["w"], g)

    def answer(steps):
        ws = []
        for _ in range(steps // case["block"]):
            state["w"] = block(state["w"], g)
            ws.append(state["w"].numpy().copy())
        return chain_answer(np.stack(ws))  # one sample per block: the same average, thinned

    return run, answer


def hand_sgld(case):
    torch, X, y = _blr_torch()
    w = torch.zeros(DIM, requires_grad=True)
    g = torch.Generator().manual_seed(1)

    def step():
        w.grad = None
        torch.nn.functional.binary_cross_entropy_with_logits(X @ w, y, reduction="sum").backward()
        with torch.no_grad():
            w.add_(w.grad + w, alpha=-LR).add_(torch.randn(DIM, generator=g), alpha=math.sqrt(2 * LR))

    def run(steps):
        for _ in range(steps):
            step()

    return run, lambda steps: _chain(step, lambda: w.detach().numpy().copy(), steps)


H_KIN, GAMMA_KIN = 0.01, 5.0  # the kinetic chains' step and friction (h²·λ_max < 4 here)


def meanfield_kinetic(case):
    torch, X, y = _blr_torch()
    from meanfield.optim import KineticLangevin

    w = torch.nn.Parameter(torch.zeros(DIM))
    opt = KineticLangevin([w], lr=H_KIN, friction=GAMMA_KIN, beta=1.0, weight_decay=1.0, seed=1)
    return _optimizer_engine(torch, X, y, w, opt)


def hand_kinetic(case):
    torch, X, y = _blr_torch()
    w = torch.zeros(DIM, requires_grad=True)
    v = torch.zeros(DIM)
    g = torch.Generator().manual_seed(1)
    c = math.exp(-GAMMA_KIN * H_KIN)
    s = math.sqrt(1 - c * c)

    def step():  # BAOAB as KineticLangevin documents it: v ← v − h·g, θ += h/2·v, O, θ += h/2·v
        w.grad = None
        torch.nn.functional.binary_cross_entropy_with_logits(X @ w, y, reduction="sum").backward()
        with torch.no_grad():
            v.add_(w.grad + w, alpha=-H_KIN)
            w.add_(v, alpha=H_KIN / 2)
            v.mul_(c).add_(torch.randn(DIM, generator=g), alpha=s)
            w.add_(v, alpha=H_KIN / 2)

    def run(steps):
        for _ in range(steps):
            step()

    return run, lambda steps: _chain(step, lambda: w.detach().numpy().copy(), steps)


def posteriors_sgld(case):
    torch, X, y = _blr_torch()
    import posteriors

    torch.manual_seed(1)

    def log_posterior(w, batch):
        Xb, yb = batch
        ll = -torch.nn.functional.binary_cross_entropy_with_logits(Xb @ w, yb, reduction="sum")
        return ll - 0.5 * (w * w).sum(), torch.tensor([])

    transform = posteriors.sgmcmc.sgld.build(log_posterior, lr=LR, temperature=1.0)
    state = {"s": transform.init(torch.zeros(DIM))}

    def step():
        state["s"], _ = transform.update(state["s"], (X, y), inplace=True)

    def run(steps):
        for _ in range(steps):
            step()

    return run, lambda steps: _chain(step, lambda: state["s"].params.numpy().copy(), steps)


def _blackjax(case, scan: bool):
    import blackjax
    import jax
    import jax.numpy as jnp

    X, y = (jnp.asarray(a) for a in blr_data())

    def logprior(w):
        return -0.5 * jnp.sum(w * w)

    def loglik(w, batch):
        xb, yb = batch
        z = xb @ w
        return yb * z - jnp.logaddexp(0.0, z)

    grad = blackjax.sgmcmc.gradients.grad_estimator(logprior, loglik, N_DATA)
    sgld = blackjax.sgld(grad)
    data = (X, y)
    step = jax.jit(lambda key, w: sgld.step(key, w, data, LR))

    @jax.jit(static_argnums=2)
    def block(key, w, steps):
        def body(w, key):
            w = sgld.step(key, w, data, LR)
            return w, w

        return jax.lax.scan(body, w, jax.random.split(key, steps))

    keys = iter(jax.random.split(jax.random.key(1), 1_000_000))
    state = {"w": jnp.zeros(DIM)}

    def run(steps):
        if scan:
            state["w"], _ = block(next(keys), state["w"], steps)
            state["w"].block_until_ready()
        else:
            for _ in range(steps):
                state["w"] = step(next(keys), state["w"])
            state["w"].block_until_ready()

    def answer(steps):
        if scan:
            state["w"], ws = block(next(keys), state["w"], steps)
            return chain_answer(np.asarray(ws))
        ws = []
        for _ in range(steps):
            state["w"] = step(next(keys), state["w"])
            ws.append(np.asarray(state["w"]))
        return chain_answer(np.stack(ws))

    return run, answer


def blackjax_sgld(case):
    return _blackjax(case, scan=False)


def blackjax_sgld_scan(case):
    return _blackjax(case, scan=True)


ENGINES = {  # name -> (maker, environment: "main" or "peers", problem)
    "meanfield simulate": (meanfield_euler, "main", "sde"),
    "meanfield euler_block, compiled (opt-in)": (meanfield_euler_compiled, "main", "sde"),
    "hand-written torch": (hand_euler, "main", "sde"),
    "torchsde sdeint (drawn BM)": (torchsde_euler, "main", "sde"),
    "diffrax Euler, UnsafeBrownianPath": (diffrax_unsafe, "peers", "sde"),
    "diffrax Euler, VirtualBrownianTree": (diffrax_tree, "peers", "sde"),
    "meanfield Langevin": (meanfield_langevin, "main", "sgld"),
    "meanfield Langevin, check_every=0": (meanfield_langevin, "main", "sgld"),
    "meanfield sgld_block, compiled (opt-in)": (meanfield_sgld_compiled, "main", "sgld"),
    "hand-written SGLD (torch autograd)": (hand_sgld, "main", "sgld"),
    "meanfield KineticLangevin (BAOAB)": (meanfield_kinetic, "main", "sgld"),
    "hand-written SGHMC/BAOAB (torch autograd)": (hand_kinetic, "main", "sgld"),
    "posteriors sgld": (posteriors_sgld, "peers", "sgld"),
    "BlackJAX sgld (jitted step, Python loop)": (blackjax_sgld, "peers", "sgld"),
    "BlackJAX sgld in lax.scan": (blackjax_sgld_scan, "peers", "sgld"),
}
BASE = {"sde": "meanfield simulate", "sgld": "meanfield Langevin"}
EXTRA = {"meanfield Langevin, check_every=0": {"check_every": 0}}


# ------------------------------------------------------------------------------------------------ the worker


def worker() -> None:
    """Serve ``setup`` / ``time`` / ``answer`` requests, one JSON line each, on stdin/stdout. torch.compile's
    caches go to a fresh folder, so that the setup column is a cold compilation."""
    import tempfile
    import warnings

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="peers-inductor-")

    warnings.simplefilter("ignore")  # the peers' deprecation notes
    made: dict[str, tuple] = {}
    out = sys.stdout
    sys.stdout = sys.stderr  # the engines' prints must not mix with the replies
    for line in sys.stdin:
        req = json.loads(line)
        key = req["key"]
        try:
            if req["cmd"] == "setup":
                maker = ENGINES[req["engine"]][0]
                start, wall = time.process_time(), time.perf_counter()
                run, answer = maker(req["case"])
                run(req["case"]["warm"])  # compiles/jits, warms caches
                reply = {"setup_cpu": time.process_time() - start, "setup_wall": time.perf_counter() - wall}
                made[key] = (run, answer)
            elif req["cmd"] == "time":
                run = made[key][0]
                start, wall = time.process_time(), time.perf_counter()
                run(req["steps"])
                reply = {"cpu": time.process_time() - start, "wall": time.perf_counter() - wall}
            else:
                reply = made[key][1](req["steps"])
        except ImportError as error:
            reply = {"skip": f"not installed in {sys.executable}: {error}"}
        except Exception as error:  # noqa: BLE001 — reported as the engine's note
            reply = {"skip": f"failed: {type(error).__name__}: {str(error).splitlines()[0][:200]}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


class Worker:
    def __init__(self, python: str) -> None:
        self.proc = subprocess.Popen(
            [python, __file__, "--worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def ask(self, **req) -> dict:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        return json.loads(line) if line else {"skip": "the worker died"}

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


# ---------------------------------------------------------------------------------------------------- driver


def agree(answer: dict, base: dict) -> tuple[bool, float]:
    """Whether two answers agree within z·SE in every coordinate; the largest z-score."""
    zs = [
        abs(a - b) / math.sqrt(sa**2 + sb**2) if sa + sb > 0 else (0.0 if a == b else math.inf)
        for a, b, sa, sb in zip(answer["value"], base["value"], answer["se"], base["se"])
    ]
    return max(zs) < Z, max(zs)


def run_problem(problem: str, case: dict, workers: dict, rounds: int, steps: int, answer_steps: int, rng) -> dict:
    names = [n for n, (_, env, p) in ENGINES.items() if p == problem]
    rows: dict[str, dict] = {}
    for name in names:
        env = ENGINES[name][1]
        w = workers.get(env)
        if w is None:
            rows[name] = {"skip": f"no environment for it ({PEERS_PYTHON} not found)"}
            continue
        key = f"{name}|{json.dumps(case)}"
        reply = w.ask(cmd="setup", key=key, engine=name, case={**case, **EXTRA.get(name, {}), "warm": steps})
        rows[name] = {"key": key, "env": env, **reply}
    live = [n for n in names if "skip" not in rows[n]]
    base = BASE[problem]
    answers = {}
    for name in live:
        answers[name] = workers[rows[name]["env"]].ask(cmd="answer", key=rows[name]["key"], steps=answer_steps)
        if "skip" in answers[name]:
            rows[name]["skip"] = answers[name]["skip"]
    live = [n for n in live if "skip" not in rows[n]]
    for name in live:
        ok, z = agree(answers[name], answers[base]) if base in live else (False, math.nan)
        rows[name].update(agrees=ok, z=z, value=answers[name]["value"][:1], se=answers[name]["se"][:1])
        rows[name]["cpu"], rows[name]["wall"] = [], []
    for _ in range(rounds):
        order = list(live)
        rng.shuffle(order)
        for name in order:
            t = workers[rows[name]["env"]].ask(cmd="time", key=rows[name]["key"], steps=steps)
            rows[name]["cpu"].append(t["cpu"] / steps)
            rows[name]["wall"].append(t["wall"] / steps)
    for name in live:
        r = rows[name]
        r["ratio_cpu"] = statistics.median(a / b for a, b in zip(r["cpu"], rows[base]["cpu"])) if base in live else None
        r["ratio_wall"] = statistics.median(a / b for a, b in zip(r["wall"], rows[base]["wall"])) if base in live else None
        r["cpu_med"], r["wall_med"] = statistics.median(r["cpu"]), statistics.median(r["wall"])
    return rows


def table(title: str, rows: dict, base: str) -> list[str]:
    lines = [
        f"### {title}",
        "",
        f"| engine | µs/step CPU | µs/step wall | × {base} (CPU) | × (wall) | answer (SE) | agrees (max z) | setup s (CPU / wall) |",
        "|---|---:|---:|---:|---:|---|---|---:|",
    ]
    for name, r in rows.items():
        if "skip" in r:
            lines.append(f"| {name} | — | — | — | — | — | skipped: {r['skip']} | — |")
            continue
        ratio = f"{r['ratio_cpu']:.2f}" if r["agrees"] else "— (disagrees)"
        ratio_w = f"{r['ratio_wall']:.2f}" if r["agrees"] else "—"
        lines.append(
            f"| {name} | {1e6 * r['cpu_med']:.1f} | {1e6 * r['wall_med']:.1f} | {ratio} | {ratio_w} | "
            f"{r['value'][0]:.4f} ({r['se'][0]:.4f}) | {'yes' if r['agrees'] else 'NO'} ({r['z']:.1f}) | "
            f"{r['setup_cpu']:.1f} / {r['setup_wall']:.1f} |"
        )
    return lines + [""]


def goals(results: list[tuple[str, dict]]) -> list[str]:
    """The issue-51 target lines: meanfield against the hand-written loops and BlackJAX's scan."""
    out = []

    def paired(rows: dict, name: str, base: str) -> float | None:
        a, b = rows.get(name, {}), rows.get(base, {})
        if "cpu" not in a or "cpu" not in b or not a.get("agrees") or not b.get("agrees"):
            return None
        return statistics.median(x / y for x, y in zip(a["cpu"], b["cpu"]))

    for title, rows in results:
        def ratio(name: str, base: str, rows: dict = rows) -> float | None:
            return paired(rows, name, base)

        if "Euler" in title:
            r = ratio("meanfield simulate", "hand-written torch")
            if r is not None:
                out.append(f"- {title}: simulate / hand-written torch = {r:.2f} (CPU time)")
        else:
            for name in ("meanfield Langevin", "meanfield Langevin, check_every=0"):
                r = ratio(name, "hand-written SGLD (torch autograd)")
                if r is not None:
                    verdict = "met" if r <= 1.2 else "**missed**"
                    out.append(f"- target {name} ≤ 1.2× the hand-written SGLD loop: {r:.2f}, {verdict}")
            r = ratio("meanfield KineticLangevin (BAOAB)", "hand-written SGHMC/BAOAB (torch autograd)")
            if r is not None:
                verdict = "met" if r <= 1.2 else "**missed**"
                out.append(f"- target KineticLangevin ≤ 1.2× the hand-written SGHMC/BAOAB loop: {r:.2f}, {verdict}")
            r = ratio("meanfield sgld_block, compiled (opt-in)", "BlackJAX sgld in lax.scan")
            if r is not None:
                verdict = "met" if r <= 3 else "**missed**"
                out.append(f"- target the captured SGLD block ≤ 3× BlackJAX's lax.scan: {r:.2f}, {verdict}")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and counts (checks the script)")
    parser.add_argument("--peers-python", default=PEERS_PYTHON)
    parser.add_argument("--out", type=Path, default=None, help="default benchmarks/results/<machine>/peers.md")
    args = parser.parse_args(argv)
    if args.worker:
        return worker()
    from _common import Provenance, result_path, write_result
    from _peers_figure import draw

    provenance = Provenance.start(__file__, argv)
    out = args.out or result_path("peers")
    workers = {"main": Worker(sys.executable)}
    if Path(args.peers_python).exists():
        workers["peers"] = Worker(args.peers_python)
    rng = random.Random(0)
    rounds = 2 if args.smoke else args.rounds
    results = []
    try:
        sizes = [(1000, 1)] if args.smoke else SDE_SIZES
        for M, d in sizes:
            steps = 64 if M * d <= 1000 else 32
            case = {"M": M, "d": d, "block": 4 if args.smoke else 16}
            rows = run_problem("sde", case, workers, rounds, steps, steps * 5, rng)
            results.append((f"Euler–Maruyama, McKean–Vlasov OU, M = {M:.0e}, d = {d}", rows))
            print("\n".join(table(results[-1][0], rows, BASE["sde"])), flush=True)
        case = {"block": 16}
        rows = run_problem("sgld", case, workers, rounds, 64 if args.smoke else 400, 640 if args.smoke else 4000, rng)
        results.append(("SGLD, Bayesian logistic regression, d = 20, n = 1,000, full batch, 1 chain", rows))
        print("\n".join(table(results[-1][0], rows, BASE["sgld"])), flush=True)
    finally:
        for w in workers.values():
            w.close()
    picture = FIGURES / f"peers-{provenance.machine}.png"
    lines = ["# meanfield against its peers (CPU, one thread each)", ""]
    lines += [
        "- problems, engines, the agreement check and the timing method: the docstring of `benchmarks/peers.py`",
        f"- {rounds} interleaved rounds; µs per step are medians over rounds, ratios medians of per-round ratios",
        "- setup: building the engine and its first run (JAX's jit, torch.compile's compilation), once; its CPU "
        "time counts this process only (torch.compile's compiler runs in worker processes: read the wall time)",
        "",
    ]
    for title, rows in results:
        lines += table(title, rows, BASE["sde"] if "Euler" in title else BASE["sgld"])
    lines += [*goals(results), ""]
    if args.out is None:  # the page's figure (drawn from this file by the docs hook at build time)
        lines += [f"![CPU time per step, log scale](figures/{picture.name})", ""]
    print(f"written to {write_result(out, chr(10).join(lines), provenance)}")
    if args.out is None:
        print(f"figure: {draw(out, picture)}")


if __name__ == "__main__":
    main()
