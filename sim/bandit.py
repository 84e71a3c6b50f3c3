"""Policy-gradient bandits in the stale-data model, GRPO-style, vectorized over seeds and settings.

At step t the learner holds θ_t; the B·G actions of the batch (B groups of G) were sampled from the
behaviour policy π_{θ_{t−s_t}}, and the gradient is taken at θ_t on those samples:
    ĝ = −1/(BG) Σ_i w_i A_i ∇_θ log π_θ(a_i),   A_i = (r_i − mean_group r) / (std_group r + ε)  (GRPO)
with w_i = 1 (objective none), min(π_θ/π_b, C) ("tis"), the M2PO mask times π_θ/π_b
("m2po"), or π_θ/π_b where BAPO's clipped surrogate keeps a gradient, with the row's adaptive bounds
("bapo"). ĝ is the gradient of the loss −J, so every run steps θ ← θ − η·ĝ'. The expected reward J(θ)
is exact (closed form), recorded as the objective (higher is better).

VCPO (step control "vcpo"): each update's step is η·min(1, (ESS/N)/ρ_ref)^power, ESS/N Kish's of that update's
weights π_θ/π_b (recorded for every row as ``ess_ratio``), and, with ``vcpo_baseline``, the group mean in A_i is
replaced by VCPO's b = Σ c_i r_i / Σ c_i, c_i = w_i² ‖∇_θ log π_θ(a_i)‖², with w_i = π_prox/π_b and the score at
π_prox (θ at the step's start, as the LLM trainer does); the toys' score norm is the exact one (closed form).

The LLM's structure (``updates_per_batch`` K > 1, ``ratio_clip_eps`` ε): the batch is split by group into K
minibatches, one optimizer update each (θ moves between them, the behaviour policy does not), and the
objective is PPO/GRPO's clipped ratio −min(r·A, clip(r, 1−ε, 1+ε)·A), r = π_θ/π_b, so w_i = r_i where the
clip keeps a gradient and 0 elsewhere; TIS then weighs min(π_prox/π_b, C) times the clipped ratio to
π_prox = π_θ at the step's start, as the LLM trainer does. Staleness counts batches (RL steps).

Two policies: (a) ``GaussianBandit`` — a ~ N(μ, σ_π² I), reward −½ Σ h_i (a_i − a*_i)²; with the
group-mean baseline the (μ_{t−s} − μ_t) part of the score cancels exactly, so its gradient is the
stale-gradient model's ∇J(μ_{t−s}) (up to the std normalization), tying the RL setting to the
quadratic. (b) ``SoftmaxBandit`` — logits x_cᵀθ over K arms, Bernoulli rewards p_{c,k}; C = 1 is the
K-armed bandit, one-hot x_c the tabular contextual bandit, Gaussian x_c a linear contextual one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from tqdm import tqdm

from sim.advantages import ADVANTAGES, group_advantages
from sim.grid import GridResult, GridUpdater, Recorder, Setting, check_models
from sim.stabilizers import (
    STALE_DATA,
    BAPOConfig,
    bapo_clip_bounds_rows,
    bapo_unclipped,
    effective_sample_size,
    m2po_mask_rows,
    tis_weights,
    vcpo_baseline,
)
from sim.staleness import TensorVersionBuffer

DIVERGENCE_FACTOR = 1e6
"""Gaussian bandit: diverged when the reward gap exceeds DIVERGENCE_FACTOR × the initial gap (or is not finite)."""


@dataclass(frozen=True)
class GaussianBandit:
    """Continuous actions a ~ N(μ, σ_π² I) in R^d, reward r(a) = −½ Σ h_i (a_i − a*_i)² + noise.

    J(μ) = −½ Σ h_i (μ_i − a*_i)² − ½ σ_π² Σ h_i; the optimum −½ σ_π² Σ h_i is at μ = a* = target·1.
    """

    dim: int = 10
    condition_number: float = 10.0
    curvature_max: float = 1.0
    policy_std: float = 0.5
    target: float = 1.0
    reward_noise: float = 0.0

    kind = "gaussian"

    @property
    def param_dim(self) -> int:
        return self.dim

    def curvatures(self, dtype=torch.float64) -> torch.Tensor:
        low = math.log10(self.curvature_max / self.condition_number)
        return torch.logspace(low, math.log10(self.curvature_max), self.dim, dtype=dtype)

    def initial_params(self, dtype=torch.float64) -> torch.Tensor:
        return torch.zeros(self.dim, dtype=dtype)

    def optimal_reward(self) -> float:
        return float(-0.5 * self.policy_std ** 2 * self.curvatures().sum())

    def expected_reward(self, mu: torch.Tensor) -> torch.Tensor:
        h = self.curvatures(mu.dtype)
        return -0.5 * (h * (mu - self.target) ** 2).sum(-1) + self.optimal_reward()

    def kl(self, behaviour: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
        """KL(π_b ‖ π_θ) = ‖μ_b − μ‖² / (2σ_π²)."""
        return ((behaviour - current) ** 2).sum(-1) / (2 * self.policy_std ** 2)

    def entropy(self, mu: torch.Tensor) -> torch.Tensor:
        const = 0.5 * self.dim * (1.0 + math.log(2 * math.pi * self.policy_std ** 2))
        return torch.full(mu.shape[:-1], const, dtype=mu.dtype)


@dataclass(frozen=True)
class SoftmaxBandit:
    """π(k|c) = softmax(x_cᵀθ)_k over ``arms``; reward Bernoulli(p_{c,k}), p drawn once from ``problem_seed``.

    ``contexts`` = 1: K-armed bandit. ``features`` = "tabular": x_c one-hot (θ is a C×K table);
    "linear": x_c ~ N(0, I/F) in R^F shared by all contexts (gradients of contexts interfere).
    """

    arms: int = 10
    contexts: int = 1
    features: str = "tabular"
    feature_dim: int = 8
    problem_seed: int = 1234

    kind = "softmax"

    def __post_init__(self) -> None:
        if self.features not in ("tabular", "linear") or self.arms < 2 or self.contexts < 1:
            raise ValueError(f"bad SoftmaxBandit {self}")

    @property
    def n_features(self) -> int:
        return self.contexts if self.features == "tabular" else self.feature_dim

    @property
    def param_dim(self) -> int:
        return self.n_features * self.arms

    def tables(self, dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
        """(features x of shape (C, F), reward probabilities p of shape (C, K))."""
        gen = torch.Generator().manual_seed(self.problem_seed)
        probs = torch.rand(self.contexts, self.arms, generator=gen, dtype=dtype)
        if self.features == "tabular":
            feats = torch.eye(self.contexts, dtype=dtype)
        else:
            feats = torch.randn(self.contexts, self.feature_dim, generator=gen, dtype=dtype)
            feats = feats / math.sqrt(self.feature_dim)
        return feats, probs

    def initial_params(self, dtype=torch.float64) -> torch.Tensor:
        return torch.zeros(self.param_dim, dtype=dtype)

    def logits(self, theta: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        """All contexts' logits, (R, C, K)."""
        return torch.einsum("cf,rfk->rck", feats, theta.reshape(-1, self.n_features, self.arms))

    def optimal_reward(self) -> float:
        return float(self.tables()[1].max(-1).values.mean())

    def expected_reward(self, theta: torch.Tensor, feats=None, probs=None) -> torch.Tensor:
        if feats is None:
            feats, probs = self.tables(theta.dtype)
        return (self.logits(theta, feats).softmax(-1) * probs).sum(-1).mean(-1)

    def kl(self, behaviour: torch.Tensor, current: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        """KL(π_b ‖ π_θ) averaged over all contexts."""
        log_b = self.logits(behaviour, feats).log_softmax(-1)
        log_t = self.logits(current, feats).log_softmax(-1)
        return (log_b.exp() * (log_b - log_t)).sum(-1).mean(-1)

    def entropy(self, theta: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        logp = self.logits(theta, feats).log_softmax(-1)
        return -(logp.exp() * logp).sum(-1).mean(-1)


class _SampleWeights:
    """Per-row sample weights of the stale-data methods, from the log-ratio log π_θ(a) − log π_b(a), and which rows
    take VCPO's baseline in their advantages (``vcpo_baseline``)."""

    def __init__(self, updater: GridUpdater, ratio_clip_eps: float | None = None):
        settings, seeds = updater.settings, updater.seeds
        rep = lambda values, dt: torch.tensor(values, dtype=dt).repeat_interleave(seeds)
        objectives = [s.combination.objective for s in settings]
        self.tis = rep([o == "tis" for o in objectives], torch.bool)
        self.m2po = rep([o == "m2po" for o in objectives], torch.bool)
        self.tis_cap = rep([s.part_params("tis")["tis_cap"] if o == "tis" else 1.0
                            for s, o in zip(settings, objectives, strict=True)], torch.float64)
        self.m2_threshold = rep([s.part_params("m2po")["m2_threshold"] if o == "m2po" else 1.0
                                 for s, o in zip(settings, objectives, strict=True)], torch.float64)
        self.bapo_rows = torch.nonzero(rep([o == "bapo" for o in objectives], torch.bool))[:, 0]
        self.bapo_configs = [BAPOConfig(**s.part_params("bapo"))
                             for s, o in zip(settings, objectives, strict=True) if o == "bapo" for _ in range(seeds)]
        self.clip_eps = ratio_clip_eps
        self.any = bool(self.tis.any() or self.m2po.any() or len(self.bapo_rows)) or ratio_clip_eps is not None
        self.vcpo_baseline = rep([s.combination.step == "vcpo" and s.part_params("vcpo")["vcpo_baseline"]
                                  for s in settings], torch.bool)
        self.any_baseline = bool(self.vcpo_baseline.any())

    def __call__(self, log_ratio: torch.Tensor, advantages: torch.Tensor,
                 prox_log_ratio: torch.Tensor | None = None) -> torch.Tensor:
        """Weights of shape (R, N) for a log-ratio log π_θ − log π_b and advantages of shape (R, N);
        ``prox_log_ratio`` = log π_θ − log π_prox (π_prox: θ at the step's start) is needed with a ratio clip."""
        ones = torch.ones_like(log_ratio)
        if not self.any:
            return ones
        if self.clip_eps is None:
            weights = torch.where(self.tis[:, None], tis_weights(log_ratio, self.tis_cap[:, None]), ones)
        else:
            # d/dθ min(r·A, clip(r, 1−ε, 1+ε)·A) = r·A·∇log π_θ where the clip keeps a gradient, 0 elsewhere.
            low, high = 1 - self.clip_eps, 1 + self.clip_eps
            ratio = log_ratio.detach().exp()
            weights = bapo_unclipped(ratio, advantages, low, high) * ratio
            if self.tis.any():
                prox_ratio = prox_log_ratio.detach().exp()
                truncated = tis_weights(log_ratio - prox_log_ratio, self.tis_cap[:, None])  # min(π_prox/π_b, C)
                weights = torch.where(self.tis[:, None],
                                      truncated * bapo_unclipped(prox_ratio, advantages, low, high) * prox_ratio,
                                      weights)
        if self.m2po.any():
            kept = m2po_mask_rows(log_ratio, self.m2_threshold)
            weights = torch.where(self.m2po[:, None], kept * log_ratio.exp(), weights)
        if len(self.bapo_rows):
            # d/dθ min(r·A, clip(r, c_low, c_high)·A) = r·A·∇log π_θ on unclipped samples, 0 otherwise.
            ratio, adv = log_ratio[self.bapo_rows].detach().exp(), advantages[self.bapo_rows]
            c_low, c_high = bapo_clip_bounds_rows(ratio, adv, torch.ones_like(ratio), self.bapo_configs)
            weights = weights.index_put((self.bapo_rows,), bapo_unclipped(ratio, adv, c_low[:, None], c_high[:, None])
                                        * ratio)
        return weights


def _check_run(settings: list[Setting], steps: int, seeds: int, groups: int, group_size: int, advantage: str,
               updates_per_batch: int = 1, ratio_clip_eps: float | None = None) -> None:
    """One-line ValueError for a bad argument of ``run_bandit``, before any work."""
    if steps < 1 or seeds < 1 or groups < 1 or group_size < 2:
        raise ValueError(f"need steps, seeds, groups >= 1 and group_size >= 2, got {steps}, {seeds}, {groups}, "
                         f"{group_size}")
    if advantage not in ADVANTAGES:
        raise ValueError(f"advantage must be one of {ADVANTAGES}, got {advantage!r}")
    if isinstance(updates_per_batch, bool) or not isinstance(updates_per_batch, int) or updates_per_batch < 1 \
            or groups % updates_per_batch:
        raise ValueError(f"updates_per_batch must be an integer >= 1 dividing groups ({groups}), "
                         f"got {updates_per_batch!r}")
    if ratio_clip_eps is not None and not 0 < ratio_clip_eps < 1:
        raise ValueError(f"ratio_clip_eps must be in (0, 1) or None, got {ratio_clip_eps!r}")
    check_models(settings, STALE_DATA)


def _stale_gradient(problem, tables, theta, proximal, batch, advantage,
                    weigh) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One update's policy gradient at θ on (a minibatch of) the behaviour policy's ``batch``: (grad, sample
    weights, KL(behaviour ‖ θ), entropy of θ, ESS/N of the samples' π_θ/π_b); ``tables`` are a softmax bandit's
    (features, reward probabilities), None for the Gaussian; ``proximal`` is θ at the step's start (the clipped TIS
    ratio's denominator, and VCPO's baseline's policy)."""
    behaviour = batch[0]
    if tables is None:
        grad, log_ratio, weights = _gaussian_gradient(problem, theta, proximal, batch, advantage, weigh)
        return grad, weights, problem.kl(behaviour, theta), problem.entropy(theta), ess_ratio(log_ratio)
    feats, _ = tables
    grad, log_ratio, weights = _softmax_gradient(problem, theta, proximal, batch, advantage, weigh)
    return grad, weights, problem.kl(behaviour, theta, feats), problem.entropy(theta, feats), ess_ratio(log_ratio)


def ess_ratio(log_ratio: torch.Tensor) -> torch.Tensor:
    """Per row, Kish's ESS / N (``sim.stabilizers.effective_sample_size``) of the update's N per-sample weights
    w_i = π_θ(a_i)/π_b(a_i), from their log-ratios (R, …): each row's weights are divided by its largest first (no
    overflow; the ratio does not see a common scale). 1 when every weight is equal, e.g. on policy."""
    flat = log_ratio.detach().reshape(len(log_ratio), -1)
    return effective_sample_size(torch.exp(flat - flat.amax(-1, keepdim=True)))[1]


def _vcpo_advantages(rewards: torch.Tensor, advantage: str, advantages: torch.Tensor, rows: torch.Tensor,
                     log_weight: torch.Tensor, score_sq: torch.Tensor) -> torch.Tensor:
    """``advantages`` (R, B, G) with the ``rows`` (bool, (R,)) that take VCPO's baseline recomputed against it:
    b = Σ c_i r_i / Σ c_i per group, c_i = w_i² ‖score_i‖² (``sim.stabilizers.vcpo_baseline``), w_i = exp(log_weight)
    divided by the group's largest (b does not see a common scale; no overflow), the std still the group's."""
    weights = torch.exp(log_weight - log_weight.amax(-1, keepdim=True))
    baseline = vcpo_baseline(rewards, weights, score_sq)
    return torch.where(rows[:, None, None], group_advantages(rewards, advantage, baseline=baseline), advantages)


MEAN_OVER_UPDATES = ("grad_norm", "cos_prev", "cos_applied", "parallel_scale", "threshold", "lr", "kl_behaviour",
                     "entropy", "mean_weight", "ess_ratio")
"""Update-level numbers a step records as their mean over its updates (the rest: the step's last update)."""


def _step_record(updates: list[dict]) -> dict:
    """One step's record from its updates' numbers: the mean of MEAN_OVER_UPDATES, the last update's others."""
    if len(updates) == 1:
        return updates[0]
    return {**updates[-1], **{name: torch.stack([u[name] for u in updates]).mean(0) for name in MEAN_OVER_UPDATES}}


def run_bandit(problem: GaussianBandit | SoftmaxBandit, settings: list[Setting], steps: int, seeds: int = 4,
               seed: int = 0, groups: int = 8, group_size: int = 16, advantage: str = "grpo",
               record_every: int = 1, warmup: int | None = None, tail: int | None = None,
               progress: bool = False, updates_per_batch: int = 1, ratio_clip_eps: float | None = None) -> GridResult:
    """Run every setting × seed; one tensor update per optimizer update for all runs (sim name: ``sim_name``).

    ``groups`` B and ``group_size`` G set the signal-to-noise of the gradient (B·G samples per step).
    ``updates_per_batch`` K (dividing B) optimizer updates per batch, each on B/K of its groups;
    ``ratio_clip_eps`` ε: the objective is the clipped ratio to π_b (None: today's unweighted stale gradient).
    K = 1 and no clip are the original simulator, bit for bit. Steps count batches; a step records the
    mean of its updates' numbers (``MEAN_OVER_UPDATES``) and the reward after its last update.
    Extras recorded (``sim.schema``): kl_behaviour, entropy, reward_gap (J* − J), mean_weight, ess_ratio.
    """
    _check_run(settings, steps, seeds, groups, group_size, advantage, updates_per_batch, ratio_clip_eps)
    dtype = torch.float64
    updater = GridUpdater(settings, seeds, problem.param_dim, dtype)
    weigh = _SampleWeights(updater, ratio_clip_eps)
    rows, seed_index = updater.rows, updater.seed_index
    theta = problem.initial_params(dtype).expand(rows, -1).clone()
    buffer = TensorVersionBuffer(theta, int(updater.max_staleness.max()) + 1)
    gen = torch.Generator().manual_seed(int(seed))
    optimum = problem.optimal_reward()
    extras = ("kl_behaviour", "entropy", "reward_gap", "mean_weight", "ess_ratio")
    recorder = Recorder(rows, steps, record_every, steps // 5 if warmup is None else warmup,
                        max(1, steps // 10) if tail is None else tail, extras=extras, dtype=dtype,
                        higher_is_better=True, means=("kl_behaviour",))
    tables = problem.tables(dtype) if problem.kind == "softmax" else None
    reward_of = problem.expected_reward if tables is None else lambda th: problem.expected_reward(th, *tables)
    initial_gap = optimum - float(reward_of(theta[:1])[0])
    diverged = torch.zeros(rows, dtype=torch.bool)
    for step in tqdm(range(steps), desc=f"bandit_{problem.kind}", disable=not progress, leave=False):
        uniform = torch.rand(seeds, generator=gen, dtype=dtype)
        staleness = updater.staleness(uniform)
        behaviour = buffer.get((step - staleness).clamp_min(0))
        if tables is None:
            batch = _gaussian_batch(problem, behaviour, gen, seeds, seed_index, groups, group_size)
        else:
            batch = _softmax_batch(problem, *tables, behaviour, gen, seeds, seed_index, groups, group_size)
        # Minibatches by group: the behaviour policy stays, θ moves from one update to the next.
        minibatches = [batch] if updates_per_batch == 1 else [
            (behaviour, *parts) for parts in zip(*(part.chunk(updates_per_batch, dim=1) for part in batch[1:]),
                                                 strict=True)]
        proximal, updates = theta, []
        for minibatch in minibatches:
            grad, weights, kl, entropy, ess = _stale_gradient(problem, tables, theta, proximal, minibatch, advantage,
                                                              weigh)
            theta_new, info = updater.update(theta, grad, behaviour, staleness, ~diverged, kl, ess)
            reward = reward_of(theta_new)
            gap = optimum - reward
            bad = ~torch.isfinite(theta_new).all(-1) | ~torch.isfinite(reward)
            if problem.kind == "gaussian":
                bad |= gap > DIVERGENCE_FACTOR * max(initial_gap, 1e-12)
            diverged = diverged | bad
            theta = torch.where(diverged[:, None], theta, theta_new)
            info.update(objective=reward, diverged=diverged, kl_behaviour=kl, entropy=entropy, reward_gap=gap,
                        mean_weight=weights.mean(-1), ess_ratio=ess)
            updates.append(info)
        buffer.push(step + 1, theta)
        recorder.observe(step, _step_record(updates))
    meta = {"problem": {"kind": problem.kind, **asdict(problem)}, "steps": steps, "groups": groups,
            "group_size": group_size, "advantage": advantage, "optimal_reward": optimum,
            "initial_reward": optimum - initial_gap, "updates_per_batch": updates_per_batch,
            "ratio_clip_eps": ratio_clip_eps}
    return recorder.result(sim_name(problem), settings, seeds, seed, meta)


def sim_name(problem: GaussianBandit | SoftmaxBandit) -> str:
    """The record's ``sim``: bandit_gaussian, bandit_softmax (one context) or bandit_contextual."""
    if problem.kind == "softmax" and problem.contexts > 1:
        return "bandit_contextual"
    return f"bandit_{problem.kind}"


def _gaussian_batch(problem: GaussianBandit, behaviour, gen, seeds, seed_index, groups, group_size):
    """The step's samples from the behaviour policy: (μ_b, ε, actions μ_b + σ·ε, rewards), shapes (R, B, G, …)."""
    sigma = problem.policy_std
    h = problem.curvatures(behaviour.dtype)
    eps = torch.randn(seeds, groups, group_size, problem.dim, generator=gen, dtype=behaviour.dtype)[seed_index]
    noise = torch.randn(seeds, groups, group_size, generator=gen, dtype=behaviour.dtype)[seed_index]
    actions = behaviour[:, None, None, :] + sigma * eps  # sampled from the stale policy
    rewards = -0.5 * (h * (actions - problem.target) ** 2).sum(-1) + problem.reward_noise * noise
    return behaviour, eps, actions, rewards


def _gaussian_log_weight(problem: GaussianBandit, behaviour: torch.Tensor, mu: torch.Tensor,
                         eps: torch.Tensor) -> torch.Tensor:
    """log π_μ(a) − log π_b(a) of the samples a = μ_b + σε, (R, B, G): −(‖δ‖² + 2σ⟨δ, ε⟩)/(2σ²) with δ = μ_b − μ,
    the log-ratio without the cancellation of ‖a − μ‖² − ‖σε‖², so exactly 0 on policy (ESS/N exactly 1 there).
    The objectives' weights keep their own form (their numbers are pinned by tests/data/grid_golden.npz)."""
    sigma, delta = problem.policy_std, behaviour - mu
    cross = (eps * delta[:, None, None, :]).sum(-1)
    return -((delta * delta).sum(-1)[:, None, None] + 2 * sigma * cross) / (2 * sigma ** 2)


def _gaussian_gradient(problem: GaussianBandit, mu, proximal, batch, advantage, weigh):
    """(grad, log π_μ/π_b of the samples (``_gaussian_log_weight``), the samples' weights (R, N))."""
    behaviour, eps, actions, rewards = batch
    sigma = problem.policy_std
    adv = group_advantages(rewards, advantage)  # (R, B, G)
    diff_now = actions - mu[:, None, None, :]
    log_ratio = (-(diff_now ** 2).sum(-1) + (sigma * eps) .pow(2).sum(-1)) / (2 * sigma ** 2)
    if weigh.any_baseline:
        score_sq = ((actions - proximal[:, None, None, :]) ** 2).sum(-1) / sigma ** 4  # ‖∇_μ log π_prox(a)‖²
        adv = _vcpo_advantages(rewards, advantage, adv, weigh.vcpo_baseline,
                               _gaussian_log_weight(problem, behaviour, proximal, eps), score_sq)
    prox_log_ratio = None
    if weigh.clip_eps is not None:
        prox = (-(diff_now ** 2).sum(-1) + (actions - proximal[:, None, None, :]).pow(2).sum(-1)) / (2 * sigma ** 2)
        prox_log_ratio = prox.reshape(len(mu), -1)
    weights = weigh(log_ratio.reshape(len(mu), -1), adv.reshape(len(mu), -1), prox_log_ratio).reshape(adv.shape)
    score = diff_now / sigma ** 2  # ∇_μ log π_θ(a) at the current μ
    grad = -((weights * adv)[..., None] * score).mean(dim=(1, 2))
    return grad, _gaussian_log_weight(problem, behaviour, mu, eps), weights.reshape(len(mu), -1)


def _softmax_batch(problem: SoftmaxBandit, feats, probs, behaviour, gen, seeds, seed_index, groups, group_size):
    """The step's samples from the behaviour policy: (θ_b, features, actions, rewards, log π_b), shapes (R, B, …)."""
    rows, arms = len(behaviour), problem.arms
    ctx = torch.randint(0, problem.contexts, (seeds, groups), generator=gen)[seed_index]  # (R, B)
    uniform = torch.rand(seeds, groups, group_size, arms, generator=gen, dtype=behaviour.dtype)[seed_index]
    coin = torch.rand(seeds, groups, group_size, generator=gen, dtype=behaviour.dtype)[seed_index]
    gumbel = -(-uniform.clamp_min(1e-300).log()).log()
    phi = feats[ctx]  # (R, B, F)
    logits_b = torch.einsum("rbf,rfk->rbk", phi, behaviour.reshape(rows, problem.n_features, arms))
    actions = (logits_b[:, :, None, :] + gumbel).argmax(-1)  # (R, B, G): Gumbel-max sample from π_b
    p_taken = probs[ctx[:, :, None], actions]
    rewards = (coin < p_taken).to(behaviour.dtype)
    return behaviour, phi, actions, rewards, logits_b.log_softmax(-1)


def _softmax_gradient(problem: SoftmaxBandit, theta, proximal, batch, advantage, weigh):
    _, phi, actions, rewards, logp_b = batch
    rows, arms, nf = len(theta), problem.arms, problem.n_features
    groups, group_size = actions.shape[1:]
    logits_t = torch.einsum("rbf,rfk->rbk", phi, theta.reshape(rows, nf, arms))
    adv = group_advantages(rewards, advantage)
    logp_t = logits_t.log_softmax(-1)
    log_ratio = (logp_t.gather(-1, actions) - logp_b.gather(-1, actions))  # (R, B, G)
    prox_log_ratio = logp_prox = None
    if weigh.clip_eps is not None or weigh.any_baseline:
        logp_prox = torch.einsum("rbf,rfk->rbk", phi, proximal.reshape(rows, nf, arms)).log_softmax(-1)
    if weigh.any_baseline:
        prox_vs_behaviour = logp_prox.gather(-1, actions) - logp_b.gather(-1, actions)
        pi_prox = logp_prox.exp()
        # ‖x_c ⊗ (e_a − π_prox(·|c))‖² = ‖x_c‖² (1 − 2π_prox(a|c) + Σ_k π_prox(k|c)²)
        score_sq = (phi * phi).sum(-1)[..., None] * (1 - 2 * pi_prox.gather(-1, actions)
                                                     + (pi_prox * pi_prox).sum(-1, keepdim=True))
        adv = _vcpo_advantages(rewards, advantage, adv, weigh.vcpo_baseline, prox_vs_behaviour, score_sq)
    if weigh.clip_eps is not None:
        prox_log_ratio = (logp_t.gather(-1, actions) - logp_prox.gather(-1, actions)).reshape(rows, -1)
    weights = weigh(log_ratio.reshape(rows, -1), adv.reshape(rows, -1), prox_log_ratio).reshape(adv.shape)
    onehot = torch.nn.functional.one_hot(actions, arms).to(theta.dtype)
    # ∇_θ log π_θ(a|c) = x_c ⊗ (e_a − π_θ(·|c)); sum over the group first, then over the batch.
    coef = ((weights * adv)[..., None] * (onehot - logp_t.exp()[:, :, None, :])).sum(2)  # (R, B, K)
    grad = -torch.einsum("rbf,rbk->rfk", phi, coef).reshape(rows, -1) / (groups * group_size)
    return grad, log_ratio, weights.reshape(rows, -1)


__all__ = ["GaussianBandit", "SoftmaxBandit", "group_advantages", "run_bandit", "sim_name", "ess_ratio", "ADVANTAGES"]
